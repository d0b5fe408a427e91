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
    dup = copy.deepcopy(_by_name(doc, "invoke_agent weather_agent"))  # duplicate id, other content (an identical
    dup["attributes"] = dup["attributes"] + [{"key": "copy", "value": {"stringValue": "2"}}]  # one is skipped)
    spans.append(dup)
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


@pytest.mark.parametrize("big", [str(2**60), str(2**53)])
def test_token_counts_above_2_53_are_anomalies_not_a_failed_import(store, tmp_path, big):
    """A token count no event can hold as a number (above 2^53 - 1) is left out of that call's
    usage, with an anomaly naming it; the import goes on (it used to stop: 'must be integer')."""
    base = import_file(store, _write(tmp_path, "base.json", load(ADK)))
    doc = load(ADK)
    for sp in _spans(doc):
        for a in sp.get("attributes", []):
            if a["key"] == "gen_ai.usage.input_tokens" and a["value"] == {"intValue": "40"}:
                a["value"] = {"intValue": big}
    s = import_file(store, _write(tmp_path, "big.json", doc))
    found = [a for a in anomalies(store, s.runs[0]) if a["what"] == "token_count_out_of_range"]
    assert [(a["detail"]["field"], a["detail"]["value"]) for a in found] == [("input_tokens", big)]
    assert "left out of the model call's usage" in found[0]["detail"]["message"]
    in_base, out_base = tokens(store, base.runs[0])
    assert tokens(store, s.runs[0]) == (in_base - 40, out_base)  # the call (two spans, merged) that said 40 lost it
    assert len(model_calls(store, s.runs[0])) == len(model_calls(store, base.runs[0]))


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


def test_a_call_id_repeated_in_one_response_is_a_duplicate_not_a_reuse_of_an_answered_call(store, tmp_path):
    # Two calls of one assistant message share the id c2: neither has a result yet, so the second is a
    # duplicate_tool_call_id; it was reported as reused_tool_call_id, "a call id of an earlier, answered call".
    def call(cid, city):
        return {"id": cid, "type": "function", "function": {"name": "get_time", "arguments": json.dumps({"city": city})}}

    msgs = [{"role": "user", "content": "times?"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "Oslo")]},
            {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "Lima"), call("c2", "Rome"),
                                                                   call("c2", "Kyiv")]},
            {"role": "tool", "tool_call_id": "c1", "content": "07:00"},
            {"role": "tool", "tool_call_id": "c2", "content": "13:00"},
            {"role": "tool", "tool_call_id": "c2", "content": "14:00"},
            {"role": "assistant", "content": "done"}]
    s = import_file(store, _write(tmp_path, "msgs.json", msgs), "tau-bench")
    got = [(a["what"], a["detail"]["call_id"], a["detail"]["recorded_as"], a["detail"]["message"].split(";")[0])
           for a in anomalies(store, s.runs[0])]
    assert got == [("reused_tool_call_id", "c1", "c1#2", "a call id of an earlier, answered call was used again"),
                   ("duplicate_tool_call_id", "c2", "c2#2",
                    "a call id was requested again while its first call had no result")]
    assert [(c["call_id"], c["arguments"]["city"], c["result"]) for c in calls(store, s.runs[0])] == [
        ("c1", "Oslo", "12:00"), ("c1#2", "Lima", "07:00"), ("c2", "Rome", "13:00"), ("c2#2", "Kyiv", "14:00")]


@pytest.mark.parametrize("text", ['{"hello": 1}', "[1, 2, 3]", "not json at all", "", '"just a string"',
                                  '{"resourceSpans": 5}'])
def test_unknown_format_one_error_nothing_written(store, tmp_path, text):
    before = store.size()
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, _write(tmp_path, "x.json", text=text))
    assert "x.json" in str(exc.value) and "\n" not in str(exc.value)
    assert store.size() == before


@pytest.mark.parametrize("text, shape", [("[1, 2, 3]", "an array"), ('"just a string"', "a string"),
                                         ("12.5", "a number"), ("true", "a boolean"), ("null", "null"),
                                         ('{"hello": 1}', "an object"),
                                         ('[{"role": "x"}]\n[{"role": "y"}]\n', "JSON Lines of 2 values")])
def test_an_unknown_format_names_the_top_level_in_json_terms(store, tmp_path, text, shape):
    # It said "a JSON list", "a JSON str", "a JSON float" (Python's names), and "a JSON object" for JSON Lines.
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, _write(tmp_path, "x.json", text=text))
    assert f"(the top level is {shape} that matches none of: " in str(exc.value)


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


# ------------------------------------------------ wrongly typed fields, through the real `sealbox` command

