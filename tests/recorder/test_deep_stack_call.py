"""A tool call made within a few dozen frames of the recursion limit, under ALLOW_ALL, was denied
``guardrail_error`` ("the guardrail failed: RecursionError: maximum recursion depth exceeded"): the
record and the agent's ToolDenied blamed a guardrail for Sealbox's own stack use (a few frames deeper
the caller got RecordingError instead). Sealbox's own RecursionError now fails the call closed the
same way at every depth: RecordingError naming how deep the call was made, nothing written, the tool
not run. Real Recorder, real SQLite store."""

from __future__ import annotations

import sys

import pytest

import sealbox
from sealbox import RecordingError, ToolDenied
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def depth() -> int:
    frame, n = sys._getframe(1), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def test_a_call_near_the_recursion_limit_is_refused_unrecorded_never_denied(store):
    recorder = Recorder(store, policy=ALLOW_ALL)
    ran: list[int] = []
    outcomes: dict[int, str] = {}
    limit = sys.getrecursionlimit()
    for room in range(80, 5, -1):  # frames left above the caller; each depth the first call of its run
        with recorder.run(agent="bot") as run:
            def call(room=room, run=run):
                here = depth()
                sys.setrecursionlimit(here + room)
                try:
                    return run.call_tool("s", "t", {"room": room}, lambda room: ran.append(room) or room)
                finally:
                    sys.setrecursionlimit(limit)
            try:
                assert call() == room
                outcomes[room] = "ok"
            except RecursionError:  # too deep for Sealbox to do anything, not even to refuse: nothing written
                outcomes[room] = "too deep"
            except ToolDenied as denied:
                outcomes[room] = f"denied {denied.decision.reason_code}: {denied.decision.reason}"
            except RecordingError as refused:
                outcomes[room] = "refused"
                assert str(refused).startswith("could not record: Sealbox ran out of stack recording this "
                                               "(RecursionError): it was called ")
                assert str(refused).endswith("call it from a shallower stack (or raise sys.setrecursionlimit)")
                assert room not in ran
                assert [e.kind for e in store.read_run(run.run_id)] == ["run.started"]
        kinds = [e.kind for e in store.read_run(run.run_id)]
        if outcomes[room] == "too deep":
            assert kinds == ["run.started", "run.ended"] and room not in ran
            break
        assert kinds == (["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
                         if outcomes[room] == "ok" else ["run.started", "run.ended"]), (room, outcomes[room])
    assert set(outcomes.values()) <= {"ok", "refused", "too deep"}, outcomes  # never denied
    assert list(outcomes.values()).count("refused") >= 5, outcomes
    assert sorted(ran) == sorted(r for r, o in outcomes.items() if o == "ok")
    assert sealbox.verify_store(store).ok


def test_the_message_names_the_caller_s_depth(store):
    limit = sys.getrecursionlimit()
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        here = depth()
        sys.setrecursionlimit(here + 20)
        try:
            with pytest.raises(RecordingError) as refused:
                run.call_tool("s", "t", None, lambda: 1)
        finally:
            sys.setrecursionlimit(limit)
    assert f"it was called {here} frames deep, the recursion limit being {here + 20};" in str(refused.value)


CONDITIONED = """
version: 1
rules:
  - id: small-rooms
    when: 'call.arguments.room < 1000'
    expensive: true
    effect: allow
"""


def test_a_call_near_the_recursion_limit_under_a_condition_is_refused_never_denied(store):
    """The stack running out while a rule's CEL condition is evaluated is the caller's stack depth, not
    the rule's failure: the call is refused (RecordingError) as under ALLOW_ALL, never denied
    guardrail_error naming the rule (it was, some 20-30 frames below the limit: 'rule 'small-rooms':
    expensive condition could not run: RecursionError: maximum recursion depth exceeded while pickling
    an object', the inputs being pickled for the condition worker)."""
    from sealbox.policy import Policy

    recorder = Recorder(store, policy=Policy.from_text(CONDITIONED))
    ran: list[int] = []
    outcomes: dict[int, str] = {}
    limit = sys.getrecursionlimit()
    for room in range(120, 5, -1):
        with recorder.run(agent="bot") as run:
            def call(room=room, run=run):
                here = depth()
                sys.setrecursionlimit(here + room)
                try:
                    return run.call_tool("s", "t", {"room": room}, lambda room: ran.append(room) or room)
                finally:
                    sys.setrecursionlimit(limit)
            try:
                assert call() == room
                outcomes[room] = "ok"
            except RecursionError:
                outcomes[room] = "too deep"
            except ToolDenied as denied:
                outcomes[room] = f"denied {denied.decision.reason_code}: {denied.decision.reason}"
            except RecordingError as refused:
                outcomes[room] = "refused"
                assert str(refused).startswith("could not record: Sealbox ran out of stack recording this "
                                               "(RecursionError): it was called ")
                assert room not in ran
                assert [e.kind for e in store.read_run(run.run_id)] == ["run.started"]
        kinds = [e.kind for e in store.read_run(run.run_id)]
        if outcomes[room] == "too deep":
            assert kinds == ["run.started", "run.ended"] and room not in ran
            break
        assert kinds == (["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
                         if outcomes[room] == "ok" else ["run.started", "run.ended"]), (room, outcomes[room])
    assert set(outcomes.values()) <= {"ok", "refused", "too deep"}, outcomes  # never denied
    assert list(outcomes.values()).count("refused") >= 5, outcomes
    assert sorted(ran) == sorted(r for r, o in outcomes.items() if o == "ok")
    assert sealbox.verify_store(store).ok
