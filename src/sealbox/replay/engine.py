"""The Replayer: re-run an agent's own code against a recorded run.

Usage::

    result = Replayer(store).replay(run_id, agent=my_agent)   # my_agent(run) -> anything
    if not result.reproduced:
        print(render_divergence(result.divergence))

The agent callable receives a :class:`~sealbox.recorder.RunContext` in replay
mode and runs as it does in production:

- model calls made with ``run.complete(request, call)`` / ``await run.acomplete(...)`` — or through the OpenAI
  Agents SDK's :class:`~sealbox.integrations.openai_agents.SealboxModel` or a
  LangChain chat model (served through LangChain's cache hook while the replay
  runs) — are answered from the recorded ``model.call``;
- tool calls (``run.call_tool``, ``@recorder.tool``, governed SDK / LangGraph
  tools) get the recorded result; the tool never runs (one that held a sub-agent
  does, its sub-agent served from the record); a recorded deny is a
  deny again, an approval is served as it was answered and never asked again;
- every step is compared by (step, kind, name, hash) before it is written; the
  first mismatch stops the run (:class:`~sealbox.replay.divergence.Divergence`).

Each replay is recorded as a new run with ``replay_of`` and, in its
``run.ended``, a ``verdict``: ``{reproduced, divergence, steps_compared}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from sealbox.errors import ConfigError
from sealbox.replay.divergence import Divergence, divergence_head
from sealbox.replay.keys import RecordedRun, step_order
from sealbox.replay.serialized import reordered_text
from sealbox.replay.source import ReplaySource, ReplayStopped
from sealbox.snapshot import FieldDiff, diff_snapshots

__all__ = ["Replayer", "ReplayResult", "UnreplayableStep"]

_MODES = ("record", "live")


@dataclass(frozen=True)
class UnreplayableStep:
    """A recorded step whose answer cannot be served, and why (redacted or erased content)."""

    step: str
    kind: str
    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"step": self.step, "kind": self.kind, "name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class ReplayResult:
    """The outcome of one replay.

    Attributes:
        reproduced: every step matched and the run ended as recorded.
        divergence: the first departure, or None.
        steps_compared: comparable steps that matched.
        new_run_id: the replay's own run (None when replay did not start: config drift).
        config_drift: snapshot fields that differ from the recorded snapshot.
        unreplayable: recorded steps that cannot be served in the chosen modes.
        replay_of: the recorded run.
        agent_error: the exception the agent raised, ``{"type", "message"}`` (as in the replay
            run's ``run.ended`` ``error``), or None.
        matched_steps: the steps counted in ``steps_compared``, in step order. A divergent
            ``outcome_unknown``, ``pending_approval`` or ``unreplayable`` step is among them (its key
            matched; its answer cannot be served): :meth:`head` counts the steps before it.
        sub_runs: the sub-agent runs the agent started, each served from the recorded run's
            sub-agent run of the same agent (docs/replay.md, "Sub-agent runs"), depth first in start
            order: ``{replay_of, parent, agent, new_run_id, steps_compared, reproduced}``
            (``parent``: the recorded run it is a sub-agent run of).
        knowledge_changed: the recorded snapshot's knowledge files (local ones only) whose content
            differs today, or that are gone (replay without ``snapshot=``): ``{"uri", "change",
            "recorded", "now"}`` (:func:`sealbox.snapshot.knowledge_file_changes`); a warning, unless
            ``fail_on_knowledge_change=True`` (then the replay did not start).
    """

    reproduced: bool
    divergence: Divergence | None
    steps_compared: int
    new_run_id: str | None
    config_drift: tuple[FieldDiff, ...] = ()
    unreplayable: tuple[UnreplayableStep, ...] = ()
    replay_of: str = ""
    agent_error: dict[str, str] | None = None
    matched_steps: tuple[str, ...] = ()
    sub_runs: tuple[dict[str, Any], ...] = ()
    knowledge_changed: tuple[dict[str, Any], ...] = ()

    def head(self) -> str:
        """The first line ``sealbox replay`` prints: ``reproduced: 5 step(s) matched`` (``…, and 4 in 1
        sub-agent run(s)``), or ``NOT reproduced: diverged at step 2.2 (mismatch); 2 step(s) matched
        before it``."""
        if self.divergence is None:
            subs = (f", and {sum(r['steps_compared'] for r in self.sub_runs)} in {len(self.sub_runs)} "
                    "sub-agent run(s)") if self.sub_runs else ""
            return f"reproduced: {self.steps_compared} step(s) matched{subs}"
        return f"NOT reproduced: {divergence_head(self.divergence, self.matched_steps)}"

    def verdict(self) -> dict[str, Any]:
        """The ``verdict`` written in the replay run's ``run.ended``."""
        return {"reproduced": self.reproduced, "replay_of": self.replay_of, "steps_compared": self.steps_compared,
                "divergence": self.divergence.summary() if self.divergence else None,
                "config_drift": [d.path for d in self.config_drift],
                # the knowledge files changed since the recording: a warning, saved with the verdict
                **({"knowledge_changed": [dict(k) for k in self.knowledge_changed]} if self.knowledge_changed else {}),
                **({"sub_runs": [{k: r[k] for k in ("replay_of", "new_run_id", "reproduced", "steps_compared")}
                                 for r in self.sub_runs]} if self.sub_runs else {})}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``sealbox replay --json``)."""
        return {"reproduced": self.reproduced, "replay_of": self.replay_of, "new_run_id": self.new_run_id,
                "steps_compared": self.steps_compared,
                "divergence": self.divergence.to_dict() if self.divergence else None,
                "config_drift": [d.to_dict() for d in self.config_drift],
                "unreplayable": [u.to_dict() for u in self.unreplayable],
                "agent_error": dict(self.agent_error) if self.agent_error else None,
                "sub_runs": [dict(r) for r in self.sub_runs],
                "knowledge_changed": [dict(k) for k in self.knowledge_changed]}


def _check_sub_run_snapshots(recorded: RecordedRun) -> None:
    """Read the snapshot of every sub-agent run of ``recorded`` (and theirs, all the way down) that a
    replay would serve, as the replayed run's own is read: one deleted or changed below Sealbox refuses
    the replay before anything is recorded. A sub-agent run's snapshot used to be compared by
    fingerprint only (its content never read), so its deletion went unseen and the replay reproduced.

    Raises:
        sealbox.store.base.DamagedEventError: names the sub-agent run and its snapshot.
    """
    store, seen = recorded.store, {recorded.run_id}
    pending = [(recorded.run_id, bool(recorded.started.get("replay_of")))]
    while pending:
        run_id, a_replay = pending.pop()
        row = store.get_run(run_id) or {}
        for child in row.get("children") or []:  # as ReplaySource.recorded_children serves them
            if child["run_id"] in seen or (child.get("replay_of") and not a_replay):
                continue
            seen.add(child["run_id"])
            sub = RecordedRun.read(store, child["run_id"])
            sub.snapshot()
            pending.append((sub.run_id, bool(sub.started.get("replay_of"))))


class Replayer:
    """Replays recorded runs from a store (the replay is recorded into the same store).

    Args:
        store: an open, writable store holding the recorded run.
        policy: the policy of the replay's recorder. Tools served from the record
            are not decided again (the recorded decision is served): the policy is then
            only named in the replay run's ``run.started`` and its ``prices`` price the
            model calls (``usage.cost``); with ``tools="live"`` this policy decides each
            call, so it is required then. None: ``ALLOW_ALL``.
    """

    def __init__(self, store: Any, policy: Any = None) -> None:
        self.store = store
        self.policy = policy

    def replay(self, run_id: str, agent: Callable[[Any], Any], *, model: str = "record", tools: str = "record",
               side_effects: bool = False, allow_config_drift: bool = False, snapshot: Any = None,
               fail_on_knowledge_change: bool = False) -> ReplayResult:
        """Re-run ``agent`` against the record of ``run_id``; see the module docstring.

        Args:
            run_id: the recorded run.
            agent: ``agent(run)``, sync or async; it receives the replay's RunContext.
            model: ``"record"`` or ``"live"`` (call the model for real; tools still from the record).
            tools: ``"record"`` or ``"live"`` (execute tools for real; needs ``side_effects=True``).
            side_effects: the explicit consent that ``tools="live"`` requires.
            allow_config_drift: proceed when ``snapshot`` differs from the recorded one.
            snapshot: the configuration the agent runs under now (a Snapshot or its dict);
                None: the recorded one, whose local knowledge files are then hashed again: a file
                changed or gone since is listed in ``knowledge_changed`` (a warning).
            fail_on_knowledge_change: do not start the replay when such a file changed or is gone
                (``config_drift``).

        Returns:
            A frozen :class:`ReplayResult`.

        Raises:
            ConfigError: unknown run or mode, an ``agent`` that is not callable, live tools without
                consent or policy, or called inside a running event loop with an async agent (use :meth:`areplay`).
        """
        _check_agent(agent)
        if inspect.iscoroutinefunction(agent) and _loop_running():
            raise ConfigError("replay() of an async agent inside a running event loop: use 'await Replayer.areplay(...)'")
        with self._prepared(run_id, model, tools, side_effects, allow_config_drift, snapshot,
                            fail_on_knowledge_change) as prep:
            if isinstance(prep, ReplayResult):
                return prep
            run, source, drift, unrep = prep
            error: BaseException | None = None
            try:
                outcome = agent(run)
                if inspect.isawaitable(outcome):
                    asyncio.run(_awaited(outcome))
            except ReplayStopped:
                pass
            except Exception as exc:  # noqa: BLE001 - the agent's own failure is part of what is compared
                error = exc
            return self._finish(run, source, drift, unrep, error)

    async def areplay(self, run_id: str, agent: Callable[[Any], Any], *, model: str = "record",
                      tools: str = "record", side_effects: bool = False, allow_config_drift: bool = False,
                      snapshot: Any = None, fail_on_knowledge_change: bool = False) -> ReplayResult:
        """Async form of :meth:`replay`, for callers already inside an event loop."""
        _check_agent(agent)
        with self._prepared(run_id, model, tools, side_effects, allow_config_drift, snapshot,
                            fail_on_knowledge_change) as prep:
            if isinstance(prep, ReplayResult):
                return prep
            run, source, drift, unrep = prep
            error: BaseException | None = None
            try:
                outcome = agent(run)
                if inspect.isawaitable(outcome):
                    await outcome
            except ReplayStopped:
                pass
            except Exception as exc:  # noqa: BLE001
                error = exc
            return self._finish(run, source, drift, unrep, error)

    # ----------------------------------------------------------------- setup

    @contextlib.contextmanager
    def _prepared(self, run_id: str, model: str, tools: str, side_effects: bool, allow_drift: bool,
                  snapshot: Any, strict_knowledge: bool = False) -> Iterator[Any]:
        from sealbox.snapshot import knowledge_file_changes

        from sealbox.policies import ALLOW_ALL
        from sealbox.recorder import REPLAYING, Recorder

        if model not in _MODES or tools not in _MODES:
            raise ConfigError(f"model and tools must be 'record' or 'live', not {model!r} / {tools!r}")
        if tools == "live" and not side_effects:
            raise ConfigError("tools='live' executes tools for real: pass side_effects=True (--side-effects)")
        if tools == "live" and self.policy is None:
            raise ConfigError("tools='live' needs a policy to decide each call (--policy FILE)")
        recorded = RecordedRun.read(self.store, run_id)
        current, drift = self._conditions(recorded, snapshot)
        _check_sub_run_snapshots(recorded)
        if tools == "live":
            current, drift = self._live_policy(recorded, current, drift)
        unrep = _unreplayable(recorded, model, tools)
        # the recorded snapshot stands for today's configuration: a knowledge file changed since would go unseen
        known = tuple(knowledge_file_changes(current)) if snapshot is None else ()
        if known and strict_knowledge:
            files = ", ".join(f"{k['uri']} ({k['change']})" for k in known[:8]) + (" …" if len(known) > 8 else "")
            div = Divergence("config_drift", None, f"{len(known)} knowledge file(s) of the recorded snapshot "
                             f"changed since the run was recorded: {files}; replay did not start "
                             "(without --fail-on-knowledge-change, or fail_on_knowledge_change=True, a warning)")
            yield ReplayResult(False, div, 0, None, drift, unrep, run_id, knowledge_changed=known)
            return
        if drift and not allow_drift:
            fields = ", ".join(d.path for d in drift[:8]) + (" …" if len(drift) > 8 else "")
            div = Divergence("config_drift", None, f"the configuration differs from the recorded snapshot in "
                             f"{len(drift)} field(s): {fields}; replay did not start "
                             "(--allow-config-drift, or allow_config_drift=True, to proceed)")
            yield ReplayResult(False, div, 0, None, drift, unrep, run_id, knowledge_changed=known)
            return
        started = recorded.started
        recorder = Recorder(self.store, policy=self.policy or ALLOW_ALL)
        labels = dict(started.get("labels") or {})
        run = recorder.run(agent=started["agent"], principal=recorded.principal, snapshot=current, labels=labels,
                           replay_of=run_id)
        source = ReplaySource(recorded, model=model, tools=tools)
        source.allow_drift, source.replay_run_id = allow_drift, run.run_id
        source.knowledge_changed = known
        run.replay = source
        run.__enter__()
        REPLAYING[run.run_id] = run  # a sub-agent's run naming it as parent, from any thread, is served too
        try:
            with _langchain_cache(source, run, model == "record"):
                yield run, source, drift, unrep
        except BaseException as exc:  # the agent's SystemExit / KeyboardInterrupt (_finish did not run): say so
            if run.replay is not None:  # its run.ended is not a step: never compared (nor stopped by a divergence)
                source.flush(run)
                run.replay = None
            run.__exit__(type(exc), exc, exc.__traceback__)
            raise
        else:
            run.__exit__(None, None, None)  # already ended by _finish; resets the current run
        finally:
            REPLAYING.pop(run.run_id, None)
            _put_back_integrations()

    def _live_policy(self, recorded: RecordedRun, current: Any,
                     drift: tuple[FieldDiff, ...]) -> tuple[Any, tuple[FieldDiff, ...]]:
        """With tools live the replay's policy decides each call: one other than the policy that decided the
        recorded run's calls (its ``run.started`` ``policy``) is a change of conditions, field ``policy``,
        as a changed snapshot field is; the replay run's snapshot, when it names a policy, names the one
        that decides. An imported run's calls were decided by no Sealbox policy: nothing to compare."""
        then = (recorded.started.get("policy") or {}).get("fingerprint") \
            if isinstance(recorded.started.get("policy"), dict) else None
        now = self.policy.fingerprint
        if then is None or then == now or recorded.started.get("imported"):
            return current, drift
        if isinstance(current, dict) and current.get("policy") is not None:
            current = {**current, "policy": now}
        if not any(d.path == "policy" for d in drift):
            drift = drift + (FieldDiff("policy", "changed", then, now),)
        return current, drift

    def _conditions(self, recorded: RecordedRun, snapshot: Any) -> tuple[Any, tuple[FieldDiff, ...]]:
        then = recorded.snapshot()
        if snapshot is None:
            return then, ()
        now = snapshot.to_dict() if hasattr(snapshot, "to_dict") else snapshot
        from sealbox.snapshot import snapshot_form_problems

        # a field left out or of the wrong type would be reported as drift (or, allowed, recorded as the
        # replay's snapshot), not as a mistake: refused as `sealbox replay --snapshot FILE` refuses it
        problems = snapshot_form_problems(now, like=then if then is not None else {})
        if problems:
            raise ConfigError(f"snapshot=: not a complete snapshot: {'; '.join(problems)} (Snapshot(...) or "
                              "`sealbox snapshot show --json FP` gives one)")
        if not hasattr(snapshot, "to_dict"):  # a stored form (`snapshot show --json`): a bare int beyond 2**53
            from sealbox.replay.keys import as_doubles  # in it is a whole-number float's digits (the record's too)

            now = as_doubles(now)
        return now, tuple(diff_snapshots(then or {}, now))

    # ----------------------------------------------------------------- the end

    def _finish(self, run: Any, source: ReplaySource, drift: tuple, unrep: tuple,
                error: BaseException | None) -> ReplayResult:
        divergence = source.divergence or source.missing()
        status = replay_status(error, source.recorded.ended)
        if divergence is None:
            divergence = ending_divergence(run, source.recorded, status, error)
        agent_error = {"type": type(error).__qualname__, "message": _message(error)} if error is not None else None
        result = ReplayResult(divergence is None, divergence, len(source.compared), run.run_id, drift, unrep,
                              source.recorded.run_id, agent_error, matched_steps(source),
                              tuple(source.sub_run_results()), getattr(source, "knowledge_changed", ()))
        if source.divergence is not None:
            status, error = "cancelled", None  # stopped by replay, not by the agent
        source.flush(run)
        run.replay = None
        run.end(status, error, verdict=result.verdict())
        return result


