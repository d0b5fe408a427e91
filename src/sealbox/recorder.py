"""The in-process SDK: record a run, and every tool call before it runs.

Usage::

    recorder = sealbox.Recorder(store, policy=sealbox.policies.ALLOW_ALL)
    with recorder.run(agent="support-bot", principal="agent:support-bot") as run:
        rows = run.call_tool("db", "read_query", {"query": "SELECT 1"}, read_query)

Order of a tool call (DESIGN.md, "A tool call, in order"): ``tool.call`` and its
``policy.decision`` are committed in one fsync'd transaction **before** the tool
function is invoked; then ``tool.result`` holds the result or the exception. If
the ``tool.call`` cannot be recorded the tool does not run and the caller gets
:class:`~sealbox.errors.RecordingError` ("no record, no action"). If the policy
cannot decide, the call is denied ("no guardrail, no answer"). There is no
fail-open mode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import functools
import inspect
import io
import os
import re
import sys
import threading
import time
import traceback
import types
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from sealbox.errors import ConfigError, PolicyError, RecordingError, SealboxError, StepTakenError, StoreBusyError
from sealbox.canonical import encode as _canonical_encode  # (loaded with sealbox.events already)
from sealbox.canonical import without_addresses as _without_addresses
from sealbox.events import SYSTEM_RUN_ID, EventDraft, rfc3339_utc
from sealbox.policy import Policy
from sealbox.policy.breaker import BreakerChange, CircuitBreaker, breaker_open_decision
from sealbox.policy.limits import LIMIT_COUNTERS, cost_of
from sealbox.policy.model import CallContext, Decision
from sealbox.policy.reads import evaluate_read, judged_text

__all__ = ["AsyncRecordedStream", "Recorder", "RecordedStream", "RunContext", "StreamClosedEarly", "ToolDenied",
           "current_run", "is_call_step"]

_NO_ARGUMENTS: Any = object()  # _record_result without the call's arguments (nothing to scrub by value)
_CURRENT: contextvars.ContextVar["RunContext | None"] = contextvars.ContextVar("sealbox_run", default=None)
#: Runs replaying another in this process, by run id (sealbox.replay.engine registers them): a run started
#: naming one as its parent, from any thread, is a sub-agent's run inside a replay.
REPLAYING: dict[str, "RunContext"] = {}


def __getattr__(name: str) -> Any:
    """``ApprovalPending`` (defined in :mod:`sealbox.approvals`) is importable from here too, beside
    ``ToolDenied``: both are what ``call_tool`` raises instead of running the tool."""
    if name == "ApprovalPending":
        from sealbox.approvals import ApprovalPending

        return ApprovalPending
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def unused_call_id(run: "RunContext", call_id: Any) -> str | None:
    """``call_id`` if it is a non-empty string no tool call of ``run`` used yet, else None (the
    recorder then makes a fresh id). For integrations passing a provider's tool-call id: some
    models repeat ids (``call_0`` every turn); such a call is recorded under its own id, and only
    its link to the model call that asked for it is lost, instead of the agent failing. So is a
    call whose id holds a NUL character, which no store keeps in an identifier."""
    if not isinstance(call_id, str) or not call_id or "\x00" in call_id:
        return None
    return None if call_id in getattr(run, "_call_ids", ()) else call_id


#: The statuses ``RunContext.end`` records (the event schema's).
_END_STATUSES = ("ok", "error", "cancelled")


class _CurrentParent:
    """The default of ``Recorder.run(parent_run_id=...)``: the run current when the run starts (if any)
    is its parent. An explicit ``None`` is a top-level run, whatever run is current."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the current run>"


#: ``parent_run_id`` not given: the current run (of the same recorder) becomes the parent.
CURRENT_PARENT: Any = _CurrentParent()


def _current_task() -> Any:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


def current_run() -> "RunContext | None":
    """The run active in this context (thread or task), if any: not one that has ended (a run left
    by another thread or task than the one that entered it stays set here, ended)."""
    run = _CURRENT.get()
    return None if run is None or run.ended else run


class ToolDenied(SealboxError):
    """The tool call was not allowed; it did not run.

    Attributes:
        decision: the recorded :class:`~sealbox.policy.model.Decision`.
        call_id: the call's id in the record.
    """

    def __init__(self, decision: Decision, call_id: str, server: str, tool: str) -> None:
        self.decision, self.call_id = decision, call_id
        rule = f" by rule {decision.rule}" if decision.rule else ""
        super().__init__(f"{server}/{tool} denied{rule} ({decision.reason_code}): {decision.reason}")


