"""``sealbox gateway replay RUN``: serve a recorded MCP session to whatever MCP client connects.

For agents that cannot be re-run in-process (a desktop host, an agent in another
language): the client connects to this server instead of ``sealbox gateway serve``
and gets

* ``tools/list``: exactly the tool list the run was recorded under — the run's
  snapshot (``run.started``) pins every upstream tool; each is exposed as
  ``server + separator + tool`` with its recorded description and input schema,
  in the order the live gateway lists them;
* ``tools/call``: each call answered from the recorded ``tool.result``, **in
  order** — the recorded content / ``isError`` as the live gateway returned it;
  a recorded deny is the same ``isError`` text naming the rule (same call id).
  No upstream is ever started or contacted.

Each incoming call is compared with the next recorded call by the replay's step
key (:class:`~sealbox.replay.keys.StepKey`: kind, ``server/tool``, hash of the
canonical arguments) through :class:`~sealbox.replay.source.ReplaySource`, the
same comparison the in-process :class:`~sealbox.replay.Replayer` makes. The first
mismatch — or a call past the end of the record — is a
:class:`~sealbox.replay.divergence.Divergence`: that call (and every later one) is
answered ``isError`` "replay diverged: …". When the client disconnects (or after
``until_calls`` calls) the verdict is final: recorded calls never made are a
``missing`` divergence.

The replay is recorded as a new run (``replay_of`` = the recorded run) whose
``run.ended`` holds the verdict, like the Replayer's. Its writes go through the live
gateway's :class:`~sealbox.gateway.server.StoreWriter`: a write lock held on the store by
another process makes a write wait in a worker thread (at most the store's ``lock_timeout``),
never on the event loop, so the server's other sessions are answered meanwhile.

Recorded calls are numbered as the replay makes them: call *k* of the session is
step ``k + 1`` of the replay run (step 1 is ``run.started``), which is also the
step the live gateway gave it in a session's own run. Only ``tool.call`` steps are
served; a run that also holds model calls (a run the gateway joined) is served its
tool calls in logical-step order. Prompts and resources are not served: the session's
recorded ``prompts/get`` and ``resources/read`` (``tool.call`` with a ``method``) are left
out of the comparison (never ``missing``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio
import mcp_types as types

from sealbox.errors import ConfigError, RecordingError
from sealbox.gateway import codes
from sealbox.gateway.server import StoreWriter
from sealbox.replay.source import _BATCH

__all__ = ["GatewayReplay", "DIVERGED_PREFIX", "answer_from_record"]

log = logging.getLogger("sealbox.gateway.replay")

#: The text every answer to a divergent call starts with.
DIVERGED_PREFIX = "replay diverged: "

_UPSTREAM_ERRORS = ("UpstreamUnavailable", "UpstreamTimeout", "UpstreamProtocolError")


class GatewayReplay:
    """A recorded gateway session served as an MCP server; one replay run per instance.

    Args:
        store: an open, writable store holding the recorded run (the replay is recorded there too).
        run_id: the recorded run (a session's run recorded by the gateway).
        config: a :class:`~sealbox.gateway.config.GatewayConfig`, needed only to serve over HTTP
            (its tokens, origins and limits); its upstreams are never started.
        until_calls: end the session after this many calls (None: when the client disconnects).

    Raises:
        ConfigError: no such run, or its snapshot holds no gateway tool list.
    """

    def __init__(self, store: Any, run_id: str, *, config: Any = None, until_calls: int | None = None) -> None:
        from sealbox.policy import ALLOW_ALL
        from sealbox.recorder import Recorder
        from sealbox.replay.keys import RecordedRun
        from sealbox.replay.source import ReplaySource

        self.store, self.run_id, self.config, self.until_calls = store, run_id, config, until_calls
        recorded = RecordedRun.read(store, run_id)
        snapshot = recorded.snapshot()
        gateway = ((snapshot or {}).get("extra") or {}).get("gateway")
        if isinstance(gateway, dict):
            self.separator = str(gateway.get("separator") or "__")
            recorded_tools, blocked = snapshot.get("tools") or [], gateway.get("blocked") or []
        else:  # a run the gateway joined: the snapshot is the driving process's
            self.separator, recorded_tools = _joined_tool_list(store, run_id)
            blocked = []
        self.snapshot = snapshot
        self.tools, self._targets = _tool_list(recorded_tools, self.separator, blocked)
        #: recorded calls by replay step; ``original_steps`` maps them back to the recorded steps
        self.original_steps: dict[str, str] = {}
        # a tool.call with a method is a prompts/get or resources/read the live gateway recorded: not served
        # here (tools only), so not among the calls a client must make again
        calls = [c for c in recorded.ordered() if c.key.kind == "tool.call" and c.payload.get("method") is None]
        recorded.steps = {}
        for i, call in enumerate(calls, start=1):
            step = str(i + 1)
            self.original_steps[step] = call.key.step
            call.key = dataclasses.replace(call.key, step=step)
            recorded.steps[step] = call
        self.recorded = recorded
        started = recorded.started
        labels = {**dict(started.get("labels") or {}), "sealbox.gateway.replay": "1"}
        self.run = Recorder(store, ALLOW_ALL).run(agent=started.get("agent") or "mcp-client",
                                                  principal=recorded.principal, snapshot=snapshot, labels=labels,
                                                  replay_of=run_id)
        self.source = ReplaySource(recorded, model="record", tools="record")
        self.source.batch = None  # the served calls' queued events are written by _flush, off the loop if need be
        self._writer = StoreWriter(store)
        self._start_lock: anyio.Lock | None = None
        self._finish_lock: anyio.Lock | None = None
        self._ending = False  # the verdict is being written: later calls are answered "ended"
        self.calls = 0  # tools/call requests answered (diverged ones included)
        self.requests = 0  # requests of any kind received from any client (initialize, tools/list, ...)
        self.result: Any = None
        #: called with this replay once ``until_calls`` calls were answered and the verdict is final
        self.on_until_calls: Any = None
        self._started = False
        self._scope: anyio.CancelScope | None = None
        self._tg: Any = None
        self.server = self._build_server()

    # ------------------------------------------------------------------ the MCP server

    def _build_server(self) -> Any:
        from mcp.server.lowlevel.server import Server

        from sealbox.gateway.server import _version

        server = Server("sealbox-gateway", version=_version(), on_list_tools=self._list_tools,
                        on_call_tool=self._call_tool,
                        instructions=f"Replay of recorded run {self.run_id}: tools and results come from the record.")
        server.middleware.append(self._check_request)
        return server

    async def _check_request(self, ctx: Any, call_next: Any) -> Any:
        """The live gateway's protocol checks (malformed ``tools/call``: ``MALFORMED_REQUEST``; with
        a config, its request size limit), so a replayed session gets the errors the live one did."""
        from sealbox.gateway.server import check_request

        self.requests += 1
        check_request(ctx, self.config.limits.max_request_bytes if self.config is not None else None)
        return await call_next(ctx)

    def initialization_options(self) -> Any:
        """The options the server announces (as the live gateway: ``tools.listChanged``)."""
        from mcp.server.lowlevel.server import NotificationOptions

        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    async def run_upstreams(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """No upstream is ever started: only here so the gateway's HTTP transport can serve a replay."""
        task_status.started()
        await anyio.sleep_forever()

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools))

    def _start(self) -> None:
        if not self._started:
            self.run.start()
            self._started = True
            self.run.replay = self.source

    async def _astart(self) -> None:
        """:meth:`_start` with ``run.started`` written through the writer; a second call waits for it."""
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = anyio.Lock()
        async with self._start_lock:
            if not self._started:
                await self._writer(self.run.start)
                self._started = True
                self.run.replay = self.source

    async def _flush(self) -> None:
        """Write the served calls' queued events (one commit) through the writer."""
        drafts = self.source.take_unwritten()
        if drafts:
            await self._writer(lambda: self.run._guard(lambda: self.store.append(drafts, sync=False)))

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        from mcp.shared.exceptions import MCPError

        from sealbox.gateway.server import _error_result
        from sealbox.replay.source import ReplayStopped

        target = self._targets.get(params.name)
        if target is None:  # as the live gateway: a protocol error, nothing recorded
            raise MCPError(codes.UNKNOWN_TOOL, f"unknown tool {params.name!r}", data=params.name)
        if self.result is not None or self._ending:
            return _error_result(DIVERGED_PREFIX + "the replay session has ended", {"sealbox/replay": "ended"})
        server, tool = target
        arguments = dict(params.arguments or {})
        await self._astart()
        if self.result is not None or self._ending:  # ended while run.started waited for the store
            return _error_result(DIVERGED_PREFIX + "the replay session has ended", {"sealbox/replay": "ended"})
        self.calls += 1
        nxt = self.recorded.steps.get(str(self.run._next_step))
        call_id = nxt.payload.get("call_id") if nxt is not None else None  # a deny's text names the same call

        try:
            try:
                return await answer_from_record(self.run, server, tool, arguments, exposed=params.name,
                                                call_id=call_id)
            except ReplayStopped as stopped:
                d = stopped.divergence
                return _error_result(f"{DIVERGED_PREFIX}call {self.calls}: {d.message}",
                                     {"sealbox/replay": {"run_id": self.run.run_id, "replay_of": self.run_id,
                                                         "call": self.calls, **d.summary()}})
        finally:
            if self.source.pending() >= _BATCH:
                await self._flush()
            if self.until_calls is not None and self.calls >= self.until_calls:
                self._stop_soon()

    def _stop_soon(self) -> None:
        scope = self._scope
        if scope is None:
            return

        async def stop() -> None:
            await anyio.sleep(0.3)  # let the answer to the last call reach the client
            await self.afinish()
            if self.on_until_calls is not None:
                # over stdio the SDK reads stdin in a thread that a cancel cannot interrupt: the
                # command prints the verdict and exits here rather than wait for the client to close
                self.on_until_calls(self)
            scope.cancel()

        self._tg.start_soon(stop)

    # ------------------------------------------------------------------ serving

    async def serve_stdio(self, *, stdin: Any = None, stdout: Any = None) -> Any:
        """Serve one client over stdin/stdout until it disconnects (or ``until_calls``); the result."""
        from mcp.server.stdio import stdio_server

        from sealbox.gateway.transports import client_stdin, relay_stdio

        async with anyio.create_task_group() as tg:
            self._tg, self._scope = tg, tg.cancel_scope
            async with stdio_server(stdin if stdin is not None else client_stdin(), stdout) as (raw_read, raw_write):

                read, write = relay_stdio(tg, self, raw_read, raw_write)
                await self.server.run(read, write, self.initialization_options())
            tg.cancel_scope.cancel()
        return await self.afinish()

    async def serve_streams(self, read: Any, write: Any) -> Any:
        """Serve one client over given streams (in-memory, tests) until it disconnects; the result."""
        async with anyio.create_task_group() as tg:
            self._tg, self._scope = tg, tg.cancel_scope
            await self.server.run(read, write, self.initialization_options())
            tg.cancel_scope.cancel()
        return await self.afinish()

    async def serve_http(self, port: int, *, sock: Any = None) -> Any:
        """Serve streamable HTTP on 127.0.0.1 (as ``gateway serve --http``) until ``until_calls`` or cancelled.

        Every session's calls are compared, in arrival order, against the one record.
        """
        from sealbox.gateway.transports import serve_http

        if self.config is None:
            raise ConfigError("serving a replay over HTTP needs the gateway config (--config) for its tokens")
        async with anyio.create_task_group() as tg:
            self._tg, self._scope = tg, tg.cancel_scope
            await serve_http(self, port, sock=sock)  # type: ignore[arg-type]
        return await self.afinish()

    # ------------------------------------------------------------------ the verdict

    def finish(self) -> Any:
        """End the replay run with its verdict (once) and return the :class:`~sealbox.replay.ReplayResult`.

        Writes on the calling thread (waiting for the store's lock); in the event loop use :meth:`afinish`."""
        if self.result is not None:
            return self.result
        self._refuse_if_no_client()
        self._ending = True
        self._start()
        result, status, verdict = self._verdict()
        self.source.flush(self.run)
        self.run.replay = None
        self.run.end(status, verdict=verdict)
        self.result = result
        return result

    async def afinish(self) -> Any:
        """:meth:`finish` from the event loop: its writes go through the writer, so a write lock held
        by another process does not stall the other sessions (it waits at most the store's
        ``lock_timeout``, then raises RecordingError). Once: a caller arriving while another
        writes the verdict waits for it and gets the same result."""
        if self.result is not None:
            return self.result
        if self._finish_lock is None:
            self._finish_lock = anyio.Lock()
        async with self._finish_lock:
            if self.result is None:
                self._refuse_if_no_client()
                self._ending = True
                await self._astart()
                result, status, verdict = self._verdict()
                await self._flush()
                self.run.replay = None
                await self._writer(lambda: self.run.end(status, verdict=verdict))
                self.result = result
        return self.result

    def _refuse_if_no_client(self) -> None:
        """No client sent a request (stdin at its end at once, ``< /dev/null``; no HTTP session): there is
        nothing to judge. Recording "NOT reproduced: missing" would read as a client that made other calls."""
        if self.requests == 0 and not self._started:
            raise NoClientError(f"no MCP client sent a request: nothing was replayed and no replay run of "
                                f"{self.run_id} was recorded (connect an MCP client to the replay: its standard "
                                "input and output, or --http)")

    def _verdict(self) -> tuple[Any, str, dict[str, Any]]:
        from sealbox.replay.engine import ReplayResult, _unreplayable, matched_steps

        source = self.source
        divergence = source.divergence or source.missing()
        result = ReplayResult(divergence is None, divergence, len(source.compared), self.run.run_id, (),
                              _unreplayable(self.recorded, "record", "record"), self.run_id,
                              matched_steps=matched_steps(source))
        status = "cancelled" if source.divergence is not None else "ok"
        verdict = {**result.verdict(), "calls_recorded": len(self.recorded.steps), "calls_made": self.calls,
                   "diverged_at_call": self.call_of(divergence.step) if divergence is not None else None}
        return result, status, verdict

    def call_of(self, step: str | None) -> int | None:
        """The 1-based call number of a replay step (``"3"`` is call 2)."""
        try:
            return int(str(step)) - 1
        except (TypeError, ValueError):
            return None

    def report(self) -> dict[str, Any]:
        """The JSON verdict (``--json``): the Replayer's result plus call numbers and recorded steps."""
        result = self.finish()
        d = result.divergence
        return {**result.to_dict(), "calls_recorded": len(self.recorded.steps), "calls_made": self.calls,
                "diverged_at_call": self.call_of(d.step) if d is not None else None,
                "recorded_step": self.original_steps.get(str(d.step)) if d is not None else None}

    def render(self) -> str:
        """The readable verdict."""
        from sealbox.replay.divergence import divergence_head, render_divergence

        result = self.finish()
        d = result.divergence
        if d is None:
            return (f"reproduced: {self.calls} call(s) matched the {len(self.recorded.steps)} recorded; "
                    f"replay run {result.new_run_id} (replay of {self.run_id})")
        # calls matched before the divergent one: not len(compared), which also counts a divergent call
        # whose key matched but whose recorded answer cannot be served (pending_approval, outcome_unknown)
        head = divergence_head(d, result.matched_steps, unit="call", number=self.call_of)
        lines = [f"NOT reproduced: {head}; replay run {result.new_run_id} (replay of {self.run_id})",
                 render_divergence(d)]
        return "\n".join(lines)


