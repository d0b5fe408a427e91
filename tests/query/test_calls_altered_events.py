"""An event of a tool call changed below Sealbox (its bytes edited in the database, so they no longer hash
to the stored leaf hash): ``sealbox calls`` listed the altered arguments and result as if recorded (no flag,
no warning, exit 0), while ``sealbox report`` showed the same altered values in its timeline and tool call
sections with only the store-wide verification section saying NOT VERIFIED. Both now flag it the same way:
``calls`` gives the row the flag ``altered`` (and one warning line on stderr), ``report`` starts the event's
timeline summary with ALTERED and prints an ALTERED line above the call's values, naming the events.

On every backend: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set (the events are changed
below Sealbox with the database's own tools)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
from conftest import BACKENDS
from query_helpers import SEALBOX

import sealbox
from sealbox.canonical import canonical_bytes
from sealbox.policies import ALLOW_ALL
from sealbox.report.markdown import render_markdown
from sealbox.report.model import ALTERED_NOTE, build_report


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
        yield s
        s.close()
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_altered_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "store", postgres_url=url, schema=schema)
    try:
        yield s
    finally:
        s.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _edit_below_sealbox(store, leaf: int, change) -> None:
    """``change(envelope)`` applied to the event at ``leaf`` in the database itself (its leaf hash left)."""
    if store.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(store.db_path, isolation_level=None)
        try:
            raw = json.loads(conn.execute("SELECT raw FROM events WHERE leaf_index = ?", (leaf,)).fetchone()[0])
            change(raw)
            saved = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
            conn.execute("BEGIN IMMEDIATE")
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                conn.execute(f'DROP TRIGGER "{name}"')
            conn.execute("UPDATE events SET raw = ? WHERE leaf_index = ?", (canonical_bytes(raw), leaf))
            for sql in saved:
                conn.execute(sql)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {store.schema}")
        conn.execute("SET session_replication_role = replica")
        raw = json.loads(bytes(conn.execute("SELECT raw FROM events WHERE leaf_index = %s", (leaf,)).fetchone()[0]))
        change(raw)
        conn.execute("UPDATE events SET raw = %s WHERE leaf_index = %s", (canonical_bytes(raw), leaf))


def _calls_queries_run(store, monkeypatch, query) -> tuple[list, list[str]]:
    """``query()``'s result and the calls queries (SQL text) it sent to the database: seen through
    sqlite3's trace callback, or on PostgreSQL at the store's one place that sends a query."""
    seen: list[str] = []
    if store.backend == "sqlite":
        conn = store._conn()
        conn.set_trace_callback(seen.append)
        try:
            result = query()
        finally:
            conn.set_trace_callback(None)
    else:
        from sealbox.store import postgres

        sent = postgres._Conn.execute

        def execute(self, sql, params=()):
            seen.append(sql)
            return sent(self, sql, params)

        monkeypatch.setattr(postgres._Conn, "execute", execute)
        try:
            result = query()
        finally:
            monkeypatch.undo()
    return result, [sql for sql in seen if "FROM events c" in sql]


#: What check_altered=True adds to the calls query: the three events' bytes and stored leaf hash.
_CHECK_COLUMNS = "c.raw, c.leaf_hash, d.raw, d.leaf_hash, x.raw, x.leaf_hash, "


def test_calls_and_report_flag_an_altered_call_alike(store, tmp_path, monkeypatch):
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "read_query", {"sql": "SELECT 2"}, lambda sql: "row-2", call_id="args")
        run.call_tool("db", "read_query", {"sql": "SELECT 3"}, lambda sql: "row-3", call_id="result")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _edit_below_sealbox(store, leaf["tool.call", "args"],
                        lambda env: env["payload"].update(arguments={"sql": "DROP TABLE users"}))
    _edit_below_sealbox(store, leaf["tool.result", "result"], lambda env: env["payload"].update(result="forged"))
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "-s", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = {r["call_id"]: r for r in json.loads(res.stdout)}
    assert {c: r["flags"] for c, r in rows.items()} == {"kept": [], "args": ["altered"], "result": ["altered"]}
    assert rows["args"]["arguments"] == {"sql": "DROP TABLE users"}  # what the database holds, flagged
    assert res.stderr == ("warning: 2 call(s) listed hold an event changed below Sealbox after it was written (its "
                          "bytes no longer hash to its recorded leaf hash, or a query column disagrees with them; "
                          "flag altered): what is shown for them is what the database holds now, not what was "
                          "recorded; `sealbox verify` names the events\n")
    res = subprocess.run([SEALBOX, "calls", "-s", path, "--match", "arguments.sql~SELECT 1"], capture_output=True,
                         text=True)
    assert res.returncode == 0 and res.stderr == "" and "altered" not in res.stdout  # an intact call alone: no flag

    opened = sealbox.open_store(path, readonly=True)
    try:
        # the Python API flags only when asked (check_altered=True), as `sealbox calls` does
        rows, checked_sql = _calls_queries_run(opened, monkeypatch, lambda: opened.query_calls(check_altered=True))
        assert [(r["call_id"], r["flags"]) for r in rows] == [("kept", []), ("args", ["altered"]),
                                                             ("result", ["altered"])]
        assert len(checked_sql) == 1 and checked_sql[0].count(_CHECK_COLUMNS) == 1
        assert [(r["call_id"], r["flags"]) for r in opened.query_calls(
            tool="read_q*", match="arguments.sql~DROP", check_altered=True)] == [("args", ["altered"])]
        assert [(r["call_id"], r["flags"], r["arguments"]) for r in opened.query_calls(
            match="result~forged", check_altered=True)] == [("result", ["altered"], {"sql": "SELECT 3"})]
        # by default: the query reads no raw / leaf_hash column and no row is flagged
        rows, sent = _calls_queries_run(opened, monkeypatch, lambda: opened.query_calls())
        assert [(r["call_id"], r["flags"]) for r in rows] == [("kept", []), ("args", []), ("result", [])]
        assert rows[1]["arguments"] == {"sql": "DROP TABLE users"}
        # the same query less the six columns (no other raw read, no leaf_hash at all)
        assert sent == [checked_sql[0].replace(_CHECK_COLUMNS, "")] and "leaf_hash" not in sent[0]
        rows, sent = _calls_queries_run(opened, monkeypatch, lambda: opened.query_calls(
            tool="read_q*", match="result~forged"))
        assert [(r["call_id"], r["flags"]) for r in rows] == [("result", [])]
        assert len(sent) == 1 and "leaf_hash" not in sent[0] and _CHECK_COLUMNS not in sent[0]

        report = build_report(opened, run_id, now="2026-01-01T00:00:00Z")
        calls = {c.call_id: c for c in report.tool_calls}
        assert {c: v.altered for c, v in calls.items()} == {
            "kept": (), "args": (f"tool.call (leaf {leaf['tool.call', 'args']})",),
            "result": (f"tool.result (leaf {leaf['tool.result', 'result']})",)}
        flagged = [t.leaf_index for t in report.timeline if t.summary.startswith(ALTERED_NOTE + ": ")]
        assert flagged == [leaf["tool.call", "args"], leaf["tool.result", "result"]]
        text = render_markdown(report)
    finally:
        opened.close()
    assert text.count("**ALTERED below Sealbox**") == 2
    assert (f"**ALTERED below Sealbox**: tool.result (leaf {leaf['tool.result', 'result']}) no longer match their "
            "recorded hash; the values below are what the database holds now, not what was recorded.") in text
    res = subprocess.run([SEALBOX, "report", run_id, "--format", "html", "-s", path], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.count(">ALTERED</span>") == 2, res.stderr


def _set_column_below_sealbox(store, leaf: int, column: str, value) -> None:
    """The query column ``column`` of the event at ``leaf`` set to ``value`` in the database itself (its
    hashed bytes and leaf hash left as they are)."""
    if store.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(store.db_path, isolation_level=None)
        try:
            saved = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
            conn.execute("BEGIN IMMEDIATE")
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                conn.execute(f'DROP TRIGGER "{name}"')
            conn.execute(f"UPDATE events SET {column} = ? WHERE leaf_index = ?", (value, leaf))
            for sql in saved:
                conn.execute(sql)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {store.schema}")
        conn.execute("SET session_replication_role = replica")
        conn.execute(f"UPDATE events SET {column} = %s WHERE leaf_index = %s", (value, leaf))


def test_calls_flag_a_call_whose_query_columns_were_changed_below_sealbox(store):
    """A query column (tool, a decision's effect, a result's ok) rewritten in the database, the hashed bytes
    left intact: `sealbox calls` listed the rewritten values (a DELETE shown as a call to read_query that the
    policy allowed) with no flag and no warning, exit 0, while every event still hashed to its leaf hash."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="tool")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM orders"}, lambda sql: "gone", call_id="effect")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM carts"}, lambda sql: "gone", call_id="ok")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _set_column_below_sealbox(store, leaf["tool.call", "tool"], "tool", "read_query")
    _set_column_below_sealbox(store, leaf["policy.decision", "effect"], "effect", "deny")
    _set_column_below_sealbox(store, leaf["tool.result", "ok"], "ok", 0)
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "-s", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = {r["call_id"]: r for r in json.loads(res.stdout)}
    assert {c: (r["tool"], r["decision"], r["ok"], r["flags"]) for c, r in rows.items()} == {
        "kept": ("read_query", "allow", True, []),
        "tool": ("read_query", "allow", True, ["altered"]),
        "effect": ("write_query", "deny", True, ["altered"]),
        "ok": ("write_query", "allow", False, ["altered"])}
    assert res.stderr == ("warning: 3 call(s) listed hold an event changed below Sealbox after it was written (its "
                          "bytes no longer hash to its recorded leaf hash, or a query column disagrees with them; "
                          "flag altered): what is shown for them is what the database holds now, not what was "
                          "recorded; `sealbox verify` names the events\n")
    res = subprocess.run([SEALBOX, "calls", "-s", path, "--tool", "read_query", "--csv"], capture_output=True,
                         text=True)
    assert res.returncode == 0 and res.stderr.startswith("warning: 1 call(s) listed hold an event changed below")
    assert [line.split(",")[5] for line in res.stdout.splitlines()[1:]] == ["kept", "tool"]
    assert res.stdout.splitlines()[2].endswith(',"[""altered""]"')


