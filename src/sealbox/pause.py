"""Durable pause: wait for an approval in-process, or suspend and resume the same run later.

The recorder calls :func:`await_approval` after it has committed ``tool.call``,
``policy.decision`` (``require_approval``), ``approval.requested`` and
``run.suspended`` in one transaction:

* ``approvals="block"``: poll the store until the request is decided; approve →
  ``run.resumed`` and the tool runs; deny or expiry → ``run.resumed`` and
  :class:`~sealbox.recorder.ToolDenied`; timeout → :class:`ApprovalPending`
  (the run stays suspended).
* ``approvals="suspend"``: raise :class:`ApprovalPending` at once; the process may exit.

:func:`resume_run` continues a suspended run in any process: it waits (optionally)
until every open request is decided, then writes ``run.resumed`` for each (with the
wait and the outcome) in one transaction that also checks that nobody resumed them
before — so a tool runs at most once — and that none is pending again (all or none:
no tool runs before every request is claimed), runs the approved tools and records
their results. A call allowed but without a result ("outcome unknown")
is re-run only with ``rerun_unknown=True``.

If the policy changed while the run was suspended, an approved call is
re-evaluated under the current policy and the new decision is recorded
(``policy.decision`` with ``reevaluated: true``). The stricter wins: a new deny
denies; a new allow does not undo a deny or an expiry (those are never
re-evaluated); a new ``require_approval`` is met only if the answers already
counted satisfy the new rule's ``ask`` and quorum, else the call is denied
(``approval_insufficient``).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from sealbox.approvals import (
    _RELATED,
    withdrawal_drafts,
    ApprovalError,
    ApprovalPending,
    ApprovalState,
    _expired_draft,
    _load,
    _store_now,
    _parse,
    binding_hash,
    evaluate,
    get_approval,
)
from sealbox.canonical import decode, encode
from sealbox.errors import BlobNotFoundError, ConfigError, RecordingError, StoreBusyError
from sealbox.identities import identity_book
from sealbox.policy.model import Decision

__all__ = ["LEASE_FILE", "ResumedCall", "RunLease", "await_approval", "claim", "resume_run", "take_lease"]

APPROVAL_MODES = ("block", "suspend")


@dataclass(frozen=True)
class ResumedCall:
    """What :func:`resume_run` did with one waiting (or outcome-unknown) call.

    Attributes:
        outcome: ``approved``, ``denied``, ``expired``, ``policy_denied``, ``grant_invalid``,
            ``approval_insufficient``, ``unknown`` (not re-run) or ``rerun`` (``grant_invalid``
            too for an outcome-unknown call whose grant is no longer valid: not re-run).
        ran: whether the tool function was called now.
        result: what it returned.
        error: what it raised, or the :class:`~sealbox.recorder.ToolDenied` for a call not run.
    """

    approval_id: str | None
    call_id: str
    server: str
    tool: str
    outcome: str
    ran: bool
    result: Any = None
    error: BaseException | None = None

    def value(self) -> Any:
        """The tool's result; raises its error, or ToolDenied when it did not run."""
        if self.error is not None:
            raise self.error
        return self.result


# ----------------------------------------------------------------------------- claiming


def claim(run: Any, approval_id: str, arguments: Any = None) -> tuple[ApprovalState, str, Decision | None] | None:
    """Write ``run.resumed`` for a decided request, once; None while it is still pending.

    In the same transaction: ``approval.expired`` if the expiry was only noticed,
    and (policy changed, approved) the re-evaluated ``policy.decision``.

    Returns:
        (state, outcome, re-evaluated decision or None), or None when still pending.

    Raises:
        ApprovalError: ``already_resumed`` (another process resumed it), ``run_ended``.
        RecordingError: the events could not be written.
    """
    box: list[tuple[ApprovalState, str, Decision | None]] = []

    def build(reader: Any) -> list:
        before, after, claimed = _claim_drafts(run, reader, approval_id, arguments)
        if claimed is None:
            return before
        box.append(claimed)
        return before + after

    try:
        run.store.append_with(build)
    except (ApprovalError, RecordingError, StoreBusyError):  # StoreBusyError: under store.no_wait(), nothing written
        raise
    except Exception as exc:  # a failure to record is never a silent gap
        raise RecordingError(f"could not record the resumption of {approval_id}: {exc}") from exc
    return box[0] if box else None


