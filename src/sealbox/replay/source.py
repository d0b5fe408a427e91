"""The replay source: what a :class:`~sealbox.recorder.RunContext` in replay mode consults.

A run in replay mode has ``run.replay`` set to a :class:`ReplaySource`. The
recorder then:

- passes every comparable draft (``model.call``, ``tool.call``, ``state.saved``,
  ``note``) to :meth:`ReplaySource.check` **before** it is written; the first
  mismatch raises :class:`ReplayStopped` and nothing more happens;
- asks :meth:`ReplaySource.serve_tool` for a tool call when tools come from the
  record: the call is compared, written (``tool.call``, the recorded decision,
  ``tool.result``) and the recorded result returned — the tool never runs, unless
  it held a sub-agent in the record (:class:`RunInside`: it runs, its sub-agent served);
- asks :meth:`ReplaySource.answer_model` (``RunContext.complete``) or
  :meth:`ReplaySource.model_response` (the integrations) for a model answer when
  models come from the record.

:class:`ReplayStopped` derives from ``BaseException`` so that an agent's or a
framework's ``except Exception`` (tool error handlers) cannot swallow it.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from typing import Any

from sealbox.events import EventDraft
from sealbox.replay.divergence import Divergence, diff_values
from sealbox.replay.keys import (COMPARED_KINDS, RecordedCall, RecordedRun, StepKey, attempted_view, content_hash,
                                 key_name, normalised, scrubbed_record)
from sealbox.replay.serialized import reordered_text, same_but_for_key_order
from sealbox.replay.values import rebuild, rebuild_error
from sealbox.snapshot import FieldDiff

__all__ = ["ReplaySource", "ReplayStopped", "RunInside"]


@dataclasses.dataclass(frozen=True)
class RunInside:
    """What :meth:`ReplaySource.serve_tool` returns for a recorded call that held a sub-agent (model calls
    of the run, or a sub-agent run, recorded while it ran): its ``tool.call`` and recorded decision are
    written, and the caller runs the tool's own function, whose sub-agent is served from the record, and
    records its ``tool.result`` as a live call does (``call_id``, ``step``)."""

    call_id: str
    step: str


#: Queued events of served calls are written at the latest every this many events.
_BATCH = 600


class ReplayStopped(BaseException):
    """Raised inside the agent when replay stops; carries the :class:`Divergence`."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


