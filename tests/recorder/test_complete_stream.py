"""RunContext.complete with a streaming call: the agent reads the provider SDK's own stream
(openai 2.x ``Stream`` over server-sent events, served in-process by an httpx transport: no model
service is reachable here) chunk by chunk, and the call is recorded when the stream ends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

import sealbox
from sealbox.recorder import RecordedStream, Recorder

BUDGET = sealbox.Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                                  "limits:\n  tokens: {per_run: 1000}\n")
BASE = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1764000000, "model": "gpt-4o-2024-08-06"}
CHUNKS = [
    {**BASE, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
    {**BASE, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}]},
    {**BASE, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_s1", "type": "function",
                                                                "function": {"name": "lookup", "arguments": "{\"q\":"}}]},
                          "finish_reason": None}]},
    {**BASE, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"x\"}"}}]},
                          "finish_reason": "tool_calls"}]},
    {**BASE, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}},
]


def client(chunks=CHUNKS):
    import openai

    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())

    return openai.OpenAI(api_key="test", base_url="http://127.0.0.1:9/v1",
                         http_client=httpx.Client(transport=httpx.MockTransport(answer)), max_retries=0)


REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True,
           "stream_options": {"include_usage": True}}


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def model_calls(store, run_id):
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == "model.call"]


def test_a_stream_read_to_its_end_is_recorded_assembled_and_its_tool_calls_link(store):
    """complete() recorded the SDK's Stream object before the agent read it: a placeholder of
    format 'unknown', no usage (a token budget failed open), no links."""
    api = client()
    with Recorder(store, policy=BUDGET).run(agent="bot") as run:
        stream = run.complete(REQUEST, lambda r: api.chat.completions.create(**r))
        assert isinstance(stream, RecordedStream) and model_calls(store, run.run_id) == []  # not read yet
        text, ids = "", []
        for chunk in stream:  # the SDK's own ChatCompletionChunk objects, as they come
            for choice in chunk.choices:
                text += choice.delta.content or ""
                ids += [tc.id for tc in choice.delta.tool_calls or () if tc.id]
        assert stream.response.status_code == 200  # the wrapped stream's attributes
        assert run.call_tool("kb", "lookup", {"q": "x"}, lambda q: q.upper(), call_id=ids[0]) == "X"
    assert text == "Hello" and ids == ["call_s1"]
    [call] = model_calls(store, run.run_id)
    assert (call["format"], call["stream"], call["usage"], call["tool_call_ids"]) == (
        "openai.chat", {"chunks": 5}, {"input_tokens": 30, "output_tokens": 8}, ["call_s1"])
    assert call["response"]["choices"][0]["message"]["content"] == "Hello"
    assert [e.step for e in store.read_run(run.run_id) if e.kind == "tool.call"] == ["2.1"]
    assert sealbox.verify_store(store).ok


def test_a_stream_closed_early_is_recorded_as_an_error(store):
    api = client()
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        with run.complete(REQUEST, lambda r: api.chat.completions.create(**r)) as stream:
            first = next(stream)
        assert first.choices[0].delta.content == "Hel"
        next_try = list(stream)  # ended: nothing more, recorded once
    assert next_try == []
    [call] = model_calls(store, run.run_id)
    assert call["response"] == {"error": {"type": "StreamClosedEarly",
                                          "message": "the stream was closed after 1 chunk(s), before it completed"}}


def test_a_stream_that_fails_while_read_is_recorded_with_its_error(store):
    def failing(_request):
        yield {"object": "chat.completion.chunk", "model": "m", "choices": []}
        raise ConnectionError("peer closed the connection")

    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        stream = run.complete(REQUEST, failing)
        with pytest.raises(ConnectionError, match="peer closed"):
            list(stream)
    [call] = model_calls(store, run.run_id)
    assert call["response"] == {"error": {"type": "ConnectionError", "message": "peer closed the connection"}}


# ----------------------------------------------------------------- async streams (acomplete)

def async_client(chunks=CHUNKS, completion=None):
    import openai

    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    async def answer(request: httpx.Request) -> httpx.Response:
        if completion is not None:
            return httpx.Response(200, json=completion)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())

    return openai.AsyncOpenAI(api_key="test", base_url="http://127.0.0.1:9/v1",
                              http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)), max_retries=0)


def test_an_async_stream_read_to_its_end_is_recorded_assembled_and_its_tool_calls_link(store):
    """There was no async form of complete(): an AsyncOpenAI stream (await create(stream=True))
    could not be recorded as a streamed call at all. acomplete() awaits the call and wraps the
    SDK's own AsyncStream: the chunks pass through, the call is recorded assembled at its end."""
    import asyncio

    from sealbox.recorder import AsyncRecordedStream

    api = async_client()

    async def agent():
        async with Recorder(store, policy=BUDGET).run(agent="bot") as run:
            stream = await run.acomplete(REQUEST, lambda r: api.chat.completions.create(**r))
            assert isinstance(stream, AsyncRecordedStream) and model_calls(store, run.run_id) == []
            text, ids = "", []
            async for chunk in stream:  # the SDK's own ChatCompletionChunk objects
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    ids += [tc.id for tc in choice.delta.tool_calls or () if tc.id]
            assert stream.response.status_code == 200  # the wrapped AsyncStream's attributes
            assert [c async for c in stream] == []  # ended: nothing more, recorded once
            assert await run.acall_tool("kb", "lookup", {"q": "x"}, lambda q: q.upper(), call_id=ids[0]) == "X"
        return run, text, ids

    run, text, ids = asyncio.run(agent())
    assert text == "Hello" and ids == ["call_s1"]
    [call] = model_calls(store, run.run_id)
    assert (call["format"], call["stream"], call["usage"], call["tool_call_ids"]) == (
        "openai.chat", {"chunks": 5}, {"input_tokens": 30, "output_tokens": 8}, ["call_s1"])
    assert call["response"]["choices"][0]["message"]["content"] == "Hello"
    assert call["response"]["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "lookup", "arguments": "{\"q\": \"x\"}"}
    assert [e.step for e in store.read_run(run.run_id) if e.kind == "tool.call"] == ["2.1"]
    assert sealbox.verify_store(store).ok


def test_an_async_stream_closed_early_is_recorded_as_an_error(store):
    import asyncio

    api = async_client()

    async def agent():
        with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
            async with await run.acomplete(REQUEST, lambda r: api.chat.completions.create(**r)) as stream:
                first = await stream.__anext__()
            second = await run.acomplete(REQUEST, lambda r: api.chat.completions.create(**r))
            await second.__anext__()
            await second.__anext__()
            await second.close()  # the SDK's AsyncStream is closed with await close()
            assert [c async for c in second] == []
        return run, first

    run, first = asyncio.run(agent())
    assert first.choices[0].delta.content == "Hel"
    assert [c["response"] for c in model_calls(store, run.run_id)] == [
        {"error": {"type": "StreamClosedEarly", "message": "the stream was closed after 1 chunk(s), before it completed"}},
        {"error": {"type": "StreamClosedEarly", "message": "the stream was closed after 2 chunk(s), before it completed"}}]


def test_an_async_stream_that_fails_while_read_is_recorded_with_its_error(store):
    import asyncio

    async def failing(_request):
        yield {"object": "chat.completion.chunk", "model": "m", "choices": []}
        raise ConnectionError("peer closed the connection")

    async def agent():
        with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
            stream = await run.acomplete(REQUEST, failing)  # an async generator function: not awaitable
            with pytest.raises(ConnectionError, match="peer closed"):
                [c async for c in stream]
        return run

    run = asyncio.run(agent())
    [call] = model_calls(store, run.run_id)
    assert call["response"] == {"error": {"type": "ConnectionError", "message": "peer closed the connection"}}


def test_acomplete_records_an_awaited_response_and_a_raised_error(store):
    import asyncio

    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1764000000, "model": "gpt-4o",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Hi there"}}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    api = async_client(completion=completion)

    async def down(_request):
        raise TimeoutError("the model did not answer")

    async def agent():
        with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
            answer = await run.acomplete({"model": "gpt-4o", "messages": []},
                                         lambda r: api.chat.completions.create(**r))
            with pytest.raises(TimeoutError):
                await run.acomplete({"model": "gpt-4o", "messages": []}, down)
        return run, answer

    run, answer = asyncio.run(agent())
    assert answer.choices[0].message.content == "Hi there"
    first, second = model_calls(store, run.run_id)
    assert (first["format"], first["usage"], first["response"]["choices"][0]["message"]["content"]) == (
        "openai.chat", {"input_tokens": 3, "output_tokens": 2}, "Hi there")
    assert second["response"] == {"error": {"type": "TimeoutError", "message": "the model did not answer"}}


def test_complete_refuses_an_async_call_unawaited_and_records_nothing(store):
    """complete() with an async call recorded the coroutine object as the response (a placeholder)
    and handed it back; the model's answer was never recorded."""
    import warnings

    from sealbox.errors import ConfigError

    async def ask(_request):
        raise AssertionError("never run")

    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the coroutine is closed: no "never awaited" warning
            with pytest.raises(ConfigError) as refused:
                run.complete({"model": "m"}, ask)
    assert str(refused.value) == (
        "complete(): call returned an awaitable (coroutine), which was not awaited, so the model was not "
        "called: use await run.acomplete(request, call) for an async call; nothing was recorded")
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "run.ended"]


