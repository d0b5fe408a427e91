"""The exception a tool (or a run's body) raised is what the caller gets, even when its record
(``tool.result``, ``run.ended``) then cannot be written: the recording failure is attached as a note.
A tool that returned, whose ``tool.result`` cannot be written, still gives RecordingError."""

from __future__ import annotations

import asyncio

import pytest

import sealbox
from sealbox import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


class ToolBug(Exception):
    pass


class AgentBug(Exception):
    pass


def _reopened_kinds(path, run_id):
    store = sealbox.open_store(path)
    try:
        return [e.kind for e in store.read_run(run_id)]
    finally:
        store.close()


def test_a_tools_exception_is_reraised_unchanged_when_its_result_cannot_be_recorded(tmp_path):
    path = tmp_path / "s"
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="y").start()
    bug = ToolBug("tool's own error")

    def tool():
        store.close()  # the store goes away while the tool runs (disk gone, closed by another thread)
        raise bug

    with pytest.raises(ToolBug) as caught:
        run.call_tool("s", "t", None, tool)
    assert caught.value is bug and str(caught.value) == "tool's own error"
    [note] = caught.value.__notes__
    assert note.startswith("sealbox: the tool.result of s/t (call ") and "could not be recorded: RecordingError" in note
    assert run.run_id in note
    assert _reopened_kinds(path, run.run_id) == ["run.started", "tool.call", "policy.decision"]  # no tool.result


def test_an_async_tools_exception_is_reraised_unchanged_when_its_result_cannot_be_recorded(tmp_path):
    path = tmp_path / "s"
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="y").start()

    async def tool():
        store.close()
        raise ToolBug("async tool's error")

    with pytest.raises(ToolBug, match="async tool's error") as caught:
        asyncio.run(run.acall_tool("s", "t", None, tool))
    assert "could not be recorded" in caught.value.__notes__[0]
    assert _reopened_kinds(path, run.run_id) == ["run.started", "tool.call", "policy.decision"]


def test_a_tool_that_returned_but_whose_result_cannot_be_recorded_is_a_recording_error(tmp_path):
    path = tmp_path / "s"
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="y").start()

    def tool():
        store.close()
        return "done"

    with pytest.raises(RecordingError, match="could not record"):
        run.call_tool("s", "t", None, tool)
    assert _reopened_kinds(path, run.run_id) == ["run.started", "tool.call", "policy.decision"]


def test_a_tools_exception_recorded_normally_carries_no_note(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="y") as run:
        with pytest.raises(ToolBug) as caught:
            run.call_tool("s", "t", None, lambda: (_ for _ in ()).throw(ToolBug("x")))
    assert not hasattr(caught.value, "__notes__")
    [result] = [e.payload for e in store.read_run(run.run_id) if e.kind == "tool.result"]
    assert result["ok"] is False and result["error"]["type"] == "ToolBug" and result["error"]["message"] == "x"
    store.close()


def test_the_bodys_exception_leaves_a_run_block_when_run_ended_cannot_be_recorded(tmp_path):
    path = tmp_path / "s"
    store = sealbox.init_store(path)
    bug = AgentBug("the agent's real error")
    with pytest.raises(AgentBug) as caught:
        with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
            store.close()
            raise bug
    assert caught.value is bug and caught.value.__context__ is None
    [note] = caught.value.__notes__
    assert note.startswith(f"sealbox: run.ended of run {run.run_id} could not be recorded: RecordingError")
    assert _reopened_kinds(path, run.run_id) == ["run.started"]


def test_the_bodys_exception_leaves_an_async_run_block_when_run_ended_cannot_be_recorded(tmp_path):
    store = sealbox.init_store(tmp_path / "s")

    async def main():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="x"):
            store.close()
            raise AgentBug("async body")

    with pytest.raises(AgentBug, match="async body") as caught:
        asyncio.run(main())
    assert "run.ended" in caught.value.__notes__[0]


def test_a_run_block_without_exception_whose_run_ended_cannot_be_recorded_is_a_recording_error(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with pytest.raises(RecordingError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="x"):
            store.close()
