"""Every approval rule, attacked through answer(): each must refuse, with a code, and record nothing."""

from __future__ import annotations

import threading
import time

import pytest
from approval_helpers import kinds, policy, request_of

from sealbox.approvals import ApprovalError, ApprovalPending, answer, get_approval, list_approvals, record_expiry
from sealbox.identities import add_identity, disable_identity, rotate_key
from identity_testkit import admin_key
from sealbox.recorder import Recorder


def suspended(store, tool="write_query", principal=None, arguments=None):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot", principal=principal) as run:
            run.call_tool("db", tool, arguments or {"sql": "DELETE FROM t"}, lambda **_: "ran")
    return run.run_id, info.value.approval_id


def refused(store, code, *args, **kwargs):
    before = store.size()
    with pytest.raises(ApprovalError) as info:
        answer(store, *args, **kwargs)
    assert info.value.code == code, str(info.value)
    assert store.size() == before
    return str(info.value)


def test_the_request_is_recorded_with_the_call_in_order_and_bound_to_the_arguments(store, keys):
    run_id, aid = suspended(store)
    assert kinds(store, run_id) == ["run.started", "tool.call", "policy.decision", "approval.requested", "run.suspended"]
    events = store.read_run(run_id)
    assert len({e.leaf_index for e in events[1:]}) == 4 and events[1].ts == events[4].ts  # one transaction
    req = request_of(store, run_id)
    assert req["approval_id"] == aid and aid.startswith("apr_") and len(aid) == 36
    assert (req["server"], req["tool"], req["arguments"], req["rule"], req["quorum"]) == (
        "db", "write_query", {"sql": "DELETE FROM t"}, "writes-need-ops", 1)
    assert req["ask"] == {"groups": ["ops"], "identities": []} and req["requested_by"] == "agent:bot"
    from sealbox.approvals import binding_hash

    assert req["binding"] == binding_hash("db", "write_query", {"sql": "DELETE FROM t"}, policy().fingerprint)
    assert events[2].payload["effect"] == "require_approval"
    assert events[4].payload == {"approval_ids": [aid], "reason": "rule writes-need-ops requires approval"}
    assert get_approval(store, aid).status == "pending"


def test_an_unknown_approval_id_is_an_error(store, keys):
    msg = refused(store, "unknown_approval", "apr_nope", "approve", "ok", keys["alice"])
    assert msg == "no approval request 'apr_nope' in this store"
    with pytest.raises(ApprovalError, match="no approval request"):
        get_approval(store, "apr_nope")


def test_the_identity_that_requested_cannot_approve(store, keys):
    run_id, aid = suspended(store, principal="alice")
    refused(store, "requester", aid, "approve", "mine", keys["alice"])
    run_id, aid = suspended(store, principal="agent:bob")
    refused(store, "requester", aid, "approve", "mine", keys["bob"])


@pytest.mark.parametrize("principal", ["user:alice", "svc:alice", "ALICE", "agent:Alice"])
def test_the_requester_cannot_approve_under_another_prefix_or_case(store, keys, principal):
    """`user:alice` is alice: the rule used to know only `name` and `agent:name`."""
    run_id, aid = suspended(store, principal=principal)
    refused(store, "requester", aid, "approve", "mine", keys["alice"])
    assert get_approval(store, aid).status == "pending"


def test_an_identity_named_with_a_prefix_cannot_approve_for_the_bare_name(store, keys, tmp_path):
    made = add_identity(store, "agent:zoe", "approver", ["ops"], key_path=tmp_path / "az.key",
                        admin_key=admin_key(store, tmp_path))
    run_id, aid = suspended(store, principal="zoe")
    refused(store, "requester", aid, "approve", "mine", made.key_path)


def test_actor_key_strips_one_scheme_and_folds_case():
    from sealbox.approvals import actor_key, same_actor

    assert [actor_key(x) for x in ("carol", "user:carol", "agent:Carol", "a.b-c:carol", "user:", ":carol",
                                   "user:agent:carol", "carol@example.com")] == [
        "carol", "carol", "carol", "carol", "user:", ":carol", "agent:carol", "carol@example.com"]
    assert same_actor("carol", "user:carol") and not same_actor("carol", "carola") and not same_actor("carol", None)