# ----------------------------------------------------------------- streams never finished

def test_a_stream_still_open_when_the_run_ends_is_recorded_before_run_ended_and_closed(store):
    """A stream neither read to its end nor closed left no model.call at all: the model was called
    and the record did not say so."""
    from sealbox.recorder import StreamClosedEarly

    api = client()
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        stream = run.complete(REQUEST, lambda r: api.chat.completions.create(**r))
        next(stream)
        next(stream)
        unread = run.complete(REQUEST, lambda r: api.chat.completions.create(**r))
    assert [(e.kind, e.step) for e in store.read_run(run.run_id)] == [
        ("run.started", "1"), ("model.call", "2"), ("model.call", "3"), ("run.ended", "4")]
    assert [c["response"] for c in model_calls(store, run.run_id)] == [
        {"error": {"type": "StreamClosedEarly", "message": f"run {run.run_id} ended while the stream was open, "
                                                           "after 2 chunk(s), before it completed"}},
        {"error": {"type": "StreamClosedEarly", "message": f"run {run.run_id} ended while the stream was open, "
                                                           "after 0 chunk(s), before it completed"}}]
    assert stream.response.is_closed and unread.response.is_closed  # the SDK streams were closed
    with pytest.raises(StreamClosedEarly) as late:
        next(stream)
    assert str(late.value) == (f"run {run.run_id} ended while the stream was open, after 2 chunk(s), before it "
                               "completed; it was recorded so and closed, and cannot be read further")
    assert len(model_calls(store, run.run_id)) == 2  # recorded once


