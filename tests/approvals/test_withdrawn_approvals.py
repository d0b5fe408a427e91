"""An approve answer counts toward running the call only if, between the answer's leaf and the moment
the call is claimed, its identity was neither disabled nor re-keyed (docs/approvals.md, "An approver
disabled or re-keyed before the call runs"). Such a change withdraws it for good: re-enabling the
identity later does not restore it, so the incident flow after a leaked key (disable, rotate,
re-enable) never lets an approval signed with the leaked key run a pending call. A deny keeps
counting; a call already resumed stays as it was. Real stores, identities and key files; identity
changes, answers and listings through the real ``sealbox`` command, a resume in another process."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from approval_helpers import kinds, policy

import sealbox
from sealbox import verify_store
from sealbox.approvals import ApprovalError, ApprovalPending, answer, get_approval
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import rotate_key
from sealbox.recorder import Recorder

HERE = Path(__file__).parent


class Tool:
    def __init__(self):
        self.calls = []

    def __call__(self, sql):
        self.calls.append(sql)
        return "done"


def sb(*args):
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True,
                          env=env)


def ok(*args):
    out = sb(*args)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def suspended(store, tool="write_query"):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run = rec.run(agent="bot", principal="agent:bot")
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("db", tool, {"sql": "DELETE FROM t"}, Tool())
    return run.run_id, pending.value.approval_id


def change_leaves(store, name):
    """(change, leaf) of every identity.changed of ``name``, in log order."""
    return [(e.payload["change"], e.leaf_index) for e in store.read_run(SYSTEM_RUN_ID)
            if e.kind == "identity.changed" and e.payload["name"] == name]


def answer_leaf(store, run_id, identity):
    (leaf,) = [e.leaf_index for e in store.read_run(run_id) if e.kind == "approval.answered"
               and e.payload["identity"] == identity]
    return leaf


def notes(store, run_id):
    return [e.payload for e in store.read_run(run_id) if e.kind == "note" and e.principal == "sealbox"]


RESUME = """
import json, sys
sys.path.insert(0, sys.argv[3])
import sealbox
from approval_helpers import policy
from sealbox.approvals import ApprovalPending
from sealbox.recorder import Recorder

store = sealbox.open_store(sys.argv[1])
ran = []
try:
    with Recorder(store, policy=policy()).resume(sys.argv[2], {("db", "write_query"): lambda sql: ran.append(sql) or "done"}) as run:
        print(json.dumps({"outcomes": [c.outcome for c in run.resumed_calls], "ran": ran}))
except ApprovalPending as exc:
    print(json.dumps({"pending": list(exc.approval_ids), "ran": ran}))
finally:
    store.close()
"""


def resume_elsewhere(path, run_id):
    """``Recorder.resume`` in another process; what it did, as JSON."""
    out = subprocess.run([sys.executable, "-c", RESUME, str(path), run_id, str(HERE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_disabled_then_re_enabled_before_resume_the_approval_stays_withdrawn(store, keys, tmp_path):
    """The old rule counted alice's approval again once she was re-enabled: the call ran on it."""
    path, root = tmp_path / "store", tmp_path / "root.key"
    run_id, aid = suspended(store)
    store.close()
    assert ok("approvals", "approve", aid, "--reason", "looks fine", "--key-file", keys["alice"], "-s", path) == \
        f"alice approved {aid}; request is now approved\n"
    assert ok("identities", "disable", "alice", "--reason", "lost laptop", "--admin-key", root, "-s", path) == \
        "identity alice disabled\n"
    assert ok("identities", "enable", "alice", "--reason", "found it", "--admin-key", root, "-s", path) == \
        "identity alice enabled\n"
    store = sealbox.open_store(path)
    try:
        disabled = dict(change_leaves(store, "alice"))["disabled"]
        answered = answer_leaf(store, run_id, "alice")
        state = get_approval(store, aid)
        assert (state.status, state.decided_by) == ("pending", ())
        (alice,) = state.answers
        assert (alice.problem, alice.withdrawn_by, alice.withdrawn_leaf, alice.disabled_leaf) == (
            "identity_disabled", "disabled", disabled, disabled)
    finally:
        store.close()

    assert resume_elsewhere(path, run_id) == {"pending": [aid], "ran": []}
    shown = ok("approvals", "show", aid, "-s", path).splitlines()
    assert f"status     pending (approval by alice withdrawn: disabled at leaf {disabled})" in shown
    assert any(line.endswith(f"alice approve (does not count: identity_disabled; alice was disabled at leaf {disabled} "
                             "after answering, before the call ran: this approval was withdrawn): looks fine")
               for line in shown), shown
    store = sealbox.open_store(path)
    try:
        assert notes(store, run_id) == [{
            "text": f"approval {aid}: the approve answer of alice (leaf {answered}) no longer counts: identity alice "
                    f"was disabled at leaf {disabled}, before the call ran; the request is pending",
            "about": {"approval_id": aid, "withdrawn": {"identity": "alice", "answer_leaf": answered,
                                                        "change": "disabled", "change_leaf": disabled}}}]
        assert "run.resumed" not in kinds(store, run_id) and "tool.result" not in kinds(store, run_id)
    finally:
        store.close()
    # alice, whose approval was withdrawn, cannot answer this request again: another approver may
    again = sb("approvals", "approve", aid, "--reason", "it was me", "--key-file", keys["alice"], "-s", path)
    assert (again.returncode, again.stderr) == (2, f"error: answer refused: the identity has already answered this "
                                                   f"request (alice on {aid})\n")
    assert resume_elsewhere(path, run_id) == {"pending": [aid], "ran": []}
    store = sealbox.open_store(path)
    try:
        assert len(notes(store, run_id)) == 1  # noted once
    finally:
        store.close()