def _claim_drafts(run: Any, reader: Any, approval_id: str, arguments: Any
                  ) -> tuple[list, list, tuple[ApprovalState, str, Decision | None] | None]:
    """What :func:`claim` writes for one request, inside its transaction: (the drafts to write whether or
    not it is claimed: withdrawn approvals, a noticed expiry; the drafts that claim it: ``run.resumed``
    and a re-evaluated ``policy.decision``; (state, outcome, decision), or None while it is pending)."""
    now = _store_now(reader)  # the store's clock: the ts of this run.resumed (expiry, grant, waited_us)
    request, related, book = _load(reader, approval_id, run.run_id)
    state = evaluate(request, related, book, now)
    if state.resumed:
        raise ApprovalError("already_resumed", f"approval {approval_id} was already resumed (by another process?)")
    if state.run_ended:
        raise ApprovalError("run_ended", f"run {state.run_id} has ended")
    # an approval withdrawn (its identity disabled or re-keyed before the call ran) is said in the log, once
    drafts = withdrawal_drafts(reader, state) if not state.run_ended else []
    if state.status == "pending":
        return drafts, [], None
    if state.status == "expired" and not state.expiry_recorded:
        drafts.append(_expired_draft(state))
    outcome, decision, reeval = state.status, None, None
    if outcome == "approved" and state.request.get("policy_fingerprint") not in (None, run.policy.fingerprint):
        outcome, decision, reeval = _reevaluate(run, reader, state, book, arguments)
    if outcome == "approved":  # a grant revoked while the run waited denies the call, approved or not
        outcome, decision, reeval = _check_grant_on_resume(run, reader, state, now, (outcome, decision, reeval))
    waited = max(0, int((now - _parse(state.requested_at)).total_seconds() * 1_000_000))
    claiming = [run._draft("run.resumed", {"approval_ids": [approval_id], "waited_us": waited,
                                           "outcomes": {approval_id: outcome}}, state.step)]
    if reeval is not None:
        claiming.append(run._draft("policy.decision", reeval, state.step))
    return drafts, claiming, (state, outcome, decision)


def claim_all(run: Any, requests: list[tuple[str, Any]]) -> list[tuple[ApprovalState, str, Decision | None]] | list[str]:
    """:func:`claim` every ``(approval_id, arguments)`` in one transaction, all or none: when one of them
    is pending (an approver disabled or re-keyed since it was read), no ``run.resumed`` is written (only
    the withdrawn approvals and noticed expiries are recorded), so no tool runs before every request has
    been claimed (``resume`` never resumes part of a run).

    Returns:
        the claims in order, or the ids of the requests found pending (nothing claimed).

    Raises:
        ApprovalError: ``already_resumed``, ``run_ended`` (nothing written).
        RecordingError: the events could not be written.
    """
    box: list = []

    def build(reader: Any) -> list:
        box.clear()
        before, after, claimed, pending = [], [], [], []
        for aid, arguments in requests:
            b, a, c = _claim_drafts(run, reader, aid, arguments)
            before += b
            after += a
            claimed.append(c)
            if c is None:
                pending.append(aid)
        if pending:
            box.extend(pending)
            return before
        box.extend(claimed)
        return before + after

    try:
        run.store.append_with(build)
    except (ApprovalError, RecordingError, StoreBusyError):
        raise
    except Exception as exc:  # a failure to record is never a silent gap
        raise RecordingError(f"could not record the resumption of {', '.join(a for a, _ in requests)}: {exc}") from exc
    return box


