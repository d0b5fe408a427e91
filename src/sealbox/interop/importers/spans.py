"""Span graphs (OTLP, Jaeger, Langfuse observations) → the events of one run.

Every span-shaped format is first turned into :class:`Span` records; this module
then builds the parent graph defensively and emits the run's events:

- A span repeated with the same id and identical content (a trace exported twice into
  one file) is skipped: it adds nothing (counted in ``RunBuilder.duplicates``).
- Graph repair, each an ``anomaly``: a span id repeated with different content (the
  later span is kept under ``<id>#dup<n>``, nothing is merged or dropped), a span that is its own parent, a parent that is not in
  the file (the span becomes a root), a parent cycle (broken at its earliest span).
  Every walk is iterative and bounded, so no input loops or overflows the stack.
- Model calls: a model span nested inside another model span (ADK ``call_llm`` →
  ``generate_content``, kagent ``call_llm`` → ``openai.chat``, Vercel
  ``ai.generateText`` → ``doGenerate``) is the same call seen twice: the innermost
  span is the ``model.call``; an enclosing model span with exactly one model span
  inside lends it whatever it lacks (request, response, usage).
- Tool calls: one ``tool.call`` per tool span, linked to the model call that
  requested it by, in order: its call id among the ids the model's response
  requested (``gen_ai.tool.call.id``, ``call_id``, ``toolCallId``, ``tool_use.id``);
  span parentage (the tool span sits under the model span); the latest earlier
  model call that requested a tool of that name without an id. A linked call gets
  step ``N.k`` (k = its position in the model's response), so parallel calls stay
  siblings. A call requested by a model with no tool span is listed in the model
  call's ``tool_call_ids`` only (it may never have run).
- Spans exported by Sealbox itself (``sealbox.run_id``) are read back further
  (decision, duration, linkage by ``sealbox.model.tool_call_ids`` or a ``requested_by``
  span link, approvals as notes): see :mod:`sealbox.interop.importers.sealbox_otlp`.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from typing import Any

from sealbox.interop.importers import sealbox_otlp
from sealbox.interop.importers.common import (
    RunBuilder,
    as_count,
    as_dict,
    never_part,
    normalize_arguments,
    ts_field,
)

_MAX_WALK = 200_000
_MAX_DEPTH = 64


@dataclass
class Span:
    """A span or observation in a common shape (filled by each format's module)."""

    id: str
    parent: str | None
    name: str
    order: int
    start_ns: int | None = None
    end_ns: int | None = None
    role: str = "other"  # "model" | "tool" | "agent" | "other"
    trace_id: str | None = None
    # model
    provider: str | None = None
    model: str | None = None
    request: Any = None
    response: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    fmt: str = "unknown"
    # tool
    tool_name: str | None = None
    call_id: str | None = None
    arguments: Any = None
    has_arguments: bool = False
    result: Any = None
    error: dict[str, str] | None = None
    server: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    logs: list[Any] | None = None  # log records tied to the span (used as the request when it has none)
    # what a Sealbox OTLP export says besides (sealbox_otlp.py); empty for other sources
    exposed: str | None = None
    decision: dict[str, Any] | None = None  # the source's decision: effect, rule, reason_code, ...
    ran: bool | None = None  # False: the source says the tool did not run (denied, pending...)
    duration_us: int | None = None  # the tool's own running time (a model call's latency), when the source gives it
    digest: str | None = None  # common.source_digest of the source item: an identical repeat is skipped
    latency_unknown: bool = False  # a Sealbox export's model call whose latency its store did not know
    stream: dict[str, int] | None = None  # a Sealbox export's model call recorded from stream chunks
    system: list[Any] | None = None  # GenAI system instructions given apart from the input messages (parts)
    approvals: list[dict[str, Any]] = field(default_factory=list)  # approvals, for imported approval notes
    requested_ids: list[str | None] = field(default_factory=list)  # call ids a model span requested, in place
    links: list[str] = field(default_factory=list)  # span ids of the model spans that requested this tool span
    # filled here
    requested: list[list[Any]] = field(default_factory=list)  # [id, name, args]


# --------------------------------------------------------------------------- tool calls in responses


def extract_tool_calls(value: Any) -> list[tuple[str | None, str, Any]]:
    """Tool calls a model response requests, in any of the shapes seen in the corpus.

    OpenAI chat ``tool_calls`` items, OpenAI Responses ``function_call`` /
    ``custom_tool_call`` items, OTel GenAI ``parts`` of type ``tool_call``,
    Anthropic ``tool_use`` blocks, Gemini ``function_call`` / ``functionCall``,
    Vercel AI SDK ``{toolCallId, toolName, input}``. Walks iteratively (bounded);
    calls with the same id are reported once.
    """
    out: list[tuple[str | None, str, Any]] = []
    seen_ids: set[str] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    steps = 0
    while stack and steps < _MAX_WALK:
        steps += 1
        v, depth = stack.pop()
        if depth > _MAX_DEPTH:
            continue
        if isinstance(v, list):
            stack.extend((x, depth + 1) for x in reversed(v))
            continue
        if not isinstance(v, dict):
            continue
        found = _tool_call_of(v)
        if found is not None:
            cid = found[0]
            if cid is None or cid not in seen_ids:
                out.append(found)
                if cid is not None:
                    seen_ids.add(cid)
            continue
        items = list(v.items())
        for key, x in reversed(items):
            if key in ("function_call", "functionCall") and isinstance(x, dict) and isinstance(x.get("name"), str):
                cid = x.get("id") if isinstance(x.get("id"), str) and x.get("id") else None
                stack.append(({"$gemini": (cid, x["name"], x.get("args", x.get("arguments")))}, depth + 1))
            elif key in ("tools", "function_declarations", "functions"):
                continue  # tool definitions, not calls
            else:
                stack.append((x, depth + 1))
    return out


def _tool_call_of(d: dict) -> tuple[str | None, str, Any] | None:
    if "$gemini" in d and len(d) == 1:
        return d["$gemini"]
    t = d.get("type")
    name = d.get("name")

    def sid(*keys: str) -> str | None:
        for k in keys:
            if isinstance(d.get(k), str) and d[k]:
                return d[k]
        return None

    if t in ("function_call", "custom_tool_call") and isinstance(name, str):
        return sid("call_id", "id"), name, d.get("arguments", d.get("input"))
    if t in ("tool_call", "tool-call") and isinstance(name, str):
        return sid("id", "call_id", "toolCallId"), name, d.get("arguments", d.get("args", d.get("input")))
    if t == "tool_use" and isinstance(name, str):
        return sid("id"), name, d.get("input")
    fn = d.get("function")
    if isinstance(fn, dict) and isinstance(fn.get("name"), str) and ("arguments" in fn or t == "function"):
        return sid("id"), fn["name"], fn.get("arguments")
    if t is None and isinstance(name, str) and "arguments" in d and isinstance(d.get("id"), str):
        return d["id"], name, d["arguments"]  # OpenLLMetry's flattened gen_ai.completion.N.tool_calls.M
    if isinstance(d.get("toolName"), str) and ("toolCallId" in d or "input" in d or "args" in d):
        return sid("toolCallId"), d["toolName"], d.get("input", d.get("args"))
    return None


def unflatten(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.0.role``, ``prefix.0.tool_calls.1.name``… (OpenLLMetry) → a list of nested dicts."""
    root: dict[str, Any] = {}
    p = prefix + "."
    for key, value in attrs.items():
        if not key.startswith(p):
            continue
        node = root
        parts = key[len(p):].split(".")
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = node[part] = {}
            node = nxt
        node[parts[-1]] = value
    return _listify(root) if root else []


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _listify(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[k] for k in sorted(items, key=int)]
    return items


def otel_usage(attrs: dict[str, Any]) -> dict[str, int]:
    """Token usage from GenAI attributes (current and older names)."""
    out: dict[str, int] = {}
    for key, names in (("input_tokens", ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.usage.prompt_tokens")),
                       ("output_tokens", ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                                          "llm.usage.completion_tokens"))):
        for name in names:
            n = as_count(attrs.get(name))
            if n is not None:
                out[key] = n
                break
    return out


# --------------------------------------------------------------------------- graph


def build_graph(run: RunBuilder, spans: list[Span]) -> dict[str, Span]:
    """Index spans by id and repair the parent graph (each repair is an anomaly).

    A span whose id and content (:attr:`Span.digest`) equal an earlier span's is removed from
    ``spans`` (counted in ``run.duplicates``); one whose id repeats with other content is kept as
    ``<id>#dup<n>`` with a ``duplicate_span_id`` anomaly."""
    index: dict[str, Span] = {}
    dup_counts: dict[str, int] = {}
    digests: dict[str, set[str]] = {}
    kept: list[Span] = []
    for s in spans:
        seen = digests.setdefault(s.id, set())
        if s.digest is not None and s.digest in seen:  # the same span again: nothing new
            run.duplicates += 1
            continue
        if s.digest is not None:
            seen.add(s.digest)
        if s.id in index:
            n = dup_counts[s.id] = dup_counts.get(s.id, 1) + 1
            new_id = f"{s.id}#dup{n}"
            run.anomaly("duplicate_span_id", {"span_id": s.id, "kept_as": new_id,
                                              "message": "two spans share an id but differ; the later one was "
                                                         "renamed"})
            s.extra["original_span_id"] = s.id
            s.id = new_id
        index[s.id] = s
        kept.append(s)
        run.source_parts.append(s.digest if s.digest is not None else never_part())
    spans[:] = kept
    for s in index.values():
        if s.parent is None or s.parent == "":
            s.parent = None
        elif s.parent == s.id or s.parent == s.extra.get("original_span_id"):
            run.anomaly("self_parent", {"span_id": s.id, "message": "a span names itself as its parent; made a root"})
            s.parent = None
        elif s.parent not in index:
            run.anomaly("missing_parent", {"span_id": s.id, "parent_span_id": s.parent,
                                           "message": "a span's parent is not in the file; made a root"})
            s.extra["missing_parent"] = s.parent
            s.parent = None
    # cycles: each span has at most one parent, so follow parent chains with marks
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in index:
        if state.get(start):
            continue
        path: list[str] = []
        node: str | None = start
        while node is not None and not state.get(node):
            state[node] = 1
            path.append(node)
            node = index[node].parent
        if node is not None and state.get(node) == 1:  # closed a cycle
            cycle = path[path.index(node):]
            cut = min(cycle, key=lambda i: (index[i].start_ns is None, index[i].start_ns or 0, index[i].order))
            run.anomaly("parent_cycle", {"span_ids": cycle[:50], "made_root": cut,
                                         "message": "span parents form a cycle; it was broken at its earliest span"})
            index[cut].parent = None
        for p in path:
            state[p] = 2
    return index


def _nearest(index: dict[str, Span], spans: list[Span], match: Any) -> dict[str, Span | None]:
    """For each span of ``spans``, its nearest proper ancestor for which ``match(ancestor)`` holds
    (None: no such ancestor). Memoised along each parent chain, so a deep chain costs O(n) in all,
    not O(n * depth) (building every span's ancestor list took 5 minutes for a 50,000-span chain).
    The graph is repaired (no cycles) before this is called."""
    memo: dict[str, Span | None] = {}
    for s in spans:
        path: list[str] = []
        node: str | None = s.id
        found: Span | None = None
        while node is not None and node not in memo:
            path.append(node)
            parent = index[node].parent
            if parent is None:
                break
            if match(index[parent]):
                found = index[parent]
                break
            node = parent
        else:
            if node is not None:
                found = memo[node]
        for n in path:
            memo[n] = found
    return {s.id: memo[s.id] for s in spans}


# --------------------------------------------------------------------------- emission


def emit(run: RunBuilder, spans: list[Span]) -> None:
    """Repair the graph, merge nested model spans, link tool spans, and add the run's events."""
    index = build_graph(run, spans)
    models = [s for s in index.values() if s.role == "model"]
    tools = [s for s in index.values() if s.role == "tool"]
    # nested model spans: the innermost is the call. up[s] = the nearest enclosing model span.
    up = _nearest(index, models, lambda a: a.role == "model")
    children: dict[str, list[Span]] = {s.id: [] for s in models}
    for s in models:
        if up[s.id] is not None:
            children[up[s.id].id].append(s)
    leaves = [s for s in models if not children[s.id]]
    # A wrapper (a model span with model spans inside) with exactly one innermost span inside is the
    # same call: it lends that leaf what the leaf lacks, nearest wrapper first. That is a wrapper whose
    # model spans below form one chain; count the leaves below each wrapper, innermost first.
    depth: dict[str, int] = {}
    for s in models:
        chain, node = [], s
        while node is not None and node.id not in depth:
            chain.append(node)
            node = up[node.id]
        d = depth[node.id] if node is not None else -1
        for n in reversed(chain):
            d += 1
            depth[n.id] = d
    n_leaves: dict[str, int] = {s.id: 1 for s in leaves}
    single: dict[str, Span] = {s.id: s for s in leaves}  # a wrapper with one leaf below -> that leaf
    for w in sorted((s for s in models if children[s.id]), key=lambda s: -depth[s.id]):
        n_leaves[w.id] = sum(n_leaves[c.id] for c in children[w.id])
        if n_leaves[w.id] == 1:
            single[w.id] = single[children[w.id][0].id]
    leaf_of: dict[str, Span] = dict(single)
    for leaf in leaves:
        w = up[leaf.id]
        while w is not None and w.id in single:
            leaf.request = leaf.request if leaf.request is not None else w.request
            leaf.response = leaf.response if leaf.response is not None else w.response
            leaf.usage = leaf.usage or w.usage
            leaf.system = leaf.system or w.system
            leaf.provider = leaf.provider or w.provider
            leaf.model = leaf.model or w.model
            if leaf.fmt == "unknown":
                leaf.fmt = w.fmt
            leaf.extra.setdefault("merged_span_ids", []).append(w.id)
            w = up[w.id]
        if w is not None:
            # a wrapper with several leaves below; so has every model span above it
            total, enclosing = depth[w.id] + 1, []
            while w is not None and len(enclosing) < _MAX_DEPTH:
                enclosing.append(w.id)
                w = up[w.id]
            leaf.extra["enclosing_model_span_ids"] = enclosing
            if total > len(enclosing):  # the nearest _MAX_DEPTH of them
                leaf.extra["enclosing_model_spans"] = total
    # a tool span under a model call: the nearest enclosing model span that is a call (or merged into one)
    tool_parent = _nearest(index, tools, lambda a: a.role == "model" and a.id in leaf_of)
    for m in leaves:
        if m.system and m.fmt == "otel.genai" and isinstance(m.request, list) and not any(
                isinstance(x, dict) and x.get("role") in ("system", "developer") for x in m.request):
            m.request = [{"role": "system", "parts": m.system}, *m.request]  # the prompt given apart
        if m.request is None and m.logs:
            m.request = {"log_records": m.logs}
        for k, (cid, name, args) in enumerate(extract_tool_calls(m.response) if m.response is not None else []):
            m.requested.append([cid, name, args, None])  # [id, name, args, tool span]
        if m.requested_ids:  # a Sealbox export: the ids in their places (None: requested without an id)
            m.requested = _placed_requests(m.requested_ids, m.requested)

    def key(s: Span) -> tuple:
        return (s.start_ns is None, s.start_ns or 0, s.order)

    leaves.sort(key=key)
    by_req_id: dict[str, tuple[Span, int]] = {}
    for m in leaves:
        for k, req in enumerate(m.requested):
            if req[0] and req[0] not in by_req_id:
                by_req_id[req[0]] = (m, k)
    # Model calls that requested a tool, by the tool's name and by (name, canonical arguments), in
    # time order (built when a tool span first needs them): linking by name looks only at these, and
    # forgets a model call once its requests of that name are all taken (they never come free
    # again), so it is not O(tools * models).
    by_name = by_args = None
    links: dict[str, tuple[Span, int]] = {}
    for t in sorted(tools, key=key):
        link = None
        if t.call_id and t.call_id in by_req_id:
            m, k = by_req_id[t.call_id]
            if m.requested[k][3] is None:
                link = (m, k)
        if link is None:  # a span link to the model span that requested it (sealbox.link = requested_by)
            for lid in t.links:
                a = index.get(lid)
                if a is not None and a.role == "model" and a.id in leaf_of:
                    m = leaf_of[a.id]
                    link = (m, _slot(m, t))
                    break
        if link is None and tool_parent[t.id] is not None:
            m = leaf_of[tool_parent[t.id].id]
            link = (m, _slot(m, t))
        if link is None:
            # the latest earlier model call that requested a tool of this name with the same arguments,
            # else the latest that requested one of this name
            if by_name is None or by_args is None:
                by_name, by_args = _Requests(), _Requests()
                for m in leaves:
                    for r in m.requested:
                        by_name.add(r[1], m, key(m), r)
                        by_args.add((r[1], _canon(r[2])), m, key(m), r)
            upto = None if t.start_ns is None else key(t)
            if t.has_arguments:
                found = [m for c in {_canon(t.arguments), _canon(_unwrap_input(t.arguments))}
                         if (m := by_args.latest((t.tool_name, c), upto,
                                                 lambda m: _free_slot_by_name(m, t, exact=True) is not None))]
                if found:
                    m = max(found, key=key)
                    link = (m, _free_slot_by_name(m, t, exact=True))
            if link is None:
                m = by_name.latest(t.tool_name, upto, lambda m: _free_slot_by_name(m, t) is not None)
                if m is not None:
                    link = (m, _free_slot_by_name(m, t))
        if link is not None:
            m, k = link
            m.requested[k][3] = t
            if t.call_id is None:
                t.call_id = m.requested[k][0]
            elif m.requested[k][0] is None:
                m.requested[k][0] = t.call_id
            links[t.id] = link
    # order: each model call at its start; each tool call at its start but never before its model call
    entries: list[tuple[tuple, int, Span]] = []
    for m in leaves:
        entries.append((key(m), 0, m))
    for t in tools:
        k = key(t)
        if t.id in links:
            k = max(k, key(links[t.id][0]))
        entries.append((k, 1, t))
    entries.sort(key=lambda e: (e[0], e[1]))
    steps: dict[str, int] = {}
    for _, _, s in entries:
        if s.role == "model":
            top = steps[s.id] = run.new_step()
            # a Sealbox export's ids each in its place (None: a call it requested without an id), so the
            # sub-steps of its tool calls read back as the recorder wrote them; other sources: the ids known
            ids = [r[0] for r in s.requested] if s.requested_ids else [r[0] for r in s.requested if r[0]]
            run.model_call(top, provider=s.provider or "unknown", model=s.model or "unknown", request=s.request,
                           response=s.response, usage=s.usage,
                           latency_us=None if s.latency_unknown else s.duration_us if s.duration_us is not None
                           else _dur_us(s), fmt=s.fmt,
                           tool_call_ids=ids, source=_source(s), stream=s.stream)
        else:
            if s.id in links:
                m, k = links[s.id]
                top, sub = steps[m.id], (k + 1,)
                requested_args = m.requested[k][2]
            else:
                top, sub, requested_args = run.new_step(), (), None
            _emit_tool(run, s, top, sub, requested_args)


class _Requests:
    """Model calls by a key of their requests (a tool name, or name and arguments), in time order,
    each with its requests under that key. :meth:`latest` forgets a model call once all those
    requests are taken (a taken request is never free again)."""

    def __init__(self) -> None:
        self._lists: dict[Any, tuple[list[Span], list[tuple], list[list[list[Any]]]]] = {}

    def add(self, k: Any, m: Span, mkey: tuple, req: list[Any]) -> None:
        ms, keys, reqs = self._lists.setdefault(k, ([], [], []))
        if ms and ms[-1] is m:
            reqs[-1].append(req)
        else:
            ms.append(m)
            keys.append(mkey)
            reqs.append([req])

    def latest(self, k: Any, upto: tuple | None, usable: Any) -> Span | None:
        """The latest model call under ``k`` that starts at or before ``upto`` (any, when None) and
        for which ``usable(model)`` holds."""
        entry = self._lists.get(k)
        if entry is None:
            return None
        ms, keys, reqs = entry
        hi = len(ms) if upto is None else bisect.bisect_right(keys, upto)
        for i in range(hi - 1, -1, -1):
            if all(r[3] is not None for r in reqs[i]):
                del ms[i], keys[i], reqs[i]
                continue
            if usable(ms[i]):
                return ms[i]
        return None


def _placed_requests(ids: list[str | None], from_response: list[list[Any]]) -> list[list[Any]]:
    """A Sealbox export's model call's requests: one per ``sealbox.model.tool_call_ids`` entry, in its
    place (the place is the linked tool call's sub-step, ``<step>.<place>``), with the name and arguments
    the response gave (exported with ``--otlp-content``) where it has the call: an id's first request
    of that id, a None (requested without an id) the next id-less one. Requests only the response has
    follow (none, for a Sealbox export)."""
    by_id: dict[str, list[Any]] = {}
    nameless: list[list[Any]] = []
    for r in from_response:
        if r[0] is None:
            nameless.append(r)
        else:
            by_id.setdefault(r[0], r)
    placed: list[list[Any]] = []
    for cid in ids:
        if cid is None:
            placed.append(nameless.pop(0) if nameless else [None, None, None, None])
        else:
            r = by_id.pop(cid, None)  # an id repeated: its first place links (as the recorder's links do)
            placed.append(r if r is not None else [cid, None, None, None])
    taken = {id(r) for r in placed}
    return placed + [r for r in from_response if id(r) not in taken]


def _slot(m: Span, t: Span) -> int:
    k = _free_slot_by_name(m, t)
    if k is not None:
        return k
    m.requested.append([t.call_id, t.tool_name or "unknown", None, None])
    return len(m.requested) - 1


def _free_slot_by_name(m: Span, t: Span, exact: bool = False) -> int | None:
    free = [k for k, r in enumerate(m.requested) if r[3] is None and r[1] == t.tool_name
            and (r[0] is None or t.call_id is None or r[0] == t.call_id)]
    if not free:
        return None
    if t.has_arguments:
        want = {_canon(t.arguments), _canon(_unwrap_input(t.arguments))}
        for k in free:
            if _canon(m.requested[k][2]) in want:
                return k
    return None if exact else free[0]


def _unwrap_input(value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1 and "input" in value:
        return value["input"]
    return value


def _canon(value: Any) -> str:
    from sealbox.interop.importers.common import lenient

    try:
        return json.dumps(lenient(value), sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)
    except RecursionError:  # nested too deeply to compare: equal to nothing else
        return f"\0deep:{id(value)}"


def _dur_us(s: Span) -> int:
    if s.start_ns is None or s.end_ns is None or s.end_ns < s.start_ns:
        return 0
    return (s.end_ns - s.start_ns) // 1000


def _source(s: Span) -> dict[str, Any]:
    out: dict[str, Any] = {"span_id": s.id, "name": s.name}
    if s.trace_id:
        out["trace_id"] = s.trace_id
    if s.start_ns is not None:
        out["ts"] = ts_field(s.start_ns)
    if s.end_ns is not None:
        out["end_ts"] = ts_field(s.end_ns)
    for k, v in s.extra.items():
        out[k] = v
    return out


def _emit_tool(run: RunBuilder, t: Span, top: int, sub: tuple[int, ...], requested_args: Any) -> None:
    where = f"span {t.id}"
    if t.has_arguments:
        args = normalize_arguments(t.arguments, run, where)
    elif requested_args is not None:
        args = normalize_arguments(requested_args, run, where)
    elif "sealbox" in t.extra:  # exported by Sealbox without --otlp-content: left out on purpose
        run.anomaly("content_not_exported", {
            "where": where, "message": "a Sealbox OTLP export without --otlp-content: tool arguments, results and "
                                       "error messages were not sent; arguments and results recorded as null"},
            aggregate=True)
        args = None
    else:
        args = normalize_arguments(None, run, where)
    src = _source(t)
    if t.has_arguments and requested_args is not None:
        asked = lenient_args(requested_args)
        if _canon(asked) != _canon(args) and _canon(asked) == _canon(_unwrap_input(args)):
            src["arguments_from"] = "model_request"  # the span wrapped them as {"input": ...}
            args = asked
    call_id = t.call_id or f"imported:span:{t.id}"
    if t.call_id is None:
        src["call_id_assigned"] = True
    decided: dict[str, Any] = {}
    if t.decision is not None:
        d = t.decision
        rule = f" by rule {d['rule']}" if d.get("rule") else ""
        decided = {"effect": d["effect"], "rule": d.get("rule"), "decision_source": d,
                   "reason": f"imported decision of the exporting Sealbox store: {d['effect']}{rule} "
                             f"({d.get('reason_code') or 'no reason code'}); this store's policy did not decide it"}
    run.tool_call(top, sub, call_id=call_id, tool=t.tool_name or "unknown", arguments=args, server=t.server,
                  exposed=t.exposed, source=src, **decided)
    for approval in t.approvals:
        approval = {**approval, "call_id": call_id}
        run.imported_approval(top, sub, text=sealbox_otlp.note_text(approval), approval=approval)
    if t.ran is False:
        return  # denied, held or expired: the tool never ran (or its result was never recorded)
    if t.end_ns is not None or t.result is not None or t.error is not None:
        run.tool_result(top, sub, call_id=call_id, ok=t.error is None, result=t.result, error=t.error,
                        duration_us=t.duration_us if t.duration_us is not None else _dur_us(t),
                        source={"span_id": t.id})


def lenient_args(value: Any) -> Any:
    from sealbox.interop.importers.common import lenient

    return lenient(value) if isinstance(value, str) and value.strip() else value


def as_attr_dict(value: Any) -> dict[str, Any]:
    return as_dict(value)


# --------------------------------------------------------------------------- OpenTelemetry GenAI spans

MODEL_OPS = frozenset({"chat", "generate_content", "text_completion", "completion", "responses"})
AGENT_OPS = frozenset({"invoke_agent", "create_agent", "invoke_workflow", "chain"})


def otel_span(run: RunBuilder, *, span_id: str, parent: str | None, name: str, order: int, start_ns: int | None,
              end_ns: int | None, attrs: dict[str, Any], trace_id: str | None, status_error: str | None,
              log_records: list[Any] | None = None, links: list[str] | None = None) -> Span:
    """A :class:`Span` from OpenTelemetry attributes (GenAI semantic conventions and the
    vendor attributes seen in the corpus: ADK ``gcp.vertex.agent.*``, OpenLLMetry
    ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``, OpenInference ``input.value``)."""
    from sealbox.interop.importers.common import lenient

    s = Span(id=span_id, parent=parent, name=name, order=order, start_ns=start_ns, end_ns=end_ns, trace_id=trace_id)
    op = attrs.get("gen_ai.operation.name")
    if op is not None and not isinstance(op, str):  # e.g. an arrayValue: legal OTLP, but no GenAI operation
        run.anomaly("non_string_operation_name", {"where": f"span {span_id}", "type": type(op).__name__,
                                                  "message": "gen_ai.operation.name is not a string; ignored"},
                    aggregate=True)  # fmt: skip
        op = None
    if op == "execute_tool" or name.startswith("execute_tool") or (
            op is None and isinstance(attrs.get("gen_ai.tool.name"), str) and "gen_ai.tool.call.id" in attrs):
        s.role = "tool"
        tool = attrs.get("gen_ai.tool.name")
        if not isinstance(tool, str) or not tool:
            tool = name[len("execute_tool"):].strip() or "unknown"
        s.tool_name = tool
        cid = attrs.get("gen_ai.tool.call.id")
        s.call_id = cid if isinstance(cid, str) and cid else None
        for k in ("gen_ai.tool.call.arguments", "gcp.vertex.agent.tool_call_args", "input.value", "tool_arguments"):
            if k in attrs:
                s.arguments, s.has_arguments = attrs[k], True
                break
        for k in ("gen_ai.tool.call.result", "gcp.vertex.agent.tool_response", "output.value", "tool_response"):
            if k in attrs:
                s.result = lenient(attrs[k])
                break
        if status_error is not None:
            etype = attrs.get("error.type")
            s.error = {"type": etype if isinstance(etype, str) and etype else "error",
                       "message": status_error or "the span's status is ERROR"}
        s.links = list(links or ())
        if sealbox_otlp.is_sealbox(attrs):
            sealbox_otlp.read_tool(s, attrs, log_records)
        return s
    is_model = op in MODEL_OPS or attrs.get("llm.request.type") in ("chat", "completion") or (
        op not in AGENT_OPS and (name.startswith("call_llm") or "gcp.vertex.agent.llm_request" in attrs
                                 or "gen_ai.request.model" in attrs or bool(otel_usage(attrs))))
    if not is_model:
        s.role = "agent" if op in AGENT_OPS else "other"
        return s
    s.role = "model"
    provider = attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")
    s.provider = provider if isinstance(provider, str) else None
    model = attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
    s.model = model if isinstance(model, str) else None
    s.usage = otel_usage(attrs)
    details = _operation_details(log_records)  # the content attributes given as an event instead
    content = {**details, **{k: v for k, v in attrs.items() if v not in (None, "")}}
    for key, fmt in (("gen_ai.input.messages", "otel.genai"), ("gcp.vertex.agent.llm_request", "google.adk"),
                     ("input.value", "openinference")):
        value = lenient(content.get(key))
        if value not in (None, {}, ""):
            s.request, s.fmt = value, fmt
            break
    else:
        prompt = unflatten(attrs, "gen_ai.prompt")
        if prompt:
            s.request, s.fmt = {"messages": prompt}, "openllmetry"
    for key in ("gen_ai.output.messages", "gcp.vertex.agent.llm_response", "output.value"):
        value = lenient(content.get(key))
        if value not in (None, {}, ""):
            s.response = value
            break
    else:
        completion = unflatten(attrs, "gen_ai.completion")
        if completion:
            s.response = {"choices": completion}
    s.logs = log_records or None
    s.system = system_instructions(content, log_records)
    if status_error is not None:
        s.extra["status_error"] = status_error or "ERROR"
    if sealbox_otlp.is_sealbox(attrs):
        sealbox_otlp.read_model(s, attrs)
    return s


#: The GenAI conventions' event carrying a call's content attributes (``gen_ai.system_instructions``,
#: ``gen_ai.input.messages``, ``gen_ai.output.messages``) when they are not on the span.
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
#: The older conventions' event holding the system prompt, body ``{"content": ...}`` (still emitted by
#: Google ADK, tests/data/corpus/agentevals-otel).
SYSTEM_EVENT = "gen_ai.system.message"


def _event_name(record: Any) -> Any:
    return record.get("event_name") or as_dict(record.get("attributes")).get("event.name")


def _operation_details(records: list[Any] | None) -> dict[str, Any]:
    """The attributes of the span's ``gen_ai.client.inference.operation.details`` events (the last wins)."""
    out: dict[str, Any] = {}
    for r in records or ():
        if isinstance(r, dict) and _event_name(r) == DETAILS_EVENT:
            out.update(as_dict(r.get("attributes")))
    return out


def _parts(value: Any) -> list[Any]:
    """GenAI parts of system instructions: a JSON array of parts, a part, or plain text."""
    from sealbox.interop.importers.common import lenient

    value = lenient(value)
    if value in (None, "", [], {}):
        return []
    if isinstance(value, str):
        return [{"type": "text", "content": value}]
    if isinstance(value, dict):
        if "type" not in value and "content" in value:  # {"content": ...}, an event body's shape
            return _parts(value["content"])
        return [value]
    if isinstance(value, list):
        return [x for v in value for x in ([{"type": "text", "content": v}] if isinstance(v, str) else [v])]
    return [{"type": "text", "content": value}]


def system_instructions(attrs: dict[str, Any], records: list[Any] | None) -> list[Any] | None:
    """A model span's system instructions given apart from its input messages, as GenAI parts
    (``[{"type": "text", "content": ...}]``), None when there are none: the ``gen_ai.system_instructions``
    attribute (of the span, or of its operation-details event: ``attrs`` holds both), else the bodies of
    its ``gen_ai.system.message`` events (log records, or span events whose attributes hold ``content``)."""
    found = _parts(attrs.get("gen_ai.system_instructions"))
    if found:
        return found
    for r in records or ():
        if isinstance(r, dict) and _event_name(r) == SYSTEM_EVENT:
            body = r.get("body")
            if body in (None, "", {}):
                body = as_dict(r.get("attributes")).get("content")
            found.extend(_parts(body))
    return found or None