def test_a_stream_dropped_unfinished_is_recorded_at_the_next_model_call(store):
    import gc

    api = client()
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        stream = run.complete(REQUEST, lambda r: api.chat.completions.create(**r))
        next(stream)
        del stream
        gc.collect()
        assert model_calls(store, run.run_id) == []  # marked only: recorded at the next write of a model call
        run.model_call({"model": "gpt-4o", "messages": []}, {"object": "chat.completion", "model": "gpt-4o",
                                                             "choices": [], "usage": {"prompt_tokens": 1,
                                                                                      "completion_tokens": 1}})
    calls = [(e.step, store.resolve(e.payload)["response"]) for e in store.read_run(run.run_id) if e.kind == "model.call"]
    assert calls[0] == ("2", {"error": {"type": "StreamClosedEarly", "message": "the stream was dropped "
                                        "(garbage-collected) after 1 chunk(s), before it completed"}})
    assert calls[1][0] == "3" and calls[1][1]["choices"] == [] and len(calls) == 2


def test_an_async_stream_still_open_when_the_async_run_ends_is_closed_and_recorded(store):
    import asyncio

    api = async_client()

    async def agent():
        async with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
            stream = await run.acomplete(REQUEST, lambda r: api.chat.completions.create(**r))
            await stream.__anext__()
        return run, stream

    run, stream = asyncio.run(agent())
    assert stream.response.is_closed
    [call] = model_calls(store, run.run_id)
    assert call["response"] == {"error": {"type": "StreamClosedEarly", "message": f"run {run.run_id} ended while "
                                          "the stream was open, after 1 chunk(s), before it completed"}}
    assert [e.kind for e in store.read_run(run.run_id)][-2:] == ["model.call", "run.ended"]