@dataclass(frozen=True)
class Principal:
    """Who acts: ``id`` (e.g. ``agent:support-bot``), ``role``, ``groups``, ``attributes``."""

    id: str
    role: str = "agent"
    groups: tuple[str, ...] = ()
    attributes: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Raises ConfigError on a wrongly typed field: a policy matching ``principal.groups``
        must never read ``"ops"`` as the groups ``o``, ``p`` and ``s``."""
        if not isinstance(self.id, str) or not self.id:
            raise ConfigError(f"principal id must be a non-empty string, got {self.id!r}")
        _check_name("principal id", self.id)
        if not isinstance(self.role, str):
            raise ConfigError(f"principal {self.id}: role must be a string, got {type(self.role).__name__}")
        groups = self.groups
        if isinstance(groups, (str, bytes)) or not isinstance(groups, (list, tuple, set, frozenset)) or not all(
                isinstance(g, str) for g in groups):
            raise ConfigError(f"principal {self.id}: groups must be a list of group names (strings), "
                              f"got {groups!r}")
        object.__setattr__(self, "groups", tuple(sorted(groups) if isinstance(groups, (set, frozenset)) else groups))
        if self.attributes is not None and not isinstance(self.attributes, dict):
            raise ConfigError(f"principal {self.id}: attributes must be a dict, got {type(self.attributes).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "groups": list(self.groups), "attributes": dict(self.attributes or {})}

    @classmethod
    def of(cls, value: "str | dict | Principal | None", agent: str) -> "Principal":
        if isinstance(value, Principal):
            return value
        if value is None:
            return cls(f"agent:{agent}")
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            return cls(value["id"], value.get("role", "agent"), value.get("groups", ()), value.get("attributes"))
        raise ConfigError(f"principal must be a string id or a dict with an 'id', got {value!r}")


class Recorder:
    """Records runs into a store and enforces a policy on every tool call.

    Args:
        store: an open, writable store.
        policy: the policy deciding every tool call. Required: pass
            ``sealbox.policies.ALLOW_ALL`` to allow everything explicitly.
        breaker: the circuit breaker per (server, tool); default: open after 5
            consecutive errors for 30 s. Its state changes are ``breaker.changed``
            events in the system run, written with the call that caused them.
        approvals: what a ``require_approval`` decision does (docs/approvals.md):
            None (default) denies it as ``approval_unavailable``; ``"block"`` records
            the request and waits in-process for the answer; ``"suspend"`` records it
            and raises :class:`sealbox.approvals.ApprovalPending` (continue with :meth:`resume`).
        approval_timeout: in block mode, seconds to wait before raising
            ``ApprovalPending`` (None: until the request is answered or expires).
        approval_poll: seconds between polls of the store while waiting.

    Raises:
        ConfigError: no policy was given, an unknown approvals mode, an ``approval_timeout`` that is
            not a finite number of seconds, 0 or more (or None), an ``approval_poll`` that is not one
            above 0, or a ``breaker`` that is not a :class:`CircuitBreaker`.
    """

    def __init__(self, store: Any, policy: Policy | None = None, *, breaker: CircuitBreaker | None = None,
                 approvals: str | None = None, approval_timeout: float | None = None,
                 approval_poll: float = 0.2) -> None:
        if approvals not in (None, "block", "suspend"):
            raise ConfigError(f"approvals must be 'block', 'suspend' or None, not {approvals!r}")
        if store is None or isinstance(store, (str, bytes, os.PathLike)) or not callable(getattr(store, "append", None)):
            raise ConfigError("store must be an open Sealbox store (sealbox.open_store(path) or "
                              f"sealbox.init_store(path)), got {store!r}")
        if policy is None:
            raise ConfigError("a policy is required: pass sealbox.policies.ALLOW_ALL to allow every call explicitly")
        if not isinstance(policy, Policy):
            raise ConfigError(f"policy must be a sealbox Policy, got {type(policy).__name__}")
        # checked here: a bad value failed only once a call was recorded and held (time.monotonic() + "5",
        # time.sleep(-1)), or polled the store in a busy loop (0)
        if approval_timeout is not None and not (_seconds(approval_timeout) and approval_timeout >= 0):
            raise ConfigError(f"approval_timeout must be a number of seconds, 0 or more, or None, not {approval_timeout!r}")
        if not (_seconds(approval_poll) and approval_poll > 0):
            raise ConfigError(f"approval_poll must be a number of seconds above 0, not {approval_poll!r}")
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigError(f"breaker must be a sealbox CircuitBreaker, got {type(breaker).__name__}")
        self.store = store
        self.policy = policy
        self._needed = _counters_needed(policy)
        #: a token or cost budget bounds this policy's calls (a condition reading such a counter is not one)
        self._budgets = any(LIMIT_COUNTERS[name][0] in {"tokens_run", "tokens_day", "cost_run", "cost_day"}
                            for name, _ in policy.limit_bounds)
        self._changes = threading.local()
        #: ``breaker.changed`` drafts of changes a call whose tool ran made (its ``tool.result`` write failed):
        #: written with the next write carrying breaker changes, in any thread (the record misses none)
        self._unwritten: list[EventDraft] = []
        self._unwritten_lock = threading.Lock()
        self.breaker = breaker or CircuitBreaker()
        self.breaker.on_change = self._on_breaker_change
        self.approvals, self.approval_timeout, self.approval_poll = approvals, approval_timeout, approval_poll
        self.tools: dict[tuple[str, str], Callable[..., Any]] = {}  # (server, tool) -> function, for resume
        #: None, or an async function ``writer(write)`` that :meth:`RunContext.acall_tool` awaits for its
        #: two store writes (the gate, the ``tool.result``) instead of calling ``write()`` itself: it must
        #: run ``write`` exactly once (on the event loop, or in a worker thread) and return or raise what it
        #: did. The gateway's runs the write on the loop when the store's lock is free and in a worker
        #: thread when another process holds it, so that the loop is never stalled (sealbox.gateway.server).
        self.async_writer: Callable[[Callable[[], Any]], Any] | None = None
        #: a process that holds a suspended run's call itself and records its other calls meanwhile (the MCP
        #: gateway): True, and a suspended RunContext does not refuse calls (RunSuspendedError)
        self._calls_while_suspended = False

    def _on_breaker_change(self, change: BreakerChange) -> None:
        pending = getattr(self._changes, "items", None)
        if pending is None:
            pending = self._changes.items = []
        pending.append(change)

    def take_breaker_events(self) -> list[EventDraft]:
        """Drafts of the ``breaker.changed`` events caused in this thread since the last call, after those
        whose write failed earlier (:meth:`_requeue_breaker_events`) in any thread."""
        return self._take_unwritten() + [self.breaker_draft(c) for c in self._take_breaker_changes()]

    def _take_unwritten(self) -> list[EventDraft]:
        with self._unwritten_lock:
            taken, self._unwritten = self._unwritten, []
        return taken

    def _requeue_breaker_events(self, drafts: list[EventDraft]) -> None:
        """The ``breaker.changed`` drafts among ``drafts``, whose write failed, are written with the next
        write that carries breaker changes (the changes stand: the tool ran, or another call made them)."""
        changed = [d for d in drafts if d.kind == "breaker.changed"]
        if changed:
            with self._unwritten_lock:
                self._unwritten[:0] = changed  # made before those requeued since

    @staticmethod
    def breaker_draft(change: BreakerChange) -> EventDraft:
        """The ``breaker.changed`` draft of one change (in the system run)."""
        return EventDraft("breaker.changed", dict(change.to_payload()), run_id=SYSTEM_RUN_ID, principal="sealbox")

    def _take_breaker_changes(self) -> list[BreakerChange]:
        pending = getattr(self._changes, "items", None) or []
        self._changes.items = []
        return pending

    def _undo_unrecorded_breaker_changes(self, server: str, tool: str, probe: list[int],
                                         taken: tuple[list[EventDraft], list[BreakerChange]]) -> None:
        """In the thread whose gate write failed (nothing ran): the breaker changes that write made and
        carried (``taken[1]``, by its build, and any not yet taken) are taken back
        (:meth:`CircuitBreaker.undo`: the breaker acts only in states its record shows), those of earlier
        failed writes it carried (``taken[0]``) are queued again, and a half-open probe the call took is
        given back (kept, it would deny every later call); ``probe``: its ticket, when it took one."""
        earlier, own = taken
        self._requeue_breaker_events(earlier)
        self.breaker.undo(own + self._take_breaker_changes())
        earlier.clear()
        own.clear()
        if probe:
            self.breaker.record_not_run(server, tool, ticket=probe[0])

    def run(self, *, agent: str, principal: "str | dict | Principal | None" = None, snapshot: Any = None,
            labels: dict[str, str] | None = None, parent_run_id: str | None = CURRENT_PARENT,
            run_id: str | None = None, replay_of: str | None = None) -> "RunContext":
        """A run context, for ``with`` or ``async with``.

        Args:
            agent: the agent's name.
            principal: the agent's identity (string id, dict, or :class:`Principal`);
                default ``agent:<agent>``.
            snapshot: a :class:`~sealbox.snapshot.Snapshot` (stored once, its
                fingerprint in ``run.started``), the ``sha256:`` fingerprint of a snapshot
                already stored, or None. One naming a policy other than the recorder's is
                refused (a replay, ``replay_of``, pins the recorded configuration as it is).
            labels: string labels (``{"env": "prod"}``), matched by policies.
            parent_run_id: the parent's run id, for a sub-agent; ``None``: a top-level run, even while
                another run is current; not given: the current run, if any (below).
            run_id: a run id to use (default: a new time-ordered id).
            replay_of: the run this one replays.

        A run started (``with``, ``async with`` or :meth:`RunContext.start`) while another run of this
        recorder is the current run (:func:`current_run`, in this thread or task) records that run as
        its parent when ``parent_run_id`` is not given: a sub-agent's run names its parent. Given as
        ``None``, the run is a top-level run (no parent) all the same.

        Raises:
            ConfigError: ``run_id`` is the store's system run (``"system"``) or not a non-empty string;
                ``agent`` is not a non-empty string (or holds a lone surrogate); ``labels`` is not a
                dict of strings to strings; ``parent_run_id`` is not a non-empty string, is the
                system run or the run itself, or (when the run starts, before anything is written)
                names no run of the store; ``snapshot`` is none of the above, names a policy other
                than this recorder's, is a Snapshot that cannot be stored (a dict among its ``tools``
                or a string among its ``knowledge``, a lone surrogate in its ``system_prompt``), has
                a ``ToolSpec`` whose ``server`` or ``name`` is not a non-empty string, or a
                ``Knowledge`` whose ``uri`` is not a non-empty string, ``content_hash`` not
                ``sha256:`` and 64 lowercase hex digits, or ``size`` not a whole number of bytes
                (0 or more), or (when the run starts) is a fingerprint not stored.
        """
        if run_id is not None:
            _check_joinable(run_id)
            if replay_of is None:
                _check_printable("run_id", run_id, "a run id cannot hold (it is pasted into commands and printed in "
                                 "listings)")
        _check_name("agent", agent)
        if labels is not None and replay_of is None:  # a replay carries the recorded labels, whatever they are
            _check_labels(labels)
        inherit = parent_run_id is CURRENT_PARENT
        if inherit:
            parent_run_id = None
        elif parent_run_id is not None:
            _check_parent(parent_run_id, run_id)
        snapshot = self._pinned_snapshot(snapshot, replay=replay_of is not None or _replaying(parent_run_id) is not None)
        who = Principal.of(principal, agent)
        if replay_of is None:  # as the gateway's principals and token identities (a replay runs as recorded)
            _check_printable("principal id", who.id, "an identity in the record cannot hold")
        run = RunContext(self, agent=agent, principal=who, snapshot=snapshot,
                         labels=dict(labels or {}), parent_run_id=parent_run_id, run_id=run_id, replay_of=replay_of)
        run._inherit_parent = inherit
        return run

    def _pinned_snapshot(self, snapshot: Any, *, replay: bool) -> Any:
        """The snapshot a new run pins (see :meth:`run`), checked against the policy in force."""
        from sealbox.snapshot import Snapshot

        if snapshot is None:
            return None
        mine = self.policy.fingerprint
        if isinstance(snapshot, dict) and replay:
            return snapshot  # the recorded configuration, as stored, replayed under the policy given
        if isinstance(snapshot, dict):  # a Snapshot's to_dict() form (fields left out allowed), stored as given
            unknown = sorted(map(repr, set(snapshot) - {f.name for f in dataclasses.fields(Snapshot)}))
            try:
                as_snapshot = Snapshot.from_dict(snapshot)
                readable = not unknown
            except Exception:  # noqa: BLE001 - not a snapshot's form
                readable = False
            if readable:
                _check_snapshot_items(as_snapshot)
            else:
                raise ConfigError("snapshot must be a sealbox Snapshot (or its to_dict() form) or the sha256: "
                                  "fingerprint of a snapshot stored in this store, got a dict that is no "
                                  f"snapshot's form{' (unknown fields ' + ', '.join(unknown) + ')' if unknown else ''}"
                                  "; nothing was recorded")
            named = snapshot.get("policy")
            if named is not None and named != mine:
                raise ConfigError(f"the snapshot names policy {named!r}, but this recorder's policy "
                                  f"{self.policy.name!r} is {mine}: leave the snapshot's policy out or record "
                                  "under the policy it names; nothing was recorded")
            return snapshot
        if isinstance(snapshot, Snapshot):
            # A snapshot without a policy fingerprint is pinned as it is, not filled in as the gateway's
            # are: the replay engine compares a replay's snapshot with the recorded one before it starts,
            # and a filled-in policy would be config drift against the same Snapshot given again.
            if snapshot.policy is not None and snapshot.policy != mine and not replay:
                raise ConfigError(f"the snapshot names policy {snapshot.policy!r}, but this recorder's policy "
                                  f"{self.policy.name!r} is {mine}: leave the snapshot's policy out "
                                  "or record under the policy it names; nothing was recorded")
            _check_snapshot_items(snapshot)
            try:  # its fields as a run would store them, before anything is written
                snapshot.fingerprint
            except Exception as exc:  # noqa: BLE001 - a dict in tools, a lone surrogate in the prompt…
                raise ConfigError(f"the snapshot cannot be recorded ({type(exc).__name__}: {exception_message(exc)}): "
                                  "its tools must be ToolSpec and its knowledge Knowledge items (not dicts or "
                                  "strings), its names and texts strings without lone surrogates; "
                                  "nothing was recorded") from exc
            return snapshot
        if isinstance(snapshot, str) and _FINGERPRINT.fullmatch(snapshot):
            return snapshot  # checked against the store when the run starts (RunContext.start)
        raise ConfigError(f"snapshot must be a sealbox Snapshot or the sha256: fingerprint of a snapshot stored "
                          f"in this store, got {_short_repr(snapshot)}; nothing was recorded")

    def continue_run(self, run_id: str) -> "RunContext":
        """Attach to a run recorded earlier (another process, before a restart) that has not ended.

        Nothing is written on attach; the run's agent, principal, labels, start time
        and next step are read from the store, so limits and steps carry on. So are its
        token usage (the sum of its ``model.call`` usage: ``run.ended`` counts the calls
        made before too) and the links from its model calls to the requested tool calls not
        yet carried out (such a call still gets its sibling step ``"<n>.<i>"``). Both contexts
        may go on writing (the agent's and a gateway joined to its run): a top-level step either
        takes is moved, inside its write, past the steps the other wrote since its own last event.

        This process records the run from here: it takes the run's liveness lease at once (with or
        without a ``with`` block), so the run is ``running`` while this process lives and
        ``interrupted`` once it has died; the lease is dropped at :meth:`RunContext.end`, or when a
        ``with`` block around the context is left (ended or suspended).

        A run waiting for an approval (an ``approval.requested`` with no ``run.resumed`` naming it) is
        refused: carrying on around the request and leaving the block would end the run and close the
        request undecided. :meth:`resume` continues it once answered; :meth:`cancel` ends it on purpose.

        Raises:
            ConfigError: ``run_id`` is not a non-empty string, or is the store's system run.
            RecordingError: no such run, it has ended, or it was imported (``sealbox import``).
            RunSuspendedError: the run waits for an approval (nothing was written).
        """
        return self._continue(run_id, waiting_ok=False)

    def _continue(self, run_id: str, *, waiting_ok: bool, doing: str = "continued") -> "RunContext":
        """:meth:`continue_run`; ``waiting_ok``: also a run waiting for approvals (:meth:`resume`, :meth:`cancel`)."""
        run = self._attach(run_id, doing=doing)
        if not waiting_ok and run._waiting_for:
            from sealbox.approvals import RunSuspendedError

            raise RunSuspendedError(run_id, run._waiting_for)
        from sealbox import liveness

        run._live = liveness.take(run.store, run_id)  # dropped by the OS/server if this process dies
        return run

    def cancel(self, run_id: str) -> None:
        """End a run that is not to go on — one waiting for an approval included — with ``run.ended``
        ``cancelled``: its pending requests are ``closed`` (they can no longer be answered, nothing they
        ask for runs). The explicit, recorded way to give up on a suspended run.

        Raises:
            ConfigError: ``run_id`` is not a non-empty string, or is the store's system run.
            RecordingError: no such run, it has ended, or it was imported; or ``run.ended`` could not be recorded.
        """
        run = self._continue(run_id, waiting_ok=True, doing="cancelled")
        try:
            run.end("cancelled")
        finally:
            run._release_live()

    def _attach(self, run_id: str, *, doing: str = "continued") -> "RunContext":
        """:meth:`continue_run` without the liveness lease: for a gateway joining a run its agent's
        process drives (that process's lease tells whether the run is alive, not the gateway's)."""
        _check_joinable(run_id)
        events = self.store.read_run(run_id)
        if not events:
            from sealbox.approvals import shown_id  # an unknown id may be anything pasted: not echoed whole

            raise RecordingError(f"no run {shown_id(run_id)} in this store")
        if events[-1].kind == "run.ended":
            if events[0].kind == "run.started" and isinstance(events[0].payload.get("imported"), dict):
                # listed with its source's status (suspended, running): "has ended" would contradict the listing
                raise RecordingError(f"run {run_id} was imported (sealbox import): a copy of a run recorded "
                                     "elsewhere, which cannot be continued or resumed in this store")
            raise RecordingError(f"run {run_id} has ended; it cannot be {doing}")
        first = events[0].payload
        run = RunContext(self, agent=first["agent"], principal=Principal(events[0].principal), snapshot=None,
                         labels=dict(first.get("labels") or {}), parent_run_id=first.get("parent_run_id"),
                         run_id=run_id, replay_of=first.get("replay_of"))
        run.started_at = datetime.fromisoformat(events[0].ts.replace("Z", "+00:00"))
        run._next_step = 1 + max(int(e.step.split(".")[0]) for e in events)
        run._steps[1] = run._steps[3] = events[-1].run_seq
        run._call_ids.update(e.payload["call_id"] for e in events
                             if e.kind == "tool.call" and isinstance(e.payload.get("call_id"), str))
        run._taken_steps.update((e.step, e.payload.get("call_id")) for e in events
                                if e.kind == "tool.call" and "." in e.step)
        run.usage = _usage_of(events)
        run._links = _links_of(events)
        run._attached = True
        resumed = {a for e in events if e.kind == "run.resumed" for a in (e.payload.get("approval_ids") or ())
                   if isinstance(a, str)}
        run._waiting_for = tuple(str(e.payload.get("approval_id")) for e in events if e.kind == "approval.requested"
                                 and e.payload.get("approval_id") not in resumed)
        return run

    def resume(self, run_id: str, tools: dict[tuple[str, str], Callable[..., Any]] | None = None, *,
               rerun_unknown: bool = False, wait: float = 0.0, arguments: dict[str, Any] | None = None) -> "RunContext":
        """Continue a run suspended for approvals — in any process, after a restart, days later.

        Every open request of the run must be decided (waits up to ``wait`` seconds).
        For each, in order: ``run.resumed`` (with the wait and the outcome) is written
        in a transaction that refuses a second resumption, then an approved tool runs
        once and its ``tool.result`` is recorded; a denied or expired one does not run.
        If the policy changed meanwhile, approved calls are re-evaluated (docs/approvals.md).

        Args:
            run_id: the suspended run.
            tools: ``{(server, tool): fn}``, over the functions registered with :meth:`tool`.
            rerun_unknown: also re-run calls that were allowed but have no result
                (outcome unknown); never done otherwise.
            wait: seconds to wait for pending answers (polling the store).
            arguments: ``{call_id: arguments}`` for calls whose recorded arguments were
                redacted; they must hash to the approved binding.

        Returns:
            The attached :class:`RunContext`; ``run.resumed_calls`` lists what happened to
            each call (:class:`sealbox.pause.ResumedCall`). Use it in a ``with`` block to
            go on and end the run.

        Raises:
            ApprovalPending: an answer is still missing (nothing was run or written).
            ApprovalError: already resumed elsewhere, arguments that do not match the binding, or
                ``not_awaiting_approval``: the run is suspended for a reason outside Sealbox's approvals
                (:meth:`RunContext.suspend`, e.g. LangGraph's ``interrupt()``); nothing is written.
            ConfigError: no function for an approved tool, or one that is not callable; ``tools``,
                ``arguments`` not dicts, ``wait`` not a finite number of seconds 0 or more, ``rerun_unknown``
                not a bool (nothing is written).
            RecordingError: no such run, or it has ended.
        """
        from sealbox.pause import resume_run

        return resume_run(self, run_id, tools, rerun_unknown=rerun_unknown, wait=wait, arguments=arguments)

    def tool(self, server: str, name: str | None = None, *, grant: str | None = None) -> Callable:
        """Decorator: calls to the function inside an active run are recorded tool calls.

        A call is recorded into the run current where it is made (:func:`current_run`), whichever
        Recorder started that run: that run's store records it and that run's policy decides it,
        as ``run.call_tool`` would; this recorder's store and policy play no part in it. That is
        what lets a replay, which starts its run with a Recorder of its own, serve the agent's
        decorated tools from the record. The function is registered in this recorder's
        :attr:`tools` only: another recorder's :meth:`resume` of a run it was called in needs it
        in ``tools=``.

        The recorded arguments are the bound arguments with defaults applied (``*args`` as a list);
        the keyword arguments a ``**kwargs`` parameter collects are recorded beside the named ones
        (``arguments.query``, not ``arguments.kwargs.query``), except those named like a parameter
        (a positional-only one, ``*args``, ``self``/``cls``) or like the ``**kwargs`` parameter itself,
        which are recorded as a dict under the ``**kwargs`` parameter's name (``f(1, a=2, kw=3)`` of
        ``def f(a, /, **kw)``: ``{"a": 1, "kw": {"a": 2, "kw": 3}}``); a method's first parameter
        ``self`` or ``cls`` is left out. Outside a run, calling it raises :class:`RecordingError` (it is never run
        unrecorded).

        A call whose arguments do not bind to the function's signature (a missing argument, an
        unexpected keyword, too many positional arguments: a model's hallucinated arguments) is
        recorded all the same, and the function does not run: its ``tool.call`` holds the arguments
        as given (no defaults applied; when they do not even bind partially, the positional ones
        named by the parameters they fall on, the others as a list under the ``*args`` parameter's
        name, or ``"*args"``, and a keyword naming a parameter given positionally under the
        ``**kwargs`` parameter's name, or ``"**kwargs"``), its ``policy.decision`` is made as for any
        call, and unless it is denied its ``tool.result`` records the ``TypeError`` (``ok: false``),
        which is then raised unchanged (``call_tool``'s ``refused``).

        Raises:
            ConfigError: when decorating: a generator function; a callable without a ``__name__``
                (a ``functools.partial``, a callable object) and no ``name``; one whose signature
                cannot be read (some builtins and classes).
            TypeError: when called: the arguments do not bind to the function's signature (recorded,
                as above); ToolDenied when that call is denied.
        """
        def wrap(fn: Callable) -> Callable:
            tool_name = name or getattr(fn, "__name__", None)
            if not isinstance(tool_name, str) or not tool_name:  # a functools.partial, a callable object
                raise ConfigError(f"{server}: {_short_repr(fn)} has no __name__ to name the tool by: give its "
                                  f"name, recorder.tool({server!r}, 'name')")
            kind = _function_kind(fn)
            if kind in ("generator", "async generator"):
                raise ConfigError(_generator_refusal(server, tool_name, kind))
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError) as exc:  # a builtin or class without a signature (dict, some C functions)
                raise ConfigError(f"{server}/{tool_name}: the arguments of {_short_repr(fn)} cannot be read "
                                  f"({exc}), so its calls could not be recorded: decorate a Python function "
                                  "that calls it") from exc
            self.tools[(server, tool_name)] = fn
            params = list(sig.parameters.values())
            # a method's instance or class is not an argument of the tool call
            skip = params[0].name if params and params[0].name in ("self", "cls") and params[0].kind in (
                inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) else None
            var_kw = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)

            positional = [p.name for p in params if p.kind in (
                inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            var_pos = next((p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)

            def arguments(args: tuple, kwargs: dict) -> tuple[dict[str, Any], TypeError | None]:
                """The call's arguments as recorded, and the TypeError of a call that does not bind
                (a missing argument, an unexpected keyword, too many positional arguments), or None."""
                try:
                    bound = sig.bind(*args, **kwargs)
                except TypeError as exc:  # as an LLM's hallucinated arguments: recorded as given, never run
                    return given(args, kwargs), exc
                bound.apply_defaults()
                return flattened(bound.arguments), None

            def given(args: tuple, kwargs: dict) -> dict[str, Any]:
                try:  # a missing argument: the ones given, named (no defaults applied)
                    return flattened(sig.bind_partial(*args, **kwargs).arguments)
                except TypeError:  # too many positional arguments, an unexpected keyword, one given twice
                    pass
                out = dict(zip(positional, args))
                rest = list(args[len(positional):])
                out.pop(skip, None)  # the method's instance or class
                if rest:
                    out[var_pos or "*args"] = rest
                clash = {k: v for k, v in kwargs.items() if k in out or k == skip}
                out.update((k, v) for k, v in kwargs.items() if k not in clash)
                if clash:
                    out[var_kw or "**kwargs"] = clash
                return out

            def flattened(bound_arguments: Any) -> dict[str, Any]:
                out = {k: v for k, v in bound_arguments.items() if k != skip and k != var_kw}
                extra = bound_arguments.get(var_kw) if var_kw is not None else None
                if extra:  # **kwargs: its keys are the call's arguments, beside the named ones
                    # but for a keyword named like a parameter (positional-only, *args, self/cls) or like the
                    # **kwargs parameter itself: those go under the **kwargs parameter's name, so that the key
                    # var_kw always means "the keywords not flattened" (none lost, none mistaken for another)
                    clash = {k: v for k, v in extra.items() if k in out or k == skip or k == var_kw}
                    out.update((k, v) for k, v in extra.items() if k not in clash)
                    if clash:
                        out[var_kw] = clash
                return out

            if kind == "coroutine":
                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    run = _require_run(tool_name)
                    recorded, refused = arguments(args, kwargs)
                    return await run.acall_tool(server, tool_name, recorded, lambda **_: fn(*args, **kwargs),
                                                grant=grant, refused=refused)
                async_wrapper._sealbox_tool = (async_wrapper, fn)  # type: ignore[attr-defined]
                return async_wrapper

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                run = _require_run(tool_name)
                recorded, refused = arguments(args, kwargs)
                return run.call_tool(server, tool_name, recorded, lambda **_: fn(*args, **kwargs), grant=grant,
                                     refused=refused)
            wrapper._sealbox_tool = (wrapper, fn)  # type: ignore[attr-defined]
            return wrapper
        return wrap


def _seconds(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool): a number of seconds."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def _check_joinable(run_id: Any) -> None:
    if not isinstance(run_id, str) or not run_id:
        raise ConfigError(f"run_id must be a non-empty string, got {run_id!r}")
    if len(run_id) > 128:  # what an event's run_id may hold (sealbox.store.base)
        raise ConfigError(f"run_id must be a non-empty string of at most 128 characters, got {run_id!r}; "
                          "nothing was recorded")
    if _lone_surrogate(run_id):
        raise ConfigError(f"run_id {run_id!r} contains a lone surrogate (text decoded with surrogateescape?), "
                          "which a run id cannot hold; nothing was recorded")
    if run_id == SYSTEM_RUN_ID:
        raise ConfigError(f"run {SYSTEM_RUN_ID!r} is the store's system run (identities, access, breakers, "
                          "erasures); an agent run cannot be recorded into it")


_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")


#: the largest size a Knowledge can give: the record's integers are exact up to 2**53 - 1 (I-JSON)
_MAX_SIZE = 2**53 - 1


def _check_snapshot_items(snapshot: Any) -> None:
    """The ``ToolSpec`` and ``Knowledge`` items of a Snapshot about to be pinned: a tool names its
    server and name, a document its URI, content hash and size, else ConfigError naming the field
    (``snapshot.tools[0].server``, by position as given). Items of another type are left to the
    fingerprint's check (:meth:`Recorder._pinned_snapshot`), which says what they are."""
    from sealbox.snapshot import Knowledge, ToolSpec

    def refuse(field: str, value: Any, want: str) -> None:
        raise ConfigError(f"snapshot.{field} must be {want}, got {_short_repr(value)}; nothing was recorded")

    if isinstance(snapshot.skills, (str, bytes, bytearray, dict)):
        raise ConfigError(f"snapshot.skills must be a list or tuple of skill names or descriptors, got "
                          f"{_short_repr(snapshot.skills)} (a string would be pinned as its characters, a dict as "
                          "its keys); nothing was recorded")
    tools = snapshot.tools if isinstance(snapshot.tools, (list, tuple)) else ()
    for i, t in enumerate(tools):
        if not isinstance(t, ToolSpec):
            continue
        for what in ("server", "name"):
            value = getattr(t, what)
            if not isinstance(value, str) or not value:
                refuse(f"tools[{i}].{what}", value, "a non-empty string")
    knowledge = snapshot.knowledge if isinstance(snapshot.knowledge, (list, tuple)) else ()
    for i, k in enumerate(knowledge):
        if not isinstance(k, Knowledge):
            continue
        if not isinstance(k.uri, str) or not k.uri:
            refuse(f"knowledge[{i}].uri", k.uri, "a non-empty string")
        if not isinstance(k.content_hash, str) or not _FINGERPRINT.fullmatch(k.content_hash):
            refuse(f"knowledge[{i}].content_hash", k.content_hash,
                   "'sha256:' and 64 lowercase hex digits (Knowledge.from_file or from_bytes computes it)")
        if not isinstance(k.size, int) or isinstance(k.size, bool) or not 0 <= k.size <= _MAX_SIZE:
            refuse(f"knowledge[{i}].size", k.size, "a whole number of bytes, 0 or more (an int)")


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


#: C0 and C1 control characters and DEL: a run id or principal holding one (a newline) splits the lines
#: of every listing and of the commands it is pasted into.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _check_printable(what: str, value: str, why: str) -> None:
    """ConfigError when ``value`` (the id of a new run, or its principal's) holds a :data:`_CONTROL`
    character or only spaces. Checked where a run is started, not where a recorded one is joined,
    resumed or replayed (recorded before this check, they stay usable)."""
    if _CONTROL.search(value) or not value.strip():
        raise ConfigError(f"{what} {value!r} holds a control character (a newline, a tab…) or only spaces, which "
                          f"{why}; nothing was recorded")


def _check_name(what: str, value: Any, where: str = "") -> None:
    """An identifier (agent, server, tool, call id, grant…): a non-empty string without a lone
    surrogate (which the record cannot hold as text; I-JSON), else ConfigError naming the field."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}{what} must be a non-empty string, got {value!r}; nothing was recorded")
    if _lone_surrogate(value):
        raise ConfigError(f"{where}{what} {value!r} contains a lone surrogate (text decoded with "
                          f"surrogateescape?), which a name in the record cannot hold; nothing was recorded")
    _check_no_nul(what, value, where)


def _check_no_nul(what: str, value: str, where: str = "") -> None:
    """ConfigError when an identifier holds a NUL character, which no store keeps (PostgreSQL text
    cannot hold one; the store refuses it too, as an InvalidEventError)."""
    if "\x00" in value:
        raise ConfigError(f"{where}{what} {value!r} holds a NUL character (\\x00), which an identifier in the record "
                          "cannot hold; nothing was recorded")


def _check_labels(labels: Any) -> None:
    if not isinstance(labels, dict):
        raise ConfigError(f"labels must be a dict of strings to strings, got {type(labels).__name__}; "
                          "nothing was recorded")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(f"labels must map strings to strings, got {key!r}: {value!r}; nothing was recorded")
        if not key or "=" in key or key != key.strip():
            raise ConfigError(f"label name {key!r} is empty, holds '=' or starts or ends with a space: "
                              "`sealbox runs list --label KEY=VALUE` could never select it; nothing was recorded")
        for what, text in (("name", key), ("value", value)):
            if _lone_surrogate(text):
                raise ConfigError(f"label {key!r}: its {what} {text!r} contains a lone surrogate, which a label "
                                  "(matched by policies as text) cannot hold; nothing was recorded")


def _replaying(parent_run_id: Any) -> "RunContext | None":
    """The run in replay mode that a run started now is a sub-agent's run of: the run named by
    ``parent_run_id`` when it is replaying (from any thread), else the current run when it is."""
    run = REPLAYING.get(parent_run_id) if isinstance(parent_run_id, str) else None
    if run is None:
        outer = _CURRENT.get()
        run = outer if outer is not None and outer.replay is not None else None
    return run if run is not None and run.replay is not None else None


def _check_parent(parent_run_id: Any, run_id: str | None) -> None:
    """``parent_run_id``'s shape (its existence is checked when the run starts: :meth:`RunContext.start`)."""
    if not isinstance(parent_run_id, str) or not parent_run_id:
        raise ConfigError(f"parent_run_id must be a non-empty run id, got {parent_run_id!r}; nothing was recorded")
    if parent_run_id == SYSTEM_RUN_ID:
        raise ConfigError(f"parent_run_id {SYSTEM_RUN_ID!r} is the store's system run, which is no agent's parent; "
                          "nothing was recorded")
    if parent_run_id == run_id:
        raise ConfigError(f"run {run_id} cannot be its own parent (parent_run_id == run_id); nothing was recorded")


def _counters_needed(policy: Any) -> set[str]:
    """The usage counters a call under ``policy`` asks the store for: those its limits bound, and those its
    conditions read (``when: usage.tool_calls_run < 2``; all of them for a condition reading ``usage`` whole).
    Asking only for the limits' left a condition reading another counter a KeyError: every call it reached was
    denied guardrail_error."""
    counters = {counter for counter, _ in LIMIT_COUNTERS.values()} - {"elapsed_s"}
    needed = {LIMIT_COUNTERS[name][0] for name, _ in policy.limit_bounds} - {"elapsed_s"}
    for rule in getattr(policy, "rules", ()):
        roots = getattr(getattr(rule, "condition", None), "roots", None) or {}
        if "usage" in roots:
            needed |= counters if roots["usage"] is None else counters & set(roots["usage"])
    return needed


def _usage_of(events: list) -> dict[str, Any]:
    """A run's token and cost totals, summed from its recorded ``model.call`` events' ``usage``
    (what :meth:`RunContext.model_call` adds up live), for a run continued after a suspension or
    a restart: its ``run.ended`` and its budgets count the calls made before too."""
    usage: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    for e in events:
        use = e.payload.get("usage") if e.kind == "model.call" and isinstance(e.payload, dict) else None
        if not isinstance(use, dict):
            continue
        for key in ("input_tokens", "output_tokens"):
            n = _count_or_none(use.get(key))
            if n is not None:
                usage[key] += n
        cost = use.get("cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost == cost and cost >= 0:
            usage["cost"] += cost
    return usage


def _links_of(events: list) -> dict[str, str]:
    """The model-call -> tool-call links (``RunContext._links``) still open at the end of
    ``events``, rebuilt as :meth:`RunContext.model_call` and :meth:`RunContext.call_tool` made them:
    a model call links each requested id no tool call of the run used yet to ``"<step>.<i>"`` (a
    repeated id its first position; a later model call asking for the same id again wins), and a
    tool call with that id takes the link (the link is gone)."""
    links: dict[str, str] = {}
    used: set[str] = set()
    for e in events:
        payload = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "tool.call":
            call_id = payload.get("call_id")
            if isinstance(call_id, str):
                used.add(call_id)
                links.pop(call_id, None)
        elif e.kind == "model.call":
            ids = payload.get("tool_call_ids")
            if not isinstance(ids, list):
                continue
            for i, tc_id in reversed(list(enumerate(ids, start=1))):
                if isinstance(tc_id, str) and tc_id and tc_id not in used:
                    links[tc_id] = f"{e.step}.{i}"
    return links


def _undecorated(fn: Any) -> Any:
    """The function a ``@recorder.tool`` wrapper calls, when ``fn`` is one (bound to its instance for a
    method): given to ``call_tool``, the wrapper would record the same call a second time, into the
    current run, which is the caller's. A ``functools.partial`` of one (``partial(tool, conn=...)``) is the
    same partial of that function. Anything else as it is."""
    mark = getattr(fn, "_sealbox_tool", None)
    if mark is None and type(fn) is functools.partial:  # partial(partial(tool, a), b) is flattened by partial
        inner = _undecorated(fn.func)
        return fn if inner is fn.func else functools.partial(inner, *fn.args, **fn.keywords)
    target = fn.__func__ if inspect.ismethod(fn) else fn
    # the wrapper itself, not another function functools.wraps copied the mark onto (a retry around it)
    if not (isinstance(mark, tuple) and len(mark) == 2 and mark[0] is target):
        return fn
    if inspect.ismethod(fn):
        return types.MethodType(mark[1], fn.__self__)
    return mark[1]


def _require_run(tool: str) -> "RunContext":
    run = current_run()
    if run is None:
        raise RecordingError(f"tool {tool!r} was called outside a recorded run; it did not run (a run is current in "
                             "the thread or task that entered it and in tasks it starts, not in a thread started by "
                             "threading or a ThreadPoolExecutor: call run.call_tool there, or run the function with "
                             "contextvars.copy_context().run)")
    return run


def _utc(now: datetime) -> str:
    return rfc3339_utc(now)  # the year in four digits (strftime's %Y writes 999)


class RunContext:
    """One recorded run. Use as a (sync or async) context manager.

    Leaving the block writes ``run.ended``. When the block raised, that exception is what the
    caller gets even if ``run.ended`` cannot be written (the failure is attached to it as a
    note, ``exc.__notes__``); when it did not, a ``run.ended`` that cannot be written is a
    :class:`~sealbox.errors.RecordingError`.

    Attributes:
        run_id: the run's id.
        usage: token and cost totals of the model calls recorded so far.
    """

    def __init__(self, recorder: Recorder, *, agent: str, principal: Principal, snapshot: Any,
                 labels: dict[str, str], parent_run_id: str | None, run_id: str | None, replay_of: str | None) -> None:
        from sealbox.store.base import new_run_id

        self.recorder, self.store, self.policy = recorder, recorder.store, recorder.policy
        self.agent, self.principal, self.labels = agent, principal, labels
        self.snapshot, self.parent_run_id, self.replay_of = snapshot, parent_run_id, replay_of
        self.run_id = run_id or new_run_id()
        self.usage = {"input_tokens": 0, "output_tokens": 0, "cost": 0.0}
        self.started_at: datetime | None = None
        self._started_cache: tuple[datetime, str] | None = None
        self._lock = threading.Lock()
        # [the next top-level step, the run_seq of the newest event written through it (0: none), the run's
        # highest top-level step when another writer was last seen (0: never)]; one list shared by the
        # contexts of one run in this process (share_steps). Another writer of the run (a gateway joined
        # to it, the agent's own process) numbers steps with its own counter: a head the run has that is
        # not the one written here says so, and _fresh_step moves past its steps. Fourth: the run_seq up to
        # which every tool.call of the run is known here (its call id in _call_ids, its sub-step in
        # _taken_steps): a linked call looks in the store only at the calls after it (_check_call_free)
        self._steps = [1, 0, 0, 0]
        #: sub-steps ("n.i") of the run's tool.call events known here (-> their call ids): written through
        #: this context, or by another writer of the run and seen by _check_call_free (or continue_run)
        self._taken_steps: dict[str, str] = {}
        self._links: dict[str, str] = {}  # tool call id from a model response -> its step
        self._call_ids: set[str] = set()  # call ids of this run's tool.call events (recorded or being recorded)
        self._clean_calls: set[str] = set()  # gated here, nothing redacted from the arguments, no result yet
        #: call id -> the half-open breaker probe's ticket its gate took (BreakerCheck.ticket), until its
        #: result: only that call's outcome moves the half-open breaker (a held call, approved, took none)
        self._probe_tickets: dict[str, int] = {}
        self._error_secrets: set[str] = set()  # redacted argument values of the run's calls (docs/content-modes.md)
        self._token: contextvars.Token | None = None
        self._outer: RunContext | None = None  # the run current where this one was entered
        self.suspended = False
        self._suspended_for: tuple[str, ...] = ()  # the approvals a suspended run waits for (RunSuspendedError)
        self.ended = False
        self._cost_error: str | None = None
        self._attached = False
        self._waiting_for: tuple = ()  # attached: the run's requests no run.resumed names (continue_run refuses it)
        self._started = False  # run.started written through this context (start())
        #: tool calls running now (decided, result not yet recorded): call id -> (thread ident, asyncio task
        #: or None); the run's end waits for those of other threads and tasks (_wait_for_calls)
        self._in_flight: dict[str, tuple[int, Any]] = {}
        #: guards _in_flight; _idle is a Condition over it. The per-call bookkeeping (_call_began,
        #: _call_done) takes the lock itself (a Condition's __enter__, __exit__ and notify_all are Python
        #: calls) and notifies only while _wait_for_calls waits (_idle_waiters, counted under the lock)
        self._idle_lock = threading.Lock()
        self._idle = threading.Condition(self._idle_lock)
        self._idle_waiters = 0
        self._ending = False  # end() began: a call not yet counted in _in_flight is refused before it is written
        self._inherit_parent = parent_run_id is None  # Recorder.run: only when parent_run_id was not given
        self.resumed_calls: list[Any] = []  # filled by Recorder.resume
        self._lease: Any = None  # a sealbox.pause.RunLease while this process runs a run it resumed
        self._live: Any = None  # a sealbox.liveness.LiveLease while this process records the open run
        self._entered_pid: int | None = None  # the process whose with block this is (a forked child's exit ends nothing)
        self.replay: Any = None  # a sealbox.replay ReplaySource while this run replays another (docs/replay.md)
        self._open_streams: set[_StreamRecord] = set()  # streamed model calls not recorded yet (RecordedStream)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> "RunContext":
        """Write ``run.started`` (called by ``with``).

        Raises:
            ConfigError: ``parent_run_id`` names no run of the store, or this context's run has started
                already (a RunContext is entered once: ``recorder.run(...)`` makes a new run); nothing
                was written.
            RecordingError: ``run.started`` could not be recorded.
        """
        if self._started or self.ended:
            raise ConfigError(f"run {self.run_id} has already started (a RunContext is entered once; recorder.run(...) "
                              "starts a new run, recorder.continue_run(run_id) attaches to one not ended); "
                              "nothing was recorded")
        outer = _CURRENT.get()
        replaying = _replaying(self.parent_run_id)
        if replaying is not None and replaying is not self and not replaying.ended \
                and self.replay is None and not self.replay_of:
            # a sub-agent's run inside a replay: served from the record's (docs/replay.md, "Sub-agent runs");
            # ReplayStopped when the record has none like it: nothing of it may run for real
            replaying.replay.adopt_sub_run(replaying, self)
        if self.parent_run_id is None:
            if self._inherit_parent and outer is not None and outer is not self and outer.recorder is self.recorder and not outer.ended:
                self.parent_run_id = outer.run_id  # a run started inside another: a sub-agent's
        else:
            self._check_parent_exists()
        fp = None
        if isinstance(self.snapshot, str):  # a fingerprint (Recorder.run checked its form)
            self._check_stored_snapshot(self.snapshot)
            fp = self.snapshot
        elif self.snapshot is not None:
            content = self.snapshot.to_dict() if hasattr(self.snapshot, "to_dict") else self.snapshot
            fp = self._guard(lambda: self.store.put_snapshot(content))
        payload = {
            "agent": self.agent, "snapshot": fp, "parent_run_id": self.parent_run_id, "labels": self.labels,
            "policy": {"fingerprint": self.policy.fingerprint, "name": self.policy.name},
        }
        if self.replay_of:
            payload["replay_of"] = self.replay_of
        if self.replay is not None and self.replay.parent is not None:
            self.replay.check_sub_snapshot(self, fp)  # ReplayStopped (config_drift) before anything is written
        self.started_at = datetime.now(timezone.utc)
        from sealbox import liveness

        self._live = liveness.take(self.store, self.run_id)  # dropped by the OS/server if this process dies
        if self._live is not None:
            payload["lease"] = True  # readers may tell "its process died" (interrupted) from "running"
        try:
            self._append_step("run.started", payload)
        except BaseException:
            self._release_live()
            raise
        self._started = True
        if self.replay is not None and self.replay.parent is not None:
            REPLAYING[self.run_id] = self  # its own sub-agent runs, from any thread, are served in turn
        return self

    def _append_step(self, kind: str, payload: dict[str, Any]) -> None:
        """Append one event at the next top-level step. A write refused with StoreBusyError (only under
        ``store.no_wait()``: nothing written) gives the step back, so that the caller can make it again
        (from a worker thread) at the same step."""
        step = self._take_step()
        try:
            self._append_fresh([self._draft(kind, payload, step)], step)
        except StoreBusyError:
            with self._lock:
                if self._steps[0] == int(step) + 1:  # no later step was taken meanwhile
                    self._steps[0] -= 1
            raise

    def _check_stored_snapshot(self, fp: str) -> None:
        from sealbox.errors import StoreError

        try:
            stored = self.store.get_snapshot(fp)
        except StoreError as exc:  # no such snapshot (or no store to look in: said as it is)
            raise ConfigError(f"snapshot {fp} is not stored in this store ({exc}): pass the Snapshot itself; "
                              "nothing was recorded") from exc
        except Exception as exc:  # noqa: BLE001
            raise RecordingError(f"could not record: {exc}") from exc
        named = stored.get("policy") if isinstance(stored, dict) else None
        if named is not None and named != self.policy.fingerprint and not self.replay_of:
            raise ConfigError(f"snapshot {fp} names policy {named!r}, but this recorder's policy "
                              f"{self.policy.name!r} is {self.policy.fingerprint}; nothing was recorded")

    def _check_parent_exists(self) -> None:
        parent = self.parent_run_id
        get_run = getattr(self.store, "get_run", None)
        found = self._guard(lambda: get_run(parent) if get_run is not None else (self.store.read_run(parent) or None))
        if found is None:
            from sealbox.approvals import shown_id  # an unknown id may be anything pasted: not echoed whole

            raise ConfigError(f"parent_run_id {shown_id(parent)} names no run of this store; nothing was recorded")

    def end(self, status: str = "ok", error: BaseException | None = None, *,
            verdict: dict[str, Any] | None = None) -> None:
        """Write ``run.ended`` with ``status`` ok / error / cancelled (and a replay's ``verdict``).
        Nothing is written for a run that has ended. A tool call of the run still running in another
        thread is waited for first (its ``tool.result`` is recorded before ``run.ended``; ``async with``
        also waits for the calls of other tasks: docs/recording.md, "A run that ends while a tool runs").

        Raises:
            ConfigError: ``status`` is none of those, or ``error`` is not an exception (a caller's
                mistake; nothing was written, the run has not ended).
            RecordingError: ``run.ended`` could not be recorded.
        """
        if status not in _END_STATUSES:
            raise ConfigError(f"run.end(): status must be one of {', '.join(_END_STATUSES)}, got {status!r}; "
                              "nothing was recorded")
        if error is not None and not isinstance(error, BaseException):
            raise ConfigError(f"run.end(): error must be an exception or None, got {type(error).__name__}; "
                              "nothing was recorded")
        if self.ended:
            return
        with self._idle_lock:  # from now on a call not yet counted is refused unwritten (_begin_gated)
            self._ending = True
        try:
            self._end_counted(status, error, verdict)
        except BaseException:
            if not self.ended:  # run.ended was not written: the run goes on
                with self._idle_lock:
                    self._ending = False
            raise

    def _end_counted(self, status: str, error: BaseException | None, verdict: dict[str, Any] | None) -> None:
        """:meth:`end` once calls not yet counted as running are refused."""
        cut: BaseException | None = None
        if self._in_flight:
            try:
                self._wait_for_calls()
            except BaseException as exc:  # Ctrl-C while waiting: the run ends cancelled and the interrupt goes on
                cut, status, error = exc, "cancelled", exc  # the calls still running are not waited for
            if self.ended:  # ended by another thread meanwhile
                if cut is not None:
                    raise cut
                return
        if cut is not None:
            try:
                self._end_now(status, error, verdict)
            except Exception as failed:  # noqa: BLE001 - the interrupt goes on, carrying this
                _attach_note(cut, f"sealbox: run.ended of run {self.run_id} could not be recorded: "
                                  f"{type(failed).__name__}: {exception_message(failed)}")
            raise cut
        self._end_now(status, error, verdict)

    def _end_now(self, status: str, error: BaseException | None, verdict: dict[str, Any] | None) -> None:
        """:meth:`end` once the calls it waits for are done (or no longer waited for)."""
        if self._open_streams:
            self._record_open_streams(ending=True)
        source = self.replay
        if source is not None and source.parent is not None and verdict is None:  # a sub-agent run in a replay
            status, verdict = source.finish_sub_run(self, status, error)
            if status == "cancelled":
                error = None
            source.flush(self)
            self.replay = None
            REPLAYING.pop(self.run_id, None)
        payload: dict[str, Any] = {"status": status, "usage": dict(self.usage)}
        if error is not None:
            payload["error"] = self._error_dict(error, self._run_secrets())
        if verdict is not None:
            payload["verdict"] = verdict
        self._append_step("run.ended", payload)
        self.ended = True
        self._release_lease()
        self._release_live()
        self._write_queued_breaker_events()

    def _wait_for_calls(self) -> None:
        """Wait until the tool calls of this run running in other threads have their ``tool.result``
        recorded: a run that ends while a tool runs elsewhere (a worker thread) ends after it, so
        that the call's outcome is in the record and its caller gets what the tool returned or
        raised (docs/recording.md, "A run that ends while a tool runs"). A call running in this
        thread (a tool that ends its own run) cannot be waited for here, nor is an ``acall_tool`` of
        an asyncio task (:meth:`__aexit__` awaits those of its loop first)."""
        me = threading.get_ident()
        with self._idle:
            # calls of asyncio tasks are awaited by __aexit__ on their loop, not here: a blocking wait in a
            # thread that writes for the loop (the gateway's store writer) would stop the call's own result write
            while any(thread != me and task is None for thread, task in self._in_flight.values()):
                self._idle_waiters += 1
                try:
                    self._idle.wait()
                finally:
                    self._idle_waiters -= 1

    async def _await_tasks_calls(self) -> None:
        """In :meth:`__aexit__`: let the tool calls of this run running in other asyncio tasks of this
        thread's loop finish (their ``tool.result`` recorded) before the run ends."""
        me, task = threading.get_ident(), asyncio.current_task()
        while True:
            with self._idle:
                waiting = [t for thread, t in self._in_flight.values()
                           if thread == me and t is not None and t is not task and not t.done()]
            if not waiting:
                return
            await asyncio.sleep(0.002)

    def _call_began(self, call_id: str, task: Any = None) -> None:
        with self._idle_lock:
            self._in_flight[call_id] = (threading.get_ident(), task)

    def _call_done(self, call_id: str) -> None:
        with self._idle_lock:
            self._in_flight.pop(call_id, None)
            if self._idle_waiters:  # a run ending in another thread waits for this call (_wait_for_calls)
                self._idle.notify_all()

    def suspend(self, reason: str) -> None:
        """Write ``run.suspended`` (``approval_ids: []``, ``reason``): the run waits for something outside
        Sealbox's approvals (a framework's human-in-the-loop, e.g. LangGraph's ``interrupt()``) and is
        not ended. Its leases are let go at once (as a run suspended for an approval); an exception that
        then leaves its ``with`` block writes no ``run.ended`` when it has ``suspends_run = True`` (the
        integration sets it). A sub-agent run replaying a record is compared as if it ended
        (``ReplaySource.suspend_sub_run``). Nothing is written for a run that has ended or is suspended.

        Raises:
            RecordingError: ``run.suspended`` could not be recorded.
        """
        if self.ended or self.suspended:
            return
        source = self.replay
        self._append_step("run.suspended", {"approval_ids": [], "reason": _valid_text(reason)})
        if source is not None and source.parent is not None:
            source.suspend_sub_run(self)
            source.flush(self)
            self.replay = None
            REPLAYING.pop(self.run_id, None)
        from sealbox.pause import _suspend

        _suspend(self)

    def _refuse_suspended(self) -> None:
        """A suspended run (``run.suspended`` written: an ApprovalPending caught in its block, or
        :meth:`suspend`) records nothing more here: its leases are let go, another process may resume it."""
        from sealbox.approvals import RunSuspendedError

        raise RunSuspendedError(self.run_id, self._suspended_for)

    def _write_queued_breaker_events(self) -> None:
        """Write the ``breaker.changed`` queued by failed ``tool.result`` writes (in any run of the recorder)
        that no later call carried: lost at process exit otherwise. A failed write queues them again (the
        run has ended all the same; no error is raised)."""
        queued = self.recorder._take_unwritten()
        if not queued:
            return
        try:
            self.store.append(queued)
        except Exception:  # noqa: BLE001 - kept for the next write carrying breaker changes
            self.recorder._requeue_breaker_events(queued)

    def _release_lease(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _release_live(self) -> None:
        if self._live is not None:
            self._live.release()
            self._live = None

    def __enter__(self) -> "RunContext":
        if self.ended:
            raise ConfigError(f"run {self.run_id} has ended: a RunContext is entered once (recorder.run(...) starts "
                              "a new run); nothing was recorded")
        if not self._attached:
            self.start()
        elif self._live is None and not self.ended:  # this process now runs a run started elsewhere
            from sealbox import liveness

            self._live = liveness.take(self.store, self.run_id)
        self._token = _CURRENT.set(self)
        old = self._token.old_value
        self._outer = None if old is contextvars.Token.MISSING else old  # restored on exit (unless ended meanwhile)
        self._entered_pid = os.getpid()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._entered_pid not in (None, os.getpid()):
            # a child forked inside the block leaves it too: the run is the parent's, which ends it
            self._leave_current()
            return
        try:
            self._exit(exc)
        finally:
            self._release_lease()  # the run ended, or is suspended again: another process may resume it
            self._release_live()  # the run ended or is suspended: its status no longer depends on a lease

    def _leave_current(self) -> None:
        if self._token is not None:
            # Not ContextVar.reset: a run entered in a generator is left when the generator is closed, which
            # may be after another run was entered in the same context (the caller's own run, a second
            # generator's) and before that one is left; resetting then made that run no longer current. And
            # a run left in another context (task, thread) than it was entered in cannot reset its token.
            # So: only while this run is the current one, and back to the nearest enclosing run not ended.
            self._token = None
            if _CURRENT.get() is self:
                outer = self._outer
                while outer is not None and outer.ended:
                    outer = outer._outer
                _CURRENT.set(outer)

    def _exit(self, exc: BaseException | None) -> None:
        self._leave_current()
        if self.suspended and (exc is None or getattr(exc, "suspends_run", False)):
            return  # no run.ended: the run stays suspended (resumable), whether or not the body caught it
        if exc is None:
            self.end("ok")  # run.ended not recorded: RecordingError
            return
        try:
            if isinstance(exc, SystemExit) and exc.code in (0, None):  # sys.exit(0): the agent finished
                self.end("ok")
            elif isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit)):
                self.end("cancelled", exc)
            else:
                self.end("error", exc)
        except Exception as failed:  # noqa: BLE001 - the body's exception goes on, carrying this
            _attach_note(exc, f"sealbox: run.ended of run {self.run_id} could not be recorded: "
                              f"{type(failed).__name__}: {exception_message(failed)}")

    async def __aenter__(self) -> "RunContext":
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if self._in_flight:
                await self._await_tasks_calls()
            for record in [r for r in list(self._open_streams) if r.is_async and not r.done]:
                await record.close_async_stream()  # recorded by end(), with the streams left open
        except BaseException as cut:  # cancelled while waiting (a timeout around the block): the run ends
            self.__exit__(type(cut), cut, cut.__traceback__)  # "cancelled"; calls still running are not waited for
            raise
        self.__exit__(exc_type, exc, tb)

    def _record_open_streams(self, *, ending: bool) -> None:
        """Record the streamed model calls that will not end by themselves: the streams the agent
        dropped (garbage-collected) unfinished, and, when the run ends, every one still open (a sync
        one is closed)."""
        for record in sorted(self._open_streams, key=lambda r: r.started):
            if record.done or not (ending or record.dropped):
                continue
            n = len(record.chunks)
            if record.dropped:
                why = f"the stream was dropped (garbage-collected) after {n} chunk(s), before it completed"
            else:
                why = f"run {self.run_id} ended while the stream was open, after {n} chunk(s), before it completed"
                record.ended_by_run = why
                record.close_sync_stream()
            record.finish(StreamClosedEarly(why))

    # ----------------------------------------------------------------- helpers

    @property
    def _next_step(self) -> int:
        return self._steps[0]

    @_next_step.setter
    def _next_step(self, value: int) -> None:
        self._steps[0] = value

    def share_steps(self, other: "RunContext") -> None:
        """Number steps with ``other``, a context of the same run in this process (the gateway joins a run
        once per identity): one step counter, one set of call ids, one table of linked calls, so that
        calls recorded through either never get the same step; and one memory of the values the run
        redacted (:meth:`_run_secrets`), so that a value redacted from what one identity's call recorded
        is scrubbed from what the other's records after it, as in one context (docs/content-modes.md)."""
        if other.run_id != self.run_id:
            raise ValueError(f"run {self.run_id} cannot share the steps of run {other.run_id}")
        with other._lock:
            other._steps[0] = max(other._steps[0], self._steps[0])
            other._call_ids.update(self._call_ids)
            for call_id, step in self._links.items():
                other._links.setdefault(call_id, step)
            other._error_secrets.update(self._error_secrets)
            for step, call_id in self._taken_steps.items():
                other._taken_steps.setdefault(step, call_id)
            other._steps[3] = min(other._steps[3], self._steps[3])  # known up to where both know
        self._lock, self._steps, self._call_ids, self._links = other._lock, other._steps, other._call_ids, other._links
        self._taken_steps = other._taken_steps
        self._error_secrets = other._error_secrets

    def _take_step(self) -> str:
        with self._lock:
            steps = self._steps
            step = str(steps[0])
            steps[0] += 1
            return step

    def _step_for_call(self, call_id: str | None) -> str:
        if call_id is not None:
            with self._lock:
                linked = self._links.pop(call_id, None)
            if linked is not None:
                return linked
        return self._take_step()

    def step_of_call(self, call_id: str) -> str | None:
        """The step a recorded model call assigned to its tool call ``call_id`` (``"<step>.<i>"``), or None.

        It is not consumed: an MCP client sends it (``_meta["sealbox/step"]``) to a gateway that
        records the call in another process (:meth:`link_call` there); asking again returns it again.
        """
        with self._lock:
            return self._links.get(_provider_call_id(call_id))

    def link_call(self, call_id: str, step: str) -> None:
        """Record the next tool call with id ``call_id`` under ``step`` instead of a new top-level step.

        For a process that records calls of a run another process drives (the gateway joined
        to an SDK run): the model call that requested the call, and so its step, was recorded
        there. ``step`` must be a sub-step ``"<n>.<i>"`` (``n``, ``i`` positive integers).

        Raises:
            ValueError: ``step`` or ``call_id`` is not of that shape.
        """
        if not isinstance(call_id, str) or not call_id:
            raise ValueError("call_id must be a non-empty string")
        if not is_call_step(step):
            raise ValueError(f"step must be '<n>.<i>' with positive integers, not {step!r}")
        with self._lock:
            self._links[_provider_call_id(call_id)] = step

    def _draft(self, kind: str, payload: dict[str, Any], step: str) -> EventDraft:
        """``EventDraft(kind, payload, run_id=..., principal=..., step=step)`` without the frozen
        dataclass's ``__init__`` (one ``object.__setattr__`` per field), as the store's ``_new_event``
        makes an Event: the same instance, equal and frozen (tests/recorder/test_draft_construction.py)."""
        draft = _object_new(EventDraft)
        draft.__dict__.update(kind=kind, payload=payload, run_id=self.run_id, principal=self.principal.id, step=step)
        return draft

    def _append(self, drafts: list[EventDraft], sync: bool = True) -> list:
        if self.replay is not None:  # compared with the record before anything is written
            self.replay.check(self, drafts)
            drafts = self.replay.take_unwritten() + drafts  # served calls' events, in order, same commit
        return self._placed(self._learning(lambda: self.store.append(drafts, sync=sync)))

    def _append_fresh(self, drafts: list[EventDraft], step: str, sync: bool = True) -> str:
        """Append ``drafts``, the events of a top-level ``step`` just taken (:meth:`_take_step`); returns
        the step they were written at: ``step``, or the next free one when another writer of the run
        (another process) wrote that step meanwhile (:meth:`_fresh_step`)."""
        if self.replay is not None:  # a replay run is written by its replay only: its steps are the record's
            self._append(drafts, sync)
            return step
        box = [step]

        def build(reader: Any) -> list[EventDraft]:
            box[0] = self._fresh_step(reader, step)
            if box[0] == step:
                return drafts
            moved = box[0]
            return [dataclasses.replace(d, step=_moved_step(d.step, step, moved)) for d in drafts]

        self._placed(self._learning(lambda: self.store.append_with(build, sync=sync)), fresh=True)
        return box[0]

    def _placed(self, events: Any, fresh: bool = False) -> Any:
        """Note the run_seq of the newest of ``events`` (those just written) of this run: the run's head
        that this context wrote (see :meth:`_fresh_step`).

        ``fresh``: the write took a top-level step and so looked, in its transaction, at what other
        writers wrote (:meth:`_fresh_step`). Any other write whose first event does not directly follow
        the head this context wrote before had another writer's events come in between (a step another
        process took while this context's call ran, before its ``tool.result``): the head is then noted
        as not this context's (-1) until a fresh write has looked, so that the next step taken is not
        one the other writer already has."""
        if events:
            run_id = self.run_id
            mine = [e.run_seq for e in events if e.run_id == run_id]
            if mine:
                with self._lock:
                    steps = self._steps
                    if steps[3] == mine[0] - 1:  # nothing another writer wrote since the calls known here
                        steps[3] = mine[-1]
                    if fresh or (steps[1] >= 0 and mine[0] == steps[1] + 1):
                        if mine[-1] > steps[1]:
                            steps[1] = mine[-1]
                    else:
                        steps[1] = -1
        return events

    def _fresh_step(self, reader: Any, step: str) -> str:
        """Inside the write transaction of a just-taken top-level ``step``: the step to write it at.

        When the run's newest event is the one this context wrote last, or the run has none (read
        from the store's cached run head: no query, the common case of a run written by one
        process), that is ``step``. Otherwise another writer (a gateway joined to the run, the
        agent's own process, each with its own step counter) wrote since: the run's highest
        top-level step is read and this context's counter moves past it. A ``step`` not above the
        highest step seen so written that an event of the run already has is replaced by the next
        free step (links from a model call to its tool calls, ``"<step>.<i>"``, move with it); one
        not written yet (taken by another thread of this process before) is kept."""
        head_seq = getattr(reader, "run_head_seq", None)
        if head_seq is None:  # a store without a run-head cache: steps as taken
            return step
        steps = self._steps
        head = head_seq(self.run_id)
        if head is not None and head != steps[1]:
            top = reader.top_step(self.run_id)
            with self._lock:
                if top > steps[2]:
                    steps[2] = top
                if steps[0] <= top:
                    steps[0] = top + 1
        if int(step) > steps[2] or not reader.step_used(self.run_id, int(step)):
            return step
        with self._lock:
            moved = str(steps[0])
            steps[0] += 1
            prefix = step + "."
            for call_id, linked in list(self._links.items()):
                if linked.startswith(prefix):
                    self._links[call_id] = moved + linked[len(step):]
            return moved

    def _learning(self, write: Callable[[], Any]) -> Any:
        """``write()`` (a store append, guarded as :meth:`_guard` does), the strings the store's
        redaction took out of what it wrote (by key name or path: results, model calls, state,
        notes…) joining the run's redacted values (:meth:`_run_secrets`)."""
        # noting_redacted's variable, set directly: no generator per append (looked up once: an import
        # statement here cost ~7000 instructions per append)
        redacted_into = _REDACTED_INTO_VAR[0] if _REDACTED_INTO_VAR else _redacted_into_var()
        found: set[str] = set()
        token = redacted_into.set(found)
        try:
            out = self._guard(write)
        finally:
            redacted_into.reset(token)
        if found:
            self._remember_secrets(sorted(found))
        return out

    @staticmethod
    def _guard(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (RecordingError, StoreBusyError, StepTakenError):  # StoreBusyError: only under store.no_wait(),
            raise  # nothing written; StepTakenError: another writer recorded the call's step or id (_check_call_free)
        except (RecursionError, MemoryError) as exc:
            raise RecordingError(_out_of_stack_message(exc)) from exc
        except Exception as exc:  # any failure to record is a RecordingError, never a silent gap
            raise RecordingError(f"could not record: {exc}") from exc

    # ----------------------------------------------------------------- tool calls

    def check_grant_id(self, grant: str | None) -> None:
        """Refuse a grant that no call of this run may name, as :meth:`call_tool` would (for the
        integrations, which check it when a tool is wrapped). ``None`` (the run's own
        ``implicit:<principal>``), exactly ``implicit:<principal>``, and an access grant id (checked
        against sealbox.access when a call names it) pass.

        Raises:
            ConfigError: not a non-empty string or None, or ``implicit:`` followed by anything but
                this run's principal id (the implicit grant is not checked: naming another
                principal's would record a grant the run does not hold).
        """
        if grant is not None and (not isinstance(grant, str) or not grant):
            raise ConfigError(f"grant must be a non-empty string or None, got {grant!r}")
        _check_implicit_grant(f"run {self.run_id}", grant, self.principal.id)

    def call_tool(self, server: str, tool: str, arguments: Any, fn: Callable[..., Any], *, grant: str | None = None,
                  call_id: str | None = None, exposed: str | None = None,
                  failure: Callable[[Any], str | None] | None = None,
                  control_flow: tuple[type[BaseException], ...] = (), agent: str | None = None,
                  refused: BaseException | None = None) -> Any:
        """Record a tool call, decide it, run ``fn`` if allowed, record the result.

        ``fn`` is called as ``fn(**arguments)`` when ``arguments`` is a dict,
        ``fn()`` when it is None, else ``fn(arguments)``.

        ``fn`` must return its result: a coroutine function (use :meth:`acall_tool`) or a
        generator function (return a list) is refused before anything is recorded, and
        a coroutine or generator returned all the same is closed unrun and recorded as
        an error, as is any other iterator it returns (``map``, ``filter``, ``zip``,
        ``iter(list)``, a ``sqlite3.Cursor``, an async iterator), left unconsumed
        (docs/integrations.md).

        ``failure``: for tools that report their own failure in what they return (an MCP
        result with ``isError: true``): called with the result, it returns the failure's
        message, or None for a success. A failure is recorded ``ok: false`` with the result
        *and* ``error`` ``{"type": "ToolError", "message": ...}``, and the result is still
        returned (nothing is raised); it does not count against the circuit breaker (the
        tool answered).

        ``control_flow``: exception types ``fn`` raises to steer its framework, not as failures
        (LangGraph's ``interrupt()`` for a human's answer): recorded in ``tool.result`` like any
        exception, and not counted by the circuit breaker (five of them would open it, and the
        calls made once the human answered were denied ``breaker_open``).

        ``agent``: the name of the agent making the call when it is not the run's own (an agent
        handed off to inside the run): what the policy sees as ``agent.name`` for this call, and
        what its ``policy.decision`` inputs record (None: the run's ``agent``). Usage counters
        (``calls_minute_agent``) still count the run's calls.

        ``refused``: the exception the call is already known to end in, whatever its decision (the
        ``TypeError`` of a ``@recorder.tool`` function called with arguments that do not bind to its
        signature): the call is recorded and decided as any, but a ``require_approval`` decision asks
        no approver (nothing could be approved to run), and unless denied ``refused`` itself is raised
        in place of ``fn`` (never called) and recorded as its ``tool.result`` (as :meth:`acall_tool`).
        It never reached the tool, so it does not count against the circuit breaker.

        Returns:
            What ``fn`` returned.

        Raises:
            ConfigError: a bad server, tool, call id, grant or agent (an ``implicit:`` grant other than
                this run's own ``implicit:<principal>`` included), a call id this run used already,
                or ``fn`` is a coroutine or generator function; nothing ran. Also when ``fn``
                returned a coroutine, a generator or any other iterator (``map(...)``,
                ``iter(...)``, a cursor, an async iterator): the call is recorded ``ok: false``
                with this error, the object is not consumed (a coroutine or generator is closed).
            RecordingError: the call could not be recorded; ``fn`` did not run. Also when ``fn``
                returned but its ``tool.result`` could not be recorded: the tool ran and the record
                lacks its outcome, which the caller must not mistake for a complete record. (A run
                ended by another thread or task while ``fn`` runs waits for its result:
                :meth:`end`.)
            ToolDenied: the decision was not allow; ``fn`` did not run.
            Exception: whatever ``fn`` raised, unchanged (after it is recorded), or ``refused``. If its
                ``tool.result`` cannot be recorded, it is still the tool's own exception that is
                raised, with the recording failure attached as a note (``exc.__notes__``).
        """
        if self.suspended and not self.recorder._calls_while_suspended:
            self._refuse_suspended()
        call_id = _provider_call_id(call_id)
        _check_call(server, tool, grant, call_id, exposed, self.principal.id)
        _check_agent(server, tool, agent)
        if failure is not None and not callable(failure):
            raise ConfigError(f"{server}/{tool}: failure must be a callable or None, got {failure!r}; nothing was recorded")
        _check_control_flow(server, tool, control_flow)
        fn = _undecorated(fn)
        kind = _function_kind(fn)
        if kind in ("coroutine", "async generator"):
            raise ConfigError(f"{server}/{tool}: {_describe(fn)} is {_A[kind]} function: use acall_tool "
                              "(await run.acall_tool(...)) to record it; nothing was recorded or run")
        if kind == "generator":
            raise ConfigError(_generator_refusal(server, tool, kind))
        inside = None
        if self.replay is not None and self.replay.serves_tools:  # from the record (fn runs if it held a sub-agent)
            from sealbox.replay.source import RunInside

            inside = self.replay.serve_tool(self, server, tool, arguments, grant=grant, call_id=call_id, exposed=exposed)
            if not isinstance(inside, RunInside):
                return inside
        if inside is not None:  # it held a sub-agent: fn runs, its sub-agent served from the record
            call_id, step = inside.call_id, inside.step
            self._call_began(call_id)
        else:  # counted as running from before its tool.call is written (see _decide_and_record)
            call_id, step = self._decide_and_record(server, tool, arguments, grant, call_id, exposed, agent,
                                                    refused=refused is not None)
        try:
            started = time.perf_counter_ns()
            if refused is not None:  # never raised yet: recorded without a traceback (Sealbox's own frames)
                self._record_raised(server, tool, call_id, step, started, refused, arguments, count=False)
                raise refused
            try:
                result = _invoke(fn, arguments)
            except BaseException as exc:
                self._record_raised(server, tool, call_id, step, started, exc, arguments,
                                    count=not isinstance(exc, control_flow))
                raise
            refusal = _unrecordable(result, server, tool, awaited=False)
            if refusal is not None:
                self._record_result(server, tool, call_id, step, started, error=refusal, arguments=arguments,
                                    count=False)
                raise refusal
            self._record_result(server, tool, call_id, step, started, result=result, arguments=arguments,
                                failure=_failure_message(failure, result))
            return result
        finally:
            self._call_done(call_id)

    async def acall_tool(self, server: str, tool: str, arguments: Any, fn: Callable[..., Any], *,
                         grant: str | None = None, call_id: str | None = None, exposed: str | None = None,
                         failure: Callable[[Any], str | None] | None = None,
                         control_flow: tuple[type[BaseException], ...] = (), agent: str | None = None,
                         method: str | None = None, refused: BaseException | None = None) -> Any:
        """Async form of :meth:`call_tool`; ``fn`` may be sync or async (not a generator function,
        sync or async: refused like in :meth:`call_tool`). Raises as :meth:`call_tool` does: the
        tool's own exception even when its ``tool.result`` cannot be recorded (the failure
        attached as a note), RecordingError when a tool that returned cannot have its result recorded.

        ``method``: the MCP method of a request the gateway records as a call that is not a
        ``tools/call`` (``"prompts/get"``, ``"resources/read"``; docs/gateway.md): written as the
        ``tool.call``'s ``method`` field, and a ``require_approval`` decision for it is recorded as a
        deny ``approval_unavailable`` (such a request cannot be held for an approval). None: a tool call.

        ``refused``: the exception the call is already known to end in, whatever its decision (the
        gateway's arguments that do not match the tool's input schema): the call is recorded and decided
        as any, but a ``require_approval`` decision asks no approver (no ``approval.requested``, nothing
        could be approved to run), and unless denied ``refused`` is raised in place of ``fn`` (never
        called) and recorded as its ``tool.result``; not counted against the circuit breaker."""
        if self.suspended and not self.recorder._calls_while_suspended:
            self._refuse_suspended()
        call_id = _provider_call_id(call_id)
        _check_call(server, tool, grant, call_id, exposed, self.principal.id)
        _check_agent(server, tool, agent)
        if failure is not None and not callable(failure):
            raise ConfigError(f"{server}/{tool}: failure must be a callable or None, got {failure!r}; nothing was recorded")
        _check_control_flow(server, tool, control_flow)
        fn = _undecorated(fn)
        kind = _function_kind(fn)
        if kind in ("generator", "async generator"):
            raise ConfigError(_generator_refusal(server, tool, kind))
        inside = None
        if self.replay is not None and self.replay.serves_tools:
            from sealbox.replay.source import RunInside

            inside = self.replay.serve_tool(self, server, tool, arguments, grant=grant, call_id=call_id, exposed=exposed)
            if not isinstance(inside, RunInside):
                return inside
        writer = self.recorder.async_writer
        task = _current_task()
        if inside is not None:  # it held a sub-agent: fn runs, its sub-agent served from the record
            call_id, step = inside.call_id, inside.step
            self._call_began(call_id, task)
        elif writer is None:  # counted as running from before its tool.call is written (see _decide_and_record)
            call_id, step = self._decide_and_record(server, tool, arguments, grant, call_id, exposed, agent,
                                                    method=method, refused=refused is not None, task=task)
        else:
            call_id, step = await self._adecide_and_record(writer, server, tool, arguments, grant, call_id, exposed,
                                                           agent, method=method, refused=refused is not None, task=task)
        try:
            return await self._arun_tool(writer, server, tool, call_id, step, arguments, fn, failure, control_flow,
                                         refused)
        finally:
            self._call_done(call_id)

    async def _arun_tool(self, writer: Any, server: str, tool: str, call_id: str, step: str, arguments: Any,
                         fn: Callable[..., Any], failure: Any, control_flow: tuple[type[BaseException], ...],
                         refused: BaseException | None) -> Any:
        """:meth:`acall_tool` once the call is decided: run ``fn``, record its ``tool.result``."""
        started = time.perf_counter_ns()
        work = None
        if refused is not None:  # never raised yet: recorded without a traceback (it would be Sealbox's own frames)
            if writer is None:
                self._record_raised(server, tool, call_id, step, started, refused, arguments, count=False)
            else:
                await self._arecord_raised(writer, server, tool, call_id, step, started, refused, arguments, count=False)
            raise refused
        try:
            result = _invoke(fn, arguments)
            if isinstance(result, concurrent.futures.Future):  # a thread's work (executor.submit): awaited too
                work, result = result, asyncio.wrap_future(result)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as exc:
            recorded = exc
            if work is not None and isinstance(exc, asyncio.CancelledError) and not work.cancel() and not work.done():
                # the work runs on (a running Future cannot be cancelled): the record must not read as if it stopped
                recorded = asyncio.CancelledError(_WORK_WENT_ON).with_traceback(exc.__traceback__)
            if writer is None:
                self._record_raised(server, tool, call_id, step, started, recorded, arguments,
                                    count=not isinstance(exc, control_flow))
            else:
                await self._arecord_raised(writer, server, tool, call_id, step, started, recorded, arguments,
                                           count=not isinstance(exc, control_flow))
            raise
        refusal = _unrecordable(result, server, tool, awaited=True)
        if refusal is not None:
            await self.arecord_result(server, tool, call_id, step, started, error=refusal, arguments=arguments,
                                      count=False)
            raise refusal
        await self.arecord_result(server, tool, call_id, step, started, result=result, arguments=arguments,
                                  failure=_failure_message(failure, result))
        return result

    def _reserve_call_id(self, server: str, tool: str, call_id: str | None) -> str:
        call_id = call_id or "call_" + os.urandom(12).hex()  # 96 random bits, as many characters as before
        with self._lock:  # reserved before anything is written: two threads cannot both record it
            if call_id in self._call_ids:
                raise ConfigError(f"{server}/{tool}: call_id {call_id!r} was already used by a tool call of run "
                                  f"{self.run_id}; every tool call of a run needs its own id")
            self._call_ids.add(call_id)
        return call_id

    def _decide_and_record(self, server: str, tool: str, arguments: Any, grant: str | None, call_id: str | None,
                           exposed: str | None, agent: str | None = None, *, method: str | None = None,
                           refused: bool = False, task: Any = None) -> tuple[str, str]:
        """The gate of :meth:`call_tool` and :meth:`acall_tool`, which have checked the names (``_check_call``).
        The call counts as running (:meth:`_call_began`; ``task``: the asyncio task making it) from before its
        ``tool.call`` is written, so that a run ending meanwhile waits for it; the caller's ``finally`` ends
        that (:meth:`_call_done`) once the gate let it through, the gate itself when it did not."""
        call_id = self._reserve_call_id(server, tool, call_id)
        self._begin_gated(call_id, task)
        try:
            return self._decide_and_record_id(server, tool, arguments, grant, call_id, exposed, agent, method=method,
                                              refused=refused)
        except BaseException:
            self._call_done(call_id)
            raise

    def _begin_gated(self, call_id: str, task: Any) -> None:
        """:meth:`_call_began` for a call about to be written; refused (RecordingError, its id freed, nothing
        written) once the run's end began: the end would not wait for it, and its tool would run unrecorded."""
        with self._idle_lock:
            if not self._ending:
                self._in_flight[call_id] = (threading.get_ident(), task)
                return
        with self._lock:
            self._call_ids.discard(call_id)
        raise RecordingError(f"could not record: run {self.run_id} has ended; no event can follow run.ended")

    async def _adecide_and_record(self, writer: Callable[[Callable[[], Any]], Any], server: str, tool: str,
                                  arguments: Any, grant: str | None, call_id: str | None, exposed: str | None,
                                  agent: str | None = None, *, method: str | None = None,
                                  refused: bool = False, task: Any = None) -> tuple[str, str]:
        """:meth:`_decide_and_record`, its write made by ``await writer(write)`` (:attr:`Recorder.async_writer`)."""
        call_id = self._reserve_call_id(server, tool, call_id)
        self._begin_gated(call_id, task)
        try:
            return await self._adecide_and_record_id(writer, server, tool, arguments, grant, call_id, exposed, agent,
                                                     method=method, refused=refused)
        except BaseException:
            self._call_done(call_id)
            raise

    async def _adecide_and_record_id(self, writer: Callable[[Callable[[], Any]], Any], server: str, tool: str,
                                     arguments: Any, grant: str | None, call_id: str, exposed: str | None,
                                     agent: str | None, *, method: str | None, refused: bool) -> tuple[str, str]:
        step_box, write, boxes, probe, taken = self._gate(server, tool, arguments, grant, call_id, exposed, agent,
                                                          method, refused=refused)

        def guarded() -> Any:  # in the thread that writes: a failed write's breaker changes are dropped there
            try:
                return self._learning(write)
            except StoreBusyError:
                raise  # build() did not run: nothing to drop; the writer makes it again
            except BaseException:
                self.recorder._undo_unrecorded_breaker_changes(server, tool, probe, taken)  # nothing ran
                raise

        try:
            await writer(guarded)
        except BaseException:
            with self._lock:  # no tool.call was written: the id is free again
                self._call_ids.discard(call_id)
            raise
        self._hold_probe(call_id, probe)
        return self._gated(call_id, step_box[0], server, tool, *boxes, refused=refused)

    def _decide_and_record_id(self, server: str, tool: str, arguments: Any, grant: str | None, call_id: str,
                              exposed: str | None, agent: str | None = None, *,
                              method: str | None = None, refused: bool = False) -> tuple[str, str]:
        step_box, write, boxes, probe, taken = self._gate(server, tool, arguments, grant, call_id, exposed, agent,
                                                          method, refused=refused)
        try:
            self._learning(write)
        except BaseException:
            self.recorder._undo_unrecorded_breaker_changes(server, tool, probe, taken)  # not recorded; nothing ran
            with self._lock:  # no tool.call was written: the id is free again
                self._call_ids.discard(call_id)
            raise
        self._hold_probe(call_id, probe)
        return self._gated(call_id, step_box[0], server, tool, *boxes, refused=refused)

    def _hold_probe(self, call_id: str, probe: list[int]) -> None:
        """After the gate's write: the call took a half-open breaker's probe (``probe``: its ticket); its
        outcome (:meth:`_result_drafts`) moves the breaker, another call's does not."""
        if probe:
            with self._lock:
                self._probe_tickets[call_id] = probe[0]

    def hand_back_probe(self, server: str, tool: str, call_id: str) -> bool:
        """Give back the half-open breaker's probe that call ``call_id`` took (when it did), before its
        outcome, so that the next call of the tool probes: for a call that waits on something that says
        nothing of the tool's health (the gateway: its upstream asked the client something, whose answer
        may take as long as a person does). The call keeps its ticket: its outcome still moves the
        half-open breaker if no other call took the probe meanwhile, else it is not counted
        (:meth:`CircuitBreaker.record_success`). True when the call took a probe."""
        with self._lock:
            ticket = self._probe_tickets.get(call_id, 0)
        if ticket:
            self.recorder.breaker.record_not_run(server, tool, ticket=ticket)
        return bool(ticket)

    def _gate(self, server: str, tool: str, arguments: Any, grant: str | None, call_id: str, exposed: str | None,
              agent: str | None, method: str | None = None, *,
              refused: bool = False) -> tuple[list[str], Callable[[], Any], tuple[list, list, list], list[bool],
                                              tuple[list[EventDraft], list[BreakerChange]]]:
        """The call's step (a one-item list: the step the write placed it at, moved past another writer's
        steps by :meth:`_fresh_step`), the write of its ``tool.call`` + ``policy.decision`` (+ approval
        request), the boxes that write fills (decision, approval request, whether nothing was redacted
        from the arguments), and a list that is true once the write took a half-open breaker's probe (a
        write that fails after that gives it back), and the breaker changes its drafts carry: those of
        earlier failed writes, and its own (a write that fails takes them back: :meth:`CircuitBreaker.undo`).
        ``refused``: the call will not run whatever its
        decision (``acall_tool``'s ``refused``): a ``require_approval`` is recorded without an approval request."""
        step = self._step_for_call(call_id)
        step_box = [step]  # the step written: moved past another writer's steps (_fresh_step) when taken here
        fresh = self.replay is None and "." not in step  # not a sub-step linked to a model call
        linked = not fresh and self.replay is None  # a sub-step another writer of the run may have taken too
        # a sub-step, or any call of a run joined here (continue_run: another process drives it): its step
        # and call id are checked against the calls other writers recorded (a run of one writer: no check)
        checked = linked or (self._attached and self.replay is None)
        grant = grant or f"implicit:{self.principal.id}"
        decision_box: list[Decision] = []
        request_box: list[dict[str, Any]] = []
        clean_box: list[bool] = []
        probe_box: list[bool] = []
        taken_box: tuple[list[EventDraft], list[BreakerChange]] = ([], [])

        def build(reader: Any) -> list[EventDraft]:
            if taken_box[0] or taken_box[1] or probe_box:
                # made again (PostgreSQL retried the write: the first transaction rolled back): the breaker
                # goes back to the state the record shows, so this build makes and carries the same changes
                self.recorder._undo_unrecorded_breaker_changes(server, tool, probe_box, taken_box)
                probe_box.clear()
            step = step_box[0] = self._fresh_step(reader, step_box[0]) if fresh else step_box[0]
            if checked:
                self._check_call_free(reader, step, call_id)
            decision, inputs = self._evaluate(reader, server, tool, arguments, grant=grant, agent=agent,
                                              no_hold=method)
            clean_box[:] = [inputs.get("redacted") is False]  # unknown (a guard error): the result is checked
            # what the record holds: the arguments with this run's redacted values scrubbed (the same
            # object when there is nothing to scrub); the policy decided, and the tool gets, the real ones
            recorded = inputs["arguments"] if "arguments" in inputs else self._arguments_for_record(arguments)
            if decision.effect != "deny" and not grant.startswith("implicit:"):
                decision = self._check_grant(reader, grant, server, tool, decision)
            if decision.allowed:
                check = self.recorder.breaker.before_call(server, tool)
                probe_box[:] = [check.ticket] if check.probe else []
                if not check.allowed:
                    decision = breaker_open_decision(check, server, tool, self.policy.fingerprint)
            decision_box.append(decision)
            call = {"call_id": call_id, "server": server, "tool": tool, "exposed": exposed or f"{server}.{tool}",
                    "arguments": recorded, "grant": grant}
            if method is not None:  # a prompts/get or resources/read the gateway records as a call
                call["method"] = method
            drafts = [
                self._draft("tool.call", call, step),
                self._draft("policy.decision", {"call_id": call_id, "server": server, "tool": tool,
                                                **decision.to_payload(), "inputs": inputs}, step),
            ]
            if decision.limit is not None:
                drafts.append(self._draft("guardrail.tripped", {"call_id": call_id, **decision.limit.to_dict()}, step))
            if decision.effect == "require_approval" and not refused:
                drafts += self._approval_drafts(decision, call_id, step, server, tool, arguments, request_box,
                                                recorded, reader)
            if self.replay is not None:
                self.replay.check(self, drafts)
            earlier, changes = self.recorder._take_unwritten(), self.recorder._take_breaker_changes()
            taken_box[0].extend(earlier)  # a build made again (the write retried) adds its own
            taken_box[1].extend(changes)
            return drafts + earlier + [self.recorder.breaker_draft(c) for c in changes]

        boxes = (decision_box, request_box, clean_box)
        if not linked:
            return step_box, lambda: self._placed(self.store.append_with(build), fresh=fresh), boxes, probe_box, taken_box

        def write_linked() -> Any:
            events = self._placed(self.store.append_with(build))
            with self._lock:  # written: the sub-step is this call's
                self._taken_steps[step] = call_id
            return events

        return step_box, write_linked, boxes, probe_box, taken_box

    def _check_call_free(self, reader: Any, step: str, call_id: str) -> None:
        """Inside the write transaction of a tool call linked to sub-step ``step`` (``"<n>.<i>"``), or of any
        tool call of a run this context joined (:meth:`Recorder.continue_run`; its top-level ``step`` was
        moved past other writers' by :meth:`_fresh_step`): refuse it when the run already has a tool call
        at ``step`` or with ``call_id``.

        The calls known here (:attr:`_taken_steps`, :attr:`_call_ids`) are those up to the run's event
        ``_steps[3]``. When the run's newest event (the store's cached run head: no query) is that one,
        nothing was written since and nothing is read; otherwise another writer of the run (another
        process) has written: its ``tool.call`` events after that one are read (one query, through the
        ``(run_id, run_seq)`` index: as many rows as events written since) and become known. Because this
        runs under the store's write lock, two writers of one run (two gateway processes given the same
        ``sealbox/step``, a gateway and the driving process) cannot both record a call at one step.

        Raises:
            StepTakenError: the run has a tool call at ``step`` or with ``call_id``; nothing is written.
        """
        head_seq = getattr(reader, "run_head_seq", None)
        steps = self._steps
        if head_seq is not None:
            head = head_seq(self.run_id)
            if head is not None and head != steps[3]:
                rows = reader.calls_after(self.run_id, steps[3])
                with self._lock:
                    taken, ids = self._taken_steps, self._call_ids
                    for other_step, other_id in rows:
                        if other_id == call_id:
                            clash = StepTakenError(self.run_id, step, call_id, "call_id", other_step)
                            break
                        if "." in other_step:
                            taken.setdefault(other_step, other_id)
                        if isinstance(other_id, str):
                            ids.add(other_id)
                    else:
                        clash = None
                    if clash is None:
                        steps[3] = head  # known: every call up to the head
                if clash is not None:  # the rest is read again next time (steps[3] not moved)
                    raise clash
        other = self._taken_steps.get(step)
        if other is not None:
            raise StepTakenError(self.run_id, step, call_id, "step", other)

    def _gated(self, call_id: str, step: str, server: str, tool: str, decision_box: list[Decision],
               request_box: list[dict[str, Any]], clean_box: list[bool], *, refused: bool = False) -> tuple[str, str]:
        """After the gate's write: go on (returns ``(call_id, step)``), or raise ToolDenied / ApprovalPending.
        ``refused``: a ``require_approval`` asked no approver (:meth:`_gate`): go on, to the refusal."""
        decision = decision_box[-1]
        if decision.effect != "deny" and clean_box and clean_box[-1]:
            with self._lock:  # nothing to look for in the result (see _result_for_record)
                self._clean_calls.add(call_id)
        if decision.effect == "require_approval" and not refused:
            from sealbox.pause import await_approval

            await_approval(self, request_box[-1])  # returns when approved; raises ToolDenied or ApprovalPending
            return call_id, step
        if not decision.allowed and decision.effect != "require_approval":
            raise ToolDenied(decision, call_id, server, tool)
        return call_id, step

    def _approval_drafts(self, decision: Decision, call_id: str, step: str, server: str, tool: str, arguments: Any,
                         box: list[dict[str, Any]], recorded: Any, reader: Any) -> list[EventDraft]:
        """``approval.requested`` and ``run.suspended``, written with the call (sealbox.approvals). The
        request holds the arguments as the ``tool.call`` records them (``recorded``), its binding is
        the hash of the real ``arguments``, as the call's retry and its resumption compute it. ``expires_at``
        counts from the store's clock in the write transaction (``reader.stamp``: the request's ``ts``)."""
        from sealbox.approvals import ApprovalError, _store_now, new_approval_id, request_payload

        if self.recorder.approvals == "block" and getattr(self, "_lease", None) is None:
            # this process will wait and run the call itself: hold the run's lease before the request is
            # committed (and so visible), or a resume elsewhere could take the run in between and run the tool
            from sealbox.pause import take_lease

            try:
                self._lease = take_lease(self.store, self.run_id)
            except ApprovalError:  # another live process holds the run (it attached to it too): wait as before
                pass
        request = request_payload(approval_id=new_approval_id(), call_id=call_id, server=server, tool=tool,
                                  arguments=recorded, encoded_arguments=_policy_view(arguments), decision=decision,
                                  requested_by=self.principal.id, now=_store_now(reader))
        box.append(request)
        return [self._draft("approval.requested", request, step),
                self._draft("run.suspended", {"approval_ids": [request["approval_id"]],
                                              "reason": f"rule {decision.rule} requires approval"}, step)]

    def _check_grant(self, reader: Any, grant: str, server: str, tool: str, decision: Decision) -> Decision:
        """An explicit grant that is unknown, revoked, expired, another principal's or not
        covering the tool turns an allow (or require_approval) into a ``grant_invalid`` deny
        (sealbox.access); a decision that already denies is kept as it is. Expiry is judged by the
        store's clock (``reader.stamp``: the ``ts`` the call's events get), so a grant counts as
        expired exactly when its decision is stamped at or after ``expires_at``."""
        try:
            from sealbox.access import grant_status
            from sealbox.approvals import _store_now

            ok, why = grant_status(reader, grant, self.principal.id, server, tool, _store_now(reader))
        except (RecursionError, MemoryError):
            raise  # Sealbox's own stack or memory, as in _evaluate
        except Exception as exc:  # noqa: BLE001 - fail closed
            return dataclasses.replace(decision, effect="deny", reason_code="guardrail_error", rule=None, approval=None,
                                       limit=None, reason=_valid_text(f"the grant check failed: {type(exc).__name__}: {exception_message(exc)}"))
        if ok:
            return decision
        return dataclasses.replace(decision, effect="deny", reason_code="grant_invalid", rule=None, approval=None,
                                   limit=None, reason=why)

    def _evaluate(self, reader: Any, server: str, tool: str, arguments: Any,
                  keep_approval: bool = False, grant: str | None = None,
                  agent: str | None = None, no_hold: str | None = None) -> tuple[Decision, dict[str, Any]]:
        """Decide the call inside the recording transaction. Never raises: any
        failure is a ``guardrail_error`` deny ("no guardrail, no answer").
        ``keep_approval``: return ``require_approval`` even if this recorder has no approvals mode.
        ``grant``: the grant the call names (``call.grant``; None: not known, which fails closed).
        ``agent``: the agent making the call, as ``agent.name`` (None: the run's).
        ``no_hold``: the MCP method of a request that cannot wait for an approval (``prompts/get``…):
        a ``require_approval`` is an ``approval_unavailable`` deny naming it."""
        try:
            return self._evaluate_unguarded(reader, server, tool, arguments, keep_approval, grant, agent, no_hold)
        except (RecursionError, MemoryError):
            raise  # Sealbox's own stack or memory, not the guardrail's: the write fails (RecordingError, _guard)
        except Exception as exc:  # noqa: BLE001 - fail closed
            text = f"{type(exc).__name__}: {exception_message(exc)}"
            decision = Decision("deny", "guardrail_error", None, f"the guardrail failed: {text}", self.policy.fingerprint)
            return decision, {"server": server, "tool": tool, "error": text}

    def _evaluate_unguarded(self, reader: Any, server: str, tool: str, arguments: Any, keep_approval: bool = False,
                            grant: str | None = None, agent: str | None = None,
                            no_hold: str | None = None) -> tuple[Decision, dict[str, Any]]:
        if self._cost_error:
            raise PolicyError(f"the run's budgets cannot be enforced: {self._cost_error}")
        now = datetime.now(timezone.utc)
        view = _policy_view(arguments)
        redactor = getattr(self.store, "redactor", None)
        redacted = bool(redactor and redactor.would_redact("arguments", view))
        recorded = self._arguments_for_record(arguments, redacted=redacted)
        ctx = CallContext(
            server=server, tool=tool, arguments=view,  # the real arguments decide
            redacted=redacted or recorded is not arguments,  # a condition reading them is not re-evaluable
            principal=self.principal.to_dict(), agent={"name": agent or self.agent, "attributes": {}},
            run={"id": self.run_id, "labels": self.labels, "started_at": self._started_text(now),
                 "elapsed_s": (now - (self.started_at or now)).total_seconds()},
            usage=self._usage(reader, server, tool, now), now=now, grant=grant,
        )
        # a resources/read is judged also as the other forms of its URI, the strictest winning (policy.reads)
        decision = evaluate_read(self.policy, ctx) if no_hold == "resources/read" else self.policy.evaluate(ctx)
        if decision.rule is None and decision.reason_code == "guardrail_error" \
                and str(decision.reason).startswith(_ENGINE_OUT_OF_STACK):
            # the engine (which never raises) ran out of stack or memory outside any rule: ours, not a guardrail's
            raise (MemoryError if "MemoryError" in decision.reason[:40] else RecursionError)(decision.reason)
        if decision.effect == "require_approval" and decision.approval is None:
            decision = decision.denied_as(
                "approval_unavailable", f"rule {decision.rule} requires approval but names no approvers")
        elif decision.effect == "require_approval" and no_hold is not None:
            decision = decision.denied_as(
                "approval_unavailable", f"rule {decision.rule} requires approval, and a {no_hold} cannot wait for one"
                f"{judged_text(decision)}")
        elif decision.effect == "require_approval" and not (keep_approval or self.recorder.approvals):
            decision = decision.denied_as(
                "approval_unavailable", f"rule {decision.rule} requires approval, and this Recorder has no approvals mode "
                'to ask for one: create it with approvals="block" (wait for the answer) or approvals="suspend" (raise '
                'ApprovalPending, resume once answered); see docs/approvals.md')
        inputs = ctx.to_inputs()
        inputs["arguments"] = recorded  # raw (or scrubbed): the store encodes it once, as it does the call's arguments
        return decision, inputs

    def _started_text(self, now: datetime) -> str:
        """``started_at`` as RFC 3339 text (formatted once per run), or ``now``'s before the run started."""
        started = self.started_at
        if started is None:
            return _utc(now)
        cached = self._started_cache
        if cached is None or cached[0] is not started:
            cached = self._started_cache = (started, _utc(started))
        return cached[1]

    def _usage(self, reader: Any, server: str, tool: str, now: datetime) -> dict[str, Any]:
        if not self.recorder._needed:
            return {}
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return reader.usage(run_id=self.run_id, agent=self.agent, server=server, tool=tool,
                            since_minute=_utc(now - timedelta(seconds=60)), day_start=_utc(day),
                            needed=self.recorder._needed)

    def _record_raised(self, server: str, tool: str, call_id: str, step: str, started_ns: int, exc: BaseException,
                       arguments: Any, count: bool = True) -> None:
        """``tool.result`` of a tool that raised ``exc``. If it cannot be recorded, the failure is
        attached to ``exc`` as a note (``exc.__notes__``) instead of raised: the caller gets the
        tool's own exception, unchanged otherwise, whether or not its result was recorded."""
        try:
            self._record_result(server, tool, call_id, step, started_ns, error=exc, arguments=arguments, count=count)
        except Exception as failed:  # noqa: BLE001 - the tool's exception goes on, carrying this
            _attach_note(exc, f"sealbox: the tool.result of {server}/{tool} (call {call_id}, run {self.run_id}) "
                              f"could not be recorded: {type(failed).__name__}: {exception_message(failed)}")

    async def _arecord_raised(self, writer: Callable[[Callable[[], Any]], Any], server: str, tool: str, call_id: str,
                              step: str, started_ns: int, exc: BaseException, arguments: Any, count: bool = True) -> None:
        """:meth:`_record_raised` with its write made by ``writer`` (:attr:`Recorder.async_writer`)."""
        try:
            await self.arecord_result(server, tool, call_id, step, started_ns, error=exc, arguments=arguments,
                                      count=count)
        except Exception as failed:  # noqa: BLE001 - the tool's exception goes on, carrying this
            _attach_note(exc, f"sealbox: the tool.result of {server}/{tool} (call {call_id}, run {self.run_id}) "
                              f"could not be recorded: {type(failed).__name__}: {exception_message(failed)}")

    async def arecord_result(self, server: str, tool: str, call_id: str, step: str, started_ns: int, *,
                             result: Any = None, error: BaseException | None = None, arguments: Any = _NO_ARGUMENTS,
                             count: bool = True, failure: str | None = None) -> None:
        """:meth:`_record_result`, its write made by ``await recorder.async_writer(write)`` when the
        recorder has one (:attr:`Recorder.async_writer`), else on the spot. Raises as it does."""
        write, build = self._result_write(server, tool, call_id, step, started_ns, result=result, error=error,
                                          arguments=arguments, count=count, failure=failure)
        writer = self.recorder.async_writer
        try:
            if writer is None:
                write()
            else:
                await writer(write)
        except BaseException:
            self.recorder._requeue_breaker_events(build(None))  # the tool ran: its breaker changes stand
            raise

    def _record_result(self, server: str, tool: str, call_id: str, step: str, started_ns: int, *, result: Any = None,
                       error: BaseException | None = None, arguments: Any = _NO_ARGUMENTS, count: bool = True,
                       failure: str | None = None) -> None:
        """``tool.result``. Raises RecordingError (not recorded)."""
        # not fsync'd on its own: durable with the next fsync'd commit; a power cut before leaves "outcome unknown"
        write, build = self._result_write(server, tool, call_id, step, started_ns, result=result, error=error,
                                          arguments=arguments, count=count, failure=failure)
        try:
            write()
        except BaseException:
            self.recorder._requeue_breaker_events(build(None))  # the tool ran: its breaker changes stand
            raise

    def _result_write(self, server: str, tool: str, call_id: str, step: str, started_ns: int, *,
                      result: Any = None, error: BaseException | None = None, arguments: Any = _NO_ARGUMENTS,
                      count: bool = True, failure: str | None = None
                      ) -> tuple[Callable[[], Any], Callable[[Any], list[EventDraft]]]:
        """The write of a ``tool.result`` (raises RecordingError: not recorded), and the build of its drafts
        (``build(reader)``: the ``tool.result``, then the ``breaker.changed`` it carries). The breaker's update
        for the call's outcome is made by the first build, inside the write transaction (under the store's
        write lock), so that its ``breaker.changed`` is committed in the order the breaker changed, whatever
        other threads write meanwhile: made before, a change could be committed after another thread's later
        change of the same breaker (the record going ``closed`` -> ``open``, then ``half_open`` -> ``closed``).
        A build made again (the write retried) carries the same changes; a write that failed before building
        gets them from ``build(None)`` (the outcome counts all the same: the tool ran)."""
        draft, outcome = self._result_drafts(server, tool, call_id, step, started_ns, result=result, error=error,
                                             arguments=arguments, count=count, failure=failure)
        carried: list[EventDraft] = []
        done: list[bool] = []

        def build(reader: Any) -> list[EventDraft]:
            if not done:
                done.append(True)
                outcome()
                carried.extend(self.recorder.take_breaker_events())
            return [draft, *carried]

        if self.replay is not None:  # compared with the record first (_append): built on the spot
            return lambda: self._append(build(None), sync=False), build
        return lambda: self._placed(self._learning(lambda: self.store.append_with(build, sync=False))), build

    def _result_drafts(self, server: str, tool: str, call_id: str, step: str, started_ns: int, *, result: Any = None,
                       error: BaseException | None = None, arguments: Any = _NO_ARGUMENTS, count: bool = True,
                       failure: str | None = None) -> tuple[EventDraft, Callable[[], None]]:
        """The draft of a ``tool.result``, and the breaker's update for its outcome (a callable, made by
        :meth:`_result_write` inside the write). With an ``error``, the call's ``arguments`` (when given) say which
        redacted values to scrub from its message and traceback; ``count=False``: a caller's
        mistake (a refused return value, arguments refused before the tool ran: ``refused``), not a
        failure of the tool, so the breaker does not count it (a half-open probe it took is given back).
        ``failure``: the tool answered ``result`` but reports a failure in it (MCP ``isError``):
        recorded ``ok: false`` with the result and a ``ToolError`` (see :meth:`call_tool`)."""
        duration = (time.perf_counter_ns() - started_ns) // 1000
        payload: dict[str, Any] = {"call_id": call_id, "ok": error is None and failure is None, "duration_us": duration}
        if error is None:
            payload["result"] = self._result_for_record(call_id, result, arguments)
            if failure is not None:
                self._redacted_values(arguments)
                secrets = self._run_secrets()
                redactor = getattr(self.store, "redactor", None)
                message = _valid_text(failure)
                if secrets and redactor is not None:
                    message = redactor.scrub_values(message, secrets)
                payload["error"] = {"type": "ToolError", "message": message}
        else:
            self._redacted_values(arguments)
            payload["error"] = self._error_dict(error, self._run_secrets(), traceback=True)
        breaker = self.recorder.breaker
        with self._lock:  # 0: the call took no probe (e.g. held for an approval): it moves no half-open breaker
            ticket = self._probe_tickets.pop(call_id, 0)

        def outcome() -> None:
            if error is None:
                breaker.record_success(server, tool, ticket=ticket)  # the tool answered, even with its own failure
            elif not count or not isinstance(error, Exception):
                # never reached the tool, or says nothing of its health (the caller's cancellation, a
                # KeyboardInterrupt: not the tool's failure): a half-open probe is given back (kept, it would
                # deny every later call of the tool until restart)
                breaker.record_not_run(server, tool, ticket=ticket)
            elif isinstance(error, ConnectionError):  # the server is down: open every breaker of it
                breaker.record_unreachable(server, tool, ticket=ticket)
            else:
                breaker.record_failure(server, tool, "timeout" if isinstance(error, TimeoutError) else "error",
                                       ticket=ticket)

        return self._draft("tool.result", payload, step), outcome

    def _result_for_record(self, call_id: str, result: Any, arguments: Any) -> Any:
        """A tool's result as it is recorded: in ``redacted`` mode, every string that redaction
        took out of the call's arguments or out of anything the run recorded before it (by a
        sensitive key name or a configured path, at least 4 characters: :meth:`_redacted_values`,
        :meth:`_run_secrets`) is replaced wherever the result repeats it by its in-string
        marker (``Redactor.scrub_values_in``), so that a tool echoing a password under an
        ordinary key does not store it. Skipped (no cost) while nothing of the run was redacted;
        the call's own values are found from ``arguments`` for a call gated elsewhere (an
        approval resumed later). ``result`` itself when nothing changes. The store's redaction
        (keys, paths, patterns) applies on top."""
        with self._lock:
            clean = call_id in self._clean_calls
            self._clean_calls.discard(call_id)
        if not clean and arguments is not _NO_ARGUMENTS:
            self._redacted_values(arguments)
        secrets = self._run_secrets()
        if not secrets:
            return result
        from sealbox.canonical import MAX_DEPTH, encode, pre_encoded

        # the depth the store gives a payload's field: payload (MAX_DEPTH - 2) less its own level
        scrubbed, changed = self.store.redactor.scrub_values_in(encode(result, max_depth=MAX_DEPTH - 3), secrets)
        return pre_encoded(scrubbed) if changed else result

    def _redacted_values(self, arguments: Any) -> list[str]:
        """The strings the store's redaction removes from these arguments (sensitive keys, paths),
        longest first, remembered as the run's redacted values (:meth:`_run_secrets`); [] outside
        ``redacted`` mode."""
        redactor = getattr(self.store, "redactor", None)
        if arguments is _NO_ARGUMENTS or redactor is None or getattr(redactor.policy, "mode", None) != "redacted":
            return []
        values = redactor.removed_strings("arguments", _policy_view(arguments))
        self._remember_secrets(values)
        return values

    def _remember_secrets(self, values: "list[str]") -> None:
        if values:
            # a value holding a lone surrogate (parsed from a JSON text's \\ud800 escape) is in an error text as
            # the text \\ud800 (_valid_text): that form is remembered too, or the error would keep it in clear
            odd = [v for v in values if not v.isascii() and _valid_text(v) != v]
            with self._lock:
                if len(self._error_secrets) < 10_000:
                    self._error_secrets.update(values)
                    self._error_secrets.update(_valid_text(v) for v in odd)

    def _run_secrets(self) -> list[str]:
        """The strings redaction (a sensitive key name or a configured path) took out of what this
        run recorded so far in this process (tool-call arguments, results, model calls, state, notes'
        ``about``; at least 4 characters), longest first: scrubbed from every later content field,
        error text and note of the run (docs/content-modes.md, "Values redacted earlier in the run").
        [] outside ``redacted`` mode: in ``hashes-only`` mode those fields are HMAC markers whole, and
        the values are kept out of a state's label only (:meth:`_label_secrets`)."""
        with self._lock:
            if not self._error_secrets:
                return []
            secrets = sorted(self._error_secrets, key=lambda v: (-len(v), v))
        redactor = getattr(self.store, "redactor", None)
        return secrets if redactor is not None and getattr(redactor.policy, "mode", None) == "redacted" else []

    def _label_secrets(self) -> list[str]:
        """The values redaction took out of what this run recorded so far (:meth:`_run_secrets`), in
        ``redacted`` and ``hashes-only`` mode alike: a state's label is kept readable in both, so none
        of them may stay in it."""
        with self._lock:
            if not self._error_secrets:
                return []
            return sorted(self._error_secrets, key=lambda v: (-len(v), v))

    def _arguments_for_record(self, arguments: Any, *, redacted: bool | None = None) -> Any:
        """A tool call's ``arguments`` as the run records them (``tool.call``, its decision's
        ``inputs``, an ``approval.requested``): in ``redacted`` mode, every value this run has
        redacted so far (:meth:`_run_secrets`), and every value redacted from these arguments
        themselves, is replaced by its in-string marker wherever the store would keep it in
        clear (an ordinary key: ``{"sql": "... 'hunter2'"}``); the parts the store redacts are
        left to it. The values redacted from these arguments join the run's. ``arguments``
        itself (no cost) while nothing of the run was redacted and ``redacted`` (whether the
        store redacts anything of them, when known) is False, or when nothing changes; else
        the encoded, scrubbed value (``pre_encoded``). The policy decides, and the tool gets,
        the real arguments: only the record is scrubbed."""
        redactor = getattr(self.store, "redactor", None)
        if redactor is None or getattr(redactor.policy, "mode", None) != "redacted":
            return arguments
        with self._lock:
            known = list(self._error_secrets)
        if not known and redacted is False:
            return arguments
        from sealbox.canonical import MAX_DEPTH, encode, pre_encoded

        # the depth the store gives the deepest place they are written: a decision's inputs.arguments
        view = encode(arguments, max_depth=MAX_DEPTH - 4)
        if not known and redactor.surely_clean(view):
            return arguments
        own, scrubbed, changed = redactor.scrub_echoes("arguments", view, known)
        self._remember_secrets(own)
        return pre_encoded(scrubbed) if changed else arguments

    def _without_echoed_secrets(self, value: Any) -> Any:
        """``value`` (a model call's request or response, a saved state, a note's ``about``) with every
        string redaction took out of this run so far (:meth:`_run_secrets`) replaced by its in-string
        marker, as in a result that echoes it: a tool's output repeating a password goes back to the
        model in the next request, and into a saved conversation. ``value`` itself (no cost) while
        nothing of the run was redacted, or outside ``redacted`` mode."""
        secrets = self._run_secrets()
        if not secrets:
            return value
        from sealbox.canonical import MAX_DEPTH, encode, pre_encoded

        scrubbed, changed = self.store.redactor.scrub_values_in(encode(value, max_depth=MAX_DEPTH - 3), secrets)
        return pre_encoded(scrubbed) if changed else value

    def _error_dict(self, error: BaseException, secrets: list[str], traceback: bool = False) -> dict[str, str]:
        """``{"type", "message"[, "traceback"]}`` of an exception, as valid Unicode (a lone surrogate
        becomes the text ``\\udcff``) with ``secrets`` replaced by in-string markers (docs/content-modes.md).
        The store's redaction (patterns; hashes-only) applies on top when it is written."""
        redactor = getattr(self.store, "redactor", None)
        scrub = (lambda text: redactor.scrub_values(text, secrets)) if secrets else (lambda text: text)
        out = {"type": _valid_text(type(error).__qualname__), "message": scrub(exception_message(error))}
        if isinstance(error, SystemExit) and isinstance(error.code, int) and not isinstance(error.code, bool) \
                and abs(error.code) <= MAX_COUNT:
            out["exit_code"] = error.code
        if traceback and error.__traceback__ is not None:  # one never raised (a refusal) has none worth keeping
            out["traceback"] = _short_traceback(error, redactor, scrub=scrub)
        return out

    # ----------------------------------------------------------------- model calls and state

    def model_call(self, request: Any, response: Any, usage: dict[str, Any] | None = None,
                   latency: float | int | None = None, *, provider: str | None = None,
                   model: str | None = None, step: str | None = None) -> "ModelCallRecord":
        """Record one model call; tool calls it requests become sibling steps.

        Args:
            request, response: plain dicts or SDK objects in the OpenAI
                chat-completions, OpenAI Responses or Anthropic Messages format
                (detected), or any other value (recorded as given).
            usage: ``{"input_tokens", "output_tokens"}`` (either may be left out; other keys are
                ignored; a non-empty dict with neither is a ConfigError); default: read from the response.
            latency: seconds (float) or microseconds (int) the call took; None (default): not
                known, recorded as ``latency_us: null`` (never as 0, which would read as instant).
            provider, model: override what the adapter detects.
            step: a step taken with :meth:`reserve_step` when the call started (default: a new one).

        Returns:
            A record with the step and the requested tool calls (in order, ``tool_calls`` of
            :class:`~sealbox.adapters.ToolCallRequest`; the payload's ``tool_call_ids`` lists their ids);
            calls to :meth:`call_tool` with those ids get steps ``"<step>.1"``, ``"<step>.2"``… by
            position. A requested call the response gives no id (some OpenAI-compatible providers
            leave it out) is kept in its place with id None (``null`` in ``tool_call_ids``); with no
            id to link it by, it is not linked: to record it at its step, give its call a
            ``call_id`` of your own and :meth:`link_call` that id to ``"<step>.<i>"`` first.

        Raises:
            ConfigError: ``usage``, ``latency`` or ``provider`` is not of the form above (nothing was recorded).
            RecordingError: the call could not be recorded.
        """
        if self.suspended and not self.recorder._calls_while_suspended:
            self._refuse_suspended()
        from sealbox.adapters import normalize_model_call

        if self._open_streams:
            self._record_open_streams(ending=False)  # streams dropped unfinished: recorded before this call
        _check_provider(provider)
        given = _caller_usage(usage)
        latency_us = _latency_us(latency)
        info = normalize_model_call(request, response, provider=provider, model=model)
        use = {k: v for k, v in info.usage.items() if k in ("input_tokens", "output_tokens")}
        use.update(given)
        unread = [k for k in info.unreadable_usage if k in ("input_tokens", "output_tokens") and k not in given]
        use = {k: use.get(k, 0) for k in ("input_tokens", "output_tokens") if k not in unread}
        budgets = self.recorder._budgets
        if unread and budgets:
            self._cost_error = (f"a model call's usage ({', '.join(unread)}) could not be read from the response, "
                                "so the token and cost budgets no longer know what was used")
        missing = budgets and info.usage_missing and not given
        if missing:  # counted as 0 tokens, the budgets would fail open: fail closed, as for unreadable usage
            self._cost_error = ("a model call's response carries no usage (a stream read without "
                                "stream_options.include_usage?), so the token and cost budgets no longer know what "
                                "was used; pass usage= to model_call")
        try:
            cost = cost_of(self.policy, f"{info.provider}/{info.model}", use.get("input_tokens", 0),
                           use.get("output_tokens", 0))
        except PolicyError as exc:  # a cost budget exists but this model has no price: fail closed from now on
            cost, self._cost_error = 0.0, str(exc)
        if cost:
            use["cost"] = cost
        step = self._take_step() if step is None else step
        ids = [tc.id for tc in info.tool_calls]  # None: a call the response gives no id (kept in its place)
        repeated = sorted({tc_id for tc_id in ids if tc_id is not None and ids.count(tc_id) > 1})
        with self._lock:
            used = sorted({tc_id for tc_id in ids if tc_id is not None and tc_id in self._call_ids})
            for i, tc_id in reversed(list(enumerate(ids, start=1))):  # a repeated id links its first position
                if tc_id is not None and tc_id not in self._call_ids:
                    self._links[tc_id] = f"{step}.{i}"
        payload = {"provider": info.provider, "model": info.model, "format": info.format,
                   "request": self._without_echoed_secrets(info.request),
                   "response": self._without_echoed_secrets(info.response), "usage": use, "latency_us": latency_us,
                   "tool_call_ids": ids}
        if info.stream_chunks:
            payload["stream"] = {"chunks": info.stream_chunks}
        drafts = [self._draft("model.call", payload, step)]
        if unread:
            drafts.append(self._draft("anomaly", {"what": "model.call usage unreadable", "detail": {
                "fields": unread, "values": {k: info.unreadable_usage[k] for k in unread},
                "why": f"not a whole number of tokens from 0 to {MAX_COUNT}; left out of the usage"}}, step))
        if missing:
            drafts.append(self._draft("anomaly", {"what": "model.call usage missing", "detail": {
                "format": info.format,
                "why": "the response carries no usage and none was given: the policy's token and cost budgets "
                       "cannot count this call, so later tool calls are denied (fail closed)"}}, step))
        if repeated or used:
            drafts.append(self._draft("anomaly", {"what": "model.call tool call ids not unique", "detail": {
                "repeated": repeated, "already_used": used,
                "why": "a repeated id is linked to its first position only; an id a tool.call of this run used "
                       "already is not linked (call_tool refuses it)"}}, step))
        # a replay's model call (and the served calls written with it) is not fsync'd on its own: nothing
        # outside depends on it; it is durable with the replay's next fsync'd commit (a live tool's gate,
        # run.ended, a checkpoint), and a power cut before that leaves a shorter replay run, never a false one
        step = self._append_fresh(drafts, step, sync=self.replay is None)
        with self._lock:
            self.usage["input_tokens"] += use.get("input_tokens", 0)
            self.usage["output_tokens"] += use.get("output_tokens", 0)
            self.usage["cost"] += use.get("cost", 0.0)
        return ModelCallRecord(step=step, tool_calls=tuple(info.tool_calls))

    def complete(self, request: Any, call: Callable[[Any], Any], *, provider: str | None = None,
                 model: str | None = None) -> Any:
        """Call a model with ``call(request)`` and record the call (:meth:`model_call`).

        In a replay (docs/replay.md) the recorded response is returned instead, as
        plain data (a dict), and ``call`` is not called.

        Returns:
            What ``call`` returned (in a replay: the recorded response). A stream (an iterator of
            chunks, e.g. the ``Stream`` of ``create(..., stream=True)``) is returned wrapped in a
            :class:`RecordedStream`: its chunks pass through as they come, and the call is recorded
            when the stream ends (assembled from its chunks; see :mod:`sealbox.adapters`), is closed,
            is dropped, or the run ends while it is open; an async stream (``__anext__``: an async
            generator) in an :class:`AsyncRecordedStream`.

        Raises:
            ConfigError: ``call`` returned an awaitable (an ``async def`` call, ``AsyncOpenAI``): it is
                closed unawaited, so the model was not called, and nothing is recorded; use
                :meth:`acomplete`. ``call`` returned an asyncio Task or Future (or a
                ``concurrent.futures`` Future): already under way, it is left running, its answer
                unrecorded, and nothing is recorded. ``call`` is not a function (a Task or Future, a
                coroutine, which is closed unrun): refused before anything is called or recorded.
            BaseException: whatever ``call`` raised, after it is recorded with ``response = {"error": …}``
                (a KeyboardInterrupt or a task's cancellation too: the call was made). When that record
                cannot be written, an Exception is replaced by the RecordingError; a KeyboardInterrupt
                or CancelledError goes on, the failure attached as a note (``exc.__notes__``).
        """
        _check_provider(provider)  # before the model is called: its call could not be recorded
        _check_model_call("complete", call)
        if self.replay is not None and self.replay.serves_models:
            return self.replay.answer_model(self, request, provider=provider, model=model)
        started = time.perf_counter()
        try:
            response = call(request)
        except BaseException as exc:
            self.model_error(request, exc, latency=time.perf_counter() - started, provider=provider, model=model)
            raise
        kind = _future_kind(response)
        if kind is not None:  # already under way: it calls the model whatever is done here
            raise ConfigError(f"complete(): call returned {kind}, already scheduled: it calls the model whether or "
                              "not it is awaited, and complete() cannot wait for it, so its answer would not be "
                              "recorded; it was left running (not cancelled): use await run.acomplete(request, "
                              "call) for an async call; nothing was recorded")
        _refuse_stream_manager("complete", response)
        if inspect.isawaitable(response):  # an async call, not yet run: nothing was asked of the model
            if inspect.iscoroutine(response):
                response.close()
            raise ConfigError(f"complete(): call returned an awaitable ({type(response).__qualname__}), which was "
                              "not awaited, so the model was not called: use await run.acomplete(request, call) "
                              "for an async call; nothing was recorded")
        return self._record_returned(request, response, started, provider, model)

    async def acomplete(self, request: Any, call: Callable[[Any], Any], *, provider: str | None = None,
                        model: str | None = None) -> Any:
        """Async form of :meth:`complete`: ``call(request)`` may return an awaitable (``async def``,
        ``AsyncOpenAI().chat.completions.create``, an asyncio Task) or a ``concurrent.futures`` Future
        (``executor.submit(...)``), which is awaited.

        Returns:
            What ``call`` returned, awaited (in a replay: the recorded response; one recorded from
            stream chunks as an async iterator of chunks). An async stream (an object with
            ``__anext__``: the ``AsyncStream`` of ``await create(..., stream=True)``, an async
            generator) is returned wrapped in an :class:`AsyncRecordedStream` (``async for``), a
            sync one in a :class:`RecordedStream`: recorded when it ends, as for :meth:`complete`.

        Raises:
            ConfigError: ``call`` is not a function (an asyncio Task or Future, a coroutine), as for
                :meth:`complete`; nothing is recorded.
            BaseException: whatever ``call`` or its awaitable raised, after it is recorded with
                ``response = {"error": …}``, as :meth:`complete` does.
        """
        _check_provider(provider)
        _check_model_call("acomplete", call)
        if self.replay is not None and self.replay.serves_models:
            return self.replay.answer_model(self, request, provider=provider, model=model, asynchronous=True)
        started = time.perf_counter()
        work = None
        try:
            response = call(request)
            if isinstance(response, concurrent.futures.Future):  # a thread's call (executor.submit): awaited too
                work, response = response, asyncio.wrap_future(response)
            if inspect.isawaitable(response):
                response = await response
        except BaseException as exc:
            recorded = exc
            if work is not None and isinstance(exc, asyncio.CancelledError) and not work.cancel() and not work.done():
                # the call runs on (a running Future cannot be cancelled), as in _arun_tool
                recorded = asyncio.CancelledError(_WORK_WENT_ON.replace("the tool's", "the model call's"))
            self.model_error(request, recorded, latency=time.perf_counter() - started, provider=provider, model=model)
            raise
        _refuse_stream_manager("acomplete", response)
        return self._record_returned(request, response, started, provider, model)

    def _record_returned(self, request: Any, response: Any, started: float, provider: str | None,
                         model: str | None) -> Any:
        """What :meth:`complete` and :meth:`acomplete` do with what the call returned: a stream is
        wrapped, to be recorded when it ends; anything else is recorded now."""
        if _is_async_stream(response):
            return AsyncRecordedStream(self, request, response, started, provider=provider, model=model)
        if _is_stream(response):  # read by the agent after this returns: recorded when it ends
            return RecordedStream(self, request, response, started, provider=provider, model=model)
        self.model_call(request, response, latency=time.perf_counter() - started, provider=provider, model=model)
        return response

    def model_error(self, request: Any, error: BaseException, *, latency: float | int | None = None,
                    provider: str | None = None, model: str | None = None, step: str | None = None) -> None:
        """Record a model call that raised ``error`` (:meth:`complete`, the integrations): a
        ``model.call`` with ``response = {"error": {"type", "message"}}``.

        Raises:
            RecordingError: it could not be recorded, when ``error`` is an Exception. A
                KeyboardInterrupt, CancelledError or other BaseException being handled by the caller
                gets the failure attached as a note instead, so that it is what goes on.
        """
        try:
            self.model_call(request, {"error": {"type": _valid_text(type(error).__qualname__),
                                                "message": exception_message(error)}},
                            latency=latency, provider=provider, model=model, step=step)
        except Exception as failed:
            if isinstance(error, Exception):
                raise
            _attach_note(error, f"sealbox: the model.call of run {self.run_id} could not be recorded: "
                                f"{type(failed).__name__}: {exception_message(failed)}")

    def save_state(self, state: Any, label: str | None = None) -> None:
        """Record the agent's state (any value; encoded, large parts stored once as blobs).

        ``label`` is kept readable, but holds no secret: unless the store's content mode is ``full``,
        a pattern's match, a value the state holds under a sensitive key name or a configured path
        (``{"password": "hunter2"}`` labelled ``"login hunter2"``) and a value redacted earlier in
        the run (in ``redacted`` and ``hashes-only`` mode) are replaced by in-string markers.

        Raises:
            ConfigError: ``label`` is neither None nor a string, or holds a lone surrogate
                (a name in the record cannot); nothing was recorded.
            RecordingError: the event could not be recorded.
        """
        if self.suspended and not self.recorder._calls_while_suspended:
            self._refuse_suspended()
        if label is not None:
            if not isinstance(label, str):
                raise ConfigError(f"a state label must be a string or None, got {type(label).__name__}; "
                                  "nothing was recorded")
            if label and _lone_surrogate(label):
                _check_name("state label", label)
        payload: dict[str, Any] = {"state": self._without_echoed_secrets(state)}
        if label:
            secrets = self._label_secrets()  # values redacted earlier in the run (redacted, hashes-only)
            payload["label"] = self.store.redactor.scrub_values(label, secrets) if secrets else label
        step = self._take_step()
        self._append_fresh([self._draft("state.saved", payload, step)], step)

    @property
    def next_step(self) -> int:
        """The next top-level step the run will take (an int: ``7`` for step ``"7"``)."""
        return self._steps[0]

    def reserve_step(self) -> str:
        """A new top-level step (``"7"``) for an event written later, with ``step=`` (:meth:`note`,
        :meth:`model_call`): work that runs concurrently with other steps (a framework's guardrail
        running beside a model call) takes its step when it *starts*, so its step does not depend on
        which of them finishes first (a replay finishes them in another order)."""
        return self._take_step()

    def note(self, text: str, about: Any = None, *, step: str | None = None,
             tripped: dict[str, Any] | None = None) -> str:
        """Record an annotation in the run; ``about`` is optional structured detail.

        ``text`` is handled like an exception's message (docs/content-modes.md): a lone surrogate
        in it is recorded as the visible text ``\\udcff``. ``about`` is encoded and redacted as
        content (docs/content-modes.md); a replay compares notes like other steps.

        Args:
            step: a step taken with :meth:`reserve_step` (default: a new one). The note then also
                records ``next_step``: the run's next top-level step when it was written (not compared by
                replay), so that a replay serving it can wait until the run has got as far.
            tripped: the payload of a ``guardrail.tripped`` written in the same step and
                transaction (``{limit, current, bound}`` and optional fields, docs/event-format.md).

        Returns:
            The step the note was written at.

        Raises:
            ConfigError: ``text`` is not a string, or ``step`` is not a top-level step (nothing was recorded).
            InvalidEventError: ``tripped`` does not match the ``guardrail.tripped`` schema (nothing was recorded).
        """
        if not isinstance(text, str):
            raise ConfigError(f"a note's text must be a string, got {type(text).__name__}; nothing was recorded")
        if step is not None and not (isinstance(step, str) and step.isascii() and step.isdigit()):
            raise ConfigError(f"a note's step must be a top-level step from reserve_step(), not {step!r}; "
                              "nothing was recorded")
        text = _valid_text(text)
        secrets = self._run_secrets()  # values redacted earlier in the run: scrubbed, as from content
        if secrets:
            text = self.store.redactor.scrub_values(text, secrets)
        payload: dict[str, Any] = {"text": text}
        if about is not None:
            payload["about"] = self._without_echoed_secrets(about)
        if step is None:
            step = self._take_step()
        else:  # written at a step reserved earlier: how far the run had got (a replay serves it from there)
            payload["next_step"] = self._next_step
        drafts = [self._draft("note", payload, step)]
        if tripped is not None:
            drafts.append(self._draft("guardrail.tripped", dict(tripped), step))
        return self._append_fresh(drafts, step)


def _is_stream(value: Any) -> bool:
    """Whether a model call's return value is a stream still to be read: an iterator (it has
    ``__next__``) that is no plain data, nor a mock (:func:`_is_mock`)."""
    return hasattr(type(value), "__next__") and not isinstance(value, (dict, list, tuple, str, bytes, bytearray)) \
        and not _is_mock(value)


def _is_async_stream(value: Any) -> bool:
    """Whether a model call's return value is an async stream still to be read (it has ``__anext__``),
    not a mock (:func:`_is_mock`)."""
    return hasattr(type(value), "__anext__") and not _is_mock(value)


def _is_mock(value: Any) -> bool:
    """Whether ``value`` is a :mod:`unittest.mock` object (``Mock``, ``MagicMock``, ``AsyncMock``...):
    a ``MagicMock``'s class has every magic method (``__next__``, ``__anext__``, ``__iter__``), so it
    would pass for an iterator, a stream or a file it is not. It is recorded as a value (its ``repr``
    in a ``$lossy`` placeholder, as any object the encoder does not know), and given back as it is."""
    mock = sys.modules.get("unittest.mock")  # never imported here: a mock exists only once it is
    return mock is not None and isinstance(value, mock.NonCallableMock)


class StreamClosedEarly(Exception):
    """What a :class:`RecordedStream` or :class:`AsyncRecordedStream` records when it is closed
    before its last chunk."""


class _StreamRecord:
    """The record of one streamed model call, shared by the stream wrappers: the chunks that
    came, and the ``model.call`` written once, when the stream ends. Until then the run holds it
    (``RunContext._open_streams``), not the wrapper, so that a wrapper the agent drops is
    garbage-collected: :meth:`dropped_by` marks it, and the run records it at its next model
    call or when it ends."""

    def __init__(self, run: "RunContext", request: Any, stream: Any, started: float, provider: str | None,
                 model: str | None, *, is_async: bool) -> None:
        self.run, self.request, self.stream, self.started = run, request, stream, started
        self.provider, self.model, self.is_async = provider, model, is_async
        self.chunks: list[Any] = []
        self.done = False
        self.dropped = False  # the wrapper was garbage-collected before the stream ended
        self.ended_by_run: str | None = None  # why, when the run ended while the stream was open
        run._open_streams.add(self)

    def watch(self, wrapper: Any) -> None:
        """Mark this record dropped when ``wrapper`` is garbage-collected unfinished (only a flag
        is set then: a finalizer may run in the middle of another write to the store)."""
        weakref.finalize(wrapper, _StreamRecord._mark_dropped, self).atexit = False

    @staticmethod
    def _mark_dropped(record: "_StreamRecord") -> None:
        record.dropped = not record.done

    def close_sync_stream(self) -> None:
        close = None if self.is_async else getattr(self.stream, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - best effort: the run is ending, the stream is recorded anyway
                pass

    async def close_async_stream(self) -> None:
        close = getattr(self.stream, "aclose", None)
        if not callable(close):
            close = getattr(self.stream, "close", None)
        if callable(close):
            try:
                closing = close()
                if inspect.isawaitable(closing):
                    await closing
            except Exception:  # noqa: BLE001 - best effort, as close_sync_stream
                pass

    def read_after_end(self) -> None:
        """Raise for a read of a stream whose run ended while it was open (it was closed then)."""
        if self.ended_by_run is not None:
            raise StreamClosedEarly(f"{self.ended_by_run}; it was recorded so and closed, and cannot be read further")

    def finish_early(self) -> None:
        if not self.done:
            self.finish(StreamClosedEarly(f"the stream was closed after {len(self.chunks)} chunk(s), "
                                          "before it completed"))

    def finish(self, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        self.run._open_streams.discard(self)
        latency = time.perf_counter() - self.started
        if error is None:
            self.run.model_call(self.request, self.chunks, latency=latency, provider=self.provider, model=self.model)
        else:
            self.run.model_error(self.request, error, latency=latency, provider=self.provider, model=self.model)


class RecordedStream:
    """A model's stream returned by :meth:`RunContext.complete`: each chunk is handed to the agent
    as it comes, and the call is recorded once, when the stream ends.

    * read to its end: a ``model.call`` of the chunks (assembled by :mod:`sealbox.adapters` for
      OpenAI chat, Anthropic Messages and OpenAI Responses streams: usage, tool calls, links);
    * raising while read: a ``model.call`` with ``response.error`` (that exception);
    * closed (``close()``, or leaving ``with``) before its end: ``response.error``
      :class:`StreamClosedEarly`, naming how many chunks came.

    A stream neither read to its end nor closed is recorded as closed early too (``response.error``
    :class:`StreamClosedEarly`): when the agent drops it (once it is garbage-collected, at the run's
    next model call), or else when the run ends (it is closed then, and reading it further raises
    :class:`StreamClosedEarly`). Every other attribute is the wrapped stream's (``response``,
    ``_iterator``…), and ``with`` enters and leaves it too.
    """

    def __init__(self, run: "RunContext", request: Any, stream: Any, started: float, *,
                 provider: str | None = None, model: str | None = None) -> None:
        self._stream = stream
        self._record = _StreamRecord(run, request, stream, started, provider, model, is_async=False)
        self._record.watch(self)

    def __iter__(self) -> "RecordedStream":
        return self

    def __next__(self) -> Any:
        record = self._record
        if record.done:
            record.read_after_end()
            raise StopIteration
        try:
            chunk = next(self._stream)
        except StopIteration:
            record.finish(None)
            raise
        except BaseException as exc:
            record.finish(exc)
            raise
        record.chunks.append(chunk)
        return chunk

    def close(self) -> None:
        """Close the wrapped stream; recorded as closed early unless it had ended."""
        try:
            close = getattr(self._stream, "close", None)
            if callable(close):
                close()
        finally:
            self._record.finish_early()

    def __enter__(self) -> "RecordedStream":
        enter = getattr(self._stream, "__enter__", None)
        if callable(enter):
            enter()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            leave = getattr(self._stream, "__exit__", None)
            return leave(*exc_info) if callable(leave) else None
        finally:
            if exc_info[1] is not None:
                self._record.finish(exc_info[1])
            self._record.finish_early()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_stream"], name)


class AsyncRecordedStream:
    """An async model stream returned by :meth:`RunContext.acomplete` (or :meth:`RunContext.complete`
    when ``call`` returns one): ``async for`` hands each chunk to the agent as it comes, and the call
    is recorded once, when the stream ends, as :class:`RecordedStream` records it:

    * read to its end: a ``model.call`` of the chunks, assembled;
    * raising while read (a task's cancellation too): ``response.error``, that exception;
    * closed (``await close()`` / ``await aclose()``, or leaving ``async with``) before its end:
      ``response.error`` :class:`StreamClosedEarly`, naming how many chunks came;
    * neither: recorded as closed early when the agent drops it, or when the run ends (leaving
      ``async with`` closes it first; a run left with a sync ``with`` records it without closing it).

    Every other attribute is the wrapped stream's (``response``…), and ``async with`` enters and
    leaves it too.
    """

    def __init__(self, run: "RunContext", request: Any, stream: Any, started: float, *,
                 provider: str | None = None, model: str | None = None) -> None:
        self._stream = stream
        self._record = _StreamRecord(run, request, stream, started, provider, model, is_async=True)
        self._record.watch(self)

    def __aiter__(self) -> "AsyncRecordedStream":
        return self

    async def __anext__(self) -> Any:
        record = self._record
        if record.done:
            record.read_after_end()
            raise StopAsyncIteration
        try:
            chunk = await self._stream.__anext__()
        except StopAsyncIteration:
            record.finish(None)
            raise
        except BaseException as exc:
            record.finish(exc)
            raise
        record.chunks.append(chunk)
        return chunk

    async def aclose(self) -> None:
        """Close the wrapped stream (its ``aclose()`` or ``close()``, awaited when it returns an
        awaitable); recorded as closed early unless it had ended."""
        try:
            await self._close_wrapped()
        finally:
            self._record.finish_early()

    async def _close_wrapped(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if not callable(close):
            close = getattr(self._stream, "close", None)
        if callable(close):
            closing = close()
            if inspect.isawaitable(closing):
                await closing

    async def close(self) -> None:
        """The same as :meth:`aclose` (the OpenAI SDK's ``AsyncStream`` is closed with ``await close()``)."""
        await self.aclose()

    async def __aenter__(self) -> "AsyncRecordedStream":
        enter = getattr(self._stream, "__aenter__", None)
        if callable(enter):
            await enter()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            leave = getattr(self._stream, "__aexit__", None)
            if callable(leave):
                return await leave(*exc_info)
            await self._close_wrapped()
            return None
        finally:
            if exc_info[1] is not None:
                self._record.finish(exc_info[1])
            self._record.finish_early()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_stream"], name)


@dataclass(frozen=True)
class ModelCallRecord:
    """What :meth:`RunContext.model_call` recorded: its step and the tool calls it requested."""

    step: str
    tool_calls: tuple


#: The largest token count recorded (2**53 - 1: exact in every JSON reader).
MAX_COUNT = 2**53 - 1


def _count_or_none(value: Any) -> int | None:
    """A token count: an ``int`` (not a bool) or a float with an integral value, from 0 to
    :data:`MAX_COUNT`; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_COUNT:
        return int(value)
    return None


def _caller_usage(usage: Any) -> dict[str, int]:
    """A caller's ``usage``: its ``input_tokens`` / ``output_tokens`` checked (None: not given;
    other keys ignored)."""
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise ConfigError(f"usage must be a dict of token counts, got {type(usage).__name__}")
    if usage and "input_tokens" not in usage and "output_tokens" not in usage:
        # e.g. OpenAI chat's own names: ignored, the call counted 0 tokens and a budget failed open
        keys = ", ".join(sorted(repr(k) for k in usage)[:5])
        raise ConfigError(f"usage names no token count this recorder reads (it has {keys}): give input_tokens "
                          "and output_tokens (OpenAI chat's prompt_tokens / completion_tokens are input_tokens / "
                          "output_tokens); nothing was recorded")
    out: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens"):
        value = usage.get(key)
        if value is None:
            continue
        n = _count_or_none(value)
        if n is None:
            raise ConfigError(f"usage[{key!r}] must be a whole number of tokens from 0 to {MAX_COUNT} "
                              f"(an int, or a float with an integral value), got {value!r}; nothing was recorded")
        out[key] = n
    return out


_MODEL_CALL_HINT = "lambda r: client.chat.completions.create(**r)"


def _future_kind(value: Any) -> str | None:
    """What a value already under way is called in messages: an asyncio Task or Future, a
    ``concurrent.futures`` Future; None for anything else."""
    if isinstance(value, asyncio.Task):
        return "an asyncio Task"
    if asyncio.isfuture(value):
        return "an asyncio Future"
    if isinstance(value, concurrent.futures.Future):
        return "a concurrent.futures Future"
    return None


def _refuse_stream_manager(method: str, response: Any) -> None:
    """ConfigError when ``call`` of :meth:`RunContext.complete` / :meth:`RunContext.acomplete` returned one of
    the SDKs' lazy streaming helpers (``client.messages.stream(...)``, ``client.chat.completions.stream(...)``,
    ``client.responses.stream(...)``: a ``...StreamManager``; a ``with_streaming_response``
    ``ResponseContextManager``), which calls the model only when it is entered, after this method returned:
    that call could not be recorded. Refused unentered, so the model was not called; an async manager's
    pending request (a coroutine it holds) is closed unrun."""
    cls = type(response)
    name = cls.__name__
    if not (name.endswith("StreamManager") or name.endswith("ResponseContextManager")):
        return
    if not ((hasattr(cls, "__enter__") and hasattr(cls, "__exit__"))
            or (hasattr(cls, "__aenter__") and hasattr(cls, "__aexit__"))):
        return
    if hasattr(cls, "__next__") or hasattr(cls, "__anext__") or hasattr(cls, "__iter__") or hasattr(cls, "__aiter__"):
        return  # a stream itself: recorded as it is read
    for held in list(getattr(response, "__dict__", {}).values()):
        if inspect.iscoroutine(held):
            held.close()
    article = "an" if name[:1].lower() in "aeiou" else "a"
    raise ConfigError(f"{method}(): call returned {article} {name}, which calls the model only when it is entered "
                      f"(with ...), after {method}() returned: that call would not be recorded; pass a call that "
                      "returns the stream itself, e.g. lambda r: client.messages.create(**r, stream=True) (or "
                      "chat.completions.create / responses.create with stream=True); the model was not called "
                      "and nothing was recorded")


def _check_model_call(method: str, call: Any) -> None:
    """ConfigError, before anything is called or recorded, when ``call`` of :meth:`RunContext.complete` /
    :meth:`RunContext.acomplete` is not a function: a Task or Future (the call already under way: it
    goes on, not cancelled, its answer unrecorded), a coroutine (closed unrun), anything else."""
    if callable(call):
        return
    hint = f"{'await run.acomplete' if method == 'acomplete' else 'run.complete'}(request, {_MODEL_CALL_HINT})"
    kind = _future_kind(call)
    if kind is not None:
        raise ConfigError(f"{method}(): call is {kind}, already scheduled, not a function: it calls the model "
                          "whether or not it is recorded, and its answer cannot be recorded from here; it was left "
                          f"running (not cancelled); pass the function that makes the call, e.g. {hint}, not its "
                          f"{kind.rsplit(' ', 1)[-1].lower()}; nothing was recorded")
    if inspect.iscoroutine(call):
        name = getattr(call, "__name__", None) or "ask"
        call.close()
        raise ConfigError(f"{method}(): call is a coroutine (what calling an async function returns), not a "
                          "function: it was closed unrun, so the model was not called; pass the async function "
                          f"itself, e.g. await run.acomplete(request, {name}), not {name}(request); nothing was "
                          "recorded")
    raise ConfigError(f"{method}(): call must be a function called as call(request), got {type(call).__name__}; "
                      "nothing was recorded")


def _check_provider(provider: Any) -> None:
    if provider is not None and not isinstance(provider, str):
        raise ConfigError(f"provider must be a string or None, got {type(provider).__name__}; nothing was recorded")


def _latency_us(latency: Any) -> int | None:
    """Seconds (float) or microseconds (int) as microseconds, None (not known) as None; ConfigError for
    anything else."""
    if latency is None:
        return None
    if isinstance(latency, bool) or not isinstance(latency, (int, float)):
        raise ConfigError(f"latency must be seconds (float) or microseconds (int), got {latency!r}")
    us = latency * 1_000_000 if isinstance(latency, float) else latency
    if not (0 <= us <= MAX_COUNT):  # also NaN
        raise ConfigError(f"latency must be a non-negative duration of at most {MAX_COUNT} µs, got {latency!r}")
    return int(us)


def _check_agent(server: str, tool: str, agent: Any) -> None:
    """``agent=`` of a tool call: None (the run's agent) or an agent's name."""
    if agent is not None and not (isinstance(agent, str) and agent and not _lone_surrogate(agent)):
        raise ConfigError(f"{server}/{tool}: agent must be an agent's name (a non-empty string) or None, got "
                          f"{agent!r}; nothing was recorded")


def _check_call(server: Any, tool: Any, grant: Any, call_id: Any, exposed: Any, principal: str) -> None:
    """A tool call's names and ids, checked before anything is recorded."""
    for what, value in (("server", server), ("tool", tool)):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"the {what} name must be a non-empty string, got {value!r}; nothing was recorded")
        if not value.isascii() and _lone_surrogate(value):
            _check_name(what, value)
        if "\x00" in value:
            _check_no_nul(f"the {what} name", value)
    for what, value in (("grant", grant), ("call_id", call_id), ("exposed", exposed)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{server}/{tool}: {what} must be a non-empty string or None, got {value!r}; "
                              "nothing was recorded")
        if value is not None and not value.isascii() and _lone_surrogate(value):
            _check_name(what, value, f"{_valid_text(server)}/{_valid_text(tool)}: ")
        if what == "call_id" and value is not None and "\x00" in value:
            _check_no_nul(what, value, f"{_valid_text(server)}/{_valid_text(tool)}: ")
    _check_implicit_grant(f"{server}/{tool}", grant, principal)


def _check_control_flow(server: str, tool: str, control_flow: Any) -> None:
    if not isinstance(control_flow, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in control_flow):
        raise ConfigError(f"{server}/{tool}: control_flow must be a tuple of exception types, got "
                          f"{_short_repr(control_flow)}; nothing was recorded")


def _check_implicit_grant(where: str, grant: Any, principal: str) -> None:
    """``implicit:…`` is the grant a run's principal holds by itself, and it is not checked against
    sealbox.access: a caller may name only its own, ``implicit:<principal>``."""
    if isinstance(grant, str) and grant.startswith("implicit:") and grant != f"implicit:{principal}":
        raise ConfigError(f"{where}: grant {grant!r} is not this run's implicit grant: a run of principal "
                          f"{principal!r} may name only 'implicit:{principal}' (or leave grant out), or an "
                          "access grant id; nothing was recorded")


#: code flags of coroutine, generator and async generator functions (inspect.CO_*)
_ASYNC_OR_GEN_FLAGS = (inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
                       | inspect.CO_ITERABLE_COROUTINE)
#: result types that are never awaitables or generators (checked first, by exact type)
_PLAIN_RESULTS = frozenset({str, int, float, bool, type(None), dict, list, tuple, bytes})

_A = {"coroutine": "a coroutine", "async generator": "an async generator", "generator": "a generator"}


def _function_kind(fn: Any) -> str | None:
    """``"coroutine"``, ``"async generator"`` or ``"generator"`` when ``fn`` is such a function,
    also through :func:`functools.partial` and a callable object's ``__call__``; else None."""
    if type(fn) is types.FunctionType and not fn.__code__.co_flags & _ASYNC_OR_GEN_FLAGS \
            and "_is_coroutine_marker" not in fn.__dict__:  # the common case, without inspect's unwrapping
        return None
    target = fn
    for _ in range(64):
        if not isinstance(target, functools.partial):
            break
        target = target.func
    candidates = [target]
    if not inspect.isroutine(target) and not inspect.isclass(target):
        call = getattr(type(target), "__call__", None)
        if call is not None:
            candidates.append(call)
    for c in candidates:
        if inspect.iscoroutinefunction(c):
            return "coroutine"
        if inspect.isasyncgenfunction(c):
            return "async generator"
        if inspect.isgeneratorfunction(c):
            return "generator"
    return None


def _describe(fn: Any) -> str:
    return repr(getattr(fn, "__qualname__", None) or type(fn).__qualname__)


def _generator_refusal(server: str, tool: str, kind: str) -> str:
    return (f"{server}/{tool}: the tool is {_A[kind]} function; its body would run only after its result "
            f"was recorded, and its errors never would: return a list (or another value) instead, e.g. "
            f"list(...) of what it yields; nothing was recorded or run")


def _unrecordable(result: Any, server: str, tool: str, *, awaited: bool) -> ConfigError | None:
    """A ConfigError when a tool returned a coroutine (from the sync ``call_tool``), work under way (a
    ``concurrent.futures`` Future; an asyncio Task or Future, also from an ``async def`` tool: left
    running, its outcome would come after the record said ok), a generator or
    any other iterator (sync or async: ``map``, ``filter``, ``zip``, ``iter(list)``, a
    ``sqlite3.Cursor``, an object with ``__next__`` or ``__anext__``), whose work would run (or not)
    after the record says ok, and whose items the record could not hold; a file object (``open(...)``,
    ``io.StringIO``: an iterator of lines) is refused for the same reason, with its own message. A
    coroutine, generator or async generator is closed unrun (an async generator the tool had already
    started is left to its event loop); another iterator or a file is left unconsumed (not closed: it
    may not be the tool's own)."""
    if type(result) in _PLAIN_RESULTS:
        return None
    if inspect.iscoroutine(result) or inspect.isgenerator(result):
        result.close()
        what = "a coroutine" if inspect.iscoroutine(result) else "a generator"
        hint = "use acall_tool" if what == "a coroutine" and not awaited else "return a list or another value"
        return ConfigError(f"{server}/{tool}: the tool returned {what}, which was closed without running: "
                           f"{hint}; the call is recorded as this error")
    if inspect.isasyncgen(result):
        if _close_unstarted_async_generator(result):
            return ConfigError(f"{server}/{tool}: the tool returned an async generator, which was closed without "
                               "running: return a list or another value; the call is recorded as this error")
        return ConfigError(f"{server}/{tool}: the tool returned an async generator it had started, which was not "
                           "run further (its event loop closes it): return a list or another value; the call is "
                           "recorded as this error")
    if not awaited and inspect.isawaitable(result):
        return ConfigError(f"{server}/{tool}: the tool returned an awaitable ({type(result).__qualname__}) "
                           "that was not awaited, so what it does is not recorded: use acall_tool; "
                           "the call is recorded as this error")
    under_way = _future_kind(result)
    if under_way is not None:  # its outcome comes later: the record would say ok whatever it ends in
        hint = ("await it in the tool and return its result" if under_way.startswith("an asyncio")
                else "return its result instead (future.result())")
        return ConfigError(f"{server}/{tool}: the tool returned {under_way}, work under way whose outcome the "
                           f"record would not hold (it would say ok, whatever that work then did): {hint}; it was "
                           "left running, not cancelled; the call is recorded as this error")
    cls = type(result)
    if _is_mock(result):  # a MagicMock's class has __next__, __anext__, __iter__: no iterator, a value
        return None
    if isinstance(result, io.IOBase):  # iterates lines, but it is a handle: what it holds is the result
        read = "its getvalue()" if isinstance(result, (io.StringIO, io.BytesIO)) else "f.read()"
        return ConfigError(f"{server}/{tool}: the tool returned a file object ({cls.__qualname__}), not its "
                           "content: the record would hold a placeholder, and what is read from it after the "
                           f"record said ok would be lost to it; return its content instead, e.g. {read}; it was "
                           "left as it is (not read, not closed); the call is recorded as this error")
    if hasattr(cls, "__next__") or hasattr(cls, "__anext__"):  # looked up on the type, as iteration does
        what, collect = (("an iterator", "list(...)") if hasattr(cls, "__next__")
                         else ("an async iterator", "[x async for x in ...]"))
        return ConfigError(f"{server}/{tool}: the tool returned {what} ({cls.__qualname__}), which was not "
                           "consumed: its items would be produced only after the record said ok, and lost "
                           f"to it; return a list or another value instead, e.g. {collect} of it; the call "
                           "is recorded as this error")
    return None


def _close_unstarted_async_generator(agen: Any) -> bool:
    """Close an async generator that never ran (what an ``async def`` with ``yield`` returns), without an
    event loop: its ``aclose()`` then finishes at its first step, running nothing. True when it is closed
    (or already was); False for one that has started, left to its event loop, which closes it when it is
    collected (driving its ``finally`` here could stop at an ``await`` with no loop to finish it)."""
    if agen.ag_frame is None:
        return True
    state = getattr(inspect, "getasyncgenstate", None)  # Python 3.12+
    if state is not None:
        unstarted = state(agen) == inspect.AGEN_CREATED  # type: ignore[attr-defined]
    else:  # 3.11: a generator that never ran stands before its code's first RESUME (after RETURN_GENERATOR)
        import dis

        resume = next((i.offset for i in dis.get_instructions(agen.ag_code) if i.opname == "RESUME"), None)
        unstarted = not agen.ag_running and resume is not None and agen.ag_frame.f_lasti < resume
    if not unstarted:
        return False
    closing = agen.aclose()
    try:
        closing.send(None)
    except StopIteration:
        return True
    except BaseException:  # noqa: BLE001 - not expected of a generator that never ran; reported as not closed
        return False
    closing.close()  # pragma: no cover - an unstarted generator does not stop at an await
    return False


_CALL_STEP = re.compile(r"[1-9][0-9]{0,17}(\.[1-9][0-9]{0,17})+")


def _moved_step(step: str | None, old: str, new: str) -> str | None:
    """``step`` with its top-level part ``old`` replaced by ``new`` (``"4"`` -> ``"7"``, ``"4.2"`` -> ``"7.2"``)."""
    if step == old:
        return new
    if step is not None and step.startswith(old + "."):
        return new + step[len(old):]
    return step


def is_call_step(step: Any) -> bool:
    """True when ``step`` is a tool call's step as a model call assigns it: ``"<n>.<i>"`` (positive integers)."""
    return isinstance(step, str) and len(step) <= 64 and _CALL_STEP.fullmatch(step) is not None


def _failure_message(failure: Callable[[Any], str | None] | None, result: Any) -> str | None:
    """What ``failure(result)`` says of a returned result (:meth:`RunContext.call_tool`): its
    message when the tool reported a failure in it, else None. A ``failure`` that raises, or
    answers anything but a string or None, is itself a failure of the call, so the record
    never says ``ok`` for a result nobody could check."""
    if failure is None:
        return None
    try:
        message = failure(result)
    except Exception as exc:  # noqa: BLE001 - recorded, never raised past a tool that ran
        return f"the result could not be checked for a failure: {type(exc).__name__}: {exception_message(exc)}"
    if message is None or isinstance(message, str):
        return message
    return f"the result's failure check answered {type(message).__name__}, not a message"


def _invoke(fn: Callable[..., Any], arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return fn(**arguments)
    if arguments is None:
        return fn()
    return fn(arguments)


def _policy_view(arguments: Any) -> Any:
    """Arguments as a condition sees them: type-tag encoded strict JSON (never raises)."""
    return _canonical_encode(arguments)


def exception_message(error: BaseException) -> str:
    """``str(error)`` for the record, or a placeholder when the exception cannot be turned into
    text (its ``__str__`` raises): the record of a failure must not fail with it.

    Memory addresses of default reprs (an exception whose argument is a plain object:
    ``<object object at 0x7f…>``) are dropped (``<object object>``), and a cancellation whose
    message is not text (LangGraph cancels its tasks with a sentinel object) reads
    ``cancelled (its message was an object of type object, not text)``: the record stays the same
    from one run to the next (docs/recording.md, "Error messages")."""
    args = getattr(error, "args", None)
    if isinstance(error, (asyncio.CancelledError, concurrent.futures.CancelledError)) and type(args) is tuple \
            and len(args) == 1 and not isinstance(args[0], str):
        return f"cancelled (its message was an object of type {_valid_text(type(args[0]).__qualname__)}, not text)"
    try:
        text = str(error)
    except Exception as exc:  # noqa: BLE001 - a tool's or agent's exception whose __str__ fails
        text = f"<{type(error).__qualname__}.__str__ raised {type(exc).__name__}>"
    return _valid_text(_without_addresses(text))


#: the message recorded for an acall_tool cancelled while the concurrent.futures Future its tool returned still ran
_WORK_WENT_ON = ("cancelled while the work of the tool's concurrent.futures Future still ran: running work cannot "
                 "be cancelled, it went on, and its outcome is not recorded")

#: how sealbox.policy.engine's evaluate words a RecursionError or MemoryError it caught outside any rule
_ENGINE_OUT_OF_STACK = ("policy evaluation failed: RecursionError", "policy evaluation failed: MemoryError")


def _out_of_stack_message(exc: BaseException) -> str:
    """The RecordingError's message for Sealbox's own RecursionError or MemoryError while recording (the
    caller was near the recursion limit, or memory ran out): how deep the caller's stack was, never a
    guardrail's failure. Only on that failure path: the frames are counted here."""
    if isinstance(exc, MemoryError):
        return "could not record: Sealbox ran out of memory recording this (MemoryError)"
    try:
        depth, ours, frame = 0, 0, sys._getframe(1)
        while frame is not None:
            depth += 1
            if ours == depth - 1 and str(frame.f_globals.get("__name__")).startswith("sealbox."):
                ours = depth  # the innermost frames are Sealbox's: the caller's frame is the first that is not
            frame = frame.f_back
        where = f"it was called {depth - ours} frames deep, the recursion limit being {sys.getrecursionlimit()}"
    except RecursionError:
        where = "it was called too close to the recursion limit"
    return (f"could not record: Sealbox ran out of stack recording this (RecursionError): {where}; "
            "call it from a shallower stack (or raise sys.setrecursionlimit)")


def _attach_note(exc: BaseException, text: str) -> None:
    """``exc.add_note(text)``, never raising (an exception whose ``__notes__`` cannot be set is
    left as it is)."""
    try:
        exc.add_note(text)
    except Exception:  # noqa: BLE001 - the exception in flight matters more than the note
        pass


_object_new = object.__new__

#: sealbox.store.base's ``_REDACTED_INTO`` once :func:`_redacted_into_var` looked it up (that module is
#: not imported with this one: an SDK user's import stays light)
_REDACTED_INTO_VAR: list[contextvars.ContextVar] = []


def _redacted_into_var() -> contextvars.ContextVar:
    from sealbox.store.base import _REDACTED_INTO

    if not _REDACTED_INTO_VAR:
        _REDACTED_INTO_VAR.append(_REDACTED_INTO)
    return _REDACTED_INTO


def _provider_call_id(call_id: Any) -> Any:
    """A call id as the record holds it: one with a lone surrogate (a model provider's, passed on
    raw by an integration) as :func:`_valid_text` writes it, the same text the model call's
    ``tool_call_ids`` hold (sealbox.adapters.valid_text), so the call still links to it."""
    if isinstance(call_id, str) and not call_id.isascii():
        return _valid_text(call_id)
    return call_id


def _valid_text(text: str) -> str:
    """``text`` as valid Unicode, for the record's error strings: a lone surrogate (a path decoded
    with ``surrogateescape``, say) becomes the visible text ``\\udcff`` (``backslashreplace``);
    anything else is kept as it is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _short_traceback(exc: BaseException, redactor: Any = None, limit: int = 8,
                     scrub: Callable[[str], str] | None = None) -> str:
    """The last ``limit`` frames, at most about 4,000 characters (head and tail kept), as valid Unicode.

    The store's redaction (and ``scrub``) runs on the whole text first: a secret cut in two by the
    truncation (a PEM block, say) would no longer match its pattern afterwards."""
    try:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=limit)
    except Exception as failed:  # noqa: BLE001 - the record of a failure must not fail with it
        lines = [f"<the traceback could not be formatted: {type(failed).__name__}>"]
    text = _valid_text("".join(lines))
    text = _without_addresses(text)  # the exception's line, as in exception_message
    if scrub is not None:
        text = scrub(text)
    if redactor is not None and len(text) > 4000:
        scrubbed = redactor.apply_error({"traceback": text}).get("traceback")
        text = scrubbed if isinstance(scrubbed, str) else text
    return text if len(text) <= 4000 else text[:1000] + "\n…\n" + text[-2900:]
