"""``SqliteStore.query_calls``: every filter finds exactly the calls it should, and no others.

LESSONS.md (MLflow): a filter that silently returns nothing is the classic bug,
so every filter is checked for what it finds, not only that it runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from query_helpers import ALL_CALLS, BIG_TEXT, ids

from sealbox.errors import ConfigError


def test_no_filter_lists_every_call_once_in_time_order(store, recorded):
    rows = store.query_calls()
    assert ids(rows) == ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4", "c1", "d1"]
    assert [r["ts"] for r in rows] == sorted(recorded.ts[c] for c in ALL_CALLS)


def test_a_row_holds_the_call_its_decision_and_its_outcome(store, recorded):
    rows = {r["call_id"]: r for r in store.query_calls()}
    assert rows["a4"] == {
        "ts": recorded.ts["a4"], "run_id": recorded.runs["A"], "agent": "support-bot", "principal": "agent:support",
        "step": "5", "call_id": "a4", "server": "db", "tool": "read_rows", "exposed": "db.read_rows",
        "grant": "implicit:agent:support", "arguments": {"table": "orders", "limit": 5},
        "decision": "allow", "rule": "reads", "reason_code": "policy_allow", "outcome": "error", "ok": False,
        "error": {"type": "ValueError", "message": "table orders is locked"},
        "duration_us": rows["a4"]["duration_us"], "approvers": [], "flags": [],
    }
    assert isinstance(rows["a4"]["duration_us"], int) and rows["a4"]["duration_us"] >= 0
    assert (rows["a3"]["decision"], rows["a3"]["rule"], rows["a3"]["outcome"], rows["a3"]["ok"]) == (
        "deny", "no-writes", "not_run", None)
    assert (rows["b3"]["decision"], rows["b3"]["rule"], rows["b3"]["reason_code"]) == ("deny", None, "no_match")
    assert (rows["d1"]["decision"], rows["d1"]["outcome"], rows["d1"]["duration_us"]) == (
        "require_approval", "held", None)


def test_arguments_stored_as_a_blob_come_back_whole(store):
    (row,) = store.query_calls(tool="read_query", match=["arguments.text~needle"])
    assert row["call_id"] == "b4" and row["arguments"]["text"] == BIG_TEXT


# ---------------------------------------------------------------- tool and server globs


@pytest.mark.parametrize("pattern, expected", [
    ("read_query", {"a1", "a2", "b4"}),
    ("read_*", {"a1", "a2", "a4", "b2", "b4"}),
    ("*_search", {"b1", "c1"}),
    ("*_query", {"a1", "a2", "a3", "b4"}),
    ("read_[qr]*", {"a1", "a2", "a4", "b4"}),
    ("read_[!q]*", {"a4", "b2"}),
    ("?etch", {"d1"}),
    ("*", ALL_CALLS),
    ("READ_*", set()),          # case-sensitive, like the policy's matchers
    ("read", set()),            # an exact name is not a prefix
])
def test_tool_glob(store, pattern, expected):
    assert set(ids(store.query_calls(tool=pattern))) == expected


@pytest.mark.parametrize("pattern, expected", [
    ("db", {"a1", "a2", "a3", "a4", "b4"}),
    ("f?", {"b2", "b3"}),
    ("s*", {"b1", "c1"}),
    ("[dh]*", {"a1", "a2", "a3", "a4", "b4", "d1"}),
    ("nope", set()),
])
def test_server_glob(store, pattern, expected):
    assert set(ids(store.query_calls(server=pattern))) == expected


def test_server_and_tool_together(store):
    assert ids(store.query_calls(server="db", tool="read_*")) == ["a1", "a2", "a4", "b4"]
    assert ids(store.query_calls(server="fs", tool="read_*")) == ["b2"]


# ---------------------------------------------------------------- run, agent, principal


def test_run_filter(store, recorded):
    assert ids(store.query_calls(run_id=recorded.runs["B"])) == ["b1", "b2", "b3", "b4"]
    assert ids(store.query_calls(run_id=recorded.runs["E"])) == []  # a run without calls
    with pytest.raises(ConfigError, match="no run 'no-such-run'"):  # as `sealbox calls --run`, not an empty list
        store.query_calls(run_id="no-such-run")


def test_agent_filter(store):
    assert ids(store.query_calls(agent="support-bot")) == ["a1", "a2", "a3", "a4", "c1"]
    assert ids(store.query_calls(agent="billing-bot")) == ["b1", "b2", "b3", "b4"]
    assert ids(store.query_calls(agent="ops-bot")) == ["d1"]
    assert ids(store.query_calls(agent="support")) == []  # exact, not a prefix


def test_principal_filter(store):
    assert ids(store.query_calls(principal="agent:billing")) == ["b1", "b2", "b3", "b4"]
    assert ids(store.query_calls(principal="agent:ops")) == ["d1"]


# ---------------------------------------------------------------- decision and error


@pytest.mark.parametrize("decision, expected", [
    ("allow", ["a1", "a2", "a4", "b1", "b2", "b4", "c1"]),
    ("deny", ["a3", "b3"]),
    ("require_approval", ["d1"]),
])
def test_decision_filter(store, decision, expected):
    assert ids(store.query_calls(decision=decision)) == expected


def test_error_filter_splits_calls_that_ran(store):
    assert ids(store.query_calls(error=True)) == ["a4", "b2"]
    assert ids(store.query_calls(error=False)) == ["a1", "a2", "b1", "b4", "c1"]
    ran = set(ids(store.query_calls(error=True))) | set(ids(store.query_calls(error=False)))
    assert ALL_CALLS - ran == {"a3", "b3", "d1"}  # never ran: neither an error nor a success


def test_unknown_decision_is_refused(store):
    with pytest.raises(ConfigError, match="decision: 'allowed' is not one of allow, deny, require_approval"):
        store.query_calls(decision="allowed")


# ---------------------------------------------------------------- time windows


def test_since_is_inclusive_and_until_exclusive(store, recorded):
    ts = recorded.ts
    assert ids(store.query_calls(since=ts["b1"])) == ["b1", "b2", "b3", "b4", "c1", "d1"]
    assert ids(store.query_calls(until=ts["b1"])) == ["a1", "a2", "a3", "a4"]
    assert ids(store.query_calls(since=ts["a3"], until=ts["b2"])) == ["a3", "a4", "b1"]
    assert ids(store.query_calls(since=ts["a3"], until=ts["a3"])) == []


def test_time_bounds_accept_offsets_datetimes_and_durations(store, recorded):
    b1 = datetime.fromisoformat(recorded.ts["b1"].replace("Z", "+00:00"))
    at_plus_one = b1.astimezone(timezone(timedelta(hours=1))).isoformat()  # the same instant, written at +01:00
    assert at_plus_one.endswith("+01:00")
    assert ids(store.query_calls(since=at_plus_one)) == ["b1", "b2", "b3", "b4", "c1", "d1"]
    assert ids(store.query_calls(until=b1)) == ["a1", "a2", "a3", "a4"]
    assert set(ids(store.query_calls(since="1h"))) == ALL_CALLS  # recorded moments ago
    assert ids(store.query_calls(until="1h")) == []
    assert set(ids(store.query_calls(since=recorded.ts["a1"][:10]))) == ALL_CALLS  # a date: 00:00 UTC that day


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00Z", "5 parsecs", "2026-11-29T12:00:00"])
def test_bad_times_are_refused(store, bad):
    with pytest.raises(ConfigError, match="since: "):
        store.query_calls(since=bad)


# ---------------------------------------------------------------- match


@pytest.mark.parametrize("expr, expected", [
    ("arguments.query~(?i)delete", ["a2", "a3"]),
    ("arguments.query~delete", ["a2"]),                      # Python re: case-sensitive unless (?i)
    ("arguments.query~^SELECT", ["a1", "b4"]),
    ("arguments.text~needle-77\\d\\d", ["b4"]),               # inside a blob-stored argument (> 512 bytes)
    ("arguments~needle-7731", ["b4"]),                        # a whole object is searched as its JSON text
    ("arguments.tags~^refunds$", ["b1"]),                     # a key applied to a list: any item
    ("arguments.tags.0~^billing$", ["b1"]),                   # an index
    ("arguments.tags.1~^billing$", []),
    ("arguments.limit~^5$", ["a4"]),                          # a number, as its JSON text
    ("arguments.missing~.", []),                              # a missing path never matches
    ("error.type~Permission", ["b2"]),
    ("error.message~locked", ["a4"]),
    ("result~secret-result-\\d+", ["b4"]),                    # the tool's result, resolved from its blob
    ("result.rows~open", ["a1", "a2", "b1", "c1"]),
    ("rule~^no-", ["a3"]),
    ("exposed~^fs\\.", ["b2", "b3"]),
])
def test_match(store, expr, expected):
    assert ids(store.query_calls(match=[expr])) == expected


def test_match_as_pairs_and_several_must_all_match(store):
    assert ids(store.query_calls(match=[("arguments.query", "(?i)delete")])) == ["a2", "a3"]
    assert ids(store.query_calls(match=["arguments.query~(?i)delete", "decision~^deny$"])) == ["a3"]
    assert ids(store.query_calls(match=["arguments.query~(?i)delete", "decision~^allow$"])) == ["a2"]


def test_a_regex_may_contain_a_tilde(store):
    assert ids(store.query_calls(match=["arguments.query~[~-]{2} why"])) == ["a2"]


@pytest.mark.parametrize("bad, message", [
    ("arguments.query", "is not FIELD~REGEX"),
    ("arguments.query~(unclosed", "invalid regex '(unclosed'"),
    ("~delete", "empty field path"),
    ("arguments..query~x", "empty field path"),
    ("argumnets.query~x", "unknown field 'argumnets'"),
])
def test_bad_match_expressions_are_refused(store, bad, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        store.query_calls(match=[bad])


# ---------------------------------------------------------------- combined, and limit


def test_combined_filters_intersect(store, recorded):
    assert ids(store.query_calls(agent="support-bot", tool="read_*", error=False)) == ["a1", "a2"]
    assert ids(store.query_calls(agent="support-bot", tool="read_*", error=True)) == ["a4"]
    assert ids(store.query_calls(server="db", decision="deny", match=["arguments.query~(?i)delete"])) == ["a3"]
    assert ids(store.query_calls(principal="agent:billing", since=recorded.ts["b2"], error=True)) == ["b2"]
    assert ids(store.query_calls(run_id=recorded.runs["A"], tool="read_query", decision="allow",
                                 match=["arguments.query~^SELECT"])) == ["a1"]
    assert ids(store.query_calls(agent="billing-bot", tool="write_*")) == []


def test_limit_keeps_the_newest_in_time_order(store):
    assert ids(store.query_calls(limit=3)) == ["b4", "c1", "d1"]
    assert ids(store.query_calls(tool="read_*", limit=2)) == ["b2", "b4"]
    assert ids(store.query_calls(match=["arguments.query~(?i)delete"], limit=1)) == ["a3"]
    assert ids(store.query_calls(limit=100)) == sorted(ALL_CALLS)
    # fetchmany takes a C int: a larger limit is every row (it raised OverflowError)
    for huge in (2**31 - 1, 2**31, 3_000_000_000, 10**30):
        assert ids(store.query_calls(limit=huge)) == sorted(ALL_CALLS)
        assert ids(store.query_calls(tool="read_*", limit=huge)) == ["a1", "a2", "a4", "b2", "b4"]
        assert len(store.query_runs(limit=huge)) == 7
    assert ids(store.query_calls(limit=2**31 - 2)) == sorted(ALL_CALLS)


@pytest.mark.parametrize("limit, message", [
    (0, "limit: 0 is less than 1; give 1 or more"),
    (-5, "limit: -5 is less than 1; give 1 or more"),
    (True, "limit: True is not a whole number; give 1 or more"),
    (2.5, "limit: 2.5 is not a whole number; give 1 or more"),
    ("3", "limit: '3' is not a whole number; give 1 or more"),
])
def test_a_limit_below_1_or_not_an_int_is_a_config_error_in_both_queries(store, limit, message):
    """limit=0 gave one row from the plain query_calls path, none when a filter needed checking,
    and one from query_runs; now all refuse it alike."""
    for query, kwargs in ((store.query_calls, {}), (store.query_calls, {"tool": "read_*"}), (store.query_runs, {})):
        with pytest.raises(ConfigError) as exc:
            query(limit=limit, **kwargs)
        assert str(exc.value) == message


# ---------------------------------------------------------------- pairing a call with its decision and result


def test_calls_are_paired_within_their_run_even_when_ids_repeat_and_events_interleave(tmp_path):
    """Two runs use the same call id (model-supplied ids need not be unique across runs), and
    their events interleave, so neither decision nor result is the next leaf after its call."""
    from sealbox import EventDraft, init_store, open_store
    from sealbox.store.base import new_run_id

    store = init_store(tmp_path / "s")
    one, two = new_run_id(), new_run_id()

    def ev(run, kind, payload):
        return EventDraft(kind, payload, run_id=run, principal=f"agent:{run[-4:]}", step="2")

    def call(run, tool):
        return ev(run, "tool.call", {"call_id": "call_1", "server": "db", "tool": tool, "exposed": f"db.{tool}",
                                     "arguments": {"run": run}, "grant": "g"})

    def decision(run, effect):
        return ev(run, "policy.decision", {"call_id": "call_1", "effect": effect, "reason_code": "x", "rule": effect,
                                           "reason": "r", "policy_fingerprint": "sha256:" + "0" * 64, "eval_us": 1})

    start = {"snapshot": None, "parent_run_id": None, "labels": {}, "policy": {"fingerprint": "sha256:" + "0" * 64,
                                                                             "name": None}}
    store.append([EventDraft("run.started", {**start, "agent": "one"}, run_id=one, principal=f"agent:{one[-4:]}"),
                  EventDraft("run.started", {**start, "agent": "two"}, run_id=two, principal=f"agent:{two[-4:]}")])
    store.append([call(one, "read_a"), call(two, "read_b"), decision(two, "allow"), decision(one, "deny")])
    store.append(ev(two, "tool.result", {"call_id": "call_1", "ok": False, "duration_us": 9,
                                         "error": {"type": "E", "message": "boom"}}))
    store.close()
    reader = open_store(tmp_path / "s", readonly=True)
    rows = reader.query_calls()
    assert [(r["run_id"], r["tool"], r["decision"], r["outcome"], r["duration_us"]) for r in rows] == [
        (one, "read_a", "deny", "not_run", None), (two, "read_b", "allow", "error", 9)]
    assert [r["run_id"] for r in reader.query_calls(error=True)] == [two]
    assert [r["run_id"] for r in reader.query_calls(decision="deny")] == [one]
    reader.close()


@pytest.mark.parametrize("recorded", ["sqlite"], indirect=True)  # PostgreSQL stores have these columns from schema 1
def test_decision_and_result_columns_are_stored_and_rows_without_them_read_the_payload(recorded, tmp_path):
    """Schema 6 keeps a decision's rule and reason_code and a result's duration_us in columns.
    Rows written before it hold NULL there (they are never updated): the listing reads those
    fields from the hashed payload instead, so it is the same either way, and verify accepts
    NULL or the derived value, nothing else."""
    import shutil
    import sqlite3

    from sealbox import open_store, verify_store

    def tamper(path, sql):  # below Sealbox: drop the triggers, change the rows, put the triggers back
        conn = sqlite3.connect(path / "sealbox.db", isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
        for name, _ in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute(sql)
        for _, text in triggers:
            conn.execute(text)
        conn.execute("COMMIT")
        conn.close()

    with recorded.open() as s:
        before = s.query_calls()
    db = sqlite3.connect(recorded.path / "sealbox.db")
    stored = db.execute("SELECT call_id, rule, reason_code FROM events WHERE kind = 'policy.decision'"
                        " AND call_id IN ('a3', 'a4', 'b3') ORDER BY call_id").fetchall()
    durations = dict(db.execute("SELECT call_id, duration_us FROM events WHERE kind = 'tool.result'").fetchall())
    db.close()
    assert stored == [("a3", "no-writes", "policy_deny"), ("a4", "reads", "policy_allow"), ("b3", None, "no_match")]
    assert durations["a4"] == next(r["duration_us"] for r in before if r["call_id"] == "a4")

    legacy = tmp_path / "legacy"
    shutil.copytree(recorded.path, legacy)
    tamper(legacy, "UPDATE events SET rule = NULL, reason_code = NULL, duration_us = NULL")
    with open_store(legacy, readonly=True) as s:
        assert s.query_calls() == before
        assert verify_store(s).ok

    wrong = tmp_path / "wrong"
    shutil.copytree(recorded.path, wrong)
    tamper(wrong, "UPDATE events SET rule = 'reads' WHERE kind = 'policy.decision' AND call_id = 'a3'")
    with open_store(wrong, readonly=True) as s:
        assert [p.code for p in verify_store(s).problems] == ["index_mismatch"]

    typed = tmp_path / "typed"  # values of another type written below Sealbox: the listing reads the payload
    shutil.copytree(recorded.path, typed)
    tamper(typed, "UPDATE events SET rule = X'3432', reason_code = X'72656164', duration_us = 'abc'")  # 42 would be '42'
    with open_store(typed, readonly=True) as s:
        assert s.query_calls() == before
        assert {p.code for p in verify_store(s).problems} == {"index_mismatch"}


def test_a_match_path_names_a_key_holding_glob_characters_itself(tmp_path):
    """An argument named like a query-string parameter (filter[status], q?) was found by its exact
    name until a glob segment was read as a pattern only: 'filter[status]' then matched the key
    'filters' and never 'filter[status]' itself."""
    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="api") as run:
        run.call_tool("http", "list_orders", {"filter[status]": "open", "q?": "x"}, lambda **_: [1], call_id="c1")
        run.call_tool("http", "list_orders", {"filters": "open"}, lambda **_: [2], call_id="c2")
    # the key itself, and (still a glob) every key the pattern matches: 'filters'
    assert ids(store.query_calls(match=["arguments.filter[status]~^open$"])) == ["c1", "c2"]
    assert ids(store.query_calls(match=["arguments.q?~^x$"])) == ["c1"]
    assert ids(store.query_calls(match=["arguments.filter[[]status]~^open$"])) == ["c1"]  # escaped: only the key
    store.close()


def test_a_match_path_goes_through_objects_a_tool_returned(tmp_path):
    """A tool returning an object (a LangChain ToolMessage, a dataclass) is stored as
    {"$pydantic": {"type", "fields"}}, and a dict with "$" keys as {"$esc": {...}}: 'result.content'
    and 'arguments.$filter' never matched (only 'result.$pydantic.fields.content' did). They are
    now seen through, as redaction paths see them; the spelled-out path still matches."""
    import dataclasses

    import pydantic

    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    class ToolMessage(pydantic.BaseModel):
        content: str
        status: str

    @dataclasses.dataclass
    class Page:
        url: str
        items: list

    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="api") as run:
        run.call_tool("kb", "lookup", {"q": "a"}, lambda q: ToolMessage(content="found 3 orders", status="success"),
                      call_id="c1")
        run.call_tool("web", "fetch", {"$filter": "open"}, lambda **_: Page(url="https://x", items=[{"id": 7}]),
                      call_id="c2")
        run.call_tool("kb", "lookup", {"q": "b"}, lambda q: {"content": "none"}, call_id="c3")
    assert ids(store.query_calls(match=["result.content~orders"])) == ["c1"]
    assert ids(store.query_calls(match=["result.$pydantic.fields.content~orders"])) == ["c1"]
    assert ids(store.query_calls(match=["result.content~."])) == ["c1", "c3"]
    assert ids(store.query_calls(match=["result.items.id~^7$"])) == ["c2"]
    assert ids(store.query_calls(match=["result.*~https"])) == ["c2"]
    assert ids(store.query_calls(match=["arguments.$filter~^open$"])) == ["c2"]
    store.close()


def test_a_match_searches_bytes_as_their_text(tmp_path):
    """A tool returning bytes (subprocess.check_output, a file read in binary) or taking them is stored
    as {"$bytes": base64}: '--match result~cannot' never found 'cannot' in b"rm: cannot remove", only
    a regex on its base64 did. Bytes are now searched as their UTF-8 text (a byte that is not UTF-8 as
    \\xNN); the spelled-out path 'result.$bytes' still reaches the base64."""
    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as run:
        run.call_tool("sh", "run", {"cmd": "rm x"}, lambda cmd: b"rm: cannot remove 'x'\n", call_id="c1")
        run.call_tool("sh", "run", {"cmd": "ls"}, lambda cmd: {"stdout": b"a\nb\n", "code": 0}, call_id="c2")
        run.call_tool("sh", "feed", {"stdin": b"DROP TABLE users;"}, lambda stdin: None, call_id="c3")
        run.call_tool("sh", "run", {"cmd": "cat"}, lambda cmd: [b"\xff\xfeDELETE"], call_id="c4")
        run.call_tool("sh", "run", {"cmd": "echo"}, lambda cmd: "cannot", call_id="c5")
    assert ids(store.query_calls(match=["result~cannot remove"])) == ["c1"]
    assert ids(store.query_calls(match=["result~cannot"])) == ["c1", "c5"]
    assert ids(store.query_calls(match=["result.stdout~^a\nb\n$"])) == ["c2"]
    assert ids(store.query_calls(match=["result~\"stdout\": \"a"])) == ["c2"]  # inside a dict's JSON text
    assert ids(store.query_calls(match=["arguments.stdin~(?i)drop table"])) == ["c3"]
    assert ids(store.query_calls(match=["arguments.*~(?i)drop table"])) == ["c3"]
    assert ids(store.query_calls(match=[r"result~^\\xff\\xfeDELETE$"])) == ["c4"]
    assert ids(store.query_calls(match=["result.$bytes~^cm06"])) == ["c1"]  # base64 of b"rm: "
    assert ids(store.query_calls(match=["result~cm06"])) == []
    store.close()


@pytest.fixture(params=__import__("conftest").BACKENDS)
def redacted_store(request, tmp_path):
    """A fresh ``redacted`` store (the default content policy) on each backend."""
    from sealbox import init_store

    if request.param == "sqlite":
        store = init_store(tmp_path / "s")
        yield store
        store.close()
        return
    import os
    import uuid

    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_marker_{uuid.uuid4().hex[:16]}"
    store = init_store(tmp_path / "s", postgres_url=url, schema=schema)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_a_match_never_matches_inside_a_redaction_marker(redacted_store):
    """`calls --match 'arguments.password~.'` (or `~hmac`) listed a call whose password was redacted:
    the match searched the marker's JSON text, and the docs say a redacted value cannot be searched."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = redacted_store
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("vault", "login", {"user": "bob", "password": "hunter2hunter2"}, lambda user, password: 1,
                      call_id="r1")
        run.call_tool("db", "q", {"query": "select 1", "dsn": "host=db password=pw-9911 user=bob"},
                      lambda query, dsn: {"token": "tok-secret-1", "rows": 1}, call_id="r2")
        with pytest.raises(ValueError):
            run.call_tool("db", "q", {"query": "x"}, lambda query: (_ for _ in ()).throw(ValueError("bad password=hunter22")),
                          call_id="r3")
    (row,) = [r for r in store.query_calls() if r["call_id"] == "r1"]
    assert row["arguments"]["password"] == store.redactor.marker("hunter2hunter2")
    for expr in ("arguments.password~.", "arguments.password~hmac", "arguments.password~redacted",
                 "arguments.password~^", "arguments~hmac", "arguments~redacted", "arguments.*~[0-9a-f]{64}",
                 "arguments.dsn~hmac", "arguments.dsn~password=.", "result~hmac", "result.token~.",
                 "error.message~hmac", "error.message~redacted", "error.message~password=."):
        assert ids(store.query_calls(match=[expr])) == [], expr
    # the text around a marker is still searched
    assert ids(store.query_calls(match=["arguments~password"])) == ["r1", "r2"]
    assert ids(store.query_calls(match=["arguments.dsn~user=bob$"])) == ["r2"]
    assert ids(store.query_calls(match=["arguments.dsn~^host=db password=$"])) == ["r2"]
    assert ids(store.query_calls(match=["result~rows"])) == ["r2"]
    assert ids(store.query_calls(match=["error.message~^bad password="])) == ["r3"]