def note_withdrawals(run: Any, approval_ids: list[str]) -> None:
    """Record, once each, the approvals of these requests that no longer count because their
    identity was disabled or re-keyed after answering (:func:`sealbox.approvals.withdrawal_drafts`), checked
    and written in one transaction."""
    def build(reader: Any) -> list:
        drafts = []
        for aid in approval_ids:
            state = evaluate(*_load(reader, aid, run.run_id), _store_now(reader))
            if not state.resumed and not state.run_ended:
                drafts += withdrawal_drafts(reader, state)
        return drafts

    try:
        run.store.append_with(build)
    except Exception as exc:  # a failure to record is never a silent gap
        raise RecordingError(f"could not record the withdrawn approvals of {', '.join(approval_ids)}: {exc}") from exc


def _reevaluate(run: Any, reader: Any, state: ApprovalState, book: Any, arguments: Any) -> tuple[str, Decision, dict]:
    """Decide an approved call again under the current policy (the stricter wins)."""
    req = state.request
    decision, inputs = run._evaluate(reader, req["server"], req["tool"], arguments, keep_approval=True,
                                     grant=_call_grant(reader, state) or None, agent=_call_agent(run, reader, state))
    if decision.effect == "deny":
        outcome = "policy_denied"
    elif decision.effect == "allow":
        outcome = "approved"
    else:
        spec = decision.approval
        ask_ids, ask_groups = set(spec.identities if spec else ()), set(spec.groups if spec else ())
        ok = set()
        for a in state.answers:
            who = book.get(a.identity, a.leaf_index)
            if a.problem is None and a.decision == "approve" and who is not None and (
                    who.name in ask_ids or set(who.groups) & ask_groups):
                ok.add(a.identity)
        outcome = "approved" if spec is not None and len(ok) >= spec.quorum else "approval_insufficient"
    payload = {"call_id": req["call_id"], "server": req["server"], "tool": req["tool"], **decision.to_payload(),
               "inputs": inputs, "reevaluated": True}
    return outcome, decision, payload


def _call_agent(run: Any, reader: Any, state: ApprovalState) -> str | None:
    """The agent the suspended call was decided for (``agent=`` of ``call_tool``: an agent handed off
    to, recorded in its first ``policy.decision`` inputs), or None (the run's agent) when it is not
    found (inputs erased)."""
    decisions = reader.events(["policy.decision"], run_id=state.run_id, field=("call_id", state.request["call_id"]),
                              limit=1)
    try:
        inputs = run.store.resolve(decisions[0].payload.get("inputs")) if decisions else None
    except BlobNotFoundError:
        inputs = None
    agent = inputs.get("agent") if isinstance(inputs, dict) else None
    name = agent.get("name") if isinstance(agent, dict) else None
    return name if isinstance(name, str) and name else None


def _call_grant(reader: Any, state: ApprovalState) -> str:
    """The grant the suspended call named (its ``tool.call``), or ``""`` when it is not found."""
    calls = reader.events(["tool.call"], run_id=state.run_id, field=("call_id", state.request["call_id"]), limit=1)
    grant = calls[0].payload.get("grant", "") if calls else ""
    return grant if isinstance(grant, str) else ""


def _check_grant_on_resume(run: Any, reader: Any, state: ApprovalState, now: Any,
                           current: tuple[str, Decision | None, dict | None]) -> tuple[str, Decision | None, dict | None]:
    """The call's explicit grant must still be valid when it resumes (sealbox.access)."""
    req = state.request
    grant = _call_grant(reader, state)
    if not grant or grant.startswith("implicit:"):
        return current
    from sealbox.access import grant_status

    ok, why = grant_status(reader, grant, run.principal.id, req["server"], req["tool"], now)
    if ok:
        return current
    decision = Decision("deny", "grant_invalid", None, why, run.policy.fingerprint)
    payload = {"call_id": req["call_id"], "server": req["server"], "tool": req["tool"], **decision.to_payload(),
               "reevaluated": True}
    return "grant_invalid", decision, payload


