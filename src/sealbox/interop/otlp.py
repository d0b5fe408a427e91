"""OpenTelemetry export: recorded runs as OTLP traces and logs (GenAI semantic conventions).

Nothing is sent unless asked: this module only talks to the network inside
:func:`export_otlp`, to the endpoint it is given (never one read from the
environment). :func:`build_otlp` builds the same spans and log records without
sending anything.

Mapping (docs/otlp.md has the full table):

- a run is an ``invoke_agent {agent}`` span (INTERNAL) from ``run.started`` to
  ``run.ended`` (or its last event), with ``gen_ai.conversation.id`` = the run id:
  a run that paused and resumed stays one span and one conversation; each pause is
  a ``sealbox.suspended`` child span from ``run.suspended`` to ``run.resumed``;
- a ``model.call`` is a ``chat {model}`` span (CLIENT) ending at the event's time and
  lasting ``latency_us`` (no length, and no ``sealbox.model.latency_us``, where it is null: not known);
  one recorded from stream chunks (``stream: {chunks: N}``) has ``gen_ai.request.stream`` true and
  ``sealbox.model.stream.chunks`` N, its response being the one the chunks added up to;
- a ``tool.call`` is an ``execute_tool {tool}`` span (INTERNAL) from the call to its
  last event (decision, approval, result), at least ``duration_us`` long; it carries
  the final decision (``sealbox.decision.*``), error status when ``tool.result`` has
  ``ok: false``, and a link to the ``chat`` span whose response requested it;
- ``policy.decision``, ``approval.requested``, ``approval.answered`` and
  ``approval.expired`` are log records (``event.name`` = ``sealbox.<kind>``) in the
  tool span's context.

Trace and span ids are derived from run ids, call ids and run sequence numbers
(SHA-256), so exporting the same runs again sends the same ids and a backend that
de-duplicates sees no new spans. Content — tool arguments and results, error
messages, model requests and responses (``gen_ai.input.messages`` and the other GenAI
content attributes, and the exact bodies in ``sealbox.model.request`` / ``.response``) —
is exported only with ``content=True``, and then as the store holds it
(redacted or hashed per the store's content mode).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, set_span_in_context
from opentelemetry.trace.status import Status, StatusCode

from sealbox.errors import BlobNotFoundError, ConfigError, SealboxError
from sealbox.events import SYSTEM_RUN_ID, Event

__all__ = ["OtlpExportError", "OtlpBatch", "OtlpExportSummary", "build_otlp", "export_otlp", "signal_urls",
           "trace_id_for", "span_id_for", "parse_headers"]

#: The name of the instrumentation scope of every span and log record.
SCOPE_NAME = "sealbox"
#: Spans per OTLP request (requests stay far below the exporters' 64 MiB limit).
BATCH_SIZE = 512

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ID_DOMAIN = "sealbox/otlp/v1"
_LOG_KINDS = ("policy.decision", "approval.requested", "approval.answered", "approval.expired")


class OtlpExportError(SealboxError):
    """The runs could not be exported: unknown run, bad endpoint, or the endpoint refused them."""


@dataclass
class OtlpBatch:
    """What one export sends: the spans and log records, and the trace id of each run."""

    spans: list[ReadableSpan] = field(default_factory=list)
    logs: list[ReadableLogRecord] = field(default_factory=list)
    traces: dict[str, str] = field(default_factory=dict)  # run id -> trace id (32 hex digits)


@dataclass(frozen=True)
class OtlpExportSummary:
    """What :func:`export_otlp` sent, and where."""

    runs: int
    spans: int
    logs: int
    traces: dict[str, str]
    traces_url: str
    logs_url: str
    content: bool

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "spans": self.spans, "logs": self.logs, "traces": dict(self.traces),
                "traces_url": self.traces_url, "logs_url": self.logs_url, "content": self.content}


# ----------------------------------------------------------------- ids and times

def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join((_ID_DOMAIN, *parts)).encode("utf-8")).digest()


def trace_id_for(run_id: str) -> int:
    """The 128-bit trace id of the trace rooted at run ``run_id`` (never 0)."""
    return int.from_bytes(_digest("trace", run_id)[:16], "big") or 1


def span_id_for(*parts: str) -> int:
    """A 64-bit span id derived from ``parts`` (``"run", run_id`` / ``"tool", run_id, call_id`` …; never 0)."""
    return int.from_bytes(_digest("span", *parts)[:8], "big") or 1


def _ns(ts: str) -> int:
    """RFC 3339 time (``Z`` or an offset, up to microseconds) → Unix nanoseconds, exactly."""
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def signal_urls(endpoint: str) -> tuple[str, str]:
    """The OTLP/HTTP traces and logs URLs for ``endpoint``.

    ``endpoint`` is the collector's base URL (``http://host:4318``, with or without
    a path prefix); a URL already ending in ``/v1/traces`` or ``/v1/logs`` is
    accepted too. The signal paths are appended as the OTLP specification says.

    Raises:
        ConfigError: not an http(s) URL with a host (and a port from 1 to 65535, when one is given);
            a URL that cannot be parsed, or holds spaces or control characters.
    """
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise ConfigError("an OTLP endpoint URL is required (for example http://localhost:4318)")
    url = endpoint.strip()
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "http://[::1": Invalid IPv6 URL; "http://[zz]/": not an IP address
        raise ConfigError(f"the OTLP endpoint {endpoint!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"the OTLP endpoint must be an http:// or https:// URL, got {endpoint!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"the OTLP endpoint must not have a query or fragment, got {endpoint!r}")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ConfigError(f"the OTLP endpoint must not contain spaces or control characters, got {endpoint!r}")
    try:
        port = parts.port
    except ValueError:  # "http://h:abc", "http://h:99999"
        raise ConfigError(f"the OTLP endpoint's port must be a number from 1 to 65535, got {endpoint!r}") from None
    if not parts.hostname or port == 0:
        raise ConfigError(f"the OTLP endpoint needs a host and a port from 1 to 65535, got {endpoint!r}")
    base = url.rstrip("/")
    for suffix in ("/v1/traces", "/v1/logs"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base + "/v1/traces", base + "/v1/logs"


# ----------------------------------------------------------------- building

def build_otlp(store: Any, run_ids: Iterable[str], *, content: bool = False,
               service_name: str = "sealbox") -> OtlpBatch:
    """Build the spans and log records of ``run_ids`` (nothing is sent).

    Args:
        store: an open store (read-only is enough).
        run_ids: runs to export; a child run whose parent is among them nests under
            the parent's span, in the parent's trace.
        content: include tool arguments, results, error messages and model requests and responses
            (:func:`model_content_attributes`).
        service_name: the resource's ``service.name``.

    Raises:
        OtlpExportError: no runs given, an unknown run, or the system run.
    """
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        raise OtlpExportError("no runs to export")
    runs: dict[str, list[Event]] = {}
    for run_id in ids:
        if run_id == SYSTEM_RUN_ID:
            raise OtlpExportError("the system run holds store events, not an agent run; it is not exported to OTLP")
        events = store.read_run(run_id)
        if not events:
            raise OtlpExportError(f"no run {run_id!r} in this store")
        if events[0].kind != "run.started":
            raise OtlpExportError(f"run {run_id} does not begin with run.started")
        runs[run_id] = events
    from sealbox import __version__

    resource = Resource({"service.name": service_name, "sealbox.store.origin": str(getattr(store, "origin", "") or ""),
                         "sealbox.store.id": str(getattr(store, "store_id", "") or "")})
    scope = InstrumentationScope(SCOPE_NAME, __version__)
    batch = OtlpBatch()
    for run_id in ids:
        root = _root_of(run_id, runs)
        trace_id = trace_id_for(root)
        batch.traces[run_id] = f"{trace_id:032x}"
        parent = runs[run_id][0].payload.get("parent_run_id")
        parent_ctx = _ctx(trace_id, span_id_for("run", parent)) if root != run_id else None
        _RunBuilder(store, run_id, runs[run_id], trace_id, parent_ctx, content, resource, scope, batch).build()
    return batch


def _root_of(run_id: str, runs: Mapping[str, list[Event]]) -> str:
    """The outermost ancestor of ``run_id`` among the exported runs (cycle-safe)."""
    seen = {run_id}
    current = run_id
    while True:
        parent = runs[current][0].payload.get("parent_run_id")
        if not isinstance(parent, str) or parent not in runs or parent in seen:
            return current
        seen.add(parent)
        current = parent


def _ctx(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _attrs(**values: Any) -> dict[str, Any]:
    """Attributes without None values (OTLP has no null); keys use '.' for '__'."""
    return {k.replace("__", "."): v for k, v in values.items() if v is not None}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _call_key(value: Any) -> str:
    """A ``tool.call``'s ``call_id``; in a malformed event (any value, or none), ``malformed:`` and its JSON."""
    return value if isinstance(value, str) else "malformed:" + _json(value)


