"""verify checks every answer against the identity's key as the log held it; forged answers never count."""

from __future__ import annotations

import base64

import pytest
from approval_helpers import policy, request_of

from sealbox import EventDraft, verify_store
from sealbox.approvals import ApprovalPending, answer, get_approval, signed_fields
from sealbox.identities import load_key, rotate_key, sign_fields
from sealbox.recorder import Recorder


def suspended(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "DROP TABLE t"}, lambda **_: "ran")
    return run.run_id, info.value.approval_id


def forged(store, run_id, aid, *, identity="alice", binding=None, signature=None, key=None):
    req = request_of(store, run_id)
    payload = {"approval_id": aid, "binding": binding or req["binding"], "decision": "approve", "identity": identity,
               "reason": "forged", "answered_at": "2030-01-01T00:00:00.000000Z", "client": {"hostname": "evil"}}
    payload["signature"] = signature if signature is not None else sign_fields(key, signed_fields(payload)) if key \
        else base64.b64encode(b"\0" * 64).decode()
    step = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].step
    return store.append(EventDraft("approval.answered", payload, run_id=run_id, principal=identity, step=step))[0]


def codes(store):
    return [(p.code, p.leaf_index) for p in verify_store(store).problems]


def test_a_genuine_answer_verifies_even_after_the_key_is_rotated(store, keys, tmp_path):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "fine", keys["alice"])
    rotate_key(store, "alice", tmp_path / "alice-new.key", admin_key=keys["alice"])
    assert verify_store(store).ok


def test_an_answer_appended_directly_with_a_bad_signature_is_tampering_and_does_not_count(store, keys):
    run_id, aid = suspended(store)
    event = forged(store, run_id, aid)
    assert codes(store) == [("approval_signature", event.leaf_index)]
    state = get_approval(store, aid)
    assert state.status == "pending" and state.answers[0].problem == "bad_signature"


def test_an_answer_signed_with_another_identitys_key_is_tampering(store, keys):
    run_id, aid = suspended(store)
    event = forged(store, run_id, aid, identity="alice", key=load_key(keys["bob"]))
    assert codes(store) == [("approval_signature", event.leaf_index)]


def test_an_answer_signed_with_a_key_rotated_away_before_it_is_tampering(store, keys, tmp_path):
    run_id, aid = suspended(store)
    rotate_key(store, "alice", tmp_path / "alice-new.key", admin_key=keys["alice"])
    event = forged(store, run_id, aid, key=load_key(keys["alice"]))
    assert codes(store) == [("approval_signature", event.leaf_index)]
    assert get_approval(store, aid).status == "pending"


def test_an_answer_for_another_binding_or_by_an_unknown_identity_is_reported(store, keys):
    run_id, aid = suspended(store)
    other = "sha256:" + "2" * 64
    e1 = forged(store, run_id, aid, binding=other, key=load_key(keys["alice"]))
    e2 = forged(store, run_id, aid, identity="ghost")
    problems = verify_store(store).problems
    assert [(p.code, p.leaf_index) for p in problems] == [("approval_binding", e1.leaf_index),
                                                          ("approval_identity", e2.leaf_index)]
    assert problems[0].found == other and problems[0].expected == request_of(store, run_id)["binding"]
    assert get_approval(store, aid).status == "pending"


def test_a_validly_signed_answer_that_breaks_a_rule_is_reported_and_does_not_count(store, keys):
    run_id, aid = suspended(store)
    event = forged(store, run_id, aid, identity="dave", key=load_key(keys["dave"]))  # an agent-role identity
    assert codes(store) == [("approval_rule", event.leaf_index)]
    assert get_approval(store, aid).status == "pending"


def test_the_flags_of_an_answer_that_does_not_count_are_not_the_requests(store, keys):
    """approvals list --flagged (and the Parquet export) took flags from every answer, counted or
    not: a forged answer could put a made-up flag on a request, or hide behind one."""
    run_id, aid = suspended(store)
    req = request_of(store, run_id)
    payload = {"approval_id": aid, "binding": req["binding"], "decision": "approve", "identity": "mallory",
               "reason": "forged", "answered_at": "2030-01-01T00:00:00.000000Z", "client": {"hostname": "evil"},
               "signature": base64.b64encode(b"\0" * 64).decode(),
               "flags": [{"code": "shared_identity", "evidence": {"identity": "mallory"}}]}
    step = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].step
    store.append(EventDraft("approval.answered", payload, run_id=run_id, principal="mallory", step=step))
    state = get_approval(store, aid)
    assert [(a.identity, a.problem, len(a.flags)) for a in state.answers] == [("mallory", "unknown_identity", 1)]
    assert state.flags == [] and state.status == "pending"
    from sealbox.approvals import list_approvals
    assert list_approvals(store, flagged=True) == []


