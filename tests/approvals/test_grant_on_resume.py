"""A grant revoked while a run waits for approval denies the call when it resumes.

On SQLite and, when ``SEALBOX_TEST_POSTGRES_URL`` is set, on PostgreSQL (conftest.py's ``store``: a schema
of its own per test, dropped at its end), as tests/access: grants are checked on resume the same on both."""

from __future__ import annotations

import pytest
from approval_helpers import POLICY, kinds, policy

from sealbox import verify_store
from sealbox.access import grant_access, revoke
from sealbox.approvals import ApprovalPending, answer
from sealbox.recorder import Recorder, ToolDenied
from identity_testkit import signed_grant  # noqa: E402
from identity_testkit import signed_retry as retry, signed_revoke as revoke  # noqa: E402,F811


class Tool:
    def __init__(self):
        self.calls = []

    def __call__(self, sql):
        self.calls.append(sql)
        return "done"


def suspended_call(store, rec, grant):
    run = rec.run(agent="bot", principal="agent:bot")
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, Tool(), grant=grant)
    return run.run_id, pending.value.approval_id


@pytest.mark.parametrize("revoked", [False, True])
def test_the_grant_is_checked_again_when_the_run_resumes(store, keys, revoked):
    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write")
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspended_call(store, rec, grant)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    if revoked:
        revoke(store, grant, "key leaked")
    with rec.resume(run_id, {("db", "write_query"): tool}) as run:
        (call,) = run.resumed_calls
    if revoked:
        assert (call.outcome, call.ran, tool.calls) == ("grant_invalid", False, [])
        with pytest.raises(ToolDenied) as denied:
            call.value()
        assert denied.value.decision.reason_code == "grant_invalid" and "revoked" in denied.value.decision.reason
        decisions = [e.payload for e in store.read_run(run_id) if e.kind == "policy.decision"]
        assert [(d["effect"], d["reason_code"]) for d in decisions] == [
            ("require_approval", "policy_require_approval"), ("deny", "grant_invalid")]
    else:
        assert (call.outcome, call.ran, tool.calls) == ("approved", True, ["DELETE FROM t"])
    assert kinds(store, run_id)[-2:] == (["run.resumed", "policy.decision", "run.ended"][-2:] if revoked
                                         else ["tool.result", "run.ended"])
    assert verify_store(store).ok


REQUIRE_GRANT = POLICY.replace("    effect: require_approval\n    approval: {groups: [ops], quorum: 1, expires: 1h}",
                               "    require_grant: true\n    effect: require_approval\n"
                               "    approval: {groups: [ops], quorum: 1, expires: 1h}", 1)


@pytest.mark.parametrize("explicit", [True, False])
def test_a_policy_that_came_to_require_a_grant_reevaluates_with_the_calls_grant(store, keys, explicit):
    """The call is decided again under the new policy on resume, with the grant its tool.call named."""
    assert REQUIRE_GRANT != POLICY
    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write") if explicit else None
    run_id, aid = suspended_call(store, Recorder(store, policy=policy(), approvals="suspend"), grant)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    tool = Tool()
    with Recorder(store, policy=policy(REQUIRE_GRANT), approvals="suspend").resume(
            run_id, {("db", "write_query"): tool}) as run:
        (call,) = run.resumed_calls
    reeval = [e.payload for e in store.read_run(run_id) if e.kind == "policy.decision"][-1]
    assert reeval["reevaluated"] is True and reeval["rule"] == "writes-need-ops"
    assert store.resolve(reeval["inputs"])["grant"] == (grant or "implicit:agent:bot")
    if explicit:
        assert (call.outcome, call.ran, tool.calls) == ("approved", True, ["DELETE FROM t"])
        assert (reeval["effect"], reeval["reason_code"]) == ("require_approval", "policy_require_approval")
    else:
        assert (call.outcome, call.ran, tool.calls) == ("policy_denied", False, [])
        assert (reeval["effect"], reeval["reason_code"]) == ("deny", "grant_required")
        with pytest.raises(ToolDenied) as denied:
            call.value()
        assert (denied.value.decision.reason_code, denied.value.decision.rule) == ("grant_required", "writes-need-ops")
    assert verify_store(store).ok