def _strs(value: Any) -> tuple[str, ...] | None:
    """The strings of a list (an attribute array holds one type), None when there are none."""
    return tuple(v for v in value if isinstance(v, str)) or None if isinstance(value, (list, tuple)) else None


@dataclass
class _Call:
    event: Event
    decisions: list[Event] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)  # leaf indexes of its approval.requested events
    result: Event | None = None
    last_ns: int = 0


class _RunBuilder:
    """Spans and log records of one run."""

    def __init__(self, store: Any, run_id: str, events: list[Event], trace_id: int, parent: SpanContext | None,
                 content: bool, resource: Resource, scope: InstrumentationScope, batch: OtlpBatch) -> None:
        self.store, self.run_id, self.events, self.trace_id = store, run_id, events, trace_id
        self.parent, self.content, self.resource, self.scope, self.batch = parent, content, resource, scope, batch
        self.verdicts: dict[int, Any] = {}  # approval.answered leaf -> its Answer, set by build()
        self.request_states: dict[int, Any] = {}  # request leaf -> its ApprovalState, set by build()
        self.request_call: dict[int, str] = {}  # leaf of a request naming no call -> the call at its step
        self.run_ctx = _ctx(trace_id, span_id_for("run", run_id))

    # -- helpers

    def _resolve(self, value: Any) -> Any:
        try:
            return self.store.resolve(value)
        except BlobNotFoundError:  # erased under retention: keep the commitment ({"$blob": ...})
            return value

    def _span(self, name: str, ctx: SpanContext, parent: SpanContext | None, kind: SpanKind, start: int, end: int,
              attributes: dict[str, Any], status: Status | None = None, links: Sequence[Link] = ()) -> None:
        self.batch.spans.append(ReadableSpan(
            name=name, context=ctx, parent=parent, resource=self.resource, attributes=attributes, kind=kind,
            links=tuple(links), status=status or Status(StatusCode.UNSET), start_time=start, end_time=max(start, end),
            instrumentation_scope=self.scope))

    def _log(self, ev: Event, ctx: SpanContext, severity: SeverityNumber, body: str, attributes: dict[str, Any]) -> None:
        name = f"sealbox.{ev.kind}"
        attrs = {"event.name": name, "sealbox.run_id": self.run_id, "sealbox.step": ev.step,
                 "sealbox.event.leaf_index": ev.leaf_index, "sealbox.event.leaf_hash": ev.leaf_hash,
                 "sealbox.principal": ev.principal, **attributes}
        ts = _ns(ev.ts)
        record = LogRecord(timestamp=ts, observed_timestamp=ts, context=set_span_in_context(NonRecordingSpan(ctx),
                                                                                            Context()),
                           severity_text=severity.name, severity_number=severity, body=body,
                           attributes=attrs, event_name=name)
        self.batch.logs.append(ReadableLogRecord(record, resource=self.resource, instrumentation_scope=self.scope))

    # -- the run

    def _approval_states(self) -> list[Any]:
        """Each approval request of the run, in log order, as every reader takes it
        (:func:`sealbox.approvals.evaluate`, with the store's identities read once)."""
        if not any(e.kind == "approval.requested" for e in self.events):
            return []
        from sealbox.approvals import _RELATED, evaluate
        from sealbox.identities import identity_book

        book = identity_book(self.store)
        related = [e for e in self.events if e.kind in _RELATED]
        return [evaluate(e, related, book) for e in self.events if e.kind == "approval.requested"]

    def build(self) -> None:
        # each approval.answered's verdict by leaf index, as every reader takes it: whether it counts,
        # why not, its flags (with the shared_identity flag the log implies); each request's state,
        # which gives a held call's outcome (sealbox.approvals.call_outcome, as `sealbox calls`)
        states = self._approval_states()
        self.verdicts = {a.leaf_index: a for st in states for a in st.answers}
        self.request_states = {st.leaf_index: st for st in states}  # by leaf: a malformed request's id may be any value
        events = self.events
        started = events[0]
        info = started.payload
        start_ns = _ns(started.ts)
        end_ns = max(_ns(e.ts) for e in events)
        calls: dict[str, _Call] = {}
        approval_call: dict[str, str] = {}
        call_at: dict[str, str] = {}  # step -> the call made there
        requested_by: dict[str, SpanContext] = {}
        suspensions: list[dict[str, Any]] = []
        usage = {"input_tokens": 0, "output_tokens": 0}
        ended: Event | None = None
        pending_logs: list[Event] = []
        for ev in events:
            p = ev.payload
            if ev.kind == "model.call":
                ctx = self._model_span(ev, start_ns)
                for tc_id in p.get("tool_call_ids") or ():
                    if isinstance(tc_id, str):  # None: a call requested without an id; else a malformed event
                        requested_by.setdefault(tc_id, ctx)
                u = p.get("usage") or {}
                usage["input_tokens"] += _int(u.get("input_tokens")) or 0
                usage["output_tokens"] += _int(u.get("output_tokens")) or 0
            elif ev.kind == "tool.call":
                cid = _call_key(p.get("call_id"))
                if cid not in calls:
                    calls[cid] = _Call(ev, last_ns=_ns(ev.ts))
                call_at.setdefault(ev.step, cid)
            elif ev.kind in _LOG_KINDS:
                pending_logs.append(ev)
                aid = p.get("approval_id") if isinstance(p.get("approval_id"), str) else None  # malformed: any value
                call_id = p.get("call_id") if ev.kind != "approval.answered" and ev.kind != "approval.expired" \
                    else approval_call.get(aid or "")
                if ev.kind == "approval.requested" and not isinstance(call_id, str):
                    call_id = call_at.get(ev.step)  # a malformed request naming no call: the call at its step
                    if call_id is not None:
                        self.request_call[ev.leaf_index] = call_id
                if ev.kind == "approval.requested" and isinstance(p.get("call_id"), str) and aid is not None:
                    approval_call[aid] = p["call_id"]
                call = calls.get(call_id) if isinstance(call_id, str) else None
                if call is not None:
                    call.last_ns = max(call.last_ns, _ns(ev.ts))
                    if ev.kind == "policy.decision":
                        call.decisions.append(ev)
                    elif ev.kind == "approval.requested":
                        call.requests.append(ev.leaf_index)
                        if aid is not None:
                            call.approvals.append(aid)
            elif ev.kind == "tool.result":
                call = calls.get(_call_key(p.get("call_id")))
                if call is not None:
                    call.result = ev
                    call.last_ns = max(call.last_ns, _ns(ev.ts))
            elif ev.kind == "run.suspended":
                suspensions.append({"event": ev, "resumed": None})
            elif ev.kind == "run.resumed":
                wanted = set(p.get("approval_ids") or ())
                for s in suspensions:
                    if s["resumed"] is None and (not wanted or wanted & set(s["event"].payload.get("approval_ids") or ())):
                        s["resumed"] = ev
                        break
            elif ev.kind == "run.ended":
                ended = ev

        for call in calls.values():
            self._tool_span(call, requested_by.get(_call_key(call.event.payload.get("call_id"))))
        for s in suspensions:
            self._suspension_span(s["event"], s["resumed"], end_ns)
        for ev in pending_logs:
            self._decision_or_approval_log(ev, calls, approval_call)

        if ended is not None:  # an imported run not ended at its source: its source's status, as runs list says
            from sealbox.query import imported_run_status

            status_text = (info.get("imported") is not None and imported_run_status(ended.payload.get("imported"))
                           or ended.payload.get("status"))
        elif suspensions and suspensions[-1]["resumed"] is None:
            status_text = "suspended"
        else:
            status_text = "running"
            if info.get("lease") is True and info.get("imported") is None and hasattr(self.store, "get_run"):
                # its process held a liveness lease: 'interrupted' when it has died, as runs list says
                row = self.store.get_run(self.run_id)
                if row is not None and row.get("status") == "interrupted":
                    status_text = "interrupted"
        status = None
        if status_text == "error":
            err = ended.payload.get("error") or {} if ended is not None else {}
            status = Status(StatusCode.ERROR, self._error_text(err))
        waited = sum(_int(s["resumed"].payload.get("waited_us")) or 0 for s in suspensions if s["resumed"] is not None)
        labels = info.get("labels") if isinstance(info.get("labels"), dict) else {}  # malformed: any value
        policy = info.get("policy") or {}
        attrs = _attrs(
            gen_ai__operation__name="invoke_agent", gen_ai__agent__name=info.get("agent"),
            gen_ai__agent__id=started.principal, gen_ai__conversation__id=self.run_id,
            gen_ai__usage__input_tokens=usage["input_tokens"], gen_ai__usage__output_tokens=usage["output_tokens"],
            sealbox__run_id=self.run_id, sealbox__principal=started.principal, sealbox__run__status=status_text,
            sealbox__snapshot=_str(info.get("snapshot")), sealbox__policy__fingerprint=_str(policy.get("fingerprint")),
            sealbox__policy__name=_str(policy.get("name")), sealbox__parent_run_id=_str(info.get("parent_run_id")),
            sealbox__replay_of=_str(info.get("replay_of")), sealbox__run__suspensions=len(suspensions),
            sealbox__run__waited_us=waited, sealbox__event__leaf_index=started.leaf_index,
            sealbox__event__leaf_hash=started.leaf_hash,
        )
        if ended is not None and isinstance(ended.payload.get("error"), dict):
            attrs["error.type"] = str(ended.payload["error"].get("type"))
        if info.get("imported") is not None:
            attrs["sealbox.imported"] = True
        for key, value in sorted(labels.items()):
            if isinstance(value, (str, bool, int, float)):
                attrs[f"sealbox.label.{key}"] = value
        name = f"invoke_agent {info.get('agent')}"
        self._span(name, self.run_ctx, self.parent, SpanKind.INTERNAL, start_ns, end_ns, attrs, status)

    def _error_text(self, err: Mapping[str, Any]) -> str:
        kind = str(err.get("type") or "error")
        if self.content and isinstance(err.get("message"), str):
            return f"{kind}: {err['message']}"
        return kind

    # -- model calls

    def _model_span(self, ev: Event, run_start: int) -> SpanContext:
        p = ev.payload
        ctx = _ctx(self.trace_id, span_id_for("model", self.run_id, str(ev.run_seq)))
        request = self._resolve(p.get("request"))
        response = self._resolve(p.get("response"))
        req = request if isinstance(request, dict) else {}
        resp = response if isinstance(response, dict) else {}
        request_model = _str(req.get("model")) or _str(p.get("model")) or "unknown"
        usage = p.get("usage") or {}
        end = _ns(ev.ts)
        latency_us = _int(p.get("latency_us"))  # None: not known (no attribute; the span has no length)
        start = max(end - (latency_us or 0) * 1000, min(run_start, end))  # a child never starts before its run
        finish = _finish_reasons(resp)
        cost = usage.get("cost")
        stream = p.get("stream") if isinstance(p.get("stream"), dict) else None  # recorded from stream chunks
        attrs = _attrs(
            gen_ai__operation__name="chat", gen_ai__provider__name=_str(p.get("provider")),
            gen_ai__request__model=request_model, gen_ai__response__model=_str(resp.get("model")),
            gen_ai__response__id=_str(resp.get("id")),
            gen_ai__response__finish_reasons=tuple(finish) if finish else None,
            gen_ai__usage__input_tokens=_int(usage.get("input_tokens")),
            gen_ai__usage__output_tokens=_int(usage.get("output_tokens")),
            gen_ai__conversation__id=self.run_id, sealbox__run_id=self.run_id, sealbox__step=ev.step,
            sealbox__model__format=_str(p.get("format")), sealbox__model__latency_us=latency_us,
            sealbox__model__tool_call_ids=tuple(p.get("tool_call_ids") or ()) or None,
            sealbox__usage__cost=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            gen_ai__request__stream=True if stream is not None else None,
            sealbox__model__stream__chunks=_int(stream.get("chunks")) if stream is not None else None,
            sealbox__event__leaf_index=ev.leaf_index, sealbox__event__leaf_hash=ev.leaf_hash,
        )
        if self.content:
            attrs.update(model_content_attributes(_str(p.get("format")), request, response))
        self._span(f"chat {request_model}", ctx, self.run_ctx, SpanKind.CLIENT, start, end, attrs)
        return ctx

    # -- tool calls

    def _tool_ctx(self, call_id: str) -> SpanContext:
        return _ctx(self.trace_id, span_id_for("tool", self.run_id, call_id))

    def _tool_span(self, call: _Call, model_ctx: SpanContext | None) -> None:
        from sealbox.approvals import call_outcome, imported_call_outcome

        p = call.event.payload
        cid = _call_key(p.get("call_id"))
        start = _ns(call.event.ts)
        end = call.last_ns
        decision = call.decisions[-1].payload if call.decisions else {}
        effect = decision.get("effect")
        status = None
        result = call.result.payload if call.result is not None else None
        if result is not None:
            end = max(end, _ns(call.result.ts), start + (_int(result.get("duration_us")) or 0) * 1000)
            outcome = "ok" if result.get("ok") else "error"
        elif call.requests and call.requests[-1] in self.request_states:
            # held for approval: what its (latest) request came to, as `sealbox calls` gives it
            outcome = call_outcome(self.request_states[call.requests[-1]])
        elif effect == "deny":
            outcome = "denied"
        elif effect == "require_approval":  # imported: the outcome its exporting store gave it
            outcome = imported_call_outcome(p) or "held"
        else:
            outcome = "unknown"  # allowed and no result: still running, or the process died while it ran
        attrs = _attrs(
            gen_ai__operation__name="execute_tool", gen_ai__tool__name=_str(p.get("tool")), gen_ai__tool__call__id=cid,
            gen_ai__tool__type="function", sealbox__server=_str(p.get("server")),
            sealbox__tool__exposed=_str(p.get("exposed")),
            sealbox__grant=_str(p.get("grant")), sealbox__run_id=self.run_id, sealbox__step=call.event.step,
            sealbox__decision__effect=_str(effect), sealbox__decision__rule=_str(decision.get("rule")),
            sealbox__decision__reason_code=_str(decision.get("reason_code")),
            sealbox__policy__fingerprint=_str(decision.get("policy_fingerprint")),
            sealbox__approval__ids=tuple(call.approvals) or None, sealbox__tool__outcome=outcome,
            sealbox__tool__duration_us=_int(result.get("duration_us")) if result is not None else None,
            sealbox__event__leaf_index=call.event.leaf_index, sealbox__event__leaf_hash=call.event.leaf_hash,
        )
        if result is not None and not result.get("ok"):
            err = result.get("error") or {}
            attrs["error.type"] = str(err.get("type") or "error")
            status = Status(StatusCode.ERROR, self._error_text(err))
        if self.content:
            attrs["gen_ai.tool.call.arguments"] = _json(self._resolve(p.get("arguments")))
            if result is not None and result.get("ok") and "result" in result:
                attrs["gen_ai.tool.call.result"] = _json(self._resolve(result.get("result")))
        links = [Link(model_ctx, {"sealbox.link": "requested_by"})] if model_ctx is not None else []
        self._span(f"execute_tool {p.get('tool')}", self._tool_ctx(cid), self.run_ctx, SpanKind.INTERNAL,
                   start, end, attrs, status, links)

    # -- suspensions

    def _suspension_span(self, ev: Event, resumed: Event | None, run_end: int) -> None:
        p = ev.payload
        start = _ns(ev.ts)
        end = _ns(resumed.ts) if resumed is not None else run_end
        attrs = _attrs(sealbox__run_id=self.run_id, sealbox__approval__ids=tuple(p.get("approval_ids") or ()) or None,
                       sealbox__suspend__reason=_str(p.get("reason")), sealbox__suspension__open=resumed is None,
                       sealbox__event__leaf_index=ev.leaf_index, sealbox__event__leaf_hash=ev.leaf_hash)
        if resumed is not None:
            rp = resumed.payload
            attrs["sealbox.resumed.waited_us"] = _int(rp.get("waited_us")) or 0
            outcomes = rp.get("outcomes") or {}
            if outcomes:
                attrs["sealbox.resumed.outcomes"] = tuple(f"{k}={v}" for k, v in sorted(outcomes.items()))
        ctx = _ctx(self.trace_id, span_id_for("suspended", self.run_id, str(ev.run_seq)))
        self._span("sealbox.suspended", ctx, self.run_ctx, SpanKind.INTERNAL, start, end, attrs)

    # -- decisions and approvals: log records

    def _decision_or_approval_log(self, ev: Event, calls: Mapping[str, _Call], approval_call: Mapping[str, str]) -> None:
        p = ev.payload
        call_id = p.get("call_id") if ev.kind in ("policy.decision", "approval.requested") \
            else approval_call.get(p["approval_id"] if isinstance(p.get("approval_id"), str) else "")
        if ev.kind == "approval.requested" and not isinstance(call_id, str):
            call_id = self.request_call.get(ev.leaf_index)
        ctx = self._tool_ctx(call_id) if isinstance(call_id, str) and call_id in calls else self.run_ctx
        call = calls.get(call_id) if isinstance(call_id, str) else None
        tool = call.event.payload if call is not None else {}
        common = _attrs(gen_ai__tool__call__id=_str(call_id), gen_ai__tool__name=_str(p.get("tool") or tool.get("tool")),
                        sealbox__server=_str(p.get("server") or tool.get("server")))
        if ev.kind == "policy.decision":
            effect = p.get("effect")
            attrs = _attrs(sealbox__decision__effect=effect, sealbox__decision__rule=_str(p.get("rule")),
                           sealbox__decision__reason_code=_str(p.get("reason_code")),
                           sealbox__decision__reason=_str(p.get("reason")),
                           sealbox__policy__fingerprint=_str(p.get("policy_fingerprint")),
                           sealbox__decision__eval_us=_int(p.get("eval_us")),
                           sealbox__decision__reevaluated=p.get("reevaluated") if isinstance(p.get("reevaluated"), bool)
                           else None)
            severity = SeverityNumber.WARN if effect == "deny" else SeverityNumber.INFO
            rule = f" by rule {p.get('rule')}" if p.get("rule") else ""
            body = f"{effect}{rule} ({p.get('reason_code')}): {p.get('reason')}"
        elif ev.kind == "approval.requested":
            ask = p.get("ask") if isinstance(p.get("ask"), dict) else {}  # a malformed request's may be anything
            state = self.request_states.get(ev.leaf_index)
            attrs = _attrs(sealbox__approval__id=_str(p.get("approval_id")),
                           sealbox__approval__binding=_str(p.get("binding")),
                           sealbox__approval__rule=_str(p.get("rule")),
                           sealbox__approval__ask__groups=_strs(ask.get("groups")),
                           sealbox__approval__ask__identities=_strs(ask.get("identities")),
                           sealbox__approval__malformed=state.malformed if state is not None else None,
                           sealbox__approval__quorum=_int(p.get("quorum")),
                           sealbox__approval__expires_at=_str(p.get("expires_at")),
                           sealbox__approval__requested_by=_str(p.get("requested_by")))
            if self.content:
                attrs["gen_ai.tool.call.arguments"] = _json(self._resolve(p.get("arguments")))
            severity = SeverityNumber.WARN if "sealbox.approval.malformed" in attrs else SeverityNumber.INFO
            body = f"approval {p.get('approval_id')} requested for {p.get('server')}/{p.get('tool')}"
        elif ev.kind == "approval.answered":
            verdict = self.verdicts.get(ev.leaf_index)
            raw = verdict.flags if verdict is not None else p.get("flags") or ()
            flags = tuple(dict.fromkeys(str(f.get("code")) for f in raw if isinstance(f, dict)))
            problem = "unknown_approval" if verdict is None else verdict.problem
            attrs = _attrs(sealbox__approval__id=p.get("approval_id"), sealbox__approval__decision=p.get("decision"),
                           sealbox__approval__identity=_str(p.get("identity")),
                           sealbox__approval__answered_at=_str(p.get("answered_at")),
                           sealbox__approval__reason=_str(p.get("reason")),
                           sealbox__approval__binding=_str(p.get("binding")),
                           sealbox__approval__key_id=_str(p.get("key_id")), sealbox__approval__flags=flags or None,
                           sealbox__approval__counted=problem is None, sealbox__approval__problem=problem)
            severity = SeverityNumber.WARN if p.get("decision") == "deny" or flags or problem else SeverityNumber.INFO
            body = f"{p.get('identity')} answered {p.get('decision')} to approval {p.get('approval_id')}"
            if problem is not None:
                body += f" (does not count: {problem})"
        else:  # approval.expired
            attrs = _attrs(sealbox__approval__id=p.get("approval_id"),
                           sealbox__approval__expired_at=_str(p.get("expired_at")))
            severity = SeverityNumber.WARN
            body = f"approval {p.get('approval_id')} expired"
        self._log(ev, ctx, severity, body, {**common, **attrs})


