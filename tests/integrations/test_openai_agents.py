"""The OpenAI Agents SDK integration, with a real ``agents.Agent`` and ``Runner``
and a scripted model (no model service is reachable here)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

import sealbox  # noqa: E402
from sealbox.errors import RecordingError  # noqa: E402
from sealbox.integrations.openai_agents import (  # noqa: E402
    SealboxModel,
    governed_tool,
    instrument,
    mcp_env,
    mcp_meta,
    mcp_meta_resolver,
)
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.policy import Policy  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402

set_tracing_disabled(True)


def sync(fn):
    """Run an async test body with asyncio.run (no async pytest plugin needed)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))
    return wrapper


def call(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id=f"fc_{call_id}", call_id=call_id, type="function_call", name=name,
                                    arguments=arguments, status="completed")


def text(message: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id="msg_final", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=message, annotations=[])])


def response(output: list, input_tokens: int, output_tokens: int, rid: str) -> ModelResponse:
    return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens,
                                                    total_tokens=input_tokens + output_tokens), response_id=rid)


class ScriptedModel(Model):
    """Returns the scripted responses in order and keeps what it was sent."""

    def __init__(self, responses: list[ModelResponse]) -> None:
        self.responses = list(responses)
        self.inputs: list = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
        self.inputs.append(input)
        return self.responses.pop(0)

    def stream_response(self, *args, **kwargs):  # pragma: no cover - not used
        raise NotImplementedError


class Weather:
    """Two tools that count their invocations."""

    def __init__(self) -> None:
        self.invoked: list[tuple[str, str]] = []

        @function_tool
        async def get_weather(city: str) -> str:
            """Current weather for a city."""
            self.invoked.append(("get_weather", city))
            return f"Sunny in {city}"

        @function_tool
        async def get_time(city: str, utc_offset: int = 0) -> str:
            """Local time in a city."""
            self.invoked.append(("get_time", city))
            return f"12:{utc_offset:02d} in {city}"

        self.tools = [get_weather, get_time]


def two_call_script() -> ScriptedModel:
    return ScriptedModel([
        response([call("call_w", "get_weather", '{"city": "Paris"}'),
                  call("call_t", "get_time", '{"city": "Oslo", "utc_offset": 1}')], 100, 20, "resp_1"),
        response([text("Sunny in Paris; 12:01 in Oslo.")], 150, 12, "resp_2"),
    ])


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def events_of(store, run_id):
    return [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(run_id)]


@sync
async def test_two_parallel_tool_calls_are_recorded_in_order_and_linked(store):
    weather, model = Weather(), two_call_script()
    agent = Agent(name="weather-bot", instructions="Answer about weather.", model=model, tools=weather.tools)
    async with Recorder(store, policy=ALLOW_ALL).run(agent="weather-bot") as run:
        result = await Runner.run(instrument(run, agent), "Weather in Paris and time in Oslo?")
    assert result.final_output == "Sunny in Paris; 12:01 in Oslo."
    assert weather.invoked == [("get_weather", "Paris"), ("get_time", "Oslo")]

    events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"),
        ("model.call", "2"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"), ("tool.result", "2.1"),
        ("tool.call", "2.2"), ("policy.decision", "2.2"), ("tool.result", "2.2"),
        ("model.call", "3"),
        ("run.ended", "4"),
    ]
    first, second = events[1][2], events[8][2]
    assert first["tool_call_ids"] == ["call_w", "call_t"] and second["tool_call_ids"] == []
    assert (first["provider"], first["format"], first["model"]) == ("unknown", "openai.responses", "ScriptedModel")
    # request: instructions, input items, tools
    assert first["request"]["instructions"] == "Answer about weather."
    assert first["request"]["agent"] == "weather-bot"
    assert first["request"]["input"] == [{"content": "Weather in Paris and time in Oslo?", "role": "user"}]
    assert [t["name"] for t in first["request"]["tools"]] == ["get_weather", "get_time"]
    assert first["request"]["tools"][1]["parameters"]["properties"]["utc_offset"]["type"] == "integer"
    # response: output items; the second request carries the tool outputs back
    assert [i["call_id"] for i in first["response"]["output"]] == ["call_w", "call_t"]
    outputs = {i["call_id"]: i["output"] for i in second["request"]["input"] if i.get("type") == "function_call_output"}
    assert outputs == {"call_w": "Sunny in Paris", "call_t": "12:01 in Oslo"}
    assert second["response"]["output"][0]["content"][0]["text"] == "Sunny in Paris; 12:01 in Oslo."

    tool_calls = [p for k, _, p in events if k == "tool.call"]
    assert [(p["call_id"], p["server"], p["tool"], p["exposed"], p["arguments"]) for p in tool_calls] == [
        ("call_w", "local", "get_weather", "get_weather", {"city": "Paris"}),
        ("call_t", "local", "get_time", "get_time", {"city": "Oslo", "utc_offset": 1}),
    ]
    assert all(p["grant"] == "implicit:agent:weather-bot" for p in tool_calls)
    decisions = [p for k, _, p in events if k == "policy.decision"]
    assert [(p["call_id"], p["effect"]) for p in decisions] == [("call_w", "allow"), ("call_t", "allow")]
    results = [p for k, _, p in events if k == "tool.result"]
    assert [(p["call_id"], p["ok"], p["result"]) for p in results] == [
        ("call_w", True, "Sunny in Paris"), ("call_t", True, "12:01 in Oslo")]

    assert [p["usage"] for k, _, p in events if k == "model.call"] == [
        {"input_tokens": 100, "output_tokens": 20}, {"input_tokens": 150, "output_tokens": 12}]
    ended = events[-1][2]
    assert ended["status"] == "ok"
    assert (ended["usage"]["input_tokens"], ended["usage"]["output_tokens"]) == (250, 32)
    assert run.usage["input_tokens"] == 250
    assert sealbox.verify_store(store).ok