def test_a_stream_from_a_server_that_leaves_out_tool_call_indexes_is_assembled(store):
    """The openai SDK's own chunks from an OpenAI-compatible server whose tool call fragments carry
    no ``index``: one call, its arguments joined, linked to the tool call that follows."""
    chunks = [
        {**BASE, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"id": "call_n1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":"}}]},
            "finish_reason": None}]},
        {**BASE, "choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": " \"x\"}"}}]},
                              "finish_reason": "tool_calls"}]},
        {**BASE, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}},
    ]
    api = client(chunks)
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        for _chunk in run.complete(REQUEST, lambda r: api.chat.completions.create(**r)):
            pass
        run.call_tool("kb", "lookup", {"q": "x"}, lambda q: q.upper(), call_id="call_n1")
    [call] = model_calls(store, run.run_id)
    assert call["tool_call_ids"] == ["call_n1"]
    assert call["response"]["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_n1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]
    assert [e.step for e in store.read_run(run.run_id) if e.kind == "tool.call"] == ["2.1"]


def test_complete_refuses_a_task_or_future_for_what_it_is_and_records_nothing(store):
    """complete() / acomplete() given an already-scheduled asyncio Task (or Future) as call called
    it, failed with "'_asyncio.Task' object is not callable" and recorded that TypeError as a
    model.call that failed (the model was in fact being called by the task, its answer unrecorded);
    a call returning a Task was refused with "not awaited, so the model was not called", untrue of a
    task that runs whether awaited or not. Now a ConfigError says what was given and what to pass,
    before anything is recorded; the task is left running (not cancelled)."""
    import concurrent.futures

    from sealbox.errors import ConfigError

    asked: list[Any] = []

    async def ask(request):
        asked.append(request)
        return {"choices": []}

    refusals: list[str] = []

    async def agent():
        with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
            task = asyncio.ensure_future(ask({"n": 1}))
            future = asyncio.get_running_loop().create_future()
            for call in (task, future):
                with pytest.raises(ConfigError) as refused:
                    run.complete({"model": "m"}, call)
                refusals.append(str(refused.value))
                with pytest.raises(ConfigError) as refused:
                    await run.acomplete({"model": "m"}, call)
                refusals.append(str(refused.value))
            later = asyncio.ensure_future(ask({"n": 2}))
            with pytest.raises(ConfigError) as refused:
                run.complete({"model": "m"}, lambda _request: later)
            refusals.append(str(refused.value))
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                submitted = pool.submit(lambda: {"choices": []})
                with pytest.raises(ConfigError) as refused:
                    run.complete({"model": "m"}, submitted)
                refusals.append(str(refused.value))
            coroutine = ask({"n": 3})
            with pytest.raises(ConfigError) as refused:
                await run.acomplete({"model": "m"}, coroutine)
            refusals.append(str(refused.value))
            with pytest.raises(ConfigError) as refused:
                run.complete({"model": "m"}, {"not": "callable"})
            refusals.append(str(refused.value))
            assert not task.cancelled() and not later.cancelled()
            assert await task == {"choices": []} and await later == {"choices": []}
            future.cancel()
        return run

    run = asyncio.run(agent())
    assert asked == [{"n": 1}, {"n": 2}]  # the tasks ran (not cancelled); the coroutine was closed unrun
    given_task = ("{}(): call is an asyncio Task, already scheduled, not a function: it calls the model whether or not "
                  "it is recorded, and its answer cannot be recorded from here; it was left running (not cancelled); "
                  "pass the function that makes the call, e.g. {}, not its task; nothing was recorded")
    given_future = given_task.replace("an asyncio Task", "an asyncio Future").replace("its task", "its future")
    sync_hint, async_hint = ("run.complete(request, lambda r: client.chat.completions.create(**r))",
                             "await run.acomplete(request, lambda r: client.chat.completions.create(**r))")
    assert refusals == [
        given_task.format("complete", sync_hint), given_task.format("acomplete", async_hint),
        given_future.format("complete", sync_hint), given_future.format("acomplete", async_hint),
        "complete(): call returned an asyncio Task, already scheduled: it calls the model whether or not it is "
        "awaited, and complete() cannot wait for it, so its answer would not be recorded; it was left running "
        "(not cancelled): use await run.acomplete(request, call) for an async call; nothing was recorded",
        given_future.replace("an asyncio Future", "a concurrent.futures Future").format("complete", sync_hint),
        "acomplete(): call is a coroutine (what calling an async function returns), not a function: it was closed "
        "unrun, so the model was not called; pass the async function itself, e.g. "
        "await run.acomplete(request, ask), not ask(request); nothing was recorded",
        "complete(): call must be a function called as call(request), got dict; nothing was recorded",
    ]
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "run.ended"]
    assert sealbox.verify_store(store).ok