def test_the_leaked_key_incident_flow_disable_rotate_enable_never_runs_the_call(store, keys, tmp_path):
    """An attacker approves with alice's leaked key; the admin disables alice, rotates her key and
    re-enables her. The attacker's approval stays withdrawn (by the disable, the first change after it);
    bob's approval then lets the call run, and verify finds nothing wrong (bob is not late)."""
    path, root = tmp_path / "store", tmp_path / "root.key"
    run_id, aid = suspended(store)
    store.close()
    ok("approvals", "approve", aid, "--reason", "totally fine", "--key-file", keys["alice"], "-s", path)
    ok("identities", "disable", "alice", "--reason", "key leaked", "--admin-key", root, "-s", path)
    ok("identities", "rotate", "alice", "--key-out", tmp_path / "alice-2.key", "--reason", "key leaked",
       "--admin-key", root, "-s", path)
    ok("identities", "enable", "alice", "--reason", "new key", "--admin-key", root, "-s", path)
    store = sealbox.open_store(path)
    try:
        changes = change_leaves(store, "alice")
        assert [c for c, _ in changes] == ["added", "disabled", "key_changed", "enabled"]
        disabled = changes[1][1]
        answered = answer_leaf(store, run_id, "alice")
    finally:
        store.close()
    assert resume_elsewhere(path, run_id) == {"pending": [aid], "ran": []}
    listed = ok("approvals", "list", "-s", path)
    assert f"pending (approval by alice withdrawn: disabled at leaf {disabled})" in listed
    (row,) = json.loads(ok("approvals", "list", "--json", "-s", path))
    assert (row["status"], row["withdrawn"]) == ("pending", [
        {"identity": "alice", "answer_leaf": answered, "change": "disabled", "change_leaf": disabled}])
    (csv_row,) = csv.DictReader(io.StringIO(ok("approvals", "list", "--csv", "-s", path)))
    assert (csv_row["status"], json.loads(csv_row["withdrawn"])) == ("pending", row["withdrawn"])

    ok("approvals", "approve", aid, "--reason", "checked the query", "--key-file", keys["bob"], "-s", path)
    assert resume_elsewhere(path, run_id) == {"outcomes": ["approved"], "ran": ["DELETE FROM t"]}
    store = sealbox.open_store(path)
    try:
        state = get_approval(store, aid)
        assert (state.status, state.decided_by, state.outcome) == ("approved", ("bob",), "approved")
        assert [(a.identity, a.problem) for a in state.answers] == [("alice", "identity_disabled"), ("bob", None)]
        report = verify_store(store)
        assert report.ok, [(p.code, p.message) for p in report.problems]
    finally:
        store.close()
    assert sb("verify", path).returncode == 0