def test_an_outcome_unknown_call_is_not_rerun_under_a_grant_revoked_since(store, keys):
    """`resume(..., rerun_unknown=True)` ran the tool again without looking at the call's grant:
    a grant revoked after the call was allowed (its process died before the result) ran the tool
    again under the revoked grant, after `access.revoked requested` was in the log."""
    from sealbox.pause import claim

    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write")
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspended_call(store, rec, grant)
    answer(store, aid, "approve", "ok", keys["alice"])
    assert claim(rec._attach(run_id), aid)[1] == "approved"  # resumed, then "the process died"
    revoke(store, grant, "key leaked")
    run = rec.resume(run_id, {("db", "write_query"): tool}, rerun_unknown=True)
    (call,) = run.resumed_calls
    assert (call.outcome, call.ran, tool.calls) == ("grant_invalid", False, [])
    with pytest.raises(ToolDenied) as denied:
        call.value()
    assert denied.value.decision.reason_code == "grant_invalid" and "revoked" in denied.value.decision.reason
    last = [e for e in store.read_run(run_id) if e.kind == "policy.decision"][-1].payload
    assert (last["effect"], last["reason_code"], last["rule"], last["reevaluated"]) == (
        "deny", "grant_invalid", None, True)
    assert "tool.result" not in kinds(store, run_id)
    # denied for good: a later resume has nothing left to re-run
    assert rec.resume(run_id, {("db", "write_query"): tool}, rerun_unknown=True).resumed_calls == []
    assert verify_store(store).ok


def test_an_outcome_unknown_call_under_a_valid_grant_is_rerun(store, keys):
    from sealbox.pause import claim

    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write")
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspended_call(store, rec, grant)
    answer(store, aid, "approve", "ok", keys["alice"])
    assert claim(rec._attach(run_id), aid)[1] == "approved"
    run = rec.resume(run_id, {("db", "write_query"): tool}, rerun_unknown=True)
    assert [(c.outcome, c.ran) for c in run.resumed_calls] == [("rerun", True)] and tool.calls == ["DELETE FROM t"]
    assert kinds(store, run_id)[-2:] == ["note", "tool.result"]


def test_verify_leaves_out_a_call_its_resumption_denied_though_a_forged_gate_let_it_wait(store, keys, monkeypatch):
    """A gate with its grant check cut out lets a call under a revoked grant wait for approval: verify
    reports it (its only decision, require_approval, did not deny it). The honest resumption checks the
    grant again and records a grant_invalid deny: the call never ran, and verify no longer reports it."""
    from sealbox.recorder import RunContext

    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write")
    revoke(store, grant, "key leaked")
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    with monkeypatch.context() as m:
        m.setattr(RunContext, "_check_grant", lambda self, reader, grant, server, tool, decision: decision)
        run_id, aid = suspended_call(store, rec, grant)
    call = next(e for e in store.read_run(run_id) if e.kind == "tool.call")
    requested = next(e.leaf_index for e in store.read_run("system") if e.kind == "access.revoked")
    assert [(p.code, p.leaf_index, p.message) for p in verify_store(store).problems] == [
        ("call_grant_invalid", call.leaf_index, "the call was not denied, though its grant did not authorize it: "
         f"grant {grant} was revoked before the call (access.revoked step 'requested' at leaf {requested}) (the "
         "recorder denies such a call grant_invalid: it was not recorded through Sealbox's grant check)")]
    answer(store, aid, "approve", "looks fine", keys["alice"])
    with rec.resume(run_id, {("db", "write_query"): tool}) as run:
        (resumed,) = run.resumed_calls
    assert (resumed.outcome, resumed.ran, tool.calls) == ("grant_invalid", False, [])
    assert verify_store(store).ok


