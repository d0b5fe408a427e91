"""Record an OpenAI Agents SDK run (the ``agents`` package) into a Sealbox run.

Usage::

    from agents import Runner
    from sealbox.integrations.openai_agents import instrument

    with recorder.run(agent="triage") as run:
        result = await Runner.run(instrument(run, triage_agent), "Where is my order?")

:func:`instrument` returns a copy of the agent (and of every agent it can hand
off to) whose model is wrapped in :class:`SealboxModel` and whose function tools
are wrapped by :func:`governed_tool`:

- every model call is a ``model.call`` (request: system instructions, input
  items, tools, handoffs, settings; response: output items in the OpenAI
  Responses format; usage; latency). The function calls a response requests
  are linked, by call id, to the ``tool.call`` events that carry them out
  (steps ``"<step>.1"``, ``"<step>.2"``…);
- every function-tool call goes through :meth:`RunContext.acall_tool`:
  ``tool.call`` and ``policy.decision`` are committed **before** the tool runs;
  a call the policy denies never runs and the model receives a tool error
  message (the run goes on); then ``tool.result``;
- every handoff is a ``note`` event (``about = {"handoff": {"from": …, "to": …}}``);
  the handoffs offered to the model are also listed in each ``model.call`` request.
- every run of a guardrail (the agents' input and output guardrails, the tools' input and
  output guardrails) is a ``note`` (``about = {"guardrail": {name, kind, agent, tripped,
  output_info, …}}``), with a ``guardrail.tripped`` beside it when its tripwire triggered; in a
  replay its recorded outcome is served and the guardrail function is not called
  (:func:`recorded_guardrail`);
- the SDK's own approvals (a tool's ``needs_approval``, answered by the host application with
  ``RunState.approve`` / ``reject``) are ``note`` events (``about = {"host_approval": …}``) for the
  question and the answer, marked as the host application's: never Sealbox approvals.

MCP servers the agent talks to are not governed here — they are governed by a
Sealbox gateway, which joins the same run through :func:`mcp_env` (stdio) or
:func:`mcp_meta_resolver` (``_meta`` on each ``tools/call``). In a replay, such a
server is never connected: its tool list and its calls are served from the record
(docs/integrations.md, "In a replay").
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Agent, FunctionTool, Handoff, Model, ModelResponse, handoff
from agents.exceptions import AgentsException
from agents.models import get_default_model, get_default_model_settings
from agents.tool_context import ToolContext

from sealbox.adapters import parse_arguments, to_plain
from sealbox.approvals import ApprovalPending
from sealbox.errors import ConfigError, RecordingError
from sealbox.recorder import RunContext, ToolDenied, unused_call_id
from sealbox.replay.values import ReplayedError

try:  # private in openai-agents 0.24: keeps the SDK's failure handling and argument preparation
    from agents.tool import _FailureHandlingFunctionToolInvoker as _SdkInvoker
except ImportError:  # pragma: no cover - other SDK versions: the tool is wrapped as a black box
    _SdkInvoker = None  # type: ignore[assignment,misc]

__all__ = [
    "DEFAULT_SERVER",
    "SealboxModel",
    "governed_tool",
    "governed_tools",
    "instrument",
    "recorded_guardrail",
    "recorded_guardrails",
    "GUARDRAIL_KINDS",
    "HOST_APPROVAL_BY",
    "mcp_env",
    "mcp_meta",
    "mcp_meta_resolver",
    "ENV_RUN_ID",
    "ENV_PARENT_PRINCIPAL",
    "META_RUN_ID",
    "META_PARENT_PRINCIPAL",
    "META_CALL_ID",
    "META_STEP",
]

#: The ``server`` recorded for in-process function tools (policies match it).
DEFAULT_SERVER = "local"

#: Environment variable naming the Sealbox run, for an MCP server launched over stdio.
ENV_RUN_ID = "SEALBOX_RUN_ID"
#: Environment variable naming the principal of the run that launched the server.
ENV_PARENT_PRINCIPAL = "SEALBOX_PARENT_PRINCIPAL"
#: ``_meta`` key of an MCP request naming the Sealbox run.
META_RUN_ID = "sealbox/run_id"
#: ``_meta`` key naming the principal of that run.
META_PARENT_PRINCIPAL = "sealbox/parent_principal"
#: ``_meta`` key naming the model's tool call id, when known.
META_CALL_ID = "sealbox/call_id"
#: ``_meta`` key naming the step the run assigned to that tool call (``"<model step>.<i>"``), when known.
META_STEP = "sealbox/step"

DenyMessage = Callable[[ToolDenied], str]


def _default_deny_message(denied: ToolDenied) -> str:
    return f"Error: this tool call was not allowed and did not run. {denied}"


# --------------------------------------------------------------------------- MCP


def mcp_env(run: RunContext, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables that let a stdio MCP server (a Sealbox gateway) join ``run``.

    Pass them in the server's launch parameters::

        MCPServerStdio(params={"command": "sealbox", "args": [...], "env": mcp_env(run)})

    Args:
        run: the active run.
        base: other variables to launch the server with (copied, not changed).

    Returns:
        ``base`` plus ``SEALBOX_RUN_ID`` and ``SEALBOX_PARENT_PRINCIPAL``.
    """
    env = dict(base or {})
    env[ENV_RUN_ID] = run.run_id
    env[ENV_PARENT_PRINCIPAL] = run.principal.id
    _note_replay(run)
    return env


def mcp_meta(run: RunContext, call_id: str | None = None) -> dict[str, str]:
    """The ``_meta`` entries that tie one MCP request to ``run``.

    Args:
        run: the active run.
        call_id: the model's tool call id, when known.

    Returns:
        ``{"sealbox/run_id": …, "sealbox/parent_principal": …}`` plus
        ``"sealbox/call_id"`` when ``call_id`` is given, and ``"sealbox/step"`` when a
        recorded model call of ``run`` requested that call: the step it assigned to it
        (``"<model step>.<i>"``), under which a joined gateway records the call. A ``call_id``
        holding a NUL character is left out (no store keeps one in an identifier: the gateway
        would refuse the request); the gateway then gives the call a fresh id.
    """
    meta = {META_RUN_ID: run.run_id, META_PARENT_PRINCIPAL: run.principal.id}
    _note_replay(run)
    if call_id and "\x00" not in call_id:
        meta[META_CALL_ID] = call_id
        step = run.step_of_call(call_id)
        if step is not None:
            meta[META_STEP] = step
    return meta


def mcp_meta_resolver(run: RunContext) -> Callable[[Any], dict[str, str]]:
    """A ``tool_meta_resolver`` for the SDK's MCP servers, sending :func:`mcp_meta` on every call.

    Usage::

        MCPServerStreamableHttp(params=..., tool_meta_resolver=mcp_meta_resolver(run))

    The SDK passes the tool's ``ToolContext`` as ``MCPToolMetaContext.run_context``; its
    ``tool_call_id`` is the model's call id, so the meta also names the call's step
    (``"sealbox/step"``, see :func:`mcp_meta`) and the gateway links the call to the
    model call that requested it.

    Args:
        run: the active run.

    Returns:
        A callable taking the SDK's ``MCPToolMetaContext``.
    """
    def resolve(context: Any) -> dict[str, str]:
        call_id = getattr(getattr(context, "run_context", None), "tool_call_id", None)
        return mcp_meta(run, call_id if isinstance(call_id, str) else None)
    resolve._sealbox_run = run  # type: ignore[attr-defined]  # a server carrying it is joined to run (replay)
    _note_replay(run)
    return resolve


# --------------------------------------------------------------------------- MCP in a replay
#
# A live gateway refuses to join a replay run (UNKNOWN_RUN): in a replay, the SDK's MCP servers joined to
# the replay run (launched with mcp_env(run), or calling with mcp_meta_resolver(run)) are answered here,
# from the record, and never connected. The SDK's server classes are patched while a replay runs in the
# process (installed by mcp_env / mcp_meta_resolver for a run in replay mode; put back when the last
# replay running in the process ends, sealbox.replay.engine): a server not joined to a replay run goes
# through the SDK's own methods unchanged.

#: run id -> the RunContext of a run in replay mode that mcp_env / mcp_meta_resolver was called for
_REPLAY_RUNS: "weakref.WeakValueDictionary[str, RunContext]" = weakref.WeakValueDictionary()
_PATCH_LOCK = threading.Lock()
_PATCHED: dict[tuple[type, str], Any] = {}  # (class, method name) -> the SDK's own function
_PATCH_METHODS = ("connect", "cleanup", "list_tools", "call_tool")