def test_acomplete_awaits_a_thread_future_the_call_returns_and_records_its_answer(store):
    """A call returning a concurrent.futures Future (executor.submit) was recorded as a lossy
    placeholder ('<Future state=finished returned dict>') and the Future handed back: the answer was
    never in the record. acomplete now awaits it as it awaits a Task; a failure is recorded too."""
    import concurrent.futures

    def fail():
        raise ConnectionError("model service unreachable")

    async def agent():
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            async with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
                answer = await run.acomplete({"model": "m"}, lambda _r: pool.submit(lambda: {"answer": 42}))
                with pytest.raises(ConnectionError):
                    await run.acomplete({"model": "m"}, lambda _r: pool.submit(fail))
        return run, answer

    run, answer = asyncio.run(agent())
    assert answer == {"answer": 42}
    assert [store.resolve(e.payload)["response"] for e in store.read_run(run.run_id) if e.kind == "model.call"] == [
        {"answer": 42}, {"error": {"type": "ConnectionError", "message": "model service unreachable"}}]


def test_acomplete_cancelled_while_the_thread_s_call_runs_says_it_went_on(store):
    """acomplete cancelled while the concurrent.futures Future of a model call already running in a
    thread was awaited recorded CancelledError with an empty message, as if the call had been
    stopped; the thread went on and its answer reached no record. The record now says so."""
    import concurrent.futures
    import threading

    started, release = threading.Event(), threading.Event()
    submitted: list[concurrent.futures.Future] = []

    def ask():
        started.set()
        release.wait(10)
        return {"answer": "late"}

    async def agent(pool):
        async with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
            task = asyncio.ensure_future(run.acomplete({"model": "m"}, lambda _r: submitted.append(pool.submit(ask))
                                                       or submitted[0]))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return run

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            run = asyncio.run(agent(pool))
        finally:
            release.set()
        assert submitted[0].result(10) == {"answer": "late"}
    [response] = [store.resolve(e.payload)["response"] for e in store.read_run(run.run_id) if e.kind == "model.call"]
    assert response == {"error": {"type": "CancelledError", "message": (
        "cancelled while the work of the model call's concurrent.futures Future still ran: running work cannot be "
        "cancelled, it went on, and its outcome is not recorded")}}
