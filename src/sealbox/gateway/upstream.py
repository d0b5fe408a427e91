"""One upstream MCP server: connect, list tools, call, and restart after a failure.

An :class:`Upstream` is supervised by :meth:`Upstream.run`, a task that connects
(stdio command or streamable-HTTP URL, with the official ``mcp`` client SDK),
answers ``initialize``, lists every tool, and then waits until the connection
ends; after a crash it waits a backoff (``restart.initial_s`` doubling up to
``restart.max_s``) and connects again. The gateway never goes down with it.

Failures are translated at this boundary, so the recorder classifies them:

* :class:`UpstreamUnavailable` (a :class:`ConnectionError`): not connected, or
  the connection closed during the call. The recorder opens every breaker of
  the server (``server_down``).
* :class:`UpstreamTimeout` (a :class:`TimeoutError`): no answer within
  ``limits.call_timeout_s``; a breaker failure of kind ``timeout``.
* :class:`UpstreamProtocolError`: the upstream answered with something that is
  not a valid result (malformed JSON-RPC, a result of the wrong shape), or with a
  JSON-RPC error response — including −32000 ("server error"), which is not taken
  for the SDK's own connection-closed error of the same code (the upstream is alive).
  Its ``code`` is the error's code; :attr:`UpstreamProtocolError.refused` tells the upstream's
  refusal of one request as that request's fault (:data:`REFUSAL_CODES`: invalid params, an
  unknown tool, method not found…) from a sign that the upstream is unhealthy: the gateway does
  not count a refusal against the circuit breaker (docs/gateway.md, *What the circuit breaker counts*).

The transports' own errors (``mcp``, ``anyio``, ``pydantic``, ``httpx``) never
leave this module.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from pydantic import ValidationError

from sealbox.gateway.config import Limits, UpstreamSpec

__all__ = ["Upstream", "UpstreamUnavailable", "UpstreamTimeout", "UpstreamProtocolError", "ServerRequestRouter",
           "REFUSAL_CODES"]

log = logging.getLogger("sealbox.gateway")

#: ``(upstream, method, params) -> result model or ErrorData``: forwards a request the upstream made of its client.
ServerRequestRouter = Callable[["Upstream", str, Any], Awaitable[Any]]


class UpstreamUnavailable(ConnectionError):
    """The upstream is not connected, or its connection closed during the call."""


class UpstreamTimeout(TimeoutError):
    """The upstream did not answer within ``limits.call_timeout_s``."""


class GatewayStopping(UpstreamUnavailable):
    """The gateway is stopping and the call's request was never written to the upstream: not forwarded."""


class CutAtShutdown(UpstreamTimeout):
    """The gateway stopped while a call written to the upstream was unanswered after the shutdown grace
    (:data:`SHUTDOWN_GRACE_S`): it may have been carried out, its outcome is unknown."""


#: Seconds a call written to an upstream is still waited for once the gateway is stopping (at most its
#: ``limits.call_timeout_s``): then it is answered and recorded :class:`CutAtShutdown`.
SHUTDOWN_GRACE_S = 5.0


#: JSON-RPC error codes by which an upstream refuses one request as that request's own fault (the client's or
#: the model's): −32600 invalid request, −32601 method not found, −32602 invalid params (MCP: also an unknown
#: tool, and arguments the tool refuses), −32002 resource not found (MCP), −32021 missing required client
#: capability, −32042 URL elicitation required (MCP 2025-11-25). The upstream answered, at once and well-formed:
#: not a sign that it is unhealthy, so the gateway's circuit breaker does not count it. Every other code — −32603
#: internal error, −32700 parse error, the other −32000…−32099 server errors, application-defined codes — counts.
REFUSAL_CODES = frozenset({types.INVALID_REQUEST, types.METHOD_NOT_FOUND, types.INVALID_PARAMS, -32002,
                           types.MISSING_REQUIRED_CLIENT_CAPABILITY, types.URL_ELICITATION_REQUIRED})


