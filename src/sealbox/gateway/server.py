"""The gateway: one MCP server in front of many upstream servers, every call decided and recorded.

Built on the ``mcp`` SDK's low-level :class:`mcp.server.Server` (protocol
dispatch) — the transports (stdio, streamable HTTP) live in
:mod:`sealbox.gateway.transports`.

A ``tools/call`` goes, in order:

1. protocol checks (size, shape, exposed name) — a failure is a JSON-RPC error
   (:mod:`sealbox.gateway.codes`), nothing is recorded;
2. the run: the one named by ``_meta["sealbox/run_id"]`` or ``SEALBOX_RUN_ID``
   (joined), else the client session's own run (started on its first call); a joined
   call is recorded under ``_meta["sealbox/step"]`` / ``["sealbox/call_id"]`` when given
   (the step the driving process's model call assigned it; :meth:`Gateway._link`);
3. :meth:`sealbox.recorder.RunContext.acall_tool`: ``tool.call`` and
   ``policy.decision`` are committed (fsync'd) **before** anything is forwarded;
   a deny (policy, limit, breaker, changed tool) is an ``isError`` result naming
   the rule; if the record cannot be written nothing is forwarded; a joined call whose step or
   call id another writer of its run (another gateway process, the driving process) recorded first
   is found in that same write and refused ``MALFORMED_REQUEST`` (:class:`sealbox.errors.StepTakenError`),
   nothing recorded or forwarded;
4. inside the recorded call: the arguments are checked against the tool's input
   schema (a mismatch is an ``isError`` result, not forwarded, recorded as the call's
   error ``InvalidArguments``, a ``require_approval`` one asking no approver; the schema's ``$ref``
   are never fetched), then the call is
   forwarded and its result (or error) recorded as ``tool.result``. The
   forwarding is shielded from the client's cancellation, so a client that
   disconnects mid-call still leaves the outcome in the record;
5. a ``require_approval`` decision is held, answered "pending; call again", and
   continued by a retry with the same binding hash (:mod:`sealbox.gateway.holds`); an outcome
   settled for a call whose client had gone (cancelled, disconnected) is kept and answered to its
   retry (``_meta["sealbox/approval"].status = "delivered_on_retry"``), never run twice.

A request an upstream makes of the client during a call (elicitation, sampling, roots) is
forwarded to that call's client and recorded in the call's run (:meth:`Gateway._route`): the
request before it is forwarded, the answer before it goes back (not recorded: not forwarded /
not returned). The client's answer is never an approval. The gateway's own elicitation telling the
person that a call is held for approval is recorded the same way (:class:`_InformRecord`).

Upstreams' prompts and resources are proxied too (docs/gateway.md, *Prompts and resources*): a
``prompts/get`` / ``resources/read`` goes through steps 1–3 as a call of tool ``prompt:<name>`` /
``resource:<uri>`` whose ``tool.call`` carries ``method`` (:meth:`Gateway._recorded_request`); its
failures are JSON-RPC errors (``DENIED``, ``NOT_RECORDED``, ``UPSTREAM_ERROR``), never held for an
approval. Resource reads are routed by URI (:meth:`Gateway.resource_server`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import re
import time
import uuid
import weakref
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

import anyio
import orjson
import mcp_types as types

from sealbox.approvals import ApprovalError, ApprovalPending
from sealbox.errors import ConfigError, RecordingError, StepTakenError, StoreBusyError
from sealbox.gateway import codes
from sealbox.gateway.config import GatewayConfig
from sealbox.gateway.holds import (DELIVERED_ON_RETRY, WIRE_STATE_KEY, Pending, StateError, Undelivered, open_state,
                                   seal_state, state_key)
from sealbox.gateway.pinning import PIN_RULE, PinState, definition_of
from sealbox.gateway.upstream import (SHUTDOWN_GRACE_S, GatewayStopping, Upstream, UpstreamProtocolError, UpstreamTimeout,
                                      UpstreamUnavailable)
from sealbox.policy import CircuitBreaker, Decision, Policy
from sealbox.policy.reads import RESOURCE_TOOL_PREFIX, normalize_uri, without_fragment
from sealbox.recorder import Recorder, RunContext, ToolDenied, is_call_step
from sealbox.redaction import holds_marker
from sealbox.snapshot import Snapshot, ToolSpec

__all__ = ["Gateway", "InvalidArguments", "RUN_ID_META_KEY", "CALL_ID_META_KEY", "STEP_META_KEY", "ENV_RUN_ID",
           "PROMPT_TOOL_PREFIX", "RESOURCE_TOOL_PREFIX", "UriTemplate"]

log = logging.getLogger("sealbox.gateway")

#: ``_meta`` key of a ``tools/call`` that joins an existing run.
RUN_ID_META_KEY = "sealbox/run_id"
#: Environment variable naming the run a stdio gateway's calls join (set by the agent that launches it).
ENV_RUN_ID = "SEALBOX_RUN_ID"
#: ``_meta`` key of a joined ``tools/call``: the model's tool call id, recorded as the call's ``call_id``.
CALL_ID_META_KEY = "sealbox/call_id"
#: ``_meta`` key of a joined ``tools/call``: the step the run's model call assigned to it (``"<n>.<i>"``).
STEP_META_KEY = "sealbox/step"
#: How often (seconds) a gateway with a blocked tool looks for its re-approval, to tell clients.
REAPPROVAL_POLL_S = 1.0
_MAX_CALL_ID = 256
#: The longest exposed tool name (the OpenAI tool-name limit; MCP 2025-11-25 says SHOULD be ≤ 128).
MAX_EXPOSED_NAME = 64
_RUN_STATE = "sealbox.run"
#: A ``prompts/get`` is recorded as a call of tool ``"prompt:" + the upstream's prompt name``, with
#: ``method: "prompts/get"`` in its ``tool.call`` (a policy rule matches it as that tool, e.g.
#: ``tool: "prompt:*"``). MCP tool names are ``[A-Za-z0-9_.-]`` (2025-11-25): no tool is named so.
PROMPT_TOOL_PREFIX = "prompt:"
#: A ``resources/read`` is recorded as a call of tool ``"resource:" + the URI`` (arguments ``{"uri": …}``,
#: ``method: "resources/read"``): :data:`sealbox.policy.reads.RESOURCE_TOOL_PREFIX`, imported above.
#: The longest URI routed by resource templates (a listed URI is routed whatever its length): matching
#: costs a few integer operations per URI character, per template (run in a worker thread, off the event loop).
MAX_TEMPLATE_URI = 8192
#: The longest resource template used to route reads (a longer one is listed, but routes nothing): an
#: upstream's template of thousands of characters made each unlisted read take seconds.
MAX_TEMPLATE_LENGTH = 256


class InvalidArguments(ValueError):
    """A call's arguments do not match the tool's input schema: it was not forwarded.

    Recorded as the call's error (``tool.result`` ``ok: false``, type ``InvalidArguments``);
    the client gets an ``isError`` result with ``_meta["sealbox/not_forwarded"] = "invalid_arguments"``."""


class ToolChangedSinceDecided(RuntimeError):
    """The tool changed upstream (``tools.changed``) after the call was decided and has not been
    re-approved: the call is not forwarded. Happens to a call held for approval while its tool
    changed (the approver approved the old definition), or one decided just before the change.

    Recorded as the call's error (``tool.result`` ``ok: false``, type ``ToolChangedSinceDecided``);
    the client gets an ``isError`` result naming rule :data:`PIN_RULE`, with
    ``_meta["sealbox/not_forwarded"] = "tool_changed"``."""


#: set in the task of a call whose failure says nothing of the upstream's health (its arguments refused by the
#: gateway, or the upstream's own refusal of it: :attr:`UpstreamProtocolError.refused`), so the breaker does not
#: count it
_NOT_FORWARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("sealbox_gateway_not_forwarded", default=False)


class _GatewayBreaker(CircuitBreaker):
    """The circuit breaker, not counting calls refused before forwarding (their arguments did not
    match the schema: the upstream was not contacted), nor calls the upstream refused as their own
    fault (a JSON-RPC error of :data:`~sealbox.gateway.upstream.REFUSAL_CODES`, e.g. −32602: it is
    alive and answering): they say nothing about its health. A half-open breaker's probe that was
    such a call is given back (the next call probes)."""

    def record_failure(self, server: str, tool: str, kind: str = "error", ticket: int | None = None) -> Any:
        if _NOT_FORWARDED.get():
            _NOT_FORWARDED.set(False)
            self.record_not_run(server, tool, ticket=ticket)
            return None
        return super().record_failure(server, tool, kind, ticket=ticket)

    def record_unreachable(self, server: str, tool: str, ticket: int | None = None) -> Any:
        # GatewayStopping is an UpstreamUnavailable (a ConnectionError) but never reached the upstream: it
        # opened every breaker of the upstream (server_down), and the calls after it were denied breaker_open
        if _NOT_FORWARDED.get():
            _NOT_FORWARDED.set(False)
            self.record_not_run(server, tool, ticket=ticket)
            return []
        return super().record_unreachable(server, tool, ticket=ticket)


class _PinnedPolicy(Policy):
    """The configured policy, with changed-and-unapproved tools denied first (rule :data:`PIN_RULE`)."""

    def evaluate(self, call: Any) -> Decision:  # type: ignore[override]
        if self._pins.blocked(call.server, call.tool):  # type: ignore[attr-defined]
            return Decision("deny", "policy_deny", PIN_RULE,
                            f"{blocked_text(self._pins, call.server, call.tool)} "  # type: ignore[attr-defined]
                            f"({reapprove_command(self._store_path, call.server, call.tool, self._pins)})",  # type: ignore[attr-defined]
                            self.fingerprint, 0, re_evaluable=False)
        return super().evaluate(call)


def _load_policy(path: str) -> Policy:
    """The config's policy file; a missing file that looks like a misspelt ``ALLOW_ALL`` says so."""
    from sealbox.errors import ConfigError, PolicyLoadError
    from sealbox.gateway.config import allow_all_hint

    try:
        return Policy.load(path)
    except PolicyLoadError as exc:
        hint = allow_all_hint(path)
        if not hint:
            raise
        raise ConfigError(f"{exc}{hint}") from None


def exposed_tool_name(server: str, tool: str, separator: str) -> str:
    """``server + separator + tool``, or, when longer than :data:`MAX_EXPOSED_NAME`, with the tool
    name cut and ``-`` + the first 8 hex digits of its SHA-256 appended (64 characters)."""
    name = f"{server}{separator}{tool}"
    if len(name) <= MAX_EXPOSED_NAME:
        return name
    import hashlib

    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    keep = max(0, MAX_EXPOSED_NAME - len(server) - len(separator) - 1 - len(digest))
    return f"{server}{separator}{tool[:keep]}-{digest}"


def _compromised_text(pins: Any, server: str, tool: str) -> str:
    """``: its re-approval by alice at leaf 9 was signed with a key declared compromised`` where a
    re-approval stopped counting that way (``--compromised-since``), else empty."""
    r = pins.compromised_reapproval(server, tool)
    return "" if r is None else (f": its re-approval by {r.identity} at leaf {r.leaf_index} was signed with a key "
                                 "declared compromised")


def blocked_text(pins: Any, server: str, tool: str) -> str:
    """Why a blocked tool is denied: its definition was revoked (``tool {s}/{t}'s definition sha256:… was
    revoked by alice at 2026-…Z (leaf 12): REASON; it is denied until re-approved``), else it changed upstream
    and has not been re-approved (and whose re-approval stopped counting, :func:`_compromised_text`)."""
    r = pins.revocation(server, tool)
    if r is not None:
        return (f"tool {server}/{tool}'s definition {r.schema_hash} was revoked by {r.identity} at {r.revoked_at} "
                f"(leaf {r.leaf_index}): {r.reason}; its calls are denied until it is re-approved or the upstream "
                "lists an approved definition")
    return (f"tool {server}/{tool} changed upstream and has not been re-approved"
            f"{_compromised_text(pins, server, tool)}")


def reapprove_command(store_path: str, server: str, tool: str, pins: Any = None) -> str:
    """The command that re-approves a changed tool, naming the gateway's store (it works from any folder);
    ``TEXT`` and ``KEY`` are left for the approver (a reason, and their identity's key file). With the
    gateway's ``pins``, when the definition its upstream lists is not the latest one recorded (another
    gateway on the store recorded a later listing), ``--hash`` names the one this gateway serves."""
    import shlex

    digest = pins.current(server, tool) if pins is not None else None
    extra = f" --hash {digest}" if digest is not None and digest != pins.known.get((server, tool)) else ""
    return (f"sealbox gateway reapprove {shlex.quote(server)} {shlex.quote(tool)} "
            f"--store {shlex.quote(os.path.abspath(store_path))}{extra} --reason TEXT --key-file KEY")


def _pinned(policy: Policy, pins: PinState, store_path: str) -> Policy:
    obj = object.__new__(_PinnedPolicy)
    for f in fields(policy):
        object.__setattr__(obj, f.name, getattr(policy, f.name))
    object.__setattr__(obj, "_pins", pins)
    object.__setattr__(obj, "_store_path", store_path)
    return obj


@dataclass
class _InFlight:
    session: Any
    request_id: Any
    connection: Any
    run: Any = None  # the RunContext the call is recorded in
    call_id: str | None = None  # its tool.call's call_id
    # the call's outcome rests on the client's side: the gateway refused a request the upstream made of the client
    # during the call, or the client answered one with an error (or could not be asked), or declined or cancelled
    # an elicitation: a JSON-RPC error of the call then says nothing of the upstream's health (see _route)
    refused: bool = False
    unanswered: int = 0  # requests the upstream made of the client during the call that the client has not answered
    tool: str | None = None  # the upstream's name of the tool called