def recorded_ending(ended: Any) -> tuple[str | None, str]:
    """How a recorded run ended, as a replay's ending is compared with it: ``(status, words)``.

    ``ended`` is the recorded run's ``run.ended`` payload (a dict) or None. ``status`` is its ``status``
    (``ok``, ``error``, ``cancelled``; None without ``run.ended``), except for a run imported (``sealbox
    import``) while it was ``running`` or ``suspended`` at its source: the importer closed it with a
    ``run.ended`` of status ``ok``, but it never ended there, so ``status`` is the source's
    (:func:`sealbox.query.imported_run_status`, as ``runs list`` shows it), which no replay's ending
    equals. ``words`` says it in a message: ``ended ok``, ``was still running at its source (…)``."""
    from sealbox.query import imported_run_status

    payload = ended if isinstance(ended, dict) else {}
    at_source = imported_run_status(payload.get("imported"))
    if at_source is not None:
        return at_source, (f"was still {at_source} at its source (an imported run: it never ended there; its "
                           "run.ended, status ok, was written by sealbox import)")
    status = payload.get("status")
    return status, f"ended {status or 'without run.ended'}"


#: The recorded exception types of a run that was cancelled (``run.ended`` status ``cancelled``: the
#: recorder's ending for these, :meth:`sealbox.recorder.RunContext.__exit__`), by their last name.
CANCELLATIONS = frozenset({"KeyboardInterrupt", "CancelledError", "GeneratorExit"})