def model_content_attributes(fmt: str | None, request: Any, response: Any) -> dict[str, str]:
    """The content attributes of a ``chat`` span (sent only with ``content=True``), as JSON text.

    ``gen_ai.input.messages``, ``gen_ai.system_instructions`` and ``gen_ai.output.messages`` follow the
    GenAI semantic conventions (``{"role", "parts": [{"type": "text" | "tool_call" | "tool_call_response",
    ...}]}``; output messages with their ``finish_reason``), converted from the recorded OpenAI chat,
    OpenAI Responses or Anthropic Messages body (another format has none of them: there is no
    conversion to make). That conversion loses what the conventions have no place for (sampling
    parameters, tool definitions, provider fields), so the exact recorded bodies also go in
    ``sealbox.model.request`` and ``sealbox.model.response``, which ``sealbox import`` reads back.
    Values are as the store holds them (redacted or hashed per its content mode); a missing body
    (None) gives no attribute.
    """
    out: dict[str, str] = {}
    if request is not None:
        out["sealbox.model.request"] = _json(request)
    if response is not None:
        out["sealbox.model.response"] = _json(response)
    try:
        system, messages, output = _genai_messages(fmt, request, response)
    except (TypeError, ValueError, AttributeError):  # a body not of its format's shape: the raw bodies only
        return out
    if system:
        out["gen_ai.system_instructions"] = _json(system)
    if messages:
        out["gen_ai.input.messages"] = _json(messages)
    if output:
        out["gen_ai.output.messages"] = _json(output)
    return out


