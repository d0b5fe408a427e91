"""Langfuse trace exports: ``{trace, observations}`` (format ``langfuse``).

One run per trace id (a file may hold one export object or a list of them; exports of
one trace id are one run, an observation repeated with the same id and content once).
``GENERATION`` observations are model calls (``usageDetails`` → usage), ``TOOL``
observations tool calls, ``AGENT`` names the agent. ``input``, ``output`` and
``metadata`` may be objects or JSON text, even JSON text encoded twice: each is
decoded; more than one layer is an ``anomaly``. Tool call ids come from
``metadata.attributes`` (``gen_ai.tool.call.id``, ``ai.toolCall.id``), else the
tool observation is matched to the call a generation requested by name and
arguments (see :mod:`sealbox.interop.importers.spans`). The trace's own input,
output and metadata are kept as a ``state.saved`` labelled ``imported:trace``.
"""

from __future__ import annotations

from typing import Any

from sealbox.interop.importers.common import (
    ImportFormatError,
    RunBuilder,
    as_count,
    as_dict,
    as_list,
    as_str,
    decode_json_string,
    parse_iso,
    never_part,
    source_digest,
)
from sealbox.interop.importers.spans import Span, emit, otel_usage

FORMAT = "langfuse"


def _exports(doc: Any) -> list[Any]:
    if isinstance(doc, dict) and "trace" in doc and "observations" in doc:
        return [doc]
    if isinstance(doc, dict) and isinstance(doc.get("traces"), list):
        return doc["traces"]
    if isinstance(doc, list):
        return doc
    return []


def detect(doc: Any) -> bool:
    items = _exports(doc)
    return bool(items) and all(isinstance(x, dict) and isinstance(x.get("trace"), dict)
                               and isinstance(x.get("observations"), list) for x in items[:5])


def parse(doc: Any, ctx: Any) -> list[RunBuilder]:
    if not detect(doc):
        raise ImportFormatError(f"{ctx.name} is not a Langfuse trace export (expected an object with 'trace' "
                                "and 'observations')")
    items = _exports(doc)
    # one run per trace id: a trace listed twice (the same export pasted twice, pages of one trace) is one
    # run, its observations de-duplicated (spans.build_graph); a trace with no id is a run of its own
    groups: dict[Any, list[dict[str, Any]]] = {}
    for n, item in enumerate(items):
        tid = as_str(as_dict(item.get("trace")).get("id"))
        groups.setdefault(("trace", tid) if tid else ("item", n), []).append(item)
    runs = []
    for n, group in enumerate(groups.values()):
        ctx.progress("parse", n, len(groups))
        runs.append(_run(ctx, group))
    return runs


def _decode(value: Any, run: RunBuilder, where: str) -> Any:
    decoded, layers = decode_json_string(value)
    if layers > 1:
        run.anomaly("double_encoded_json", {"where": where, "layers": layers,
                                            "message": "a field was JSON-encoded more than once; decoded"})
    return decoded