def _denial(run: Any, state: ApprovalState, outcome: str, decision: Decision | None) -> Exception:
    from sealbox.recorder import ToolDenied

    req = state.request
    if outcome in ("policy_denied", "grant_invalid") and decision is not None:
        return ToolDenied(decision, req["call_id"], req["server"], req["tool"])
    if outcome == "denied":
        deny = next((a for a in state.answers if a.problem is None and a.decision == "deny"), None)
        code, why = "approval_denied", f"approval {state.approval_id} denied by {', '.join(state.decided_by)}" + (
            f": {deny.reason}" if deny and deny.reason else "")
    elif outcome == "expired":
        code, why = "approval_expired", f"approval {state.approval_id} expired unanswered at {state.expired_at}"
    else:
        code, why = "approval_insufficient", (f"approval {state.approval_id} does not meet the current policy's "
                                              "approval rule (the policy changed while the run was suspended)")
    fp = req.get("policy_fingerprint") or run.policy.fingerprint
    return ToolDenied(Decision("deny", code, req.get("rule"), why, fp), req["call_id"], req["server"], req["tool"])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- blocking


def await_approval(run: Any, request: dict[str, Any]) -> None:
    """Called by the recorder right after recording a request: return when approved, else raise.

    Raises:
        ApprovalPending: suspend mode, or the blocking wait timed out (the run stays suspended).
        ToolDenied: denied, expired, or denied on re-evaluation.
    """
    rec, aid, call_id = run.recorder, request["approval_id"], request["call_id"]
    if rec.approvals == "suspend":
        _suspend(run, (aid,))
        raise ApprovalPending(aid, run.run_id, call_id)
    if getattr(run, "_lease", None) is None:
        # this process waits and will run the call itself: a resume elsewhere meanwhile would claim the
        # approval and run the tool while this run goes on here (and ends it under that tool)
        try:
            run._lease = take_lease(run.store, run.run_id)
        except ApprovalError:  # another live process holds the run (it attached to it too): wait as before
            pass
    deadline = None if rec.approval_timeout is None else time.monotonic() + rec.approval_timeout
    noted_withdrawal: set = set()
    while True:
        state = get_approval(run.store, aid, run_id=run.run_id)
        withdrawn = {(a.identity, a.leaf_index) for a in state.answers if a.withdrawn_by is not None}
        if state.status != "pending" or not withdrawn <= noted_withdrawal:
            claimed = claim(run, aid)
            noted_withdrawal |= withdrawn  # claim noted these withdrawn approvals in the log (once)
            if claimed is not None:
                state, outcome, decision = claimed
                if outcome == "approved":
                    return
                raise _denial(run, state, outcome, decision)
        if deadline is not None and time.monotonic() >= deadline:
            _suspend(run, (aid,))
            raise ApprovalPending(aid, run.run_id, call_id)
        time.sleep(rec.approval_poll)


def _suspend(run: Any, approval_ids: tuple[str, ...] = ()) -> None:
    """The run is suspended (``run.suspended`` is in the log): this process no longer runs it, so it lets
    go of its resume lease (taken for a blocking wait) and its liveness lease at once, not when a ``with``
    block is left: a run suspended outside a block (``RunContext.start()``) kept both while its process
    lived, so ``Recorder.resume`` in another process was refused (``already_resumed``), or recorded
    without a liveness lease of its own. A suspended run's status depends on no lease."""
    run.suspended = True
    run._suspended_for = approval_ids  # named by RunSuspendedError when the run is used on
    release = getattr(run, "_release_lease", None)
    if release is not None:
        release()
    release = getattr(run, "_release_live", None)
    if release is not None:
        release()


# ----------------------------------------------------------------------------- resume


#: The file in a store's folder whose byte ranges mark the runs a live process has resumed.
LEASE_FILE = "resume.lock"
_lease_fds: dict[str, int] = {}  # one descriptor per lock file and process: closing any would drop its locks
_lease_mutex = threading.Lock()


class RunLease:
    """A live process's claim on a run it resumed: an advisory lock on one byte of the store
    folder's ``resume.lock`` (POSIX ``lockf``), chosen by the run id. The OS drops it when the
    process exits, however it exits, so another process can tell "resumed and still running"
    from "resumed, then the process died". Held from :func:`resume_run` (or from the first blocking
    wait for an answer, :func:`await_approval`) until the run ends, is suspended or its ``with`` block is left;
    locks of one process do not exclude each other (threads share them)."""

    def __init__(self, fd: int, offset: int, db_key: Any = None) -> None:
        self.fd, self.offset, self.held, self.db_key = fd, offset, True, db_key

    def release(self) -> None:
        if self.held:
            self.held = False
            if self.db_key is not None:
                self.db_key.release()
            try:
                import fcntl

                fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self.offset)
            except OSError:  # pragma: no cover - the descriptor stays open for the process's life
                pass


