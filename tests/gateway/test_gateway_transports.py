"""The gateway over streamable HTTP (Origin, bearer tokens) and as a stdio command (`sealbox gateway serve`)."""

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
from sealbox.gateway import UNAUTHORIZED, Gateway
from sealbox.gateway.transports import serve_http

from .conftest import gateway_runs, kinds, text_of, toy_args, toy_config, toy_log

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-the-tests-0123456789"
HTTP = f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def _serve(gw, tg):
    return await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))


@pytest.mark.parametrize("given", [False, True])
async def test_a_cancelled_http_gateway_closes_its_listening_socket(tmp_path, store, given):
    """Cancelled (how a test or an embedding application stops it), serve_http left its listening
    socket open: the port still took connections (into a backlog nobody read) until the socket was
    garbage-collected, with a ResourceWarning in whichever test ran then. uvicorn closes it only in
    its own shutdown, which a cancellation skips. Now it is closed, whether serve_http bound it or
    was given it."""
    import socket

    from sealbox.gateway.transports import bind

    sock = bind(0) if given else None
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, sock=sock, task_status=task_status))
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it listens
        tg.cancel_scope.cancel()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    if given:
        assert sock.fileno() == -1


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


async def test_a_get_stream_with_last_event_id_opens_the_stream_instead_of_a_500(tmp_path, store, caplog):
    """The gateway keeps no events to replay (no event store), but a GET carrying ``Last-Event-ID`` (a client
    resuming its stream, e.g. a browser EventSource reconnecting) went to the SDK's replay, which returns
    without an answer when there is no store: uvicorn logged "ASGI callable returned without starting
    response" and answered 500. The header is now ignored (the specification lets a server not replay): the
    GET opens the session's stream, as without it; another identity's GET is still refused."""
    import logging

    gw = Gateway(toy_config(tmp_path, extra=HTTP + "    - {token: other-token-for-the-tests-000, identity: other}\n"),
                 store=store)
    caplog.set_level(logging.INFO)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(timeout=20) as http:
            init = await http.post(url, json=INIT, headers=auth)
            sid = init.headers["mcp-session-id"]
            auth = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=auth)
            other = await http.get(url, headers={**auth, "authorization": "Bearer other-token-for-the-tests-000",
                                                 "last-event-id": "1"})
            async with http.stream("GET", url, headers={**auth, "last-event-id": "1"}) as stream:
                opened = (stream.status_code, stream.headers.get("content-type"), stream.headers.get("mcp-session-id"))
        tg.cancel_scope.cancel()
    assert (other.status_code, other.json()["error"]["code"]) == (403, UNAUTHORIZED)
    assert opened == (200, "text/event-stream", sid)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_one_token_given_to_two_identities_is_refused_before_serving(tmp_path, store, monkeypatch):
    """The tokens were read into a dict: a token listed for two identities (a copy-paste, or two
    variables holding the same value) silently recorded every call made with it as the last one's."""
    from sealbox.errors import ConfigError
    from sealbox.gateway.transports import http_app

    monkeypatch.setenv("SEALBOX_T_SAME", TOKEN)
    twice = (f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"
             "    - {token: other-t0ken-0123456789, identity: ci-bot}\n"
             "    - {token_env: SEALBOX_T_SAME, identity: release-bot}\n")
    with pytest.raises(ConfigError) as err:
        http_app(Gateway(toy_config(tmp_path, extra=twice), store=store), 0)
    assert str(err.value) == ("gateway.yaml: http.tokens: identities ci-bot and release-bot have the same token; "
                              "give each identity its own")
    assert TOKEN not in str(err.value)
    http_app(Gateway(toy_config(tmp_path, extra=HTTP + f"    - {{token: {TOKEN}, identity: ci-bot}}\n"),
                     store=store), 0)  # the same token twice for the same identity is harmless


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
    args: {json.dumps(toy_args())}
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


