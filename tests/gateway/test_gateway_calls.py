"""tools/list and tools/call through the gateway, against the toy upstream (a real stdio process)."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import MALFORMED_REQUEST, REQUEST_TOO_LARGE, UNKNOWN_RUN, UNKNOWN_TOOL, Gateway
from sealbox.gateway.codes import UPSTREAM_ERROR
from sealbox.policy import Policy

import json
import sys

from .conftest import MALFORMED_PARAMS_WARNING, connect, gateway_runs, kinds, running, text_of, toy_args, toy_config, toy_log

pytestmark = pytest.mark.anyio

DENY_ECHO = """
version: 1
name: no-echo
rules:
  - id: no-echo-secrets
    match: {server: toy, tool: echo}
    when: 'call.arguments.text.contains("secret")'
    effect: deny
  - id: rest-ok
    effect: allow
"""


async def test_tools_list_is_the_union_under_exposed_names(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        names = [t.name for t in (await client.list_tools()).tools]
    assert names == ["toy__add", "toy__ask", "toy__crash", "toy__echo", "toy__garbage", "toy__hang", "toy__header",
                     "toy__mutate", "toy__roots", "toy__sample", "toy__slow"]


async def test_an_allowed_call_is_recorded_call_decision_result_in_order_then_the_run_ends(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            result = await client.call_tool("toy__add", {"a": 2, "b": 40})
        [run_id] = gateway_runs(store)
    assert (result.is_error, text_of(result), result.structured_content) == (False, "42", {"sum": 42})
    assert kinds(store, run_id) == [("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"),
                                    ("2", "tool.result"), ("3", "run.ended")]
    events = store.read_run(run_id)
    started, call, decision, res = (e.payload for e in events[:4])
    assert started["labels"]["mcp.client.name"] == "mcp" and started["agent"] == "mcp"
    assert events[1].principal == "agent:test-client"
    assert (call["server"], call["tool"], call["exposed"], call["arguments"]) == ("toy", "add", "toy__add", {"a": 2, "b": 40})
    assert (decision["effect"], decision["rule"]) == ("allow", "allow-all")
    assert res["ok"] is True and res["result"]["structuredContent"] == {"sum": 42}
    snapshot = store.get_snapshot(started["snapshot"])
    assert sorted(t["name"] for t in snapshot["tools"] if t["server"] == "toy")[:2] == ["add", "ask"]
    assert sealbox.verify_store(store).ok


async def test_a_deny_names_the_rule_and_the_upstream_never_sees_the_call(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store, policy=Policy.from_text(DENY_ECHO))
    async with running(gw) as tg, connect(gw, tg) as client:
        denied = await client.call_tool("toy__echo", {"text": "the secret"})
        allowed = await client.call_tool("toy__echo", {"text": "hello"})
    assert denied.is_error is True
    assert "no-echo-secrets" in text_of(denied) and "policy_deny" in text_of(denied)
    assert denied.meta["sealbox/decision"]["rule"] == "no-echo-secrets"
    assert (allowed.is_error, text_of(allowed)) == (False, "hello")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "hello"}}]
    [run_id] = gateway_runs(store)
    assert [k for _, k in kinds(store, run_id)][1:4] == ["tool.call", "policy.decision", "tool.call"]


async def test_an_unknown_tool_is_a_jsonrpc_error_with_a_gateway_code(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        for name in ("toy__nope", "nope__echo", "echo"):
            with pytest.raises(MCPError) as err:
                await client.call_tool(name, {})
            assert err.value.code == UNKNOWN_TOOL and -32019 <= err.value.code <= -32003
    assert gateway_runs(store) == []  # nothing recorded for a protocol error


async def test_a_request_above_the_size_limit_is_a_jsonrpc_error_and_not_recorded(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="limits: {max_request_bytes: 2048}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "x" * 5000})
        small = await client.call_tool("toy__echo", {"text": "x" * 100})
    assert err.value.code == REQUEST_TOO_LARGE
    assert small.is_error is False
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "x" * 100}}]


async def test_a_malformed_tools_call_is_a_jsonrpc_error(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        # sent as a dict on purpose (no name): pydantic warns as it serializes it
        with pytest.warns(UserWarning, match=MALFORMED_PARAMS_WARNING), pytest.raises(MCPError) as err:
            await client.send_request(types.CallToolRequest(params=types.CallToolRequestParams(name="toy__echo",
                                                                                               arguments=None)).model_copy(
                update={"params": {"arguments": {"text": "no name"}}}), types.CallToolResult)
    assert err.value.code == MALFORMED_REQUEST


async def test_arguments_failing_the_input_schema_are_recorded_and_answered_is_error_without_forwarding(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        result = await client.call_tool("toy__add", {"a": "two", "b": 3})
    assert result.is_error is True and "input schema" in text_of(result) and "a: 'two' is not of type 'integer'" in text_of(result)
    assert toy_log(tmp_path) == []
    [run_id] = gateway_runs(store)
    res = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"][0]
    assert (res["ok"], res["error"]["type"], res["error"]["message"], "result" in res) == (
        False, "InvalidArguments", "arguments do not match the input schema of toy__add: a: 'two' is not of type 'integer'",
        False)
    assert result.meta == {"sealbox/not_forwarded": "invalid_arguments"}


async def test_a_schema_refused_call_records_its_refusal_without_sealbox_s_traceback(tmp_path, store):
    """Arguments failing the input schema are the client's mistake: the tool.result recorded the refusal with a
    traceback of Sealbox's own code (recorder.py raising it), bulk and noise. It records type and message only;
    a real failure of the tool (the upstream answering a JSON-RPC error) keeps its traceback."""
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        refused = await client.call_tool("toy__add", {"a": "two", "b": 3})
        failed = await client.call_tool("toy__echo", {"text": "!rpc -32603 boom"})
    assert refused.is_error is True and failed.is_error is True
    [run_id] = gateway_runs(store)
    refused_res, failed_res = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert refused_res["error"] == {
        "type": "InvalidArguments",
        "message": "arguments do not match the input schema of toy__add: a: 'two' is not of type 'integer'"}
    assert failed_res["error"]["type"] == "UpstreamProtocolError"
    assert failed_res["error"]["traceback"].startswith("Traceback (most recent call last):")


async def test_a_call_joins_an_existing_run_named_in_meta(tmp_path, store):
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    agent_run.start()
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "joined"}, meta={"sealbox/run_id": agent_run.run_id})
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "x"}, meta={"sealbox/run_id": "no-such-run"})
    assert err.value.code == UNKNOWN_RUN
    assert [k for _, k in kinds(store, agent_run.run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result"]
    assert gateway_runs(store) == [agent_run.run_id]  # no run of its own for the session


async def test_a_session_cannot_join_the_run_of_another_connected_session(tmp_path, store):
    """Two sessions recording into one run would each number its steps (both recorded a call at
    step 3); once the owning session is gone and its run has ended, the run is unknown to joins."""
    from sealbox.gateway import RUN_IN_USE

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as other:
            async with connect(gw, tg) as owner:
                await owner.call_tool("toy__echo", {"text": "A1"})
                [run_id] = gateway_runs(store)
                with pytest.raises(MCPError) as in_use:
                    await other.call_tool("toy__echo", {"text": "B1"}, meta={"sealbox/run_id": run_id})
                named = await owner.call_tool("toy__echo", {"text": "A2"}, meta={"sealbox/run_id": run_id})
                await owner.call_tool("toy__echo", {"text": "A3"})
            for _ in range(100):
                if [k for _, k in kinds(store, run_id)][-1] == "run.ended":
                    break
                await anyio.sleep(0.05)
            with pytest.raises(MCPError) as ended:
                await other.call_tool("toy__echo", {"text": "B2"}, meta={"sealbox/run_id": run_id})
    assert (in_use.value.code, str(in_use.value)) == (RUN_IN_USE, f"run {run_id} is the run of another MCP session "
                                                      "of this gateway that is still connected; only that session "
                                                      "records into it")
    assert named.is_error is False
    assert ended.value.code == UNKNOWN_RUN and str(ended.value) == f"run {run_id} has ended; it cannot be continued"
    calls = [(e.step, e.payload["arguments"]) for e in store.read_run(run_id) if e.kind == "tool.call"]
    assert calls == [("2", {"text": "A1"}), ("3", {"text": "A2"}), ("4", {"text": "A3"})]
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": t}} for t in ("A1", "A2", "A3")]


async def test_a_joined_run_that_ended_since_is_an_unknown_run(tmp_path, store):
    """The gateway keeps the context of a run it joined; the run's own process ending it is noticed."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    agent_run.start()
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        first = await client.call_tool("toy__echo", {"text": "joined"}, meta={"sealbox/run_id": agent_run.run_id})
        agent_run.end("ok")
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "late"}, meta={"sealbox/run_id": agent_run.run_id})
    assert first.is_error is False
    assert (err.value.code, str(err.value)) == (UNKNOWN_RUN, f"run {agent_run.run_id} has ended; it cannot be continued")
    assert [k for _, k in kinds(store, agent_run.run_id)] == [
        "run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]


async def test_a_joined_call_is_recorded_under_the_step_and_call_id_given_in_meta(tmp_path, store):
    """_meta "sealbox/step" and "sealbox/call_id": the step the driving process's model call gave the call;
    the gateway records the call there, not at a new top-level step of its own."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    agent_run.start()
    record = agent_run.model_call({"model": "m", "input": []}, {"object": "response", "id": "r1", "model": "m",
                                  "output": [{"type": "function_call", "call_id": "call_a", "name": "toy__echo",
                                              "arguments": "{}", "id": "fc_a"}]})
    step = agent_run.step_of_call("call_a")
    assert (record.step, step) == ("2", "2.1")
    meta = {"sealbox/run_id": agent_run.run_id, "sealbox/call_id": "call_a", "sealbox/step": step}
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "linked"}, meta=meta)
        for bad in ("2", "0.1", "2.x", 2.1, "2.1 "):
            with pytest.raises(MCPError) as err:
                await client.call_tool("toy__echo", {"text": "bad"}, meta={**meta, "sealbox/step": bad})
            assert err.value.code == MALFORMED_REQUEST
        with pytest.raises(MCPError) as err:  # the same step twice: refused, not recorded
            await client.call_tool("toy__echo", {"text": "again"}, meta={**meta, "sealbox/call_id": "call_b"})
        assert err.value.code == MALFORMED_REQUEST and "already recorded" in str(err.value)
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "bad id"}, meta={**meta, "sealbox/call_id": 7,
                                                                        "sealbox/step": "2.2"})
        assert err.value.code == MALFORMED_REQUEST
        await client.call_tool("toy__echo", {"text": "no step"}, meta={"sealbox/run_id": agent_run.run_id,
                                                                      "sealbox/call_id": "call_c"})
    events = store.read_run(agent_run.run_id)
    assert [(e.step, e.kind, e.payload.get("call_id")) for e in events if e.kind != "run.started"] == [
        ("2", "model.call", None),
        ("2.1", "tool.call", "call_a"), ("2.1", "policy.decision", "call_a"), ("2.1", "tool.result", "call_a"),
        ("3", "tool.call", "call_c"), ("3", "policy.decision", "call_c"), ("3", "tool.result", "call_c")]
    assert len(toy_log(tmp_path)) == 2  # the refused calls were never forwarded


async def test_a_stdio_gateway_joins_the_run_given_by_sealbox_run_id(tmp_path, store, monkeypatch):
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent")
    agent_run.start()
    monkeypatch.setenv("SEALBOX_RUN_ID", agent_run.run_id)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "via env"})
    assert [k for _, k in kinds(store, agent_run.run_id)][-1] == "tool.result"
    assert gateway_runs(store) == [agent_run.run_id]


async def test_nothing_is_forwarded_when_the_call_cannot_be_recorded(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "first"})
        original = store.append_with

        def broken(build):
            raise OSError("disk full")

        store.append_with = broken
        try:
            result = await client.call_tool("toy__echo", {"text": "unrecorded"})
        finally:
            store.append_with = original
    assert result.is_error is True and "could not be recorded" in text_of(result)
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "first"}}]


async def test_a_client_that_disconnects_mid_call_still_leaves_the_outcome_recorded(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            # the client gives up once the call runs upstream (was after a fixed 0.3 s, which on a loaded host
            # could come before the gateway had even recorded and forwarded it: nothing to leave recorded)
            with anyio.CancelScope() as scope:
                async def give_up_once_forwarded() -> None:
                    with anyio.fail_after(60):
                        while not toy_log(tmp_path):
                            await anyio.sleep(0.02)
                    scope.cancel()

                tg.start_soon(give_up_once_forwarded)
                await client.call_tool("toy__slow", {"seconds": 1.0})
        [run_id] = gateway_runs(store)
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
    result = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"][0]
    assert result["ok"] is True and result["result"]["content"][0]["text"] == "slow done"


async def test_progress_and_elicitation_requests_reach_the_calling_client(tmp_path, store):
    asked: list[str] = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg, elicitation_callback=elicit) as client:
        result = await client.call_tool("toy__ask", {"question": "favourite colour?"})
    assert asked == ["favourite colour?"]
    assert text_of(result) == "accept:blue"


async def test_elicitation_is_refused_to_a_client_without_the_capability(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        result = await client.call_tool("toy__ask", {"question": "?"})
    assert result.is_error is True  # the toy server's elicitation failed; the gateway stayed up


def test_the_config_chooses_the_store_durability(tmp_path):
    from sealbox.errors import ConfigError
    from sealbox.gateway import Gateway, parse_config
    from sealbox.store import init_store

    init_store(tmp_path / "s").close()
    text = "version: 1\nstore: {store}\npolicy: ALLOW_ALL\n{extra}upstreams:\n  - {{id: t, command: python3}}\n"
    assert parse_config(text.format(store=tmp_path / "s", extra=""), base=tmp_path).durability == "full"
    cfg = parse_config(text.format(store=tmp_path / "s", extra="durability: fast\n"), base=tmp_path)
    assert cfg.durability == "fast"
    gateway = Gateway(cfg)
    try:
        assert gateway.store.durability == "fast"
    finally:
        gateway.store.close()
    with pytest.raises(ConfigError) as info:
        parse_config(text.format(store=tmp_path / "s", extra="durability: sometimes\n"), source="gw.yaml")
    assert str(info.value).startswith("gw.yaml:4: durability: 'sometimes' is not one of full, fast")


async def test_an_upstream_echoing_a_redacted_argument_is_recorded_with_its_marker(tmp_path):
    """The store redacts the `text` argument (a configured path); the upstream's result repeats it:
    the client gets it as the upstream sent it, the record holds the argument's marker."""
    from sealbox.redaction import ContentPolicy

    secret = "sk-live-0123456789abcdef"
    store = sealbox.init_store(tmp_path / "redacting", content=ContentPolicy(paths=("arguments.text",)))
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            result = await client.call_tool("toy__echo", {"text": f"key {secret}"})
        [run_id] = gateway_runs(store)
    assert (result.is_error, text_of(result)) == (False, f"key {secret}")
    call, res = (e.payload for e in store.read_run(run_id) if e.kind in ("tool.call", "tool.result"))
    marker = call["arguments"]["text"]["$redacted"]
    assert store.resolve(res)["result"]["content"] == [{"type": "text", "text": f"⟦redacted:{marker}⟧"}]
    assert sealbox.verify_store(store).ok
    store.close()
    assert not any(secret.encode() in p.read_bytes() for p in (tmp_path / "redacting").iterdir() if p.is_file())


REQUIRE_GRANT = """
version: 1
name: echo-needs-grant
rules:
  - id: echo-needs-grant
    match: {server: toy, tool: echo}
    require_grant: true
    effect: allow
  - id: rest-ok
    effect: allow
"""


async def test_a_require_grant_rule_denies_every_gateway_call_naming_the_rule(tmp_path, store):
    """The gateway names no grant, so each of its calls is implicit:<principal>."""
    policy = Policy.from_text(REQUIRE_GRANT)
    gw = Gateway(toy_config(tmp_path), store=store, policy=policy)
    async with running(gw) as tg, connect(gw, tg) as client:
        denied = await client.call_tool("toy__echo", {"text": "hello"})
        allowed = await client.call_tool("toy__add", {"a": 1, "b": 2})
    [run_id] = gateway_runs(store)
    call, decision = (e.payload for e in store.read_run(run_id)[1:3])
    reason = ("rule 'echo-needs-grant' requires an explicit grant; the call's grant is implicit:agent:test-client "
              "(implicit: it names no access grant)")
    assert denied.is_error is True
    assert text_of(denied) == f"denied by rule echo-needs-grant (grant_required): {reason} [call {call['call_id']}]"
    assert denied.meta["sealbox/decision"] == {"rule": "echo-needs-grant", "reason_code": "grant_required",
                                               "call_id": call["call_id"]}
    assert (allowed.is_error, text_of(allowed)) == (False, "3")
    assert toy_log(tmp_path) == [{"tool": "add", "arguments": {"a": 1, "b": 2}}]
    assert call["grant"] == "implicit:agent:test-client"
    assert {k: decision[k] for k in ("effect", "reason_code", "rule", "reason", "policy_fingerprint")} == {
        "effect": "deny", "reason_code": "grant_required", "rule": "echo-needs-grant", "reason": reason,
        "policy_fingerprint": policy.fingerprint}
    assert store.resolve(decision["inputs"])["grant"] == "implicit:agent:test-client"
    assert [k for _, k in kinds(store, run_id)][1:4] == ["tool.call", "policy.decision", "tool.call"]


async def test_a_client_with_an_empty_name_can_call_tools(tmp_path, store):
    """clientInfo.name "" is valid MCP, but the run's agent must be a non-empty name: every call of
    such a client failed (JSON-RPC error code 0, a traceback on stderr, nothing recorded)."""
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg, client_info=types.Implementation(name="", version="9")) as client:
        result = await client.call_tool("toy__echo", {"text": "nameless"})
    assert (result.is_error, text_of(result)) == (False, "nameless")
    [run_id] = gateway_runs(store)
    run = store.get_run(run_id)
    started = next(e for e in store.read_run(run_id) if e.kind == "run.started")
    assert (run["agent"], started.payload["labels"]["mcp.client.name"]) == ("mcp-client", "")
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                    "run.ended"]


