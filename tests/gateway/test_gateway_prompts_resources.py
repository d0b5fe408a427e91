"""prompts/* and resources/* through the gateway: listed, routed, decided and recorded like tools/call.

Against the toy upstream with ``TOY_CATALOG=1`` (a real stdio process) and the real
``mcp-server-sqlite`` (its own venv, marked ``pypi_servers``), with the official client.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
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


async def test_a_client_is_told_when_an_upstreams_prompts_and_resources_change(tmp_path, store):
    got: list[str] = []

    async def note(message):
        got.append(getattr(getattr(message, "root", message), "method", ""))

    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg, message_handler=note) as client:
        await client.list_prompts()
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            while not {"notifications/prompts/list_changed", "notifications/resources/list_changed"} <= set(got):
                await anyio.sleep(0.05)
        prompts = [p.name for p in (await client.list_prompts()).prompts]
        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        later = await client.read_resource("toy://notes/later")
    assert prompts == ["toy__farewell", "toy__greet"]
    assert resources == ["toy://notes/later", "toy://notes/today"]
    assert later.contents[0].text == "notes of later"


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


OPS_APPROVE_ALL = """
version: 1
name: ops-approve-all
rules:
  - id: ops-approves
    effect: require_approval
    approval: {groups: [ops]}
"""


async def test_whatif_re_evaluates_a_recorded_prompt_or_read_as_the_gateway_decides_it(tmp_path, store):
    """Under a policy requiring approval, a recorded prompts/get or resources/read would be the deny
    approval_unavailable the gateway records for it (it cannot wait for an approval), not a
    require_approval; a tool call of the same session would be held (require_approval)."""
    from click.testing import CliRunner

    from sealbox.cli.main import cli
    from sealbox.replay.whatif import whatif_policy

    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            await client.get_prompt("toy__greet", {"name": "ada"})
            await client.read_resource("toy://notes/today")
            await client.call_tool("toy__echo", {"text": "hi"})
        [run_id] = gateway_runs(store)
    (tmp_path / "ops.yaml").write_text(OPS_APPROVE_ALL)
    shown = CliRunner().invoke(cli, ["whatif", "--policy", str(tmp_path / "ops.yaml"), run_id, "--json",
                                     "-s", str(tmp_path / "store")])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert (report["evaluated"], report["not_re_evaluable"]) == (3, [])
    assert [(c["step"], c["tool"], c["change"], c["rule"], c["reason"]) for c in report["changed"]] == [
        ("2", "prompt:greet", "allow -> deny", "ops-approves",
         "rule ops-approves requires approval, and a prompts/get cannot wait for one"),
        ("3", "resource:toy://notes/today", "allow -> deny", "ops-approves",
         "rule ops-approves requires approval, and a resources/read cannot wait for one"),
        ("4", "echo", "allow -> require_approval", "ops-approves", "rule 'ops-approves' requires approval for the call")]

    # what the gateway decides under that policy, for the same requests: the same
    store_b = sealbox.init_store(tmp_path / "b" / "store")
    try:
        gw = Gateway(catalog_config(tmp_path / "b"), store=store_b, policy=Policy.from_text(OPS_APPROVE_ALL))
        async with running(gw) as tg:
            async with connect(gw, tg) as client:
                with pytest.raises(MCPError):
                    await client.get_prompt("toy__greet", {"name": "ada"})
                with pytest.raises(MCPError):
                    await client.read_resource("toy://notes/today")
            [denied_run] = gateway_runs(store_b)
        decided = [(e.payload["effect"], e.payload["reason_code"], e.payload["reason"])
                   for e in store_b.read_run(denied_run) if e.kind == "policy.decision"]
        # ...and a same-policy what-if of that record changes nothing
        same = whatif_policy(store_b, Policy.from_text(OPS_APPROVE_ALL), [denied_run])
    finally:
        store_b.close()
    assert decided == [(c["after"], "approval_unavailable", c["reason"]) for c in report["changed"][:2]]
    assert (same.evaluated, same.changed) == (2, ())


async def test_an_unknown_prompt_is_a_protocol_error_with_its_code(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        for name in ("toy__nope", "nope__greet", "greet"):
            with pytest.raises(MCPError) as err:
                await client.get_prompt(name, {})
            assert (err.value.error.code, err.value.error.message) == (codes.UNKNOWN_PROMPT, f"unknown prompt {name!r}")
    assert gateway_runs(store) == []  # nothing recorded: the run starts with its first recorded call


async def test_nothing_is_forwarded_when_a_prompt_or_resource_request_cannot_be_recorded(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.read_resource("toy://notes/today")
        original = store.append_with

        def broken(build):
            raise OSError("disk full")

        store.append_with = broken
        try:
            with pytest.raises(MCPError) as prompt:
                await client.get_prompt("toy__greet", {"name": "ada"})
            with pytest.raises(MCPError) as resource:
                await client.read_resource("toy://notes/monday")
        finally:
            store.append_with = original
    assert prompt.value.error.code == resource.value.error.code == codes.NOT_RECORDED
    assert prompt.value.error.message.startswith("prompts/get toy__greet: not forwarded: it could not be recorded (")
    assert resource.value.error.message.startswith(
        "resources/read toy://notes/monday: not forwarded: it could not be recorded (")
    assert toy_log(tmp_path) == [{"resource": "toy://notes/today"}]


async def test_over_http_prompts_and_resources_are_served_and_recorded_under_the_token_identity(tmp_path, store):
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
                    read = await client.read_resource("toy://notes/today")
        tg.cancel_scope.cancel()
    assert (init.capabilities.prompts is not None, init.capabilities.resources.subscribe) == (True, False)
    assert prompts == ["toy__greet"]
    assert (got.messages[0].content.text, read.contents[0].text) == ("Hello, http!", "buy milk")
    [run_id] = gateway_runs(store)
    calls = [e for e in store.read_run(run_id) if e.kind == "tool.call"]
    assert [(e.principal, e.payload["tool"], e.payload["method"]) for e in calls] == [
        ("ci-bot", "prompt:greet", "prompts/get"), ("ci-bot", "resource:toy://notes/today", "resources/read")]


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
    # topic is declared required: the gateway refuses the request itself, never forwarded (the upstream would
    # answer with JSON-RPC error 0, which the circuit breaker would count against it)
    assert (missing.value.error.code, missing.value.error.message) == (
        types.INVALID_PARAMS, "prompts/get db__mcp-demo: not forwarded: missing required argument: topic")
    assert [m.role for m in got.messages] == ["user"] and "bees" in got.messages[0].content.text
    (_, call), (_, decision), (_, result), (_, failed_call), _, (_, failed) = calls_of(store, run_id)
    assert (call["tool"], call["method"], call["arguments"]) == ("prompt:mcp-demo", "prompts/get", {"topic": "bees"})
    assert (failed_call["arguments"], failed["ok"], failed["error"]["type"]) == ({}, False, "InvalidArguments")
    messages = store.resolve(result["result"]["messages"])  # long: kept as a blob
    assert result["ok"] is True and messages == [m.model_dump(by_alias=True, mode="json", exclude_none=True)
                                                 for m in got.messages]


# ---------------------------------------------------------------------------------------------- resources

NO_NOTES_OF_MONDAY = """
version: 1
name: no-monday
rules:
  - id: no-monday-notes
    match: {server: toy, tool: "resource:toy://notes/*"}
    when: 'call.arguments.uri.endsWith("/monday")'
    effect: deny
  - id: rest-ok
    effect: allow
