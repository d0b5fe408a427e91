"""A run that ends (leaving its ``with`` / ``async with``, or ``run.end()``) while one of its tools still
runs in another thread or asyncio task: the tool's outcome must not be lost. The run's end waits for
the call's ``tool.result`` (nothing may follow ``run.ended``: docs/recording.md), the caller gets what
the tool returned or raised, unchanged, and the call is listed with its outcome, not ``unknown``.
Real stores: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import uuid

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_late_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


def _check_record(store, run_id, ok):
    kinds = [e.kind for e in store.read_run(run_id)]
    assert kinds == ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
    (row,) = store.query_calls(run_id=run_id)
    assert (row["outcome"], row["ok"]) == (("ok", True) if ok else ("error", False))
    assert store.get_run(run_id)["status"] == "ended"
    report = sealbox.verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


@pytest.mark.parametrize("raises", [False, True])
def test_a_tool_running_in_another_thread_when_the_run_ends_keeps_its_outcome(store, raises):
    rec = Recorder(store, policy=ALLOW_ALL)
    started, out = threading.Event(), {}
    boom = LookupError("no such row")

    def slow(x):
        started.set()
        threading.Event().wait(0.3)  # still running when the with block is left
        if raises:
            raise boom
        return {"v": x}

    def worker(run):
        try:
            out["result"] = run.call_tool("db", "slow", {"x": 1}, slow)
        except BaseException as exc:  # noqa: BLE001
            out["raised"] = exc

    with rec.run(agent="bot") as run:
        t = threading.Thread(target=worker, args=(run,))
        t.start()
        assert started.wait(30)
    assert run.ended
    t.join(30)
    if raises:
        assert out == {"raised": boom}
    else:
        assert out == {"result": {"v": 1}}
    _check_record(store, run.run_id, ok=not raises)


def test_a_tool_running_in_another_asyncio_task_when_the_run_ends_keeps_its_outcome(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    async def slow(x):
        await asyncio.sleep(0.3)
        return [x, "done"]

    async def main():
        async with rec.run(agent="bot") as run:
            task = asyncio.create_task(run.acall_tool("db", "slow", {"x": 2}, slow))
            await asyncio.sleep(0.05)  # the call is recorded and its tool running
        return run, await task

    run, result = asyncio.run(main())
    assert result == [2, "done"]
    _check_record(store, run.run_id, ok=True)


def test_run_end_called_while_a_thread_runs_a_tool_waits_for_its_result(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    started, out = threading.Event(), {}

    def slow():
        started.set()
        threading.Event().wait(0.3)
        return "late"

    with rec.run(agent="bot") as run:
        t = threading.Thread(target=lambda: out.update(result=run.call_tool("db", "slow", None, slow)))
        t.start()
        assert started.wait(30)
        run.end("ok")
        t.join(30)
    assert out == {"result": "late"}
    _check_record(store, run.run_id, ok=True)


def test_a_run_whose_exit_is_cancelled_while_it_waits_for_a_task_s_call_ends_cancelled(store):
    """Leaving an ``async with`` run waits for the calls other tasks still run; a timeout around the block
    (``asyncio.wait_for``) cancelled that wait, the CancelledError left ``__aexit__`` before the run was
    ended: no ``run.ended`` at all, the run stayed current-less but ``running`` (its liveness lease held)
    for as long as the process lived. Now it ends ``cancelled`` and the CancelledError goes on; the call
    still running is one that cannot be waited for (its caller gets RecordingError, outcome unknown)."""
    recorder = Recorder(store, policy=ALLOW_ALL)
    box = {}

    async def agent():
        release = asyncio.Event()

        async def slow():
            await release.wait()
            return "late"

        async with recorder.run(agent="late") as run:
            box["run"], box["release"] = run, release
            box["call"] = asyncio.create_task(run.acall_tool("s", "slow", None, slow))
            while not run._in_flight:  # the call is decided and recorded, its tool waits
                await asyncio.sleep(0)
            box["left"] = True  # no await until the exit waits for the call

    async def main():
        task = asyncio.create_task(agent())
        while "left" not in box:
            await asyncio.sleep(0)
        assert not task.done()  # the block was left: its exit waits for the call
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        box["release"].set()
        with pytest.raises(sealbox.RecordingError):
            await box["call"]

    asyncio.run(main())
    run_id = box["run"].run_id
    events = list(store.read_run(run_id))
    assert [e.kind for e in events] == ["run.started", "tool.call", "policy.decision", "run.ended"]
    assert events[-1].payload["status"] == "cancelled"
    row = store.get_run(run_id)
    assert (row["status"], row["ending"]) == ("ended", "cancelled")
    (call,) = store.query_calls(run_id=run_id)
    assert call["outcome"] == "unknown"
    assert sealbox.verify_store(store).ok


def test_ctrl_c_while_the_run_waits_for_a_thread_s_call_ends_it_cancelled(store):
    """Ctrl-C (SIGINT) while leaving the ``with`` block waits for a tool a worker thread still runs: the
    KeyboardInterrupt left ``run.end()`` from its wait before ``run.ended`` was written, so the run had
    none (read ``interrupted`` though its process lived on, or ``running``). Now it ends ``cancelled``
    with the KeyboardInterrupt, which goes on; the worker's call ends after the run and its caller gets
    RecordingError (outcome unknown), as for any call that cannot be waited for."""
    import signal

    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - signals go to main
        pytest.skip("SIGINT is handled in the main thread")
    rec = Recorder(store, policy=ALLOW_ALL)
    main, out, waiting = threading.get_ident(), {}, threading.Event()

    def slow():
        while not run._idle_waiters:  # the run's end waits for this call
            threading.Event().wait(0.001)
        signal.pthread_kill(main, signal.SIGINT)
        assert waiting.wait(30)
        return "late"

    def worker():
        try:
            out["result"] = run.call_tool("db", "slow", None, slow)
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            out["raised"] = exc

    with pytest.raises(KeyboardInterrupt):
        try:
            with rec.run(agent="bot") as run:
                t = threading.Thread(target=worker)
                t.start()
                while not run._in_flight:  # the call is recorded and runs: the block is left now
                    threading.Event().wait(0.001)
        finally:
            waiting.set()
            t.join(30)
    assert isinstance(out.get("raised"), sealbox.RecordingError), out
    events = list(store.read_run(run.run_id))
    assert [e.kind for e in events] == ["run.started", "tool.call", "policy.decision", "run.ended"]
    assert (events[-1].payload["status"], events[-1].payload["error"]["type"]) == ("cancelled", "KeyboardInterrupt")
    row = store.get_run(run.run_id)
    assert (row["status"], row["ending"]) == ("ended", "cancelled")
    assert sealbox.verify_store(store).ok


def test_a_call_whose_gate_is_written_as_the_run_ends_is_waited_for_too(store):
    """A worker's call counted as running only once its ``tool.call`` was committed: a run ending between
    that commit and the count saw no call to wait for and wrote ``run.ended``; the tool then ran anyway,
    its result could not be recorded (RecordingError to the worker) and the record said the call's outcome
    was unknown in a run that ended ``ok``. The worker is held at that point here (a trace function)."""
    import sys

    rec = Recorder(store, policy=ALLOW_ALL)
    at_gate, proceed, out, ran = threading.Event(), threading.Event(), {}, []

    def hold(frame, event, arg):
        if event == "call" and frame.f_code.co_name in ("_call_began", "_hold_probe") and \
                frame.f_code.co_filename.endswith("recorder.py") and not at_gate.is_set():
            at_gate.set()  # the tool.call is committed
            assert proceed.wait(30)
        return None

    def worker():
        sys.settrace(hold)
        try:
            out["result"] = run.call_tool("db", "slow", None, lambda: ran.append(1) or "done")
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            out["raised"] = exc
        finally:
            sys.settrace(None)

    def release_once_the_end_waits_or_ended():
        while not (run._idle_waiters or run.ended):
            threading.Event().wait(0.001)
        proceed.set()

    with rec.run(agent="bot") as run:
        t = threading.Thread(target=worker)
        t.start()
        assert at_gate.wait(30)
        releaser = threading.Thread(target=release_once_the_end_waits_or_ended)
        releaser.start()
    t.join(30)
    releaser.join(30)
    assert out == {"result": "done"} and ran == [1]
    _check_record(store, run.run_id, ok=True)
