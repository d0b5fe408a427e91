"""``sealbox calls`` (``store.query_calls``) lists as approvers only the answers that count, with the
verdict of :func:`sealbox.approvals.evaluate`: an answer by an identity the log never authorized,
with a bad signature, or after the decision is listed apart, under ``uncounted``, with its problem.

Real SQLite stores; the forged events are appended with ``store.append`` (valid events that were
not written through ``answer()`` or ``add_identity()``), as a process holding the store could.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from query_helpers import SEALBOX

import sealbox
import sealbox.identities
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending, _now, _utc, answer, signed_fields
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity, load_key, sign_fields
from sealbox.ledger.checkpoint import Signer, generate_key
from sealbox.policy import ALLOW_ALL, Policy
from sealbox.recorder import Recorder
from identity_testkit import admin_key

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 2, expires: 1h}
"""


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def alice(store, tmp_path) -> Path:
    return add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def held_call(store) -> tuple[str, str, dict]:
    """A run suspended on one write_query (quorum 2): (run id, approval id, the request's payload)."""
    rec = Recorder(store, policy=Policy.from_text(textwrap.dedent(POLICY)), approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"query": "DELETE FROM customers"}, lambda query: "ok")
    run_id = pending.value.run_id
    request = next(e for e in store.read_run(run_id) if e.kind == "approval.requested")
    return run_id, pending.value.approval_id, request


def forged_answer(store, request, signer: Signer, identity: str, *, reason: str = "looks fine",
                  signed_reason: str | None = None, flags: list | None = None) -> str:
    """Append an ``approval.answered`` that did not go through answer(); its answered_at."""
    p = {"approval_id": request.payload["approval_id"], "binding": request.payload["binding"], "decision": "approve",
         "identity": identity, "reason": reason, "answered_at": _utc(_now()),
         "client": {"hostname": "h", "os_user": "u", "self_reported": True}}
    p["signature"] = sign_fields(signer, signed_fields({**p, "reason": signed_reason or reason}))
    p["key_id"] = signer.verifier.vkey.split("+")[1]
    p["flags"] = flags or []
    store.append(EventDraft("approval.answered", p, run_id=request.run_id, principal=identity, step=request.step))
    return p["answered_at"]


def unsigned_identity(store, name: str) -> Signer:
    """An ``identity.changed`` appended without any admin's signature (the log never authorizes it)."""
    skey, vkey = generate_key(name)
    store.append(EventDraft("identity.changed", {"name": name, "change": "added", "role": "approver",
                                                 "groups": ["ops"], "public_key": vkey},
                            run_id=SYSTEM_RUN_ID, principal="root"))
    return Signer.from_key(skey)


def answer_time(store, run_id, identity):
    return next(e.payload["answered_at"] for e in store.read_run(run_id)
                if e.kind == "approval.answered" and e.payload["identity"] == identity)


def the_row(store) -> dict:
    [row] = store.query_calls(tool="write_query")
    return row


def test_an_answer_by_an_identity_the_log_never_authorized_is_not_an_approver(store, alice):
    run_id, aid, request = held_call(store)
    mallory_at = forged_answer(store, request, unsigned_identity(store, "mallory"), "mallory",
                               flags=[{"code": "shared_identity", "evidence": {}}])

    row = the_row(store)

    assert (row["approvers"], row["flags"]) == ([], [])
    assert row["uncounted"] == [{"identity": "mallory", "decision": "approve", "answered_at": mallory_at,
                                 "problem": "unknown_identity"}]
    assert sealbox.approvals.get_approval(store, aid).status == "pending"


def test_counted_answers_are_the_approvers_and_the_others_are_listed_with_their_problem(store, alice):
    run_id, aid, request = held_call(store)
    answer(store, aid, "approve", "checked", alice)
    # signed with alice's key over another reason than the one recorded: the signature does not verify
    bad_at = forged_answer(store, request, load_key(alice), "alice", reason="approved", signed_reason="other")
    mallory_at = forged_answer(store, request, unsigned_identity(store, "mallory"), "mallory")

    row = the_row(store)

    assert row["approvers"] == [{"identity": "alice", "decision": "approve",
                                 "answered_at": answer_time(store, run_id, "alice")}]
    assert row["uncounted"] == [
        {"identity": "alice", "decision": "approve", "answered_at": bad_at, "problem": "bad_signature"},
        {"identity": "mallory", "decision": "approve", "answered_at": mallory_at, "problem": "unknown_identity"},
    ]
    assert row["flags"] == []


def test_calls_json_csv_and_table_never_show_an_uncounted_answer_as_an_approver(store, alice, tmp_path):
    run_id, aid, request = held_call(store)
    answer(store, aid, "approve", "checked", alice)
    mallory_at = forged_answer(store, request, unsigned_identity(store, "mallory"), "mallory")
    alice_at = answer_time(store, run_id, "alice")
    store.close()

    def calls(*args):
        proc = subprocess.run([str(SEALBOX), "calls", "-s", str(tmp_path / "store"), "--tool", "write_query", *args],
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "1000"})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    [row] = json.loads(calls("--json"))
    assert row["approvers"] == [{"identity": "alice", "decision": "approve", "answered_at": alice_at}]
    assert row["uncounted"] == [{"identity": "mallory", "decision": "approve", "answered_at": mallory_at,
                                 "problem": "unknown_identity"}]
    [line] = csv.DictReader(io.StringIO(calls("--csv")))
    assert json.loads(line["approvers"]) == [{"identity": "alice", "decision": "approve", "answered_at": alice_at}]
    [table_row] = [line for line in calls().splitlines() if "write_query" in line]
    assert "│ alice (approve); not counted: mallory (approve: unknown_identity) │" in table_row
    assert "mallory (approve)" not in table_row


