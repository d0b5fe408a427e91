"""Serving the gateway to clients: stdio (launched as a command) and streamable HTTP on 127.0.0.1.

HTTP specifics:

* binds 127.0.0.1 only;
* a connection whose request head is not whole within ``HEAD_TIMEOUT_S`` (15 s) of its opening or of
  its previous answer is closed (uvicorn times out only idle keep-alive connections: slowloris);
* a request whose body is not whole within ``BODY_TIMEOUT_S`` (30 s) of its head is answered HTTP 408
  and its connection closed (announced, never sent: a server task held for good); the answer's own time
  (a held call, an SSE stream) is not limited;
* validates ``Host`` and ``Origin`` (DNS-rebinding protection, required by the
  MCP specification): a request whose ``Origin`` is not the gateway's own
  (``http://127.0.0.1:PORT``, ``http://localhost:PORT``) or listed in
  ``http.allowed_origins`` gets HTTP 403 (a ``Host`` other than its own: 421), JSON-RPC
  ``UNAUTHORIZED``, before its token is looked at; a request without ``Origin`` (not a
  browser) is accepted;
* requires ``Authorization: Bearer <token>`` with a token from ``http.tokens``;
  the token's identity is the principal of the calls (HTTP 401 and JSON-RPC
  error ``UNAUTHORIZED`` otherwise); SIGHUP reloads them (:func:`_reload_tokens`): a revoked token is refused
  at once and the sessions it opened are ended;
* a session (``mcp-session-id``) is used only with a token of the identity that
  created it: any other request on it (POST of any method, GET, DELETE) gets HTTP
  403 and ``UNAUTHORIZED``, and the session is left untouched (its owner is kept while the SDK has it open, even
  through a 404 answering a request that named it: a stateless request's "method not found");
* a GET's ``Last-Event-ID`` is ignored (no events are kept to replay): the GET opens the stream as without it;
* ``Authorization``, ``mcp-session-id`` and ``mcp-protocol-version`` are read once: a request carrying one twice gets
  HTTP 400 and ``MALFORMED_REQUEST`` (the SDK reads a header's first value);
* a body that is JSON but no JSON-RPC message (a batch, no method, params not an object) gets HTTP 400
  and ``-32600`` (invalid request) with the request's id when it has one, as over stdio (the SDK's own
  answer, replaced: ``-32602``, a null id, a pydantic dump as the message);
* a body that is no JSON (a number too long, a trailing comma) gets HTTP 400 and ``-32700`` (parse
  error) with the request's id when it can be read, as over stdio (the SDK's own answer: a null id); one
  nesting more than :data:`MAX_NESTING` levels (JSON that may be valid) gets HTTP 400 and ``REQUEST_TOO_LARGE``;
* every HTTP error answer has a JSON-RPC error body (null id, the status kept: the SDK gives some in plain
  text, which MCP clients cannot read), :func:`_json_rpc_errors`;
* bodies above ``4 × limits.max_request_bytes`` are refused by the SDK with HTTP
  413 (``REQUEST_TOO_LARGE``) before parsing; smaller requests whose params exceed the limit get the
  JSON-RPC error ``REQUEST_TOO_LARGE``;
* an identity has at most ``http.max_sessions_per_identity`` sessions open: a request that would open
  one more gets HTTP 429 and ``TOO_MANY_CALLS`` (the SDK's own cap, 10 000 sessions, is for every
  client together: one token could otherwise take them all);
* every identity together has at most ``http.max_sessions`` sessions open (default 1000): one more gets
  HTTP 503 and ``TOO_MANY_CALLS``;
* at most ``http.max_connections`` TCP connections are open at once (default 512): one more closes the one idle
  longest, or, every one serving a request, is answered HTTP 503 and ``TOO_MANY_CALLS`` (:func:`_http_protocol`).
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import logging
import os
import re
import socket
import sys
import threading
from collections import Counter
from typing import Any, Callable

import anyio
import anyio.from_thread
import anyio.lowlevel

from sealbox.errors import ConfigError
from sealbox.gateway import codes
from sealbox.gateway.holds import WIRE_STATE_KEY, Wire
from sealbox.gateway.server import Gateway

__all__ = ["serve_stdio", "serve_http", "http_app", "BearerAuth"]

log = logging.getLogger("sealbox.gateway")


async def serve_stdio(gateway: Gateway, *, stdin: Any = None, stdout: Any = None,
                      on_signal: Callable[[], None] | None = None) -> None:
    """Serve one client over the process's stdin/stdout until it closes them.

    With ``on_signal``, SIGINT, SIGTERM and SIGHUP (the terminal or session the gateway ran in went
    away) stop serving: the session is closed (its run ended,
    unless a call waits for an approval), the upstreams are stopped, then ``on_signal()`` is
    called. It must not return (close the store and exit the process): the thread reading
    stdin is blocked in a read that only the client's EOF ends, so it cannot be joined.
    """
    from mcp.server.stdio import stdio_server

    if stdin is None:
        stdin = client_stdin()
    async with anyio.create_task_group() as tg:
        stopping = anyio.CancelScope()
        if on_signal is not None:
            tg.start_soon(_cancel_on_signal, stopping, gateway)
        with stopping:
            await tg.start(gateway.run_upstreams)
        if not stopping.cancel_called:  # else stopped while the upstreams started: nothing reads stdin yet
            try:
                async with stdio_server(stdin, stdout) as (raw_read, raw_write):
                    read, write = relay_stdio(tg, gateway, raw_read, raw_write)
                    with stopping:  # cancelled at once when the signal came while it was being entered
                        await gateway.server.run(read, write, gateway.initialization_options())
                    if stopping.cancel_called and on_signal is not None:
                        await _stop_upstreams(gateway)
                        on_signal()
            except* (BrokenPipeError, ConnectionResetError):
                # the client stopped reading (it exited): the SDK's stdout writer failed and the session was
                # closed as on a disconnect (calls in flight recorded, the run ended); not an internal error
                log.info("the client closed its end of stdout; the session has ended")
            if on_signal is not None and not stopping.cancel_called:
                # the client left (EOF): stop the upstreams while a signal is still a clean stop. MCP clients send
                # SIGTERM once their grace period after closing stdin is over (the SDK's: 2 s), and an upstream
                # that does not exit on its own is given as long before it is terminated; cancelled first, the
                # signal handling restored SIGTERM's default action, which killed the gateway (store not closed)
                # and left that upstream running
                await _stop_upstreams(gateway)
        tg.cancel_scope.cancel()


class _ClientStdin(io.TextIOWrapper):
    """The client's stdin as text whose close leaves the process's stdin open (as the SDK's own wrapper)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


class _ClientLines:
    """The client's stdin lines, for the SDK's stdio transport (``async for line in stdin``), read by a daemon
    thread of their own, one line ahead.

    Read through ``anyio.wrap_file`` (the SDK's default), each line is read in an anyio worker thread, which
    a cancellation waits for: a client that closed its end of stdout but not its stdin (it stopped reading)
    ended the session, and the gateway then waited for a line that never came, its upstreams running and
    its store not closed, until the client also closed stdin or was killed. Cancelled, :meth:`__anext__`
    returns at once; the thread, blocked in its read, is a daemon that does not hold the process's exit."""

    def __init__(self, text: io.TextIOBase) -> None:
        self._text = text
        self._receive: Any = None

    def __aiter__(self) -> "_ClientLines":
        return self

    async def __anext__(self) -> str:
        if self._receive is None:
            send, self._receive = anyio.create_memory_object_stream[str](0)
            token = anyio.lowlevel.current_token()
            threading.Thread(target=self._pump, args=(send, token), name="sealbox-gateway-stdin", daemon=True).start()
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def _pump(self, send: Any, token: Any) -> None:
        try:
            for line in self._text:
                anyio.from_thread.run(send.send, line, token=token)
        except BaseException:  # the loop has ended or cancelled the send (the gateway stopped), stdin failed: no more
            pass  # lines (a daemon thread: nothing to report, and a traceback at the process's exit would mislead)
        finally:
            with contextlib.suppress(BaseException):
                anyio.from_thread.run_sync(send.close, token=token)


def client_stdin() -> Any:
    """The process's stdin for the SDK's stdio transport: its lines decoded as UTF-8 with ``surrogateescape``,
    read by a daemon thread (:class:`_ClientLines`).

    The SDK decodes stdin with ``errors="replace"``: a client's tools/call holding bytes that are not UTF-8
    was forwarded and recorded with U+FFFD in their place (arguments its client never sent). Kept as lone
    surrogates, such a line is refused by the SDK's parser and answered as a parse error with the request's
    id (:func:`_unreadable_answer`); a line that is UTF-8 reads as before."""
    # a duplicate of fd 0, not sys.stdin's buffer: at the interpreter's exit, finalizing sys.stdin while the daemon
    # thread is blocked reading it (holding its lock) aborts the process ("could not acquire lock ... at interpreter
    # shutdown"); the duplicate is never closed (the thread may read it until the process ends)
    raw = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    return _ClientLines(_ClientStdin(raw, encoding="utf-8", errors="surrogateescape"))


def relay_stdio(tg: Any, gateway: Any, raw_read: Any, raw_write: Any) -> tuple[Any, Any]:
    """The (read, write) streams a server runs on, between it and the SDK's stdio transport
    (``raw_read``, ``raw_write``), through a :class:`_StdioRelay` whose two tasks run in ``tg``.
    Used by ``gateway serve`` and ``gateway replay`` over stdio."""
    relay = _StdioRelay(gateway)
    to_server, read = anyio.create_memory_object_stream[Any](0)
    write, from_server = anyio.create_memory_object_stream[Any](0)
    tg.start_soon(relay.inbound, raw_read, to_server, write.clone())
    tg.start_soon(relay.outbound, from_server, raw_write)
    return read, write


class _StdioRelay:
    """Between the stdio transport and the server: answers what the SDK cannot read, and holds the
    client's end of input (EOF) back until every request it sent has been answered.

    * The SDK's stdio server drops a line it cannot read without a word (logged at debug level), so
      a request the gateway could not parse (bad JSON, a lone surrogate, nesting too deep) was never
      answered and its client waited until its own timeout. It is answered here as over HTTP:
      ``-32700`` (parse error) or ``-32600`` (invalid request), with the request's id when it can be
      read (else null); a request nesting more than :data:`MAX_NESTING` levels, ``REQUEST_TOO_LARGE``. A notification or a response the gateway cannot read is dropped: neither is
      answered in JSON-RPC.
    * A client that writes its requests and closes stdin (``echo … | sealbox gateway serve``; MCP's
      stdio shutdown closes stdin first, then waits for the server to exit) had the calls in flight
      carried out and recorded, but their replies were never written: the session ended at EOF. The
      EOF is passed on once each request is answered or cancelled. The requests get the shutdown grace
      (:data:`~sealbox.gateway.upstream.SHUTDOWN_GRACE_S`, 5 s) to be answered; then the EOF is a stop
      as a signal is (:meth:`Gateway.drain_holds`, :meth:`Gateway.drain_calls`): a held call answers
      "pending", a call never written to its upstream ``GatewayStopping``, one written ``CutAtShutdown``.
      (The wait was the approval hold plus the call timeout, + 1 s: a deaf upstream held the gateway
      that long after its client had left.)"""

    def __init__(self, gateway: Any) -> None:
        from sealbox.gateway.upstream import SHUTDOWN_GRACE_S

        self.gateway = gateway
        self.wait_s = SHUTDOWN_GRACE_S
        # ids of the client's requests not yet answered, each with how many (a client may reuse an id in flight)
        self.open: Counter[Any] = Counter()
        self._answered = anyio.Event()

    async def inbound(self, read: Any, to_server: Any, write: Any) -> None:
        import mcp_types as types

        async with to_server, write:
            async for item in read:
                if isinstance(item, Exception):
                    answer = _unreadable_answer(item)
                    if answer is not None:
                        try:
                            await write.send(answer)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
                    continue
                message = item.message
                if isinstance(message, types.JSONRPCNotification) and not message.method.startswith("notifications/"):
                    # a request whose id is null, a fraction, a boolean or an object, or missing: the SDK reads it
                    # as a notification and drops it, so its client waited for good; every MCP notification's
                    # method starts with notifications/
                    try:
                        await write.send(_invalid_request(f"a request's id must be a string or an integer "
                                                          f"(method {message.method!r})"))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return
                    continue
                if isinstance(message, types.JSONRPCRequest):
                    self.open[message.id] += 1
                elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    self._done((message.params or {}).get("requestId"))
                try:
                    await to_server.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the server stopped reading (SIGTERM/SIGINT): the session is over, not an internal error
            eof = anyio.current_time()
            with anyio.move_on_after(self.wait_s):
                while self.open:
                    await self._answered.wait()
            drain_calls = getattr(self.gateway, "drain_calls", None)  # a replay answers at once: nothing to stop
            if self.open and drain_calls is not None:
                await self.gateway.drain_holds()  # held calls answer "pending"
                await drain_calls(since=eof)  # the grace is spent: unwritten GatewayStopping, written CutAtShutdown
                with anyio.move_on_after(2.0):  # their replies, written by the server's own tasks
                    while self.open:
                        await self._answered.wait()

    async def outbound(self, from_server: Any, write: Any) -> None:
        import mcp_types as types

        async with from_server, write:
            async for item in from_server:
                try:
                    await write.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                if isinstance(item.message, (types.JSONRPCResponse, types.JSONRPCError)):
                    self._done(item.message.id)

    def _done(self, request_id: Any) -> None:
        if request_id in self.open:
            self.open[request_id] -= 1
            if self.open[request_id] <= 0:
                del self.open[request_id]
            self._answered.set()
            self._answered = anyio.Event()


_ID = r'(-?\d+|"(?:[^"\\]|\\.)*")'
_VERSION = r'(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?'
#: the start of a request too deeply nested for either parser: its id, before or after its method
_REQUEST_PREFIX = re.compile(rf'\s*\{{\s*{_VERSION}(?:"id"\s*:\s*{_ID}\s*,\s*{_VERSION}"method"\s*:'
                             rf'|"method"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*{_VERSION}"id"\s*:\s*{_ID})')

_RESPONSE_PREFIX = re.compile(rf'\s*\{{\s*{_VERSION}"id"\s*:\s*{_ID}\s*,\s*{_VERSION}"(?:result|error)"\s*:')


def _invalid_request(detail: str) -> Any:
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    error = types.ErrorData(code=types.INVALID_REQUEST, message=f"Invalid request: {detail}")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error))