def _http_serve_process(tmp_path, *, toy_log: Path | None = None, http_extra: str = "", env_extra: dict | None = None):
    """``sealbox gateway serve --http 0`` on the toy upstream as a subprocess; (process, port). With
    ``toy_log``, the toy upstream logs each call it receives there (TOY_LOG); ``http_extra``: more lines of
    the config's ``http:`` section."""
    import re
    import subprocess
    import time

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
{HTTP}{http_extra}upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""" + (f"    env: {{TOY_LOG: {json.dumps(str(toy_log))}}}\n" if toy_log is not None else ""))
    sealbox_cmd = str(Path(sys.executable).parent / "sealbox")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")} | (env_extra or {})
    proc = subprocess.Popen([sealbox_cmd, "gateway", "serve", "--config", str(config), "--http", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"serving http://127\.0\.0\.1:(\d+)/mcp", line)
        if found:
            return proc, int(found.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait(timeout=10)
    with proc.stdout, proc.stderr:
        raise AssertionError(f"the gateway did not start: {line!r} {proc.stderr.read()!r}")


async def test_a_connection_that_never_finishes_its_request_head_is_closed(tmp_path, store, monkeypatch):
    """uvicorn times out only an idle keep-alive connection, never a request head still arriving: a client
    sending its headers a byte at a time (slowloris) kept each connection open for good (measured: 700 such
    connections still open after 30 s; with no token needed, the gateway's file descriptors were the only
    bound). A connection whose request head is not complete within transports.HEAD_TIMEOUT_S of its opening
    (or of its previous answer) is now closed; complete requests are served as before."""
    import socket

    from sealbox.gateway import transports

    monkeypatch.setattr(transports, "HEAD_TIMEOUT_S", 0.5, raising=False)
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)

    def closed_by_server(sock: socket.socket) -> bytes:
        sock.settimeout(5)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data

    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        first = socket.create_connection(("127.0.0.1", port))
        first.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n".encode())
        second = socket.create_connection(("127.0.0.1", port))  # one answered request, then a head never finished
        body = json.dumps(INIT).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in {**HEADERS, "authorization": f"Bearer {TOKEN}"}.items())
        second.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}content-length: {len(body)}\r\n\r\n"
                       .encode() + body)
        await anyio.sleep(0.3)
        second.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n".encode())
        with first, second:
            leftover_first = await anyio.to_thread.run_sync(closed_by_server, first)
            answered_second = await anyio.to_thread.run_sync(closed_by_server, second)
        async with httpx2.AsyncClient(timeout=20) as http:
            init = await http.post(f"http://127.0.0.1:{port}/mcp", json=INIT,
                                   headers={**HEADERS, "authorization": f"Bearer {TOKEN}"})
            sid = init.headers["mcp-session-id"]
        # two pipelined requests, the second a call longer than the head timeout: served, not cut
        session_head = head + f"mcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n"
        listing = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()
        slow = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                           "params": {"name": "toy__slow", "arguments": {"seconds": 1.5}}}).encode()
        third = socket.create_connection(("127.0.0.1", port))
        with third:
            third.sendall(b"".join(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{session_head}content-length: "
                                   f"{len(b)}\r\n\r\n".encode() + b for b in (listing, slow)))
            pipelined = await anyio.to_thread.run_sync(closed_by_server, third)
        tg.cancel_scope.cancel()
    assert b'"id":2,"result"' in pipelined and b'"id":3,"result"' in pipelined and b"slow done" in pipelined
    assert leftover_first == b""
    assert answered_second.startswith(b"HTTP/1.1 200 OK\r\n") and answered_second.count(b"HTTP/1.1") == 1
    assert init.status_code == 200


def test_connections_over_http_max_connections_close_an_idle_one_or_are_answered_503(tmp_path):
    """Nothing bounded the TCP connections of `gateway serve --http` but the process's file descriptors (an
    idle one lasts 15 s, a new one is free and needs no token; uvicorn's own limit answers plain text).
    http.max_connections bounds them: one more closes the longest-idle connection (no request being served);
    when every connection is serving a request, the new one's request is answered HTTP 503 with a JSON-RPC
    error (TOO_MANY_CALLS, data {"limit": N}) and closed. A flood of connections leaves the gateway serving."""
    import socket
    import time

    proc, port = _http_serve_process(tmp_path, http_extra="  max_connections: 3\n")
    auth = f"authorization: Bearer {TOKEN}\r\n"

    def request(extra: str = "", body: bytes = b"{}") -> bytes:
        return (f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
                f"accept: application/json, text/event-stream\r\n{extra}content-length: {len(body)}\r\n\r\n"
                ).encode() + body

    def answer(sock: socket.socket) -> bytes:
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data

    def busy() -> socket.socket:  # a request whose body is still to come: being served (its 100 Continue read)
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(request(auth + "expect: 100-continue\r\n", b"x" * 100)[:-100])
        sock.settimeout(10)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        return sock

    try:
        serving = [busy() for _ in range(3)]
        with socket.create_connection(("127.0.0.1", port)) as refused:
            refused.sendall(request())
            over = answer(refused)
        for sock in serving:
            sock.close()
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        with socket.create_connection(("127.0.0.1", port)) as newer:
            newer.sendall(request())  # no token: answered 401 once the oldest idle connection is closed
            served = answer(newer)
        evicted = answer(idle[0])
        idle[1].setblocking(False)
        try:
            idle[1].recv(1)
            still_open = False
        except BlockingIOError:
            still_open = True
        for sock in idle:
            sock.close()
        flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        for sock in flood:
            sock.close()
        deadline = time.monotonic() + 30
        while True:  # the flood's connections are closed by the gateway as they are seen to be gone
            with httpx2.Client(timeout=30) as http:
                after = http.post(f"http://127.0.0.1:{port}/mcp", json=INIT,
                                  headers={**HEADERS, "authorization": f"Bearer {TOKEN}"})
            if after.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        alive = proc.poll() is None
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()
    head, _, body = over.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"content-type: application/json" in head.lower()
    assert b"connection: close" in head.lower()
    assert json.loads(body) == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32017, "message": "the gateway already has 3 HTTP connections open, each serving a request "
        "(http.max_connections); try again once one has been answered", "data": {"limit": 3}}}
    assert served.startswith(b"HTTP/1.1 401 ")
    assert (evicted, still_open) == (b"", True)
    assert alive and after.status_code == 200
    assert code == 0 and "Traceback" not in stderr, stderr


def test_requests_anyone_can_send_log_nothing_on_the_gateways_stderr(tmp_path):
    """uvicorn logged a warning for each request it could not parse, and two for each WebSocket upgrade request
    ("Unsupported upgrade request.", "No supported WebSocket library detected…"; upgrades are not served): any
    local process, with no token, could fill the operator's log. Both are answered (400 JSON-RPC; the upgrade
    as plain HTTP: 401 without a token) and nothing is written on stderr."""
    import socket

    proc, port = _http_serve_process(tmp_path)

    def exchange(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(10)
            sock.sendall(data)
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
            return out

    host = f"host: 127.0.0.1:{port}\r\n"
    try:
        garbled = exchange(b"GARBAGE\r\n\r\n")
        upgrade = exchange(f"GET /mcp HTTP/1.1\r\n{host}accept: text/event-stream\r\nconnection: upgrade\r\n"
                           "upgrade: websocket\r\nsec-websocket-version: 13\r\n"
                           "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode())
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()
    assert garbled.startswith(b"HTTP/1.1 400 ") and upgrade.startswith(b"HTTP/1.1 401 ")
    assert (code, stderr) == (0, "")


def test_sighup_reloads_http_tokens_refusing_revoked_ones_and_ending_their_sessions(tmp_path):
    """http.tokens could only change with a restart (SIGHUP killed the gateway: no clean stop, no final
    checkpoint). SIGHUP now re-reads the config's tokens: a token no longer listed (or mapped to another identity)
    is refused at once (401) and the sessions it opened are ended (their GET streams closed); the other tokens
    and their sessions are untouched; a config that does not load keeps the tokens in use (one stderr line)."""
    import signal
    import time

    bob = "token-of-bob-0123456789abcdef00"
    proc, port = _http_serve_process(tmp_path, http_extra=f"    - {{token: {bob}, identity: bob}}\n")
    url = f"http://127.0.0.1:{port}/mcp"
    config = tmp_path / "gateway.yaml"
    alice_h = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
    bob_h = {**HEADERS, "authorization": f"Bearer {bob}"}

    def session(http, headers):
        init = http.post(url, json=INIT, headers=headers)
        assert init.status_code == 200, init.text
        headers = {**headers, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        assert http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers=headers).status_code == 202
        return headers

    def listing(http, headers):
        return http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers).status_code

    try:
        with httpx2.Client(timeout=30) as http:
            alice_s, bob_s = session(http, alice_h), session(http, bob_h)
            config.write_text("version: [\n")  # a broken config: the tokens in use are kept
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while "not reloaded" not in (line := proc.stderr.readline()) and time.monotonic() < deadline:
                pass
            kept = line
            before = [listing(http, alice_s), listing(http, bob_s)]
            config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
{HTTP}upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""")
            with http.stream("GET", url, headers={**bob_s, "accept": "text/event-stream"}) as events:
                assert events.status_code == 200
                proc.send_signal(signal.SIGHUP)
                streamed = b"".join(events.iter_raw())  # ends once bob's session is ended
            deadline = time.monotonic() + 30
            while (revoked := http.post(url, json=INIT, headers=bob_h)).status_code != 401 \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            after = [listing(http, alice_s), listing(http, {**bob_s, "authorization": f"Bearer {TOKEN}"})]
        alive = proc.poll() is None
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()
    assert "SIGHUP: the config was not reloaded" in kept and "http.tokens in use are kept" in kept
    assert before == [200, 200]
    assert streamed == b"" or b"event" not in streamed
    assert revoked.status_code == 401
    assert after == [200, 404]  # alice's session untouched; bob's is gone (alice asks: unknown, not someone else's)
    assert alive and code == 0 and "Traceback" not in stderr, stderr
    assert "SIGHUP: http.tokens reloaded (1 token, 1 identity); 1 session of a revoked token ended" in stderr


def test_sighup_as_soon_as_the_gateway_says_it_serves_reloads_the_tokens_not_kills_it(tmp_path):
    """'serving http://...' is printed before the gateway starts its event loop, where the SIGHUP reload is
    installed: a SIGHUP soon after that line (a deploy script reloading the tokens once the gateway is up)
    killed it (exit -1: no clean stop, no final checkpoint). A SIGHUP until the reload is installed is now
    remembered and the tokens reloaded once it is."""
    import signal
    import time

    proc, port = _http_serve_process(tmp_path)
    try:
        proc.send_signal(signal.SIGHUP)  # at once: the gateway is still starting its upstreams
        deadline = time.monotonic() + 60
        line = ""
        while "SIGHUP" not in line and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stderr.readline()
        with httpx2.Client(timeout=60) as http:
            answered = http.post(f"http://127.0.0.1:{port}/mcp", json=INIT,
                                 headers={**HEADERS, "authorization": f"Bearer {TOKEN}"})
    except httpx2.ConnectError:
        answered = None
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()
    assert code == 0 and "Traceback" not in stderr, (code, stderr)
    assert "SIGHUP: http.tokens reloaded (1 token, 1 identity); 0 sessions of a revoked token ended" in line, line
    assert answered is not None and answered.status_code == 200


