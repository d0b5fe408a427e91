"""A tool that returns work still under way (a ``concurrent.futures`` Future from
``executor.submit``, an asyncio Task or Future from an ``async def`` tool) was recorded ``ok: true``
with a placeholder (``<Future state=pending>``) whatever that work then did: a failure in it was never
recorded. ``acall_tool`` now awaits a ``concurrent.futures`` Future a tool returns (as ``acomplete``
does) and records its outcome; anything else under way is refused as a returned coroutine is,
recorded ``ok: false`` with the ConfigError, and left running. Real Recorder, real SQLite store."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

import sealbox
from sealbox import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def executor():
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        yield ex


def result_of(store, run_id):
    [result] = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    return result


def test_acall_tool_awaits_a_thread_future_and_records_its_value(store, executor):
    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            assert await run.acall_tool("s", "t", None, lambda: executor.submit(lambda: 7)) == 7
        return run.run_id
    result = result_of(store, asyncio.run(go()))
    assert (result["ok"], result["result"]) == (True, 7)


def test_acall_tool_records_the_failure_of_a_thread_future(store, executor):
    def boom():
        raise ValueError("the disk is full")

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            with pytest.raises(ValueError, match="the disk is full"):
                await run.acall_tool("s", "t", None, lambda: executor.submit(boom))
        return run.run_id
    result = result_of(store, asyncio.run(go()))
    assert result["ok"] is False and "result" not in result
    assert (result["error"]["type"], result["error"]["message"]) == ("ValueError", "the disk is full")


def test_call_tool_refuses_a_thread_future_and_leaves_it_running(store, executor):
    release = threading.Event()
    future = executor.submit(release.wait, 5)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            with pytest.raises(ConfigError) as raised:
                run.call_tool("s", "t", None, lambda: future)
    finally:
        running = not future.cancelled() and not future.done()
        release.set()
    message = ("s/t: the tool returned a concurrent.futures Future, work under way whose outcome the record "
               "would not hold (it would say ok, whatever that work then did): return its result instead "
               "(future.result()); it was left running, not cancelled; the call is recorded as this error")
    assert str(raised.value) == message
    result = result_of(store, run.run_id)
    assert result["ok"] is False and (result["error"]["type"], result["error"]["message"]) == ("ConfigError", message)
    assert running and future.result(5) is True


@pytest.mark.parametrize("kind", ["an asyncio Task", "an asyncio Future"])
def test_an_async_tool_returning_a_task_or_future_is_refused(store, kind):
    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            async def tool():
                if kind == "an asyncio Task":
                    return asyncio.ensure_future(asyncio.sleep(0, "late"))
                return asyncio.get_running_loop().create_future()
            with pytest.raises(ConfigError) as raised:
                await run.acall_tool("s", "t", None, tool)
        return run.run_id, str(raised.value)
    run_id, message = asyncio.run(go())
    assert message == (f"s/t: the tool returned {kind}, work under way whose outcome the record would not hold "
                       "(it would say ok, whatever that work then did): await it in the tool and return its "
                       "result; it was left running, not cancelled; the call is recorded as this error")
    result = result_of(store, run_id)
    assert result["ok"] is False and result["error"]["message"] == message
