"""Approval events that fail their kind's schema (only a change below Sealbox makes one; verify
reports ``event_malformed``) are read, never trusted, and never stop a reader: a malformed request
is ``malformed`` and can never be approved, a malformed answer does not count, a malformed
``run.resumed`` gives no outcome — in ``approvals list/show``, ``report``, ``runs show`` and replay.

Real SQLite stores, changed with plain sqlite3 below Sealbox (triggers dropped, then put back).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sealbox import verify_store
from sealbox.approvals import ApprovalError, ApprovalPending, answer, get_approval, list_approvals
from sealbox.identities import add_identity
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.replay import Replayer
from sealbox.store.base import DamagedEventError
from sealbox.report import build_report, render_html, render_markdown
from identity_testkit import admin_key

SEALBOX = str(Path(sys.executable).parent / "sealbox")

pytestmark = pytest.mark.sqlite_only("records are made malformed by editing the SQLite file below Sealbox (json_set on "
                                     "events.raw with its triggers dropped)")

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
"""

MALFORMED = [
    ("$.payload.quorum", "many", "approval.requested: data.quorum must be integer"),
    ("$.payload.ask", [1], "approval.requested: data.ask must be object"),
    ("$.payload.expires_at", "never", "approval.requested: data.expires_at cannot be validated by any definition"),
    # the schema's form, but no time: the schema passes it, the reader cannot
    ("$.payload.expires_at", "2026-02-30T00:00:00Z",
     "approval.requested: expires_at '2026-02-30T00:00:00Z' is not a valid time"),
]


def agent(run):
    run.call_tool("db", "write_query", {"query": "DELETE FROM customers"}, lambda query: "ok")


def recorder(store) -> Recorder:
    return Recorder(store, policy=Policy.from_text(textwrap.dedent(POLICY)), approvals="suspend")


@pytest.fixture
def folder(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(init_store, folder):
    return init_store(folder)


@pytest.fixture
def alice(store, tmp_path) -> Path:
    return add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def suspended(store) -> tuple[str, str]:
    """A run suspended on one write_query: (run id, approval id)."""
    with pytest.raises(ApprovalPending) as pending:
        with recorder(store).run(agent="bot", principal="agent:bot") as run:
            agent(run)
    return pending.value.run_id, pending.value.approval_id


def leaf_of(store, run_id: str, kind: str) -> int:
    return next(e.leaf_index for e in store.read_run(run_id) if e.kind == kind)


def tamper(folder: Path, leaf: int, path: str, value) -> None:
    """Set ``path`` of the event at ``leaf`` to ``value`` below Sealbox: the triggers are dropped,
    the row changed, and the triggers put back (only the data change is left to find)."""
    db = sqlite3.connect(folder / "sealbox.db", isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        triggers = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
        saved = [r[0] for r in db.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
        for name in triggers:
            db.execute(f'DROP TRIGGER "{name}"')
        changed = db.execute("UPDATE events SET raw = CAST(json_set(CAST(raw AS TEXT), ?, json(?)) AS BLOB)"
                             " WHERE leaf_index = ?", (path, json.dumps(value), leaf)).rowcount
        for sql in saved:
            db.execute(sql)
        db.execute("COMMIT")
    finally:
        db.close()
    assert changed == 1


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**env, "COLUMNS": "400"})


# ----------------------------------------------------------------------------- requests


@pytest.mark.parametrize("path, value, reason", MALFORMED)
def test_a_malformed_request_is_malformed_and_never_approved(store, folder, alice, path, value, reason):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "checked", alice)  # approved, then the request is changed below Sealbox
    assert get_approval(store, aid).status == "approved"
    tamper(folder, leaf_of(store, run_id, "approval.requested"), path, value)

    state = get_approval(store, aid)

    assert (state.status, state.malformed, state.decided_by, state.decided_at) == ("malformed", reason, (), None)
    assert [(a.identity, a.problem) for a in state.answers] == [("alice", "malformed_request")]
    assert state.to_dict()["malformed"] == reason
    assert [(s.approval_id, s.status) for s in list_approvals(store)] == [(aid, "malformed")]
    assert list_approvals(store, pending=True) == []
    assert not verify_store(store).ok


