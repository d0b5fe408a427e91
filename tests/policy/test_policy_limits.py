"""Limits: each one trips with exact LimitTrip values; costs from the price table."""

from __future__ import annotations

import pytest
from policy_helpers import call, load, run_if_allowed

from sealbox.errors import PolicyError
from sealbox.policy import ALLOW_ALL, LimitTrip, check_limits, cost_of

LIMITS = """
version: 1
rules:
  - id: allow-all
    effect: allow
limits:
  max_tool_calls_per_run: 50
  calls_per_minute: {per_agent: 60, per_tool: 30}
  tokens: {per_run: 200000, per_day: 2000000}
  cost: {per_run: 5.0, per_day: 50.0, currency: USD}
  max_run_seconds: 3600
prices:
  "openai/gpt-4o": {input: 2.5, output: 10}
  "openai/*": {input: 1, output: 2}
"""


@pytest.fixture
def policy(tmp_path):
    return load(tmp_path, LIMITS)


def test_under_every_limit_the_rules_decide(policy):
    usage = {"tool_calls_run": 49, "calls_minute_agent": 59, "calls_minute_tool": 29, "tokens_run": 200000,
             "tokens_day": 2000000, "cost_run": 5.0, "cost_day": 50.0}  # fmt: skip
    c = call(usage=usage, run={"elapsed_s": 3600})
    assert check_limits(policy, c) is None
    assert policy.evaluate(c).rule == "allow-all"


@pytest.mark.parametrize(
    ("usage", "elapsed", "trip"),
    [
        ({"tool_calls_run": 50}, 1.0, LimitTrip("max_tool_calls_per_run", 51, 50)),
        ({"calls_minute_agent": 60}, 1.0, LimitTrip("calls_per_minute.per_agent", 61, 60)),
        ({"calls_minute_tool": 30}, 1.0, LimitTrip("calls_per_minute.per_tool", 31, 30)),
        ({"tokens_run": 200001}, 1.0, LimitTrip("tokens.per_run", 200001, 200000)),
        ({"tokens_day": 2000001}, 1.0, LimitTrip("tokens.per_day", 2000001, 2000000)),
        ({"cost_run": 5.01}, 1.0, LimitTrip("cost.per_run", 5.01, 5.0)),
        ({"cost_day": 50.5}, 1.0, LimitTrip("cost.per_day", 50.5, 50.0)),
        ({}, 3600.5, LimitTrip("max_run_seconds", 3600.5, 3600)),
    ],
)
def test_each_limit_trips_with_exact_values(policy, tool, usage, elapsed, trip):
    c = call(usage=usage, run={"elapsed_s": elapsed})
    assert check_limits(policy, c) == trip
    d = policy.evaluate(c)
    assert (d.effect, d.reason_code, d.rule, d.limit) == ("deny", "limit_exceeded", None, trip)
    assert d.reason == f"limit {trip.limit} exceeded: {trip.current} > {trip.bound}"
    assert d.to_payload()["limit"] == {"limit": trip.limit, "current": trip.current, "bound": trip.bound}
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_first_limit_in_checking_order_is_reported(policy):
    c = call(usage={"tool_calls_run": 50, "cost_day": 99.0}, run={"elapsed_s": 1})
    assert check_limits(policy, c) == LimitTrip("max_tool_calls_per_run", 51, 50)


def test_missing_counters_are_not_enforced(policy):
    assert check_limits(policy, call(usage={}, run={})) is None


def test_a_counter_of_the_wrong_type_is_a_guardrail_error(policy, tool):
    d = policy.evaluate(call(usage={"tokens_run": "lots"}))
    assert (d.effect, d.reason_code) == ("deny", "guardrail_error")
    assert d.reason == "limit check failed: usage counter 'tokens_run' is str, not a number"
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_cost_from_the_price_table(policy):
    assert cost_of(policy, "openai/gpt-4o", 1_000_000, 100_000) == 3.5
    assert cost_of(policy, "openai/gpt-4o-mini", 500_000, 500_000) == 1.5  # glob price
    with pytest.raises(PolicyError, match="has no price for 'anthropic/claude'"):
        cost_of(policy, "anthropic/claude", 1, 1)


def test_unpriced_model_costs_nothing_without_a_cost_budget():
    assert cost_of(ALLOW_ALL, "anthropic/claude", 1000, 1000) == 0.0


@pytest.mark.parametrize("counter", ["cost_run", "cost_day", "tokens_run"])
def test_a_nan_usage_counter_denies_with_guardrail_error(policy, tool, counter):
    """nan > bound is false: a NaN counter used to pass every limit."""
    d = policy.evaluate(call(usage={counter: float("nan")}, run={"elapsed_s": 1.0}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", None)
    assert d.reason == f"limit check failed: usage counter {counter!r} is nan, not a number"
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_a_nan_elapsed_time_denies_with_guardrail_error(policy):
    d = policy.evaluate(call(run={"elapsed_s": float("nan")}))
    assert (d.reason_code, d.reason) == ("guardrail_error", "limit check failed: usage counter 'elapsed_s' is nan, not a number")