async def test_the_context_of_a_joined_run_that_ended_is_forgotten(tmp_path, store):
    """The gateway kept the context of every run it joined until a call to that run found it ended, so a
    long-lived gateway that each agent run joins (sealbox/run_id) kept one context, with its call ids and
    linked steps, per run ever joined. Runs that have ended are now forgotten when another run is joined."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    recorder = Recorder(store, ALLOW_ALL)
    first, second = (recorder.run(agent="sdk-agent", principal="agent:sdk") for _ in range(2))
    first.start()
    second.start()
    gw = Gateway(toy_config(tmp_path), store=store)
    gw.joined_prune_s = 0
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "one"}, meta={"sealbox/run_id": first.run_id,
                                                                     "sealbox/step": "2.1"})
        assert set(gw._joined) == {(first.run_id, "agent:test-client")} and set(gw._linked_steps) == {first.run_id}
        first.end("ok")
        await client.call_tool("toy__echo", {"text": "two"}, meta={"sealbox/run_id": second.run_id})
        assert set(gw._joined) == {(second.run_id, "agent:test-client")}
        assert set(gw._linked_steps) == set()


async def test_a_replay_run_cannot_be_joined_so_its_calls_never_reach_an_upstream(tmp_path, store):
    """An agent replayed in-process (``sealbox replay``) passes its run id to the MCP servers it talks to, as
    it did when recorded. A live gateway joined that replay run and forwarded its calls to the real upstream:
    tools ran for real in a replay that serves tools from the record. Joining a replay run is refused."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    recorded = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    with recorded:
        pass
    replay = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk", replay_of=recorded.run_id)
    replay.start()
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "again"}, meta={"sealbox/run_id": replay.run_id})
    assert (err.value.code, str(err.value)) == (UNKNOWN_RUN, (
        f"run {replay.run_id} is a replay of run {recorded.run_id}: a live gateway does not join it (its calls "
        "would run for real); serve the recorded calls with `sealbox gateway replay`, or replay with tools from "
        "the record in-process"))
    assert toy_log(tmp_path) == []  # the upstream never saw the call
    assert [k for _, k in kinds(store, replay.run_id)] == ["run.started"]


