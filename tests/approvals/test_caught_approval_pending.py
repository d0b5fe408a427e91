"""An agent that catches ``ApprovalPending`` inside its ``with rec.run()`` block kept going.

It ran more tools after ``run.suspended`` (its leases already let go), and leaving the block wrote
``run.ended``, which silently closed the pending request (``run_ended``); a resume in another process
meanwhile had its writes refused. A suspended RunContext now refuses tool calls, model calls and state
saves with ``RunSuspendedError`` (naming the request and ``Recorder.resume``), nothing written, and
leaving its block normally writes no ``run.ended``: the run stays suspended and resumable."""

from __future__ import annotations

import asyncio

import pytest
from approval_helpers import kinds, policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox.approvals import ApprovalPending, RunSuspendedError, answer
from sealbox.identities import add_identity
from sealbox.recorder import Recorder


@pytest.mark.parametrize("mode", ["block", "suspend"])
def test_a_caught_approval_pending_leaves_the_run_suspended_and_refuses_more(backend, tmp_path, mode):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=policy(), approvals=mode, approval_timeout=0.1, approval_poll=0.02)
    ran = []
    with rec.run(agent="catcher") as run:
        try:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: ran.append(sql))
        except ApprovalPending as pending:
            aid = pending.approval_id
        before = kinds(store, run.run_id)
        with pytest.raises(RunSuspendedError) as refused:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: ran.append(sql))
        assert aid in str(refused.value) and "resume" in str(refused.value)
        assert refused.value.run_id == run.run_id and refused.value.approval_ids == (aid,)
        with pytest.raises(RunSuspendedError):
            asyncio.run(run.acall_tool("db", "read_query", {"sql": "SELECT 2"}, lambda sql: ran.append(sql)))
        with pytest.raises(RunSuspendedError):
            run.model_call({"messages": []}, {"choices": []})
        with pytest.raises(RunSuspendedError):
            run.save_state({"x": 1})
        assert kinds(store, run.run_id) == before  # nothing written
    assert ran == []
    assert kinds(store, run.run_id)[-1] == "run.suspended"  # leaving the block wrote no run.ended
    assert store.get_run(run.run_id)["status"] == "suspended"
    answer(store, aid, "approve", "ok", key)
    with Recorder(store, policy=policy()).resume(run.run_id, tools={("db", "write_query"): lambda sql: f"ran: {sql}"}) as again:
        [call] = again.resumed_calls
        assert call.value() == "ran: DELETE FROM t"
    assert kinds(store, run.run_id)[-1] == "run.ended"


def test_a_refused_call_leaving_the_block_keeps_the_run_suspended(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(RunSuspendedError):
        with rec.run(agent="catcher") as run:
            try:
                run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: None)
            except ApprovalPending:
                pass
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: None)
    assert kinds(store, run.run_id)[-1] == "run.suspended"
    assert store.get_run(run.run_id)["status"] == "suspended"


def test_a_run_suspended_outside_approvals_refuses_calls_naming_continue_run(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, policy=policy())
    with rec.run(agent="interrupted") as run:
        run.suspend("waiting for a human")
        with pytest.raises(RunSuspendedError) as refused:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: None)
        assert refused.value.approval_ids == () and "continue_run" in str(refused.value)
    assert kinds(store, run.run_id)[-1] == "run.suspended"
