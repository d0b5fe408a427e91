"""A LangGraph sub-agent invoked inside a governed tool of a parent graph, replayed.

A replay serves a governed tool from the record without running it, so a second graph the tool invoked
never ran: a sub-agent run of its own (``recorder.run`` inside the tool) was reported ``missing`` ("the
replay ended without starting the recorded sub-agent run"), and a sub-graph recording into the parent's
run through the inherited handler made the parent's next model call meet the sub-graph's recorded one
(a false ``mismatch`` at step 3). Such a call's tool now runs, and the sub-agent's own model and tool
calls are served from the record and compared. The chat models are scripted (no network); SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

import sealbox  # noqa: E402
from sealbox.integrations.langgraph import SealboxCallbackHandler, governed_tools  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402
from sealbox.replay import Replayer  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain.agents
    from langgraph.prebuilt import create_react_agent  # noqa: E402


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that accepts bound tools (as a real one passes them on)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def react_agent(model, tools):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools)


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.skipif(
    not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL not set"))]


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
        yield s
        s.close()
        return
    url, schema = os.environ["SEALBOX_TEST_POSTGRES_URL"], f"sbt_lgsub_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "store", postgres_url=url, schema=schema)
    yield s
    s.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def make_agent(ran: list, *, own_run: bool, prefix: str = "", asynchronous: bool = False):
    """A top graph whose governed tool ``ask_expert`` invokes an expert sub-graph with a governed
    ``get_weather``: in a sub-agent run of its own (``own_run``, its own handler), else in the top run
    (the handler LangChain hands on to what the tool invokes). ``prefix`` changes the sub-agent's input."""

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(("get_weather", city))
        return f"Sunny in {city}"

    def sub_graph(run):
        model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "s1"}]),
            AIMessage(content="expert: sunny")]))
        return react_agent(model, governed_tools(run, [get_weather]))

    def agent(run):
        def expert_in(question: str) -> tuple[Any, dict]:
            if own_run:
                child = run.recorder.run(agent="expert")
                return child, {"callbacks": [SealboxCallbackHandler(child)]}
            return None, {}

        @tool
        def ask_expert(question: str) -> str:
            """Ask the expert sub-agent."""
            ran.append(("ask_expert", question))
            child, config = expert_in(question)
            if child is None:
                return sub_graph(run).invoke({"messages": [("user", prefix + question)]})["messages"][-1].content
            with child:
                state = sub_graph(child).invoke({"messages": [("user", prefix + question)]}, config=config)
            return state["messages"][-1].content

        @tool
        async def ask_expert_async(question: str) -> str:
            """Ask the expert sub-agent."""
            ran.append(("ask_expert", question))
            child, config = expert_in(question)
            if child is None:
                state = await sub_graph(run).ainvoke({"messages": [("user", prefix + question)]})
                return state["messages"][-1].content
            async with child:
                state = await sub_graph(child).ainvoke({"messages": [("user", prefix + question)]}, config=config)
            return state["messages"][-1].content

        name = "ask_expert_async" if asynchronous else "ask_expert"
        model = ScriptedChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": name, "args": {"question": "weather?"}, "id": "p1"}]),
            AIMessage(content="done")]))
        graph = react_agent(model, governed_tools(run, [ask_expert_async if asynchronous else ask_expert]))
        config = {"callbacks": [SealboxCallbackHandler(run)]}
        if asynchronous:
            return asyncio.run(graph.ainvoke({"messages": [("user", "go")]}, config=config))["messages"][-1].content
        return graph.invoke({"messages": [("user", "go")]}, config=config)["messages"][-1].content
    return agent


def record(store, **kw):
    ran: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="top") as run:
        assert make_agent(ran, **kw)(run) == "done"
    assert ran == [("ask_expert", "weather?"), ("get_weather", "Oslo")]
    return run


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_sub_agent_run_inside_a_governed_tool_is_served_from_the_record(store, asynchronous):
    run = record(store, own_run=True, asynchronous=asynchronous)
    (child,) = store.get_run(run.run_id)["children"]
    ran: list = []
    result = Replayer(store).replay(run.run_id, make_agent(ran, own_run=True, asynchronous=asynchronous))
    assert result.divergence is None, result.head()
    assert result.head() == "reproduced: 4 step(s) matched, and 4 in 1 sub-agent run(s)"
    assert [(s["replay_of"], s["reproduced"], s["steps_compared"]) for s in result.sub_runs] == \
        [(child["run_id"], True, 4)]
    # the governed tool holding the sub-agent ran; the sub-agent's own governed tool was served
    assert ran == [("ask_expert", "weather?")]
    events = [(e.step, e.kind) for e in store.read_run(result.new_run_id)]
    assert events == [("1", "run.started"), ("2", "model.call"), ("2.1", "tool.call"), ("2.1", "policy.decision"),
                      ("2.1", "tool.result"), ("3", "model.call"), ("4", "state.saved"), ("5", "run.ended")]
    result_payload = [store.resolve(e.payload) for e in store.read_run(result.new_run_id) if e.kind == "tool.result"]
    assert result_payload[0]["ok"] is True
    sub_events = [(e.step, e.kind) for e in store.read_run(result.sub_runs[0]["new_run_id"])]
    assert sub_events == [("1", "run.started"), ("2", "model.call"), ("2.1", "tool.call"), ("2.1", "policy.decision"),
                          ("2.1", "tool.result"), ("3", "model.call"), ("4", "state.saved"), ("5", "run.ended")]
    # the replay run is written as a recorded one is (the sub-agent run started inside the call): it replays too
    again = Replayer(store).replay(result.new_run_id, make_agent([], own_run=True, asynchronous=asynchronous))
    assert again.head() == "reproduced: 4 step(s) matched, and 4 in 1 sub-agent run(s)", again.head()
    assert sealbox.verify_store(store).ok