def replay_status(error: BaseException | None, recorded_ended: Any = None) -> str:
    """How a replay's agent ended: ``ok`` (no exception), ``cancelled`` (it was stopped by a
    cancellation served from the record: a recorded ``KeyboardInterrupt``, ``CancelledError`` or
    ``GeneratorExit`` that a tool raised, given back as a :class:`~sealbox.replay.values.ReplayedError`
    of that name, as the recorder ends a run so interrupted), else ``error``.

    ``recorded_ended``: the recorded run's ``run.ended`` payload (None: not known). A recorded
    ``CancelledError`` is either asyncio's (a BaseException: the recorder ended the run ``cancelled``) or
    ``concurrent.futures``' (an Exception, e.g. a cancelled Future's ``result()``: ended ``error``); the
    record keeps only the name, so it is a cancellation only when the recorded run ended ``cancelled``."""
    from sealbox.replay.values import ReplayedError

    if error is None:
        return "ok"
    name = str(getattr(error, "type", "")).rpartition(".")[2]
    if isinstance(error, ReplayedError) and name in CANCELLATIONS:
        if name == "CancelledError" and isinstance(recorded_ended, dict) and \
                recorded_ended.get("status") != "cancelled":
            return "error"  # concurrent.futures.CancelledError, an Exception: the run ended error
        return "cancelled"
    return "error"