@sync
async def test_a_response_without_usage_fails_a_token_budget_closed(store):
    """A model that sends no usage (the SDK then gives Usage(requests=1): 0 tokens) was recorded as 0
    tokens used: a token budget failed open. It is recorded as usage missing, so the budget fails
    closed: both tool calls are denied, with the anomaly saying why."""
    weather = Weather()
    model = ScriptedModel([
        ModelResponse(output=[call("call_w", "get_weather", '{"city": "Paris"}'),
                              call("call_t", "get_time", '{"city": "Oslo"}')], usage=Usage(requests=1),
                      response_id="resp_1"),
        response([text("No tools.")], 150, 12, "resp_2"),
    ])
    agent = Agent(name="weather-bot", instructions="Answer about weather.", model=model, tools=weather.tools)
    budget = Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                              "limits:\n  tokens: {per_run: 100000}\n")
    async with Recorder(store, policy=budget).run(agent="weather-bot") as run:
        result = await Runner.run(instrument(run, agent), "Weather in Paris and time in Oslo?")
    assert result.final_output == "No tools." and weather.invoked == []
    events = events_of(store, run.run_id)
    assert [(p["what"], p["detail"]["format"]) for k, _, p in events if k == "anomaly"] == [
        ("model.call usage missing", "openai.responses")]
    assert [(p["call_id"], p["effect"]) for k, _, p in events if k == "policy.decision"] == [
        ("call_w", "deny"), ("call_t", "deny")]
    assert [p["response"]["usage"] for k, _, p in events if k == "model.call"] == [
        None, {"input_tokens": 150, "output_tokens": 12, "total_tokens": 162, "requests": 1}]
    assert sealbox.verify_store(store).ok


DENY_WEATHER = """
version: 1
rules:
  - id: no-weather
    match: {server: local, tool: get_weather}
    effect: deny
  - id: everything-else
    effect: allow
"""


@sync
async def test_denied_tool_never_runs_and_the_agent_finishes(store):
    weather, model = Weather(), two_call_script()
    agent = Agent(name="weather-bot", instructions="Answer about weather.", model=model, tools=weather.tools)
    policy = Policy.from_text(DENY_WEATHER)
    async with Recorder(store, policy=policy).run(agent="weather-bot") as run:
        result = await Runner.run(instrument(run, agent), "Weather in Paris and time in Oslo?")
    assert result.final_output == "Sunny in Paris; 12:01 in Oslo."
    assert weather.invoked == [("get_time", "Oslo")]  # get_weather never ran

    events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"),
        ("model.call", "2"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("tool.call", "2.2"), ("policy.decision", "2.2"), ("tool.result", "2.2"),
        ("model.call", "3"),
        ("run.ended", "4"),
    ]
    denied = events[3][2]
    assert (denied["call_id"], denied["effect"], denied["rule"], denied["reason_code"]) == (
        "call_w", "deny", "no-weather", "policy_deny")
    assert denied["policy_fingerprint"] == policy.fingerprint
    assert not any(k == "tool.result" and p["call_id"] == "call_w" for k, _, p in events)
    # the model was told, as the tool's output
    outputs = {i["call_id"]: i["output"] for i in model.inputs[1] if isinstance(i, dict)
               and i.get("type") == "function_call_output"}
    assert outputs["call_w"].startswith("Error: this tool call was not allowed and did not run.")
    assert "no-weather" in outputs["call_w"]
    assert outputs["call_t"] == "12:01 in Oslo"
    assert events[-1][2]["status"] == "ok"
    assert sealbox.verify_store(store).ok


@sync
async def test_a_tool_that_raises_is_recorded_as_an_error_and_the_model_is_told(store):
    @function_tool
    def flaky(n: int) -> str:
        """Always fails."""
        raise ValueError(f"bad n={n}")

    model = ScriptedModel([response([call("call_f", "flaky", '{"n": 3}')], 5, 5, "r1"),
                           response([text("It failed.")], 5, 5, "r2")])
    agent = Agent(name="a", model=model, tools=[flaky])
    async with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        result = await Runner.run(instrument(run, agent), "go")
    assert result.final_output == "It failed."
    res = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"]
    assert len(res) == 1 and res[0]["ok"] is False
    assert res[0]["error"]["type"] == "ValueError" and res[0]["error"]["message"] == "bad n=3"
    sent = [i for i in model.inputs[1] if isinstance(i, dict) and i.get("type") == "function_call_output"]
    # the SDK's own failure handling still applies (its default message)
    assert sent[0]["output"].startswith("An error occurred while running the tool")
    assert sealbox.verify_store(store).ok


@sync
async def test_a_call_that_cannot_be_recorded_does_not_run_and_fails_the_run(store):
    weather = Weather()
    model = ScriptedModel([response([call("call_w", "get_weather", '{"city": "Paris"}')], 1, 1, "r1"),
                           response([text("done")], 1, 1, "r2")])
    agent = Agent(name="a", model=model, tools=weather.tools)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="a")
    run.start()
    instrumented = instrument(run, agent)

    def broken(*_a, **_k):
        raise OSError("disk full")

    original = store.append_with
    store.append_with = broken
    try:
        with pytest.raises(RecordingError):
            await Runner.run(instrumented, "go")
    finally:
        store.append_with = original
    assert weather.invoked == []
    run.end("error")
    assert sealbox.verify_store(store).ok


@sync
async def test_handoffs_are_notes_and_the_target_is_recorded_too(store):
    weather = Weather()
    specialist_model = ScriptedModel([
        response([call("call_w", "get_weather", '{"city": "Lima"}')], 30, 3, "s1"),
        response([text("Sunny in Lima.")], 40, 4, "s2"),
    ])
    specialist = Agent(name="specialist", model=specialist_model, tools=weather.tools[:1])
    triage_model = ScriptedModel([response([call("call_h", "transfer_to_specialist", "{}")], 10, 1, "t1")])
    triage = Agent(name="triage", model=triage_model, handoffs=[specialist])
    specialist.handoffs = [triage]  # a cycle is preserved, not followed forever

    async with Recorder(store, policy=ALLOW_ALL).run(agent="triage") as run:
        result = await Runner.run(instrument(run, triage), "Weather in Lima?")
    assert result.final_output == "Sunny in Lima." and weather.invoked == [("get_weather", "Lima")]
    assert triage.model is triage_model and specialist.handoffs == [triage]  # originals untouched

    events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"), ("model.call", "2"), ("note", "3"),
        ("model.call", "4"), ("tool.call", "4.1"), ("policy.decision", "4.1"), ("tool.result", "4.1"),
        ("model.call", "5"), ("run.ended", "6"),
    ]
    assert events[1][2]["request"]["handoffs"] == [
        {"tool_name": "transfer_to_specialist", "agent_name": "specialist"}]
    assert events[1][2]["tool_call_ids"] == ["call_h"]
    assert events[2][2] == {"text": "handoff: triage -> specialist", "about": {"handoff": {
        "from": "triage", "to": "specialist", "tool_name": "transfer_to_specialist"}}}
    assert [events[i][2]["request"]["agent"] for i in (1, 3, 7)] == ["triage", "specialist", "specialist"]
    assert events[-1][2]["usage"]["input_tokens"] == 80
    assert sealbox.verify_store(store).ok


