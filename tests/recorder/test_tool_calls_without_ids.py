"""A tool call a model response requests without a call id (some OpenAI-compatible providers leave
``id`` out) is kept in the record, in its place, with id None: it was dropped from ``tool_calls`` and
``tool_call_ids``, and its siblings' steps shifted to fill its place."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.adapters import ToolCallRequest, normalize_model_call
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.verify import verify_store

CHAT = {"object": "chat.completion", "model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "first", "arguments": '{"a": 1}'}},
            {"id": "call_b", "type": "function", "function": {"name": "second", "arguments": "{}"}},
            {"id": "", "type": "function", "function": {"name": "third", "arguments": '{"c": 3}'}},
        ]}, "finish_reason": "tool_calls"}]}
RESPONSES = {"object": "response", "model": "m", "usage": {"input_tokens": 3, "output_tokens": 2}, "output": [
    {"type": "function_call", "name": "first", "arguments": '{"a": 1}'},
    {"type": "function_call", "call_id": "call_b", "name": "second", "arguments": "{}"},
    {"type": "custom_tool_call", "name": "third", "input": "x"},
]}
ANTHROPIC = {"type": "message", "role": "assistant", "model": "m", "usage": {"input_tokens": 3, "output_tokens": 2},
             "content": [{"type": "tool_use", "name": "first", "input": {"a": 1}},
                         {"type": "tool_use", "id": "call_b", "name": "second", "input": {}},
                         {"type": "tool_use", "id": None, "name": "third", "input": {"c": 3}}]}
CHAT_STREAM = [
    {"object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "type": "function", "function": {"name": "first", "arguments": '{"a": '}}]}}]},
    {"object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "1}"}},
        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "second", "arguments": "{}"}},
        {"index": 2, "type": "function", "function": {"name": "third", "arguments": '{"c": 3}'}}]}}]},
    {"object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
     "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


@pytest.mark.parametrize("response, third", [(CHAT, {"c": 3}), (RESPONSES, "x"), (ANTHROPIC, {"c": 3}),
                                             (CHAT_STREAM, {"c": 3})], ids=["chat", "responses", "anthropic", "stream"])
def test_calls_without_an_id_are_kept_in_their_place(store, response, third):
    assert normalize_model_call({"model": "m"}, response).tool_calls == (
        ToolCallRequest(None, "first", {"a": 1}), ToolCallRequest("call_b", "second", {}),
        ToolCallRequest(None, "third", third))
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="a") as run:
        m = run.model_call({"model": "m"}, response)
        assert m.step == "2"
        assert [tc.id for tc in m.tool_calls] == [None, "call_b", None]
        assert [tc.name for tc in m.tool_calls] == ["first", "second", "third"]
        run.call_tool("local", "second", {}, lambda: "b", call_id="call_b")  # its own position: 2.2, not 2.1
        run.link_call("mine_c", f"{m.step}.3")  # an id-less call at its sibling step, as documented
        run.call_tool("local", "third", None, lambda: "c", call_id="mine_c")
        run.call_tool("local", "first", None, lambda: "a")  # not linked: a new top-level step
    events = store.read_run(run.run_id)
    [call] = [e for e in events if e.kind == "model.call"]
    assert call.payload["tool_call_ids"] == [None, "call_b", None]
    assert [e.kind for e in events if e.kind == "anomaly"] == []
    assert [(e.payload["tool"], e.step) for e in events if e.kind == "tool.call"] == [
        ("second", "2.2"), ("third", "2.3"), ("first", "3")]
    assert verify_store(store).ok


def test_reports_and_otlp_show_a_call_without_an_id(store):
    from sealbox.interop.otlp import build_otlp
    from sealbox.report import render
    from sealbox.report.model import build_report

    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.model_call({"model": "m"}, CHAT)
    report = build_report(store, run.run_id, verify=False)
    assert report.model_calls[0].tool_call_ids == (None, "call_b", None)
    assert "tool calls (no id), `call_b`, (no id)" in render(report, "md")
    assert "tool calls (no id), call_b, (no id)" in render(report, "html")
    build_otlp(store, [run.run_id])  # does not raise
