"""OTLP/JSON traces with GenAI semantic conventions (format ``otlp-json``).

Accepts an ``ExportTraceServiceRequest`` in JSON (``resourceSpans`` → ``scopeSpans``
→ ``spans``), the older field names some trace stores still export
(``instrumentationLibrarySpans`` / ``instrumentationLibrary``), the snake_case
field names of the protobuf JSON mapping, enum-string span kinds
(``SPAN_KIND_CLIENT``) and status codes (``STATUS_CODE_ERROR``), hex or base64
ids, and JSON Lines files holding one request per line (the collector's file
exporter). ``resourceLogs`` records tied to a model span (``gen_ai.*`` message
events), and its own ``gen_ai.*`` span events, become that model call's request when the span has
none; its system instructions (``gen_ai.system_instructions``, of the span or of a
``gen_ai.client.inference.operation.details`` event, or a ``gen_ai.system.message`` event) are the
first message of a request taken from ``gen_ai.input.messages``.

One run per trace id. See :mod:`sealbox.interop.importers.spans` for how spans
become model and tool calls.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Iterator

from sealbox.interop.importers import sealbox_otlp
from sealbox.interop.importers.common import (
    ImportFormatError,
    RunBuilder,
    as_dict,
    as_list,
    as_str,
    parse_epoch,
    source_digest,
)
from sealbox.interop.importers.spans import Span, emit, otel_span

FORMAT = "otlp-json"

_SCOPE_KEYS = ("scopeSpans", "scope_spans", "instrumentationLibrarySpans", "instrumentation_library_spans")
_LOG_SCOPE_KEYS = ("scopeLogs", "scope_logs", "instrumentationLibraryLogs", "instrumentation_library_logs")
_HEX = re.compile(r"^[0-9a-fA-F]+$")


def _get(d: dict, *names: str) -> Any:
    for n in names:
        if n in d:
            return d[n]
    return None


def _requests(doc: Any) -> list[dict]:
    if isinstance(doc, dict) and isinstance(doc.get("$jsonl"), list):
        return [r for r in doc["$jsonl"] if isinstance(r, dict)]
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)]
    return [doc] if isinstance(doc, dict) else []


def detect(doc: Any) -> bool:
    reqs = _requests(doc)
    return bool(reqs) and all(isinstance(_get(r, "resourceSpans", "resource_spans"), list) for r in reqs[:5])


def any_value(v: Any, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` (camelCase or snake_case) as a plain value."""
    if not isinstance(v, dict) or depth > 32:
        return v
    for key in ("stringValue", "string_value"):
        if key in v:
            return v[key]
    for key in ("boolValue", "bool_value"):
        if key in v:
            return v[key]
    for key in ("intValue", "int_value"):
        if key in v:
            x = v[key]
            if isinstance(x, str):
                try:
                    return int(x)
                except ValueError:
                    return x
            return x
    for key in ("doubleValue", "double_value"):
        if key in v:
            x = v[key]
            if isinstance(x, str):
                try:
                    return float(x)
                except ValueError:
                    return x
            return x
    for key in ("arrayValue", "array_value"):
        if key in v:
            return [any_value(x, depth + 1) for x in as_list(as_dict(v[key]).get("values"))]
    for key in ("kvlistValue", "kvlist_value"):
        if key in v:
            return attributes(as_dict(v[key]).get("values"), depth + 1)
    for key in ("bytesValue", "bytes_value"):
        if key in v:
            return v[key]
    return None


def attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in as_list(items):
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = any_value(kv.get("value"), depth)
    return out


def norm_id(value: Any, width: int) -> str | None:
    """A span/trace id as lowercase hex; base64 (the protobuf JSON mapping) is converted."""
    if not isinstance(value, str) or not value:
        return None
    if _HEX.match(value) and len(value) == width:
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
        if len(raw) * 2 == width:
            return raw.hex()
    except (binascii.Error, ValueError):
        pass
    return value.lower() if _HEX.match(value) else value


