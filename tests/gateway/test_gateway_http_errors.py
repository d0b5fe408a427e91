"""HTTP transport errors of `sealbox gateway serve --http`: JSON-RPC bodies, the order of the checks, sessions
that a refused request must not leave open, and the cap on every client's sessions together."""

from __future__ import annotations

import anyio
import httpx2
import pytest

from sealbox.gateway import MALFORMED_REQUEST, REQUEST_TOO_LARGE, UNAUTHORIZED, Gateway
from sealbox.gateway.transports import serve_http

from .conftest import gateway_runs, toy_config

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-the-tests-0123456789"
HTTP = f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
AUTH = {**HEADERS, "authorization": f"Bearer {TOKEN}"}


def _error(code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def _open_sessions(gw: Gateway) -> int:
    return len(gw.server._session_manager._server_instances)


async def test_a_foreign_origin_is_refused_403_before_the_token_is_looked_at(tmp_path, store):
    """DNS-rebinding protection comes first: a browser page of another origin, with no token (or a wrong
    one), got HTTP 401 from the bearer check, which told it the gateway was there and wanted a token;
    the Origin check (the SDK's, behind the bearer check) was never reached. It is now answered 403 at
    once, with a JSON-RPC error, whatever the token; a Host other than the gateway's own likewise 421."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        evil = {"origin": "http://evil.example"}
        async with httpx2.AsyncClient(timeout=30) as http:
            no_token = await http.post(url, json=INIT, headers={**HEADERS, **evil})
            wrong_token = await http.post(url, json=INIT, headers={**HEADERS, **evil,
                                                                    "authorization": "Bearer wrong-token-00000000"})
            good_token = await http.post(url, json=INIT, headers={**AUTH, **evil})
            get_no_token = await http.get(url, headers={"accept": "text/event-stream", **evil})
            bad_host = await http.post(url, json=INIT, headers={**HEADERS, "host": "evil.example"})
            own = await http.post(url, json=INIT, headers={**AUTH, "origin": f"http://localhost:{port}"})
        tg.cancel_scope.cancel()
    refused = _error(UNAUTHORIZED, "Origin http://evil.example is not allowed (DNS-rebinding protection: the "
                                   "gateway's own origin or one in http.allowed_origins)")
    for response in (no_token, wrong_token, good_token, get_no_token):
        assert (response.status_code, response.headers["content-type"], response.json()) == (
            403, "application/json", refused)
        assert "www-authenticate" not in response.headers
    assert (bad_host.status_code, bad_host.json()) == (421, _error(
        UNAUTHORIZED, "Host evil.example is not allowed (DNS-rebinding protection: the gateway's own address)"))
    assert own.status_code == 200


async def test_transport_errors_the_sdk_answered_in_plain_text_are_json_rpc_errors(tmp_path, store):
    """The SDK answered a body above its size limit (413), a POST that is not application/json (400) and a
    path other than /mcp (404) with a text/plain body ("Request body too large"): an MCP client reads an
    HTTP error's body as a JSON-RPC error, and failed to parse it. Each is now a JSON-RPC error (null id) with
    the same status: REQUEST_TOO_LARGE for 413, MALFORMED_REQUEST for the others."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP + "limits:\n  max_request_bytes: 1024\n"), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        big = {**INIT, "params": {**INIT["params"], "pad": "x" * 5000}}
        async with httpx2.AsyncClient(timeout=30) as http:
            too_large = await http.post(url, json=big, headers=AUTH)
            text_body = await http.post(url, content=b"{}", headers={**AUTH, "content-type": "text/plain"})
            elsewhere = await http.post(f"http://127.0.0.1:{port}/other", json=INIT, headers=AUTH)
            sessions = _open_sessions(gw)
        tg.cancel_scope.cancel()
    answers = [(r.status_code, r.headers["content-type"], r.json()) for r in (too_large, text_body, elsewhere)]
    assert answers == [
        (413, "application/json", _error(REQUEST_TOO_LARGE, "the request body is larger than 4096 bytes (4 × "
                                                            "limits.max_request_bytes)")),
        (400, "application/json", _error(MALFORMED_REQUEST, "Invalid Content-Type header")),
        (404, "application/json", _error(MALFORMED_REQUEST, "Not Found")),
    ]
    assert sessions == 0


async def test_an_initialize_refused_as_too_large_opens_no_session(tmp_path, store):
    """An initialize whose params exceed limits.max_request_bytes (its body under the SDK's 4× limit) was
    answered REQUEST_TOO_LARGE, yet with HTTP 200 and an mcp-session-id: the SDK kept the session (and its
    server task) open, counted against the identity's sessions, until it idled out. A refused initialize
    now opens nothing: no session id is given, the SDK holds no session, the identity's count is unchanged."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP + "  max_sessions_per_identity: 1\n"
                            + "limits:\n  max_request_bytes: 1024\n"), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        big = {**INIT, "params": {**INIT["params"], "capabilities": {"experimental": {"pad": {"x": "y" * 2000}}}}}
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(url, json=big, headers={**AUTH, "accept": "application/json, text/event-stream"})
            with anyio.move_on_after(10):  # ended once its request is over (just after its answer)
                while _open_sessions(gw):
                    await anyio.sleep(0.02)
            after_refused = _open_sessions(gw)
            opened = await http.post(url, json=INIT, headers=AUTH)
        tg.cancel_scope.cancel()
    body = refused.json() if refused.headers.get("content-type") == "application/json" else _sse(refused.text)
    assert body["error"]["code"] == REQUEST_TOO_LARGE
    assert body["id"] == 1
    assert "mcp-session-id" not in refused.headers
    assert after_refused == 0
    assert opened.status_code == 200 and "mcp-session-id" in opened.headers  # the identity's one session


def _sse(text: str) -> dict:
    import json

    return json.loads([line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()][-1])


TOKEN_B = "token-of-bob-0123456789abcdef00"


async def test_the_sessions_of_every_identity_together_are_capped_by_http_max_sessions(tmp_path, store):
    """Only each identity's sessions were capped (http.max_sessions_per_identity, 100): with many identities,
    or a high per-identity cap, the gateway held up to the SDK's 10 000 sessions (about 50 KB and a server
    task each). http.max_sessions (default 1000) caps them all together: a request that would open one more
    gets HTTP 503 and TOO_MANY_CALLS with data {"limit": N}, nothing is opened or recorded, and a session that
    ends makes room again."""
    from sealbox.gateway import TOO_MANY_CALLS

    two = HTTP + f"    - {{token: {TOKEN_B}, identity: bob}}\n  max_sessions: 2\n"
    gw = Gateway(toy_config(tmp_path, extra=two), store=store)
    assert gw.config.max_sessions == 2
    bob = {**HEADERS, "authorization": f"Bearer {TOKEN_B}"}
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=30) as http:
            first = await http.post(url, json=INIT, headers=AUTH)
            second = await http.post(url, json=INIT, headers=bob)
            refused = await http.post(url, json=INIT, headers=bob)
            sessions = _open_sessions(gw)
            ended = await http.delete(url, headers={**AUTH, "mcp-session-id": first.headers["mcp-session-id"],
                                                    "mcp-protocol-version": "2025-11-25"})
            again = await http.post(url, json=INIT, headers=bob)
        tg.cancel_scope.cancel()
    assert [first.status_code, second.status_code] == [200, 200]
    assert (refused.status_code, refused.json(), "mcp-session-id" in refused.headers) == (503, {
        "jsonrpc": "2.0", "id": None, "error": {
            "code": TOO_MANY_CALLS, "message": "the gateway already has 2 HTTP sessions open (http.max_sessions, "
            "every identity together); try again once one has ended", "data": {"limit": 2}}}, False)
    assert sessions == 2
    assert ended.status_code == 200
    assert again.status_code == 200 and "mcp-session-id" in again.headers
    assert gateway_runs(store) == []  # sessions that made no call start no run: nothing recorded


def test_http_max_sessions_defaults_to_1000_and_is_checked(tmp_path):
    from sealbox.errors import ConfigError

    assert toy_config(tmp_path, extra=HTTP).max_sessions == 1000
    with pytest.raises(ConfigError, match="max_sessions"):
        toy_config(tmp_path, extra=HTTP + "  max_sessions: 0\n")


def test_http_max_connections_defaults_to_512_and_is_checked(tmp_path):
    from sealbox.errors import ConfigError

    assert toy_config(tmp_path, extra=HTTP).max_connections == 512
    assert toy_config(tmp_path, extra=HTTP + "  max_connections: 7\n").max_connections == 7
    with pytest.raises(ConfigError, match="max_connections"):
        toy_config(tmp_path, extra=HTTP + "  max_connections: 0\n")


async def test_without_the_sdks_session_table_a_refused_initialize_still_opens_no_session_and_caps_hold(
        tmp_path, store):
    """The gateway reads the MCP SDK's open sessions and ends a refused initialize's session through private
    attributes of its session manager. Where they cannot be found (another SDK version), a refused initialize's
    session stayed open until it idled out, and every session cap counted nothing (fail open). Now the session
    is ended through the SDK's own HTTP interface (a DELETE), and the caps count the sessions the gateway saw
    opened and not deleted (fail closed)."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP + "  max_sessions_per_identity: 1\n"
                            + "limits:\n  max_request_bytes: 1024\n"), store=store)
    made = []
    original = gw.server.streamable_http_app

    def hiding(*args, **kwargs):
        app = original(*args, **kwargs)
        made.append(gw.server._session_manager)
        gw.server._session_manager = None  # an SDK keeping its session manager elsewhere
        return app

    gw.server.streamable_http_app = hiding
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        [manager] = made
        big = {**INIT, "params": {**INIT["params"], "capabilities": {"experimental": {"pad": {"x": "y" * 2000}}}}}
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(url, json=big, headers=AUTH)
            with anyio.move_on_after(10):
                while manager._server_instances:
                    await anyio.sleep(0.02)
            after_refused = len(manager._server_instances)
            opened = await http.post(url, json=INIT, headers=AUTH)
            over = await http.post(url, json=INIT, headers=AUTH)
            ended = await http.delete(url, headers={**AUTH, "mcp-session-id": opened.headers["mcp-session-id"],
                                                    "mcp-protocol-version": "2025-11-25"})
            again = await http.post(url, json=INIT, headers=AUTH)
        tg.cancel_scope.cancel()
    body = refused.json() if refused.headers.get("content-type") == "application/json" else _sse(refused.text)
    assert (body["error"]["code"], "mcp-session-id" in refused.headers, after_refused) == (REQUEST_TOO_LARGE, False, 0)
    assert [opened.status_code, over.status_code, ended.status_code, again.status_code] == [200, 429, 200, 200]


