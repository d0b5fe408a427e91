"""``Recorder.continue_run`` on a run that waits for an approval let the agent carry on around it.

An agent suspended on a ``require_approval`` call (``run.suspended`` written) could attach again with
``rec.continue_run(run_id)``, make allowed calls and leave the block: ``run.ended`` was written and the
pending request became ``closed`` without anyone deciding it. ``continue_run`` now refuses such a run with
``RunSuspendedError`` (naming the request and ``recorder.resume``), nothing written; ``Recorder.resume``
continues it once answered, and ``Recorder.cancel`` ends it (``run.ended`` ``cancelled``) on purpose."""

from __future__ import annotations

import pytest
from approval_helpers import kinds, policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox.approvals import ApprovalPending, RunSuspendedError, answer, list_approvals
from sealbox.identities import add_identity
from sealbox.recorder import Recorder


def _suspended(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: pytest.fail("ran unapproved"))
    return run.run_id, pending.value.approval_id


def test_continue_run_refuses_a_run_waiting_for_an_approval(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    run_id, aid = _suspended(store)
    before = kinds(store, run_id)
    rec = Recorder(store, policy=policy())
    with pytest.raises(RunSuspendedError) as refused:
        rec.continue_run(run_id)
    assert (refused.value.run_id, refused.value.approval_ids) == (run_id, (aid,))
    assert str(refused.value) == (f"run {run_id} is suspended; it waits for approval {aid}: resume it with "
                                  f"recorder.resume({run_id!r}) once answered; nothing was recorded or run")
    assert kinds(store, run_id) == before == ["run.started", "tool.call", "policy.decision", "approval.requested",
                                              "run.suspended"]
    assert store.get_run(run_id)["status"] == "suspended"
    [state] = list_approvals(store, run_id=run_id)
    assert state.status == "pending"
    # still refused once answered: the approved call is carried out by resume, not skipped over
    answer(store, aid, "approve", "ok", key)
    with pytest.raises(RunSuspendedError):
        rec.continue_run(run_id)
    with rec.resume(run_id, tools={("db", "write_query"): lambda sql: f"ran: {sql}"}) as run:
        assert run.resumed_calls[0].value() == "ran: DELETE FROM t"
    assert kinds(store, run_id)[-3:] == ["run.resumed", "tool.result", "run.ended"]


def test_a_run_resumed_elsewhere_can_be_continued(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    run_id, aid = _suspended(store)
    answer(store, aid, "approve", "ok", key)
    rec = Recorder(store, policy=policy())
    resumed = rec.resume(run_id, tools={("db", "write_query"): lambda sql: sql})
    resumed._release_lease()  # this "process" resumed it and stopped, without ending the run
    resumed._release_live()
    with rec.continue_run(run_id) as run:  # nothing waits any more: carrying on is fine
        assert run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "one") == "one"
    assert kinds(store, run_id)[5:] == ["approval.answered", "run.resumed", "tool.result", "tool.call",
                                        "policy.decision", "tool.result", "run.ended"]
    assert store.read_run(run_id)[-1].payload["status"] == "ok"


def test_cancel_ends_a_run_waiting_for_an_approval_on_purpose(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    run_id, aid = _suspended(store)
    Recorder(store, policy=policy()).cancel(run_id)
    assert kinds(store, run_id)[-2:] == ["run.suspended", "run.ended"]
    assert store.read_run(run_id)[-1].payload["status"] == "cancelled"
    [state] = list_approvals(store, run_id=run_id)
    assert state.status == "closed"


def test_cancelling_a_run_that_has_ended_says_it_cannot_be_cancelled(backend, tmp_path):  # noqa: F811
    """Recorder.cancel of a run already ended said 'run R has ended; it cannot be continued': the caller asked to
    cancel it, not to continue it."""
    from sealbox.errors import RecordingError

    name, init, _ = backend
    store = init(tmp_path / "store")
    run_id, _ = _suspended(store)
    rec = Recorder(store, policy=policy())
    rec.cancel(run_id)
    with pytest.raises(RecordingError) as again:
        rec.cancel(run_id)
    assert str(again.value) == f"run {run_id} has ended; it cannot be cancelled"
    assert kinds(store, run_id)[-2:] == ["run.suspended", "run.ended"]  # nothing written by the second cancel
