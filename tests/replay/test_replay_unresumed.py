"""Replay of a run suspended for an approval that was never resumed: the divergence says what became
of the approval (still waiting, approved or denied and by whom), not only "waiting"."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: QUORUM, expires: 1h}
  - id: rest
    effect: allow
"""


def agent(run):
    run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: "1 row")


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def suspended(store, quorum: int = 1) -> tuple[str, str]:
    """A run suspended on one approval request: (run id, approval id)."""
    rec = Recorder(store, policy=Policy.from_text(POLICY.replace("QUORUM", str(quorum))), approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot", principal="agent:bot") as run:
            agent(run)
    return run.run_id, pending.value.approval_id


def erin(store, tmp_path):
    # the store's first admin (admins may answer approvals); it needs no other admin's signature
    return add_identity(store, "erin", "admin", ["ops"], key_path=tmp_path / "erin.key").key_path


@pytest.mark.parametrize("decision, said", [("approve", "approved"), ("deny", "denied")])
def test_an_answered_but_never_resumed_approval_says_so(store, tmp_path, decision, said):
    run_id, approval_id = suspended(store)
    answer(store, approval_id, decision, "reviewed", erin(store, tmp_path))

    result = Replayer(store).replay(run_id, agent)

    d = result.divergence
    assert (result.reproduced, d.kind, d.step) == (False, "pending_approval", "2")
    assert d.message == (f"step 2: the recorded call db/write_query was {said} by erin (approval {approval_id}), "
                         "but the run was never resumed past it; replay ends here")
    verdict = [e.payload for e in store.read_run(result.new_run_id) if e.kind == "run.ended"][0]["verdict"]
    assert verdict["divergence"]["message"] == d.message


def test_an_unanswered_approval_is_still_waiting(store, tmp_path):
    run_id, approval_id = suspended(store, quorum=2)
    answer(store, approval_id, "approve", "one of two", erin(store, tmp_path))  # quorum 2: still pending

    d = Replayer(store).replay(run_id, agent).divergence

    assert (d.kind, d.step, d.message) == (
        "pending_approval", "2",
        f"step 2: the recorded call db/write_query was still waiting for an approval (approval {approval_id}); "
        "replay ends here")
