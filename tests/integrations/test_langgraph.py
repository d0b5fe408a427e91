"""The LangGraph integration, with a real prebuilt ReAct agent (``create_react_agent``)
whose chat model is a scripted langchain-core fake (no model service is reachable here)."""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langgraph.prebuilt import InjectedState  # noqa: E402

import sealbox  # noqa: E402
from sealbox.integrations.langgraph import GovernedTool, SealboxCallbackHandler, governed_tools  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.policy import Policy  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain.agents
    from langgraph.prebuilt import create_react_agent  # noqa: E402


def react_agent(model, tools):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools)


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that accepts bound tools (as a real one passes them on)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


class FailingChatModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("model service unreachable")


class Tools:
    """Weather and time tools that count their invocations (sync and async forms)."""

    def __init__(self) -> None:
        self.invoked: list[tuple[str, str]] = []

        @tool
        async def get_weather(city: str) -> str:
            """Current weather for a city."""
            self.invoked.append(("get_weather", city))
            return f"Sunny in {city}"

        @tool
        async def get_time(city: str, utc_offset: int = 0) -> str:
            """Local time in a city."""
            self.invoked.append(("get_time", city))
            return f"12:{utc_offset:02d} in {city}"

        @tool
        def get_weather_sync(city: str) -> str:
            """Current weather for a city (sync)."""
            self.invoked.append(("get_weather_sync", city))
            return f"Sunny in {city}"

        self.get_weather, self.get_time, self.get_weather_sync = get_weather, get_time, get_weather_sync


def three_calls(names=("get_weather", "get_time", "get_weather")) -> list[AIMessage]:
    args = [{"city": "Paris"}, {"city": "Oslo", "utc_offset": 1}, {"city": "Lima"}]
    return [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"}
                                          for i, (n, a) in enumerate(zip(names, args), 1)],
                  usage_metadata={"input_tokens": 50, "output_tokens": 30, "total_tokens": 80}),
        AIMessage(content="Sunny in Paris and Lima; 12:01 in Oslo.",
                  usage_metadata={"input_tokens": 90, "output_tokens": 12, "total_tokens": 102}),
    ]


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def events_of(store, run_id):
    return [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(run_id)]


def test_react_agent_three_parallel_calls_recorded_before_they_run_and_linked(store):
    tools = Tools()
    model = ScriptedChatModel(messages=iter(three_calls()))

    async def main():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
            graph = react_agent(model, governed_tools(run, [tools.get_weather, tools.get_time]))
            state = await graph.ainvoke({"messages": [("user", "Weather in Paris and Lima, time in Oslo?")]},
                                        config={"callbacks": [SealboxCallbackHandler(run)]})
        return run, state

    run, state = asyncio.run(main())
    assert state["messages"][-1].content == "Sunny in Paris and Lima; 12:01 in Oslo."
    assert sorted(tools.invoked) == [("get_time", "Oslo"), ("get_weather", "Lima"), ("get_weather", "Paris")]

    events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"),
        ("model.call", "2"),
        # the three calls run concurrently (asyncio.gather): each is recorded and
        # decided before it runs, and the results follow
        ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("tool.call", "2.2"), ("policy.decision", "2.2"),
        ("tool.call", "2.3"), ("policy.decision", "2.3"),
        ("tool.result", "2.1"), ("tool.result", "2.2"), ("tool.result", "2.3"),
        ("model.call", "3"),
        ("state.saved", "4"),
        ("run.ended", "5"),
    ]
    first, second = events[1][2], events[11][2]
    assert first["format"] == "langchain" and first["provider"] == "scriptedchatmodel"  # its ls_provider
    assert first["tool_call_ids"] == ["call_1", "call_2", "call_3"] and second["tool_call_ids"] == []
    assert [m["type"] for m in first["request"]["messages"]] == ["human"]
    assert [t["function"]["name"] for t in first["request"]["tools"]] == ["get_weather", "get_time"]
    assert first["request"]["metadata"]["langgraph_node"] == "agent"
    sent = second["request"]["messages"]
    assert [m["type"] for m in sent] == ["human", "ai", "tool", "tool", "tool"]
    assert {m["tool_call_id"]: m["content"] for m in sent if m["type"] == "tool"} == {
        "call_1": "Sunny in Paris", "call_2": "12:01 in Oslo", "call_3": "Sunny in Lima"}

    calls = [(s, p["call_id"], p["server"], p["tool"], p["arguments"]) for k, s, p in events if k == "tool.call"]
    assert calls == [("2.1", "call_1", "local", "get_weather", {"city": "Paris"}),
                     ("2.2", "call_2", "local", "get_time", {"city": "Oslo", "utc_offset": 1}),
                     ("2.3", "call_3", "local", "get_weather", {"city": "Lima"})]
    results = [(s, p["call_id"], p["ok"]) for k, s, p in events if k == "tool.result"]
    assert results == [("2.1", "call_1", True), ("2.2", "call_2", True), ("2.3", "call_3", True)]
    first_result = next(p for k, _, p in events if k == "tool.result")["result"]
    assert first_result["$pydantic"]["fields"]["content"] == "Sunny in Paris"

    assert [p["usage"] for k, _, p in events if k == "model.call"] == [
        {"input_tokens": 50, "output_tokens": 30}, {"input_tokens": 90, "output_tokens": 12}]
    saved = events[12][2]
    assert saved["label"] == "final" and len(saved["state"]["messages"]) == 6
    ended = events[-1][2]
    assert ended["status"] == "ok" and (ended["usage"]["input_tokens"], ended["usage"]["output_tokens"]) == (140, 42)
    assert sealbox.verify_store(store).ok


DENY_TIME = """
version: 1
rules:
  - id: no-clock
    match: {server: local, tool: get_time}
    effect: deny
  - id: everything-else
    effect: allow
"""