def take_lease(store: Any, run_id: str) -> RunLease | None:
    """Lock ``run_id``'s byte of the store's ``resume.lock``; None where there is no such file
    (a store without a folder, a platform without ``fcntl``, a read-only folder).

    Raises:
        ApprovalError: ``already_resumed`` while another live process holds the run.
    """
    folder = getattr(store, "path", None)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    if folder is None:
        return None
    path = os.path.join(os.fspath(folder), LEASE_FILE)
    offset = int.from_bytes(hashlib.sha256(run_id.encode("utf-8")).digest()[:6], "big")
    with _lease_mutex:
        fd = _lease_fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                             0o600)
            except OSError:
                return None
            _lease_fds[path] = fd
    refused = ApprovalError("already_resumed", f"run {run_id} was resumed by another process that is still running "
                            "it: nothing was resumed or written here (resume it once that process has ended)")
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
    except OSError as exc:
        raise refused from exc
    db_key = None
    if getattr(store, "url", None) is not None and getattr(store, "schema", None) is not None:
        try:
            db_key = _take_db_lease(store, run_id)
        except BaseException:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
            raise
        if db_key is False:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
            raise refused
    return RunLease(fd, offset, db_key)


def _take_db_lease(store: Any, run_id: str) -> Any:
    """On a PostgreSQL store, a folder's ``resume.lock`` excludes only processes using that folder, and
    every machine that writes keeps its own (docs/storage.md): the lease is also a session advisory lock,
    which the server drops when the process (so the connection) goes away. Returns the lock's lease (its
    ``release``), or False while another process holds it; this process's leases do not exclude each
    other, as ``lockf`` locks do not.

    The lock is held on the process's watched lease connection (:func:`sealbox.liveness.take_pg_lock`,
    the one liveness leases use), not on a connection of its own: when the server ends that session
    (``pg_terminate_backend``, a restart) the watcher reconnects at once and takes the lock again, where
    a connection of the lease's own lost it silently and another process could resume the run while
    this one still ran it."""
    from sealbox import liveness
    from sealbox.errors import StoreError

    key = int.from_bytes(hashlib.sha256(f"sealbox-resume:{store.schema}:{run_id}".encode()).digest()[:8], "big",
                         signed=True)
    try:
        lease = liveness.take_pg_lock(store, key)
    except Exception as exc:
        raise StoreError(f"{store.path}: cannot take the run's lease in PostgreSQL ({exc})") from None
    return False if lease is None else lease


def resume_run(recorder: Any, run_id: str, tools: dict[tuple[str, str], Callable] | None = None, *,
               rerun_unknown: bool = False, wait: float = 0.0,
               arguments: dict[str, Any] | None = None) -> Any:
    """Continue a suspended run: see :meth:`sealbox.recorder.Recorder.resume`."""
    _check_resume_arguments(tools, rerun_unknown, wait, arguments)
    # continue_run takes the run's liveness lease: this process runs the run from here (its approved calls
    # are carried out before this returns), or the run would read 'interrupted' meanwhile
    run = recorder._continue(run_id, waiting_ok=True)
    try:
        lease = take_lease(run.store, run_id)
    except BaseException:
        run._release_live()
        raise
    try:
        return _resume(recorder, run, run_id, tools, rerun_unknown, wait, arguments, lease)
    except BaseException:
        run._release_live()
        if lease is not None:
            lease.release()
        raise


