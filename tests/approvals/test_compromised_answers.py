"""Approval answers signed with a key declared compromised (``sealbox identities disable NAME
--compromised-since WHEN``): withdrawn for calls not yet run (problem ``key_compromised``), marked in
``approvals show`` for calls already run, and noted by ``sealbox verify`` (``relied_on_compromised_key``).
Real store, identities and key files, the real ``sealbox`` command, resumes in another process."""

from __future__ import annotations

import json

import sealbox
from sealbox import verify_store
from sealbox.approvals import get_approval

from test_withdrawn_approvals import answer_leaf, change_leaves, ok, resume_elsewhere, sb, suspended


def test_an_approval_signed_after_the_leak_is_withdrawn_and_the_call_does_not_run(store, keys, tmp_path):
    path, root = tmp_path / "store", tmp_path / "root.key"
    run_id, aid = suspended(store)
    since = store.size()
    store.close()
    ok("approvals", "approve", aid, "--reason", "totally fine", "--key-file", keys["alice"], "-s", path)
    ok("identities", "disable", "alice", "--compromised-since", f"leaf:{since}", "--admin-key", root, "-s", path)
    store = sealbox.open_store(path)
    try:
        record = change_leaves(store, "alice")[-1][1]
        answered = answer_leaf(store, run_id, "alice")
        (alice,) = get_approval(store, aid).answers
        assert (alice.problem, alice.withdrawn_by, alice.withdrawn_leaf, alice.compromised) == (
            "key_compromised", "compromised", record, (record, since))
    finally:
        store.close()
    assert resume_elsewhere(path, run_id) == {"pending": [aid], "ran": []}
    shown = ok("approvals", "show", aid, "-s", path).splitlines()
    assert f"status     pending (approval by alice withdrawn: key compromised at leaf {record})" in shown
    assert any(line.endswith(
        f"alice approve (does not count: key_compromised; alice's key was declared compromised (from before this "
        f"answer) at leaf {record} after answering, before the call ran: this approval was withdrawn): totally fine")
        for line in shown), shown
    (answer,) = json.loads(ok("approvals", "show", aid, "--json", "-s", path))["answers"]
    assert (answer["compromised"], answer["withdrawn"]) == (
        {"change_leaf": record, "from_leaf": since}, {"change": "compromised", "change_leaf": record})
    store = sealbox.open_store(path)
    try:
        (note,) = [e.payload for e in store.read_run(run_id) if e.kind == "note"]
        assert note["text"] == (f"approval {aid}: the approve answer of alice (leaf {answered}) no longer counts: the "
                                "key of identity alice was declared compromised from before the answer at leaf "
                                f"{record}, before the call ran; the request is pending")
        report = verify_store(store)
        assert report.ok and report.notes == ()
    finally:
        store.close()


def test_a_call_already_run_on_a_compromised_approval_is_marked_and_noted(store, keys, tmp_path):
    path, root = tmp_path / "store", tmp_path / "root.key"
    run_id, aid = suspended(store)
    since = store.size()
    store.close()
    ok("approvals", "approve", aid, "--reason", "totally fine", "--key-file", keys["alice"], "-s", path)
    assert resume_elsewhere(path, run_id) == {"outcomes": ["approved"], "ran": ["DELETE FROM t"]}
    ok("identities", "disable", "alice", "--compromised-since", f"leaf:{since}", "--admin-key", root, "-s", path)
    store = sealbox.open_store(path)
    try:
        record = change_leaves(store, "alice")[-1][1]
        answered = answer_leaf(store, run_id, "alice")
        resumed = next(e.leaf_index for e in store.read_run(run_id) if e.kind == "run.resumed")
        state = get_approval(store, aid)
        assert (state.status, state.answers[0].problem, state.answers[0].compromised) == (
            "approved", None, (record, since))  # append-only: what ran is not rewritten
        report = verify_store(store)
        assert report.ok
        assert report.notes == (
            f"relied_on_compromised_key: approval {aid} in run {run_id} was approved by 'alice' at leaf {answered} "
            f"with a key declared compromised from leaf {since} (identity.changed at leaf {record}); its call "
            f"resumed at leaf {resumed}",)
    finally:
        store.close()
    shown = ok("approvals", "show", aid, "-s", path).splitlines()
    assert any(line.endswith(f"alice approve (counts; signed with a key declared compromised from leaf {since} "
                             f"(identity.changed at leaf {record})): totally fine") for line in shown), shown
    out = sb("verify", path, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["notes"] == list(report.notes)