def test_rows_of_calls_without_approval_have_no_uncounted_key(store, alice):
    """Unchanged for calls that never went to approval (only require_approval rows get ``uncounted``)."""
    rec = Recorder(store, policy=Policy.from_text("version: 1\nrules:\n  - {id: all, effect: allow}\n"))
    with rec.run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda query: "ok")
    [row] = store.query_calls(tool="read_query")
    assert (row["approvers"], row["flags"], "uncounted" in row) == ([], [], False)


def test_the_identities_are_read_once_per_listing(store, alice, monkeypatch):
    for _ in range(3):
        run_id, aid, request = held_call(store)
        answer(store, aid, "approve", "checked", alice)
    reads = []
    real = sealbox.identities.identity_book
    monkeypatch.setattr(sealbox.identities, "identity_book", lambda s: reads.append(1) or real(s))

    rows = store.query_calls(tool="write_query")

    assert [[a["identity"] for a in r["approvers"]] for r in rows] == [["alice"], ["alice"], ["alice"]]
    assert len(reads) == 1


def test_runs_show_and_the_report_mark_an_uncounted_answer_with_its_problem(store, alice, tmp_path):
    from sealbox.report import build_report

    run_id, aid, request = held_call(store)
    answer(store, aid, "approve", "checked", alice)
    forged_answer(store, request, unsigned_identity(store, "mallory"), "mallory")

    report = build_report(store, run_id, now="2026-12-01T00:00:00Z")
    assert [t.summary for t in report.timeline if t.kind == "approval.answered"] == [
        "approve by alice", "approve by mallory (does not count: unknown_identity)"]
    [view] = report.approvals
    assert [(a.identity_name, a.counted, a.problem) for a in view.answers] == [
        ("alice", True, None), ("mallory", False, "unknown_identity")]
    store.close()
    proc = subprocess.run([str(SEALBOX), "runs", "show", run_id, "--json", "-s", str(tmp_path / "store")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["detail"] for r in json.loads(proc.stdout)["events"] if r["kind"].startswith("approval.")] == [
        f"approval {aid}: pending; asks groups ops, identities -; quorum 2; binding {request.payload['binding']}",
        "approve by alice (counts)",
        "approve by mallory (does not count: unknown_identity)"]


def test_match_on_approvers_and_flags_finds_the_calls_they_approved(store, alice, tmp_path):
    # Regression (input: --match approvers~NAME / flags~CODE): the matches were tested before the
    # approvers were attached, so they matched no call at all
    admin = admin_key(store, tmp_path)
    ops = add_identity(store, "ops-oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "ops.key",
                       admin_key=admin).key_path
    first_run, first, _ = held_call(store)
    # from two clients: the same client would add quorum_same_client (test_flags_quorum.py)
    answer(store, first, "approve", "checked", alice, client={"hostname": "laptop", "os_user": "alice"})
    answer(store, first, "approve", "checked too", ops, client={"hostname": "noc", "os_user": "oncall"})
    second_run, second, request = held_call(store)
    answer(store, second, "approve", "checked", alice)
    forged_answer(store, request, unsigned_identity(store, "mallory"), "mallory")  # does not count
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as plain:
        plain.call_tool("db", "write_query", {"query": "DELETE FROM alice"}, lambda query: "ok")  # no approval

    def run_ids(*matches: str, limit: int | None = None) -> list[str]:
        return [row["run_id"] for row in store.query_calls(match=matches, limit=limit)]

    assert run_ids("approvers~alice") == [first_run, second_run]
    assert run_ids("approvers.identity~^ops-oncall$") == [first_run]
    assert run_ids("flags~shared_identity") == [first_run]
    assert run_ids("approvers.identity~mallory") == []  # an uncounted answer is not an approver
    assert run_ids("approvers~alice", limit=1) == [second_run]
    assert run_ids("approvers~alice", "arguments.query~DELETE", "flags~shared") == [first_run]
    (row,) = store.query_calls(match=["flags~shared"])
    assert [a["identity"] for a in row["approvers"]] == ["alice", "ops-oncall"]
    assert row["flags"] == ["shared_identity"] and row["uncounted"] == []
    store.close()
    proc = subprocess.run([SEALBOX, "calls", "-s", str(tmp_path / "store"), "--match", "approvers~ops-oncall", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["run_id"] for r in json.loads(proc.stdout)] == [first_run]


def test_runs_show_flags_an_answer_by_a_shared_account(store, alice, tmp_path):
    # Regression (found walking the README as a new user): `runs show` printed "approve by ops-oncall
    # (counts)" for an answer from a shared account, while `calls` and `approvals show` flagged it
    ops = add_identity(store, "ops-oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "ops.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    run_id, aid, _ = held_call(store)
    answer(store, aid, "approve", "checked", alice, client={"hostname": "laptop", "os_user": "alice"})
    answer(store, aid, "approve", "checked too", ops, client={"hostname": "noc", "os_user": "oncall"})
    store.close()
    base = [str(SEALBOX), "runs", "show", run_id, "-s", str(tmp_path / "store")]
    proc = subprocess.run([*base, "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [r["detail"] for r in json.loads(proc.stdout)["events"] if r["kind"] == "approval.answered"] == [
        "approve by alice (counts)", "approve by ops-oncall (counts ⚑ shared_identity)"]
    table = subprocess.run(base, capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    assert table.returncode == 0, table.stderr
    assert "approve by ops-oncall (counts ⚑ shared_identity)" in table.stdout