class ReplaySource:
    """Serves a recorded run to a run in replay mode and compares every step.

    Args:
        recorded: the recorded run.
        model: ``"record"`` (answers from the record) or ``"live"``.
        tools: ``"record"`` (results from the record, nothing runs) or ``"live"``.

    Attributes:
        divergence: the first divergence, once found.
        compared: steps whose key matched the record so far; a step stopped after its key matched
            (``outcome_unknown``, ``pending_approval``, ``unreplayable``) is among them.
    """

    def __init__(self, recorded: RecordedRun, *, model: str = "record", tools: str = "record") -> None:
        self.recorded = recorded
        self.serves_models = model == "record"
        self.serves_tools = tools == "record"
        self.divergence: Divergence | None = None
        self.compared: set[str] = set()
        self._lock = threading.RLock()
        self._served_pending: dict[str, str] = {}  # step -> why its served answer cannot be trusted
        self._unwritten: list[EventDraft] = []  # served tool calls, written with the run's next write
        #: queued events are written once this many are queued (None: only with the run's next write
        #: or :meth:`flush`; ``gateway replay`` writes them itself, off the event loop when it must)
        self.batch: int | None = _BATCH
        self.asked_models: set[str] = set()  # steps whose model answer was asked of the record (model_response)
        self.parent: ReplaySource | None = None  # the source of the run whose sub-agent run this one replays
        self.allow_drift = False  # a sub-agent run whose snapshot differs from the recorded one proceeds
        self.sub_sources: list[ReplaySource] = []  # the sub-agent runs served from the record, in start order
        self.replay_run_id: str | None = None  # the replay's own run (set when it starts)
        self.ended_status: str | None = None  # how this (sub-agent) replay run ended
        self.reproduced: bool | None = None  # its verdict, once it ended (a sub-agent run)
        self._children: list[dict[str, Any]] | None = None  # the recorded run's sub-agent runs (read once)
        self._claimed: set[str] = set()  # those already served to a sub-agent run of the replay
        self._held: tuple[set[str], set[str]] | None = None  # calls that held a sub-agent, or may have (read once)

    # ----------------------------------------------------------------- comparing

    def stop(self, divergence: Divergence) -> None:
        """Record the first divergence and raise :class:`ReplayStopped`. In a sub-agent run's source,
        the divergence is also the divergence of every run above it (the whole replay stops)."""
        self._diverged(divergence)
        raise ReplayStopped(self.divergence)  # type: ignore[arg-type]

    def halted(self) -> Divergence | None:
        """The divergence that stopped this replay: its own, else that of a run above it (a sibling
        sub-agent run's, in another thread, stops the whole replay and so this run too)."""
        source: ReplaySource | None = self
        while source is not None:
            if source.divergence is not None:
                return source.divergence
            source = source.parent
        return None

    def _raise_if_halted(self) -> None:
        halted = self.halted()
        if halted is not None:
            raise ReplayStopped(halted)

    def _diverged(self, divergence: Divergence) -> None:
        with self._lock:
            first = self.divergence is None
            if first:
                self.divergence = divergence
        if first and self.parent is not None:
            self.parent._diverged(self._as_parents(divergence))

    def _as_parents(self, divergence: Divergence) -> Divergence:
        """``divergence`` (of this sub-agent run) as the run above sees it: the same, inside this run."""
        agent = self.recorded.started.get("agent")
        return dataclasses.replace(divergence, sub_run=(self.recorded.run_id, *divergence.sub_run),
                                   message=f"in sub-agent run {self.recorded.run_id} (agent {agent!r}): "
                                           f"{divergence.message}")

    def check(self, run: Any, drafts: list[EventDraft]) -> None:
        """Compare the comparable drafts about to be written against the record."""
        self._raise_if_halted()
        for draft in drafts:
            if draft.kind == "model.call" and self.serves_models and draft.step not in self.asked_models:
                self.check_model_served(run, "the agent called its model itself and recorded the answer with "
                                             "run.model_call; use run.complete / acomplete or an integration, "
                                             "which a replay answers from the record", draft.step)
            if draft.kind in COMPARED_KINDS and draft.step is not None:
                rec = self.compare(run, draft.step, draft.kind, dict(draft.payload))
                if draft.kind == "tool.call" and rec is not None:
                    self._check_live_outcome(rec)

    def compare(self, run: Any, step: str, kind: str, payload: dict[str, Any]) -> RecordedCall:
        """Compare one attempted step with the recorded one; stop on any difference (or once stopped)."""
        self._raise_if_halted()
        view = attempted_view(run.store, kind, payload)
        name = key_name(kind, payload)
        redactor = getattr(run.store, "redactor", None)
        if kind == "state.saved" and name and redactor is not None:  # the label as the store keeps it
            from sealbox.canonical import encode

            state = payload.get("state")
            name = redactor.scrub_label(name, [] if state is None else redactor.secret_values("state", encode(state)))
        attempted = StepKey(step, kind, name, content_hash(kind, view, payload.get("format")))
        with self._lock:
            rec = self.recorded.steps.get(step)
            if rec is None:
                self._stop_if_skipped(step, kind, attempted.name)
                self.stop(Divergence("extra", step, f"the replay made a {kind} at step {step}, which the record "
                                     f"does not have", None, attempted, None, view, mismatched=("step",)))
            assert rec is not None
            if step in self.compared:
                self.stop(Divergence("extra", step, f"the replay made a second {kind} at step {step}",
                                     rec.key, attempted, rec.content, view, mismatched=("step",)))
            fields = tuple(f for f in ("kind", "name", "hash") if getattr(rec.key, f) != getattr(attempted, f))
            if fields == ("hash",) and self._same_but_for_normalising(run, kind, payload, rec, attempted, view):
                fields = ()
            if fields:
                fmt = payload.get("format")
                diff = _real_differences(diff_values(normalised(kind, fmt, rec.content),
                                                     normalised(kind, fmt, view))) \
                    if "hash" in fields and rec.key.kind == kind else ()
                what = {"kind": f"a {kind} where the record has a {rec.key.kind}",
                        "name": f"{kind} {attempted.name!r} where the record has {rec.key.name!r}",
                        "hash": f"{kind} {attempted.name} with different content ({len(diff)} field(s) differ)"}
                self._stop_if_skipped(step, kind, attempted.name)
                self.stop(Divergence("mismatch", step, f"step {step}: the replay made " + what[fields[0]],
                                     rec.key, attempted, rec.content, view, diff, fields))
            self.compared.add(step)
            pending = self._served_pending.pop(step, None)
        if pending is not None:
            self.stop(Divergence("unreplayable", step, f"step {step} cannot be replayed: {pending}", rec.key,
                                 attempted))
        return rec

    def _stop_if_skipped(self, step: str, kind: str, name: str) -> None:
        """Before a divergence at ``step`` is reported: when the record has a call requested by an earlier
        model call (sub-step ``N.k``, ``N`` below ``step``'s top-level step) that the replay never made, that
        call is the first divergence in step order (``missing``), not the step the replay went on to make.
        Only such sub-steps can be skipped (top-level steps are taken one after another), and only those the
        record wrote before its own event at ``step``: a call the record made after it (a tool run once the host
        approved it, written after the approval's note) is not skipped yet when the replay diverges there."""
        order = {s: i for i, s in enumerate(self.recorded.order)}
        limit = order.get(step) if step in self.recorded.steps else None
        try:
            top = int(step.split(".")[0])
            skipped = next((rec for rec in self.recorded.ordered() if "." in rec.key.step
                            and int(rec.key.step.split(".")[0]) < top and rec.key.step not in self.compared
                            and (limit is None or order.get(rec.key.step, limit) < limit)), None)
        except ValueError:
            return
        if skipped is not None:
            what = f"{kind} {name}".rstrip()
            self.stop(Divergence("missing", skipped.key.step, f"the replay made step {step} ({what}) without having "
                                 f"made step {skipped.key.step} ({skipped.key.kind} {skipped.key.name}) of the record",
                                 skipped.key, None, skipped.content))

    @staticmethod
    def _same_but_for_normalising(run: Any, kind: str, payload: dict[str, Any], rec: RecordedCall,
                                  attempted: StepKey, view: Any) -> bool:
        """Whether a step whose content hash differs from the record's is the recorded step all the same
        (only asked then, so the normal path pays nothing):

        - the recorded content equals the attempted view once scrubbed as the run records it now: a
          record written before a run scrubbed the values it redacted earlier (2026-12-03) holds such a
          value in clear where the replay's view holds its marker, the same HMAC of the same string
          (docs/content-modes.md, "Values redacted earlier in the run");
        - or the two are equal but for strings holding the same serialized dict with its keys in
          another order (:func:`~sealbox.replay.serialized.same_but_for_key_order`): the record keeps a
          tool's result with its keys sorted, and an agent that sends its model ``str(result)`` or
          ``json.dumps(result)`` sends them sorted in a replay. The recorded content, else (a record
          written before scrubbing) the scrubbed one, is compared so with the view.
        """
        fmt = payload.get("format")
        secrets = getattr(run, "_run_secrets", None)
        scrubbed = scrubbed_record(run.store, kind, payload, rec.content, secrets() if secrets else [])
        if scrubbed is not None and content_hash(kind, scrubbed, fmt) == attempted.hash:
            return True
        attempted_content = normalised(kind, fmt, view)
        return any(same_but_for_key_order(normalised(kind, fmt, recorded), attempted_content)
                   for recorded in (rec.content, scrubbed) if recorded is not None)

    def _check_live_outcome(self, rec: RecordedCall) -> None:
        why = self._not_servable(rec, live=True)
        if why is not None:
            self.stop(why)

    def _not_servable(self, rec: RecordedCall, live: bool) -> Divergence | None:
        decision = rec.decision or {}
        step = rec.key.step
        approved_without_result = decision.get("effect") == "require_approval" and rec.approval in ("approved", "rerun")
        if rec.result is None and rec.decision is None:
            return Divergence("outcome_unknown", step, f"step {step}: the recorded call {rec.key.name} has neither a "
                              "recorded decision nor a result — its outcome is unknown; replay ends here and does "
                              "not run it again", rec.key, rec.key)
        if rec.result is None and (decision.get("effect") == "allow" or approved_without_result):
            return Divergence("outcome_unknown", step, f"step {step}: the recorded call {rec.key.name} was allowed "
                              "but has no result — its outcome is unknown (the process stopped while it ran); "
                              "replay ends here and does not run it again", rec.key, rec.key)
        if rec.result is None and decision.get("effect") == "require_approval" and rec.approval is None:
            return Divergence("pending_approval", step, f"step {step}: the recorded call {rec.key.name} "
                              f"{self._unresumed(rec)}; replay ends here", rec.key, rec.key)
        if not live and rec.unreplayable:
            return Divergence("unreplayable", step, f"step {step} cannot be replayed: {rec.unreplayable}",
                              rec.key, rec.key)
        return None

    def _approval_denial(self, run: Any, rec: RecordedCall, decision: dict[str, Any]) -> str:
        """The reason a call whose approval was denied or expired was refused, as the recording process
        gave it (``approval apr_… denied by alice: too risky``), not the rule's request for approval."""
        from sealbox.approvals import get_approval
        from sealbox.errors import SealboxError
        from sealbox.pause import _denial

        if rec.approval_id is None or rec.approval not in ("denied", "expired"):
            return decision.get("reason", "")
        try:
            state = get_approval(self.recorded.store, rec.approval_id, run_id=self.recorded.run_id)
        except SealboxError:  # unreadable identities or request: say no more than the decision does
            return decision.get("reason", "")
        return _denial(run, state, rec.approval, None).decision.reason  # type: ignore[attr-defined]

    def _unresumed(self, rec: RecordedCall) -> str:
        """What became of the approval of a call the run was never resumed past, for the
        ``pending_approval`` message: still waiting, or answered (by whom) but not resumed."""
        from sealbox.approvals import get_approval
        from sealbox.errors import SealboxError

        waiting = "was still waiting for an approval"
        if rec.approval_id is None and rec.imported_approval is not None:  # an imported run's: a note, no request
            held = rec.imported_approval
            aid = f" {held['approval_id']}" if isinstance(held.get("approval_id"), str) else ""
            return (f"was held for an approval at its source (imported approval{aid}: {held.get('decision')}); the "
                    "run was imported, and was never resumed past it there")
        if rec.approval_id is None:
            return waiting
        try:
            state = get_approval(self.recorded.store, rec.approval_id, run_id=self.recorded.run_id)
        except SealboxError:  # unreadable identities or request: say no more than the run's events do
            return waiting
        by = f" by {', '.join(state.decided_by)}" if state.decided_by else ""
        if state.status == "malformed":
            return (f"was held by a malformed approval request {rec.approval_id} ({state.malformed}), "
                    "which can never be approved")
        if state.resumed:  # a run.resumed names it but gives no outcome that can be read
            return (f"was {state.status}{by} (approval {rec.approval_id}); the run was resumed past it, but "
                    "its run.resumed event is malformed or gives no outcome for it")
        if state.status in ("approved", "denied"):
            return (f"was {state.status}{by} (approval {rec.approval_id}), but the run was never resumed "
                    "past it")
        if state.status == "expired":
            return (f"was not answered before its approval {rec.approval_id} expired ({state.expired_at}), "
                    "and the run was never resumed past it")
        if state.status == "closed":
            return f"was still waiting for an approval (approval {rec.approval_id}) when the run ended"
        return f"was still waiting for an approval (approval {rec.approval_id})"

    # ----------------------------------------------------------------- sub-agent runs

    def recorded_children(self) -> list[dict[str, Any]]:
        """The recorded run's sub-agent runs (runs naming it as parent, replays left out unless the
        recorded run is a replay itself, whose sub-agent runs are replays), in start order."""
        with self._lock:
            if self._children is None:
                row = self.recorded.store.get_run(self.recorded.run_id) or {}
                a_replay = bool(self.recorded.started.get("replay_of"))
                kids = [c for c in row.get("children") or [] if a_replay or not c.get("replay_of")]
                self._children = kids  # get_run lists them oldest first
            return list(self._children)

    def adopt_sub_run(self, run: Any, sub: Any) -> None:
        """Serve ``sub``, a run the agent started while replaying ``run`` (a sub-agent's), from the
        record: from the recorded run's first sub-agent run of the same agent and principal not yet
        served, one with the same labels first. ``sub`` becomes a replay of it (``replay_of``, its own :class:`ReplaySource`, the same
        modes), compared step by step; a divergence in it stops the whole replay. Nothing is written
        here; an agent the record has no (further) sub-agent run of stops the replay before that run
        is written: ``extra``, or ``mismatch`` when its principal differs from the recorded run's;
        ``unreplayable`` when ``sub`` is a run of another store (another log origin).

        Raises:
            ReplayStopped: as described (or the replay had stopped already).
        """
        self._raise_if_halted()
        step = str(run._next_step)
        elsewhere = getattr(getattr(sub, "store", None), "origin", None)
        if elsewhere != getattr(self.recorded.store, "origin", None):
            self.stop(Divergence(
                "unreplayable", step, f"at step {step} the agent started a run (agent {sub.agent!r}) of another store "
                f"({elsewhere}), which the replayed store's record cannot serve; replay stopped before anything in "
                "that run could execute"))
        with self._lock:
            children = self.recorded_children()
            same = [c for c in children if c["run_id"] not in self._claimed and c.get("agent") == sub.agent]
            mine = [c for c in same if c.get("principal") == sub.principal.id]
            # the first with the same labels, else the first: sub-agent runs of one agent started at once
            # (threads) are told apart by their labels (``labels={"task": "a"}``), else by start order
            match = next((c for c in mine if c.get("labels") == sub.labels), mine[0] if mine else None)
            if match is None:
                if same:
                    other = same[0]
                    self.stop(Divergence(
                        "mismatch", step, f"at step {step} the agent started a sub-agent run (agent {sub.agent!r}) "
                        f"as principal {sub.principal.id!r}; the record's sub-agent run {other['run_id']} of that "
                        f"agent ran as {other.get('principal')!r}; replay stopped before anything in that run "
                        "could execute", mismatched=("name",)))
                served = len([c for c in children if c["run_id"] in self._claimed and c.get("agent") == sub.agent])
                self.stop(Divergence(
                    "extra", step, f"at step {step} the agent started a sub-agent run (agent {sub.agent!r}) that the "
                    f"record does not have (the recorded run has {served} of that agent, all served already); "
                    "replay stopped before anything in that run could execute", mismatched=("step",)))
            assert match is not None
            self._claimed.add(match["run_id"])
        child = ReplaySource(RecordedRun.read(self.recorded.store, match["run_id"]),
                             model="record" if self.serves_models else "live",
                             tools="record" if self.serves_tools else "live")
        child.parent, child.allow_drift, child.replay_run_id = self, self.allow_drift, sub.run_id
        with self._lock:
            self.sub_sources.append(child)
        sub.replay, sub.replay_of = child, match["run_id"]
        if sub.parent_run_id is None:
            sub.parent_run_id = run.run_id

    def check_sub_snapshot(self, sub: Any, fingerprint: str | None) -> None:
        """Before a sub-agent run's ``run.started`` is written: stop the replay (``config_drift``) when
        its snapshot is not the recorded sub-agent run's, unless drift is allowed."""
        from sealbox.snapshot import diff_snapshots

        then = self.recorded.started.get("snapshot")
        if fingerprint == then or self.allow_drift:
            return
        store = self.recorded.store
        old = self.recorded.snapshot()
        new = store.get_snapshot(fingerprint) if fingerprint else None
        drift = diff_snapshots(old or {}, new or {})
        fields = ", ".join(d.path for d in drift[:8]) + (" …" if len(drift) > 8 else "")
        self.stop(Divergence("config_drift", None, f"its configuration differs from the recorded snapshot in "
                             f"{len(drift)} field(s): {fields or 'snapshot'}; the sub-agent run did not start "
                             "(--allow-config-drift, or allow_config_drift=True, to proceed)", diff=tuple(drift)))

    def finish_sub_run(self, sub: Any, status: str, error: BaseException | None) -> tuple[str, dict[str, Any]]:
        """When a sub-agent run served from the record ends: its divergence, if any (a step it never
        reached, an outcome other than the recorded one), is the whole replay's. Returns the status to
        record (``cancelled`` once the replay stopped) and the ``verdict`` of its ``run.ended``."""
        from sealbox.replay.engine import ending_divergence, replay_status

        stopped = self.halted() is not None or isinstance(error, ReplayStopped)
        if stopped:
            status = "cancelled"  # stopped by the replay, not by the agent
        else:
            if status == "error":  # a cancellation served from the record ends it cancelled, as recorded
                status = replay_status(error, self.recorded.ended)
            d = self.missing()
            if d is None:
                d = ending_divergence(sub, self.recorded, status, error)
            if d is not None:
                self._diverged(d)
        self.ended_status = status
        divergence = self.divergence or self.halted()
        self.reproduced = divergence is None
        verdict = {"reproduced": divergence is None, "replay_of": self.recorded.run_id,
                   "steps_compared": len(self.compared),
                   "divergence": divergence.summary() if divergence else None, "config_drift": []}
        return status, verdict

    def suspend_sub_run(self, sub: Any) -> None:
        """When a sub-agent run served from the record is suspended (``RunContext.suspend``: it waits for a
        human, not ended): compared as its ending. Reproduced when it reached every recorded step and the
        recorded run did not end either (it was left suspended too); else that divergence (a step never
        reached, or the recorded run ended) is the whole replay's."""
        from sealbox.replay.engine import recorded_ending

        if self.halted() is None:
            d = self.missing()
            if d is None and self.recorded.ended is not None:
                _, words = recorded_ending(self.recorded.ended)
                d = Divergence("outcome", None, f"every step matched, but the recorded run {words} and the "
                               "replay was suspended (waiting for a human)")
            if d is not None:
                self._diverged(d)
        self.ended_status = "suspended"
        self.reproduced = (self.divergence or self.halted()) is None

    def sub_run_results(self) -> list[dict[str, Any]]:
        """Every sub-agent run served from the record under this one, depth first in start order:
        ``{replay_of, parent, agent, new_run_id, steps_compared, reproduced}``."""
        out: list[dict[str, Any]] = []
        with self._lock:
            subs = list(self.sub_sources)
        for child in subs:
            out.append({"replay_of": child.recorded.run_id, "parent": self.recorded.run_id,
                        "agent": child.recorded.started.get("agent"), "new_run_id": child.replay_run_id,
                        "steps_compared": len(child.compared),
                        "reproduced": child.reproduced is True})
            out += child.sub_run_results()
        return out

    def check_model_served(self, run: Any, what: str, step: str | None = None) -> None:
        """Stop the replay when a model call about to be recorded (at ``step``, default the run's next)
        was not answered from the record (``what`` says how it got past it), when models are served
        from the record."""
        step = str(run._next_step) if step is None else step
        if self.serves_models and step not in self.asked_models:
            rec = self.recorded.steps.get(step)
            self.stop(Divergence("unreplayable", step, f"step {step}: the model was called for real, not answered "
                                 f"from the record ({what}); replay stopped",
                                 rec.key if rec is not None else None))

    # ----------------------------------------------------------------- models

    def model_response(self, run: Any, step: str | None = None) -> Any:
        """The recorded response of the model call about to be recorded (plain data), at ``step``
        (default: the run's next step).

        The call's request is compared when it is recorded; if the record has no
        model call at this step, an empty response is returned and the comparison
        then stops the replay.
        """
        self._raise_if_halted()
        step = str(run._next_step) if step is None else step
        self.asked_models.add(step)
        rec = self.recorded.steps.get(step)
        if rec is None or rec.key.kind != "model.call":
            return {}
        if rec.unreplayable:
            self._served_pending[step] = rec.unreplayable
            return {}
        return rebuild(self.recorded.resolve(rec.payload.get("response")))

    def answer_model(self, run: Any, request: Any, *, provider: str | None = None, model: str | None = None,
                     asynchronous: bool = False) -> Any:
        """``RunContext.complete`` in replay: record the call with the recorded response and return it
        (``asynchronous``, for ``RunContext.acomplete``: a streamed call's chunks as an async iterator).

        Raises:
            ReplayedError: the recorded call failed (``response = {"error": …}``).
        """
        rec = self.recorded.steps.get(str(run._next_step))
        response = self.model_response(run)
        run.model_call(request, response, provider=provider, model=model)
        if isinstance(response, dict) and set(response) == {"error"} and isinstance(response["error"], dict):
            raise rebuild_error(response["error"])
        streamed = rec is not None and rec.key.kind == "model.call" and rec.payload.get("stream")
        if streamed and isinstance(response, dict):  # the agent was given stream chunks: it reads a list of them
            chunks = as_stream(response, rec.payload.get("format"))
            return _AsyncChunks(chunks) if asynchronous else _Chunks(chunks)
        return response

    # ----------------------------------------------------------------- tools

    def serve_tool(self, run: Any, server: str, tool: str, arguments: Any, *, grant: str | None,
                   call_id: str | None, exposed: str | None) -> Any:
        """Compare a tool call, record it with the recorded decision and result, and return that result;
        or, for an allowed call that held a sub-agent (:meth:`holds_sub_agent`), record it with its recorded
        decision and return :class:`RunInside`: the caller runs the tool and records its result.

        Raises:
            ToolDenied: the recorded call was denied (by policy, or its approval was denied or expired).
            Exception: the recorded call raised (rebuilt, see :func:`~sealbox.replay.values.rebuild_error`).
            ReplayStopped: mismatch, outcome unknown, unanswered approval, or unreplayable result.
        """
        from sealbox.policy.model import Decision
        from sealbox.recorder import ToolDenied

        call_id = call_id or "call_" + uuid.uuid4().hex[:24]
        step = run._step_for_call(call_id)
        # recorded as a live call records them (the run's redacted values scrubbed), so that the two compare
        call = {"call_id": call_id, "server": server, "tool": tool, "exposed": exposed or f"{server}.{tool}",
                "arguments": run._arguments_for_record(arguments), "grant": grant or f"implicit:{run.principal.id}"}
        rec = self.compare(run, step, "tool.call", call)
        stop = self._not_servable(rec, live=False)
        if stop is not None:
            self.stop(stop)
        d = rec.decision or {}
        denied = d.get("effect") == "deny" or (d.get("effect") == "require_approval" and rec.result is None)
        decision = {"call_id": call_id, "server": server, "tool": tool, "effect": d.get("effect", "allow"),
                    "reason_code": d.get("reason_code", "policy_allow"), "rule": d.get("rule"),
                    "reason": d.get("reason", ""), "policy_fingerprint": d.get("policy_fingerprint", run.policy.fingerprint),
                    "eval_us": 0, "approval": d.get("approval"),
                    "replayed": {"run_id": self.recorded.run_id, "step": step, "approval": rec.approval}}
        drafts = [run._draft("tool.call", call, step), run._draft("policy.decision", decision, step)]
        holds = False if denied else self.holds_sub_agent(step)
        if holds is None:
            self.stop(Divergence("unreplayable", step, f"step {step}: the record shows a sub-agent (a model call or a "
                                 f"sub-agent run) recorded while {rec.key.name} and other calls of the same model "
                                 "step ran at once, and cannot tell which of them held it; its tool is not run for "
                                 "real to find out, and its sub-agent cannot be served; replay stopped",
                                 rec.key, rec.key))
        if holds:  # the tool's function runs: its sub-agent is served
            self._write(run, drafts)
            self.flush(run)  # written before what runs inside it, as recorded (a replay of this replay finds it so)
            return RunInside(call_id, step)
        if denied:
            self._write(run, drafts)
            code = d.get("reason_code", "policy_deny") if d.get("effect") == "deny" else f"approval_{rec.approval}"
            reason = d.get("reason", "") if d.get("effect") == "deny" else self._approval_denial(run, rec, d)
            raise ToolDenied(Decision("deny", code, d.get("rule"), reason,  # type: ignore[arg-type]
                                      decision["policy_fingerprint"]), call_id, server, tool)
        result = rec.result or {}
        payload: dict[str, Any] = {"call_id": call_id, "ok": bool(result.get("ok")), "duration_us": 0}
        answered = result.get("ok") or "result" in result  # a failure reported in a result (MCP isError) is served
        if answered:
            stored = self.recorded.resolve(result.get("result"))
            payload["result"] = _decoded(stored)
            served: Any = rebuild(stored)
            if not result.get("ok"):
                payload["error"] = result.get("error") or {"type": "ToolError", "message": ""}
        else:
            payload["error"] = result.get("error") or {"type": "Exception", "message": ""}
            served = rebuild_error(payload["error"])
        self._write(run, drafts + [run._draft("tool.result", payload, step)])
        if isinstance(served, BaseException) and not answered:
            raise served
        return served

    def holds_sub_agent(self, step: str) -> bool | None:
        """Whether the recorded tool call at ``step`` held a sub-agent: a model call of the recorded run, or the
        start of one of its sub-agent runs, was recorded while it ran (between its ``tool.call`` and its
        ``tool.result``; :meth:`RecordedRun.held_inside`). Its tool's function then runs in the replay
        (:class:`RunInside`), so that the sub-agent's own calls are served from the record and compared, instead
        of the whole call being answered with its recorded result. None: it may have, but so may another call
        running at the same time, requested by the same model step (the record cannot tell which)."""
        with self._lock:
            if self._held is None:
                leaves = list(self.recorded.model_leaves)
                if self.recorded.call_spans and getattr(self.recorded.store, "get_run", None) is not None:
                    for child in self.recorded_children():
                        events = self.recorded.store.read_run(child["run_id"])
                        if events:
                            leaves.append(events[0].leaf_index)
                self._held = self.recorded.held_inside(leaves) if self.recorded.call_spans else (set(), set())
            held, ambiguous = self._held
            return True if step in held else None if step in ambiguous else False

    def refuse_live_tool(self, run: Any, server: str, tool: str, arguments: Any, *, call_id: str | None,
                         exposed: str | None, why: str) -> None:
        """A tool call that cannot run live in this replay (``tools="live"``): compared with the record like
        any call (a mismatch, an extra call stop the replay as such), then the replay stops there,
        ``unreplayable`` (``step S: <why>``). Nothing is written for it and nothing runs.

        Raises:
            ReplayStopped: always.
        """
        call_id = call_id or "call_" + uuid.uuid4().hex[:24]
        step = run._step_for_call(call_id)
        call = {"call_id": call_id, "server": server, "tool": tool, "exposed": exposed or f"{server}.{tool}",
                "arguments": run._arguments_for_record(arguments), "grant": f"implicit:{run.principal.id}"}
        rec = self.compare(run, step, "tool.call", call)
        self.stop(Divergence("unreplayable", step, f"step {step}: {why}", rec.key, rec.key))

    def _write(self, run: Any, drafts: list[EventDraft], sync: bool = False) -> None:
        """Queue the events of a served call: nothing ran, so they need no commit of their own;
        they are written, in order, with the run's next write (:meth:`take_unwritten`)."""
        with self._lock:
            self._unwritten += drafts
            full = self.batch is not None and len(self._unwritten) >= self.batch
        if full:
            self.flush(run)

    def pending(self) -> int:
        """How many served calls' events are queued, not yet written."""
        with self._lock:
            return len(self._unwritten)

    def take_unwritten(self) -> list[EventDraft]:
        """The queued events, to be written before the drafts the run is about to write."""
        with self._lock:
            drafts, self._unwritten = self._unwritten, []
        return drafts

    def flush(self, run: Any) -> None:
        """Write the queued events now (one commit)."""
        drafts = self.take_unwritten()
        if drafts:
            run._guard(lambda: run.store.append(drafts, sync=False))

    # ----------------------------------------------------------------- the end

    def missing(self) -> Divergence | None:
        """The first recorded step the replay never reached, as a ``missing`` divergence; else the
        first recorded sub-agent run it never started, or started and never ended."""
        for rec in self.recorded.ordered():
            if rec.key.step not in self.compared:
                return Divergence("missing", rec.key.step, f"the replay ended before step {rec.key.step} "
                                  f"({rec.key.kind} {rec.key.name}) of the record", rec.key, None, rec.content)
        if getattr(self.recorded.store, "get_run", None) is None:
            return None
        with self._lock:
            claimed, subs = set(self._claimed), list(self.sub_sources)
        for child in self.recorded_children():
            if child["run_id"] not in claimed:
                return Divergence("missing", None, f"the replay ended without starting the recorded sub-agent "
                                  f"run {child['run_id']} (agent {child.get('agent')!r})")
        for sub in subs:
            if sub.ended_status is None and sub.divergence is None:
                return Divergence("missing", None, f"the sub-agent run replaying {sub.recorded.run_id} (agent "
                                  f"{sub.recorded.started.get('agent')!r}) had not ended when the replay ended")
        return None


