"""prompts/* through the gateway: listed, routed, decided and recorded like tools/call.

Against the toy upstream with ``TOY_CATALOG=1`` (a real stdio process) and the real
``mcp-server-sqlite`` (its own venv, marked ``pypi_servers``), with the official client.
"""

from __future__ import annotations

import json

import anyio
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import Gateway, parse_config
from sealbox.gateway import codes
from sealbox.policy import Policy

from .conftest import connect, gateway_runs, kinds, running, toy_config, toy_log

pytestmark = pytest.mark.anyio

NO_GREETING_BOB = """
version: 1
name: no-bob
rules:
  - id: no-greeting-bob
    match: {server: toy, tool: "prompt:greet"}
    when: 'call.arguments.name == "bob"'
    effect: deny
  - id: rest-ok
    effect: allow
"""


def catalog_config(tmp_path, **kwargs):
    return toy_config(tmp_path, env={"TOY_CATALOG": "1"}, **kwargs)


def calls_of(store, run_id):
    return [(e.kind, e.payload) for e in store.read_run(run_id)
            if e.kind in ("tool.call", "policy.decision", "tool.result")]


async def test_prompts_are_listed_under_exposed_names_and_the_capability_is_announced(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        caps = client.initialize_result.capabilities
        listed = (await client.list_prompts()).prompts
    assert caps.prompts is not None and caps.prompts.list_changed is True
    assert [(p.name, p.description, [(a.name, a.required) for a in p.arguments]) for p in listed] == [
        ("toy__greet", "Greet someone.", [("name", True)])]


async def test_without_an_upstream_with_prompts_no_prompts_capability_is_announced(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        caps = client.initialize_result.capabilities
    assert caps.prompts is None and caps.tools is not None


async def test_a_client_is_told_when_an_upstreams_prompts_change(tmp_path, store):
    got: list[str] = []

    async def note(message):
        got.append(getattr(getattr(message, "root", message), "method", ""))

    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg, message_handler=note) as client:
        await client.list_prompts()
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            while "notifications/prompts/list_changed" not in got:
                await anyio.sleep(0.05)
        prompts = [p.name for p in (await client.list_prompts()).prompts]
    assert prompts == ["toy__farewell", "toy__greet"]


async def test_prompts_get_is_recorded_as_a_call_and_forwarded(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            got = await client.get_prompt("toy__greet", {"name": "ada"})
        [run_id] = gateway_runs(store)
    assert got.description == "A greeting."
    assert [(m.role, m.content.text) for m in got.messages] == [("user", "Hello, ada!")]
    assert kinds(store, run_id) == [("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"),
                                    ("2", "tool.result"), ("3", "run.ended")]
    (_, call), (_, decision), (_, result) = calls_of(store, run_id)
    assert {k: call[k] for k in ("server", "tool", "exposed", "arguments", "method")} == {
        "server": "toy", "tool": "prompt:greet", "exposed": "toy__greet", "arguments": {"name": "ada"},
        "method": "prompts/get"}
    assert (decision["effect"], decision["rule"], decision["call_id"]) == ("allow", "allow-all", call["call_id"])
    assert result["ok"] is True and result["result"] == {
        "description": "A greeting.", "messages": [{"role": "user", "content": {"type": "text", "text": "Hello, ada!"}}],
        "resultType": "complete"}
    rows = store.query_calls(server="toy", tool="prompt:*")
    assert [(r["tool"], r["decision"]) for r in rows] == [("prompt:greet", "allow")]
    started = store.read_run(run_id)[0].payload
    assert store.get_snapshot(started["snapshot"])["extra"]["gateway"]["prompts"] == [
        {"server": "toy", "name": "greet", "description": "Greet someone.",
         "arguments": [{"name": "name", "description": "Who to greet.", "required": True}]}]
    assert sealbox.verify_store(store).ok


async def test_a_denied_prompt_is_a_protocol_error_naming_the_rule_and_is_not_forwarded(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store, policy=Policy.from_text(NO_GREETING_BOB))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.get_prompt("toy__greet", {"name": "bob"})
            ok = await client.get_prompt("toy__greet", {"name": "ada"})
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    assert err.value.error.message.startswith("prompts/get toy__greet: denied by rule no-greeting-bob (policy_deny)")
    assert err.value.error.data["rule"] == "no-greeting-bob"
    assert ok.messages[0].content.text == "Hello, ada!"
    recorded = calls_of(store, run_id)
    assert [(k, p.get("tool"), p.get("effect"), p.get("ok")) for k, p in recorded] == [
        ("tool.call", "prompt:greet", None, None), ("policy.decision", "prompt:greet", "deny", None),
        ("tool.call", "prompt:greet", None, None), ("policy.decision", "prompt:greet", "allow", None),
        ("tool.result", None, None, True)]
    assert err.value.error.data["call_id"] == recorded[0][1]["call_id"]
    assert toy_log(tmp_path) == [{"prompt": "greet", "arguments": {"name": "ada"}}]


async def test_require_approval_on_a_prompt_is_recorded_as_a_deny_approval_unavailable(tmp_path, store):
    policy = Policy.from_text("""
version: 1
rules:
  - id: prompts-need-ops
    match: {tool: "prompt:*"}
    effect: require_approval
    approval: {groups: [ops]}
""")
    gw = Gateway(catalog_config(tmp_path), store=store, policy=policy)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.get_prompt("toy__greet", {"name": "ada"})
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    assert err.value.error.message.startswith(
        "prompts/get toy__greet: denied by rule prompts-need-ops (approval_unavailable): rule prompts-need-ops "
        "requires approval, and a prompts/get cannot wait for one [call ")
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "run.ended"]


async def test_an_unknown_prompt_is_a_protocol_error_with_its_code(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        for name in ("toy__nope", "nope__greet", "greet"):
            with pytest.raises(MCPError) as err:
                await client.get_prompt(name, {})
            assert (err.value.error.code, err.value.error.message) == (codes.UNKNOWN_PROMPT, f"unknown prompt {name!r}")
    assert gateway_runs(store) == []  # nothing recorded: the run starts with its first recorded call


async def test_nothing_is_forwarded_when_a_prompt_request_cannot_be_recorded(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.get_prompt("toy__greet", {"name": "first"})
        original = store.append_with

        def broken(build):
            raise OSError("disk full")

        store.append_with = broken
        try:
            with pytest.raises(MCPError) as prompt:
                await client.get_prompt("toy__greet", {"name": "ada"})
        finally:
            store.append_with = original
    assert prompt.value.error.code == codes.NOT_RECORDED
    assert prompt.value.error.message.startswith("prompts/get toy__greet: not forwarded: it could not be recorded (")
    assert toy_log(tmp_path) == [{"prompt": "greet", "arguments": {"name": "first"}}]


async def test_over_http_prompts_are_served_and_recorded_under_the_token_identity(tmp_path, store):
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from sealbox.gateway.transports import serve_http

    token = "t0ken-for-the-tests-0123456789"
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1"},
                        extra=f"http:\n  tokens:\n    - {{token: {token}, identity: ci-bot}}\n")
    gw = Gateway(config, store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"})
        async with http, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w):
            async with ClientSession(r, w) as client:
                with anyio.fail_after(20):
                    init = await client.initialize()
                    prompts = [p.name for p in (await client.list_prompts()).prompts]
                    got = await client.get_prompt("toy__greet", {"name": "http"})
        tg.cancel_scope.cancel()
    assert init.capabilities.prompts is not None
    assert prompts == ["toy__greet"]
    assert got.messages[0].content.text == "Hello, http!"
    [run_id] = gateway_runs(store)
    calls = [e for e in store.read_run(run_id) if e.kind == "tool.call"]
    assert [(e.principal, e.payload["tool"], e.payload["method"]) for e in calls] == [
        ("ci-bot", "prompt:greet", "prompts/get")]


def sqlite_config(tmp_path, policy: str = "ALLOW_ALL"):
    from .upstream_venvs import server_command

    return parse_config(f"""
version: 1
store: {json.dumps(str(tmp_path / 'store'))}
policy: {json.dumps(policy)}
upstreams:
  - id: db
    command: {json.dumps(server_command("sqlite"))}
    args: ["--db-path", {json.dumps(str(tmp_path / "data.db"))}]
""", base=tmp_path)


@pytest.mark.pypi_servers
async def test_mcp_server_sqlite_prompt_through_the_gateway(tmp_path, store):
    gw = Gateway(sqlite_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            names = [p.name for p in (await client.list_prompts()).prompts]
            got = await client.get_prompt("db__mcp-demo", {"topic": "bees"})
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("db__mcp-demo", {})
        [run_id] = gateway_runs(store)
    assert names == ["db__mcp-demo"]
    assert missing.value.error.code == codes.UPSTREAM_ERROR
    assert missing.value.error.message.startswith("prompts/get db__mcp-demo: upstream error: upstream db answered "
                                                  "with JSON-RPC error ")
    assert "Missing required argument: topic" in missing.value.error.message
    assert [m.role for m in got.messages] == ["user"] and "bees" in got.messages[0].content.text
    (_, call), (_, decision), (_, result), (_, failed_call), _, (_, failed) = calls_of(store, run_id)
    assert (call["tool"], call["method"], call["arguments"]) == ("prompt:mcp-demo", "prompts/get", {"topic": "bees"})
    assert (failed_call["arguments"], failed["ok"], failed["error"]["type"]) == ({}, False, "UpstreamProtocolError")
    messages = store.resolve(result["result"]["messages"])  # long: kept as a blob
    assert result["ok"] is True and messages == [m.model_dump(by_alias=True, mode="json", exclude_none=True)
                                                 for m in got.messages]
