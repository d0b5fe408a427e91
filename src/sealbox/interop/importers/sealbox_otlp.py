"""Reading back what ``sealbox export --otlp`` wrote (docs/otlp.md), when such spans are imported.

A span Sealbox exported carries ``sealbox.run_id``. Besides the GenAI attributes every span
format has, it says what the store knew and no other tracer does; the importer maps it back:

- a tool span's ``sealbox.decision.effect`` / ``.rule`` / ``.reason_code`` and
  ``sealbox.policy.fingerprint`` become the imported call's ``policy.decision`` effect and rule
  (reason code still ``imported``, the imported pseudo-policy's fingerprint: this store's policy did
  not decide the call), the source's own facts in the decision's ``imported`` field, with the
  reason of its ``sealbox.policy.decision`` log record;
- ``sealbox.tool.duration_us`` is the result's duration (the span also covers an approval wait),
  ``sealbox.model.latency_us`` the model call's latency (the span never starts before its run; a
  model span without it had an unknown latency, imported as ``latency_us: null``);
  ``sealbox.tool.outcome`` ``denied`` / ``expired`` / ``held`` / ``abandoned`` / ``unknown`` (or
  ``pending``, from an earlier export) means the tool did not run (or its result was never
  recorded): no ``tool.result``; so does a value no export writes (neither ``ok`` nor ``error``)
  on a span carrying no result and no error (its call's outcome is then ``unknown``);
- ``sealbox.server`` and ``sealbox.tool.exposed`` are the call's server and exposed name;
- a model span's ``sealbox.model.stream.chunks`` (a call recorded from stream chunks) is the model
  call's ``stream: {chunks}``, so a replay gives the agent chunks again;
- a model span's ``sealbox.usage.cost`` is the model call's ``usage.cost`` (the run's ``run.ended`` usage
  then sums it);
- a model span's ``sealbox.model.request`` / ``.response`` (exported with ``--otlp-content``) are the
  model call's request and response exactly as the exporting store held them, with its
  ``sealbox.model.format`` (the ``gen_ai.input.messages`` / ``gen_ai.output.messages`` it also carries
  are a lossy conversion, read only from spans of other tracers);
- a model span's ``sealbox.model.tool_call_ids`` are the calls it requested, each in its place (a null,
  a call requested without an id, keeps its position, so the
  calls after it come back at the sub-steps they had), and a tool span's link with
  ``sealbox.link = requested_by`` names its model span;
- the ``sealbox.approval.requested`` / ``.answered`` / ``.expired`` log records become imported
  approval notes (``identity_authenticated: false``; an answer the exporting store did not count,
  ``sealbox.approval.counted`` false, keeps ``counted: false`` and its ``problem``): an OTLP record carries no approver signature,
  so it is never an ``approval.answered``, and no imported data is signed evidence;
- the run span's ``sealbox.run.status``, ``error.type``, ``sealbox.label.*``, ``sealbox.principal``,
  ``sealbox.run_id``, ``sealbox.parent_run_id``, ``sealbox.snapshot`` (the snapshot's fingerprint: the
  snapshot itself is not exported) and ``sealbox.replay_of`` become the run's status, error, labels and
  original ids.

Everything read here is what the file says, unauthenticated: ``sealbox.event.leaf_index`` and
``leaf_hash`` are kept (``imported.sealbox``) so that a copy can be checked against the original store.
"""

from __future__ import annotations

import json
from typing import Any

EFFECTS = ("allow", "deny", "require_approval")
#: The imported run's error message when the export did not send it (a replay then compares the type only).
MESSAGE_NOT_EXPORTED = "the error message was not exported (sealbox export --otlp without --otlp-content)"
#: ``sealbox.tool.outcome`` values for which the tool never ran, or ran with no recorded result.
#: (``held`` and ``abandoned`` since the export gives a held call ``sealbox calls``' outcome; ``pending`` is
#: what earlier exports wrote for a call awaiting approval.)
NOT_RUN = frozenset({"denied", "expired", "held", "abandoned", "unknown", "pending"})
#: Labels the importer sets itself; a source label of that name is not copied.
OWN_LABELS = frozenset({"imported", "import_format"})


def is_sealbox(attrs: dict[str, Any]) -> bool:
    return isinstance(attrs.get("sealbox.run_id"), str)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


def _ids(value: Any) -> list[str | None]:
    """``sealbox.model.tool_call_ids``, each in its place: a requested call without an id (null in the
    export, or anything but a non-empty string) is None, so the calls after it keep their positions."""
    return [v if isinstance(v, str) and v else None for v in value] if isinstance(value, list) else []


