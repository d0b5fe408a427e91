"""OpenAI Agents SDK (Python) serialized ``RunState`` files (format ``openai-agents-runstate``).

A RunState is a paused or finished run saved by the SDK, including human
approvals of tool calls. Schema versions ``1.0`` to ``1.17`` are accepted; a
missing or other version, or a ``current_agent`` that is not an object with a
name, is refused with an error that quotes nothing from the file.

- Model responses (``model_responses``) are ``model.call`` events; the calls in
  their ``output`` (``function_call``, ``custom_tool_call``, ``program``, ``*_call``)
  are ``tool.call`` at ``N.k``; a call whose ``caller`` is another call of the
  same response (programmatic tool calling) is nested under it (``N.k.1``).
  Calls found only in ``generated_items``, ``session_items``,
  ``last_processed_response`` or an interruption get their own step. A call is
  one call wherever it appears: matched by ``call_id``.
- ``*_output`` items are the ``tool.result`` of the call their ``call_id`` names.
- Approvals (``context.approvals``: ``approved`` is ``true`` — always — or a list
  of call ids; ``rejected`` likewise, with ``rejection_messages``;
  ``context.hosted_mcp_approvals``; pending ``tool_approval_item`` interruptions)
  become ``note`` events with ``about.imported_approval`` and
  ``identity_authenticated: false`` — never ``approval.answered``, which needs an
  approver's signature. The call's ``policy.decision`` says what the approval
  meant: ``deny`` (rejected: the call did not run), ``require_approval`` (still
  pending when the state was saved: outcome ``held``) or ``allow``.
"""

from __future__ import annotations

import re
from typing import Any

from sealbox.interop.importers.common import (
    ImportFormatError,
    RunBuilder,
    as_count,
    as_dict,
    as_list,
    as_str,
    lenient,
    normalize_arguments,
)

FORMAT = "openai-agents-runstate"
MAX_MINOR = 17
_VERSION = re.compile(r"^1\.(\d{1,3})$")


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and ("$schemaVersion" in doc or (
        "current_agent" in doc and ("generated_items" in doc or "model_responses" in doc)))