def ending_divergence(run: Any, recorded: RecordedRun, status: str, error: BaseException | None) -> Divergence | None:
    """The ``outcome`` divergence of a replay (or sub-agent replay) run ``run`` that matched every step
    and ended ``status`` (:func:`replay_status`) with ``error``, against the recorded run: another
    status (:func:`outcome_divergence`), or both ended with an exception and it is another one
    (:func:`_other_error`, given what the recorded run's source kept of it); None when they ended alike."""
    divergence = outcome_divergence(recorded.ended, status, error)
    if divergence is None and error is not None:
        divergence = _other_error(run, (recorded.ended or {}).get("error"), error, status,
                                  recorded.started.get("imported"))
    return divergence


def outcome_divergence(ended: Any, status: str, error: BaseException | None) -> Divergence | None:
    """An ``outcome`` divergence when a replay that matched every step ended ``status`` (``ok`` /
    ``error``; ``error`` the agent's exception, or None) and the recorded run (its ``run.ended`` payload,
    or None) did not end so (:func:`recorded_ending`); None when the statuses are the same."""
    recorded, words = recorded_ending(ended)
    if recorded == status:
        return None
    why = f": {type(error).__name__}: {_message(error)}" if error is not None else ""
    return Divergence("outcome", None, f"every step matched, but the recorded run {words} and the replay "
                      f"ended {status}{why}")


