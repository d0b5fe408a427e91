"""A model call interrupted while in flight (a KeyboardInterrupt, a task cancelled by a timeout or by
its caller) was made all the same: it is recorded as a ``model.call`` with ``response = {"error"}``,
as a tool call cut short is recorded as a ``tool.result`` error. Before, only an ``Exception`` was
recorded, so a cancelled run's record lacked the model call it was waiting for."""

from __future__ import annotations

import asyncio

import pytest

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store
from sealbox.verify import verify_store


def kinds_and_payloads(store, run_id):
    return [(e.kind, store.resolve(e.payload)) for e in store.read_run(run_id)]


def test_complete_records_a_keyboard_interrupt_in_the_model_call_and_lets_it_go_on(tmp_path):
    store = init_store(tmp_path / "s")

    def call(request):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.complete({"model": "m", "messages": []}, call, provider="local", model="m")
    events = kinds_and_payloads(store, run.run_id)
    assert [k for k, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][1]["response"] == {"error": {"type": "KeyboardInterrupt", "message": ""}}
    assert (events[1][1]["provider"], events[1][1]["model"]) == ("local", "m")
    assert events[2][1]["status"] == "cancelled"
    assert verify_store(store).ok
    store.close()


def test_complete_records_a_cancelled_model_call(tmp_path):
    store = init_store(tmp_path / "s")

    async def main():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            def call(request):  # the task was cancelled while the model client waited
                raise asyncio.CancelledError()

            with pytest.raises(asyncio.CancelledError):
                run.complete({"model": "m"}, call, provider="local", model="m")
        return run

    run = asyncio.run(main())
    events = kinds_and_payloads(store, run.run_id)
    assert [k for k, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][1]["response"] == {"error": {"type": "CancelledError", "message": ""}}
    assert verify_store(store).ok
    store.close()


def test_an_interrupted_model_call_that_cannot_be_recorded_still_lets_the_interrupt_go_on(tmp_path):
    store = init_store(tmp_path / "s")
    run = Recorder(store, policy=ALLOW_ALL).run(agent="a")
    run.start()
    run.end("ok")  # nothing can be recorded into the run any more

    def call(request):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        run.complete({"model": "m"}, call)
    assert any("the model.call of run" in note and "could not be recorded" in note
               for note in getattr(caught.value, "__notes__", []))

    def failing(request):
        raise ConnectionError("down")

    from sealbox.errors import RecordingError

    with pytest.raises(RecordingError):  # an Exception: the recording failure is raised, as before
        run.complete({"model": "m"}, failing)
    assert verify_store(store).ok
    store.close()
