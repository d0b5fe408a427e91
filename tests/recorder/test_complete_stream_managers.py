"""The SDKs' streaming helpers (``client.messages.stream(...)``, ``client.chat.completions.stream(...)``,
``client.responses.stream(...)``, ``with_streaming_response``) return a manager that calls the model
only when it is entered. Given to ``run.complete`` / ``acomplete``, such a manager was recorded at once
as a ``model.call`` holding a ``$lossy`` placeholder (format unknown, no usage, no tool calls), and the
model was then called when the agent entered it, after the record and outside it. It is now refused
before the model is called: ConfigError, nothing recorded, the manager not entered (an async one's
pending request closed). Real SDK classes, a real SQLite store."""

from __future__ import annotations

import asyncio
import warnings

import pytest

import sealbox
from sealbox import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

anthropic_streaming = pytest.importorskip("anthropic.lib.streaming")
openai_chat_streaming = pytest.importorskip("openai.lib.streaming.chat")
from anthropic._types import NOT_GIVEN  # noqa: E402


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def message(name):
    return (f"complete(): call returned {name}, which calls the model only when it is entered (with ...), "
            "after complete() returned: that call would not be recorded; pass a call that returns the stream "
            "itself, e.g. lambda r: client.messages.create(**r, stream=True) (or chat.completions.create / "
            "responses.create with stream=True); the model was not called and nothing was recorded")


def test_anthropic_message_stream_manager_is_refused_unentered(store):
    called = []
    manager = anthropic_streaming.MessageStreamManager(lambda: called.append(1), output_format=NOT_GIVEN)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError) as raised:
            run.complete({"model": "claude", "max_tokens": 5, "messages": []}, lambda r: manager)
    assert str(raised.value) == message("a MessageStreamManager")
    assert called == []
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "run.ended"]


def test_openai_chat_stream_manager_is_refused_unentered(store):
    called = []
    manager = openai_chat_streaming.ChatCompletionStreamManager(
        lambda: called.append(1), response_format=NOT_GIVEN, input_tools=NOT_GIVEN)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError) as raised:
            run.complete({"model": "gpt", "messages": []}, lambda r: manager)
    assert str(raised.value) == message("a ChatCompletionStreamManager")
    assert called == []
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "run.ended"]


def test_an_async_manager_is_refused_by_acomplete_and_its_request_closed(store):
    ran = []

    async def request():
        ran.append(1)

    async def go():
        pending = request()
        manager = anthropic_streaming.AsyncMessageStreamManager(pending, output_format=NOT_GIVEN)
        async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            with pytest.raises(ConfigError) as raised:
                await run.acomplete({"model": "claude", "max_tokens": 5, "messages": []}, lambda r: manager)
        return run.run_id, str(raised.value), pending

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        run_id, text, pending = asyncio.run(go())
    assert text == message("an AsyncMessageStreamManager").replace("complete()", "acomplete()", 2)
    assert ran == [] and pending.cr_frame is None  # closed, never run
    assert [e.kind for e in store.read_run(run_id)] == ["run.started", "run.ended"]