def _unreadable_answer(exc: Exception) -> Any:
    """The JSON-RPC error answering a line the SDK could not read (``exc``), or None (not to be answered)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    errors = exc.errors() if callable(getattr(exc, "errors", None)) else []  # pydantic's ValidationError
    first = errors[0] if errors else {}
    not_utf8 = first.get("type") == "string_unicode" and isinstance(first.get("input"), str)
    if not_utf8:  # bytes that are not UTF-8, kept as lone surrogates (client_stdin): Python's parser reads the id
        first = {**first, "type": "json_invalid", "msg": "the message is not valid UTF-8 (MCP messages are UTF-8 JSON)"}
    if first.get("type") == "json_invalid" or not errors:  # its input is the line
        line = first.get("input")
        if isinstance(line, str) and not line.strip():
            return None  # a blank line
        try:  # Python's parser reads some lines the SDK's does not (a lone surrogate): the request's id
            doc = json.loads(line) if isinstance(line, (str, bytes)) else None
        except (ValueError, RecursionError):
            doc = None
            if isinstance(line, str) and _RESPONSE_PREFIX.match(line):
                return None  # a response to the gateway's own request, nested too deep: not answered
            match = _REQUEST_PREFIX.match(line) if isinstance(line, str) else None
            if match is not None:  # nested too deep for both: a request's id read from its start
                try:
                    doc = {"method": "", "id": json.loads(match.group(1) or match.group(2))}
                except ValueError:
                    doc = None
        code, what = types.PARSE_ERROR, "Parse error"
    else:  # JSON, but no JSON-RPC message: the inputs of the errors are the parts that did not fit
        objects = [e.get("input") for e in errors if isinstance(e.get("input"), dict)]
        doc = next((o for o in objects if "method" in o or "id" in o), None)
        code, what = types.INVALID_REQUEST, "Invalid request"
    request_id = None
    if isinstance(doc, dict):
        if "method" not in doc and ("result" in doc or "error" in doc):
            return None  # a response to the gateway's own request
        if "method" in doc and "id" not in doc:
            return None  # a notification
        if type(doc.get("id")) in (int, str):
            request_id = doc["id"]
    detail = " ".join(str(first.get("msg") or exc).split())
    if code == types.PARSE_ERROR and detail.startswith(_TOO_DEEP):  # valid JSON, maybe: a limit, not a parse error
        from sealbox.gateway import codes

        error = types.ErrorData(code=codes.REQUEST_TOO_LARGE, message=TOO_DEEP_MESSAGE)
    else:
        error = types.ErrorData(code=code, message=f"{what}: {detail}")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


#: The most levels of arrays and objects a client's message may nest: the recursion limit of the SDK's JSON reader
#: (pydantic-core's jiter), which reads no deeper.
MAX_NESTING = 200
#: How the SDK's reader says a message nests deeper than :data:`MAX_NESTING` ("Invalid JSON: recursion limit
#: exceeded at line 1 column N"), whether or not its JSON is valid.
_TOO_DEEP = "Invalid JSON: recursion limit exceeded"
#: The message of ``REQUEST_TOO_LARGE`` answering a request nested deeper than :data:`MAX_NESTING`.
TOO_DEEP_MESSAGE = (f"request too large: its JSON nests arrays and objects more than {MAX_NESTING} levels deep, the "
                    "gateway's limit (nothing was recorded or forwarded)")


async def _cancel_on_signal(scope: anyio.CancelScope, gateway: Gateway | None = None) -> None:
    """On SIGINT / SIGTERM / SIGHUP: held calls answer "pending" first (see :meth:`Gateway.begin_shutdown`),
    calls in flight upstream are waited for (:meth:`Gateway.drain_calls`, at most the shutdown grace),
    their replies get a moment to reach the client, then ``scope`` is cancelled."""
    import signal

    wanted = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    with anyio.open_signal_receiver(*wanted) as signals:
        async for signum in signals:
            if signum == getattr(signal, "SIGHUP", None):
                log.warning("SIGHUP: the gateway's terminal or session went away; stopping as for SIGTERM")
            if gateway is not None and (getattr(gateway, "_holding", 0) or getattr(gateway, "_calls", 0)):
                await gateway.drain_holds()
                drain = getattr(gateway, "drain_calls", None)  # a replay answers at once: nothing to wait for
                if drain is not None:
                    await drain()
                await anyio.sleep(0.2)  # the replies are written to stdout by the transport's own task
            scope.cancel()
            return


async def _stop_upstreams(gateway: Gateway, timeout: float = 5.0) -> None:
    """Ask every upstream to close and wait (up to ``timeout`` s) until each has."""
    for up in gateway.upstreams.values():
        up.stop()
    with anyio.move_on_after(timeout):
        for up in gateway.upstreams.values():
            await up.wait_until(lambda u: u.state == "closed")


#: headers a request may carry once: a second value is refused (HTTP 400, ``MALFORMED_REQUEST``), not chosen from
#: (the SDK acts on a header's first value; ``mcp-protocol-version`` decides whether a request opens a session, which
#: the per-identity session cap counts)
_SINGLE_HEADERS = ("authorization", "mcp-session-id", "mcp-protocol-version")


class BearerAuth:
    """ASGI middleware: maps ``Authorization: Bearer`` tokens to identities (constant-time compare).

    It also gives each request a :class:`~sealbox.gateway.holds.Wire` (``scope["state"]["sealbox_wire"]``)
    marked gone when the ASGI server reports ``http.disconnect``: a held call's outcome settled after its
    client disconnected is kept for the retry instead of counting as delivered."""

    def __init__(self, app: Any, tokens: dict[str, str], sessions: Callable[[], Any] | None = None,
                 max_sessions_per_identity: int | None = None, security: Any = None,
                 max_body_bytes: int | None = None, discard: Callable[[str], Any] | None = None,
                 max_sessions: int | None = None) -> None:
        self.app, self.tokens = app, dict(tokens)
        #: the sessions of every identity together (``http.max_sessions``; None: no cap of the gateway's own)
        self.max_sessions = max_sessions
        #: ``await discard(session_id)`` ends a session the SDK opened for a request it answered with an error
        self.discard = discard
        #: the SDK's limit on a request body (named in its 413 answer)
        self.max_body_bytes = max_body_bytes
        #: the DNS-rebinding protection given to the SDK (``TransportSecuritySettings``), checked here first, before
        #: the token, as the SDK checks it: a ``Host`` / ``Origin`` listed, or matching a listed ``base:*``
        self._security = security if security is not None and security.enable_dns_rebinding_protection else None
        self.max_sessions_per_identity = max_sessions_per_identity
        #: identity -> its requests being served that may open a session (not yet in ``owners``)
        self._opening: Counter[str] = Counter()
        #: ``mcp-session-id`` -> the identity whose request created the session
        self.owners: dict[str, str] = {}
        #: ``mcp-session-id`` -> the token that created the session (its sessions end when it is revoked)
        self.session_tokens: dict[str, str] = {}
        #: the ids of the sessions still open (the SDK's), or None when they cannot be known: a session that
        #: ends without a DELETE (its idle timeout; the client went away) is forgotten here when the next opens
        self.sessions = sessions
        #: ``mcp-session-id`` -> the ids (as ``str(id)``, the SDK's key) of its POSTed requests being served
        self._ids_in_flight: dict[str, set[str]] = {}

    def identity(self, header: str | None) -> str | None:
        matched = self._match(header)
        return matched[1] if matched is not None else None

    def _match(self, header: str | None) -> tuple[str, str] | None:
        """(token, identity) of an ``Authorization`` header, or None (every token compared in constant time)."""
        if not header or not header.lower().startswith("bearer "):
            return None
        given = header[7:].strip().encode()
        found = None
        for token, identity in self.tokens.items():  # self.tokens is replaced whole by a reload, never changed
            if hmac.compare_digest(given, token.encode()):
                found = (token, identity)
        return found

    async def reload_tokens(self, tokens: dict[str, str]) -> int:
        """Serve with ``tokens`` (bearer token -> identity) from now on: a token no longer in it, or mapped to
        another identity, is refused from the next request, and each session it opened is ended (its GET
        stream closed, its run ended as on a DELETE). Returns how many sessions were ended."""
        self.tokens = dict(tokens)
        revoked = [sid for sid, token in self.session_tokens.items()
                   if self.tokens.get(token) != self.owners.get(sid)]
        for sid in revoked:
            self._drop_owner(sid)
            if self.discard is not None:
                await self.discard(sid)
        return len(revoked)

    def _drop_owner(self, session_id: str) -> None:
        self.owners.pop(session_id, None)
        self.session_tokens.pop(session_id, None)

    def _all_open_sessions(self) -> int:
        """The sessions open (the SDK's, each once), and the requests being served that may open one and have
        not yet been given theirs."""
        live = self.sessions() if self.sessions is not None else None
        if live is None:  # fail closed: every session seen opened and not ended by a DELETE counts
            return len(self.owners) + sum(self._opening.values())
        # a session admitted by the SDK but not yet answered is in live and counted in _opening: not twice
        return max(len(live), sum(1 for sid in self.owners if sid in live) + sum(self._opening.values()))

    def _open_sessions(self, identity: str) -> int:
        """The sessions ``identity`` has open, and its requests being served that may open one."""
        live = self.sessions() if self.sessions is not None else None
        if live is None:  # the SDK's sessions cannot be read: every one seen opened and not deleted counts (fail closed)
            return sum(1 for who in self.owners.values() if who == identity) + self._opening[identity]
        return sum(1 for sid, who in self.owners.items() if who == identity and sid in live) + self._opening[identity]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _json_rpc_errors(send, self.max_body_bytes)
        raw = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        headers = dict(raw)
        if self._security is not None and await self._refused_origin(scope, receive, send, headers):
            return
        for name in _SINGLE_HEADERS:
            count = sum(1 for k, _ in raw if k == name)
            if count > 1:
                # the SDK reads a header's first value, a dict its last: two session ids let one identity
                # pass the owner check with its own (or an unknown) id and act on another's session
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": codes.MALFORMED_REQUEST,
                    "message": f"a request names one {name} (this one names {count})"}}).encode()
                await send({"type": "http.response.start", "status": 400, "headers": [
                    (b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        matched = self._match(headers.get("authorization"))
        token, identity = matched if matched is not None else (None, None)
        if identity is None:
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": codes.UNAUTHORIZED, "message": "a bearer token mapped to an identity is required"}}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        opening = ("mcp-session-id" not in headers and (self.max_sessions_per_identity is not None
                                                        or self.max_sessions is not None)
                   and _may_open_session(headers))
        if opening and self.max_sessions is not None and self._all_open_sessions() >= self.max_sessions:
            # every identity's sessions together (each a server task and its memory): the SDK's own cap is 10 000
            limit = self.max_sessions
            await _send_error(send, 503, codes.TOO_MANY_CALLS, f"the gateway already has {limit} HTTP sessions open "
                              "(http.max_sessions, every identity together); try again once one has ended",
                              data={"limit": limit})
            return
        if (opening and self.max_sessions_per_identity is not None
                and self._open_sessions(identity) >= self.max_sessions_per_identity):
            limit = self.max_sessions_per_identity
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": codes.TOO_MANY_CALLS, "message": f"identity {identity} already has {limit} HTTP sessions "
                "open (http.max_sessions_per_identity); end one (DELETE) or wait until an idle one is closed",
                "data": {"limit": limit}}}).encode()
            await send({"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        session_id = headers.get("mcp-session-id")
        owner = self.owners.get(session_id) if session_id is not None else None
        if session_id is not None and owner is None and self._is_open(session_id):
            owner = ""  # an open session whose owner is not known: used by no identity (not by any)
        if owner is not None and owner != identity:
            # a session is used only by the identity that created it: another token may not list its
            # tools, read its stream or end it (DELETE); the session is left as it is
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": codes.UNAUTHORIZED, "message": "this session belongs to another identity"}}).encode()
            await send({"type": "http.response.start", "status": 403, "headers": [
                (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope.get("method") == "GET" and "last-event-id" in headers:
            # the gateway keeps no events to replay (no event store); the SDK's replay then returned without an
            # answer (uvicorn: a 500). Ignored, as the specification allows: the GET opens the stream as without it
            scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", [])
                                          if k.lower() != b"last-event-id"]}
        state = scope.setdefault("state", {})
        state["sealbox_identity"] = identity
        # whether this request's client is still there: a held call's outcome is delivered only to one that is
        wire = state[WIRE_STATE_KEY] = Wire()
        method = scope.get("method")
        body: list[bytes] | None = [] if method == "POST" else None  # its chunks (references, not copies)
        refused = False
        # a 400 answering a POST: held back with its body (small), in case it is the SDK's "Validation error"
        held: dict[str, Any] | None = None

        async def receive_noting_disconnect() -> Any:
            message = await receive()
            if message.get("type") == "http.disconnect":
                wire.gone = True
            elif body is not None and message.get("type") == "http.request":
                body.append(message.get("body") or b"")
            return message

        counted = False  # whether this request is counted in _opening

        async def send_noting_sessions(message: Any) -> None:
            nonlocal refused, held, counted
            if refused:
                return  # the SDK's 202 for a request it took for a notification: replaced by an error
            if held is not None and message["type"] == "http.response.body":
                held["answer"] += message.get("body") or b""
                if message.get("more_body"):
                    return
                start, answer = held["start"], held["answer"]
                fixed = _invalid_message_answer(held["request"], answer)
                if fixed is not None:  # the SDK's -32602 for a body that is no JSON-RPC message: -32600, as stdio
                    answer = fixed
                    start = {**start, "headers": [(k, v) for k, v in start.get("headers") or []
                                                  if k.lower() != b"content-length"]
                             + [(b"content-length", str(len(fixed)).encode())]}
                held = None
                await send(start)
                await send({"type": "http.response.body", "body": answer})
                return
            if message["type"] == "http.response.start":
                status = int(message.get("status", 500))
                if status == 400 and body:
                    held = {"start": message, "answer": b"", "request": b"".join(body)}
                    body.clear()
                    return
                problem = _request_without_id(b"".join(body)) if status == 202 and body else None
                if body:
                    body.clear()  # not kept while the answer streams (a call may take minutes)
                if problem is not None:
                    # a request whose id is null, a fraction, a boolean or an object: the SDK reads it as a
                    # notification and answers 202, so its client waits for an answer that never comes
                    refused = True
                    error = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32600, "message": f"Invalid request: {problem}"}}).encode()
                    await send({"type": "http.response.start", "status": 400, "headers": [
                        (b"content-type", b"application/json")]})
                    await send({"type": "http.response.body", "body": error})
                    return
                if session_id is None and status < 400:
                    for k, v in message.get("headers") or []:
                        if k.decode("latin-1").lower() == "mcp-session-id":
                            self._forget_ended()
                            if self.tokens.get(token) != identity:  # type: ignore[arg-type]
                                # its token was revoked (SIGHUP) while the request was served: ended once it is over
                                refused_sessions.append(v.decode("latin-1"))
                            else:
                                self.owners[v.decode("latin-1")] = identity
                                self.session_tokens[v.decode("latin-1")] = token  # type: ignore[assignment]
                            if counted:  # counted in owners from now on, not in _opening as well
                                counted = False
                                self._opened(identity)
                elif session_id is not None and (status == 404 or (method == "DELETE" and status < 300)):
                    # ended, or unknown to the SDK (expired); a 404 is also a stateless (2026-07-28) request's
                    # "method not found", its session id unread and the session still open: its owner is kept
                    if method == "DELETE" or not self._is_open(session_id):
                        self._drop_owner(session_id)
            await send(message)

        #: sessions to end once the request is over: its answer refused it, or its token was revoked meanwhile
        refused_sessions: list[str] = []
        if session_id is None and method == "POST" and self.discard is not None and _may_open_session(headers):
            # a request that may open a session: one its answer refuses (a JSON-RPC error) opens none
            app_send = _opening_answer(send_noting_sessions, refused_sessions.append)
        else:
            app_send = send_noting_sessions
        if not opening:
            app_receive = receive_noting_disconnect
            in_flight: set[str] | None = None
            request_key: str | None = None
            if session_id is not None and method == "POST":
                # the SDK keys each POST's answer stream by str(id): a request whose id is in flight on the session
                # took the first one's stream (never answered: its connection and the session held for good)
                read, app_receive = await _read_ahead(receive_noting_disconnect, self.max_body_bytes)
                request_id = _request_id(read)
                if request_id is not None:
                    request_key = str(request_id)
                    if request_key == _get_stream_key():  # the SDK's key of the session's GET stream
                        await _send_error(send, 400, codes.MALFORMED_REQUEST, f"request id {request_key} is the name "
                                          "the MCP SDK's transport gives a session's GET stream: use another id; "
                                          "nothing of this request was recorded or carried out",
                                          request_id=request_id)
                        return
                    in_flight = self._ids_in_flight.setdefault(session_id, set())
                    if request_key in in_flight:
                        await _send_error(send, 400, codes.MALFORMED_REQUEST, f"request id {request_key} is already "
                                          "in flight on this session (a JSON-RPC id is not reused while its request "
                                          "is unanswered): nothing of this request was recorded or carried out",
                                          request_id=request_id)
                        return
                    in_flight.add(request_key)
            try:
                await self.app(scope, app_receive, app_send)
            finally:
                if in_flight is not None:
                    in_flight.discard(request_key)  # type: ignore[arg-type]
                    if not in_flight and self._ids_in_flight.get(session_id) is in_flight:
                        del self._ids_in_flight[session_id]  # type: ignore[arg-type]
                if self.discard is not None:
                    for sid in refused_sessions:
                        await self.discard(sid)
            return
        self._opening[identity] += 1  # counted until its answer names its session (in owners) or it ends
        counted = True
        try:
            await self.app(scope, receive_noting_disconnect, app_send)
        finally:
            if self.discard is not None:
                for sid in refused_sessions:
                    await self.discard(sid)
            if counted:
                self._opened(identity)

    def _opened(self, identity: str) -> None:
        """A request of ``identity`` that could open a session no longer counts as one being opened."""
        self._opening[identity] -= 1
        if self._opening[identity] <= 0:
            del self._opening[identity]


    async def _refused_origin(self, scope: Any, receive: Any, send: Any, headers: dict[str, str]) -> bool:
        """Whether the request's ``Host`` or ``Origin`` is refused (DNS-rebinding protection; answered here:
        HTTP 421 or 403, JSON-RPC ``UNAUTHORIZED``). Checked before the token: a page of another origin is
        refused as such, not told (401) that a token would let it in."""
        security = self._security
        host, origin = headers.get("host"), headers.get("origin")
        if not _listed(host, security.allowed_hosts):  # type: ignore[union-attr]
            await _send_error(send, 421, codes.UNAUTHORIZED, f"Host {host or ''} is not allowed (DNS-rebinding "
                              "protection: the gateway's own address)")
            return True
        if origin and not _listed(origin, security.allowed_origins):  # type: ignore[union-attr]
            await _send_error(send, 403, codes.UNAUTHORIZED, f"Origin {origin} is not allowed (DNS-rebinding "
                              "protection: the gateway's own origin or one in http.allowed_origins)")
            return True
        return False

    def _is_open(self, session_id: str) -> bool:
        """Whether the SDK still has the session open (when its sessions cannot be read: whether it is known
        and not deleted, so that its owner is kept: fail closed)."""
        live = self.sessions() if self.sessions is not None else None
        return session_id in self.owners if live is None else session_id in live

    def _forget_ended(self) -> None:
        """Drop the owners of sessions that have ended without a DELETE (else kept for the process's life)."""
        live = self.sessions() if self.sessions is not None else None
        if live is None:
            return
        for sid in [sid for sid in self.owners if sid not in live]:
            self._drop_owner(sid)


#: bytes of an opening request's answer read for its JSON-RPC message at most (an initialize result is small)
_OPENING_ANSWER_MAX = 1 << 20


def _opening_answer(send: Any, refused: Callable[[str], Any]) -> Any:
    """``send`` for a request that may open a session (a POST without ``mcp-session-id``): the SDK keeps a
    session open once its opening request is answered with a status below 400, even when the answer is a
    JSON-RPC error (an ``initialize`` refused as ``REQUEST_TOO_LARGE`` or ``MALFORMED_REQUEST``): it stayed open,
    and counted, until it idled out. The answer's head is held until its first message is read: an error
    is sent without the ``mcp-session-id`` header, and ``refused(session_id)`` is called (the caller ends the
    session once the request is over)."""
    held: dict[str, Any] | None = None
    decided = False

    async def send_opening(message: Any) -> None:
        nonlocal held, decided
        if decided:
            await send(message)
            return
        if message["type"] == "http.response.start":
            kept = message.get("headers") or []
            sid = next((v for k, v in kept if k.lower() == b"mcp-session-id"), None)
            if int(message.get("status", 200)) >= 400 or sid is None:
                decided = True
                await send(message)
                return
            ctype = next((v for k, v in kept if k.lower() == b"content-type"), b"")
            held = {"start": message, "sid": sid.decode("latin-1"), "body": b"", "sse": ctype.startswith(b"text/event")}
            return
        if held is None or message["type"] != "http.response.body":
            await send(message)
            return
        held["body"] += message.get("body") or b""
        more = bool(message.get("more_body"))
        doc = _first_message(held["body"], held["sse"], more)
        if doc is None and more and len(held["body"]) < _OPENING_ANSWER_MAX:
            return
        decided = True
        start = held["start"]
        if isinstance(doc, dict) and "error" in doc and "result" not in doc:
            start = {**start, "headers": [(k, v) for k, v in start.get("headers") or []
                                          if k.lower() != b"mcp-session-id"]}
            refused(held["sid"])
        body, held = held["body"], None
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": more})

    return send_opening


def _first_message(data: bytes, sse: bool, more: bool) -> Any:
    """The first JSON-RPC message of an answer's body so far (SSE events or one JSON document), or None."""
    if not sse:
        if more:
            return None
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            return None
    for event in re.split(rb"\r\n\r\n|\n\n|\r\r", data)[:-1]:  # complete events only
        lines = [line[5:].lstrip(b" ") if line.startswith(b"data:") else None for line in re.split(rb"\r\n|\n|\r", event)]
        payload = b"\n".join(x for x in lines if x is not None)
        if payload.strip():
            try:
                return json.loads(payload)
            except (ValueError, RecursionError):
                return None
    return None


def _json_rpc_errors(send: Any, max_body_bytes: int | None) -> Any:
    """``send``, with an HTTP error answer (status 400 or above) whose body is not JSON (the SDK's "Request
    body too large", "Invalid Content-Type header"; starlette's "Not Found") turned into a JSON-RPC error with
    the same status: an MCP client reads an HTTP error's body as one. 413: ``REQUEST_TOO_LARGE``; 5xx:
    -32603 (internal error); any other: ``MALFORMED_REQUEST``, the body's text (or the status's phrase) as
    its message. Every other answer passes as it is (one comparison per message)."""
    held: dict[str, Any] | None = None

    async def send_json(message: Any) -> None:
        nonlocal held
        if held is not None:
            if message["type"] != "http.response.body":
                return
            held["body"] += message.get("body") or b""
            if message.get("more_body"):
                return
            status, text = held["status"], held["body"].decode("utf-8", "replace").strip()
            if status == 413:
                code = codes.REQUEST_TOO_LARGE
                text = (f"the request body is larger than {max_body_bytes} bytes (4 × limits.max_request_bytes)"
                        if max_body_bytes is not None else text or "the request body is too large")
            else:
                code = -32603 if status >= 500 else codes.MALFORMED_REQUEST
            if not text:
                from http import HTTPStatus

                try:
                    text = HTTPStatus(status).phrase
                except ValueError:
                    text = f"HTTP {status}"
            keep = tuple((k, v) for k, v in held["headers"] if k.lower() not in (b"content-type", b"content-length"))
            held = None
            await _send_error(send, status, code, text, headers=keep)
            return
        if message["type"] == "http.response.start" and message.get("status", 200) >= 400:
            kept = message.get("headers") or []
            content_type = next((v for k, v in kept if k.lower() == b"content-type"), b"")
            if not content_type.lower().startswith((b"application/json", b"text/event-stream")):
                held = {"status": int(message["status"]), "headers": list(kept), "body": b""}
                return
        await send(message)

    return send_json


def _listed(value: str | None, allowed: list[str]) -> bool:
    """Whether ``value`` (a Host or an Origin) is in ``allowed``, or has a port after a listed ``base:*``
    (the SDK's TransportSecurityMiddleware rule)."""
    if not value:
        return False
    if value in allowed:
        return True
    return any(a.endswith(":*") and value.startswith(a[:-1]) for a in allowed)


async def _send_error(send: Any, status: int, code: int, message: str, data: Any = None,
                      headers: tuple[tuple[bytes, bytes], ...] = (), request_id: Any = None) -> None:
    """Answer HTTP ``status`` with a JSON-RPC error body (the request's id, else null): what MCP clients read."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def _get_stream_key() -> str:
    """The key under which the SDK's streamable HTTP transport keeps a session's GET stream, among the answer
    streams of its POSTs (keyed by ``str(id)``). Imported when first needed (serving: the SDK is loaded)."""
    try:
        from mcp.server.streamable_http import GET_STREAM_KEY
    except ImportError:  # another SDK version
        return "_GET_stream"
    return str(GET_STREAM_KEY)


async def _read_ahead(receive: Any, limit: int | None) -> tuple[bytes | None, Any]:
    """Read a POST's body before the app does: ``(body, receive)``, ``receive`` giving the app the messages
    read, then reading on. ``body`` is None when the body is larger than ``limit`` (the SDK refuses it: 413)
    or the client went away before it was whole."""
    read: list[Any] = []
    size, whole = 0, False
    while True:
        message = await receive()
        read.append(message)
        if message.get("type") != "http.request":
            break
        size += len(message.get("body") or b"")
        if limit is not None and size > limit:
            break
        if not message.get("more_body"):
            whole = True
            break

    async def replay() -> Any:
        return read.pop(0) if read else await receive()

    body = b"".join(m.get("body") or b"" for m in read) if whole else None
    return body, replay


def _request_id(body: bytes | None) -> Any:
    """The id of the JSON-RPC request ``body`` holds (a string or an integer), or None (not a request, not
    JSON, an id of another kind: the SDK answers those)."""
    if not body:
        return None
    import orjson

    try:
        message = orjson.loads(body)  # ~10x faster than json; what it refuses (a lone surrogate escape) json reads
    except orjson.JSONDecodeError:
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    request_id = message.get("id")
    return request_id if isinstance(request_id, str) or (isinstance(request_id, int)
                                                         and not isinstance(request_id, bool)) else None


def _may_open_session(headers: dict[str, str]) -> bool:
    """Whether a request without ``mcp-session-id`` may open a session: one not sent as a stateless
    (2026-07-28 or later) request, which the SDK serves without one."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    version = headers.get("mcp-protocol-version")
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _invalid_message_answer(request: bytes, answer: bytes) -> bytes | None:
    """The body answering a POSTed ``request`` that is JSON but no JSON-RPC message, or no JSON, as the
    stdio relay answers it (-32600 invalid request or -32700 parse error, with the request's id when it can
    be read), when ``answer`` (the body of the SDK's HTTP 400) is the SDK's ``Validation error`` (-32602, id
    null, every union member's errors) or its ``Parse error`` (-32700, id null even when the id could be
    read); else None (another 400: kept as it is)."""
    import mcp_types as types
    from pydantic import ValidationError

    try:
        sdk = json.loads(answer)
    except (ValueError, RecursionError):
        return None
    error = sdk.get("error") if isinstance(sdk, dict) else None
    message = str(error.get("message", "")) if isinstance(error, dict) else ""
    unparsed = isinstance(error, dict) and error.get("code") == types.PARSE_ERROR and message.startswith("Parse error")
    if not (unparsed or (isinstance(error, dict) and error.get("code") == types.INVALID_PARAMS
                         and message.startswith("Validation error"))):
        return None
    try:  # no JSON: read as the stdio transport reads a line (a str), for the id to be read from its start
        # bytes that are not UTF-8 are kept as lone surrogates: refused as such, with the id (_unreadable_answer)
        types.jsonrpc_message_adapter.validate_json(request.decode("utf-8", "surrogateescape") if unparsed else request,
                                                    by_name=False)
    except ValidationError as exc:
        reply = _unreadable_answer(exc)
        if reply is None and unparsed:  # a blank body, a response to the gateway nested too deep: the SDK's answer
            return None
        if reply is None:  # a malformed notification or response: it is still answered over HTTP (a 400)
            first = (exc.errors() or [{}])[0]
            reply = _invalid_request(" ".join(str(first.get("msg") or exc).split()))
        return reply.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
    except RecursionError:  # nested too deep for pydantic's parser: the SDK's answer stands
        return None
    return None


def _request_without_id(data: bytes) -> str | None:
    """Why a POST body the SDK accepted as a notification is a request with an unusable id, or None.

    Every MCP notification's method starts with ``notifications/``; any other method sent without a
    string or integer id is a request its client waits an answer for."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("method"), str) or doc["method"].startswith("notifications/"):
        return None
    return f"a request's id must be a string or an integer (method {doc['method']!r})"


def token_identities(cfg: Any) -> dict[str, str]:
    """``http.tokens`` resolved: bearer token -> identity.

    Raises:
        ConfigError: a ``token_env`` variable is unset or too short, or one token is given to two
            identities (its requests would all be recorded as the last one's; the token is not shown).
    """
    tokens: dict[str, str] = {}
    for spec in cfg.tokens:
        value = spec.resolve()
        other = tokens.setdefault(value, spec.identity)
        if other != spec.identity:
            raise ConfigError(f"{cfg.source}: http.tokens: identities {other} and {spec.identity} have the same "
                              "token; give each identity its own")
    return tokens


class _QuietInvalidRequests(logging.Filter):
    """Drops uvicorn's "Invalid HTTP request received." warning (one per request h11 cannot parse, sent by anyone,
    no token needed): the gateway answers such a request itself and logs it at debug level (``_http_protocol``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Invalid HTTP request received."


class _QuietClientDisconnects(logging.Filter):
    """Drops the SDK's "Error handling POST request" record (logged with a whole traceback) when its error is
    starlette's ``ClientDisconnect``: the client went away before its body was whole (its own timeout, a
    killed process, a body announced and never sent), an ordinary event nothing can be done about, which
    one client could repeat to fill the operator's log. Every other record of that logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        from starlette.requests import ClientDisconnect

        return not (record.exc_info and isinstance(record.exc_info[1], ClientDisconnect))


_SDK_HTTP_SERVER_LOGGER = "mcp.server.streamable_http"


def _quiet_client_disconnects() -> None:
    sdk = logging.getLogger(_SDK_HTTP_SERVER_LOGGER)
    if not any(isinstance(f, _QuietClientDisconnects) for f in sdk.filters):
        sdk.addFilter(_QuietClientDisconnects())
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietInvalidRequests) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(_QuietInvalidRequests())


def http_app(gateway: Gateway, port: int) -> Any:
    """The ASGI app serving ``/mcp`` for a gateway listening on 127.0.0.1:``port``.

    Raises:
        ConfigError: no ``http.tokens`` in the config, or a problem of :func:`token_identities`; a
            gateway with a default run (``SEALBOX_RUN_ID``, or ``run_id=``): every HTTP session,
            whoever its client, would join that run.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    from sealbox.gateway.server import ENV_RUN_ID, RUN_ID_META_KEY

    default_run_id = getattr(gateway, "default_run_id", None)  # a GatewayReplay (gateway replay --http) has none
    if default_run_id is not None:
        given = f"{ENV_RUN_ID} is set" if gateway.default_run_source == "env" else "a default run_id was given"
        raise ConfigError(f"{given} ({default_run_id}), but a gateway serving HTTP does not join one run for "
                          f"every client (it is for a stdio gateway launched by the agent); unset it: an HTTP client "
                          f"joins a run by naming it in _meta[{RUN_ID_META_KEY!r}]")
    cfg = gateway.config
    if not cfg.tokens:
        raise ConfigError(f"{cfg.source}: http.tokens is required to serve over HTTP (each token maps to an identity)")
    tokens = token_identities(cfg)
    _quiet_client_disconnects()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}"],
        allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}", *cfg.allowed_origins],
    )
    app = gateway.server.streamable_http_app(streamable_http_path="/mcp", transport_security=security,
                                             max_request_body_size=4 * cfg.limits.max_request_bytes, host="127.0.0.1",
                                             session_idle_timeout=cfg.session_idle_s,
                                             max_sessions=getattr(cfg, "max_sessions", None) or 10_000)
    # the SDK's session manager and its open sessions are private attributes: where they cannot be found (another
    # SDK version), a refused initialize's session is ended through the SDK's HTTP interface (a DELETE), and the
    # session caps count the sessions seen opened and not ended (fail closed), see BearerAuth
    manager = getattr(gateway.server, "_session_manager", None)

    def sessions() -> Any:  # the SDK's open sessions (a private attribute: None if it is gone or not a mapping)
        live = getattr(manager, "_server_instances", None)
        return live if isinstance(live, dict) else None

    if sessions() is None or not callable(getattr(manager, "_discard_session", None)):
        log.warning("the MCP SDK's open HTTP sessions cannot be read (its private attributes changed): a session "
                    "that ends without a DELETE (idle, its client gone) stays counted against http.max_sessions and "
                    "http.max_sessions_per_identity until the gateway restarts")

    async def discard(session_id: str) -> None:  # as the SDK ends a session whose opening request failed
        live, end = sessions(), getattr(manager, "_discard_session", None)
        transport = live.get(session_id) if live is not None else None
        if live is not None and transport is None:
            return  # already ended
        if transport is not None and callable(end):
            try:
                await end(session_id, transport)
                return
            except Exception:  # another SDK's signature: ended as a client ends it
                log.debug("the SDK's _discard_session failed; ending session by DELETE", exc_info=True)
        await _delete_session(app, session_id, port)

    return BearerAuth(app, tokens, sessions, max_sessions_per_identity=getattr(cfg, "max_sessions_per_identity", None),
                      security=security, max_body_bytes=4 * cfg.limits.max_request_bytes, discard=discard,
                      max_sessions=getattr(cfg, "max_sessions", None))