def source_facts(attrs: dict[str, Any]) -> dict[str, Any]:
    """``imported.sealbox`` of an event: where the exporting store had it (unauthenticated)."""
    out: dict[str, Any] = {}
    for key, name in (("sealbox.run_id", "run_id"), ("sealbox.step", "step"),
                      ("sealbox.event.leaf_hash", "leaf_hash"), ("sealbox.grant", "grant")):
        if _str(attrs.get(key)):
            out[name] = attrs[key]
    if _int(attrs.get("sealbox.event.leaf_index")) is not None:
        out["leaf_index"] = attrs["sealbox.event.leaf_index"]
    if _str(attrs.get("sealbox.model.format")):
        out["format"] = attrs["sealbox.model.format"]
    return out


def read_model(s: Any, attrs: dict[str, Any]) -> None:
    s.requested_ids = _ids(attrs.get("sealbox.model.tool_call_ids"))
    s.duration_us = _int(attrs.get("sealbox.model.latency_us"))  # the span is clamped to start with its run
    # Sealbox exports the attribute for every model call whose latency its store knew (0 included): without
    # it, the latency was not known (latency_us null), and the span's length (none) is not a latency
    s.latency_unknown = "sealbox.model.latency_us" not in attrs
    cost = attrs.get("sealbox.usage.cost")  # what the model call cost, by the exporting store's prices
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        s.usage = {**s.usage, "cost": cost}  # kept only when finite and not negative (RunBuilder.model_call)
    chunks = _int(attrs.get("sealbox.model.stream.chunks"))  # recorded from stream chunks
    if chunks is not None:
        s.stream = {"chunks": chunks}
    s.extra["sealbox"] = source_facts(attrs)
    # exported with --otlp-content: the exact recorded bodies (the gen_ai.*.messages are a lossy conversion)
    found = False
    for key, name in (("sealbox.model.request", "request"), ("sealbox.model.response", "response")):
        if isinstance(attrs.get(key), str):
            try:
                setattr(s, name, json.loads(attrs[key]))
                found = True
            except ValueError:  # not JSON: kept as the text it is
                setattr(s, name, attrs[key])
    if found and _str(attrs.get("sealbox.model.format")):
        s.fmt = attrs["sealbox.model.format"]


def read_tool(s: Any, attrs: dict[str, Any], log_records: list[Any] | None) -> None:
    s.server = _str(attrs.get("sealbox.server")) or s.server
    s.exposed = _str(attrs.get("sealbox.tool.exposed"))
    s.extra["sealbox"] = source_facts(attrs)
    records = sorted((r for r in log_records or () if isinstance(r, dict)), key=_record_time)
    effect = attrs.get("sealbox.decision.effect")
    if effect in EFFECTS:
        decision: dict[str, Any] = {"source": "sealbox.decision", "effect": effect,
                                    "rule": _str(attrs.get("sealbox.decision.rule")),
                                    "reason_code": _str(attrs.get("sealbox.decision.reason_code")),
                                    "policy_fingerprint": _str(attrs.get("sealbox.policy.fingerprint"))}
        logged = [r["attributes"] for r in records if _event(r) == "sealbox.policy.decision"
                  and r["attributes"].get("sealbox.decision.effect") == effect]
        if logged and _str(logged[-1].get("sealbox.decision.reason")):
            decision["reason"] = logged[-1]["sealbox.decision.reason"]
        s.decision = decision
    outcome = attrs.get("sealbox.tool.outcome")
    if outcome is not None:
        s.extra["sealbox"]["outcome"] = outcome
    if isinstance(outcome, str) and outcome in NOT_RUN:
        s.ran = False
    elif outcome not in (None, "ok", "error") and s.result is None and s.error is None:
        s.ran = False  # a value no export writes, and nothing says the tool ran: no result is made up
    s.duration_us = _int(attrs.get("sealbox.tool.duration_us"))
    if s.error is not None:
        etype = s.error["type"]
        message = s.error["message"]
        if message == etype:  # exported without --otlp-content: the status holds the type only
            message = MESSAGE_NOT_EXPORTED
        elif message.startswith(etype + ": "):
            message = message[len(etype) + 2:]
        s.error = {"type": etype, "message": message}
    s.approvals = approval_notes(records, s.call_id, s.tool_name)


def _record_time(r: dict) -> tuple:
    t = r.get("time_unix_nano")
    try:
        return (0, int(t))
    except (TypeError, ValueError):
        return (1, 0)


def _event(r: dict) -> Any:
    return r.get("event_name") or as_attrs(r).get("event.name")


def as_attrs(r: dict) -> dict:
    a = r.get("attributes")
    return a if isinstance(a, dict) else {}


