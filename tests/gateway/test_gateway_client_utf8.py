"""A client message that is not UTF-8 (MCP's messages are UTF-8 JSON): refused as a parse error with the
request's id, over stdio and HTTP alike, and never forwarded with its bytes replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.gateway.transports import serve_http

from .conftest import toy_args, toy_config, toy_log

#: a tools/call whose argument holds the bytes FF FE (no UTF-8): the client sent no U+FFFD
NOT_UTF8 = (b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"toy__echo",'
            b'"arguments":{"text":"rm \xff\xfe"}}}')
REFUSED = {"jsonrpc": "2.0", "id": 2, "error": {
    "code": -32700, "message": "Parse error: the message is not valid UTF-8 (MCP messages are UTF-8 JSON)"}}


def test_a_stdio_call_that_is_not_utf8_is_a_parse_error_not_a_call_with_replaced_bytes(tmp_path):
    """The SDK's stdio transport decodes the client's input with errors="replace": a tools/call whose
    arguments held bytes that are not UTF-8 was forwarded and recorded with U+FFFD in their place, arguments
    the client never sent (a path, a query: another one than meant), and answered as a success. HTTP refused
    the same body (-32700). It is now a parse error with the request's id; nothing is recorded or forwarded."""
    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_LOG: {json.dumps(str(tmp_path / "toy.log"))}}}
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    lines = [json.dumps(init).encode(), b'{"jsonrpc":"2.0","method":"notifications/initialized"}', NOT_UTF8,
             b'{"jsonrpc":"2.0","id":3,"method":"ping"}']
    sealbox_cli = str(Path(sys.executable).parent / "sealbox")
    proc = subprocess.run([sealbox_cli, "gateway", "serve", "--config", str(config)],
                          input=b"".join(line + b"\n" for line in lines), capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    answers = sorted((json.loads(line) for line in proc.stdout.splitlines()), key=lambda a: a["id"])  # served concurrently
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert answers[1] == REFUSED
    assert answers[2] == {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert toy_log(tmp_path) == []
    calls = subprocess.run([sealbox_cli, "calls", "--store", str(tmp_path / "store"), "--json"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert (calls.returncode, json.loads(calls.stdout)) == (0, [])


TOKEN = "t0ken-for-the-tests-0123456789"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "authorization": f"Bearer {TOKEN}"}


@pytest.mark.anyio
async def test_an_http_body_that_is_not_utf8_is_a_parse_error_with_the_requests_id(tmp_path, store):
    """Over HTTP the SDK refused such a body with -32700 and id null, though the request's id could be read
    (the gateway answers other unparsable bodies with it): its client could not match the error to its
    request. It is now the parse error stdio answers, with the id; nothing is forwarded."""
    gw = Gateway(toy_config(tmp_path, extra=f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"),
                 store=store)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=30) as http:
            r = await http.post(url, json=init, headers=HEADERS)
            session = {**HEADERS, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            refused = await http.post(url, content=NOT_UTF8, headers=session)
            ok = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
        tg.cancel_scope.cancel()
    assert (refused.status_code, refused.json()) == (400, REFUSED)
    assert refused.headers["content-length"] == str(len(refused.content))
    assert ok.status_code == 200 and '"id":3' in ok.text
    assert toy_log(tmp_path) == []