async def _delete_session(app: Any, session_id: str, port: int) -> None:
    """End the session ``session_id`` of the SDK's ASGI ``app`` as its client would: an HTTP DELETE, served in
    process (the SDK's public interface; its answer is not used). Never raises: a session it cannot end is left
    to its idle timeout (logged)."""
    try:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        version = max(HANDSHAKE_PROTOCOL_VERSIONS)
    except (ImportError, TypeError, ValueError):
        version = "2025-11-25"
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "DELETE", "scheme": "http", "path": "/mcp", "raw_path": b"/mcp", "root_path": "",
             "query_string": b"", "client": ("127.0.0.1", 0), "server": ("127.0.0.1", port), "state": {},
             "headers": [(b"host", f"127.0.0.1:{port}".encode()), (b"mcp-session-id", session_id.encode("latin-1")),
                         (b"mcp-protocol-version", version.encode())]}
    sent = False
    answered = anyio.Event()
    status: list[int] = []

    async def receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            status.append(int(message.get("status", 0)))
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    try:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await app(scope, receive, send)
    except Exception:
        log.warning("a refused HTTP session could not be ended; it is closed once idle", exc_info=True)
        return
    if status[:1] != [200]:
        log.warning("a refused HTTP session could not be ended (DELETE answered %s); it is closed once idle",
                    status[:1] or "nothing")