BY_AGENT = """
version: 1
name: by-agent
rules:
  - id: specialist-no-weather
    match: {agent: {name: specialist}, tool: get_weather}
    effect: deny
  - id: triage-weather
    match: {agent: {name: triage}, tool: get_weather}
    effect: allow
"""


@sync
async def test_after_a_handoff_the_policy_sees_the_agent_handed_off_to(store):
    """The policy decided every tool call as the run's agent: a rule for agent 'specialist' never
    matched the calls specialist made after triage handed off to it, and the rule for 'triage' did
    (the call ran). Now agent.name is the acting agent (the SDK's ToolContext.agent); triage's own
    call is still decided as triage."""
    weather = Weather()
    specialist_model = ScriptedModel([
        response([call("call_s", "get_weather", '{"city": "Lima"}')], 30, 3, "s1"),
        response([text("No weather for you.")], 40, 4, "s2"),
    ])
    specialist = Agent(name="specialist", model=specialist_model, tools=weather.tools[:1])
    triage_model = ScriptedModel([
        response([call("call_t", "get_weather", '{"city": "Oslo"}')], 10, 1, "t1"),
        response([call("call_h", "transfer_to_specialist", "{}")], 10, 1, "t2"),
    ])
    triage = Agent(name="triage", model=triage_model, tools=weather.tools[:1], handoffs=[specialist])

    async with Recorder(store, policy=Policy.from_text(BY_AGENT)).run(agent="triage") as run:
        result = await Runner.run(instrument(run, triage), "Weather in Oslo and Lima?")
    assert result.final_output == "No weather for you."
    assert weather.invoked == [("get_weather", "Oslo")]  # specialist's call was denied and never ran

    events = events_of(store, run.run_id)
    decisions = [(p["call_id"], p["inputs"]["agent"], p["effect"], p["rule"])
                 for k, _, p in events if k == "policy.decision"]
    assert decisions == [
        ("call_t", {"name": "triage", "attributes": {}}, "allow", "triage-weather"),
        ("call_s", {"name": "specialist", "attributes": {}}, "deny", "specialist-no-weather"),
    ]
    outputs = {i["call_id"]: i["output"] for i in specialist_model.inputs[1] if isinstance(i, dict)
               and i.get("type") == "function_call_output"}
    assert outputs["call_s"].startswith("Error: this tool call was not allowed and did not run.")
    assert sealbox.verify_store(store).ok


@sync
async def test_governed_tool_with_a_custom_function_tool_and_an_instrumented_model(store):
    from agents import FunctionTool

    seen = []

    async def invoke(ctx, raw: str) -> str:
        seen.append(json.loads(raw))
        return "ok"

    tool = FunctionTool(name="echo", description="echo", params_json_schema={
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": False},
        on_invoke_tool=invoke)
    model = ScriptedModel([response([call("c1", "echo", '{"x": 7}')], 1, 1, "r1"), response([text("7")], 1, 1, "r2")])
    async with Recorder(store, policy=ALLOW_ALL).run(agent="e") as run:
        agent = Agent(name="e", model=SealboxModel(model, run, agent_name="e", provider="scripted"),
                      tools=[governed_tool(run, tool, server="echo-server")])
        assert (await Runner.run(agent, "go")).final_output == "7"
    assert seen == [{"x": 7}] and tool.on_invoke_tool is invoke
    events = events_of(store, run.run_id)
    tc = next(p for k, _, p in events if k == "tool.call")
    assert (tc["server"], tc["tool"], tc["grant"], tc["arguments"]) == ("echo-server", "echo", "implicit:agent:e", {"x": 7})
    assert next(p for k, _, p in events if k == "model.call")["provider"] == "scripted"


def test_mcp_keys(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:mcp-user") as run:
        assert mcp_env(run, {"PATH": "/bin"}) == {
            "PATH": "/bin", "SEALBOX_RUN_ID": run.run_id, "SEALBOX_PARENT_PRINCIPAL": "agent:mcp-user"}
        assert mcp_meta(run) == {"sealbox/run_id": run.run_id, "sealbox/parent_principal": "agent:mcp-user"}

        class Ctx:
            class run_context:  # noqa: N801 - mimics MCPToolMetaContext.run_context (a ToolContext)
                tool_call_id = "call_9"

        assert mcp_meta_resolver(run)(Ctx()) == {
            "sealbox/run_id": run.run_id, "sealbox/parent_principal": "agent:mcp-user", "sealbox/call_id": "call_9"}
        # once a recorded model call requested call_9, the meta also names its step (not consumed)
        run.model_call({"model": "m", "input": []}, {"object": "response", "id": "r", "model": "m", "output": [
            {"type": "function_call", "call_id": "call_8", "name": "t", "arguments": "{}", "id": "fc_8"},
            {"type": "function_call", "call_id": "call_9", "name": "t", "arguments": "{}", "id": "fc_9"}]})
        for _ in range(2):
            assert mcp_meta_resolver(run)(Ctx()) == {
                "sealbox/run_id": run.run_id, "sealbox/parent_principal": "agent:mcp-user",
                "sealbox/call_id": "call_9", "sealbox/step": "2.2"}


@sync
async def test_streamed_run_is_recorded_from_response_completed(store):
    from agents.testing import ScriptedModel as SdkScriptedModel
    from agents.testing import assistant_message, function_call

    weather = Weather()
    model = SdkScriptedModel([
        response([function_call("get_weather", {"city": "Paris"}, call_id="call_s")], 7, 3, "r1"),
        response([assistant_message("Sunny.")], 9, 2, "r2"),
    ])
    agent = Agent(name="streamer", model=model, tools=weather.tools[:1])
    async with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
        streamed = Runner.run_streamed(instrument(run, agent, provider="scripted"), "Weather in Paris?")
        async for _ in streamed.stream_events():
            pass
    assert streamed.final_output == "Sunny." and weather.invoked == [("get_weather", "Paris")]
    events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"), ("model.call", "2"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"), ("tool.result", "2.1"),
        ("model.call", "3"), ("run.ended", "4"),
    ]
    first = events[1][2]
    assert (first["format"], first["provider"], first["tool_call_ids"]) == ("openai.responses", "scripted", ["call_s"])
    assert [p["usage"] for k, _, p in events if k == "model.call"] == [
        {"input_tokens": 7, "output_tokens": 3}, {"input_tokens": 9, "output_tokens": 2}]
    assert sealbox.verify_store(store).ok