async def test_a_tool_of_an_upstream_that_failed_to_start_says_why(tmp_path, store):
    """README's gateway.yaml launches upstreams with `uvx`: where uvx is not installed, the gateway started
    with no tools for them and a call of one was only "unknown tool 'db__list_tables'", as if the name were
    misspelt. It is now UPSTREAM_ERROR naming the upstream, its state and its failure (the same line the
    gateway logged); a misspelt tool of a running upstream is still UNKNOWN_TOOL."""
    ups = f"""
  - id: db
    command: {tmp_path / 'no-such-runner'}
    args: [mcp-server-sqlite]
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
"""
    gw = Gateway(toy_config(tmp_path, upstreams=ups), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("db__list_tables", {})
        with pytest.raises(MCPError) as typo:
            await client.call_tool("toy__nope", {})
        ok = await client.call_tool("toy__add", {"a": 1, "b": 2})
    assert err.value.code == UPSTREAM_ERROR
    message = str(err.value)
    assert message.startswith("tools/call db__list_tables: upstream db is down (")
    assert f"cannot start its command '{tmp_path / 'no-such-runner'}': no such file; check upstream db's command" in message
    assert message.endswith("); call again once it is up")
    assert (typo.value.code, str(typo.value)) == (UNKNOWN_TOOL, "unknown tool 'toy__nope'")
    assert text_of(ok) == "3"
    [run_id] = gateway_runs(store)  # the unknown tools are protocol errors: only toy__add is recorded
    assert [e.payload["exposed"] for e in store.read_run(run_id) if e.kind == "tool.call"] == ["toy__add"]