async def _reload_tokens(gateway: Any, auth: BearerAuth, previous: Any = None) -> None:
    """On SIGHUP: re-read the gateway's config file and serve with its ``http.tokens`` (:meth:`BearerAuth.reload_tokens`).
    Only the tokens change; a config that does not load (or lists no token) keeps the tokens in use. One stderr line
    either way (the tokens themselves are never shown)."""
    import dataclasses

    from sealbox.gateway.config import load_config

    if previous is not None:
        try:
            await previous
        except BaseException:  # noqa: BLE001 - a failed or cancelled earlier reload: this one still runs
            pass
    old = gateway.config
    try:
        cfg = await _off_the_loop(load_config, old.source)
        tokens = token_identities(cfg)
        if not tokens:
            raise ConfigError(f"{cfg.source}: http.tokens is required to serve over HTTP")
    except ConfigError as exc:
        log.warning("SIGHUP: the config was not reloaded, the http.tokens in use are kept: %s", exc)
        return
    except OSError as exc:
        log.warning("SIGHUP: the config was not reloaded, the http.tokens in use are kept: %s: %s", old.source,
                    exc.strerror or exc)
        return
    ended = await auth.reload_tokens(tokens)
    identities = len(set(tokens.values()))
    rest = ("" if dataclasses.replace(cfg, tokens=old.tokens) == old
            else "; the config's other changes take effect only at a restart")
    log.warning("SIGHUP: http.tokens reloaded (%d token%s, %d identit%s); %d session%s of a revoked token ended%s",
                len(tokens), "" if len(tokens) == 1 else "s", identities, "y" if identities == 1 else "ies",
                ended, "" if ended == 1 else "s", rest)


