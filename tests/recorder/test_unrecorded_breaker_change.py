"""A breaker change made by a call whose ``tool.call`` write then failed (rolled back: nothing ran) is taken
back, so the record never misses a state the breaker acted in ("no record, no action"). The half-open probe's
``open`` -> ``half_open`` was dropped with the failed write while the breaker stayed half-open, so the record
went from ``open`` straight to a ``half_open`` -> ``closed`` it never entered; a tool first seen during a
server's cool-down stayed open, denying its calls ``breaker_open`` with no ``breaker.changed`` opening it.
The breaker now goes back to the state its record shows, and the call after makes (and records) the change.

Real stores (SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set), their write failing after the
call's drafts were built (the transaction rolled back)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import uuid

import pytest

import sealbox
from sealbox.errors import RecordingError
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.policy import CircuitBreaker
from sealbox.recorder import Recorder, ToolDenied

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_breaker_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


def _changes(store):
    return [(e.payload["server"], e.payload["tool"], e.payload["from"], e.payload["to"], e.payload["reason"])
            for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "breaker.changed"]


def _outcomes(store, run_id):
    return [(e.payload["tool"], e.payload["reason_code"]) if e.kind == "policy.decision" else
            (e.payload["ok"],) for e in store.read_run(run_id) if e.kind in ("policy.decision", "tool.result")]


class _FailingWrite:
    """The store's real write, failing once the drafts were built (the transaction rolls back)."""

    def __init__(self, store):
        self.store, self.original = store, store.append_with

    def __enter__(self):
        def failing_after_build(build):
            def build_then_fail(reader):
                build(reader)
                raise OSError("disk full")
            return self.original(build_then_fail)
        self.store.append_with = failing_after_build

    def __exit__(self, *exc):
        self.store.append_with = self.original


def _broken(**_):
    raise RuntimeError("db down")


def test_the_probe_whose_tool_call_was_not_written_leaves_the_breaker_open(store):
    now = [0.0]
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=lambda: now[0]))
    with rec.run(agent="a") as run:
        with pytest.raises(RuntimeError):
            run.call_tool("db", "query", {}, _broken)  # threshold 1: opens
        now[0] = 11.0  # the cool-down has passed: the next call is the probe
        with _FailingWrite(store), pytest.raises(RecordingError):
            run.call_tool("db", "query", {}, lambda **_: "never")
        assert rec.breaker.state("db", "query") == "open"  # as the record says (was half_open, not recorded)
        assert run.call_tool("db", "query", {}, lambda **_: "rows") == "rows"  # probes, closes
        assert rec.breaker.state("db", "query") == "closed"
    assert _changes(store) == [("db", "query", "closed", "open", "failures"),
                               ("db", "query", "open", "half_open", "cooldown_elapsed"),
                               ("db", "query", "half_open", "closed", "probe_succeeded")]
    assert _outcomes(store, run.run_id) == [("query", "policy_allow"), (False,), ("query", "policy_allow"), (True,)]


def test_the_async_probe_whose_tool_call_was_not_written_leaves_the_breaker_open(store):
    now = [0.0]
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=lambda: now[0]))

    async def agent(run):
        with pytest.raises(RuntimeError):
            await run.acall_tool("db", "query", {}, _broken)
        now[0] = 11.0
        with _FailingWrite(store), pytest.raises(RecordingError):
            await run.acall_tool("db", "query", {}, lambda **_: "never")
        assert rec.breaker.state("db", "query") == "open"
        now[0] = 12.0  # still past the cool-down: the next call probes at once
        return await run.acall_tool("db", "query", {}, lambda **_: "rows")

    with rec.run(agent="a") as run:
        assert asyncio.run(agent(run)) == "rows"
    assert _changes(store) == [("db", "query", "closed", "open", "failures"),
                               ("db", "query", "open", "half_open", "cooldown_elapsed"),
                               ("db", "query", "half_open", "closed", "probe_succeeded")]


