"""Limits: pure comparisons of the store's usage counters against a policy's bounds.

The store reads the counters in the same transaction that records the call (so
they hold across restarts and across processes sharing one store); this module
only compares. Counters count what happened *before* the call being decided.
Call-count limits trip when this call would exceed the bound (``current`` then
includes this call); budgets and the run duration trip once already above the
bound. A counter absent from ``usage`` is not enforced: token and cost budgets
can only be enforced where model calls are seen (the SDK and integrations, not a
bare MCP gateway).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sealbox.errors import PolicyError
from sealbox.policy.model import CallContext, LimitTrip

if TYPE_CHECKING:
    from sealbox.policy.engine import Policy

__all__ = ["LimitSpec", "check_limits", "cost_of", "LIMIT_COUNTERS"]

# limit name -> (usage counter, counts this call?)
LIMIT_COUNTERS: dict[str, tuple[str, bool]] = {
    "max_run_seconds": ("elapsed_s", False),
    "max_tool_calls_per_run": ("tool_calls_run", True),
    "calls_per_minute.per_agent": ("calls_minute_agent", True),
    "calls_per_minute.per_tool": ("calls_minute_tool", True),
    "tokens.per_run": ("tokens_run", False),
    "tokens.per_day": ("tokens_day", False),
    "cost.per_run": ("cost_run", False),
    "cost.per_day": ("cost_day", False),
}


@dataclass(frozen=True)
class LimitSpec:
    """The ``limits:`` section; ``None`` means no bound.

    Attributes:
        max_tool_calls_per_run: tool calls in one run.
        calls_per_minute_agent: calls by one agent in a sliding 60 s window.
        calls_per_minute_tool: calls to one (server, tool) in a sliding 60 s window.
        tokens_per_run / tokens_per_day: model tokens (input + output), day in UTC.
        cost_per_run / cost_per_day: cost in ``currency``, from the policy's prices.
        max_run_seconds: wall-clock seconds since the run started.
    """

    max_tool_calls_per_run: int | None = None
    calls_per_minute_agent: int | None = None
    calls_per_minute_tool: int | None = None
    tokens_per_run: int | None = None
    tokens_per_day: int | None = None
    cost_per_run: float | None = None
    cost_per_day: float | None = None
    currency: str = "USD"
    max_run_seconds: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LimitSpec:
        """From the normalized ``limits`` mapping."""
        cpm, tok, cost = d["calls_per_minute"], d["tokens"], d["cost"]
        return cls(
            max_tool_calls_per_run=d["max_tool_calls_per_run"],
            calls_per_minute_agent=cpm["per_agent"],
            calls_per_minute_tool=cpm["per_tool"],
            tokens_per_run=tok["per_run"],
            tokens_per_day=tok["per_day"],
            cost_per_run=cost["per_run"],
            cost_per_day=cost["per_day"],
            currency=cost["currency"],
            max_run_seconds=d["max_run_seconds"],
        )

    def bounds(self) -> list[tuple[str, int | float]]:
        """``(limit name, bound)`` for each configured limit, in checking order."""
        values = {
            "max_run_seconds": self.max_run_seconds,
            "max_tool_calls_per_run": self.max_tool_calls_per_run,
            "calls_per_minute.per_agent": self.calls_per_minute_agent,
            "calls_per_minute.per_tool": self.calls_per_minute_tool,
            "tokens.per_run": self.tokens_per_run,
            "tokens.per_day": self.tokens_per_day,
            "cost.per_run": self.cost_per_run,
            "cost.per_day": self.cost_per_day,
        }
        return [(name, values[name]) for name in LIMIT_COUNTERS if values[name] is not None]


def check_limits(policy: Policy, call: CallContext) -> LimitTrip | None:
    """The first limit this call would exceed, or ``None``.

    Checking order: run duration, calls per run, calls per minute (agent, tool),
    tokens (run, day), cost (run, day). ``elapsed_s`` is read from ``call.run``;
    the others from ``call.usage``.

    Raises:
        TypeError: a counter is not a number (``Policy.evaluate`` turns this into a
            ``guardrail_error`` deny).
        ValueError: a counter is NaN (also a ``guardrail_error`` deny, never "no trip").
    """
    for name, bound in policy.limit_bounds:
        counter, counts_this_call = LIMIT_COUNTERS[name]
        source = call.run if counter == "elapsed_s" else call.usage
        used = source.get(counter) if source else None
        if used is None:
            continue
        if isinstance(used, bool) or not isinstance(used, (int, float)):
            raise TypeError(f"usage counter {counter!r} is {type(used).__name__}, not a number")
        if isinstance(used, float) and math.isnan(used):  # nan > bound is false: it would never trip
            raise ValueError(f"usage counter {counter!r} is nan, not a number")
        current = used + 1 if counts_this_call else used
        if current > bound:
            return LimitTrip(name, current, bound)
    return None


def cost_of(policy: Policy, provider_model: str, input_tokens: int, output_tokens: int) -> float:
    """Cost of a model call from the policy's ``prices`` (per 1M tokens).

    A price key is either exact (``"openai/gpt-4o"``) or a glob (``"openai/*"``);
    an exact key wins, then the first matching glob in sorted order.

    Args:
        policy: the policy holding the price table.
        provider_model: ``"provider/model"``, e.g. ``"openai/gpt-4o"``.
        input_tokens: prompt tokens.
        output_tokens: completion tokens.

    Returns:
        The cost in the policy's currency; ``0.0`` for a model without a price
        when the policy sets no cost budget.

    Raises:
        PolicyError: the policy sets a cost budget and the model has no price
            (fail closed: an unpriced call must not count as free).
    """
    price = policy.prices.get(provider_model)
    if price is None:
        for key in sorted(policy.prices):
            if fnmatch.fnmatchcase(provider_model, key):
                price = policy.prices[key]
                break
    if price is None:
        spec = policy.limits
        if spec.cost_per_run is not None or spec.cost_per_day is not None:
            raise PolicyError(f"policy {policy.name!r} sets a cost budget but has no price for {provider_model!r}")
        return 0.0
    return (input_tokens * price["input"] + output_tokens * price["output"]) / 1_000_000
