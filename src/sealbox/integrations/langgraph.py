"""Record a LangGraph (or LangChain) run into a Sealbox run.

Usage::

    from langgraph.prebuilt import create_react_agent
    from sealbox.integrations.langgraph import SealboxCallbackHandler, governed_tools

    with recorder.run(agent="researcher") as run:
        graph = create_react_agent(model, governed_tools(run, [search, fetch]))
        state = graph.invoke({"messages": [("user", "…")]},
                             config={"callbacks": [SealboxCallbackHandler(run)]})

Two parts, because a callback cannot stop a tool:

- :func:`governed_tools` wraps each LangChain tool so that its invocation goes
  through :meth:`RunContext.call_tool` / :meth:`RunContext.acall_tool` with the
  model's tool call id: ``tool.call`` and ``policy.decision`` are committed
  **before** the tool runs; a denied call never runs and returns an error
  ``ToolMessage`` (``status="error"``) so the graph goes on; then ``tool.result``.
- :class:`SealboxCallbackHandler` records every chat-model call as a
  ``model.call`` (request: messages, invocation parameters with the bound
  tools; response: the ``LLMResult`` with its ``AIMessage``; usage; latency),
  so that the tool calls it requests are linked by id to the ``tool.call``
  events, and the graph's final state as ``state.saved``. A tool that ran
  without being governed is recorded as a ``note`` (it had no record before it
  ran, and that gap should be visible).
"""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from pydantic import PrivateAttr

from sealbox.adapters import to_plain
from sealbox.approvals import ApprovalPending
from sealbox.errors import RecordingError
from sealbox.recorder import RunContext, ToolDenied, current_run, unused_call_id
from sealbox.replay.values import ReplayedError

__all__ = ["DEFAULT_SERVER", "GovernedTool", "SealboxCallbackHandler", "governed_tool", "governed_tools"]

#: The ``server`` recorded for in-process LangChain tools (policies match it).
DEFAULT_SERVER = "local"

#: The run whose governed tool is running, so that run's handler can tell governed tool runs from others
#: (a handler of another run, a sub-agent's opened inside the tool, still notes its ungoverned tools).
_GOVERNED: contextvars.ContextVar[Any] = contextvars.ContextVar("sealbox_langgraph_governed", default=None)

DenyMessage = Callable[[ToolDenied], str]


def _default_deny_message(denied: ToolDenied) -> str:
    return f"Error: this tool call was not allowed and did not run. {denied}"


#: What a LangGraph tool raises to steer the graph, not as a failure: ``interrupt()`` (waiting for a
#: human: the tool runs again once answered), ``Command(graph=PARENT)``. Recorded in ``tool.result``,
#: never counted by the circuit breaker (five interrupts opened it; the answered calls were denied).
_CONTROL_FLOW: tuple[type[BaseException], ...] = ()
_BUBBLE_UP: type[BaseException] | None = None
#: What a node raises when the graph stops to wait for a human (``interrupt()``); the graph's own
#: chain then ends normally, with the state it is waiting in.
_INTERRUPT: tuple[type[BaseException], ...] = ()
try:
    from langgraph.errors import GraphBubbleUp, GraphInterrupt

    _CONTROL_FLOW = (GraphBubbleUp,)
    _INTERRUPT = (GraphInterrupt,)
    _BUBBLE_UP = GraphBubbleUp
except ImportError:  # pragma: no cover - langchain without langgraph
    pass