class StoreWriter:
    """The gateway's way of writing to its store from the event loop (``gateway serve`` and
    ``gateway replay``): ``await writer(write)`` makes the store write ``write()`` once (see
    :meth:`__call__`). One per store and server; made outside the loop, used inside it.

    Args:
        store: an open store; its ``no_wait()`` and ``waiting_until()`` are used when it has them.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._no_wait = getattr(store, "no_wait", None)
        self._queued = 0  # writes waiting for, or being made by, a worker thread
        self._order: anyio.Lock | None = None  # made on first use (in the event loop)

    async def __call__(self, write: Any, since: float | None = None) -> Any:
        """Make the store write ``write()`` once and return what it returned (or raise what it raised),
        without ever stalling the event loop on the store's write lock.

        The common case costs no thread hop: the lock is free and no write is queued, so ``write()``
        runs here, on the loop, under ``store.no_wait()``. When another connection holds the lock (a
        ``sealbox`` command or an SDK process in a long transaction, a ``sqlite3`` shell's ``BEGIN
        IMMEDIATE``) the write raises StoreBusyError before anything is written, and is made again
        from a worker thread, which waits for the lock (up to the store's ``lock_timeout``; then it
        fails as any write does: RecordingError, a call is not forwarded) while the loop serves the
        other sessions; ``lock_timeout`` counts from when the write was asked for, so a write queued
        behind others that each waited does not wait it again. Writes made from threads go one at a
        time, in the order they came (a fair lock), and while one is queued every later write joins the queue, so the gateway's writes
        are committed in the order it made them (steps of a run stay in order). Shielded: a write
        once queued is made even if its caller is cancelled (no event lost, none made twice).
        ``since``: the :func:`time.monotonic` time the caller began waiting for the store, when
        earlier (a call that waited for another's ``run.started``)."""
        if not self._queued:
            if self._no_wait is None:
                return write()
            try:
                with self._no_wait():
                    return write()
            except StoreBusyError:
                pass  # nothing was written: made again below, off the loop
        self._queued += 1
        # its whole wait counts from now: behind other queued writes it must not wait lock_timeout again
        deadline = (time.monotonic() if since is None else since) + getattr(self.store, "lock_timeout", 0.0)
        try:
            with anyio.CancelScope(shield=True):
                if self._order is None:
                    self._order = anyio.Lock()
                async with self._order:
                    return await anyio.to_thread.run_sync(self._write_until, write, deadline)
        finally:
            self._queued -= 1

    def _write_until(self, write: Any, deadline: float) -> Any:
        """``write()`` in a worker thread, waiting for the store's lock only until ``deadline`` (monotonic s)."""
        waiting_until = getattr(self.store, "waiting_until", None)
        if waiting_until is None:  # a store with no such bound (PostgreSQL): its own lock wait
            return write()
        with waiting_until(deadline):
            return write()


#: a schema refusal's message (jsonschema's, holding the refused value) longer than this is replaced by a summary
MAX_SCHEMA_MESSAGE = 512


def _json_kind(value: Any) -> str:
    """The JSON kind of a value as a refusal names it ("array", "object", "string" …)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, (list, tuple)) else "object" if isinstance(value, dict) else "value"


def shown_name(name: str, limit: int = 128) -> str:
    """A client's tool or prompt name as an error message shows it: quoted (``repr``) in full up to ``limit``
    characters (MCP's longest tool name), else its first 64 characters and its length (a name of 900 000
    characters is not echoed whole)."""
    return repr(name) if len(name) <= limit else f"{name[:64] + '…'!r} ({len(name)} characters)"


def shown_run_id(run_id: Any, limit: int = 64) -> str:
    """A run id as an error message shows it: in full up to ``limit`` characters, else its first 40 and its
    length (a client's 300-character id is not echoed whole)."""
    text = str(run_id)
    return text if len(text) <= limit else f"{text[:40]}… ({len(text)} characters)"


class Gateway:
    """The gateway's state: upstreams, pins, recorder, runs, and the MCP server that clients talk to.

    Args:
        config: a validated :class:`~sealbox.gateway.config.GatewayConfig`.
        store: an open store (default: open ``config.store``).
        policy: a policy (default: ``config.policy`` loaded, or ``ALLOW_ALL`` when it says so).
        run_id: a run every call joins unless its ``_meta`` names another (default: ``$SEALBOX_RUN_ID``);
            stdio only: :func:`~sealbox.gateway.transports.http_app` refuses a gateway with one, since
            every HTTP session would join it. ``system`` (the store's own record) is refused with a
            ConfigError naming where it came from (this argument, or ``SEALBOX_RUN_ID``).
        errlog: where upstreams' stderr goes.

    Raises ConfigError (before the store is opened) when a ``${VAR}`` in an upstream's ``env`` or
    ``headers`` value names an unset variable (:meth:`UpstreamSpec.resolved_env`).
    """

    def __init__(self, config: GatewayConfig, *, store: Any = None, policy: Policy | None = None,
                 run_id: str | None = None, errlog: Any = None) -> None:
        from sealbox.events import SYSTEM_RUN_ID
        from sealbox.store import open_store

        default_run_id = run_id if run_id is not None else (os.environ.get(ENV_RUN_ID) or None)
        if default_run_id == SYSTEM_RUN_ID:  # refused before the store is opened
            if run_id is not None:  # the caller's argument, not the environment (which may not even be set)
                raise ConfigError(f"Gateway(run_id={SYSTEM_RUN_ID!r}): {SYSTEM_RUN_ID!r} is the store's own record, "
                                  "not a run calls can join; pass the id of a run the agent started")
            raise ConfigError(f"{ENV_RUN_ID}={SYSTEM_RUN_ID}: {SYSTEM_RUN_ID!r} is the store's own record, not a run "
                              "calls can join; unset it, or name a run the agent started")
        unresolved = [p for spec in config.upstreams for p in spec.unresolved()]
        if unresolved:  # ${VAR} in an env or header value names an unset variable: not started with the text
            raise ConfigError(f"{config.source}: " + "; ".join(unresolved))
        self.config = config
        self.store = store if store is not None else open_store(config.store, durability=config.durability)
        if policy is None:
            from sealbox.policy import ALLOW_ALL

            policy = ALLOW_ALL if config.policy == "ALLOW_ALL" else _load_policy(config.policy)
        self.pins = PinState.load(self.store)
        self.policy = _pinned(policy, self.pins, config.store)
        # suspend mode: a require_approval is recorded (call, decision, request, run.suspended) and the
        # gateway holds the call itself, off the event loop (sealbox.gateway.holds)
        self.recorder = Recorder(self.store, self.policy, approvals="suspend",
                                 breaker=_GatewayBreaker(config.breaker_threshold, config.breaker_cooldown_s))
        # the recorder's two writes of a call (gate, tool.result) go through _write: never a stalled event loop
        self.recorder.async_writer = self._write
        # the gateway holds a suspended run's call itself and serves the session's other calls meanwhile: its
        # runs are not refused calls while suspended (RunSuspendedError is for an agent that caught ApprovalPending)
        self.recorder._calls_while_suspended = True
        self._writer = StoreWriter(self.store)
        #: seconds between polls of the store while a call is held for an approval
        self.approval_poll = 0.1
        #: seconds between progress notifications while a call is held (first one at once)
        self.progress_interval = 1.0
        # run id -> (binding, principal) -> the request a call of that run waits for
        self._pending: dict[str, dict[tuple[str, str | None], Pending]] = {}
        self._hold_locks: dict[str, anyio.Lock] = {}
        #: seconds between looks for pending requests decided or expired that no call holds (_prune_pending)
        self.pending_prune_s = 30.0
        # the live run contexts some of whose pending requests were forgotten (still in the store, reloaded on a retry)
        self._pruned: weakref.WeakSet[RunContext] = weakref.WeakSet()
        # settled outcomes not yet handed to a live request, for a retry of the same call (holds.Undelivered)
        self._undelivered = Undelivered(config.limits.undelivered_keep_s)
        self._state_key = state_key(self.store._secret)
        self.default_run_id = default_run_id
        #: where default_run_id came from: "argument", "env" (SEALBOX_RUN_ID) or None (no default run)
        self.default_run_source = None if default_run_id is None else ("argument" if run_id is not None else "env")
        self.upstreams: dict[str, Upstream] = {
            spec.id: Upstream(spec, config.limits, restart_initial_s=config.restart_initial_s,
                              restart_max_s=config.restart_max_s, on_tools=self._on_tools, router=self._route,
                              errlog=errlog, config_source=config.source)
            for spec in config.upstreams
        }
        for up in self.upstreams.values():
            up.on_catalog = self._on_catalog
        self._catalogs: dict[str, tuple[Any, ...]] = {}  # upstream id -> its prompts, resources as listed last
        self._templates: dict[str, list[UriTemplate]] = {}  # upstream id -> its resource templates
        self._joined: dict[tuple[str, str], RunContext] = {}
        self._session_runs: dict[str, RunContext] = {}  # the runs of connected sessions, by run id
        self._linked_steps: dict[str, set[str]] = {}  # joined run id -> steps given by sealbox/step so far
        #: seconds between looks for joined runs that have ended since (their contexts are then forgotten)
        self.joined_prune_s = 30.0
        self._joined_pruned = time.monotonic()
        self._inflight: dict[str, dict[int, _InFlight]] = {u: {} for u in self.upstreams}
        self._connections: dict[int, Any] = {}
        self._listed_names: dict[str, frozenset[str]] = {}  # upstream id -> the tool names it listed last
        #: upstream id -> the malformed tools (name: why) left out of its listing, as last recorded (``anomaly``)
        self._rejected_recorded: dict[str, dict[str, str]] = {}
        self._validators: dict[tuple[str, str], tuple[Any, Any, Any]] = {}  # (Tool, validator, quick check)
        self._tool_list_version = 0
        #: set by begin_shutdown(): held calls stop waiting and answer "pending" (the request stays)
        self.stopping = False
        self._holding = 0  # calls being held for an approval now
        self._calls = 0  # tools/call requests being answered now (held ones included)
        #: a client (``("session", id of its Connection)``, or ``("identity", principal)`` for stateless requests) ->
        #: its tools/call requests being answered now (entries above 0 only): limits.max_calls_in_flight
        self._client_calls: dict[tuple[str, Any], int] = {}
        self.server = self._build_server()

    def check_default_run(self) -> None:
        """Raise ConfigError unless the default run (``SEALBOX_RUN_ID`` or ``run_id=``) can be joined: it is fixed
        for the gateway's life, so a run that does not exist, has ended, or an id no run can have
        would make every call of the gateway ``UNKNOWN_RUN``. Checked by ``gateway serve`` before serving stdio
        (a ``_meta["sealbox/run_id"]`` is checked per call, as it names a run for that call only)."""
        from sealbox.recorder import _check_joinable

        run_id = self.default_run_id
        if run_id is None:
            return
        where = f"{ENV_RUN_ID}={shown_run_id(run_id)}" if self.default_run_source == "env" else \
            f"Gateway(run_id={shown_run_id(run_id)!r})"
        fix = "; set it to the id of a running run (the agent's: mcp_env(run)) or unset it"
        try:
            _check_joinable(run_id)
        except ConfigError as exc:
            problem = "a run id is at most 128 characters" if len(run_id) > 128 else str(exc)
            raise ConfigError(f"{where}: {problem}{fix}") from None
        events = self.store.read_run(run_id)
        if not events:
            raise ConfigError(f"{where}: no run {shown_run_id(run_id)} in this store{fix}")
        if events[-1].kind == "run.ended":
            raise ConfigError(f"{where}: run {shown_run_id(run_id)} has ended; it cannot be continued{fix}")
        # a replay run is not refused here: an agent replayed in-process launches its stdio gateway with the replay
        # run's id (mcp_env), and a plain ClientSession's initialize and tools/list still reach that gateway (its
        # calls are served from the record; one that reached the gateway is UNKNOWN_RUN per call)

    def begin_shutdown(self) -> None:
        """Stop holding calls: each held call answers "approval … pending" within one poll
        (``approval_poll`` s), saying the gateway is shutting down, so that its client gets a
        reply before the connection closes; the approval request itself stays, and a call
        with the same arguments after a restart continues it. Safe from a signal handler."""
        self.stopping = True

    async def drain_holds(self, timeout: float = 2.0) -> None:
        """:meth:`begin_shutdown`, then wait (up to ``timeout`` s) until no call is held."""
        self.begin_shutdown()
        with anyio.move_on_after(timeout):
            while self._holding:
                await anyio.sleep(0.02)

    async def drain_calls(self, timeout: float | None = None, since: float | None = None) -> None:
        """Wait (up to ``timeout`` s, default the shutdown grace + 1) until no ``tools/call`` is being
        answered: a call in flight when the gateway is stopped finishes, is recorded, and its reply is sent
        before the connection closes. A call not yet written to its upstream (queued behind a write the
        upstream does not read) is answered at once, not forwarded; one written is given the shutdown grace
        (:data:`~sealbox.gateway.upstream.SHUTDOWN_GRACE_S`, at most ``limits.call_timeout_s``), then ends
        ``CutAtShutdown`` (:meth:`Upstream.begin_shutdown`). ``since``: when the stop began (``anyio.current_time()``),
        the grace counted from then (a stdio client's EOF: its requests first had the grace to be answered)."""
        for up in self.upstreams.values():  # a call whose own timeout comes first ends by it (UpstreamTimeout)
            up.begin_shutdown(SHUTDOWN_GRACE_S, since=since)
        grace = min(SHUTDOWN_GRACE_S, self.config.limits.call_timeout_s)
        if since is not None:
            grace = max(0.0, grace - (anyio.current_time() - since))
        with anyio.move_on_after(grace + 1 if timeout is None else timeout):
            while self._calls:
                await anyio.sleep(0.02)

    # ------------------------------------------------------------------ lifecycle

    async def run_upstreams(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise every upstream until cancelled; ``started`` once each has connected or failed once."""
        async with anyio.create_task_group() as tg:
            for up in self.upstreams.values():
                tg.start_soon(up.run)
            tg.start_soon(self._watch_reapprovals)
            tg.start_soon(self._prune_pending_loop)
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
                        on_call_tool=self._call_tool, on_list_prompts=self._list_prompts,
                        on_get_prompt=self._get_prompt, on_list_resources=self._list_resources,
                        on_list_resource_templates=self._list_resource_templates,
                        on_read_resource=self._read_resource, on_subscribe_resource=self._not_supported,
                        on_unsubscribe_resource=self._not_supported,
                        instructions="Tools of several MCP servers; every call is decided by policy and recorded.")
        server.middleware.append(self._check_request)
        # the prompts and resources capabilities only when an upstream has them (the SDK derives them from
        # the handlers); resources.subscribe is false: subscriptions are not proxied
        plain_capabilities = server.get_capabilities

        def capabilities(*args: Any, **kwargs: Any) -> Any:
            caps = plain_capabilities(*args, **kwargs)
            changed = bool(caps.tools.list_changed) if caps.tools is not None else False
            prompts = types.PromptsCapability(list_changed=changed) if self._upstreams_have("prompts") else None
            resources = (types.ResourcesCapability(subscribe=False, list_changed=changed)
                         if self._upstreams_have("resources") else None)
            return caps.model_copy(update={"prompts": prompts, "resources": resources})

        server.get_capabilities = capabilities  # type: ignore[method-assign]
        # streamable HTTP answers each session's initialize from create_initialization_options() called
        # without arguments (tools.listChanged false), stdio from initialization_options(): the same
        # capabilities both ways (the gateway does send notifications/tools/list_changed)
        plain = server.create_initialization_options

        def options(notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
            from mcp.server.lowlevel.server import NotificationOptions

            return plain(notification_options or NotificationOptions(tools_changed=True), *args, **kwargs)

        server.create_initialization_options = options  # type: ignore[method-assign]
        return server

    # ------------------------------------------------------------------ store writes

    async def _write(self, write: Any, since: float | None = None) -> Any:
        """Make the store write ``write()`` once, never stalling the event loop on the store's write
        lock (:class:`StoreWriter`, shared with ``gateway replay``); returns what it returned."""
        return await self._writer(write, since)

    # ------------------------------------------------------------------ protocol checks

    async def _check_request(self, ctx: Any, call_next: Any) -> Any:
        check_request(ctx, self.config.limits.max_request_bytes)
        return await call_next(ctx)

    # ------------------------------------------------------------------ tools/list

    def exposed_name(self, server: str, tool: str) -> str:
        """``server + separator + tool``; when that is longer than :data:`MAX_EXPOSED_NAME` (64)
        characters, the tool name is cut and ``-`` + 8 hex digits of its SHA-256 appended, so the
        name stays within 64 characters and distinct (:meth:`split_name` maps it back)."""
        return exposed_tool_name(server, tool, self.config.separator)

    def split_name(self, exposed: str) -> tuple[str, str] | None:
        """``(server, tool)`` of an exposed name (split at the first separator), or None."""
        return self._split(exposed, "tools")

    def split_prompt_name(self, exposed: str) -> tuple[str, str] | None:
        """``(server, prompt)`` of an exposed prompt name (as :meth:`split_name`), or None."""
        return self._split(exposed, "prompts")

    def _split(self, exposed: str, kind: str) -> tuple[str, str] | None:
        server, sep, tool = exposed.partition(self.config.separator)
        if not sep or not tool or "\x00" in tool or server not in self.upstreams:  # a NUL: not exposed
            return None
        tools = getattr(self.upstreams[server], kind)
        if len(exposed) == MAX_EXPOSED_NAME:  # maybe a shortened long name
            longer = [name for name in tools if len(name) > len(tool) and self.exposed_name(server, name) == exposed]
            if len(longer) + (tool in tools) > 1:
                return None  # two tools under one name (an upstream's tool named as another's shortened name)
            if longer:
                return server, longer[0]
        return server, tool

    def exposed_tools(self) -> list[types.Tool]:
        """The union of the upstreams' tools under their exposed names.

        Two tools of one upstream that would be listed under the same name (a tool named exactly
        as another's shortened long name) are both left out, and cannot be called: a call by
        that name could reach either. A tool whose name is empty is left out too (its exposed
        name would be the server id and the separator alone, which names no tool), and so is one
        whose name holds a NUL character (no store keeps one in a tool name: its calls could not
        be recorded)."""
        out = []
        for sid in sorted(self.upstreams):
            names = {name: self.exposed_name(sid, name) for name in self.upstreams[sid].tools}
            taken = Counter(names.values())
            for name in sorted(self.upstreams[sid].tools):
                if not name:  # listed as "<server><separator>", it could never be called (split_name)
                    log.warning("upstream %s: a tool with an empty name is not listed", sid)
                    continue
                if "\x00" in name:  # no call of it could be recorded (split_name finds no such tool)
                    log.warning("upstream %s: tool %r is not listed: its name holds a NUL character", sid, name)
                    continue
                if taken[names[name]] > 1:
                    log.warning("upstream %s: tools %r share the exposed name %r; neither is listed", sid,
                                sorted(n for n, e in names.items() if e == names[name]), names[name])
                    continue
                if self.pins.blocked(sid, name):
                    # nothing of the unapproved definition: a parameter's description in the input schema, the
                    # title, annotations or _meta carry text to the model as well as the description does
                    out.append(types.Tool(name=names[name], input_schema={"type": "object"},
                                          description=self.blocked_notice(sid, name)))
                    continue
                out.append(self.upstreams[sid].tools[name].model_copy(update={"name": names[name]}))
        return out

    def exposed_prompts(self) -> list[types.Prompt]:
        """The union of the upstreams' prompts, each named ``server + separator + prompt`` (shortened
        as tool names are, :meth:`exposed_name`); two prompts of one upstream under one exposed name,
        and a prompt with an empty name or one holding a NUL, are left out (as tools are, :meth:`exposed_tools`)."""
        out = []
        for sid in sorted(self.upstreams):
            prompts = self.upstreams[sid].prompts
            names = {name: self.exposed_name(sid, name) for name in prompts}
            taken = Counter(names.values())
            for name in sorted(prompts):
                if not name or "\x00" in name or taken[names[name]] > 1:
                    log.warning("upstream %s: prompt %r is not listed (empty, holding a NUL, or its exposed name %r "
                                "is shared)",
                                sid, name, names[name])
                    continue
                out.append(prompts[name].model_copy(update={"name": names[name]}))
        return out

    def _upstreams_have(self, capability: str) -> bool:
        """Whether an upstream announced ``capability`` (``prompts``, ``resources``) when it last connected."""
        return any(getattr(up.capabilities, capability, None) is not None for up in self.upstreams.values())

    def blocked_notice(self, server: str, tool: str) -> str:
        """The description a blocked tool is listed with (its own is not approved)."""
        r = self.pins.revocation(server, tool)
        why = (f"this tool's definition was revoked by {r.identity} (leaf {r.leaf_index})" if r is not None else
               f"this tool changed upstream{_compromised_text(self.pins, server, tool)}")
        return f"[blocked: {why}; calls are denied until `{reapprove_command(self.config.store, server, tool, self.pins)}`]"

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        self._watch(_connection(ctx))  # a client holding a listing is told when it changes, call or no call
        try:  # a re-approval or a revocation may have been recorded since (sealbox gateway reapprove / revoke)
            self.pins.refresh(self.store)
        except Exception as exc:  # noqa: BLE001 - listed as last known: calls read re-approvals again
            log.warning("could not read re-approvals and revocations before listing tools: %s", exc)
        return types.ListToolsResult(tools=self.exposed_tools())

    def _blocked_here(self) -> set[tuple[str, str]]:
        """The blocked tools this gateway lists: of its upstreams, present there now, with a name
        (the store's pin state also covers servers of other gateways sharing it)."""
        return {(sid, name) for sid, name in self.pins.blocked_tools()
                if name and sid in self.upstreams and name in self.upstreams[sid].tools}

    async def _watch_reapprovals(self, interval_s: float = REAPPROVAL_POLL_S) -> None:
        """Every ``interval_s`` seconds, read the re-approvals and revocations recorded since (by another process:
        ``sealbox gateway reapprove`` / ``revoke``; one ``size()`` query when nothing was appended), and send a
        client holding the listing ``notifications/tools/list_changed`` when the set of blocked tools it lists
        changed: a re-approved tool loses its ``[blocked…]`` description, a revoked one gets it."""
        while True:
            await anyio.sleep(interval_s)
            before = self._blocked_here()
            try:
                self.pins.refresh(self.store)
            except Exception as exc:  # noqa: BLE001 - a store that cannot be read now is read next time
                log.debug("could not read re-approvals: %s", exc)
                continue
            if self._blocked_here() != before:
                await self._notify_tools_changed()

    def _watch(self, connection: Any) -> None:
        """Send this client ``notifications/tools/list_changed`` on a change, until it disconnects."""
        if id(connection) in self._connections or not getattr(connection, "has_standalone_channel", True):
            return  # known, or a stateless request's connection (no channel to notify on)
        self._connections[id(connection)] = connection
        connection.exit_stack.callback(self._connections.pop, id(connection), None)

    async def _on_tools(self, upstream: Upstream, tools: list[types.Tool]) -> None:
        definitions = {t.name: definition_of(t) for t in tools}
        # the tool names it lists changed (e.g. it failed to start, and now lists its tools): clients that
        # listed the gateway's tools are told, whether or not a change of definitions is recorded
        names = frozenset(definitions)
        renamed = self._listed_names.get(upstream.spec.id, frozenset()) != names
        self._listed_names[upstream.spec.id] = names
        await self._record_rejected(upstream)
        self.pins.refresh(self.store)
        draft = self.pins.observe(upstream.spec.id, definitions)
        if draft is None:
            if renamed:
                await self._notify_tools_changed()
            return
        try:
            await self._write(lambda: self.store.append([draft]))
        except Exception as exc:  # noqa: BLE001 - unrecorded change: keep the tools blocked, say so
            log.error("could not record tools.changed for %s: %s", upstream.spec.id, exc)
            self.pins.cursor = max(self.pins.cursor, self.store.size())
        else:  # read it back with its leaf (a signed re-approval names it); applying it again changes nothing
            self.pins.refresh(self.store)
        if renamed or not draft.payload.get("first_seen"):
            await self._notify_tools_changed()

    async def _record_rejected(self, upstream: Upstream) -> None:
        """Record (``anomaly`` ``malformed_tool`` of the system run) the malformed tools left out of an upstream's
        listing (:attr:`Upstream.rejected_tools`), when they differ from what this gateway last recorded for it."""
        from sealbox.events import SYSTEM_RUN_ID, EventDraft

        sid, rejected = upstream.spec.id, dict(upstream.rejected_tools)
        if rejected == self._rejected_recorded.get(sid, {}):
            return
        self._rejected_recorded[sid] = rejected
        if not rejected:
            return
        draft = EventDraft("anomaly", {"what": "malformed_tool", "detail": {"server": sid, "tools": [
            {"tool": name, "why": why} for name, why in sorted(rejected.items())]}}, run_id=SYSTEM_RUN_ID,
            principal="sealbox")
        try:
            await self._write(lambda: self.store.append([draft]))
        except Exception as exc:  # noqa: BLE001 - logged already by the upstream; the tools are left out all the same
            log.error("could not record the malformed tools of %s: %s", sid, exc)

    async def _notify_tools_changed(self) -> None:
        await self._notify("notifications/tools/list_changed")

    async def _notify(self, method: str) -> None:
        for connection in list(self._connections.values()):
            try:
                await connection.outbound.notify(method, None)
            except Exception:  # noqa: BLE001 - notifications are advisory
                log.debug("could not notify a client: %s", method)

    async def _on_catalog(self, upstream: Upstream) -> None:
        """An upstream listed its prompts and resources: clients that may hold a listing are told when
        one changed; its resource templates are compiled for routing reads."""
        sid = upstream.spec.id
        compiled = []
        for t in upstream.templates:
            if len(t.uri_template) > MAX_TEMPLATE_LENGTH:
                log.warning("upstream %s: resource template %r… (%d characters) is not used to route reads: longer "
                            "than %d characters", sid, t.uri_template[:32], len(t.uri_template), MAX_TEMPLATE_LENGTH)
                continue
            compiled.append(UriTemplate(t.uri_template))
        self._templates[sid] = compiled  # one assignment: a read routing in a worker thread sees either list
        prompts = tuple(p.model_dump_json(by_alias=True, exclude_none=True) for _, p in sorted(upstream.prompts.items()))
        resources = tuple(r.model_dump_json(by_alias=True, exclude_none=True)
                          for r in [*(v for _, v in sorted(upstream.resources.items())), *upstream.templates])
        before = self._catalogs.get(sid, ((), ()))
        self._catalogs[sid] = (prompts, resources)
        if prompts != before[0]:
            await self._notify("notifications/prompts/list_changed")
        if resources != before[1]:
            await self._notify("notifications/resources/list_changed")

    # ------------------------------------------------------------------ prompts

    async def _list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        self._watch(_connection(ctx))
        return types.ListPromptsResult(prompts=self.exposed_prompts())

    async def _get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        """``prompts/get``: decided and recorded as a call of tool ``prompt:<name>`` (``method:
        "prompts/get"``, arguments: the prompt's arguments), then forwarded (:meth:`_recorded_request`).

        Raises:
            MCPError: ``UNKNOWN_PROMPT`` (not exposed), ``INVALID_PARAMS`` (−32602: a required argument of the
                prompt left out, or an argument it does not declare; recorded and decided, not forwarded), and as
                :meth:`_recorded_request`.
        """
        target = self.split_prompt_name(params.name)
        if target is None or target[1] not in self.upstreams[target[0]].prompts:
            raise _mcp_error()(codes.UNKNOWN_PROMPT, f"unknown prompt {shown_name(params.name)}",
                               data=params.name[:256])
        server, prompt = target
        tool = PROMPT_TOOL_PREFIX + prompt
        if tool in self.upstreams[server].tools:  # would share its policy rules and its calls' records
            raise _mcp_error()(codes.UNKNOWN_PROMPT, f"prompt {params.name!r} is not served: server {server} has a "
                               f"tool named {tool!r}, the name its prompts/get would be recorded under",
                               data=params.name)
        upstream = self.upstreams[server]
        forwarded = types.GetPromptRequestParams(name=prompt, arguments=params.arguments)
        # a required argument left out is refused here, never forwarded (MCP: -32602), as tool arguments that fail
        # the input schema are: upstreams answer it with errors the breaker would count (code 0, -32603), so one
        # client leaving it out would open the prompt's breaker for every client
        declared = upstream.prompts[prompt].arguments or ()
        missing = [a.name for a in declared if a.required and a.name not in (params.arguments or {})]
        # so is an argument the prompt does not declare (the SDK's MCPServer calls the prompt's function with it:
        # a TypeError, answered -32603)
        unknown = sorted(set(params.arguments or {}) - {a.name for a in declared})
        refused = None
        if missing:
            refused = InvalidArguments(f"missing required argument{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        elif unknown:
            refused = InvalidArguments(f"argument{'s' if len(unknown) > 1 else ''} the prompt does not declare: "
                                       f"{', '.join(unknown)}")
        return await self._recorded_request(
            ctx, params.meta, server, tool, dict(params.arguments or {}), params.name, "prompts/get",
            lambda: upstream.request("prompts/get", forwarded, types.GetPromptResult), refused=refused)

    # ------------------------------------------------------------------ resources

    def _owners(self, uri: str) -> list[str]:
        """The upstreams that list ``uri``, in id order."""
        return [sid for sid in sorted(self.upstreams) if uri in self.upstreams[sid].resources]

    def exposed_resources(self) -> list[types.Resource]:
        """The union of the upstreams' resources, unchanged (a URI cannot be renamed without breaking
        its clients); a URI two upstreams list is left out (a read of it is ambiguous)."""
        out = []
        for sid in sorted(self.upstreams):
            for uri, resource in sorted(self.upstreams[sid].resources.items()):
                if len(self._owners(uri)) > 1:
                    log.warning("resource %s is listed by %s; it is not listed here", uri, " and ".join(self._owners(uri)))
                    continue
                out.append(resource)
        return out

    def resource_server(self, uri: str) -> str:
        """The upstream a ``resources/read`` of ``uri`` goes to: the one upstream that lists it; else,
        listed by none, the one upstream with a resource template matching it (:class:`UriTemplate`; a URI
        of at most :data:`MAX_TEMPLATE_URI` characters, a template of at most :data:`MAX_TEMPLATE_LENGTH`).
        Thread-safe: :meth:`_read_resource` calls it in a worker thread.

        Raises:
            MCPError: ``AMBIGUOUS_RESOURCE`` (listed by several, or matching templates of several),
                ``UNKNOWN_RESOURCE`` (neither listed nor matching a template, or unlisted and too long to match).
        """
        owners = self._owners(uri)
        if len(owners) == 1:
            return owners[0]
        if owners:
            raise _mcp_error()(codes.AMBIGUOUS_RESOURCE, f"ambiguous resource {uri!r}: listed by "
                               f"{' and '.join(owners)}", data=uri)
        if len(uri) > MAX_TEMPLATE_URI:
            raise _mcp_error()(codes.UNKNOWN_RESOURCE, f"unknown resource {uri[:64]!r}… ({len(uri)} characters): no "
                               f"upstream lists it, and URIs longer than {MAX_TEMPLATE_URI} characters are not "
                               "matched against resource templates", data=uri[:256])
        matched = {sid: t.template for sid in sorted(self.upstreams) for t in self._templates.get(sid, ())
                   if t.matches(uri)}
        if len(matched) == 1:
            return next(iter(matched))
        if matched:
            raise _mcp_error()(codes.AMBIGUOUS_RESOURCE, f"ambiguous resource {uri!r}: no upstream lists it, and it "
                               "matches resource templates of " + " and ".join(f"{sid} ({t})" for sid, t in matched.items()),
                               data=uri)
        raise _mcp_error()(codes.UNKNOWN_RESOURCE, f"unknown resource {uri!r}: no upstream lists it or has a "
                           "resource template matching it", data=uri)

    async def _list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        self._watch(_connection(ctx))
        return types.ListResourcesResult(resources=self.exposed_resources())

    async def _list_resource_templates(self, ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        self._watch(_connection(ctx))
        return types.ListResourceTemplatesResult(
            resource_templates=[t for sid in sorted(self.upstreams) for t in self.upstreams[sid].templates])

    async def _read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        """``resources/read``: routed by :meth:`resource_server`, decided and recorded as a call of tool
        ``resource:<uri>`` (``method: "resources/read"``, arguments ``{"uri": uri}``), then forwarded
        (:meth:`_recorded_request`). A URI no upstream lists as asked is normalized first
        (:func:`normalize_uri`) and its fragment dropped (:func:`without_fragment`: never part of what
        is read), and that URI is routed, decided, recorded and forwarded: a policy that denies
        ``toy://notes/secret`` denies ``TOY://notes/%73ecret``, ``toy://notes/public/../secret`` and
        ``toy://notes/secret#x``, which an upstream's resource template reads as that resource. The
        decision is the strictest of the URI's forms (:func:`sealbox.policy.reads.evaluate_read`, in
        the recorder): ``toy://notes/secret?x``, ``…/secret/``, ``toy://notes//secret`` and
        ``toy://notes%2Fsecret`` are denied too, listed or not.

        Raises:
            MCPError: ``UNKNOWN_RESOURCE``, ``AMBIGUOUS_RESOURCE``, and as :meth:`_recorded_request`.
        """
        uri = str(params.uri)
        if not self._owners(uri):  # decided, recorded and forwarded as the URI the upstream reads
            uri = without_fragment(normalize_uri(uri))
        # template matching is (URI length × template length) steps: off the event loop, so that the
        # gateway's other sessions are served meanwhile
        server = self.resource_server(uri) if self._owners(uri) else await anyio.to_thread.run_sync(
            self.resource_server, uri)
        tool = RESOURCE_TOOL_PREFIX + uri
        if tool in self.upstreams[server].tools:
            raise _mcp_error()(codes.UNKNOWN_RESOURCE, f"resource {uri!r} is not served: server {server} has a tool "
                               f"named {tool!r}, the name its resources/read would be recorded under", data=uri)
        upstream = self.upstreams[server]
        forwarded = types.ReadResourceRequestParams(uri=uri)
        return await self._recorded_request(
            ctx, params.meta, server, tool, {"uri": uri}, uri, "resources/read",
            lambda: upstream.request("resources/read", forwarded, types.ReadResourceResult))

    async def _not_supported(self, ctx: Any, params: Any) -> Any:
        raise _mcp_error()(codes.NOT_SUPPORTED, f"{ctx.method} is not supported by the sealbox gateway (resource "
                           "subscriptions are not proxied; read the resource again, or listen for "
                           "notifications/resources/list_changed)")

    async def _recorded_request(self, ctx: Any, meta: Any, server: str, tool: str, arguments: dict[str, Any],
                                exposed: str, method: str, send: Any, refused: InvalidArguments | None = None) -> Any:
        """Decide and record a request the agent takes data in by, as a ``tools/call`` is: ``tool.call``
        (with ``method``) and ``policy.decision`` written before anything is forwarded, then
        ``send()`` awaited and its result recorded as ``tool.result``; shielded from the client's
        cancellation. Returns the upstream's result. ``refused``: its arguments are known to be wrong;
        decided and recorded (``tool.result`` ``ok: false`` with this error), never forwarded, not
        counted by the circuit breaker.

        Raises:
            MCPError: ``DENIED`` (the decision was not allow; ``data``: rule, reason_code, call_id),
                ``NOT_RECORDED`` (the call or its result could not be recorded), ``UPSTREAM_ERROR``,
                ``INVALID_PARAMS`` (``refused`` and allowed), and as :meth:`_run_for` / :meth:`_link`.
        """
        self._calls += 1
        try:
            principal = self._principal(ctx)
            try:
                run = await self._run_for(ctx, meta, principal)
            except RecordingError as exc:
                raise _mcp_error()(codes.NOT_RECORDED, f"not forwarded: the {method} could not be recorded "
                                   f"({exc})") from exc
            call_id = self._link(run, meta) if getattr(run, "_gateway_inflight", None) is None else None
            returned: list[Any] = []
            sent: list[bool] = []

            async def forwarded() -> dict[str, Any]:
                sent.append(True)
                try:
                    result = await send()
                except UpstreamProtocolError as exc:
                    if exc.refused:  # the upstream's refusal of the request (invalid params…): not counted
                        _NOT_FORWARDED.set(True)
                    raise
                except GatewayStopping:  # never written to the upstream: not forwarded, not the upstream's failure
                    _NOT_FORWARDED.set(True)
                    sent.clear()
                    raise
                returned.append(result)
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)

            def forward(**_: Any) -> Any:
                return forwarded()

            _busy(run, +1)
            try:
                with anyio.CancelScope(shield=True):  # a client that goes away still leaves the outcome
                    try:
                        await run.acall_tool(server, tool, arguments, forward, exposed=exposed, call_id=call_id,
                                             method=method, refused=refused)
                    finally:
                        _NOT_FORWARDED.set(False)  # a mark no breaker failure took is not left for a later call
            except Exception as exc:  # noqa: BLE001 - mapped to protocol errors; others re-raised
                if call_id is not None and call_id not in run._call_ids:
                    self._unlink(run, call_id, meta)
                error = _request_error(exc, method, exposed, bool(sent))
                if error is exc:
                    raise
                raise error from exc
            finally:
                _busy(run, -1)
            return returned[0]
        finally:
            self._calls -= 1

    # ------------------------------------------------------------------ runs

    def snapshot(self) -> Snapshot:
        """The configuration a new run starts under: every upstream tool, the policy, the gateway."""
        tools = tuple(ToolSpec(sid, t.name, t.description or "", t.input_schema or {})
                      for sid, up in sorted(self.upstreams.items()) for t in up.tools.values()
                      if t.name and "\x00" not in t.name)  # not exposed (exposed_tools): not pinned to runs
        extra = {"gateway": {"name": self.config.name, "separator": self.config.separator,
                             "upstreams": {sid: {"transport": up.spec.kind, "protocol_version": up.protocol_version}
                                           for sid, up in sorted(self.upstreams.items())}}}
        blocked = [{"server": t.server, "tool": t.name, "description": self.blocked_notice(t.server, t.name)}
                   for t in tools if self.pins.blocked(t.server, t.name)]
        if blocked:  # listed then as a notice, not as pinned here (gateway replay lists them the same way)
            extra["gateway"]["blocked"] = blocked
        prompts = [{"server": sid, **p.model_dump(by_alias=True, mode="json", exclude_none=True)}
                   for sid, up in sorted(self.upstreams.items()) for _, p in sorted(up.prompts.items())]
        if prompts:  # what the run was offered besides tools (recorded, not pinned: a change is not blocked)
            extra["gateway"]["prompts"] = prompts
        resources = [{"server": sid, **r.model_dump(by_alias=True, mode="json", exclude_none=True)}
                     for sid, up in sorted(self.upstreams.items()) for _, r in sorted(up.resources.items())]
        if resources:
            extra["gateway"]["resources"] = resources
        templates = [{"server": sid, **t.model_dump(by_alias=True, mode="json", exclude_none=True)}
                     for sid, up in sorted(self.upstreams.items()) for t in up.templates]
        if templates:
            extra["gateway"]["resource_templates"] = templates
        return Snapshot(tools=tools, policy=self.policy.fingerprint, extra=extra)

    async def _run_for(self, ctx: Any, meta: Any, principal: str) -> RunContext:
        named = _meta_get(meta, RUN_ID_META_KEY)
        if named is None and _meta_names(meta, RUN_ID_META_KEY):  # a run id never set (null), not "no run"
            raise _mcp_error()(codes.UNKNOWN_RUN, f"_meta[{RUN_ID_META_KEY!r}] must be a non-empty string, not null "
                               "(leave the key out for the session's own run)")
        run_id = named if named is not None else self.default_run_id
        if run_id is not None:
            if not isinstance(run_id, str):
                raise _mcp_error()(codes.UNKNOWN_RUN, f"_meta[{RUN_ID_META_KEY!r}] must be a string")
            if not run_id:  # not "no run": the client named a run and it is empty (its id was never set)
                raise _mcp_error()(codes.UNKNOWN_RUN, f"_meta[{RUN_ID_META_KEY!r}] must be a non-empty string")
            live = self._session_runs.get(run_id)
            if live is None:
                return self._join(run_id, principal)
            if _connection(ctx).state.get(_RUN_STATE) is not live:
                raise _mcp_error()(codes.RUN_IN_USE, f"run {run_id} is the run of another MCP session of this gateway "
                               "that is still connected; only that session records into it")
            if live.principal.id != principal:  # its own session, another identity: recorded as that identity
                return self._join(run_id, principal)
            return live  # its own run, named: one step counter
        connection = _connection(ctx)
        run = connection.state.get(_RUN_STATE)
        since = None  # when this call began waiting for another's run.started: its own wait counts from then
        while run is not None and run._gateway_starting is not None:  # type: ignore[attr-defined]
            since = time.monotonic() if since is None else since
            await run._gateway_starting.wait()  # type: ignore[attr-defined]  # another call of the session starts it
            run = connection.state.get(_RUN_STATE)  # None: its run.started could not be written
        if run is None:
            run = await self._start_run(ctx, connection, principal, since)
        elif run.principal.id != principal:
            raise _mcp_error()(codes.UNAUTHORIZED, "this session's run belongs to another identity")
        return run

    def _join(self, run_id: str, principal: str) -> RunContext:
        from mcp.shared.exceptions import MCPError

        from sealbox.events import SYSTEM_RUN_ID

        if run_id == SYSTEM_RUN_ID:
            raise MCPError(codes.UNKNOWN_RUN, f"run {SYSTEM_RUN_ID!r} is the store's own record (tool changes, "
                           "breakers, approvals); calls cannot join it")
        key = (run_id, principal)
        run = self._joined.get(key)
        if run is not None:
            now = self.store.get_run(run_id)  # ended since it was joined (by its own process, another session)?
            if now is None or now["status"] == "ended":
                del self._joined[key]
                raise MCPError(codes.UNKNOWN_RUN, f"run {run_id} has ended; it cannot be continued")
        else:
            from sealbox.errors import ConfigError

            try:
                run = self.recorder._attach(run_id)  # no liveness lease: the agent's process holds it
            except (RecordingError, ConfigError) as exc:  # ConfigError: an id no run can have (too long, a lone surrogate)
                if len(run_id) > 128:  # not echoed whole (the message quoted all of a 300-character id)
                    raise MCPError(codes.UNKNOWN_RUN, f"no run {shown_run_id(run_id)} can be joined: a run id is at "
                                   "most 128 characters") from exc
                from sealbox.approvals import shown_id  # how the recorder's "no run …" error quotes it

                raise MCPError(codes.UNKNOWN_RUN, str(exc).replace(shown_id(run_id), repr(shown_run_id(run_id)))) from exc
            if run.replay_of:  # an agent replayed in-process names its replay run as it named the recorded one
                raise MCPError(codes.UNKNOWN_RUN, f"run {run_id} is a replay of run {run.replay_of}: a live gateway "
                               "does not join it (its calls would run for real); serve the recorded calls with "
                               "`sealbox gateway replay`, or replay with tools from the record in-process")
            self._forget_ended_joins()
            if principal != run.principal.id:
                from sealbox.recorder import Principal

                run.principal = Principal(principal)
            # the run is joined once per identity: contexts of one run in this gateway number its steps
            # together (each read the run's next step when it joined, so two identities took the same steps)
            sibling = self._session_runs.get(run_id) or next(
                (other for (rid, _), other in self._joined.items() if rid == run_id), None)
            if sibling is not None:
                run.share_steps(sibling)
            self._joined[key] = run
            if sibling is None:  # the steps its calls were recorded at (before a restart, by its driving process)
                linked = {e.step for e in self.store.reader().events(["tool.call"], run_id=run_id) if "." in e.step}
                if linked:
                    self._linked_steps.setdefault(run_id, set()).update(linked)
            self._load_pending(run_id)
        return run

    def _forget_ended_joins(self) -> None:
        """Forget the contexts (and linked steps) of joined runs that have ended since they were joined.

        A joined run is ended by the process that drives it; the gateway noticed only on a later call to
        it, which never comes, so an HTTP gateway that each agent run joins kept one context per run ever
        joined. Looked for when a run is joined, at most every :attr:`joined_prune_s` seconds."""
        now = time.monotonic()
        if now - self._joined_pruned < self.joined_prune_s:
            return
        self._joined_pruned = now
        for run_id in {rid for rid, _ in self._joined}:
            row = self.store.get_run(run_id)
            if row is None or row["status"] == "ended":
                for key in [k for k in self._joined if k[0] == run_id]:
                    del self._joined[key]
                self._linked_steps.pop(run_id, None)

    def _load_pending(self, run_id: str) -> None:
        """Requests of a joined run still waiting to be resumed (a retry after a gateway restart finds them)."""
        for state in self._unresumed(run_id):
            self._add_pending(state)

    def _unresumed(self, run_id: str) -> list[Any]:
        """The approval states of the run's requests not yet resumed (store reads only: safe in a worker thread)."""
        from sealbox.approvals import get_approval

        out = []
        for ev in self.store.read_run(run_id):
            if ev.kind != "approval.requested":
                continue
            try:
                state = get_approval(self.store, ev.payload["approval_id"], run_id=run_id)
            except ApprovalError:
                continue
            if not state.resumed and not state.run_ended and state.malformed is None:  # malformed: never approvable
                out.append(state)
        return out

    async def _find_pending(self, run: RunContext, binding: str, principal: str) -> Pending | None:
        """The request a call of ``run`` with this binding and principal continues, or None (a new call).

        From memory; for a run some of whose requests were forgotten (:meth:`_prune_pending`), from the
        store when memory has none: its requests not yet resumed are read again (off the loop), so that
        a retry of a decided request still gets that request's outcome."""
        pending = self._pending.get(run.run_id, {}).get((binding, principal))
        if pending is not None or run not in self._pruned:
            return pending
        states = await anyio.to_thread.run_sync(self._unresumed, run.run_id)
        waiting = self._pending.get(run.run_id, {})
        for state in states:
            if (state.request["binding"], state.request.get("requested_by")) not in waiting:  # a live one stays
                self._add_pending(state)
        for ctx in [c for c in self._pruned if c.run_id == run.run_id]:  # every request is in memory again
            self._pruned.discard(ctx)
        return self._pending.get(run.run_id, {}).get((binding, principal))

    async def _prune_pending_loop(self) -> None:
        while True:
            await anyio.sleep(self.pending_prune_s)
            if self._pending:
                try:
                    await self._prune_pending()
                except Exception as exc:  # noqa: BLE001 - a store that cannot be read now is read next time
                    log.debug("could not look for decided approval requests: %s", exc)

    async def _prune_pending(self) -> None:
        """Forget the pending requests decided (approved, denied) or expired that no call holds, once
        ``limits.undelivered_keep_s`` has passed since the gateway first saw them so.

        Such a request stays in the store, unresumed; a client that never calls again (gone for good)
        no longer keeps it in memory for the life of the process. A retry after that (same run,
        principal and binding) reads the run's requests from the store again (:meth:`_find_pending`),
        so it still continues that request and gets its outcome; the run stays suspended, as it would
        have with the request in memory."""
        from sealbox.approvals import get_approval

        unseen = [p for waiting in self._pending.values() for p in waiting.values()
                  if p.decided_at is None and not p.holds]

        def decided() -> set[str]:
            out = set()
            for p in unseen:
                try:
                    state = get_approval(self.store, p.approval_id, run_id=p.run_id)
                except ApprovalError:
                    continue
                if state.status != "pending" or state.resumed or state.run_ended:
                    out.add(p.approval_id)
            return out

        now = time.monotonic()
        for aid in await anyio.to_thread.run_sync(decided) if unseen else ():
            for p in unseen:
                if p.approval_id == aid and p.decided_at is None:
                    p.decided_at = now
        keep = self.config.limits.undelivered_keep_s
        for run_id, waiting in list(self._pending.items()):
            for key, p in list(waiting.items()):
                if p.decided_at is None or p.holds or p.settled or now - p.decided_at < keep:
                    continue
                del waiting[key]
                self._hold_locks.pop(p.approval_id, None)
                log.info("approval %s of run %s: decided, no call retried it for %g s; forgotten here (a retry "
                         "finds it in the store)", p.approval_id, run_id, keep)
                for ctx in [self._session_runs.get(run_id), *(c for (rid, _), c in self._joined.items()
                                                             if rid == run_id)]:
                    if ctx is not None:
                        self._pruned.add(ctx)
            if not waiting:
                self._pending.pop(run_id, None)

    def _add_pending(self, state: Any) -> Pending:
        r = state.request
        pending = Pending(state.approval_id, state.run_id, r["call_id"], state.step, r["binding"], r["server"],
                          r["tool"], r.get("rule"), dict(r.get("ask") or {}), r.get("expires_at"),
                          r.get("requested_by"))
        self._pending.setdefault(state.run_id, {})[(pending.binding, pending.requested_by)] = pending
        return pending

    def _drop_pending(self, pending: Pending) -> None:
        pending.settled = True
        waiting = self._pending.get(pending.run_id, {})
        if waiting.get((pending.binding, pending.requested_by)) is pending:
            del waiting[(pending.binding, pending.requested_by)]
        if not waiting:
            self._pending.pop(pending.run_id, None)
        self._hold_locks.pop(pending.approval_id, None)

    def _binding(self, server: str, tool: str, arguments: dict[str, Any]) -> str:
        from sealbox.approvals import binding_hash
        from sealbox.canonical import encode

        return binding_hash(server, tool, encode(arguments), self.policy.fingerprint)

    def _link(self, run: RunContext, meta: Any) -> str | None:
        """The call id of a joined call, its step linked when ``_meta`` names one (``sealbox/step``).

        The process that drives the run (an SDK integration) recorded the model call that
        requested this call and assigned it a step ``"<n>.<i>"``; the call is recorded under
        that step and call id, not under a new top-level step of this process (which would
        collide with the driving process's own steps).

        Raises:
            MCPError: ``MALFORMED_REQUEST``: a key of the wrong shape, or a step or call id already used in this
                run as far as this gateway knows (one another writer of the run recorded since it last looked
                is found in the write of the call: :meth:`RunContext._check_call_free`, the same error).
        """
        from mcp.shared.exceptions import MCPError

        call_id = _meta_get(meta, CALL_ID_META_KEY)
        step = _meta_get(meta, STEP_META_KEY)
        if call_id is None and _meta_names(meta, CALL_ID_META_KEY):  # null: a call id never set, not "no call id"
            call_id = ""
        if call_id is not None and (not isinstance(call_id, str) or not call_id or len(call_id) > _MAX_CALL_ID
                                    or "\x00" in call_id):  # no store keeps a NUL in an identifier
            raise MCPError(codes.MALFORMED_REQUEST,
                           f"_meta[{CALL_ID_META_KEY!r}] must be a non-empty string of at most {_MAX_CALL_ID} characters"
                           " without a NUL character (\\x00)")
        if call_id is not None and call_id in run._call_ids:  # the recorder would refuse it (a ConfigError)
            raise MCPError(codes.MALFORMED_REQUEST, f"_meta[{CALL_ID_META_KEY!r}] = {call_id!r}: a call of run "
                           f"{run.run_id} was already recorded with that id")
        if step is None and not _meta_names(meta, STEP_META_KEY):  # null: a step never set, not "no step"
            return call_id
        if not is_call_step(step):
            raise MCPError(codes.MALFORMED_REQUEST, f"_meta[{STEP_META_KEY!r}] must be a tool call's step "
                           f"'<model step>.<i>' (e.g. '4.1'), not {'null' if step is None else repr(step)}")
        used = self._linked_steps.setdefault(run.run_id, set())
        if step in used:
            raise MCPError(codes.MALFORMED_REQUEST, f"_meta[{STEP_META_KEY!r}] = {step!r}: a call of run "
                           f"{run.run_id} was already recorded at that step")
        used.add(step)
        call_id = call_id or "call_" + uuid.uuid4().hex[:24]
        run.link_call(call_id, step)
        return call_id

    def _unlink(self, run: RunContext, call_id: str, meta: Any) -> None:
        """Free the step :meth:`_link` took for a call whose ``tool.call`` was not written (the gate's write
        failed): a retry of the call at that step is not refused as a step already recorded."""
        step = _meta_get(meta, STEP_META_KEY)
        if isinstance(step, str):
            self._linked_steps.get(run.run_id, set()).discard(step)
            run._links.pop(call_id, None)

    async def _start_run(self, ctx: Any, connection: Any, principal: str, since: float | None = None) -> RunContext:
        info = getattr(connection.client_params, "client_info", None)
        labels = {"sealbox.gateway": self.config.name, "mcp.protocol_version": str(connection.protocol_version)}
        if info is not None:
            labels["mcp.client.name"] = info.name
            labels["mcp.client.version"] = info.version or ""
        # an empty clientInfo.name is valid MCP, but no agent name: every call failed (code 0, nothing recorded)
        agent = (info.name if info is not None else "") or "mcp-client"
        if "\x00" in agent:  # no store keeps a NUL in an identifier: the recorder would refuse every call
            from mcp.shared.exceptions import MCPError

            raise MCPError(codes.MALFORMED_REQUEST, f"clientInfo.name {agent!r} holds a NUL character (\\x00), which "
                           "the agent name of a run cannot hold: nothing was recorded or forwarded")
        run = self.recorder.run(agent=agent, principal=principal, snapshot=self.snapshot(), labels=labels)
        run._gateway_inflight = 0  # type: ignore[attr-defined]
        run._gateway_idle = None  # type: ignore[attr-defined]  # an Event only while someone waits (_end_run)
        # the session's other calls wait for run.started (written off the loop when the store is busy)
        starting = run._gateway_starting = anyio.Event()  # type: ignore[attr-defined]
        connection.state[_RUN_STATE] = run
        try:
            await self._write(run.start, since)
        except BaseException:
            if connection.state.get(_RUN_STATE) is run:
                del connection.state[_RUN_STATE]
            raise
        finally:
            run._gateway_starting = None  # type: ignore[attr-defined]
            starting.set()
        self._session_runs[run.run_id] = run
        self._watch(connection)
        connection.exit_stack.push_async_callback(self._end_run, connection, run)
        return run

    async def _end_run(self, connection: Any, run: RunContext) -> None:
        """On disconnect: wait for the session's in-flight calls to be recorded, then end its run."""
        self._connections.pop(id(connection), None)
        self._session_runs.pop(run.run_id, None)
        with anyio.move_on_after(self.config.limits.call_timeout_s + 1, shield=True):
            if run._gateway_inflight > 0:  # type: ignore[attr-defined]
                if run._gateway_idle is None:  # type: ignore[attr-defined]
                    run._gateway_idle = anyio.Event()  # type: ignore[attr-defined]
                await run._gateway_idle.wait()  # type: ignore[attr-defined]
        if self._pending.get(run.run_id) or run in self._pruned:
            # a call waits for an approval: the run stays suspended (no run.ended), so the request can still
            # be answered; a client joining this run (sealbox/run_id) and retrying gets the outcome
            log.info("run %s stays suspended: approvals pending (%s)", run.run_id,
                     ", ".join(p.approval_id for p in self._pending.get(run.run_id, {}).values()) or "in the store")
            return
        if not _modern_version(connection.protocol_version):
            # the session's run ends: no retry can reach its kept outcomes (a stateless client's own run
            # ends with its one request; its retry, carrying requestState, is answered before joining)
            self._undelivered.discard_run(run.run_id)
        try:
            await self._write(lambda: run.end("ok"))
        except RecordingError as exc:
            log.error("could not record the end of run %s: %s", run.run_id, exc)

    def _principal(self, ctx: Any) -> str:
        request = getattr(ctx, "request", None)
        state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
        return state.get("sealbox_identity") or self.config.principal

    # ------------------------------------------------------------------ tools/call

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        # one client's calls in flight are capped (limits.max_calls_in_flight): each holds a task, its memory,
        # and while held for an approval a poll of the store; counted per MCP session (its Connection), and for
        # stateless (2026-07-28) requests, each its own connection, per identity
        client: tuple[str, Any] = ("identity", self._principal(ctx)) if _is_modern(ctx) else (
            "session", id(_connection(ctx)))
        cap = self.config.limits.max_calls_in_flight
        count = self._client_calls.get(client, 0)
        if count >= cap:
            log.warning("tools/call %s refused: its client already has %d calls in flight", shown_name(params.name),
                        count)
            raise _mcp_error()(codes.TOO_MANY_CALLS, f"too many calls in flight: this client already has {count} "
                               f"tools/call requests in flight (limits.max_calls_in_flight: {cap}); call again "
                               "once one has been answered", data={"limit": cap})
        self._client_calls[client] = count + 1
        self._calls += 1
        try:
            return await self._answer_call(ctx, params)
        finally:
            self._calls -= 1
            left = self._client_calls[client] - 1
            if left:
                self._client_calls[client] = left
            else:  # no entry kept for a client with none in flight (an id is reused once its connection is gone)
                del self._client_calls[client]

    async def _answer_call(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        target = self.split_name(params.name)
        if target is not None:  # a change the upstream announced before this call is listed (and pinned) first
            await self.upstreams[target[0]].current()
        if target is not None and target[1] not in self.upstreams[target[0]].tools \
                and self.upstreams[target[0]].state != "ready":
            # its upstream is not up (never started, down, restarting): whether the tool exists cannot be told;
            # "unknown tool" would send the client away from a tool that is only unavailable for now
            up = self.upstreams[target[0]]
            name = params.name if len(params.name) <= 128 else shown_name(params.name)
            raise _mcp_error()(codes.UPSTREAM_ERROR, f"tools/call {name}: upstream {up.spec.id} is {up.state}"
                               + (f" ({up.last_error})" if up.last_error else "") + "; call again once it is up",
                               data={"type": "UpstreamUnavailable", "upstream": up.spec.id})
        if target is None or target[1] not in self.upstreams[target[0]].tools:
            raise _mcp_error()(codes.UNKNOWN_TOOL, f"unknown tool {shown_name(params.name)}",
                               data=params.name[:256])
        server, tool = target
        upstream = self.upstreams[server]
        arguments = dict(params.arguments or {})
        principal = self._principal(ctx)
        modern = _is_modern(ctx)
        pending: Pending | None = None
        if getattr(params, "request_state", None) is not None:  # a stateless client retrying a held call
            binding = self._binding(server, tool, arguments)
            try:
                claims = open_state(self._state_key, params.request_state, binding=binding, principal=principal)
            except StateError as exc:
                raise _mcp_error()(codes.INVALID_REQUEST_STATE, str(exc)) from exc
            kept = self._undelivered.find(claims["run"], binding, principal)
            if kept is not None and kept.approval_id == claims["aid"]:  # settled for a call that did not get it
                return await self._hand_over(ctx, kept, served=True)  # before joining: its own run may have ended
            own_run = bool(claims.get("own"))
            try:
                run = self._join(claims["run"], principal)
            except _mcp_error() as exc:
                if not (own_run and exc.error.code == codes.UNKNOWN_RUN):
                    raise
                run = None  # the call's own run ends once its outcome is settled: that outcome was handed over
            pending = await self._find_pending(run, binding, principal) if run is not None else None
            if pending is None or pending.approval_id != claims["aid"]:
                return _error_result(f"approval {claims['aid']} is no longer pending here (its outcome was "
                                     "delivered to an earlier call); call again without requestState to ask anew",
                                     {"sealbox/approval": {"approval_id": claims["aid"], "status": "delivered"}})
        else:
            try:
                run = await self._run_for(ctx, params.meta, principal)
            except RecordingError as exc:  # the session's run.started not written: as a gate not written (step 3)
                return _failure(exc)
            own_run = modern and getattr(run, "_gateway_inflight", None) is not None
            if (self._undelivered.has_run(run.run_id) or run.run_id in self._pending
                    or (self._pruned and run in self._pruned)):
                binding = self._binding(server, tool, arguments)
                kept = self._undelivered.find(run.run_id, binding, principal)
                if kept is not None:  # a retry of a held call whose earlier call never got the outcome: that outcome
                    return await self._hand_over(ctx, kept, served=True)
                # a retry of a held call: same run, binding and principal
                pending = await self._find_pending(run, binding, principal)
        call_id: str | None = None
        if pending is None and getattr(run, "_gateway_inflight", None) is None:  # a joined run
            call_id = self._link(run, params.meta)
        if self.pins.current(server, tool) is not None:
            # a re-approval may have been recorded since, the key that signed this tool's re-approval declared
            # compromised, or its definition revoked (sealbox gateway revoke): any pinned tool's may be
            self.pins.refresh(self.store)
        # the id its tool.call will have (the recorder would draw the same kind): a request the upstream makes of
        # the client during the call is recorded under it (_route)
        record_id = call_id if call_id is not None else "call_" + os.urandom(12).hex()
        slot = _InFlight(ctx.session, ctx.request_id, _connection(ctx), run, record_id, tool=tool)
        key = id(slot)

        returned: list[types.CallToolResult] = []
        sent: list[bool] = []

        async def forwarded() -> dict[str, Any]:
            if self.pins.blocked(server, tool):  # changed since the call was decided (e.g. while it was held)
                self.pins.refresh(self.store)  # a re-approval may have been recorded since
                if self.pins.blocked(server, tool):
                    _NOT_FORWARDED.set(True)
                    raise ToolChangedSinceDecided(
                        f"not forwarded: tool {server}/{tool} changed upstream after this call was decided and has "
                        f"not been re-approved (rule {PIN_RULE}; {reapprove_command(self.config.store, server, tool, self.pins)})")
            problem = self._schema_problem(server, tool, arguments)
            if problem is not None:  # recorded as a failed call (tool.result ok: false), never forwarded
                _NOT_FORWARDED.set(True)  # not the upstream's failure: the breaker does not count it
                raise InvalidArguments(f"arguments do not match the input schema of {params.name}: {problem}")
            self._inflight[server][key] = slot
            sent.append(True)  # from here on the upstream may run it: a failure to record is not "not forwarded"
            try:
                result = await upstream.call(tool, arguments, progress=_progress_forwarder(ctx))
            except UpstreamProtocolError as exc:
                # its JSON-RPC error follows the gateway's refusal or the client's failed answer, or is the upstream's
                # refusal of the call (invalid params…): the upstream is healthy, the breaker does not count it
                if slot.refused or slot.unanswered or exc.refused:
                    _NOT_FORWARDED.set(True)
                raise
            except GatewayStopping:  # never written to the upstream: not forwarded, not the upstream's failure
                _NOT_FORWARDED.set(True)
                sent.clear()
                raise
            except UpstreamTimeout:
                if slot.unanswered:  # timed out while the upstream waited for the client (a person, a slow model)
                    _NOT_FORWARDED.set(True)
                raise
            finally:
                self._inflight[server].pop(key, None)
            returned.append(result)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        def forward(**_: Any) -> Any:  # not itself a coroutine function: the recorder's check of fn takes its quick path
            return forwarded()

        _busy(run, +1)
        try:
            if pending is None:
                # arguments the schema refuses are never forwarded, whatever the decision: a require_approval is
                # recorded as decided, but asks no approver (nothing could be approved to run)
                problem = self._schema_problem(server, tool, arguments)
                refused = None if problem is None else InvalidArguments(
                    f"arguments do not match the input schema of {params.name}: {problem}")
                try:
                    with anyio.CancelScope(shield=True):  # a client that goes away still leaves the outcome
                        if refused is not None:
                            _NOT_FORWARDED.set(True)  # not the upstream's failure: the breaker does not count it
                        try:
                            out = await run.acall_tool(server, tool, arguments, forward, exposed=params.name,
                                                       call_id=record_id, failure=tool_error_text, refused=refused)
                        finally:
                            _NOT_FORWARDED.set(False)  # a denied call: no failure took the mark
                except ApprovalPending as waiting:
                    pending = await self._remember(waiting)
                except Exception as exc:  # noqa: BLE001 - mapped to isError results; others re-raised
                    if isinstance(exc, StepTakenError):  # another writer of the run took its step or id first
                        self._unlink(run, call_id or exc.call_id, params.meta)  # the recorder remembers what it saw
                        raise _taken_error(exc) from None
                    if call_id is not None and call_id not in run._call_ids:  # no tool.call was written (the
                        self._unlink(run, call_id, params.meta)  # recorder freed the id): its step is free too
                    if sent and isinstance(exc, RecordingError):  # the tool.result, not the gate, was not written
                        return _unrecorded_result(exc)
                    return _failure(exc)
                else:  # the upstream's own result object: no second validation of what was just dumped
                    return returned[0] if returned else types.CallToolResult.model_validate(out, by_name=False)
            slot.call_id = pending.call_id  # forwarded (if ever) as the held call
            return await self._hold(ctx, run, pending, arguments, forward, modern=modern, principal=principal,
                                    own_run=own_run)
        finally:
            _busy(run, -1)

    # ------------------------------------------------------------------ approvals (sealbox.gateway.holds)

    async def _remember(self, waiting: ApprovalPending) -> Pending:
        from sealbox.approvals import get_approval

        state = await anyio.to_thread.run_sync(
            lambda: get_approval(self.store, waiting.approval_id, run_id=waiting.run_id))
        return self._add_pending(state)

    async def _hold(self, ctx: Any, run: RunContext, pending: Pending, arguments: dict[str, Any], forward: Any, *,
                    modern: bool, principal: str, own_run: bool) -> Any:
        """Hold a call for its approval up to ``limits.approval_hold_s``; then its outcome, or "pending".

        Every call of the request still held when it is settled gets the same outcome (the tool runs
        once, settled under the request's lock by whichever hold saw the decision first); a call
        that did not settle it itself is marked ``delivered_on_retry`` (:meth:`_hand_over`)."""
        from sealbox.approvals import get_approval

        aid = pending.approval_id
        lock = self._hold_locks.setdefault(aid, anyio.Lock())
        noted: set[tuple[str, int]] = set()  # withdrawn approvals this hold had claim() note in the log
        now = anyio.current_time()
        deadline = now + self.config.limits.approval_hold_s
        next_progress = now
        reports = _has_progress_token(ctx)
        answer: types.CallToolResult | None = None  # not the request's outcome: the resumption was not recorded
        served = False  # the outcome was settled by another call of this request
        # its state once another gateway process is seen to have resumed it: final, not read again; each poll
        # then only looks for the call's tool.result (_resumed_elsewhere), with no claim (no write lock)
        elsewhere: Any = None
        self._holding += 1
        pending.holds += 1
        async with anyio.create_task_group() as tg:
            if not modern and not pending.informed and _can_elicit(ctx):
                pending.informed = True
                tg.start_soon(self._inform, ctx, run, pending)
            try:
                while not self.stopping:
                    if pending.settled:  # another call of this request (the earlier one, or a retry) settled it
                        served = True
                        break
                    state = elsewhere or await anyio.to_thread.run_sync(
                        lambda: get_approval(self.store, aid, run_id=pending.run_id))
                    # an approval withdrawn (its identity disabled or re-keyed before the call ran): claim notes
                    # it, once
                    withdrawn = {(a.identity, a.leaf_index) for a in state.answers if a.withdrawn_by is not None}
                    if state.status != "pending" or state.resumed or state.run_ended or not withdrawn <= noted:
                        noted |= withdrawn
                        async with lock:
                            # whether its own request was settled, not whether it is still the request a retry
                            # would find: two calls with the same arguments made at once are two requests
                            if pending.settled:
                                served = True
                                break
                            if state.resumed:  # not by this process (it would have settled it): by another one
                                elsewhere = state
                            answer = await self._settle(run, pending, arguments, forward, own_run, state)
                            if pending.settled or answer is not None:
                                break
                    now = anyio.current_time()
                    if now >= deadline:
                        break
                    if reports and now >= next_progress:
                        next_progress = now + self.progress_interval
                        try:
                            await ctx.session.report_progress(
                                round(now - deadline + self.config.limits.approval_hold_s, 3), None,
                                f"waiting for approval {aid} ({_who(pending)}); decided with "
                                f"`sealbox approvals approve|deny {aid} --reason TEXT --key-file KEY`")
                        except Exception:  # noqa: BLE001 - progress is advisory
                            log.debug("could not send a progress notification")
                    await anyio.sleep(min(self.approval_poll, max(0.0, deadline - now)))
            finally:
                self._holding -= 1
                pending.holds -= 1
                tg.cancel_scope.cancel()
        if pending.settled:
            return await self._hand_over(ctx, pending, served=served)
        if answer is not None:
            return answer
        info = {"approval_id": aid, "status": "pending", "run_id": pending.run_id, "call_id": pending.call_id,
                "binding": pending.binding, "rule": pending.rule, "ask": pending.ask,
                "expires_at": pending.expires_at}
        if modern:
            ttl = max(60.0, _seconds_until(pending.expires_at) + 60.0)
            token = seal_state(self._state_key, approval_id=aid, run_id=pending.run_id, binding=pending.binding,
                               principal=principal, own_run=own_run, ttl_s=ttl)
            return types.InputRequiredResult(request_state=token, _meta={"sealbox/approval": info})
        # a retry continues this request only in its run: a stdio client that exits and calls again is a
        # new session, a new run and a new request, so the message names the run
        again = ("the gateway is shutting down; call again with the same arguments once it is back"
                 if self.stopping else
                 f"call again with the same arguments in run {pending.run_id} (this session, or a client naming it "
                 f"in _meta[\"sealbox/run_id\"]: a new session is a new run and a new request)")
        if self.stopping:
            info["gateway"] = "shutting_down"
        return _error_result(f"approval {aid} pending; {again} "
                             f"(it is decided by {_who(pending)} with `sealbox approvals approve {aid} --reason TEXT --key-file KEY`; "
                             f"expires {pending.expires_at}) [call {pending.call_id}]", {"sealbox/approval": info})

    async def _settle(self, run: RunContext, pending: Pending, arguments: dict[str, Any], forward: Any,
                      own_run: bool, state: Any = None) -> types.CallToolResult | None:
        """Claim a decided request once (``run.resumed``); approved: forward once and record the result.

        Returns the request's outcome (also set as ``pending.outcome``, ``pending.settled`` and kept
        as undelivered until :meth:`_hand_over` gives it to a live request); None while it is
        still pending; an ``isError`` result that is *not* an outcome (the request is not settled,
        a retry tries again) when ``run.resumed`` could not be recorded.

        ``state``: the request's state as the hold last read it; when it is already resumed (by another
        gateway process on this store) nothing is claimed, which would take the store's write lock only
        to be refused: the outcome is read from the record (:meth:`_resumed_elsewhere`)."""
        from sealbox.pause import _denial, claim

        aid = pending.approval_id
        with anyio.CancelScope(shield=True):  # a client that goes away still leaves the outcome, kept for its retry
            if state is not None and state.resumed:
                elsewhere = await anyio.to_thread.run_sync(self._resumed_elsewhere, run, pending, state)
                return None if elsewhere is None else self._settled(pending, elsewhere)
            try:
                claimed = await self._write(lambda: claim(run, aid, arguments))
            except ApprovalError as exc:
                if exc.code == "already_resumed":  # by another gateway process on this store: its outcome
                    elsewhere = await anyio.to_thread.run_sync(self._resumed_elsewhere, run, pending, None)
                    return None if elsewhere is None else self._settled(pending, elsewhere)
                return self._settled(pending, _error_result(
                    f"approval {aid}: {exc}", {"sealbox/approval": {"approval_id": aid, "error": exc.code}}))
            except RecordingError as exc:
                return _error_result(f"not forwarded: the resumption could not be recorded ({exc})",
                                     {"sealbox/not_forwarded": "recording_failed"})
            if claimed is None:
                return None
            state, outcome, decision = claimed
            if outcome != "approved":
                result = _failure(_denial(run, state, outcome, decision))
            else:
                started = time.perf_counter_ns()
                try:
                    out = await forward()
                except Exception as exc:  # noqa: BLE001 - recorded, then mapped to an isError result
                    try:
                        await run.arecord_result(pending.server, pending.tool, pending.call_id, pending.step, started,
                                                 error=exc, arguments=arguments)
                    except RecordingError as unrecorded:  # the failure is answered all the same
                        log.error("could not record the result of call %s: %s", pending.call_id, unrecorded)
                    result = _failure(exc)
                else:
                    try:
                        await run.arecord_result(pending.server, pending.tool, pending.call_id, pending.step, started,
                                                 result=out, arguments=arguments, failure=tool_error_text(out))
                    except RecordingError as unrecorded:  # it ran: never "not forwarded", nor run again on a retry
                        result = _unrecorded_result(unrecorded)
                    else:
                        result = types.CallToolResult.model_validate(out, by_name=False)
            self._settled(pending, result)
            if not self._pending.get(run.run_id) and run not in self._pruned:
                run.suspended = False
                if own_run and getattr(run, "_gateway_inflight", None) is None:
                    # a stateless client's own run (one call): it ends once the call's outcome is settled (a
                    # retry of a call that did not get it is answered from what was kept, without the run)
                    try:
                        await self._write(lambda: run.end("ok"))
                    except RecordingError as exc:
                        log.error("could not record the end of run %s: %s", run.run_id, exc)
            return result

    def _resumed_elsewhere(self, run: RunContext, pending: Pending, state: Any) -> types.CallToolResult | None:
        """The outcome of a request another process resumed (its ``run.resumed`` is in the store, not
        this gateway's), read from the record; None while its approved call has no ``tool.result`` yet
        (the other process runs it: the hold goes on). Store reads only (a worker thread).

        The denial is rebuilt as the resuming process answered it; an approved call's result is its
        recorded ``tool.result``, its blobs resolved and its stored form decoded (:func:`sealbox.canonical.decode`:
        a ``"$"``-keyed dict the store keeps as ``{"$esc": {...}}`` is served as the tool returned it; in a
        store whose content mode is not ``full`` the record holds markers, not the result: an ``isError``
        result says where it is). Never a second approval, never a
        second run of the tool. ``_meta["sealbox/approval"]`` says ``delivered_on_retry`` and
        ``from_record``.

        ``state``: the request's state, resumed (None: read here). Called on every poll while the other
        process runs the call: it reads only that call's events of the kind it needs (the store's
        ``events_call`` index, :meth:`Reader.call_events <sealbox.store.sqlite_queries.Reader.call_events>`),
        never the whole run, so a long run does not make a poll slower."""
        from sealbox.approvals import get_approval
        from sealbox.canonical import decode
        from sealbox.pause import _denial

        if state is None:
            state = get_approval(self.store, pending.approval_id, run_id=pending.run_id)
        reader = self.store.reader()
        meta = {"approval_id": pending.approval_id, "status": DELIVERED_ON_RETRY, "run_id": pending.run_id,
                "call_id": pending.call_id, "from_record": True}
        outcome = state.outcome
        if outcome is None:  # its run.resumed is malformed or names no outcome for it
            return _error_result(f"approval {pending.approval_id} was resumed by another process, and the record "
                                 f"gives no outcome for it; the call is not run again [call {pending.call_id}]",
                                 {"sealbox/approval": {**meta, "error": "already_resumed"}})
        if outcome != "approved":
            decision = None
            again = [e.payload for e in reader.call_events(run.run_id, pending.call_id, "policy.decision")
                     if e.payload.get("reevaluated")]
            if again:
                d = again[-1]
                decision = Decision(d.get("effect"), d.get("reason_code"), d.get("rule"), str(d.get("reason", "")),
                                    str(d.get("policy_fingerprint", "")))
            denied = _failure(_denial(run, state, outcome, decision))
            return denied.model_copy(update={"meta": {**(denied.meta or {}), "sealbox/approval": meta}})
        result = next((e.payload for e in reader.call_events(run.run_id, pending.call_id, "tool.result")), None)
        if result is None:
            return None
        if "result" in result:
            problem = None
            try:
                value = self.store.resolve(result["result"])
                if _holds_marker(value):  # redacted (or hashes-only): the record is not what the tool answered
                    problem = "the record holds redaction markers in its place (content mode " + str(
                        getattr(getattr(self.store, "content", None), "mode", "?")) + ")"
                else:  # the stored form decoded ({"$esc": ...} of a "$"-keyed dict, "$bytes"...), as replay serves it
                    out = types.CallToolResult.model_validate(decode(value), by_name=False)
            except Exception as exc:  # noqa: BLE001 - an erased blob, a result no longer valid
                problem = str(exc)
            if problem is not None:
                return _error_result(f"approval {pending.approval_id} was resumed by another process, which ran the "
                                     f"call (ok: {str(result.get('ok')).lower()}); its result cannot be served from "
                                     f"the record: {problem} (`sealbox runs show {run.run_id}`); the call is not run "
                                     f"again [call {pending.call_id}]", {"sealbox/approval": meta})
            return out.model_copy(update={"meta": {**(out.meta or {}), "sealbox/approval": meta}})
        error = result.get("error") if isinstance(result.get("error"), dict) else {}
        kind, message = str(error.get("type")), str(error.get("message"))
        extra = ({"sealbox/upstream_error": kind} if kind in ("UpstreamUnavailable", "UpstreamTimeout",
                                                             "UpstreamProtocolError", "CutAtShutdown")
                 else {"sealbox/not_forwarded": {"InvalidArguments": "invalid_arguments",
                                                 "ToolChangedSinceDecided": "tool_changed",
                                                 "GatewayStopping": "gateway_stopping"}[kind]}
                 if kind in ("InvalidArguments", "ToolChangedSinceDecided", "GatewayStopping") else {})
        text = f"upstream error: {message}" if "sealbox/upstream_error" in extra else message
        return _error_result(text, {**extra, "sealbox/approval": meta})

    def _settled(self, pending: Pending, outcome: types.CallToolResult) -> types.CallToolResult:
        """Record ``outcome`` as the request's: no longer pending, kept until it is delivered."""
        pending.outcome = outcome
        self._drop_pending(pending)
        try:
            size = len(outcome.model_dump_json(by_alias=True, exclude_none=True))
        except Exception:  # noqa: BLE001 - a result pydantic cannot dump again: too odd to keep
            size = self._undelivered.max_bytes + 1
        self._undelivered.keep(pending, size)
        return outcome

    async def _hand_over(self, ctx: Any, pending: Pending, *, served: bool) -> types.CallToolResult:
        """Answer a call the outcome of its settled request; only a live request takes it off the kept ones.

        A cancellation already received for this request (its client cancelled it, or timed out
        and said so with ``notifications/cancelled``; a closed connection) is raised here, and a
        streamable HTTP request whose client disconnected is answered into the void: in both cases
        the outcome stays kept (:class:`~sealbox.gateway.holds.Undelivered`) for a retry. ``served``:
        this call did not settle the request itself (its outcome came from another call of the same
        request), so ``_meta["sealbox/approval"]`` says so (status ``delivered_on_retry``)."""
        await anyio.lowlevel.checkpoint()  # the request's cancellation, if any, is raised here: nothing delivered
        if _client_gone(ctx):
            log.info("approval %s: the client of call %s disconnected; its outcome is kept for a retry",
                     pending.approval_id, pending.call_id)
        else:
            self._undelivered.discard(pending)  # delivered: a later identical call is a new call
        outcome = pending.outcome
        if not served:
            return outcome
        meta = dict(outcome.meta or {})
        own = meta.get("sealbox/approval")  # an approval error's outcome says which (``error``): kept
        meta["sealbox/approval"] = {**(own if isinstance(own, dict) else {}), "approval_id": pending.approval_id,
                                    "status": DELIVERED_ON_RETRY, "run_id": pending.run_id, "call_id": pending.call_id}
        return outcome.model_copy(update={"meta": meta})

    async def _inform(self, ctx: Any, run: RunContext, pending: Pending) -> None:
        """Tell the person at the client what is pending and where it is decided (never an approval).

        Recorded like a request an upstream makes of the client (:class:`_InformRecord`): the elicitation
        before it is sent (not recorded: not sent), the client's answer (or its end) after; the answer
        is ignored."""
        message = (f"Sealbox: the call {pending.server}/{pending.tool} needs approval {pending.approval_id} "
                   f"(rule {pending.rule}). It is decided by {_who(pending)}, with `sealbox approvals approve "
                   f"{pending.approval_id} --reason TEXT --key-file KEY` or `deny` - not here: nothing answered in this dialog approves or "
                   f"denies it. The call is held for up to {self.config.limits.approval_hold_s:g} s; after that, "
                   "call again with the same arguments.")
        schema: dict[str, Any] = {"type": "object", "properties": {}}
        record = _InformRecord(self, run, pending)
        try:
            await record.asked({"mode": "form", "message": message, "requestedSchema": schema})
        except RecordingError as exc:
            log.error("the client was not told about approval %s: it could not be recorded: %s", pending.approval_id, exc)
            return
        started = time.perf_counter_ns()
        outcome: str | None = None
        try:
            answer: Any = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
        except BaseException as exc:
            if isinstance(exc, Exception):  # informational only: the client could not be told, or answered an error
                error = getattr(exc, "error", None)
                answer = error if isinstance(error, types.ErrorData) else types.ErrorData(
                    code=types.INTERNAL_ERROR, message=f"elicitation/create: the client could not answer: {exc}")
                outcome = None if isinstance(error, types.ErrorData) else "error"
            else:  # the hold ended first (the call was settled, or its hold time ran out)
                answer, outcome = None, "cancelled"
            with anyio.CancelScope(shield=True):
                try:
                    await record.answered(answer, started, outcome=outcome)
                except RecordingError as rec:
                    log.error("the end of the gateway's elicitation about approval %s could not be recorded: %s",
                              pending.approval_id, rec)
            if not isinstance(exc, Exception):
                raise
            log.debug("the client could not be told about approval %s", pending.approval_id)
            return
        try:
            await record.answered(answer, started)
        except RecordingError as exc:
            log.error("the client's answer about approval %s could not be recorded: %s", pending.approval_id, exc)

    def _schema_problem(self, server: str, tool: str, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not match the tool's input schema, or None (they do, or it cannot be used).

        The schema comes from the upstream: its ``$ref`` are resolved within the schema only, never
        fetched (no ``http://``, no ``file://``). A schema that is invalid, or has a reference that
        cannot be resolved locally, is left to the upstream to apply (the call is forwarded)."""
        spec = self.upstreams[server].tools.get(tool)
        cached = self._validators.get((server, tool))
        validator, quick = (cached[1], cached[2]) if cached is not None and cached[0] is spec else (None, None)
        if quick is not None and quick(arguments):  # the common case: surely valid (validator is not False)
            return None
        import jsonschema

        if validator is None:  # a new listing: new Tool
            schema = (spec.input_schema if spec is not None else None) or {}
            try:
                cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
                cls.check_schema(schema)
                if not linear_regexes(schema):  # a regex only a backtracking engine runs: the upstream validates
                    raise ValueError("regex outside the linear-time engine")
                validator = _linear_validator(cls)(schema, registry=_LOCAL_ONLY)
                quick = quick_schema_check(schema)
            except Exception:  # noqa: BLE001 - SchemaError, or a schema jsonschema cannot even read
                validator = False  # an upstream with a broken schema: the upstream validates
            self._validators[(server, tool)] = (spec, validator, quick)
            if validator is not False and quick is not None and quick(arguments):  # surely valid
                return None
        if validator is False:
            return None
        # not surely valid by the quick check: jsonschema decides (and gives the message)
        try:
            if validator.is_valid(arguments):
                return None
            error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        except Exception as exc:  # noqa: BLE001 - an unresolvable (non-local) $ref, a bad pattern...
            log.info("the input schema of %s/%s cannot be applied here (%s); the upstream validates",
                     server, tool, type(exc).__name__)
            self._validators[(server, tool)] = (spec, False, None)
            return None
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        message = error.message
        if len(message) > MAX_SCHEMA_MESSAGE:
            # jsonschema's message holds the value's repr: a large one is not sent back to the model, nor recorded a
            # second time; not cut either (a cut would split a secret the record scrubs as a whole)
            rule = repr(error.validator_value)
            rule = rule if len(rule) <= 120 else rule[:120] + "…"
            message = (f"the {_json_kind(error.instance)} given does not match the schema's {error.validator}: {rule} "
                       f"(its message, {len(message)} characters long, is not shown)")
        return f"{where}: {message}"

    # ------------------------------------------------------------------ upstream -> client requests

    async def _route(self, upstream: Upstream, method: str, params: Any) -> Any:
        """Forward an upstream's request to the client whose call is in flight on that upstream,
        recording it in that call's run (:class:`_ClientRequestRecord`): the request before it is
        forwarded (not recorded: not forwarded, the upstream gets an ``INTERNAL_ERROR``), the answer
        before it is returned (not recorded: the upstream gets an ``INTERNAL_ERROR`` instead of it).

        A request that cannot be routed (no call, or calls of several clients, in flight) is not
        forwarded and not recorded (no run it belongs to); ``roots/list`` then answers no roots."""
        slots = list(self._inflight.get(upstream.spec.id, {}).values())
        by_conn = {id(s.connection): s for s in slots}
        if len(by_conn) != 1:
            if method == "roots/list":
                return types.ListRootsResult(roots=[])
            why = "no client call is in flight" if not by_conn else "calls of several clients are in flight"
            for each in slots:  # the gateway's refusal: a call failing on it says nothing of the upstream's health
                each.refused = True
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message=f"{method} from {upstream.spec.id} cannot be routed: {why}")
        slot = next(iter(by_conn.values()))
        record = _ClientRequestRecord(self, upstream.spec.id, method, slots)
        asked = params.model_dump(by_alias=True, mode="json", exclude_none=True) if params is not None else None
        try:
            await record.asked(asked)
        except RecordingError as exc:
            log.error("%s from upstream %s not forwarded: it could not be recorded: %s", method, upstream.spec.id, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"{method} was not forwarded to the client: "
                                   "the gateway could not record it")
        started = time.perf_counter_ns()
        for each in slots:  # stays counted if the upstream's request ends before the client answered (cancelled)
            each.unanswered += 1
            if each.run is not None and each.call_id is not None and each.tool is not None:
                # a half-open breaker's probe waiting for the client (a person, a slow model) says nothing of the
                # upstream's health meanwhile: handed back, so the next call of the tool probes rather than being
                # refused breaker_open until this one ends (its outcome still counts if no other call probed)
                each.run.hand_back_probe(upstream.spec.id, each.tool, each.call_id)
        try:
            answer, outcome = await self._ask_client(slot, method, params)
            for each in slots:
                each.unanswered -= 1
            if outcome is not None or isinstance(answer, types.ErrorData) or (
                    isinstance(answer, types.ElicitResult) and answer.action != "accept"):
                # refused by the gateway, or the client answered with an error, did not answer in time, could not be
                # asked, declined: a failure of the call that follows is the client's side (see _GatewayBreaker)
                for each in slots:
                    each.refused = True
        except BaseException:
            with anyio.CancelScope(shield=True):  # the upstream's request ended before the client answered
                try:
                    await record.answered(None, started, outcome="cancelled")
                except RecordingError as exc:
                    log.error("the end of %s from upstream %s could not be recorded: %s", method, upstream.spec.id, exc)
            raise
        try:
            await record.answered(answer, started, outcome=outcome)
        except RecordingError as exc:
            log.error("the answer to %s from upstream %s not returned: it could not be recorded: %s", method,
                      upstream.spec.id, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the client's answer to {method} was not "
                                   "returned: the gateway could not record it")
        return answer

    async def _ask_client(self, slot: _InFlight, method: str, params: Any) -> tuple[Any, str | None]:
        """``(answer, outcome)``: the client's answer to ``method`` (a result model, or the ``ErrorData`` it
        answered: outcome None, read from the answer), or the gateway's ``ErrorData`` with outcome
        ``not_forwarded`` (the client did not declare the capability, or for an elicitation its mode: ``url``
        needs ``elicitation.url``, form needs ``elicitation.form`` or an empty ``elicitation``), ``timeout`` (``REQUEST_TIMEOUT`` after
        ``limits.call_timeout_s`` plus :data:`CLIENT_REQUEST_GRACE_S`: the call it was asked in has timed out by
        then, and an upstream that did not cancel its request is answered so that nothing waits for ever) or
        ``error`` (the client could not be asked)."""
        from mcp.shared.exceptions import MCPError
        from mcp.shared.message import ServerMessageMetadata

        if not _client_can(slot.session, method):
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"{method} was not forwarded: the client did "
                                   f"not declare the {_CAPABILITY[method]} capability"), "not_forwarded"
        if method == "elicitation/create" and not _can_elicit_mode(slot.session, _elicit_mode(params)):
            mode = _elicit_mode(params)
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"{method} (mode {mode}) was not forwarded: "
                                   f"the client did not declare the elicitation.{mode} capability"), "not_forwarded"
        request, result_type = _SERVER_REQUESTS[method]
        limit = self.config.limits.call_timeout_s + CLIENT_REQUEST_GRACE_S
        try:
            req = request(params=params) if params is not None else request()
            with anyio.fail_after(limit):
                return await slot.session.send_request(
                    req, result_type, metadata=ServerMessageMetadata(related_request_id=slot.request_id)), None
        except MCPError as exc:
            return exc.error, None
        except TimeoutError:
            return types.ErrorData(code=types.REQUEST_TIMEOUT, message=f"{method}: the client did not answer within "
                                   f"{limit:g} s (limits.call_timeout_s + {CLIENT_REQUEST_GRACE_S:g} s)"), "timeout"
        except Exception as exc:  # noqa: BLE001 - a client that cannot answer is an error to the upstream, not a crash
            return types.ErrorData(code=types.INTERNAL_ERROR,
                                   message=f"{method}: the client could not answer: {exc}"), "error"


#: Seconds past ``limits.call_timeout_s`` the gateway waits for the client's answer to an upstream's request.
CLIENT_REQUEST_GRACE_S = 5.0
#: ``note`` principal of the records of requests an upstream made of the client (Sealbox wrote them).
CLIENT_REQUEST_PRINCIPAL = "sealbox"
#: The client capability each forwarded method needs (MCP: a server must not send a request the client did not declare).
_CAPABILITY = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}
#: What the records of a forwarded request say of the client's answer.
NOT_AN_APPROVAL = ("the client's answer is not a Sealbox approval: approvals come only from approver identities, "
                   "signed with their keys")


class _ClientRequestRecord:
    """The ``note`` events recording one request an upstream made of the client during a call
    (docs/gateway.md, "Requests an upstream makes of the client"): ``asked`` before it is
    forwarded, ``answered`` before the answer goes back, in the run of each call in flight (one
    run nearly always), at the step of the call's ``tool.call``, principal ``sealbox``.

    ``payload.client_request`` (never redacted: ids, names, outcome, timing) is ``{id, state:
    "asked" | "answered", upstream, method, call_id}`` (``call_id`` null when several calls of
    the client were in flight on that upstream; ``calls`` then lists them) and, answered,
    ``outcome`` (``accept`` / ``decline`` / ``cancel`` for an elicitation; ``result``; ``error``;
    ``timeout``; ``not_forwarded`` (no such client capability, or elicitation mode); ``cancelled`` (the upstream's
    request ended first)), ``waited_us`` and, for an error, ``error_code``. ``about`` holds the
    content, redacted like every content field (docs/content-modes.md): ``{"params": …}`` (the
    request's params as sent; absent for ``roots/list``), ``{"result": …}`` or ``{"error":
    {code, message}}``."""

    def __init__(self, gateway: "Gateway", upstream: str, method: str, slots: list[_InFlight]) -> None:
        self.gateway, self.upstream, self.method = gateway, upstream, method
        self.id = "creq_" + os.urandom(8).hex()
        runs: dict[int, tuple[Any, list[str]]] = {}
        for s in slots:
            if s.run is not None:
                runs.setdefault(id(s.run), (s.run, []))[1].append(s.call_id)
        self.runs = list(runs.values())

    def _meta(self, state: str, call_ids: list[str]) -> dict[str, Any]:
        meta: dict[str, Any] = {"id": self.id, "state": state, "upstream": self.upstream, "method": self.method,
                                "call_id": call_ids[0] if len(call_ids) == 1 else None}
        if len(call_ids) > 1:
            meta["calls"] = sorted(c for c in call_ids if c is not None)
        return meta

    async def _write(self, text: str, meta: dict[str, Any], about: Any, not_values: frozenset[str] = frozenset()) -> None:
        """One note in each run. The strings the store redacts from ``about`` by a key name or path join the run's
        redacted values (scrubbed from what it records later), but for ``not_values``: the words of a requested
        schema (``"string"`` under a property named ``password``) are no one's secret."""
        from sealbox.store.base import noting_redacted

        if not self.runs:  # every call in flight has its run: never in practice
            raise RecordingError(f"{self.method} from upstream {self.upstream}: no run to record it in")
        for run, call_ids in self.runs:
            described = self._meta(meta["state"], call_ids)
            described.update((k, v) for k, v in meta.items() if k != "state")
            payload: dict[str, Any] = {"text": text, "client_request": described}
            if about is not None:
                payload["about"] = run._without_echoed_secrets(about)
            first = next((c for c in call_ids if c is not None), None)

            def build(reader: Any, run: Any = run, payload: dict[str, Any] = payload, first: Any = first) -> list[Any]:
                from sealbox.events import EventDraft

                step = _call_step(reader, run.run_id, first)
                return [EventDraft("note", payload, run_id=run.run_id, principal=CLIENT_REQUEST_PRINCIPAL, step=step)]

            def write(run: Any = run, build: Any = build) -> Any:
                found: set[str] = set()
                with noting_redacted(found):
                    written = run._guard(lambda: self.gateway.store.append_with(build))
                run._remember_secrets(sorted(found - not_values))
                return run._placed(written)

            await self.gateway._write(write)

    async def asked(self, params: Any) -> None:
        """Record the request (before it is forwarded). Raises RecordingError."""
        text = (f"upstream {self.upstream} asks the client: {self.method} (recorded before it is forwarded; "
                f"{NOT_AN_APPROVAL})")
        schema = params.get("requestedSchema") if isinstance(params, dict) else None
        await self._write(text, {"state": "asked"}, None if params is None else {"params": params},
                          frozenset(_strings_in(schema)))

    async def answered(self, answer: Any, started_ns: int, *, outcome: str | None = None) -> None:
        """Record the answer: a result model or an ``ErrorData`` (the client's: ``outcome`` None; or the
        gateway's, with its ``outcome``), or None with ``outcome`` ``cancelled``. Raises RecordingError."""
        waited_us = (time.perf_counter_ns() - started_ns) // 1000
        about: Any = None
        meta: dict[str, Any] = {"state": "answered"}
        if isinstance(answer, types.ErrorData):
            outcome = outcome or "error"
            meta["error_code"] = answer.code
            about = {"error": {"code": answer.code, "message": answer.message}}
        elif answer is not None:
            dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            outcome = dumped.get("action", "result") if self.method == "elicitation/create" else "result"
            about = {"result": dumped}
        meta.update({"outcome": outcome, "waited_us": waited_us})
        said = {"accept": "accepted", "decline": "declined", "cancel": "cancelled", "result": "answered",
                "error": "answered with an error", "timeout": "did not answer in time",
                "not_forwarded": "was not asked (it lacks the capability)",
                "cancelled": "did not answer (the upstream's request ended first)"}.get(outcome, outcome)
        text = f"the client {said}: {self.method} of upstream {self.upstream} ({NOT_AN_APPROVAL})"
        await self._write(text, meta, about)


class _InformRecord(_ClientRequestRecord):
    """The ``note`` events recording the gateway's own elicitation telling the person at the client that a
    call is held for approval (:meth:`Gateway._inform`): as :class:`_ClientRequestRecord`, in the held
    call's run at its step, but ``client_request`` says ``asked_by: "gateway"``, ``upstream`` null (no
    upstream asked) and ``approval_id``; the texts say it is informational. The client's answer
    (``accept`` / ``decline`` / ``cancel``) approves and denies nothing; outcome ``cancelled``: the hold
    ended (the call was settled, or held as long as it may be) before the client answered."""

    def __init__(self, gateway: "Gateway", run: Any, pending: Pending) -> None:
        super().__init__(gateway, pending.server, "elicitation/create", [])
        self.pending = pending
        self.runs = [(run, [pending.call_id])]

    def _meta(self, state: str, call_ids: list[str]) -> dict[str, Any]:
        return {"id": self.id, "state": state, "asked_by": "gateway", "upstream": None, "method": self.method,
                "call_id": self.pending.call_id, "approval_id": self.pending.approval_id}

    async def asked(self, params: Any) -> None:
        """Record the elicitation (before it is sent). Raises RecordingError."""
        p = self.pending
        text = (f"the gateway tells the client that call {p.server}/{p.tool} is held for approval {p.approval_id} "
                f"(recorded before it is sent; informational: nothing answered to it approves or denies the call; "
                f"{NOT_AN_APPROVAL})")
        await self._write(text, {"state": "asked"}, {"params": params})

    async def answered(self, answer: Any, started_ns: int, *, outcome: str | None = None) -> None:
        """Record the client's answer (or, ``outcome`` ``cancelled``, that the hold ended first). Raises
        RecordingError."""
        waited_us = (time.perf_counter_ns() - started_ns) // 1000
        about: Any = None
        meta: dict[str, Any] = {"state": "answered"}
        if isinstance(answer, types.ErrorData):
            outcome = outcome or "error"
            meta["error_code"] = answer.code
            about = {"error": {"code": answer.code, "message": answer.message}}
        elif answer is not None:
            dumped = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            outcome = dumped.get("action", "result")
            about = {"result": dumped}
        meta.update({"outcome": outcome, "waited_us": waited_us})
        said = {"accept": "accepted", "decline": "declined", "cancel": "cancelled",
                "error": "answered with an error",
                "cancelled": "did not answer (the hold ended first)"}.get(outcome or "", outcome)
        text = (f"the client {said}: the gateway's elicitation/create about approval {self.pending.approval_id} "
                f"(informational: it approves and denies nothing; {NOT_AN_APPROVAL})")
        await self._write(text, meta, about)


def _strings_in(value: Any) -> list[str]:
    """Every string value inside ``value`` (dict keys aside; iterative: any depth)."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _call_step(reader: Any, run_id: str, call_id: str | None) -> str:
    """The step of the ``tool.call`` ``call_id`` of ``run_id`` (read in the write transaction); else the run's
    newest event's step (a call id not recorded: never in practice)."""
    if call_id is not None:
        found = reader.events(["tool.call"], run_id=run_id, field=("call_id", call_id), limit=1)
        if found:
            return found[0].step
    newest = reader.events(["tool.call", "run.started"], run_id=run_id)
    return newest[-1].step if newest else "0"


def _client_can(session: Any, method: str) -> bool:
    """Whether the client declared the capability ``method`` needs (unknown: True, the client answers)."""
    capability = {"elicitation/create": types.ClientCapabilities(elicitation=types.ElicitationCapability()),
                  "sampling/createMessage": types.ClientCapabilities(sampling=types.SamplingCapability()),
                  "roots/list": types.ClientCapabilities(roots=types.RootsCapability())}[method]
    try:
        return bool(session.check_client_capability(capability))
    except Exception:  # noqa: BLE001 - the session cannot say: forwarded, as before
        return True


#: Keywords of a property's schema that :func:`quick_schema_check` understands (the others are
#: annotations without effect on validity).
_QUICK_PROPERTY_KEYS = frozenset({"type", "title", "description", "default", "examples"})
_QUICK_ROOT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "title", "description",
                              "$schema"})
#: A JSON Schema type and the Python types of JSON values that surely have it (in every draft:
#: ``1.0`` is an integer from draft 6 on, not in draft 4, so only ``int`` counts; ``bool`` is
#: never a number).
_QUICK_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "null": (type(None),),
    "object": (dict,), "array": (list,),
}


_LINEAR_MATCH: Any = None  # the compiled CEL program ``s.matches(p)``, made on first use


def linear_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's ``pattern``: unanchored), run by a
    linear-time engine (Rust's ``regex`` crate, through the CEL package the policy engine uses), never by
    Python's backtracking ``re``: an upstream's schema is not trusted, and a pattern such as ``^(a+)+$``
    took ``re`` seconds to minutes over a 30-character argument, holding the event loop (and with it every
    session) all that time. Time is linear in ``len(text)`` for a given pattern.

    Raises:
        RuntimeError: ``pattern`` is not in the engine's syntax (look-around, back-references);
            :func:`linear_regexes` finds those first.
    """
    global _LINEAR_MATCH
    from sealbox.policy._cel import cel

    if _LINEAR_MATCH is None:
        _LINEAR_MATCH = cel.compile("s.matches(p)")
    return _LINEAR_MATCH.execute(cel.Context({"s": text, "p": pattern})) is True


def linear_regexes(schema: Any) -> bool:
    """Whether every regex of ``schema`` (``pattern`` values, ``patternProperties`` names) runs in the
    linear-time engine of :func:`linear_search`, and no ``unevaluatedProperties`` sits beside a
    ``patternProperties`` (jsonschema matches those with ``re`` in code this module does not replace).
    False: the schema is left to the upstream to apply, as one jsonschema cannot read."""
    found: list[str] = []
    unevaluated = False

    def walk(node: Any) -> None:
        nonlocal unevaluated
        if type(node) is dict:
            if type(node.get("pattern")) is str:
                found.append(node["pattern"])
            if type(node.get("patternProperties")) is dict:
                found.extend(k for k in node["patternProperties"] if type(k) is str)
            unevaluated = unevaluated or "unevaluatedProperties" in node
            for value in node.values():
                walk(value)
        elif type(node) is list:
            for value in node:
                walk(value)

    walk(schema)
    if unevaluated and '"patternProperties"' in json.dumps(schema, default=str):
        return False
    for pattern in found:
        try:
            linear_search(pattern, "")
        except RuntimeError:  # not in the engine's syntax
            return False
    return True


_LINEAR_VALIDATORS: dict[Any, Any] = {}


def _linear_validator(cls: Any) -> Any:
    """``cls`` (a jsonschema validator class) with ``pattern``, ``patternProperties`` and
    ``additionalProperties`` matching by :func:`linear_search` instead of ``re.search``; the same
    results and messages as jsonschema's own keywords (jsonschema/_keywords.py)."""
    made = _LINEAR_VALIDATORS.get(cls)
    if made is not None:
        return made
    import jsonschema
    from jsonschema.exceptions import ValidationError

    def pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not linear_search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in value.items():
            for k, v in instance.items():
                if linear_search(patrn, k):
                    yield from validator.descend(v, subschema, path=k, schema_path=patrn)

    def additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = {k for k in instance if k not in properties and not any(linear_search(p, k) for p in patterns)}
        if validator.is_type(ap, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], ap, path=extra)
        elif not ap and extras:
            if "patternProperties" in schema:
                verb = "does" if len(extras) == 1 else "do"
                joined = ", ".join(repr(each) for each in sorted(extras))
                yield ValidationError(f"{joined} {verb} not match any of the regexes: "
                                      f"{', '.join(repr(each) for each in sorted(patterns))}")
            else:
                names = sorted(extras, key=str)
                yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, names))} "
                                      f"{'was' if len(names) == 1 else 'were'} unexpected)")

    made = _LINEAR_VALIDATORS[cls] = jsonschema.validators.extend(cls, {
        "pattern": pattern, "patternProperties": pattern_properties, "additionalProperties": additional_properties})
    return made