def _run(ctx: Any, group: list[dict[str, Any]]) -> RunBuilder:
    """One run from the exports of one trace (``group``: in file order, all with the trace's id)."""
    trace = as_dict(group[0].get("trace"))
    tid = as_str(trace.get("id"))
    original = {"trace_id": tid}
    for key in ("projectId", "sessionId", "name"):
        if as_str(trace.get(key)):
            original[key] = trace[key]
    run = ctx.new_run(FORMAT, agent=as_str(trace.get("name")) or "langfuse-agent", original_ids=original)
    spans: list[Span] = []
    agents: list[tuple[int | None, str]] = []
    observations = [o for item in group for o in as_list(item.get("observations"))]
    for order, o in enumerate(observations):
        if not isinstance(o, dict):
            run.anomaly("malformed_observation", {"index": order, "message": "an observation is not an object; skipped"})
            continue
        oid = as_str(o.get("id")) or f"observation-{order}"
        where = f"observation {oid}"
        md = as_dict(_decode(o.get("metadata"), run, f"{where}.metadata"))
        attrs = as_dict(_decode(md.get("attributes"), run, f"{where}.metadata.attributes"))
        start = parse_iso(o.get("startTime"), run, f"{where}.startTime")
        end = parse_iso(o.get("endTime"), run, f"{where}.endTime")
        s = Span(id=oid, parent=as_str(o.get("parentObservationId")), name=as_str(o.get("name")) or "", order=order,
                 start_ns=start, end_ns=end, trace_id=tid)
        s.digest = source_digest(o)
        otype = o.get("type")
        if otype == "GENERATION":
            s.role, s.fmt = "model", "langfuse"
            s.model = as_str(o.get("model")) or as_str(attrs.get("gen_ai.response.model")) \
                or as_str(attrs.get("gen_ai.request.model"))
            s.provider = as_str(attrs.get("gen_ai.provider.name")) or as_str(attrs.get("gen_ai.system")) \
                or as_str(attrs.get("llm.system")) or as_str(attrs.get("ai.model.provider"))
            s.request = _decode(o.get("input"), run, f"{where}.input")
            s.response = _decode(o.get("output"), run, f"{where}.output")
            ud = as_dict(o.get("usageDetails")) or as_dict(o.get("usage"))
            usage = {}
            for key, names in (("input_tokens", ("input", "promptTokens", "input_tokens")),
                               ("output_tokens", ("output", "completionTokens", "output_tokens"))):
                for name in names:
                    c = as_count(ud.get(name))
                    if c is not None:
                        usage[key] = c
                        break
            s.usage = usage or otel_usage(attrs)
        elif otype == "TOOL":
            s.role = "tool"
            tool = as_str(attrs.get("gen_ai.tool.name")) or as_str(attrs.get("tool.name")) \
                or as_str(attrs.get("ai.toolCall.name")) or s.name.removeprefix("running tool: ")
            s.tool_name = tool or "unknown"
            s.call_id = as_str(attrs.get("gen_ai.tool.call.id")) or as_str(attrs.get("ai.toolCall.id"))
            if "input" in o and o.get("input") is not None:
                s.arguments = _decode(o.get("input"), run, f"{where}.input")
                s.has_arguments = True
            s.result = _decode(o.get("output"), run, f"{where}.output")
            if o.get("level") == "ERROR":
                msg = o.get("statusMessage")
                s.error = {"type": "error", "message": msg if isinstance(msg, str) and msg else "level ERROR"}
        elif otype == "AGENT":
            s.role = "agent"
            agents.append((start, s.name))
        elif isinstance(attrs.get("gen_ai.agent.name"), str):
            agents.append((start, attrs["gen_ai.agent.name"]))
        s.extra["observation_type"] = otype if isinstance(otype, str) else None
        spans.append(s)
    named = [a for a in agents if a[1]]
    if named:
        run.agent = min(named, key=lambda a: (a[0] is None, a[0] or 0))[1]
    first = source_digest(trace)
    for n, item in enumerate(group):
        this = as_dict(item.get("trace"))
        run.source_parts.append("trace:" + (source_digest(this) or never_part()))
        if n and first is not None and source_digest(this) == first:
            continue  # the same trace record again: nothing new
        if n:  # the same trace id with other trace fields: both kept, flagged
            differ = sorted(k for k in set(trace) | set(this) if trace.get(k) != this.get(k))
            run.anomaly("conflicting_trace", {"trace_id": tid, "fields": differ[:50], "export_index": n,
                                              "message": "the file gives this trace twice with different trace "
                                                         "fields; both are kept (imported:trace)"})
        if any(k in this for k in ("input", "output", "metadata")):
            top = run.new_step()
            run.state(top, {k: _decode(this.get(k), run, f"trace.{k}") for k in ("input", "output", "metadata", "tags")
                            if k in this}, "imported:trace")
    emit(run, spans)
    return run
