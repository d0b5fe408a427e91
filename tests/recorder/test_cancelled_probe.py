"""A call cancelled while the tool runs (an asyncio task cancelled by a timeout, ``asyncio.wait_for``; a
KeyboardInterrupt) says nothing of the tool's health: it is not counted by the circuit breaker, and a
half-open breaker's probe it took is given back. Kept, the probe denied every later call of the tool
``breaker_open`` ("half_open") until the process restarted."""

from __future__ import annotations

import asyncio

import pytest

import sealbox
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.policy import CircuitBreaker
from sealbox.recorder import Recorder


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _changes(store):
    return [(e.payload["from"], e.payload["to"], e.payload["reason"])
            for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "breaker.changed"]


def _outcomes(store, run_id):
    return [(e.payload["reason_code"],) if e.kind == "policy.decision" else
            (e.payload["ok"], (e.payload.get("error") or {}).get("type"))
            for e in store.read_run(run_id) if e.kind in ("policy.decision", "tool.result")]


def _broken(**_):
    raise RuntimeError("db down")


def test_a_cancelled_async_probe_is_given_back(store):
    clock = Clock()
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=30, clock=clock))

    running = asyncio.Event()

    async def slow(**_):
        running.set()
        await asyncio.sleep(10)

    async def give_up_once_running(call):
        # as asyncio.wait_for(call, timeout) does on its timeout, but once the tool runs: a fixed 50 ms could
        # run out while the probe's gate was still being written (an fsync on a loaded host), which
        # cancels another moment of the call than the one this test is about
        task = asyncio.ensure_future(call)
        await asyncio.wait_for(running.wait(), 60)
        task.cancel()
        await task

    async def agent(run):
        with pytest.raises(RuntimeError):
            await run.acall_tool("db", "query", {}, _broken)  # opens the breaker
        clock.t += 31
        with pytest.raises(asyncio.CancelledError):  # the probe: the agent gives up on it while the tool runs
            await give_up_once_running(run.acall_tool("db", "query", {}, slow))
        return await run.acall_tool("db", "query", {}, lambda **_: "rows")  # probes again

    with rec.run(agent="bot") as run:
        assert asyncio.run(agent(run)) == "rows"
    assert _outcomes(store, run.run_id) == [
        ("policy_allow",), (False, "RuntimeError"), ("policy_allow",), (False, "CancelledError"),
        ("policy_allow",), (True, None)]
    assert _changes(store) == [("closed", "open", "failures"), ("open", "half_open", "cooldown_elapsed"),
                               ("half_open", "closed", "probe_succeeded")]


def test_an_interrupted_probe_is_given_back_and_an_interrupted_call_is_not_counted(store):
    clock = Clock()
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=2, cooldown_s=30, clock=clock))

    def interrupted(**_):
        raise KeyboardInterrupt

    with rec.run(agent="bot") as run:
        for _ in range(3):  # never a failure: the breaker stays closed
            with pytest.raises(KeyboardInterrupt):
                run.call_tool("db", "query", {}, interrupted)
        for _ in range(2):
            with pytest.raises(RuntimeError):
                run.call_tool("db", "query", {}, _broken)
        clock.t += 31
        with pytest.raises(KeyboardInterrupt):  # the probe
            run.call_tool("db", "query", {}, interrupted)
        assert run.call_tool("db", "query", {}, lambda **_: "rows") == "rows"
    assert _changes(store) == [("closed", "open", "failures"), ("open", "half_open", "cooldown_elapsed"),
                               ("half_open", "closed", "probe_succeeded")]