def _text_parts(content: Any) -> list[dict[str, Any]]:
    """GenAI parts of a message's content: a string, or a list of content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for block in content:
            if isinstance(block, str):
                parts.append({"type": "text", "content": block})
            elif isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text"):
                parts.append({"type": "text", "content": block.get("text")})
            elif isinstance(block, dict) and block.get("type") == "tool_use":
                parts.append({"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                              "arguments": block.get("input")})
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                parts.append({"type": "tool_call_response", "id": block.get("tool_use_id"),
                              "response": block.get("content")})
            else:  # an image, a document, a thinking block...: kept as given
                parts.append(block if isinstance(block, dict) and "type" in block else {"type": "unknown",
                                                                                       "content": block})
        return parts
    return [{"type": "unknown", "content": content}]


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _openai_message(m: Mapping[str, Any]) -> dict[str, Any]:
    role = m.get("role") or "user"
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": m.get("tool_call_id"),
                                           "response": m.get("content")}]}
    parts = _text_parts(m.get("content"))
    for tc in m.get("tool_calls") or ():
        fn = tc.get("function") or {}
        parts.append({"type": "tool_call", "id": tc.get("id"), "name": fn.get("name"),
                      "arguments": _arguments(fn.get("arguments"))})
    out: dict[str, Any] = {"role": role, "parts": parts}
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def _responses_items(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "parts": [{"type": "text", "content": items}]}]
    out: list[dict[str, Any]] = []
    for item in items or ():
        kind = item.get("type")
        if kind == "function_call":
            out.append({"role": "assistant", "parts": [{"type": "tool_call", "id": item.get("call_id"),
                                                        "name": item.get("name"),
                                                        "arguments": _arguments(item.get("arguments"))}]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": item.get("call_id"),
                                                   "response": item.get("output")}]})
        elif kind in (None, "message"):
            out.append({"role": item.get("role") or "assistant", "parts": _text_parts(item.get("content"))})
        else:  # reasoning, web search...: kept as given
            out.append({"role": "assistant", "parts": [item]})
    return out


def _genai_messages(fmt: str | None, request: Any, response: Any) -> tuple[list, list, list]:
    """(system instructions, input messages, output messages) in the GenAI conventions' shape."""
    req = request if isinstance(request, dict) else {}
    resp = response if isinstance(response, dict) else {}
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    if fmt == "openai.chat":
        for m in req.get("messages") or ():
            if m.get("role") in ("system", "developer"):
                system.extend(_text_parts(m.get("content")))
            else:
                messages.append(_openai_message(m))
        for choice in resp.get("choices") or ():
            msg = _openai_message({"role": "assistant", **(choice.get("message") or {})})
            output.append({**msg, "finish_reason": choice.get("finish_reason")})
    elif fmt == "anthropic.messages":
        system = _text_parts(req.get("system"))
        messages = [{"role": m.get("role") or "user", "parts": _text_parts(m.get("content"))}
                    for m in req.get("messages") or ()]
        if resp.get("content") is not None:
            output = [{"role": resp.get("role") or "assistant", "parts": _text_parts(resp.get("content")),
                       "finish_reason": resp.get("stop_reason")}]
    elif fmt == "openai.responses":
        system = _text_parts(req.get("instructions"))
        messages = _responses_items(req.get("input"))
        parts = [p for m in _responses_items(resp.get("output")) for p in m["parts"]]
        if parts:
            output = [{"role": "assistant", "parts": parts, "finish_reason": resp.get("status")}]
    return system, messages, output


