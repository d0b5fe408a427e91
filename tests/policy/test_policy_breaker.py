"""Circuit breaker transitions with a fake clock."""

from __future__ import annotations

import pytest

from sealbox.policy import BreakerChange, CircuitBreaker, breaker_open_decision


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def seen():
    return []


@pytest.fixture
def breaker(clock, seen):
    return CircuitBreaker(threshold=3, cooldown_s=30, clock=clock, on_change=seen.append)


def test_opens_after_threshold_consecutive_failures(breaker, seen):
    assert breaker.record_failure("db", "q") is None
    assert breaker.record_failure("db", "q", kind="timeout") is None
    change = breaker.record_failure("db", "q")
    assert change == BreakerChange("db", "q", "closed", "open", "failures", 3)
    assert seen == [change]
    check = breaker.before_call("db", "q")
    assert (check.allowed, check.state, check.retry_in_s) == (False, "open", 30.0)


def test_a_success_resets_the_consecutive_count(breaker, seen):
    breaker.record_failure("db", "q")
    breaker.record_failure("db", "q")
    breaker.record_success("db", "q")
    breaker.record_failure("db", "q")
    breaker.record_failure("db", "q")
    assert breaker.state("db", "q") == "closed" and seen == []


def test_one_probe_after_cooldown_then_close_on_success(breaker, clock, seen):
    for _ in range(3):
        breaker.record_failure("db", "q")
    clock.t += 29.9
    assert breaker.before_call("db", "q").allowed is False
    clock.t += 0.1
    probe = breaker.before_call("db", "q")
    assert (probe.allowed, probe.state, probe.probe) == (True, "half_open", True)
    assert probe.change == BreakerChange("db", "q", "open", "half_open", "cooldown_elapsed", 3)
    second = breaker.before_call("db", "q")
    assert (second.allowed, second.state) == (False, "half_open")
    assert breaker.record_success("db", "q") == BreakerChange("db", "q", "half_open", "closed", "probe_succeeded", 3)
    assert breaker.before_call("db", "q").allowed is True
    assert [c.new for c in seen] == ["open", "half_open", "closed"]


def test_failed_probe_reopens_for_a_new_cooldown(breaker, clock):
    for _ in range(3):
        breaker.record_failure("db", "q")
    clock.t += 30
    breaker.before_call("db", "q")
    assert breaker.record_failure("db", "q") == BreakerChange("db", "q", "half_open", "open", "probe_failed", 4)
    clock.t += 10
    assert breaker.before_call("db", "q").retry_in_s == 20.0


def test_breakers_are_per_tool(breaker):
    for _ in range(3):
        breaker.record_failure("db", "q")
    assert breaker.before_call("db", "other").allowed is True
    assert breaker.before_call("cache", "q").allowed is True


def test_server_down_opens_all_its_known_tools_and_new_ones(breaker, clock, seen):
    breaker.before_call("db", "a")
    breaker.before_call("db", "b")
    breaker.before_call("cache", "a")
    changes = breaker.server_down("db")
    assert changes == [BreakerChange("db", "a", "closed", "open", "server_down", 0),
                       BreakerChange("db", "b", "closed", "open", "server_down", 0)]  # fmt: skip
    assert breaker.before_call("cache", "a").allowed is True
    new = breaker.before_call("db", "c")
    assert (new.allowed, new.state) == (False, "open")
    assert seen[-1] == BreakerChange("db", "c", "closed", "open", "server_down", 0)
    clock.t += 30
    assert breaker.before_call("db", "a").probe is True


def test_breaker_open_decision():
    breaker = CircuitBreaker(threshold=1, cooldown_s=5, clock=lambda: 0.0)
    breaker.record_failure("db", "q")
    d = breaker_open_decision(breaker.before_call("db", "q"), "db", "q", "sha256:" + "0" * 64)
    assert (d.effect, d.reason_code, d.rule) == ("deny", "breaker_open", None)
    assert d.reason == "circuit breaker for db/q is open; next probe in 5.0 s"


def test_invalid_failure_kind():
    with pytest.raises(ValueError):
        CircuitBreaker().record_failure("db", "q", kind="crash")