def quick_schema_check(schema: Any) -> Any:
    """A fast, sound "surely valid" test for the commonest tool input schema, or None.

    The schema qualifies when it is ``{"type": "object", "properties": {...}, "required": [...],
    "additionalProperties": bool}`` (each optional but ``type``; ``title``, ``description`` and
    ``$schema`` allowed) and each property's schema has at most ``type`` (one name) and
    annotations (``title``, ``description``, ``default``, ``examples``). The returned function
    answers True only when the arguments are valid under every JSON Schema draft: required
    names present, each property's value of exactly a Python type that JSON Schema's type
    contains, no other names where ``additionalProperties`` is false. False means "not
    decided here": the full validator (``jsonschema``) decides and gives the message. The
    schema must have passed ``check_schema`` first.
    """
    if type(schema) is not dict or not set(schema) <= _QUICK_ROOT_KEYS or schema.get("type") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if type(properties) is not dict or type(required) is not list or type(extra) is not bool:
        return None
    if not all(type(name) is str for name in required):
        return None
    types: dict[str, tuple[type, ...] | None] = {}
    for name, sub in properties.items():
        if type(sub) is not dict or not set(sub) <= _QUICK_PROPERTY_KEYS:
            return None
        if "type" in sub:
            if type(sub["type"]) is not str or sub["type"] not in _QUICK_TYPES:
                return None
            types[name] = _QUICK_TYPES[sub["type"]]
        else:
            types[name] = None  # any value
    needed = tuple(required)

    def check(arguments: Any) -> bool:
        if type(arguments) is not dict:
            return False
        for name in needed:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            if name in types:
                allowed = types[name]
                if allowed is not None and type(value) not in allowed:
                    return False
            elif not extra:
                return False
        return True

    return check