async def _off_the_loop(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` run in a daemon thread, awaited: the event loop serves meanwhile (a config file read on
    SIGHUP may wait: a named pipe up to SEALBOX_PIPE_WAIT, a slow network disk). A daemon thread, not the
    loop's executor, so that a stop while it waits does not wait for it at exit. Raises what ``fn`` raises."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if not done.done():
            done.set_exception(exc) if exc is not None else done.set_result(result)

    def work() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            result, exc = None, e
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:  # the loop closed meanwhile: nobody waits for it
            pass

    threading.Thread(target=work, name="sealbox-config-reload", daemon=True).start()
    return await done


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: any free port).

    Raises:
        ConfigError: the port is in use or may not be bound.
    """
    from sealbox.errors import ConfigError

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


#: seconds a connection may take to send a whole request head, from its opening or its previous answer
HEAD_TIMEOUT_S = 15.0
#: seconds a connection over ``http.max_connections`` may take to send its request head (then answered 503)
REFUSED_HEAD_TIMEOUT_S = 2.0
#: seconds a request's whole body may take to arrive after its head (the gateway listens on 127.0.0.1 only:
#: many MB arrive in well under a second); the answer's own time (a held call, an SSE stream) is not limited
BODY_TIMEOUT_S = 30.0


def _http_protocol(max_connections: int | None = None) -> Any:
    """uvicorn's h11 protocol, closing a connection whose request head is not whole within
    :data:`HEAD_TIMEOUT_S`, and answering HTTP 408 (then closing) a request whose body is not whole within
    :data:`BODY_TIMEOUT_S` of its head. uvicorn times out only an idle keep-alive connection: a client sending
    its head a byte at a time (slowloris; no token needed) kept its connection, a file descriptor, for good;
    one announcing a body it never sent (or sent a byte now and then) kept a server task as well.

    With ``max_connections`` (``http.max_connections``), at most that many connections are open at once: one
    more first closes the connection idle longest (waiting for a request head: none of its requests is being
    served); when every open connection is serving a request, the new one's first request is answered HTTP 503
    with a JSON-RPC error (``TOO_MANY_CALLS``, ``data`` ``{"limit": N}``) and the connection closed (one not
    sending a whole head within :data:`REFUSED_HEAD_TIMEOUT_S` is closed without an answer)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class _HeadTimeoutH11(H11Protocol):
        _head_timer: Any = None
        _body_timer: Any = None
        #: loop time since which the connection waits for a request head (None: a request is being served)
        _idle_since: float | None = None
        #: whether the connection is over ``max_connections``: its first request is answered 503
        _over = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._idle_since = self.loop.time()
            if max_connections is not None and len(self.connections) > max_connections and not self._evict_idle():
                self._over = True
                self._head_timer = self.loop.call_later(REFUSED_HEAD_TIMEOUT_S, self._head_timed_out)
                return
            self._arm_head_timer()

        def _evict_idle(self) -> bool:
            """Close the connection waiting longest for a request head (not this one); whether there was one."""
            idle = [c for c in self.connections if c is not self and getattr(c, "_idle_since", None) is not None
                    and not getattr(c, "_over", False) and not c.transport.is_closing()]
            if not idle:
                return False
            oldest = min(idle, key=lambda c: c._idle_since)
            oldest._idle_since = None
            oldest.transport.close()
            return True

        def data_received(self, data: bytes) -> None:
            if not self._over:
                super().data_received(data)
                return
            try:
                self.conn.receive_data(data)
                event = self.conn.next_event()
            except h11.RemoteProtocolError:
                event = None
            if event is h11.NEED_DATA:
                return
            self._disarm_head_timer()
            if isinstance(event, h11.Request):
                self._write_error(503, b"Service Unavailable", codes.TOO_MANY_CALLS,
                                  f"the gateway already has {max_connections} HTTP connections open, each serving a "
                                  "request (http.max_connections); try again once one has been answered",
                                  data={"limit": max_connections})
            self.transport.close()

        def _unsupported_upgrade_warning(self) -> None:
            # websocket upgrades are not served (ws="none"): the request is served as plain HTTP; uvicorn logged two
            # warnings for each, which anyone could repeat without a token
            log.debug("an HTTP request asked for an upgrade (not served): served as plain HTTP")

        def send_400_response(self, msg: str) -> None:
            """A request h11 cannot parse (a bad request line or header, two Content-Length headers, a broken
            chunk): answered with a JSON-RPC error, as every other HTTP error (uvicorn's is plain text), and
            closed. Logged at debug level only: needing no token, it could otherwise fill the operator's log."""
            log.debug("an HTTP request could not be parsed (%s): answered 400 and closed", msg)
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.disconnected = True  # the app's receive() gets http.disconnect; its own answer is dropped
                self.cycle.message_event.set()
            if self.cycle is None or not self.cycle.response_started:
                self._write_error(400, b"Bad Request", codes.MALFORMED_REQUEST, "the request is not valid HTTP/1.1")
            self.transport.close()

        def _write_error(self, status: int, reason: bytes, code: int, message: str, data: Any = None) -> None:
            """Answer the request being read with a JSON-RPC error (null id) and ``connection: close``."""
            error: dict[str, Any] = {"code": code, "message": message}
            if data is not None:
                error["data"] = data
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            try:
                self.transport.write(self.conn.send(h11.Response(status_code=status, reason=reason, headers=[
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")])))
                self.transport.write(self.conn.send(h11.Data(data=body)))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
            except h11.LocalProtocolError:
                pass

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:
                self._idle_since = None
            if self.cycle is not cycle:  # a request head is whole: its request is being served
                self._disarm_head_timer()
                if self.cycle is not None and self.cycle.more_body:  # its body is still to come
                    self._disarm_body_timer()
                    self._body_timer = self.loop.call_later(BODY_TIMEOUT_S, self._body_timed_out, self.cycle)
            if self._body_timer is not None and (self.cycle is None or not self.cycle.more_body):
                self._disarm_body_timer()  # the body is whole

        def on_response_complete(self) -> None:
            self._disarm_body_timer()  # answered without its whole body: the head timer bounds the rest
            if not self.transport.is_closing():  # a keep-alive connection: its next head has the same time
                self._idle_since = self.loop.time()
                self._arm_head_timer()  # first: uvicorn serves a pipelined request from inside this call
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            self._disarm_body_timer()
            super().connection_lost(exc)

        def _disarm_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_timed_out(self, cycle: Any) -> None:
            self._body_timer = None
            if self.transport.is_closing() or cycle is not self.cycle or not cycle.more_body:
                return
            if not cycle.response_started and self.conn.our_state is h11.SEND_RESPONSE:
                # the request never reached the app's handler whole: nothing of it was parsed or recorded
                reason = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": codes.MALFORMED_REQUEST,
                    "message": f"the request body did not arrive within {BODY_TIMEOUT_S} s"}}).encode()
                try:
                    self.transport.write(self.conn.send(h11.Response(status_code=408, reason=b"Request Timeout", headers=[
                        (b"content-type", b"application/json"), (b"content-length", str(len(reason)).encode()),
                        (b"connection", b"close")])))
                    self.transport.write(self.conn.send(h11.Data(data=reason)))
                    self.transport.write(self.conn.send(h11.EndOfMessage()))
                except h11.LocalProtocolError:
                    pass
            cycle.disconnected = True  # as uvicorn's connection_lost: the app's receive() gets http.disconnect (its
            cycle.message_event.set()  # task ends) and an answer of its own is not written after this one
            self.transport.close()

        def _arm_head_timer(self) -> None:
            self._disarm_head_timer()
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return _HeadTimeoutH11


def _server(config: Any, gateway: Gateway | None = None) -> Any:
    """A ``uvicorn.Server`` that does not re-raise a SIGINT / SIGTERM once it has shut down on it.

    uvicorn handles both signals with a graceful shutdown, then raises the signal again under
    the process's previous handler, which (SIGTERM's default) kills the process before the
    caller can close the store and sign its final checkpoint. Here the shutdown simply returns.
    """
    import uvicorn

    class _Server(uvicorn.Server):
        #: the event loop serving (set by serve_http): where the wait for calls in flight runs
        sealbox_loop: Any = None
        _draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            begin = getattr(gateway, "begin_shutdown", None)  # a replay server holds no calls
            if begin is not None:
                begin()  # held calls answer "pending" now
            if (not self._draining and self.sealbox_loop is not None and getattr(gateway, "_calls", 0)
                    and hasattr(gateway, "drain_calls")):
                # calls are being answered: uvicorn's shutdown would end their response (SSE) streams at
                # once (sse-starlette watches should_exit), so the shutdown starts once they are answered;
                # a second signal meanwhile starts it at once (a call still upstream is recorded when it ends)
                self._draining = True
                self.sealbox_loop.call_soon_threadsafe(self._drain_then_exit, sig, frame)
                return
            self._exit_now(sig, frame)

        def _exit_now(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            self._captured_signals.clear()  # what capture_signals() would raise again after the shutdown

        def _drain_then_exit(self, sig: int, frame: Any) -> None:
            import asyncio

            async def drain() -> None:
                try:
                    await gateway.drain_calls()  # type: ignore[union-attr]
                    await asyncio.sleep(0.2)  # the last replies are written by their requests' own tasks
                finally:
                    self._exit_now(sig, frame)

            self._drain_task = asyncio.ensure_future(drain())

    return _Server(config)


async def serve_http(gateway: Gateway, port: int, *, sock: socket.socket | None = None,
                     task_status: Any = anyio.TASK_STATUS_IGNORED, hangups: "list[int] | None" = None) -> None:
    """Serve streamable HTTP on 127.0.0.1 until cancelled, or until SIGINT / SIGTERM (a clean return
    once uvicorn has shut down: sessions closed, their runs ended); ``started`` with the bound port.
    The listening socket (``sock``, or the one bound here) is closed when this returns or is
    cancelled: uvicorn closes it only on its own shutdown, which a cancellation skips. ``hangups``: a
    list the caller's SIGHUP handler appended to while the gateway started; non-empty once the reload
    handler is installed, it is emptied and the tokens reloaded once."""
    sock = sock or bind(port)
    with sock:
        await _serve_http(gateway, sock, task_status, hangups)


async def _serve_http(gateway: Gateway, sock: socket.socket, task_status: Any, hangups: "list[int] | None" = None) -> None:
    import uvicorn

    port = sock.getsockname()[1]
    app = http_app(gateway, port)
    # ws="none": an Upgrade: websocket request was handed to uvicorn's websocket protocol, which the connection cap
    # does not count (nothing is served over websockets)
    server = _server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", ws="none",
                                    http=_http_protocol(getattr(gateway.config, "max_connections", None))), gateway)
    try:
        import asyncio

        server.sealbox_loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: a signal stops at once, without waiting for calls in flight
        pass
    reloads: list[Any] = []  # the reload task running (a SIGHUP meanwhile waits for it)
    try:
        import asyncio
        import signal

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, lambda: reloads.append(loop.create_task(
            _reload_tokens(gateway, app, reloads[-1] if reloads else None))))
        if hangups:  # SIGHUP came while the gateway started: the config may have changed after it was read
            hangups.clear()
            reloads.append(loop.create_task(_reload_tokens(gateway, app)))
    except (RuntimeError, NotImplementedError, AttributeError, ValueError):  # not asyncio, no SIGHUP, not main thread
        loop = None
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(gateway.run_upstreams)

            async def serve() -> None:
                try:
                    await server.serve([sock])
                finally:
                    tg.cancel_scope.cancel()  # shut down on a signal (or failed to start): stop the upstreams

            tg.start_soon(serve)
            while not server.started:
                await anyio.sleep(0.01)  # uvicorn exposes no started event
            task_status.started(port)
            try:
                await anyio.sleep_forever()
            finally:
                server.should_exit = True
    finally:
        if loop is not None:
            import signal

            loop.remove_signal_handler(signal.SIGHUP)
        for task in reloads:
            task.cancel()
        for listening in getattr(server, "servers", ()):  # uvicorn's shutdown closes them; a cancellation skips it
            listening.close()
