"""In-process replay of an OpenAI Agents SDK agent whose MCP tools go through a Sealbox gateway joined to its run.

Recorded: a real ``sealbox gateway serve`` (stdio, the toy upstream) launched by ``MCPServerStdio`` with
``mcp_env(run)`` (and, in some tests, ``tool_meta_resolver=mcp_meta_resolver(run)``), an agent with a scripted
model. Replayed in-process with the gateway unable to start (its config file is gone): the MCP server is
never connected, its tool list and every ``tools/call`` come from the record, compared like governed tool calls.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.mcp import MCPServerStdio  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall  # noqa: E402

from sealbox.integrations.openai_agents import instrument, mcp_env, mcp_meta_resolver  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402
from sealbox.replay import Replayer, render_divergence  # noqa: E402

from .test_gateway_agents_sdk import ScriptedModel, _response, script, write_config  # noqa: E402

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)


def two_calls(first: dict, second: dict, final: str) -> ScriptedModel:
    """A model that asks for toy__add twice in one response, then answers."""
    calls = [ResponseFunctionToolCall(id=f"fc_{i}", call_id=f"call_{i}", type="function_call", name="toy__add",
                                      arguments=json.dumps(args), status="completed")
             for i, args in ((1, first), (2, second))]
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    return ScriptedModel([
        _response(calls, "resp_1"),
        _response([ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=final,
                                                                     annotations=[])])], "resp_2")])


def make_agent(where: dict, model_of, *, resolver: bool, out: dict):
    """The agent's own code, the same when recorded and replayed: it launches the gateway at
    ``where["config"]`` over stdio, joined to its run."""
    async def agent(run):
        env = mcp_env(run, {k: v for k, v in os.environ.items() if k not in ("SEALBOX_RUN_ID", "SEALBOX_STORE")})
        server = MCPServerStdio(params={"command": sys.executable,
                                        "args": ["-m", "sealbox.cli.main", "gateway", "serve", "--config",
                                                 where["config"]], "env": env},
                                client_session_timeout_seconds=30, cache_tools_list=True, name="sealbox-gateway",
                                tool_meta_resolver=mcp_meta_resolver(run) if resolver else None)
        async with server:
            agent = Agent(name="mcp-bot", instructions="Use the tools.", model=model_of(), mcp_servers=[server])
            result = await Runner.run(instrument(run, agent), "What is 2 + 40?")
        out["final"] = result.final_output
        out["input"] = result.to_input_list()
    return agent


async def record(tmp_path, store, model_of, *, resolver: bool, policy: str = "ALLOW_ALL"):
    where = {"config": write_config(tmp_path, policy)}
    out: dict = {}
    async with Recorder(store, policy=ALLOW_ALL).run(agent="mcp-bot", principal="agent:mcp-bot") as run:
        await make_agent(where, model_of, resolver=resolver, out=out)(run)
    where["config"] = str(tmp_path / "gone.yaml")  # from now on the gateway cannot start
    return run.run_id, where, out


def steps(store, run_id):
    return [(e.step, e.kind) for e in store.read_run(run_id)]


def toy_calls(tmp_path) -> int:
    p = tmp_path / "toy.log"
    return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.mark.parametrize("resolver", [True, False], ids=["meta-resolver", "env-only"])
async def test_a_replay_serves_the_gateway_calls_from_the_record_without_a_gateway(tmp_path, store, resolver):
    run_id, where, recorded = await record(tmp_path, store, lambda: script("toy__add", {"a": 2, "b": 40},
                                                                            "2 + 40 = 42"), resolver=resolver)
    call_step = "2.1" if resolver else "3"
    last = "3" if resolver else "4"
    assert steps(store, run_id)[1:6] == [("2", "model.call"), (call_step, "tool.call"),
                                         (call_step, "policy.decision"), (call_step, "tool.result"),
                                         (last, "model.call")]
    assert toy_calls(tmp_path) == 1
    from agents.mcp import server as sdk

    originals = {n: sdk._MCPServerWithClientSession.__dict__[n] for n in ("connect", "cleanup", "list_tools",
                                                                            "call_tool")}
    out: dict = {}
    result = await Replayer(store).areplay(run_id, make_agent(where, lambda: ScriptedModel([]), resolver=resolver,
                                                              out=out))
    assert result.reproduced, render_divergence(result.divergence)
    assert result.steps_compared == 3
    # the SDK's server methods, patched while the replay ran, are its own again
    assert {n: sdk._MCPServerWithClientSession.__dict__[n] for n in originals} == originals
    assert sdk.MCPServerStreamableHttp.__dict__["call_tool"].__module__ == "agents.mcp.server"
    from mcp.client.session import ClientSession

    assert ClientSession.__dict__["call_tool"].__module__ == "mcp.client.session"
    assert toy_calls(tmp_path) == 1  # the upstream was not called again (nor the gateway, which cannot start)
    assert out["final"] == "2 + 40 = 42"
    # what the agent got from the served call is what it got recorded, to the byte: the model's next input
    assert out["input"] == recorded["input"]
    served = [e for e in store.read_run(result.new_run_id)]
    assert [(e.step, e.kind) for e in served] == steps(store, run_id)
    call = next(store.resolve(e.payload) for e in served if e.kind == "tool.call")
    assert (call["server"], call["tool"], call["exposed"], call["arguments"]) == ("toy", "add", "toy__add",
                                                                                  {"a": 2, "b": 40})
    res = next(store.resolve(e.payload) for e in served if e.kind == "tool.result")
    assert res["ok"] is True
    assert res["result"] == {"content": [{"type": "text", "text": "42"}], "isError": False,
                             "resultType": "complete", "structuredContent": {"sum": 42}}
    assert res["result"] == next(store.resolve(e.payload) for e in store.read_run(run_id)
                                 if e.kind == "tool.result")["result"]
    decision = next(store.resolve(e.payload) for e in served if e.kind == "policy.decision")
    assert decision["replayed"] == {"run_id": run_id, "step": call_step, "approval": None}


async def test_a_changed_argument_is_the_first_divergence_at_the_gateway_call(tmp_path, store):
    run_id, where, _ = await record(tmp_path, store, lambda: script("toy__add", {"a": 2, "b": 40}, "42"),
                                    resolver=True)
    out: dict = {}
    result = await Replayer(store).areplay(
        run_id, make_agent(where, lambda: script("toy__add", {"a": 2, "b": 41}, "43"), resolver=True, out=out),
        model="live")
    d = result.divergence
    assert (result.reproduced, d.kind, d.step, d.mismatched) == (False, "mismatch", "2.1", ("hash",))
    assert d.message == "step 2.1: the replay made tool.call toy/add with different content (1 field(s) differ)"
    assert [(f.path, f.a, f.b) for f in d.diff] == [("b", 40, 41)]
    assert toy_calls(tmp_path) == 1
    assert result.head().startswith("NOT reproduced: diverged at step 2.1 (mismatch); 1 step(s) matched before it")


async def test_an_extra_gateway_call_is_the_first_divergence(tmp_path, store):
    run_id, where, _ = await record(tmp_path, store, lambda: script("toy__add", {"a": 2, "b": 40}, "42"),
                                    resolver=True)
    result = await Replayer(store).areplay(
        run_id, make_agent(where, lambda: two_calls({"a": 2, "b": 40}, {"a": 1, "b": 1}, "42"), resolver=True,
                           out={}), model="live")
    d = result.divergence
    assert (d.kind, d.step, d.mismatched) == ("extra", "2.2", ("step",))
    assert d.message == "the replay made a tool.call at step 2.2, which the record does not have"
    assert toy_calls(tmp_path) == 1


async def test_a_missing_gateway_call_is_the_first_divergence(tmp_path, store):
    run_id, where, _ = await record(tmp_path, store, lambda: script("toy__add", {"a": 2, "b": 40}, "42"),
                                    resolver=True)
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    answer = lambda: ScriptedModel([_response([ResponseOutputMessage(  # noqa: E731
        id="msg_1", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text="42", annotations=[])])], "resp_1")])
    result = await Replayer(store).areplay(run_id, make_agent(where, answer, resolver=True, out={}), model="live")
    d = result.divergence
    assert (d.kind, d.step) == ("missing", "2.1")
    assert d.message == "the replay ended before step 2.1 (tool.call toy/add) of the record"


async def test_with_live_tools_a_gateway_call_stops_the_replay_unreplayable(tmp_path, store):
    run_id, where, _ = await record(tmp_path, store, lambda: script("toy__add", {"a": 2, "b": 40}, "42"),
                                    resolver=True)
    result = await Replayer(store, policy=ALLOW_ALL).areplay(
        run_id, make_agent(where, lambda: ScriptedModel([]), resolver=True, out={}), tools="live",
        side_effects=True)
    d = result.divergence
    assert (d.kind, d.step) == ("unreplayable", "2.1")
    assert d.message == ("step 2.1: toy/add is a tool of a Sealbox gateway joined to the run (exposed as "
                         "'toy__add'), which does not join a replay run: it cannot run live; replay it with "
                         "tools from the record")
    assert d.recorded == d.attempted and d.recorded.name == "toy/add"
    assert toy_calls(tmp_path) == 1


@pytest.mark.parametrize("resolver", [True, False], ids=["meta-resolver", "env-only"])
async def test_a_recorded_deny_and_a_recorded_tool_error_are_served_as_the_gateway_answered(tmp_path, store,
                                                                                          resolver):
    policy = """
