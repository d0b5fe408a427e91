"""A request whose JSON is valid but nested deeper than the SDK's reader goes (200 levels of arrays and objects)
was answered -32700 "Parse error: Invalid JSON: recursion limit exceeded": the JSON is valid, so that told its
client its JSON was wrong. It is a limit of the gateway: now REQUEST_TOO_LARGE (-32004, the code of a request
beyond a limit) saying so, with the request's id, over stdio and HTTP alike. Nothing is recorded or forwarded."""

from __future__ import annotations

import json
import subprocess

import anyio
import httpx2
import pytest

import sealbox
from sealbox.gateway import REQUEST_TOO_LARGE, Gateway

from .conftest import gateway_runs, toy_config, toy_log
from .test_gateway_transports import HEADERS, HTTP, INIT, TOKEN, _serve, _stdio_gateway

TOO_DEEP = ("request too large: its JSON nests arrays and objects more than 200 levels deep, the gateway's limit "
            "(nothing was recorded or forwarded)")


def nested(request_id: int | str, depth: int) -> str:
    """A tools/call whose JSON nests ``depth`` levels in all (the message itself is level 1)."""
    inner = depth - 3  # the message, params, arguments
    return (json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                        "params": {"name": "toy__echo", "arguments": {"text": "deep", "n": 0}}})
            .replace('"n": 0', '"n": ' + "[" * inner + "0" + "]" * inner))


def test_valid_json_nested_too_deep_is_a_limit_over_stdio(tmp_path):
    argv, env = _stdio_gateway(tmp_path)
    lines = [json.dumps(INIT), '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             nested(2, 200), nested(3, 201), nested(4, 5000),
             '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"ok"}}}']
    proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    assert answers[2]["result"]["content"][0]["text"] == "deep"  # 200 levels: read
    assert answers[3] == {"jsonrpc": "2.0", "id": 3, "error": {"code": REQUEST_TOO_LARGE, "message": TOO_DEEP}}
    assert answers[4] == {"jsonrpc": "2.0", "id": 4, "error": {"code": REQUEST_TOO_LARGE, "message": TOO_DEEP}}
    assert answers[5]["result"]["content"][0]["text"] == "ok"
    assert [e["arguments"]["text"] for e in toy_log(tmp_path)] == ["deep", "ok"]


@pytest.mark.anyio
async def test_valid_json_nested_too_deep_is_a_limit_over_http(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient() as http:
            r = await http.post(url, json=INIT, headers=auth)
            session = {**auth, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            answers = [await http.post(url, content=nested(n, depth).encode(), headers=session)
                       for n, depth in ((3, 201), (4, 5000))]
        tg.cancel_scope.cancel()
    assert [(a.status_code, a.json()) for a in answers] == [
        (400, {"jsonrpc": "2.0", "id": n, "error": {"code": REQUEST_TOO_LARGE, "message": TOO_DEEP}}) for n in (3, 4)]
    assert toy_log(tmp_path) == []
    assert all(e.kind != "tool.call" for run in gateway_runs(store) for e in store.read_run(run))
    assert sealbox.verify_store(store).ok