def _note_replay(run: RunContext) -> None:
    if getattr(run, "replay", None) is None:
        return
    _REPLAY_RUNS[run.run_id] = run
    _install_mcp_replay()


def _install_mcp_replay() -> None:
    """Patch the SDK's MCP server classes (once) so that servers joined to a replay run are served here."""
    from agents.mcp import server as sdk

    with _PATCH_LOCK:
        if _PATCHED:
            return
        classes = [getattr(sdk, n) for n in ("_MCPServerWithClientSession", "MCPServerStdio", "MCPServerSse",
                                             "MCPServerStreamableHttp") if isinstance(getattr(sdk, n, None), type)]
        for cls in classes:
            for name in _PATCH_METHODS:
                if name in cls.__dict__:
                    _PATCHED[(cls, name)] = cls.__dict__[name]
                    setattr(cls, name, _REPLAYED[name](cls.__dict__[name]))
        from mcp.client.session import ClientSession

        if "call_tool" in ClientSession.__dict__:  # a plain session whose calls carry mcp_meta(run)
            _PATCHED[(ClientSession, "call_tool")] = ClientSession.__dict__["call_tool"]
            ClientSession.call_tool = _replayed_session_call(ClientSession.__dict__["call_tool"])


def release_mcp_replay() -> None:
    """Put the SDK's MCP server methods back when no replay runs in the process any more (called by
    the replay engine when a replay ends)."""
    from sealbox.recorder import REPLAYING

    with _PATCH_LOCK:
        if REPLAYING or not _PATCHED:
            return
        for (cls, name), original in _PATCHED.items():
            setattr(cls, name, original)
        _PATCHED.clear()


def _replay_run_of(server: Any, meta: Any = None) -> RunContext | None:
    """The run in replay mode ``server`` (an SDK MCP server) is joined to, or None: the run named by the
    call's ``_meta`` (``sealbox/run_id``), its ``tool_meta_resolver`` (made by :func:`mcp_meta_resolver`),
    or its stdio environment (made by :func:`mcp_env`) — the gateway's own order."""
    named = meta.get(META_RUN_ID) if isinstance(meta, dict) else None
    if isinstance(named, str):  # the run the call names is the one the gateway would join, whatever else
        run = _REPLAY_RUNS.get(named)
        return run if run is not None and getattr(run, "replay", None) is not None else None
    tagged = getattr(getattr(server, "tool_meta_resolver", None), "_sealbox_run", None)
    run = tagged if isinstance(tagged, RunContext) else None
    if run is None:
        env = getattr(getattr(server, "params", None), "env", None)
        rid = env.get(ENV_RUN_ID) if isinstance(env, dict) else None
        run = _REPLAY_RUNS.get(rid) if isinstance(rid, str) else None
    return run if run is not None and getattr(run, "replay", None) is not None else None


def _replayed_connect(original: Any) -> Any:
    async def connect(self: Any) -> None:
        if _replay_run_of(self) is None:
            return await original(self)
        return None  # the gateway is never launched in a replay: tools and results come from the record
    return connect


def _replayed_cleanup(original: Any) -> Any:
    async def cleanup(self: Any) -> None:
        if _replay_run_of(self) is None or getattr(self, "session", None) is not None:
            return await original(self)
        return None
    return cleanup


def _replayed_list_tools(original: Any) -> Any:
    async def list_tools(self: Any, run_context: Any = None, agent: Any = None) -> list[Any]:
        run = _replay_run_of(self)
        if run is None:
            return await original(self, run_context, agent)
        return _recorded_mcp_tools(run, self, agent)
    return list_tools