@sync
async def test_a_model_given_by_name_is_resolved_through_the_provider_and_recorded(store):
    from agents import ModelProvider

    scripted = ScriptedModel([response([text("hi")], 4, 1, "r1")])

    class Provider(ModelProvider):
        def __init__(self) -> None:
            self.asked: list = []

        def get_model(self, model_name):
            self.asked.append(model_name)
            return scripted

    provider = Provider()
    agent = Agent(name="named", model="litellm/acme/model-x")
    async with Recorder(store, policy=ALLOW_ALL).run(agent="named") as run:
        assert (await Runner.run(instrument(run, agent, model_provider=provider), "hello")).final_output == "hi"
    assert provider.asked == ["litellm/acme/model-x"]
    mc = next(p for k, _, p in events_of(store, run.run_id) if k == "model.call")
    assert (mc["provider"], mc["model"], mc["request"]["model"]) == (
        "litellm", "litellm/acme/model-x", "litellm/acme/model-x")


class _UnprintableError(Exception):
    """An exception whose str() raises (a model client's error built from a broken response)."""

    def __str__(self) -> str:
        raise ValueError("str() of this error fails")


@sync
async def test_a_model_error_whose_str_raises_is_recorded_and_reaches_the_agent_unchanged(store):
    """The model's exception was replaced by the ValueError its str() raised while recording it,
    and no model.call was written."""
    class Failing(ScriptedModel):
        async def get_response(self, *args, **kwargs):
            raise _UnprintableError()

    run = Recorder(store, policy=ALLOW_ALL).run(agent="a")
    with pytest.raises(_UnprintableError):
        async with run:
            await Runner.run(instrument(run, Agent(name="a", model=Failing([]))), "go")
    events = events_of(store, run.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][2]["response"] == {"error": {
        "type": "_UnprintableError", "message": "<_UnprintableError.__str__ raised ValueError>"}}
    assert events[2][2]["status"] == "error" and events[2][2]["error"]["type"] == "_UnprintableError"
    assert sealbox.verify_store(store).ok


