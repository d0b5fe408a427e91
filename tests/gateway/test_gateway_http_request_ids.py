"""A JSON-RPC request id reused on an HTTP session while its first request is still in flight.

The SDK's streamable HTTP transport keys each POST's answer stream by ``str(id)``: a second request with an id
(or the same id as a string) in flight on the session replaced the first one's stream, so the first POST was
never answered (its connection held open for good, and the session, with a request in flight, never idled
out) and the second was handed whichever of the two answers came first."""

from __future__ import annotations

import json

import anyio
import httpx2
import pytest

from sealbox.gateway import MALFORMED_REQUEST, Gateway
from sealbox.gateway.transports import serve_http

from .conftest import gateway_runs, kinds, toy_config, toy_log

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-the-tests-0123456789"
HTTP = f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
AUTH = {"accept": "application/json, text/event-stream", "content-type": "application/json",
        "authorization": f"Bearer {TOKEN}"}


def _sse_message(text: str) -> dict:
    [data] = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ") and len(line) > 6]
    return json.loads(data)


def _call(request_id: object, seconds: float) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "toy__slow", "arguments": {"seconds": seconds}}}


async def test_a_request_id_in_flight_on_the_session_is_refused_and_both_calls_get_their_own_answers(
        tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    answers: dict[str, httpx2.Response] = {}
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await http.post(url, json=INIT, headers=AUTH)
            session = {**AUTH, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)

            async def post(name: str, body: dict) -> None:
                answers[name] = await http.post(url, json=body, headers=session)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(post, "first", _call(7, 1.5))
                    for _ in range(200):  # the first call has reached the upstream
                        if toy_log(tmp_path):
                            break
                        await anyio.sleep(0.05)
                    calls.start_soon(post, "same id", _call(7, 0.1))
                    calls.start_soon(post, "same id as a string", _call("7", 0.1))
            after = await http.post(url, json=_call(7, 0.1), headers=session)  # once answered, the id is free
        tg.cancel_scope.cancel()
    first = _sse_message(answers["first"].text)
    assert (first["id"], first["result"]["content"][0]["text"]) == (7, "slow done")
    for name, request_id in (("same id", 7), ("same id as a string", "7")):
        refused = answers[name]
        assert (refused.status_code, refused.headers["content-type"]) == (400, "application/json"), name
        assert refused.json() == {"jsonrpc": "2.0", "id": request_id, "error": {
            "code": MALFORMED_REQUEST, "message": "request id 7 is already in flight on this session (a JSON-RPC "
            "id is not reused while its request is unanswered): nothing of this request was recorded or "
            "carried out"}}
    assert _sse_message(after.text)["result"]["content"][0]["text"] == "slow done"
    assert [e["arguments"]["seconds"] for e in toy_log(tmp_path)] == [1.5, 0.1]
    [run_id] = gateway_runs(store)
    assert [k for _, k in kinds(store, run_id)].count("tool.call") == 2


async def test_a_null_run_id_in_meta_is_an_unknown_run_not_the_sessions_own(tmp_path, store):
    """``_meta["sealbox/run_id"]: null`` (a TypeScript client whose run id was never set: ``let runId = null``;
    the Python SDK drops a None) was read as no run id, as ``""`` was before: the call was recorded, and
    forwarded, in the session's own run instead of the run the client meant."""
    from sealbox.gateway import UNKNOWN_RUN

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await http.post(url, json=INIT, headers=AUTH)
            session = {**AUTH, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "toy__echo", "arguments": {"text": "where"}, "_meta": {"sealbox/run_id": None}}}
            answer = await http.post(url, json=call, headers=session)
        tg.cancel_scope.cancel()
    assert _sse_message(answer.text) == {"jsonrpc": "2.0", "id": 2, "error": {
        "code": UNKNOWN_RUN, "message": "_meta['sealbox/run_id'] must be a non-empty string, not null "
                                        "(leave the key out for the session's own run)"}}
    assert gateway_runs(store) == [] and toy_log(tmp_path) == []


async def test_a_null_step_or_call_id_of_a_joined_call_is_malformed_not_an_unlinked_call(tmp_path, store):
    """``_meta["sealbox/step"]: null`` or ``"sealbox/call_id": null`` on a joined call (a client whose step was never
    set) was read as no step: the call was recorded at a new top-level step, not linked to the model call that
    requested it, as no other key of the wrong shape is."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    agent_run.start()
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    answers = []
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await http.post(url, json=INIT, headers=AUTH)
            session = {**AUTH, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            for request_id, meta in ((2, {"sealbox/step": None}), (3, {"sealbox/call_id": None, "sealbox/step": "2.1"})):
                call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
                    "name": "toy__echo", "arguments": {"text": "where"},
                    "_meta": {"sealbox/run_id": agent_run.run_id, **meta}}}
                answers.append(_sse_message((await http.post(url, json=call, headers=session)).text))
        tg.cancel_scope.cancel()
    assert answers == [
        {"jsonrpc": "2.0", "id": 2, "error": {"code": MALFORMED_REQUEST, "message": "_meta['sealbox/step'] must be a "
                                              "tool call's step '<model step>.<i>' (e.g. '4.1'), not null"}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": MALFORMED_REQUEST, "message": "_meta['sealbox/call_id'] must be a "
                                              "non-empty string of at most 256 characters without a NUL character "
                                              "(\\x00)"}}]
    assert [e.kind for e in store.read_run(agent_run.run_id)] == ["run.started"] and toy_log(tmp_path) == []


async def test_a_request_id_naming_the_sdks_get_stream_is_refused_and_the_stream_ends_with_its_session(
        tmp_path, store):
    """The SDK keeps a session's GET stream under the key ``"_GET_stream"`` among its POSTs' answer streams
    (keyed by ``str(id)``): a request with that id took the key, and once answered removed it, so the GET
    stream was no longer the session's (its notifications lost) and outlived the session's DELETE, its
    connection open for good (pinged every 15 s): one client could leave any number of connections open."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    ended = anyio.Event()
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await http.post(url, json=INIT, headers=AUTH)
            session = {**AUTH, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            streaming = anyio.Event()

            async def get_stream() -> None:
                async with http.stream("GET", url, headers={**session, "accept": "text/event-stream"}) as stream:
                    assert stream.status_code == 200
                    streaming.set()
                    async for _ in stream.aiter_bytes():
                        pass
                ended.set()

            tg.start_soon(get_stream)
            await streaming.wait()
            answer = await http.post(url, json=_call("_GET_stream", 0.1), headers=session)
            await http.delete(url, headers=session)
            with anyio.move_on_after(30):  # the DELETE ends the session's GET stream (the SDK's ping comes every 15 s)
                await ended.wait()
        tg.cancel_scope.cancel()
    assert (answer.status_code, answer.json()) == (400, {"jsonrpc": "2.0", "id": "_GET_stream", "error": {
        "code": MALFORMED_REQUEST, "message": "request id _GET_stream is the name the MCP SDK's transport gives a "
                                              "session's GET stream: use another id; nothing of this request was "
                                              "recorded or carried out"}})
    assert ended.is_set() and toy_log(tmp_path) == []