def check_request(ctx: Any, max_request_bytes: int | None) -> None:
    """The gateway's protocol checks of a request, before the SDK dispatches it (also run by
    ``gateway replay``, so a replayed session gets the same errors as the live one).

    Raises:
        MCPError: ``REQUEST_TOO_LARGE`` (params above ``max_request_bytes`` bytes of JSON; None:
            no limit), ``MALFORMED_REQUEST`` (params holding a lone surrogate, which is no Unicode
            text and no UTF-8 can hold; a ``tools/call`` without a string ``name``, or
            with ``arguments`` that are not an object or hold NaN or Infinity; a second ``initialize``
            on a session that is already initialized).
    """
    if ctx.method == "initialize" and ctx.request_id is not None:
        # the SDK answers a second initialize and takes its clientInfo and protocol version as the session's:
        # the session's later calls would be another client's than its run recorded (run.started labels)
        known = getattr(getattr(getattr(ctx, "session", None), "_connection", None), "client_params", None)
        if known is not None:
            info = getattr(known, "client_info", None)
            who = f"{info.name} {info.version or ''}".strip() if info is not None else "unnamed"
            raise _mcp_error()(codes.MALFORMED_REQUEST, f"this session is already initialized (client {who}, "
                               f"protocol {ctx.session._connection.protocol_version}): initialize is the first "
                               "request of a session, once; open a new session to start again")
    dumped: bytes | None = None  # orjson's bytes of the params, when the size check made them
    if max_request_bytes is not None and ctx.request_id is not None and ctx.params is not None:
        try:  # compact UTF-8 JSON, as the json module writes it below; orjson is ~10x faster
            dumped = orjson.dumps(ctx.params, default=str)
            size = len(dumped)
        except (TypeError, orjson.JSONEncodeError):  # an integer beyond 64 bits, a non-str key, a lone surrogate
            text = json.dumps(ctx.params, ensure_ascii=False, separators=(",", ":"), default=str)
            try:
                size = len(text.encode())
            except UnicodeEncodeError as exc:  # a str that is no Unicode text (the SDK's JSON readers refuse it)
                raise _mcp_error()(codes.MALFORMED_REQUEST, f"request params hold a lone surrogate "
                                   f"(\\u{ord(text[exc.start]):04x}), which is not Unicode text (RFC 8259 §8.1): "
                                   "nothing was recorded or forwarded") from None
        if size > max_request_bytes:
            raise _mcp_error()(codes.REQUEST_TOO_LARGE, f"request params are {size} bytes; the limit is "
                               f"{max_request_bytes}")
    if ctx.method == "tools/call" and ctx.request_id is not None:
        p = ctx.params
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise _mcp_error()(codes.MALFORMED_REQUEST, "tools/call needs params.name (a string)")
        arguments = p.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise _mcp_error()(codes.MALFORMED_REQUEST, "tools/call params.arguments must be an object")
        # orjson writes NaN and ±Infinity as null: params whose bytes hold no "null" hold neither (the walk
        # below is needed only when they do, or when they were not written by orjson)
        if arguments and (dumped is None or b"null" in dumped) and (where := _non_finite(arguments)) is not None:
            # the SDK's JSON reader takes NaN / Infinity, its writer sends them as null: the call would be
            # decided and recorded with one value and forwarded with another
            raise _mcp_error()(codes.MALFORMED_REQUEST, f"tools/call params.arguments{where}: NaN and Infinity are "
                               "not JSON numbers")