def _replayed_call_tool(original: Any) -> Any:
    async def call_tool(self: Any, tool_name: str, arguments: dict[str, Any] | None,
                        meta: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        run = _replay_run_of(self, meta)
        if run is None:
            if meta is None:
                return await original(self, tool_name, arguments, **kwargs)
            return await original(self, tool_name, arguments, meta=meta, **kwargs)
        return await _replayed_mcp_call(run, tool_name, arguments, meta)
    return call_tool


def _replayed_session_call(original: Any) -> Any:
    async def call_tool(self: Any, name: str, arguments: dict[str, Any] | None = None, *args: Any,
                        meta: Any = None, **kwargs: Any) -> Any:
        named = meta.get(META_RUN_ID) if isinstance(meta, dict) else None
        run = _REPLAY_RUNS.get(named) if isinstance(named, str) else None
        if run is None or getattr(run, "replay", None) is None:
            return await original(self, name, arguments, *args, meta=meta, **kwargs)
        return await _replayed_mcp_call(run, name, arguments, meta)
    return call_tool


_REPLAYED = {"connect": _replayed_connect, "cleanup": _replayed_cleanup, "list_tools": _replayed_list_tools,
             "call_tool": _replayed_call_tool}


def _gateway_calls(run: RunContext) -> list[dict[str, Any]]:
    """The recorded gateway ``tool.call`` payloads of the run ``run`` replays (those with an ``exposed`` name)."""
    recorded = run.replay.recorded  # type: ignore[union-attr]
    return [c.payload for c in recorded.ordered()
            if c.key.kind == "tool.call" and isinstance(c.payload.get("exposed"), str)
            and isinstance(c.payload.get("server"), str) and isinstance(c.payload.get("tool"), str)]


def _separator(calls: list[dict[str, Any]]) -> str:
    """The gateway's separator, as its recorded calls show it (``server + separator + tool``), else ``__``."""
    for p in calls:
        exposed, server, tool = p["exposed"], p["server"], p["tool"]
        if exposed.startswith(server) and exposed.endswith(tool) and len(exposed) > len(server) + len(tool):
            return exposed[len(server):len(exposed) - len(tool)]
    return "__"


def _target(run: RunContext, exposed: str) -> tuple[str, str] | None:
    """``(server, tool)`` of a gateway tool's exposed name: as a recorded call named it, else split at the
    first separator (as the gateway splits it); None when it holds no separator."""
    calls = _gateway_calls(run)
    for p in calls:
        if p["exposed"] == exposed:
            return p["server"], p["tool"]
    server, sep, tool = exposed.partition(_separator(calls))
    return (server, tool) if sep and server and tool else None


async def _replayed_mcp_call(run: RunContext, exposed: str, arguments: Any, meta: Any) -> Any:
    """A ``tools/call`` to a gateway joined to ``run`` (in replay mode), answered as the gateway answered it
    in the recorded run (:func:`sealbox.gateway.replay.answer_from_record`): compared with the recorded
    ``tool.call`` at the step the gateway gave it (the ``_meta`` call id's linked step, else the run's next
    top-level step, as the gateway records it) and served its recorded ``tool.result``."""
    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import codes
    from sealbox.gateway.replay import answer_from_record

    source = run.replay
    assert source is not None
    target = _target(run, exposed)
    if target is None:  # the gateway answers an unknown name with a protocol error and records nothing
        raise MCPError(codes.UNKNOWN_TOOL, f"unknown tool {exposed!r}", data=exposed)
    server, tool = target
    named = meta.get(META_CALL_ID) if isinstance(meta, dict) else None
    call_id = named if isinstance(named, str) and named else None
    if call_id is None:  # the gateway gave it an id of its own, at the run's next step: the same one (a deny's
        nxt = source.recorded.steps.get(str(run._next_step))  # text names it, and the model reads that text)
        if nxt is not None and nxt.key.kind == "tool.call" and isinstance(nxt.payload.get("call_id"), str):
            call_id = nxt.payload["call_id"]
    args = dict(arguments or {})
    if not source.serves_tools:
        source.refuse_live_tool(run, server, tool, args, call_id=call_id, exposed=exposed,
                                why=f"{server}/{tool} is a tool of a Sealbox gateway joined to the run (exposed as "
                                    f"{exposed!r}), which does not join a replay run: it cannot run live; replay "
                                    "it with tools from the record")
    return await answer_from_record(run, server, tool, args, exposed=exposed, call_id=call_id)


def _recorded_mcp_tools(run: RunContext, server: Any, agent: Any) -> list[Any]:
    """The tools a gateway joined to ``run`` listed to ``agent`` when the run was recorded, as MCP ``Tool``s.

    The joined run's snapshot holds no gateway tool list (the driving process started the run), but each
    recorded ``model.call`` request holds the tools the SDK built from it: the function tools of the
    recorded model call about to be made (else the nearest one before it) that are not the agent's own
    tools and whose name holds the gateway's separator, each with its recorded name, description and
    parameters (its input schema). With several servers of one agent joined to the run, the first lists
    them all."""
    from mcp_types import Tool

    from sealbox.canonical import decode

    first = next((s for s in getattr(agent, "mcp_servers", None) or [] if _replay_run_of(s) is run), server)
    if first is not server:
        return []
    source = run.replay
    assert source is not None
    steps = [c for c in source.recorded.ordered() if c.key.kind == "model.call"]
    if not steps:
        return []
    nxt = str(run._next_step)
    before = [c for c in steps if _step_key(c.key.step) <= _step_key(nxt)]
    rec = before[-1] if before else steps[0]
    request = decode(rec.content) if isinstance(rec.content, dict) else {}
    own = {getattr(t, "name", None) for t in getattr(agent, "tools", None) or []}
    sep = _separator(_gateway_calls(run))
    tools = []
    for spec in (request.get("tools") if isinstance(request, dict) else None) or []:
        if not isinstance(spec, dict) or spec.get("type") != "function":
            continue
        name = spec.get("name")
        if not isinstance(name, str) or name in own or sep not in name:
            continue
        schema = spec.get("parameters")
        tools.append(Tool(name=name, description=spec.get("description") or None,
                          input_schema=schema if isinstance(schema, dict) else {"type": "object"}))
    return tools


def _step_key(step: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in step.split("."))
    except ValueError:
        return ()


# --------------------------------------------------------------------------- tools


class _RecordingAbort(BaseException):
    """Carries a RecordingError or an ApprovalPending past the SDK's tool-failure handler (which
    would turn it into a message for the model): a call that cannot be recorded fails the run
    loudly, and a call waiting for an approval (``approvals="suspend"``, or a blocking wait that
    timed out) suspends it, as the recorder documents, instead of the run going on and ending."""

    def __init__(self, error: RecordingError | ApprovalPending) -> None:
        super().__init__(str(error))
        self.error = error


if _SdkInvoker is not None:
    class _GovernedInvoker(_SdkInvoker):  # type: ignore[misc,valid-type]
        """The SDK's invoker (failure handling, argument preparation) around a governed call."""

        def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> "_GovernedInvoker":
            if self._function_tool is function_tool:
                return self
            bound = _GovernedInvoker(self._invoke_tool_impl, self._on_handled_error, function_tool=function_tool)
            _copy_attr(self, bound, "__agents_sync_function_tool__")
            return bound

        def prepare_arguments(self, input: str, tool_name: str) -> Any:
            """The SDK's preparation; when it would make the SDK require an approval without asking the
            tool's ``needs_approval`` (validation changed the arguments: defaults filled in, values
            coerced), the approval gate is told so and asked all the same, so that the question is
            recorded (:func:`_host_approval_gate`): it answers "needed" without calling the function."""
            prepared = super().prepare_arguments(input, tool_name)
            gate = getattr(self._function_tool, "needs_approval", None)
            if prepared is not None and not getattr(prepared, "unchanged", True) \
                    and getattr(gate, "_sealbox_run", None) is not None:
                gate._sealbox_forced = input
                return None  # what the SDK keeps in that case too
            return prepared

        async def __call__(self, ctx: ToolContext[Any], input: str) -> Any:
            try:
                return await super().__call__(ctx, input)
            except _RecordingAbort as abort:
                raise _passing_the_sdk(abort.error) from abort.error.__cause__


#: RecordingError / ApprovalPending subclasses that are also the SDK's AgentsException (see below).
_PASSING: dict[type, type] = {}


def _passing_the_sdk(error: Exception) -> Exception:
    """``error`` as an instance of a subclass of its own type that is also the SDK's
    ``AgentsException``: the SDK's tool runner re-raises those as they are, and wraps any other
    exception in ``UserError("Error running tool …")``, which the run context would record as the
    run's error (an ApprovalPending would end the run instead of suspending it). The caller of
    ``Runner.run`` gets an ``ApprovalPending`` / ``RecordingError`` with the same attributes."""
    base = type(error)
    cls = _PASSING.get(base)
    if cls is None:
        cls = _PASSING[base] = type(base.__name__, (base, AgentsException),
                                    {"__module__": base.__module__, "__qualname__": base.__qualname__})
    out = cls.__new__(cls, *error.args)
    out.__dict__.update(error.__dict__)
    out.args = error.args
    out.run_data = None
    return out


def _copy_attr(src: Any, dst: Any, name: str) -> None:
    if hasattr(src, name):
        setattr(dst, name, getattr(src, name))


def _tool_identity(tool: FunctionTool, server: str) -> tuple[str, str]:
    binding = getattr(tool, "_mcp_tool_binding", None)  # an MCP tool handed in explicitly
    if isinstance(binding, tuple) and len(binding) >= 2 and all(isinstance(b, str) for b in binding[:2]):
        return binding[0], binding[1]
    return server, tool.name


def _check_agent_tool(tool: FunctionTool) -> None:
    """Refuse a tool made by ``Agent.as_tool()`` from an agent that is not instrumented: the SDK
    runs that very agent, so its model calls would not be recorded and its own tools would run
    without being recorded or decided by the policy (a tool the policy denies would run)."""
    if not getattr(tool, "_is_agent_tool", False):
        return
    nested = getattr(tool, "_agent_instance", None)
    if not isinstance(nested, Agent) or isinstance(nested.model, SealboxModel):  # instrumented (here or elsewhere)
        return
    raise ConfigError(f"tool {tool.name!r} runs agent {nested.name!r} (Agent.as_tool()), whose model calls and "
                      "tool calls would be neither recorded nor decided by this run's policy: make the tool "
                      f"from the instrumented agent, instrument(run, agent).as_tool(...), for {nested.name!r}")


def _acting_agent(ctx: Any) -> str | None:
    """The name of the agent making a tool call (the SDK's ``ToolContext.agent``: after a handoff, the
    agent handed off to), which the policy sees as ``agent.name``; None when the SDK does not say
    (the run's agent then)."""
    name = getattr(getattr(ctx, "agent", None), "name", None)
    return name if isinstance(name, str) and name else None


def _governing_run(tool: FunctionTool) -> RunContext | None:
    """The run a :func:`governed_tool` copy records into, or None for a tool not governed."""
    invoke = tool.on_invoke_tool
    return getattr(getattr(invoke, "_invoke_tool_impl", invoke), "_sealbox_run", None)


def governed_tool(run: RunContext, tool: FunctionTool, *, server: str = DEFAULT_SERVER, grant: str | None = None,
                  deny_message: DenyMessage | None = None) -> FunctionTool:
    """A copy of ``tool`` whose every invocation is recorded and decided by the run's policy.

    The invocation goes through :meth:`RunContext.acall_tool` with the model's
    call id (``ToolContext.tool_call_id``), so ``tool.call`` and
    ``policy.decision`` are committed before the function runs, and the call is
    linked to the ``model.call`` that requested it.

    - Denied: the function does not run; the model receives ``deny_message(denied)``
      as the tool's output and the run goes on.
    - The function raised: ``tool.result`` records the exception; the SDK then
      handles it as it would have (by default, an error message to the model).
    - The call could not be recorded: the function does not run and the run
      fails with :class:`~sealbox.errors.RecordingError` ("no record, no action").

    The tool's ``tool_input_guardrails`` / ``tool_output_guardrails`` are recorded
    (:func:`recorded_guardrail`), and its ``needs_approval`` (True or a function; its decision
    unchanged) records the question the SDK asks the host application and the answer (``note``
    events, ``about.host_approval``; see docs/integrations.md).

    Args:
        run: the active run.
        tool: a ``FunctionTool`` (e.g. from ``@function_tool``); it is not changed.
        server: the ``server`` recorded and matched by policies (default ``"local"``).
        grant: the grant recorded for every call (default ``implicit:<principal>``).
        deny_message: builds the message the model receives for a denied call.

    Returns:
        A new ``FunctionTool`` with the same name, description and schema; ``tool`` itself when it
        is already governed by ``run`` (it keeps its own ``server`` and ``grant``: its calls are
        recorded once).

    Raises:
        TypeError: ``tool`` is not a ``FunctionTool``.
        ConfigError: ``grant`` is one no call of this run may name
            (:meth:`~sealbox.recorder.RunContext.check_grant_id`: another principal's ``implicit:``);
            ``tool`` was made by ``Agent.as_tool()`` from an agent that is not instrumented (its
            tools would run ungoverned): make it with ``instrument(run, agent).as_tool(...)``;
            ``tool`` is already governed by another run (each call would be recorded into both):
            govern the original tool.
    """
    run.check_grant_id(grant)
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"governed_tool needs a FunctionTool, got {type(tool).__name__}")
    governing = _governing_run(tool)
    if governing is run:
        return tool
    if governing is not None:
        raise ConfigError(f"tool {tool.name!r} is already governed by run {governing.run_id} (governed_tool or "
                          f"instrument made it): governed again by run {run.run_id}, each call would be recorded "
                          "into both runs: govern the original tool, governed_tool(run, tool), once per run")
    _check_agent_tool(tool)
    upstream_server, upstream_tool = _tool_identity(tool, server)
    exposed = tool.name
    on_deny = deny_message or _default_deny_message

    async def governed(ctx: Any, input: str, invoke: Callable[[], Any]) -> Any:
        call_id = getattr(ctx, "tool_call_id", None)
        await _host_standing_approval(run, ctx, tool, upstream_server, upstream_tool, input)
        _host_answer_from_context(run, ctx)  # a call the SDK asked the host about runs: approved
        try:
            return await run.acall_tool(upstream_server, upstream_tool, parse_arguments(input),
                                        lambda *_a, **_k: invoke(), grant=grant,
                                        call_id=unused_call_id(run, call_id),
                                        exposed=exposed, agent=_acting_agent(ctx))
        except ToolDenied as denied:
            return on_deny(denied)
        except ReplayedError as served:
            if served.type == "CancelledError" and getattr(run, "replay", None) is not None \
                    and getattr(tool, "timeout_seconds", None):
                # recorded cut short by the SDK's timeout= (it cancels on_invoke_tool): served from the
                # record, wait to be cut short again, so the SDK's timeout handling runs as it did
                await asyncio.Event().wait()
            raise

    new = copy.copy(tool)
    for field in ("tool_input_guardrails", "tool_output_guardrails"):
        if getattr(tool, field, None):
            setattr(new, field, recorded_guardrails(run, list(getattr(tool, field))))
    new.needs_approval = _host_approval_gate(run, tool, upstream_server, upstream_tool)
    inner = tool.on_invoke_tool
    if _SdkInvoker is not None and isinstance(inner, _SdkInvoker):
        impl = inner._invoke_tool_impl

        async def recorded_impl(ctx: ToolContext[Any], input: str) -> Any:
            try:
                return await governed(ctx, input, lambda: impl(ctx, input))
            except (RecordingError, ApprovalPending) as exc:
                raise _RecordingAbort(exc) from exc

        for name in ("__agents_prepare_arguments__", "__agents_function_tool_wrapped_callable__"):
            _copy_attr(impl, recorded_impl, name)
        recorded_impl._sealbox_run = run  # type: ignore[attr-defined]
        invoker = _GovernedInvoker(recorded_impl, inner._on_handled_error, function_tool=new)
        _copy_attr(inner, invoker, "__agents_sync_function_tool__")
        new.on_invoke_tool = invoker
    else:
        async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
            try:
                return await governed(ctx, input, lambda: inner(ctx, input))
            except (RecordingError, ApprovalPending) as stop:  # a FunctionTool built by hand: as above
                raise _passing_the_sdk(stop) from stop.__cause__

        on_invoke_tool._sealbox_run = run  # type: ignore[attr-defined]
        new.on_invoke_tool = on_invoke_tool
    return new