def _real_differences(diff: tuple[FieldDiff, ...]) -> tuple[FieldDiff, ...]:
    """A divergent step's field differences without the strings that differ only in the order of a
    serialized dict's keys (:func:`~sealbox.replay.serialized.reordered_text`), which are not why it
    diverged: the field that did change is the one shown. All of them if none is left."""
    real = tuple(d for d in diff if not (d.change == "changed" and isinstance(d.a, str) and isinstance(d.b, str)
                                         and reordered_text(d.a, d.b)))
    return real or diff


def _decoded(stored: Any) -> Any:
    from sealbox.canonical import decode

    return decode(stored)


class _Chunks(list):
    """A replayed stream's chunks for ``RunContext.complete``: a list, which can also be read inside
    ``with`` and closed, as the :class:`~sealbox.recorder.RecordedStream` the recorded run was given
    (``with client.chat.completions.create(..., stream=True) as stream``)."""

    def __enter__(self) -> "_Chunks":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None

    def close(self) -> None:
        return None


class _AsyncChunks:
    """A replayed stream's chunks for ``RunContext.acomplete``: ``async for`` reads them as the
    recorded run read its async stream (also inside ``async with``); ``close()`` / ``aclose()`` end it."""

    def __init__(self, chunks: list) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> "_AsyncChunks":
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._chunks = iter(())

    close = aclose

    async def __aenter__(self) -> "_AsyncChunks":  # `async with await run.acomplete(...) as stream`, as live
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


