"""A ``@recorder.tool`` call whose arguments do not bind to the function's signature never reaches the
tool: it says nothing about the tool's health, so it does not count toward opening the circuit breaker
of that (server, tool), and a half-open breaker's probe taken by such a call is given back. A model
repeating hallucinated arguments must not have the valid calls of the run (or of other runs of the
recorder) denied ``breaker_open``. Real failures of the tool still open it."""

from __future__ import annotations

import asyncio

import pytest

import sealbox
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.policy import CircuitBreaker
from sealbox.recorder import Recorder, ToolDenied


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _changes(store):
    return [(e.payload["from"], e.payload["to"], e.payload["reason"], e.payload["failures"])
            for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "breaker.changed"]


def _outcomes(store, run_id):
    out = []
    for e in store.read_run(run_id):
        if e.kind == "policy.decision":
            out.append((e.payload["tool"], e.payload["reason_code"]))
        elif e.kind == "tool.result":
            out.append(("ok",) if e.payload["ok"] else ("error", e.payload["error"]["type"]))
    return out


def test_threshold_unbound_calls_leave_the_breaker_closed_and_a_valid_call_runs(store):
    rec = Recorder(store, policy=ALLOW_ALL, breaker=CircuitBreaker(threshold=3, cooldown_s=600))
    ran = []

    @rec.tool("db")
    def search(query):
        ran.append(query)
        return [query]

    with rec.run(agent="a") as run:
        for _ in range(3):
            with pytest.raises(TypeError, match="missing a required argument: 'query'"):
                search(q="x")
        assert rec.breaker.state("db", "search") == "closed"
        assert search("ok") == ["ok"]
    assert ran == ["ok"]
    assert _changes(store) == []
    assert _outcomes(store, run.run_id) == [
        ("search", "policy_allow"), ("error", "TypeError")] * 3 + [("search", "policy_allow"), ("ok",)]


def test_threshold_unbound_async_calls_leave_the_breaker_closed(store):
    rec = Recorder(store, policy=ALLOW_ALL, breaker=CircuitBreaker(threshold=2, cooldown_s=600))

    @rec.tool("web")
    async def fetch(url):
        return url

    async def main():
        with rec.run(agent="a"):
            for _ in range(2):
                with pytest.raises(TypeError, match="unexpected keyword argument 'headers'"):
                    await fetch("u", headers={})
            return await fetch("u")

    assert asyncio.run(main()) == "u"
    assert rec.breaker.state("web", "fetch") == "closed"
    assert _changes(store) == []


def test_real_failures_still_open_the_breaker(store):
    rec = Recorder(store, policy=ALLOW_ALL, breaker=CircuitBreaker(threshold=2, cooldown_s=600))

    @rec.tool("db")
    def search(query):
        raise RuntimeError("db down")

    with rec.run(agent="a"):
        with pytest.raises(TypeError):
            search(q="x")  # not counted
        for _ in range(2):
            with pytest.raises(RuntimeError, match="db down"):
                search("x")
        with pytest.raises(ToolDenied):
            search("x")
    assert _changes(store) == [("closed", "open", "failures", 2)]


def test_an_unbound_call_taking_the_half_open_probe_gives_it_back(store):
    now = [0.0]
    rec = Recorder(store, policy=ALLOW_ALL,
                   breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=lambda: now[0]))
    fail = [True]

    @rec.tool("db")
    def search(query):
        if fail[0]:
            raise RuntimeError("db down")
        return query

    with rec.run(agent="a"):
        with pytest.raises(RuntimeError):
            search("x")  # opens it
        now[0] = 11.0
        fail[0] = False
        with pytest.raises(TypeError):
            search(q="x")  # the probe, never run: given back
        assert search("y") == "y"  # probes, and closes it
    assert _changes(store) == [("closed", "open", "failures", 1), ("open", "half_open", "cooldown_elapsed", 1),
                               ("half_open", "closed", "probe_succeeded", 1)]


def test_a_half_open_probe_whose_tool_call_could_not_be_recorded_is_given_back(store):
    """The probe's gate write fails after its decision (rolled back): nothing ran, so the probe is given back;
    kept, it denied every later call of the tool ``breaker_open`` for good."""
    from sealbox.errors import RecordingError

    now = [0.0]
    rec = Recorder(store, policy=ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=10, clock=lambda: now[0]))
    ran = []

    @rec.tool("db")
    def search(query):
        ran.append(query)
        if query == "boom":
            raise RuntimeError("db down")
        return [query]

    with rec.run(agent="a") as run:
        with pytest.raises(RuntimeError):
            search("boom")  # threshold 1: opens
        now[0] = 11.0  # the cool-down has passed: the next call is the probe
        original = store.append_with

        def failing_after_build(build):  # the real write, failing once the drafts were built (rolled back)
            def build_then_fail(reader):
                build(reader)
                raise OSError("disk full")
            return original(build_then_fail)

        store.append_with = failing_after_build
        try:
            with pytest.raises(RecordingError):
                search("probe")
        finally:
            store.append_with = original
        assert rec.breaker.state("db", "search") == "open"  # its open -> half_open was not recorded: taken back
        assert search("served") == ["served"]
        assert rec.breaker.state("db", "search") == "closed"
    assert ran == ["boom", "served"]
    assert _outcomes(store, run.run_id) == [("search", "policy_allow"), ("error", "RuntimeError"),
                                            ("search", "policy_allow"), ("ok",)]