def _replayed_into_another_run(store, keys, *, strip_run_id=False):
    """Run A's call is approved by alice; whoever can write the store starts run B, requests
    the same approval id and binding in it (the same call under the same policy) and pastes
    alice's signed answer there."""
    run_a, aid = suspended(store)
    answer(store, aid, "approve", "a harmless select", keys["alice"])
    genuine = [e for e in store.read_run(run_a) if e.kind == "approval.answered"][0]
    run_b, _ = suspended(store)
    req_b = [e for e in store.read_run(run_b) if e.kind == "approval.requested"][0]
    store.append(EventDraft("approval.requested", dict(request_of(store, run_a)), run_id=run_b,
                            principal=req_b.principal, step=req_b.step))
    copied = {k: v for k, v in genuine.payload.items() if not (strip_run_id and k == "run_id")}
    event = store.append(EventDraft("approval.answered", copied, run_id=run_b, principal="alice", step=req_b.step))[0]
    return run_a, run_b, aid, genuine, event


def test_an_answer_signs_the_run_of_its_request(store, keys):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "fine", keys["alice"])
    payload = [e for e in store.read_run(run_id) if e.kind == "approval.answered"][0].payload
    assert payload["run_id"] == run_id
    assert signed_fields(payload) == {k: payload[k] for k in ("approval_id", "binding", "decision", "identity",
                                                              "answered_at", "reason", "run_id")}


def test_a_signed_answer_copied_into_another_run_is_reported_and_does_not_count(store, keys):
    """Before answers signed their run, verify passed such a copy and `approvals list` showed run B's
    call as approved by alice, who never saw run B."""
    from sealbox.approvals import list_approvals

    run_a, run_b, aid, _, event = _replayed_into_another_run(store, keys)
    problems = verify_store(store).problems
    assert [(p.code, p.run_id, p.leaf_index) for p in problems] == [
        ("approval_duplicate", run_b, event.leaf_index - 1), ("approval_run", run_b, event.leaf_index)]
    states = {(s.run_id, s.approval_id): s for s in list_approvals(store)}
    assert states[(run_a, aid)].status == "approved" and states[(run_a, aid)].decided_by == ("alice",)
    assert states[(run_b, aid)].status == "pending" and states[(run_b, aid)].decided_by == ()
    assert [a.problem for a in states[(run_b, aid)].answers] == ["wrong_run"]


def test_a_copied_answer_with_its_run_id_removed_no_longer_verifies(store, keys):
    _, run_b, _, _, event = _replayed_into_another_run(store, keys, strip_run_id=True)
    assert [(p.code, p.run_id, p.leaf_index) for p in verify_store(store).problems] == \
        [("approval_duplicate", run_b, event.leaf_index - 1), ("approval_signature", run_b, event.leaf_index)]


def test_a_bundle_of_the_run_an_answer_was_copied_into_does_not_verify(store, keys, tmp_path):
    from sealbox.interop.bundle import export_bundle
    from sealbox.interop.bundle_verify import verify_bundle

    _, run_b, _, _, event = _replayed_into_another_run(store, keys)
    export_bundle(store, [run_b], tmp_path / "b.sbx")
    report = verify_bundle(tmp_path / "b.sbx")
    assert [(p.code, p.run_id, p.leaf_index) for p in report.problems] == [("approval_run", run_b, event.leaf_index)]


def _legacy_answer(store, run_id, aid, key_file):
    """An answer as answer() wrote it before answers signed their run (no run_id)."""
    from sealbox.identities import load_key

    req = request_of(store, run_id)
    payload = {"approval_id": aid, "binding": req["binding"], "decision": "approve", "identity": "alice",
               "reason": "ok", "answered_at": "2026-12-01T00:00:00.000000Z", "client": {"hostname": "laptop"}}
    payload["signature"] = sign_fields(load_key(key_file), signed_fields(payload))
    step = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].step
    return payload, store.append(EventDraft("approval.answered", payload, run_id=run_id, principal="alice",
                                            step=step))[0]