class UpstreamProtocolError(Exception):
    """The upstream's answer was not a valid MCP result: a malformed answer, or a JSON-RPC error response.

    Args:
        message: the error's text.
        code: the JSON-RPC error code of the answer (int), or None for a malformed answer.
        sent: False for an error the SDK's HTTP transport made up for an HTTP answer it could not use (a 202 to
            a request, an unfollowed redirect): never a :attr:`refused` one, whatever its code.

    Attributes:
        code: as given.
    """

    def __init__(self, message: str, code: int | None = None, *, sent: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self._sent = sent

    @property
    def refused(self) -> bool:
        """The upstream refused the request as the request's own fault (it sent a JSON-RPC error with a code of
        :data:`REFUSAL_CODES`): it is alive and answering; not a breaker failure."""
        return self._sent and self.code in REFUSAL_CODES


class Upstream:
    """A supervised connection to one upstream server.

    Attributes:
        spec: its configuration.
        state: ``starting``, ``ready``, ``down`` or ``closed``.
        tools: the tools of the latest listing, by upstream name.
        prompts: the prompts of the latest listing, by upstream name (empty when it has no ``prompts``
            capability, or its ``prompts/list`` failed: logged, the tools still served).
        resources: the resources of the latest listing, by URI (empty without the ``resources`` capability,
            or when its ``resources/list`` failed: logged).
        templates: the resource templates of the latest listing (empty as ``resources`` is, or when
            ``resources/templates/list`` failed: many servers do not serve it).
        capabilities: the ``ServerCapabilities`` of its latest ``initialize`` (None before it first connected).
        generation: how many times it has connected (1 after the first start).
        last_error: why it went down last, or None.
        malformed: how many malformed messages it has sent.
    """

    def __init__(self, spec: UpstreamSpec, limits: Limits, *, restart_initial_s: float = 0.5,
                 restart_max_s: float = 30.0, on_tools: Callable[["Upstream", list[types.Tool]], Awaitable[None]] | None = None,
                 router: ServerRequestRouter | None = None, errlog: Any = None,
                 config_source: str | None = None) -> None:
        self.spec, self.limits = spec, limits
        #: the gateway config file the spec was read from (named in what a failed start says), or None (also for
        #: a config parsed from text, whose source is ``<string>``)
        self.config_source = None if not config_source or config_source.startswith("<") else config_source
        self.restart_initial_s, self.restart_max_s = restart_initial_s, restart_max_s
        self.on_tools, self.router = on_tools, router
        self.errlog = errlog if errlog is not None else sys.stderr
        self.state = "starting"
        self.tools: dict[str, types.Tool] = {}
        self.prompts: dict[str, types.Prompt] = {}
        self.resources: dict[str, types.Resource] = {}
        self.templates: list[types.ResourceTemplate] = []
        self.capabilities: types.ServerCapabilities | None = None
        #: called after a listing of prompts (and resources) is published: ``(upstream) -> None``
        self.on_catalog: Callable[["Upstream"], Awaitable[None]] | None = None
        self.generation = 0
        self.last_error: str | None = None
        #: tool names this upstream was seen listing more than once (each warned about once)
        self._warned_twice: set[str] = set()
        self.malformed = 0
        #: the tools its latest tools/list held that are malformed (no ``inputSchema``, ``"required": 5``…): left
        #: out of :attr:`tools` (the SDK refused the whole listing for one of them), by name: why
        self.rejected_tools: dict[str, str] = {}
        self._rejected_pending: dict[str, str] = {}  # those of the listing being read (its pages so far)
        self._rejected_next: dict[str, str] = {}  # those of the listing read, until it is published
        self._tool_list_ids: set[Any] = set()  # ids of tools/list requests sent and not yet answered
        #: seconds between two log lines about malformed messages (the first is logged, later ones summed up)
        self.malformed_log_interval = 10.0
        self._malformed_logged_at: float | None = None
        self._malformed_unlogged = 0  # malformed messages since the last line about them
        self._malformed_latest = ""
        self.protocol_version: str | None = None
        self._session: Any = None
        self._changed = anyio.Event()
        self._relist = anyio.Event()
        self._urgent = anyio.Event()  # a call waits for a re-list (:meth:`current`): no gap before it
        #: ``notifications/tools/list_changed`` received (and :meth:`request_relist` calls), ever
        self._notified = 0
        #: the value of ``_notified`` when the published listing was asked for: a change notified after it
        #: may not be in :attr:`tools` yet
        self._listed = 0
        #: seconds between the start of a listing and that of a re-list on a notification; doubled for each
        #: re-list asked for within the gap (a storm of notifications), up to ``relist_max_interval_s``; a call
        #: of one of its tools waiting on a notification (:meth:`current`) is not held by it
        self.relist_interval_s = 0.5
        self.relist_max_interval_s = 30.0
        self._stop = anyio.Event()
        self._disconnect: anyio.Event | None = None
        self._http_error: str | None = None  # the last HTTP error status of an HTTP upstream (the SDK drops it)
        self._http_redirect: str | None = None  # the last HTTP redirect status of an HTTP upstream (the SDK drops it)
        self._too_long: str | None = None  # why this connection's HTTP answer was cut (_bounded_transport), or None
        #: the HTTP status (404, or a 400 naming the session) by which an HTTP upstream refused the connection's
        #: session id (it ended the session), or 0
        self._session_lost = 0
        self._exited: _Exited | None = None  # this connection's stdio process and stderr tail (_stdio_transport)
        #: why this connection was ended for a write the upstream did not read (:meth:`_write_blocked`), or None
        self._blocked: str | None = None
        #: the session of the latest connection and its stdio process (for :meth:`_failed`), or None
        self._session_exited: tuple[Any, _Exited | None] | None = None
        #: the shutdown grace given by :meth:`begin_shutdown` (the gateway is stopping), or None
        self._shutdown_grace: float | None = None
        self._writes: set[_CallWrite] = set()  # the calls being sent or answered now
        self._relisting: anyio.CancelScope | None = None  # the re-list being made now (on a notification)

    # ------------------------------------------------------------------ observing

    def _set_state(self, state: str, error: str | None = None) -> None:
        self.state = state
        if error is not None:
            self.last_error = error
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[["Upstream"], bool]) -> None:
        """Wait (no polling) until ``predicate(self)`` holds; wrap in ``anyio.fail_after``."""
        while not predicate(self):
            await self._changed.wait()

    # ------------------------------------------------------------------ supervision

    async def run(self) -> None:
        """Connect, serve, and reconnect with backoff until :meth:`stop`."""
        delay = self.restart_initial_s
        while not self._stop.is_set():
            started = anyio.current_time()
            self._exited = None
            self._blocked = None
            try:
                await self._connect_once()
                error = "connection closed" + await self._exit_note()
            except Exception as exc:  # noqa: BLE001 - any failure of a connection attempt is "down", never fatal
                # the SDK's "MCPError: Connection closed" of a process that exited during initialize: said with
                # its exit status and last stderr line (a call's recorded UPSTREAM_DOWN error quotes last_error)
                error = (self._start_failure(exc) or _describe(exc) + self._http_note()) + await self._exit_note()
                if self._blocked is None:
                    log.warning("upstream %s failed: %s", self.spec.id, error)
            if self._blocked is not None and not self._stop.is_set():  # a write it did not read (_BoundedWrites)
                error = self._blocked
                self._exited = None
                log.warning("upstream %s failed: %s", self.spec.id, error)
            self._session = None
            if self._stop.is_set():
                break
            self._set_state("down", error)
            if anyio.current_time() - started > self.restart_max_s:
                delay = self.restart_initial_s  # it was up for a while: start the backoff again
            with anyio.move_on_after(delay):
                await self._stop.wait()
            delay = min(delay * 2, self.restart_max_s)
        self._set_state("closed")

    def stop(self) -> None:
        """Ask :meth:`run` to end (the connection is closed)."""
        self._stop.set()
        if self._disconnect is not None:
            self._disconnect.set()

    def begin_shutdown(self, grace: float = SHUTDOWN_GRACE_S, since: float | None = None) -> None:
        """The gateway is stopping: a call whose request is not yet written to the upstream (queued behind a
        write the upstream does not read) ends at once, :class:`GatewayStopping`, as does every call made from
        now on; one written is waited for ``grace`` s more at most (within its own call timeout), then ends
        :class:`CutAtShutdown`. ``since``: when the stop began (``anyio.current_time()``; default now), the grace
        counted from then."""
        self._shutdown_grace = grace
        deadline = (anyio.current_time() if since is None else since) + grace
        for write in list(self._writes):
            write.stop(deadline)
        self._changed.set()  # a call waiting in current() goes on (and is not forwarded)
        self._changed = anyio.Event()

    def _not_forwarded_stopping(self) -> GatewayStopping:
        return GatewayStopping(f"not forwarded: the gateway is stopping (the call was never written to upstream "
                               f"{self.spec.id}); call again once it is back")

    def request_relist(self) -> None:
        """List the upstream's tools again (as on ``notifications/tools/list_changed``)."""
        self._notified += 1
        self._relist.set()

    async def current(self) -> None:
        """Return once :attr:`tools` reflects every ``notifications/tools/list_changed`` received so far
        (at once when none is outstanding: one comparison), or the upstream is no longer ready (down,
        reconnected). A call is decided after this, never against a listing older than a change the
        upstream announced before it; the re-list it waits for is made at once (not after the gap that
        coalesces a storm of notifications). The wait is bounded by ``limits.call_timeout_s`` (or
        ``limits.startup_timeout_s``, the re-list's own bound, when smaller): a re-list not answered by then
        ends the connection (the upstream down with that reason, restarted with backoff), and the call, not
        forwarded, fails :class:`UpstreamUnavailable` saying so (:meth:`_check_open`)."""
        target = self._notified
        if self._listed >= target or self.state != "ready":
            return
        generation = self.generation
        self._urgent.set()
        bound = min(self.limits.call_timeout_s, self.limits.startup_timeout_s)
        with anyio.move_on_after(bound) as waiting:
            await self.wait_until(lambda u: u._listed >= target or u.state != "ready" or u.generation != generation
                                  or u._blocked is not None or u._shutdown_grace is not None)
        if waiting.cancelled_caught and self.generation == generation and self.state == "ready":
            if self._blocked is None and not self._stop.is_set():
                self._blocked = (f"upstream {self.spec.id} did not answer the tools/list it was sent after its "
                                 f"notifications/tools/list_changed within {bound:g} s (a call waited for it); "
                                 "restarting it")
            if self._disconnect is not None:
                self._disconnect.set()
            if self._relisting is not None:
                self._relisting.cancel()
            self._changed.set()  # the other calls waiting for it go on too
            self._changed = anyio.Event()

    @staticmethod
    async def _first_of(*events: anyio.Event) -> None:
        """Wait until one of ``events`` is set."""
        async with anyio.create_task_group() as waiters:
            async def until(ev: anyio.Event) -> None:
                await ev.wait()
                waiters.cancel_scope.cancel()
            for ev in events:
                waiters.start_soon(until, ev)

    async def _connect_once(self) -> None:
        from mcp.client.session import ClientSession

        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            stack.push_async_exit(self._note_exit)  # before the transport's teardown stops the process
            relay_send, relay_recv = anyio.create_memory_object_stream[Any](16)
            self._tool_list_ids = set()  # request ids are per session: none of an earlier one's is waited for
            eof = self._disconnect = anyio.Event()
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            tg.start_soon(self._relay, read, relay_send, eof)
            session = await stack.enter_async_context(ClientSession(
                relay_recv, _BoundedWrites(write, self), elicitation_callback=self._elicit, sampling_callback=self._sample,
                list_roots_callback=self._roots, message_handler=self._on_message,
                client_info=types.Implementation(name="sealbox-gateway", version=_version())))
            try:
                with anyio.fail_after(self.limits.startup_timeout_s):
                    init = await session.initialize()
                    self.protocol_version = init.protocol_version
                    self.capabilities = init.capabilities
                    seq = self._notified
                    tools = await self._list(session)
                    catalog = await self._list_catalog(session)
            except TimeoutError:  # anyio's has no message: the log line and calls' errors said "TimeoutError: "
                raise TimeoutError(f"no answer to initialize and tools/list within {self.limits.startup_timeout_s:g} s "
                                   "(limits.startup_timeout_s)") from None
            self._session = session
            self._session_exited = (session, self._exited)
            self.generation += 1
            await self._publish(tools, seq)
            await self._publish_catalog(catalog)
            self._set_state("ready")
            listed_at, streak, asked_while_listing = anyio.current_time(), 0, self._relist.is_set()
            while not eof.is_set():
                await self._first_of(eof, self._relist)
                if self._relist.is_set() and not eof.is_set():
                    # notifications are coalesced: one re-list per gap however many arrive (an upstream that
                    # announces a change on every listing wrote a tools.changed event per listing, without end),
                    # the gap doubling while they keep coming; a call waiting on one (current()) ends the gap
                    gap = min(self.relist_interval_s * 2 ** streak, self.relist_max_interval_s)
                    if (wait := listed_at + gap - anyio.current_time()) > 0:
                        with anyio.move_on_after(wait):
                            await self._first_of(eof, self._urgent)
                        streak = min(streak + 1, 32)
                    elif asked_while_listing:  # the storm goes on: a listing (or its recording) outlasting the gap
                        streak = min(streak + 1, 32)  # did not end it (the gap never grew: one re-list after another)
                    else:
                        streak = 0
                    if eof.is_set():
                        break
                    self._relist, self._urgent = anyio.Event(), anyio.Event()
                    seq, listed_at = self._notified, anyio.current_time()
                    with anyio.CancelScope() as self._relisting:  # cancelled by a call given up waiting (current)
                        try:
                            with anyio.fail_after(self.limits.startup_timeout_s):
                                tools = await self._list(session)
                                catalog = await self._list_catalog(session)
                        except TimeoutError:
                            raise TimeoutError(f"no answer to tools/list within {self.limits.startup_timeout_s:g} s "
                                               "(limits.startup_timeout_s)") from None
                        finally:
                            self._relisting = None
                    if eof.is_set():
                        break
                    await self._publish(tools, seq)
                    await self._publish_catalog(catalog)
                    asked_while_listing = self._relist.is_set()

    def _transport(self) -> Any:
        if self.spec.kind == "stdio":
            return self._stdio_transport()
        return self._http_transport()

    @asynccontextmanager
    async def _stdio_transport(self) -> AsyncIterator[Any]:
        """The SDK's stdio client, the process's stderr passed on to :attr:`errlog` through a pipe whose
        last line is kept, and the process kept, for :meth:`_exit_note` (the SDK's "Connection closed"
        said neither how the process ended nor what it wrote last)."""
        import os
        import threading

        from mcp.client.stdio import StdioServerParameters, stdio_client

        _install_line_reader()
        _install_spawn_hook()
        params = StdioServerParameters(command=self.spec.command or "", args=list(self.spec.args),
                                       env=self.spec.resolved_env() or None, cwd=self.spec.cwd)
        exited = self._exited = _Exited()
        read_fd, write_fd = os.pipe()
        try:
            out_fd = self.errlog.fileno()
        except (AttributeError, OSError, ValueError):
            out_fd = None
        reader = threading.Thread(target=exited.pump, args=(read_fd, out_fd, self.errlog), daemon=True,
                                  name=f"sealbox-upstream-{self.spec.id}-stderr")
        reader.start()
        exited.reader = reader
        token = _SPAWNED.set(exited.processes)
        try:
            with open(write_fd, "wb", closefd=True) as child_stderr:
                async with stdio_client(params, errlog=child_stderr) as streams:  # type: ignore[arg-type]
                    child_stderr.close()  # the child holds its own copy: EOF when it (and its children) end
                    _SPAWNED.reset(token)
                    token = None
                    yield streams
        finally:
            if token is not None:
                _SPAWNED.reset(token)

    async def _note_exit(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """When a stdio connection ends (its stdout closed, or the session failed) other than by :meth:`stop`
        or a timeout: wait up to 0.5 s for the process to exit on its own, and keep its exit status."""
        exited = self._exited
        if (exited is None or not exited.processes or self._stop.is_set() or isinstance(exc, TimeoutError)
                or (exc is not None and not isinstance(exc, Exception))):  # cancelled: no waiting
            return False
        process = exited.processes[-1]
        with anyio.move_on_after(0.5):
            while process.returncode is None:
                await anyio.sleep(0.01)
        exited.code = process.returncode
        return False

    def _start_failure(self, exc: BaseException) -> str | None:
        """What to say of a stdio upstream whose process could not be started (``exc``: the ``OSError`` of the spawn,
        perhaps in a group; no process was made): its command not found, not executable, or its cwd missing, and
        the config field to check, in words (Python's ``FileNotFoundError: [Errno 2] ...`` before). None for
        another failure."""
        if not self.spec.command or self._exited is None or self._exited.processes:
            return None
        leaves = list(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else [exc]
        while len(leaves) == 1 and isinstance(leaves[0], BaseExceptionGroup):
            leaves = list(leaves[0].exceptions)
        if len(leaves) != 1 or not isinstance(leaves[0], OSError):
            return None
        error, command, cwd = leaves[0], self.spec.command, self.spec.cwd
        source = self.config_source or "the gateway config"
        check = "sealbox gateway check" + (f" -c {self.config_source}" if self.config_source else "") + " checks it"
        field, hint = "command", check
        if isinstance(error, FileNotFoundError) and cwd is not None and error.filename == cwd:
            field, what = "cwd", f"its cwd {cwd} does not exist"
        elif isinstance(error, FileNotFoundError) and "/" not in command:
            what, hint = "no such program in PATH", f"is the program installed? {check}"
        elif isinstance(error, FileNotFoundError):
            what = "no such file"
        elif isinstance(error, PermissionError):
            what = "permission denied (is it an executable file?)"
        else:  # not the config's doing (e.g. too many open files): no field to check
            return f"cannot start its command {command!r}: {error.strerror or _one_line(str(error))}"
        return f"cannot start its command {command!r}: {what}; check upstream {self.spec.id}'s {field} in {source} ({hint})"

    async def _exit_note(self) -> str:
        """`` (the process exited with status N; its last stderr line: ...)`` for a stdio upstream whose process
        exited on its own as its connection ended ('' for an HTTP upstream, or one stopped or timed out)."""
        exited, self._exited = self._exited, None
        if exited is None or exited.code is None or self._stop.is_set():
            return ""
        code = exited.code
        if exited.reader is not None:  # the pipe's last bytes: at EOF at once, unless a child of it holds stderr
            await anyio.to_thread.run_sync(exited.reader.join, 0.5)
        how = f"was ended by signal {-code}" if code < 0 else f"exited with status {code}"
        line = exited.last_line()
        return f" (the process {how}" + (f"; its last stderr line: {line}" if line else "") + ")"

    @asynccontextmanager
    async def _http_transport(self) -> AsyncIterator[Any]:
        import httpx2

        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

        self._http_error = None
        self._too_long = None
        self._session_lost = 0

        async def note(response: Any) -> None:
            if 300 <= response.status_code < 400:  # the SDK's "Redirect to … not followed" says no status
                self._http_redirect = f"HTTP {response.status_code} {response.reason_phrase}"
            if response.status_code >= 400:
                self._http_error = f"HTTP {response.status_code} {response.reason_phrase} on {response.request.method}"
            if response.request.method == "POST" and response.request.headers.get("mcp-session-id") and (
                    response.status_code == 404 or (response.status_code == 400 and await _names_session(response))):
                # a 400 whose JSON-RPC error names the session: the TypeScript SDK's example server (and the many
                # written after it) answers a session id it does not know so ("Bad Request: No valid session ID
                # provided"), where MCP says 404
                # MCP: the server ended the session (e.g. it restarted); the client must start a new one. Its calls'
                # errors (-32600 "Session not found"…) are no refusal of theirs: the connection is ended, and remade.
                # A POST only: a 404 to the standalone GET stream may say the server has none (a framework's answer
                # to a method it has no route for), and an ended session is found at the next POST
                self._session_lost = response.status_code
                if self._disconnect is not None:
                    self._disconnect.set()

        # Calls are bounded by the session (limits.call_timeout_s), initialize + tools/list by startup_timeout_s.
        # The HTTP read timeout is the SDK's (long) one, never the call timeout: the upstream's standalone GET
        # stream (its notifications, e.g. tools/list_changed) is idle between events, and the SDK gives it up
        # for good after two read timeouts in a row.
        read = max(MCP_DEFAULT_SSE_READ_TIMEOUT, self.limits.call_timeout_s + MCP_DEFAULT_TIMEOUT)
        timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=read)
        client = httpx2.AsyncClient(headers=self.spec.resolved_headers(), timeout=timeout,
                                    event_hooks={"response": [note]},
                                    transport=_bounded_transport(lambda why: setattr(self, "_too_long", why)))
        # the SDK refuses an event above 1 MiB by default: every larger result of an upstream answering in an event
        # stream failed, where a stdio upstream's is read up to MAX_LINE_BYTES
        async with client, streamable_http_client(self.spec.url or "", http_client=client,
                                                  max_sse_event_size=MAX_LINE_BYTES) as streams:
            yield streams

    def _http_note(self) -> str:
        return f" ({self._http_error})" if self._http_error else ""

    async def _relay(self, read: Any, send: Any, eof: anyio.Event) -> None:
        """Copy the transport's messages to the session; note malformed ones; set ``eof`` when it ends."""
        try:
            async with send:
                async for item in read:
                    if self._tool_list_ids and type(message := getattr(item, "message", None)) is types.JSONRPCResponse \
                            and message.id in self._tool_list_ids:
                        self._tool_list_ids.discard(message.id)
                        self._leave_out_malformed_tools(message.result)
                    if isinstance(item, Exception):
                        self.malformed += 1
                        what = _answer_problem(item) or _malformed(item)
                        self._log_malformed(what)
                        answered = _answered_id(item)
                        if answered is not None:
                            from mcp.shared.message import SessionMessage

                            # an answer the SDK cannot read, to a request whose id can be read: that request
                            # fails now, as malformed, instead of waiting for the call timeout
                            item = SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=answered, error=types.ErrorData(
                                code=types.PARSE_ERROR, message=_UNREADABLE_ANSWER + what)))
                    await send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            eof.set()
            self._log_malformed(None)

    def _leave_out_malformed_tools(self, result: Any) -> None:
        """Take the malformed tools out of a tools/list page (``result``, raw JSON, edited in place) before the SDK
        reads it: the SDK refuses a whole listing for one bad tool, which marked the upstream down, listed none of
        its tools, and restarted it again and again. Each one left out is noted in :attr:`rejected_tools` (logged
        and recorded when the listing is published). A page malformed otherwise is left to the SDK to refuse."""
        tools = result.get("tools") if type(result) is dict else None
        if type(tools) is not list:
            return
        from mcp_types import methods

        version = self.protocol_version or "2025-11-25"
        kept = []
        for tool in tools:
            try:
                methods.validate_server_result("tools/list", version, {"tools": [tool]})
                types.ListToolsResult.model_validate({"tools": [tool]}, by_name=False)
            except ValidationError as exc:
                name = tool.get("name") if type(tool) is dict else None
                self._rejected_pending[name if type(name) is str else _one_line(repr(tool))[:100]] = _tool_problem(exc)
                continue
            except (KeyError, ValueError):  # a protocol version the SDK has no table for: the SDK judges it
                pass
            kept.append(tool)
        if len(kept) != len(tools):
            result["tools"] = kept

    def _log_malformed(self, what: str | None) -> None:
        """Log a malformed message ``what`` (None: the output ended): the first one, then at most one line
        every :attr:`malformed_log_interval` seconds counting those since (an upstream printing garbage
        made a line per line), and the ones left uncounted when its output ends."""
        now = time.monotonic()
        if what is not None:
            self._malformed_latest = what
            if self._malformed_logged_at is None:
                self._malformed_logged_at = now
                log.warning("upstream %s sent a malformed message: %s", self.spec.id, what)
                return
            self._malformed_unlogged += 1
            if now - self._malformed_logged_at < self.malformed_log_interval:
                return
        if self._malformed_unlogged:
            n = self._malformed_unlogged
            log.warning("upstream %s sent %d more malformed message%s (logged at most once every %g s); the latest: %s",
                        self.spec.id, n, "" if n == 1 else "s", self.malformed_log_interval, self._malformed_latest)
            self._malformed_unlogged = 0
            self._malformed_logged_at = now

    async def _list(self, session: Any) -> list[types.Tool]:
        self._rejected_pending = {}
        tools = await self._pages(session.list_tools, "tools", "tools/list")
        rejected, self._rejected_pending = self._rejected_pending, {}
        if rejected != self.rejected_tools:
            for name, why in sorted(rejected.items()):
                if self.rejected_tools.get(name) != why:
                    log.warning("upstream %s listed a malformed tool, left out (not served): %s: %s (a problem of "
                                "the upstream: fix its definition)", self.spec.id, _one_line(repr(name))[:100], why)
        self._rejected_next = rejected
        return tools

    async def _list_catalog(self, session: Any) -> dict[str, Any]:
        """The upstream's prompts (by name), resources (by URI) and resource templates, each when it has
        the capability. A listing that fails is logged and left empty: its tools are served all the same."""
        caps = self.capabilities
        catalog: dict[str, Any] = {"prompts": {}, "resources": {}, "templates": []}
        listings = []
        if caps is not None and caps.prompts is not None:
            listings.append(("prompts", session.list_prompts, "prompts", lambda items: {p.name: p for p in items}))
        if caps is not None and caps.resources is not None:
            listings.append(("resources", session.list_resources, "resources",
                             lambda items: {str(r.uri): r for r in items}))
            listings.append(("templates", session.list_resource_templates, "resource_templates", list))
        for key, lister, field, shape in listings:
            try:
                catalog[key] = shape(await self._pages(lister, field, _LIST_METHODS[key]))
            except Exception as exc:  # noqa: BLE001 - a catalog that cannot be listed is empty, never fatal
                if isinstance(exc, TimeoutError):
                    raise
                # resources/templates/list is optional (a server with resources may not serve it)
                (log.info if key == "templates" else log.warning)(
                    "upstream %s: listing its %s failed: %s", self.spec.id, key, _describe(exc))
        return catalog

    async def _pages(self, lister: Any, field: str, method: str) -> list[Any]:
        """Every page of a listing. A cursor named twice (a listing that would never end) or more than
        :data:`MAX_LIST_PAGES` pages is a malformed listing (:class:`UpstreamProtocolError`): for tools/list,
        the upstream is down with that reason (before, the listing was cut at 1,000 pages, silently)."""
        out: list[Any] = []
        cursor = None
        seen: dict[str, int] = {}
        for n in range(1, MAX_LIST_PAGES + 1):
            page = await lister(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            out.extend(getattr(page, field))
            cursor = page.next_cursor
            if not cursor:
                return out
            if cursor in seen:
                raise UpstreamProtocolError(f"upstream {self.spec.id} sent an invalid {method}: page {n} named "
                                            f"the cursor {_one_line(repr(cursor))[:200]} of page {seen[cursor]} again "
                                            "(a listing that would never end)", None)
            seen[cursor] = n
        raise UpstreamProtocolError(f"upstream {self.spec.id} sent an invalid {method}: more than {MAX_LIST_PAGES} "
                                    "pages", None)

    async def _publish_catalog(self, catalog: dict[str, Any]) -> None:
        self.prompts = catalog["prompts"]
        self.resources = catalog["resources"]
        self.templates = catalog["templates"]
        if self.on_catalog is not None:
            await self.on_catalog(self)

    async def _publish(self, tools: list[types.Tool], seq: int) -> None:
        """Publish a listing asked for when ``seq`` notifications had been received (recorded by ``on_tools``
        before :meth:`current` lets a call waiting on them go on)."""
        self.tools = {t.name: t for t in tools}
        self.rejected_tools = self._rejected_next
        if len(self.tools) != len(tools):  # a name listed twice: the last one is used, as before; said once
            counts = Counter(t.name for t in tools)
            twice = sorted(name for name, n in counts.items() if n > 1)
            if set(twice) - self._warned_twice:
                self._warned_twice.update(twice)
                log.warning("upstream %s listed more than once the tool(s) %s; the last one listed is used (a problem "
                            "of the upstream: fix its tool names)", self.spec.id,
                            ", ".join(_one_line(repr(n))[:100] for n in twice[:10]) + (" …" if len(twice) > 10 else ""))
        if self.on_tools is not None:
            await self.on_tools(self, tools)
        self._listed = max(self._listed, seq)
        self._changed.set()
        self._changed = anyio.Event()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            return  # already counted by the relay
        method = getattr(message, "method", None)
        if method in _LIST_CHANGED:
            if method == "notifications/tools/list_changed":
                self._notified += 1
            self._relist.set()

    # ------------------------------------------------------------------ upstream -> client requests

    async def _forward(self, method: str, params: Any) -> Any:
        if self.router is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"{method} is not available through this gateway")
        return await self.router(self, method, params)

    async def _elicit(self, context: Any, params: Any) -> Any:
        return await self._forward("elicitation/create", params)

    async def _sample(self, context: Any, params: Any) -> Any:
        return await self._forward("sampling/createMessage", params)

    async def _roots(self, context: Any) -> Any:
        return await self._forward("roots/list", None)

    # ------------------------------------------------------------------ calls

    async def call(self, tool: str, arguments: dict[str, Any] | None, *,
                   progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
                   meta: dict[str, Any] | None = None) -> types.CallToolResult:
        """Call one tool.

        Raises:
            UpstreamUnavailable: not connected, or the connection closed.
            UpstreamTimeout: no answer within ``limits.call_timeout_s``.
            UpstreamProtocolError: a malformed answer, or a JSON-RPC error.
        """
        session = self._session
        if session is None or self.state != "ready":
            raise UpstreamUnavailable(f"upstream {self.spec.id} is {self.state}"
                                      + (f" ({self.last_error})" if self.last_error else ""))
        self._check_open()
        if self._shutdown_grace is not None:
            raise self._not_forwarded_stopping()
        write = _CallWrite(self.limits.call_timeout_s)
        token = _WRITE_BOUND.set(write)
        try:
            with anyio.CancelScope() as write.scope:
                self._writes.add(write)
                try:
                    result = await session.call_tool(tool, arguments, read_timeout_seconds=self.limits.call_timeout_s,
                                                     progress_callback=progress, meta=meta)
                finally:
                    self._writes.discard(write)
            if write.scope.cancelled_caught:  # begin_shutdown(): never written, or unanswered after the grace
                if not write.sent:
                    raise self._not_forwarded_stopping()
                raise CutAtShutdown(f"upstream {self.spec.id} had not answered when the gateway stopped (shutdown "
                                    f"grace {self._shutdown_grace:g} s); the call was sent, so it may have been "
                                    "carried out: check before calling again")
        except _WriteBlocked as exc:
            raise self._unread("call") from exc
        except _mcp_error() as exc:  # looked up only when the call raised
            raise await self._failed(session, exc, "call") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise UpstreamUnavailable(f"upstream {self.spec.id} connection is closed") from exc
        except (ValidationError, RuntimeError) as exc:
            raise UpstreamProtocolError(f"upstream {self.spec.id} sent an invalid result: {_one_line(str(exc))}") from exc
        finally:
            _WRITE_BOUND.reset(token)
        if not isinstance(result, types.CallToolResult):
            raise UpstreamProtocolError(f"upstream {self.spec.id} sent a {type(result).__name__}, not a CallToolResult")
        return result

    async def request(self, method: str, params: Any, result_type: Any) -> Any:
        """Send one request other than ``tools/call`` (``prompts/get``: ``types.GetPromptRequestParams``…)
        and return its validated result, within ``limits.call_timeout_s``.

        Raises:
            UpstreamUnavailable, UpstreamTimeout, UpstreamProtocolError: as :meth:`call`.
        """
        session = self._session
        if session is None or self.state != "ready":
            raise UpstreamUnavailable(f"upstream {self.spec.id} is {self.state}"
                                      + (f" ({self.last_error})" if self.last_error else ""))
        self._check_open()
        if self._shutdown_grace is not None:
            raise self._not_forwarded_stopping()
        request = _REQUESTS[method](params=params)
        write = _CallWrite(self.limits.call_timeout_s)
        token = _WRITE_BOUND.set(write)
        try:
            # stopped as a tools/call is (begin_shutdown): at once when not written yet, else after the grace
            with anyio.CancelScope() as write.scope:
                self._writes.add(write)
                try:
                    result = await session.send_request(request, result_type,
                                                        request_read_timeout_seconds=self.limits.call_timeout_s)
                finally:
                    self._writes.discard(write)
            if write.scope.cancelled_caught:
                if not write.sent:
                    raise self._not_forwarded_stopping()
                raise CutAtShutdown(f"upstream {self.spec.id} had not answered when the gateway stopped (shutdown "
                                    f"grace {self._shutdown_grace:g} s); the call was sent, so it may have been "
                                    "carried out: check before calling again")
            return result
        except _WriteBlocked as exc:
            raise self._unread(method) from exc
        except _mcp_error() as exc:
            raise await self._failed(session, exc, method) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise UpstreamUnavailable(f"upstream {self.spec.id} connection is closed") from exc
        except (ValidationError, RuntimeError) as exc:
            raise UpstreamProtocolError(f"upstream {self.spec.id} sent an invalid result: {_one_line(str(exc))}") from exc
        finally:
            _WRITE_BOUND.reset(token)

    def _write_blocked(self, item: Any) -> None:
        """A write outside a call (an answer to the upstream's request, a notification, a listing request) did
        not complete within ``limits.call_timeout_s``: the upstream does not read its input. Its connection is
        ended (the upstream down with that reason, restarted with backoff; its calls meanwhile unavailable)."""
        message = getattr(item, "message", None)
        method = getattr(message, "method", None)
        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            what = "the answer to its request"  # ping, sampling/createMessage, elicitation/create, roots/list
        elif isinstance(message, types.JSONRPCRequest):
            what = f"a {method} request"
        else:
            what = f"a {method} notification"
        self._end_unread(what)

    def _end_unread(self, what: str) -> None:
        """End the connection of an upstream that did not read ``what`` (a write not made within
        ``limits.call_timeout_s``): :meth:`run` says so as its ``last_error`` and restarts it with backoff."""
        if self._blocked is None and not self._stop.is_set():
            self._blocked = (f"upstream {self.spec.id} did not read its input within {self.limits.call_timeout_s:g} s "
                             f"(the gateway could not write {what} to it); restarting it")
        if self._disconnect is not None:
            self._disconnect.set()

    def _check_open(self) -> None:
        """Raise :class:`UpstreamUnavailable` when a stdio upstream's output has ended (its connection is being
        torn down: the process waited for, terminated, killed — seconds for one that lives on): a call made
        then is not sent, nor recorded as cut "during the call". An HTTP upstream's session lost is said by
        :meth:`_translated`."""
        if self._disconnect is None or not self._disconnect.is_set() or self._stop.is_set():
            return
        if self._blocked is not None:  # the gateway ended it (a write not read, a re-list not answered): why
            raise UpstreamUnavailable(f"upstream {self.spec.id} is down ({self._blocked})")
        if self.spec.kind == "stdio":
            raise UpstreamUnavailable(f"upstream {self.spec.id} is down (its connection closed; it is being restarted)")

    def _unread(self, what: str) -> UpstreamTimeout:
        """The error of a request whose write did not complete within ``limits.call_timeout_s`` (the upstream
        does not read its input: a full pipe; :class:`_BoundedWrites`). Its connection is ended, as a crash's
        is (it stayed "ready" and deaf: every later call timed out the same way), and restarted with backoff."""
        self._end_unread("a tools/call request" if what == "call" else f"a {what} request")
        return UpstreamTimeout(f"upstream {self.spec.id} did not read the {what} within {self.limits.call_timeout_s:g} s "
                               "(it is not reading its input; it is being restarted); it may still reach the upstream: "
                               "check before calling again")

    async def _failed(self, session: Any, exc: Any, what: str) -> Exception:
        """:meth:`_translated`, and for a stdio connection closed during the request, how its process ended
        (`` (the process exited with status 1)``, `` (the process was ended by signal 9)``) when it ends within
        0.5 s (else the error as it was: the record is not held longer)."""
        error = self._translated(session, exc, what)
        known = self._session_exited
        if (not getattr(error, "_closed_during", False) or known is None or known[0] is not session
                or known[1] is None or not known[1].processes):
            return error
        process = known[1].processes[-1]
        with anyio.move_on_after(0.5):
            while process.returncode is None:
                await anyio.sleep(0.01)
        code = process.returncode
        if code is None:
            return error
        how = f"was ended by signal {-code}" if code < 0 else f"exited with status {code}"
        return UpstreamUnavailable(f"{error} (the process {how})")

    def _translated(self, session: Any, exc: Any, what: str) -> Exception:
        """The gateway's error for the SDK's ``MCPError`` of a request (see :meth:`call`); ``what`` names
        the request in "closed the connection during the <what>"."""
        code = exc.error.code if getattr(exc, "error", None) else None
        if self._session_lost and self.spec.kind == "http":
            return UpstreamUnavailable(f"upstream {self.spec.id} ended the gateway's HTTP session "
                                       f"(HTTP {self._session_lost}); reconnecting")
        if code == types.CONNECTION_CLOSED and self._connection_closed(session, exc):
            if self._too_long is not None:  # the gateway ended it: an answer above MAX_LINE_BYTES
                return UpstreamUnavailable(f"upstream {self.spec.id} connection was closed during the {what}: "
                                           f"{self._too_long}")
            closed = UpstreamUnavailable(f"upstream {self.spec.id} closed the connection during the {what}")
            closed._closed_during = True  # type: ignore[attr-defined]  # said with its exit status by _failed
            return closed
        if code == types.REQUEST_TIMEOUT:
            # the request went out: the model must not take "no answer" for "not done" and simply call again
            return UpstreamTimeout(f"upstream {self.spec.id} did not answer within {self.limits.call_timeout_s:g} s; "
                                   f"the {what} was sent, so it may have been carried out: check before calling again")
        message = str(getattr(getattr(exc, "error", None), "message", "") or "")
        if code == types.PARSE_ERROR and message.startswith(_UNREADABLE_ANSWER):  # counted and logged by _relay
            return UpstreamProtocolError(f"upstream {self.spec.id} sent a malformed response: "
                                         f"{message[len(_UNREADABLE_ANSWER):]}")
        if self.spec.kind == "http" and message.startswith(_SDK_HTTP_MALFORMED):
            # the SDK's own error for an HTTP answer it could not read (no JSON-RPC error was sent)
            self.malformed += 1
            one = _one_line(message)
            self._log_malformed(one)
            return UpstreamProtocolError(f"upstream {self.spec.id} sent a malformed response: {one}")
        if self.spec.kind == "http" and code == types.INTERNAL_ERROR and message == _SDK_HTTP_STATUS_STANDIN:
            # an HTTP error status whose body held no JSON-RPC error (an HTML error page): the SDK's stand-in
            # said neither that no JSON-RPC error was sent nor which status it was
            status = (self._http_error or "an HTTP error status").removesuffix(" on POST")
            return UpstreamProtocolError(f"upstream {self.spec.id} answered with {status} and no JSON-RPC error",
                                         None, sent=False)
        if self.spec.kind == "http" and code == types.INVALID_REQUEST and message in _SDK_HTTP_MADE_UP[:1]:
            # the SDK's −32600 for a 202 to a request: no JSON-RPC error was sent
            return UpstreamProtocolError(f"upstream {self.spec.id} answered the {what} with HTTP 202 Accepted and "
                                         "no JSON-RPC response", None, sent=False)
        if (self.spec.kind == "http" and code == types.INVALID_REQUEST and message.startswith(_SDK_HTTP_MADE_UP[1])
                and " not followed" in message):
            # the SDK's −32600 for a redirect it did not follow (another origin, or HTTPS to HTTP): said with the
            # status and the location (the SDK's, without its query or userinfo)
            location, _, rest = message[len(_SDK_HTTP_MADE_UP[1]):].partition(" not followed")
            why = ("it would downgrade this HTTPS endpoint to plain HTTP" if "downgrade" in rest.split("\n")[0]
                   else "the gateway follows a redirect only within the upstream's origin; set the upstream's url "
                        "to it if it is the intended server")
            status = self._http_redirect or "an HTTP redirect"
            return UpstreamProtocolError(f"upstream {self.spec.id} answered the {what} with {status} to {location} "
                                         f"(not followed: {why})", None, sent=False)
        # the SDK's HTTP transport answers some unusable HTTP answers itself with −32600 or −32601 (a 404 before
        # the session): the upstream's failure, no refusal
        made_up = self.spec.kind == "http" and (message.startswith(_SDK_HTTP_MADE_UP) or message == "Not Found")
        return UpstreamProtocolError(f"upstream {self.spec.id} answered with JSON-RPC error {code}: {exc}",
                                     code if isinstance(code, int) else None, sent=not made_up)

    def _connection_closed(self, session: Any, exc: BaseException) -> bool:
        """Whether a ``CONNECTION_CLOSED`` (−32000) error is the SDK's own "Connection closed".

        −32000 is also JSON-RPC's generic "server error", which a live upstream may answer with;
        the SDK raises both as the same ``MCPError``. Its own one comes with the connection gone:
        the session's dispatcher closed (it fans ``CONNECTION_CLOSED`` out to every waiting call when
        the transport ends, and raises it for a send after the end), the transport's read side
        ended (``eof``), or a write that failed on a closed stream (the ``__context__``). This reads
        a private attribute of the SDK's dispatcher (``_closed``); without it, only the other two count.
        """
        dispatcher = getattr(session, "_dispatcher", None)
        if getattr(dispatcher, "_closed", False):
            return True
        if self._disconnect is not None and self._disconnect.is_set():
            return True
        return isinstance(exc.__context__, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream))