MIN_OTLP = {"resourceSpans": [{"scopeSpans": [{"spans": [{
    "traceId": "5b8aa5a2d2c872e8321cf37308d69df2", "spanId": "051581bf3cb55c13", "name": "x",
    "attributes": [{"key": "gen_ai.operation.name", "value": {"arrayValue": {"values": [{"stringValue": "chat"}]}}}],
}]}]}]}
MIN_JAEGER = {"data": [{"traceID": "abc", "spans": [{"traceID": "abc", "spanID": "s1", "operationName": "x",
                                                     "startTime": 1, "duration": 1, "processID": ["p1"]}],
                        "processes": {}}]}
JAEGER_LIST_TAG = {"data": [{"traceID": "abc", "spans": [{
    "traceID": "abc", "spanID": "s1", "operationName": "x", "startTime": 1, "duration": 1, "processID": "p1",
    "tags": [{"key": "gen_ai.operation.name", "type": "string", "value": ["chat"]}]}],
    "processes": {"p1": {"serviceName": "svc", "tags": []}}}]}
MIN_RUNSTATE = {"$schemaVersion": "1.5", "current_agent": {"name": "a"},
                "context": {"approvals": {"f": {"approved": False, "rejected": [{"id": "c9"}]}}}}


def _cli(*args: str):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


@pytest.fixture
def store_dir(tmp_path):
    """A real store on disk, closed (the command opens it), already holding one imported run."""
    from sealbox.store import init_store

    path = tmp_path / "st"
    init_store(path).close()
    proc = _cli("import", "--store", str(path), str(_write(tmp_path, "base.json", load(ADK))))
    assert proc.returncode == 0, proc.stderr
    return path


def _size_and_verify(path) -> int:
    from sealbox.store import open_store

    proc = _cli("verify", "--store", str(path))
    assert proc.returncode == 0 and proc.stdout.startswith("Verified: the log is intact."), proc.stdout + proc.stderr
    s = open_store(path, readonly=True)
    try:
        return s.size()
    finally:
        s.close()


@pytest.mark.parametrize("doc, fmt, what, detail", [
    (MIN_OTLP, "otlp-json", "non_string_operation_name",
     {"where": ["span 051581bf3cb55c13"], "type": "list", "message": "gen_ai.operation.name is not a string; ignored",
      "aggregated": True, "count": 1}),
    (JAEGER_LIST_TAG, "jaeger", "non_string_operation_name",
     {"where": ["span s1"], "type": "list", "message": "gen_ai.operation.name is not a string; ignored",
      "aggregated": True, "count": 1}),
    (MIN_JAEGER, "jaeger", "malformed_span", {"span_id": "s1", "message": "processID is not a string; ignored"}),
])
def test_wrongly_typed_span_fields_are_anomalies_not_crashes(store_dir, tmp_path, doc, fmt, what, detail):
    from sealbox.store import open_store

    before = _size_and_verify(store_dir)
    proc = _cli("import", "--store", str(store_dir), "--json", str(_write(tmp_path, "in.json", doc)))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["format"], len(out["runs"]), out["anomalies"]) == (fmt, 1, 1)
    s = open_store(store_dir, readonly=True)
    try:
        evs = s.read_run(out["runs"][0])
        assert [e.kind for e in evs] == ["run.started", "anomaly", "run.ended"]  # the span is no GenAI operation
        assert s.resolve(evs[1].payload)["what"] == what and s.resolve(evs[1].payload)["detail"] == detail
    finally:
        s.close()
    assert _size_and_verify(store_dir) == before + out["events"] == before + 3


def test_runstate_approval_call_id_of_the_wrong_type_is_refused_whole(store_dir, tmp_path):
    before = _size_and_verify(store_dir)
    proc = _cli("import", "--store", str(store_dir), str(_write(tmp_path, "min_runstate.json", MIN_RUNSTATE)))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("error: min_runstate.json is not a usable OpenAI Agents RunState: context.approvals "
                           "(tool 1).rejected[0] is not a call id (a string) but an object; the value is not shown\n")
    assert _size_and_verify(store_dir) == before


@pytest.mark.parametrize("rejected, message", [
    ("yes", "context.approvals (tool 1).rejected is a string, not true, false or a list of call ids"),
    ([5], "context.approvals (tool 1).rejected[0] is not a call id (a string) but a number"),
])
def test_runstate_approvals_must_be_booleans_or_call_id_lists(store, tmp_path, rejected, message):
    doc = copy.deepcopy(MIN_RUNSTATE)
    doc["context"]["approvals"]["f"]["rejected"] = rejected
    before = store.size()
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, _write(tmp_path, "rs.json", doc))
    assert str(exc.value) == f"rs.json is not a usable OpenAI Agents RunState: {message}; the value is not shown"
    assert store.size() == before


