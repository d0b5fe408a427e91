"""The gateway: one MCP server in front of many upstream servers, every call decided and recorded.

Built on the ``mcp`` SDK's low-level :class:`mcp.server.Server` (protocol
dispatch) — the transports (stdio, streamable HTTP) live in
:mod:`sealbox.gateway.transports`.

A ``tools/call`` goes, in order:

1. protocol checks (size, shape, exposed name) — a failure is a JSON-RPC error
   (:mod:`sealbox.gateway.codes`), nothing is recorded;
2. the run: the one named by ``_meta["sealbox/run_id"]`` or ``SEALBOX_RUN_ID``
   (joined), else the client session's own run (started on its first call);
3. :meth:`sealbox.recorder.RunContext.acall_tool`: ``tool.call`` and
   ``policy.decision`` are committed (fsync'd) **before** anything is forwarded;
   a deny (policy, limit, breaker, changed tool) is an ``isError`` result naming
   the rule; if the record cannot be written nothing is forwarded;
4. inside the recorded call: the arguments are checked against the tool's input
   schema (a mismatch is an ``isError`` result, not forwarded), then the call is
   forwarded and its result (or error) recorded as ``tool.result``. The
   forwarding is shielded from the client's cancellation, so a client that
   disconnects mid-call still leaves the outcome in the record.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, fields
from typing import Any

import anyio
import mcp_types as types

from sealbox.errors import RecordingError
from sealbox.gateway import codes
from sealbox.gateway.config import GatewayConfig
from sealbox.gateway.pinning import PIN_RULE, PinState, tool_definition
from sealbox.gateway.upstream import Upstream, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable
from sealbox.policy import CircuitBreaker, Decision, Policy
from sealbox.recorder import Recorder, RunContext, ToolDenied
from sealbox.snapshot import Snapshot, ToolSpec

__all__ = ["Gateway", "RUN_ID_META_KEY", "ENV_RUN_ID"]

log = logging.getLogger("sealbox.gateway")

#: ``_meta`` key of a ``tools/call`` that joins an existing run.
RUN_ID_META_KEY = "sealbox/run_id"
#: Environment variable naming the run a stdio gateway's calls join (set by the agent that launches it).
ENV_RUN_ID = "SEALBOX_RUN_ID"
_RUN_STATE = "sealbox.run"


class _PinnedPolicy(Policy):
    """The configured policy, with changed-and-unapproved tools denied first (rule :data:`PIN_RULE`)."""

    def evaluate(self, call: Any) -> Decision:  # type: ignore[override]
        if self._pins.blocked(call.server, call.tool):  # type: ignore[attr-defined]
            return Decision("deny", "policy_deny", PIN_RULE,
                            f"tool {call.server}/{call.tool} changed upstream and has not been re-approved "
                            f"(sealbox gateway reapprove {call.server} {call.tool})",
                            self.fingerprint, 0, re_evaluable=False)
        return super().evaluate(call)


def _pinned(policy: Policy, pins: PinState) -> Policy:
    obj = object.__new__(_PinnedPolicy)
    for f in fields(policy):
        object.__setattr__(obj, f.name, getattr(policy, f.name))
    object.__setattr__(obj, "_pins", pins)
    return obj


@dataclass
class _InFlight:
    session: Any
    request_id: Any
    connection: Any


class Gateway:
    """The gateway's state: upstreams, pins, recorder, runs, and the MCP server that clients talk to.

    Args:
        config: a validated :class:`~sealbox.gateway.config.GatewayConfig`.
        store: an open store (default: open ``config.store``).
        policy: a policy (default: ``config.policy`` loaded, or ``ALLOW_ALL`` when it says so).
        run_id: a run every call joins unless its ``_meta`` names another (default: ``$SEALBOX_RUN_ID``).
        errlog: where upstreams' stderr goes.
    """

    def __init__(self, config: GatewayConfig, *, store: Any = None, policy: Policy | None = None,
                 run_id: str | None = None, errlog: Any = None) -> None:
        from sealbox.store import open_store

        self.config = config
        self.store = store if store is not None else open_store(config.store)
        if policy is None:
            from sealbox.policy import ALLOW_ALL

            policy = ALLOW_ALL if config.policy == "ALLOW_ALL" else Policy.load(config.policy)
        self.pins = PinState.load(self.store)
        self.policy = _pinned(policy, self.pins)
        self.recorder = Recorder(self.store, self.policy,
                                 breaker=CircuitBreaker(config.breaker_threshold, config.breaker_cooldown_s))
        self.default_run_id = run_id if run_id is not None else (os.environ.get(ENV_RUN_ID) or None)
        self.upstreams: dict[str, Upstream] = {
            spec.id: Upstream(spec, config.limits, restart_initial_s=config.restart_initial_s,
                              restart_max_s=config.restart_max_s, on_tools=self._on_tools, router=self._route,
                              errlog=errlog)
            for spec in config.upstreams
        }
        self._joined: dict[tuple[str, str], RunContext] = {}
        self._inflight: dict[str, dict[int, _InFlight]] = {u: {} for u in self.upstreams}
        self._connections: dict[int, Any] = {}
        self._validators: dict[tuple[str, str, str], Any] = {}
        self._tool_list_version = 0
        self.server = self._build_server()

    # ------------------------------------------------------------------ lifecycle

    async def run_upstreams(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise every upstream until cancelled; ``started`` once each has connected or failed once."""
        async with anyio.create_task_group() as tg:
            for up in self.upstreams.values():
                tg.start_soon(up.run)
            with anyio.move_on_after(self.config.limits.startup_timeout_s + 1):
                for up in self.upstreams.values():
                    await up.wait_until(lambda u: u.state in ("ready", "down") or u.generation > 0)
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                for up in self.upstreams.values():
                    up.stop()

    def initialization_options(self) -> Any:
        """The options the MCP server announces (``tools.listChanged`` is true)."""
        from mcp.server.lowlevel.server import NotificationOptions

        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    def _build_server(self) -> Any:
        from mcp.server.lowlevel.server import Server

        server = Server("sealbox-gateway", version=_version(), on_list_tools=self._list_tools,
                        on_call_tool=self._call_tool,
                        instructions="Tools of several MCP servers; every call is decided by policy and recorded.")
        server.middleware.append(self._check_request)
        return server

    # ------------------------------------------------------------------ protocol checks

    async def _check_request(self, ctx: Any, call_next: Any) -> Any:
        from mcp.shared.exceptions import MCPError

        if ctx.request_id is not None and ctx.params is not None:
            size = len(json.dumps(ctx.params, ensure_ascii=False, separators=(",", ":"), default=str).encode())
            if size > self.config.limits.max_request_bytes:
                raise MCPError(codes.REQUEST_TOO_LARGE, f"request params are {size} bytes; the limit is "
                               f"{self.config.limits.max_request_bytes}")
        if ctx.method == "tools/call" and ctx.request_id is not None:
            p = ctx.params
            if not isinstance(p, dict) or not isinstance(p.get("name"), str):
                raise MCPError(codes.MALFORMED_REQUEST, "tools/call needs params.name (a string)")
            if p.get("arguments") is not None and not isinstance(p["arguments"], dict):
                raise MCPError(codes.MALFORMED_REQUEST, "tools/call params.arguments must be an object")
        return await call_next(ctx)

    # ------------------------------------------------------------------ tools/list

    def exposed_name(self, server: str, tool: str) -> str:
        """``server + separator + tool``."""
        return f"{server}{self.config.separator}{tool}"

    def split_name(self, exposed: str) -> tuple[str, str] | None:
        """``(server, tool)`` of an exposed name (split at the first separator), or None."""
        server, sep, tool = exposed.partition(self.config.separator)
        if not sep or not tool or server not in self.upstreams:
            return None
        return server, tool

    def exposed_tools(self) -> list[types.Tool]:
        """The union of the upstreams' tools under their exposed names."""
        out = []
        for sid in sorted(self.upstreams):
            for name in sorted(self.upstreams[sid].tools):
                tool = self.upstreams[sid].tools[name]
                update: dict[str, Any] = {"name": self.exposed_name(sid, name)}
                if self.pins.blocked(sid, name):
                    update["description"] = (f"[blocked: this tool changed upstream; calls are denied until "
                                             f"`sealbox gateway reapprove {sid} {name}`]")
                out.append(tool.model_copy(update=update))
        return out

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.exposed_tools())

    async def _on_tools(self, upstream: Upstream, tools: list[types.Tool]) -> None:
        definitions = {t.name: tool_definition(t.name, t.description, t.input_schema) for t in tools}
        self.pins.refresh(self.store)
        draft = self.pins.observe(upstream.spec.id, definitions)
        if draft is None:
            return
        try:
            self.store.append([draft])
        except Exception as exc:  # noqa: BLE001 - unrecorded change: keep the tools blocked, say so
            log.error("could not record tools.changed for %s: %s", upstream.spec.id, exc)
        self.pins.cursor = max(self.pins.cursor, self.store.size())
        if not draft.payload.get("first_seen"):
            await self._notify_tools_changed()

    async def _notify_tools_changed(self) -> None:
        for connection in list(self._connections.values()):
            try:
                await connection.outbound.notify("notifications/tools/list_changed", None)
            except Exception:  # noqa: BLE001 - notifications are advisory
                log.debug("could not notify a client of a tool list change")

    # ------------------------------------------------------------------ runs

    def snapshot(self) -> Snapshot:
        """The configuration a new run starts under: every upstream tool, the policy, the gateway."""
        tools = tuple(ToolSpec(sid, t.name, t.description or "", t.input_schema or {})
                      for sid, up in sorted(self.upstreams.items()) for t in up.tools.values())
        extra = {"gateway": {"name": self.config.name, "separator": self.config.separator,
                             "upstreams": {sid: {"transport": up.spec.kind, "protocol_version": up.protocol_version}
                                           for sid, up in sorted(self.upstreams.items())}}}
        return Snapshot(tools=tools, policy=self.policy.fingerprint, extra=extra)

    def _run_for(self, ctx: Any, meta: Any, principal: str) -> RunContext:
        from mcp.shared.exceptions import MCPError

        run_id = _meta_get(meta, RUN_ID_META_KEY) or self.default_run_id
        if run_id is not None:
            if not isinstance(run_id, str):
                raise MCPError(codes.UNKNOWN_RUN, f"_meta[{RUN_ID_META_KEY!r}] must be a string")
            return self._join(run_id, principal)
        connection = _connection(ctx)
        run = connection.state.get(_RUN_STATE)
        if run is None:
            run = self._start_run(ctx, connection, principal)
        elif run.principal.id != principal:
            raise MCPError(codes.UNAUTHORIZED, "this session's run belongs to another identity")
        return run

    def _join(self, run_id: str, principal: str) -> RunContext:
        from mcp.shared.exceptions import MCPError

        key = (run_id, principal)
        run = self._joined.get(key)
        if run is None:
            try:
                run = self.recorder.continue_run(run_id)
            except RecordingError as exc:
                raise MCPError(codes.UNKNOWN_RUN, str(exc)) from exc
            if principal != run.principal.id:
                from sealbox.recorder import Principal

                run.principal = Principal(principal)
            self._joined[key] = run
        return run

    def _start_run(self, ctx: Any, connection: Any, principal: str) -> RunContext:
        info = getattr(connection.client_params, "client_info", None)
        labels = {"sealbox.gateway": self.config.name, "mcp.protocol_version": str(connection.protocol_version)}
        if info is not None:
            labels["mcp.client.name"] = info.name
            labels["mcp.client.version"] = info.version or ""
        agent = info.name if info is not None else "mcp-client"
        run = self.recorder.run(agent=agent, principal=principal, snapshot=self.snapshot(), labels=labels)
        run.start()
        run._gateway_inflight = 0  # type: ignore[attr-defined]
        run._gateway_idle = anyio.Event()  # type: ignore[attr-defined]
        run._gateway_idle.set()  # type: ignore[attr-defined]
        connection.state[_RUN_STATE] = run
        self._connections[id(connection)] = connection
        connection.exit_stack.push_async_callback(self._end_run, connection, run)
        return run

    async def _end_run(self, connection: Any, run: RunContext) -> None:
        """On disconnect: wait for the session's in-flight calls to be recorded, then end its run."""
        self._connections.pop(id(connection), None)
        with anyio.move_on_after(self.config.limits.call_timeout_s + 1, shield=True):
            await run._gateway_idle.wait()  # type: ignore[attr-defined]
        try:
            run.end("ok")
        except RecordingError as exc:
            log.error("could not record the end of run %s: %s", run.run_id, exc)

    def _principal(self, ctx: Any) -> str:
        request = getattr(ctx, "request", None)
        state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
        return state.get("sealbox_identity") or self.config.principal

    # ------------------------------------------------------------------ tools/call

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        from mcp.shared.exceptions import MCPError

        target = self.split_name(params.name)
        if target is None or target[1] not in self.upstreams[target[0]].tools:
            raise MCPError(codes.UNKNOWN_TOOL, f"unknown tool {params.name!r}", data=params.name)
        server, tool = target
        upstream = self.upstreams[server]
        arguments = dict(params.arguments or {})
        run = self._run_for(ctx, params.meta, self._principal(ctx))
        if self.pins.blocked(server, tool):
            self.pins.refresh(self.store)  # a re-approval may have been recorded since
        slot = _InFlight(ctx.session, ctx.request_id, _connection(ctx))
        key = id(slot)

        async def forward(**_: Any) -> dict[str, Any]:
            problem = self._schema_problem(server, tool, arguments)
            if problem is not None:
                return _error_result(f"arguments do not match the input schema of {params.name}: {problem}",
                                     {"sealbox/not_forwarded": "invalid_arguments"}).model_dump(
                    by_alias=True, mode="json", exclude_none=True)
            self._inflight[server][key] = slot
            try:
                result = await upstream.call(tool, arguments, progress=_progress_forwarder(ctx))
            finally:
                self._inflight[server].pop(key, None)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        _busy(run, +1)
        try:
            with anyio.CancelScope(shield=True):
                out = await run.acall_tool(server, tool, arguments, forward, exposed=params.name)
        except ToolDenied as denied:
            d = denied.decision
            rule = f"rule {d.rule}" if d.rule else "no rule"
            return _error_result(f"denied by {rule} ({d.reason_code}): {d.reason} [call {denied.call_id}]",
                                 {"sealbox/decision": {"rule": d.rule, "reason_code": d.reason_code,
                                                       "call_id": denied.call_id}})
        except RecordingError as exc:
            return _error_result(f"not forwarded: the call could not be recorded ({exc})",
                                 {"sealbox/not_forwarded": "recording_failed"})
        except (UpstreamUnavailable, UpstreamTimeout, UpstreamProtocolError) as exc:
            return _error_result(f"upstream error: {exc}", {"sealbox/upstream_error": type(exc).__name__})
        finally:
            _busy(run, -1)
        return types.CallToolResult.model_validate(out, by_name=False)

    def _schema_problem(self, server: str, tool: str, arguments: dict[str, Any]) -> str | None:
        import jsonschema

        spec = self.upstreams[server].tools.get(tool)
        schema = (spec.input_schema if spec is not None else None) or {}
        key = (server, tool, json.dumps(schema, sort_keys=True, default=str))
        validator = self._validators.get(key)
        if validator is None:
            try:
                cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
                cls.check_schema(schema)
                validator = cls(schema)
            except jsonschema.SchemaError:
                validator = False  # an upstream with a broken schema: the upstream validates
            self._validators[key] = validator
        if validator is False:
            return None
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return f"{where}: {error.message}"

    # ------------------------------------------------------------------ upstream -> client requests

    async def _route(self, upstream: Upstream, method: str, params: Any) -> Any:
        """Forward an upstream's request to the client whose call is in flight on that upstream."""
        from mcp.shared.exceptions import MCPError
        from mcp.shared.message import ServerMessageMetadata

        slots = list(self._inflight.get(upstream.spec.id, {}).values())
        by_conn = {id(s.connection): s for s in slots}
        if len(by_conn) != 1:
            if method == "roots/list":
                return types.ListRootsResult(roots=[])
            why = "no client call is in flight" if not by_conn else "calls of several clients are in flight"
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message=f"{method} from {upstream.spec.id} cannot be routed: {why}")
        slot = next(iter(by_conn.values()))
        request, result_type = _SERVER_REQUESTS[method]
        try:
            req = request(params=params) if params is not None else request()
            return await slot.session.send_request(req, result_type,
                                                   metadata=ServerMessageMetadata(related_request_id=slot.request_id))
        except MCPError as exc:
            return exc.error
        except Exception as exc:  # noqa: BLE001 - a client that cannot answer is an error to the upstream, not a crash
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"{method}: the client could not answer: {exc}")