async def test_a_request_http_cannot_parse_is_answered_400_with_a_json_rpc_error_and_not_logged(
        tmp_path, store, caplog):
    """uvicorn answered a request it could not parse (a bad request line or header line, two Content-Length
    headers, a non-ASCII path, a broken chunk) HTTP 400 in plain text ("Invalid HTTP request received."),
    which an MCP client cannot read, and logged a warning for each: any local process, with no token, could
    fill the operator's log. It is now a JSON-RPC error (MALFORMED_REQUEST, null id) with the status and
    connection: close, logged at debug level only; the gateway serves on."""
    import json
    import logging
    import socket

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    caplog.set_level(logging.DEBUG)

    def exchange(port: int, data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(10)
            sock.sendall(data)
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
            return out

    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        host = f"host: 127.0.0.1:{port}\r\nauthorization: Bearer {TOKEN}\r\n"
        bad = [b"GARBAGE\r\n\r\n",
               f"POST /mcp HTTP/1.1\r\n{host}bad header line\r\n\r\n".encode(),
               f"POST /mcp HTTP/1.1\r\n{host}content-length: 2\r\ncontent-length: 3\r\n\r\n{{}}".encode(),
               f"POST /m\xe9 HTTP/1.1\r\n{host}content-length: 0\r\n\r\n".encode("latin-1")]
        answers = [await anyio.to_thread.run_sync(exchange, port, data) for data in bad]
        async with httpx2.AsyncClient(timeout=30) as http:
            served = await http.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers=AUTH)
        tg.cancel_scope.cancel()
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
        assert b"content-type: application/json" in head.lower() and b"connection: close" in head.lower()
        assert json.loads(body) == _error(MALFORMED_REQUEST, "the request is not valid HTTP/1.1")
    assert served.status_code == 200
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
            and "Invalid HTTP request" in r.getMessage()] == []


