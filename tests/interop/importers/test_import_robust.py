"""Robust import: every variation is built here from a corpus file (the file itself is never edited).

The import completes, each oddity is an anomaly event on its run, nothing loops
or crashes, verify stays clean (the store fixture checks it), and a file in no
known format is refused whole, with nothing written.
"""

from __future__ import annotations

import copy
import json

import pytest
from import_helpers import anomalies, calls, load, model_calls, store, tokens  # noqa: F401

from sealbox.errors import InvalidEventError
from sealbox.interop.importers import ImportFormatError, import_file
from sealbox.interop.importers import common as imp_common

ADK = "agentevals-otel/adk_py_v2_default_S2.otlp.json"
TAU = "tau-bench-openai-messages/gpt-4o-airline.subset-0-1-3-6-11.json"
LF = "langfuse-framework-traces/openai-agents-2025-09-30.trace.json"


def _write(tmp_path, name, doc=None, text=None):
    p = tmp_path / name
    p.write_text(text if text is not None else json.dumps(doc), encoding="utf-8")
    return p


def _spans(doc):
    return doc["resourceSpans"][0]["scopeSpans"][0]["spans"]


def _whats(store, summary):
    return [a["what"] for r in summary.runs for a in anomalies(store, r)]


def _by_name(doc, name):
    return next(s for s in _spans(doc) if s["name"] == name)


def test_span_cycle(store, tmp_path):
    doc = load(ADK)
    a, b = _by_name(doc, "invoke_workflow weather_agent"), _by_name(doc, "invoke_agent weather_agent")
    a["parentSpanId"] = b["spanId"]  # workflow <-> agent
    s = import_file(store, _write(tmp_path, "cycle.json", doc))
    assert _whats(store, s).count("parent_cycle") == 1
    assert len(calls(store, s.runs[0])) == 2 and tokens(store, s.runs[0]) == (120, 24)


def test_large_cycle_and_deep_chain_do_not_recurse(store, tmp_path):
    doc = load(ADK)
    template = _spans(doc)[0]
    n = 5000
    chain = []
    for i in range(n):
        s = copy.deepcopy(template)
        s["spanId"], s["parentSpanId"], s["name"] = f"{i:016x}", f"{(i + 1) % n:016x}", "step"
        s["attributes"] = []
        chain.append(s)
    _spans(doc).extend(chain)  # one 5000-span cycle
    s = import_file(store, _write(tmp_path, "bigcycle.json", doc))
    assert "parent_cycle" in _whats(store, s)


def test_self_parent_duplicate_ids_missing_parent(store, tmp_path):
    doc = load(ADK)
    spans = _spans(doc)
    wf = _by_name(doc, "invoke_workflow weather_agent")
    wf["parentSpanId"] = wf["spanId"]
    spans.append(copy.deepcopy(_by_name(doc, "invoke_agent weather_agent")))  # duplicate id
    tool = _by_name(doc, "execute_tool get_time")
    tool["parentSpanId"] = "deadbeefdeadbeef"
    s = import_file(store, _write(tmp_path, "graph.json", doc))
    whats = _whats(store, s)
    assert {"self_parent", "duplicate_span_id", "missing_parent"} <= set(whats)
    got = calls(store, s.runs[0])
    assert [c["tool"] for c in got] == ["get_weather", "get_time"]  # still linked (by name, time)


def test_nanosecond_numbers_above_2_53_and_old_field_names(store, tmp_path):
    base = import_file(store, _write(tmp_path, "base.json", load(ADK)))
    doc = load(ADK)
    rs = doc["resourceSpans"][0]
    ss = rs.pop("scopeSpans")
    for scope in ss:
        scope["instrumentationLibrary"] = scope.pop("scope")
        for sp in scope["spans"]:
            sp["startTimeUnixNano"] = int(sp["startTimeUnixNano"])  # > 2**53, as a JSON number
            sp["endTimeUnixNano"] = int(sp["endTimeUnixNano"])
            sp["kind"] = "SPAN_KIND_INTERNAL"
    rs["instrumentationLibrarySpans"] = ss
    s = import_file(store, _write(tmp_path, "old.json", doc))
    assert "unsafe_integer_timestamp" in _whats(store, s)
    strip = lambda cs: [(c["tool"], c["arguments"], c["result"], c["step"].count(".")) for c in cs]  # noqa: E731
    assert strip(calls(store, s.runs[0])) == strip(calls(store, base.runs[0]))
    times = lambda r: [m["imported"]["ts"] for m in model_calls(store, r)]  # noqa: E731
    assert times(s.runs[0]) == times(base.runs[0]) and times(s.runs[0])[0].startswith("2026-09-28T")


def _set_tool_args(doc, value):
    tool = _by_name(doc, "execute_tool get_weather")
    for a in tool["attributes"]:
        if a["key"] == "gcp.vertex.agent.tool_call_args":
            a["value"] = value
    return doc