"""


def two_toys(tmp_path):
    import sys

    from .conftest import toy_args

    ups = "".join(f"""
  - id: {sid}
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_CATALOG: "1", TOY_LOG: {json.dumps(str(tmp_path / (sid + '.log')))}}}
""" for sid in ("toy", "toy2"))
    return toy_config(tmp_path, upstreams=ups)


async def test_resources_and_templates_are_listed_unchanged_and_the_capability_is_announced(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        caps = client.initialize_result.capabilities
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
    assert (caps.resources.subscribe, caps.resources.list_changed) == (False, True)
    assert [(str(r.uri), r.name, r.mime_type) for r in resources] == [("toy://notes/today", "today", "text/plain")]
    assert [(t.uri_template, t.name) for t in templates] == [("toy://notes/{day}", "notes")]


async def test_without_an_upstream_with_resources_no_resources_capability_is_announced(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert client.initialize_result.capabilities.resources is None


async def test_resources_read_is_routed_by_listing_and_template_and_recorded_as_a_call(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            listed = await client.read_resource("toy://notes/today")
            templated = await client.read_resource("toy://notes/monday")
        [run_id] = gateway_runs(store)
    assert [(str(c.uri), c.text) for c in listed.contents] == [("toy://notes/today", "buy milk")]
    assert [(str(c.uri), c.text) for c in templated.contents] == [("toy://notes/monday", "notes of monday")]
    recorded = calls_of(store, run_id)
    calls = [p for k, p in recorded if k == "tool.call"]
    assert [{k: c[k] for k in ("server", "tool", "exposed", "arguments", "method")} for c in calls] == [
        {"server": "toy", "tool": "resource:toy://notes/today", "exposed": "toy://notes/today",
         "arguments": {"uri": "toy://notes/today"}, "method": "resources/read"},
        {"server": "toy", "tool": "resource:toy://notes/monday", "exposed": "toy://notes/monday",
         "arguments": {"uri": "toy://notes/monday"}, "method": "resources/read"}]
    results = [p for k, p in recorded if k == "tool.result"]
    assert [r["result"] for r in results] == [  # as the upstream answered (its SDK adds the cache hints)
        {"contents": [{"uri": "toy://notes/today", "mimeType": "text/plain", "text": "buy milk"}],
         "resultType": "complete", "cacheScope": "private", "ttlMs": 0},
        {"contents": [{"uri": "toy://notes/monday", "mimeType": "text/plain", "text": "notes of monday"}],
         "resultType": "complete", "cacheScope": "private", "ttlMs": 0}]
    extra = store.get_snapshot(store.read_run(run_id)[0].payload["snapshot"])["extra"]["gateway"]
    assert (extra["resources"], extra["resource_templates"]) == (
        [{"server": "toy", "uri": "toy://notes/today", "name": "today", "mimeType": "text/plain"}],
        [{"server": "toy", "uriTemplate": "toy://notes/{day}", "name": "notes", "mimeType": "text/plain"}])
    from click.testing import CliRunner

    from sealbox.cli.main import cli

    out = CliRunner().invoke(cli, ["calls", "--store", str(tmp_path / "store"), "--server", "toy", "--tool",
                                   "resource:toy://notes/*", "--json"])
    assert out.exit_code == 0, out.output
    assert [(r["tool"], r["decision"], r["arguments"]) for r in json.loads(out.output)] == [
        ("resource:toy://notes/today", "allow", {"uri": "toy://notes/today"}),
        ("resource:toy://notes/monday", "allow", {"uri": "toy://notes/monday"})]
    assert sealbox.verify_store(store).ok


async def test_a_denied_resource_read_names_the_rule_and_the_upstream_never_sees_it(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store, policy=Policy.from_text(NO_NOTES_OF_MONDAY))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource("toy://notes/monday")
            ok = await client.read_resource("toy://notes/tuesday")
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    assert err.value.error.message.startswith(
        "resources/read toy://notes/monday: denied by rule no-monday-notes (policy_deny): ")
    assert err.value.error.data["rule"] == "no-monday-notes"
    assert ok.contents[0].text == "notes of tuesday"
    assert toy_log(tmp_path) == [{"resource": "toy://notes/tuesday"}]
    recorded = calls_of(store, run_id)
    assert [(k, p.get("tool"), p.get("effect"), p.get("rule")) for k, p in recorded][:2] == [
        ("tool.call", "resource:toy://notes/monday", None, None),
        ("policy.decision", "resource:toy://notes/monday", "deny", "no-monday-notes")]


async def test_an_unknown_uri_is_a_protocol_error_with_its_code_and_nothing_is_recorded(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        for uri in ("toy://other/today", "toy://notes/a/b", "memo://insights"):
            with pytest.raises(MCPError) as err:
                await client.read_resource(uri)
            assert (err.value.error.code, err.value.error.message) == (
                codes.UNKNOWN_RESOURCE, f"unknown resource {uri!r}: no upstream lists it or has a resource template "
                "matching it")
        with pytest.raises(MCPError) as err:
            await client.read_resource("toy://notes/" + "d" * 9000)  # the template would match it
        assert (err.value.error.code, err.value.error.message) == (
            codes.UNKNOWN_RESOURCE, f"unknown resource {('toy://notes/' + 'd' * 52)!r}… (9012 characters): no upstream "
            "lists it, and URIs longer than 8192 characters are not matched against resource templates")
        with pytest.raises(MCPError) as err:
            await client.send_request(types.SubscribeRequest(params=types.SubscribeRequestParams(
                uri="toy://notes/today")), types.EmptyResult)
        assert err.value.error.code == codes.NOT_SUPPORTED
        assert "resources/subscribe is not supported by the sealbox gateway" in err.value.error.message
    assert gateway_runs(store) == []


async def test_a_uri_two_upstreams_serve_is_ambiguous_and_left_out_of_the_listing(tmp_path, store):
    gw = Gateway(two_toys(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        listed = (await client.list_resources()).resources
        with pytest.raises(MCPError) as listed_twice:
            await client.read_resource("toy://notes/today")
        with pytest.raises(MCPError) as two_templates:
            await client.read_resource("toy://notes/friday")
        prompts = [p.name for p in (await client.list_prompts()).prompts]
    assert listed == []
    assert (listed_twice.value.error.code, listed_twice.value.error.message) == (
        codes.AMBIGUOUS_RESOURCE, "ambiguous resource 'toy://notes/today': listed by toy and toy2")
    assert (two_templates.value.error.code, two_templates.value.error.message) == (
        codes.AMBIGUOUS_RESOURCE, "ambiguous resource 'toy://notes/friday': no upstream lists it, and it matches "
        "resource templates of toy (toy://notes/{day}) and toy2 (toy://notes/{day})")
    assert prompts == ["toy2__greet", "toy__greet"] or prompts == ["toy__greet", "toy2__greet"]
    assert gateway_runs(store) == []


@pytest.mark.pypi_servers
async def test_mcp_server_sqlite_resource_through_the_gateway_and_its_deny(tmp_path, store):
    policy = tmp_path / "policy.yaml"
    policy.write_text("""
