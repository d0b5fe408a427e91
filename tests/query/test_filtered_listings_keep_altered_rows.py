"""Filtered listings and rows changed below Sealbox. The ``runs`` table's columns are copies of each run's
``run.started`` (whose hashed bytes are authoritative): ``UPDATE runs SET agent = 'x'`` (triggers dropped)
made the run vanish from ``runs list --agent <recorded agent>`` (and ``--principal``, ``--since``,
``--until``, ``--snapshot``; ``calls --agent`` and the default ``calls`` listing, which leaves replays out),
though the unfiltered listing showed it marked ``altered``. The filters now also pass a run whose
run.started's bytes say the value asked for; it is listed as the database holds it, marked / flagged
``altered``. SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json

import pytest
from query_helpers import SNAP1
from test_calls_altered_events import _set_column_below_sealbox
from test_runs_altered_status import _run, store  # noqa: F401  (the fixture)
from test_runs_row_altered import WARNING, _set_run_column_below_sealbox

import sealbox
from sealbox.policies import ALLOW_ALL

SNAP = SNAP1.fingerprint


def _two_runs(store):
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    ids = []
    for name in ("kept", "edited"):
        with rec.run(agent=name, principal="alice", snapshot=SNAP1) as run:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1")
            ids.append(run.run_id)
    return ids


@pytest.mark.parametrize("column, value, filters, both", [
    ("agent", "mallory-bot", ["--agent", "edited"], False),
    ("principal", "mallory", ["--principal", "alice"], True),
    ("started_at", "2020-01-01T00:00:00.000000Z", ["--since", "2021-01-01"], True),
    ("started_at", "2999-01-01T00:00:00.000000Z", ["--until", "2998-01-01"], True),
    ("snapshot", "sha256:" + "ab" * 32, ["--snapshot", SNAP[7:23]], True)])
def test_runs_list_filters_keep_a_run_whose_runs_row_column_was_rewritten(store, column, value, filters, both):
    kept, edited = _two_runs(store)
    _set_run_column_below_sealbox(store, edited, column, value)
    path = store.path
    store.close()

    res = _run("runs", "list", "-s", path, "--json", *filters)
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
    rows = {r["run_id"]: (r[column], r["altered"]) for r in json.loads(res.stdout)}
    assert rows[edited] == (value, True)  # shown as the database holds it, marked
    assert (kept in rows) is both and rows.get(kept, (None, False))[1] is False
    # what the row says now, and is not what was recorded, still filters as before (shown, marked)
    res = _run("runs", "list", "-s", path, "--json", "--agent", "nobody")
    assert (res.returncode, json.loads(res.stdout or "[]")) == (0, [])


CALLS_WARNING = "warning: 1 call(s) listed hold an event changed below Sealbox"


@pytest.mark.parametrize("column, value, filters", [
    ("agent", "mallory-bot", ["--agent", "edited"]),
    ("replay_of", "some-other-run", [])])  # the default listing leaves replays out
    # (calls --principal reads the tool.call's own column: test_calls_principal_keeps_... below)
def test_calls_filters_keep_a_call_whose_runs_row_column_was_rewritten(store, column, value, filters):
    kept, edited = _two_runs(store)
    _set_run_column_below_sealbox(store, edited, column, value)
    path = store.path
    store.close()

    res = _run("calls", "-s", path, "--json", *filters)
    assert res.returncode == 0 and res.stderr.startswith(CALLS_WARNING), res.stderr
    rows = {r["run_id"]: r["flags"] for r in json.loads(res.stdout)}
    assert rows[edited] == ["altered"]
    if not filters:
        assert rows[kept] == []
    # the Python API without check_altered keeps the columns' filter (and its speed)
    api = sealbox.open_store(path)
    try:
        got = api.query_calls(agent=filters[1] if filters else None, replays=False)
        assert edited not in {r["run_id"] for r in got}
        got = api.query_calls(agent=filters[1] if filters else None, replays=False, check_altered=True)
        assert {r["run_id"]: r["flags"] for r in got}[edited] == ["altered"]
    finally:
        api.close()


def test_calls_principal_keeps_a_call_whose_principal_column_was_rewritten(store):
    kept, edited = _two_runs(store)
    call = next(e.leaf_index for e in store.read_run(edited) if e.kind == "tool.call")
    _set_column_below_sealbox(store, call, "principal", "mallory")
    path = store.path
    store.close()

    res = _run("calls", "-s", path, "--json", "--principal", "alice")
    assert res.returncode == 0 and res.stderr.startswith(CALLS_WARNING), res.stderr
    rows = {r["run_id"]: (r["principal"], r["flags"]) for r in json.loads(res.stdout)}
    assert rows == {kept: ("alice", []), edited: ("mallory", ["altered"])}