def test_a_rotation_alone_withdraws_the_approval(store, keys, tmp_path):
    """No disable: alice (or an admin) rotates her key after an approval was signed with the old one."""
    path = tmp_path / "store"
    run_id, aid = suspended(store)
    store.close()
    ok("approvals", "approve", aid, "--reason", "fine", "--key-file", keys["alice"], "-s", path)
    ok("identities", "rotate", "alice", "--key-out", tmp_path / "alice-2.key", "--reason", "key leaked",
       "--admin-key", keys["alice"], "-s", path)
    store = sealbox.open_store(path)
    try:
        rotated = dict(change_leaves(store, "alice"))["key_changed"]
        answered = answer_leaf(store, run_id, "alice")
        state = get_approval(store, aid)
        (alice,) = state.answers
        assert (state.status, alice.problem, alice.withdrawn_by, alice.withdrawn_leaf, alice.disabled_leaf) == (
            "pending", "key_rotated", "rotated", rotated, None)
        assert alice.to_dict()["withdrawn"] == {"change": "rotated", "change_leaf": rotated}
        assert "disabled_leaf" not in alice.to_dict()
    finally:
        store.close()
    assert resume_elsewhere(path, run_id) == {"pending": [aid], "ran": []}
    shown = ok("approvals", "show", aid, "-s", path).splitlines()
    assert f"status     pending (approval by alice withdrawn: key rotated at leaf {rotated})" in shown
    assert any(line.endswith(f"alice approve (does not count: key_rotated; alice's key was rotated at leaf {rotated} "
                             "after answering, before the call ran: this approval was withdrawn): fine")
               for line in shown), shown
    shown_json = json.loads(ok("approvals", "show", aid, "--json", "-s", path))
    assert [(a["problem"], a["withdrawn"]) for a in shown_json["answers"]] == [
        ("key_rotated", {"change": "rotated", "change_leaf": rotated})]
    store = sealbox.open_store(path)
    try:
        assert notes(store, run_id) == [{
            "text": f"approval {aid}: the approve answer of alice (leaf {answered}) no longer counts: the key of "
                    f"identity alice was rotated at leaf {rotated}, before the call ran; the request is pending",
            "about": {"approval_id": aid, "withdrawn": {"identity": "alice", "answer_leaf": answered,
                                                        "change": "rotated", "change_leaf": rotated}}}]
        assert verify_store(store).ok  # the answer verifies under the key the log held when it was given
    finally:
        store.close()
    # her new key does not answer this request again either (one answer per identity)
    again = sb("approvals", "approve", aid, "--reason", "me again", "--key-file", tmp_path / "alice-2.key", "-s", path)
    assert again.returncode == 2 and "has already answered this request" in again.stderr


def test_a_rotation_after_the_call_was_resumed_changes_nothing(store, keys, tmp_path):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "fine", keys["alice"])
    tool = Tool()
    with Recorder(store, policy=policy()).resume(run_id, {("db", "write_query"): tool}):
        pass
    rotate_key(store, "alice", tmp_path / "alice-2.key", "routine", admin_key=keys["alice"])
    state = get_approval(store, aid)
    assert (state.status, state.decided_by, state.outcome, state.answers[0].problem,
            state.answers[0].withdrawn_by) == ("approved", ("alice",), "approved", None, None)
    assert tool.calls == ["DELETE FROM t"] and notes(store, run_id) == [] and verify_store(store).ok


def test_a_deny_survives_a_rotation_and_a_disable(store, keys, tmp_path):
    run_id, aid = suspended(store)
    answer(store, aid, "deny", "not on a Friday", keys["alice"])
    rotate_key(store, "alice", tmp_path / "alice-2.key", admin_key=keys["alice"])
    from sealbox.identities import disable_identity, enable_identity

    disable_identity(store, "alice", "gone", admin_key=tmp_path / "root.key")
    enable_identity(store, "alice", "back", admin_key=tmp_path / "root.key")
    state = get_approval(store, aid)
    assert (state.status, state.decided_by, state.answers[0].problem) == ("denied", ("alice",), None)
    tool = Tool()
    with Recorder(store, policy=policy()).resume(run_id, {("db", "write_query"): tool}) as run:
        (call,) = run.resumed_calls
    assert (call.outcome, call.ran, tool.calls) == ("denied", False, [])
    assert notes(store, run_id) == []