def _check_resume_arguments(tools: Any, rerun_unknown: Any, wait: Any, arguments: Any) -> None:
    """Refuse, before the run is attached or anything written, what :func:`resume_run` cannot use: a
    non-callable tool function would otherwise be found only when the approved call runs, after its
    ``run.resumed`` has spent the approval (recorded as a call that ran and failed).

    Raises:
        ConfigError: one line saying which argument and why.
    """
    if tools is not None:
        if not isinstance(tools, dict):
            raise ConfigError(f"tools must be a dict {{(server, tool): fn}}, not {tools!r}")
        for key, fn in tools.items():
            if not callable(fn):
                where = "/".join(map(str, key)) if isinstance(key, tuple) else repr(key)
                raise ConfigError(f"the function for tool {where} is not callable: {fn!r}")
    if not isinstance(rerun_unknown, bool):
        raise ConfigError(f"rerun_unknown must be True or False, not {rerun_unknown!r}")
    if not (isinstance(wait, (int, float)) and not isinstance(wait, bool) and math.isfinite(wait) and wait >= 0):
        raise ConfigError(f"wait must be a number of seconds, 0 or more, not {wait!r}")
    if arguments is not None and not isinstance(arguments, dict):
        raise ConfigError(f"arguments must be a dict {{call_id: arguments}}, not {arguments!r}")


def _resume(recorder: Any, run: Any, run_id: str, tools: dict[tuple[str, str], Callable] | None,
            rerun_unknown: bool, wait: float, arguments: dict[str, Any] | None, lease: RunLease | None) -> Any:
    run._lease = lease
    registry = {**recorder.tools, **(tools or {})}
    overrides = dict(arguments or {})
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        events = run.store.read_run(run_id)
        _refuse_suspended_outside_approvals(run_id, events)
        book = identity_book(run.store)
        related = [e for e in events if e.kind in _RELATED]
        states = [evaluate(e, related, book) for e in events if e.kind == "approval.requested"]
        open_ = [s for s in states if not s.resumed]
        waiting = [s for s in open_ if s.status == "pending"]
        if not waiting:
            break
        if time.monotonic() >= deadline:
            if any(a.withdrawn_by is not None for s in waiting for a in s.answers):
                note_withdrawals(run, [s.approval_id for s in waiting])
            raise ApprovalPending([s.approval_id for s in waiting], run_id, [s.call_id for s in waiting])
        time.sleep(recorder.approval_poll)
    bad = [s for s in open_ if s.status == "malformed"]
    if bad:  # only a change below Sealbox writes one: nothing is resumed past it (fail closed)
        raise ApprovalError("malformed_request", f"run {run_id} is held by approval request {bad[0].approval_id}, "
                            f"whose event is malformed ({bad[0].malformed}): it was changed below Sealbox; nothing "
                            "was resumed (run `sealbox verify`)")
    calls = {e.payload["call_id"]: e for e in events if e.kind == "tool.call"}
    plans = []
    for s in open_:  # everything is checked before anything is written
        fn = args = None
        if s.status == "approved":
            fn = _tool_fn(registry, s.request["server"], s.request["tool"])
            args = _approved_arguments(run.store, calls[s.call_id], s, overrides)
        plans.append((s, fn, args))
    unknown = _unknown_calls(events, states, {s.call_id for s in open_})
    reruns = [(c, _tool_fn(registry, c.payload["server"], c.payload["tool"]), _recorded_arguments(run.store, c, overrides))
              for c in unknown] if rerun_unknown else []
    done: list[ResumedCall] = []
    # every request is claimed in one transaction before any tool runs: one found pending again (an approver
    # disabled or re-keyed since it was read; the withdrawal is noted in the log) resumes none of them
    claims = claim_all(run, [(s.approval_id, args) for s, _, args in plans]) if plans else []
    if claims and isinstance(claims[0], str):
        pending = [s for s, _, _ in plans if s.approval_id in claims]
        raise ApprovalPending([s.approval_id for s in pending], run_id, [s.call_id for s in pending])
    for (s, fn, args), (state, outcome, decision) in zip(plans, claims):
        if outcome == "approved":
            done.append(_execute(run, calls[s.call_id], fn, args, s.approval_id, "approved"))
        else:
            req = s.request
            done.append(ResumedCall(s.approval_id, s.call_id, req["server"], req["tool"], outcome, False,
                                    error=_denial(run, state, outcome, decision)))
    for call, fn, args in reruns:
        denied = _rerun_or_deny(run, call)
        if denied is not None:  # its grant is no longer valid: never run again under it
            from sealbox.recorder import ToolDenied

            p = call.payload
            done.append(ResumedCall(None, p["call_id"], p["server"], p["tool"], "grant_invalid", False,
                                    error=ToolDenied(denied, p["call_id"], p["server"], p["tool"])))
            continue
        done.append(_execute(run, call, fn, args, None, "rerun"))
    if not rerun_unknown:
        done += [ResumedCall(None, c.payload["call_id"], c.payload["server"], c.payload["tool"], "unknown", False)
                 for c in unknown]
    run.resumed_calls = done
    return run