_SERVER_REQUESTS: dict[str, tuple[Any, Any]] = {
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}


def _busy(run: RunContext, delta: int) -> None:
    if not hasattr(run, "_gateway_inflight"):
        return
    run._gateway_inflight += delta  # type: ignore[attr-defined]
    if run._gateway_inflight > 0 and run._gateway_idle.is_set():  # type: ignore[attr-defined]
        run._gateway_idle = anyio.Event()  # type: ignore[attr-defined]
    elif run._gateway_inflight == 0:  # type: ignore[attr-defined]
        run._gateway_idle.set()  # type: ignore[attr-defined]


def _connection(ctx: Any) -> Any:
    # The SDK keeps the per-client Connection on the request's ServerSession; it is
    # the one place where the gateway reads a private attribute of the SDK.
    return ctx.session._connection


def _meta_get(meta: Any, key: str) -> Any:
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get(key)
    extra = getattr(meta, "model_extra", None) or {}
    return extra.get(key, getattr(meta, key, None) if key.isidentifier() else None)


def _progress_forwarder(ctx: Any) -> Any:
    meta = ctx.meta if isinstance(ctx.meta, dict) else {}
    if meta.get("progress_token", meta.get("progressToken")) is None:
        return None

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await ctx.session.report_progress(progress, total, message)

    return forward


def _error_result(text: str, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True,
                                _meta=meta)


def _version() -> str:
    from sealbox import __version__

    return __version__
