"""``RunResultStreaming.cancel()`` (OpenAI Agents SDK, real package, its scripted ``agents.testing`` model)
reaches nothing the integration sees: the stream just stops (``is_complete`` True, ``final_output`` None,
no exception, ``run_loop_exception`` None), and ``cancel(mode="after_turn")`` cancels nothing at all.
The run ended ``ok`` with nothing saying it was cancelled; docs/integrations.md says so and gives the
way to record it (``run.end("cancelled")`` where the agent calls ``cancel()``), pinned here."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.usage import Usage  # noqa: E402

import sealbox  # noqa: E402
from sealbox.integrations.openai_agents import instrument  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402

set_tracing_disabled(True)


def _response(output, rid):
    return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2),
                         response_id=rid)


async def _cancelled_stream(store, mode, *, record_it):
    started, release = asyncio.Event(), asyncio.Event()

    @function_tool
    async def slow(x: int) -> str:
        """Waits until released."""
        started.set()
        await release.wait()
        return "late"

    agent = Agent(name="c", tools=[slow], model=ScriptedModel([
        _response([function_call("slow", {"x": 1}, call_id="s1")], "r1"),
        _response([assistant_message("never asked")], "r2")]))
    async with Recorder(store, policy=ALLOW_ALL).run(agent="c") as run:
        result = Runner.run_streamed(instrument(run, agent), "go")

        async def consume():
            async for _ in result.stream_events():
                pass

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), 30)
        result.cancel(mode=mode)
        if mode == "after_turn":  # the turn is completed: the tool runs to its end (immediate: cancelled)
            release.set()
        await asyncio.wait_for(task, 30)
        if record_it:
            run.end("cancelled")  # the documented way: the agent knows it cancelled the stream
    return run, result


@pytest.mark.parametrize("mode,tool_result", [
    ("immediate", {"ok": False, "error_type": "CancelledError"}),
    ("after_turn", {"ok": True, "result": "late"}),
])
@pytest.mark.parametrize("record_it", [False, True])
def test_a_cancelled_stream_gives_no_signal_and_the_agent_records_the_cancellation(tmp_path, mode, tool_result,
                                                                                   record_it):
    store = sealbox.init_store(tmp_path / "s")
    run, result = asyncio.run(_cancelled_stream(store, mode, record_it=record_it))
    # what the SDK leaves: a stream that simply stopped, as a finished one would, without its output
    assert (result.is_complete, result.final_output, result.run_loop_exception) == (True, None, None)
    events = store.read_run(run.run_id)
    assert [e.kind for e in events if e.kind != "policy.decision"] == [
        "run.started", "model.call", "tool.call", "tool.result", "run.ended"]
    (res,) = [store.resolve(e.payload) for e in events if e.kind == "tool.result"]
    got = {"ok": res["ok"]}
    got.update({"error_type": res["error"]["type"]} if not res["ok"] else {"result": res["result"]})
    assert got == tool_result
    ended = store.resolve(events[-1].payload)
    assert (ended["status"], "error" in ended) == ("cancelled" if record_it else "ok", False)
    assert sealbox.verify_store(store).ok
    store.close()