def test_sighup_reload_reading_a_slow_config_does_not_stop_the_gateway_serving(tmp_path):
    """The SIGHUP reload read the config file on the event loop: while it waited for it (a named pipe
    nothing writes to is waited for up to SEALBOX_PIPE_WAIT; a slow network disk the same), no request
    was answered, not even one that needs no reload. The file is now read off the loop: a request is
    answered while the reload still waits, and the reload then ends with what the pipe gave."""
    import signal
    import time

    proc, port = _http_serve_process(tmp_path, env_extra={"SEALBOX_PIPE_WAIT": "120"})
    url = f"http://127.0.0.1:{port}/mcp"
    config = tmp_path / "gateway.yaml"
    text = config.read_text()
    config.unlink()
    os.mkfifo(config)
    try:
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)  # the reload has started waiting for the pipe (no line to wait for: it prints when done)
        with httpx2.Client(timeout=60) as http:
            answered = http.post(url, json=INIT, headers={**HEADERS, "authorization": f"Bearer {TOKEN}"})
        reloading = proc.poll() is None
        with open(config, "w") as pipe:  # the reload reads the config now
            pipe.write(text)
        deadline = time.monotonic() + 60
        line = ""
        while "SIGHUP" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()
    assert answered.status_code == 200 and reloading
    assert "SIGHUP: http.tokens reloaded (1 token, 1 identity); 0 sessions of a revoked token ended" in line, line
    assert code == 0 and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_http_gateway_stopped_by_a_signal_ends_its_runs_and_signs_a_final_checkpoint(tmp_path, signame):
    """The client's session is still open (no DELETE, its event stream held open) when the signal comes."""
    import signal
    import subprocess

    proc, port = _http_serve_process(tmp_path)
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
    try:
        with httpx2.Client(timeout=30) as http:
            init = http.post(url, json=INIT, headers=headers)
            assert init.status_code == 200, init.text
            headers["mcp-session-id"] = init.headers["mcp-session-id"]
            headers["mcp-protocol-version"] = "2025-11-25"
            assert http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                             headers=headers).status_code == 202
            call = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                         "params": {"name": "toy__add", "arguments": {"a": 2, "b": 3}}})
            [data] = [line[6:] for line in call.text.splitlines() if line.startswith("data: ")] or [call.text]
            with http.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as events:
                assert events.status_code == 200
                proc.send_signal(getattr(signal, signame))
                code = proc.wait(timeout=60)
        stderr = proc.stderr.read()
    except BaseException:
        proc.kill()
        raise
    finally:
        proc.stderr.close()
        proc.stdout.close()
    assert json.loads(data)["result"]["content"] == [{"type": "text", "text": "5"}]
    assert code == 0, stderr
    assert "Traceback" not in stderr
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                        "run.ended"]
        assert store.latest_checkpoint().tree_size == store.size()
        report = sealbox.verify_store(store)
        assert report.ok and report.unsigned_events == 0
    finally:
        store.close()
    out = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "verify", "--store", str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Warning" not in out.stdout + out.stderr, out.stdout + out.stderr


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_stdio_gateway_stopped_by_a_signal_ends_its_run_and_signs_a_final_checkpoint(tmp_path, signame):
    """The client keeps stdin open (no EOF): the signal alone stops the gateway, which ends the run,
    stops the upstream and closes the store. SIGHUP (the terminal or session it ran in went away) killed
    a stdio gateway (exit -1, run not ended, store not closed): it is now the same clean stop."""
    import signal
    import subprocess

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def send(message):
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    try:
        send(INIT)
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "toy__add", "arguments": {"a": 2, "b": 3}}})
        answer = json.loads(proc.stdout.readline())
        proc.send_signal(getattr(signal, signame))
        code = proc.wait(timeout=30)
        stderr = proc.stderr.read()
    except BaseException:
        proc.kill()
        raise
    finally:
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
    assert answer["result"]["content"] == [{"type": "text", "text": "5"}]
    said = ("sealbox-gateway: SIGHUP: the gateway's terminal or session went away; stopping as for SIGTERM\n"
            if signame == "SIGHUP" else "")
    assert (code, stderr) == (0, said)
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                        "run.ended"]
        assert store.latest_checkpoint().tree_size == store.size()
        assert sealbox.verify_store(store).unsigned_events == 0
    finally:
        store.close()


def test_stdio_gateway_stopped_while_a_call_is_held_answers_it_pending_first(tmp_path):
    """SIGTERM while a call waits for an approval used to close stdout with no reply to that call."""
    import signal
    import subprocess
    import time

    sealbox.init_store(tmp_path / "store").close()
    (tmp_path / "policy.yaml").write_text("""version: 1
rules:
  - id: add-needs-ops
    match: {server: toy, tool: add}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
""")
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ./policy.yaml
limits: {{approval_hold_s: 120}}
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def send(message):
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    try:
        send(INIT)
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "toy__add", "arguments": {"a": 2, "b": 3}}})
        store = sealbox.open_store(tmp_path / "store", readonly=True)
        try:
            deadline = time.monotonic() + 30
            while not any(k == "run.suspended" for rid in gateway_runs(store) for _, k in kinds(store, rid)):
                assert time.monotonic() < deadline, "the call was never held"
                time.sleep(0.05)
        finally:
            store.close()
        time.sleep(0.3)  # held, polling
        proc.send_signal(signal.SIGTERM)
        answer = json.loads(proc.stdout.readline())
        code = proc.wait(timeout=30)
        stderr = proc.stderr.read()
    except BaseException:
        proc.kill()
        raise
    finally:
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
    assert answer["id"] == 2 and answer["result"]["isError"] is True
    text = answer["result"]["content"][0]["text"]
    assert "pending; the gateway is shutting down; call again with the same arguments once it is back" in text
    assert (code, stderr) == (0, "")
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision",
                                                        "approval.requested", "run.suspended"]
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


@pytest.mark.parametrize("where", ["sealbox.gateway.config.load_config", "sealbox.gateway.server.Gateway"])
def test_a_stop_while_the_gateway_starts_is_a_clean_exit(tmp_path, monkeypatch, where):
    """SIGTERM is handled from the first line of `gateway serve` (it killed the process, status 143,
    while the gateway loaded its config and opened its store): a KeyboardInterrupt there is exit 0."""
    import importlib

    from click.testing import CliRunner

    from sealbox.cli.main import cli

    module, name = where.rsplit(".", 1)

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    import sealbox.cli.gateway_cmds as gateway_cmds

    installed = []
    monkeypatch.setattr(gateway_cmds, "_sigterm_as_sigint", lambda **_: installed.append(True))  # not in pytest itself
    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    sealbox.init_store(tmp_path / "store").close()
    (tmp_path / "gw.yaml").write_text(f"version: 1\nstore: ./store\npolicy: ALLOW_ALL\nupstreams:\n  - id: toy\n"
                                      f"    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n")
    res = CliRunner().invoke(cli, ["gateway", "serve", "--config", str(tmp_path / "gw.yaml")], catch_exceptions=False)
    assert res.exit_code == 0 and res.output == "" and installed == [True]