def test_denied_call_never_runs_the_model_gets_an_error_tool_message_and_the_graph_finishes(store):
    tools = Tools()
    model = ScriptedChatModel(messages=iter(three_calls()))
    policy = Policy.from_text(DENY_TIME)

    async def main():
        async with Recorder(store, policy=policy).run(agent="react") as run:
            graph = react_agent(model, governed_tools(run, [tools.get_weather, tools.get_time]))
            state = await graph.ainvoke({"messages": [("user", "go")]},
                                        config={"callbacks": [SealboxCallbackHandler(run)]})
        return run, state

    run, state = asyncio.run(main())
    assert sorted(tools.invoked) == [("get_weather", "Lima"), ("get_weather", "Paris")]  # get_time never ran
    assert state["messages"][-1].content == "Sunny in Paris and Lima; 12:01 in Oslo."

    events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"),
        ("model.call", "2"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("tool.call", "2.2"), ("policy.decision", "2.2"),  # denied: no tool.result, ever
        ("tool.call", "2.3"), ("policy.decision", "2.3"),
        ("tool.result", "2.1"), ("tool.result", "2.3"),
        ("model.call", "3"),
        ("state.saved", "4"),
        ("run.ended", "5"),
    ]
    decision = events[5][2]
    assert (decision["call_id"], decision["effect"], decision["rule"]) == ("call_2", "deny", "no-clock")
    denied_msg = next(m for m in state["messages"] if getattr(m, "tool_call_id", None) == "call_2")
    assert denied_msg.status == "error"
    assert denied_msg.content.startswith("Error: this tool call was not allowed and did not run.")
    assert "no-clock" in denied_msg.content
    sent = events[10][2]["request"]["messages"]
    assert next(m for m in sent if m.get("tool_call_id") == "call_2")["status"] == "error"
    assert sealbox.verify_store(store).ok


def test_sync_invoke_runs_parallel_calls_in_threads_steps_still_follow_the_model_order(store):
    tools = Tools()
    model = ScriptedChatModel(messages=iter(three_calls(("get_weather_sync",) * 3)))
    with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
        graph = react_agent(model, governed_tools(run, [tools.get_weather_sync]))
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    assert len(tools.invoked) == 3
    events = events_of(store, run.run_id)
    kinds = [(k, s) for k, s, _ in events]
    assert kinds[:2] == [("run.started", "1"), ("model.call", "2")]
    assert kinds[-3:] == [("model.call", "3"), ("state.saved", "4"), ("run.ended", "5")]
    middle = kinds[2:-3]
    for i in (1, 2, 3):  # whatever order the threads finished in, each call's events are in order
        assert [k for k, s in middle if s == f"2.{i}"] == ["tool.call", "policy.decision", "tool.result"]
    by_step = {s: p for k, s, p in events if k == "tool.call"}
    assert {s: (p["call_id"], p["arguments"]) for s, p in by_step.items()} == {
        "2.1": ("call_1", {"city": "Paris"}), "2.2": ("call_2", {"city": "Oslo", "utc_offset": 1}),
        "2.3": ("call_3", {"city": "Lima"})}
    assert sealbox.verify_store(store).ok


def test_governed_tool_keeps_schema_and_injected_state_is_not_recorded(store):
    seen = []

    @tool
    def count_messages(prefix: str, state: Annotated[dict, InjectedState]) -> str:
        """Count the conversation's messages."""
        seen.append(len(state["messages"]))
        return f"{prefix}{len(state['messages'])}"

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "count_messages", "args": {"prefix": "n="}, "id": "c1"}]),
        AIMessage(content="done")]))
    with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
        governed = governed_tools(run, [count_messages], server="tools")
        assert isinstance(governed[0], GovernedTool)
        assert convert_to_openai_tool(governed[0]) == convert_to_openai_tool(count_messages)
        graph = react_agent(model, governed)
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    assert seen == [2]
    events = events_of(store, run.run_id)
    call = next(p for k, _, p in events if k == "tool.call")
    assert (call["server"], call["tool"], call["grant"], call["arguments"]) == (
        "tools", "count_messages", "implicit:agent:react", {"prefix": "n="})
    assert next(p for k, _, p in events if k == "tool.result")["result"]["$pydantic"]["fields"]["content"] == "n=2"
    assert sealbox.verify_store(store).ok


def test_ungoverned_tool_is_noted_and_failed_model_call_recorded(store):
    tools = Tools()
    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "get_weather_sync", "args": {"city": "Rome"}, "id": "u1"}]),
        AIMessage(content="ok")]))
    with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
        graph = react_agent(model, [tools.get_weather_sync])  # not governed
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    events = events_of(store, run.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "note", "model.call", "state.saved", "run.ended"]
    assert events[2][2]["about"] == {"ungoverned_tool": {"tool": "get_weather_sync", "tool_call_id": "u1"}}

    with pytest.raises(ConnectionError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run2:
            graph = react_agent(FailingChatModel(messages=iter([])), [])
            graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run2)]})
    events = events_of(store, run2.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][2]["response"] == {"error": {"type": "ConnectionError", "message": "model service unreachable"}}
    assert events[2][2]["status"] == "error"
    assert sealbox.verify_store(store).ok


def test_a_model_that_repeats_tool_call_ids_across_turns_still_runs(store):
    """Some models give `call_1` on every turn. The recorder refuses a call_id used twice in a run
    (the record would be ambiguous); the integration then records the repeat under a fresh id
    instead of failing the agent."""
    tools = Tools()
    turns = [AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": c}, "id": "call_1"}])
             for c in ("Paris", "Lima")] + [AIMessage(content="done")]
    model = ScriptedChatModel(messages=iter(turns))

    async def main():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
            graph = react_agent(model, governed_tools(run, [tools.get_weather]))
            state = await graph.ainvoke({"messages": [("user", "Weather?")]},
                                        config={"callbacks": [SealboxCallbackHandler(run)]})
        return run, state

    run, state = asyncio.run(main())
    assert state["messages"][-1].content == "done"
    assert tools.invoked == [("get_weather", "Paris"), ("get_weather", "Lima")]
    calls = [p for k, _, p in events_of(store, run.run_id) if k == "tool.call"]
    assert [c["arguments"] for c in calls] == [{"city": "Paris"}, {"city": "Lima"}]
    assert calls[0]["call_id"] == "call_1" and calls[1]["call_id"].startswith("call_") and calls[1]["call_id"] != "call_1"
    results = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"]
    assert [r["call_id"] for r in results] == [c["call_id"] for c in calls] and all(r["ok"] for r in results)