class NoClientError(RecordingError):
    """A :class:`GatewayReplay` ended before any client sent it a request: no verdict, no replay run."""


async def answer_from_record(run: Any, server: str, tool: str, arguments: dict[str, Any], *, exposed: str,
                             call_id: str | None) -> types.CallToolResult:
    """A ``tools/call`` of a run in replay mode (``run.replay`` serving tools), answered from the record as
    the live gateway answered it: the call is compared and served by :meth:`RunContext.acall_tool`
    (:meth:`~sealbox.replay.source.ReplaySource.serve_tool`), then turned into the ``CallToolResult`` the
    gateway returned: the recorded result (content, ``isError``, ``structuredContent``); a recorded deny is
    the same ``isError`` text naming the rule and call id; a recorded upstream error the same
    ``upstream error: …`` result; arguments the input schema refused the same ``isError`` text.

    Args:
        run: a :class:`~sealbox.recorder.RunContext` in replay mode, tools from the record.
        server, tool: the upstream server id and tool name (the record's ``server`` / ``tool``).
        arguments: the call's arguments.
        exposed: the name the client called (``server`` + separator + ``tool``).
        call_id: the call id to record (None: a new one; the step is then the run's next top-level step).

    Raises:
        ReplayStopped: the call diverged from the record (or cannot be served: outcome unknown,
            unanswered approval, unreplayable result).
        Exception: a recorded failure that is none of the above (rebuilt, as the Replayer raises it).
    """
    from sealbox.gateway.server import _error_result, _failure
    from sealbox.recorder import ToolDenied
    from sealbox.replay.values import ReplayedError

    def never(**_: Any) -> Any:
        raise AssertionError("a replayed call is never forwarded")

    try:
        out = await run.acall_tool(server, tool, arguments, never, exposed=exposed, call_id=call_id)
    except ToolDenied as denied:
        return _failure(denied)
    except ReplayedError as exc:
        if exc.type.rpartition(".")[2] in _UPSTREAM_ERRORS:
            return _error_result(f"upstream error: {exc}", {"sealbox/upstream_error": exc.type.rpartition(".")[2]})
        if exc.type.rpartition(".")[2] == "InvalidArguments":  # refused by the schema, not forwarded
            return _error_result(str(exc), {"sealbox/not_forwarded": "invalid_arguments"})
        raise
    return types.CallToolResult.model_validate(out, by_name=False)