def test_serve_freezes_the_startup_heap_before_serving(tmp_path):
    """`gateway serve` moves what it made while starting (the MCP SDK's models, config, policy: ~93,000
    objects) to the GC's permanent generation before it serves: collections while serving and the one at
    exit no longer scan them (the exit of a stdio session spent ~0.2 s of CPU there)."""
    sealbox.init_store(tmp_path / "store").close()
    (tmp_path / "gw.yaml").write_text(f"version: 1\nstore: ./store\npolicy: ALLOW_ALL\nupstreams:\n  - id: toy\n"
                                      f"    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n")
    code = ("import gc, sealbox.cli.gateway_cmds as g\n"
            "g._serve = lambda gateway, port: print('serving', gc.get_freeze_count() > 10000)\n"
            "from sealbox.cli.main import main\n"
            f"main(['gateway', 'serve', '--config', {str(tmp_path / 'gw.yaml')!r}])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, "serving True\n", "")


async def test_a_client_that_listed_the_tools_is_told_of_a_change_over_http(tmp_path, store):
    """Over streamable HTTP the gateway announced ``tools.listChanged: false`` (the SDK builds the
    initialize answer without the gateway's options), and only sessions that had made a call were
    sent ``notifications/tools/list_changed``: a client that had listed the tools and not yet
    called one kept the old listing after a rug pull."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    got: list[str] = []

    async def note(message):
        got.append(getattr(getattr(message, "root", message), "method", ""))

    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        a_http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
        b_http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
        async with a_http, streamable_http_client(url, http_client=a_http) as (r, w):
            async with ClientSession(r, w, message_handler=note) as a:
                with anyio.fail_after(30):
                    init = await a.initialize()
                    before = {t.name for t in (await a.list_tools()).tools}
                    async with b_http, streamable_http_client(url, http_client=b_http) as (r2, w2):
                        async with ClientSession(r2, w2) as b:
                            await b.initialize()
                            assert text_of(await b.call_tool("toy__mutate", {})) == "mutated"
                    while "notifications/tools/list_changed" not in got:
                        await anyio.sleep(0.05)
                    after = {t.name for t in (await a.list_tools()).tools}
        tg.cancel_scope.cancel()
    assert init.capabilities.tools is not None and init.capabilities.tools.list_changed is True
    assert "toy__extra" not in before and "toy__extra" in after
    assert len(gateway_runs(store)) == 1  # only b called a tool: a's listing started no run


async def test_arguments_holding_nan_or_infinity_are_refused_not_forwarded_as_null(tmp_path, store):
    """The SDK reads NaN / Infinity in a request (not JSON numbers) and writes them as null: the call
    was decided and recorded with n = Infinity and the upstream got n = null."""
    from sealbox.gateway import MALFORMED_REQUEST

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
    answers = []
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient(timeout=20) as http:
            init = await http.post(url, json=INIT, headers=auth)
            auth["mcp-session-id"] = init.headers["mcp-session-id"]
            await http.post(url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers=auth)
            for i, bad in enumerate(['{"text":"x","n":NaN}', '{"text":"x","deep":[{"n":-Infinity}]}',
                                     '{"text":"ok","n":1.5}'], start=2):
                body = f'{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"toy__echo","arguments":{bad}}}}}'
                r = await http.post(url, content=body.encode(), headers=auth)
                answers.append(json.loads(r.text.split("data: ", 1)[1].split("\n", 1)[0]))
        tg.cancel_scope.cancel()
    assert [a.get("error", {}).get("code") for a in answers] == [MALFORMED_REQUEST, MALFORMED_REQUEST, None]
    assert answers[0]["error"]["message"] == "tools/call params.arguments.n: NaN and Infinity are not JSON numbers"
    assert answers[1]["error"]["message"] == ("tools/call params.arguments.deep[0].n: NaN and Infinity are not "
                                              "JSON numbers")
    assert answers[2]["result"]["content"][0]["text"] == "ok"
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "ok", "n": 1.5}}]  # nothing else forwarded
    [run_id] = gateway_runs(store)
    assert [e.payload["arguments"] for e in store.read_run(run_id) if e.kind == "tool.call"] == [{"text": "ok", "n": 1.5}]


def test_a_stdio_line_the_gateway_cannot_read_is_answered_not_dropped(tmp_path):
    """The SDK's stdio server dropped a line it could not parse without a word: a request with a
    lone surrogate (valid for Python's JSON reader, not for the SDK's), bad JSON, or an object that
    is no JSON-RPC message was never answered and its client waited until its own timeout. So were a
    request nested too deep for Python's reader too (answered with a null id), and a request whose id
    is null or a fraction (read by the SDK as a notification). A request nested deeper than the gateway reads is
    answered REQUEST_TOO_LARGE (-32004), not a parse error (tests/gateway/test_gateway_deep_nesting.py)."""
    import subprocess

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"version: 1\nstore: ./store\npolicy: ALLOW_ALL\nupstreams:\n  - id: toy\n"
                      f"    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n"
                      f"    env: {{TOY_LOG: {json.dumps(str(tmp_path / 'toy.log'))}}}\n")
    sealbox_cmd = str(Path(sys.executable).parent / "sealbox")
    lines = [
        json.dumps(INIT),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"\\ud800"}}}',
        '{nope',
        '',
        '{"jsonrpc":"2.0","id":"s","method":5}',
        '[{"jsonrpc":"2.0","id":3,"method":"ping"}]',
        '{"jsonrpc":"2.0","method":"notifications/x","params":"\\ud800"}',  # a notification: not answered
        '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"toy__echo","arguments":'
        + '{"a":' * 5000 + '1' + '}' * 5000 + '}}',  # too deep for both parsers: the id is read from the start
        '{"jsonrpc":"2.0","method":"ping","id":"m","params":' + '[' * 5000 + ']' * 5000 + '}',
        '{"jsonrpc":"2.0","id":7,"result":' + '[' * 5000 + ']' * 5000 + '}',  # a response: not answered
        '{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"n"}}}',
        '{"jsonrpc":"2.0","id":1.5,"method":"ping"}',  # the SDK read these two as notifications and dropped them
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"ok"}}}',
    ]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.run([sealbox_cmd, "gateway", "serve", "--config", str(config)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, env=env, timeout=60)
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stderr
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
        (1, None), (2, -32700), (None, -32700), ("s", -32600), (None, -32600), (5, -32004), ("m", -32004),
        (None, -32600), (None, -32600), (4, None)]
    assert answers[1]["error"]["message"].startswith("Parse error: Invalid JSON: ")
    assert answers[5]["error"]["message"] == answers[6]["error"]["message"] == (
        "request too large: its JSON nests arrays and objects more than 200 levels deep, the gateway's limit "
        "(nothing was recorded or forwarded)")
    assert answers[7]["error"]["message"] == ("Invalid request: a request's id must be a string or an integer "
                                              "(method 'tools/call')")
    assert answers[-1]["result"]["content"][0]["text"] == "ok"
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "ok"}}]


def _stdio_gateway(tmp_path):
    """``sealbox gateway serve`` over stdio on the toy upstream (its calls logged): (argv, env)."""
    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"version: 1\nstore: ./store\npolicy: ALLOW_ALL\nupstreams:\n  - id: toy\n"
                      f"    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n"
                      f"    env: {{TOY_LOG: {json.dumps(str(tmp_path / 'toy.log'))}}}\n")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    return [str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)], env


def _ended_calls(tmp_path):
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        events = list(store.read_run(run_id))
        assert sealbox.verify_store(store).ok
        return [e.kind for e in events], [e.payload.get("ok") for e in events if e.kind == "tool.result"]
    finally:
        store.close()


def test_requests_written_before_stdin_closes_are_answered(tmp_path):
    """A client that writes its requests and closes stdin (a pipe; MCP's stdio shutdown closes stdin
    first) had its calls carried out and recorded, but their replies were never written."""
    import subprocess

    argv, env = _stdio_gateway(tmp_path)
    lines = [json.dumps(INIT), '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"toy__slow","arguments":{"seconds":0.5}}}',
             '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"e"}}}']
    proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    assert answers[2]["result"]["content"][0]["text"] == "slow done"
    assert answers[3]["result"]["content"][0]["text"] == "e"
    kinds_, oks = _ended_calls(tmp_path)
    assert kinds_[-1] == "run.ended" and oks == [True, True]


def test_two_requests_with_one_id_written_before_stdin_closes_are_both_answered(tmp_path):
    """The stdio relay counted the requests still unanswered as a set of ids: a client that reused an id
    for a second request while the first was in flight (against JSON-RPC, but the SDK serves both) had
    the EOF passed on at the first answer, and the other request's reply was never written."""
    import subprocess

    argv, env = _stdio_gateway(tmp_path)
    lines = [json.dumps(INIT), '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"toy__slow","arguments":{"seconds":1}}}',
             '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"e"}}}']
    proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    texts = sorted(a["result"]["content"][0]["text"] for a in map(json.loads, proc.stdout.splitlines()) if a["id"] == 7)
    assert texts == ["e", "slow done"]


def test_a_client_that_stops_reading_ends_the_session_cleanly(tmp_path):
    """A client that exits closes the pipe the gateway writes to: writing a reply raised
    BrokenPipeError out of the SDK's stdout writer and the gateway ended with 'internal error' (exit
    70). Now it is a disconnect: the call still upstream is recorded, the run ended, exit 0."""
    import subprocess
    import time

    argv, env = _stdio_gateway(tmp_path)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        def send(message):
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()

        send(INIT)
        assert json.loads(proc.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "toy__slow", "arguments": {"seconds": 1.5}}})
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "toy__slow", "arguments": {"seconds": 0.3}}})
        time.sleep(0.1)
        proc.stdout.close()  # the client is gone: the reply to call 3 hits a closed pipe
        time.sleep(1.0)
        proc.stdin.close()
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdin.close()
        proc.stdout.close()
    with proc.stderr:
        stderr = proc.stderr.read().decode()
    assert (code, "internal error" in stderr) == (0, False), stderr
    kinds_, oks = _ended_calls(tmp_path)
    assert kinds_[-1] == "run.ended" and oks == [True, True]
    assert [e["arguments"]["seconds"] for e in toy_log(tmp_path)] == [1.5, 0.3]


