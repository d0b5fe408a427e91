"""A model call recorded from stream chunks keeps, through ``sealbox export --otlp`` and ``sealbox import``,
that it was streamed.

The recorder assembles a streamed response (OpenAI chat chunks, Anthropic Messages events, OpenAI
Responses events) into the one response it adds up to and writes ``stream: {"chunks": N}`` beside it; a
replay gives the agent chunks again because of it. The export left it out (no ``gen_ai.request.stream``,
nothing of the chunks), so the imported model call was a plain one: a replay of the imported run handed
the agent a dict where it had read a list of chunks. And a Responses call's span had no
``gen_ai.response.finish_reasons``. Now the chat span carries ``gen_ai.request.stream`` and
``sealbox.model.stream.chunks``, the import writes ``stream`` back, and the round trip keeps the assembled
response, its finish reason and usage.

Recorded with the real Recorder, exported to a real OTLP/HTTP endpoint on 127.0.0.1, imported with
``sealbox import``, replayed with the real Replayer; SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import json

from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import Collector, _sb

from sealbox import open_store
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

POLICY = "version: 1\nrules:\n  - id: all\n    effect: allow\n"

CHAT_REQUEST = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "read a"}]}
CHAT_CHUNKS = [
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": "Read"}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": [
        {"index": 0, "delta": {"content": "ing.", "tool_calls": [
            {"index": 0, "id": "call_A", "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}]},
         "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": [
        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "th\": \"a\"}"}}]},
         "finish_reason": "tool_calls"}]},
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": [],
     "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}},
]
CLAUDE_REQUEST = {"model": "claude-x", "max_tokens": 64, "stream": True,
                  "messages": [{"role": "user", "content": "what did it say?"}]}
CLAUDE_EVENTS = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                                          "content": [], "stop_reason": None,
                                          "usage": {"input_tokens": 9, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Buy "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "milk."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
    {"type": "message_stop"},
]
RESPONSES_REQUEST = {"model": "gpt-5", "stream": True, "input": "done?"}
RESPONSES_EVENTS = [
    {"type": "response.created", "response": {"id": "resp_1", "object": "response", "status": "in_progress",
                                              "model": "gpt-5", "output": []}},
    {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "content_index": 0, "delta": "Yes"},
    {"type": "response.completed", "response": {
        "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5",
        "output": [{"type": "message", "id": "m1", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Yes"}]}],
        "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}}},
]

received: list = []


def agent(run):
    received.append(run.complete(CHAT_REQUEST, lambda r: CHAT_CHUNKS))
    run.call_tool("fs", "read", {"path": "a"}, lambda path: "buy milk", call_id="call_A")
    received.append(run.complete(CLAUDE_REQUEST, lambda r: CLAUDE_EVENTS))
    received.append(run.complete(RESPONSES_REQUEST, lambda r: RESPONSES_EVENTS))


def _models(store, run_id):
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == "model.call"]


def _attrs(span):
    out = {}
    for a in span["attributes"]:
        v = a["value"]
        out[a["key"]] = v.get("stringValue", v.get("boolValue", v.get("intValue", v.get("arrayValue"))))
    return out


def test_streamed_model_calls_round_trip(backend, tmp_path):  # noqa: F811
    source = backend(tmp_path / "source")
    with Recorder(source, policy=Policy.from_text(POLICY)).run(agent="bot", principal="agent:bot") as run:
        agent(run)
    original = _models(source, run.run_id)
    source.close()
    assert [m["stream"] for m in original] == [{"chunks": 4}, {"chunks": 7}, {"chunks": 3}]

    collector = Collector()
    try:
        out = _sb("export", run.run_id, "-s", tmp_path / "source", "--otlp", collector.url, "--otlp-content")
        assert out.returncode == 0, out.stderr
        doc = collector.otlp_json(hex_ids=True)
    finally:
        collector.close()
    chats = {s["name"]: _attrs(s) for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
             if s["name"].startswith("chat ")}
    got = {name: (a.get("gen_ai.request.stream"), a.get("sealbox.model.stream.chunks"),
                  a.get("gen_ai.response.finish_reasons"), a.get("gen_ai.usage.input_tokens"),
                  a.get("gen_ai.usage.output_tokens")) for name, a in chats.items()}
    assert got == {
        "chat gpt-4o": (True, "4", {"values": [{"stringValue": "tool_calls"}]}, "11", "7"),
        "chat claude-x": (True, "7", {"values": [{"stringValue": "end_turn"}]}, "9", "3"),
        "chat gpt-5": (True, "3", {"values": [{"stringValue": "completed"}]}, "3", "1"),
    }
    assert json.loads(chats["chat gpt-4o"]["gen_ai.output.messages"]) == [
        {"role": "assistant", "finish_reason": "tool_calls", "parts": [
            {"type": "text", "content": "Reading."},
            {"type": "tool_call", "id": "call_A", "name": "read", "arguments": {"path": "a"}}]}]

    file = tmp_path / "export.json"
    file.write_text(json.dumps(doc), encoding="utf-8")
    backend(tmp_path / "target").close()
    out = _sb("import", "-s", tmp_path / "target", file, "--json")
    assert out.returncode == 0, out.stderr
    (imported,) = json.loads(out.stdout)["runs"]
    store = open_store(tmp_path / "target")
    try:
        models = _models(store, imported)
        for g, w in zip(models, original, strict=True):
            for field in ("request", "response", "format", "provider", "model", "tool_call_ids", "stream"):
                assert g.get(field) == w[field], field
            assert {k: g["usage"][k] for k in ("input_tokens", "output_tokens")} == \
                {k: w["usage"][k] for k in ("input_tokens", "output_tokens")}

        # the replay of the imported run gives the agent chunks again, as it read them when recorded
        received.clear()
        result = Replayer(store).replay(imported, agent)
        assert result.head() == "reproduced: 4 step(s) matched"
        assert [type(r).__name__ for r in received] == ["_Chunks", "_Chunks", "_Chunks"]
    finally:
        store.close()