def test_a_malformed_request_cannot_be_answered(store, folder, alice):
    run_id, aid = suspended(store)
    tamper(folder, leaf_of(store, run_id, "approval.requested"), "$.payload.quorum", "many")
    size = store.size()

    with pytest.raises(ApprovalError) as info:
        answer(store, aid, "approve", "checked", alice)

    assert info.value.code == "malformed_request"  # it was 'already_decided': "was already malformed by"
    assert str(info.value) == (f"approval {aid} cannot be answered: the request's event is malformed: it can never "
                               f"be approved ({get_approval(store, aid).malformed}); run `sealbox verify`")
    assert store.size() == size
    assert get_approval(store, aid).status == "malformed"


def test_approvals_list_show_runs_show_and_report_read_a_malformed_request(store, folder, alice, tmp_path):
    run_id, aid = suspended(store)
    tamper(folder, leaf_of(store, run_id, "approval.requested"), "$.payload.ask", [1])
    store.close()
    reason = "approval.requested: data.ask must be object"

    listed = cli("approvals", "list", "--json", "-s", str(folder))
    assert listed.returncode == 0, listed.stderr
    assert [(r["approval_id"], r["status"]) for r in json.loads(listed.stdout)] == [(aid, "malformed")]

    shown = cli("approvals", "show", aid, "-s", str(folder))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1] == f"status     malformed ({reason}; it can never be approved)"
    assert "asked      [1]" in lines

    runs = cli("runs", "show", run_id, "--json", "-s", str(folder))
    assert runs.returncode == 0, runs.stderr
    details = {r["kind"]: r["detail"] for r in json.loads(runs.stdout)["events"]}
    assert details["approval.requested"] == f"approval {aid}: malformed ({reason})"

    out = tmp_path / "r.md"
    report = cli("report", run_id, "-o", str(out), "-s", str(folder))
    assert report.returncode == 0, report.stderr
    assert "store NOT VERIFIED" in report.stdout
    md = out.read_text()
    assert f"### Approval `{aid}`: malformed" in md
    assert f"MALFORMED REQUEST: {reason}; it can never be approved." in md
    assert "| **asked** | `[1]` |" in md
    assert "| **verification** | NOT VERIFIED |" in md
    # the tampered row is marked with what verification found at it (tests/report/test_report_failed_rows.py)
    [row] = [r for r in md.splitlines() if "| approval.requested | agent:bot | " in r]
    assert "| approval.requested | agent:bot | **FAILED VERIFICATION**: event\\_malformed \\[run " in row
    assert row.endswith(f" — malformed event ({reason}) |")


@pytest.mark.parametrize("path, value, reason", MALFORMED)
def test_the_report_renders_a_malformed_request_in_both_formats(store, folder, path, value, reason):
    run_id, aid = suspended(store)
    tamper(folder, leaf_of(store, run_id, "approval.requested"), path, value)

    report = build_report(store, run_id, now="2026-12-01T00:00:00Z")

    [view] = report.approvals
    assert (view.approval_id, view.status, view.malformed, view.decided_by) == (aid, "malformed", reason, ())
    assert report.verification.ok is False
    [entry] = [t for t in report.timeline if t.kind == "approval.requested"]
    assert entry.summary == f"malformed event ({reason})"
    assert "MALFORMED REQUEST" in render_markdown(report)
    page = render_html(report)
    assert ">malformed request</span>" in page and ">NOT VERIFIED</span>" in page


def test_replay_of_a_run_held_by_a_malformed_request_says_so(store, folder):
    run_id, aid = suspended(store)
    leaf = leaf_of(store, run_id, "approval.requested")
    tamper(folder, leaf, "$.payload.quorum", "many")

    # a request made malformed below Sealbox no longer hashes to its leaf: replay serves only what was
    # recorded, so it refuses the run before the agent starts (it said 'pending_approval' at step 2 before)
    with pytest.raises(DamagedEventError) as caught:
        Replayer(store).replay(run_id, agent)

    assert str(caught.value).startswith(
        f"the event at leaf {leaf} (run {run_id}, run_seq 4, approval.requested) no longer hashes to its "
        "recorded leaf hash: the store was changed below Sealbox")


# ----------------------------------------------------------------------------- answers and resumes


