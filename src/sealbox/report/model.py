"""The incident report's data model: everything the store says about one run, gathered once.

:func:`build_report` reads a run and returns an :class:`IncidentReport` that both
renderers (:mod:`sealbox.report.html`, :mod:`sealbox.report.markdown`) draw, so the
two formats can never disagree about a fact. Content (arguments, results, model
messages, state) is resolved from blobs; an erased blob keeps its reference and is
marked; redaction markers (``{"$redacted": …}``, ``⟦redacted:…⟧``) are kept as they
are and counted. A literal ``{"$redacted": …}`` in the source's own content (which the
store keeps escaped, as ``{"$esc": {…}}``) is shown as the source wrote it and counted
apart, as a look-alike, never as a redaction.

Approval answers are checked here, not only listed: each answer's Ed25519 signature
is verified against its identity's key *as the log held it when the answer was
written* (:func:`sealbox.identities.verify_fields`), and the approval rules are
applied from the log (:func:`sealbox.approvals.evaluate`, with the store's identities read
once). The whole store is verified with :func:`sealbox.verify.verify_store` unless the caller
opts out.

An event whose payload fails its kind's schema (:func:`sealbox.events.validate_payload`: only a
change below Sealbox makes one; verify reports it) is shown as malformed on the timeline, never
read as if it were well formed: a malformed approval request is shown with status ``malformed``
and the reason, its fields as recorded; a malformed ``run.resumed`` gives no wait.

An event whose bytes no longer hash to its recorded leaf hash (changed below Sealbox after it was
written; :func:`sealbox.query.event_altered`, the rule by which ``sealbox calls`` flags ``altered``)
is never shown as what was recorded: its timeline summary starts with :data:`ALTERED_NOTE` (a
malformed one keeps its ``malformed event (…)`` summary, which already says so), and a tool call
holding one lists it in :attr:`ToolCallView.altered`, which both renderers print above the call's
values; the verification section names it too (``leaf_hash_mismatch``). Every problem verification
locates at an event of the run (:func:`failed_at`) is also carried by that event's timeline entry and tool
call (``failed``: the problem's line, as the verification section prints it), which both renderers print
as ``FAILED VERIFICATION``: an edit that rewrote the stored hash too is not ``altered``, only verify sees it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sealbox.errors import BlobNotFoundError, SnapshotDamagedError, StoreError
from sealbox.query import event_altered

__all__ = [
    "Content", "TimelineEntry", "ModelCallView", "ToolCallView", "AnswerView", "ApprovalView", "StateView",
    "VerificationView", "ReplayVerdictView", "IncidentReport", "build_report", "kind_group",
]

#: Kinds grouped for colouring the timeline (the part before the dot, with a few merged).
_GROUPS = {"run": "run", "model": "model", "tool": "tool", "policy": "policy", "approval": "approval",
           "state": "state", "guardrail": "guard", "breaker": "guard", "tools": "tool", "access": "other",
           "identity": "other", "content": "other", "anomaly": "guard", "note": "other"}


def kind_group(kind: str) -> str:
    """The colour group of an event kind: run, model, tool, policy, approval, state, guard or other."""
    return _GROUPS.get(kind.split(".", 1)[0], "other")


@dataclass(frozen=True)
class Content:
    """A content value as the record holds it, ready to print.

    Attributes:
        value: the resolved value (or the raw blob references when ``erased``), the store's
            escapes undone: a dict of the source's own whose keys start with ``$`` (stored as
            ``{"$esc": {...}}``) is shown as the source wrote it.
        text: pretty JSON of ``value``.
        redacted: how many Sealbox redaction markers it holds.
        erased: a blob it refers to was erased under retention.
        look_alikes: how many ``{"$redacted": ...}`` objects it holds that are the source's
            own content (escaped by the store), not redactions: shown, never counted in ``redacted``.
    """

    value: Any
    text: str
    redacted: int = 0
    erased: bool = False
    look_alikes: int = 0

    @property
    def lines(self) -> int:
        """Lines of :attr:`text`."""
        return self.text.count("\n") + 1


@dataclass(frozen=True)
class TimelineEntry:
    """One event on the timeline. ``offset_s``: seconds since the run's first event."""

    run_seq: int
    step: str
    kind: str
    group: str
    ts: str
    offset_s: float
    duration_s: float | None
    principal: str
    summary: str
    leaf_index: int
    #: the verification problems located at this event (:attr:`VerificationView.failed_at`), as the
    #: Verification section words them; empty for an event nothing was found wrong with
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelCallView:
    """A ``model.call``: provider, model, request and response, usage, latency (µs; None: not known)."""

    step: str
    ts: str
    provider: str
    model: str
    request: Content
    response: Content
    usage: dict[str, Any]
    latency_us: int | None
    tool_call_ids: tuple[str | None, ...]  # None: a requested call the response gave no id