def test_calls_flag_a_call_whose_decision_or_result_call_id_column_was_changed(store):
    """The call_id column of a call's policy.decision (or tool.result) rewritten below Sealbox, its bytes left
    intact: the decision dropped out of its call, which `sealbox calls` then listed as undecided (a result:
    outcome unknown), unflagged, exit 0, though every event still hashed to its leaf hash. A call listed
    without a decision, or allowed without a result, is now checked for a decision / result of its run
    whose hashed bytes name it: found, the call is flagged altered."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="dec")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM carts"}, lambda sql: "gone", call_id="res")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _set_column_below_sealbox(store, leaf["policy.decision", "dec"], "call_id", "elsewhere")
    _set_column_below_sealbox(store, leaf["tool.result", "res"], "call_id", "elsewhere-too")
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "-s", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = {r["call_id"]: (r["decision"], r["outcome"], r["flags"]) for r in json.loads(res.stdout)}
    assert rows == {"kept": ("allow", "ok", []), "dec": (None, "ok", ["altered"]),
                    "res": ("allow", "unknown", ["altered"])}
    assert res.stderr.startswith("warning: 2 call(s) listed hold an event changed below Sealbox")


def test_a_decision_filter_keeps_a_call_whose_decision_call_id_column_was_changed(store):
    """The call_id column of a call's policy.decision rewritten below Sealbox (its bytes intact): the
    unfiltered listing showed the call flagged altered, but `sealbox calls --decision allow` filtered on
    the decision joined in SQL, which no longer joins, and dropped the call (no flag, no warning, exit 0).
    A call listed without a decision now passes a --decision filter when a decision of its run whose hashed
    bytes name it has that effect: listed, flagged altered; one whose bytes say another effect does not."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="dec")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _set_column_below_sealbox(store, leaf["policy.decision", "dec"], "call_id", "elsewhere")

    def listed(**filters):
        return [(r["call_id"], r["decision"], r["flags"])
                for r in store.query_calls(check_altered=True, **filters)]

    assert listed(decision="allow") == [("kept", "allow", []), ("dec", None, ["altered"])]
    assert listed(decision="allow", limit=1) == [("dec", None, ["altered"])]
    assert listed(decision="allow", tool="write_query") == [("dec", None, ["altered"])]
    assert listed(decision="deny") == []
    assert listed(decision="require_approval") == []
    # without check_altered no row is flagged, and the filter stays the SQL one
    assert [r["call_id"] for r in store.query_calls(decision="allow")] == ["kept"]
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "--decision", "allow", "-s", path], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert [(r["call_id"], r["decision"], r["flags"]) for r in json.loads(res.stdout)] == [
        ("kept", "allow", []), ("dec", None, ["altered"])]
    assert res.stderr.startswith("warning: 1 call(s) listed hold an event changed below Sealbox")
    res = subprocess.run([SEALBOX, "calls", "--json", "--decision", "deny", "-s", path], capture_output=True,
                         text=True)
    assert res.returncode == 0 and json.loads(res.stdout) == [] and res.stderr == ""