def _joined_tool_list(store: Any, run_id: str) -> tuple[str, list[dict[str, Any]]]:
    """(separator, tools) of a run the gateway joined, whose snapshot (the driving process's) lists no
    gateway tools: the separator from its calls' exposed names (``server + separator + tool``), and every
    tool of the servers they name as the gateway's pins (``tools.changed`` of the system run) held it just
    before the run's first such call, as ``{server, name, description, input_schema}``.

    Raises:
        ConfigError: the run holds no call made through a gateway, or calls naming different separators.
    """
    from sealbox.events import SYSTEM_RUN_ID
    from sealbox.gateway.pinning import PinState

    calls = [e for e in store.read_run(run_id) if e.kind == "tool.call" and e.payload.get("method") is None
             and isinstance(e.payload.get("exposed"), str)]
    separators = set()
    for e in calls:
        server, tool, exposed = str(e.payload.get("server")), str(e.payload.get("tool")), e.payload["exposed"]
        if exposed.startswith(server) and exposed.endswith(tool) and len(exposed) > len(server) + len(tool):
            separators.add(exposed[len(server):len(exposed) - len(tool)])
    if not calls or len(separators) != 1:
        why = ("it holds no call made through a gateway" if not calls else
               "its calls' exposed names do not show one gateway separator")
        raise ConfigError(f"run {run_id} was not recorded by the gateway: its snapshot has no gateway section and "
                          f"{why} (no recorded tool list to serve)")
    first = calls[0].leaf_index
    pins = PinState(origin=getattr(store, "origin", "") or "")
    pins.apply(e for e in store.read_run(SYSTEM_RUN_ID) if e.leaf_index < first)
    servers = {str(e.payload.get("server")) for e in calls}
    tools = [{"server": server, "name": tool, "description": d.get("description"), "input_schema": d.get("input_schema")}
             for (server, tool), d in pins.definitions.items() if server in servers and (server, tool) in pins.known]
    return separators.pop(), tools