_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def span_kind(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return _KINDS.get(value, "unspecified")
    if isinstance(value, str):
        return value.upper().removeprefix("SPAN_KIND_").lower() or "unspecified"
    return "unspecified"


def status_error(status: Any) -> str | None:
    """The status message when a span's status is ERROR (code 2 / ``STATUS_CODE_ERROR``), else None."""
    st = as_dict(status)
    code = st.get("code")
    if code in (2, "2", "STATUS_CODE_ERROR", "ERROR", "error"):
        msg = st.get("message")
        return msg if isinstance(msg, str) else ""
    return None


def iter_spans(doc: Any) -> Iterator[tuple[dict, dict, dict]]:
    """(resource attributes, scope, span) for every span of every request."""
    for req in _requests(doc):
        for rs in as_list(_get(req, "resourceSpans", "resource_spans")):
            rs = as_dict(rs)
            res = attributes(as_dict(rs.get("resource")).get("attributes"))
            for key in _SCOPE_KEYS:
                for ss in as_list(rs.get(key)):
                    ss = as_dict(ss)
                    scope = as_dict(_get(ss, "scope", "instrumentationLibrary", "instrumentation_library"))
                    for span in as_list(ss.get("spans")):
                        yield res, scope, span


def iter_logs(doc: Any) -> Iterator[dict]:
    for req in _requests(doc):
        for rl in as_list(_get(req, "resourceLogs", "resource_logs")):
            for key in _LOG_SCOPE_KEYS:
                for sl in as_list(as_dict(rl).get(key)):
                    for rec in as_list(_get(as_dict(sl), "logRecords", "log_records")):
                        if isinstance(rec, dict):
                            yield rec


def _genai_span_events(events: Any) -> list[dict[str, Any]]:
    """A span's ``gen_ai.*`` span events (``gen_ai.system.message``, ``gen_ai.user.message``,
    ``gen_ai.client.inference.operation.details``...) in the shape of its log records; other span
    events (exceptions...) are left out."""
    out = []
    for ev in as_list(events):
        ev = as_dict(ev)
        name = ev.get("name")
        if isinstance(name, str) and name.startswith("gen_ai."):
            out.append({"event_name": name, "body": None, "attributes": attributes(ev.get("attributes")),
                        "time_unix_nano": _get(ev, "timeUnixNano", "time_unix_nano")})
    return out


def _requested_by(links: Any) -> list[str]:
    """Span ids a span's links name with ``sealbox.link = requested_by`` (Sealbox's tool → chat link)."""
    out = []
    for link in as_list(links):
        link = as_dict(link)
        if attributes(link.get("attributes")).get("sealbox.link") == "requested_by":
            sid = norm_id(_get(link, "spanId", "span_id"), 16)
            if sid:
                out.append(sid)
    return out


def parse(doc: Any, ctx: Any) -> list[RunBuilder]:
    if not detect(doc):
        raise ImportFormatError(f"{ctx.name} is not OTLP/JSON (expected an object with a 'resourceSpans' list)")
    logs: dict[str, list[Any]] = {}
    seen_records: set[tuple[str, str]] = set()
    for rec in iter_logs(doc):
        sid = norm_id(_get(rec, "spanId", "span_id"), 16)
        if sid:
            digest = source_digest(rec)
            if digest is not None:
                if (sid, digest) in seen_records:  # the same record again (a file holding an export twice)
                    ctx.duplicates += 1
                    continue
                seen_records.add((sid, digest))
            attrs = attributes(rec.get("attributes"))
            logs.setdefault(sid, []).append({
                "event_name": _get(rec, "eventName", "event_name") or attrs.get("event.name"),
                "body": any_value(rec.get("body")), "attributes": attrs,
                "time_unix_nano": _get(rec, "timeUnixNano", "time_unix_nano", "observedTimeUnixNano"),
            })
    traces: dict[str, list[tuple[dict, dict, dict]]] = {}
    for res, scope, span in iter_spans(doc):
        tid = norm_id(_get(as_dict(span), "traceId", "trace_id"), 32) or ""
        traces.setdefault(tid, []).append((res, scope, span))
    if not traces:
        raise ImportFormatError(f"{ctx.name} is OTLP/JSON but holds no spans")
    runs = []
    for n, (tid, items) in enumerate(traces.items()):
        ctx.progress("parse", n, len(traces))
        runs.append(_run(ctx, tid, items, logs))
    return runs


def _run(ctx: Any, tid: str, items: list[tuple[dict, dict, dict]], logs: dict[str, list[Any]]) -> RunBuilder:
    service = next((as_str(r.get("service.name")) for r, _, _ in items if as_str(r.get("service.name"))), None)
    run = ctx.new_run(FORMAT, agent=service or "otel-agent", original_ids={"trace_id": tid or None})
    if not tid:
        run.anomaly("missing_trace_id", {"message": "spans without a trace id were imported as one run"})
    spans: list[Span] = []
    agents: list[str] = []
    sealbox_runs: list[tuple[bool, int, dict, str | None]] = []
    conversations: set[str] = set()
    kinds: set[str] = set()
    for order, (res, scope, raw) in enumerate(items):
        if not isinstance(raw, dict):
            run.anomaly("malformed_span", {"index": order, "message": "a span is not an object; skipped"})
            continue
        sid = norm_id(_get(raw, "spanId", "span_id"), 16)
        if not sid:
            run.anomaly("malformed_span", {"index": order, "message": "a span has no span id; one was assigned"})
            sid = f"span-{order}"
        attrs = attributes(raw.get("attributes"))
        where = f"span {sid}"
        start = parse_epoch(_get(raw, "startTimeUnixNano", "start_time_unix_nano"), 1, run, where)
        end = parse_epoch(_get(raw, "endTimeUnixNano", "end_time_unix_nano"), 1, run, where)
        kinds.add(span_kind(raw.get("kind")))
        name = raw.get("name") if isinstance(raw.get("name"), str) else ""
        parent = norm_id(_get(raw, "parentSpanId", "parent_span_id"), 16)
        records = (logs.get(sid) or []) + _genai_span_events(raw.get("events"))
        s = otel_span(run, span_id=sid, parent=parent, name=name,
                      order=order, start_ns=start, end_ns=end, attrs=attrs, trace_id=tid or None,
                      status_error=status_error(raw.get("status")), log_records=records or None,
                      links=_requested_by(raw.get("links")))
        s.digest = source_digest([res, scope, raw, logs.get(sid) or []])
        if s.role == "agent" and isinstance(attrs.get("gen_ai.agent.name"), str):
            agents.append(attrs["gen_ai.agent.name"])
        if s.role == "agent" and sealbox_otlp.is_sealbox(attrs):
            sealbox_runs.append((bool(parent), order, attrs, status_error(raw.get("status"))))
        if isinstance(attrs.get("gen_ai.conversation.id"), str):
            conversations.add(attrs["gen_ai.conversation.id"])
        spans.append(s)
    if agents:
        run.agent = agents[0]
    if sealbox_runs:  # runs exported by Sealbox: the trace's root run (child runs nest in its trace)
        sealbox_runs.sort(key=lambda r: (r[0], r[1]))
        _, _, root_attrs, root_error = sealbox_runs[0]
        sealbox_otlp.read_run(run, root_attrs, root_error)
        if len(sealbox_runs) > 1:
            run.original_ids["sealbox_child_run_ids"] = [r[2]["sealbox.run_id"] for r in sealbox_runs[1:]]
    if conversations:
        run.original_ids["conversation_ids"] = sorted(conversations)
    if service:
        run.original_ids["service_name"] = service
    emit(run, spans)
    return run