def test_the_inline_check_and_the_general_one_flag_the_same_records(tmp_path):
    """_checked_call_rows checks the usual records (every event's bytes a bytes object) in one inline pass
    (each event hashed and parsed once), others through event_altered / _columns_disagree: both flag
    exactly the records one of whose query columns, bytes or stored hashes disagree, and no other."""
    from sealbox.store import sqlite_queries as q

    store = sealbox.init_store(tmp_path / "store")
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot", principal="user:ann") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="c1")
    sql, params, _, _ = q._calls_query(check_altered=True)
    (base,) = [tuple(r) for r in store._conn().execute(sql, params)]
    store.close()
    changes = {0: "2000-01-01T00:00:00.000000Z", 1: "other-run", 3: "user:bob", 4: 7, 5: "c2", 6: "fs", 7: "write_query",
               9: "deny", 10: "some-rule", 11: "some_code", 12: 0, 14: 12345,
               15: base[15].replace(b"SELECT 1", b"SELECT 2"), 16: b"\x00" * 32, 18: b"\x01" * 32,
               19: base[19][:-1], 20: b"\x02" * 32}
    records = [base] + [base[:i] + (v,) + base[i + 1:] for i, v in changes.items()]
    as_views = [r[:15] + tuple(memoryview(v) if isinstance(v, bytes) else v for v in r[15:21]) + r[21:] for r in records]
    inline = [row["flags"] for row in q._checked_call_rows(records, lambda v: v)]
    general = [row["flags"] for row in q._checked_call_rows(as_views, lambda v: v)]
    assert inline == general == [[]] + [["altered"]] * len(changes)


