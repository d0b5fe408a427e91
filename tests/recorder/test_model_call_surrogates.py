r"""A lone surrogate in a provider response (JSON allows ``"\ud800"``) must not make ``model_call``
fail: the extracted ``model`` and ``tool_call_ids`` used to be refused by the event schema
(``model.call: data.model must be string``, ``data.tool_call_ids[0] must be string``) while the
same surrogate in message content recorded fine. They are now written as valid Unicode
(``sealbox.adapters.valid_text``: the visible text ``\udXXX``); the response keeps the original,
losslessly. Real Recorder, real SQLite store, each response shape the adapters read.
"""

from __future__ import annotations

import json

import pytest

from sealbox.adapters import normalize_model_call, valid_text
from sealbox.canonical import decode
from sealbox.errors import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store
from sealbox.verify import verify_store

MODEL = "gpt-4o\ud800"            # as json.loads('"gpt-4o\\ud800"') gives it
CALL_ID = "call_\udc00"
SHOWN_MODEL = "gpt-4o\\ud800"      # a backslash, then "ud800": valid UTF-8 text
SHOWN_ID = "call_\\udc00"


def chat() -> dict:
    return json.loads('{"object": "chat.completion", "model": "gpt-4o\\ud800", "choices": [{"message": {'
                      '"role": "assistant", "content": null, "tool_calls": [{"id": "call_\\udc00", "type": '
                      '"function", "function": {"name": "f", "arguments": "{\\"x\\": 1}"}}]}}], '
                      '"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}')


def responses() -> dict:
    return json.loads('{"object": "response", "model": "gpt-4o\\ud800", "output": [{"type": "function_call", '
                      '"call_id": "call_\\udc00", "name": "f", "arguments": "{\\"x\\": 1}"}], '
                      '"usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}')


def anthropic() -> dict:
    return json.loads('{"type": "message", "role": "assistant", "model": "gpt-4o\\ud800", "content": ['
                      '{"type": "tool_use", "id": "call_\\udc00", "name": "f", "input": {"x": 1}}], '
                      '"usage": {"input_tokens": 3, "output_tokens": 4}}')


SHAPES = {"openai.chat": chat, "openai.responses": responses, "anthropic.messages": anthropic}


@pytest.fixture
def store(tmp_path):
    s = init_store(tmp_path / "store")
    yield s
    s.close()


def test_valid_text_marks_lone_surrogates_and_leaves_valid_text_alone():
    assert valid_text(MODEL) == SHOWN_MODEL and valid_text(CALL_ID) == SHOWN_ID
    assert valid_text("\ud83d\ude00") == "\\ud83d\\ude00"  # two lone halves (not a joined pair) stay marked
    for text in ("gpt-4o", "", "emoji \U0001F600", "back\\slash"):
        assert valid_text(text) is text


@pytest.mark.parametrize("fmt", list(SHAPES))
def test_normalize_gives_valid_model_and_ids(fmt):
    response = SHAPES[fmt]()
    info = normalize_model_call({"model": "gpt-4o"}, response)
    assert info.format == fmt and info.model == SHOWN_MODEL
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [(SHOWN_ID, "f", {"x": 1})]
    assert info.response["model"] == MODEL  # the response itself is kept as given
    # the model named by the request only, and by the caller, the same way
    del response["model"]
    assert normalize_model_call({"model": MODEL}, response).model == SHOWN_MODEL
    assert normalize_model_call({}, response, model=MODEL, provider="p\udfff").model == SHOWN_MODEL
    assert normalize_model_call({}, response, provider="p\udfff").provider == "p\\udfff"


@pytest.mark.parametrize("fmt", list(SHAPES))
def test_model_call_with_surrogates_records_and_links(store, fmt):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="surrogates") as run:
        mc = run.model_call({"model": "gpt-4o"}, SHAPES[fmt]())
        (requested,) = mc.tool_calls
        assert requested.id == SHOWN_ID
        got = run.call_tool("srv", "f", requested.arguments, lambda x: x + 1, call_id=requested.id)
    assert got == 2
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ["run.started", "model.call", "tool.call", "policy.decision", "tool.result",
                                        "run.ended"]
    model_call, tool_call = events[1], events[2]
    assert model_call.payload["model"] == SHOWN_MODEL
    assert model_call.payload["tool_call_ids"] == [SHOWN_ID]
    assert model_call.payload["usage"] == {"input_tokens": 3, "output_tokens": 4}
    # linked: the tool call is the first sibling step under the model call
    assert tool_call.payload["call_id"] == SHOWN_ID and tool_call.step == f"{model_call.step}.1"
    # the response's own strings come back exactly, lone surrogates and all
    response = decode(store.resolve(model_call.payload["response"]))
    assert response["model"] == MODEL
    assert json.dumps(response, sort_keys=True) == json.dumps(SHAPES[fmt](), sort_keys=True)
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


def test_tool_call_given_the_raw_surrogate_id_links_too(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="surrogates") as run:
        mc = run.model_call({"model": "gpt-4o"}, chat())
        run.call_tool("srv", "f", {"x": 1}, lambda x: x, call_id=CALL_ID)
    tool_call = [e for e in store.read_run(run.run_id) if e.kind == "tool.call"][0]
    assert tool_call.payload["call_id"] == SHOWN_ID and tool_call.step == f"{mc.step}.1"