def test_a_provider_call_id_holding_a_nul_is_recorded_under_a_fresh_id(store):
    """A model's tool call id holding a NUL ("call_\\x00x") cannot be a recorded call id (no store keeps
    a NUL in an identifier): the recorder's ConfigError failed the agent. As for a repeated id, the
    integration records the call under a fresh id (only its link to the model call is lost)."""
    tools = Tools()
    turns = [AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_\x00x"}]),
             AIMessage(content="done")]
    model = ScriptedChatModel(messages=iter(turns))

    async def main():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
            graph = react_agent(model, governed_tools(run, [tools.get_weather]))
            state = await graph.ainvoke({"messages": [("user", "Weather?")]},
                                        config={"callbacks": [SealboxCallbackHandler(run)]})
        return run, state

    run, state = asyncio.run(main())
    assert state["messages"][-1].content == "done"
    assert tools.invoked == [("get_weather", "Paris")]
    [call] = [p for k, _, p in events_of(store, run.run_id) if k == "tool.call"]
    assert call["arguments"] == {"city": "Paris"}
    assert call["call_id"].startswith("call_") and "\x00" not in call["call_id"]
    [result] = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"]
    assert result["call_id"] == call["call_id"] and result["ok"]
    assert sealbox.verify_store(store).ok


def test_a_tool_error_the_tool_handles_itself_is_recorded_as_a_failure_not_ok(store):
    """A LangChain tool with ``handle_tool_error`` returns its ToolException as a ToolMessage with
    status="error" instead of raising; the record said ok (and ``sealbox calls --error`` missed it)."""
    from langchain_core.tools import ToolException

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        raise ToolException(f"backend down for {q}")

    lookup.handle_tool_error = True
    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}]),
        AIMessage(content="done")]))
    with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
        graph = react_agent(model, governed_tools(run, [lookup]))
        state = graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    assert state["messages"][2].status == "error" and state["messages"][-1].content == "done"
    results = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"]
    assert len(results) == 1 and results[0]["call_id"] == "c1"
    assert results[0]["ok"] is False
    assert results[0]["error"] == {"type": "ToolError", "message": "backend down for x"}
    assert [c["call_id"] for c in store.query_calls(error=True)] == ["c1"]
    assert sealbox.verify_store(store).ok


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("str() of this error fails")


def test_a_model_error_whose_str_raises_is_recorded_and_reaches_the_agent_unchanged(store):
    """on_llm_error called str() on the model's exception: the ValueError it raised replaced the
    model's error (the handler raises its errors) and no model.call was written."""
    class Failing(FailingChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise Unprintable()

    with pytest.raises(Unprintable):
        with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
            graph = react_agent(Failing(messages=iter([])), [])
            graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    events = events_of(store, run.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][2]["response"] == {"error": {"type": "Unprintable",
                                                  "message": "<Unprintable.__str__ raised ValueError>"}}
    assert sealbox.verify_store(store).ok


def test_a_model_call_cut_short_by_a_timeout_is_recorded(store):
    """LangChain calls no on_llm_error for a chat model cancelled in flight (a timeout, the task
    cancelled): the run's record lacked the model call it was waiting for."""
    class Slow(FailingChatModel):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            answering.set()
            await asyncio.sleep(30)

    async def timed_out(coro):
        # what asyncio.wait_for(coro, 0.3) does, its 0.3 s counted from when the model was asked: counted from
        # the start, a loaded host could spend them in the graph before the model call began (no model.call)
        task = asyncio.ensure_future(coro)
        await asyncio.wait_for(answering.wait(), 60)
        await asyncio.sleep(0.3)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise TimeoutError

    async def main():
        run = Recorder(store, policy=ALLOW_ALL).run(agent="react")
        with pytest.raises(TimeoutError):
            async with run:
                graph = react_agent(Slow(messages=iter([])), [])
                await timed_out(graph.ainvoke({"messages": [("user", "go")]},
                                              config={"callbacks": [SealboxCallbackHandler(run)]}))
        return run

    answering = asyncio.Event()

    run = asyncio.run(main())
    events = events_of(store, run.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[1][2]["response"] == {"error": {"type": "CancelledError", "message": ""}}
    assert events[1][2]["request"]["messages"][0]["content"] == "go"
    assert events[2][2]["status"] == "error" and events[2][2]["error"]["type"] == "TimeoutError"
    assert sealbox.verify_store(store).ok


def test_interrupts_for_a_human_do_not_open_the_circuit_breaker(store):
    """interrupt() inside a governed tool raises GraphInterrupt, which was counted as a tool failure:
    five parallel calls waiting for a human opened the breaker, and once the human approved them,
    every re-run was denied breaker_open (the graph went on with error ToolMessages)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    done: list[int] = []

    @tool
    def transfer(amount: int) -> str:
        """Transfer money once a human approves."""
        if not interrupt({"approve": amount}):
            return "refused"
        done.append(amount)
        return f"transferred {amount}"

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "transfer", "args": {"amount": i}, "id": f"t{i}"} for i in range(5)]),
        AIMessage(content="all done")]))
    with Recorder(store, policy=ALLOW_ALL).run(agent="hitl") as run:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(model, governed_tools(run, [transfer]), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "1"}, "callbacks": [SealboxCallbackHandler(run)]}
        state = graph.invoke({"messages": [("user", "pay")]}, config=config)
        assert len(state["__interrupt__"]) == 5
        state = graph.invoke(Command(resume={i.id: True for i in state["__interrupt__"]}), config=config)
    assert state["messages"][-1].content == "all done" and sorted(done) == [0, 1, 2, 3, 4]
    events = events_of(store, run.run_id)
    interrupted = [p for k, _, p in events if k == "tool.result" and not p["ok"]]
    assert len(interrupted) == 5 and {p["error"]["type"] for p in interrupted} == {"GraphInterrupt"}
    assert sorted(p["reason_code"] for k, _, p in events if k == "policy.decision") == ["policy_allow"] * 10
    assert sum(1 for k, _, p in events if k == "tool.result" and p["ok"]) == 5
    assert sealbox.verify_store(store).ok


@pytest.mark.parametrize("use_async", [False, True])
def test_a_graph_stopped_by_interrupt_saves_its_state_as_interrupted_not_final(store, use_async):
    """A graph that stops in interrupt() ends its outermost chain normally, so its state was saved
    with label "final" (the last message a tool call still waiting for a human) and the docs said
    nothing was saved. Now it is "interrupted"; once resumed (here in another Sealbox run, as a
    later process would), the completed graph's state is "final"."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    @tool
    def transfer(amount: int) -> str:
        """Transfer money once a human approves."""
        return f"transferred {amount}" if interrupt({"approve": amount}) else "refused"

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "transfer", "args": {"amount": 3}, "id": "t1"}]),
        AIMessage(content="all done")]))
    saver = InMemorySaver()
    recorder = Recorder(store, policy=ALLOW_ALL)

    def invoke(run, value):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(model, governed_tools(run, [transfer]), checkpointer=saver)
        config = {"configurable": {"thread_id": "1"}, "callbacks": [SealboxCallbackHandler(run)]}
        return asyncio.run(graph.ainvoke(value, config=config)) if use_async else graph.invoke(value, config=config)

    with recorder.run(agent="hitl") as first:
        state = invoke(first, {"messages": [("user", "pay")]})
    assert "__interrupt__" in state
    with recorder.run(agent="hitl") as second:
        state = invoke(second, Command(resume=True))
    assert state["messages"][-1].content == "all done"

    saved = [[(s, p["label"], [m["$pydantic"]["fields"]["type"] for m in p["state"]["messages"]])
              for k, s, p in events_of(store, r.run_id) if k == "state.saved"] for r in (first, second)]
    assert saved == [[("3", "interrupted", ["human", "ai"])], [("4", "final", ["human", "ai", "tool", "ai"])]]
    assert sealbox.verify_store(store).ok


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize(("breakpoint", "stopped_with"), [
    ("interrupt_before", ["human", "ai"]), ("interrupt_after", ["human", "ai", "tool"])])