async def test_two_identities_joining_one_run_share_its_step_numbers(tmp_path, store):
    """Each (run, identity) joined had its own step counter, read from the run when that identity
    joined: alice-bot and bob-bot joining one run and calling in turn recorded bob-bot's calls at the
    steps of alice-bot's (steps 2 and 3 twice), which breaks replay's step keys. One counter per run now."""
    from contextlib import AsyncExitStack

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    agent_run.start()
    other = "other-t0ken-0123456789"
    two = HTTP.replace("ci-bot", "alice-bot") + f"    - {{token: {other}, identity: bob-bot}}\n"
    gw = Gateway(toy_config(tmp_path, extra=two), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        async with AsyncExitStack() as stack:
            clients = []
            for token in (TOKEN, other):
                http = await stack.enter_async_context(httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}))
                r, w = await stack.enter_async_context(streamable_http_client(f"http://127.0.0.1:{port}/mcp",
                                                                              http_client=http))
                client = await stack.enter_async_context(ClientSession(r, w))
                with anyio.fail_after(20):
                    await client.initialize()
                clients.append(client)
            alice, bob = clients
            with anyio.fail_after(30):
                for client, text in ((alice, "A1"), (bob, "B1"), (alice, "A2"), (bob, "B2")):
                    result = await client.call_tool("toy__echo", {"text": text}, meta={"sealbox/run_id": agent_run.run_id})
                    assert text_of(result) == text
        tg.cancel_scope.cancel()
    calls = [(e.step, e.principal, e.payload["arguments"]["text"]) for e in store.read_run(agent_run.run_id)
             if e.kind == "tool.call"]
    assert calls == [("2", "alice-bot", "A1"), ("3", "bob-bot", "B1"), ("4", "alice-bot", "A2"), ("5", "bob-bot", "B2")]
    results = [e.step for e in store.read_run(agent_run.run_id) if e.kind == "tool.result"]
    assert results == ["2", "3", "4", "5"]


async def test_a_value_one_identity_redacted_is_scrubbed_from_the_other_identitys_calls(tmp_path, store):
    """alice-bot's call holds an api_key (JSON in its text: redacted by key name, so the run remembers
    it); bob-bot, joining the same run, passes that key on in plain text. The two contexts share the
    run's steps (5f38a19) and now its redacted values too: bob-bot's tool.call, decision inputs and
    result hold the key's in-string marker, not the key (raw sealbox.db and -wal bytes)."""
    from contextlib import AsyncExitStack

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    key = "ak-live-7d1e-shared-run-key"
    agent_run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    agent_run.start()
    other = "other-t0ken-0123456789"
    two = HTTP.replace("ci-bot", "alice-bot") + f"    - {{token: {other}, identity: bob-bot}}\n"
    gw = Gateway(toy_config(tmp_path, extra=two), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        async with AsyncExitStack() as stack:
            clients = []
            for token in (TOKEN, other):
                http = await stack.enter_async_context(httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}))
                r, w = await stack.enter_async_context(streamable_http_client(f"http://127.0.0.1:{port}/mcp",
                                                                              http_client=http))
                client = await stack.enter_async_context(ClientSession(r, w))
                with anyio.fail_after(20):
                    await client.initialize()
                clients.append(client)
            alice, bob = clients
            with anyio.fail_after(30):
                for client, text in ((alice, json.dumps({"api_key": key})), (bob, f"use {key}")):
                    result = await client.call_tool("toy__echo", {"text": text}, meta={"sealbox/run_id": agent_run.run_id})
                    assert text_of(result) == text  # the upstream and the client see the real value
        tg.cancel_scope.cancel()
    agent_run.end()
    calls = [(e.principal, e.payload["arguments"]["text"]) for e in store.read_run(agent_run.run_id) if e.kind == "tool.call"]
    assert [p for p, _ in calls] == ["alice-bot", "bob-bot"]
    assert calls[1][1].startswith("use \u27e6redacted:hmac-sha256:") and key not in calls[1][1]
    folder = Path(store.path)
    assert key.encode() not in b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("sealbox.db"))