@pytest.mark.parametrize("stage, error", [("parse", TypeError("unhashable type: 'list'")),
                                          ("parse", KeyError("secret-key-from-the-file")),
                                          ("parse", AttributeError("'list' object has no attribute 'get'")),
                                          ("build", KeyError("secret-key-from-the-file"))])
def test_any_other_type_error_of_an_importer_is_its_format_error(store_dir, tmp_path, monkeypatch, capsys,
                                                                  stage, error):
    """The boundary guard: whatever an importer still trips over is the file's fault, one line, nothing written."""
    from sealbox.cli.main import main
    from sealbox.interop.importers import jaeger

    def broken(*args, **kwargs):
        raise error

    monkeypatch.delenv("SEALBOX_DEBUG", raising=False)
    if stage == "parse":
        monkeypatch.setattr(jaeger, "_tags", broken)
    else:
        monkeypatch.setattr(imp_common.RunBuilder, "drafts", broken)
    before = _size_and_verify(store_dir)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["import", "--store", str(store_dir), str(_write(tmp_path, "j.json", JAEGER_LIST_TAG))])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"error: j.json is not a valid jaeger file: a field has an unexpected type or shape "
                   f"({type(error).__name__}); nothing was imported\n")
    assert "secret" not in err
    assert _size_and_verify(store_dir) == before