def _refuse_suspended_outside_approvals(run_id: str, events: list) -> None:
    """Refuse to resume a run whose newest event is a ``run.suspended`` naming no approval
    (:meth:`~sealbox.recorder.RunContext.suspend`: a framework's human-in-the-loop, e.g. LangGraph's
    ``interrupt()``): no approval is waited for or claimed, and what suspended it resumes it.

    Raises:
        ApprovalError: code ``not_awaiting_approval``.
    """
    last = events[-1] if events else None
    if last is None or last.kind != "run.suspended" or last.payload.get("approval_ids"):
        return
    raise ApprovalError("not_awaiting_approval",
                        f"run {run_id} is suspended for a reason outside Sealbox's approvals "
                        f"({last.payload.get('reason')!r}), not waiting for an approval: Recorder.resume has "
                        "nothing to resume; what suspended it resumes it (LangGraph: Command(resume=...)), or "
                        f"Recorder.continue_run({run_id!r}) records more in it")


def _tool_fn(registry: dict, server: str, tool: str) -> Callable:
    fn = registry.get((server, tool))
    if fn is None:
        raise ConfigError(f"no function for tool {server}/{tool}: pass tools={{({server!r}, {tool!r}): fn}} "
                          "or register it with @recorder.tool")
    if not callable(fn):  # found now, before anything is written, not when the approved call runs
        raise ConfigError(f"the function for tool {server}/{tool} is not callable: {fn!r}")
    return fn


def _approved_arguments(store: Any, call: Any, state: ApprovalState, overrides: dict[str, Any]) -> Any:
    """The arguments to run with: exactly those whose binding was approved."""
    req, cid = state.request, state.call_id
    fp = req.get("policy_fingerprint")
    try:
        stored = store.resolve(call.payload["arguments"])
    except BlobNotFoundError:
        stored = None
    if cid not in overrides and stored is not None and binding_hash(req["server"], req["tool"], stored, fp) == req["binding"]:
        return decode(stored)
    if cid in overrides:
        if binding_hash(req["server"], req["tool"], encode(overrides[cid]), fp) == req["binding"]:
            return overrides[cid]
        raise ApprovalError("binding_mismatch", f"the arguments given for call {cid} are not the ones approved "
                            f"(their binding differs from {req['binding']})")
    raise ApprovalError("arguments_redacted", f"the recorded arguments of call {cid} were redacted or erased; "
                        f"pass arguments={{{cid!r}: ...}} (they must match the approved binding)")


def _recorded_arguments(store: Any, call: Any, overrides: dict[str, Any]) -> Any:
    cid = call.payload["call_id"]
    if cid in overrides:
        return overrides[cid]
    stored = store.resolve(call.payload["arguments"])
    value = decode(stored)
    # a {"$redacted": …} marker, or an in-string one (a value redacted earlier in the run), also in bytes
    if "$redacted" in str(stored) or "redacted:hmac-sha256:" in str(value):
        raise ApprovalError("arguments_redacted", f"the recorded arguments of call {cid} were redacted; "
                            f"pass arguments={{{cid!r}: ...}} to re-run it")
    return value


