"""Re-run recorded decisions offline, from the log alone.

Every ``policy.decision`` keeps the inputs it was evaluated on (a blob holding
:meth:`CallContext.to_inputs`). :func:`reevaluate` rebuilds the call context from
them and evaluates a policy again: with the same policy the outcome must be the
same (effect, rule, reason code); with another policy it says what would have
changed. A decision whose inputs were redacted is reported as not re-evaluable,
never re-run on a redaction marker.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

from sealbox.policy.engine import Policy
from sealbox.policy.model import CallContext, Decision
from sealbox.policy.reads import evaluate_read, judged_text

__all__ = ["Reevaluation", "reevaluate", "reevaluate_run"]


@dataclass(frozen=True)
class Reevaluation:
    """One recorded decision re-run under a policy.

    Attributes:
        run_id, call_id, step: where the decision is in the log.
        recorded: the recorded ``policy.decision`` payload.
        decision: the new decision, or None when not re-evaluable.
        re_evaluable: False when the inputs held redacted content or are erased.
        why_not: why it could not be re-evaluated.
    """

    run_id: str
    call_id: str
    step: str
    recorded: dict[str, Any]
    decision: Decision | None
    re_evaluable: bool
    why_not: str | None = None

    @property
    def same(self) -> bool:
        """Whether the new decision has the recorded effect, rule and reason code."""
        if self.decision is None:
            return False
        d, r = self.decision, self.recorded
        return (d.effect, d.rule, d.reason_code) == (r.get("effect"), r.get("rule"), r.get("reason_code"))


def reevaluate(policy: Policy, recorded: dict[str, Any], inputs: Any, *, run_id: str = "", step: str = "",
               method: str | None = None) -> Reevaluation:
    """Re-run one recorded decision under ``policy``.

    Args:
        policy: the policy to evaluate (the recorded one, or a new one for what-if).
        recorded: the ``policy.decision`` payload.
        inputs: its resolved inputs (``CallContext.to_inputs()`` form), or None if erased.
        method: the ``method`` of the call's ``tool.call`` (``"prompts/get"``, ``"resources/read"``:
            a request the gateway records as a call; docs/gateway.md, "Prompts and resources"), None
            for a tool call. Such a request cannot wait for an approval: a ``require_approval`` is
            the deny ``approval_unavailable`` the gateway records for it. A ``resources/read`` is
            judged also as the other forms of its URI, as the recorder judged it
            (:func:`sealbox.policy.reads.evaluate_read`).
    """
    call_id = recorded.get("call_id", "")
    if not isinstance(inputs, dict) or "server" not in inputs:
        # an imported decision never had inputs (no Sealbox policy read any): say so, not that they were lost
        replayed = recorded.get("replayed")
        if recorded.get("reason_code") == "imported":
            why = _why_not(recorded, {})
        elif isinstance(replayed, dict) and isinstance(replayed.get("run_id"), str):
            # a replay serves the recorded decision, it does not make one: the original run has the inputs
            why = (f"the decision was replayed from run {replayed['run_id']} step {replayed.get('step')}, not made "
                   "again: evaluate that run")
        elif isinstance(inputs, dict) and set(inputs) == {"$redacted"}:  # a hashes-only store keeps a marker
            why = ("the decision's inputs are kept only as their hash (store content mode: hashes-only): what-if "
                   "cannot evaluate them")
        else:
            why = "the decision's inputs are not in the log"
        return Reevaluation(run_id, call_id, step, recorded, None, False, why)
    if inputs.get("redacted") or recorded.get("re_evaluable") is False:
        return Reevaluation(run_id, call_id, step, recorded, None, False, _why_not(recorded, inputs))
    call = CallContext.from_inputs(inputs)
    # a resources/read is judged as the recorder judged it: also as the other forms of its URI
    decision = evaluate_read(policy, call) if method == "resources/read" else policy.evaluate(call)
    decision = _with_recorder_checks(decision, recorded, method)
    return Reevaluation(run_id, call_id, step, recorded, decision, True)


def _why_not(recorded: dict[str, Any], inputs: dict[str, Any]) -> str:
    """Why a decision recorded ``re_evaluable: false`` cannot be re-run: a condition read redacted
    content (the engine marks only that, and then the inputs say ``redacted``), or the decision was
    not a Sealbox policy's at all: imported from another system's record, or made outside the policy
    (the gateway's deny of a tool that changed upstream, rule ``sealbox.gateway/tool-changed``)."""
    if inputs.get("redacted"):
        return "the decision read content that was redacted before it was recorded"
    if recorded.get("reason_code") == "imported":
        return "the decision was imported from another system's record, not made by a Sealbox policy"
    return (f"the decision was made outside the policy, by {recorded.get('rule') or 'the recorder'}: "
            f"{recorded.get('reason') or recorded.get('reason_code')}")


def _with_recorder_checks(decision: Decision, recorded: dict[str, Any], method: str | None = None) -> Decision:
    """The policy's new decision with the denials the recorder added to the recorded one on top
    of its policy, from facts of that moment the inputs do not hold, applied again where they
    applied then (sealbox.recorder): ``approval_unavailable`` (no approvals wired) turns a
    ``require_approval`` into a deny; ``grant_invalid`` (the explicit grant the call named was
    unknown, revoked, expired or not covering it) turns any decision that is not a deny into
    that deny, with no rule; ``breaker_open`` (the circuit breaker refused the call) turns an
    ``allow`` into that deny, with no rule. Without this a same-policy re-evaluation of such a
    call said "allow", and a what-if listed it as changed (deny → allow).

    And the one it applies to a request that cannot wait for an approval whatever the moment
    (Recorder._evaluate, ``no_hold``): for ``method`` a ``prompts/get`` or ``resources/read``
    through the gateway, a ``require_approval`` is the deny ``approval_unavailable``, with the
    recorder's reason. Without this a what-if predicted ``require_approval`` for a recorded prompt
    or read that the gateway would deny."""
    if decision.effect == "require_approval" and method is not None:
        return decision.denied_as("approval_unavailable",
                                  f"rule {decision.rule} requires approval, and a {method} cannot wait for one"
                                  f"{judged_text(decision)}")
    code = recorded.get("reason_code")
    if code == "approval_unavailable" and decision.effect == "require_approval":
        return decision.denied_as("approval_unavailable", decision.reason)
    if (code == "grant_invalid" and decision.effect != "deny") or (code == "breaker_open" and decision.effect == "allow"):
        reason = recorded.get("reason")
        return dataclasses.replace(decision, effect="deny", reason_code=code, rule=None, approval=None, limit=None,
                                   reason=reason if isinstance(reason, str) else code)
    return decision


def reevaluate_run(store: Any, policy: Policy, run_id: str) -> Iterator[Reevaluation]:
    """Re-run every decision of a run, in order, from the store alone (each with its call's
    ``method``, from the call's ``tool.call``: :func:`reevaluate`)."""
    from sealbox.errors import BlobNotFoundError

    methods: dict[Any, str] = {}  # call_id -> the method of a tool.call that is a prompts/get or resources/read
    for event in store.read_run(run_id):
        if event.kind == "tool.call" and isinstance(event.payload.get("method"), str):
            methods[event.payload.get("call_id")] = event.payload["method"]
        if event.kind != "policy.decision":
            continue
        try:
            inputs = store.resolve(event.payload.get("inputs"))
        except BlobNotFoundError:
            inputs = None
        yield reevaluate(policy, event.payload, inputs, run_id=run_id, step=event.step,
                         method=methods.get(event.payload.get("call_id")))