def test_a_graph_stopped_by_a_static_breakpoint_saves_its_state_as_interrupted(store, breakpoint, stopped_with,
                                                                                use_async):
    """A graph compiled with interrupt_before / interrupt_after stops at its breakpoint without any
    node raising (LangGraph's loop stops itself), so no chain error marked it and its state was saved
    with label "final", though the graph had not finished and was resumed later. Now it is
    "interrupted"; resumed (invoke(None)) and finished, the state is "final"."""
    from langgraph.checkpoint.memory import InMemorySaver

    paid: list[int] = []

    @tool
    def transfer(amount: int) -> str:
        """Transfer money."""
        paid.append(amount)
        return f"transferred {amount}"

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "transfer", "args": {"amount": 3}, "id": "t1"}]),
        AIMessage(content="all done")]))
    with Recorder(store, policy=ALLOW_ALL).run(agent="breakpoint") as run:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(model, governed_tools(run, [transfer]), checkpointer=InMemorySaver(),
                                       **{breakpoint: ["tools"]})
        config = {"configurable": {"thread_id": "1"}, "callbacks": [SealboxCallbackHandler(run)]}

        def invoke(value):
            return asyncio.run(graph.ainvoke(value, config=config)) if use_async else graph.invoke(value, config=config)

        state = invoke({"messages": [("user", "pay")]})
        assert [m.type for m in state["messages"]] == stopped_with
        assert graph.get_state(config).next == (("tools",) if breakpoint == "interrupt_before" else ("agent",))
        state = invoke(None)
    assert state["messages"][-1].content == "all done" and paid == [3]

    saved = [(p["label"], [m["$pydantic"]["fields"]["type"] for m in p["state"]["messages"]])
             for k, _, p in events_of(store, run.run_id) if k == "state.saved"]
    assert saved == [("interrupted", stopped_with), ("final", ["human", "ai", "tool", "ai"])]
    assert sealbox.verify_store(store).ok


def test_configured_paths_redact_langchain_messages_in_requests_results_and_state(tmp_path):
    """docs/content-modes.md's example path request.messages.*.content, and result.content and
    state.messages.*.content, did not reach LangChain messages (stored as $pydantic objects): the
    user's text, the tool's answer and the final state were stored in clear."""
    from sealbox.redaction import ContentPolicy

    store = sealbox.init_store(tmp_path / "store", content=ContentPolicy(
        paths=("request.messages.*.content", "result.content", "state.messages.*.content")))

    @tool
    def lookup(q: str) -> str:
        """Look up a record."""
        return "PRIVATE-RECORD-" + q

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": "7"}, "id": "t1"}]),
        AIMessage(content="done")]))
    with Recorder(store, policy=ALLOW_ALL).run(agent="private") as run:
        state = react_agent(model, governed_tools(run, [lookup])).invoke(
            {"messages": [("user", "PRIVATE-QUESTION")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    assert state["messages"][2].content == "PRIVATE-RECORD-7"
    events = events_of(store, run.run_id)
    result = next(p for k, _, p in events if k == "tool.result")["result"]["$pydantic"]["fields"]
    assert result["tool_call_id"] == "t1" and list(result["content"]) == ["$redacted"]
    final = next(p for k, _, p in events if k == "state.saved")["state"]["messages"]
    assert [list(m["$pydantic"]["fields"]["content"]) for m in final] == [["$redacted"]] * 4
    assert sealbox.verify_store(store).ok
    store.close()
    data = (tmp_path / "store" / "sealbox.db").read_bytes()
    assert b"PRIVATE-QUESTION" not in data and b"PRIVATE-RECORD-7" not in data


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


def _pay_tool(paid: list):
    @tool
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return "paid"
    return pay


@pytest.mark.parametrize("use_async", [False, True])
def test_a_call_waiting_for_an_approval_suspends_the_run_even_when_the_tool_node_handles_errors(
        store, tmp_path, use_async):
    """ToolNode(handle_tool_errors=True) turned the recorder's ApprovalPending into an error
    ToolMessage: the model answered, the graph finished and the run ended after run.suspended.
    Now the ApprovalPending reaches the caller of invoke and the run stays suspended."""
    from langgraph.prebuilt import ToolNode

    from sealbox.approvals import ApprovalPending

    (tmp_path / "policy.yaml").write_text(APPROVAL_POLICY)
    paid: list = []
    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "pay", "args": {"amount": 5}, "id": "t1"}]),
        AIMessage(content="I paid.")]))
    recorder = Recorder(store, policy=Policy.load(tmp_path / "policy.yaml"), approvals="suspend")
    with pytest.raises(ApprovalPending) as raised:
        with recorder.run(agent="payer") as run:
            graph = react_agent(model, ToolNode(governed_tools(run, [_pay_tool(paid)]), handle_tool_errors=True))
            value, config = {"messages": [("user", "pay 5")]}, {"callbacks": [SealboxCallbackHandler(run)]}
            asyncio.run(graph.ainvoke(value, config=config)) if use_async else graph.invoke(value, config=config)
    assert (raised.value.run_id, raised.value.call_id) == (run.run_id, "t1") and paid == []
    assert [(k, s) for k, s, _ in events_of(store, run.run_id)] == [
        ("run.started", "1"), ("model.call", "2"), ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("approval.requested", "2.1"), ("run.suspended", "2.1")]
    assert store.get_run(run.run_id)["status"] == "suspended"


