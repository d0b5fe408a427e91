"""An upstream declared by ``url:`` (streamable HTTP): the toy server run in HTTP mode on 127.0.0.1 in a subprocess."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

import sealbox
from sealbox.gateway import Gateway

from .conftest import (
    TOY, connect, gateway_runs, kinds, running, set_call_timeout, system_events, text_of, toy_args, toy_config,
    toy_log,
)

pytestmark = pytest.mark.anyio

KEY = "x-toy-key"
SECRET = "s3cret-header-value"


@pytest.fixture
def refused_port():
    """A 127.0.0.1 port bound for the whole test and never listening: connections to it are refused. (A
    port bound, closed and then used could meanwhile be taken by another socket of this busy host, and a
    client's own ephemeral port could even equal it, a TCP self-connect.)"""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@contextmanager
def toy_http(tmp_path: Path, *, port: int = 0, require_header: bool = True):
    """The toy server over streamable HTTP on 127.0.0.1; yields ``(process, port)``; kills it on exit."""
    port_file = tmp_path / f"toy-port-{time.monotonic_ns()}"
    env = {**os.environ, "TOY_LOG": str(tmp_path / "toy.log")}
    if require_header:
        env["TOY_REQUIRE_HEADER"] = f"{KEY}:{SECRET}"
    proc = subprocess.Popen([sys.executable, TOY, "--http", str(port_file), str(port)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if proc.poll() is not None:
                raise AssertionError(f"the toy HTTP server exited: {proc.stderr.read().decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise AssertionError("the toy HTTP server did not start within 30 s")
            time.sleep(0.02)
        yield proc, int(port_file.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        proc.stderr.close()


def http_upstream(port: int, *, header: bool = True, sid: str = "web") -> str:
    headers = f"\n    headers: {{{KEY}: {SECRET}}}" if header else ""
    return f"\n  - id: {sid}\n    url: http://127.0.0.1:{port}/mcp{headers}\n"


def stdio_toy(tmp_path: Path) -> str:
    env = json.dumps({"TOY_LOG": str(tmp_path / "stdio-toy.log")})
    return f"\n  - id: toy\n    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n    env: {env}\n"


async def test_an_http_upstream_is_listed_and_called_with_its_configured_header(tmp_path, store):
    with toy_http(tmp_path) as (_, port):
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port)), store=store)
        async with running(gw) as tg:
            assert gw.upstreams["web"].state == "ready" and gw.upstreams["web"].spec.kind == "http"
            async with connect(gw, tg) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                added = await client.call_tool("web__add", {"a": 20, "b": 22})
                header = await client.call_tool("web__header", {"name": KEY})
            [run_id] = gateway_runs(store)
    assert names == ["web__add", "web__ask", "web__crash", "web__echo", "web__garbage", "web__hang", "web__header",
                     "web__mutate", "web__roots", "web__sample", "web__slow"]
    assert (added.is_error, text_of(added), added.structured_content) == (False, "42", {"sum": 42})
    assert (header.is_error, json.loads(text_of(header))) == (False, SECRET)  # the configured header reached it
    assert toy_log(tmp_path) == [{"tool": "add", "arguments": {"a": 20, "b": 22}},
                                 {"tool": "header", "arguments": {"name": KEY}}]
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                    "tool.call", "policy.decision", "tool.result", "run.ended"]
    events = store.read_run(run_id)
    call, res = events[1].payload, events[3].payload
    assert (call["server"], call["tool"], call["exposed"], call["arguments"]) == ("web", "add", "web__add",
                                                                                  {"a": 20, "b": 22})
    assert res["ok"] is True and res["result"]["structuredContent"] == {"sum": 42}
    snapshot = store.get_snapshot(events[0].payload["snapshot"])
    assert snapshot["extra"]["gateway"]["upstreams"]["web"]["transport"] == "http"
    assert sealbox.verify_store(store).ok


async def test_without_the_required_header_the_http_upstream_is_down_and_the_gateway_serves_the_rest(tmp_path, store):
    with toy_http(tmp_path) as (_, port):
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port, header=False) + stdio_toy(tmp_path)),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            web = gw.upstreams["web"]
            assert web.state == "down" and "401" in (web.last_error or "")
            names = [t.name for t in (await client.list_tools()).tools]
            echoed = await client.call_tool("toy__echo", {"text": "stdio still works"})
    assert names and all(n.startswith("toy__") for n in names)
    assert (echoed.is_error, text_of(echoed)) == (False, "stdio still works")