def test_a_changed_sub_agent_run_inside_a_governed_tool_diverges_in_its_run(store):
    run = record(store, own_run=True)
    (child,) = store.get_run(run.run_id)["children"]
    result = Replayer(store).replay(run.run_id, make_agent([], own_run=True, prefix="Please: "))
    div = result.divergence
    assert div is not None and div.kind == "mismatch"
    assert (div.step, div.sub_run) == ("2", (child["run_id"],))
    assert [(d.path, d.a, d.b) for d in div.diff] == [("messages[0].content", "weather?", "Please: weather?")]
    assert result.head().startswith(f"NOT reproduced: diverged at step 2 of sub-agent run {child['run_id']} "
                                    "(mismatch)"), result.head()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_sub_graph_recording_into_the_parent_run_inside_a_governed_tool_is_served(store, asynchronous):
    run = record(store, own_run=False, asynchronous=asynchronous)
    assert [(e.step, e.kind) for e in store.read_run(run.run_id) if e.kind in ("model.call", "tool.result")] == [
        ("2", "model.call"), ("3", "model.call"), ("3.1", "tool.result"), ("4", "model.call"), ("2.1", "tool.result"),
        ("5", "model.call")]
    ran: list = []
    result = Replayer(store).replay(run.run_id, make_agent(ran, own_run=False, asynchronous=asynchronous))
    assert result.divergence is None, result.head()
    assert result.head() == "reproduced: 7 step(s) matched"
    assert ran == [("ask_expert", "weather?")]
    assert sealbox.verify_store(store).ok


def test_a_changed_sub_graph_recording_into_the_parent_run_diverges_at_its_step(store):
    run = record(store, own_run=False)
    result = Replayer(store).replay(run.run_id, make_agent([], own_run=False, prefix="Please: "))
    div = result.divergence
    assert div is not None and (div.kind, div.step, div.sub_run) == ("mismatch", "3", ())
    assert [(d.path, d.a, d.b) for d in div.diff] == [("messages[0].content", "weather?", "Please: weather?")]


def test_a_sub_agent_the_record_cannot_tie_to_one_of_parallel_calls_is_unreplayable_and_nothing_runs(store):
    """Two calls of one model step ran at once, a plain tool (``audit``) and the one invoking the sub-agent:
    the sub-agent run started while both were open, so the record cannot tell which held it. Neither tool
    is run for real to find out: the replay stops there, ``unreplayable``, never a false reproduction."""
    import threading

    def agent_with(ran: list):
        expert_done, audit_started = threading.Event(), threading.Event()

        @tool
        def audit(note: str) -> str:
            """Write an audit note."""
            ran.append(("audit", note))
            audit_started.set()
            expert_done.wait(30)  # open while the sub-agent runs (never waited for in a replay: it does not run)
            return "noted"

        def agent(run):
            @tool
            def ask_expert(question: str) -> str:
                """Ask the expert sub-agent."""
                ran.append(("ask_expert", question))
                audit_started.wait(30)  # so that the sub-agent runs while audit is open, whichever thread ran first
                model = ScriptedChatModel(messages=iter([AIMessage(content="expert: sunny")]))
                with run.recorder.run(agent="expert") as child:
                    state = react_agent(model, []).invoke({"messages": [("user", question)]},
                                                          config={"callbacks": [SealboxCallbackHandler(child)]})
                expert_done.set()
                return state["messages"][-1].content

            model = ScriptedChatModel(messages=iter([
                AIMessage(content="", tool_calls=[{"name": "audit", "args": {"note": "asked"}, "id": "p0"},
                                                  {"name": "ask_expert", "args": {"question": "weather?"}, "id": "p1"}]),
                AIMessage(content="done")]))
            graph = react_agent(model, governed_tools(run, [audit, ask_expert]))
            return graph.invoke({"messages": [("user", "go")]},
                                config={"callbacks": [SealboxCallbackHandler(run)]})["messages"][-1].content
        return agent

    recorded: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="top") as run:
        assert agent_with(recorded)(run) == "done"
    assert sorted(recorded) == [("ask_expert", "weather?"), ("audit", "asked")]
    ran: list = []
    result = Replayer(store).replay(run.run_id, agent_with(ran))
    div = result.divergence
    assert div is not None and div.kind == "unreplayable" and div.step in ("2.1", "2.2"), result.head()
    assert "cannot tell which of them held it" in div.message
    assert not result.reproduced and ran == []