async def test_the_owner_of_a_session_that_timed_out_is_forgotten(tmp_path, store):
    """BearerAuth kept each session's owning identity until a DELETE or a 404 on that id: a session that
    ended by its idle timeout (a client that went away without DELETE, the common case) stayed in
    ``owners`` for the life of the process, one entry per session ever opened. It is now dropped when
    the next session opens."""
    from sealbox.gateway import transports

    gw = Gateway(toy_config(tmp_path, extra=HTTP + "  session_idle_s: 0.5\n"), store=store)
    apps = []
    real = transports.http_app

    def keep(g, port):
        apps.append(real(g, port))
        return apps[-1]

    transports.http_app = keep
    try:
        async with anyio.create_task_group() as tg:
            port = await _serve(gw, tg)
            url = f"http://127.0.0.1:{port}/mcp"
            auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
            async with httpx2.AsyncClient() as http:
                opened = []
                for _ in range(3):
                    r = await http.post(url, json=INIT, headers=auth)
                    opened.append(r.headers["mcp-session-id"])
                assert set(apps[0].owners) == set(opened)
                for _ in range(100):  # each ends by its idle timeout
                    if not gw.server.session_manager._server_instances:
                        break
                    await anyio.sleep(0.05)
                r = await http.post(url, json=INIT, headers=auth)
                latest = r.headers["mcp-session-id"]
            tg.cancel_scope.cancel()
    finally:
        transports.http_app = real
    assert apps[0].owners == {latest: "ci-bot"}


async def test_an_http_request_with_an_unusable_id_is_answered_not_taken_for_a_notification(tmp_path, store):
    """The SDK reads a request whose id is null, a fraction or a boolean as a notification and answers
    HTTP 202: the client waited for an answer that never came (the call was not made). It is now HTTP 400
    with the JSON-RPC error -32600; real notifications still get 202."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient() as http:
            r = await http.post(url, json=INIT, headers=auth)
            session = {**auth, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            note = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            answers = []
            for rid in (None, 1.5, True):
                answers.append(await http.post(url, headers=session, json={
                    "jsonrpc": "2.0", "id": rid, "method": "tools/call",
                    "params": {"name": "toy__echo", "arguments": {"text": "x"}}}))
            ok = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 7, "method": "ping"})
        tg.cancel_scope.cancel()
    assert note.status_code == 202
    assert [(a.status_code, a.json()) for a in answers] == [(400, {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "Invalid request: a request's id must be a string or an integer "
                                   "(method 'tools/call')"}})] * 3
    assert ok.status_code == 200 and '"id":7' in ok.text
    assert toy_log(tmp_path) == []



async def test_an_http_message_that_is_no_json_rpc_message_is_an_invalid_request_as_over_stdio(tmp_path, store):
    """The SDK's HTTP transport answered a body that is JSON but no JSON-RPC message (no method, a wrong
    ``jsonrpc``, params that are a list, a batch) with -32602 (invalid params), id null, and a pydantic dump
    of every union member's errors as the message; JSON-RPC says -32600 (invalid request), and over stdio the
    gateway answers it so, with the request's id when it has one. HTTP now answers as stdio does."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    bodies = ['{"jsonrpc":"2.0","id":5}', '{"jsonrpc":"1.0","id":6,"method":"ping"}', '"s"',
              '[{"jsonrpc":"2.0","id":7,"method":"ping"}]',
              '{"jsonrpc":"2.0","id":"c","method":"tools/call","params":[1]}']
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient() as http:
            r = await http.post(url, json=INIT, headers=auth)
            session = {**auth, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            answers = [await http.post(url, content=body.encode(), headers=session) for body in bodies]
            sessionless = await http.post(url, content=bodies[0].encode(), headers=auth)
            unparsable = await http.post(url, content=b'{"jsonrpc":', headers=session)
            text_type = await http.post(url, content=bodies[0].encode(), headers={**session, "content-type": "text/plain"})
            ok = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 8, "method": "ping"})
        tg.cancel_scope.cancel()
    assert [(a.status_code, a.headers["content-length"] == str(len(a.content)), a.json()) for a in answers] == [
        (400, True, {"jsonrpc": "2.0", "id": 5, "error": {"code": -32600, "message": "Invalid request: Field required"}}),
        (400, True, {"jsonrpc": "2.0", "id": 6, "error": {"code": -32600,
                                                        "message": "Invalid request: Input should be '2.0'"}}),
        (400, True, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600,
                                                           "message": "Invalid request: Input should be an object"}}),
        (400, True, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600,
                                                           "message": "Invalid request: Input should be an object"}}),
        (400, True, {"jsonrpc": "2.0", "id": "c", "error": {"code": -32600,
                                                          "message": "Invalid request: Input should be an object"}}),
    ]
    assert (sessionless.status_code, sessionless.json()["error"]["code"], sessionless.json()["id"]) == (400, -32600, 5)
    assert (unparsable.status_code, unparsable.json()["error"]["code"]) == (400, -32700)  # no id to be read
    assert (text_type.status_code, text_type.json()) == (400, {  # the SDK's message, as a JSON-RPC error
        "jsonrpc": "2.0", "id": None, "error": {"code": -32005, "message": "Invalid Content-Type header"}})
    assert ok.status_code == 200 and '"id":8' in ok.text
    assert gw.server._session_manager._server_instances.keys() == {r.headers["mcp-session-id"]}