async def test_an_http_upstream_that_goes_down_is_a_recorded_error_and_comes_back(tmp_path, store):
    with toy_http(tmp_path) as (proc, port):
        # no cooldown: the call after the server is back is not denied by the breaker the failure opened
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port) + stdio_toy(tmp_path),
                                extra="breaker: {threshold: 5, cooldown_s: 0}"), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            first = await client.call_tool("web__echo", {"text": "before"})
            proc.kill()
            proc.wait(timeout=10)
            with anyio.fail_after(30):
                down = await client.call_tool("web__echo", {"text": "while down"})
            other = await client.call_tool("toy__echo", {"text": "the gateway is up"})
            with toy_http(tmp_path, port=port):  # the same server back on the same port
                with anyio.fail_after(30):
                    await gw.upstreams["web"].wait_until(lambda u: u.state == "ready" and u.generation >= 2)
                back = await client.call_tool("web__echo", {"text": "after"})
        [run_id] = gateway_runs(store)
    assert (first.is_error, text_of(first)) == (False, "before")
    assert down.is_error is True and "upstream error" in text_of(down)
    assert down.meta["sealbox/upstream_error"] == "UpstreamUnavailable"
    assert (other.is_error, text_of(other)) == (False, "the gateway is up")
    assert (back.is_error, text_of(back)) == (False, "after")
    events = store.read_run(run_id)
    servers = {e.payload["call_id"]: e.payload["server"] for e in events if e.kind == "tool.call"}
    recorded = [e.payload for e in events if e.kind == "tool.result"]
    assert [(servers[r["call_id"]], r["ok"]) for r in recorded] == [("web", True), ("web", False), ("toy", True),
                                                                     ("web", True)]
    assert recorded[1]["error"]["type"] == "UpstreamUnavailable"


async def test_an_http_upstream_that_was_never_up_is_down_not_fatal(refused_port, tmp_path, store):
    port = refused_port
    gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port) + stdio_toy(tmp_path)), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert gw.upstreams["web"].state == "down"
        names = [t.name for t in (await client.list_tools()).tools]
        echoed = await client.call_tool("toy__echo", {"text": "fine"})
    assert "toy__echo" in names and not any(n.startswith("web__") for n in names)
    assert (echoed.is_error, text_of(echoed)) == (False, "fine")


async def test_a_slow_http_upstream_is_a_recorded_timeout_not_a_server_down(tmp_path, store):
    with toy_http(tmp_path) as (_, port):
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port), extra="limits: {call_timeout_s: 0.5}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            with anyio.fail_after(30):
                slow = await client.call_tool("web__slow", {"seconds": 3})
                set_call_timeout(gw, 60)  # the next call is answered, however loaded the host
                fast = await client.call_tool("web__echo", {"text": "next"})
        [run_id] = gateway_runs(store)
    assert slow.is_error is True and slow.meta["sealbox/upstream_error"] == "UpstreamTimeout"
    assert (fast.is_error, text_of(fast)) == (False, "next")  # a timeout opens no breaker of the whole server
    first = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"][0]
    assert first["ok"] is False and first["error"]["type"] == "UpstreamTimeout"


async def test_an_idle_http_upstream_still_delivers_tools_list_changed(tmp_path, store):
    # the upstream's notifications ride its standalone GET stream; an idle gateway must keep that stream
    # open well past the call timeout, or a later rug pull would go unnoticed until the next restart
    with toy_http(tmp_path) as (_, port):
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port), extra="limits: {call_timeout_s: 0.4}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            await anyio.sleep(2.5)  # idle for six call timeouts
            set_call_timeout(gw, 60)  # the calls are answered, however loaded the host
            mutated = await client.call_tool("web__mutate", {})
            with anyio.fail_after(10):
                await gw.upstreams["web"].wait_until(lambda u: "extra" in u.tools)
            denied = await client.call_tool("web__echo", {"text": "after the rug pull"})
    assert text_of(mutated) == "mutated"
    assert denied.is_error is True and "changed upstream" in text_of(denied)