async def test_a_session_opened_for_a_token_revoked_while_its_request_was_served_is_ended():
    """A SIGHUP reload ends the sessions of a revoked token; a session whose opening request was still being
    served when its token was revoked was not yet known, and stayed open (usable with its own session id by
    no one, yet counted, until it idled out). It is ended once its request is over. (An ASGI app stands in
    for the SDK: the race needs a reload between the request's token check and its answer.)"""
    from sealbox.gateway.transports import BearerAuth

    answer_now = anyio.Event()
    live: dict[str, object] = {}
    ended: list[str] = []

    async def sdk(scope, receive, send):  # opens session s1 once told to answer
        await receive()
        await answer_now.wait()
        live["s1"] = object()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"mcp-session-id", b"s1")]})
        await send({"type": "http.response.body", "body": b'{"jsonrpc": "2.0", "id": 1, "result": {}}'})

    async def discard(session_id):
        live.pop(session_id, None)
        ended.append(session_id)

    auth = BearerAuth(sdk, {TOKEN: "ci-bot"}, lambda: live, max_sessions_per_identity=5, discard=discard)
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [
        (k.encode(), v.encode()) for k, v in AUTH.items()]}
    sent: list[dict] = []
    body = [{"type": "http.request", "body": b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}'}]

    async def receive():
        if body:
            return body.pop()
        await anyio.sleep_forever()

    async def send(message):
        sent.append(message)

    async with anyio.create_task_group() as tg:
        tg.start_soon(auth, scope, receive, send)
        await anyio.wait_all_tasks_blocked()
        assert await auth.reload_tokens({"another-token-0123456789": "ci-bot"}) == 0  # nothing opened yet
        answer_now.set()
    assert sent[0]["status"] == 200
    assert (ended, live, auth.owners) == (["s1"], {}, {})