async def test_an_http_body_that_is_no_json_is_a_parse_error_with_the_requests_id_as_over_stdio(tmp_path, store):
    """The SDK's HTTP transport answered a body it could not parse as JSON (params holding a 5000-digit
    number, a trailing comma after the id and method) with -32700 and id null, even when the request's id
    could be read: its client could not match the error to its request. Over stdio the gateway answers such
    a line with the request's id (read by Python's parser, or from the start of the line); HTTP now does the
    same, and still answers null when no id can be read. Nothing reaches the upstream."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    huge = "9" * 5000
    bodies = ['{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"toy__echo","arguments":{"n":%s}}}' % huge,
              '{"jsonrpc":"2.0","id":"r5","method":"ping",}', '{"jsonrpc":']
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient() as http:
            r = await http.post(url, json=INIT, headers=auth)
            session = {**auth, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            answers = [await http.post(url, content=body.encode(), headers=session) for body in bodies]
            sessionless = await http.post(url, content=bodies[1].encode(), headers=auth)
            ok = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 8, "method": "ping"})
        tg.cancel_scope.cancel()
    assert [(a.status_code, a.headers["content-length"] == str(len(a.content)), a.json()) for a in answers] == [
        (400, True, {"jsonrpc": "2.0", "id": 4, "error": {
            "code": -32700, "message": "Parse error: Invalid JSON: number out of range at line 1 column 4394"}}),
        (400, True, {"jsonrpc": "2.0", "id": "r5", "error": {
            "code": -32700, "message": "Parse error: Invalid JSON: trailing comma at line 1 column 44"}}),
        (400, True, {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32700, "message": "Parse error: Invalid JSON: EOF while parsing a value at line 1 column 11"}}),
    ]
    assert (sessionless.status_code, sessionless.json()["error"]["code"], sessionless.json()["id"]) == (400, -32700, "r5")
    assert ok.status_code == 200 and '"id":8' in ok.text
    assert toy_log(tmp_path) == []


async def test_a_second_initialize_on_a_session_is_refused_and_the_recorded_client_stays_true(tmp_path, store):
    """The SDK answered a second ``initialize`` on a live session and took its clientInfo and protocol
    version as the session's: the session's later calls were made by another client name and version (even
    another protocol) than its run recorded (run.started labels), with nothing in the record saying so. MCP's
    initialization is the first interaction of a session, once: a second one is now MALFORMED_REQUEST and
    the session keeps the client and version it started with."""
    from sealbox.gateway import MALFORMED_REQUEST

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "toy__echo", "arguments": {"text": "a"}}}
    again = {**INIT, "id": 3, "params": {**INIT["params"], "protocolVersion": "2025-06-18",
                                         "clientInfo": {"name": "other", "version": "9"}}}
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient() as http:
            r = await http.post(url, json=INIT, headers=auth)
            session_id = r.headers["mcp-session-id"]
            session = {**auth, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            first = await http.post(url, json=call, headers=session)
            refused = await http.post(url, json=again, headers=session)
            second = await http.post(url, json={**call, "id": 4}, headers=session)
            await http.delete(url, headers=session)
        tg.cancel_scope.cancel()
    answer = json.loads(refused.text.split("data: ", 1)[1])
    assert answer == {"jsonrpc": "2.0", "id": 3, "error": {
        "code": MALFORMED_REQUEST, "message": "this session is already initialized (client raw 0, protocol 2025-11-25): "
                                              "initialize is the first request of a session, once; open a new session "
                                              "to start again"}}
    assert '"text":"a"' in first.text and '"text":"a"' in second.text
    [run_id] = gateway_runs(store)
    started = next(iter(store.read_run(run_id)))
    assert {k: v for k, v in started.payload["labels"].items() if k.startswith("mcp.")} == {
        "mcp.client.name": "raw", "mcp.client.version": "0", "mcp.protocol_version": "2025-11-25"}


@pytest.mark.parametrize("params, where", [
    ({"name": "toy__echo", "arguments": {"text": "\ud800"}}, "\\ud800"),
    ({"name": "toy__\udc80echo", "arguments": {}}, "\\udc80"),
    ({"uri": "memo://\udfff"}, "\\udfff"),
])
def test_a_lone_surrogate_in_a_requests_params_is_malformed_not_a_crash(params, where):
    """Over stdio and HTTP the SDK's JSON reader refuses a lone surrogate escape (-32700), but a str
    that is no Unicode text can reach the gateway's checks another way (an in-process transport): the
    request-size check crashed on it (UnicodeEncodeError: JSON-RPC code 0, a traceback logged). It is
    MALFORMED_REQUEST naming the problem, before anything is recorded or forwarded."""
    from types import SimpleNamespace

    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import MALFORMED_REQUEST
    from sealbox.gateway.server import check_request

    ctx = SimpleNamespace(request_id=7, params=params, method="tools/call" if "name" in params else "resources/read")
    with pytest.raises(MCPError) as err:
        check_request(ctx, 1024 * 1024)
    assert (err.value.error.code, err.value.error.message) == (
        MALFORMED_REQUEST, f"request params hold a lone surrogate ({where}), which is not Unicode text "
                           "(RFC 8259 §8.1): nothing was recorded or forwarded")
    check_request(SimpleNamespace(request_id=7, params={"name": "toy__echo", "arguments": {"text": "\U0001f600"}},
                                  method="tools/call"), 1024 * 1024)  # a real character outside the BMP passes


# ---------------------------------------------------------------------------- SEALBOX_RUN_ID is for stdio only


def _agent_run(store) -> str:
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent")
    run.start()
    return run.run_id


def test_an_http_gateway_refuses_a_default_run_every_session_would_join(tmp_path, store, monkeypatch):
    """SEALBOX_RUN_ID (for a stdio gateway launched by the agent) was applied to every session of an
    HTTP gateway: every client, of every token, silently recorded into that one run."""
    from sealbox.errors import ConfigError
    from sealbox.gateway.transports import http_app

    run_id = _agent_run(store)
    monkeypatch.setenv("SEALBOX_RUN_ID", run_id)
    with pytest.raises(ConfigError) as err:
        http_app(Gateway(toy_config(tmp_path, extra=HTTP), store=store), 0)
    assert str(err.value) == (
        f"SEALBOX_RUN_ID is set ({run_id}), but a gateway serving HTTP does not join one run for every client (it is "
        "for a stdio gateway launched by the agent); unset it: an HTTP client joins a run by naming it in "
        "_meta['sealbox/run_id']")
    monkeypatch.delenv("SEALBOX_RUN_ID")
    with pytest.raises(ConfigError) as err:
        http_app(Gateway(toy_config(tmp_path, extra=HTTP), store=store, run_id=run_id), 0)
    assert str(err.value).startswith(f"a default run_id was given ({run_id}), but a gateway serving HTTP")
    http_app(Gateway(toy_config(tmp_path, extra=HTTP), store=store), 0)  # none: served


def test_sealbox_gateway_serve_http_with_sealbox_run_id_stops_at_start(tmp_path):
    import subprocess

    store = sealbox.init_store(tmp_path / "store")
    run_id = _agent_run(store)
    store.close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
{HTTP}upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_LOG: {json.dumps(str(tmp_path / "toy.log"))}}}
""")
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}, "SEALBOX_RUN_ID": run_id}
    out = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config),
                          "--http", "0"], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (
        2, "", f"error: SEALBOX_RUN_ID is set ({run_id}), but a gateway serving HTTP does not join one run for every "
               "client (it is for a stdio gateway launched by the agent); unset it: an HTTP client joins a run by "
               "naming it in _meta['sealbox/run_id']\n")
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        assert [e.kind for e in store.read_run(run_id)] == ["run.started"]  # nothing recorded in it
        assert [r["run_id"] for r in store.query_runs() if r["run_id"] != "system"] == [run_id]  # nor a run of its own
    finally:
        store.close()
    assert not (tmp_path / "toy.log").exists()  # no upstream was started


# ---------------------------------------------------------------------------- http.session_idle_s


async def test_an_http_session_idle_for_session_idle_s_is_closed_and_its_run_ended(tmp_path, store):
    """The SDK closes a session with no request in flight for its idle timeout (30 minutes unless told);
    ``http.session_idle_s`` sets it. The closed session's id answers 404, and its run has ended."""
    from sealbox.gateway.transports import http_app

    default = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    http_app(default, 0)
    assert default.server._session_manager.session_idle_timeout == 1800.0
    gw = Gateway(toy_config(tmp_path, extra=HTTP + "  session_idle_s: 0.5\n"), store=store)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            init = await http.post(url, json=INIT, headers=headers)
            headers["mcp-session-id"] = init.headers["mcp-session-id"]
            headers["mcp-protocol-version"] = "2025-11-25"
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            call = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                               "params": {"name": "toy__echo",
                                                                          "arguments": {"text": "hi"}}})
            assert call.status_code == 200
            [run_id] = gateway_runs(store)
            with anyio.fail_after(10):
                while [k for _, k in kinds(store, run_id)][-1] != "run.ended":
                    await anyio.sleep(0.1)
            late = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        tg.cancel_scope.cancel()
    assert late.status_code == 404
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                    "run.ended"]
    assert [e.payload["status"] for e in store.read_run(run_id) if e.kind == "run.ended"] == ["ok"]