def test_a_tool_first_seen_while_its_server_is_down_is_opened_by_the_call_that_is_recorded(store):
    now = [0.0]
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=5, cooldown_s=10, clock=lambda: now[0]))

    def down(**_):
        raise ConnectionError("refused")

    with rec.run(agent="a") as run:
        with pytest.raises(ConnectionError):
            run.call_tool("db", "query", {}, down)  # the server is down: its tools open for 10 s
        now[0] = 1.0
        with _FailingWrite(store), pytest.raises(RecordingError):
            run.call_tool("db", "insert", {}, lambda **_: "never")  # first seen: opened, but not recorded
        assert rec.breaker.state("db", "insert") == "closed"  # as the record says: never seen
        with pytest.raises(ToolDenied):
            run.call_tool("db", "insert", {}, lambda **_: "never")  # opened again, now recorded with its deny
        assert rec.breaker.state("db", "insert") == "open"
    assert _changes(store) == [("db", "query", "closed", "open", "server_down"),
                               ("db", "insert", "closed", "open", "server_down")]
    assert _outcomes(store, run.run_id) == [("query", "policy_allow"), (False,), ("insert", "breaker_open")]


class _FailingResultWrite(_FailingWrite):
    """The store's real write of a ``tool.result``, failing once its drafts were built (rolled back)."""

    def __enter__(self):
        def failing_result(build, sync=True):
            def build_then_fail(reader):
                drafts = build(reader)
                if any(d.kind == "tool.result" for d in drafts):
                    raise OSError("disk full")
                return drafts
            return self.original(build_then_fail, sync=sync)
        self.store.append_with = failing_result


def test_a_change_whose_tool_result_was_not_written_is_written_with_the_next_call(store):
    """The probe ran and succeeded (the breaker closed), but its ``tool.result`` write failed: the change
    stands (the tool answered), and its ``breaker.changed`` is written with the next call's events; it was
    dropped, so the record went from ``half_open`` to the next ``closed`` -> ``open``."""
    now = [0.0]
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=lambda: now[0]))
    with rec.run(agent="a") as run:
        with pytest.raises(RuntimeError):
            run.call_tool("db", "query", {}, _broken)  # opens
        now[0] = 11.0
        with _FailingResultWrite(store), pytest.raises(RecordingError):
            run.call_tool("db", "query", {}, lambda **_: "rows")  # the probe runs, closes; its result is lost
        assert rec.breaker.state("db", "query") == "closed"
        with pytest.raises(RuntimeError):
            run.call_tool("db", "query", {}, _broken)  # opens again
    assert _changes(store) == [("db", "query", "closed", "open", "failures"),
                               ("db", "query", "open", "half_open", "cooldown_elapsed"),
                               ("db", "query", "half_open", "closed", "probe_succeeded"),
                               ("db", "query", "closed", "open", "failures")]
    assert _outcomes(store, run.run_id) == [("query", "policy_allow"), (False,), ("query", "policy_allow"),
                                            ("query", "policy_allow"), (False,)]


def test_a_change_whose_tool_result_was_not_written_is_written_when_the_run_ends(store):
    """The last call of a run was the probe whose ``tool.result`` write failed: no later call carried its
    queued ``breaker.changed``, so it was lost when the process exited (the record left the breaker
    half-open for ever). The run's end writes it."""
    now = [0.0]
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=lambda: now[0]))
    with rec.run(agent="a") as run:
        with pytest.raises(RuntimeError):
            run.call_tool("db", "query", {}, _broken)  # opens
        now[0] = 11.0
        with _FailingResultWrite(store), pytest.raises(RecordingError):
            run.call_tool("db", "query", {}, lambda **_: "rows")  # the probe runs, closes; its result is lost
    assert _changes(store) == [("db", "query", "closed", "open", "failures"),
                               ("db", "query", "open", "half_open", "cooldown_elapsed"),
                               ("db", "query", "half_open", "closed", "probe_succeeded")]
    assert rec._take_unwritten() == []