@sync
async def test_a_model_call_cut_short_by_a_timeout_is_recorded(store):
    """A timeout (or the run's task cancelled) while the model was answering left no model.call:
    only Exception was recorded, and CancelledError is not one."""
    answering = asyncio.Event()

    class Slow(ScriptedModel):
        async def get_response(self, *args, **kwargs):
            answering.set()
            await asyncio.sleep(30)

    async def timed_out(coro):
        # what asyncio.wait_for(coro, 0.2) does, its 0.2 s counted from when the model was asked: counted from
        # the start, a loaded host could spend them before the model call began (then nothing was recorded)
        task = asyncio.ensure_future(coro)
        await asyncio.wait_for(answering.wait(), 60)
        await asyncio.sleep(0.2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise TimeoutError

    run = Recorder(store, policy=ALLOW_ALL).run(agent="a")
    with pytest.raises(TimeoutError):
        async with run:
            await timed_out(Runner.run(instrument(run, Agent(name="a", model=Slow([]))), "go"))
    events = events_of(store, run.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][2]["response"] == {"error": {"type": "CancelledError", "message": ""}}
    assert events[1][2]["latency_us"] >= 150_000
    assert events[2][2]["status"] == "error" and events[2][2]["error"]["type"] == "TimeoutError"
    assert sealbox.verify_store(store).ok


@sync
async def test_an_agent_used_as_a_tool_is_governed_when_made_from_the_instrumented_agent(store):
    """`expert.as_tool()` among an instrumented agent's tools ran the original expert: its model
    calls went unrecorded and its own tools ran without a record or a decision, a tool the policy
    denies included. Such a tool is refused; one made from instrument(run, expert) is governed."""
    from sealbox.errors import ConfigError

    deny_weather = Policy.from_text("version: 1\nname: p\nrules:\n  - id: no-weather\n    match: {tool: get_weather}\n"
                                    "    effect: deny\n  - id: rest\n    match: {tool: '*'}\n    effect: allow\n")

    def agents():
        weather = Weather()
        expert = Agent(name="expert", tools=weather.tools[:1], model=ScriptedModel([
            response([call("call_sub", "get_weather", '{"city": "Paris"}')], 5, 5, "s1"),
            response([text("expert: no weather")], 5, 5, "s2")]))
        top = Agent(name="top", model=ScriptedModel([
            response([call("call_top", "ask_expert", '{"input": "weather in Paris?"}')], 5, 5, "t1"),
            response([text("done")], 5, 5, "t2")]))
        return weather, expert, top

    weather, expert, top = agents()
    top.tools = [expert.as_tool(tool_name="ask_expert", tool_description="Ask the expert.")]
    run = Recorder(store, policy=deny_weather).run(agent="top")
    with pytest.raises(ConfigError, match=r"tool 'ask_expert' runs agent 'expert' \(Agent.as_tool\(\)\).*"
                                          r"instrument\(run, agent\).as_tool"):
        async with run:
            await Runner.run(instrument(run, top), "go")
    assert weather.invoked == []
    assert [k for k, _, _ in events_of(store, run.run_id)] == ["run.started", "run.ended"]

    weather, expert, top = agents()
    async with Recorder(store, policy=deny_weather).run(agent="top") as run:
        top.tools = [instrument(run, expert).as_tool(tool_name="ask_expert", tool_description="Ask the expert.")]
        result = await Runner.run(instrument(run, top), "go")
    assert result.final_output == "done" and weather.invoked == []  # denied inside the nested agent too
    events = events_of(store, run.run_id)
    calls = {p["call_id"]: (s, p["tool"]) for k, s, p in events if k == "tool.call"}
    assert calls == {"call_top": ("2.1", "ask_expert"), "call_sub": ("3.1", "get_weather")}
    decisions = {p["call_id"]: p["effect"] for k, _, p in events if k == "policy.decision"}
    assert decisions == {"call_top": "allow", "call_sub": "deny"}
    assert [p["request"]["agent"] for k, _, p in events if k == "model.call"] == ["top", "expert", "expert", "top"]
    assert sealbox.verify_store(store).ok


@sync
async def test_an_agent_instrumented_into_another_run_is_refused_and_the_original_records_once(store):
    """instrument(run2, instrument(run1, agent)) wrapped the copy again: every model call and tool
    call of run2 was recorded into run1 as well. It is refused; the original instrumented for
    each run records each call into that run only."""
    from sealbox.errors import ConfigError

    weather = Weather()
    model = ScriptedModel([response([call("call_w", "get_weather", '{"city": "Rome"}')], 10, 2, "r1"),
                           response([text("Sunny in Rome.")], 12, 3, "r2")])
    agent = Agent(name="weather-bot", model=model, tools=weather.tools[:1])
    rec = Recorder(store, policy=ALLOW_ALL)
    async with rec.run(agent="first") as run1:
        first = instrument(run1, agent)
        assert instrument(run1, first) is first  # the same run: as it is
        async with rec.run(agent="second") as run2:
            with pytest.raises(ConfigError) as refused:
                instrument(run2, first)
            assert str(refused.value) == (
                f"agent 'weather-bot' is already instrumented into run {run1.run_id} (its model is a SealboxModel "
                f"of that run): instrumented again into run {run2.run_id}, its model calls and tool calls would be "
                "recorded into both runs: instrument the original agent, instrument(run, agent), for each run "
                "(not the copy instrument returned)")
            result = await Runner.run(instrument(run2, agent), "Weather in Rome?")
    assert result.final_output == "Sunny in Rome." and weather.invoked == [("get_weather", "Rome")]
    assert [k for k, _, _ in events_of(store, run1.run_id)] == ["run.started", "run.ended"]
    events = events_of(store, run2.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "tool.call", "policy.decision",
                                         "tool.result", "model.call", "run.ended"]
    assert [p["call_id"] for k, _, p in events if k == "tool.call"] == ["call_w"]
    assert sealbox.verify_store(store).ok


@sync
async def test_a_handoff_target_or_tool_instrumented_into_another_run_is_refused(store):
    from sealbox.errors import ConfigError

    weather = Weather()
    rec = Recorder(store, policy=ALLOW_ALL)
    specialist = Agent(name="specialist", model=ScriptedModel([]))
    async with rec.run(agent="first") as run1:
        async with rec.run(agent="second") as run2:
            triage = Agent(name="triage", model=ScriptedModel([]), handoffs=[instrument(run1, specialist)])
            with pytest.raises(ConfigError, match=rf"^agent 'specialist' is already instrumented into run "
                                                  rf"{run1.run_id} .* into run {run2.run_id}"):
                instrument(run2, triage)
            tool = governed_tool(run1, weather.tools[0])
            with pytest.raises(ConfigError) as refused:
                instrument(run2, Agent(name="bot", model=ScriptedModel([]), tools=[tool]))
            assert str(refused.value) == (
                f"tool 'get_weather' is already governed by run {run1.run_id} (governed_tool or instrument made "
                f"it): governed again by run {run2.run_id}, each call would be recorded into both runs: govern "
                "the original tool, governed_tool(run, tool), once per run")
    for run in (run1, run2):
        assert [k for k, _, _ in events_of(store, run.run_id)] == ["run.started", "run.ended"]


@sync
async def test_a_tool_already_governed_by_the_run_is_recorded_once(store):
    weather = Weather()
    model = ScriptedModel([response([call("call_w", "get_weather", '{"city": "Oslo"}')], 1, 1, "r1"),
                           response([text("ok")], 1, 1, "r2")])
    async with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        tool = governed_tool(run, weather.tools[0], server="wx", grant=None)
        assert governed_tool(run, tool) is tool
        await Runner.run(instrument(run, Agent(name="bot", model=model, tools=[tool])), "go")
    assert weather.invoked == [("get_weather", "Oslo")]
    calls = [p for k, _, p in events_of(store, run.run_id) if k == "tool.call"]
    assert [(p["call_id"], p["server"], p["tool"]) for p in calls] == [("call_w", "wx", "get_weather")]


@sync
async def test_a_password_the_model_passes_to_a_tool_is_redacted_in_the_model_calls_too(tmp_path):
    """The model's function_call carries its arguments as JSON text, in the response and again in the
    next request's input: in a ``redacted`` store (the default) the password is a marker there too,
    the same as in the tool.call; the tool gets the real value."""
    secret = "Hunter2-Super-Secret-Pw"
    store = sealbox.init_store(tmp_path / "store")
    got = []

    @function_tool
    def login(user: str, password: str) -> str:
        """Log in."""
        got.append(password)
        return f"welcome {user}"

    model = ScriptedModel([response([call("c1", "login", json.dumps({"user": "bob", "password": secret}))], 10, 5, "r1"),
                           response([text("logged in")], 20, 5, "r2")])
    agent = Agent(name="a", model=model, tools=[login])
    async with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        await Runner.run(instrument(run, agent), "log in as bob")
    assert got == [secret]
    events = events_of(store, run.run_id)
    marker = next(p for k, _, p in events if k == "tool.call")["arguments"]["password"]["$redacted"]
    first, second = [p for k, _, p in events if k == "model.call"]
    assert json.loads(first["response"]["output"][0]["arguments"]) == {"user": "bob", "password": f"⟦redacted:{marker}⟧"}
    sent = [i for i in second["request"]["input"] if i.get("type") == "function_call"]
    assert json.loads(sent[0]["arguments"]) == {"user": "bob", "password": f"⟦redacted:{marker}⟧"}
    store.close()
    assert secret.encode() not in (tmp_path / "store" / "sealbox.db").read_bytes()


APPROVAL_POLICY = """
version: 1
name: pay-needs-ops
rules:
  - id: pay-needs-ops
    match: {tool: pay}
    effect: require_approval
    approval: {groups: [ops]}
  - id: rest
    effect: allow
"""


def _pay_tools(paid: list) -> dict:
    """The same tool made by @function_tool and built by hand (its on_invoke_tool a plain function)."""
    from agents import FunctionTool

    @function_tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return "paid"

    async def invoke(ctx, arguments: str) -> str:
        paid.append(json.loads(arguments)["amount"])
        return "paid"

    by_hand = FunctionTool(name="pay", description="Pay an amount.", on_invoke_tool=invoke, params_json_schema={
        "type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"],
        "additionalProperties": False})
    return {"decorated": pay, "by_hand": by_hand}