def validate(doc: Any, name: str) -> None:
    """Refuse what the SDK would refuse; messages never quote the file."""
    if not isinstance(doc, dict):
        raise ImportFormatError(f"{name} is not an OpenAI Agents RunState (the top level is not an object)")
    version = doc.get("$schemaVersion")
    if version is None:
        raise ImportFormatError(f"{name} is not a usable OpenAI Agents RunState: it has no $schemaVersion")
    m = _VERSION.match(version) if isinstance(version, str) else None
    if m is None or int(m.group(1)) > MAX_MINOR:
        raise ImportFormatError(f"{name} uses a RunState $schemaVersion this importer does not support "
                                f"(supported: 1.0 to 1.{MAX_MINOR}); the value is not shown")
    agent = doc.get("current_agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("name"), str) or not agent.get("name"):
        raise ImportFormatError(f"{name} is not a usable OpenAI Agents RunState: current_agent is not an "
                                "object with a name; the value is not shown")


_CALL_TYPES = {"function_call", "custom_tool_call", "program"}


def _is_call(item: dict) -> bool:
    t = item.get("type")
    return isinstance(t, str) and (t in _CALL_TYPES or t.endswith("_call")) and \
        isinstance(item.get("call_id") or item.get("id"), str)


def _is_output(item: dict) -> bool:
    t = item.get("type")
    return isinstance(t, str) and t.endswith("_output") and isinstance(item.get("call_id"), str)


def _call_parts(item: dict) -> tuple[str, Any, bool]:
    """(tool name, raw arguments, has arguments)."""
    t = item.get("type")
    if t == "program":
        return "program", {"code": item.get("code")}, True
    name = as_str(item.get("name")) or str(t)
    for key in ("arguments", "input", "action"):
        if key in item:
            return name, item[key], True
    return name, None, False


def parse(doc: Any, ctx: Any) -> list[RunBuilder]:
    validate(doc, ctx.name)
    agent = doc["current_agent"]["name"]
    trace = as_dict(doc.get("trace"))
    original: dict[str, Any] = {"schema_version": doc["$schemaVersion"]}
    if as_str(trace.get("id")):
        original["trace_id"] = trace["id"]
    responses = [r for r in as_list(doc.get("model_responses")) if isinstance(r, dict)]
    rids = [r.get("response_id") for r in responses if as_str(r.get("response_id"))]
    if rids:
        original["response_ids"] = rids
    for key in ("conversation_id", "previous_response_id"):
        if as_str(doc.get(key)):
            original[key] = doc[key]
    run = ctx.new_run(FORMAT, agent=agent, original_ids=original)
    context = doc.get("context")
    if context is not None and not isinstance(context, dict):
        run.anomaly("malformed_field", {"field": "context", "message": "context is not an object; approvals ignored"})
    context = as_dict(context)

    # every place a call or an output can appear, in file order
    wrapped: list[dict] = []
    for key in ("generated_items", "session_items"):
        value = doc.get(key)
        if value is not None and not isinstance(value, list):
            run.anomaly("malformed_field", {"field": key, "message": f"{key} is not a list; ignored"})
        wrapped += [as_dict(x) for x in as_list(value)]
    lpr = as_dict(doc.get("last_processed_response"))
    wrapped += [as_dict(x) for x in as_list(lpr.get("new_items"))]
    raw_items: list[dict] = [as_dict(w.get("raw_item")) for w in wrapped]
    raw_items += [as_dict(as_dict(f).get("tool_call")) for f in as_list(lpr.get("functions"))]
    step = as_dict(doc.get("current_step"))
    pending: dict[str, dict] = {}
    if step.get("type") == "next_step_interruption":
        for it in as_list(as_dict(step.get("data")).get("interruptions")):
            raw = as_dict(as_dict(it).get("raw_item"))
            cid = as_str(raw.get("call_id")) or as_str(raw.get("id"))
            if cid:
                pending[cid] = {"tool": as_str(as_dict(it).get("tool_name")) or as_str(raw.get("name")),
                                "origin": as_dict(it).get("tool_origin")}
                raw_items.append(raw)
    outputs: dict[str, Any] = {}
    for w in wrapped:
        raw = as_dict(w.get("raw_item"))
        if _is_output(raw):
            outputs.setdefault(raw["call_id"], w.get("output", raw.get("output", raw.get("result"))))
    for r in responses:
        for raw in as_list(r.get("output")):
            raw = as_dict(raw)
            if _is_output(raw):
                outputs.setdefault(raw["call_id"], raw.get("output", raw.get("result")))

    approvals = _approvals(context, run)
    placed: dict[str, tuple[int, tuple[int, ...], str]] = {}

    def place_call(raw: dict, top: int, sub: tuple[int, ...], where: str) -> None:
        cid = as_str(raw.get("call_id")) or as_str(raw.get("id"))
        tool, args, has = _call_parts(raw)
        args = normalize_arguments(args, run, where) if has else None
        effect, reason, notes = _decision(cid, tool, approvals, pending)
        src = {"item_id": raw.get("id"), "type": raw.get("type")}
        if isinstance(raw.get("caller"), dict):
            src["caller"] = raw["caller"]
        run.tool_call(top, sub, call_id=cid, tool=tool, arguments=args, effect=effect, reason=reason, source=src,
                      server=_server(raw))
        for note in notes:
            run.imported_approval(top, sub, text=note["text"], approval=note["approval"])
        if cid in outputs and effect != "deny":
            run.tool_result(top, sub, call_id=cid, ok=True, result=lenient(outputs[cid]))
        placed[cid] = (top, sub, tool)

    for i, resp in enumerate(responses):
        ctx.progress("parse", i, len(responses))
        top = run.new_step()
        calls = [as_dict(x) for x in as_list(resp.get("output")) if _is_call(as_dict(x))]
        usage = as_dict(resp.get("usage"))
        run.model_call(top, provider="openai", model=as_str(resp.get("model")) or "unknown",
                       request={"original_input": doc.get("original_input")} if i == 0 else None,
                       response=resp, usage={"input_tokens": as_count(usage.get("input_tokens")),
                                             "output_tokens": as_count(usage.get("output_tokens"))},
                       fmt="openai.responses", source={"response_id": resp.get("response_id")},
                       tool_call_ids=[i for c in calls
                                      if isinstance(i := as_str(c.get("call_id")) or c.get("id"), str)])
        subs: dict[str, tuple[int, ...]] = {}
        children: dict[str, int] = {}
        k = 0
        for c in calls:
            cid = as_str(c.get("call_id")) or as_str(c.get("id"))
            if cid in placed:
                continue
            caller = as_str(as_dict(c.get("caller")).get("caller_id"))
            if caller and caller in subs:
                children[caller] = children.get(caller, 0) + 1
                sub = (*subs[caller], children[caller])
            else:
                k += 1
                sub = (k,)
            subs[cid] = sub
            place_call(c, top, sub, f"model_responses[{i}]")
    for j, raw in enumerate(raw_items):
        if _is_call(raw):
            cid = as_str(raw.get("call_id")) or as_str(raw.get("id"))
            if cid not in placed:
                place_call(raw, run.new_step(), (), f"items[{j}]")
    # approvals that name no call present in the file
    for note in approvals["notes"]:
        cid = note["approval"].get("call_id")
        if cid is None or cid not in placed:
            run.imported_approval(run.new_step(), (), text=note["text"], approval=note["approval"])
    run.end_info["final_state"] = "interrupted" if pending else ("finished" if doc.get("no_active_agent_run") is False
                                                                else "saved")
    if pending:
        run.end_info["pending_approvals"] = sorted(pending)
    if isinstance(doc.get("current_turn"), int):
        run.end_info["current_turn"] = doc["current_turn"]
    return [run]


def _server(raw: dict) -> str | None:
    label = raw.get("server_label")
    return label if isinstance(label, str) and label else None


def _approvals(context: dict, run: RunBuilder) -> dict[str, Any]:
    """Per tool: approved (True or ids), rejected (True or ids), messages; plus notes for all of them."""
    per_tool: dict[str, dict[str, Any]] = {}
    notes: list[dict[str, Any]] = []
    for k, (tool, rec) in enumerate(as_dict(context.get("approvals")).items(), 1):
        if not isinstance(rec, dict):
            run.anomaly("malformed_approval", {"tool": tool, "message": "an approval record is not an object; ignored"})
            continue
        where = f"context.approvals (tool {k}).{{}}"  # the tool's name is the file's content: not shown
        approved = _call_ids(rec.get("approved"), run, where.format("approved"))
        rejected = _call_ids(rec.get("rejected"), run, where.format("rejected"))
        messages = as_dict(rec.get("rejection_messages"))
        per_tool[tool] = {"approved": approved, "rejected": rejected}
        base = {"source": "context.approvals", "tool": tool}
        if rec.get("sticky_scope") is not None:
            base["sticky_scope"] = rec["sticky_scope"]
        if approved is True:
            notes.append(_note({**base, "decision": "approve", "scope": "tool", "call_id": None}))
        for cid in (approved if isinstance(approved, list) else []):
            notes.append(_note({**base, "decision": "approve", "scope": "call", "call_id": cid}))
        if rejected is True:
            notes.append(_note({**base, "decision": "deny", "scope": "tool", "call_id": None}))
        for cid in (rejected if isinstance(rejected, list) else []):
            n = {**base, "decision": "deny", "scope": "call", "call_id": cid}
            if isinstance(messages.get(cid), str):
                n["message"] = messages[cid]
            notes.append(_note(n))
    for m, entry in enumerate(as_list(context.get("hosted_mcp_approvals"))):
        entry = as_dict(entry)
        ident, dec = as_dict(entry.get("identity")), as_dict(entry.get("decision"))
        base = {"source": "context.hosted_mcp_approvals", "tool": ident.get("tool_name"),
                "server_label": ident.get("server_label"), "request_id": ident.get("request_id"),
                "kind": ident.get("type")}
        for flag, decision in (("approved", "approve"), ("rejected", "deny")):
            value = _call_ids(dec.get(flag), run, f"context.hosted_mcp_approvals[{m}].decision.{flag}")
            if value is True:
                notes.append(_note({**base, "decision": decision, "scope": "tool", "call_id": None}))
            for cid in (value if isinstance(value, list) else []):
                notes.append(_note({**base, "decision": decision, "scope": "request", "call_id": cid}))
    return {"per_tool": per_tool, "notes": notes}


def _call_ids(value: Any, run: RunBuilder, where: str) -> Any:
    """``approved`` / ``rejected``: a boolean, or a list of call ids (strings).

    Any other entry is refused whole, not skipped: dropping a rejection would import the
    call as allowed. The message names the place, never the value (a refused file may
    hold secrets).
    """
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, list):
        raise ImportFormatError(f"{run.source_file} is not a usable OpenAI Agents RunState: {where} is "
                                f"{_json_type(value)}, not true, false or a list of call ids; the value is not shown")
    for i, cid in enumerate(value):
        if not isinstance(cid, str):
            raise ImportFormatError(f"{run.source_file} is not a usable OpenAI Agents RunState: {where}[{i}] is "
                                    f"not a call id (a string) but {_json_type(cid)}; the value is not shown")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def _note(approval: dict[str, Any]) -> dict[str, Any]:
    what = approval.get("tool") or "a tool"
    target = f"call {approval['call_id']}" if approval.get("call_id") else f"every call of {what}"
    verb = {"approve": "approved", "deny": "rejected", "pending": "pending"}[approval["decision"]]
    return {"text": f"imported approval ({verb}) of {target}; the approver's identity is not authenticated",
            "approval": {**approval, "identity": None}}


def _decision(cid: str, tool: str, approvals: dict[str, Any], pending: dict[str, dict]) \
        -> tuple[str, str, list[dict[str, Any]]]:
    rec = approvals["per_tool"].get(tool, {})
    call_notes = [n for n in approvals["notes"] if n["approval"].get("call_id") == cid]
    rejected, approved = rec.get("rejected"), rec.get("approved")
    if (isinstance(rejected, list) and cid in rejected) or (rejected is True and not
                                                            (isinstance(approved, list) and cid in approved)):
        return "deny", "rejected by an imported approval (identity not authenticated)", call_notes
    if (isinstance(approved, list) and cid in approved) or approved is True:
        return "allow", "approved by an imported approval (identity not authenticated)", call_notes
    if cid in pending:
        note = _note({"source": "interruption", "tool": tool, "decision": "pending", "scope": "call", "call_id": cid})
        return "require_approval", "waiting for a human approval when the state was saved", [note]
    return "allow", "imported call: no Sealbox policy decided it", []
