"""``Recorder.resume`` of a run with two requests could resume part of it.

It read every request (all decided), then claimed them one at a time and ran each approved tool right
after its claim. An approver disabled between that first read and the claim of the second request made
that request pending again: ``ApprovalPending`` was raised after the first tool had already run,
contradicting "no partial resumes". Every request is now claimed in one transaction, all or none, before
any tool runs. The disablement is made at that point through a hook on a Sealbox function called between
the read and the claims (``sealbox.pause._unknown_calls``); the store and the disablement are real."""

from __future__ import annotations

import pytest
from approval_helpers import kinds, policy
from identity_testkit import admin_key

import sealbox.pause
from sealbox import verify_store
from sealbox.approvals import ApprovalPending, answer, get_approval
from sealbox.identities import disable_identity
from sealbox.recorder import Recorder


def _two_requests(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    rec._calls_while_suspended = True  # as the gateway: a second call while the first waits
    aids = []
    with rec.run(agent="bot") as run:
        for cid in ("c1", "c2"):
            with pytest.raises(ApprovalPending) as pending:
                run.call_tool("db", "write_query", {"sql": cid}, lambda sql: pytest.fail("ran unapproved"), call_id=cid)
            aids.append(pending.value.approval_id)
    return run.run_id, aids


def test_an_approver_disabled_before_the_claims_resumes_nothing(store, keys, tmp_path, monkeypatch):
    run_id, (a1, a2) = _two_requests(store)
    answer(store, a1, "approve", "ok", keys["bob"])
    answer(store, a2, "approve", "ok", keys["alice"])
    original = sealbox.pause._unknown_calls

    def disable_alice_then(*args, **kwargs):  # after resume read both requests approved, before it claims them
        disable_identity(store, "alice", reason="key leaked", admin_key=admin_key(store, tmp_path))
        return original(*args, **kwargs)

    monkeypatch.setattr(sealbox.pause, "_unknown_calls", disable_alice_then)
    ran = []
    tool = {("db", "write_query"): lambda sql: ran.append(sql) or f"ran {sql}"}
    before = kinds(store, run_id)
    with pytest.raises(ApprovalPending) as pending:
        Recorder(store, policy=policy()).resume(run_id, tool)
    monkeypatch.undo()
    assert ran == []  # was: ["c1"], c1 run before c2's claim found it pending again
    assert (pending.value.approval_ids, pending.value.call_ids) == ((a2,), ("c2",))
    assert kinds(store, run_id) == before + ["note"]  # the withdrawal of alice's answer, and no run.resumed
    note = store.read_run(run_id)[-1].payload
    assert (note["about"]["approval_id"], note["about"]["withdrawn"]["identity"]) == (a2, "alice")
    assert (get_approval(store, a1).status, get_approval(store, a2).status) == ("approved", "pending")
    assert store.get_run(run_id)["status"] == "suspended"
    # another approver answers: both calls resume, each tool once
    answer(store, a2, "approve", "ok", keys["bob"])
    with Recorder(store, policy=policy()).resume(run_id, tool) as run:
        assert [(c.approval_id, c.outcome, c.ran, c.result) for c in run.resumed_calls] == [
            (a1, "approved", True, "ran c1"), (a2, "approved", True, "ran c2")]
    assert ran == ["c1", "c2"]
    assert kinds(store, run_id)[-5:] == ["run.resumed", "run.resumed", "tool.result", "tool.result", "run.ended"]
    assert verify_store(store).ok
