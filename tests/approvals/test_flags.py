"""Shared accounts are flagged on the answer, each flag with its evidence."""

from __future__ import annotations

import pytest
from approval_helpers import policy

from sealbox.approvals import ApprovalPending, answer, list_approvals
from sealbox.identities import add_identity
from sealbox.recorder import Recorder


def request(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    return info.value.approval_id


LAPTOP = {"hostname": "laptop", "os_user": "alice"}


def test_no_flags_for_a_personal_identity_on_one_client(store, keys):
    state = answer(store, request(store), "approve", "ok", keys["alice"], client=LAPTOP)
    assert state.answers[0].flags == ()
    assert list_approvals(store, flagged=True) == []


def test_an_identity_marked_shared_is_flagged(store, tmp_path):
    new = add_identity(store, "oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "oncall.key")
    state = answer(store, request(store), "approve", "ok", new.key_path, client=LAPTOP)
    assert state.answers[0].flags == ({"code": "shared_identity", "evidence": {
        "identity": "oncall", "marked_shared": True, "identity_leaf": new.identity.since_leaf}},)
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [state.approval_id]


def test_answers_from_two_clients_within_the_window_are_flagged_with_both_clients(store, keys):
    first = answer(store, request(store), "approve", "ok", keys["alice"], client=LAPTOP)
    second = answer(store, request(store), "approve", "ok", keys["alice"], client={"hostname": "kiosk", "os_user": "ops"})
    assert first.answers[0].flags == ()
    (flag,) = second.answers[0].flags
    assert flag["code"] == "multiple_clients"
    ev = flag["evidence"]
    assert (ev["identity"], ev["window_s"]) == ("alice", 86400)
    assert [(a["approval_id"], a["hostname"]) for a in ev["answers"]] == [
        (second.approval_id, "kiosk"), (first.approval_id, "laptop")]
    assert ev["clients"] == [{"hostname": "kiosk", "os_user": "ops", "user_agent": None},
                             {"hostname": "laptop", "os_user": "alice", "user_agent": None}]


def test_distinct_user_agents_count_and_the_window_is_configurable(store, keys):
    answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "sealbox-cli/0.1.0"})
    late = answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "curl/8"},
                  shared_window_s=0)
    assert late.answers[0].flags == ()  # the earlier answer is outside a 0 s window
    flagged = answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "curl/8"})
    assert [f["code"] for f in flagged.answers[0].flags] == ["multiple_clients"]


def test_an_approver_that_also_acts_as_an_agent_principal_is_flagged(store, keys):
    with Recorder(store, policy=policy()).run(agent="helper", principal="bob") as run:
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    (flag,) = state.answers[0].flags
    assert flag == {"code": "acts_as_agent", "evidence": {
        "identity": "bob", "principal": "bob", "run_id": run.run_id, "kind": "run.started",
        "leaf_index": store.read_run(run.run_id)[0].leaf_index}}


def test_an_approver_running_agents_as_user_name_is_flagged_too(store, keys):
    with Recorder(store, policy=policy()).run(agent="helper", principal="user:bob") as run:
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    (flag,) = state.answers[0].flags
    assert flag["code"] == "acts_as_agent" and flag["evidence"]["principal"] == "user:bob"
    assert flag["evidence"]["run_id"] == run.run_id
