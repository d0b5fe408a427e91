"""Interop: an OpenAI Agents SDK agent (``MCPServerStdio`` launching ``sealbox gateway serve``) calls tools
through the gateway, with a scripted model; the gateway joins the SDK-recorded run (``mcp_env(run)``).

One run then holds the SDK's ``model.call`` events and the gateway's ``tool.call`` / ``policy.decision`` /
``tool.result`` events. The second test holds a call for an approval longer than the SDK's default 5 s
client timeout would allow, answered by an approver identity from another thread.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.mcp import MCPServerStdio  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

import sealbox  # noqa: E402
from sealbox.approvals import answer, list_approvals  # noqa: E402
from sealbox.identities import add_identity  # noqa: E402
from identity_testkit import admin_key
from sealbox.integrations.openai_agents import instrument, mcp_env  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402

from .conftest import toy_args  # noqa: E402

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)


class ScriptedModel(Model):
    def __init__(self, responses: list[ModelResponse]) -> None:
        self.responses, self.inputs = list(responses), []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
        self.inputs.append(input)
        return self.responses.pop(0)

    def stream_response(self, *args, **kwargs):  # pragma: no cover - not used
        raise NotImplementedError


def _response(output: list, rid: str) -> ModelResponse:
    return ModelResponse(output=output, usage=Usage(requests=1, input_tokens=50, output_tokens=10, total_tokens=60),
                         response_id=rid)


def script(tool: str, arguments: dict, final: str) -> ScriptedModel:
    return ScriptedModel([
        _response([ResponseFunctionToolCall(id="fc_1", call_id="call_1", type="function_call", name=tool,
                                            arguments=json.dumps(arguments), status="completed")], "resp_1"),
        _response([ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=final,
                                                                     annotations=[])])], "resp_2"),
    ])


def write_config(tmp_path, policy: str, hold: float = 4) -> str:
    (tmp_path / "policy.yaml").write_text(policy) if policy != "ALLOW_ALL" else None
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(f"""
version: 1
store: {json.dumps(str(tmp_path / 'store'))}
policy: {json.dumps('ALLOW_ALL' if policy == 'ALLOW_ALL' else str(tmp_path / 'policy.yaml'))}
principal: agent:desktop-gateway
limits: {{approval_hold_s: {hold}}}
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_LOG: {json.dumps(str(tmp_path / 'toy.log'))}}}
""")
    return str(cfg)


def gateway_server(run, config: str, timeout: float) -> MCPServerStdio:
    env = mcp_env(run, {k: v for k, v in os.environ.items() if k not in ("SEALBOX_RUN_ID", "SEALBOX_STORE")})
    return MCPServerStdio(params={"command": sys.executable,
                                  "args": ["-m", "sealbox.cli.main", "gateway", "serve", "--config", config],
                                  "env": env},
                          client_session_timeout_seconds=timeout, cache_tools_list=True, name="sealbox-gateway")


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def summary(store, run_id):
    return [(e.kind, e.principal, store.resolve(e.payload)) for e in store.read_run(run_id)]


async def test_an_agents_sdk_agent_calls_tools_through_the_gateway_in_one_run(tmp_path, store):
    config = write_config(tmp_path, "ALLOW_ALL")
    model = script("toy__add", {"a": 2, "b": 40}, "2 + 40 = 42")
    async with Recorder(store, policy=ALLOW_ALL).run(agent="mcp-bot", principal="agent:mcp-bot") as run:
        async with gateway_server(run, config, timeout=30) as server:
            agent = Agent(name="mcp-bot", instructions="Use the tools.", model=model, mcp_servers=[server])
            result = await Runner.run(instrument(run, agent), "What is 2 + 40?")
    assert result.final_output == "2 + 40 = 42"
    events = summary(store, run.run_id)
    ks = [k for k, _, _ in events]
    assert ks == ["run.started", "model.call", "tool.call", "policy.decision", "tool.result", "model.call",
                  "run.ended"]
    call = next(p for k, _, p in events if k == "tool.call")
    assert (call["server"], call["tool"], call["exposed"], call["arguments"]) == ("toy", "add", "toy__add",
                                                                                  {"a": 2, "b": 40})
    assert next(pr for k, pr, _ in events if k == "tool.call") == "agent:desktop-gateway"
    res = next(p for k, _, p in events if k == "tool.result")
    assert res["ok"] is True and res["result"]["structuredContent"] == {"sum": 42}
    # the model saw the gateway's tool under its exposed name, and then its result
    models = [p for k, _, p in events if k == "model.call"]
    assert "toy__add" in json.dumps(models[0]["request"]) and "42" in json.dumps(models[1]["request"])
    assert sealbox.verify_store(store).ok


async def test_an_agents_sdk_call_held_for_an_approval_longer_than_the_default_client_timeout(tmp_path, store):
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    policy = """
version: 1
rules:
  - id: echo-needs-ops
    match: {server: toy, tool: echo}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: rest-ok
    effect: allow
"""
    config = write_config(tmp_path, policy, hold=20)
    model = script("toy__echo", {"text": "deploy"}, "done")

    def approver() -> None:  # a person, elsewhere, answering after more than 5 s
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pending = list_approvals(store, pending=True)
            if pending:
                time.sleep(6)
                answer(store, pending[0].approval_id, "approve", "ok to deploy", key)
                return
            time.sleep(0.1)

    t = threading.Thread(target=approver, daemon=True)
    t.start()
    async with Recorder(store, policy=ALLOW_ALL).run(agent="mcp-bot", principal="agent:mcp-bot") as run:
        # the SDK's default client_session_timeout_seconds (5 s) would give up; the hold is 20 s
        async with gateway_server(run, config, timeout=30) as server:
            agent = Agent(name="mcp-bot", instructions="Use the tools.", model=model, mcp_servers=[server])
            result = await Runner.run(instrument(run, agent), "Deploy.")
    t.join(5)
    assert result.final_output == "done"
    ks = [k for k, _, _ in summary(store, run.run_id)]
    assert ks == ["run.started", "model.call", "tool.call", "policy.decision", "approval.requested", "run.suspended",
                  "approval.answered", "run.resumed", "tool.result", "model.call", "run.ended"]
    res = next(p for k, _, p in summary(store, run.run_id) if k == "tool.result")
    assert res["ok"] is True and res["result"]["content"][0]["text"] == "deploy"
    assert (tmp_path / "toy.log").read_text().count('"echo"') == 1