def _failing_call_store(store):
    """A run of three calls (``kept`` ok, ``x`` and ``y`` failed), the leaf of each event by (kind, call_id)."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)

    def boom(sql):
        raise RuntimeError("disk full")

    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        for call_id in ("x", "y"):
            with pytest.raises(RuntimeError):
                run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, boom, call_id=call_id)
        run_id = run.run_id
    return {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}


def test_an_error_filter_keeps_a_call_whose_result_call_id_or_ok_column_was_changed(store):
    """The call_id (or ok) column of a failed call's tool.result rewritten below Sealbox, its bytes intact:
    the unfiltered listing showed the call flagged altered, but `sealbox calls --error` filtered on the
    result joined in SQL (x.ok = 0), which no longer joins (or now says ok), and dropped the call (no flag,
    no warning, exit 0). Such a call now passes --error when the result of its run whose hashed bytes name
    it (or its own result's bytes) say ok false: listed, flagged altered (--no-error lists the call whose ok
    column says ok, flagged, as the filter reads the column, and not the one whose result no longer joins)."""
    leaf = _failing_call_store(store)
    _set_column_below_sealbox(store, leaf["tool.result", "x"], "call_id", "elsewhere")
    _set_column_below_sealbox(store, leaf["tool.result", "y"], "ok", 1)

    def listed(**filters):
        return [(r["call_id"], r["ok"], r["flags"]) for r in store.query_calls(check_altered=True, **filters)]

    assert listed() == [("kept", True, []), ("x", None, ["altered"]), ("y", True, ["altered"])]
    assert listed(error=True) == [("x", None, ["altered"]), ("y", True, ["altered"])]
    assert listed(error=True, limit=1) == [("y", True, ["altered"])]
    assert listed(error=True, tool="write_*") == [("x", None, ["altered"]), ("y", True, ["altered"])]
    # y's ok column now says ok: listed there too (what the database holds), flagged; x's result says failed
    assert listed(error=False) == [("kept", True, []), ("y", True, ["altered"])]
    # without check_altered no row is flagged, and the filter stays the SQL one
    assert [r["call_id"] for r in store.query_calls(error=True)] == []
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "--error", "-s", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert [(r["call_id"], r["outcome"], r["flags"]) for r in json.loads(res.stdout)] == [
        ("x", "unknown", ["altered"]), ("y", "ok", ["altered"])]
    assert res.stderr.startswith("warning: 2 call(s) listed hold an event changed below Sealbox")


def test_a_decision_filter_keeps_a_call_whose_decision_effect_column_was_changed(store):
    """The effect column of a call's policy.decision rewritten below Sealbox (allow -> deny), its bytes
    intact: `sealbox calls` listed the call flagged altered (decision deny, as the column says), but
    `sealbox calls --decision allow` filtered on that column and dropped it (no flag, no warning, exit 0).
    A call whose decision's hashed bytes say the effect asked for now passes the filter (a byte search in
    SQL, confirmed by parsing the bytes), listed as the database holds it, flagged altered."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="eff")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _set_column_below_sealbox(store, leaf["policy.decision", "eff"], "effect", "deny")

    def listed(**filters):
        return [(r["call_id"], r["decision"], r["flags"]) for r in store.query_calls(check_altered=True, **filters)]

    assert listed() == [("kept", "allow", []), ("eff", "deny", ["altered"])]
    assert listed(decision="allow") == [("kept", "allow", []), ("eff", "deny", ["altered"])]
    assert listed(decision="allow", limit=1) == [("eff", "deny", ["altered"])]
    assert listed(decision="allow", tool="write_*") == [("eff", "deny", ["altered"])]
    assert listed(decision="allow", match="tool~write") == [("eff", "deny", ["altered"])]
    assert listed(decision="deny") == [("eff", "deny", ["altered"])]  # what the column says: listed, flagged
    assert listed(decision="require_approval") == []
    # without check_altered no row is flagged, and the filter stays the SQL one
    assert [r["call_id"] for r in store.query_calls(decision="allow")] == ["kept"]
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "--decision", "allow", "-s", path], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert [(r["call_id"], r["decision"], r["flags"]) for r in json.loads(res.stdout)] == [
        ("kept", "allow", []), ("eff", "deny", ["altered"])]
    assert res.stderr.startswith("warning: 1 call(s) listed hold an event changed below Sealbox")