def test_agent_and_auditor_roles_cannot_answer(store, keys):
    run_id, aid = suspended(store)
    refused(store, "role", aid, "approve", "I am a bot", keys["dave"])
    refused(store, "role", aid, "deny", "I only audit", keys["erin"])


def test_a_disabled_identity_cannot_answer(store, keys, tmp_path):
    run_id, aid = suspended(store)
    disable_identity(store, "alice", "left", admin_key=admin_key(store, tmp_path))
    refused(store, "disabled", aid, "approve", "still here", keys["alice"])


def test_the_answerer_must_be_asked(store, keys):
    run_id, aid = suspended(store)  # asks group ops; carol is not in it
    refused(store, "not_asked", aid, "approve", "me too", keys["carol"])


def test_a_rotated_key_is_refused(store, keys, tmp_path):
    run_id, aid = suspended(store)
    rotate_key(store, "alice", tmp_path / "alice2.key", admin_key=keys["alice"])
    refused(store, "wrong_key", aid, "approve", "old key", keys["alice"])
    assert answer(store, aid, "approve", "new key", tmp_path / "alice2.key").status == "approved"


def test_an_answer_for_another_binding_is_refused(store, keys):
    run_id, aid = suspended(store)
    msg = refused(store, "binding_mismatch", aid, "approve", "ok", keys["alice"], binding="sha256:" + "1" * 64)
    assert "binding" in msg


def test_a_quorum_of_two_needs_two_distinct_identities(store, keys):
    run_id, aid = suspended(store, tool="deploy")
    assert answer(store, aid, "approve", "one", keys["alice"]).status == "pending"
    refused(store, "duplicate", aid, "approve", "again", keys["alice"])
    state = answer(store, aid, "approve", "two", keys["carol"])  # carol is named in ask.identities
    assert (state.status, state.decided_by) == ("approved", ("alice", "carol"))
    msg = refused(store, "already_decided", aid, "deny", "late", keys["bob"])
    assert msg == f"approval {aid} was already approved by alice, carol; a further answer is refused"


def test_a_deny_by_any_asked_identity_denies(store, keys):
    run_id, aid = suspended(store, tool="deploy")
    answer(store, aid, "approve", "fine", keys["alice"])
    state = answer(store, aid, "deny", "not on a friday", keys["bob"])
    assert (state.status, state.decided_by) == ("denied", ("bob",))
    refused(store, "already_decided", aid, "approve", "please", keys["carol"])


def test_an_expired_request_is_denied_and_recorded_once_by_whoever_notices(store, keys):
    run_id, aid = suspended(store, tool="quick")
    expires_at = request_of(store, run_id)["expires_at"]
    time.sleep(1.1)
    assert get_approval(store, aid).status == "expired"  # noticed, not yet recorded
    with pytest.raises(ApprovalError) as info:
        answer(store, aid, "approve", "too late", keys["alice"])
    assert info.value.code == "expired"
    expired = [e.payload for e in store.read_run(run_id) if e.kind == "approval.expired"]
    assert expired == [{"approval_id": aid, "expired_at": expires_at}]
    refused(store, "expired", aid, "approve", "still too late", keys["bob"])
    assert record_expiry(store, aid) is False
    assert [s.status for s in list_approvals(store)] == ["expired"]
    assert [e.kind for e in store.read_run(run_id)].count("approval.expired") == 1


def test_concurrent_noticers_record_the_expiry_exactly_once(store, keys):
    ids = [suspended(store, tool="quick")[1] for _ in range(3)]
    time.sleep(1.1)
    wrote = []
    threads = [threading.Thread(target=lambda a=a: wrote.append(record_expiry(store, a))) for a in ids * 4]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(wrote) == [False] * 9 + [True] * 3


