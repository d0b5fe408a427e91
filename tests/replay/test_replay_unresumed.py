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


def test_the_summary_counts_the_steps_matched_before_the_waiting_call(store, tmp_path, monkeypatch):
    """The waiting call's key matches the record, so it is counted in steps_compared; the summary
    line counts the steps matched *before* it, as `sealbox replay` prints it."""
    from click.testing import CliRunner

    from sealbox.cli.main import cli

    def reads_then_write(run):
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "1 row")
        run.call_tool("db", "read_query", {"sql": "SELECT 2"}, lambda sql: "2 rows")
        agent(run)

    rec = Recorder(store, policy=Policy.from_text(POLICY.replace("QUORUM", "1")), approvals="suspend")
    with pytest.raises(ApprovalPending):
        with rec.run(agent="bot", principal="agent:bot") as run:
            reads_then_write(run)

    result = Replayer(store).replay(run.run_id, reads_then_write)

    assert (result.divergence.kind, result.divergence.step) == ("pending_approval", "4")
    assert (result.steps_compared, result.matched_steps) == (3, ("2", "3", "4"))
    assert result.head() == "NOT reproduced: diverged at step 4 (pending_approval); 2 step(s) matched before it"

    # the command prints that line, with the replay run
    module = tmp_path / "unresumed_agent.py"
    module.write_text("def agent(run):\n"
                      "    for n in (1, 2):\n"
                      "        run.call_tool('db', 'read_query', {'sql': f'SELECT {n}'}, lambda sql: 'rows')\n"
                      "    run.call_tool('db', 'write_query', {'sql': 'DELETE FROM t'}, lambda sql: '1 row')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = CliRunner().invoke(cli, ["replay", "-s", str(store.path), run.run_id, "--agent", "unresumed_agent:agent"])
    assert out.exit_code == 1, out.output
    first, second = out.output.splitlines()[:2]
    assert first.startswith("NOT reproduced: diverged at step 4 (pending_approval); 2 step(s) matched before it; "
                            "replay run ")
    assert second == "diverged at step 4: pending_approval"


def test_steps_matched_after_the_divergent_one_are_counted_apart():
    """Parallel calls: a sibling that completed first may match after the divergent step in step order."""
    from sealbox.replay.divergence import Divergence, divergence_head

    d = Divergence("mismatch", "2.2", "step 2.2: …")
    assert divergence_head(d, {"2", "2.1", "2.3"}) == "diverged at step 2.2 (mismatch); 2 step(s) matched before it " \
                                                      "and 1 after it"
    assert divergence_head(d, {"2", "2.1"}) == "diverged at step 2.2 (mismatch); 2 step(s) matched before it"
    assert divergence_head(Divergence("outcome", None, "…"), {"2", "3"}) == "diverged (outcome); 2 step(s) matched"
    assert divergence_head(Divergence("extra", "5", "…"), {"2", "3", "4"}, unit="call", number=lambda s: int(s) - 1) \
        == "diverged at call 4 (extra); 3 call(s) matched before it"


def test_the_approval_read_is_the_recorded_runs_own_when_another_run_holds_the_same_id(store, tmp_path):
    """A request id also written in another, earlier run (copied): the message is about this run's
    request (still waiting), not the other run's (approved by erin)."""
    from sealbox import EventDraft

    first, approval_id = suspended(store)
    answer(store, approval_id, "approve", "reviewed", erin(store, tmp_path))
    second = "run-copy-of-first"
    for e in store.read_run(first):
        if e.kind in ("run.started", "snapshot.taken", "tool.call", "policy.decision", "approval.requested",
                      "run.suspended"):
            store.append(EventDraft(e.kind, e.payload, run_id=second, principal=e.principal, step=e.step))

    d = Replayer(store).replay(second, agent).divergence

    assert (d.kind, d.step, d.message) == (
        "pending_approval", "2",
        f"step 2: the recorded call db/write_query was still waiting for an approval (approval {approval_id}); "
        "replay ends here")