def test_a_call_that_cannot_be_recorded_fails_the_graph_even_when_the_tool_node_handles_errors(store):
    """With handle_tool_errors=True a RecordingError became "Error: RecordingError(...)" for the
    model and the run ended ok, though the docs say the run fails with RecordingError."""
    from langgraph.prebuilt import ToolNode

    from sealbox.errors import RecordingError

    paid: list = []
    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "pay", "args": {"amount": 5}, "id": "t1"}]),
        AIMessage(content="I paid.")]))
    original = store.append_with

    def failing(build, **kwargs):
        def checked(reader):
            drafts = build(reader)
            if any(d.kind == "tool.call" for d in drafts):
                raise OSError("disk full")
            return drafts
        return original(checked, **kwargs)

    with pytest.raises(RecordingError, match="disk full"):
        with Recorder(store, policy=ALLOW_ALL).run(agent="payer") as run:
            graph = react_agent(model, ToolNode(governed_tools(run, [_pay_tool(paid)]), handle_tool_errors=True))
            store.append_with = failing
            try:
                graph.invoke({"messages": [("user", "pay 5")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
            finally:
                store.append_with = original
    assert paid == []
    events = events_of(store, run.run_id)
    assert [k for k, _, _ in events] == ["run.started", "model.call", "run.ended"]
    assert events[-1][2]["error"] == {"type": "RecordingError", "message": "could not record: disk full"}


# --------------------------------------------------------------------------- replay of failures


def _replay(store, run_id, agent):
    from sealbox.replay import Replayer

    return Replayer(store).replay(run_id, agent)


def test_a_run_whose_model_call_failed_replays_reproduced(store):
    """A failed chat-model call is recorded with format "unknown" (its response is only the error), so
    the message ids LangGraph makes fresh on every run (uuid4) were hashed into its step key: the
    replay of any run whose model call failed (unreachable, rate-limited) diverged at that call."""
    def agent(run):
        graph = react_agent(FailingChatModel(messages=iter([])), governed_tools(run, [Tools().get_weather_sync]))
        graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})

    with pytest.raises(ConnectionError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="react") as run:
            agent(run)
    result = _replay(store, run.run_id, agent)
    assert result.head().startswith("reproduced: 1 step(s) matched")
    assert result.agent_error == {"type": "ConnectionError", "message": "model service unreachable"}
    assert sealbox.verify_store(store).ok


def test_a_tool_exception_replays_with_its_recorded_type(store):
    """A recorded tool error of a non-builtin type (LangChain's ToolException) was raised on replay as
    a ReplayedError: ToolNode(handle_tool_errors=True) tells the model repr(error), so the next model
    request said "Error: ReplayedError('bad n 1')" where the record said "Error: ToolException('bad n
    1')" (diverged); without error handling the run's error was ReplayedError, not ToolException
    (an outcome divergence)."""
    from langchain_core.tools import ToolException
    from langgraph.prebuilt import ToolNode

    ran: list = []

    @tool
    def strict(n: int) -> str:
        """Refuses every n."""
        ran.append(n)
        raise ToolException(f"bad n {n}")

    def agent(handle):
        def run_agent(run):
            model = ScriptedChatModel(messages=iter([
                AIMessage(content="", tool_calls=[{"name": "strict", "args": {"n": 1}, "id": "s1"}]),
                AIMessage(content="gave up")]))
            node = ToolNode(governed_tools(run, [strict]), handle_tool_errors=handle)
            state = react_agent(model, node).invoke({"messages": [("user", "go")]},
                                                    config={"callbacks": [SealboxCallbackHandler(run)]})
            return state["messages"][2].content
        return run_agent

    with Recorder(store, policy=ALLOW_ALL).run(agent="strict") as handled:
        assert agent(True)(handled) == "Error: ToolException('bad n 1')\n Please fix your mistakes."
    with pytest.raises(ToolException):
        with Recorder(store, policy=ALLOW_ALL).run(agent="strict") as unhandled:
            agent(False)(unhandled)
    assert ran == [1, 1]

    result = _replay(store, handled.run_id, agent(True))
    assert result.head().startswith("reproduced: 4 step(s) matched"), result.head()
    result = _replay(store, unhandled.run_id, agent(False))
    assert result.head().startswith("reproduced: 2 step(s) matched"), result.head()
    assert result.agent_error == {"type": "ToolException", "message": "bad n 1"}
    assert ran == [1, 1]  # served from the record, never run again
    assert sealbox.verify_store(store).ok


@pytest.mark.parametrize("use_async", [False, True])
def test_a_tool_that_called_interrupt_replays_and_resumes_as_recorded(store, use_async):
    """A governed tool that called interrupt() is recorded with a GraphInterrupt error; the replay
    raised it as a ReplayedError, which LangGraph does not take for an interrupt: the graph failed
    instead of stopping to wait, and the replay diverged (missing the "interrupted" state). It is
    raised again as a GraphInterrupt with the recorded interrupt values, so the agent sees the same
    __interrupt__ and its Command(resume=...) goes on as recorded."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    ran: list = []

    @tool
    def transfer(amount: int) -> str:
        """Transfer money once a human approves."""
        ran.append(amount)
        return f"transferred {amount}" if interrupt({"approve": amount, "to": "acct-7"}) else "refused"

    asked: list = []

    def agent(run):
        model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "transfer", "args": {"amount": 3}, "id": "t1"}]),
            AIMessage(content="all done")]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(model, governed_tools(run, [transfer]), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "1"}, "callbacks": [SealboxCallbackHandler(run)]}

        def invoke(value):
            return asyncio.run(graph.ainvoke(value, config=config)) if use_async else graph.invoke(value, config=config)

        first = invoke({"messages": [("user", "pay")]})
        asked.append(first["__interrupt__"][0].value)
        return invoke(Command(resume=True))["messages"][-1].content

    with Recorder(store, policy=ALLOW_ALL).run(agent="hitl") as run:
        assert agent(run) == "all done"
    assert ran == [3, 3] and asked == [{"approve": 3, "to": "acct-7"}]

    result = _replay(store, run.run_id, agent)
    assert result.head().startswith("reproduced: 6 step(s) matched"), result.head()
    assert ran == [3, 3] and asked == [{"approve": 3, "to": "acct-7"}] * 2
    assert sealbox.verify_store(store).ok


def test_a_call_with_arguments_the_tool_refused_replays_with_the_same_validation_error(store):
    """The model sent arguments the tool's schema refuses: the tool raised pydantic's ValidationError,
    which ToolNode turns into a message for the model. On replay the recorded error was a
    ReplayedError, which ToolNode does not take for a validation error: the graph failed instead of
    telling the model, and the replay diverged. The recorded arguments are validated again against
    the tool's schema (the tool does not run), giving the same ValidationError."""
    tools = Tools()

    def agent(run):
        model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "get_time", "args": {"city": "Oslo", "utc_offset": "one"},
                                               "id": "v1"}]),
            AIMessage(content="sorry")]))
        state = react_agent(model, governed_tools(run, [tools.get_time])).invoke(
            {"messages": [("user", "time in Oslo?")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
        return state["messages"][2].content

    with Recorder(store, policy=ALLOW_ALL).run(agent="clock") as run:
        told = agent(run)
    assert told.startswith("Error invoking tool 'get_time' with kwargs {'city': 'Oslo', 'utc_offset': 'one'}")
    results = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"]
    assert [(p["ok"], p["error"]["type"]) for p in results] == [(False, "ValidationError")]

    result = _replay(store, run.run_id, agent)
    assert result.head().startswith("reproduced: 4 step(s) matched"), result.head()
    assert tools.invoked == []
    assert sealbox.verify_store(store).ok


def test_a_dict_a_tool_node_turned_into_text_replays_and_a_changed_value_diverges(store):
    """Through ToolNode the tool's ToolMessage is recorded as its result, its content already
    json.dumps(result) with the keys as the tool gave them: the replay serves that same string.
    Replayed with live tools whose new code returns the keys in another order and another value,
    the model call after it diverges, naming that one field."""
    ran: list = []

    def weather_tool(temp):
        @tool
        def weather(city: str) -> dict:
            """Current weather."""
            ran.append(city)
            return {"temp": temp, "city": city} if temp == 20 else {"city": city, "temp": temp}
        return weather

    def agent(temp):
        def run_agent(run):
            model = ScriptedChatModel(messages=iter([
                AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "w1"}]),
                AIMessage(content="20 degrees.")]))
            state = react_agent(model, governed_tools(run, [weather_tool(temp)])).invoke(
                {"messages": [("user", "Weather in Paris?")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
            return state["messages"][2].content
        return run_agent

    with Recorder(store, policy=ALLOW_ALL).run(agent="weather") as run:
        assert agent(20)(run) == '{"temp": 20, "city": "Paris"}'
    result = _replay(store, run.run_id, agent(20))
    assert result.head() == "reproduced: 4 step(s) matched", result.divergence
    assert ran == ["Paris"]  # served from the record

    from sealbox.replay import Replayer

    warmer = Replayer(store, policy=ALLOW_ALL).replay(run.run_id, agent(21), tools="live", side_effects=True)
    assert warmer.reproduced is False and warmer.divergence.step == "3"
    assert [(d.path, d.a, d.b) for d in warmer.divergence.diff] == [
        ("messages[2].content", '{"temp": 20, "city": "Paris"}', '{"city": "Paris", "temp": 21}')]


def test_a_dict_a_governed_tool_returned_sent_to_the_model_as_json_replays_reproduced(store):
    """A governed tool invoked by the agent's own code (not through ToolNode) returns the tool's dict;
    the record keeps it with its keys sorted, so the agent's json.dumps(result) in the next chat-model
    request differed from the recorded one in key order only, and the replay diverged there (step 3).
    It now reproduces."""
    import json

    ran: list = []

    @tool
    def weather(city: str) -> dict:
        """Current weather."""
        ran.append(city)
        return {"temp": 20, "city": city}

    def agent(run):
        [governed] = governed_tools(run, [weather])
        result = governed.invoke({"city": "Paris"})
        model = ScriptedChatModel(messages=iter([AIMessage(content="20 degrees.")]))
        return model.invoke([("user", "Weather in Paris?"), ("user", json.dumps(result))],
                            config={"callbacks": [SealboxCallbackHandler(run)]}).content

    with Recorder(store, policy=ALLOW_ALL).run(agent="weather") as run:
        assert agent(run) == "20 degrees."
    sent = [store.resolve(e.payload)["request"] for e in store.read_run(run.run_id) if e.kind == "model.call"]
    assert sent[0]["messages"][1]["content"] == '{"temp": 20, "city": "Paris"}'
    result = _replay(store, run.run_id, agent)
    assert result.head() == "reproduced: 2 step(s) matched", result.divergence
    assert ran == ["Paris"]  # served from the record


def test_a_recorder_tool_given_to_governed_tools_is_recorded_once(store):
    # was: governed_tools(run, [lookup]) with lookup decorated by @recorder.tool recorded each call twice:
    # the governed call (step 2.1, the model's id) and, inside it, the decorator's own (step 3, a fresh id)
    recorder = Recorder(store, policy=ALLOW_ALL)
    seen = []

    @recorder.tool("db")
    def lookup(q: str) -> str:
        """Look a query up."""
        seen.append(q)
        return "found " + q

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"id": "a1", "name": "lookup", "args": {"q": "x"}}]),
        AIMessage(content="done")]))
    with recorder.run(agent="lg") as run:
        (governed,) = governed_tools(run, [lookup])
        assert (governed.name, governed.description) == ("lookup", "Look a query up.")
        react_agent(model, [governed]).invoke({"messages": [("user", "hi")]},
                                              config={"callbacks": [SealboxCallbackHandler(run)]})
    assert seen == ["x"]
    assert [(e.step, e.kind, e.payload["call_id"]) for e in store.read_run(run.run_id) if e.kind.startswith("tool.")] == [
        ("2.1", "tool.call", "a1"), ("2.1", "tool.result", "a1")]
    assert sealbox.verify_store(store).ok