@pytest.mark.parametrize("kind", ["decorated", "by_hand"])
@pytest.mark.parametrize("mode", ["suspend", "block"])
@sync
async def test_a_call_waiting_for_an_approval_suspends_the_run_instead_of_telling_the_model_it_failed(
        tmp_path, mode, kind):
    """With approvals="suspend" (or a blocking wait that times out) the recorder raises ApprovalPending;
    the SDK's failure handler turned it into "An error occurred while running the tool" for the model,
    which answered as if done, and the run ended (run.ended after run.suspended). Now Runner.run
    raises the ApprovalPending and the run stays suspended, to be resumed once answered."""
    from sealbox.approvals import ApprovalPending

    store = sealbox.init_store(tmp_path / "store")
    (tmp_path / "policy.yaml").write_text(APPROVAL_POLICY)
    paid: list = []
    pay = _pay_tools(paid)[kind]
    model = ScriptedModel([response([call("c1", "pay", '{"amount": 5}')], 10, 5, "r1"),
                           response([text("I paid.")], 10, 5, "r2")])
    recorder = Recorder(store, policy=Policy.load(tmp_path / "policy.yaml"), approvals=mode, approval_timeout=0.2,
                        approval_poll=0.05)
    with pytest.raises(ApprovalPending) as raised:
        async with recorder.run(agent="payer") as run:
            await Runner.run(instrument(run, Agent(name="payer", model=model, tools=[pay])), "pay 5")
    assert (raised.value.run_id, raised.value.call_id) == (run.run_id, "c1")
    assert raised.value.approval_id.startswith("apr_")
    assert paid == [] and len(model.responses) == 1  # the tool did not run, the model was not called again
    assert [(k, s) for k, s, _ in events_of(store, run.run_id)] == [
        ("run.started", "1"), ("model.call", "2"), ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("approval.requested", "2.1"), ("run.suspended", "2.1")]
    assert store.get_run(run.run_id)["status"] == "suspended"
    assert sealbox.verify_store(store).ok
    store.close()


@sync
async def test_a_tool_call_that_cannot_be_recorded_fails_the_run_with_recording_error_not_user_error(store):
    """The SDK wraps a tool's exception in UserError("Error running tool …"), so a RecordingError at
    the tool's gate reached the caller, and the run's error, as a UserError."""
    weather = Weather()
    agent = Agent(name="a", model=two_call_script(), tools=weather.tools)
    original = store.append_with

    def failing(build, **kwargs):
        def checked(reader):
            drafts = build(reader)
            if any(d.kind == "tool.call" for d in drafts):
                raise OSError("disk full")
            return drafts
        return original(checked, **kwargs)

    with pytest.raises(RecordingError, match="disk full") as raised:
        async with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            store.append_with = failing
            await Runner.run(instrument(run, agent), "go")
    store.append_with = original
    assert isinstance(raised.value.__cause__, OSError)
    assert weather.invoked == []
    ended = events_of(store, run.run_id)[-1]
    assert ended[0] == "run.ended" and ended[2]["error"] == {"type": "RecordingError",
                                                            "message": "could not record: disk full"}


@sync
async def test_a_tool_output_echoing_the_password_is_redacted_in_the_next_model_request(tmp_path):
    """The tool.result stored the marker of a password the tool's output repeated, but the SDK sends
    that output back to the model (a function_call_output item): the next model.call held it in clear."""
    secret = "Echoed-Secret-Pw-77"
    store = sealbox.init_store(tmp_path / "store")

    @function_tool
    def login(user: str, password: str) -> str:
        """Log in."""
        return f"logged in {user} with {password}"

    model = ScriptedModel([response([call("c1", "login", json.dumps({"user": "bob", "password": secret}))], 10, 5, "r1"),
                           response([text("ok")], 20, 5, "r2")])
    async with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        await Runner.run(instrument(run, Agent(name="a", model=model, tools=[login])), "log in")
    assert model.inputs[1][-1]["output"] == f"logged in bob with {secret}"  # the model got the real output
    events = events_of(store, run.run_id)
    marker = next(p for k, _, p in events if k == "tool.call")["arguments"]["password"]["$redacted"]
    second = [p for k, _, p in events if k == "model.call"][1]
    sent = [i for i in second["request"]["input"] if i.get("type") == "function_call_output"]
    assert sent == [{"call_id": "c1", "output": f"logged in bob with ⟦redacted:{marker}⟧", "type": "function_call_output"}]
    store.close()
    assert secret.encode() not in (tmp_path / "store" / "sealbox.db").read_bytes()


