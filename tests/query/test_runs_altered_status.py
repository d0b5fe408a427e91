"""A run's status is read from the ``kind`` column of its events: ``UPDATE events SET kind = 'note'`` on a
run's ``run.ended`` (triggers dropped) made `sealbox runs list` show an ended run as running / interrupted,
with no sign of tampering, while the event's hashed bytes still said ``run.ended``. The events the status
is read from are now checked against their hashed bytes and leaf hash: such a run is marked ``altered``
(``interrupted (altered)``, ``"altered": true``) with one warning line on stderr, in `runs list` and
`runs show`. SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
from conftest import BACKENDS
from query_helpers import SEALBOX
from test_calls_altered_events import _edit_below_sealbox, _set_column_below_sealbox

import sealbox
from sealbox.policies import ALLOW_ALL

WARNING = ("warning: {n} run(s) shown hold values changed below Sealbox after they were written (an event their "
           "status is read from no longer hashes to its recorded leaf hash or its kind column is not the kind its "
           "bytes say, or their runs-table row disagrees with their run.started event; marked altered): what is "
           "shown is what the database holds now, not what was recorded; `sealbox verify` names the events and rows\n")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
        yield s
        s.close()
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_runsalt_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "store", postgres_url=url, schema=schema)
    try:
        yield s
    finally:
        s.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _run(*args):
    env = {**os.environ, "COLUMNS": "300"}  # the table unwrapped
    return subprocess.run([SEALBOX, *map(str, args)], capture_output=True, text=True, env=env)


def test_a_run_whose_status_events_were_changed_below_sealbox_is_marked_altered(store):
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    ids = {}
    for name in ("kept", "kind", "bytes"):
        with rec.run(agent=name) as run:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1")
            ids[name] = run.run_id
    ended = {name: next(e.leaf_index for e in store.read_run(rid) if e.kind == "run.ended") for name, rid in ids.items()}
    _set_column_below_sealbox(store, ended["kind"], "kind", "note")  # the ended run looks running

    def error(env):
        env["payload"]["status"] = "error"

    _edit_below_sealbox(store, ended["bytes"], error)  # its bytes no longer hash to its leaf hash
    path = store.path
    store.close()

    res = _run("runs", "list", "-s", path, "--json")
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=2))
    rows = {r["agent"]: (r["status"], r["ending"], r["altered"]) for r in json.loads(res.stdout)}
    assert rows == {"kept": ("ended", "ok", False), "kind": ("interrupted", None, True),
                    "bytes": ("ended", "error", True), "sealbox": ("running", None, False)}
    res = _run("runs", "list", "-s", path)
    assert res.returncode == 0 and res.stderr == WARNING.format(n=2)
    assert "interrupted (altered)" in res.stdout and "ended (error, altered)" in res.stdout

    res = _run("runs", "show", "-s", path, ids["kind"])
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
    assert res.stdout.splitlines()[0].endswith("  interrupted (altered)")
    res = _run("runs", "show", "-s", path, ids["kept"], "--json")
    assert (res.returncode, res.stderr, json.loads(res.stdout)["run"]["altered"]) == (0, "", False)


def test_a_status_filter_keeps_a_run_whose_status_events_were_changed(store):
    """`runs list --status ok` filtered on the status the database holds now: a run that ended ok whose
    run.ended kind column was rewritten (it looks running) or whose bytes now say error dropped out of
    the listing, so an investigator asking for the runs that ended ok never saw it. A run whose status is
    read from an altered event now passes every status filter, marked altered."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    ids = {}
    for name in ("kept", "kind", "bytes", "failed"):
        with rec.run(agent=name) as run:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1")
            if name == "failed":
                run.end("error")
            ids[name] = run.run_id
    ended = {name: next(e.leaf_index for e in store.read_run(rid) if e.kind == "run.ended") for name, rid in ids.items()}
    _set_column_below_sealbox(store, ended["kind"], "kind", "note")

    def error(env):
        env["payload"]["status"] = "error"

    _edit_below_sealbox(store, ended["bytes"], error)
    path = store.path
    store.close()

    for status in ("ok", "ended", "running", "interrupted"):
        res = _run("runs", "list", "-s", path, "--json", "--status", status)
        rows = {r["agent"]: (r["status"], r["ending"], r["altered"]) for r in json.loads(res.stdout)}
        expected = {"ok": {"kept": ("ended", "ok", False)}, "ended": {"kept": ("ended", "ok", False),
                                                                      "failed": ("ended", "error", False)},
                    "running": {"sealbox": ("running", None, False)}, "interrupted": {}}[status]
        expected.update({"kind": ("interrupted", None, True), "bytes": ("ended", "error", True)})
        assert (status, res.returncode, res.stderr, rows) == (status, 0, WARNING.format(n=2), expected)
    res = _run("runs", "list", "-s", path, "--json", "--status", "error", "--limit", "1")
    assert [(r["agent"], r["altered"]) for r in json.loads(res.stdout)] == [("failed", False)]


def test_a_run_suspended_event_renamed_mid_run_is_marked_altered(store):
    """A run suspended for an approval, then a later event (the run's newest is no longer its run.suspended):
    `UPDATE events SET kind = 'note'` on the run.suspended made the run look running, unmarked, since only
    the run's newest event and its newest event of a lifecycle kind (by the column) were checked."""
    from sealbox import EventDraft

    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    run = rec.run(agent="waiting", principal="agent:ops").start()
    store.append(EventDraft("run.suspended", {"approval_ids": ["ap-1"], "reason": "waiting for ops"},
                            run_id=run.run_id, principal="agent:ops"))
    store.append(EventDraft("note", {"text": "still waiting"}, run_id=run.run_id, principal="agent:ops"))
    suspended = next(e.leaf_index for e in store.read_run(run.run_id) if e.kind == "run.suspended")
    res = _run("runs", "list", "-s", store.path, "--json", "--status", "suspended")
    assert [(r["agent"], r["status"], r["altered"]) for r in json.loads(res.stdout)] == [
        ("waiting", "suspended", False)]
    _set_column_below_sealbox(store, suspended, "kind", "note")
    path = store.path
    store.close()
    for args in (["--status", "suspended"], ["--status", "running"], []):
        res = _run("runs", "list", "-s", path, "--json", *args)
        rows = [(r["agent"], r["status"], r["altered"]) for r in json.loads(res.stdout) if r["agent"] == "waiting"]
        assert (args, res.returncode, res.stderr, rows) == (args, 0, WARNING.format(n=1),
                                                             [("waiting", "running", True)])
    res = _run("runs", "show", "-s", path, run.run_id)
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
