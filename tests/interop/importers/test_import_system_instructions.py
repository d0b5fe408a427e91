"""Importing OpenTelemetry GenAI spans keeps the model call's system instructions.

The GenAI semantic conventions put a chat's system prompt outside its input messages: in the
``gen_ai.system_instructions`` attribute (a JSON array of parts, ``[{"type": "text", "content": ...}]``),
in the attributes of a ``gen_ai.client.inference.operation.details`` event, or (older conventions, as Google
ADK still emits: tests/data/corpus/agentevals-otel) in a ``gen_ai.system.message`` event whose body is
``{"content": ...}``, as a log record or a span event. The importer took the request from
``gen_ai.input.messages`` alone, so the imported model call's request lost its system prompt. It is now
the request's first message, ``{"role": "system", "parts": [...]}``.

The ADK corpus file is the real recording (its event bodies are elided upstream); the other spans are
built here in the exact shapes of the conventions.
"""

from __future__ import annotations

import json

from import_helpers import corpus, load, model_calls, store  # noqa: F401 - store is a fixture

from sealbox.interop.importers import import_file

INPUT = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
OUTPUT = [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}], "finish_reason": "stop"}]
SYSTEM = [{"type": "text", "content": "You are a weather bot."}]


def _s(value):
    return {"stringValue": value}


def _kv(d):
    return [{"key": k, "value": v} for k, v in d.items()]


def _span(span_id, attrs, events=()):
    return {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": span_id, "name": "chat gpt-4o", "kind": 3,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
            "attributes": _kv({"gen_ai.operation.name": _s("chat"), "gen_ai.request.model": _s("gpt-4o"),
                               "gen_ai.provider.name": _s("openai"), **attrs}),
            "events": list(events)}


def _doc(spans, logs=()):
    doc = {"resourceSpans": [{"resource": {"attributes": _kv({"service.name": _s("weather")})},
                              "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}
    if logs:
        doc["resourceLogs"] = [{"resource": {}, "scopeLogs": [{"scope": {"name": "test"}, "logRecords": list(logs)}]}]
    return doc


def _import(store, tmp_path, doc):  # noqa: F811
    file = tmp_path / "trace.json"
    file.write_text(json.dumps(doc), encoding="utf-8")
    (run,) = import_file(store, file).runs
    return [(m["format"], m["request"], m["response"]) for m in model_calls(store, run)]


MESSAGES = {"gen_ai.input.messages": _s(json.dumps(INPUT)), "gen_ai.output.messages": _s(json.dumps(OUTPUT))}


def test_system_instructions_attribute(store, tmp_path):  # noqa: F811
    doc = _doc([_span("00f067aa0ba902b7", {**MESSAGES, "gen_ai.system_instructions": _s(json.dumps(SYSTEM))})])
    assert _import(store, tmp_path, doc) == [("otel.genai", [{"role": "system", "parts": SYSTEM}, *INPUT], OUTPUT)]


def test_system_instructions_of_an_operation_details_event(store, tmp_path):  # noqa: F811
    """The conventions' event form: the content attributes on a gen_ai.client.inference.operation.details
    log record tied to the span (the span itself carries none)."""
    details = {"spanId": "00f067aa0ba902b7", "traceId": "0af7651916cd43dd8448eb211c80319c",
               "eventName": "gen_ai.client.inference.operation.details",
               "attributes": _kv({"gen_ai.system_instructions": _s(json.dumps(SYSTEM)), **MESSAGES})}
    doc = _doc([_span("00f067aa0ba902b7", {})], [details])
    assert _import(store, tmp_path, doc) == [("otel.genai", [{"role": "system", "parts": SYSTEM}, *INPUT], OUTPUT)]


def test_system_message_event_beside_input_messages(store, tmp_path):  # noqa: F811
    """The older gen_ai.system.message event, as a log record (body {"content": ...}) and as a span event."""
    log = {"spanId": "00f067aa0ba902b7", "traceId": "0af7651916cd43dd8448eb211c80319c",
           "eventName": "gen_ai.system.message",
           "body": {"kvlistValue": {"values": _kv({"content": _s("You are a weather bot.")})}},
           "attributes": _kv({"gen_ai.system": _s("openai")})}
    doc = _doc([_span("00f067aa0ba902b7", MESSAGES)], [log])
    assert _import(store, tmp_path, doc) == [("otel.genai", [{"role": "system", "parts": SYSTEM}, *INPUT], OUTPUT)]

    event = {"name": "gen_ai.system.message", "timeUnixNano": "1700000000000000001",
             "attributes": _kv({"gen_ai.system": _s("openai"), "content": _s("You are a weather bot.")})}
    doc = _doc([_span("00f067aa0ba902b8", MESSAGES, [event])])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "1af7651916cd43dd8448eb211c80319c"
    assert _import(store, tmp_path, doc) == [("otel.genai", [{"role": "system", "parts": SYSTEM}, *INPUT], OUTPUT)]


def test_a_system_message_already_in_the_input_is_not_added_twice(store, tmp_path):  # noqa: F811
    given = [{"role": "system", "parts": SYSTEM}, *INPUT]
    doc = _doc([_span("00f067aa0ba902b7", {"gen_ai.input.messages": _s(json.dumps(given)),
                                          "gen_ai.system_instructions": _s(json.dumps(SYSTEM))})])
    assert _import(store, tmp_path, doc) == [("otel.genai", given, None)]


def test_adk_corpus_requests_unchanged(store):  # noqa: F811
    """Google ADK's real recording: its gen_ai.system.message events sit on generate_content spans whose
    request (the enclosing call_llm's llm_request, holding config.system_instruction) is kept as it is."""
    (run,) = import_file(store, corpus("agentevals-otel/adk_py_v2_default_S2.otlp.json")).runs
    requests = [m["request"] for m in model_calls(store, run)]
    assert [m["format"] for m in model_calls(store, run)] == ["google.adk"] * 3
    assert all(r["config"]["system_instruction"].startswith("Answer weather questions using tools.") for r in requests)
    assert load("agentevals-otel/adk_py_v2_default_S2.otlp.json")["resourceLogs"]  # the events are there