def test_a_malformed_answer_does_not_count(store, folder, alice):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "checked", alice)
    # the client is not covered by the signature: the answer still verifies, but fails its schema
    tamper(folder, leaf_of(store, run_id, "approval.answered"), "$.payload.client", [1])

    state = get_approval(store, aid)

    assert (state.status, state.decided_by) == ("pending", ())
    assert [(a.identity, a.decision, a.client, a.problem) for a in state.answers] == [
        ("alice", "approve", {}, "malformed")]
    [row] = store.query_calls(tool="write_query")
    assert (row["approvers"], [u["problem"] for u in row["uncounted"]]) == ([], ["malformed"])


def resumed_after_denial(store, alice) -> tuple[str, str]:
    run_id, aid = suspended(store)
    answer(store, aid, "deny", "not today", alice)
    with recorder(store).resume(run_id) as run:
        assert [c.outcome for c in run.resumed_calls] == ["denied"]
    assert (get_approval(store, aid).resumed, get_approval(store, aid).outcome) == (True, "denied")
    return run_id, aid


def test_a_malformed_resume_gives_no_outcome(store, folder, alice):
    run_id, aid = resumed_after_denial(store, alice)
    tamper(folder, leaf_of(store, run_id, "run.resumed"), "$.payload.outcomes", [1])

    state = get_approval(store, aid)

    assert (state.status, state.decided_by, state.resumed, state.outcome) == ("denied", ("alice",), True, None)
    report = build_report(store, run_id, now="2026-12-01T00:00:00Z")
    [view] = report.approvals
    assert (view.status, view.wait_s) == ("denied", None)
    [entry] = [t for t in report.timeline if t.kind == "run.resumed"]
    assert entry.summary == "malformed event (run.resumed: data.outcomes must be object)"
    assert report.verification.ok is False


def test_replay_past_a_malformed_resume_stops_and_says_why(store, folder, alice):
    run_id, aid = resumed_after_denial(store, alice)
    leaf = leaf_of(store, run_id, "run.resumed")
    tamper(folder, leaf, "$.payload.outcomes", [1])

    # as above: a run.resumed made malformed below Sealbox is a changed event, and replay refuses the run
    with pytest.raises(DamagedEventError) as caught:
        Replayer(store).replay(run_id, agent)

    assert str(caught.value).startswith(
        f"the event at leaf {leaf} (run {run_id}, run_seq 7, run.resumed) no longer hashes to its "
        "recorded leaf hash: the store was changed below Sealbox")


def test_a_malformed_answer_is_marked_on_the_report_timeline_and_in_runs_show(store, folder, alice):
    run_id, aid = suspended(store)
    answer(store, aid, "approve", "checked", alice)
    tamper(folder, leaf_of(store, run_id, "approval.answered"), "$.payload.client", [1])

    report = build_report(store, run_id, now="2026-12-01T00:00:00Z")
    [entry] = [t for t in report.timeline if t.kind == "approval.answered"]
    assert entry.summary == "malformed event (approval.answered: data.client must be object)"
    [view] = report.approvals
    assert [(a.identity_name, a.counted, a.problem) for a in view.answers] == [("alice", False, "malformed")]
    store.close()
    runs = cli("runs", "show", run_id, "--json", "-s", str(folder))
    assert runs.returncode == 0, runs.stderr
    details = {r["kind"]: r["detail"] for r in json.loads(runs.stdout)["events"]}
    assert details["approval.answered"] == "approve by alice (does not count: malformed)"
    assert details["approval.requested"].startswith(f"approval {aid}: pending; asks groups ops, identities -; quorum 1; ")


def test_a_run_held_by_a_malformed_request_is_not_resumed(store, folder, alice):
    """resume used to write outcome 'malformed' and deny with a "the policy changed" message (and
    a request without call_id or server would have raised KeyError): nothing is written now."""
    run_id, aid = suspended(store)
    tamper(folder, leaf_of(store, run_id, "approval.requested"), "$.payload.quorum", "many")
    size = store.size()
    with pytest.raises(ApprovalError) as info:
        recorder(store).resume(run_id, {("db", "write_query"): lambda query: "ran"})
    assert info.value.code == "malformed_request"
    assert str(info.value) == (f"run {run_id} is held by approval request {aid}, whose event is malformed "
                               "(approval.requested: data.quorum must be integer): it was changed below Sealbox; "
                               "nothing was resumed (run `sealbox verify`)")
    assert store.size() == size
