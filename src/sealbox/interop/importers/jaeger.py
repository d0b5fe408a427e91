"""Jaeger UI / query-API JSON exports (format ``jaeger``).

``{data: [{traceID, spans: [{spanID, operationName, references: [{refType, spanID}],
startTime (µs), duration (µs), tags: [{key, type, value}], logs, processID}],
processes}], ...}``. One run per trace id (a trace listed twice is one run). The parent is the first ``CHILD_OF``
reference (else the first ``FOLLOWS_FROM``); tags are read as OpenTelemetry
attributes (:func:`sealbox.interop.importers.spans.otel_span`).
"""

from __future__ import annotations

from typing import Any

from sealbox.interop.importers.common import (
    ImportFormatError,
    RunBuilder,
    as_dict,
    as_list,
    as_str,
    parse_epoch,
    never_part,
    source_digest,
)
from sealbox.interop.importers.spans import Span, emit, otel_span

FORMAT = "jaeger"


def _traces(doc: Any) -> list[Any] | None:
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return doc["data"]
    return None


def detect(doc: Any) -> bool:
    data = _traces(doc)
    return bool(data) and all(isinstance(t, dict) and isinstance(t.get("spans"), list)
                              and ("traceID" in t or "processes" in t) for t in data[:5])


def _tags(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in as_list(items):
        if isinstance(t, dict) and isinstance(t.get("key"), str):
            value = t.get("value")
            if t.get("type") == "int64" and isinstance(value, str):
                try:
                    value = int(value)
                except ValueError:
                    pass
            out[t["key"]] = value
    return out


def parse(doc: Any, ctx: Any) -> list[RunBuilder]:
    data = _traces(doc)
    if not data or not detect(doc):
        raise ImportFormatError(f"{ctx.name} is not a Jaeger JSON export (expected an object with a 'data' "
                                "list of traces, each with 'traceID' and 'spans')")
    # one run per trace id: a trace listed twice is one run, its spans de-duplicated (spans.build_graph)
    groups: dict[Any, list[dict[str, Any]]] = {}
    for n, trace in enumerate(data):
        tid = as_str(as_dict(trace).get("traceID"))
        groups.setdefault(("trace", tid) if tid else ("item", n), []).append(as_dict(trace))
    runs = []
    for n, group in enumerate(groups.values()):
        ctx.progress("parse", n, len(groups))
        runs.append(_run(ctx, group))
    return runs


def _run(ctx: Any, group: list[dict[str, Any]]) -> RunBuilder:
    """One run from the traces of one trace id (``group``: in file order); each span's process is
    looked up in its own trace's ``processes``."""
    tid = as_str(group[0].get("traceID"))
    run = ctx.new_run(FORMAT, agent="jaeger-agent", original_ids={"trace_id": tid})
    for trace in group:
        for w in as_list(trace.get("warnings")):
            run.anomaly("source_warning", {"message": str(w)[:500]})
            run.source_parts.append("warning:" + (source_digest(w) or never_part()))
    spans: list[Span] = []
    agents: list[str] = []
    services: list[str] = []
    conversations: set[str] = set()
    listed = [(as_dict(trace.get("processes")), raw) for trace in group for raw in as_list(trace.get("spans"))]
    for order, (processes, raw) in enumerate(listed):
        if not isinstance(raw, dict):
            run.anomaly("malformed_span", {"index": order, "message": "a span is not an object; skipped"})
            continue
        sid = as_str(raw.get("spanID")) or f"span-{order}"
        if not as_str(raw.get("spanID")):
            run.anomaly("malformed_span", {"index": order, "message": "a span has no spanID; one was assigned"})
        refs = [as_dict(r) for r in as_list(raw.get("references"))]
        parent = next((as_str(r.get("spanID")) for r in refs if r.get("refType") == "CHILD_OF"), None) \
            or next((as_str(r.get("spanID")) for r in refs if r.get("refType") == "FOLLOWS_FROM"), None) \
            or as_str(raw.get("parentSpanID"))
        attrs = _tags(raw.get("tags"))
        where = f"span {sid}"
        start = parse_epoch(raw.get("startTime"), 1000, run, where)
        duration = parse_epoch(raw.get("duration"), 1000, run, where) if raw.get("duration") else 0
        end = start + (duration or 0) if start is not None else None
        for w in as_list(raw.get("warnings")):
            run.anomaly("source_warning", {"span_id": sid, "message": str(w)[:500]})
        error = None
        if attrs.get("error") in (True, "true") or attrs.get("otel.status_code") == "ERROR":
            desc = attrs.get("otel.status_description")
            error = desc if isinstance(desc, str) else ""
        pid = raw.get("processID")
        if pid is not None and not isinstance(pid, str):
            run.anomaly("malformed_span", {"span_id": sid, "message": "processID is not a string; ignored"})
            pid = None
        proc = as_dict(processes.get(pid)) if pid is not None else {}
        if as_str(proc.get("serviceName")):
            services.append(proc["serviceName"])
        logs = [{"timestamp": as_dict(lg).get("timestamp"), "fields": _tags(as_dict(lg).get("fields"))}
                for lg in as_list(raw.get("logs"))]
        name = raw.get("operationName") if isinstance(raw.get("operationName"), str) else ""
        s = otel_span(run, span_id=sid, parent=parent, name=name, order=order, start_ns=start, end_ns=end,
                      attrs=attrs, trace_id=tid, status_error=error, log_records=logs or None)
        s.digest = source_digest([raw, proc])
        if s.role == "agent" and isinstance(attrs.get("gen_ai.agent.name"), str):
            agents.append(attrs["gen_ai.agent.name"])
        if isinstance(attrs.get("gen_ai.conversation.id"), str):
            conversations.add(attrs["gen_ai.conversation.id"])
        spans.append(s)
    run.agent = agents[0] if agents else (services[0] if services else "jaeger-agent")
    if conversations:
        run.original_ids["conversation_ids"] = sorted(conversations)
    if services:
        run.original_ids["service_name"] = services[0]
    emit(run, spans)
    return run