version: 1
rules:
  - id: no-secrets
    match: {server: toy, tool: echo}
    when: 'call.arguments.text == "secret"'
    effect: deny
  - id: rest-ok
    effect: allow
"""

    def model():
        calls = [ResponseFunctionToolCall(id=f"fc_{i}", call_id=f"call_{i}", type="function_call", name="toy__echo",
                                          arguments=json.dumps({"text": text}), status="completed")
                 for i, text in ((1, "secret"), (2, "!error it broke"))]
        from openai.types.responses import ResponseOutputMessage, ResponseOutputText

        return ScriptedModel([_response(calls[:1], "resp_1"), _response(calls[1:], "resp_2"), _response(
            [ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                   content=[ResponseOutputText(type="output_text", text="done", annotations=[])])],
            "resp_3")])

    run_id, where, recorded = await record(tmp_path, store, model, resolver=resolver, policy=policy)
    outputs = [i["output"] for i in recorded["input"] if i.get("type") == "function_call_output"]
    deny_id = "call_1" if resolver else next(store.resolve(e.payload)["call_id"] for e in store.read_run(run_id)
                                             if e.kind == "tool.call")
    assert outputs == [[{"type": "input_text", "text": "denied by rule no-secrets (policy_deny): rule 'no-secrets' "
                         "denies the call (condition true: call.arguments.text == \"secret\") "
                         f"[call {deny_id}]"}], [{"type": "input_text", "text": "it broke"}]]
    assert toy_calls(tmp_path) == 1  # the denied call never reached the upstream
    out: dict = {}
    result = await Replayer(store).areplay(run_id, make_agent(where, lambda: ScriptedModel([]), resolver=resolver,
                                                              out=out))
    assert result.reproduced, render_divergence(result.divergence)
    assert out["input"] == recorded["input"]
    assert toy_calls(tmp_path) == 1
    kinds = [e.kind for e in store.read_run(result.new_run_id)]
    assert kinds.count("tool.result") == 1 and kinds.count("tool.call") == 2


async def test_a_plain_client_session_with_mcp_meta_has_its_calls_served_from_the_record(tmp_path, store):
    """A plain ``mcp.ClientSession`` (no Agents SDK server class): its ``call_tool(..., meta=mcp_meta(run))`` is
    served from the record; its connection and ``tools/list`` still reach the gateway it launched, which
    serves them without joining the run (it would refuse the call: UNKNOWN_RUN)."""
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    from sealbox.integrations.openai_agents import mcp_meta

    config = write_config(tmp_path, "ALLOW_ALL")

    async def agent(run):
        env = mcp_env(run, {k: v for k, v in os.environ.items() if k not in ("SEALBOX_RUN_ID", "SEALBOX_STORE")})
        params = StdioServerParameters(command=sys.executable, args=["-m", "sealbox.cli.main", "gateway", "serve",
                                                                     "--config", config], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            result = await session.call_tool("toy__add", {"a": 2, "b": 40}, meta=mcp_meta(run))
        run.save_state({"listed": "toy__add" in names, "result": result.model_dump(by_alias=True, exclude_none=True)},
                       label="final")

    async with Recorder(store, policy=ALLOW_ALL).run(agent="plain", principal="agent:plain") as run:
        await agent(run)
    assert [(e.step, e.kind) for e in store.read_run(run.run_id)][1:5] == [
        ("2", "tool.call"), ("2", "policy.decision"), ("2", "tool.result"), ("3", "state.saved")]
    result = await Replayer(store).areplay(run.run_id, agent)
    assert result.reproduced, render_divergence(result.divergence)
    assert result.steps_compared == 2
    assert toy_calls(tmp_path) == 1
    state = next(store.resolve(e.payload)["state"] for e in store.read_run(result.new_run_id) if e.kind == "state.saved")
    assert state == {"listed": True, "result": {"content": [{"type": "text", "text": "42"}], "isError": False,
                                                "resultType": "complete", "structuredContent": {"sum": 42}}}


async def test_a_streamable_http_server_is_replayed_with_no_gateway_listening(tmp_path, store):
    """``MCPServerStreamableHttp`` with ``mcp_meta_resolver(run)`` in front of ``gateway serve --http``
    (in-process here): recorded, then replayed once the gateway has stopped (nothing listens at the URL)."""
    import anyio
    from agents.mcp import MCPServerStreamableHttp

    from sealbox.gateway import Gateway
    from sealbox.gateway.transports import serve_http

    from .conftest import toy_config
    from .test_gateway_transports import HTTP, TOKEN

    where: dict = {}

    async def agent(run):
        server = MCPServerStreamableHttp(params={"url": where["url"], "headers": {"authorization": f"Bearer {TOKEN}"}},
                                         tool_meta_resolver=mcp_meta_resolver(run), cache_tools_list=True,
                                         client_session_timeout_seconds=30, name="gateway-http")
        async with server:
            agent = Agent(name="mcp-bot", instructions="Use the tools.",
                          model=script("toy__add", {"a": 2, "b": 40}, "2 + 40 = 42"), mcp_servers=[server])
            result = await Runner.run(instrument(run, agent), "What is 2 + 40?")
        where["input"] = result.to_input_list()

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        where["url"] = f"http://127.0.0.1:{port}/mcp"
        async with Recorder(store, policy=ALLOW_ALL).run(agent="mcp-bot", principal="agent:mcp-bot") as run:
            with anyio.fail_after(60):
                await agent(run)
        tg.cancel_scope.cancel()
    recorded = where.pop("input")
    call = next(e for e in store.read_run(run.run_id) if e.kind == "tool.call")
    assert (call.step, call.principal) == ("2.1", "ci-bot")
    result = await Replayer(store).areplay(run.run_id, agent)
    assert result.reproduced, render_divergence(result.divergence)
    assert result.steps_compared == 3 and where["input"] == recorded
    assert toy_calls(tmp_path) == 1