@dataclass(frozen=True)
class ToolCallView:
    """A tool call and what followed it: its decisions, approvals and result.

    Attributes:
        decisions: every ``policy.decision`` of the call (a re-evaluation after an approval is a second one).
        outcome: ``ok``, ``error``, ``denied`` (by the policy or an approver), ``expired`` (its approval),
            ``held`` (waiting for approval), ``abandoned`` (its run ended without resuming it: it never
            ran) or ``unknown`` (allowed or approved, no result).
    """

    call_id: str
    step: str
    ts: str
    principal: str
    server: str
    tool: str
    exposed: str
    grant: str
    arguments: Content
    decisions: tuple[dict[str, Any], ...]
    approval_ids: tuple[str, ...]
    ok: bool | None
    result: Content | None
    error: dict[str, Any] | None
    duration_us: int | None
    outcome: str
    #: the call's events (``tool.call``, ``policy.decision``, ``tool.result``) whose bytes no longer hash to
    #: their recorded leaf hash, as ``kind (leaf N)``: changed below Sealbox; what the view shows of them is
    #: what the database holds now, not what was recorded (:func:`sealbox.query.event_altered`)
    altered: tuple[str, ...] = ()
    #: the verification problems located at the call's events (``tool.call``, ``policy.decision``,
    #: ``tool.result``), as the Verification section words them; empty when nothing was found wrong with them
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class AnswerView:
    """One signed answer, checked.

    Attributes:
        signature: ``verified`` (Ed25519 over the signed fields, with the identity's key at that
            point of the log), ``invalid`` or ``unknown identity``.
        counted: the answer counts under the approval rules; else ``problem`` says why not.
        identity: the identity as the log held it then (role, groups, shared, key id), or None.
    """

    identity_name: str
    decision: str
    reason: str
    answered_at: str
    client: dict[str, Any]
    flags: tuple[dict[str, Any], ...]
    signature: str
    key_id: str | None
    counted: bool
    problem: str | None
    identity: dict[str, Any] | None


@dataclass(frozen=True)
class ApprovalView:
    """An approval request, its answers, and how long the run waited.

    Attributes:
        malformed: why the request is malformed (:func:`sealbox.approvals.request_problem`), or None;
            when set, ``status`` is ``malformed`` and ``ask``, ``quorum``, ``expires_at`` are the
            recorded values, of any JSON type.
    """

    approval_id: str
    call_id: str
    step: str
    server: str
    tool: str
    arguments: Content
    binding: str
    rule: str | None
    ask: dict[str, Any]
    quorum: int
    requested_at: str
    requested_by: str | None
    expires_at: str | None
    status: str
    decided_by: tuple[str, ...]
    decided_at: str | None
    wait_s: float | None
    answers: tuple[AnswerView, ...]
    malformed: str | None = None
    resumed_at: str | None = None  #: when the run went on past it (its first run.resumed), or None
    outcome: str | None = None  #: the outcome that run.resumed gave it


