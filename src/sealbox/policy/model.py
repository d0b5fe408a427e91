"""Value types of the policy engine: the call being decided and the decision.

Everything here is plain data. :class:`CallContext` is what a decision reads;
:class:`Decision` is what the recorder writes as the ``policy.decision`` event.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Effect",
    "ReasonCode",
    "EFFECTS",
    "REASON_CODES",
    "ApprovalSpec",
    "LimitTrip",
    "CallContext",
    "Decision",
]

Effect = Literal["allow", "deny", "require_approval"]
ReasonCode = Literal[
    "policy_allow",
    "policy_deny",
    "policy_require_approval",
    "no_match",
    "guardrail_error",
    "limit_exceeded",
    "approval_unavailable",
    "breaker_open",
    "grant_invalid",
    "grant_required",
    "approval_denied",
    "approval_expired",
    "approval_insufficient",
    "imported",
]
EFFECTS: tuple[str, ...] = ("allow", "deny", "require_approval")
REASON_CODES: tuple[str, ...] = (
    "policy_allow",
    "policy_deny",
    "policy_require_approval",
    "no_match",
    "guardrail_error",
    "limit_exceeded",
    "approval_unavailable",
    "breaker_open",
    "grant_invalid",
    "grant_required",
    "approval_denied",
    "approval_expired",
    "approval_insufficient",
    "imported",  # a call imported from a trace recorded elsewhere (sealbox.interop.importers)
)


@dataclass(frozen=True)
class ApprovalSpec:
    """Who must approve a ``require_approval`` call.

    Attributes:
        groups: identity groups whose members may answer (any of them).
        identities: identity ids that may answer.
        quorum: how many distinct approvers must allow (>= 1).
        expires_s: seconds after the request at which it expires unanswered.
    """

    groups: tuple[str, ...] = ()
    identities: tuple[str, ...] = ()
    quorum: int = 1
    expires_s: int = 3600

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as written in the normalized policy."""
        return {
            "groups": list(self.groups),
            "identities": list(self.identities),
            "quorum": self.quorum,
            "expires": self.expires_s,
        }


