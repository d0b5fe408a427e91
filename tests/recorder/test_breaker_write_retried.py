"""A ``tool.call`` write that PostgreSQL retries (the server ended the connection inside the transaction,
before its COMMIT: nothing committed; the write is made again on a new connection, its drafts built again)
must carry the breaker changes its first build made. The first build took the half-open probe (open ->
half_open, probing); the second found the probe "in flight", so the call was denied ``breaker_open``, the
``open -> half_open`` was in no record, and the probe was never given back: every later call of the tool was
denied, for ever. The retried build now starts from the breaker state the record shows.

Real PostgreSQL (SEALBOX_TEST_POSTGRES_URL); the connection ended by pg_terminate_backend."""

from __future__ import annotations

import os
import uuid

import pytest

import sealbox
import sealbox.errors
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.policy import CircuitBreaker
from sealbox.recorder import Recorder

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL not set")


def _changes(store):
    return [(e.payload["tool"], e.payload["from"], e.payload["to"], e.payload["reason"])
            for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "breaker.changed"]


def _broken(**_):
    raise RuntimeError("db down")


def test_a_retried_tool_call_write_records_the_probe_and_lets_it_run(tmp_path):
    import psycopg

    store = sealbox.init_store(tmp_path / "s", postgres_url=URL, schema=f"sbt_retry_{uuid.uuid4().hex[:16]}")
    now, kill_at = [0.0], [None]

    def clock():
        if kill_at[0] is not None and now[0] >= kill_at[0]:
            kill_at[0] = None  # once: inside the gate's write transaction, after its reads
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (store._pg().info.backend_pid,))
        return now[0]

    try:
        rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=clock))
        with rec.run(agent="a", run_id="r1") as run:
            with pytest.raises(RuntimeError):
                run.call_tool("db", "query", {}, _broken)  # threshold 1: opens
            now[0], kill_at[0] = 11.0, 11.0  # cool-down over: this call is the probe; its write is retried
            assert run.call_tool("db", "query", {}, lambda: "ok") == "ok"
            assert run.call_tool("db", "query", {}, lambda: "again") == "again"
        assert _changes(store) == [("query", "closed", "open", "failures"),
                                   ("query", "open", "half_open", "cooldown_elapsed"),
                                   ("query", "half_open", "closed", "probe_succeeded")]
        assert [e.payload["reason_code"] for e in store.read_run("r1") if e.kind == "policy.decision"] == [
            "policy_allow", "policy_allow", "policy_allow"]
    finally:
        store.close()


def test_a_retried_tool_call_write_carries_the_changes_queued_by_a_lost_tool_result(tmp_path):
    # the first build took the queue of breaker.changed whose tool.result write had failed; the retried
    # build found it empty, so the committed write carried none of them: lost from the record for ever
    import psycopg

    store = sealbox.init_store(tmp_path / "s", postgres_url=URL, schema=f"sbt_retry_{uuid.uuid4().hex[:16]}")
    now, kill_at = [0.0], [None]

    def clock():
        if kill_at[0] is not None and now[0] >= kill_at[0]:
            kill_at[0] = None
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (store._pg().info.backend_pid,))
        return now[0]

    original = store.append_with

    def failing_append(build, sync=True):  # the real write of the tool.result, failing (rolled back)
        def build_then_fail(reader):
            drafts = build(reader)
            if any(d.kind == "tool.result" for d in drafts):
                raise OSError("disk full")
            return drafts
        return original(build_then_fail, sync=sync)

    try:
        rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=clock))
        with rec.run(agent="a", run_id="r1") as run:
            for tool in ("query", "insert"):
                with pytest.raises(RuntimeError):
                    run.call_tool("db", tool, {}, _broken)  # threshold 1: opens
            now[0] = 11.0
            store.append_with = failing_append
            with pytest.raises(sealbox.errors.RecordingError):
                run.call_tool("db", "query", {}, lambda: "rows")  # the probe closes; its tool.result is lost
            store.append_with = original
            kill_at[0] = 11.0  # insert's probe: its write (carrying the queued change) is retried
            assert run.call_tool("db", "insert", {}, lambda: "ok") == "ok"
        assert _changes(store) == [("query", "closed", "open", "failures"),
                                   ("insert", "closed", "open", "failures"),
                                   ("query", "open", "half_open", "cooldown_elapsed"),
                                   ("query", "half_open", "closed", "probe_succeeded"),
                                   ("insert", "open", "half_open", "cooldown_elapsed"),
                                   ("insert", "half_open", "closed", "probe_succeeded")]
    finally:
        store.append_with = original
        store.close()