def test_a_streamed_model_call_in_a_replay_is_served_from_the_record_without_the_model(store):
    """stream_response in a replay that serves models from the record: it called the wrapped model live (a real
    model API call), then stopped the replay as unreplayable; it now streams the recorded response."""
    from agents.testing import ScriptedModel as SdkScriptedModel
    from agents.testing import assistant_message, function_call

    from sealbox.replay import Replayer

    def script():
        return [response([function_call("get_weather", {"city": "Paris"}, call_id="call_s")], 7, 3, "r1"),
                response([assistant_message("Sunny.")], 9, 2, "r2")]

    seen: list = []

    def streaming_agent(model, weather):
        async def agent(run):
            streamed = Runner.run_streamed(
                instrument(run, Agent(name="streamer", model=model, tools=weather.tools[:1]), provider="scripted"),
                "Weather in Paris?")
            async for event in streamed.stream_events():
                if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
                    seen.append(event.data.delta)
            seen.append(("final", streamed.final_output))
        return agent

    async def record():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
            await streaming_agent(SdkScriptedModel(script()), Weather())(run)
        return run.run_id

    run_id = asyncio.run(record())
    assert seen[-1] == ("final", "Sunny.")
    seen.clear()
    live = SdkScriptedModel(script())
    weather = Weather()
    asked: list = []
    original = live.stream_response

    def spy(*args, **kwargs):
        asked.append("stream_response")
        return original(*args, **kwargs)

    live.stream_response = spy
    result = Replayer(store).replay(run_id, streaming_agent(live, weather))
    assert asked == [] and weather.invoked == []  # neither the model nor the tool was called
    assert result.head() == "reproduced: 3 step(s) matched", result.divergence
    assert seen == ["Sunny.", ("final", "Sunny.")]
    recorded = [(e.kind, e.step) for e in store.read_run(run_id)]
    assert [(e.kind, e.step) for e in store.read_run(result.new_run_id)] == recorded
    model_calls = [e for e in store.read_run(result.new_run_id) if e.kind == "model.call"]
    assert [m.payload["usage"] for m in model_calls] == [
        e.payload["usage"] for e in store.read_run(run_id) if e.kind == "model.call"]


# --------------------------------------------------------------------------- replay of failed tools


def _replay(store, run_id, agent):
    from sealbox.replay import Replayer

    return Replayer(store).replay(run_id, agent)


def test_a_tool_that_raised_key_error_replays_reproduced(store):
    """A KeyError's str() is the repr of its argument ("'sku-9'"); the replay raised KeyError(<that
    str>), whose str() quoted it again ("\\"'sku-9'\\""): a failure function telling the model the
    error sent another text (the next model.call diverged), and a run failed by it ended with another
    message (an outcome divergence)."""
    looked_up: list = []

    def tell_the_model(ctx, error):
        return f"lookup failed: {error}"

    @function_tool(failure_error_function=tell_the_model)
    def stock(sku: str) -> int:
        """Units in stock."""
        looked_up.append(sku)
        return {"sku-1": 3}[sku]

    @function_tool(failure_error_function=None)
    def stock_raw(sku: str) -> int:
        """Units in stock (errors fail the run)."""
        looked_up.append(sku)
        return {"sku-1": 3}[sku]

    def agent(tool, sent):
        async def run_agent(run):
            model = ScriptedModel([response([call("k1", tool.name, '{"sku": "sku-9"}')], 5, 1, "r1"),
                                   response([text("Unknown SKU.")], 6, 1, "r2")])
            try:
                await Runner.run(instrument(run, Agent(name="shop", model=model, tools=[tool])), "sku-9?")
            finally:
                sent.extend(model.inputs)
        return run_agent

    sent: list = []
    handled = Recorder(store, policy=ALLOW_ALL).run(agent="shop")

    async def record(run, tool):
        async with run:
            await agent(tool, sent)(run)

    asyncio.run(record(handled, stock))
    assert sent[1][-1]["output"] == "lookup failed: 'sku-9'"
    unhandled = Recorder(store, policy=ALLOW_ALL).run(agent="shop")
    with pytest.raises(Exception) as failed:
        asyncio.run(record(unhandled, stock_raw))
    assert str(failed.value) == "Error running tool stock_raw: 'sku-9'"
    assert looked_up == ["sku-9", "sku-9"]

    sent.clear()
    result = _replay(store, handled.run_id, agent(stock, sent))
    assert result.head().startswith("reproduced: 3 step(s) matched"), result.head()
    assert sent == []  # the model is served from the record
    result = _replay(store, unhandled.run_id, agent(stock_raw, []))
    assert result.head().startswith("reproduced: 2 step(s) matched"), result.head()
    assert result.agent_error == {"type": "UserError", "message": "Error running tool stock_raw: 'sku-9'"}
    assert looked_up == ["sku-9", "sku-9"]
    assert sealbox.verify_store(store).ok


def test_a_tool_the_sdk_timed_out_replays_as_the_same_timeout(store):
    """A function tool with timeout= that the SDK cut short is recorded as cancelled (CancelledError);
    the replay raised that error at once, so the SDK told the model "An error occurred while running
    the tool" instead of "Tool 'slow_search' timed out after 1 seconds." (diverged). The served call
    now waits, so the SDK times it out again as it did."""
    started: list = []

    # 1 s (was 0.05 s: inside the SDK's timeout the instrumented tool first writes its gate, which on a loaded
    # host could take longer, so the tool body had not started when the SDK cut it short)
    @function_tool(timeout=1.0)
    async def slow_search(q: str) -> str:
        """Searches slowly."""
        started.append(q)
        await asyncio.sleep(5)
        return "late"

    async def agent(run):
        model = ScriptedModel([response([call("s1", "slow_search", '{"q": "x"}')], 5, 1, "r1"),
                               response([text("It timed out.")], 6, 1, "r2")])
        await Runner.run(instrument(run, Agent(name="searcher", model=model, tools=[slow_search])), "find x")
        return model.inputs

    async def record():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="searcher") as run:
            sent = await agent(run)
        return run, sent

    run, sent = asyncio.run(record())
    assert sent[1][-1]["output"] == "Tool 'slow_search' timed out after 1 seconds."
    result_payload = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"][0]
    assert (result_payload["ok"], result_payload["error"]["type"]) == (False, "CancelledError")
    result = _replay(store, run.run_id, agent)
    assert result.head().startswith("reproduced: 3 step(s) matched"), result.head()
    assert started == ["x"]
    assert sealbox.verify_store(store).ok


# --------------------------------------------------------------------------- replay of tools returning dicts


def _weather_agent(tool, sent):
    async def run_agent(run):
        model = ScriptedModel([response([call("w1", tool.name, '{"city": "Paris"}')], 5, 1, "r1"),
                               response([text("20 degrees in Paris.")], 6, 1, "r2")])
        await Runner.run(instrument(run, Agent(name="weather", model=model, tools=[tool])), "Weather in Paris?")
        for request in model.inputs[1:]:  # the outputs of the tool calls the model was sent (none in a replay)
            sent.extend(item["output"] for item in request if item.get("type") == "function_call_output")
    return run_agent


