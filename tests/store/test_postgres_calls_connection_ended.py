"""`sealbox calls` on a PostgreSQL store when the server ends the store's connection (pg_terminate_backend,
a restart) between the listing's queries: the next query is answered on a new connection, never
"internal error ... exit 70". Real PostgreSQL (SEALBOX_TEST_POSTGRES_URL), the test in its own schema."""

from __future__ import annotations

import json
import os
import uuid

import pytest

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: these tests need PostgreSQL")


@pytest.fixture
def schema():
    import psycopg

    name = f"sbt_callend_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def test_calls_after_the_server_ended_the_connection_between_the_listing_and_its_replay_check(
        tmp_path, schema, monkeypatch, capsys):
    # was: "error: internal error: AdminShutdown: terminating connection due to administrator command", exit 70:
    # has_replays (does the store hold replay runs, whose calls the listing left out) ran on the connection as
    # it was, outside the store's read guard (which opens a new connection when the server ended the idle one)
    import psycopg

    import sealbox.cli.calls_cmd as calls_cmd
    from sealbox.cli.main import main
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store, open_store

    folder = tmp_path / "s"
    store = init_store(folder, postgres_url=URL, schema=schema)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", run_id="r1") as run:
            run.call_tool("db", "q", {"q": 1}, lambda q: q)
    finally:
        store.close()
    with open_store(folder) as store:
        call_ids = [e.payload["call_id"] for e in store.read_run("r1") if e.kind == "tool.call"]
    assert len(call_ids) == 1

    real = calls_cmd._redacted_misses
    ended: list[int] = []

    def then_kill(store, *args, **kwargs):
        pid = store._pg().info.backend_pid
        with psycopg.connect(URL, autocommit=True) as conn:  # returns once the backend is gone
            assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone() == (True,)
        ended.append(pid)
        return real(store, *args, **kwargs)

    monkeypatch.setattr(calls_cmd, "_redacted_misses", then_kill)
    monkeypatch.delenv("SEALBOX_DEBUG", raising=False)
    try:
        main(["calls", "--json", "-s", str(folder)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert len(ended) == 1
    assert [(c["run_id"], c["call_id"], c["server"], c["tool"]) for c in json.loads(out)] == [
        ("r1", call_ids[0], "db", "q")]
