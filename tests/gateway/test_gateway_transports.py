"""The gateway over streamable HTTP (Origin, bearer tokens) and as a stdio command (`sealbox gateway serve`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import httpx2
import pytest

import sealbox
from sealbox.gateway import UNAUTHORIZED, Gateway
from sealbox.gateway.transports import serve_http

from .conftest import TOY, gateway_runs, kinds, text_of, toy_config

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-the-tests-0123456789"
HTTP = f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def _serve(gw, tg):
    return await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))


async def test_http_rejects_a_foreign_origin_and_a_missing_token(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient() as http:
            foreign = await http.post(url, json=INIT, headers={**HEADERS, "authorization": f"Bearer {TOKEN}",
                                                              "origin": "http://evil.example"})
            no_token = await http.post(url, json=INIT, headers=HEADERS)
            wrong = await http.post(url, json=INIT, headers={**HEADERS, "authorization": "Bearer wrong-token-000000000"})
            own = await http.post(url, json=INIT, headers={**HEADERS, "authorization": f"Bearer {TOKEN}",
                                                          "origin": f"http://127.0.0.1:{port}"})
        tg.cancel_scope.cancel()
    assert foreign.status_code == 403
    assert (no_token.status_code, no_token.json()["error"]["code"]) == (401, UNAUTHORIZED)
    assert wrong.status_code == 401
    assert own.status_code == 200


async def test_http_client_calls_are_recorded_under_the_token_identity(tmp_path, store):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
        async with http, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w):
            async with ClientSession(r, w) as client:
                with anyio.fail_after(20):
                    await client.initialize()
                    result = await client.call_tool("toy__echo", {"text": "over http"})
        tg.cancel_scope.cancel()
    assert text_of(result) == "over http"
    [run_id] = gateway_runs(store)
    call = [e for e in store.read_run(run_id) if e.kind == "tool.call"][0]
    assert call.principal == "ci-bot"


async def test_sealbox_gateway_serve_over_stdio_with_the_official_client(tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
principal: agent:desktop
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(TOY)}]
""")
    sealbox_cmd = str(Path(sys.executable).parent / "sealbox")
    params = StdioServerParameters(command=sealbox_cmd, args=["gateway", "serve", "--config", str(config)],
                                   env={"PATH": os.environ.get("PATH", "")})
    with anyio.fail_after(60):
        async with stdio_client(params) as (r, w), ClientSession(r, w) as client:
            await client.initialize()
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("toy__add", {"a": 1, "b": 2})
    assert "toy__add" in names and text_of(result) == "3"
    # stdio_client waits for the gateway process to exit; it ends the run on EOF before exiting
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                        "run.ended"]
        assert sealbox.verify_store(store).ok
    finally:
        store.close()