def _tool_list(recorded: list[dict[str, Any]], separator: str,
               blocked: list[dict[str, Any]] = ()) -> tuple[list[types.Tool], dict[str, tuple[str, str]]]:
    """The recorded tools as the live gateway listed them (sorted by server, then tool), and exposed -> target.

    ``blocked``: the snapshot's ``extra.gateway.blocked`` (``{server, tool, description}``), the tools
    that were blocked (changed, not re-approved) when the run started: listed, as then, with that
    notice for description and the input schema ``{"type": "object"}``."""
    from sealbox.canonical import decode
    from sealbox.gateway.server import exposed_tool_name

    notices = {(str(b.get("server")), str(b.get("tool"))): str(b.get("description") or "")
               for b in blocked if isinstance(b, dict)}
    tools, targets = [], {}
    for t in sorted(recorded, key=lambda t: (str(t.get("server")), str(t.get("name")))):
        exposed = exposed_tool_name(str(t["server"]), str(t["name"]), separator)
        notice = notices.get((str(t["server"]), str(t["name"])))
        if notice is not None:
            tools.append(types.Tool(name=exposed, description=notice, input_schema={"type": "object"}))
            targets[exposed] = (str(t["server"]), str(t["name"]))
            continue
        schema = decode(t.get("input_schema")) or {"type": "object"}
        tools.append(types.Tool(name=exposed, description=t.get("description") or None, input_schema=schema))
        targets[exposed] = (str(t["server"]), str(t["name"]))
    return tools, targets
