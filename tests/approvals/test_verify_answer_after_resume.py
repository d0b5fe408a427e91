"""verify judges an answer recorded after its call was resumed against the answers as of that
resumption: the approver's later disable does not make a late answer look timely."""

from __future__ import annotations

from test_verify_answers import _signed_direct, suspended

from approval_helpers import policy
from sealbox import verify_store
from sealbox.approvals import answer, get_approval
from sealbox.identities import disable_identity
from sealbox.recorder import Recorder


def test_an_answer_after_the_call_was_resumed_is_late_even_once_its_approver_was_disabled(store, keys, tmp_path):
    """verify kept no run.resumed, so it judged bob's answer as of bob's leaf: alice's approval looked withdrawn
    by her later disable, and bob's answer to a call that had already run passed as timely."""
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "ok", keys["alice"])
    ran = []
    with Recorder(store, policy=policy()).resume(run_id, {("db", "write_query"): lambda **a: ran.append(a) or "ran"}):
        assert ran == [{"sql": "DROP TABLE t"}]
        disable_identity(store, "alice", admin_key=tmp_path / "root.key")
        event = _signed_direct(store, run_id, aid, "bob", keys["bob"], "2026-12-03T00:00:00.000000Z")
    assert [a.problem for a in get_approval(store, aid).answers] == [None, "late"]
    report = verify_store(store)
    assert [(p.code, p.leaf_index) for p in report.problems] == [("approval_rule", event.leaf_index)]
    assert "after its request was decided or expired" in report.problems[0].message