@pytest.mark.parametrize("value,expected,what", [
    ({"stringValue": json.dumps(json.dumps({"city": "Paris"}))}, {"city": "Paris"}, "double_encoded_arguments"),
    ({"kvlistValue": {"values": [{"key": "city", "value": {"stringValue": "Paris"}}]}}, {"city": "Paris"}, None),
    ({"stringValue": ""}, {}, "empty_arguments"),
    (None, None, "null_arguments"),
    ({"stringValue": "city=Paris"}, "city=Paris", "unparseable_arguments"),
])
def test_argument_encodings(store, tmp_path, value, expected, what):
    s = import_file(store, _write(tmp_path, "args.json", _set_tool_args(load(ADK), value)))
    got = calls(store, s.runs[0])[0]
    assert got["tool"] == "get_weather" and got["arguments"] == expected
    if what:
        assert what in _whats(store, s)
    else:
        assert not _whats(store, s)


def test_nan_in_json(store, tmp_path):
    records = load(TAU)[:1]
    text = json.dumps(records)
    # a bare NaN number (not JSON) and a NaN inside JSON-string arguments
    text = text.replace('"reward": 0.0', '"reward": NaN', 1)
    text = text.replace('{\\"user_id\\":\\"mia_li_3668\\"}', '{\\"user_id\\":\\"mia_li_3668\\",\\"x\\":NaN}', 1)
    s = import_file(store, _write(tmp_path, "nan.json", text=text))
    (a,) = [a for a in anomalies(store, s.runs[0]) if a["what"] == "non_finite_number"]
    assert a["detail"]["count"] == 2
    first = calls(store, s.runs[0])[0]
    assert first["arguments"]["user_id"] == "mia_li_3668"
    assert first["arguments"]["x"] == {"$float": "NaN"}  # kept, as the canonical encoder's tagged float


def test_naive_and_offset_timestamps(store, tmp_path):
    base = import_file(store, _write(tmp_path, "lf.json", load(LF)))
    doc = load(LF)
    for o in doc["observations"]:
        if o["type"] == "GENERATION":  # same instant, written with a +02:00 offset
            o["startTime"] = o["startTime"].replace("T09:", "T11:").replace("Z", "+02:00")
        if o["type"] == "TOOL":  # naive
            o["startTime"] = o["startTime"].rstrip("Z")
    s = import_file(store, _write(tmp_path, "lf2.json", doc))
    whats = _whats(store, s)
    assert "naive_timestamp" in whats and whats.count("naive_timestamp") == 1
    ts = lambda r: [m["imported"]["ts"] for m in model_calls(store, r)]  # noqa: E731
    assert ts(s.runs[0]) == ts(base.runs[0])
    assert [c["result"] for c in calls(store, s.runs[0])] == [c["result"] for c in calls(store, base.runs[0])]


def test_tool_call_ids_list_missing_ids_and_orphans(store, tmp_path):
    traj = load(TAU)[0]["traj"]
    msgs = copy.deepcopy(traj[:10])
    msgs[7] = {**msgs[7], "tool_call_ids": [msgs[7].pop("tool_call_id")]}  # SWE-agent style list
    del msgs[9]["tool_call_id"]  # a result naming no call: the oldest open call
    msgs.append({"role": "tool", "tool_call_id": "call_nobody", "content": "x"})
    s = import_file(store, _write(tmp_path, "msgs.json", {"messages": msgs}), "tau-bench")
    got = calls(store, s.runs[0])
    assert [c["result"] for c in got] == [msgs[7]["content"], msgs[9]["content"]]
    assert {"tool_result_without_id", "orphan_tool_result"} <= set(_whats(store, s))


@pytest.mark.parametrize("text", ['{"hello": 1}', "[1, 2, 3]", "not json at all", "", '"just a string"',
                                  '{"resourceSpans": 5}'])
def test_unknown_format_one_error_nothing_written(store, tmp_path, text):
    before = store.size()
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, _write(tmp_path, "x.json", text=text))
    assert "x.json" in str(exc.value) and "\n" not in str(exc.value)
    assert store.size() == before


def test_nothing_half_imported(store, tmp_path, monkeypatch):
    path = _write(tmp_path, "five.json", load(TAU))
    before = store.size()
    real = imp_common.RunBuilder.drafts
    seen = []

    def drafts(self):
        out = real(self)
        seen.append(self.run_id)
        if len(seen) == 3:  # the third run of five is broken
            out[1] = type(out[1])("no.such.kind", {}, run_id=self.run_id)
        return out

    monkeypatch.setattr(imp_common.RunBuilder, "drafts", drafts)
    with pytest.raises(InvalidEventError):
        import_file(store, path)
    assert store.size() == before and store.read_run(seen[0]) == []
    # a format asked for that does not fit is refused before writing
    with pytest.raises(ImportFormatError):
        import_file(store, path, "langfuse")
    assert store.size() == before
