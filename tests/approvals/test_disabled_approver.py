"""An approval counts toward running the call only if its identity was not disabled (nor re-keyed:
test_withdrawn_approvals.py) between the answer and the call's resumption: an approver disabled after
answering and before the call runs (``sealbox identities disable alice``) withdraws it, for good
(re-enabling her does not restore it). The request is pending again (another approver may answer, until it expires); the log says which
answer stopped counting (a ``note`` with the disabling leaf); ``approvals show/list`` say so; ``verify``
does not report the answer (it was valid when given). Real stores, real identities and key files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from approval_helpers import kinds, policy
from identity_testkit import admin_key

from sealbox import verify_store
from sealbox.approvals import WITHDRAWN, ApprovalPending, answer, get_approval, list_approvals
from sealbox.identities import disable_identity, enable_identity, rotate_key
from sealbox.recorder import Recorder


class Tool:
    def __init__(self):
        self.calls = []

    def __call__(self, sql):
        self.calls.append(sql)
        return "done"


def suspended(store, tool="write_query"):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run = rec.run(agent="bot", principal="agent:bot")
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("db", tool, {"sql": "DELETE FROM t"}, Tool())
    return rec, run.run_id, pending.value.approval_id


def withdrawal_notes(store, run_id):
    return [e.payload["about"] for e in store.read_run(run_id) if e.kind == "note" and e.principal == "sealbox"]


def test_an_approver_disabled_before_resume_does_not_let_the_call_run(store, keys, tmp_path):
    rec, run_id, aid = suspended(store)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    assert get_approval(store, aid).status == "approved"
    disabled = disable_identity(store, "alice", "key leaked", admin_key=admin_key(store, tmp_path))
    state = get_approval(store, aid)
    assert (state.status, state.decided_by) == ("pending", ())
    (alice,) = state.answers
    assert (alice.identity, alice.problem, alice.disabled_leaf) == ("alice", WITHDRAWN, disabled.since_leaf)
    assert alice.to_dict()["counted"] is False and alice.to_dict()["disabled_leaf"] == disabled.since_leaf
    assert alice.to_dict()["withdrawn"] == {"change": "disabled", "change_leaf": disabled.since_leaf}

    tool = Tool()
    with pytest.raises(ApprovalPending):  # still waiting: for another approver, until it expires
        with rec.resume(run_id, {("db", "write_query"): tool}):
            pass
    assert tool.calls == []
    assert withdrawal_notes(store, run_id) == [{"approval_id": aid, "withdrawn": {
        "identity": "alice", "answer_leaf": alice.leaf_index, "change": "disabled",
        "change_leaf": disabled.since_leaf}}]
    with pytest.raises(ApprovalPending):  # a second resume does not note it again
        with rec.resume(run_id, {("db", "write_query"): tool}):
            pass
    assert len(withdrawal_notes(store, run_id)) == 1
    assert "run.resumed" not in kinds(store, run_id)

    answer(store, aid, "approve", "checked again", keys["bob"])  # another approver makes the quorum
    state = get_approval(store, aid)
    assert (state.status, state.decided_by) == ("approved", ("bob",))
    with rec.resume(run_id, {("db", "write_query"): tool}) as run:
        (call,) = run.resumed_calls
    assert (call.outcome, call.ran, tool.calls) == ("approved", True, ["DELETE FROM t"])
    report = verify_store(store)
    assert report.ok, [p.code for p in report.problems]  # alice's answer is no forgery, bob's is not late


def test_an_approval_acted_on_stays_as_it_was(store, keys, tmp_path):
    """Disabling alice after the call ran changes nothing the log says about it."""
    rec, run_id, aid = suspended(store)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    tool = Tool()
    with rec.resume(run_id, {("db", "write_query"): tool}):
        pass
    disable_identity(store, "alice", "left", admin_key=admin_key(store, tmp_path))
    state = get_approval(store, aid)
    assert (state.status, state.decided_by, state.outcome, state.answers[0].problem) == (
        "approved", ("alice",), "approved", None)
    assert tool.calls == ["DELETE FROM t"] and verify_store(store).ok


def test_re_enabled_before_the_call_runs_does_not_count_again(store, keys, tmp_path):
    """Re-enabling alice does not restore her withdrawn approval (it used to: the call then ran on an
    approval that may have been signed with a leaked key)."""
    rec, run_id, aid = suspended(store)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    admin = admin_key(store, tmp_path)
    disabled = disable_identity(store, "alice", "lost laptop", admin_key=admin)
    assert get_approval(store, aid).status == "pending"
    enable_identity(store, "alice", "found it", admin_key=admin)
    state = get_approval(store, aid)
    assert (state.status, state.answers[0].problem, state.answers[0].withdrawn_leaf) == (
        "pending", WITHDRAWN, disabled.since_leaf)
    tool = Tool()
    with pytest.raises(ApprovalPending):
        with rec.resume(run_id, {("db", "write_query"): tool}):
            pass
    assert tool.calls == [] and "run.resumed" not in kinds(store, run_id)


def test_a_quorum_of_two_loses_one_approver(store, keys, tmp_path):
    rec, run_id, aid = suspended(store, "deploy")
    answer(store, aid, "approve", "ok", keys["alice"])
    answer(store, aid, "approve", "ok", keys["carol"])
    assert get_approval(store, aid).status == "approved"
    disable_identity(store, "carol", "compromised", admin_key=admin_key(store, tmp_path))
    state = get_approval(store, aid)
    assert state.status == "pending" and [(a.identity, a.problem) for a in state.answers] == [
        ("alice", None), ("carol", WITHDRAWN)]
    assert [s.approval_id for s in list_approvals(store, pending=True)] == [aid]


@pytest.mark.parametrize("change", ["disabled", "rotated"])
def test_the_blocking_wait_does_not_run_a_withdrawn_approval(store, keys, tmp_path, change):
    """approvals="block": alice approves, then is disabled (or her key is rotated), before the waiting
    process wakes up (it polls every 2 s; both writes land well inside one sleep). It keeps waiting,
    notes the withdrawal, and its wait ends pending; the tool never runs."""
    rec = Recorder(store, policy=policy(), approvals="block", approval_timeout=3, approval_poll=2.0)
    tool = Tool()
    admin = admin_key(store, tmp_path)
    box = {}

    def agent():
        run = rec.run(agent="bot", principal="agent:bot")
        box["run"] = run
        try:
            with run:
                run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, tool)
        except ApprovalPending as exc:
            box["pending"] = exc

    thread = threading.Thread(target=agent)
    thread.start()
    reqs = []
    for _ in range(500):
        reqs = list_approvals(store, record_expiries=False)
        if reqs:
            break
        time.sleep(0.01)
    (req,) = reqs
    answer(store, req.approval_id, "approve", "ok", keys["alice"])
    if change == "disabled":
        leaf = disable_identity(store, "alice", "key leaked", admin_key=admin).since_leaf
    else:
        leaf = rotate_key(store, "alice", tmp_path / "alice-2.key", "key leaked", admin_key=admin).identity.since_leaf
    thread.join(15)
    assert not thread.is_alive()
    assert isinstance(box.get("pending"), ApprovalPending) and tool.calls == []
    (note,) = withdrawal_notes(store, box["run"].run_id)
    assert (note["withdrawn"]["identity"], note["withdrawn"]["change"], note["withdrawn"]["change_leaf"]) == (
        "alice", change, leaf)


def sb(*args, env_columns=None):
    env = {**os.environ, "COLUMNS": str(env_columns)} if env_columns else None
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True,
                          env=env)


def test_approvals_show_and_list_say_the_approval_was_withdrawn(store, keys, tmp_path):
    rec, run_id, aid = suspended(store)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    disabled = disable_identity(store, "alice", "key leaked", admin_key=admin_key(store, tmp_path))
    leaf = disabled.since_leaf
    store.close()
    path = tmp_path / "store"
    shown = sb("approvals", "show", aid, "-s", path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"status     pending (approval by alice withdrawn: disabled at leaf {leaf})" in lines
    assert any(line.endswith(f"alice approve (does not count: identity_disabled; alice was disabled at leaf {leaf} "
                             "after answering, before the call ran: this approval was withdrawn): looks fine")
               for line in lines), lines
    as_json = json.loads(sb("approvals", "show", aid, "--json", "-s", path).stdout)
    assert [(a["problem"], a["disabled_leaf"], a["withdrawn"]) for a in as_json["answers"]] == [
        ("identity_disabled", leaf, {"change": "disabled", "change_leaf": leaf})]
    listed = sb("approvals", "list", "-s", path, env_columns=400)
    assert listed.returncode == 0 and f"pending (approval by alice withdrawn: disabled at leaf {leaf})" in listed.stdout
    (row,) = json.loads(sb("approvals", "list", "--json", "-s", path).stdout)
    assert (row["status"], row["withdrawn"]) == ("pending", [
        {"identity": "alice", "answer_leaf": as_json["answers"][0]["leaf_index"], "change": "disabled",
         "change_leaf": leaf}])
    verified = sb("verify", "-s", path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_replay_reads_the_call_not_the_withdrawal_note_at_its_step(store, keys, tmp_path):
    """The note is written at the request's step (as approval.expired is): the replay's reading of
    the run keeps the tool.call of that step, and its approved outcome."""
    from sealbox.replay.keys import RecordedRun

    rec, run_id, aid = suspended(store)
    answer(store, aid, "approve", "ok", keys["alice"])
    disable_identity(store, "alice", "key leaked", admin_key=admin_key(store, tmp_path))
    with pytest.raises(ApprovalPending):
        with rec.resume(run_id, {("db", "write_query"): Tool()}):
            pass
    answer(store, aid, "approve", "ok", keys["bob"])
    with rec.resume(run_id, {("db", "write_query"): Tool()}):
        pass
    (note,) = [e for e in store.read_run(run_id) if e.kind == "note"]
    recorded = RecordedRun.read(store, run_id)
    call = recorded.steps[note.step]
    assert (call.key.kind, call.approval_id, call.approval) == ("tool.call", aid, "approved")
