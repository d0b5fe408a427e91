"""A run context left in another context than it was entered in: an ``async with`` whose enter and
exit run in different asyncio tasks (an async fixture, a framework's lifespan, an AsyncExitStack
closed by another task), or a ``with`` left by another thread. ``ContextVar.reset`` refused the
token ("created in a different Context"): the caller got that ValueError and ``run.ended`` was
never written (the run stayed "running")."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading

import pytest

from sealbox.errors import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, current_run
from sealbox.store import init_store
from sealbox.verify import verify_store


@pytest.fixture
def store(tmp_path):
    s = init_store(tmp_path / "s")
    yield s
    s.close()


def ending(store, run_id):
    last = store.read_run(run_id)[-1]
    return last.kind, last.payload.get("status")


def test_an_async_run_entered_in_one_task_and_left_in_another_ends(store):
    recorder = Recorder(store, policy=ALLOW_ALL)

    async def main():
        stack = contextlib.AsyncExitStack()
        run = await asyncio.create_task(stack.enter_async_context(recorder.run(agent="a")))
        run.call_tool("s", "t", None, lambda: 1)
        await asyncio.create_task(stack.aclose())
        return run

    run = asyncio.run(main())
    assert run.ended and ending(store, run.run_id) == ("run.ended", "ok")
    assert verify_store(store).ok


def test_a_run_left_by_another_thread_ends_and_is_no_longer_current(store):
    contextvars.copy_context().run(_enter_here_leave_in_a_thread, store)


def _enter_here_leave_in_a_thread(store):
    recorder = Recorder(store, policy=ALLOW_ALL)
    run = recorder.run(agent="a")
    run.__enter__()
    failures: list[BaseException] = []
    seen: list[object] = []

    def leave():
        try:
            run.__exit__(None, None, None)
            seen.append(current_run())
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    thread = threading.Thread(target=leave)
    thread.start()
    thread.join()
    assert failures == [] and seen == [None]
    assert ending(store, run.run_id) == ("run.ended", "ok")
    # this thread cannot have its context changed by another: the ended run is not current here either
    assert current_run() is None
    tool = recorder.tool("s", "t")(lambda: 1)
    with pytest.raises(RecordingError, match="outside a recorded run"):
        tool()
    assert verify_store(store).ok


def test_a_decorated_tool_called_from_a_worker_thread_says_why_it_is_outside_the_run(store):
    """A ThreadPoolExecutor's threads do not inherit the run (a context variable): the decorated tool
    refused to run with 'called outside a recorded run' while the run was plainly open, and nothing
    said why or what to do."""
    import concurrent.futures

    recorder = Recorder(store, policy=ALLOW_ALL)
    ran: list[str] = []

    @recorder.tool("db")
    def read_query(query: str) -> str:
        ran.append(query)
        return "1"

    with recorder.run(agent="a") as run:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            with pytest.raises(RecordingError, match=r"outside a recorded run; it did not run \(.*ThreadPoolExecutor"
                                                     r".*run.call_tool.*contextvars.copy_context\(\).run\)"):
                pool.submit(read_query, "SELECT 1").result()
            ctx = contextvars.copy_context()
            assert pool.submit(ctx.run, read_query, "SELECT 2").result() == "1"
    assert ran == ["SELECT 2"]
    calls = [store.resolve(e.payload)["arguments"] for e in store.read_run(run.run_id) if e.kind == "tool.call"]
    assert calls == [{"query": "SELECT 2"}]
    assert verify_store(store).ok
