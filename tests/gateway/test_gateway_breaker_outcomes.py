"""What the gateway's circuit breaker counts: only signs that the upstream is unhealthy (crash, hang,
malformed answers, internal/server errors), never an answer by which a healthy upstream refuses one
request as that request's fault (JSON-RPC -32602 invalid params, -32601, -32600, unknown tool) nor a
tool's own failure (``isError: true``). With the real toy upstream and the official ``mcp`` client."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import Gateway
from sealbox.gateway.codes import UPSTREAM_ERROR

from .conftest import connect, gateway_runs, running, system_events, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


def results(store, run_id: str) -> list[dict]:
    return [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]


REFUSALS = [
    pytest.param("-32602 Invalid timezone: 'Mars/Olympus_Mons'", id="invalid-params"),
    pytest.param("-32602 Unknown tool: echo", id="unknown-tool"),  # MCP: an unknown tool is -32602
    pytest.param("-32601 Method not found", id="method-not-found"),
    pytest.param("-32600 Invalid request", id="invalid-request"),
]


@pytest.mark.parametrize("rpc", REFUSALS)
async def test_an_upstreams_refusal_of_a_call_never_opens_the_breaker(tmp_path, store, rpc):
    """A model sending arguments the upstream refuses (its schema allowed them), more times than the
    threshold: every call is forwarded and answered with the upstream's error, recorded ``ok: false``,
    and the breaker stays closed, so the next valid call (this client's or another's) is forwarded."""
    code, message = rpc.split(" ", 1)
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as model:
            refused = [await model.call_tool("toy__echo", {"text": f"!rpc {rpc}"}) for _ in range(4)]
            state = gw.recorder.breaker.state("toy", "echo")
        async with connect(gw, tg) as other:
            fine = await other.call_tool("toy__echo", {"text": "still served"})
    text = f"upstream error: upstream toy answered with JSON-RPC error {code}: {message}"
    assert [(r.is_error, text_of(r)) for r in refused] == [(True, text)] * 4
    assert (fine.is_error, text_of(fine), state) == (False, "still served", "closed")
    first_run, second_run = gateway_runs(store)
    assert [(r["ok"], r["error"]["type"], r["error"]["message"]) for r in results(store, first_run)] == [
        (False, "UpstreamProtocolError", f"upstream toy answered with JSON-RPC error {code}: {message}")] * 4
    assert [(r["ok"], r["result"]["content"][0]["text"]) for r in results(store, second_run)] == [
        (True, "still served")]
    assert system_events(store, "breaker.changed") == []
    assert [e["arguments"]["text"] for e in toy_log(tmp_path)] == [f"!rpc {rpc}"] * 4 + ["still served"]
    assert sealbox.verify_store(store).ok


async def test_a_tool_error_result_never_opens_the_breaker(tmp_path, store):
    """``isError: true`` is the tool's own failure: the upstream answered; not a breaker failure."""
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        failed = [await client.call_tool("toy__echo", {"text": "!error no such file"}) for _ in range(3)]
        fine = await client.call_tool("toy__echo", {"text": "ok"})
        state = gw.recorder.breaker.state("toy", "echo")
        [run_id] = gateway_runs(store)
    assert [(r.is_error, text_of(r)) for r in failed] == [(True, "no such file")] * 3
    assert (fine.is_error, text_of(fine), state) == (False, "ok", "closed")
    assert [(r["ok"], r.get("error")) for r in results(store, run_id)] == [
        (False, {"type": "ToolError", "message": "no such file"})] * 3 + [(True, None)]
    assert system_events(store, "breaker.changed") == []


@pytest.mark.parametrize("rpc", ["-32603 Internal error", "-32000 database is down", "-32700 Parse error"])
async def test_an_upstreams_internal_or_server_error_still_opens_the_breaker(tmp_path, store, rpc):
    code, message = rpc.split(" ", 1)
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        failed = [await client.call_tool("toy__echo", {"text": f"!rpc {rpc}"}) for _ in range(2)]
        denied = await client.call_tool("toy__echo", {"text": "valid"})
        state = gw.recorder.breaker.state("toy", "echo")
    assert [text_of(r) for r in failed] == [
        f"upstream error: upstream toy answered with JSON-RPC error {code}: {message}"] * 2
    assert denied.is_error is True and "denied (breaker_open)" in text_of(denied)
    assert state == "open"
    assert [(b["tool"], b["from"], b["to"], b["reason"], b["failures"])
            for b in system_events(store, "breaker.changed")] == [("echo", "closed", "open", "failures", 2)]
    assert len(toy_log(tmp_path)) == 2  # the denied call was not forwarded


async def test_a_refused_half_open_probe_is_given_back_and_a_valid_call_closes_the_breaker(tmp_path, store):
    """A half-open breaker's probe answered with -32602 says nothing of whether the tool works now: the probe
    is given back (neither closes nor re-opens the breaker) and the next call probes."""
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 0}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        for _ in range(2):  # real failures: the breaker opens
            await client.call_tool("toy__echo", {"text": "!rpc -32603 Internal error"})
        opened = gw.recorder.breaker.state("toy", "echo")
        probe = await client.call_tool("toy__echo", {"text": "!rpc -32602 Invalid params"})  # cool-down 0: probes
        after_probe = gw.recorder.breaker.state("toy", "echo")
        closing = await client.call_tool("toy__echo", {"text": "healthy"})
        closed = gw.recorder.breaker.state("toy", "echo")
    assert (opened, after_probe, closed) == ("open", "half_open", "closed")
    assert text_of(probe) == "upstream error: upstream toy answered with JSON-RPC error -32602: Invalid params"
    assert (closing.is_error, text_of(closing)) == (False, "healthy")
    assert [(b["tool"], b["from"], b["to"], b["reason"], b["failures"])
            for b in system_events(store, "breaker.changed")] == [
        ("echo", "closed", "open", "failures", 2),
        ("echo", "open", "half_open", "cooldown_elapsed", 2),
        ("echo", "half_open", "closed", "probe_succeeded", 2)]


async def test_a_prompts_get_the_upstream_refuses_never_opens_the_breaker(tmp_path, store):
    """The same for ``prompts/get``: a client's arguments the upstream refuses (-32602) do not open the
    breaker of ``prompt:greet`` for every other client."""
    gw = Gateway(toy_config(tmp_path, env={"TOY_CATALOG": "1"}, extra="breaker: {threshold: 2, cooldown_s: 600}"),
                 store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        errors = []
        for _ in range(3):
            with pytest.raises(MCPError) as err:
                await client.get_prompt("toy__greet", {"name": "!rpc -32602 name must be a person"})
            errors.append((err.value.error.code, err.value.error.message))
        fine = await client.get_prompt("toy__greet", {"name": "ada"})
        state = gw.recorder.breaker.state("toy", "prompt:greet")
    assert errors == [(UPSTREAM_ERROR, "prompts/get toy__greet: upstream error: upstream toy answered with JSON-RPC "
                                       "error -32602: name must be a person")] * 3
    assert (fine.messages[0].content.text, state) == ("Hello, ada!", "closed")
    assert system_events(store, "breaker.changed") == []