def _record_weather(store, tool):
    sent: list = []

    async def record():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="weather") as run:
            await _weather_agent(tool, sent)(run)
        return run.run_id

    return asyncio.run(record()), sent


def test_a_tool_returning_a_dict_with_unsorted_keys_replays_reproduced(store):
    """The SDK sends the model str(result); the record keeps the result with its keys sorted, so the
    served dict's str() differed from the recorded one in key order only, and the replay diverged at
    the next model call (input[2].output). It now reproduces."""
    invoked: list = []

    @function_tool
    def weather(city: str) -> dict:
        """Current weather."""
        invoked.append(city)
        return {"temp": 20, "city": city}

    run_id, sent = _record_weather(store, weather)
    assert sent == ["{'temp': 20, 'city': 'Paris'}"]
    result = _replay(store, run_id, _weather_agent(weather, []))
    assert result.head() == "reproduced: 3 step(s) matched", result.divergence
    assert invoked == ["Paris"]  # served from the record
    requests = [store.resolve(e.payload)["request"] for e in store.read_run(result.new_run_id)
                if e.kind == "model.call"]
    assert requests[1]["input"][2]["output"] == "{'city': 'Paris', 'temp': 20}"


def test_a_tool_with_an_output_schema_returning_unsorted_keys_replays_reproduced(store):
    """A tool with an output schema: the SDK sends json.dumps(result) (compact, keys as given)."""
    schema = {"type": "object", "properties": {"temp": {"type": "integer"}, "city": {"type": "string"}},
              "required": ["temp", "city"], "additionalProperties": False}

    @function_tool(output_json_schema=schema)
    def weather(city: str) -> dict:
        """Current weather."""
        return {"temp": 20, "city": city}

    run_id, sent = _record_weather(store, weather)
    assert sent == ['{"temp":20,"city":"Paris"}']
    result = _replay(store, run_id, _weather_agent(weather, []))
    assert result.head() == "reproduced: 3 step(s) matched", result.divergence


def test_a_changed_value_in_a_dict_a_tool_returned_still_diverges_with_that_field(store):
    """Replayed with live tools, the tool's new code returns its keys in another order (that alone
    reproduces) and then another temperature (that diverges, the one field named in the diff)."""
    from sealbox.replay import Replayer, render_divergence

    @function_tool
    def weather(city: str) -> dict:
        """Current weather."""
        return {"temp": 20, "city": city}

    def reordered(temp):
        @function_tool(name_override="weather")
        def weather(city: str) -> dict:
            """Current weather."""
            return {"city": city, "temp": temp}
        return weather

    run_id, _ = _record_weather(store, weather)
    replayer = Replayer(store, policy=ALLOW_ALL)
    same = replayer.replay(run_id, _weather_agent(reordered(20), []), tools="live", side_effects=True)
    assert same.head() == "reproduced: 3 step(s) matched", same.divergence
    warmer = replayer.replay(run_id, _weather_agent(reordered(21), []), tools="live", side_effects=True)
    assert warmer.reproduced is False
    assert [(d.path, d.a, d.b) for d in warmer.divergence.diff] == [
        ("input[2].output", "{'temp': 20, 'city': 'Paris'}", "{'city': 'Paris', 'temp': 21}")]
    assert render_divergence(warmer.divergence).splitlines() == [
        "diverged at step 3: mismatch",
        "  step 3: the replay made model.call ScriptedModel with different content (1 field(s) differ)",
        f"  recorded : model.call ScriptedModel  {warmer.divergence.recorded.hash[:19]}…",
        f"  attempted: model.call ScriptedModel  {warmer.divergence.attempted.hash[:19]}…",
        "  differs in: hash",
        "    ~ input[2].output: \"{'temp': 20, 'city': 'Paris'}\" -> \"{'city': 'Paris', 'temp': 21}\"",
    ]


def test_mcp_meta_leaves_out_a_model_call_id_holding_a_nul(store):
    """A joined gateway refuses _meta["sealbox/call_id"] holding a NUL (no store keeps one in an
    identifier: MALFORMED_REQUEST), so passing the model's id "call_\\x00x" failed the tool call. The id
    is left out, as unused_call_id leaves it out of an in-process call: the gateway gives the call a
    fresh id, and only its link to the model call is lost."""
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:a") as run:
        assert mcp_meta(run, "call_\x00x") == {"sealbox/run_id": run.run_id, "sealbox/parent_principal": "agent:a"}
        assert mcp_meta(run, "call_1")["sealbox/call_id"] == "call_1"


CONSUMER_S = 4.0  # how long the consumer of the stream below holds the finished answer


@sync
async def test_a_streamed_call_s_latency_ends_at_response_completed_not_when_the_consumer_asks_again(store):
    """The latency of a streamed model call was taken when the stream was exhausted, i.e. when the SDK
    next asked for an event after ``response.completed``: the time the consumer spent on the answer
    (0.2 to 0.8 s for the first streamed turn of a process) was recorded as the model's."""
    from agents.model_settings import ModelSettings
    from agents.models.interface import ModelTracing
    from agents.testing import ScriptedModel as SdkScriptedModel

    async with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
        model = SealboxModel(SdkScriptedModel([response([text("hi")], 1, 1, "r1")]), run)
        types = []
        async for event in model.stream_response(None, "hi", ModelSettings(), [], None, [], ModelTracing.DISABLED,
                                                 previous_response_id=None, conversation_id=None, prompt=None):
            types.append(event.type)
            if event.type == "response.completed":
                await asyncio.sleep(CONSUMER_S)  # the consumer handles the answer: not the model's time
    assert types[-1] == "response.completed"
    calls = [p for k, _, p in events_of(store, run.run_id) if k == "model.call"]
    assert len(calls) == 1 and calls[0]["usage"] == {"input_tokens": 1, "output_tokens": 1}
    # the scripted model answers at once; the consumer's CONSUMER_S must not count (the old code measured >= it)
    assert 0 <= calls[0]["latency_us"] < CONSUMER_S * 1_000_000
    assert sealbox.verify_store(store).ok
