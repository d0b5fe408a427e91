"""Span graphs whose parents form deep chains (thousands of levels) import with the right events.

``spans.emit()`` used to build the whole ancestor list of every model and tool span, O(n * depth)
in time and memory (a 50,000-span chain took 5 minutes); it now memoises the nearest relevant
ancestor. These tests check the result on deep chains; the timing is in bench/bench_import.py.
"""

from __future__ import annotations

import json

from import_helpers import anomalies, calls, model_calls, store  # noqa: F401 - store is a fixture

from sealbox.interop.importers import import_file
from sealbox.store import init_store
from sealbox.verify import verify_store

TRACE = "ab" * 16
T0 = 1_700_000_000_000_000_000


def _span(i, parent, name, attrs, start=None):
    start = T0 + i * 1000 if start is None else start
    return {"traceId": TRACE, "spanId": "%016x" % i, "parentSpanId": "%016x" % parent if parent else "",
            "name": name, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 2000),
            "attributes": [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                           for k, v in attrs.items()]}


def _tool(i, parent, call_id=None):
    attrs = {"gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": json.dumps({"span": i})}
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    return _span(i, parent, "execute_tool t", attrs)


def _model(i, parent, **attrs):
    return _span(i, parent, "chat m", {"gen_ai.operation.name": "chat", **attrs})


def _write(tmp_path, name, spans):
    p = tmp_path / name
    p.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}), encoding="utf-8")
    return p


def _events(store, run_id):
    """(kind, step, payload) of a run, without what differs between two imports (run id, ts)."""
    return [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(run_id)
            if e.kind not in ("run.started",)]


def test_a_5000_level_tool_chain_gives_the_events_of_the_flat_file(store, tmp_path):
    n = 5000
    chain = [_tool(i, i - 1 if i > 1 else None, f"c{i}") for i in range(1, n + 1)]
    flat = [_tool(i, None, f"c{i}") for i in range(1, n + 1)]
    got = import_file(store, _write(tmp_path, "chain.json", chain))
    # in a store of its own: the same trace id with other content in one store is flagged
    # (trace_imported_before, docs/import.md "Duplicates"), an anomaly the chain's run has not
    other = init_store(tmp_path / "flat-store")
    try:
        want = import_file(other, _write(tmp_path, "flat.json", flat))
        assert (got.events, got.anomalies) == (want.events, want.anomalies) == (3 * n + 2, 0)
        assert _events(store, got.runs[0]) == _events(other, want.runs[0])
        assert verify_store(other).ok
    finally:
        other.close()
    got_calls = calls(store, got.runs[0])
    assert [(c["step"], c["call_id"], c["span_id"]) for c in got_calls] == \
        [(str(i + 1), f"c{i}", "%016x" % i) for i in range(1, n + 1)]
    assert {(c["effect"], c["ok"], c["has_result"]) for c in got_calls} == {("allow", True, True)}


def test_a_deep_model_tool_chain_is_one_model_call_with_every_tool_span_under_it(store, tmp_path):
    """model 1 > tool 2 > model 3 > tool 4 > …, 2,500 of each. Nested model spans are one call (the
    innermost, each enclosing one merged into it, nearest first), and every tool span is linked to it
    by parentage (no ids, the models request nothing): steps 2.1 … 2.2500 in time order."""
    pairs = 2500
    spans = []
    for k in range(pairs):
        m, t = 2 * k + 1, 2 * k + 2
        spans.append(_model(m, m - 1 if k else None, **{"gen_ai.request.model": f"m{k}"}))
        spans.append(_tool(t, m))
    s = import_file(store, _write(tmp_path, "pairs.json", spans))
    assert (s.events, s.anomalies) == (3 * pairs + 3, 0)
    (m,) = model_calls(store, s.runs[0])
    assert (m["step"], m["model"], m["imported"]["span_id"]) == ("2", f"m{pairs - 1}", "%016x" % (2 * pairs - 1))
    assert m["imported"]["merged_span_ids"] == ["%016x" % i for i in range(2 * pairs - 3, 0, -2)]
    assert m["tool_call_ids"] == []  # the spans gave no ids
    got = calls(store, s.runs[0])
    assert [(c["step"], c["call_id"], c["arguments"]) for c in got] == \
        [(f"2.{k + 1}", "imported:span:%016x" % (2 * k + 2), {"span": 2 * k + 2}) for k in range(pairs)]