#: A memory address as CPython prints it in a repr (``at 0x7f3a…``): never the same in two runs.
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,16}\b")


def _other_error(run: Any, recorded: Any, error: BaseException, status: str = "error",
                 imported: Any = None) -> Divergence | None:
    """An ``outcome`` divergence when the agent raised another exception than the one the recorded run
    ended with (its type, or its message as the store keeps it: scrubbed and redacted as it was then);
    None when they are the same, or when the record has no exception to compare with.

    ``imported`` is the recorded run's ``run.started`` ``imported`` facts (None: recorded in a store).
    An imported run's error is what its source said: compared only when the source is a Sealbox OTLP
    export (its ``error.type`` is the exception's type; any other source's error is its own words, such
    as a SWE-agent exit status), and then by type alone when the message was not exported
    (``sealbox export --otlp`` without ``--otlp-content``)."""
    from sealbox.interop.importers.sealbox_otlp import MESSAGE_NOT_EXPORTED

    if not isinstance(recorded, dict):  # e.g. a run imported cancelled: its source gave no exception
        return None
    if imported is not None:
        ids = imported.get("original_ids") if isinstance(imported, dict) else None
        if not (isinstance(ids, dict) and isinstance(ids.get("sealbox_run_id"), str)):
            return None
    now = run._error_dict(error, run._run_secrets())
    redactor = getattr(run.store, "redactor", None)
    stored = redactor.apply_error(now) if redactor is not None else now
    then = recorded
    if imported is not None and then.get("message") == MESSAGE_NOT_EXPORTED:  # not known: the type only
        if then.get("type") == stored.get("type"):
            return None
        return Divergence("outcome", None, f"every step matched and both runs ended {status}, but the recorded "
                          f"run raised {then.get('type')} (its message was not exported) and the replay raised "
                          f"{stored.get('type')}: {stored.get('message')} (differs in type)")
    secrets = run._run_secrets()
    if isinstance(then.get("message"), str) and secrets and then.get("message") != stored.get("message") \
            and redactor is not None and redactor.policy.mode == "redacted":
        # a run recorded before runs scrubbed every value they redacted (2026-12-03) holds such a value
        # in clear where the replay's message holds its marker: the same string, the same HMAC
        then = {**then, "message": redactor.scrub_values(then["message"], secrets)}
    if (then.get("type"), then.get("message")) == (stored.get("type"), stored.get("message")):
        return None
    if then.get("type") == stored.get("type") and isinstance(then.get("message"), str) \
            and isinstance(stored.get("message"), str) \
            and _ADDRESS.sub("0x…", then["message"]) == _ADDRESS.sub("0x…", stored["message"]):
        return None  # the same message but for an object's address (repr: <Foo object at 0x7f…>), new each run
    if then.get("type") == stored.get("type") and isinstance(then.get("message"), str) \
            and isinstance(stored.get("message"), str) and reordered_text(then["message"], stored["message"]):
        return None  # str() of a dict served from the record, its keys sorted (docs/replay.md, "Serialized dicts")
    fields = ["type"] if then.get("type") != stored.get("type") else []
    if then.get("message") != stored.get("message"):
        fields.append("message")
    return Divergence("outcome", None, f"every step matched and both runs ended {status}, but the recorded run "
                      f"raised {then.get('type')}: {then.get('message')} and the replay raised "
                      f"{stored.get('type')}: {stored.get('message')} (differs in {', '.join(fields)})")