def governed_tools(run: RunContext, tools: list[Any], *, server: str = DEFAULT_SERVER, grant: str | None = None,
                   deny_message: DenyMessage | None = None) -> list[Any]:
    """:func:`governed_tool` applied to every ``FunctionTool`` in ``tools``.

    Other tools (hosted tools such as ``WebSearchTool``, which the provider
    runs, and non-function local tools) are returned unchanged and are not
    governed; see ``docs/integrations.md``.

    Args:
        run: the active run.
        tools: an agent's tools.
        server, grant, deny_message: as for :func:`governed_tool`.

    Returns:
        A new list.

    Raises:
        ConfigError: as for :func:`governed_tool` (also when no tool is a ``FunctionTool``).
    """
    run.check_grant_id(grant)
    return [governed_tool(run, t, server=server, grant=grant, deny_message=deny_message)
            if isinstance(t, FunctionTool) else t for t in tools]


# --------------------------------------------------------------------------- the SDK's own approvals


class _HostApprovals:
    """The SDK's ``needs_approval`` calls of one run seen in this process: ``needed`` (call id -> what
    was asked: server, tool, arguments), those recorded as asked, and those answered."""

    def __init__(self) -> None:
        self.needed: dict[str, dict[str, Any]] = {}
        self.asked: set[str] = set()
        self.answered: set[str] = set()


_HOST_APPROVALS: "weakref.WeakKeyDictionary[RunContext, _HostApprovals]" = weakref.WeakKeyDictionary()

#: Said in every note about the SDK's approvals: they are the host application's, never a Sealbox approval.
HOST_APPROVAL_BY = "host application (openai-agents needs_approval)"


def _approval_status(ctx: Any, tool_name: str, call_id: str) -> bool | None:
    """The SDK's decision for ``call_id`` in ``ctx`` (True approved, False rejected, None not answered)."""
    try:
        status = ctx.is_tool_approved(tool_name, call_id)
    except Exception:  # noqa: BLE001 - an SDK without it, or an ambiguous lookup: not known
        return None
    return status if isinstance(status, bool) else None


def _host_approval_gate(run: RunContext, tool: FunctionTool, server: str, tool_name: str) -> Any:
    """``tool.needs_approval`` (True or a callable) as a callable that also records what the SDK asks the
    host application (a ``note``, ``about.host_approval.state = "asked"``); False stays False."""
    setting = tool.needs_approval
    if setting is False or not (setting is True or callable(setting)):
        return setting

    async def needs_approval(ctx: Any, params: Any, call_id: Any) -> bool:
        forced, needs_approval._sealbox_forced = needs_approval._sealbox_forced, None  # type: ignore[attr-defined]
        if setting is True or (forced is not None and parse_arguments(forced) == params):
            needed = True  # (forced: the SDK requires an approval without asking the function, see prepare_arguments)
        else:
            needed = setting(ctx, params, call_id)
            if hasattr(needed, "__await__"):
                needed = await needed
            needed = bool(needed)
        if needed and isinstance(call_id, str):
            host = _HOST_APPROVALS.setdefault(run, _HostApprovals())
            info = {"call_id": call_id, "server": server, "tool": tool_name, "arguments": params}
            host.needed.setdefault(call_id, info)
            if _approval_status(ctx, tool.name, call_id) is None and call_id not in host.asked:
                host.asked.add(call_id)
                run.note(f"host approval asked: {server}/{tool_name} call {call_id} (the SDK's needs_approval: "
                         "the host application answers, not a Sealbox approver)",
                         about={"host_approval": {"state": "asked", **info, "by": HOST_APPROVAL_BY}})
        return needed

    needs_approval._sealbox_run = run  # type: ignore[attr-defined]
    needs_approval._sealbox_forced = None  # type: ignore[attr-defined]
    return needs_approval


def _host_answered(run: RunContext, call_id: Any, decision: str, message: Any = None) -> None:
    """Record the host application's answer to an SDK approval of ``call_id`` (once), if one was needed."""
    host = _HOST_APPROVALS.get(run)
    if host is None or not isinstance(call_id, str) or call_id not in host.needed or call_id in host.answered:
        return
    host.answered.add(call_id)
    info = host.needed[call_id]
    answer: dict[str, Any] = {"state": "answered", "call_id": call_id, "server": info["server"], "tool": info["tool"],
                              "decision": decision, "standing": call_id not in host.asked, "by": HOST_APPROVAL_BY}
    if message is not None:
        answer["message"] = message
    run.note(f"host approval answered: {decision} {info['server']}/{info['tool']} call {call_id} (the host "
             "application's answer through the SDK, not a Sealbox approval)", about={"host_approval": answer})