def test_a_3000_level_chain_of_nested_model_spans_is_one_call(store, tmp_path):
    """3,000 model spans, each inside the one before, with one tool span at the bottom: the innermost
    is the call; every wrapper is merged into it, nearest first (its usage: the nearest that has one)."""
    n = 3000
    spans = [_model(1, None, **{"gen_ai.request.model": "outer", "gen_ai.usage.input_tokens": 7})]
    for i in range(2, n + 1):
        attrs = {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 2} if i == n - 10 else {}
        spans.append(_model(i, i - 1, **attrs))
    spans.append(_tool(n + 1, n, "c1"))
    s = import_file(store, _write(tmp_path, "nested.json", spans))
    (m,) = model_calls(store, s.runs[0])
    assert (m["step"], m["model"], m["usage"]) == ("2", "outer", {"input_tokens": 5, "output_tokens": 2,
                                                                  "total_tokens": 7})
    assert m["imported"]["span_id"] == "%016x" % n
    assert m["imported"]["merged_span_ids"] == ["%016x" % i for i in range(n - 1, 0, -1)]
    assert "enclosing_model_span_ids" not in m["imported"]
    (c,) = calls(store, s.runs[0])
    assert (c["step"], c["call_id"]) == ("2.1", "c1")
    assert m["tool_call_ids"] == ["c1"]
    assert anomalies(store, s.runs[0]) == []


def test_wrappers_with_several_calls_inside_are_listed_nearest_first_at_most_64(store, tmp_path):
    """A chain of 2,000 model spans with two model calls at its bottom: each call names the nearest
    64 enclosing model spans and how many there are (a chain of such wrappers, each with calls beside,
    would otherwise store O(n^2) ids)."""
    n = 2000
    spans = [_model(i, i - 1 if i > 1 else None) for i in range(1, n + 1)]
    spans += [_model(n + 1, n, **{"gen_ai.request.model": "a"}), _model(n + 2, n, **{"gen_ai.request.model": "b"})]
    s = import_file(store, _write(tmp_path, "two.json", spans))
    got = model_calls(store, s.runs[0])
    assert [(m["step"], m["model"]) for m in got] == [("2", "a"), ("3", "b")]
    for m in got:
        assert m["imported"]["enclosing_model_span_ids"] == ["%016x" % i for i in range(n, n - 64, -1)]
        assert m["imported"]["enclosing_model_spans"] == n
        assert "merged_span_ids" not in m["imported"]


def test_a_short_wrapper_chain_lists_every_enclosing_span(store, tmp_path):
    spans = [_model(1, None), _model(2, 1), _model(3, 2, **{"gen_ai.request.model": "a"}),
             _model(4, 2, **{"gen_ai.request.model": "b"}), _model(5, 4)]
    s = import_file(store, _write(tmp_path, "short.json", spans))
    got = {m["model"]: m["imported"] for m in model_calls(store, s.runs[0])}
    assert sorted(got) == ["a", "b"]
    assert got["a"]["enclosing_model_span_ids"] == ["%016x" % 2, "%016x" % 1]
    assert (got["b"]["span_id"], got["b"]["merged_span_ids"]) == ("%016x" % 5, ["%016x" % 4])
    assert got["b"]["enclosing_model_span_ids"] == ["%016x" % 2, "%016x" % 1]
    assert "enclosing_model_spans" not in got["a"] and "enclosing_model_spans" not in got["b"]


def _requesting(i, start):
    out = json.dumps([{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "t", "arguments": "{}"}}]}])
    return _span(i, None, "chat m", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": out,
                                     "gen_ai.request.model": f"m{i}"}, start=start)


def test_many_flat_tool_spans_link_by_name_to_the_latest_earlier_model_call(store, tmp_path):
    """3,000 model calls each requesting one ``t`` (no ids), each followed by a ``t`` span without an
    id: every tool span is the call of the model just before it (once a model's request is taken,
    it is not looked at again: linking used to scan every earlier model for every tool span)."""
    n = 3000
    spans = []
    for i in range(n):
        spans.append(_requesting(2 * i + 1, T0 + (2 * i) * 1000))
        spans.append(_span(2 * i + 2, None, "execute_tool t", {"gen_ai.tool.name": "t",
                                                               "gen_ai.tool.call.arguments": json.dumps({"n": i})},
                           start=T0 + (2 * i + 1) * 1000))
    s = import_file(store, _write(tmp_path, "flat-linked.json", spans))
    assert (s.events, s.anomalies) == (4 * n + 2, 0)
    got = calls(store, s.runs[0])
    assert [(c["step"], c["arguments"]) for c in got] == [(f"{i + 2}.1", {"n": i}) for i in range(n)]
    assert [m["model"] for m in model_calls(store, s.runs[0])] == [f"m{2 * i + 1}" for i in range(n)]


def test_tool_spans_after_all_the_model_calls_take_the_latest_free_request_first(store, tmp_path):
    n = 2000
    spans = [_requesting(i + 1, T0 + i * 1000) for i in range(n)]
    spans += [_span(n + i + 1, None, "execute_tool t", {"gen_ai.tool.name": "t",
                                                        "gen_ai.tool.call.arguments": json.dumps({"n": i})},
                    start=T0 + (n + i) * 1000) for i in range(n)]
    s = import_file(store, _write(tmp_path, "after.json", spans))
    got = calls(store, s.runs[0])
    # the first tool span takes the latest model call's request, the next the one before…
    assert sorted((c["step"], c["arguments"]["n"]) for c in got) == \
        sorted((f"{n - i + 1}.1", i) for i in range(n))