def _finish_reasons(resp: Mapping[str, Any]) -> list[str]:
    """Finish reasons of an OpenAI chat completion, an Anthropic message or an OpenAI Responses response
    (its ``status``: ``completed``, ``incomplete``, ``failed``, as ``gen_ai.output.messages`` gives it);
    empty if none."""
    out: list[str] = []
    choices = resp.get("choices")
    if isinstance(choices, list):
        out = [c["finish_reason"] for c in choices if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)]
    elif isinstance(resp.get("stop_reason"), str):
        out = [resp["stop_reason"]]
    elif resp.get("object") == "response" and isinstance(resp.get("status"), str):
        out = [resp["status"]]
    return out


# ----------------------------------------------------------------- sending

def export_otlp(store: Any, run_ids: Iterable[str], endpoint: str, *, content: bool = False,
                headers: Mapping[str, str] | None = None, timeout: float = 10.0,
                service_name: str = "sealbox") -> OtlpExportSummary:
    """Send runs to an OTLP/HTTP endpoint as traces and logs (protobuf), with the OpenTelemetry SDK's exporters.

    Args:
        store: an open store (read-only is enough).
        run_ids: the runs to send (whole runs; child runs nest when sent with their parent).
        endpoint: the collector's base URL, e.g. ``http://localhost:4318`` (``/v1/traces`` and
            ``/v1/logs`` are appended); required — nothing is sent to a default or an
            endpoint taken from the environment.
        content: also send tool arguments, results, error messages and model requests and responses
            (off by default).
        headers: HTTP headers for both signals (e.g. an API key).
        timeout: seconds per request, retries included.
        service_name: the resource's ``service.name``.

    Returns:
        An :class:`OtlpExportSummary` (counts, trace id per run, URLs).

    Raises:
        ConfigError: a bad endpoint or headers, or the OTLP exporter is not installed.
        OtlpExportError: an unknown run, or the endpoint did not accept the data.
    """
    traces_url, logs_url = signal_urls(endpoint)
    hdrs = _check_headers(headers)
    try:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigError("OTLP export needs the OpenTelemetry OTLP/HTTP exporter: "
                          "pip install 'sealbox[otlp]'") from exc
    from opentelemetry.sdk._logs.export import LogRecordExportResult
    from opentelemetry.sdk.trace.export import SpanExportResult

    batch = build_otlp(store, run_ids, content=content, service_name=service_name)
    spans_sent = logs_sent = 0
    span_exporter = OTLPSpanExporter(endpoint=traces_url, headers=hdrs, timeout=timeout)
    try:
        for chunk in _chunks(batch.spans):
            if span_exporter.export(chunk) is not SpanExportResult.SUCCESS:
                raise OtlpExportError(f"the OTLP endpoint {traces_url} did not accept the spans "
                                      f"({spans_sent} of {len(batch.spans)} sent, no logs sent)")
            spans_sent += len(chunk)
    finally:
        span_exporter.shutdown()
    log_exporter = OTLPLogExporter(endpoint=logs_url, headers=hdrs, timeout=timeout)
    try:
        for chunk in _chunks(batch.logs):
            if log_exporter.export(chunk) is not LogRecordExportResult.SUCCESS:
                raise OtlpExportError(f"the OTLP endpoint {logs_url} did not accept the log records "
                                      f"(all {spans_sent} spans sent, {logs_sent} of {len(batch.logs)} log records)")
            logs_sent += len(chunk)
    finally:
        log_exporter.shutdown()
    return OtlpExportSummary(runs=len(batch.traces), spans=spans_sent, logs=logs_sent, traces=dict(batch.traces),
                             traces_url=traces_url, logs_url=logs_url, content=content)


def _chunks(items: list[Any]) -> Iterable[list[Any]]:
    for i in range(0, len(items), BATCH_SIZE):
        yield items[i:i + BATCH_SIZE]


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    if not headers:
        return None
    out: dict[str, str] = {}
    for key, value in headers.items():
        if not isinstance(key, str) or not key.strip() or any(c in key for c in ":\r\n ") or not isinstance(value, str) \
                or any(c in value for c in "\r\n"):
            raise ConfigError(f"invalid OTLP header {key!r}")
        out[key.strip()] = value
    return out


def parse_headers(pairs: Iterable[str]) -> dict[str, str]:
    """``["K=V", ...]`` (from ``--otlp-header``) → a dict; raises :class:`ConfigError` on a pair without ``=``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--otlp-header takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return _check_headers(out) or {}