async def _host_standing_approval(run: RunContext, ctx: Any, tool: FunctionTool, server: str, tool_name: str,
                                  input: str) -> None:
    """A call about to run that the SDK approved without consulting ``needs_approval`` (an earlier
    ``always_approve``: the SDK asks nothing once a tool's calls have a standing answer): if the tool's
    setting needs an approval for it (True, or its function says so; one that raises: needed, as the SDK
    takes it), it is noted as needed, so that its answer is recorded ``standing: true``."""
    setting = tool.needs_approval
    call_id = getattr(ctx, "tool_call_id", None)
    if setting is False or not (setting is True or callable(setting)) or not isinstance(call_id, str):
        return
    host = _HOST_APPROVALS.get(run)
    if (host is not None and call_id in host.needed) or _approval_status(ctx, tool.name, call_id) is not True \
            or _approved_by_id(ctx, call_id):
        return
    params = parse_arguments(input)
    if setting is not True:
        try:
            needed = setting(ctx, params, call_id)
            if hasattr(needed, "__await__"):
                needed = await needed
        except Exception:  # noqa: BLE001 - the SDK treats a failing needs_approval as needing one
            needed = True
        if not needed:
            return
    _HOST_APPROVALS.setdefault(run, _HostApprovals()).needed[call_id] = {
        "call_id": call_id, "server": server, "tool": tool_name, "arguments": params}


def _approved_by_id(ctx: Any, call_id: str) -> bool:
    """Whether the SDK's approvals in ``ctx`` name ``call_id`` itself (``state.approve(item)``: an answer
    to that call, asked where the run state was made), not a standing ``always_approve``."""
    records = getattr(ctx, "_approvals", None)
    values = records.values() if isinstance(records, dict) else ()
    return any(isinstance(getattr(r, "approved", None), list) and call_id in r.approved for r in values)


def _host_answer_from_context(run: RunContext, ctx: Any, *, running: bool = True) -> None:
    """A call the SDK asked about is about to run (``running``: the SDK runs it only once approved) or be
    checked by a tool input guardrail (which may also run before the question is asked: approved only
    when the SDK says so): record the host's approval."""
    host = _HOST_APPROVALS.get(run)
    call_id = getattr(ctx, "tool_call_id", None)
    if host is None or call_id not in host.needed or call_id in host.answered:
        return
    status = _approval_status(ctx, getattr(ctx, "tool_name", None) or host.needed[call_id]["tool"], call_id)
    if status is True or (running and status is None):
        _host_answered(run, call_id, "approve")


def _host_rejections(run: RunContext, input: Any) -> None:
    """Before a model call: an asked call whose output the model is given, though it never ran, was
    rejected by the host (the output is the SDK's rejection message)."""
    host = _HOST_APPROVALS.get(run)
    if host is None or len(host.answered) == len(host.needed) or not isinstance(input, list):
        return
    for item in input:
        get = item.get if isinstance(item, dict) else (lambda k, _i=item: getattr(_i, k, None))
        if get("type") == "function_call_output" and get("call_id") in host.needed:
            _host_answered(run, get("call_id"), "reject", to_plain(get("output")))


# --------------------------------------------------------------------------- model


def _tool_spec(tool: Any) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        return {"type": "function", "name": tool.name, "description": tool.description,
                "parameters": tool.params_json_schema, "strict": tool.strict_json_schema}
    return {"type": type(tool).__name__, "name": getattr(tool, "name", None)}


def _output_schema(schema: Any) -> Any:
    if schema is None:
        return None
    try:
        return None if schema.is_plain_text() else {"name": schema.name(), "schema": schema.json_schema()}
    except Exception:  # noqa: BLE001 - describing the schema must never fail the call
        return {"name": type(schema).__name__}


def _settings(settings: Any) -> Any:
    try:
        return {k: v for k, v in settings.to_json_dict().items() if v is not None}
    except Exception:  # noqa: BLE001
        return to_plain(settings)


def _usage(usage: Any) -> dict[str, int]:
    return {k: int(getattr(usage, k, 0) or 0) for k in ("input_tokens", "output_tokens", "total_tokens", "requests")}


