"""Requests an upstream makes of its client (sampling, roots, elicitation) reach the client whose call is in flight.

The toy upstream (a real stdio process) asks the client from inside a tool call;
the official ``mcp`` client answers with its callbacks; the exact values it
returned must come back in the tool's result and be in the recorded ``tool.result``.
"""

from __future__ import annotations

import json

import anyio
import httpx2
import mcp_types as types
import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.gateway.transports import serve_http

from .conftest import connect, gateway_runs, kinds, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-the-tests-0123456789"
HTTP = f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"


def sampler(model: str, text: str, seen: list[types.CreateMessageRequestParams]):
    async def sample(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        seen.append(params)
        return types.CreateMessageResult(role="assistant", model=model, stop_reason="endTurn",
                                         content=types.TextContent(type="text", text=text))
    return sample


def results(store, run_id: str) -> list[dict]:
    return [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]


async def test_sampling_request_reaches_the_client_and_its_answer_the_upstream_and_the_record(tmp_path, store):
    seen: list[types.CreateMessageRequestParams] = []
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=sampler("model-x-7", "the sampled answer", seen)) as client:
            result = await client.call_tool("toy__sample", {"prompt": "what is 6*7?"})
        [run_id] = gateway_runs(store)
    # the client saw exactly what the upstream asked
    [params] = seen
    assert (params.max_tokens, params.system_prompt) == (50, "toy system prompt")
    assert [(m.role, m.content.text) for m in params.messages] == [("user", "what is 6*7?")]
    # the upstream got exactly what the client answered
    expected = json.dumps({"model": "model-x-7", "role": "assistant", "stop_reason": "endTurn",
                           "text": "the sampled answer"}, sort_keys=True)
    assert (result.is_error, text_of(result)) == (False, expected)
    # the request and its answer are recorded at the call's step (test_gateway_client_request_records.py)
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "note", "note",
                                                    "tool.result", "run.ended"]
    [res] = results(store, run_id)
    assert res["ok"] is True and res["result"]["content"] == [{"type": "text", "text": expected}]
    assert toy_log(tmp_path) == [{"tool": "sample", "arguments": {"prompt": "what is 6*7?"}}]
    assert sealbox.verify_store(store).ok


async def test_roots_request_reaches_the_client_and_its_roots_the_upstream_and_the_record(tmp_path, store):
    asked: list[int] = []

    async def list_roots(context) -> types.ListRootsResult:
        asked.append(1)
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/project-a", name="project a"),
                                            types.Root(uri="file:///home/me/notes")])

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, list_roots_callback=list_roots) as client:
            result = await client.call_tool("toy__roots", {})
        [run_id] = gateway_runs(store)
    expected = json.dumps([{"uri": "file:///srv/project-a", "name": "project a"},
                           {"uri": "file:///home/me/notes", "name": None}])
    assert asked == [1]
    assert (result.is_error, text_of(result)) == (False, expected)
    [res] = results(store, run_id)
    assert res["ok"] is True and res["result"]["content"] == [{"type": "text", "text": expected}]


async def test_a_client_without_sampling_gets_an_error_result_and_the_gateway_stays_up(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        refused = await client.call_tool("toy__sample", {"prompt": "hi"})
        after = await client.call_tool("toy__echo", {"text": "still up"})
    assert refused.is_error is True  # the toy's sampling request failed; it answered with an error
    assert (after.is_error, text_of(after)) == (False, "still up")


async def test_a_tool_failing_because_the_gateway_refused_its_request_to_the_client_does_not_trip_the_breaker(
        tmp_path, store):
    """The client declared no sampling: the gateway refuses the upstream's sampling/createMessage, and the toy's tool
    then fails with a JSON-RPC error. That failure is the gateway's refusal, not the upstream's health: with a
    breaker threshold of 2, three such calls are each answered the same, none denied breaker_open."""
    from .conftest import system_events

    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 2, cooldown_s: 600}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        refused = [await client.call_tool("toy__sample", {"prompt": f"hi {i}"}) for i in range(3)]
        [run_id] = gateway_runs(store)
    assert [r.is_error for r in refused] == [True, True, True]
    assert [text_of(r) for r in refused] == [
        "upstream error: upstream toy answered with JSON-RPC error -32600: sampling/createMessage was not forwarded: "
        "the client did not declare the sampling capability"] * 3
    assert [e["tool"] for e in toy_log(tmp_path)] == ["sample", "sample", "sample"]
    assert [(r["ok"], r["error"]["type"]) for r in results(store, run_id)] == [(False, "UpstreamProtocolError")] * 3
    assert system_events(store, "breaker.changed") == []
    assert sealbox.verify_store(store).ok


