"""Run labels (``recorder.run(labels=...)``) were stored in clear in every content mode:
``{"db_url": "postgres://u:secretpw@host/db", "api_key": "sk-..."}`` was in the run.started event,
the runs table and ``sealbox runs list``. They are now redacted as payload values are (but for
``full``): a label under a sensitive key name becomes the in-string marker of its value (the HMAC
of that value's marker in a tool call's arguments), pattern matches in the others become in-string
markers; the other labels stay as given, so ``runs list --label`` filters on them, and the policy
still matches the real labels. Real SQLite and PostgreSQL stores."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from sealbox import Policy
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy
from sealbox.store import init_store
from sealbox.verify import verify_store

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
BACKENDS = ["sqlite"] + (["postgres"] if URL and importlib.util.find_spec("psycopg") else [])
MARK = "⟦redacted:hmac-sha256:[0-9a-f]{64}⟧"
KEY = "sk-abcdefghijklmnopqrstuvwxyz123456"
PASSWORD = "hunter2hunter2"
LABELS = {"env": "prod", "team": "data", "db_url": "postgres://u:secretpw@host/db", "api_key": KEY,
          "password": PASSWORD}
POLICY = """\
version: 1
name: labels
rules:
  - id: prod-with-key
    match: {labels: {env: prod, api_key: %s}}
    effect: allow
  - id: rest
    effect: deny
""" % KEY


@pytest.fixture(params=BACKENDS)
def make_store(request, tmp_path):
    schemas = []

    def make(mode: str):
        if request.param == "sqlite":
            return init_store(tmp_path / "s", content=ContentPolicy(mode=mode))
        schema = f"sbt_{uuid.uuid4().hex[:20]}"
        schemas.append(schema)
        return init_store(tmp_path / "s", content=ContentPolicy(mode=mode), postgres_url=URL, schema=schema)

    make.backend, make.schemas = request.param, schemas
    yield make
    if schemas:
        import psycopg

        with psycopg.connect(URL, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _record(store, tmp_path):
    (tmp_path / "policy.yaml").write_text(POLICY)
    with Recorder(store, policy=Policy.load(tmp_path / "policy.yaml")).run(
            agent="bot", principal="agent:bot", labels=LABELS) as run:
        # the policy matched the real labels (api_key included): the call is allowed
        assert run.call_tool("db", "q", {"api_key": KEY}, lambda api_key: "ok") == "ok"
    return run.run_id


def _all_bytes(store, make, tmp_path) -> bytes:
    if make.backend == "sqlite":
        return b"".join(p.read_bytes() for p in sorted((tmp_path / "s").iterdir()) if p.is_file())
    import psycopg

    [schema] = make.schemas
    out = []
    with psycopg.connect(URL, autocommit=True) as conn:  # every row of every table of the store's schema, as text
        for (table,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall():
            out += [row[0] for row in conn.execute(f'SELECT x::text FROM {schema}."{table}" x').fetchall()]
    text = "".join(out)
    assert "\\x" in text  # (bytea columns as hex: the events' raw bytes are searched as hex too, below)
    return text.encode() + b"".join(bytes.fromhex(h) for h in re.findall(r"\\+x([0-9a-f]{2,})", text))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("mode", ["redacted", "hashes-only"])
def test_secret_labels_are_redacted_and_the_others_filter(make_store, tmp_path, mode):
    store = make_store(mode)
    run_id = _record(store, tmp_path)
    labels = store.read_run(run_id)[0].payload["labels"]
    marker = store.redactor.marker
    assert labels == {
        "env": "prod", "team": "data",
        "db_url": labels["db_url"],
        "api_key": f"⟦redacted:{marker(KEY)['$redacted']}⟧",
        "password": f"⟦redacted:{marker(PASSWORD)['$redacted']}⟧",
    }
    assert re.fullmatch(f"postgres{MARK}host/db", labels["db_url"]), labels["db_url"]
    if mode == "redacted":  # the same HMAC as the argument's marker: an investigator can match them
        [call] = [e for e in store.read_run(run_id) if e.kind == "tool.call"]
        assert call.payload["arguments"]["api_key"] == marker(KEY)
    assert store.redactor.redact_labels(labels) is labels  # kept as it is when recorded again (a replay)
    assert [r["labels"] for r in store.query_runs(labels={"env": "prod", "team": "data"})] == [labels]
    assert verify_store(store).ok
    data = _all_bytes(store, make_store, tmp_path)
    store.close()
    assert b'"team":"data"' in data  # (the search sees the labels as stored)
    for secret in (KEY, PASSWORD, "secretpw"):
        assert secret.encode() not in data
    listed = _cli("runs", "list", "--json", "--label", "env=prod", "-s", tmp_path / "s")
    assert listed.returncode == 0, listed.stderr
    assert [(r["run_id"], r["labels"]) for r in json.loads(listed.stdout)] == [(run_id, labels)]
    by_secret = _cli("runs", "list", "--json", "--label", f"api_key={KEY}", "-s", tmp_path / "s")
    assert (by_secret.returncode, json.loads(by_secret.stdout)) == (0, [])


def test_full_mode_keeps_the_labels(make_store, tmp_path):
    store = make_store("full")
    run_id = _record(store, tmp_path)
    assert store.read_run(run_id)[0].payload["labels"] == LABELS
    store.close()



@pytest.mark.parametrize("first", ["model_call", "tool_call"])
def test_a_secret_label_repeated_later_in_the_run_is_scrubbed(make_store, tmp_path, first):
    """A label under a sensitive key name was redacted in run.started, but its value did not join the
    run's redacted values (only a tool call's decision inputs, which hold the labels, taught them): a
    model response, a note, a state label or the run's error text repeating it before any tool call
    kept it in clear. It now joins them when run.started is written: scrubbed there as a redacted
    argument value is (the same marker)."""
    from sealbox.policies import ALLOW_ALL

    store = make_store("redacted")
    with pytest.raises(RuntimeError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", labels={"env": "prod", "api_key": KEY,
                                                                        "password": PASSWORD}) as run:
            if first == "tool_call":
                assert run.call_tool("db", "q", {"sql": "select 1"}, lambda sql: {"out": f"u/{PASSWORD}@db"}) == {
                    "out": f"u/{PASSWORD}@db"}
            run.model_call({"messages": [{"role": "user", "content": "hi"}]}, {"text": f"the password is {PASSWORD}"})
            run.note(f"tried {PASSWORD}", about={"seen": f"u/{PASSWORD}@db"})
            run.save_state({"memo": "x"}, label=f"after {PASSWORD}")
            raise RuntimeError(f"login refused for {PASSWORD} with key {KEY}")
    pw = f"⟦redacted:{store.redactor.marker(PASSWORD)['$redacted']}⟧"
    key = f"⟦redacted:{store.redactor.marker(KEY)['$redacted']}⟧"
    events = {e.kind: e.payload for e in store.read_run(run.run_id)}
    if first == "tool_call":
        assert events["tool.result"]["result"] == {"out": f"u/{pw}@db"}
    assert events["model.call"]["response"] == {"text": f"the password is {pw}"}
    assert (events["note"]["text"], events["note"]["about"]) == (f"tried {pw}", {"seen": f"u/{pw}@db"})
    assert events["state.saved"]["label"] == f"after {pw}"
    assert events["run.ended"]["error"] == {"type": "RuntimeError", "message": f"login refused for {pw} with key {key}"}
    data = _all_bytes(store, make_store, tmp_path)
    store.close()
    for secret in (KEY, PASSWORD):
        assert secret.encode() not in data