class _CallWrite:
    """One call's request on its way to the upstream (:meth:`Upstream.call`): the bound (seconds) on writing it,
    whether it was handed to the transport's writer (``sent``: the upstream may run it), and the cancel scope
    :meth:`stop` ends it by at shutdown."""

    __slots__ = ("bound", "sent", "scope")

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.sent = False
        self.scope: anyio.CancelScope | None = None

    def stop(self, deadline: float) -> None:
        """The gateway is stopping: end the call at once when its request is not written yet, else by ``deadline``."""
        if self.scope is None:
            return
        if not self.sent:
            self.scope.cancel()
        elif deadline < self.scope.deadline:
            self.scope.deadline = deadline


#: The write of a call or request (:meth:`Upstream.call`) in the task sending it: its bound, whether it was sent.
_WRITE_BOUND: contextvars.ContextVar[_CallWrite | None] = contextvars.ContextVar("sealbox_upstream_write_bound",
                                                                                 default=None)


class _WriteBlocked(TimeoutError):
    """A request could not be written to the upstream within :data:`_WRITE_BOUND` (its input is not read)."""


class _BoundedWrites:
    """The session's write stream to the transport, each write of a call (:data:`_WRITE_BOUND` set) bounded.

    The SDK's request timeout starts once the request is written; a stdio upstream that no longer reads its
    stdin fills the pipe, and the transport's writer (one message at a time) blocks on it for good. Then
    every later call waited for ever to be written: never answered, never recorded. A request not written
    within the bound raises :class:`_WriteBlocked`; another message (the SDK's ``notifications/cancelled`` after
    a timed-out call) is dropped after at most 1 s, as the SDK drops it after 5. A write outside a call (an
    answer to the upstream's request, a notification, initialize, a tools/list) is bounded by
    ``limits.call_timeout_s`` too (1 s once the upstream is being stopped): one not made in time ends the
    connection (:meth:`Upstream._write_blocked`: the upstream down, restarted) and raises
    ``anyio.BrokenResourceError``, which the SDK takes for a closed connection (an answer dropped)."""

    def __init__(self, inner: Any, upstream: "Upstream") -> None:
        self._inner = inner
        self._upstream = upstream

    async def send(self, item: Any) -> None:
        write = _WRITE_BOUND.get()
        if write is None:
            return await self._send_outside_call(item)
        request = isinstance(getattr(item, "message", None), types.JSONRPCRequest)
        nowait = getattr(self._inner, "send_nowait", None)
        if nowait is not None:  # the transport's writer is waiting (the usual case): no timer needed
            try:
                nowait(item)
            except anyio.WouldBlock:
                pass
            else:
                if request:
                    write.sent = True
                return
        bound = write.bound
        with anyio.move_on_after(bound if request else min(bound, 1.0)) as scope:
            await self._inner.send(item)
        if scope.cancelled_caught:
            if request:
                raise _WriteBlocked()
        elif request:  # handed to the writer (a cancellation, at shutdown, comes only while it waits: not taken)
            write.sent = True

    async def _send_outside_call(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if type(message) is types.JSONRPCRequest and message.method == "tools/list":
            self._upstream._tool_list_ids.add(message.id)  # its answer's malformed tools are left out (_relay)
        nowait = getattr(self._inner, "send_nowait", None)
        if nowait is not None:
            try:
                return nowait(item)
            except anyio.WouldBlock:
                pass
        upstream = self._upstream
        bound = upstream.limits.call_timeout_s
        if upstream._stop.is_set():
            bound = min(bound, 1.0)
        with anyio.move_on_after(bound) as scope:
            await self._inner.send(item)
        if scope.cancelled_caught:
            upstream._write_blocked(item)
            raise anyio.BrokenResourceError(f"upstream {upstream.spec.id} did not read its input")

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> "_BoundedWrites":
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


#: The most pages of one listing (tools/list, prompts/list…) the gateway reads; more is a malformed listing.
MAX_LIST_PAGES = 1000

#: The listing method of each part of the catalog (:meth:`Upstream._list_catalog`).
_LIST_METHODS = {"prompts": "prompts/list", "resources": "resources/list", "templates": "resources/templates/list"}

#: The upstream's notifications that make it list its tools (and prompts, resources) again.
_LIST_CHANGED = frozenset({"notifications/tools/list_changed", "notifications/prompts/list_changed",
                           "notifications/resources/list_changed"})

#: The requests :meth:`Upstream.request` sends, by method.
_REQUESTS: dict[str, Any] = {
    "prompts/get": types.GetPromptRequest,
    "resources/read": types.ReadResourceRequest,
}


def _mcp_error() -> type[Exception]:
    """The SDK's ``MCPError`` (``mcp`` is imported on first use: importing it takes about half a second)."""
    from mcp.shared.exceptions import MCPError

    return MCPError


#: where the SDK's stdio client puts the process it spawns, for the task that spawns it (:func:`_install_spawn_hook`)
_SPAWNED: "contextvars.ContextVar[list[Any] | None]" = contextvars.ContextVar("sealbox_upstream_spawned", default=None)


class _Exited:
    """A stdio upstream's process (as the SDK spawned it) and the tail of its stderr."""

    #: the longest last stderr line kept (characters)
    MAX_LINE = 300

    def __init__(self) -> None:
        self.processes: list[Any] = []
        self.code: int | None = None  # its exit status, if it exited on its own (:meth:`Upstream._note_exit`)
        self.reader: Any = None
        self._tail = b""

    def pump(self, read_fd: int, out_fd: int | None, errlog: Any) -> None:
        """Pass the pipe's bytes on to ``out_fd`` (or ``errlog.write``) until EOF, keeping the last 4 KiB."""
        import os

        try:
            while chunk := os.read(read_fd, 65536):
                self._tail = (self._tail + chunk)[-4096:]
                try:
                    if out_fd is not None:
                        os.write(out_fd, chunk)
                    else:
                        errlog.write(chunk.decode("utf-8", "replace"))
                except (OSError, ValueError):
                    pass
        except OSError:
            pass
        finally:
            os.close(read_fd)

    def last_line(self) -> str:
        """The last non-empty stderr line, control characters replaced, at most :attr:`MAX_LINE` characters."""
        lines = [ln for ln in self._tail.decode("utf-8", "replace").splitlines() if ln.strip()]
        if not lines:
            return ""
        line = "".join(c if c.isprintable() else "?" for c in lines[-1].strip())
        return line if len(line) <= self.MAX_LINE else line[: self.MAX_LINE] + "…"


def _install_spawn_hook() -> None:
    """Wrap the SDK's process spawn once so the spawning task finds the process in :data:`_SPAWNED`
    (the SDK keeps it to itself; its exit status is what says why an upstream went away)."""
    import mcp.client.stdio as sdk_stdio

    spawn = getattr(sdk_stdio, "_create_platform_compatible_process", None)
    if spawn is None or getattr(spawn, "_sealbox_hook", False):
        return

    async def hooked(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        if (held := _SPAWNED.get()) is not None:
            held.append(process)
        return process

    hooked._sealbox_hook = True  # type: ignore[attr-defined]
    sdk_stdio._create_platform_compatible_process = hooked  # type: ignore[attr-defined]


def _install_line_reader() -> None:
    """Make the SDK's stdio client read an upstream's stdout a line at a time (:class:`_LineReceiveStream`).

    The SDK's reader appends each decoded chunk (≤ 64 KiB) to the unfinished line and splits the
    whole text again: quadratic in a line's length. A 30 MB result took about 10 s of CPU, so it
    timed out, and the next call's answer, queued behind it, timed out too. Installed once, and only
    while the SDK still reads through anyio's ``TextReceiveStream``."""
    import mcp.client.stdio as sdk_stdio
    from anyio.streams.text import TextReceiveStream

    if getattr(sdk_stdio, "TextReceiveStream", None) is TextReceiveStream:
        sdk_stdio.TextReceiveStream = _LineReceiveStream  # type: ignore[attr-defined, misc]


def _line_receive_stream() -> type:
    from anyio import EndOfStream
    from anyio.streams.text import TextReceiveStream

    class LineReceiveStream(TextReceiveStream):
        """anyio's ``TextReceiveStream``, each ``receive()`` returning whole lines (text up to and
        including the last newline received so far), or the rest at EOF: the chunks of a long
        line are joined once (linear).

        Lines are decoded one by one, strictly: a line that is not valid in the stream's
        encoding (MCP's stdio transport is UTF-8) is passed on as :data:`NOT_TEXT_LINE`, which
        no JSON parser accepts, so the session reports one malformed message and reads on. The
        SDK's own reader would raise ``UnicodeDecodeError`` there and stop reading the upstream
        for good while the process lived on (every later call timed out); decoding with
        ``errors="replace"`` instead could turn a bad byte inside a JSON string into U+FFFD and
        pass the altered message on as if the upstream had sent it."""

        def __post_init__(self, encoding: str, errors: str) -> None:
            super().__post_init__(encoding, errors)
            self._encoding = encoding
            self._pending = bytearray()
            #: the start of a line longer than MAX_LINE_BYTES whose rest is being skipped (None: none is)
            self._long: bytes | None = None
            #: the last bytes (at most _LONG_TAIL) of that line's skipped part, past its start
            self._tail = b""

        def _start_long(self, data: bytes) -> None:
            """Skip the rest of the line whose bytes so far are ``data``: keep its start and its last bytes."""
            self._long, self._pending = data[:_LONG_HEAD], bytearray()
            self._tail = data[_LONG_HEAD:][-_LONG_TAIL:]

        def _skipped(self, data: bytes) -> None:
            """More bytes of the line being skipped: only its last :data:`_LONG_TAIL` are kept."""
            if len(data) >= _LONG_TAIL:
                self._tail = data[-_LONG_TAIL:]
            elif data:
                self._tail = (self._tail + data)[-_LONG_TAIL:]

        def _too_long(self) -> str:
            """What is passed on for the line being skipped: its start and its end (so that an answer's id
            can still be read, first or last, and its call failed at once) around :data:`TOO_LONG_MARK`,
            which no JSON parser accepts (see :func:`_long_line_parts`)."""
            head, tail, self._long, self._tail = self._long or b"", self._tail, None, b""
            try:  # cut inside a character: that part dropped
                text = head.decode(self._encoding, errors="ignore")
                end = tail.decode(self._encoding, errors="ignore")
            except LookupError:
                text = end = ""
            return text + TOO_LONG_MARK + (_TAIL_MARK + end if end else "")

        def _decoded(self, data: bytes) -> str:
            try:
                return data.decode(self._encoding)
            except UnicodeDecodeError:
                lines = data.split(b"\n")
                out = []
                for line in lines:
                    try:
                        out.append(line.decode(self._encoding))
                    except UnicodeDecodeError:
                        out.append(NOT_TEXT_LINE)
                return "\n".join(out)

        async def receive(self) -> str:
            while True:
                try:
                    chunk = await self.transport_stream.receive()
                except EndOfStream:
                    if self._long is not None:
                        return self._too_long()
                    if self._pending:
                        rest, self._pending = bytes(self._pending), bytearray()
                        return self._decoded(rest)
                    raise
                cut = chunk.rfind(b"\n")
                if cut < 0:
                    if self._long is not None:
                        self._skipped(chunk)
                    elif len(self._pending) + len(chunk) > MAX_LINE_BYTES:
                        # an upstream writing without end (or a message above the limit): its line is not kept
                        # whole, or the gateway's memory would grow until the process is killed
                        self._start_long(bytes(self._pending + chunk))
                    else:
                        self._pending += chunk
                    continue
                first = chunk.find(b"\n")
                if self._long is not None:
                    self._skipped(chunk[:first])
                elif len(self._pending) + first > MAX_LINE_BYTES:
                    self._start_long(bytes(self._pending + chunk[:first]))
                if self._long is not None:  # the line being skipped ends here; the chunk's other lines are read
                    lines = self._too_long() + "\n" + self._decoded(chunk[first + 1:cut + 1])
                else:
                    lines = self._decoded(bytes(self._pending) + chunk[:cut + 1])
                self._pending = bytearray(chunk[cut + 1:])
                return lines

    return LineReceiveStream


#: the longest line (one JSON-RPC message) read from a stdio upstream, in bytes: a longer one is passed on as its
#: first bytes and :data:`TOO_LONG_MARK` (a malformed message; an answer's call fails at once), not kept whole
MAX_LINE_BYTES = 64 * 1024 * 1024
_LONG_HEAD = 1024  # the first bytes of such a line kept: enough for '{"jsonrpc":"2.0","id":…,"result":' (its id)
#: the last bytes of such a line kept: enough for ',"id":…}' (an upstream may write the id after the result)
_LONG_TAIL = 1024
TOO_LONG_MARK = "… [sealbox: the rest of this line from the upstream was dropped: longer than the limit]"
#: between :data:`TOO_LONG_MARK` and the kept end of such a line: a NUL, which JSON allows nowhere (not in a
#: string either), so that a start cut inside a string and an end closing it cannot make a valid message
_TAIL_MARK = "\x00"


def _long_line_parts(text: str) -> tuple[str, str] | None:
    """A line passed on for one longer than :data:`MAX_LINE_BYTES`: (its kept start, its kept end, "" if
    none was kept); None for any other line."""
    head, mark, rest = text.partition(TOO_LONG_MARK)
    if not mark:
        return None
    if not rest:
        return head, ""
    return (head, rest[len(_TAIL_MARK):]) if rest.startswith(_TAIL_MARK) else None


def _bounded_transport(on_limit: Callable[[str], None]) -> Any:
    """An httpx transport whose JSON responses are read no further than :data:`MAX_LINE_BYTES`: a longer
    answer (one message) ends with ``httpx.RemoteProtocolError`` (before, an HTTP upstream answering without
    end grew the gateway's memory, about 8 bytes per byte received, until the process was killed).
    Event streams are left to the SDK, which bounds each event (``max_sse_event_size``: the same limit).
    ``on_limit(why)`` is called first (the SDK reports the error only as a closed connection)."""
    import httpx2

    class BoundedStream(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            limit, received = MAX_LINE_BYTES, 0
            async for chunk in self.inner:
                received += len(chunk)
                if received > limit:
                    why = f"its answer was longer than {limit} bytes; the rest was not read"
                    on_limit(why)
                    raise httpx2.RemoteProtocolError(why)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class BoundedTransport(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
                response.stream = BoundedStream(response.stream)
            return response

    return BoundedTransport()


NOT_TEXT_LINE = "sealbox: this line from the upstream was not valid UTF-8 and was dropped"
"""What :class:`_LineReceiveStream` passes on for a line that is not valid text (not JSON: the
SDK reports it as a malformed message)."""


_LineReceiveStream = _line_receive_stream()


class _QuietSdkParseErrors(logging.Filter):
    """Drops the stdio client's own "Failed to parse JSONRPC message" record (logged with the whole
    pydantic traceback): the gateway reports the same malformed line once, on one line, itself
    (:meth:`Upstream._relay`). Every other record of that logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to parse JSONRPC message")


_SDK_STDIO_LOGGER = "mcp.client.stdio"
if not any(isinstance(f, _QuietSdkParseErrors) for f in logging.getLogger(_SDK_STDIO_LOGGER).filters):
    logging.getLogger(_SDK_STDIO_LOGGER).addFilter(_QuietSdkParseErrors())

async def _names_session(response: Any) -> bool:
    """Whether an HTTP error answer's body is a transport-level JSON-RPC error (−32000, −32001, −32600) whose
    message names the session ("Bad Request: No valid session ID provided", "Session not found"…); not a
    refusal of the request's params (−32602 "unknown session_id" of a tool). The body is read here (kept for
    the SDK)."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return False
    try:
        error = json.loads(await response.aread()).get("error")
    except Exception:  # noqa: BLE001 - not JSON, not an object, a broken stream: no such error
        return False
    return (isinstance(error, dict) and error.get("code") in (-32000, -32001, types.INVALID_REQUEST)
            and isinstance(error.get("message"), str) and "session" in error["message"].lower())


#: How the SDK's streamable HTTP client words the JSON-RPC error it makes up for an answer it could not
#: read (a body that is not JSON, an SSE event that is not a message, a content type that is neither).
#: How the SDK's HTTP transport's own errors for an answer it cannot use begin (−32600; not the upstream's words).
_SDK_HTTP_MADE_UP = ("server answered a request with 202 Accepted", "Redirect to ")
#: The SDK's stand-in (−32603) for an HTTP error status (other than 404) whose body is no JSON-RPC error.
_SDK_HTTP_STATUS_STANDIN = "Server returned an error response"
_SDK_HTTP_MALFORMED = ("Failed to parse JSON response: ", "Failed to parse SSE message: ", "Unexpected content type: ")


class _QuietSdkHttpParseErrors(logging.Filter):
    """Drops the streamable HTTP client's own records for an answer it could not read ("Error parsing JSON
    response" and "Error parsing SSE message", each with a pydantic traceback; "Unexpected content type"):
    the SDK also answers the request with a JSON-RPC error, which the gateway reports on one line
    (:meth:`Upstream.call`, or the upstream's failure to start); a malformed message on the standalone
    stream reaches :meth:`Upstream._relay`, which reports it. Every other record of that logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Error parsing JSON response", "Error parsing SSE message",
                                               "Unexpected content type"))


_SDK_HTTP_LOGGER = "mcp.client.streamable_http"
if not any(isinstance(f, _QuietSdkHttpParseErrors) for f in logging.getLogger(_SDK_HTTP_LOGGER).filters):
    logging.getLogger(_SDK_HTTP_LOGGER).addFilter(_QuietSdkHttpParseErrors())


#: The text of the error that stands for an answer the SDK could not read (:meth:`Upstream._relay`).
_UNREADABLE_ANSWER = "sealbox: the answer could not be read: "

_ANSWER_PREFIX = re.compile(r'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*,'
                            r'\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"(?:result|error)"\s*:')
#: the start of a response whose id is not written first: ``{"jsonrpc": "2.0", "result"|"error": …``
_ANSWER_START = re.compile(r'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"(?:result|error)"\s*:')
#: the end of a response whose id is written last (``…, "id": 7}``, or before a last ``"jsonrpc": "2.0"``): only
#: the outermost object's closing brace may follow, so an "id" nested in the result (followed by ``}}``) is not it
_ANSWER_END = re.compile(r',\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z')


def _answered_id(exc: BaseException) -> int | str | None:
    """The id of the response a line the SDK could not read answers, or None (not a response, or no id).

    Python's parser reads some lines the SDK's does not (a lone surrogate escape); a line neither reads
    (nesting too deep) counts only when it starts like a response, ``{"jsonrpc": "2.0", "id": …,
    "result"|"error": …``, or starts ``{"jsonrpc": "2.0", "result"|"error": …`` and ends with the id as
    the outermost object's last member (``…, "id": 7}``; an "id" nested in the result is followed by more
    than one closing brace): a request or notification of the upstream must not be taken for one (its id
    is in the upstream's numbering, not the gateway's). A line above :data:`MAX_LINE_BYTES` is read from
    its kept start and end (:class:`_LineReceiveStream`)."""
    import json

    errors = getattr(exc, "errors", None)
    if not isinstance(exc, ValidationError) or not callable(errors):
        return None
    first = (errors() or [{}])[0]
    line = first.get("input")
    if isinstance(line, dict) and len(first.get("loc", ())) <= 2:
        # JSON, but no valid JSON-RPC message (``"result": null``, a string ``error``): the first error is
        # about the whole message (e.g. its missing "method", as a request), so its input is the message
        return _response_id(line)
    if first.get("type") != "json_invalid" or not isinstance(line, str) or line == NOT_TEXT_LINE:
        return None
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        head, tail = _long_line_parts(line) or (line, "")
        match = _ANSWER_PREFIX.match(head)
        if match is None and _ANSWER_START.match(head):  # its id written last (key order is the upstream's choice)
            match = _ANSWER_END.search((tail or head)[-_LONG_TAIL:])
        if match is None:
            return None
        try:
            return json.loads(match.group(1))
        except ValueError:
            return None
    return _response_id(doc)


def _response_id(doc: Any) -> int | str | None:
    """The id of ``doc`` when it is shaped as a response (an int or str ``id``, a ``result`` or an
    ``error``, no ``method``), else None."""
    if not isinstance(doc, dict) or "method" in doc or not ("result" in doc or "error" in doc):
        return None
    answered = doc.get("id")
    return answered if type(answered) in (int, str) else None


def _answer_problem(exc: BaseException) -> str:
    """What is wrong with a response that is JSON but no valid JSON-RPC response (its ``result`` or ``error``
    member, as ``result: Input should be …``), or '' (not such a response)."""
    errors = getattr(exc, "errors", None)
    if not isinstance(exc, ValidationError) or not callable(errors):
        return ""
    found = errors()
    doc = (found or [{}])[0].get("input")
    if not isinstance(doc, dict) or "method" in doc or not ("result" in doc or "error" in doc):
        return ""  # not shaped as a response (a request or notification of the upstream's: _malformed says it)
    variant = "JSONRPCError" if "error" in doc else "JSONRPCResponse"
    parts = []
    for e in found:
        loc = tuple(e.get("loc", ()))
        if not loc or loc[0] != variant:
            continue
        shown = repr(e.get("input"))
        where = ".".join(str(x) for x in loc[1:]) or "message"
        parts.append(f"{where}: {e.get('msg')} (input {shown[:80] + '…' if len(shown) > 80 else shown})")
    return "; ".join(parts[:3])


def _tool_problem(exc: ValidationError) -> str:
    """What is wrong with one listed tool, from the error of validating ``{"tools": [tool]}``: its first problem,
    located in the tool (``inputSchema.required: Input should be a valid list``)."""
    errors = exc.errors(include_url=False)
    if not errors:
        return _one_line(str(exc))[:300]
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())[2:])
    return _one_line((f"{where}: " if where else "") + str(first.get("msg", "")))[:300]


def _one_line(text: str) -> str:
    """A pydantic error text on one line: without its "N validation error(s) for …" heading and its
    "For further information visit …" links, whitespace collapsed."""
    import re

    kept = [line for line in text.splitlines()
            if not line.strip().startswith("For further information visit")]
    joined = " ".join(" ".join(kept).split())
    return re.sub(r"\d+ validation errors? for \S+ ", "", joined)


def _malformed(exc: BaseException) -> str:
    """One line about a message that could not be parsed (pydantic's text spans several lines)."""
    errors = getattr(exc, "errors", None)
    if isinstance(exc, ValidationError) and callable(errors):
        parts = []
        for e in errors()[:3]:
            if e.get("input") == NOT_TEXT_LINE:
                parts.append("a line that is not valid UTF-8 (dropped)")
                continue
            if isinstance(e.get("input"), str) and _long_line_parts(e["input"]) is not None:
                parts.append(f"a line longer than {MAX_LINE_BYTES} bytes (dropped)")
                continue
            shown = repr(e.get("input"))
            parts.append(f"{e.get('msg')} (input {shown[:80] + '…' if len(shown) > 80 else shown})")
        return "; ".join(parts) or type(exc).__name__
    return " ".join(str(exc).split()) or type(exc).__name__


def _describe(exc: BaseException) -> str:
    """``Type: message`` of a failure, the task groups of the transports unwrapped to the errors inside them."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(exc)
    return "; ".join(f"{type(e).__name__}: {_one_line(str(e))}" for e in leaves) or f"{type(exc).__name__}: {exc}"


def _version() -> str:
    from sealbox import __version__

    return __version__
