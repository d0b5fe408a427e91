"""Approvals on replay: served as they were answered, never asked again."""

from __future__ import annotations

import threading
import time

import pytest

import sealbox
from sealbox.approvals import answer, list_approvals
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied
from sealbox.replay import Replayer

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: rest
    effect: allow
"""


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def answer_when_asked(store, key, decision):
    def work():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pending = list_approvals(store, pending=True)
            if pending:
                answer(store, pending[0].approval_id, decision, "reviewed", key)
                return
            time.sleep(0.02)
    t = threading.Thread(target=work)
    t.start()
    return t


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_answered_approval_is_served_as_answered_and_never_asked_again(store, tmp_path, decision):
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    ran: list[str] = []

    def agent(run):
        try:
            out = run.call_tool("db", "write_query", {"sql": "UPDATE t"}, lambda sql: ran.append(sql) or "1 row")
        except ToolDenied as denied:
            out = f"denied: {denied.decision.reason_code}"
        run.note(out)

    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="block", approval_poll=0.02)
    t = answer_when_asked(store, key, decision)
    with rec.run(agent="bot") as run:
        agent(run)
    t.join()
    assert len(ran) == (1 if decision == "approve" else 0)

    result = Replayer(store).replay(run.run_id, agent)

    assert result.reproduced, result.divergence
    assert len(ran) == (1 if decision == "approve" else 0)  # the tool did not run again
    kinds = [e.kind for e in store.read_run(result.new_run_id)]
    assert "approval.requested" not in kinds and list_approvals(store, pending=True) == []
    served = [e.payload for e in store.read_run(result.new_run_id) if e.kind == "policy.decision"][0]
    assert served["effect"] == "require_approval" and served["rule"] == "writes-need-ops"
    assert served["replayed"]["approval"] == ("approved" if decision == "approve" else "denied")
    note = [e.payload["text"] for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert note == (["1 row"] if decision == "approve" else ["denied: approval_denied"])


def test_a_denied_approval_is_raised_again_with_the_reason_the_recorded_run_got(store, tmp_path):
    """The replayed ToolDenied gave the rule's request ("rule 'writes-need-ops' requires approval for
    the call") as the reason of an approval_denied: an agent that reports the reason diverged."""
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path

    def agent(run):
        try:
            run.call_tool("db", "write_query", {"sql": "DROP t"}, lambda sql: "done")
        except ToolDenied as denied:
            run.note(f"{denied.decision.reason_code}: {denied.decision.reason}")

    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="block", approval_poll=0.02)
    t = answer_when_asked(store, key, "deny")
    with rec.run(agent="bot") as run:
        agent(run)
    t.join()
    [aid] = [a.approval_id for a in list_approvals(store)]

    result = Replayer(store).replay(run.run_id, agent)

    assert result.reproduced, result.divergence
    notes = [e.payload["text"] for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert notes == [f"approval_denied: approval {aid} denied by alice: reviewed"]