def resumed_text(a: ApprovalView) -> str:
    """When the run went on past the request and the outcome it gave (``approvals show`` says it alike)."""
    if a.resumed_at is None:
        return "(not resumed)"
    return f"{a.resumed_at} (outcome {a.outcome or 'unreadable'})"


@dataclass(frozen=True)
class StateView:
    """A ``state.saved``: the agent's state at that step."""

    step: str
    ts: str
    label: str | None
    state: Content


@dataclass(frozen=True)
class VerificationView:
    """The store's verification: overall, and the problems located in this run."""

    checked: bool
    ok: bool | None
    summary: str
    run_problems: tuple[str, ...]
    other_problems: int
    #: leaf index -> the problems (as in ``run_problems``) located at that event of the run: its own leaf, and
    #: for a broken ``prev`` link (``chain_broken``) also the previous event's, as either may be the changed one
    failed_at: dict[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayVerdictView:
    """A replay run's verdict, as its ``run.ended`` holds it (``sealbox runs show`` prints the same line).

    Attributes:
        reproduced: the verdict says the record was reproduced (True), or not (False); None when the
            replay run has no verdict (it has not ended, or its ``run.ended`` is malformed).
        text: one line: ``reproduced (5 steps compared)``, ``diverged at step 2.2 (mismatch): …``
            (:func:`sealbox.replay.divergence.verdict_text`), or why there is no verdict.
    """

    reproduced: bool | None
    text: str


@dataclass(frozen=True)
class IncidentReport:
    """Everything a report shows about one run (see the module docstring)."""

    run: dict[str, Any]
    events: int
    started_at: str | None
    ended_at: str | None
    duration_s: float | None
    policy: dict[str, Any]
    snapshot_fingerprint: str | None
    snapshot: Content | None
    timeline: tuple[TimelineEntry, ...]
    model_calls: tuple[ModelCallView, ...]
    tool_calls: tuple[ToolCallView, ...]
    approvals: tuple[ApprovalView, ...]
    states: tuple[StateView, ...]
    notes: tuple[TimelineEntry, ...]
    children: tuple[dict[str, Any], ...]
    verification: VerificationView
    store_origin: str | None
    generated_at: str
    usage: dict[str, Any] = field(default_factory=dict)
    #: the verdict of a replay run (one with ``replay_of``), else None
    replay: ReplayVerdictView | None = None
    #: why the recorded snapshot is not shown (its stored bytes no longer match its fingerprint, or it
    #: is not in this store), else None
    snapshot_problem: str | None = None
    #: the exception the run ended with, as its ``run.ended`` holds it (``{"type", "message"}``), else None
    error: dict[str, Any] | None = None
    #: the run's sub-agent runs at every depth, depth first, each a ``children`` row plus ``depth`` (1: a
    #: direct child): at most :data:`sealbox.query.SUB_RUN_TREE_LIMIT` (:func:`sealbox.query.sub_run_tree`)
    sub_runs: tuple[dict[str, Any], ...] = ()
    #: how many sub-runs there are beyond ``sub_runs`` (0: all listed)
    sub_runs_not_listed: int = 0

    def child_runs_heading(self) -> str:
        """``Child runs (N)``, or ``Child runs (N direct, M at every depth)`` when sub-runs have their own."""
        total = len(self.sub_runs) + self.sub_runs_not_listed
        return f"Child runs ({len(self.children)}" + (f" direct, {total} at every depth)" if total > len(self.children) else ")")

    def sub_runs_note(self) -> str:
        """What the child runs' table says of the sub-runs it does not list (empty when it lists them all)."""
        n = self.sub_runs_not_listed
        return f"… {n} more sub-run{'s' if n > 1 else ''} not listed (the report of a sub-run lists its own)" if n else ""


# ----------------------------------------------------------------------------- helpers


def _parse_ts(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _as_recorded(value: Any, counts: list[int]) -> Any:
    """``value`` (the store's encoded form) with the store's escapes undone, counting markers.

    ``{"$redacted": ...}`` is a Sealbox marker (``counts[0]``); so is each ``⟦redacted:``
    in a string. ``{"$esc": {...}}`` is the source's own dict whose keys start with ``$``
    (the store escapes a literal ``{"$redacted": ...}`` in a tool result or an import
    this way): it is shown as that dict, its values walked, and a one-key ``$redacted``
    dict among them is counted as a look-alike (``counts[1]``), never as a redaction.
    """
    if type(value) is dict:
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "$redacted":
                counts[0] += 1
                return value
            if key == "$esc" and type(inner) is dict:
                if len(inner) == 1 and "$redacted" in inner:
                    counts[1] += 1
                return {k: _as_recorded(v, counts) for k, v in inner.items()}
        return {k: _as_recorded(v, counts) for k, v in value.items()}
    if type(value) is list:
        return [_as_recorded(v, counts) for v in value]
    if type(value) is str:
        counts[0] += value.count("⟦redacted:")
    return value


def _content(store: Any, value: Any) -> Content:
    erased = False
    try:
        resolved = store.resolve(value)
    except BlobNotFoundError:
        resolved, erased = value, True
    counts = [0, 0]
    shown = _as_recorded(resolved, counts)
    text = json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    return Content(shown, text, counts[0], erased, counts[1])


def _summary(kind: str, p: dict[str, Any]) -> str:
    tool = f"{p.get('server')}/{p.get('tool')}" if isinstance(p.get("tool"), str) else ""
    if kind == "run.started":
        return f"agent {p.get('agent')}" + (f", parent {p['parent_run_id']}" if p.get("parent_run_id") else "")
    if kind == "run.ended":  # as `runs show` words it: the status, then the exception the run ended with
        err = p.get("error")
        return str(p.get("status")) + (f" {err.get('type')}: {err.get('message')}" if isinstance(err, dict) else "")
    if kind == "model.call":
        return f"{p.get('provider')}/{p.get('model')}" + (
            f" → {len(p.get('tool_call_ids') or [])} tool call(s)" if p.get("tool_call_ids") else "")
    if kind == "tool.call":
        return f"{tool} ({p.get('call_id')})"
    if kind == "policy.decision":  # as `runs show` words it: a decision no rule made (no match, a limit) names none
        return (f"{p.get('effect')} by rule {p.get('rule')} ({p.get('reason_code')})" if p.get("rule") is not None
                else f"{p.get('effect')}, no rule ({p.get('reason_code')})")
    if kind == "tool.result":
        err = p.get("error") or {}
        return "ok" if p.get("ok") else f"error {err.get('type')}: {err.get('message')}"
    if kind == "approval.requested":
        from sealbox.approvals import asked_text

        return f"{tool} asks {asked_text(p.get('ask'))}"
    if kind == "approval.answered":
        return f"{p.get('decision')} by {p.get('identity')}"
    if kind == "run.resumed":
        return f"after {int(p.get('waited_us') or 0) / 1e6:.2f} s"
    if kind == "run.suspended":
        return str(p.get("reason", ""))
    if kind == "note" and isinstance(p.get("client_request"), dict):  # an upstream asked the client (gateway)
        from sealbox.events import client_request_text

        return client_request_text(p)
    if kind == "note":
        return str(p.get("text", ""))
    if kind == "guardrail.tripped":
        return f"{p.get('limit')}: {p.get('current')} > {p.get('bound')}"
    if kind == "state.saved":
        return str(p.get("label") or "state")
    return ", ".join(f"{k}={v}" for k, v in p.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool))[:120]


def _duration_s(kind: str, p: dict[str, Any]) -> float | None:
    us = {"tool.result": p.get("duration_us"), "model.call": p.get("latency_us"),
          "run.resumed": p.get("waited_us")}.get(kind)
    return int(us) / 1e6 if isinstance(us, int) else None


# ----------------------------------------------------------------------------- builders


def _payload_problem(kind: str, payload: Any) -> str | None:
    """Why ``payload`` fails ``kind``'s schema (:func:`sealbox.events.validate_payload`; for a request,
    :func:`sealbox.approvals.request_problem`, which also reads its expiry), or None."""
    from sealbox.approvals import request_problem
    from sealbox.errors import InvalidEventError
    from sealbox.events import validate_payload

    if kind == "approval.requested":
        return request_problem(payload)
    try:
        validate_payload(kind, payload)
    except InvalidEventError as exc:
        return str(exc)
    return None


#: How the report marks an event whose bytes no longer hash to its recorded leaf hash (its summary's
#: start on the timeline, a tool call's warning).
ALTERED_NOTE = "ALTERED below Sealbox (its bytes no longer match its recorded hash; shown as the database holds it now)"


def _timeline(events: list[Any], uncounted: dict[int, str] | None = None, store: Any = None,
              failed_at: dict[int, tuple[str, ...]] | None = None) -> list[TimelineEntry]:
    """The timeline; ``uncounted``: leaf -> why that ``approval.answered`` does not count; ``store``:
    where a client request's note's ``about`` (a content field: blob references) is resolved from;
    ``failed_at``: :attr:`VerificationView.failed_at`."""
    if not events:
        return []
    t0 = _parse_ts(events[0].ts)
    uncounted = uncounted or {}
    out = []
    for e in events:
        problem = _payload_problem(e.kind, e.payload)
        if problem is not None:  # already shown as not what Sealbox wrote, its fields never read
            summary, duration = f"malformed event ({problem})", None
        elif event_altered(e.raw, e.leaf_hash):  # never shown as what was recorded
            summary, duration = f"{ALTERED_NOTE}: {_summary(e.kind, e.payload)}", _duration_s(e.kind, e.payload)
        else:
            shown = e.payload
            if store is not None and e.kind == "note" and isinstance(shown.get("client_request"), dict) \
                    and "about" in shown:
                try:
                    shown = {**shown, "about": store.resolve(shown["about"])}
                except BlobNotFoundError:  # erased: the line without the content
                    pass
            summary, duration = _summary(e.kind, shown), _duration_s(e.kind, e.payload)
            if e.leaf_index in uncounted:
                summary += f" (does not count: {uncounted[e.leaf_index]})"
        out.append(TimelineEntry(e.run_seq, e.step, e.kind, kind_group(e.kind), e.ts,
                                 (_parse_ts(e.ts) - t0).total_seconds(), duration, e.principal, summary, e.leaf_index,
                                 (failed_at or {}).get(e.leaf_index, ())))
    return out


def _model_calls(store: Any, events: list[Any]) -> list[ModelCallView]:
    out = []
    for e in events:
        if e.kind != "model.call":
            continue
        p = e.payload
        out.append(ModelCallView(e.step, e.ts, str(p.get("provider")), str(p.get("model")),
                                 _content(store, p.get("request")), _content(store, p.get("response")),
                                 dict(p.get("usage") or {}),
                                 p["latency_us"] if type(p.get("latency_us")) is int else None,
                                 tuple(t if isinstance(t, str) else None for t in p.get("tool_call_ids") or ())))
    return out


def _outcome(decisions: list[dict[str, Any]], ok: bool | None, approval: str | None = None,
             call: Any = None) -> str:
    """``approval``: what the call's request came to, or None; ``call``: its ``tool.call`` payload."""
    from sealbox.approvals import imported_call_outcome

    if ok is not None:
        return "ok" if ok else "error"
    effect = decisions[-1].get("effect") if decisions else None
    if effect == "require_approval" and approval is not None:
        return approval  # what its approval came to (sealbox.approvals.call_outcome)
    if effect == "require_approval" and imported_call_outcome(call) is not None:
        return imported_call_outcome(call)  # imported: the outcome its exporting store gave it
    return {"allow": "unknown", "require_approval": "held"}.get(str(effect), "denied")


def _call_key(value: Any) -> str:
    """An event's ``call_id``; in a malformed event (a list, an object, a number...: changed below Sealbox),
    ``malformed:`` and its JSON text (as the OTLP export names it), so that no value stops the report."""
    import json

    return value if isinstance(value, str) else "malformed:" + json.dumps(value, separators=(",", ":"),
                                                                          sort_keys=True, default=str)


def _tool_calls(store: Any, events: list[Any], held: dict[str, str] | None = None,
                failed_at: dict[int, tuple[str, ...]] | None = None) -> list[ToolCallView]:
    """``held``: call id -> the outcome its approval gives a call with no result (:func:`_approvals`);
    ``failed_at``: :attr:`VerificationView.failed_at`."""
    failed_at = failed_at or {}
    calls: dict[str, dict[str, Any]] = {}
    for e in events:
        cid = _call_key(e.payload.get("call_id"))
        if e.kind == "tool.call":
            calls[cid] = {"event": e, "decisions": [], "approvals": [], "result": None, "altered": [], "failed": []}
        if cid in calls and e.kind in ("tool.call", "policy.decision", "tool.result") \
                and event_altered(e.raw, e.leaf_hash):
            calls[cid]["altered"].append(f"{e.kind} (leaf {e.leaf_index})")
        if cid in calls and e.kind in ("tool.call", "policy.decision", "tool.result"):
            calls[cid]["failed"] += [line for line in failed_at.get(e.leaf_index, ()) if line not in calls[cid]["failed"]]
        if e.kind == "tool.call":
            continue
        if cid in calls and e.kind == "policy.decision":
            d = {k: e.payload.get(k) for k in ("effect", "rule", "reason_code", "reason", "policy_fingerprint",
                                                "reevaluated")}
            calls[cid]["decisions"].append(d)
        elif cid in calls and e.kind == "approval.requested":
            calls[cid]["approvals"].append(str(e.payload.get("approval_id")))
        elif cid in calls and e.kind == "tool.result":
            calls[cid]["result"] = e.payload
    out = []
    for cid, c in calls.items():
        e, p, r = c["event"], c["event"].payload, c["result"]
        ok = None if r is None else bool(r.get("ok"))
        out.append(ToolCallView(
            str(cid), e.step, e.ts, e.principal, str(p.get("server")), str(p.get("tool")), str(p.get("exposed")),
            str(p.get("grant")), _content(store, p.get("arguments")), tuple(c["decisions"]), tuple(c["approvals"]),
            ok, _content(store, r.get("result")) if r is not None and "result" in r else None,
            (r or {}).get("error"), (r or {}).get("duration_us"), _outcome(c["decisions"], ok, (held or {}).get(cid), p),
            tuple(c["altered"]), tuple(c["failed"])))
    return out


def _answer_view(book: Any, payload: dict[str, Any], answer: Any) -> AnswerView:
    from sealbox.approvals import signed_fields
    from sealbox.identities import verify_fields

    who = book.get(answer.identity, answer.leaf_index)
    if who is None:
        signature = "unknown identity"
    else:
        signature = "verified" if verify_fields(who.public_key, signed_fields(payload), payload.get("signature")) \
            else "invalid"
    return AnswerView(answer.identity, answer.decision, answer.reason, answer.answered_at, dict(answer.client),
                      tuple(answer.flags), signature, payload.get("key_id"), answer.problem is None, answer.problem,
                      who.to_dict() if who is not None else None)


def _approvals(store: Any, events: list[Any]) -> tuple[list[ApprovalView], dict[int, str], dict[str, str]]:
    """The run's approval requests, each evaluated from the run's events with the store's
    identities (read once), leaf -> problem of each ``approval.answered`` of the run that
    does not count (``unknown_approval``: it answers no request of this run), and call id -> the
    outcome its latest request gives the call if it has no result (:func:`sealbox.approvals.call_outcome`)."""
    from sealbox.approvals import _RELATED, call_outcome, evaluate
    from sealbox.identities import identity_book

    answered = [e for e in events if e.kind == "approval.answered"]
    requests = [e for e in events if e.kind == "approval.requested"]
    if not requests:
        return [], {e.leaf_index: "unknown_approval" for e in answered}, {}
    book = identity_book(store)
    answers = {e.leaf_index: e.payload for e in answered}
    related = [e for e in events if e.kind in _RELATED]
    waits = {aid: e.payload["waited_us"] / 1e6 for e in events if e.kind == "run.resumed"
             and _payload_problem(e.kind, e.payload) is None for aid in e.payload["approval_ids"]}
    out, judged, held = [], {}, {}
    call_at = {e.step: e.payload.get("call_id") for e in events if e.kind == "tool.call"}
    for req in requests:
        st = evaluate(req, related, book)
        if isinstance(st.call_id, str):
            held[st.call_id] = call_outcome(st)
        elif isinstance(call_at.get(st.step), str):  # a malformed request naming no call: the call at its step
            held.setdefault(call_at[st.step], call_outcome(st))
        r = st.request
        if st.malformed:
            ask, quorum = r.get("ask"), r.get("quorum")
        else:
            ask, quorum = dict(r["ask"]), r["quorum"]
        judged.update((a.leaf_index, a.problem) for a in st.answers)
        out.append(ApprovalView(
            st.approval_id, str(st.call_id), st.step, str(r.get("server")), str(r.get("tool")),
            _content(store, r.get("arguments")), str(r.get("binding")), r.get("rule"), ask, quorum,
            st.requested_at, r.get("requested_by"), r.get("expires_at"), st.status,
            tuple(st.decided_by), st.decided_at, waits.get(st.approval_id),
            tuple(_answer_view(book, answers.get(a.leaf_index, {}), a) for a in st.answers), st.malformed,
            st.resumed_at, st.outcome))
    uncounted = {leaf: judged.get(leaf, "unknown_approval") for leaf in answers}
    return out, {leaf: why for leaf, why in uncounted.items() if why is not None}, held


def _verification(store: Any, run_id: str, verify: bool, events: list[Any] = ()) -> VerificationView:
    if not verify:
        return VerificationView(False, None, "not checked (--no-verify)", (), 0)
    from sealbox.verify import verify_store

    report = verify_store(store)
    mine = tuple(p.line() for p in report.problems if p.run_id == run_id)
    return VerificationView(True, report.ok, report.summary(), mine, len(report.problems) - len(mine),
                            failed_at(report.problems, run_id, events))


def failed_at(problems: Any, run_id: str, events: list[Any]) -> dict[int, tuple[str, ...]]:
    """Leaf index -> the lines (``Problem.line()``) of the problems of run ``run_id`` located at that event of
    ``events`` (the run's): its own leaf, and for a ``chain_broken`` saying the event's ``prev`` is not the
    previous event's leaf hash also that previous event, since the change may be in either (an edit that
    rewrote an event's stored hash too is seen only there)."""
    by_seq = {e.run_seq: e.leaf_index for e in events}
    leaves = set(by_seq.values())
    out: dict[int, list[str]] = {}
    for p in problems:
        if p.run_id != run_id or p.leaf_index is None or p.leaf_index not in leaves:
            continue
        at = [p.leaf_index]
        if p.code == "chain_broken" and p.message.startswith("prev is not") and p.run_seq is not None \
                and by_seq.get(p.run_seq - 1) is not None:
            at.insert(0, by_seq[p.run_seq - 1])
        for leaf in at:
            lines = out.setdefault(leaf, [])
            if p.line() not in lines:
                lines.append(p.line())
    return {leaf: tuple(lines) for leaf, lines in out.items()}


def _replay_verdict(run: dict[str, Any], last: Any) -> ReplayVerdictView | None:
    """The verdict of a replay run, read from its ``run.ended`` (the last event), or None for a run
    that is no replay."""
    from sealbox.replay.divergence import verdict_text

    if not run.get("replay_of"):  # a verdict in a run that replays nothing is no replay's verdict
        return None
    ended = last.kind == "run.ended"
    valid = ended and _payload_problem(last.kind, last.payload) is None
    verdict = last.payload.get("verdict") if valid else None
    if isinstance(verdict, dict):
        return ReplayVerdictView(verdict.get("reproduced") is True, verdict_text(verdict))
    if not ended:
        return ReplayVerdictView(None, "no verdict: the replay run has not ended")
    return ReplayVerdictView(None, "no verdict recorded in the replay run's run.ended")


def build_report(store: Any, run_id: str, *, verify: bool = True, now: str | None = None) -> IncidentReport:
    """Gather the report of ``run_id`` from ``store``.

    Args:
        store: an open store (read-only is enough).
        run_id: the run.
        verify: run :func:`sealbox.verify.verify_store` over the whole store (default).
        now: the "generated at" time to print (default: now, UTC, RFC 3339); fixed in tests.

    Raises:
        StoreError: no such run.
    """
    from sealbox.store.base import utc_now

    events = store.read_run(run_id)
    run = store.get_run(run_id) if hasattr(store, "get_run") else None
    if not events or run is None:
        from sealbox.approvals import shown_id

        raise StoreError(f"no run {shown_id(run_id)} in this store")
    first = events[0].payload if events[0].kind == "run.started" else {}
    fp = first.get("snapshot")
    snapshot = snapshot_problem = None
    if fp:
        try:
            snapshot = _content(store, store.get_snapshot(fp))
        except SnapshotDamagedError:
            snapshot_problem = ("the snapshot could not be shown: its stored content does not match its "
                                "fingerprint (tampered or damaged; run `sealbox verify`)")
        except StoreError:
            snapshot_problem = "the snapshot could not be shown: it is not in this store"
    last = events[-1]
    # an imported run still running or suspended at its source did not end (its run.ended is the import's)
    ended = last.ts if last.kind == "run.ended" and run.get("status") == "ended" else None
    duration = (_parse_ts(last.ts) - _parse_ts(events[0].ts)).total_seconds()
    approvals, uncounted, held = _approvals(store, events)
    verification = _verification(store, run_id, verify, events)
    timeline = _timeline(events, uncounted, store, verification.failed_at)
    from sealbox.query import sub_run_tree

    sub_runs, not_listed = sub_run_tree(store, run_id) if run.get("children") else ([], 0)
    return IncidentReport(
        run=dict(run), events=len(events), started_at=events[0].ts, ended_at=ended, duration_s=duration,
        policy=dict(first.get("policy") or {}), snapshot_fingerprint=fp, snapshot=snapshot,
        timeline=tuple(timeline), model_calls=tuple(_model_calls(store, events)),
        tool_calls=tuple(_tool_calls(store, events, held, verification.failed_at)), approvals=tuple(approvals),
        states=tuple(StateView(e.step, e.ts, e.payload.get("label"), _content(store, e.payload.get("state")))
                     for e in events if e.kind == "state.saved"),
        notes=tuple(t for t in timeline if t.kind in ("note", "anomaly", "guardrail.tripped")),
        children=tuple(run.get("children") or ()), verification=verification,
        store_origin=getattr(store, "origin", None), generated_at=now or utc_now(),
        usage=dict((last.payload.get("usage") or {}) if last.kind == "run.ended" else {}),
        replay=_replay_verdict(run, last), snapshot_problem=snapshot_problem,
        error=dict(last.payload["error"]) if ended and isinstance(last.payload.get("error"), dict) else None,
        sub_runs=tuple(sub_runs), sub_runs_not_listed=not_listed,
    )