def _expert_and_top(store):
    """A top agent whose governed tool runs a sub-agent graph in a sub-run of its own (parent_run_id),
    the sub-agent's handler given in its own config, as a user nesting agents would."""
    recorder = Recorder(store, policy=ALLOW_ALL)
    children: list = []
    usage = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"Sunny in {city}"

    @tool
    async def ask_expert(question: str) -> str:
        """Ask the expert sub-agent."""
        sub_model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "s1"}],
                      usage_metadata=usage),
            AIMessage(content="expert: sunny", usage_metadata=usage)]))
        async with recorder.run(agent="expert") as child:
            children.append(child)
            graph = react_agent(sub_model, governed_tools(child, [get_weather]))
            state = await graph.ainvoke({"messages": [("user", question)]},
                                        config={"callbacks": [SealboxCallbackHandler(child)]})
        return state["messages"][-1].content

    async def main():
        top_model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "ask_expert", "args": {"question": "weather?"}, "id": "p1"}],
                      usage_metadata=usage),
            AIMessage(content="done", usage_metadata=usage)]))
        async with recorder.run(agent="top") as run:
            graph = react_agent(top_model, governed_tools(run, [ask_expert]))
            state = await graph.ainvoke({"messages": [("user", "go")]},
                                        config={"callbacks": [SealboxCallbackHandler(run)]})
        return run, state

    run, state = asyncio.run(main())
    assert state["messages"][-1].content == "done" and len(children) == 1
    return run, children[0]