def test_a_second_request_with_an_approval_id_already_requested_is_reported(store, keys):
    """An answer written before answers signed their run carries no run_id: copying it into another
    run that requests the same approval id and binding passed verify. Approval ids are random, so a
    second request with one is reported."""
    run_a, aid = suspended(store)
    payload, _ = _legacy_answer(store, run_a, aid, keys["alice"])
    run_b, _ = suspended(store)
    req_b = [e for e in store.read_run(run_b) if e.kind == "approval.requested"][0]
    dup = store.append(EventDraft("approval.requested", dict(request_of(store, run_a)), run_id=run_b,
                                  principal=req_b.principal, step=req_b.step))[0]
    copy = store.append(EventDraft("approval.answered", dict(payload), run_id=run_b, principal="alice",
                                   step=req_b.step))[0]
    assert copy.leaf_index == dup.leaf_index + 1
    assert [(p.code, p.run_id, p.leaf_index) for p in verify_store(store).problems] == [
        ("approval_duplicate", run_b, dup.leaf_index)]


def test_a_repeated_request_in_the_same_run_is_reported_and_the_answers_to_the_first_still_count(store, keys):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "fine", keys["alice"])
    req = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0]
    dup = store.append(EventDraft("approval.requested", dict(req.payload), run_id=run_id, principal=req.principal,
                                  step=req.step))[0]
    assert [(p.code, p.run_id, p.leaf_index) for p in verify_store(store).problems] == [
        ("approval_duplicate", run_id, dup.leaf_index)]


def _signed_direct(store, run_id, aid, identity, key_file, answered_at, decision="approve"):
    from sealbox.identities import load_key

    req = request_of(store, run_id)
    payload = {"approval_id": aid, "binding": req["binding"], "decision": decision, "identity": identity,
               "reason": "around answer()", "answered_at": answered_at, "client": {"hostname": "h"}, "run_id": run_id}
    payload["signature"] = sign_fields(load_key(key_file), signed_fields(payload))
    step = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].step
    return store.append(EventDraft("approval.answered", payload, run_id=run_id, principal=identity, step=step))[0]


def test_a_validly_signed_answer_after_the_decision_is_reported(store, keys):
    """answer() refuses an answer once a request is decided and evaluate() does not count one, but verify
    passed it: the run's record showed bob approving a call that was already decided."""
    run_id, aid = suspended(store)
    answer(store, aid, "deny", "no", keys["alice"])
    event = _signed_direct(store, run_id, aid, "bob", keys["bob"], "2026-12-03T00:00:00.000000Z")
    assert get_approval(store, aid).status == "denied"
    assert [(p.code, p.leaf_index) for p in verify_store(store).problems] == [("approval_rule", event.leaf_index)]
    assert "after its request was decided or expired" in verify_store(store).problems[0].message


def test_a_validly_signed_answer_after_the_expiry_is_reported(store, keys):
    run_id, aid = suspended(store)
    expires = request_of(store, run_id)["expires_at"]
    event = _signed_direct(store, run_id, aid, "bob", keys["bob"], expires)  # at expires_at: too late
    assert get_approval(store, aid).answers[0].problem == "late"
    assert [(p.code, p.leaf_index) for p in verify_store(store).problems] == [("approval_rule", event.leaf_index)]


def test_a_backdated_answer_after_a_recorded_expiry_is_reported(store, keys):
    """Its own answered_at is before the expiry, but the log recorded the expiry before it."""
    import time

    from sealbox.approvals import record_expiry

    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "quick", {"sql": "x"}, lambda **_: "ran")  # expires after 1 s
    aid = info.value.approval_id
    time.sleep(1.1)
    assert record_expiry(store, aid)
    event = _signed_direct(store, run.run_id, aid, "bob", keys["bob"], "2026-01-01T00:00:00.000000Z")
    assert get_approval(store, aid).status == "expired"
    assert [(p.code, p.leaf_index) for p in verify_store(store).problems] == [("approval_rule", event.leaf_index)]


def test_otlp_says_whether_an_answer_counts(store, keys):
    """The OTLP export sent every approval.answered as '<identity> answered approve', an unsigned
    forgery included, with nothing to say it does not count."""
    from sealbox.interop.otlp import build_otlp

    run_id, aid = suspended(store)
    fake = forged(store, run_id, aid)  # a zero signature
    answer(store, aid, "approve", "fine", keys["bob"])
    logs = [r.log_record for r in build_otlp(store, [run_id]).logs
            if r.log_record.attributes["event.name"] == "sealbox.approval.answered"]
    got = [(r.attributes["sealbox.event.leaf_index"], r.attributes["sealbox.approval.identity"],
            r.attributes["sealbox.approval.counted"], r.attributes.get("sealbox.approval.problem"),
            r.severity_number.name, r.body) for r in logs]
    assert got == [(fake.leaf_index, "alice", False, "bad_signature", "WARN",
                    f"alice answered approve to approval {aid} (does not count: bad_signature)"),
                   (fake.leaf_index + 1, "bob", True, None, "INFO", f"bob answered approve to approval {aid}")]
