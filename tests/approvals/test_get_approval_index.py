"""get_approval, called on every poll of a held call (gateway) or a blocking agent (pause.await_approval),
finds its request through the events_run_kind index (run_id, kind), not by reading every
approval.requested row of the store and parsing its JSON."""

from __future__ import annotations

import os
import sqlite3
import uuid

import pytest
from approval_helpers import policy

import sealbox
from sealbox.approvals import ApprovalError, ApprovalPending, get_approval
from sealbox.recorder import Recorder
from sealbox.store import sqlite as sqlite_mod


@pytest.fixture
def traced(monkeypatch):
    """Every SQL statement the store's connections run, with its parameters bound."""
    seen: list[str] = []
    real = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite_mod.sqlite3, "connect", connect)
    return seen


def _requests(store, n):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    out = []
    for i in range(n):
        try:
            with rec.run(agent="bot") as run:
                run.call_tool("db", "write_query", {"sql": f"DELETE {i}"}, lambda sql: sql)
        except ApprovalPending as p:
            out.append((p.run_id, p.approval_id))
    return out


def _request_lookups(seen):
    return [s for s in seen if "approval.requested" in s and s.lstrip().upper().startswith("SELECT")]


def test_a_poll_finds_its_request_through_the_run_index(tmp_path, traced):
    store = sealbox.init_store(tmp_path / "store")
    try:
        reqs = _requests(store, 8)
        run_id, aid = reqs[3]
        traced.clear()
        state = get_approval(store, aid, run_id=run_id)
        assert (state.approval_id, state.run_id, state.status) == (aid, run_id, "pending")
        [sql] = _request_lookups(traced)
        conn = sqlite3.connect(tmp_path / "store" / "sealbox.db")
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
        conn.close()
        assert plan[0].startswith("SEARCH events USING INDEX events_run_kind (run_id=? AND kind=?)"), plan
        assert not any("events_kind_ts" in line or line.startswith("SCAN") for line in plan), plan
        # the same state as a lookup without the run (every request of the store read)
        assert get_approval(store, aid) == state
    finally:
        store.close()


def test_a_wrong_run_hint_still_finds_the_request_and_an_unknown_id_is_refused(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    try:
        (run_a, aid_a), (run_b, _) = _requests(store, 2)
        assert get_approval(store, aid_a, run_id=run_b).run_id == run_a
        with pytest.raises(ApprovalError) as exc:
            get_approval(store, "apr_" + "0" * 32, run_id=run_a)
        assert exc.value.code == "unknown_approval"
    finally:
        store.close()


def test_pause_and_claim_poll_with_the_run(tmp_path, traced):
    """claim (every poll of a blocking agent once decided, and of a gateway hold) reads through the run index."""
    from sealbox.pause import claim

    store = sealbox.init_store(tmp_path / "store")
    try:
        rec = Recorder(store, policy=policy(), approvals="suspend")
        (run_id, aid), = _requests(store, 1)
        run = rec._attach(run_id)  # (continue_run refuses a run waiting for an approval)
        traced.clear()
        assert claim(run, aid) is None  # still pending
        lookups = _request_lookups(traced)
        assert lookups and all(f"run_id = '{run_id}'" in s for s in lookups), lookups
    finally:
        store.close()


@pytest.mark.skipif(not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="needs SEALBOX_TEST_POSTGRES_URL")
def test_on_postgresql_a_poll_reads_through_the_run_index(tmp_path, monkeypatch):
    """The same lookup in PostgreSQL's SQL can use events_run_kind (run_id, kind): with sequential scans
    off (a test store is too small for the planner to prefer an index), that is the index it uses."""
    psycopg = pytest.importorskip("psycopg")
    from sealbox.store import postgres

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_apr_{uuid.uuid4().hex[:16]}"
    seen: list[tuple[str, tuple]] = []
    real = postgres._Conn.execute

    def execute(self, sql, params=()):
        if params and params[0] == ["approval.requested"]:
            seen.append((sql, tuple(params)))
        return real(self, sql, params)

    store = sealbox.init_store(tmp_path / "store", postgres_url=url, schema=schema)
    try:
        reqs = _requests(store, 4)
        run_id, aid = reqs[2]
        monkeypatch.setattr(postgres._Conn, "execute", execute)
        state = get_approval(store, aid, run_id=run_id)
        monkeypatch.setattr(postgres._Conn, "execute", real)
        assert (state.approval_id, state.run_id, state.status) == (aid, run_id, "pending")
        [(sql, params)] = seen
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction(force_rollback=True):
            conn.execute(f"SET search_path TO {schema}")
            conn.execute("SET LOCAL enable_seqscan = off")
            # events_approval (approval id; a full scan of it reads every request) costs the same as
            # events_run_kind on a 4-row table without statistics: set aside here, rolled back below
            conn.execute("DROP INDEX events_approval")
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + postgres._q(sql), params).fetchall())
        assert "events_run_kind" in plan, plan
        assert "events_kind_ts" not in plan, plan
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