class SealboxModel(Model):
    """An Agents SDK ``Model`` that records every call of the model it wraps as a ``model.call``.

    The request is recorded as ``{"model", "agent", "instructions", "input",
    "tools", "handoffs", "output_schema", "model_settings",
    "previous_response_id", "conversation_id"}`` and the response as an OpenAI
    Responses object (``{"object": "response", "id", "model", "output", "usage"}``),
    so that the function calls it requests are linked by call id. A call that
    raises (or is cancelled: a timeout, the run cancelled, a stream closed before it completed) is
    recorded with ``response = {"error": {...}}`` and re-raised.

    Args:
        inner: the model to wrap, or None to resolve ``model_name`` through
            ``model_provider`` on first use.
        run: the active run.
        agent_name: the agent using this model (recorded in the request).
        model_name: the model's name (default: ``inner.model`` if it is a string).
        provider: the provider recorded (default: ``"openai"`` for the SDK's
            OpenAI models, else ``"unknown"``).
        model_provider: resolves ``model_name`` when ``inner`` is None (default:
            the SDK's ``MultiProvider``).
    """

    def __init__(self, inner: Model | None, run: RunContext, *, agent_name: str | None = None,
                 model_name: str | None = None, provider: str | None = None, model_provider: Any = None) -> None:
        self._inner, self.run, self.agent_name = inner, run, agent_name
        self._model_provider = model_provider
        inner_name = getattr(inner, "model", None)
        self.model_name = model_name or (inner_name if isinstance(inner_name, str) else None) or (
            get_default_model() if inner is None else type(inner).__name__)
        self.provider = provider or self._guess_provider(inner, self.model_name)

    @staticmethod
    def _guess_provider(inner: Model | None, name: str) -> str:
        if inner is None:  # MultiProvider names: "gpt-4.1" (OpenAI) or "<prefix>/<model>"
            return name.split("/", 1)[0] if "/" in name else "openai"
        return "openai" if type(inner).__module__.startswith("agents.models.openai") else "unknown"

    @property
    def inner(self) -> Model:
        """The wrapped model (resolved on first use when built from a name)."""
        if self._inner is None:
            if self._model_provider is None:
                from agents import MultiProvider

                self._model_provider = MultiProvider()
            self._inner = self._model_provider.get_model(self.model_name)
        return self._inner

    def _request(self, system_instructions: str | None, input: Any, model_settings: Any, tools: list[Any],
                 output_schema: Any, handoffs: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model_name, "agent": self.agent_name, "instructions": system_instructions,
            "input": to_plain(input), "tools": [_tool_spec(t) for t in tools or []],
            "handoffs": [{"tool_name": h.tool_name, "agent_name": h.agent_name} for h in handoffs or []],
            "output_schema": _output_schema(output_schema), "model_settings": _settings(model_settings),
        }
        for key in ("previous_response_id", "conversation_id"):
            if kwargs.get(key) is not None:
                request[key] = kwargs[key]
        return request

    def _record(self, request: dict[str, Any], response: ModelResponse, latency: float | None,
                step: str | None = None) -> None:
        """Record a call; ``latency`` None: not known (a response served from the record in a replay)."""
        usage: dict[str, int] | None = _usage(response.usage)
        if not (usage["input_tokens"] or usage["output_tokens"] or usage["total_tokens"]):
            # the SDK's Usage(requests=1) when the provider sent no usage: not known to be 0 tokens, so
            # recorded as missing (a token or cost budget then fails closed, docs/policy.md)
            usage = None
        recorded = {"object": "response", "id": response.response_id, "model": self.model_name,
                    "output": to_plain(list(response.output)), "usage": usage}
        if response.request_id:
            recorded["request_id"] = response.request_id
        self.run.model_call(request, recorded, usage=usage, latency=latency, provider=self.provider,
                            model=self.model_name, step=step)

    def _record_error(self, request: dict[str, Any], exc: BaseException, latency: float | None,
                      step: str | None = None) -> None:
        self.run.model_error(request, exc, latency=latency, provider=self.provider, model=self.model_name, step=step)

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any,
                           tools: list[Any], output_schema: Any, handoffs: list[Any], tracing: Any,
                           **kwargs: Any) -> ModelResponse:
        """Call the wrapped model and record the call (see the class docstring).

        In a replay (``run.replay`` set, docs/replay.md) the recorded response is served
        and the wrapped model is not called.

        The call's step is taken when it starts, not when it returns: a parallel input guardrail
        (which takes its step when it starts too) gets the same step in a replay, where the model
        answers at once."""
        request = self._request(system_instructions, input, model_settings, tools, output_schema, handoffs, kwargs)
        _host_rejections(self.run, input)
        step = self.run.reserve_step()
        replay = getattr(self.run, "replay", None)
        if replay is not None and replay.serves_models:
            recorded = replay.model_response(self.run, step)
            if _cut_short(recorded):
                await self._wait_to_be_cut_short(request, step)
            return self._replayed(request, recorded, step)
        started = time.perf_counter()
        try:
            response = await self.inner.get_response(system_instructions, input, model_settings, tools,
                                                     output_schema, handoffs, tracing, **kwargs)
        except BaseException as exc:  # a cancelled call (a timeout, the run cancelled) was made too
            self._record_error(request, exc, time.perf_counter() - started, step)
            raise
        self._record(request, response, time.perf_counter() - started, step)
        return response

    async def _wait_to_be_cut_short(self, request: dict[str, Any], step: str) -> None:
        """A call recorded as cancelled (a parallel input guardrail tripped, a timeout): in a replay it
        waits to be cancelled again, and is recorded so, instead of raising at once (which would end
        the turn before the guardrail trips)."""
        try:
            await asyncio.Event().wait()
        except BaseException as exc:
            self._record_error(request, exc, None, step)
            raise

    def _replayed(self, request: dict[str, Any], recorded: Any, step: str | None = None) -> ModelResponse:
        """A recorded response (as :meth:`_record` wrote it) back as a ``ModelResponse``, recorded again."""
        from openai.types.responses import ResponseOutputItem
        from pydantic import TypeAdapter

        from agents.usage import Usage

        recorded = recorded if isinstance(recorded, dict) else {}
        if set(recorded) == {"error"}:
            from sealbox.replay.values import rebuild_error

            error = rebuild_error(recorded["error"])
            self._record_error(request, error, None, step)
            raise error
        adapter = TypeAdapter(ResponseOutputItem)
        usage = {k: int(v or 0) for k, v in (recorded.get("usage") or {}).items()
                 if k in ("input_tokens", "output_tokens", "total_tokens", "requests")}
        response = ModelResponse(output=[adapter.validate_python(_set_fields(item)) for item in recorded.get("output") or []],
                                 usage=Usage(**usage), response_id=recorded.get("id"),
                                 request_id=recorded.get("request_id"))
        self._record(request, response, None, step)
        return response

    async def stream_response(self, system_instructions: str | None, input: Any, model_settings: Any,
                              tools: list[Any], output_schema: Any, handoffs: list[Any], tracing: Any,
                              **kwargs: Any) -> AsyncIterator[Any]:
        """Stream from the wrapped model; record the call when its ``response.completed`` event arrives
        (latency: from the call until that event, not the time the consumer then spends on it).

        In a replay that serves models from the record (docs/replay.md) the wrapped model is not called:
        the recorded response is streamed as one ``response.output_text.delta`` per text part of its
        messages, then ``response.completed`` with the whole response (not the recorded chunk
        boundaries; the same output, usage and ids)."""
        request = self._request(system_instructions, input, model_settings, tools, output_schema, handoffs, kwargs)
        _host_rejections(self.run, input)
        step = self.run.reserve_step()  # taken when the call starts, as for get_response
        replay = getattr(self.run, "replay", None)
        if replay is not None and replay.serves_models:  # never the live model in a replay served from the record
            recorded = replay.model_response(self.run, step)
            if _cut_short(recorded):
                await self._wait_to_be_cut_short(request, step)
            for event in self._replayed_stream(request, recorded, step):
                yield event
            return
        started = time.perf_counter()
        completed = None
        latency = 0.0  # until response.completed came (not the consumer's time on it after)
        try:
            async for event in self.inner.stream_response(system_instructions, input, model_settings, tools,
                                                          output_schema, handoffs, tracing, **kwargs):
                if getattr(event, "type", None) == "response.completed":
                    completed = getattr(event, "response", None)
                    latency = time.perf_counter() - started
                yield event
        except BaseException as exc:  # also cancelled, or the stream closed by its consumer (GeneratorExit)
            if completed is not None and isinstance(exc, GeneratorExit):  # closed after the response came
                self._record_completed(request, completed, latency, step)
            else:
                self._record_error(request, exc, time.perf_counter() - started, step)
            raise
        if completed is None:
            self._record_error(request, RuntimeError("the stream ended without response.completed"),
                               time.perf_counter() - started, step)
        else:
            self.run.model_call(request, completed, latency=latency, provider=self.provider, model=self.model_name,
                                step=step)

    def _replayed_stream(self, request: dict[str, Any], recorded: Any, step: str | None = None) -> list[Any]:
        """The stream events of a recorded streamed call (as :meth:`stream_response` recorded its
        ``response.completed``), the call recorded again; a recorded failure is raised (recorded too)."""
        from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent

        recorded = recorded if isinstance(recorded, dict) else {}
        if set(recorded) == {"error"}:
            from sealbox.replay.values import rebuild_error

            error = rebuild_error(recorded["error"])
            self._record_error(request, error, None, step)
            raise error
        response = Response.model_validate(_as_response(_set_fields(recorded)))
        events: list[Any] = []
        for index, item in enumerate(response.output):
            if getattr(item, "type", None) != "message":
                continue
            for part_index, part in enumerate(getattr(item, "content", None) or []):
                text = getattr(part, "text", None)
                if getattr(part, "type", None) == "output_text" and isinstance(text, str) and text:
                    events.append(ResponseTextDeltaEvent(
                        type="response.output_text.delta", item_id=item.id, output_index=index,
                        content_index=part_index, delta=text, logprobs=[], sequence_number=len(events)))
        events.append(ResponseCompletedEvent(type="response.completed", response=response,
                                             sequence_number=len(events)))
        self.run.model_call(request, response, latency=None, provider=self.provider, model=self.model_name, step=step)
        return events

    def _record_completed(self, request: dict[str, Any], completed: Any, latency: float,
                          step: str | None = None) -> None:
        """The streamed call's ``response.completed``, recorded while the stream is being closed (a
        recording failure is then attached to the GeneratorExit, not raised in its place)."""
        try:
            self.run.model_call(request, completed, latency=latency, provider=self.provider, model=self.model_name,
                                step=step)
        except Exception:  # noqa: BLE001 - as model_error does for an exception that is not an Exception
            pass

    def get_retry_advice(self, request: Any) -> Any:
        """Delegated to the wrapped model."""
        return self.inner.get_retry_advice(request)

    async def close(self) -> None:
        """Delegated to the wrapped model."""
        if self._inner is not None:
            await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        if self._inner is not None:
            await self._inner._cleanup_on_run_end(owner)


def _cut_short(recorded: Any) -> bool:
    """Whether a recorded model response is a call that was cancelled (``{"error": {"type": "CancelledError"}}``)."""
    error = recorded.get("error") if isinstance(recorded, dict) and set(recorded) == {"error"} else None
    return isinstance(error, dict) and error.get("type") == "CancelledError"


