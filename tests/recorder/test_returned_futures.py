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


def test_acall_tool_cancelled_while_the_thread_runs_says_the_thread_went_on(store, executor):
    """A caller cancelled while awaiting the Future of a tool's running thread: the thread cannot be
    stopped (``Future.cancel()`` fails on running work) and went on to finish, but the record said only
    ``CancelledError`` with an empty message, as if the tool had been stopped; its value was lost. The
    record now says the thread was still running, was not stopped, and that its outcome is not
    recorded."""
    started, release = threading.Event(), threading.Event()
    submitted: list[concurrent.futures.Future] = []

    def work():
        started.set()
        release.wait(10)
        return "finished late"

    def tool():
        submitted.append(executor.submit(work))
        return submitted[0]

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            task = asyncio.ensure_future(run.acall_tool("s", "t", None, tool))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return run.run_id

    try:
        run_id = asyncio.run(go())
    finally:
        release.set()
    assert submitted[0].result(10) == "finished late"  # the thread went on
    result = result_of(store, run_id)
    assert result["ok"] is False and "result" not in result
    assert (result["error"]["type"], result["error"]["message"]) == (
        "CancelledError", "cancelled while the work of the tool's concurrent.futures Future still ran: running "
                          "work cannot be cancelled, it went on, and its outcome is not recorded")


def test_acall_tool_cancelled_before_the_thread_starts_cancels_its_work(store, executor):
    """Work still queued when its caller is cancelled is cancelled with it: it never runs, and the
    record says CancelledError (no message), nothing more."""
    busy, release = threading.Event(), threading.Event()
    ran: list[str] = []
    blocker = executor.submit(lambda: busy.set() or release.wait(10))  # the executor's only thread
    submitted: list[concurrent.futures.Future] = []

    def tool():
        submitted.append(executor.submit(ran.append, "queued work"))
        return submitted[0]

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            await asyncio.get_running_loop().run_in_executor(None, busy.wait, 10)
            task = asyncio.ensure_future(run.acall_tool("s", "t", None, tool))
            while not submitted:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return run.run_id

    try:
        run_id = asyncio.run(go())
    finally:
        release.set()
    blocker.result(10)
    assert submitted[0].cancelled() and ran == []
    result = result_of(store, run_id)
    assert result["ok"] is False
    assert (result["error"]["type"], result["error"]["message"]) == ("CancelledError", "")