def _mcp_error() -> Any:
    """The SDK's ``MCPError`` (imported on first use: importing ``mcp`` takes about half a second,
    and the gateway's modules are imported by commands that never serve)."""
    global _MCP_ERROR
    if _MCP_ERROR is None:
        from mcp.shared.exceptions import MCPError

        _MCP_ERROR = MCPError
    return _MCP_ERROR


_MCP_ERROR: Any = None


def _non_finite(value: Any) -> str | None:
    """The path (``.a[0]``) of the first NaN or ±Infinity in ``value``, or None (none; iterative: any depth)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if type(item) is float:
            if item != item or item in (math.inf, -math.inf):
                return where
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


def _refuse_retrieval(uri: str) -> Any:
    """Never fetch a schema ``$ref`` (http://, file://, ...): an upstream's schema is resolved within itself."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)


def _local_only_registry() -> Any:
    from referencing import Registry

    return Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


_LOCAL_ONLY = _local_only_registry()

_SERVER_REQUESTS: dict[str, tuple[Any, Any]] = {
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}


def _taken_error(exc: StepTakenError) -> Exception:
    """The JSON-RPC error of a joined call whose step or call id another writer of its run recorded first
    (found in the write that was to record it): as for one this gateway recorded (:meth:`Gateway._link`)."""
    from mcp.shared.exceptions import MCPError

    if exc.conflict == "step":
        return MCPError(codes.MALFORMED_REQUEST, f"_meta[{STEP_META_KEY!r}] = {exc.step!r}: a call of run "
                        f"{exc.run_id} was already recorded at that step")
    return MCPError(codes.MALFORMED_REQUEST, f"_meta[{CALL_ID_META_KEY!r}] = {exc.call_id!r}: a call of run "
                    f"{exc.run_id} was already recorded with that id")


def _failure(exc: BaseException) -> types.CallToolResult:
    """The ``isError`` result of a call that was denied, not recorded, or failed upstream; else re-raise."""
    if isinstance(exc, ToolDenied):
        d = exc.decision
        by = f" by rule {d.rule}" if d.rule else ""  # no rule: the reason code names what denied it
        return _error_result(f"denied{by} ({d.reason_code}): {d.reason} [call {exc.call_id}]",
                             {"sealbox/decision": {"rule": d.rule, "reason_code": d.reason_code,
                                                   "call_id": exc.call_id}})
    if isinstance(exc, InvalidArguments):
        return _error_result(str(exc), {"sealbox/not_forwarded": "invalid_arguments"})
    if isinstance(exc, ToolChangedSinceDecided):
        return _error_result(str(exc), {"sealbox/not_forwarded": "tool_changed"})
    if isinstance(exc, RecordingError):
        return _error_result(f"not forwarded: the call could not be recorded ({exc})",
                             {"sealbox/not_forwarded": "recording_failed"})
    if isinstance(exc, GatewayStopping):
        return _error_result(str(exc), {"sealbox/not_forwarded": "gateway_stopping"})
    if isinstance(exc, (UpstreamUnavailable, UpstreamTimeout, UpstreamProtocolError)):
        return _error_result(f"upstream error: {exc}", {"sealbox/upstream_error": type(exc).__name__})
    raise exc


class UriTemplate:
    """An RFC 6570 URI template, matched loosely against URIs, in time linear in the URI's length.

    The template is cut into literals and expressions. A literal matches itself. An expression
    stands for a run of characters: ``{var}`` (simple expansion) one or more characters other than
    ``/``, ``?`` and ``#``; ``{+var}`` and ``{#var}`` any text (possibly empty); ``{.var}`` and
    ``{;var}`` any characters other than ``/``, ``?``, ``#``; ``{/var}`` any other than ``?`` and
    ``#``; ``{?var}`` and ``{&var}`` any other than ``#`` (each possibly empty). Matching runs the
    template's units (literal characters, expressions) as bits of one integer over the URI's characters
    (no backtracking): a few integer operations per URI character, however many units are in play (a
    chain of expressions that may match nothing adds one per expression).

    Args:
        template: the ``uriTemplate`` an upstream listed; a ``{`` without its ``}`` is a literal.
    """

    _CLASSES: dict[str, tuple[str | None, int]] = {
        "": ("/?#", 1), "+": (None, 0), "#": (None, 0), ".": ("/?#", 0), ";": ("/?#", 0), "/": ("?#", 0),
        "?": ("#", 0), "&": ("#", 0),
    }

    def __init__(self, template: str) -> None:
        import re

        self.template = template
        #: ("lit", text) or ("run", excluded characters or None for any, the fewest characters)
        self.tokens: list[tuple[str, Any, int]] = []
        for literal, expression in re.findall(r"([^{]*)(\{[^}]*\}|\{[^}]*$|$)", template):
            if literal:
                self.tokens.append(("lit", literal, 0))
            if expression.endswith("}"):
                op = expression[1:2] if expression[1:2] in self._CLASSES else ""
                excluded, fewest = self._CLASSES[op]
                self.tokens.append(("run", excluded, fewest))
            elif expression:  # "{..." never closed: text
                self.tokens.append(("lit", expression, 0))

        # bit-parallel: bit 0 is the start, bit j (1..m) the template's j-th unit (a literal character, or an
        # expression) matched through; an expression's bit also means "inside it" (it loops on its characters)
        self._literal: dict[str, int] = {}
        self._runs: dict[str | None, int] = {}  # excluded characters -> the bits of expressions of that class
        self._optional = 0  # expressions that may match no character (skipped without consuming one)
        m = 0
        for kind, value, fewest in self.tokens:
            if kind == "lit":
                for ch in value:
                    m += 1
                    self._literal[ch] = self._literal.get(ch, 0) | 1 << m
            else:
                m += 1
                self._runs[value] = self._runs.get(value, 0) | 1 << m
                if fewest == 0:
                    self._optional |= 1 << m
        self._last = m
        self._loops = sum(self._runs.values())
        self._allowed: dict[str, int] = {}

    def _allow(self, ch: str) -> int:
        """The units that can consume ``ch``."""
        mask = self._allowed.get(ch)
        if mask is None:
            mask = self._literal.get(ch, 0)
            for excluded, bits in self._runs.items():
                if excluded is None or ch not in excluded:
                    mask |= bits
            if len(self._allowed) < 4096:
                self._allowed[ch] = mask
        return mask

    def _closure(self, states: int) -> int:
        """``states`` with every expression that may match nothing passed over (a chain of them is at most
        as long as the template)."""
        optional = self._optional
        while True:
            more = states | ((states << 1) & optional)
            if more == states:
                return states
            states = more

    def matches(self, uri: str) -> bool:
        """Whether ``uri`` is one of the URIs the template expands to (loosely, as the class says)."""
        states = self._closure(1)
        loops = self._loops
        for ch in uri:
            states = ((states << 1) | (states & loops)) & self._allow(ch)
            if not states:
                return False
            states = self._closure(states)
        return bool(states >> self._last & 1)


def _request_error(exc: BaseException, method: str, name: str, sent: bool) -> BaseException:
    """The JSON-RPC error (``MCPError``) of a ``prompts/get`` / ``resources/read`` that was denied, not
    recorded, refused for its arguments (``INVALID_PARAMS``), or failed upstream; else ``exc`` itself."""
    error = _mcp_error()
    if isinstance(exc, ToolDenied):
        d = exc.decision
        by = f" by rule {d.rule}" if d.rule else ""
        return error(codes.DENIED, f"{method} {name}: denied{by} ({d.reason_code}): {d.reason} [call {exc.call_id}]",
                     data={"rule": d.rule, "reason_code": d.reason_code, "call_id": exc.call_id})
    if isinstance(exc, RecordingError):
        if sent:
            return error(codes.NOT_RECORDED, f"{method} {name}: forwarded, but its result could not be recorded; "
                         f"not answered ({exc})")
        return error(codes.NOT_RECORDED, f"{method} {name}: not forwarded: it could not be recorded ({exc})")
    if isinstance(exc, GatewayStopping):  # "not forwarded: the gateway is stopping …"
        return error(codes.UPSTREAM_ERROR, f"{method} {name}: {exc}", data={"type": "GatewayStopping"})
    if isinstance(exc, (UpstreamUnavailable, UpstreamTimeout, UpstreamProtocolError)):
        return error(codes.UPSTREAM_ERROR, f"{method} {name}: upstream error: {exc}",
                     data={"type": type(exc).__name__})
    if isinstance(exc, InvalidArguments):
        return error(types.INVALID_PARAMS, f"{method} {name}: not forwarded: {exc}")
    return exc


def _unrecorded_result(exc: BaseException) -> types.CallToolResult:
    """The ``isError`` result of a call that was forwarded (the upstream may have run it) whose
    ``tool.result`` could not be recorded: the record shows its outcome as unknown (DESIGN.md), and the
    client is told it ran, so that it does not make the call again thinking it never happened."""
    return _error_result(f"forwarded, but its result could not be recorded: the call ran (the record shows its "
                         f"outcome as unknown); do not assume it did not ({exc})", {"sealbox/not_recorded": "result"})


def tool_error_text(result: Any) -> str | None:
    """The failure an upstream reports in a ``tools/call`` result (MCP: a tool execution error is a
    result with ``isError: true``), as the text of its text content blocks (``"isError"`` when it
    has none); None for a success. The gateway records such a call ``ok: false`` with the result
    and a ``ToolError`` carrying this text (sealbox.recorder ``failure=``), so ``sealbox calls
    --error`` finds it; the client gets the upstream's result unchanged."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    texts = [c.get("text") for c in result.get("content") or () if isinstance(c, dict) and c.get("type") == "text"]
    text = "\n".join(t for t in texts if isinstance(t, str))
    return text[:4096] if text else "isError"


def _who(pending: Pending) -> str:
    ask = pending.ask or {}
    parts = [f"group {g}" for g in ask.get("groups") or []] + list(ask.get("identities") or [])
    return "an approver (" + ", ".join(parts) + ")" if parts else "an approver"


def _seconds_until(ts: str | None) -> float:
    from datetime import datetime, timezone

    if not ts:
        return 3600.0
    try:
        return (datetime.fromisoformat(ts.replace("Z", "+00:00")) - datetime.now(timezone.utc)).total_seconds()
    except ValueError:
        return 3600.0


def _is_modern(ctx: Any) -> bool:
    return _modern_version(getattr(ctx, "protocol_version", None))


def _modern_version(version: Any) -> bool:
    """Whether ``version`` is a stateless (2026-07-28 or later) protocol version."""
    global _MODERN
    if _MODERN is None:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        _MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
    return str(version or "") in _MODERN


_MODERN: frozenset[str] | None = None


def _has_progress_token(ctx: Any) -> bool:
    meta = ctx.meta if isinstance(ctx.meta, dict) else {}
    return meta.get("progress_token", meta.get("progressToken")) is not None


def _can_elicit(ctx: Any) -> bool:
    """Whether the gateway may send this call's client a form elicitation (declared, form mode included)."""
    try:
        return bool(ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability()))) and \
            _can_elicit_mode(ctx.session, "form")
    except Exception:  # noqa: BLE001 - unknown: do not ask
        return False


