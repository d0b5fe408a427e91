"""Runs imported into a store are not the store's own: their usage (model tokens and cost, tool calls)
happened elsewhere and is accounted there, so it never counts toward the live limits of the store's
policy (``tokens.per_day``, ``cost.per_day``, ``calls_per_minute``), even though imported events are
stamped with the import time and name the same agent.

Recorded with the real Recorder, exported with ``sealbox export --otlp`` to a real OTLP/HTTP endpoint on
127.0.0.1, then ``sealbox import``-ed into a store where a live agent of the same name runs.

On every backend: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from test_otlp_roundtrip import Collector, _sb

import sealbox
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")

ALLOW = "version: 1\nrules:\n  - id: allow-all\n    effect: allow\nprices:\n  \"openai/*\": {input: 1, output: 1}\n"
#: each bound is what the live agent itself used today, this call included: one more token, cent or call
#: of the imported run counted toward it trips it
LIMITS = {
    "tokens": ALLOW + "limits:\n  tokens: {per_day: 200}\n",
    "cost": ALLOW + "limits:\n  cost: {per_day: 0.001, currency: USD}\n",
    "rate": ALLOW + "limits:\n  calls_per_minute: {per_agent: 4, per_tool: 4}\n",
}

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
RESPONSE = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """``init(path)``: a new store at ``path`` on the backend (PostgreSQL: its own schema, dropped after)."""
    schemas: list[str] = []

    def init(path):
        if request.param == "sqlite":
            return sealbox.init_store(path)
        schemas.append(f"sbt_imp_live_{uuid.uuid4().hex[:16]}")
        return sealbox.init_store(path, postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"], schema=schemas[-1])

    yield init
    if schemas:
        import psycopg

        with psycopg.connect(os.environ["SEALBOX_TEST_POSTGRES_URL"], autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _export(path, run_ids, tmp_path):
    collector = Collector()
    try:
        out = _sb("export", *run_ids, "-s", path, "--otlp", collector.url, "--otlp-content")
        assert out.returncode == 0, out.stderr
    finally:
        collector.close()
    file = tmp_path / "incident.json"
    file.write_text(json.dumps(collector.otlp_json(hex_ids=True)), encoding="utf-8")
    return file


def away_from_midnight(margin_s: float = 60.0) -> None:
    """A day's budget counts from 00:00 UTC: usage recorded just before midnight is not the next day's, so a
    test recording some and expecting the day's limit tripped by it failed when midnight fell in between
    (shown with the recorder's clock moved past midnight before the last call: 'DID NOT RAISE ToolDenied').
    So close to midnight, wait for the new day first."""
    now = datetime.now(timezone.utc)
    left = (now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now).total_seconds()
    if left < margin_s:
        time.sleep(left + 0.5)


def test_live_token_and_cost_budgets_are_enforced_on_every_backend(backend, tmp_path):
    """The day's tokens and cost are numbers on PostgreSQL too (its sum of a bigint is a numeric, read as
    a Decimal: every call under a token budget was denied as a guardrail_error)."""
    away_from_midnight()  # the 200 tokens recorded below and the call they make exceed a limit are on one day
    live = backend(tmp_path / "live")
    try:
        with Recorder(live, policy=Policy.from_text(ALLOW)).run(agent="bot", principal="agent:bot") as run:
            run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 100, "output_tokens": 100},
                           provider="openai", model="gpt-4o")
        for name, text in LIMITS.items():
            with Recorder(live, policy=Policy.from_text(text)).run(agent="bot", principal="agent:bot") as run:
                run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 0, "output_tokens": 0},
                               provider="openai", model="gpt-4o")
                assert run.call_tool("db", "query", {"q": name}, lambda q: "rows") == "rows", name
        over = ALLOW + "limits:\n  tokens: {per_day: 199}\n  cost: {per_day: 0.0001, currency: USD}\n"
        with Recorder(live, policy=Policy.from_text(over)).run(agent="bot", principal="agent:bot") as run:
            with pytest.raises(ToolDenied) as denied:
                run.call_tool("db", "query", {"q": "over"}, lambda q: "rows")
        d = denied.value.decision
        assert (d.effect, d.reason_code, d.reason) == (
            "deny", "limit_exceeded", "limit tokens.per_day exceeded: 200 > 199")
    finally:
        live.close()


def test_imported_usage_never_counts_toward_live_limits(backend, tmp_path):
    # yesterday's incident, recorded elsewhere: 2,000,000 tokens and 8 calls of db/query by agent "bot"
    source = backend(tmp_path / "source")
    rec = Recorder(source, policy=Policy.from_text(ALLOW))
    with rec.run(agent="bot", principal="agent:bot") as run:
        run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 1_500_000, "output_tokens": 500_000},
                       provider="openai", model="gpt-4o")
        for i in range(8):
            run.call_tool("db", "query", {"q": i}, lambda q: "rows")
        incident = run.run_id
    source.close()
    file = _export(tmp_path / "source", [incident], tmp_path)

    # the live store: agent "bot" used 200 tokens (0.0002 USD) and made 1 call today
    live = backend(tmp_path / "live")
    with Recorder(live, policy=Policy.from_text(ALLOW)).run(agent="bot", principal="agent:bot") as run:
        run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 100, "output_tokens": 100},
                       provider="openai", model="gpt-4o")
        assert run.call_tool("db", "query", {"q": "live"}, lambda q: "rows") == "rows"
    live.close()

    out = _sb("import", "-s", tmp_path / "live", "--json", file)
    assert out.returncode == 0, out.stderr
    [imported] = json.loads(out.stdout)["runs"]

    live = sealbox.open_store(tmp_path / "live")
    try:
        ended = [e.payload for e in live.read_run(imported) if e.kind == "run.ended"]
        assert ended[0]["usage"]["input_tokens"] == 1_500_000  # the import is there, for the investigator
        for name, text in LIMITS.items():  # the live agent's next calls, each under one limit
            with Recorder(live, policy=Policy.from_text(text)).run(agent="bot", principal="agent:bot") as run:
                assert run.call_tool("db", "query", {"q": name}, lambda q: "rows") == "rows", name
                decisions = [e.payload for e in live.read_run(run.run_id) if e.kind == "policy.decision"]
            assert [(d["effect"], d["reason_code"], d["rule"]) for d in decisions] == [
                ("allow", "policy_allow", "allow-all")], name
    finally:
        live.close()


def test_the_day_and_minute_counters_stay_indexed(tmp_path):
    """Leaving imported runs out reads the day's model calls by ``events_kind_ts`` as before, and the run's
    ``run.started`` by ``events_run`` (only for an event whose principal is ``imported:…``)."""
    from sealbox.store.sqlite_queries import Reader

    store = sealbox.init_store(tmp_path / "s")
    try:
        conn = store._conn()
        live = Reader(conn)._live_sql()
        day = f"SELECT sum(e.tokens) FROM events e WHERE e.kind = 'model.call' AND e.ts >= ? AND {live}"
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + day, ("2026-01-01T00:00:00Z",))]
        assert plan == ["SEARCH e USING INDEX events_kind_ts (kind=? AND ts>?)", "CORRELATED SCALAR SUBQUERY 1",
                        "SEARCH s USING INDEX events_run (run_id=? AND run_seq=?)"]
    finally:
        store.close()


@pytest.mark.skipif("postgres" not in BACKENDS, reason="needs SEALBOX_TEST_POSTGRES_URL")
def test_the_day_counters_stay_indexed_on_postgres(tmp_path):
    """On PostgreSQL an ``EXISTS`` reading the run's ``run.started`` was planned as a hashed subplan once the
    day held many imported events: every limited call read every run's ``run.started`` of the store (a scan
    of ``run_seq = 1`` parsing each one's JSON, inside the write transaction). The run's ``run.started`` is
    read by ``events_run`` for each event named ``imported:…`` only.

    The store's rows are written in bulk by SQL (20,000 runs of 7 events, one in ten imported, a model call
    every 50 s): the planner's choice depends on the table's statistics, which the store's API would take
    minutes to build up."""
    import psycopg

    from sealbox.store.postgres import PgReader

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_imp_live_{uuid.uuid4().hex[:16]}"
    sealbox.init_store(tmp_path / "s", postgres_url=url, schema=schema).close()
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(f"SET search_path = {schema}")
            base = conn.execute("SELECT coalesce(max(leaf_index) + 1, 0) FROM events").fetchone()[0]
            conn.execute(f"""
                INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, tokens, raw, leaf_hash)
                SELECT {base} + g * 7 + k, 'r' || g, k + 1, CASE WHEN k = 0 THEN 'run.started' ELSE 'model.call' END,
                       to_char(timestamp '2026-11-01' + g * interval '50 seconds', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                       CASE WHEN g % 10 = 0 THEN 'imported:bot' ELSE 'agent:bot' END, (k + 1)::text,
                       CASE WHEN k > 0 THEN 100 END,
                       convert_to(CASE WHEN k = 0 AND g % 10 = 0 THEN '{{"payload":{{"imported":{{}}}}}}'
                                       ELSE '{{"payload":{{}}}}' END, 'UTF8'), '\\x00'::bytea
                FROM generate_series(0, 19999) g, generate_series(0, 6) k""")
            conn.execute("ANALYZE events")
            live = PgReader._live_sql(PgReader.__new__(PgReader))
            day = f"SELECT sum(e.tokens) FROM events e WHERE e.kind = 'model.call' AND e.ts >= %s AND {live}"
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + day, ("2026-11-11T00:00:00Z",)))
            assert "hashed SubPlan" not in plan, plan
            assert "Index Cond: ((run_id = e.run_id) AND (run_seq = 1))" in plan, plan
            # imported runs left out: 9 of 10 runs since then are live, 6 model calls of 100 tokens each
            assert conn.execute(day, ("2026-11-11T00:00:00Z",)).fetchone()[0] == sum(
                600 for g in range(20000) if g * 50 >= 10 * 86400 and g % 10)
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")



# 20,000 runs of agents a0..a6 (one in ten imported), each a run.started and 6 decisions (the last a deny),
# a run every 100 ms: the last minute holds 600 runs, 3,600 decisions. Bulk SQL, as the planner's choice
# depends on the table's statistics, which the store's API would take minutes to build up.
_RUNS, _SINCE = 20000, "2026-11-01T00:32:20.000000Z"  # the window: runs 19400..19999


def _expected_minute_calls(agent: int) -> int:
    return sum(5 for g in range(19400, _RUNS) if g % 7 == agent and g % 10)


_BULK = {
    "postgres": ("""
        INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, effect, raw, leaf_hash)
        SELECT {base} + g * 7 + k, 'r' || g, k + 1, CASE WHEN k = 0 THEN 'run.started' ELSE 'policy.decision' END,
               to_char(timestamp '2026-11-01' + g * interval '100 milliseconds', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               CASE WHEN g % 10 = 0 THEN 'imported:a' ELSE 'agent:a' END || (g % 7), (k + 1)::text,
               CASE WHEN k = 6 THEN 'deny' WHEN k > 0 THEN 'allow' END,
               convert_to(CASE WHEN k = 0 AND g % 10 = 0 THEN '{{"payload":{{"imported":{{}}}}}}'
                               ELSE '{{"payload":{{}}}}' END, 'UTF8'), '\\x00'::bytea
        FROM generate_series(0, {last}) g, generate_series(0, 6) k""", """
        INSERT INTO runs (run_id, agent, principal, started_at, leaf_index)
        SELECT 'r' || g, 'a' || (g % 7), CASE WHEN g % 10 = 0 THEN 'imported:a' ELSE 'agent:a' END || (g % 7),
               to_char(timestamp '2026-11-01' + g * interval '100 milliseconds', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               {base} + g * 7
        FROM generate_series(0, {last}) g"""),
    "sqlite": ("""
        WITH RECURSIVE g(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM g WHERE g < {last}),
                       k(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM k WHERE k < 6)
        INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, effect, raw, leaf_hash)
        SELECT {base} + g * 7 + k, 'r' || g, k + 1, CASE WHEN k = 0 THEN 'run.started' ELSE 'policy.decision' END,
               strftime('%Y-%m-%dT%H:%M:%f', '2026-11-01', '+' || (g / 10.0) || ' seconds') || '000Z',
               CASE WHEN g % 10 = 0 THEN 'imported:a' ELSE 'agent:a' END || (g % 7), k + 1,
               CASE WHEN k = 6 THEN 'deny' WHEN k > 0 THEN 'allow' END,
               CAST(CASE WHEN k = 0 AND g % 10 = 0 THEN '{{"payload":{{"imported":{{}}}}}}'
                         ELSE '{{"payload":{{}}}}' END AS BLOB), x'00'
        FROM g, k""", """
        WITH RECURSIVE g(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM g WHERE g < {last})
        INSERT INTO runs (run_id, agent, principal, started_at, leaf_index)
        SELECT 'r' || g, 'a' || (g % 7), CASE WHEN g % 10 = 0 THEN 'imported:a' ELSE 'agent:a' END || (g % 7),
               strftime('%Y-%m-%dT%H:%M:%f', '2026-11-01', '+' || (g / 10.0) || ' seconds') || '000Z',
               {base} + g * 7
        FROM g"""),
}


@pytest.mark.skipif("postgres" not in BACKENDS, reason="needs SEALBOX_TEST_POSTGRES_URL")
def test_the_agent_minute_counter_stays_indexed_on_postgres(tmp_path):
    """On PostgreSQL the per-agent calls_per_minute counter joined ``runs`` for the agent: once the window
    held many rows it was planned as a hash join over a sequential scan of ``runs`` (every run of the
    store read on each limited call). The window's decisions are read by ``events_kind_ts`` and each one's
    run by the ``runs`` primary key."""
    import psycopg

    from sealbox.store.postgres import PgReader

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_imp_live_{uuid.uuid4().hex[:16]}"
    sealbox.init_store(tmp_path / "s", postgres_url=url, schema=schema).close()
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(f"SET search_path = {schema}")
            base = conn.execute("SELECT coalesce(max(leaf_index) + 1, 0) FROM events").fetchone()[0]
            for sql in _BULK["postgres"]:
                conn.execute(sql.format(base=base, last=_RUNS - 1))
            conn.execute("ANALYZE")
            minute = PgReader._calls_minute_agent_sql(PgReader.__new__(PgReader)).replace("?", "%s")
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + minute, (_SINCE, "a3")))
            assert "Seq Scan" not in plan and "Hash" not in plan, plan
            assert "Index Cond: ((kind = 'policy.decision'::text) AND (ts >= " in plan, plan
            assert "events_kind_ts" in plan and "Index Scan using runs_pkey on runs r" in plan, plan
            assert "Index Cond: (run_id = e.run_id)" in plan, plan
            for agent in range(7):
                assert conn.execute(minute, (_SINCE, f"a{agent}")).fetchone()[0] == _expected_minute_calls(agent)
            assert _expected_minute_calls(3) == 385  # a literal: the helper counts what the SQL should
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_the_agent_minute_counter_same_answers_on_sqlite(tmp_path):
    """The same rows on SQLite: the same counts, the window read by ``events_kind_ts``, each run by its key."""
    from sealbox.store.sqlite_queries import Reader

    store = sealbox.init_store(tmp_path / "s")
    try:
        conn = store._conn()
        base = conn.execute("SELECT coalesce(max(leaf_index) + 1, 0) FROM events").fetchone()[0]
        with conn:
            for sql in _BULK["sqlite"]:
                conn.execute(sql.format(base=base, last=_RUNS - 1))
        assert conn.execute("SELECT ts FROM events WHERE run_id = 'r19400' AND run_seq = 2").fetchone()[0] == _SINCE
        minute = Reader(conn)._calls_minute_agent_sql()
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + minute, (_SINCE, "a3"))]
        assert plan == ["SEARCH e USING INDEX events_kind_ts (kind=? AND ts>?)", "CORRELATED SCALAR SUBQUERY 1",
                        "SEARCH r USING PRIMARY KEY (run_id=?)", "CORRELATED SCALAR SUBQUERY 2",
                        "SEARCH s USING INDEX events_run (run_id=? AND run_seq=?)"], plan
        for agent in range(7):
            assert conn.execute(minute, (_SINCE, f"a{agent}")).fetchone()[0] == _expected_minute_calls(agent)
    finally:
        store.close()
