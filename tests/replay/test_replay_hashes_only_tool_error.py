"""A tool error recorded in a ``hashes-only`` store keeps only its type: the message becomes
``hmac-sha256:<hex>`` (docs/content-modes.md). Replay served it anyway, raising ``ValueError("hmac-sha256:…")``
where the recorded run got ``ValueError("no such city: Atlantis")``; an agent that passes the message on (to
the model, to the next call) then made a step that differs from the record only because of the hash, and the
replay reported a ``mismatch`` at that later step: a divergence of the agent's that never happened. The
recorded error message cannot be served, so that step is ``unreplayable`` (listed before anything runs, like a
hashed result), and the replay stops there, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import uuid

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy
from sealbox.replay import Replayer

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.skipif(
    not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL not set"))]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    content = ContentPolicy(mode="hashes-only")
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "h", content=content)
        yield s
        s.close()
        return
    url, schema = os.environ["SEALBOX_TEST_POSTGRES_URL"], f"sbt_hoerr_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "h", postgres_url=url, schema=schema, content=content)
    yield s
    s.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def lookup(city: str) -> str:
    raise ValueError(f"no such city: {city}")


def agent(run):
    try:
        run.call_tool("geo", "lookup", {"city": "Atlantis"}, lookup)
    except ValueError as exc:
        run.call_tool("ops", "report", {"problem": str(exc)}, lambda problem: None)


def test_a_tool_error_whose_message_was_hashed_is_unreplayable_not_a_later_mismatch(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="geo") as run:
        agent(run)
    [error] = [e.payload["error"] for e in store.read_run(run.run_id) if e.kind == "tool.result" and not e.payload["ok"]]
    assert error["type"] == "ValueError" and error["message"].startswith("hmac-sha256:")

    result = Replayer(store).replay(run.run_id, agent)

    assert [(u.step, u.name) for u in result.unreplayable] == [("2", "geo/lookup"), ("3", "ops/report")]
    assert result.unreplayable[0].reason == ("its recorded error message is not kept (store content mode: "
                                             "hashes-only): only its type, ValueError")
    d = result.divergence
    assert (d.kind, d.step) == ("unreplayable", "2") and not result.reproduced
    assert d.recorded == d.attempted  # the call itself matched, by its HMAC marker