def test_a_sub_agent_run_inside_a_tool_is_recorded_in_its_own_run_not_also_in_the_parent(store):
    """LangChain hands the callbacks of the graph running a tool on to whatever the tool invokes: the
    parent's handler recorded the sub-agent's two model calls into the parent run too (a model call
    requesting a tool call s1 the parent never made, and the parent's usage counting the child's)."""
    run, child = _expert_and_top(store)
    parent_events = events_of(store, run.run_id)
    assert [(k, s) for k, s, _ in parent_events] == [
        ("run.started", "1"), ("model.call", "2"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"), ("tool.result", "2.1"),
        ("model.call", "3"), ("state.saved", "4"), ("run.ended", "5")]
    assert [p["tool_call_ids"] for k, _, p in parent_events if k == "model.call"] == [["p1"], []]
    assert parent_events[-1][2]["usage"]["input_tokens"] == 14
    child_events = events_of(store, child.run_id)
    assert child_events[0][2]["parent_run_id"] == run.run_id
    assert [p["tool_call_ids"] for k, _, p in child_events if k == "model.call"] == [["s1"], []]
    assert [p["call_id"] for k, _, p in child_events if k == "tool.call"] == ["s1"]
    assert child_events[-1][2]["usage"]["input_tokens"] == 14
    assert sealbox.verify_store(store).ok


def test_a_sub_agent_graph_run_inside_a_tool_saves_its_final_state(store):
    """The sub-agent's graph, invoked inside a tool of the parent graph, has a LangChain parent (the
    tool's run), so its handler never saw an outermost chain end and saved no state for the sub-run."""
    run, child = _expert_and_top(store)
    saved = [(s, p["label"], [m["$pydantic"]["fields"]["type"] for m in p["state"]["messages"]])
             for k, s, p in events_of(store, child.run_id) if k == "state.saved"]
    assert saved == [("4", "final", ["human", "ai", "tool", "ai"])]
    assert [k for k, _, _ in events_of(store, run.run_id)].count("state.saved") == 1
    assert sealbox.verify_store(store).ok


def test_an_ungoverned_tool_of_a_sub_agent_run_inside_a_governed_tool_is_noted(store):
    """The marker a governed tool sets while it runs (so the handler does not note the wrapped tool) was
    seen by every handler below it: an ungoverned tool of a sub-agent's run, opened inside a governed
    tool of the parent, ran without the note that makes the gap visible."""
    recorder = Recorder(store, policy=ALLOW_ALL)
    children: list = []
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"Sunny in {city}"

    @tool
    def ask_expert(question: str) -> str:
        """Ask the expert sub-agent."""
        sub_model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "s1"}]),
            AIMessage(content="expert: sunny")]))
        with recorder.run(agent="expert") as child:
            children.append(child)
            graph = react_agent(sub_model, [get_weather])  # not governed
            state = graph.invoke({"messages": [("user", question)]},
                                 config={"callbacks": [SealboxCallbackHandler(child)]})
        return state["messages"][-1].content

    top_model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "ask_expert", "args": {"question": "weather?"}, "id": "p1"}]),
        AIMessage(content="done")]))
    with recorder.run(agent="top") as run:
        graph = react_agent(top_model, governed_tools(run, [ask_expert]))
        state = graph.invoke({"messages": [("user", "go")]}, config={"callbacks": [SealboxCallbackHandler(run)]})
    assert state["messages"][-1].content == "done" and ran == ["Oslo"]
    notes = [p for k, _, p in events_of(store, children[0].run_id) if k == "note"]
    assert notes == [{"text": "ungoverned tool call: get_weather ran without a record before it ran",
                      "about": {"ungoverned_tool": {"tool": "get_weather", "tool_call_id": "s1"}}}]
    assert [k for k, _, _ in events_of(store, run.run_id)].count("note") == 0
    assert sealbox.verify_store(store).ok