@pytest.mark.parametrize("kind,column,value", [("policy.decision", "kind", "note"),
                                               ("policy.decision", "run_id", "another-run"),
                                               ("tool.result", "kind", "note"),
                                               ("tool.result", "run_id", "another-run")])
def test_a_call_whose_decision_or_result_kind_or_run_column_was_changed_is_flagged(store, kind, column, value):
    """The kind (or run_id) column of a call's policy.decision / tool.result rewritten below Sealbox, its bytes
    intact: the event dropped out of its call, which `sealbox calls` listed undecided (a result: unknown),
    unflagged, and --decision allow dropped: the lookup of a detached decision / result read the run's events
    by their kind and run_id columns. It now reads the run's events holding the call's id in their bytes (and
    the events of that kind naming the call by their call_id column, in any run), confirmed by parsing them."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="moved")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _set_column_below_sealbox(store, leaf[kind, "moved"], column, value)

    def listed(**filters):
        return [(r["call_id"], r["decision"], r["ok"], r["flags"])
                for r in store.query_calls(check_altered=True, **filters)]

    moved = ((None, True) if kind == "policy.decision" else ("allow", None)) + (["altered"],)
    assert listed() == [("kept", "allow", True, []), ("moved", *moved)]
    assert listed(decision="allow") == [("kept", "allow", True, []), ("moved", *moved)]
    assert listed(decision="deny") == []


@pytest.mark.parametrize("column,value", [("call_id", "renamed"), ("run_id", "another-run")])
def test_a_decision_filter_keeps_a_call_whose_own_call_id_or_run_column_was_changed(store, column, value):
    """The call_id (or run_id) column of a tool.call rewritten below Sealbox, its bytes intact: its decision no
    longer joins it; `sealbox calls` listed it undecided, flagged altered (the column disagrees with the
    bytes), but --decision allow dropped it: the decision was looked up by the rewritten column. It is now
    also looked up by the call id and run its tool.call's hashed bytes say."""
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1", call_id="kept")
        run.call_tool("db", "write_query", {"sql": "DELETE FROM users"}, lambda sql: "gone", call_id="moved")
        run_id = run.run_id
    leaf = {(e.kind, e.payload.get("call_id")): e.leaf_index for e in store.read_run(run_id)}
    _set_column_below_sealbox(store, leaf["tool.call", "moved"], column, value)

    def listed(**filters):
        return [(r["tool"], r["decision"], r["flags"]) for r in store.query_calls(check_altered=True, **filters)]

    assert listed() == [("read_query", "allow", []), ("write_query", None, ["altered"])]
    assert listed(decision="allow") == [("read_query", "allow", []), ("write_query", None, ["altered"])]
    assert listed(decision="deny") == []