def approval_notes(records: list[dict], call_id: str | None, tool: str | None) -> list[dict[str, Any]]:
    """The imported approvals of one call (``note.about.imported_approval``), in time order: one per answer, one per expiry, one
    for a request nobody answered (``pending``). Each carries its request's facts."""
    requests: dict[str, dict[str, Any]] = {}
    closed: set[str] = set()
    out: list[dict[str, Any]] = []
    for r in records:
        name, a = _event(r), as_attrs(r)
        aid = _str(a.get("sealbox.approval.id"))
        if aid is None or name not in ("sealbox.approval.requested", "sealbox.approval.answered",
                                       "sealbox.approval.expired"):
            continue
        if name == "sealbox.approval.requested":
            requests[aid] = {k: v for k, v in (
                ("rule", _str(a.get("sealbox.approval.rule"))),
                ("groups", _strs(a.get("sealbox.approval.ask.groups"))),
                ("identities", _strs(a.get("sealbox.approval.ask.identities"))),
                ("quorum", _int(a.get("sealbox.approval.quorum"))),
                ("expires_at", _str(a.get("sealbox.approval.expires_at"))),
                ("requested_by", _str(a.get("sealbox.approval.requested_by")))) if v not in (None, [])}
            continue
        closed.add(aid)
        if name == "sealbox.approval.answered":
            decision = a.get("sealbox.approval.decision")
            if decision not in ("approve", "deny"):
                continue
            approval = {"decision": decision, "identity": _str(a.get("sealbox.approval.identity")),
                        "message": _str(a.get("sealbox.approval.reason")),
                        "answered_at": _str(a.get("sealbox.approval.answered_at")),
                        "key_id": _str(a.get("sealbox.approval.key_id")),
                        "flags": _strs(a.get("sealbox.approval.flags"))}
            counted = a.get("sealbox.approval.counted")
            if counted is False:  # the exporting store did not count it: why (unknown_identity, late, ...)
                approval.update(counted=False, problem=_str(a.get("sealbox.approval.problem")) or "unknown")
        else:
            approval = {"decision": "expired", "identity": None,
                        "expired_at": _str(a.get("sealbox.approval.expired_at"))}
        out.append(_note(name, aid, approval, requests.get(aid), call_id, tool))
    for aid, request in requests.items():
        if aid not in closed:
            out.append(_note("sealbox.approval.requested", aid, {"decision": "pending", "identity": None}, request,
                             call_id, tool))
    return out


def _note(source: str, aid: str, approval: dict[str, Any], request: dict[str, Any] | None, call_id: str | None,
          tool: str | None) -> dict[str, Any]:
    body = {"source": source, "approval_id": aid, "tool": tool, "call_id": call_id, "scope": "call",
            **{k: v for k, v in approval.items() if v not in (None, [])}, "identity": approval.get("identity")}
    if request:
        body["request"] = request
    return body


def note_text(approval: dict[str, Any]) -> str:
    verb = {"approve": "approved", "deny": "rejected", "expired": "expired", "pending": "pending"}[approval["decision"]]
    by = f" by {approval['identity']}" if approval.get("identity") else ""
    if approval.get("counted") is False:
        by += f"; the exporting store did not count it: {approval.get('problem')}"
    return (f"imported approval ({verb}{by}) of call {approval.get('call_id')}, from a Sealbox OTLP export: not a "
            "signed approval of this store; the approver's identity is not authenticated")


def read_run(run: Any, attrs: dict[str, Any], status_error: str | None) -> None:
    """The run span (``invoke_agent``) of a Sealbox run: status, error, labels, original ids."""
    ids = run.original_ids
    ids["sealbox_run_id"] = attrs["sealbox.run_id"]
    for key, name in (("sealbox.principal", "sealbox_principal"), ("sealbox.parent_run_id", "sealbox_parent_run_id"),
                      ("sealbox.snapshot", "sealbox_snapshot"), ("sealbox.replay_of", "sealbox_replay_of")):
        if _str(attrs.get(key)):
            ids[name] = attrs[key]
    policy = {k: attrs[f"sealbox.policy.{k}"] for k in ("name", "fingerprint") if _str(attrs.get(f"sealbox.policy.{k}"))}
    if policy:
        ids["sealbox_policy"] = policy
    status = attrs.get("sealbox.run.status")
    if status in ("ok", "error", "cancelled"):
        run.status = status
    elif isinstance(status, str):
        run.end_info["sealbox_run_status"] = status  # suspended or running when exported
    if run.status == "error":
        etype = _str(attrs.get("error.type")) or "error"
        message = status_error or ""
        if message.startswith(etype + ": "):
            message = message[len(etype) + 2:]
        elif message in ("", etype):
            message = MESSAGE_NOT_EXPORTED
        run.error = {"type": etype, "message": message}
    for key, value in attrs.items():
        if key.startswith("sealbox.label.") and key[len("sealbox.label."):] not in OWN_LABELS:
            run.labels[key[len("sealbox.label."):]] = value