def test_verify_reports_a_call_that_resumed_under_a_grant_revoked_while_it_waited(store, keys, monkeypatch, tmp_path):
    """The grant was valid at the gate; it was revoked while the call waited for approval. The honest
    resumption denies it grant_invalid (above). A writer whose resumption skips that check (forged here
    by cutting sealbox.pause._check_grant_on_resume out) ran it: verify judges the grant again at the
    call's re-evaluated decision, as the recorder does, and reports it; the same in the run's bundle."""
    import sealbox.pause as pause

    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write")
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspended_call(store, rec, grant)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    assert verify_store(store).ok  # waiting under a valid grant
    revoke(store, grant, "key leaked")
    requested = next(e.leaf_index for e in store.read_run("system") if e.kind == "access.revoked")
    with monkeypatch.context() as m:
        m.setattr(pause, "_check_grant_on_resume", lambda run, reader, state, now, current: current)
        with rec.resume(run_id, {("db", "write_query"): tool}) as run:
            (resumed,) = run.resumed_calls
    assert (resumed.outcome, resumed.ran, tool.calls) == ("approved", True, ["DELETE FROM t"])
    call = next(e for e in store.read_run(run_id) if e.kind == "tool.call")
    again = next(e for e in store.read_run(run_id) if e.kind == "run.resumed")
    assert again.payload["outcomes"] == {aid: "approved"}
    assert [(p.code, p.leaf_index, p.message) for p in verify_store(store).problems] == [
        ("call_grant_invalid", call.leaf_index, "the call was not denied, though its grant did not authorize it: "
         f"grant {grant} was revoked before the call (access.revoked step 'requested' at leaf {requested}), checked "
         f"again when the call resumed (run.resumed at leaf {again.leaf_index}) (the recorder "
         "denies such a call grant_invalid: it was not recorded through Sealbox's grant check)")]
    from sealbox.interop.bundle import export_bundle
    from sealbox.interop.bundle_verify import verify_bundle

    bundle = tmp_path / "run.sbx"
    export_bundle(store, [run_id], bundle)
    offline = verify_bundle(bundle, trusted_vkey=(tmp_path / "store" / "log.vkey").read_text().strip())
    assert [(p.code, p.leaf_index, p.message) for p in offline.problems] == [
        (p.code, p.leaf_index, p.message) for p in verify_store(store).problems]


def test_verify_is_clean_when_the_grant_is_revoked_only_after_the_call_resumed(store, keys):
    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write")
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspended_call(store, rec, grant)
    answer(store, aid, "approve", "looks fine", keys["alice"])
    with rec.resume(run_id, {("db", "write_query"): tool}) as run:
        (resumed,) = run.resumed_calls
    assert (resumed.outcome, resumed.ran) == ("approved", True)
    revoke(store, grant, "done with it")
    report = verify_store(store)
    assert report.ok and report.problems == ()


@pytest.mark.parametrize("before_us, outcome", [(1, "rerun"), (0, "grant_invalid")])
def test_an_outcome_unknown_call_is_rerun_by_the_stores_clock_at_its_grants_expiry(store, keys, monkeypatch,
                                                                                 before_us, outcome):
    """The grant of a call re-run on resume expires by the store's clock (the ts of the note or deny the
    check writes), not by ``datetime.now``: here the store's clock (``time.time_ns`` on SQLite, ``_PgTxn.stamp``
    on PostgreSQL) is held at
    the grant's expiry while ``datetime.now`` reads an hour before it. Before: re-run under the expired grant."""
    import time
    from datetime import datetime, timedelta, timezone

    from sealbox.pause import claim
    from sealbox.store import postgres

    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    grant = signed_grant(store, "agent:bot", "db", "write_query", scope="write",
                         expires_at=expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspended_call(store, rec, grant)
    answer(store, aid, "approve", "ok", keys["alice"])
    assert claim(rec._attach(run_id), aid)[1] == "approved"  # resumed, then "the process died"
    stamp_ns = int(expires.timestamp()) * 1_000_000_000 - before_us * 1000
    monkeypatch.setattr(time, "time_ns", lambda: stamp_ns)
    monkeypatch.setattr(postgres._PgTxn, "stamp", lambda self: (expires - timedelta(microseconds=before_us))
                        .strftime("%Y-%m-%dT%H:%M:%S.%fZ"))  # (PostgreSQL's store clock: the server's)
    run = rec.resume(run_id, {("db", "write_query"): tool}, rerun_unknown=True)
    (call,) = run.resumed_calls
    monkeypatch.undo()
    last = store.read_run(run_id)[-1 if outcome == "grant_invalid" else -2]
    assert last.ts == (expires - timedelta(microseconds=before_us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if outcome == "rerun":
        assert (call.outcome, call.ran, tool.calls) == ("rerun", True, ["DELETE FROM t"])
    else:  # before: re-run, the machine's clock an hour before the expiry
        assert (call.outcome, call.ran, tool.calls) == ("grant_invalid", False, [])
        assert (last.kind, last.payload["reason_code"], last.payload["reason"]) == (
            "policy.decision", "grant_invalid", f"grant {grant} expired at {expires:%Y-%m-%dT%H:%M:%S.%fZ}")
    run.end()