def test_in_a_quorum_of_two_a_rotation_withdraws_one_approver_and_a_third_completes_it(store, keys, tmp_path):
    run_id, aid = suspended(store, "deploy")
    answer(store, aid, "approve", "ok", keys["alice"])
    rotate_key(store, "alice", tmp_path / "alice-2.key", admin_key=keys["alice"])
    answer(store, aid, "approve", "ok", keys["carol"])  # not late: the request is pending again
    state = get_approval(store, aid)
    assert state.status == "pending" and [(a.identity, a.problem) for a in state.answers] == [
        ("alice", "key_rotated"), ("carol", None)]
    answer(store, aid, "approve", "ok", keys["bob"])
    assert get_approval(store, aid).status == "approved"
    tool = Tool()
    with Recorder(store, policy=policy()).resume(run_id, {("db", "deploy"): tool}) as run:
        (call,) = run.resumed_calls
    assert (call.outcome, tool.calls) == ("approved", ["DELETE FROM t"])
    report = verify_store(store)
    assert report.ok, [(p.code, p.message) for p in report.problems]


def test_answer_refuses_a_second_answer_of_an_identity_whose_approval_was_withdrawn(store, keys, tmp_path):
    """answer() and evaluate() agree: the withdrawn answer is still alice's one answer to the request
    (before, answer() wrote her second answer, which evaluate() then did not count: duplicate)."""
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "fine", keys["alice"])
    new = rotate_key(store, "alice", tmp_path / "alice-2.key", admin_key=keys["alice"])
    with pytest.raises(ApprovalError) as refused:
        answer(store, aid, "approve", "fine again", new.key_path)
    assert refused.value.code == "duplicate"
    assert [e.payload["identity"] for e in store.read_run(run_id) if e.kind == "approval.answered"] == ["alice"]


def test_a_note_written_before_rotations_withdrew_approvals_is_not_written_again(store, keys, tmp_path):
    """A store where an earlier Sealbox noted the withdrawal as ``{identity, answer_leaf, disabled_leaf}``:
    the next resume reads it as that ``disabled``'s note and does not note it again."""
    from sealbox.events import EventDraft
    from sealbox.identities import disable_identity

    run_id, aid = suspended(store)
    answer(store, aid, "approve", "fine", keys["alice"])
    disabled = disable_identity(store, "alice", "key leaked", admin_key=tmp_path / "root.key").since_leaf
    answered = answer_leaf(store, run_id, "alice")
    step = get_approval(store, aid).step
    old = {"text": "noted by an earlier Sealbox", "about": {"approval_id": aid, "withdrawn": {
        "identity": "alice", "answer_leaf": answered, "disabled_leaf": disabled}}}
    store.append(EventDraft("note", old, run_id=run_id, principal="sealbox", step=step))
    with pytest.raises(ApprovalPending):
        with Recorder(store, policy=policy()).resume(run_id, {("db", "write_query"): Tool()}):
            pass
    assert notes(store, run_id) == [old]


def test_a_withdrawn_approval_is_not_listed_as_an_approver_of_the_call_that_ran(store, keys, tmp_path):
    """alice approves, her key is rotated (withdrawn), bob approves, the call runs: the call's approvers
    are bob alone; alice's answer is listed apart, as not counted, in ``sealbox calls`` and Parquet."""
    from sealbox.interop.parquet import call_rows

    path, root = tmp_path / "store", tmp_path / "root.key"
    run_id, aid = suspended(store)
    store.close()
    ok("approvals", "approve", aid, "--reason", "fine", "--key-file", keys["alice"], "-s", path)
    ok("identities", "rotate", "alice", "--key-out", tmp_path / "alice-2.key", "--admin-key", root, "-s", path)
    ok("approvals", "approve", aid, "--reason", "fine too", "--key-file", keys["bob"], "-s", path)
    assert resume_elsewhere(path, run_id) == {"outcomes": ["approved"], "ran": ["DELETE FROM t"]}
    store = sealbox.open_store(path)
    try:
        [prow] = [r for r in call_rows(store, [run_id]) if r["tool"] == "write_query"]
        assert prow["approver"] == ["bob"]
    finally:
        store.close()
    listed = json.loads(ok("calls", "--run", run_id, "--json", "-s", path))
    [call] = [c for c in listed if c["tool"] == "write_query"]
    assert [a["identity"] for a in call["approvers"]] == ["bob"]