def _elicit_mode(params: Any) -> str:
    """An ``elicitation/create``'s mode: ``url`` or ``form`` (MCP 2025-11-25; absent: form)."""
    mode = getattr(params, "mode", None) if not isinstance(params, dict) else params.get("mode")
    return "url" if mode == "url" else "form"


def _can_elicit_mode(session: Any, mode: str) -> bool:
    """Whether a client that declared ``elicitation`` declared that mode (MCP 2025-11-25: ``{"form": {},
    "url": {}}``; an empty ``{}``, as clients before 2025-11-25 declare it, is form only). A session that
    cannot say (no recorded capabilities): True for form, as before; False for url."""
    try:
        declared = session.client_capabilities.elicitation
    except Exception:  # noqa: BLE001 - the session cannot say
        declared = None
    if declared is None:
        return mode == "form"
    if mode == "url":
        return declared.url is not None
    return declared.form is not None or declared.url is None


def _busy(run: RunContext, delta: int) -> None:
    """Count a session run's calls in flight; wake :meth:`Gateway._end_run` when the last one is recorded.

    No Event is made per call: one exists only while ``_end_run`` waits for the count to reach 0.
    """
    if not hasattr(run, "_gateway_inflight"):
        return
    run._gateway_inflight += delta  # type: ignore[attr-defined]
    if run._gateway_inflight == 0 and run._gateway_idle is not None:  # type: ignore[attr-defined]
        run._gateway_idle.set()  # type: ignore[attr-defined]
        run._gateway_idle = None  # type: ignore[attr-defined]