# ---------------------------------------------------------------------- two clients over streamable HTTP


class _HttpClient:
    """An official ``mcp`` client connected to the gateway over streamable HTTP, with its own callbacks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sampled: list[str] = []
        self.rooted = 0

    async def sample(self, context, params):
        self.sampled.append(params.messages[0].content.text)
        return types.CreateMessageResult(role="assistant", model=f"model-of-{self.name}",
                                         content=types.TextContent(type="text", text=f"{self.name} answers"))

    async def roots(self, context):
        self.rooted += 1
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{self.name}", name=self.name)])


async def _open(stack, port: int, who: _HttpClient):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}))
    r, w = await stack.enter_async_context(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))
    session = await stack.enter_async_context(ClientSession(
        r, w, sampling_callback=who.sample, list_roots_callback=who.roots,
        client_info=types.Implementation(name=who.name, version="1")))
    with anyio.fail_after(20):
        await session.initialize()
    return session


async def test_over_http_each_request_goes_to_the_client_whose_call_is_in_flight(tmp_path, store):
    from contextlib import AsyncExitStack

    alice, bob = _HttpClient("alice"), _HttpClient("bob")
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        async with AsyncExitStack() as stack:
            a = await _open(stack, port, alice)
            b = await _open(stack, port, bob)
            with anyio.fail_after(30):
                await b.call_tool("toy__echo", {"text": "bob is here"})  # bob's session is known to the gateway
                a_sample = await a.call_tool("toy__sample", {"prompt": "from alice"})
                b_sample = await b.call_tool("toy__sample", {"prompt": "from bob"})
                b_roots = await b.call_tool("toy__roots", {})
                a_roots = await a.call_tool("toy__roots", {})
        tg.cancel_scope.cancel()
    assert alice.sampled == ["from alice"] and bob.sampled == ["from bob"]
    assert alice.rooted == 1 and bob.rooted == 1
    assert json.loads(text_of(a_sample))["model"] == "model-of-alice"
    assert json.loads(text_of(a_sample))["text"] == "alice answers"
    assert json.loads(text_of(b_sample))["model"] == "model-of-bob"
    assert json.loads(text_of(b_roots)) == [{"uri": "file:///bob", "name": "bob"}]
    assert json.loads(text_of(a_roots)) == [{"uri": "file:///alice", "name": "alice"}]
    # each client's session is its own run; each run recorded what its own client answered
    runs = {store.read_run(r)[0].payload["labels"]["mcp.client.name"]: r for r in gateway_runs(store)}
    assert sorted(runs) == ["alice", "bob"]
    a_texts = [r["result"]["content"][0]["text"] for r in results(store, runs["alice"])]
    b_texts = [r["result"]["content"][0]["text"] for r in results(store, runs["bob"])]
    assert a_texts == [text_of(a_sample), text_of(a_roots)]
    assert b_texts == ["bob is here", text_of(b_sample), text_of(b_roots)]


async def test_over_http_a_request_is_refused_not_misrouted_while_two_clients_have_calls_in_flight(tmp_path, store):
    from contextlib import AsyncExitStack

    from .conftest import system_events

    alice, bob = _HttpClient("alice"), _HttpClient("bob")
    # threshold 1: the refused call's failure (the gateway's refusal, not the upstream's) must not open the breaker
    gw = Gateway(toy_config(tmp_path, extra=HTTP + "breaker: {threshold: 1, cooldown_s: 600}\n"), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        async with AsyncExitStack() as stack:
            a = await _open(stack, port, alice)
            b = await _open(stack, port, bob)
            out: dict[str, types.CallToolResult] = {}

            async def bob_slow() -> None:
                out["slow"] = await b.call_tool("toy__slow", {"seconds": 1.5})

            with anyio.fail_after(30):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(bob_slow)
                    while not toy_log(tmp_path):  # bob's call has reached the upstream
                        await anyio.sleep(0.01)
                    out["sample"] = await a.call_tool("toy__sample", {"prompt": "ambiguous"})
                after = await a.call_tool("toy__sample", {"prompt": "alone again"})
        tg.cancel_scope.cancel()
    assert bob.sampled == [] and alice.sampled == ["alone again"]
    assert out["sample"].is_error is True and text_of(out["slow"]) == "slow done"
    assert json.loads(text_of(after))["model"] == "model-of-alice"
    assert text_of(out["sample"]) == ("upstream error: upstream toy answered with JSON-RPC error -32600: "
                                      "sampling/createMessage from toy cannot be routed: calls of several clients "
                                      "are in flight")
    assert system_events(store, "breaker.changed") == []
