"""A ``tool.call`` whose ``kind`` column was rewritten below Sealbox (``UPDATE events SET kind = 'note'``,
triggers dropped; its hashed bytes still say ``tool.call``) was no tool call to any listing: `sealbox calls`
(filtered or not) left it out with no warning, exit 0. The listing now also finds events whose hashed bytes
start as a tool.call's while their kind column names a kind that never holds a tool (found through the kind
index: the store's few events of other kinds than calls, decisions and results), and lists them as calls,
flagged ``altered`` with the warning line. SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json

from test_calls_altered_events import _set_column_below_sealbox
from test_runs_altered_status import _run, store  # noqa: F401  (the fixture)

import sealbox
from sealbox.policies import ALLOW_ALL

CALLS_WARNING = "warning: 1 call(s) listed hold an event changed below Sealbox"


def test_a_tool_call_whose_kind_column_was_rewritten_is_still_listed_flagged(store):
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="renamed")
        run.call_tool("db", "read_query", {"sql": "SELECT 2"}, lambda sql: "row-2", call_id="later")
        run_id = run.run_id
    leaf = next(e.leaf_index for e in store.read_run(run_id) if e.payload.get("call_id") == "renamed"
                and e.kind == "tool.call")
    _set_column_below_sealbox(store, leaf, "kind", "note")
    assert [r["call_id"] for r in store.query_calls()] == ["kept", "later"]  # the API's default: columns only
    got = store.query_calls(check_altered=True)
    assert [(r["call_id"], r["tool"], r["decision"], r["outcome"], r["flags"]) for r in got] == [
        ("kept", "read_query", "allow", "ok", []), ("renamed", "write_query", "allow", "ok", ["altered"]),
        ("later", "read_query", "allow", "ok", [])]
    assert [r["call_id"] for r in store.query_calls(check_altered=True, limit=2)] == ["renamed", "later"]
    path = store.path
    store.close()

    for filters, expected in (([], ["kept", "renamed", "later"]), (["--tool", "write_query"], ["renamed"]),
                              (["--tool", "write_*"], ["renamed"]), (["--decision", "allow"], ["kept", "renamed", "later"]),
                              (["--no-error"], ["kept", "renamed", "later"]), (["--run", run_id, "--limit", "1"], ["later"])):
        res = _run("calls", "-s", path, "--json", *filters)
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        assert [r["call_id"] for r in rows] == expected, filters
        assert res.stderr.startswith(CALLS_WARNING) is ("renamed" in expected), (filters, res.stderr)
        assert all((r["flags"] == ["altered"]) is (r["call_id"] == "renamed") for r in rows)
    res = _run("calls", "-s", path, "--json", "--tool", "read_query")
    assert [r["call_id"] for r in json.loads(res.stdout)] == ["kept", "later"] and res.stderr == ""