@dataclass(frozen=True)
class LimitTrip:
    """A limit the call would exceed.

    Attributes:
        limit: the limit's name, e.g. ``"max_tool_calls_per_run"`` or ``"tokens.per_day"``.
        current: the value that exceeds the bound (for call counts: including this call).
        bound: the configured bound.
    """

    limit: str
    current: int | float
    bound: int | float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the payload of ``guardrail.tripped``)."""
        return {"limit": self.limit, "current": self.current, "bound": self.bound}


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


@dataclass
class CallContext:
    """Everything a decision may read about one tool call.

    Attributes:
        server: upstream server id.
        tool: upstream tool name (not the exposed, namespaced name).
        arguments: the call's arguments (JSON-like value).
        principal: ``{"id", "role", "groups": [...], "attributes": {...}}``.
        agent: ``{"name", "attributes": {...}}``.
        run: ``{"id", "labels": {...}, "started_at": RFC 3339 str, "elapsed_s": float}``.
        usage: counters read by the store in the transaction that records the call.
            They count what happened BEFORE this call: ``tool_calls_run``,
            ``calls_minute_agent``, ``calls_minute_tool`` (sliding 60 s window),
            ``tokens_run``, ``tokens_day``, ``cost_run``, ``cost_day`` (UTC day).
            A missing counter is not enforced (e.g. tokens behind a bare gateway).
        now: the decision time, timezone-aware UTC.
        redacted: True when ``arguments`` hold redaction markers, not the content.
        grant: the grant the call names (``tool.call`` field ``grant``): an access grant id,
            or ``"implicit:<principal id>"`` when the caller named none. CEL reads it as
            ``call.grant``. ``None`` means not known, as in inputs recorded before the field
            existed: then ``call.grant`` is absent (reading it denies with
            ``guardrail_error``; ``has(call.grant)`` is false) and a ``require_grant`` rule
            denies with ``guardrail_error``.
    """

    server: str
    tool: str
    arguments: Any = None
    principal: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    now: _dt.datetime = field(default_factory=_utcnow)
    redacted: bool = False
    grant: str | None = None

    def to_inputs(self) -> dict[str, Any]:
        """The inputs of the decision, JSON-ready, to store as a blob for offline re-evaluation.

        Returns:
            ``{server, tool, arguments, principal, agent, run, usage, now, redacted}`` (``now``
            RFC 3339 UTC), plus ``grant`` when it is known (not ``None``).
        """
        now = self.now if self.now.tzinfo else self.now.replace(tzinfo=_dt.timezone.utc)
        inputs = {
            "server": self.server,
            "tool": self.tool,
            "arguments": self.arguments,
            "principal": self.principal,
            "agent": self.agent,
            "run": self.run,
            "usage": self.usage,
            "now": _utc_text(now),
            "redacted": self.redacted,
        }
        if self.grant is not None:
            inputs["grant"] = self.grant
        return inputs

    @classmethod
    def from_inputs(cls, inputs: dict[str, Any]) -> CallContext:
        """Rebuild a context from :meth:`to_inputs` output (``now`` as RFC 3339).

        Inputs recorded before ``grant`` existed have none: the context's ``grant`` is then
        ``None`` (not known), and a decision that reads it fails closed (see :class:`CallContext`).
        A stored ``grant`` is kept as it is, whatever its type: the engine denies a non-string
        one with ``guardrail_error``.

        Raises:
            KeyError: ``server`` or ``tool`` is missing.
            ValueError: ``now`` is a string that is not an RFC 3339 time.
        """
        now = inputs.get("now")
        if isinstance(now, str):
            now = _dt.datetime.fromisoformat(now.replace("Z", "+00:00"))
        return cls(
            server=inputs["server"],
            tool=inputs["tool"],
            arguments=inputs.get("arguments"),
            principal=dict(inputs.get("principal") or {}),
            agent=dict(inputs.get("agent") or {}),
            run=dict(inputs.get("run") or {}),
            usage=dict(inputs.get("usage") or {}),
            now=now or _utcnow(),
            redacted=bool(inputs.get("redacted", False)),
            grant=inputs.get("grant"),
        )


@dataclass(frozen=True)
class Decision:
    """The outcome of evaluating one tool call.

    Attributes:
        effect: ``allow``, ``deny`` or ``require_approval``.
        reason_code: why, as a closed code (a guardrail error is never a ``policy_deny``).
        rule: id of the deciding rule, or ``None`` (no match, limit, breaker).
        reason: readable explanation.
        policy_fingerprint: ``sha256:<hex>`` of the policy that decided.
        eval_us: evaluation time in microseconds.
        approval: who must approve, when the effect is ``require_approval``.
        limit: the limit tripped, when the reason is ``limit_exceeded``.
        re_evaluable: False when a condition read redacted content, so re-running
            the decision from the log would evaluate a marker, not the content.
        judged_as: for a ``resources/read``, the tool (``resource:<form>``) of the form of its URI
            that decided, when not the URI read (:func:`sealbox.policy.reads.evaluate_read`);
            None otherwise. In the payload only when set.
    """

    effect: Effect
    reason_code: ReasonCode
    rule: str | None
    reason: str
    policy_fingerprint: str
    eval_us: int = 0
    approval: ApprovalSpec | None = None
    limit: LimitTrip | None = None
    re_evaluable: bool = True
    judged_as: str | None = None

    @property
    def allowed(self) -> bool:
        """True only for ``effect == "allow"``."""
        return self.effect == "allow"

    def to_payload(self) -> dict[str, Any]:
        """JSON-ready fields of the ``policy.decision`` event."""
        return {
            "effect": self.effect,
            "reason_code": self.reason_code,
            "rule": self.rule,
            "reason": self.reason,
            "policy_fingerprint": self.policy_fingerprint,
            "eval_us": self.eval_us,
            "approval": self.approval.to_dict() if self.approval else None,
            "limit": self.limit.to_dict() if self.limit else None,
            "re_evaluable": self.re_evaluable,
            **({"judged_as": self.judged_as} if self.judged_as is not None else {}),
        }

    def denied_as(self, reason_code: ReasonCode, reason: str) -> Decision:
        """A deny copy of this decision, e.g. ``approval_unavailable`` for a ``require_approval``."""
        return dataclasses.replace(self, effect="deny", reason_code=reason_code, reason=reason)


_UTC = _dt.timezone.utc
#: ((year, month, day, hour, minute, second) of the last ``now`` :func:`_utc_text` formatted, its
#: text up to the second)
_UTC_SECOND: tuple[tuple[int, ...] | None, str] = (None, "")


def _utc_text(now: _dt.datetime) -> str:
    """``now.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")`` (the fraction left out
    when it is 0, as ``isoformat`` does), with the text up to the second formatted once per second
    and kept: ``isoformat`` formats with ``PyUnicode_FromFormat``, about 14000 instructions a call."""
    if type(now) is not _dt.datetime or now.tzinfo is not _UTC:
        return now.astimezone(_UTC).isoformat().replace("+00:00", "Z")
    key = (now.year, now.month, now.day, now.hour, now.minute, now.second)
    cached = _UTC_SECOND
    if cached[0] != key:
        cached = (key, now.replace(microsecond=0).isoformat()[:-6])  # less its "+00:00"
        globals()["_UTC_SECOND"] = cached  # one tuple, replaced whole: safe across threads
    micro = now.microsecond
    return f"{cached[1]}.{micro:06d}Z" if micro else cached[1] + "Z"