def test_healthy_breakers_are_not_kept_without_bound(clock):
    """A gateway records each resources/read URI as its own tool: a client reading distinct URIs made one breaker
    each, kept for ever (memory without bound). Past ``max_slots`` the breakers that hold nothing (closed, no
    failure counted) are dropped; failing ones keep their count, and a server down still opens every tool of it."""
    breaker = CircuitBreaker(threshold=3, cooldown_s=30, clock=clock)
    breaker.max_slots = 8
    breaker.record_failure("web", "resource:bad")
    breaker.record_failure("web", "resource:bad")
    for i in range(1000):
        assert breaker.before_call("web", f"resource:r{i}").allowed
        breaker.record_success("web", f"resource:r{i}")
    assert len(breaker._slots) <= 2 * breaker.max_slots
    assert breaker.record_failure("web", "resource:bad") == BreakerChange(
        "web", "resource:bad", "closed", "open", "failures", 3)  # its two earlier failures were kept
    breaker.server_down("web")
    dropped = breaker.before_call("web", "resource:r0")
    assert (dropped.allowed, dropped.state) == (False, "open")


def test_breakers_counting_a_failure_are_not_kept_without_bound(clock):
    """A client reading distinct URIs of a resource template that each fail once (an upstream answering an
    unknown file with code 0 or -32603, a failure) made one breaker each holding one failure, never dropped:
    memory without bound again. Past ``max_slots`` the closed breakers counting failures are dropped too,
    those that failed longest ago first; an open breaker, a half-open one and its probe are never dropped."""
    breaker = CircuitBreaker(threshold=3, cooldown_s=30, clock=clock)
    breaker.max_slots = 8
    breaker.record_failure("web", "resource:open")  # opened: kept whatever the number of breakers
    breaker.record_failure("web", "resource:open")
    breaker.record_failure("web", "resource:open")
    breaker.record_failure("web", "resource:probe")
    breaker.record_failure("web", "resource:probe")
    breaker.record_failure("web", "resource:probe")
    clock.t += 31
    assert breaker.before_call("web", "resource:probe").probe  # half-open, its probe in flight
    for i in range(1000):
        assert breaker.before_call("web", f"resource:missing{i}").allowed
        breaker.record_failure("web", f"resource:missing{i}")
        if i == 995:
            breaker.record_failure("web", "resource:flaky")  # a tool that failed lately keeps its count
    assert len(breaker._slots) <= 2 * breaker.max_slots
    assert breaker.state("web", "resource:open") == "open"
    assert (breaker.state("web", "resource:probe"), breaker._slots[("web", "resource:probe")].probing) == (
        "half_open", True)
    assert breaker.record_failure("web", "resource:probe").reason == "probe_failed"
    assert breaker._slots[("web", "resource:missing999")].failures == 1  # the latest failures are kept
    assert breaker.record_failure("web", "resource:flaky") is None
    assert breaker.record_failure("web", "resource:flaky").reason == "failures"  # its third failure
    assert len(breaker._slots) <= 2 * breaker.max_slots


def test_only_the_probes_outcome_moves_a_half_open_breaker():
    """Another call's outcome (one let through while closed, one held for an approval: ticket 0, or a probe
    given back: a stale ticket) is not counted while the breaker is half-open."""
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=1, cooldown_s=10, clock=clock)
    breaker.record_failure("db", "q")
    clock.t += 10
    first = breaker.before_call("db", "q")
    assert (first.probe, first.ticket > 0) == (True, True)
    breaker.record_not_run("db", "q", ticket=first.ticket)  # given back
    probe = breaker.before_call("db", "q")
    assert probe.ticket not in (0, first.ticket)
    assert breaker.record_failure("db", "q", ticket=0) is None
    assert breaker.record_success("db", "q", ticket=first.ticket) is None
    breaker.record_not_run("db", "q", ticket=0)  # not the probe: does not give it back
    assert breaker.before_call("db", "q").allowed is False
    assert breaker.state("db", "q") == "half_open"
    assert breaker.record_success("db", "q", ticket=probe.ticket) == BreakerChange(
        "db", "q", "half_open", "closed", "probe_succeeded", 1)


def test_a_probe_given_back_early_still_moves_the_breaker_while_no_other_call_probed():
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=1, cooldown_s=10, clock=clock)
    breaker.record_failure("db", "q")
    clock.t += 10
    early = breaker.before_call("db", "q")
    breaker.record_not_run("db", "q", ticket=early.ticket)  # handed back while it waits (the gateway: the client)
    assert breaker.record_failure("db", "q", ticket=early.ticket) == BreakerChange(
        "db", "q", "half_open", "open", "probe_failed", 2)