def test_integers_longer_than_python_converts_are_kept_tagged_with_an_anomaly(store_dir, tmp_path):
    """An integer of more than 4300 digits (Python's int-string limit: json raised a bare ValueError,
    an internal error, exit 70) is imported exactly, as the canonical {"$bigint": digits}, and noted."""
    from sealbox.store import open_store

    big, neg = "9" * 5000, "-" + "8" * 4400
    msgs = [{"role": "user", "content": "hi", "x": "BIG"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "calc", "arguments": '{"n": ' + neg + ', "q": "x"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "done"}]
    path = _write(tmp_path, "big-int.json", text=json.dumps({"messages": msgs}).replace('"BIG"', big))
    before = _size_and_verify(store_dir)
    proc = _cli("import", "--store", str(store_dir), "--json", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")
    out = json.loads(proc.stdout)
    assert (out["format"], len(out["runs"]), out["events"], out["anomalies"]) == ("tau-bench", 1, 8, 1)
    s = open_store(store_dir, readonly=True)
    try:
        (a,) = anomalies(s, out["runs"][0])
        assert a == {"what": "huge_integer", "detail": {
            "message": 'an integer of more than 4300 digits in the source; kept exactly, as the canonical tagged '
                       'integer {"$bigint": digits}',
            "count": 2, "where": ["model.call[1]/request/messages/0/x", "tool.call[1.1]/arguments/n"]}}
        (call,) = calls(s, out["runs"][0])
        assert call["arguments"] == {"n": {"$bigint": neg}, "q": "x"}
        first = model_calls(s, out["runs"][0])[0]
        assert first["request"]["messages"][0] == {"role": "user", "content": "hi", "x": {"$bigint": big}}
    finally:
        s.close()
    assert _size_and_verify(store_dir) == before + 8


def test_huge_integer_timestamps_are_bad_timestamps(store, tmp_path):
    big = "7" * 5000
    span = {"traceId": "ab" * 16, "spanId": "0000000000000001", "name": "execute_tool t",
            "startTimeUnixNano": big, "endTimeUnixNano": "BIG",
            "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "t"}},
                           {"key": "gen_ai.tool.call.id", "value": {"stringValue": "c1"}},
                           {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"a": ' + big + '}'}}]}
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).replace('"BIG"', big)
    s = import_file(store, _write(tmp_path, "t.json", text=text))
    got = {a["what"]: a["detail"] for a in anomalies(store, s.runs[0])}
    assert sorted(got) == ["bad_timestamp", "huge_integer"]
    assert got["bad_timestamp"]["count"] == 2 and got["huge_integer"]["where"] == ["tool.call[1]/arguments/a"]
    assert calls(store, s.runs[0])[0]["arguments"] == {"a": {"$bigint": big}}


@pytest.mark.parametrize("end", [1e308, -1e308, 2e302])
def test_epoch_float_timestamps_too_large_to_scale_are_bad_timestamps(store, tmp_path, end):
    # A Langfuse time given as a number is read as seconds or ms since the epoch; one so large that
    # scaling it to ns overflows a float (1e308 * 1e6 = inf) is out of range, not an internal error.
    doc = {"trace": {"id": "t1", "name": "agent", "timestamp": "2026-01-01T00:00:00Z"},
           "observations": [{"id": "o1", "type": "GENERATION", "name": "chat", "model": "gpt-4o",
                             "startTime": "2026-01-01T00:00:00Z", "endTime": end, "input": "hi", "output": "hello"}]}
    s = import_file(store, _write(tmp_path, "lf.json", doc))
    got = {a["what"]: a["detail"] for a in anomalies(store, s.runs[0])}
    assert list(got) == ["bad_timestamp"]
    assert got["bad_timestamp"]["message"] == "a timestamp is out of range; ignored"
    assert [m["model"] for m in model_calls(store, s.runs[0])] == ["gpt-4o"]


def test_a_duration_above_2_53_us_is_an_anomaly_not_a_refused_import(store, tmp_path):
    # A tool span from 1700 to 2026 lasts 1.03e16 us, above 2^53 - 1: no event holds it as a number
    # (RFC 7493), so the store refused the tool.result and the whole file ("tool.result:
    # data.duration_us must be integer"). Oddities never stop an import: it is recorded as 0, with an anomaly.
    # Same for a model span's latency.
    doc = {"trace": {"id": "t1", "name": "agent", "timestamp": "2026-01-01T00:00:00Z"},
           "observations": [
               {"id": "o1", "type": "GENERATION", "name": "chat", "model": "gpt-4o", "startTime": "1600-01-01T00:00:00Z",
                "endTime": "2026-01-01T00:00:00Z", "input": "hi", "output": "hello"},
               {"id": "o2", "type": "TOOL", "name": "lookup", "parentObservationId": "o1",
                "startTime": "1700-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:00Z", "input": {"a": 1},
                "output": "r"}]}
    s = import_file(store, _write(tmp_path, "lf.json", doc))
    got = [(a["what"], a["detail"]["field"], a["detail"]["value"]) for a in anomalies(store, s.runs[0])]
    assert got == [("duration_out_of_range", "latency_us", "13443321600000000"),
                   ("duration_out_of_range", "duration_us", "10287561600000000")]
    [model] = model_calls(store, s.runs[0])
    assert model["latency_us"] == 0
    [call] = calls(store, s.runs[0])
    assert call["has_result"] and call["result"] == "r"
    [result] = [store.resolve(e.payload) for e in store.read_run(s.runs[0]) if e.kind == "tool.result"]
    assert result["duration_us"] == 0


def test_a_device_is_refused_before_it_is_read(store):
    # `sealbox import /dev/zero` read until memory ran out (MemoryError: "internal error", exit 70, after
    # eating the machine's memory). A character or block device is no file to import; it is refused
    # before a byte is read. /dev/null shows it without the risk (it read as an empty, "not valid JSON" file).
    before = store.size()
    for dev in ("/dev/null", "/dev/zero"):
        with pytest.raises(ImportFormatError) as exc:
            import_file(store, dev)
        assert str(exc.value) == f"{dev} is a device, not a file; give one file to import"
    assert store.size() == before


# ------------------------------------------------ a NUL character in an identifier the file gives

def _with_nul(doc, key, marker):
    """Append ``\\x00`` and ``marker`` to every string under ``key`` in ``doc``."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key and isinstance(v, str):
                doc[k] = v + "\x00" + marker
            else:
                _with_nul(v, key, marker)
    elif isinstance(doc, list):
        for v in doc:
            _with_nul(v, key, marker)
    return doc


@pytest.mark.parametrize("rel, key, field", [
    (TAU, "name", "tool.call tool"),  # a tool name
    ("swe-agent-traj/function_calling_simple.traj.json", "id", "tool.call call_id"),  # a call id
    ("swe-agent-traj/function_calling_simple.traj.json", "agent", "run.started principal"),  # the agent
    (LF, "name", "run.started principal"),  # a trace's name is the agent
])
def test_a_nul_in_an_identifier_is_one_format_error_that_does_not_quote_the_file(store_dir, tmp_path, rel, key,
                                                                                 field):
    """A NUL in a tool name, call id or agent name (which no store keeps in an identifier) is refused as
    ImportFormatError naming the file and the field, never quoting the value (the file may hold secrets;
    was: InvalidEventError quoting it), and nothing is written."""
    import subprocess
    import sys

    from sealbox.store import open_store

    path = _write(tmp_path, "nul.json", _with_nul(load(rel), key, "SECRET-IN-FILE"))
    store = open_store(store_dir)
    before = store.size()
    try:
        with pytest.raises(ImportFormatError) as exc:
            import_file(store, path)
        assert store.size() == before
    finally:
        store.close()
    assert str(exc.value) == (f"nul.json cannot be imported: a {field} holds a NUL character (\\x00), which an "
                              "identifier in the record cannot hold; nothing was imported")
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "import", "--store", str(store_dir), str(path)],
                         capture_output=True, text=True)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"error: {exc.value}\n")