def _interrupts_from(text: str) -> tuple[Any, ...] | None:
    """The ``Interrupt`` objects a recorded ``GraphInterrupt`` message spells (its ``str()``: the repr of a
    tuple of ``Interrupt(value=..., id=...)``), read with ``ast.literal_eval`` for each field (never
    evaluated as code); None when it does not parse that way (a value that is not a literal, a
    message cut short or redacted)."""
    import ast

    try:
        from langgraph.types import Interrupt

        node = ast.parse(text, mode="eval").body if len(text) <= 1_000_000 else None
    except (ImportError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    out = []
    for item in items:
        if not (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "Interrupt"
                and not item.args and all(k.arg for k in item.keywords)):
            return None
        try:
            out.append(Interrupt(**{str(k.arg): ast.literal_eval(k.value) for k in item.keywords}))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
    return tuple(out) or None


def _replayed_interrupt(run: Any, served: ReplayedError) -> BaseException | None:
    """In a replay, the served error of a call that stopped in ``interrupt()`` as the ``GraphInterrupt``
    LangGraph needs to stop the graph again (with the recorded interrupt values), or None."""
    if not _INTERRUPT or getattr(run, "replay", None) is None or served.type.rpartition(".")[2] != "GraphInterrupt":
        return None
    interrupts = _interrupts_from(str(served))
    return _INTERRUPT[0](interrupts) if interrupts is not None else None

#: The handler base LangGraph calls ``on_interrupt`` on (only instances of it get graph lifecycle events):
#: how a graph stopped by a static breakpoint (``interrupt_before`` / ``interrupt_after``) is told apart
#: from a finished one, as no node raised there.
_HandlerBase: type[BaseCallbackHandler] = BaseCallbackHandler
try:
    from langgraph.callbacks import GraphCallbackHandler as _HandlerBase  # type: ignore[no-redef]
except ImportError:  # pragma: no cover - langchain without langgraph
    pass

#: RecordingError / ApprovalPending subclasses that are also LangGraph's GraphBubbleUp (see below).
_PASSING: dict[type, type] = {}


def _passing_the_graph(error: Exception) -> Exception:
    """``error`` as an instance of a subclass of its own type that is also LangGraph's
    ``GraphBubbleUp``, which ``ToolNode`` (whatever its ``handle_tool_errors``) and retry policies
    let through to the caller of ``invoke``: a call that cannot be recorded fails the graph, and a
    call waiting for an approval suspends the run, instead of the model being told "Error: …" and
    the graph going on (``error`` itself without LangGraph)."""
    if _BUBBLE_UP is None:
        return error
    base = type(error)
    cls = _PASSING.get(base)
    if cls is None:
        cls = _PASSING[base] = type(base.__name__, (base, _BUBBLE_UP),
                                    {"__module__": base.__module__, "__qualname__": base.__qualname__})
    out = cls.__new__(cls, *error.args)
    out.__dict__.update(error.__dict__)
    out.args = error.args
    return out


def _tool_message_failure(result: Any) -> str | None:
    """The failure a wrapped tool reported in what it returned: LangChain's ``BaseTool.run`` turns
    an error it handles itself (``handle_tool_error`` / ``handle_validation_error``) into a
    ``ToolMessage`` with ``status="error"`` instead of raising; recorded ``ok: false`` with that
    message (:meth:`~sealbox.recorder.RunContext.call_tool`, ``failure``), not as a success."""
    if isinstance(result, ToolMessage) and result.status == "error":
        content = result.content
        return content if isinstance(content, str) else str(content)
    return None


# --------------------------------------------------------------------------- tools


class GovernedTool(BaseTool):
    """A LangChain tool whose invocations are recorded and decided by a Sealbox run's policy.

    Build it with :func:`governed_tool`. It presents the wrapped tool's name,
    description and schemas (so ``bind_tools`` and LangGraph's argument
    injection see the same tool) and runs the wrapped tool's own ``run`` /
    ``arun`` (so its callbacks, validation and error handling are unchanged).

    Attributes:
        inner: the wrapped tool.
        server: the ``server`` recorded and matched by policies.
        grant: the grant recorded (None: ``implicit:<principal>``).
    """

    inner: BaseTool
    server: str = DEFAULT_SERVER
    grant: str | None = None
    _sealbox_run: Any = PrivateAttr(default=None)
    _deny_message: Any = PrivateAttr(default=None)

    # -- the wrapped tool's schemas

    def get_input_schema(self, config: Any = None) -> Any:
        """The wrapped tool's input schema."""
        return self.inner.get_input_schema(config)

    @property
    def tool_call_schema(self) -> Any:
        """The wrapped tool's schema as the model sees it."""
        return self.inner.tool_call_schema

    @property
    def args(self) -> dict[str, Any]:
        """The wrapped tool's arguments."""
        return self.inner.args

    @property
    def func(self) -> Any:
        """The wrapped tool's function, if any (LangGraph reads its annotations for injection)."""
        return getattr(self.inner, "func", None)

    @property
    def coroutine(self) -> Any:
        """The wrapped tool's coroutine, if any."""
        return getattr(self.inner, "coroutine", None)

    # -- invocation

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - run() is overridden
        raise NotImplementedError("GovernedTool runs through run()/arun()")

    def _arguments(self, tool_input: Any) -> Any:
        if isinstance(tool_input, dict):
            try:  # leave out what LangGraph injects (state, store, runtime): the model did not send it
                return self.inner._filter_injected_args(tool_input)
            except Exception:  # noqa: BLE001
                return dict(tool_input)
        return tool_input

    def _denied(self, denied: ToolDenied, call_id: str | None) -> Any:
        message = (self._deny_message or _default_deny_message)(denied)
        if call_id is None:
            return message
        return ToolMessage(content=message, tool_call_id=call_id, name=self.name, status="error")

    def _served_error(self, served: ReplayedError, tool_input: Any, call_id: str | None) -> BaseException:
        """The exception to raise for a recorded error served by a replay, as LangGraph needs it: a call
        that stopped in ``interrupt()`` stops the graph again (``GraphInterrupt`` with the recorded
        values); a call whose arguments the tool's schema refused gets the same pydantic
        ``ValidationError`` again, from validating the recorded arguments (the tool does not run), which
        ``ToolNode`` turns into the same message for the model. Else ``served`` itself."""
        run = self._sealbox_run
        interrupted = _replayed_interrupt(run, served)
        if interrupted is not None:
            return interrupted
        if getattr(run, "replay", None) is not None and served.type.rpartition(".")[2] == "ValidationError":
            from pydantic import ValidationError

            try:
                self.inner._parse_input(tool_input, call_id)
            except ValidationError as refused:
                return refused
            except Exception:  # noqa: BLE001 - validation fails otherwise now: report what the record says
                pass
        return served

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        """Record and decide the call, run the wrapped tool if allowed, record its result."""
        call_id = kwargs.get("tool_call_id")
        token = _GOVERNED.set(self._sealbox_run)
        try:
            return self._sealbox_run.call_tool(
                self.server, self.inner.name, self._arguments(tool_input),
                lambda *_a, **_k: self.inner.run(tool_input, *args, **kwargs),
                grant=self.grant, call_id=unused_call_id(self._sealbox_run, call_id), exposed=self.name,
                failure=_tool_message_failure, control_flow=_CONTROL_FLOW)
        except ToolDenied as denied:
            return self._denied(denied, call_id)
        except ReplayedError as served:  # a replay: see _served_error
            raise self._served_error(served, tool_input, call_id) from None
        except (RecordingError, ApprovalPending) as stop:
            raise _passing_the_graph(stop) from stop.__cause__
        finally:
            _GOVERNED.reset(token)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        """Async form of :meth:`run`."""
        call_id = kwargs.get("tool_call_id")
        token = _GOVERNED.set(self._sealbox_run)
        try:
            return await self._sealbox_run.acall_tool(
                self.server, self.inner.name, self._arguments(tool_input),
                lambda *_a, **_k: self.inner.arun(tool_input, *args, **kwargs),
                grant=self.grant, call_id=unused_call_id(self._sealbox_run, call_id), exposed=self.name,
                failure=_tool_message_failure, control_flow=_CONTROL_FLOW)
        except ToolDenied as denied:
            return self._denied(denied, call_id)
        except ReplayedError as served:  # a replay: see _served_error
            raise self._served_error(served, tool_input, call_id) from None
        except (RecordingError, ApprovalPending) as stop:
            raise _passing_the_graph(stop) from stop.__cause__
        finally:
            _GOVERNED.reset(token)


def governed_tool(run: RunContext, tool: Any, *, server: str = DEFAULT_SERVER, grant: str | None = None,
                  deny_message: DenyMessage | None = None) -> GovernedTool:
    """Wrap one LangChain tool so that every invocation is recorded before it runs.

    Args:
        run: the active run.
        tool: a ``BaseTool``, or a plain function (made a tool with
            ``langchain_core.tools.tool``).
        server: the ``server`` recorded and matched by policies (default ``"local"``).
        grant: the grant recorded for every call (default ``implicit:<principal>``).
        deny_message: builds the text of the error ``ToolMessage`` a denied call returns.

    Returns:
        A :class:`GovernedTool` with the same name, description and schema.

    Raises:
        ConfigError: ``grant`` is one no call of this run may name
            (:meth:`~sealbox.recorder.RunContext.check_grant_id`: another principal's ``implicit:``).
    """
    run.check_grant_id(grant)
    if not isinstance(tool, BaseTool):
        from langchain_core.tools import tool as make_tool

        from sealbox.recorder import _undecorated

        tool = make_tool(_undecorated(tool))  # a @recorder.tool function: the governed call is its record
    if isinstance(tool, GovernedTool):
        tool = tool.inner
    governed = GovernedTool(
        name=tool.name, description=tool.description, args_schema=tool.args_schema,
        return_direct=tool.return_direct, response_format=tool.response_format, tags=tool.tags,
        metadata=tool.metadata, extras=getattr(tool, "extras", None), inner=tool, server=server, grant=grant)
    governed._sealbox_run = run
    governed._deny_message = deny_message
    return governed


def governed_tools(run: RunContext, tools: Sequence[Any], *, server: str = DEFAULT_SERVER, grant: str | None = None,
                   deny_message: DenyMessage | None = None) -> list[BaseTool]:
    """:func:`governed_tool` for each tool; pass the result to ``create_react_agent`` / ``ToolNode``.

    Args:
        run: the active run.
        tools: LangChain tools or plain functions.
        server, grant, deny_message: as for :func:`governed_tool`.

    Returns:
        A new list of :class:`GovernedTool`.

    Raises:
        ConfigError: as for :func:`governed_tool` (also for an empty list).
    """
    run.check_grant_id(grant)
    return [governed_tool(run, t, server=server, grant=grant, deny_message=deny_message) for t in tools]


# --------------------------------------------------------------------------- callbacks


_LS_KEYS = ("ls_provider", "ls_model_name", "ls_model_type", "ls_temperature", "ls_max_tokens",
            "langgraph_node", "langgraph_step")


class SealboxCallbackHandler(_HandlerBase):  # type: ignore[valid-type,misc]
    """A LangChain callback handler recording model calls and the final state into a run.

    - ``on_chat_model_start`` / ``on_llm_start`` → ``on_llm_end``: one
      ``model.call``, format ``langchain``: the request is ``{"model", "messages"
      (or "prompts"), "invocation_params", "tools", "metadata"}``, the response the
      ``LLMResult`` (its ``AIMessage`` holds the tool calls and ``usage_metadata``).
      ``on_llm_error`` records the call with ``response = {"error": …}``; so does ``on_chain_error``
      of the chain that called it, for a call cut short (cancelled) without an ``on_llm_error``.
    - ``on_chain_end`` of the outermost chain (the graph; also one invoked inside a tool of another
      graph, this handler given in its own config: a sub-agent's) → ``state.saved``
      with the final state (``label="final"``), or the state it waits in when a node called
      ``interrupt()`` or the graph stopped at a static breakpoint (``interrupt_before`` /
      ``interrupt_after``) (``label="interrupted"``).
    - ``on_tool_start`` of a tool that is not a :class:`GovernedTool` → a ``note``
      (the tool ran without a record before it ran).

    Recording errors are raised (``raise_error = True``): a run that cannot be
    recorded fails loudly instead of continuing with gaps.

    LangChain hands a graph's callbacks on to whatever its nodes and tools invoke: while a Sealbox run
    entered inside this handler's run is the current one (a sub-agent's run, ``parent_run_id``, opened
    in a tool), this handler records nothing; what runs there belongs to that run (record it with a
    handler of its own).

    Args:
        run: the active run.
        provider: the provider recorded (default: the model's ``ls_provider``).
        save_state: record the final state of the outermost chain.
    """

    raise_error = True
    run_inline = True

    def __init__(self, run: RunContext, *, provider: str | None = None, save_state: bool = True) -> None:
        super().__init__()
        self.run = run
        self.provider = provider
        self.save_state = save_state
        self._pending: dict[uuid.UUID, tuple[dict[str, Any], str | None, str | None, float]] = {}
        self._parent_of: dict[uuid.UUID, uuid.UUID | None] = {}  # pending model call -> the chain calling it
        self._chain_parent: dict[uuid.UUID, uuid.UUID | None] = {}  # running chain -> its parent chain
        self._interrupted: set[uuid.UUID] = set()  # outermost chains a node of which called interrupt()
        self._roots: set[uuid.UUID] = set()  # running outermost chains (see on_chain_start)
        self._tools: set[uuid.UUID] = set()  # running tools (a chain inside one is not outermost)

    def _in_sub_run(self) -> bool:
        """Whether the current Sealbox run is one entered inside this handler's run (a sub-agent's run
        opened in a tool): its events reach this handler as callbacks inherited from the parent graph."""
        current = current_run()
        if current is None or current is self.run:
            return False
        outer, seen = getattr(current, "_outer", None), 0
        while outer is not None and seen < 10_000:
            if outer is self.run:
                return True
            outer, seen = getattr(outer, "_outer", None), seen + 1
        return False

    def _start(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, serialized: Any, key: str, value: Any,
               metadata: Any, kwargs: dict[str, Any]) -> None:
        if self._in_sub_run():
            return
        metadata = metadata if isinstance(metadata, dict) else {}
        params = kwargs.get("invocation_params") if isinstance(kwargs.get("invocation_params"), dict) else {}
        name = serialized.get("name") if isinstance(serialized, dict) else None
        model = metadata.get("ls_model_name") or params.get("model") or params.get("model_name") or name
        request = {"model": model, key: to_plain(value), "invocation_params": to_plain(params),
                   "tools": to_plain(params.get("tools")),
                   "metadata": {k: metadata[k] for k in _LS_KEYS if k in metadata}}
        provider = self.provider or metadata.get("ls_provider")
        self._pending[run_id] = (request, provider, model, time.perf_counter())
        self._parent_of[run_id] = parent_run_id

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: uuid.UUID,
                            parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Remember the request of a chat-model call (recorded when it ends)."""
        batch = messages[0] if len(messages) == 1 else messages
        self._start(run_id, parent_run_id, serialized, "messages", batch, metadata, kwargs)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: uuid.UUID,
                     parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Remember the request of a text-completion call (recorded when it ends)."""
        self._start(run_id, parent_run_id, serialized, "prompts", list(prompts), metadata, kwargs)

    def on_llm_end(self, response: Any, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                   **kwargs: Any) -> None:
        """Record the model call as a ``model.call``."""
        if self._in_sub_run():
            return
        self._check_served()
        self._parent_of.pop(run_id, None)
        request, provider, model, started = self._pending.pop(run_id, ({}, self.provider, None, None))
        plain = to_plain(response)
        if isinstance(plain, dict):
            plain = {k: v for k, v in plain.items() if k in ("generations", "llm_output", "type")}
        self.run.model_call(request, plain, latency=self._latency(started),
                            provider=provider or "unknown", model=model or None)

    def _latency(self, started: float | None) -> float | None:
        """Seconds since ``started``; None (not known) when the call's start was not seen, or when its
        answer was served from the record (a replay's LLM cache: the model was not called)."""
        replay = getattr(self.run, "replay", None)
        if started is None or (replay is not None and getattr(replay, "serves_models", False)):
            return None
        return time.perf_counter() - started

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        """In a replay, the first chunk of a stream the record did not answer stops it (see :meth:`_check_served`)."""
        self._check_served()

    def _check_served(self) -> None:
        """In a replay serving models from the record, a call that did not go through LangChain's cache
        (``.stream()`` / ``.astream()``, or a model built with ``cache=False``) reached the model for real:
        stop the replay rather than compare a live answer (docs/replay.md)."""
        replay = getattr(self.run, "replay", None)
        if replay is not None and hasattr(replay, "check_model_served"):
            replay.check_model_served(self.run, "a LangChain .stream() / .astream() call, or a chat model "
                                                "built with cache=False, bypasses the replay's LLM cache")

    def on_llm_error(self, error: BaseException, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                     **kwargs: Any) -> None:
        """Record a failed model call (``response = {"error": …}``)."""
        if self._in_sub_run():
            return
        self._parent_of.pop(run_id, None)
        request, provider, model, started = self._pending.pop(run_id, ({}, self.provider, None, None))
        self.run.model_error(request, error, latency=self._latency(started), provider=provider or "unknown",
                             model=model or None)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        """Remember which chain runs inside which (to tell the graph that a node interrupted)."""
        if self._in_sub_run():
            return
        if parent_run_id is None or not (parent_run_id in self._chain_parent or parent_run_id in self._tools
                                         or parent_run_id in self._pending):
            # outermost for this handler: no parent, or one it never saw start (the graph is invoked inside a
            # tool of another graph, whose callbacks this handler is not among: a sub-agent's graph)
            self._roots.add(run_id)
        self._chain_parent[run_id] = parent_run_id

    def _root(self, run_id: uuid.UUID) -> uuid.UUID:
        seen = 0
        while run_id not in self._roots and (parent := self._chain_parent.get(run_id)) is not None and seen < 10_000:
            run_id, seen = parent, seen + 1
        return run_id

    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                       **kwargs: Any) -> None:
        """Record the model calls this chain was waiting for as failed with its error: a chat model
        cancelled in flight (a timeout, the task cancelled) gets no ``on_llm_error`` of its own.
        A node stopped by ``interrupt()`` marks its graph as interrupted (see :meth:`on_chain_end`)."""
        if self._in_sub_run():
            return
        for model_run in [r for r, parent in self._parent_of.items() if parent == run_id]:
            self.on_llm_error(error, run_id=model_run)
        root = self._is_root(run_id, parent_run_id)
        if _INTERRUPT and isinstance(error, _INTERRUPT) and not root:
            self._interrupted.add(self._root(run_id))
        self._chain_parent.pop(run_id, None)
        if root:
            self._roots.discard(run_id)
            self._interrupted.discard(run_id)
            if _INTERRUPT and isinstance(error, _INTERRUPT):
                self._suspend_for_interrupt(error)

    def _suspend_for_interrupt(self, error: BaseException) -> None:
        """The outermost chain raised ``GraphInterrupt`` instead of returning the state it waits in: a
        sub-agent's graph invoked inside a tool of another graph (LangGraph raises the interrupt up to the
        graph holding the checkpointer). The run waits for a human, so it is suspended, not ended: the
        interrupts it waits on are saved as its ``"interrupted"`` state (``{"__interrupt__": [{"value": …,
        "id": …}, …]}``: LangGraph hands no other state to a failing chain), ``run.suspended`` is written
        (:meth:`RunContext.suspend`, no ``approval_ids``), and the exception is marked ``suspends_run`` so
        that leaving the run's ``with`` block writes no ``run.ended`` (docs/integrations.md)."""
        run = self.run
        if run.ended or run.suspended:
            return
        if self.save_state:
            interrupts = error.args[0] if error.args and isinstance(error.args[0], (list, tuple)) else error.args
            run.save_state({"__interrupt__": [{"value": to_plain(getattr(i, "value", i)), "id": getattr(i, "id", None)}
                                              for i in interrupts]}, label="interrupted")
        run.suspend("waiting for a human: LangGraph interrupt() stopped the graph; the graph that holds the "
                    "checkpointer resumes it with Command(resume=...)")
        try:
            error.suspends_run = True  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - an exception refusing attributes: the run ends as before
            pass

    def _is_root(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None) -> bool:
        """Whether the chain ``run_id`` is outermost for this handler (seen so when it started, or, not seen
        starting, without a parent)."""
        return run_id in self._roots or (parent_run_id is None and run_id not in self._chain_parent)

    def on_interrupt(self, event: Any) -> None:
        """LangGraph's lifecycle event for a graph that stops to be resumed later, emitted before its
        chain ends: by ``interrupt()`` in a node, or at a static breakpoint (``interrupt_before`` /
        ``interrupt_after``), where no node raised and :meth:`on_chain_error` saw nothing. Marks the
        outermost chain as interrupted (see :meth:`on_chain_end`)."""
        run_id = getattr(event, "run_id", None)
        if isinstance(run_id, uuid.UUID) and not self._in_sub_run():
            self._interrupted.add(self._root(run_id))

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                     **kwargs: Any) -> None:
        """Record the state when the outermost chain (the graph) ends: ``label="final"``, or
        ``"interrupted"`` when it stopped to be resumed, by ``interrupt()`` in a node or at a static
        breakpoint (the state it waits in)."""
        if self._in_sub_run():
            return
        root = self._is_root(run_id, parent_run_id)
        self._chain_parent.pop(run_id, None)
        if root:
            self._roots.discard(run_id)
            interrupted = run_id in self._interrupted
            self._interrupted.discard(run_id)
            if self.save_state:
                self.run.save_state(outputs, label="interrupted" if interrupted else "final")

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, *, run_id: uuid.UUID,
                      parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                      metadata: dict[str, Any] | None = None, inputs: dict[str, Any] | None = None,
                      **kwargs: Any) -> None:
        """Record a ``note`` for a tool that runs without being governed."""
        if self._in_sub_run():
            return
        self._tools.add(run_id)
        if _GOVERNED.get() is self.run:
            return
        name = (serialized or {}).get("name") if isinstance(serialized, dict) else None
        call_id = kwargs.get("tool_call_id")
        self.run.note(f"ungoverned tool call: {name} ran without a record before it ran",
                      about={"ungoverned_tool": {"tool": str(name), "tool_call_id": call_id}})

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                    **kwargs: Any) -> None:
        """Forget the tool (see :meth:`on_chain_start`)."""
        self._tools.discard(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                      **kwargs: Any) -> None:
        """Forget the tool (see :meth:`on_chain_start`)."""
        self._tools.discard(run_id)
