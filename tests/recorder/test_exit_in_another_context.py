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