def _client_gone(ctx: Any) -> bool:
    """Whether the client of this streamable HTTP request has disconnected (its reply would go nowhere).

    Known only over HTTP (the transport's middleware notes ``http.disconnect``); elsewhere a client that
    goes away cancels the request (stdio: the session closes) and the cancellation says so."""
    request = getattr(ctx, "request", None)
    state = getattr(request, "scope", {}).get("state") if request is not None else None
    wire = state.get(WIRE_STATE_KEY) if isinstance(state, dict) else None
    return bool(getattr(wire, "gone", False))


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


def _meta_names(meta: Any, key: str) -> bool:
    """Whether ``meta`` has ``key`` at all (its value may be null)."""
    if meta is None:
        return False
    if isinstance(meta, dict):
        return key in meta
    return key in (getattr(meta, "model_extra", None) or {})


def _progress_forwarder(ctx: Any) -> Any:
    meta = ctx.meta if isinstance(ctx.meta, dict) else {}
    if meta.get("progress_token", meta.get("progressToken")) is None:
        return None

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await ctx.session.report_progress(progress, total, message)

    return forward


#: The exact redaction-marker detector, shared with replay (:func:`sealbox.redaction.holds_marker`).
_holds_marker = holds_marker


def _error_result(text: str, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True,
                                _meta=meta)


def _version() -> str:
    from sealbox import __version__

    return __version__