def matched_steps(source: ReplaySource) -> tuple[str, ...]:
    """The steps ``source`` compared and found matching, in step order."""
    try:
        return tuple(sorted(source.compared, key=step_order))
    except ValueError:  # a step that is no dotted number (never written by a recorder)
        return tuple(sorted(source.compared))


def _message(error: BaseException) -> str:
    """``str(error)``, or a placeholder when the agent's exception cannot be turned into text."""
    from sealbox.recorder import exception_message

    return exception_message(error)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _unreplayable(recorded: RecordedRun, model: str, tools: str) -> tuple[UnreplayableStep, ...]:
    out = []
    for rec in recorded.ordered():
        served = (rec.key.kind == "model.call" and model == "record") or (rec.key.kind == "tool.call" and tools == "record")
        if served and rec.unreplayable:
            out.append(UnreplayableStep(rec.key.step, rec.key.kind, rec.key.name, rec.unreplayable))
    return tuple(out)


def _put_back_integrations() -> None:
    """What an integration patched for replays while one ran (the Agents SDK's MCP servers joined to a
    replay run, docs/integrations.md), put back once no replay runs in the process."""
    import sys

    agents = sys.modules.get("sealbox.integrations.openai_agents")
    if agents is not None:
        agents.release_mcp_replay()


@contextlib.contextmanager
def _langchain_cache(source: ReplaySource, run: Any, serve: bool) -> Iterator[None]:
    """While a replay runs, LangChain chat models are answered from the record (LangChain's cache hook)."""
    import importlib.util
    import sys

    if not serve or ("langchain_core" not in sys.modules and importlib.util.find_spec("langchain_core") is None):
        yield
        return
    from sealbox.replay.langchain import serving_from_record

    with serving_from_record(source, run):
        yield


def _check_agent(agent: Any) -> None:
    """Refuse an ``agent`` that cannot be called (a ``"module:function"`` string, None) before the replay
    records anything: it would otherwise be a replay run that "raised TypeError"."""
    if not callable(agent):
        raise ConfigError(f"agent: {agent!r} is not callable: give the agent function itself, called as agent(run)")
