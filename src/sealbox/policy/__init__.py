"""The policy engine: rules, CEL conditions, limits, fail-closed evaluation, circuit breaker.

Pure: it decides, it does not record. The recorder calls :meth:`Policy.evaluate`
for each tool call and writes the returned :class:`Decision` as the
``policy.decision`` event. See ``docs/policy.md``.
"""

from __future__ import annotations

from sealbox.policy.breaker import BreakerChange, BreakerCheck, CircuitBreaker, breaker_open_decision
from sealbox.policy.engine import ALLOW_ALL, Policy
from sealbox.policy.limits import LimitSpec, check_limits, cost_of
from sealbox.policy.model import EFFECTS, REASON_CODES, ApprovalSpec, CallContext, Decision, LimitTrip
from sealbox.policy.worker import shutdown_worker

__all__ = [
    "ALLOW_ALL",
    "Policy",
    "CallContext",
    "Decision",
    "ApprovalSpec",
    "LimitTrip",
    "LimitSpec",
    "check_limits",
    "cost_of",
    "CircuitBreaker",
    "BreakerChange",
    "BreakerCheck",
    "breaker_open_decision",
    "EFFECTS",
    "REASON_CODES",
    "shutdown_worker",
]