def as_stream(response: dict, fmt: Any) -> Any:
    """A response recorded from stream chunks (``stream: {"chunks": N}``, assembled by the adapters)
    as a list of chunks or events of its format that adds up to it, for ``complete`` in a replay: the
    agent was given a list of chunks, and reads one. Not the recorded chunk boundaries (one chunk
    per choice, one delta per content block), the same texts, tool calls, stop reasons and usage."""
    import json

    if fmt == "openai.chat":
        head = {k: response[k] for k in ("id", "created", "model", "system_fingerprint", "service_tier")
                if k in response}
        chunks = []
        for choice in response.get("choices") or []:
            message = dict(choice.get("message") or {})
            calls = message.pop("tool_calls", None)
            delta = {k: v for k, v in message.items() if v is not None}
            if calls:
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
            chunks.append({**head, "object": "chat.completion.chunk", "choices": [
                {"index": choice.get("index", 0), "delta": delta, "finish_reason": choice.get("finish_reason")}]})
        if response.get("usage"):
            chunks.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": response["usage"]})
        return chunks
    if fmt == "anthropic.messages":
        start = {k: v for k, v in response.items() if k not in ("content", "stop_reason", "stop_sequence")}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": {
            **start, "content": [], "stop_reason": None, "stop_sequence": None}}]
        for i, block in enumerate(response.get("content") or []):
            block = dict(block) if isinstance(block, dict) else {}
            deltas = []
            for key, kind in (("thinking", "thinking_delta"), ("text", "text_delta"), ("signature", "signature_delta")):
                if isinstance(block.get(key), str) and block[key]:
                    deltas.append({"type": kind, key: block[key]})
                    block[key] = ""
            if block.get("type") in ("tool_use", "server_tool_use") and "input" in block:
                text = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
                deltas.append({"type": "input_json_delta", "partial_json": text})
                block["input"] = {}
            events.append({"type": "content_block_start", "index": i, "content_block": block})
            events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
            events.append({"type": "content_block_stop", "index": i})
        events.append({"type": "message_delta", "delta": {"stop_reason": response.get("stop_reason"),
                                                          "stop_sequence": response.get("stop_sequence")},
                       "usage": response.get("usage")})
        events.append({"type": "message_stop"})
        return events
    if fmt == "openai.responses":
        kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(response.get("status"),
                                                                                      "response.completed")
        return [{"type": kind, "sequence_number": 0, "response": response}]
    return response
