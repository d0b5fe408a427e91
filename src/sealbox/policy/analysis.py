"""Tools for policy authors: warnings about rules that can never match, and explanations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sealbox.policy.engine import Policy, _Failure, _State
from sealbox.policy.limits import check_limits
from sealbox.policy.model import CallContext, Decision
from sealbox.policy.rules import GlobSet, Rule

__all__ = ["PolicyWarning", "lint", "explain"]


@dataclass(frozen=True)
class PolicyWarning:
    """A warning about a policy. ``rule`` is the rule id, ``line`` its 1-based line."""

    rule: str
    line: int | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"rule": self.rule, "line": self.line, "message": self.message}


def _covers_attrs(wide: dict[str, list[Any]], narrow: dict[str, list[Any]]) -> bool:
    return all(k in narrow and set(map(repr, narrow[k])) <= set(map(repr, v)) for k, v in wide.items())


def _covers_part(wide: dict[str, Any], narrow: dict[str, Any]) -> bool:
    for key, want in wide.items():
        if key not in narrow:
            return False
        have = narrow[key]
        if isinstance(want, GlobSet):
            if not want.covers(have):
                return False
        elif isinstance(want, frozenset):
            if not have <= want:
                return False
        elif not _covers_attrs(want, have):
            return False
    return True


def shadows(earlier: Rule, later: Rule) -> bool:
    """True when ``earlier`` has no condition and matches every call ``later`` matches."""
    return (
        earlier.condition is None
        and earlier.servers.covers(later.servers)
        and earlier.tools.covers(later.tools)
        and _covers_part(earlier.principal, later.principal)
        and _covers_part(earlier.agent, later.agent)
        and _covers_attrs(earlier.labels, later.labels)
    )


def lint(policy: Policy) -> list[PolicyWarning]:
    """Warnings for rules that can never match (shadowed, or a constant-false condition)."""
    out = []
    for i, rule in enumerate(policy.rules):
        shadow = next((e for e in policy.rules[:i] if shadows(e, rule)), None)
        if shadow is not None:
            out.append(PolicyWarning(rule.id, rule.line,
                                f"rule {rule.id!r} can never match: rule {shadow.id!r} (line {shadow.line}) "
                                "matches every call it matches and has no condition"))  # fmt: skip
            continue
        cond = rule.condition
        if cond is not None and not cond.roots and not cond.program.variables():
            try:
                value = cond.program.execute()
            except Exception:
                value = None
            if value is False:
                out.append(PolicyWarning(rule.id, rule.line, f"rule {rule.id!r} can never match: its condition is always false"))
    return out


def _effect(rule: Rule, decision: Decision) -> str:
    """What the deciding rule does: its effect, or the deny of a ``require_grant`` rule."""
    if rule.require_grant and decision.rule == rule.id and decision.reason_code in ("grant_required", "guardrail_error"):
        return f"requires an explicit grant: deny ({decision.reason_code})"
    return f"effect {rule.effect}" + ("; explicit grant named" if rule.require_grant else "")


def explain(policy: Policy, call: CallContext) -> tuple[Decision, list[dict[str, Any]]]:
    """Decide ``call`` and say, for every rule, whether it was examined and why it matched or not.

    Returns:
        ``(decision, steps)``; each step is ``{"rule", "line", "outcome", "why"}`` with
        outcome ``not_candidate``, ``no_match``, ``condition_false``, ``error``,
        ``decides`` or ``not_reached``.
    """
    decision = policy.evaluate(call)
    steps: list[dict[str, Any]] = []
    trip = None
    try:
        trip = check_limits(policy, call) if policy.limit_bounds else None
    except Exception:
        trip = None
    decided = trip is not None
    state = _State(call)
    candidates = set(id(r) for r in policy.candidates(call.server, call.tool))
    for rule in policy.rules:
        step = {"rule": rule.id, "line": rule.line}
        if decided:
            step.update(outcome="not_reached", why="an earlier step decided")
        elif id(rule) not in candidates:
            step.update(outcome="not_candidate", why=_not_candidate(rule, call))
        elif (why := rule.mismatch(call)) is not None:
            step.update(outcome="no_match", why=why)
        elif rule.condition is not None:
            try:
                ok = policy.run_condition(rule.condition, state)
            except _Failure as exc:
                step.update(outcome="error", why=str(exc))
                decided = True
            else:
                if ok:
                    step.update(outcome="decides", why=f"condition true; {_effect(rule, decision)}")
                    decided = True
                else:
                    step.update(outcome="condition_false", why=f"condition false: {rule.condition.source}")
        else:
            step.update(outcome="decides", why=f"matches, no condition; {_effect(rule, decision)}")
            decided = True
        steps.append(step)
    return decision, steps


def _not_candidate(rule: Any, call: Any) -> str:
    """Why ``rule`` is no candidate for ``call``, in text: the server and/or the tool it does not match
    (``server (none) is not db; tool 'x' is none of read_query, write_query``)."""
    def names(patterns: Any) -> str:
        return ", ".join(str(p) for p in patterns)

    parts = []
    if not rule.servers(call.server):
        server = repr(call.server) if call.server else "(none)"
        many = len(tuple(rule.servers.patterns)) > 1
        parts.append(f"server {server} is {'none of' if many else 'not'} {names(rule.servers.patterns)}")
    if not rule.tools(call.tool):
        many = len(tuple(rule.tools.patterns)) > 1
        parts.append(f"tool {call.tool!r} is {'none of' if many else 'not'} {names(rule.tools.patterns)}")
    return "; ".join(parts) or f"server/tool {call.server or '(none)'}/{call.tool} is not matched"