def test_two_approvers_racing_cannot_both_be_the_last_needed(store, keys):
    run_id, aid = suspended(store)
    outcomes = []

    def go(name):
        try:
            answer(store, aid, "approve", "go", keys[name])
            outcomes.append((name, "ok"))
        except ApprovalError as exc:
            outcomes.append((name, exc.code))

    threads = [threading.Thread(target=go, args=(n,)) for n in ("alice", "bob")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(o for _, o in outcomes) == ["already_decided", "ok"]
    assert [e.kind for e in store.read_run(run_id)].count("approval.answered") == 1


def test_an_answer_to_an_ended_run_is_refused(store, keys):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with rec.run(agent="bot") as run:
        with pytest.raises(ApprovalPending) as info:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
        run.end("ok")  # leaving the block would not end a suspended run
    refused(store, "run_ended", info.value.approval_id, "approve", "ok", keys["alice"])


def test_an_unknown_identity_key_is_refused(store, keys, tmp_path):
    import sealbox

    other = sealbox.init_store(tmp_path / "other")
    stranger = add_identity(other, "mallory", "admin", ["ops"], key_path=tmp_path / "mallory.key").key_path  # its root
    other.close()
    run_id, aid = suspended(store)
    refused(store, "unknown_identity", aid, "approve", "trust me", stranger)
    add_identity(store, "alice2", "approver", ["ops"], key_path=tmp_path / "alice2.key", admin_key=admin_key(store, tmp_path))
    imposter = tmp_path / "alice2.key"
    # a key of the same name minted elsewhere is not the recorded key
    other2 = sealbox.init_store(tmp_path / "other2")
    fake = add_identity(other2, "bob", "approver", ["ops"], key_path=tmp_path / "fake-bob.key",
                        admin_key=admin_key(other2, tmp_path / "other2")).key_path
    other2.close()
    refused(store, "wrong_key", aid, "approve", "I am bob", fake)
    assert imposter.exists()


def test_a_request_whose_run_ended_while_pending_is_closed_not_pending(store, keys):
    from approval_helpers import policy as make_policy

    from sealbox.approvals import ApprovalError, ApprovalPending, answer, list_approvals
    from sealbox.recorder import Recorder

    rec = Recorder(store, policy=make_policy(), approvals="suspend")
    run = rec.run(agent="bot")
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: None)
    rec.cancel(run.run_id)
    assert list_approvals(store, pending=True) == []
    [state] = list_approvals(store)
    assert (state.approval_id, state.status) == (pending.value.approval_id, "closed")
    with pytest.raises(ApprovalError) as refused:
        answer(store, state.approval_id, "approve", "late", keys["alice"])
    assert refused.value.code == "run_ended"


def test_approval_pending_is_importable_beside_tool_denied():
    import sealbox
    import sealbox.approvals
    from sealbox.recorder import ApprovalPending as FromRecorder

    assert FromRecorder is sealbox.ApprovalPending is sealbox.approvals.ApprovalPending is ApprovalPending
    with pytest.raises(ImportError):
        from sealbox.recorder import NoSuchThing  # noqa: F401


@pytest.mark.parametrize("reason, message", [
    ("", "reason must be a non-empty string: say why (it is recorded and signed), not ''"),
    ("   ", "reason must be a non-empty string: say why (it is recorded and signed), not '   '"),
    (None, "reason must be a non-empty string: say why (it is recorded and signed), not None"),
])
def test_an_answer_without_a_reason_is_refused_as_the_cli_refuses_it(store, keys, reason, message):
    """`sealbox approvals approve --reason ''` is refused, but `answer(store, id, "approve", "  ", key)`
    approved the request with a blank reason (and None raised InvalidEventError from the schema)."""
    _, aid = suspended(store)
    assert refused(store, "bad_reason", aid, "approve", reason, keys["alice"]) == message
    assert get_approval(store, aid).status == "pending"


def test_an_answer_without_a_key_file_is_an_approval_error(store, keys):
    _, aid = suspended(store)
    assert refused(store, "bad_key_file", aid, "approve", "ok", None) == (
        "key_file must be the path of the answering identity's key file, not None")