def _as_response(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded response as the fields an OpenAI ``Response`` requires: one recorded by
    ``get_response`` (``Runner.run``: ``object, id, model, output, usage``) or the empty one given for a
    step the record has no model call at lacks some; they get neutral values (the call is compared,
    and so stops the replay, when it is recorded again)."""
    data = {"id": "", "object": "response", "created_at": 0, "model": "", "output": [],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [], **recorded}
    usage = data.get("usage")
    if isinstance(usage, dict):
        from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

        def zeros(model: Any, given: Any) -> dict[str, Any]:
            required = {name: 0 for name, f in model.model_fields.items() if f.is_required()}
            return {**required, **(given if isinstance(given, dict) else {})}

        data["usage"] = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0, **usage,
                         "input_tokens_details": zeros(InputTokensDetails, usage.get("input_tokens_details")),
                         "output_tokens_details": zeros(OutputTokensDetails, usage.get("output_tokens_details"))}
    return data


def _set_fields(value: Any) -> Any:
    """A recorded output item without its null fields: rebuilt, the item then has the same
    *set* fields as the model's, so the SDK sends the same input items on the next turn."""
    if isinstance(value, dict):
        return {k: _set_fields(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set_fields(v) for v in value]
    return value


# --------------------------------------------------------------------------- guardrails

#: The kinds of guardrail the SDK runs, as recorded (``about.guardrail.kind``).
GUARDRAIL_KINDS = ("input", "output", "tool_input", "tool_output")


def _guardrail_kind(guardrail: Any) -> str | None:
    from agents.guardrail import InputGuardrail, OutputGuardrail
    from agents.tool_guardrails import ToolInputGuardrail, ToolOutputGuardrail

    for cls, kind in ((InputGuardrail, "input"), (OutputGuardrail, "output"),
                      (ToolInputGuardrail, "tool_input"), (ToolOutputGuardrail, "tool_output")):
        if isinstance(guardrail, cls):
            return kind
    return None


def _guardrail_name(guardrail: Any) -> str:
    try:
        name = guardrail.get_name()
    except Exception:  # noqa: BLE001 - a function without __name__ (a partial): still recorded
        name = None
    return name if isinstance(name, str) and name else type(guardrail.guardrail_function).__name__


def _error_of(exc: BaseException) -> dict[str, str]:
    from sealbox.recorder import exception_message

    return {"type": type(exc).__qualname__, "message": exception_message(exc)}


def _served_guardrail(run: RunContext, step: str, identity: dict[str, Any]) -> Any:
    """In a replay serving models from the record: the recorded outcome (``about.guardrail``, decoded and
    rebuilt) of the guardrail ``identity`` at ``step``, or ``_NOT_RECORDED`` when the record has no such
    guardrail there. None when the guardrail is to run for real (not a replay, or ``model="live"``)."""
    replay = getattr(run, "replay", None)
    if replay is None or not replay.serves_models:
        return None
    from sealbox.replay.values import rebuild

    rec = replay.recorded.steps.get(step)
    about = rec.payload.get("about") if rec is not None and rec.key.kind == "note" else None
    recorded = about.get("guardrail") if isinstance(about, dict) else None
    if not isinstance(recorded, dict) or any(recorded.get(k) != v for k, v in identity.items()):
        return _NOT_RECORDED
    if _redacted_value(recorded.get("output_info")):
        # a value redacted under its key name ({"api_key": …}): the outcome cannot be given back as it was
        # (served, its marker would be redacted again under another HMAC: a false mismatch); nor is it run.
        # Text holding a marker (a pattern redacted inside a string) is served and recorded as it was.
        from sealbox.replay.divergence import Divergence

        what = f"{identity['kind'].replace('_', ' ')} guardrail {identity['name']!r} of agent {identity['agent']!r}"
        replay.stop(Divergence("unreplayable", step, f"step {step}: the recorded {what} holds a redacted value in "
                               "its output_info: it cannot be served from the record, and it is not run (it may ask a "
                               "model of its own)", rec.key, None))
    return rebuild(recorded)


def _redacted_value(value: Any) -> bool:
    """Whether a stored value holds a whole value redacted under its key name (``{"$redacted": …}``)."""
    from sealbox.redaction import MARKER_TAG

    if isinstance(value, dict):
        return MARKER_TAG in value or any(_redacted_value(v) for v in value.values())
    return isinstance(value, list) and any(_redacted_value(v) for v in value)


#: How long a served guardrail waits for the replay to get as far as the record had when it finished.
SERVE_WAIT_S = 10.0


async def _as_far_as_recorded(run: RunContext, step: str) -> None:
    """Wait until the replay has got as far as the record had when the guardrail at ``step`` finished:
    every comparable step written before its note compared again, and the run's step counter at least
    the recorded ``next_step`` (a model call it cut short had started). A guardrail runs beside the
    model call and tool calls of the first turn; served at once, it would trip before them, where the
    recorded one tripped after. Gives up after :data:`SERVE_WAIT_S` (the replay has diverged elsewhere)
    or once the replay has stopped."""
    replay = run.replay
    recorded = replay.recorded
    rec = recorded.steps.get(step)
    reached = rec.payload.get("next_step") if rec is not None else None
    order = recorded.order
    before = order[:order.index(step)] if step in order else []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SERVE_WAIT_S
    while replay.halted() is None and loop.time() < deadline:
        if all(s in replay.compared for s in before) and (not isinstance(reached, int) or run.next_step >= reached):
            return
        await asyncio.sleep(0.001)


_NOT_RECORDED = object()


def _guardrail_text(identity: dict[str, Any], outcome: dict[str, Any]) -> str:
    what = f"{identity['kind']} guardrail {identity['name']!r} of agent {identity['agent']!r}"
    if "call_id" in identity:
        what += f" on tool call {identity['call_id']} ({identity.get('tool')})"
    if "error" in outcome:
        return f"{what} raised {outcome['error']['type']}"
    if "tripped" not in outcome:
        return f"{what}: no recorded outcome to serve"
    behavior = outcome.get("behavior")
    detail = f" ({behavior.get('type')})" if isinstance(behavior, dict) else ""
    return f"{what}: {'tripped' if outcome['tripped'] else 'passed'}{detail}"


def _record_guardrail(run: RunContext, step: str, identity: dict[str, Any], outcome: dict[str, Any]) -> None:
    """One guardrail run: a ``note`` (``about.guardrail``: identity and outcome, output_info encoded and
    redacted as content) and, when it tripped, a ``guardrail.tripped`` in the same step and transaction."""
    about = {"guardrail": {**identity, **outcome}}
    tripped = None
    if outcome.get("tripped"):
        tripped = {"limit": f"{identity['kind']}_guardrail:{identity['name']}", "current": 1, "bound": 0,
                   "guardrail": {k: identity[k] for k in ("name", "kind", "agent")}}
        if "call_id" in identity:
            tripped["call_id"] = identity["call_id"]
    run.note(_guardrail_text(identity, outcome), about=about, step=step, tripped=tripped)


def recorded_guardrail(run: RunContext, guardrail: Any) -> Any:
    """A copy of an SDK guardrail whose every run is recorded into ``run`` (and served from the
    record in a replay).

    ``guardrail`` is an ``InputGuardrail`` / ``OutputGuardrail`` (``@input_guardrail``,
    ``@output_guardrail``) or a ``ToolInputGuardrail`` / ``ToolOutputGuardrail``
    (``@tool_input_guardrail``, ``@tool_output_guardrail``). :func:`instrument` applies this to the
    guardrails of every agent and of every function tool; apply it yourself to the guardrails given in
    ``RunConfig(input_guardrails=…, output_guardrails=…)``, which no agent carries.

    Each run of the guardrail takes a step when it starts (:meth:`RunContext.reserve_step`) and records a
    ``note`` there: ``about = {"guardrail": {"name", "kind", "agent", "tripped", "output_info"}}`` (tool
    guardrails add ``"call_id"``, ``"tool"`` and ``"behavior"``; a guardrail that raised has ``"error":
    {type, message}`` instead of the outcome). One that tripped (``tripwire_triggered``; for a tool
    guardrail, a behavior other than ``allow``) also records a ``guardrail.tripped`` at that step:
    ``{"limit": "<kind>_guardrail:<name>", "current": 1, "bound": 0, "guardrail": {name, kind, agent}}``
    (plus ``call_id`` for a tool guardrail). See docs/integrations.md.

    In a replay serving models from the record (docs/replay.md) the guardrail function is not called:
    the recorded outcome is served (so a guardrail that calls a model of its own calls none) and
    recorded again; the record having no such guardrail at that step stops the replay (divergence).
    With ``model="live"`` it runs for real and its outcome is compared with the record.

    Returns:
        A copy with the same name (the original is not changed); ``guardrail`` itself when it is
        already recorded into ``run``.

    Raises:
        TypeError: ``guardrail`` is none of the four guardrail classes.
        ConfigError: ``guardrail`` is already recorded into another run.
    """
    kind = _guardrail_kind(guardrail)
    if kind is None:
        raise TypeError(f"recorded_guardrail needs an SDK guardrail, got {type(guardrail).__name__}")
    function = guardrail.guardrail_function
    owner = getattr(function, "_sealbox_run", None)
    if owner is run:
        return guardrail
    if owner is not None:
        raise ConfigError(f"guardrail {_guardrail_name(guardrail)!r} is already recorded into run {owner.run_id}: "
                          f"recorded again into run {run.run_id}, each of its runs would be recorded into both")
    name = _guardrail_name(guardrail)

    async def run_guardrail(*args: Any) -> Any:
        if kind == "tool_input":  # an approved call is checked before it runs: its answer first
            _host_answer_from_context(run, getattr(args[0], "context", None), running=False)
        step = run.reserve_step()  # when it starts: parallel guardrails and model calls keep their steps
        if kind in ("input", "output"):
            identity = {"name": name, "kind": kind, "agent": getattr(args[1], "name", None)}
        else:
            data = args[0]
            ctx = getattr(data, "context", None)
            identity = {"name": name, "kind": kind, "agent": getattr(getattr(data, "agent", None), "name", None),
                        "call_id": getattr(ctx, "tool_call_id", None), "tool": getattr(ctx, "tool_name", None)}
        served = _served_guardrail(run, step, identity)
        if served is _NOT_RECORDED:  # never run for real in a replay: recorded as attempted, which stops it
            run.note(_guardrail_text(identity, {}), about={"guardrail": identity}, step=step)
            raise RuntimeError(f"step {step}: the record has no {kind} guardrail {name!r} to serve")
        if served is not None:
            await _as_far_as_recorded(run, step)
            return await _serve_guardrail(run, step, identity, served)
        try:
            output = function(*args)
            if asyncio.iscoroutine(output) or hasattr(output, "__await__"):
                output = await output
        except BaseException as exc:
            _record_guardrail(run, step, identity, {"error": _error_of(exc)})
            raise
        _record_guardrail(run, step, identity, _outcome(kind, output))
        return output

    run_guardrail._sealbox_run = run  # type: ignore[attr-defined]
    run_guardrail.__name__ = name
    return dataclasses.replace(guardrail, guardrail_function=run_guardrail, name=name)


def _outcome(kind: str, output: Any) -> dict[str, Any]:
    if kind in ("input", "output"):
        return {"tripped": bool(getattr(output, "tripwire_triggered", False)),
                "output_info": getattr(output, "output_info", None)}
    behavior = dict(getattr(output, "behavior", None) or {"type": "allow"})
    return {"tripped": behavior.get("type") != "allow", "behavior": behavior,
            "output_info": getattr(output, "output_info", None)}


async def _serve_guardrail(run: RunContext, step: str, identity: dict[str, Any], served: dict[str, Any]) -> Any:
    from sealbox.replay.values import rebuild_error

    error = served.get("error")
    if isinstance(error, dict):
        if error.get("type") == "CancelledError":  # recorded cut short (another guardrail tripped): wait for it
            try:
                await asyncio.Event().wait()
            except BaseException as exc:
                _record_guardrail(run, step, identity, {"error": _error_of(exc)})
                raise
        failure = rebuild_error(error)
        _record_guardrail(run, step, identity, {"error": _error_of(failure)})
        raise failure
    outcome = {k: served.get(k) for k in ("tripped", "output_info")}
    if identity["kind"] in ("input", "output"):
        from agents.guardrail import GuardrailFunctionOutput

        output: Any = GuardrailFunctionOutput(output_info=outcome["output_info"],
                                              tripwire_triggered=bool(outcome["tripped"]))
    else:
        from agents.tool_guardrails import ToolGuardrailFunctionOutput

        output = ToolGuardrailFunctionOutput(output_info=outcome["output_info"],
                                             behavior=served.get("behavior") or {"type": "allow"})
    _record_guardrail(run, step, identity, _outcome(identity["kind"], output))
    return output


def recorded_guardrails(run: RunContext, guardrails: list[Any] | None) -> list[Any] | None:
    """:func:`recorded_guardrail` applied to each guardrail of ``guardrails`` (None stays None)."""
    return None if guardrails is None else [recorded_guardrail(run, g) for g in guardrails]


# --------------------------------------------------------------------------- agents


@dataclasses.dataclass
class _Options:
    run: RunContext
    server: str
    grant: str | None
    deny_message: DenyMessage | None
    model_provider: Any
    provider: str | None
    done: dict[int, Agent]


def instrument(run: RunContext, agent: Agent, *, server: str = DEFAULT_SERVER, grant: str | None = None,
               deny_message: DenyMessage | None = None, model_provider: Any = None,
               provider: str | None = None) -> Agent:
    """A copy of ``agent`` (and of every agent reachable by handoff) recorded into ``run``.

    Each copy's model is a :class:`SealboxModel`; its function tools are
    :func:`governed_tool` copies; each handoff records a ``note`` event and leads
    to the instrumented copy of its target. The originals are not changed;
    cycles of handoffs are preserved.

    An agent whose model is a name (or None, the SDK default) gets a
    :class:`SealboxModel` that resolves the name through ``model_provider`` on
    first use, with the same default model settings the SDK would apply. Do not
    set ``RunConfig.model`` on an instrumented run: it replaces the recorded model.

    Args:
        run: the active run.
        agent: the entry agent.
        server, grant, deny_message: as for :func:`governed_tool`.
        model_provider: resolves model names (default: the SDK's ``MultiProvider``).
        provider: the provider recorded for every model call (default: detected).

    An agent already instrumented into ``run`` (its model a :class:`SealboxModel` of ``run``) is
    returned as it is. One instrumented into another run (``instrument(run2, instrument(run1,
    agent))``, also as a handoff target) is refused: its model calls and tool calls would be
    recorded into both runs. Instrument the original agent for each run.

    Returns:
        The instrumented copy of ``agent``.

    Raises:
        ConfigError: as for :func:`governed_tool`; ``agent``, or an agent reachable from it by
            handoff, is instrumented into another run (its model a ``SealboxModel`` of that run).
    """
    run.check_grant_id(grant)
    return _instrument(agent, _Options(run, server, grant, deny_message, model_provider, provider, {}))


def _instrument(agent: Agent, opts: _Options) -> Agent:
    if isinstance(agent.model, SealboxModel):
        if agent.model.run is opts.run:
            return agent
        raise ConfigError(f"agent {agent.name!r} is already instrumented into run {agent.model.run.run_id} (its "
                          f"model is a SealboxModel of that run): instrumented again into run {opts.run.run_id}, "
                          "its model calls and tool calls would be recorded into both runs: instrument the "
                          "original agent, instrument(run, agent), for each run (not the copy instrument returned)")
    if id(agent) in opts.done:
        return opts.done[id(agent)]
    changes: dict[str, Any] = {"tools": governed_tools(opts.run, list(agent.tools), server=opts.server,
                                                       grant=opts.grant, deny_message=opts.deny_message)}
    changes["input_guardrails"] = recorded_guardrails(opts.run, list(agent.input_guardrails))
    changes["output_guardrails"] = recorded_guardrails(opts.run, list(agent.output_guardrails))
    if isinstance(agent.model, Model):
        changes["model"] = SealboxModel(agent.model, opts.run, agent_name=agent.name, provider=opts.provider)
    else:
        name = agent.model or get_default_model()
        changes["model"] = SealboxModel(None, opts.run, agent_name=agent.name, model_name=name,
                                        provider=opts.provider, model_provider=opts.model_provider)
        if agent.model_settings == get_default_model_settings(agent.model):
            # keep the defaults the SDK applies to a model given by name (e.g. GPT-5 reasoning)
            changes["model_settings"] = get_default_model_settings(name)
    clone = agent.clone(**changes)
    opts.done[id(agent)] = clone
    clone.handoffs = [_instrument_handoff(h, agent.name, opts) for h in agent.handoffs]
    return clone


def _instrument_handoff(item: Any, from_name: str, opts: _Options) -> Any:
    if isinstance(item, Agent):
        item = handoff(_instrument(item, opts))
    elif not isinstance(item, Handoff):
        return item
    original = item.on_invoke_handoff
    target = item._agent_ref() if getattr(item, "_agent_ref", None) is not None else None

    async def on_invoke_handoff(ctx: Any, input_json: str) -> Any:
        to_agent = _instrument(await original(ctx, input_json), opts)
        opts.run.note(f"handoff: {from_name} -> {to_agent.name}",
                      about={"handoff": {"from": from_name, "to": to_agent.name, "tool_name": item.tool_name}})
        return to_agent

    wrapped = dataclasses.replace(item, on_invoke_handoff=on_invoke_handoff)
    if target is not None:
        wrapped._agent_ref = weakref.ref(_instrument(target, opts))
    return wrapped
