"""A streamed Agents SDK model call in a replay is served from any recorded model call, and one the
record does not have stops the replay as a divergence.

``stream_response`` rebuilt the recorded call as an OpenAI ``Response``, which requires fields a call
recorded by ``get_response`` (``Runner.run``) does not hold (``created_at``, ``tools``, …), nor the empty
response given for a step the record has no model call at: the agent got a pydantic ``ValidationError``
instead of the recorded answer, or instead of an ``extra``/``mismatch`` divergence.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.testing import ScriptedModel, assistant_message  # noqa: E402
from agents.usage import Usage  # noqa: E402

import sealbox  # noqa: E402
from sealbox.integrations.openai_agents import instrument  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402
from sealbox.replay import Replayer  # noqa: E402


def _agent(stream: bool, turns: int, seen: list):
    model = ScriptedModel([ModelResponse(output=[assistant_message(f"hi {i}")], usage=Usage(
        requests=1, input_tokens=3, output_tokens=1, total_tokens=4), response_id=f"r{i}") for i in range(turns)])

    async def agent(run):
        agent = instrument(run, Agent(name="a", model=model), provider="scripted")
        for _ in range(turns):
            if stream:
                streamed = Runner.run_streamed(agent, "hello")
                async for event in streamed.stream_events():
                    if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
                        seen.append(event.data.delta)
                out = streamed.final_output
            else:
                out = (await Runner.run(agent, "hello")).final_output
            seen.append(("final", out))
        run.note(str(out))
    return agent


def _record(store, stream, turns):
    async def record():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            await _agent(stream, turns, [])(run)
        return run.run_id
    return asyncio.run(record())


def test_a_call_recorded_by_runner_run_is_served_to_a_streamed_run(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    run_id = _record(store, stream=False, turns=1)
    seen: list = []

    result = Replayer(store).replay(run_id, _agent(True, 1, seen))

    assert result.agent_error is None
    assert result.head() == "reproduced: 2 step(s) matched", result.divergence
    assert seen == ["hi 0", ("final", "hi 0")]
    store.close()


def test_a_streamed_call_the_record_does_not_have_stops_the_replay_as_a_divergence(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    run_id = _record(store, stream=True, turns=1)

    result = Replayer(store).replay(run_id, _agent(True, 2, []))

    assert result.agent_error is None, result.agent_error
    assert result.divergence is not None and result.divergence.step == "3"
    assert result.divergence.kind in ("extra", "mismatch"), result.divergence
    store.close()