version: 1
rules:
  - id: no-memos
    match: {server: db, tool: "resource:memo://*"}
    effect: deny
  - id: rest-ok
    effect: allow
""")
    gw = Gateway(sqlite_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            caps = client.initialize_result.capabilities
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            empty = await client.read_resource("memo://insights")
            await client.call_tool("db__append_insight", {"insight": "bees sell best in May"})
            memo = await client.read_resource("memo://insights")
    assert caps.resources is not None and caps.prompts is not None
    assert listed == ["memo://insights"]
    assert [(str(c.uri), c.text) for c in empty.contents] == [
        ("memo://insights", "No business insights have been discovered yet.")]
    assert [str(c.uri) for c in memo.contents] == ["memo://insights"]
    assert "- bees sell best in May" in memo.contents[0].text
    [run_id] = gateway_runs(store)
    (_, call), (_, decision), (_, result) = calls_of(store, run_id)[6:]
    assert (call["server"], call["tool"], call["method"], call["arguments"]) == (
        "db", "resource:memo://insights", "resources/read", {"uri": "memo://insights"})
    assert result["ok"] is True and result["result"]["contents"][0]["text"] == memo.contents[0].text

    denying = Gateway(sqlite_config(tmp_path, policy=str(policy)), store=store)
    async with running(denying) as tg, connect(denying, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.read_resource("memo://insights")
    assert err.value.error.code == codes.DENIED and err.value.error.data["rule"] == "no-memos"


@pytest.mark.parametrize("template, uri, matches", [
    ("toy://notes/{day}", "toy://notes/monday", True),
    ("toy://notes/{day}", "toy://notes/", False),
    ("toy://notes/{day}", "toy://notes/a/b", False),
    ("toy://notes/{day}", "toy://notes/monday?x=1", False),
    ("file:///{+path}", "file:///a/b.txt", True),
    ("x://{id}{?q,r}", "x://k?q=1&r=2", True),
    ("x://{id}{?q,r}", "x://k", True),
    ("x://{id}{.ext}", "x://k.json.gz", True),
    ("x://{id}{/rest}", "x://k/a/b", True),
    ("x://{id}{#frag}", "x://k#top", True),
    ("x://a.b/{id}", "x://aXb/1", False),  # a literal dot is a dot
    ("x://{a}.{b}", "x://k.v.w", True),
    ("x://{id", "x://{id", True),  # an unclosed brace is text
    ("x://{id", "x://k", False),
])
def test_resource_template_matching(template, uri, matches):
    from sealbox.gateway.server import UriTemplate

    assert UriTemplate(template).matches(uri) is matches


@pytest.mark.parametrize("template", ["x://{.a}", "x://{a}{b}{c}", "x://{a}.{b}.{c}", "x://{a}{.ext}{;p}"])
def test_a_long_uri_that_matches_no_template_is_refused_in_linear_time(template):
    """A regular expression for these templates backtracks: ``x://{a}{b}{c}`` took 19 s for a URI of
    2,048 characters (cubic), ``(?:\\.[^/?#]*)*`` exponentially; the matcher runs a set of states."""
    import time

    from sealbox.gateway.server import UriTemplate

    uri = "x://" + "a." * 4_000 + "/"  # within MAX_TEMPLATE_URI
    started = time.perf_counter()
    assert UriTemplate(template).matches(uri) is False
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("template", ["x://{+a}" + "a" * 248, "x://" + "{+a}" * 63, "x://" + "{+a}a" * 50,
                                      "x://{+a}" + "a/" * 124])
def test_a_template_at_the_length_cap_matches_the_longest_uri_quickly(template):
    """Every resource template of every upstream is tried for an unlisted read: one of 256 characters
    took 0.5 s on a URI of 8,192 (a state per literal character still in play, per URI character)."""
    import time

    from sealbox.gateway.server import MAX_TEMPLATE_LENGTH, MAX_TEMPLATE_URI, UriTemplate

    assert len(template) <= MAX_TEMPLATE_LENGTH
    compiled, uri = UriTemplate(template), "x://" + "a" * (MAX_TEMPLATE_URI - 4)
    took = []
    for _ in range(3):  # CPU time, best of 3: wall-clock took 0.03-0.11 s beside two busy loops on 2 cores
        started = time.process_time()
        assert compiled.matches(uri) is ("/" not in template[4:])
        assert compiled.matches(uri + "b") is template.endswith("}")
        took.append(time.process_time() - started)
    assert min(took) < 0.1, took  # ~0.004 s; the quadratic matcher took 0.5 s


async def test_gateway_replay_serves_the_sessions_tool_calls_leaving_its_prompts_and_reads_out(tmp_path, store):
    """gateway replay serves tools only: the recorded prompts/get and resources/read (tool.calls with a
    method) are not among the calls a replaying client must make again, nor 'missing' when it does not."""
    from .test_gateway_replay import _replay_in_memory

    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            await client.get_prompt("toy__greet", {"name": "ada"})
            await client.call_tool("toy__add", {"a": 2, "b": 40})
            await client.read_resource("toy://notes/today")
            await client.call_tool("toy__echo", {"text": "hi"})
    [run_id] = gateway_runs(store)
    results, replay = await _replay_in_memory(store, run_id, [("toy__add", {"a": 2, "b": 40}),
                                                              ("toy__echo", {"text": "hi"})])
    report = replay.report()
    assert [r.content[0].text for r in results] == ["42", "hi"]
    assert (report["reproduced"], report["divergence"], report["steps_compared"]) == (True, None, 2)
    assert (report["calls_made"], report["calls_recorded"]) == (2, 2)
    assert replay.original_steps == {"2": "3", "3": "5"}


NO_SECRET_NOTES = """
version: 1
name: no-secret-notes
rules:
  - id: no-secret
    match: {server: toy, tool: "resource:toy://notes/secret*"}
    effect: deny
  - id: rest-ok
    effect: allow
"""


@pytest.mark.parametrize("asked", ["toy://notes/%73ecret", "toy://notes/%73%65cret", "TOY://notes/secret",
                                   "Toy://notes/s%65cret"])
async def test_a_read_spelling_a_denied_uri_another_way_is_decided_as_that_uri(tmp_path, store, asked):
    # RFC 3986 §6.2.2: a percent-encoded unreserved character is that character, and the scheme is
    # case-insensitive; an upstream's resource template (the SDK's uri_template unquotes its variables)
    # reads toy://notes/%73ecret as toy://notes/secret. The policy must decide what the upstream is given.
    gw = Gateway(catalog_config(tmp_path), store=store, policy=Policy.from_text(NO_SECRET_NOTES))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource(asked)
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    assert err.value.error.message.startswith(
        "resources/read toy://notes/secret: denied by rule no-secret (policy_deny): ")
    recorded = calls_of(store, run_id)
    assert [(k, p.get("tool"), p.get("effect")) for k, p in recorded] == [
        ("tool.call", "resource:toy://notes/secret", None),
        ("policy.decision", "resource:toy://notes/secret", "deny")]
    assert recorded[0][1]["arguments"] == {"uri": "toy://notes/secret"}
    assert toy_log(tmp_path) == []


async def test_a_read_is_forwarded_as_the_uri_it_was_decided_on(tmp_path, store):
    gw = Gateway(catalog_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            read = await client.read_resource("TOY://notes/%6Donday%2f%7e")
    assert [c.text for c in read.contents] == ["notes of monday%2F~"]
    assert toy_log(tmp_path) == [{"resource": "toy://notes/monday%2F~"}]


async def test_a_resource_template_too_long_to_match_quickly_routes_nothing(tmp_path, store, caplog):
    # matching costs (URI length x template length) steps: an upstream's template of thousands of
    # characters held every session of the gateway for seconds per unlisted read (2000 "{+a}": 8 s)
    long = "toy://long/{+a}" + "b" * 250
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": json.dumps([long])})
    gw = Gateway(config, store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            with pytest.raises(MCPError) as err:
                await client.read_resource("toy://long/x" + "b" * 250)
            monday = await client.read_resource("toy://notes/monday")
    assert templates == ["toy://notes/{day}", long]  # listed unchanged
    assert err.value.error.code == codes.UNKNOWN_RESOURCE
    assert err.value.error.message == (
        f"unknown resource {'toy://long/x' + 'b' * 250!r}: no upstream lists it or has a resource template matching it")
    assert [c.text for c in monday.contents] == ["notes of monday"]
    assert toy_log(tmp_path) == [{"resource": "toy://notes/monday"}]
    assert (f"upstream toy: resource template {long[:32]!r}… ({len(long)} characters) is not used to route reads: "
            "longer than 256 characters") in caplog.text


NO_PRIVATE_FILES = """
version: 1
name: no-private-files
rules:
  - id: no-private
    match: {server: toy, tool: "resource:toy://files/private/*"}
    effect: deny
  - id: rest-ok
    effect: allow
"""


@pytest.mark.parametrize("asked", ["toy://files/public/../private/key", "toy://files/public/%2E%2E/private/key",
                                   "toy://files/./public/../../private/./key"])
async def test_a_read_climbing_out_of_an_allowed_path_is_decided_on_where_it_lands(tmp_path, store, asked):
    # RFC 3986 §6.2.2.3, §5.2.4: dot segments are removed; an upstream serving files resolves them
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": json.dumps(["toy://files/{+path}"])})
    gw = Gateway(config, store=store, policy=Policy.from_text(NO_PRIVATE_FILES))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource(asked)
            public = await client.read_resource("toy://files/a/./b/../c/")
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    assert err.value.error.message.startswith(
        "resources/read toy://files/private/key: denied by rule no-private (policy_deny): ")
    assert [(k, p.get("tool")) for k, p in calls_of(store, run_id)][:2] == [
        ("tool.call", "resource:toy://files/private/key"), ("policy.decision", "resource:toy://files/private/key")]
    assert [c.uri for c in public.contents] == ["toy://files/a/c/"]
    assert toy_log(tmp_path) == [{"resource": "toy://files/a/c/"}]


@pytest.mark.parametrize("uri, normal", [
    ("TOY://notes/%73ecret%2f%7e", "toy://notes/secret%2F~"),
    ("x://h/a/b/../c", "x://h/a/c"), ("x://h/a/..", "x://h/"), ("x://h/./a/", "x://h/a/"),
    ("x://h/../../a", "x://h/a"), ("file:///etc/a/../passwd", "file:///etc/passwd"),
    ("x://h/a/..?q=/../b#f/..", "x://h/?q=/../b#f/.."),  # query and fragment kept
    ("x:a/../b", "x:a/../b"),  # a path not starting with / is left alone
    ("x://h/a..b/.c", "x://h/a..b/.c"), ("memo://Insights", "memo://Insights"),
])
def test_normalize_uri(uri, normal):
    from sealbox.gateway.server import normalize_uri

    assert normalize_uri(uri) == normal


# ---------------------------------------------------------------- one resource, spelled another way

NO_PRIVATE_KEY_EXACT = """
version: 1
name: no-private-key
rules:
  - id: versions-ok
    match: {server: toy, tool: "resource:toy://files/private/key?v=*"}
    effect: allow
  - id: no-private-key
    match: {server: toy, tool: ["resource:toy://files/private/key", "resource:toy://notes/secret"]}
    effect: deny
  - id: ask-ops
    match: {server: toy, tool: "resource:toy://files/held"}
    effect: require_approval
    approval: {groups: [ops]}
  - id: rest-ok
    effect: allow
"""

FILES_TEMPLATE = json.dumps(["toy://files/{+path}"])


@pytest.mark.parametrize("asked, read, rule, code, judged, how", [
    # a fragment is never part of what is read (RFC 3986 §3.5): dropped before anything else
    ("toy://files/private/key#top", "toy://files/private/key", "no-private-key", "policy_deny", None, None),
    ("toy://notes/secret#x", "toy://notes/secret", "no-private-key", "policy_deny", None, None),
    # the rest is read as asked, and judged also as the URI an upstream may take it for
    ("toy://files/private/key?x", "toy://files/private/key?x", "no-private-key", "policy_deny",
     "toy://files/private/key", "without its query"),
    ("toy://files/private/key?v=1", "toy://files/private/key?v=1", "no-private-key", "policy_deny",
     "toy://files/private/key", "without its query"),  # a rule allowing it as asked does not win over the deny
    ("toy://files/private/key/", "toy://files/private/key/", "no-private-key", "policy_deny",
     "toy://files/private/key", "without its trailing slash"),
    ("toy://files/private//key", "toy://files/private//key", "no-private-key", "policy_deny",
     "toy://files/private/key", "without empty path segments"),
    ("toy://files/private%2fkey", "toy://files/private%2Fkey", "no-private-key", "policy_deny",
     "toy://files/private/key", "percent-decoded"),
    ("toy://files/public%2F..%2Fprivate%2Fkey", "toy://files/public%2F..%2Fprivate%2Fkey", "no-private-key",
     "policy_deny", "toy://files/private/key", "percent-decoded"),
    ("toy://files/private/key/?v=1#top", "toy://files/private/key/?v=1", "no-private-key", "policy_deny",
     "toy://files/private/key", "without its query, without its trailing slash"),
    ("toy://files/held?x", "toy://files/held?x", "ask-ops", "approval_unavailable",
     "toy://files/held", "without its query"),
])
async def test_a_read_spelling_a_denied_resource_with_a_suffix_is_denied_naming_the_form_that_decided(
        tmp_path, store, asked, read, rule, code, judged, how):
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": FILES_TEMPLATE})
    gw = Gateway(config, store=store, policy=Policy.from_text(NO_PRIVATE_KEY_EXACT))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource(asked)
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    assert err.value.error.message.startswith(f"resources/read {read}: denied by rule {rule} ({code}): ")
    assert err.value.error.data["rule"] == rule
    recorded = calls_of(store, run_id)
    assert [(k, p["tool"]) for k, p in recorded] == [("tool.call", "resource:" + read),
                                                     ("policy.decision", "resource:" + read)]
    assert recorded[0][1]["arguments"] == {"uri": read}
    decision = recorded[1][1]
    assert (decision["effect"], decision["rule"], decision["reason_code"]) == ("deny", rule, code)
    assert decision.get("judged_as") == (None if judged is None else "resource:" + judged)
    if judged is not None:
        assert decision["reason"].endswith(f"; judged as resource:{judged} (the URI {how})")
        assert f"judged as resource:{judged} (the URI {how})" in err.value.error.message
    assert toy_log(tmp_path) == []
    # what-if under the same policy predicts what the gateway decided
    from sealbox.replay.whatif import whatif_policy

    same = whatif_policy(store, Policy.from_text(NO_PRIVATE_KEY_EXACT), [run_id])
    assert (same.evaluated, same.changed, same.not_re_evaluable) == (1, (), ())


async def test_reads_of_other_resources_with_a_query_or_trailing_slash_are_allowed_as_asked(tmp_path, store):
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": FILES_TEMPLATE})
    gw = Gateway(config, store=store, policy=Policy.from_text(NO_PRIVATE_KEY_EXACT))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            read = await client.read_resource("toy://files/public/key/?v=1#top")
            secret_ish = await client.read_resource("toy://files/private/keys")
        [run_id] = gateway_runs(store)
    assert [c.uri for c in read.contents] == ["toy://files/public/key/?v=1"]
    assert [c.text for c in secret_ish.contents] == ["notes of keys"]
    assert toy_log(tmp_path) == [{"resource": "toy://files/public/key/?v=1"}, {"resource": "toy://files/private/keys"}]
    decisions = [p for k, p in calls_of(store, run_id) if k == "policy.decision"]
    assert [(d["tool"], d["effect"], d["rule"], "judged_as" in d) for d in decisions] == [
        ("resource:toy://files/public/key/?v=1", "allow", "rest-ok", False),
        ("resource:toy://files/private/keys", "allow", "rest-ok", False)]


ONLY_SEARCHES = """
version: 1
name: only-searches
rules:
  - id: searches-ok
    match: {server: toy, tool: "resource:toy://files/search?q=*"}
    effect: allow
"""


async def test_a_form_no_rule_matches_does_not_deny_a_read_a_rule_allows(tmp_path, store):
    # toy://files/search (without its query) matches no rule: that says nothing of the search read
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": FILES_TEMPLATE})
    gw = Gateway(config, store=store, policy=Policy.from_text(ONLY_SEARCHES))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            found = await client.read_resource("toy://files/search?q=bees")
            with pytest.raises(MCPError) as err:
                await client.read_resource("toy://files/search")
        [run_id] = gateway_runs(store)
    assert [c.uri for c in found.contents] == ["toy://files/search?q=bees"]
    assert err.value.error.message.startswith("resources/read toy://files/search: denied (no_match): ")
    decisions = [p for k, p in calls_of(store, run_id) if k == "policy.decision"]
    assert [(d["tool"], d["effect"], d["rule"], d["reason_code"], d.get("judged_as")) for d in decisions] == [
        ("resource:toy://files/search?q=bees", "allow", "searches-ok", "policy_allow", None),
        ("resource:toy://files/search", "deny", None, "no_match", None)]
    assert toy_log(tmp_path) == [{"resource": "toy://files/search?q=bees"}]


@pytest.mark.parametrize("listed, how", [
    ("toy://notes/secret?v=2", "without its query"), ("toy://notes/secret#top", "without its fragment"),
    ("toy://notes/secret/", "without its trailing slash"), ("toy://notes/%73ecret", "normalized"),
])
async def test_a_listed_uri_naming_a_denied_resource_another_way_is_read_as_listed_and_judged_as_that_resource(
        tmp_path, store, listed, how):
    # an upstream's listing is used as written (it is what that upstream serves), and judged as a read is
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_RESOURCES": json.dumps([listed])})
    gw = Gateway(config, store=store, policy=Policy.from_text(NO_PRIVATE_KEY_EXACT))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            assert listed in [r.uri for r in (await client.list_resources()).resources]
            with pytest.raises(MCPError) as err:
                await client.read_resource(listed)
        [run_id] = gateway_runs(store)
    assert err.value.error.message.startswith(f"resources/read {listed}: denied by rule no-private-key (policy_deny): ")
    decision = [p for k, p in calls_of(store, run_id) if k == "policy.decision"]
    assert [(d["tool"], d["effect"], d["rule"], d["judged_as"]) for d in decision] == [
        ("resource:" + listed, "deny", "no-private-key", "resource:toy://notes/secret")]
    assert decision[0]["reason"].endswith(f"; judged as resource:toy://notes/secret (the URI {how})")
    assert toy_log(tmp_path) == []


async def test_whatif_predicts_the_deny_of_a_recorded_read_spelling_a_denied_resource_another_way(tmp_path, store):
    from sealbox.replay.whatif import whatif_policy

    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": FILES_TEMPLATE})
    gw = Gateway(config, store=store)  # ALLOW_ALL: every read recorded and forwarded
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            for uri in ("toy://files/private/key?x", "toy://files/private%2Fkey", "toy://files/private/key/",
                        "toy://files/public/key?x"):
                await client.read_resource(uri)
        [run_id] = gateway_runs(store)
    report = whatif_policy(store, Policy.from_text(NO_PRIVATE_KEY_EXACT), [run_id])
    assert report.evaluated == 4
    assert [(c.step, c.tool, c.before, c.after, c.rule_after, c.reason.rsplit("; ", 1)[-1]) for c in report.changed] == [
        ("2", "resource:toy://files/private/key?x", "allow", "deny", "no-private-key",
         "judged as resource:toy://files/private/key (the URI without its query)"),
        ("3", "resource:toy://files/private%2Fkey", "allow", "deny", "no-private-key",
         "judged as resource:toy://files/private/key (the URI percent-decoded)"),
        ("4", "resource:toy://files/private/key/", "allow", "deny", "no-private-key",
         "judged as resource:toy://files/private/key (the URI without its trailing slash)")]


@pytest.mark.parametrize("name", ["toy__Greet", "TOY__greet", "toy__greet ", " toy__greet", "toy__ greet",
                                  "toy__greet\n", "toy__greet?x"])
async def test_a_prompt_name_spelled_another_way_is_unknown_and_nothing_is_recorded_or_forwarded(
        tmp_path, store, name):
    # prompt names are matched exactly as the upstream lists them (no case folding, no trimming):
    # another spelling names no prompt, so it cannot reach a denied one
    gw = Gateway(catalog_config(tmp_path), store=store, policy=Policy.from_text(NO_GREETING_BOB))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.get_prompt(name, {"name": "bob"})
    assert (err.value.error.code, err.value.error.message) == (codes.UNKNOWN_PROMPT, f"unknown prompt {name!r}")
    assert [e.kind for e in store.read_range(0, store.size()) if e.kind in ("tool.call", "policy.decision")] == []
    assert toy_log(tmp_path) == []


@pytest.mark.parametrize("uri, forms", [
    ("toy://notes/secret", []),
    ("toy://notes/secret?x#f", [("toy://notes/secret?x", "without its fragment"),
                                ("toy://notes/secret", "without its fragment, without its query")]),
    ("toy://a/b%2fc/?q", [("toy://a/b%2Fc/?q", "normalized"), ("toy://a/b%2Fc/", "normalized, without its query"),
                          ("toy://a/b/c/?q", "normalized, percent-decoded"),
                          ("toy://a/b%2Fc?q", "normalized, without its trailing slash"),
                          ("toy://a/b/c/", "normalized, without its query, percent-decoded"),
                          ("toy://a/b%2Fc", "normalized, without its query, without its trailing slash"),
                          ("toy://a/b/c?q", "normalized, percent-decoded, without its trailing slash"),
                          ("toy://a/b/c", "normalized, without its query, percent-decoded, without its trailing slash")]),
    ("toy://files/public%2F..%2Fprivate%2Fkey", [("toy://files/private/key", "percent-decoded")]),
    ("file:///etc//passwd", [("file:///etc/passwd", "without empty path segments")]),
    ("toy://h/", [("toy://h", "without its trailing slash")]),
    ("x:/a/", [("x:/a", "without its trailing slash")]), ("x:/", []),  # no authority: the path "/" stays
    ("TOY://notes/%73ecret", [("toy://notes/secret", "normalized")]),
])
def test_read_forms(uri, forms):
    from sealbox.policy.reads import read_forms

    assert read_forms(uri) == [(uri, ""), *forms]


@pytest.mark.parametrize("asked", ["toy://files%2Fprivate%2Fkey", "toy://files%2fprivate/key",
                                   "toy://files%2F%2Fprivate%2Fkey?x"])
async def test_a_read_with_2f_where_the_authority_ends_is_judged_as_the_resource_a_template_reads(
        tmp_path, store, asked):
    # toy://{+path} matches toy://files%2Fprivate%2Fkey with path = "files/private/key", as it matches
    # toy://files/private/key: %2F before the first "/" (text the URI's authority) reads the same resource
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": json.dumps(["toy://{+path}"])})
    gw = Gateway(config, store=store, policy=Policy.from_text(NO_PRIVATE_KEY_EXACT))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource(asked)
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    decision = [p for k, p in calls_of(store, run_id) if k == "policy.decision"]
    assert [(d["effect"], d["rule"], d["judged_as"]) for d in decision] == [
        ("deny", "no-private-key", "resource:toy://files/private/key")]
    assert toy_log(tmp_path) == []
    from sealbox.replay.whatif import whatif_policy

    same = whatif_policy(store, Policy.from_text(NO_PRIVATE_KEY_EXACT), [run_id])
    assert (same.evaluated, same.changed, same.not_re_evaluable) == (1, (), ())


ESCAPED_NAMES = """
version: 1
name: escaped-names
rules:
  - id: no-drafts
    match: {server: toy, tool: ["resource:toy://files/draft(1)", "resource:toy://files/my notes", "resource:toy://files/café"]}
    effect: deny
  - id: rest-ok
    effect: allow
"""


@pytest.mark.parametrize("asked, judged", [
    ("toy://files/draft%281%29", "toy://files/draft(1)"), ("toy://files/draft%281)", "toy://files/draft(1)"),
    ("toy://files/my%20notes", "toy://files/my notes"), ("toy://files/caf%C3%A9", "toy://files/café"),
    ("toy://files/caf%c3%a9?x", "toy://files/café"),
])
async def test_a_read_percent_encoding_a_character_a_rule_names_is_judged_as_the_resource_a_template_reads(
        tmp_path, store, asked, judged):
    # the MCP SDK's UriTemplate.match percent-decodes every variable: it reads both spellings as one resource
    from mcp.shared.uri_template import UriTemplate

    template = UriTemplate.parse("toy://files/{+path}")
    assert template.match(asked.partition("?")[0]) == template.match(judged)
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": FILES_TEMPLATE})
    gw = Gateway(config, store=store, policy=Policy.from_text(ESCAPED_NAMES))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource(asked)
            await client.read_resource("toy://files/draft%282%29")  # another resource: allowed
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    decision = [p for k, p in calls_of(store, run_id) if k == "policy.decision"]
    assert [(d["effect"], d["rule"], d.get("judged_as")) for d in decision] == [
        ("deny", "no-drafts", "resource:" + judged), ("allow", "rest-ok", None)]
    assert toy_log(tmp_path) == [{"resource": "toy://files/draft%282%29"}]
    from sealbox.replay.whatif import whatif_policy

    same = whatif_policy(store, Policy.from_text(ESCAPED_NAMES), [run_id])
    assert (same.evaluated, same.changed, same.not_re_evaluable) == (2, (), ())


NO_PASSWD = """
version: 1
name: no-passwd
rules:
  - id: no-passwd
    match: {server: toy, tool: ["resource:file:///etc/passwd", "resource:https://intra.example/admin"]}
    effect: deny
  - id: rest-ok
    effect: allow
"""


@pytest.mark.parametrize("asked, judged", [
    ("file:/etc/passwd", "file:///etc/passwd"), ("file://localhost/etc/passwd", "file:///etc/passwd"),
    ("file://LocalHost/etc/passwd?x", "file:///etc/passwd"), ("file:///etc\\passwd", "file:///etc/passwd"),
    ("file:///tmp\\..\\etc/passwd", "file:///etc/passwd"), ("file:etc/passwd", "file:///etc/passwd"),
    ("https://INTRA.example:443/admin", "https://intra.example/admin"),
    ("https://intra.example:/admin/", "https://intra.example/admin"),
    ("https://intra.example\\admin", "https://intra.example/admin"),
])
async def test_a_file_or_http_url_spelled_as_a_url_parser_reads_another_way_is_judged_as_that_url(
        tmp_path, store, asked, judged):
    # a URL parser (WHATWG URL, as `new URL()`; RFC 8089 for file:) reads both spellings as one URL
    import urllib.parse

    if asked.startswith("file:/") and "\\" not in asked:
        assert urllib.parse.urlparse(asked).path == urllib.parse.urlparse(judged).path
    config = toy_config(tmp_path, env={"TOY_CATALOG": "1", "TOY_TEMPLATES": json.dumps(["file:{+path}", "https:{+rest}"])})
    gw = Gateway(config, store=store, policy=Policy.from_text(NO_PASSWD))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(MCPError) as err:
                await client.read_resource(asked)
            await client.read_resource("file:///etc/hosts")  # another file: allowed
        [run_id] = gateway_runs(store)
    assert err.value.error.code == codes.DENIED
    decision = [p for k, p in calls_of(store, run_id) if k == "policy.decision"]
    assert [(d["effect"], d["rule"], d.get("judged_as")) for d in decision] == [
        ("deny", "no-passwd", "resource:" + judged), ("allow", "rest-ok", None)]
    assert toy_log(tmp_path) == [{"resource": "file:///etc/hosts"}]


async def test_prompts_get_and_resources_read_in_flight_at_a_stop_get_the_shutdown_grace_as_tools_call(
        tmp_path, store):
    """At SIGINT / SIGTERM a tools/call written to its upstream gets the shutdown grace (5 s), then is answered and
    recorded CutAtShutdown; one made once the stop began is answered at once, not forwarded (GatewayStopping).
    A prompts/get or resources/read was not: the stop waited its grace + 1 s for it in vain (it did not end
    until limits.call_timeout_s, here 60 s) and the connection closed with it unanswered, its tool.result not
    recorded. Both now end as a tools/call does (the stop is what Gateway.drain_calls does on a signal)."""
    import time

    from mcp.shared.exceptions import MCPError

    from sealbox.gateway.codes import UPSTREAM_ERROR

    gw = Gateway(catalog_config(tmp_path), store=store)
    got: dict[str, Any] = {}
    async with running(gw) as tg, connect(gw, tg) as client:
        async def ask(name, request):
            try:
                got[name] = await request()
            except MCPError as exc:
                got[name] = (exc.error.code, exc.error.message, exc.error.data)

        async with anyio.create_task_group() as asks:
            asks.start_soon(ask, "prompt", lambda: client.get_prompt("toy__greet", {"name": "!hang"}))
            asks.start_soon(ask, "resource", lambda: client.read_resource("toy://notes/hang"))
            with anyio.fail_after(30):
                while len([line for line in toy_log(tmp_path) if "prompt" in line or "resource" in line]) < 2:
                    await anyio.sleep(0.02)
            started = time.monotonic()
            await gw.drain_calls()
            took = time.monotonic() - started
            with anyio.fail_after(5):  # answered by then (the stop writes the replies, then closes the connection)
                while len(got) < 2:
                    await anyio.sleep(0.02)
            await ask("late", lambda: client.get_prompt("toy__greet", {"name": "ada"}))
        [run_id] = gateway_runs(store)
    cut = ("upstream toy had not answered when the gateway stopped (shutdown grace 5 s); the call was sent, so it "
           "may have been carried out: check before calling again")
    stopping = ("not forwarded: the gateway is stopping (the call was never written to upstream toy); call again "
                "once it is back")
    assert got == {
        "prompt": (UPSTREAM_ERROR, "prompts/get toy__greet: upstream error: " + cut, {"type": "CutAtShutdown"}),
        "resource": (UPSTREAM_ERROR, "resources/read toy://notes/hang: upstream error: " + cut,
                     {"type": "CutAtShutdown"}),
        "late": (UPSTREAM_ERROR, "prompts/get toy__greet: " + stopping, {"type": "GatewayStopping"}),
    }
    assert took < 30  # the grace (5 s), not call_timeout_s (60 s)
    results = sorted((p["ok"], p["error"]["type"], p["error"]["message"]) for k, p in calls_of(store, run_id)
                     if k == "tool.result")
    assert results == sorted([(False, "CutAtShutdown", cut), (False, "CutAtShutdown", cut),
                              (False, "GatewayStopping", stopping)])