def _rerun_or_deny(run: Any, call: Any) -> Decision | None:
    """Before an outcome-unknown call runs again: in one transaction, check the explicit grant it
    named (sealbox.access) and record either the ``note`` saying it is re-run, or, when the grant
    is no longer valid (revoked, expired…), a re-evaluated ``grant_invalid`` deny, returned. A
    revocation committed before this transaction is always seen."""
    from sealbox.access import grant_status, is_implicit

    p = call.payload
    grant = p.get("grant") if isinstance(p.get("grant"), str) else None
    step = run._take_step()
    box: list[Decision] = []

    def build(reader: Any) -> list:
        nonlocal step
        box.clear()
        if not is_implicit(grant):
            ok, why = grant_status(reader, grant, run.principal.id, p["server"], p["tool"], _store_now(reader))
            if not ok:
                decision = Decision("deny", "grant_invalid", None, why, run.policy.fingerprint)
                box.append(decision)
                return [run._draft("policy.decision", {"call_id": p["call_id"], "server": p["server"],
                                                       "tool": p["tool"], **decision.to_payload(),
                                                       "reevaluated": True}, call.step)]
        step = run._fresh_step(reader, step)  # past another writer's steps (a gateway joined to the run)
        return [run._draft("note", {"text": f"re-running call {p['call_id']}, whose outcome was unknown "
                                            "(rerun_unknown=True)",
                                    "about": {"call_id": p["call_id"], "tool_call_leaf": call.leaf_index}}, step)]

    try:
        run._placed(run._learning(lambda: run.store.append_with(build)), fresh=True)
    except RecordingError:
        raise
    except Exception as exc:  # a failure to record is never a silent gap
        raise RecordingError(f"could not record the re-run of call {p['call_id']}: {exc}") from exc
    return box[0] if box else None


def _unknown_calls(events: list, states: list[ApprovalState], skip: set[str]) -> list:
    """Calls finally allowed (or approved and resumed) with no ``tool.result``."""
    results = {e.payload["call_id"] for e in events if e.kind == "tool.result"}
    final: dict[str, str] = {}
    for e in events:
        if e.kind == "policy.decision":
            final[e.payload["call_id"]] = e.payload["effect"]
    for s in states:
        if s.resumed:
            reeval = final.get(s.call_id)
            final[s.call_id] = "allow" if s.outcome == "approved" and reeval != "deny" else "deny"
    return [e for e in events if e.kind == "tool.call" and final.get(e.payload["call_id"]) == "allow"
            and e.payload["call_id"] not in results and e.payload["call_id"] not in skip]


def _execute(run: Any, call: Any, fn: Callable, args: Any, approval_id: str | None, outcome: str) -> ResumedCall:
    from sealbox.recorder import _invoke, _undecorated, _unrecordable

    p = call.payload
    fn = _undecorated(fn)  # a @recorder.tool function: the function it wraps (this is the recorded call)
    started = time.perf_counter_ns()
    try:
        result = _invoke(fn, args)
        if inspect.isawaitable(result):
            result = _run_awaitable(result)
    except BaseException as exc:
        run._record_result(p["server"], p["tool"], p["call_id"], call.step, started, error=exc, arguments=args)
        if not isinstance(exc, Exception):
            raise
        return ResumedCall(approval_id, p["call_id"], p["server"], p["tool"], outcome, True, error=exc)
    refusal = _unrecordable(result, p["server"], p["tool"], awaited=True)  # a generator: closed, an error
    if refusal is not None:
        run._record_result(p["server"], p["tool"], p["call_id"], call.step, started, error=refusal, arguments=args,
                           count=False)
        return ResumedCall(approval_id, p["call_id"], p["server"], p["tool"], outcome, True, error=refusal)
    run._record_result(p["server"], p["tool"], p["call_id"], call.step, started, result=result, arguments=args)
    return ResumedCall(approval_id, p["call_id"], p["server"], p["tool"], outcome, True, result=result)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _run_awaitable(awaitable: Any) -> Any:
    """Run an async tool's awaitable to its end and return its result (or raise its error). With no event
    loop running in this thread, ``asyncio.run``; inside one (``resume`` called from async code, an
    approval webhook), ``asyncio.run`` refuses to start, after ``run.resumed`` has spent the approval: the
    awaitable then runs on a loop of its own in a helper thread (with this thread's context variables),
    joined here, as ``resume`` blocks anyway."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(awaitable))
    import contextvars

    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def work() -> None:
        try:
            box["result"] = context.run(asyncio.run, _await(awaitable))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the resuming thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="sealbox-resume-async-tool", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
