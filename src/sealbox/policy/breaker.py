"""Circuit breaker per upstream tool: a pure state machine with an injected clock.

States, per ``(server, tool)``:

* ``closed``: calls run; ``threshold`` consecutive failures (errors or timeouts) open it. A call
  that never reached the tool (its arguments refused: :meth:`CircuitBreaker.record_not_run`) is
  not a failure.
* ``open``: calls are denied at once (``breaker_open``) until ``cooldown_s`` has passed.
* ``half_open``: after the cool-down, exactly one probe call is let through; its
  success closes the breaker, its failure opens it again for a new cool-down. Only the probe's
  outcome moves a half-open breaker: the ``record_*`` methods take the call's ``ticket``
  (:attr:`BreakerCheck.ticket`), and the outcome of a call holding no ticket, or a stale one (a call
  let through while the breaker was closed, one held for an approval and run once approved, a
  probe given back when another call has probed since), is not counted while the breaker is half-open.

:meth:`CircuitBreaker.server_down` opens the breakers of every known tool of a
server (and of tools of that server first seen during the cool-down). Every state
change is passed to ``on_change`` as a :class:`BreakerChange`, so the recorder can
write a ``breaker.changed`` event, and also returned by the method that caused it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Literal

from sealbox.policy.model import Decision

__all__ = ["CircuitBreaker", "BreakerChange", "BreakerCheck", "breaker_open_decision", "State"]

State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class BreakerChange:
    """One state change (the payload of ``breaker.changed``).

    Attributes:
        server / tool: the upstream tool.
        old / new: states before and after.
        reason: ``failures``, ``cooldown_elapsed``, ``probe_succeeded``, ``probe_failed`` or ``server_down``.
        failures: consecutive failures counted when it changed.
    """

    server: str
    tool: str
    old: State
    new: State
    reason: str
    failures: int

    def to_payload(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"server": self.server, "tool": self.tool, "from": self.old, "to": self.new,
                "reason": self.reason, "failures": self.failures}  # fmt: skip


@dataclass(frozen=True)
class BreakerCheck:
    """Answer of :meth:`CircuitBreaker.before_call`.

    Attributes:
        allowed: the call may run.
        state: the breaker's state after the check.
        probe: this call is the single half-open probe.
        retry_in_s: seconds until a probe will be allowed, when denied.
        change: the state change this check caused (open → half_open), if any.
        ticket: the probe's ticket (an int above 0) when ``probe``, else 0: pass it to the ``record_*``
            method of the call's outcome (the probe's outcome alone moves a half-open breaker).
    """

    allowed: bool
    state: State
    probe: bool = False
    retry_in_s: float | None = None
    change: BreakerChange | None = None
    ticket: int = 0


@dataclass
class _Slot:
    state: State = "closed"
    failures: int = 0
    opened_at: float = 0.0
    probing: bool = False
    ticket: int = 0  # the probe's ticket while probing


class CircuitBreaker:
    """Breakers for every (server, tool) seen.

    A breaker that holds nothing (closed, no failure counted) is dropped once more than
    :attr:`max_slots` are kept (the gateway records each ``resources/read`` URI as its own tool:
    a client reading distinct URIs would otherwise grow them without bound); so are closed ones
    counting failures, those that failed longest ago first, when they alone would keep more than
    half of :attr:`max_slots` (distinct URIs that each failed). A dropped tool is as one never seen
    (closed, no failure counted; a :meth:`server_down` of its server opens it at its next call).
    Open and half-open breakers are never dropped.

    Args:
        threshold: consecutive failures that open a breaker (>= 1).
        cooldown_s: seconds a breaker stays open before one probe is allowed.
        clock: monotonic clock in seconds (inject a fake one in tests).
        on_change: called with each :class:`BreakerChange`, under no lock held by the caller.
    """

    def __init__(
        self,
        threshold: int = 5,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerChange], None] | None = None,
    ) -> None:
        if threshold < 1 or cooldown_s < 0:
            raise ValueError("threshold must be >= 1 and cooldown_s >= 0")
        self.threshold, self.cooldown_s, self.clock, self.on_change = threshold, cooldown_s, clock, on_change
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._prune_at = 0  # see _prune
        self._down: dict[str, float] = {}
        self._lock = threading.Lock()
        self._tickets = 0  # the last probe ticket given

    #: breakers kept before those that hold nothing are dropped (then again at twice those left, at least this)
    max_slots = 10_000

    def state(self, server: str, tool: str) -> State:
        """Current state of one breaker (``closed`` if never seen)."""
        slot = self._slots.get((server, tool))
        return slot.state if slot else "closed"

    def _slot(self, server: str, tool: str, changes: list[BreakerChange]) -> _Slot:
        slot = self._slots.get((server, tool))
        if slot is None:
            if len(self._slots) >= max(self._prune_at, self.max_slots):
                self._prune()
            slot = self._slots[(server, tool)] = _Slot()
            down_at = self._down.get(server)
            if down_at is not None and self.clock() - down_at < self.cooldown_s:
                self._move(server, tool, slot, "open", "server_down", changes, opened_at=down_at)
        return slot

    def _prune(self) -> None:
        """Drop the breakers that hold nothing (closed, no failure counted, no probe); under the lock. When
        the closed ones counting failures still fill :attr:`max_slots` (a failing read of each of many URIs),
        those that failed longest ago are dropped too, down to half of it. Open and half-open ones are kept."""
        kept = {key: slot for key, slot in self._slots.items()
                if slot.state != "closed" or slot.failures or slot.probing}
        counting = [key for key, slot in kept.items() if slot.state == "closed"]  # least recently failed first
        for key in counting[:max(0, len(counting) - self.max_slots // 2)]:
            del kept[key]
        self._slots = kept
        self._prune_at = 2 * len(self._slots)  # many open breakers: not a scan of them all at every new tool

    def _move(self, server: str, tool: str, slot: _Slot, new: State, reason: str,
              changes: list[BreakerChange], opened_at: float | None = None) -> None:  # fmt: skip
        changes.append(BreakerChange(server, tool, slot.state, new, reason, slot.failures))
        slot.state = new
        if new == "open":
            slot.opened_at = self.clock() if opened_at is None else opened_at
            slot.probing = False
        elif new == "closed":
            slot.failures, slot.probing = 0, False

    def _emit(self, changes: list[BreakerChange]) -> None:
        if self.on_change:
            for change in changes:
                self.on_change(change)

    def before_call(self, server: str, tool: str) -> BreakerCheck:
        """May a call to ``server``/``tool`` run now? Consumes the half-open probe if it is let through."""
        changes: list[BreakerChange] = []
        with self._lock:
            slot = self._slot(server, tool, changes)
            if slot.state == "open":
                waited = self.clock() - slot.opened_at
                if waited < self.cooldown_s:
                    check = BreakerCheck(False, "open", retry_in_s=self.cooldown_s - waited)
                else:
                    self._move(server, tool, slot, "half_open", "cooldown_elapsed", changes)
                    check = BreakerCheck(True, "half_open", probe=True, change=changes[-1],
                                         ticket=self._take_probe(slot))
            elif slot.state == "half_open":
                if slot.probing:
                    check = BreakerCheck(False, "half_open", retry_in_s=0.0)
                else:
                    check = BreakerCheck(True, "half_open", probe=True, ticket=self._take_probe(slot))
            else:
                check = BreakerCheck(True, "closed")
        self._emit(changes)
        return check

    def _take_probe(self, slot: _Slot) -> int:
        """Under the lock: ``slot``'s probe is taken; its new ticket."""
        self._tickets += 1
        slot.probing, slot.ticket = True, self._tickets
        return self._tickets

    @staticmethod
    def _is_probe(slot: _Slot, ticket: int | None) -> bool:
        """Under the lock: is the call holding ``ticket`` the half-open ``slot``'s probe, the last one
        let through (even if it gave the probe back: :meth:`record_not_run`; no call probed since)?
        ``None`` (a caller that does not say): taken to be."""
        return ticket is None or (ticket != 0 and ticket == slot.ticket)

    def record_success(self, server: str, tool: str, ticket: int | None = None) -> BreakerChange | None:
        """A call finished without error: resets the failure count; a successful probe closes.

        ``ticket``: the call's :attr:`BreakerCheck.ticket` (0: it took no probe); a half-open breaker
        is moved only by the call holding the ticket of its last probe, even one that gave the probe
        back early (:meth:`record_not_run`) while no call probed since; any other call's outcome is not
        counted while it is half-open. ``None``: the call is taken to be the probe (the behaviour before tickets)."""
        changes: list[BreakerChange] = []
        with self._lock:
            slot = self._slot(server, tool, changes)
            if slot.state == "half_open" and self._is_probe(slot, ticket):  # another call's: not counted
                self._move(server, tool, slot, "closed", "probe_succeeded", changes)
                self._down.pop(server, None)
            elif slot.state == "closed":
                slot.failures = 0
        self._emit(changes)
        return changes[-1] if changes else None

    def record_failure(self, server: str, tool: str, kind: str = "error",
                       ticket: int | None = None) -> BreakerChange | None:
        """A call failed (``kind``: ``"error"`` or ``"timeout"``); may open the breaker. ``ticket``: as
        for :meth:`record_success` (a failure of a call not holding the probe's ticket is not counted
        while the breaker is half-open). Raises ValueError for another ``kind``."""
        if kind not in ("error", "timeout"):
            raise ValueError(f"kind must be 'error' or 'timeout', not {kind!r}")
        changes: list[BreakerChange] = []
        with self._lock:
            slot = self._slot(server, tool, changes)
            if slot.state == "half_open" and not self._is_probe(slot, ticket):
                return None  # not the probe: not counted (an existing slot: _slot changed nothing)
            if slot.state == "closed":  # the most recently failed last: _prune drops the others first
                self._slots[(server, tool)] = self._slots.pop((server, tool))
            slot.failures += 1
            if slot.state == "half_open":
                self._move(server, tool, slot, "open", "probe_failed", changes)
            elif slot.state == "closed" and slot.failures >= self.threshold:
                self._move(server, tool, slot, "open", "failures", changes)
        self._emit(changes)
        return changes[-1] if changes else None

    def record_not_run(self, server: str, tool: str, ticket: int | None = None) -> None:
        """A call let through by :meth:`before_call` did not reach the tool after all (refused before it
        ran: arguments that do not bind or fail the input schema), or ended in a way that says nothing
        of the tool's health: neither a success nor a failure. The failure count is left as it is, and a
        half-open breaker's probe taken by the call is given back (the next call probes). ``ticket``: as
        for :meth:`record_success` (only the call holding the probe's ticket gives it back; ``None``:
        whichever call holds it). Also how a probe whose outcome will say nothing of the tool's health
        is given back before it ends (the gateway: its upstream asked the client something)."""
        with self._lock:
            slot = self._slots.get((server, tool))
            if slot is not None and slot.state == "half_open" and self._is_probe(slot, ticket):
                slot.probing = False

    def undo(self, changes: list[BreakerChange]) -> None:
        """Take back changes :meth:`before_call` made whose ``breaker.changed`` could not be recorded (the
        write carrying them failed; nothing ran), newest first, so that the breaker is in the state its record
        last shows: an ``open`` → ``half_open`` goes back to ``open``, its cool-down still over (the next call
        moves it again, and that change is recorded with that call); a tool first seen during a
        :meth:`server_down` cool-down, opened by it, is dropped (as never seen: its next call opens it again).
        A change is taken back only while the breaker is still in the state it moved to; other changes are
        left as they are. ``on_change`` is not called (nothing the record holds changes)."""
        with self._lock:
            for change in reversed(changes):
                key = (change.server, change.tool)
                slot = self._slots.get(key)
                if slot is None or slot.state != change.new:
                    continue
                if change.old == "open" and change.new == "half_open":
                    slot.state, slot.probing = "open", False
                elif change.old == "closed" and change.new == "open" and change.reason == "server_down" \
                        and not slot.failures:
                    del self._slots[key]

    def record_unreachable(self, server: str, tool: str, ticket: int | None = None) -> list[BreakerChange]:
        """A call of ``tool`` failed because ``server`` could not be reached (a ``ConnectionError``):
        :meth:`server_down`. A subclass may tell a call that never reached the server for another reason
        (``ticket``: the call's half-open probe, to give back with :meth:`record_not_run`)."""
        return self.server_down(server)

    def server_down(self, server: str) -> list[BreakerChange]:
        """The upstream server is unreachable: open every known tool of it (and new ones, for the cool-down)."""
        changes: list[BreakerChange] = []
        with self._lock:
            self._down[server] = self.clock()
            for (srv, tool), slot in sorted(self._slots.items()):
                if srv == server and slot.state != "open":
                    self._move(srv, tool, slot, "open", "server_down", changes)
        self._emit(changes)
        return changes


def breaker_open_decision(check: BreakerCheck, server: str, tool: str, policy_fingerprint: str) -> Decision:
    """The deny :class:`Decision` to record when :meth:`CircuitBreaker.before_call` refuses a call."""
    wait = f"; next probe in {check.retry_in_s:.1f} s" if check.retry_in_s else ""
    return Decision(
        effect="deny",
        reason_code="breaker_open",
        rule=None,
        reason=f"circuit breaker for {server}/{tool} is {check.state}{wait}",
        policy_fingerprint=policy_fingerprint,
    )