def _expert_asks_a_human(children: list, asked: list, govern_top: bool = True):
    """An agent for a top run: its graph (with a checkpointer) has a governed tool that runs a sub-agent
    graph in a sub-run of its own; the sub-agent's governed tool calls interrupt(), answered by the top
    graph's Command(resume=...). Returns the agent's final answer."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    def agent(run):
        @tool
        def pay(amount: int) -> str:
            """Pay once a human approves."""
            return f"paid {amount}" if interrupt({"approve": amount}) else "refused"

        sub_answers = iter([
            AIMessage(content="", tool_calls=[{"name": "pay", "args": {"amount": 5}, "id": "s1"}]),
            AIMessage(content="expert paid")])

        @tool
        def ask_expert(question: str) -> str:
            """Ask the expert sub-agent."""
            with run.recorder.run(agent="expert") as child:
                children.append(child)
                graph = react_agent(ScriptedChatModel(messages=sub_answers), governed_tools(child, [pay]))
                state = graph.invoke({"messages": [("user", question)]},
                                     config={"callbacks": [SealboxCallbackHandler(child)]})
            return state["messages"][-1].content

        model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "ask_expert", "args": {"question": "pay"}, "id": "p1"}]),
            AIMessage(content="done")]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(model, governed_tools(run, [ask_expert]) if govern_top else [ask_expert],
                                       checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "1"}, "callbacks": [SealboxCallbackHandler(run)]}
        first = graph.invoke({"messages": [("user", "go")]}, config=config)
        asked.append(first["__interrupt__"][0].value)
        return graph.invoke(Command(resume=True), config=config)["messages"][-1].content
    return agent


def test_a_sub_agent_graph_stopped_by_interrupt_suspends_its_run_with_its_interrupted_state(store):
    """A sub-agent graph invoked inside a tool raises GraphInterrupt out of its run's ``with`` block
    when a node calls interrupt(): the sub-run was ended with status error (no state saved), though
    it only waits for a human. It saves the interrupt it waits on as its "interrupted" state and is
    suspended (run.suspended, no run.ended); the tool run again on resume opens a new sub-run."""
    children: list = []
    asked: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="top") as run:
        assert _expert_asks_a_human(children, asked)(run) == "done"
    assert asked == [{"approve": 5}] and len(children) == 2
    waiting, resumed = children
    events = events_of(store, waiting.run_id)
    assert [(k, s) for k, s, _ in events] == [
        ("run.started", "1"), ("model.call", "2"), ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("tool.result", "2.1"), ("state.saved", "3"), ("run.suspended", "4")]
    assert events[5][2]["label"] == "interrupted"
    assert [i["value"] for i in events[5][2]["state"]["__interrupt__"]] == [{"approve": 5}]
    assert events[6][2]["approval_ids"] == []
    assert "interrupt()" in events[6][2]["reason"]
    assert store.get_run(waiting.run_id)["status"] == "suspended"
    assert events_of(store, resumed.run_id)[-1][2]["status"] == "ok"
    assert events_of(store, run.run_id)[-1][2]["status"] == "ok"
    assert sealbox.verify_store(store).ok


def test_a_replay_of_a_sub_agent_run_suspended_by_interrupt_reproduces_it_suspended(store):
    """The replayed sub-agent run stops in interrupt() again and is suspended again: compared as its
    ending (every recorded step reached, the recorded run left suspended too), not left "not ended"."""
    children: list = []
    asked: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="top") as run:
        assert _expert_asks_a_human(children, asked, govern_top=False)(run) == "done"
    replayed: list = []
    result = _replay(store, run.run_id, _expert_asks_a_human(replayed, asked, govern_top=False))
    assert result.head() == "reproduced: 6 step(s) matched, and 6 in 2 sub-agent run(s)", result.head()
    assert asked == [{"approve": 5}] * 2
    assert [store.get_run(c.run_id)["status"] for c in replayed] == ["suspended", "ended"]
    assert [store.get_run(c.run_id)["replay_of"] for c in replayed] == [c.run_id for c in children]
    assert sealbox.verify_store(store).ok


def test_a_governed_tool_cancelled_by_langgraph_records_no_object_address(store):
    """LangGraph cancels a node's tasks with a sentinel (``task.cancel(object())``): the governed
    tool cut short was recorded with error message ``<object object at 0x7f…>``, the sentinel's
    address (different on each run, meaningless to a reader)."""
    started = asyncio.Event()

    @tool
    async def slow(city: str) -> str:
        """Slow lookup."""
        started.set()
        await asyncio.sleep(5)
        return "late"

    @tool
    async def quick(city: str) -> str:
        """Quick lookup."""
        return f"quick {city}"

    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "slow", "args": {"city": "Paris"}, "id": "c1"},
                                          {"name": "quick", "args": {"city": "Oslo"}, "id": "c2"}]),
        AIMessage(content="done")]))

    async def timed_out(coro):
        # asyncio.wait_for(coro, 1.0), its time counted from when the slow tool began (no timing in tests)
        task = asyncio.ensure_future(coro)
        await asyncio.wait_for(started.wait(), 60)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise TimeoutError

    async def main():
        run = Recorder(store, policy=ALLOW_ALL).run(agent="react")
        with pytest.raises(TimeoutError):
            async with run:
                graph = react_agent(model, governed_tools(run, [slow, quick]))
                await timed_out(graph.ainvoke({"messages": [("user", "go")]},
                                              config={"callbacks": [SealboxCallbackHandler(run)]}))
        return run

    run = asyncio.run(main())
    results = [p for k, _, p in events_of(store, run.run_id) if k == "tool.result"]
    slow_result = next(p for p in results if p.get("error"))
    assert slow_result["ok"] is False
    assert slow_result["error"]["type"] == "CancelledError"
    assert slow_result["error"]["message"] == "cancelled (its message was an object of type object, not text)"
    assert " at 0x" not in slow_result["error"]["traceback"]
    assert sealbox.verify_store(store).ok
