"""What the gateway's circuit breaker counts: only signs that the upstream is unhealthy (crash, hang,
malformed answers, internal/server errors), never an answer by which a healthy upstream refuses one
request as that request's fault (JSON-RPC -32602 invalid params, -32601, -32600, unknown tool) nor a
tool's own failure (``isError: true``). With the real toy upstream and the official ``mcp`` client."""

from __future__ import annotations

import json

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import Gateway
from sealbox.gateway.codes import UPSTREAM_ERROR

from .conftest import connect, gateway_runs, running, set_call_timeout, system_events, text_of, toy_config, toy_log

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


# --------------------------------------------- a call failing because of the client's answer to the upstream


def failing_sampler(code: int, message: str):
    async def sample(context, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=code, message=message)
    return sample


def working_sampler():
    async def sample(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(role="assistant", model="m", stop_reason="endTurn",
                                         content=types.TextContent(type="text", text="fine"))
    return sample


async def test_a_client_answering_the_upstreams_sampling_request_with_an_error_never_opens_the_breaker(
        tmp_path, store):
    """The toy's ``sample`` fails with the JSON-RPC error its client's sampling answered (-32603 here: the
    client's model is down). That failure is the client's, not the upstream's: more of them than the
    threshold leave the breaker closed, and another client's sampling call is still forwarded."""
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=failing_sampler(-32603, "my model is down")) as broken:
            failed = [await broken.call_tool("toy__sample", {"prompt": f"hi {i}"}) for i in range(3)]
        state = gw.recorder.breaker.state("toy", "sample")
        async with connect(gw, tg, sampling_callback=working_sampler()) as other:
            fine = await other.call_tool("toy__sample", {"prompt": "hello"})
    assert [(r.is_error, text_of(r)) for r in failed] == [
        (True, "upstream error: upstream toy answered with JSON-RPC error -32603: my model is down")] * 3
    assert (state, fine.is_error, json.loads(text_of(fine))["text"]) == ("closed", False, "fine")
    first_run, second_run = gateway_runs(store)
    assert [(r["ok"], r["error"]["type"]) for r in results(store, first_run)] == [
        (False, "UpstreamProtocolError")] * 3
    assert [r["ok"] for r in results(store, second_run)] == [True]
    assert system_events(store, "breaker.changed") == []
    assert [e["tool"] for e in toy_log(tmp_path)] == ["sample"] * 4


async def test_a_call_timing_out_while_the_client_has_not_answered_the_upstream_never_opens_the_breaker(
        tmp_path, store):
    """The toy's ``sample`` waits for the client's sampling answer (a human, a slow model): the call times out
    while the gateway still waits for the client. The timeout is the client's, not the upstream's: the breaker
    stays closed for another client, whose call is forwarded."""
    async def slow(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        await anyio.sleep(1.5)
        return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="x"))

    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}\n"
                                            "limits: {call_timeout_s: 0.5}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=slow) as slow_client:
            late = [await slow_client.call_tool("toy__sample", {"prompt": f"hi {i}"}) for i in range(3)]
        state = gw.recorder.breaker.state("toy", "sample")
        set_call_timeout(gw, 60)  # the other client's call is answered, however loaded the host
        async with connect(gw, tg, sampling_callback=working_sampler()) as other:
            fine = await other.call_tool("toy__sample", {"prompt": "hello"})
    assert [(r.is_error, text_of(r).startswith("upstream error: upstream toy did not answer within 0.5 s"))
            for r in late] == [(True, True)] * 3
    assert (state, fine.is_error, json.loads(text_of(fine))["text"]) == ("closed", False, "fine")
    first_run, second_run = gateway_runs(store)
    assert [(r["ok"], r["error"]["type"]) for r in results(store, first_run)] == [(False, "UpstreamTimeout")] * 3
    assert system_events(store, "breaker.changed") == []


async def test_a_timeout_with_no_client_request_pending_still_opens_the_breaker(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}\n"
                                            "limits: {call_timeout_s: 0.3}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        for _ in range(2):
            await client.call_tool("toy__hang", {})
        state = gw.recorder.breaker.state("toy", "hang")
    assert state == "open"
    assert [(b["tool"], b["to"], b["reason"]) for b in system_events(store, "breaker.changed")] == [
        ("hang", "open", "failures")]