async def test_a_client_that_disconnects_while_sending_its_body_leaves_no_traceback(tmp_path, store, caplog):
    """A client that went away before its POST body was whole (its own timeout, a killed process, an
    announced Content-Length never sent) made the SDK log "Error handling POST request" with a 9-line
    starlette ClientDisconnect traceback on the gateway's stderr, one per such request: an unauthenticated-
    looking flood of tracebacks for an ordinary event. Nothing is logged now, and the session still serves."""
    import logging
    import socket

    gw = Gateway(toy_config(tmp_path, extra=HTTP), store=store)
    caplog.set_level(logging.INFO)
    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(timeout=20) as http:
            init = await http.post(url, json=INIT, headers=auth)
            sid = init.headers["mcp-session-id"]
            auth = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=auth)
            head = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
            for opening in (False, True):  # on the session, and a request that would open one
                with socket.create_connection(("127.0.0.1", port)) as s:
                    sent = head if not opening else head.replace(f"mcp-session-id: {sid}\r\n", "")
                    s.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{sent}content-length: 5000\r\n\r\n"
                              '{"jsonrpc":"2.0","id":7,'.encode())
                    await anyio.sleep(0.3)
            await anyio.sleep(0.3)
            call = await http.post(url, headers=auth, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                             "params": {"name": "toy__echo",
                                                                        "arguments": {"text": "still here"}}})
        tg.cancel_scope.cancel()
    assert '"text":"still here"' in call.text
    assert [(r.name, r.getMessage()) for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING] == []


async def test_a_request_body_that_never_arrives_in_time_is_answered_408_and_closed(tmp_path, store, monkeypatch,
                                                                                    caplog):
    """A client with a valid token that announced a body (Content-Length: 1000000, or chunked) and then never
    sent it, or sent a byte now and then, kept its connection and a server task (the SDK waiting in
    request.body()) for good: only the request head had a time limit. A body not whole within
    transports.BODY_TIMEOUT_S of its head is now answered HTTP 408 and its connection closed; nothing of it
    reaches the upstream or the record. A large body sent at once, a call answered after longer than the
    limit and an SSE GET stream kept open longer than it are not cut; other clients are served."""
    import logging
    import socket
    import threading

    from sealbox.gateway import transports

    caplog.set_level(logging.INFO)
    monkeypatch.setattr(transports, "BODY_TIMEOUT_S", 1.0, raising=False)
    gw = Gateway(toy_config(tmp_path, extra=HTTP + "limits:\n  max_request_bytes: 8388608\n"), store=store)

    def read_until_closed(sock: socket.socket, trickle: bool = False) -> tuple[bytes, float]:
        """What the server sent until it closed ``sock``, and after how many seconds; with ``trickle``, one
        chunk byte every 0.3 s meanwhile."""
        import time

        start, data = time.monotonic(), b""
        sock.settimeout(0.3 if trickle else 10)
        while time.monotonic() - start < 10:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                try:
                    sock.sendall(b"1\r\nx\r\n")
                except OSError:
                    break
                continue
            if not chunk:
                break
            data += chunk
        return data, time.monotonic() - start

    async with anyio.create_task_group() as tg:
        port = await _serve(gw, tg)
        url = f"http://127.0.0.1:{port}/mcp"
        auth = {**HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            init = await http.post(url, json=INIT, headers=auth)
            session = {**auth, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            head = "".join(f"{k}: {v}\r\n" for k, v in session.items())
            call = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                               "params": {"name": "toy__echo", "arguments": {"text": "never whole"}}}).encode()
            stalled = socket.create_connection(("127.0.0.1", port))
            stalled.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}content-length: 1000000\r\n\r\n"
                            .encode() + call[:-1])
            trickling = socket.create_connection(("127.0.0.1", port))
            trickling.sendall(f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}transfer-encoding: chunked\r\n\r\n"
                              .encode() + f"{len(call) - 1:x}\r\n".encode() + call[:-1] + b"\r\n")
            sse = socket.create_connection(("127.0.0.1", port))
            sse_head = head.replace("accept: application/json, text/event-stream", "accept: text/event-stream")
            sse.sendall(f"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{sse_head}\r\n".encode())
            results: dict[str, tuple[bytes, float]] = {}
            threads = [threading.Thread(target=lambda n=n, s=s, t=t: results.__setitem__(n, read_until_closed(s, t)))
                       for n, s, t in (("stalled", stalled, False), ("trickling", trickling, True))]
            for t in threads:
                t.start()
            big = "b" * (3 * 1024 * 1024)
            large = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                                                                "params": {"name": "toy__echo", "arguments": {"text": big}}})
            slow = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                                               "params": {"name": "toy__slow", "arguments": {"seconds": 2.5}}})
            await anyio.to_thread.run_sync(lambda: [t.join(15) for t in threads])
            sse.settimeout(0.2)
            sse_data = b""
            try:
                while chunk := sse.recv(65536):
                    sse_data += chunk
                sse_open = False  # closed by the server
            except TimeoutError:
                sse_open = True
            ping = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 10, "method": "ping"})
        for s in (stalled, trickling, sse):
            s.close()
        tg.cancel_scope.cancel()
    for name in ("stalled", "trickling"):
        data, took = results[name]
        assert data.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), (name, data)
        assert data.endswith(b'\r\n\r\n{"jsonrpc": "2.0", "id": null, "error": {"code": -32005, "message": '
                             b'"the request body did not arrive within 1.0 s"}}'), (name, data)
        assert took < 5, (name, took)
    assert sse_open and sse_data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert large.status_code == 200 and big in large.text
    assert slow.status_code == 200 and "slow done" in slow.text
    assert ping.status_code == 200 and '"id":10' in ping.text
    assert [e["arguments"]["text"] == big or e for e in toy_log(tmp_path) if e.get("tool") == "echo"] == [True]
    assert [(r.name, r.getMessage()) for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING] == []


def test_a_call_still_unanswered_at_stdin_eof_gets_the_shutdown_grace_not_the_call_timeout(tmp_path):
    """A client closing stdin (EOF; MCP's stdio shutdown, then SIGTERM after its own grace) had its requests in
    flight waited for approval_hold_s + call_timeout_s + 1 s (here 65 s): a call its upstream never answers held
    the gateway that long, where a SIGTERM gives a call the shutdown grace (5 s). Now the EOF is a stop as a
    signal is, once the requests it followed have had the grace to be answered: still unanswered, a call written
    to its upstream is answered and recorded CutAtShutdown, the run ended, exit 0; a quick one is answered as
    before (test_requests_written_before_stdin_closes_are_answered)."""
    import subprocess
    import time

    argv, env = _stdio_gateway(tmp_path)
    config = Path(argv[-1])
    config.write_text(config.read_text().replace("policy: ALLOW_ALL\n", "policy: ALLOW_ALL\nlimits: {call_timeout_s: 60}\n"))
    lines = [json.dumps(INIT), '{"jsonrpc":"2.0","method":"notifications/initialized"}',
             '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"toy__hang","arguments":{}}}',
             '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"toy__echo","arguments":{"text":"e"}}}']
    started = time.monotonic()
    proc = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=40)
    took = time.monotonic() - started
    assert (proc.returncode, proc.stderr) == (0, "")
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    cut = ("upstream toy had not answered when the gateway stopped (shutdown grace 5 s); the call was sent, so it "
           "may have been carried out: check before calling again")
    assert answers[2]["result"]["content"][0]["text"] == "upstream error: " + cut
    assert answers[2]["result"]["_meta"] == {"sealbox/upstream_error": "CutAtShutdown"}
    assert answers[3]["result"]["content"][0]["text"] == "e"
    kinds_, oks = _ended_calls(tmp_path)
    assert kinds_[-1] == "run.ended" and sorted(oks) == [False, True]
    assert took < 35  # the grace, not call_timeout_s