@contextmanager
def garbled_http_upstream():
    """A minimal streamable HTTP upstream on 127.0.0.1 (a thread): initialize and tools/list are answered,
    every tools/call gets HTTP 200 ``application/json`` whose body is not JSON (``{nope``)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            msg = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            if "id" not in msg:
                self.send_response(202)
                self.end_headers()
                return
            if msg["method"] == "initialize":
                body = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                        "serverInfo": {"name": "garbled", "version": "1"}}
            elif msg["method"] == "tools/list":
                body = {"tools": [{"name": "bad", "inputSchema": {"type": "object"}}]}
            else:
                body = None
            data = b"{nope" if body is None else json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": body}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(405)
            self.end_headers()

        def do_DELETE(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


async def test_a_malformed_http_answer_is_one_line_and_not_called_a_json_rpc_error(tmp_path, store, caplog):
    """An HTTP upstream answering a call with a body that is not JSON: the SDK turns it into a JSON-RPC
    error -32700 of its own whose text is pydantic's (several lines, a URL), and logs the whole traceback.
    The call's result and record said "upstream web answered with JSON-RPC error -32700: Failed to parse JSON
    response: 1 validation error for union[…]\\n  Invalid JSON: …\\n    For further information visit …"
    (it sent no JSON-RPC error), stderr had a traceback for each such answer, and it was not counted as
    malformed. Now: one line, "sent a malformed response", counted, no traceback."""
    import logging

    with garbled_http_upstream() as port:
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port, header=False)), store=store)
        with caplog.at_level(logging.DEBUG):
            async with running(gw) as tg, connect(gw, tg) as client:
                result = await client.call_tool("web__bad", {})
        [run_id] = gateway_runs(store)
    text = text_of(result)
    assert result.is_error is True
    assert text == ("upstream error: upstream web sent a malformed response: Failed to parse JSON response: "
                    "Invalid JSON: key must be a string at line 1 column 2 "
                    "[type=json_invalid, input_value=b'{nope', input_type=bytes]")
    [res] = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert (res["error"]["type"], res["error"]["message"]) == ("UpstreamProtocolError", text.removeprefix("upstream error: "))
    assert gw.upstreams["web"].malformed == 1
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == ["upstream web sent a malformed message: Failed to parse JSON response: Invalid JSON: key must be "
                     "a string at line 1 column 2 [type=json_invalid, input_value=b'{nope', input_type=bytes]"]


async def test_an_http_upstream_that_lost_its_session_is_reconnected_not_refused_for_ever(tmp_path, store):
    """The HTTP upstream restarted between calls (same port): it answers the gateway's session id with HTTP 404
    and a JSON-RPC error -32600 "Session not found". That is no refusal of the call (the breaker would not count
    it, and every call would fail so for ever): the session is gone (MCP: the client must start a new one). The
    call is recorded UpstreamUnavailable, the breakers of the server open (server_down) and the gateway
    reconnects; once the cool-down has passed, calls are served again."""
    with toy_http(tmp_path) as (proc, port):
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port),
                                extra="breaker: {threshold: 5, cooldown_s: 0}"), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            first = await client.call_tool("web__echo", {"text": "before"})
            proc.kill()
            proc.wait(timeout=10)
            with toy_http(tmp_path, port=port):  # back at once, before the gateway noticed: a new server, no session
                lost = await client.call_tool("web__echo", {"text": "lost"})
                with anyio.fail_after(30):
                    await gw.upstreams["web"].wait_until(lambda u: u.state == "ready" and u.generation >= 2)
                back = await client.call_tool("web__echo", {"text": "after"})
        [run_id] = gateway_runs(store)
    assert (first.is_error, text_of(first)) == (False, "before")
    assert (lost.is_error, lost.meta["sealbox/upstream_error"]) == (True, "UpstreamUnavailable")
    assert text_of(lost) == "upstream error: upstream web ended the gateway's HTTP session (HTTP 404); reconnecting"
    assert (back.is_error, text_of(back)) == (False, "after")
    recorded = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r.get("error", {}).get("type")) for r in recorded] == [
        (True, None), (False, "UpstreamUnavailable"), (True, None)]
    assert [(b["tool"], b["to"], b["reason"]) for b in system_events(store, "breaker.changed")][:1] == [
        ("echo", "open", "server_down")]


class _Answers202(http.server.BaseHTTPRequestHandler):
    """A broken streamable-HTTP MCP server: it initializes and lists one tool, then answers every tools/call
    with HTTP 202 and no response (the SDK's transport makes that a JSON-RPC error -32600 of its own)."""

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers["content-length"])))
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                      "serverInfo": {"name": "broken", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        else:  # notifications, and tools/call: 202 Accepted, no answer
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_an_http_upstream_answering_calls_with_202_still_opens_the_breaker(tmp_path, store):
    """The SDK's transport makes a 202 to a request a -32600 of its own: the upstream's failure, not its refusal of
    the call, so the breaker counts it (it does not count an upstream's own -32600)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers202)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        upstream = f"\n  - id: web\n    url: http://127.0.0.1:{server.server_port}/mcp\n"
        gw = Gateway(toy_config(tmp_path, upstreams=upstream, extra="breaker: {threshold: 2, cooldown_s: 600}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            failed = [await client.call_tool("web__echo", {}) for _ in range(2)]
            denied = await client.call_tool("web__echo", {})
    finally:
        server.shutdown()
        server.server_close()
    # the -32600 was the SDK's, never the upstream's: the record says what the upstream did
    text = "upstream web answered the call with HTTP 202 Accepted and no JSON-RPC response"
    assert [text_of(r) for r in failed] == ["upstream error: " + text] * 2
    assert text_of(denied).startswith("denied (breaker_open): circuit breaker for web/echo is open")
    [run_id] = gateway_runs(store)
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r["error"]["type"], r["error"]["message"]) for r in results[:2]] == [
        (False, "UpstreamProtocolError", text)] * 2
    assert sealbox.verify_store(store).ok


class _RedirectsCalls(_Answers202):
    """Initializes and lists as :class:`_Answers202`, then answers every tools/call with HTTP 307 to another
    origin (a port of its own), which the SDK does not follow."""

    location = ""

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers["content-length"])
        body = self.rfile.read(length)
        if json.loads(body).get("method") != "tools/call":
            self.rfile = __import__("io").BytesIO(body)
            return super().do_POST()
        self.send_response(307)
        self.send_header("location", self.location)
        self.send_header("content-length", "0")
        self.end_headers()


async def test_an_http_upstream_redirecting_a_call_is_recorded_with_its_status_and_location(tmp_path, store):
    """A 307 to another origin (not followed by the SDK) was recorded as "answered with JSON-RPC error -32600:
    Redirect to … not followed": no JSON-RPC error was sent. It now says the HTTP status and where it pointed;
    the breaker still counts it, the other upstream is unaffected, the store verifies."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RedirectsCalls)
    other_port = refused_port_number()
    _RedirectsCalls.location = f"http://127.0.0.1:{other_port}/mcp?token=abc"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        upstream = f"\n  - id: web\n    url: http://127.0.0.1:{server.server_port}/mcp\n" + stdio_toy(tmp_path)
        gw = Gateway(toy_config(tmp_path, upstreams=upstream, extra="breaker: {threshold: 2, cooldown_s: 600}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            failed = [await client.call_tool("web__echo", {}) for _ in range(2)]
            denied = await client.call_tool("web__echo", {})
            other = await client.call_tool("toy__echo", {"text": "unaffected"})
    finally:
        server.shutdown()
        server.server_close()
    # the query (it may carry a token) is left out, as the SDK leaves it out
    text = (f"upstream web answered the call with HTTP 307 Temporary Redirect to http://127.0.0.1:{other_port}/mcp "
            "(not followed: the gateway follows a redirect only within the upstream's origin; "
            "set the upstream's url to it if it is the intended server)")
    assert [(r.is_error, text_of(r)) for r in failed] == [(True, "upstream error: " + text)] * 2
    assert text_of(denied).startswith("denied (breaker_open): circuit breaker for web/echo is open")
    assert text_of(other) == "unaffected"
    [run_id] = gateway_runs(store)
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r["error"]["type"], r["error"]["message"]) for r in results[:2]] == [
        (False, "UpstreamProtocolError", text)] * 2
    assert sealbox.verify_store(store).ok


def refused_port_number() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoGetRoute(http.server.BaseHTTPRequestHandler):
    """A streamable-HTTP MCP server with sessions whose framework routes POST only: its GET (the SDK's standalone
    stream, sent with the session id) is answered HTTP 404, as Express answers a method it has no route for."""

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers["content-length"])))
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                      "serverInfo": {"name": "post-only", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": params["arguments"]["text"]}]}
        else:  # notifications
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("mcp-session-id", "s-1")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_an_http_upstream_without_a_get_stream_is_not_taken_for_a_lost_session(tmp_path, store):
    """A 404 to the standalone GET stream is no sign that the session ended (a server without the stream may
    answer 404 rather than 405): only a 404 to a POST carrying the session id is. Taken for one, the gateway
    dropped the connection after each start and failed calls UpstreamUnavailable, reconnecting for ever."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoGetRoute)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        upstream = f"\n  - id: web\n    url: http://127.0.0.1:{server.server_port}/mcp\n"
        gw = Gateway(toy_config(tmp_path, upstreams=upstream, extra="breaker: {threshold: 5, cooldown_s: 0}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            results = []
            for i in range(3):
                results.append(await client.call_tool("web__echo", {"text": f"call {i}"}))
                await anyio.sleep(0.3)  # the GET stream is answered 404 meanwhile
            generation = gw.upstreams["web"].generation
    finally:
        server.shutdown()
        server.server_close()
    assert [(r.is_error, text_of(r)) for r in results] == [(False, f"call {i}") for i in range(3)]
    assert generation == 1


class _ForgetsSessions(http.server.BaseHTTPRequestHandler):
    """A streamable-HTTP MCP server written after the TypeScript SDK's example: a POST whose session id it does
    not know (it restarted: ``known`` emptied) is answered HTTP 400 with the JSON-RPC error -32000 "Bad Request:
    No valid session ID provided"; an initialize opens a new session."""

    known: set[str] = set()
    opened = 0

    def _send(self, status: int, payload: dict, session: str | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if session is not None:
            self.send_header("mcp-session-id", session)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers["content-length"])))
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            type(self).opened += 1
            session = f"s-{self.opened}"
            self.known.add(session)
            self._send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "forgetful", "version": "1"}}}, session)
            return
        if self.headers.get("mcp-session-id") not in self.known:
            self._send(400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": "Bad Request: No valid session ID provided"}})
            return
        if "id" not in message:  # notifications
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
        elif method == "tools/list":
            self._send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {
                "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}})
        elif params["arguments"]["text"] == "!bad":  # a refusal at HTTP 400 that names no session
            self._send(400, {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "bad text"}})
        else:
            self._send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {
                "content": [{"type": "text", "text": params["arguments"]["text"]}]}})

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_an_http_upstream_refusing_a_session_id_it_does_not_know_with_400_is_reconnected(tmp_path, store):
    """The TypeScript SDK's example server (and the many written after it) answers a session id it does not know
    (it restarted) with HTTP 400 and -32000 "Bad Request: No valid session ID provided", not 404: every call failed
    so for ever (the breaker opened, and each probe failed the same way: the gateway never reconnected). It is a
    lost session, as a 404 is: the call is UpstreamUnavailable and the gateway reconnects."""
    handler = type("Handler", (_ForgetsSessions,), {"known": set(), "opened": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        upstream = f"\n  - id: web\n    url: http://127.0.0.1:{server.server_port}/mcp\n"
        gw = Gateway(toy_config(tmp_path, upstreams=upstream, extra="breaker: {threshold: 5, cooldown_s: 0}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            first = await client.call_tool("web__echo", {"text": "before"})
            bad = await client.call_tool("web__echo", {"text": "!bad"})
            kept = gw.upstreams["web"].generation
            handler.known.clear()  # the server restarted
            lost = await client.call_tool("web__echo", {"text": "lost"})
            with anyio.fail_after(30):
                await gw.upstreams["web"].wait_until(lambda u: u.state == "ready" and u.generation >= 2)
            back = await client.call_tool("web__echo", {"text": "after"})
    finally:
        server.shutdown()
        server.server_close()
    assert (first.is_error, text_of(first)) == (False, "before")
    assert (text_of(bad), kept) == ("upstream error: upstream web answered with JSON-RPC error -32602: bad text", 1)
    assert (lost.is_error, lost.meta["sealbox/upstream_error"]) == (True, "UpstreamUnavailable")
    assert text_of(lost) == "upstream error: upstream web ended the gateway's HTTP session (HTTP 400); reconnecting"
    assert (back.is_error, text_of(back)) == (False, "after")


async def test_env_and_header_values_name_the_gateways_environment_variables(tmp_path, store, monkeypatch):
    """An upstream's secret (an API key in its ``env``, a bearer token in its ``headers``) could only be
    written literally in gateway.yaml: ``${VAR}`` was passed on as those six characters, so the upstream got
    a bogus key and ``gateway check`` said ok. ``${VAR}`` in an env or header value is now the gateway's
    environment variable VAR (read when the gateway starts), ``$${VAR}`` the text ``${VAR}``."""
    monkeypatch.setenv("SEALBOX_TEST_HEADER_SECRET", SECRET)
    monkeypatch.setenv("SEALBOX_TEST_LOG_DIR", str(tmp_path))
    stdio = (f"\n  - id: toy\n    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n"
             "    env: {TOY_LOG: '${SEALBOX_TEST_LOG_DIR}/stdio-toy.log'}\n")
    web = (f"\n  - id: web\n    url: http://127.0.0.1:PORT/mcp\n"
           "    headers: {x-toy-key: '${SEALBOX_TEST_HEADER_SECRET}', x-literal: 'a$${SEALBOX_TEST_HEADER_SECRET}'}\n")
    with toy_http(tmp_path) as (_, port):
        gw = Gateway(toy_config(tmp_path, upstreams=stdio + web.replace("PORT", str(port))), store=store)
        async with running(gw) as tg:
            async with connect(gw, tg) as client:
                header = await client.call_tool("web__header", {"name": KEY})
                literal = await client.call_tool("web__header", {"name": "x-literal"})
                echoed = await client.call_tool("toy__echo", {"text": "hi"})
    assert (header.is_error, json.loads(text_of(header))) == (False, SECRET)
    assert json.loads(text_of(literal)) == "a${SEALBOX_TEST_HEADER_SECRET}"
    assert (echoed.is_error, text_of(echoed)) == (False, "hi")
    assert [json.loads(line) for line in (tmp_path / "stdio-toy.log").read_text().splitlines()] == [
        {"tool": "echo", "arguments": {"text": "hi"}}]


def test_an_unset_variable_in_an_env_or_header_value_is_one_error_line(tmp_path, monkeypatch):
    """``gateway check`` lists each value naming an unset variable; ``gateway serve`` stops at start with one
    line (exit 2) instead of starting the upstream with the text ``${VAR}`` as its secret."""
    sealbox.init_store(tmp_path / "st").close()
    (tmp_path / "gw.yaml").write_text(
        f"version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n"
        f"  - id: toy\n    command: {json.dumps(sys.executable)}\n    args: {json.dumps(toy_args())}\n"
        "    env: {API_KEY: 'k-${SEALBOX_TEST_UNSET_A}', OK: '$${SEALBOX_TEST_UNSET_A}'}\n"
        "  - id: web\n    url: http://127.0.0.1:9/mcp\n    headers: {authorization: 'Bearer ${SEALBOX_TEST_UNSET_B}'}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEALBOX_")}
    sealbox_cmd = str(Path(sys.executable).parent / "sealbox")
    check = subprocess.run([sealbox_cmd, "gateway", "check", "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                           text=True, env=env, timeout=60)
    serve = subprocess.run([sealbox_cmd, "gateway", "serve", "--config", str(tmp_path / "gw.yaml")],
                           capture_output=True, text=True, env=env, timeout=60, input="")
    problem_a = "upstream toy: env.API_KEY names the environment variable SEALBOX_TEST_UNSET_A, which is unset"
    problem_b = "upstream web: headers.authorization names the environment variable SEALBOX_TEST_UNSET_B, which is unset"
    assert (check.returncode, check.stdout) == (2, "")
    assert check.stderr == f"error: {tmp_path / 'gw.yaml'}: {problem_a}; {problem_b}\n"
    assert (serve.returncode, serve.stdout) == (2, "")
    assert serve.stderr == f"error: {tmp_path / 'gw.yaml'}: {problem_a}; {problem_b}\n"


class _EndlessAnswer(_Answers202):
    """A streamable-HTTP MCP server answering ``flood`` (JSON, or an event stream with ``?sse``) with a body of
    ``_EndlessAnswer.size`` bytes, chunked, and ``ping`` with "pong"."""

    size = 0
    sent = 0

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers["content-length"])
        message = json.loads(self.rfile.read(length))
        params = message.get("params") or {}
        if message.get("method") == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("flood", "flood_sse", "ping")]
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}}).encode()
        elif message.get("method") == "tools/call" and params.get("name") == "ping":
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "content": [{"type": "text", "text": "pong"}]}}).encode()
        elif message.get("method") == "tools/call":
            sse = params["name"] == "flood_sse"
            self.send_response(200)
            self.send_header("content-type", "text/event-stream" if sse else "application/json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            head = (b"event: message\ndata: " if sse else b"") + b'{"jsonrpc":"2.0","id":%d,"result":{"content":' \
                b'[{"type":"text","text":"' % message["id"]
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                chunk = b"x" * 65536
                while type(self).sent < self.size:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    type(self).sent += len(chunk)
                tail = b'"}]}}' + (b"\n\n" if sse else b"")
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
            except OSError:  # the gateway stopped reading
                pass
            return
        else:
            self.rfile = __import__("io").BytesIO(json.dumps(message).encode())
            self.headers.replace_header("content-length", str(len(json.dumps(message))))
            return super().do_POST()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


async def test_an_http_upstream_answering_without_end_is_cut_at_the_limit(tmp_path, store, monkeypatch):
    """An HTTP upstream's JSON answer was read whole however long it was (about 8 bytes of the gateway's memory
    per byte: 150 MB took 1.2 GB), so one answering without end grew the gateway until the process was killed.
    An answer above MAX_LINE_BYTES (64 MiB; 1 MiB here) now ends that response: the call fails at once saying
    why, the gateway reconnects, and the next call is answered. (An event stream's events are bounded by the
    SDK, up to the same limit.)"""
    tool, what = "flood", "answer"
    from sealbox.gateway import upstream as upstream_module

    monkeypatch.setattr(upstream_module, "MAX_LINE_BYTES", 1024 * 1024, raising=False)
    _EndlessAnswer.size, _EndlessAnswer.sent = 64 * 1024 * 1024, 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EndlessAnswer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        upstream = f"\n  - id: web\n    url: http://127.0.0.1:{server.server_port}/mcp\n"
        # the closed connection opens the upstream's breakers (server_down): no cooldown here, so the next call probes
        gw = Gateway(toy_config(tmp_path, upstreams=upstream, extra="breaker: {cooldown_s: 0}"), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            with anyio.fail_after(20):
                cut = await client.call_tool(f"web__{tool}", {})
                await gw.upstreams["web"].wait_until(lambda u: u.state != "ready")  # the response's end ends the connection
                await gw.upstreams["web"].wait_until(lambda u: u.state == "ready")
                after = await client.call_tool("web__ping", {})
    finally:
        server.shutdown()
        server.server_close()
    assert (cut.is_error, text_of(cut)) == (True, f"upstream error: upstream web connection was closed during the "
                                                  f"call: its {what} was longer than 1048576 bytes; the rest was not read")
    assert (after.is_error, text_of(after)) == (False, "pong")
    assert _EndlessAnswer.sent < 16 * 1024 * 1024  # the gateway stopped reading soon after the limit


async def test_an_http_upstreams_result_above_1_mib_arrives_as_a_stdio_upstreams_does(tmp_path, store):
    """The SDK's streamable-HTTP client refuses a server-sent event above 1 MiB (its max_sse_event_size): every
    result above that from an HTTP upstream that answers in an event stream (the SDK's servers do, by default)
    failed ("upstream web answered with JSON-RPC error -32000: SSE stream failed: Server-sent event exceeded the
    1048576 byte limit"), while a stdio upstream's 30 MB result arrives. The event limit is now the gateway's
    own line limit (MAX_LINE_BYTES, 64 MiB), as for stdio."""
    text = "x" * 3_000_000
    with toy_http(tmp_path) as (_, port):
        gw = Gateway(toy_config(tmp_path, upstreams=http_upstream(port), extra="limits: {max_request_bytes: 4000000}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            with anyio.fail_after(30):
                echoed = await client.call_tool("web__echo", {"text": text})
    assert (echoed.is_error, text_of(echoed) == text) == (False, True)
    [run_id] = gateway_runs(store)
    assert [e.payload["ok"] for e in store.read_run(run_id) if e.kind == "tool.result"] == [True]


class _Answers500Html(_NoGetRoute):
    """As :class:`_NoGetRoute`, but every tools/call is answered HTTP 500 with an HTML page (a proxy's or a
    framework's error page), no JSON-RPC error."""

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers["content-length"])
        body = self.rfile.read(length)
        if json.loads(body).get("method") != "tools/call":
            self.rfile = __import__("io").BytesIO(body)
            return super().do_POST()
        page = b"<html><body><h1>500 Internal Server Error</h1></body></html>"
        self.send_response(500)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


async def test_an_http_upstream_answering_a_call_with_an_html_500_page_is_recorded_with_its_status(tmp_path, store):
    """An HTTP 500 with an HTML body (no JSON-RPC error in it): the call's recorded error was "upstream web
    answered with JSON-RPC error -32603: Server returned an error response", the SDK's stand-in: no JSON-RPC
    error was sent, and the HTTP status was not said. It now names the status; the breaker still counts it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers500Html)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        upstream = f"\n  - id: web\n    url: http://127.0.0.1:{server.server_port}/mcp\n" + stdio_toy(tmp_path)
        gw = Gateway(toy_config(tmp_path, upstreams=upstream, extra="breaker: {threshold: 2, cooldown_s: 600}"),
                     store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            failed = [await client.call_tool("web__echo", {"text": "x"}) for _ in range(2)]
            denied = await client.call_tool("web__echo", {"text": "x"})
            other = await client.call_tool("toy__echo", {"text": "unaffected"})
    finally:
        server.shutdown()
        server.server_close()
    text = "upstream web answered with HTTP 500 Internal Server Error and no JSON-RPC error"
    assert [(r.is_error, text_of(r)) for r in failed] == [(True, "upstream error: " + text)] * 2
    assert text_of(denied).startswith("denied (breaker_open): circuit breaker for web/echo is open")
    assert text_of(other) == "unaffected"
    [run_id] = gateway_runs(store)
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r["error"]["type"], r["error"]["message"]) for r in results[:2]] == [
        (False, "UpstreamProtocolError", text)] * 2
    assert sealbox.verify_store(store).ok
