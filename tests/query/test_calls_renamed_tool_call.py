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


def _lookups(store, **filters):
    """The plans (EXPLAIN QUERY PLAN details) of the renamed-call look-ups ``query_calls(check_altered=True,
    **filters)`` runs on a SQLite store, with the rows it returns."""
    conn = store._conn()
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        rows = store.query_calls(check_altered=True, **filters)
    finally:
        conn.set_trace_callback(None)
    plans = [" | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
             for sql in seen if "tool.call\",' AS BLOB" in sql]
    return [r["call_id"] for r in rows], plans


def test_the_renamed_call_look_up_takes_the_listings_filters_and_indexes(store):
    """The look-up is narrowed by the listing's run, time window and limit (the oldest call a listing cut at its
    limit shows): through events_run_kind / events_kind_ts ranges of the window, not every event of the other
    kinds; what it lists is the same."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as other:
        other.call_tool("db", "read_query", {"sql": "SELECT 0"}, lambda sql: "row-0", call_id="other")
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="renamed")
        run.call_tool("db", "read_query", {"sql": "SELECT 2"}, lambda sql: "row-2", call_id="later")
        run_id = run.run_id
    events = {e.payload.get("call_id"): e for e in store.read_run(run_id) if e.kind == "tool.call"}
    _set_column_below_sealbox(store, events["renamed"].leaf_index, "kind", "note")
    ts = {name: e.ts for name, e in events.items()}

    for filters, expected in (
            (dict(run_id=run_id), ["kept", "renamed", "later"]), (dict(run_id=other.run_id), ["other"]),
            (dict(since=ts["renamed"]), ["renamed", "later"]), (dict(since=ts["later"]), ["later"]),
            (dict(until=ts["renamed"]), ["other", "kept"]), (dict(until=ts["later"]), ["other", "kept", "renamed"]),
            (dict(limit=1), ["later"]), (dict(limit=2), ["renamed", "later"]), (dict(limit=5), ["other", "kept", "renamed", "later"]),
            (dict(tool="db/write_query"), ["renamed"]), (dict(tool="write_*", since=ts["kept"]), ["renamed"]),
            (dict(server="db", until=ts["later"], limit=1), ["renamed"])):
        assert [r["call_id"] for r in store.query_calls(check_altered=True, **filters)] == expected, filters
    if store.backend != "sqlite":
        return
    got, plans = _lookups(store, run_id=run_id)
    assert got == ["kept", "renamed", "later"] and len(plans) == 1 and "events_run_kind (run_id=?" in plans[0], plans
    got, plans = _lookups(store, since=ts["kept"])
    assert got == ["kept", "renamed", "later"] and len(plans) == 1, plans
    assert "events_kind_ts (kind=? AND ts>?)" in plans[0] and "kind<" not in plans[0], plans
    got, plans = _lookups(store, limit=2)  # the listing is cut: the look-up starts at its oldest call
    assert got == ["renamed", "later"] and "events_kind_ts (kind=? AND ts>?)" in plans[0], plans
    # --tool / --server: the events of other kinds that hold a tool (events_other_kinds_tool, SQLite migration
    # 0008), a range of it for the tool's literal prefix: no event of another kind without a tool is read
    for filters, expected, searched in ((dict(tool="write_query"), ["renamed"], "(tool=?)"),
                                        (dict(tool="write_*"), ["renamed"], "(tool>? AND tool<?)"),
                                        (dict(tool="read_*"), ["other", "kept", "later"], "(tool>? AND tool<?)"),
                                        (dict(server="db"), ["other", "kept", "renamed", "later"], ""),
                                        (dict(tool="db/write_query"), ["renamed"], ""),
                                        (dict(tool="write_*", since=ts["kept"]), ["renamed"], "(tool>? AND tool<?)")):
        got, plans = _lookups(store, **filters)
        assert got == expected and len(plans) == 1, (filters, got, plans)
        assert f"USING INDEX events_other_kinds_tool {searched}".strip() in plans[0], (filters, plans)
        assert "events_kind_ts" not in plans[0], (filters, plans)