async def test_a_call_failing_on_the_clients_declined_elicitation_never_opens_the_breaker(tmp_path, store):
    """An upstream that fails a call with -32603 when the person declines its elicitation: the person's choice,
    not the upstream's health. The breaker stays closed; the next client's accepted elicitation is served."""
    async def decline(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def accept(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=decline) as declining:
            failed = [await declining.call_tool("toy__ask", {"question": "go?", "strict": True}) for _ in range(3)]
        state = gw.recorder.breaker.state("toy", "ask")
        async with connect(gw, tg, elicitation_callback=accept) as other:
            fine = await other.call_tool("toy__ask", {"question": "go?", "strict": True})
    assert [(r.is_error, text_of(r)) for r in failed] == [
        (True, "upstream error: upstream toy answered with JSON-RPC error -32603: the user answered decline")] * 3
    assert (state, fine.is_error, text_of(fine)) == ("closed", False, "accept:yes")
    assert system_events(store, "breaker.changed") == []


# ------------------------------------------------------- a prompts/get missing a required argument


async def test_a_prompts_get_missing_a_required_argument_is_refused_by_the_gateway_and_never_opens_the_breaker(
        tmp_path, store):
    """``greet`` declares ``name`` required. Servers answer its absence with an error the breaker would count
    (mcp-server-sqlite: code 0; the SDK's MCPServer: -32603 internal error), so a client leaving it out
    ``threshold`` times would open the prompt's breaker for every client. The gateway refuses it itself, as it
    refuses tool arguments that fail the input schema: recorded and decided, never forwarded, -32602 to the
    client, not counted."""
    gw = Gateway(toy_config(tmp_path, env={"TOY_CATALOG": "1"}, extra="breaker: {threshold: 1, cooldown_s: 600}"),
                 store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        errors = []
        for arguments in ({}, {"other": "x"}):
            with pytest.raises(MCPError) as err:
                await client.get_prompt("toy__greet", arguments)
            errors.append((err.value.error.code, err.value.error.message))
        fine = await client.get_prompt("toy__greet", {"name": "ada"})
        state = gw.recorder.breaker.state("toy", "prompt:greet")
        [run_id] = gateway_runs(store)
    text = "prompts/get toy__greet: not forwarded: missing required argument: name"
    assert errors == [(types.INVALID_PARAMS, text)] * 2
    assert (fine.messages[0].content.text, state) == ("Hello, ada!", "closed")
    recorded = [(e.kind, e.payload) for e in store.read_run(run_id) if e.kind in ("tool.call", "tool.result")]
    assert [(p["tool"], p["arguments"]) for k, p in recorded if k == "tool.call"] == [
        ("prompt:greet", {}), ("prompt:greet", {"other": "x"}), ("prompt:greet", {"name": "ada"})]
    assert [(p["ok"], p.get("error", {}).get("type"), p.get("error", {}).get("message"))
            for k, p in recorded if k == "tool.result"] == [
        (False, "InvalidArguments", "missing required argument: name")] * 2 + [(True, None, None)]
    assert system_events(store, "breaker.changed") == []
    assert toy_log(tmp_path) == [{"prompt": "greet", "arguments": {"name": "ada"}}]  # the refused ones never went out


# ------------------------------------------------- a half-open probe whose gate could not be recorded


async def test_a_half_open_probe_whose_call_could_not_be_recorded_is_given_back(tmp_path, store):
    """The probe's ``tool.call`` write fails after its decision was made (the transaction is rolled back: a
    full disk, a lost database connection): nothing ran, so the probe is given back. It was kept, and every
    later call of the tool, of every client, was denied ``breaker_open`` ("half_open") until the gateway
    restarted."""
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 1, cooldown_s: 0}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "!rpc -32603 Internal error"})  # opens (threshold 1)
        original = store.append_with

        def failing_after_build(build):  # the real write, failing once the drafts were built (rolled back)
            def build_then_fail(reader):
                build(reader)
                raise OSError("disk full")
            return original(build_then_fail)

        store.append_with = failing_after_build
        try:
            unrecorded = await client.call_tool("toy__echo", {"text": "probe"})
        finally:
            store.append_with = original
        after_failure = gw.recorder.breaker.state("toy", "echo")
        served = await client.call_tool("toy__echo", {"text": "served"})
        state = gw.recorder.breaker.state("toy", "echo")
    assert unrecorded.is_error is True and "could not be recorded" in text_of(unrecorded)
    assert after_failure == "open"  # its open -> half_open was not recorded: taken back; the next call probes
    assert (served.is_error, text_of(served), state) == (False, "served", "closed")
    assert [(c["from"], c["to"], c["reason"]) for c in system_events(store, "breaker.changed")] == [
        ("closed", "open", "failures"), ("open", "half_open", "cooldown_elapsed"),
        ("half_open", "closed", "probe_succeeded")]
    assert [e["arguments"]["text"] for e in toy_log(tmp_path)] == ["!rpc -32603 Internal error", "served"]


async def test_a_prompts_get_with_an_argument_the_prompt_does_not_declare_never_opens_the_breaker(tmp_path, store):
    """The SDK's MCPServer answers an argument its prompt function does not take with -32603 internal error (it
    calls ``greet(name=..., other=...)``: a TypeError), which the breaker counts: a client adding one argument
    ``threshold`` times opened the prompt's breaker for every client. The gateway refuses an argument the prompt
    does not declare itself, as a missing required one: recorded and decided, never forwarded, -32602."""
    gw = Gateway(toy_config(tmp_path, env={"TOY_CATALOG": "1"}, extra="breaker: {threshold: 1, cooldown_s: 600}"),
                 store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        errors = []
        for arguments in ({"name": "ada", "other": "x"}, {"name": "ada", "b": "1", "a": "2"}):
            with pytest.raises(MCPError) as err:
                await client.get_prompt("toy__greet", arguments)
            errors.append((err.value.error.code, err.value.error.message))
        fine = await client.get_prompt("toy__greet", {"name": "ada"})
        state = gw.recorder.breaker.state("toy", "prompt:greet")
        [run_id] = gateway_runs(store)
    assert errors == [
        (types.INVALID_PARAMS, "prompts/get toy__greet: not forwarded: argument the prompt does not declare: other"),
        (types.INVALID_PARAMS, "prompts/get toy__greet: not forwarded: arguments the prompt does not declare: a, b")]
    assert (fine.messages[0].content.text, state) == ("Hello, ada!", "closed")
    recorded = [(e.kind, e.payload) for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(p["ok"], p.get("error", {}).get("type")) for _, p in recorded] == [
        (False, "InvalidArguments"), (False, "InvalidArguments"), (True, None)]
    assert system_events(store, "breaker.changed") == []
    assert toy_log(tmp_path) == [{"prompt": "greet", "arguments": {"name": "ada"}}]  # the refused ones never went out
