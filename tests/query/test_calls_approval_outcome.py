"""``sealbox calls`` (``store.query_calls``) gives a call that went to approval and has no result the
outcome the log says it came to: ``denied`` (refused, or denied when its run resumed), ``expired``,
``unknown`` (approved and resumed, no result: it may have run), ``abandoned`` (its run ended without
resuming it: it never ran), and ``held`` only while it can still
be decided. Once listed as ``held`` whatever its approval became (a denial delivered to the client was
still "held").

On every backend: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
import uuid

import pytest
from conftest import BACKENDS
from query_helpers import SEALBOX

import sealbox
from identity_testkit import admin_key
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], expires: 2s}
"""


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
        yield s
        s.close()
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_outcome_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "store", postgres_url=url, schema=schema)
    try:
        yield s
    finally:
        s.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _recorders(store) -> tuple[Recorder, Recorder]:
    """(requests expiring in 2 s, requests expiring in 1 h). Only the calls meant to expire get the 2 s
    expiry: with one 2 s recorder for all, a request made after the sleep had to be answered (c-died) or
    still read as held (c-waiting) within 2 s of it, which a loaded host did not always manage."""
    short = Recorder(store, policy=Policy.from_text(textwrap.dedent(POLICY)), approvals="suspend")
    long = Recorder(store, policy=Policy.from_text(POLICY.replace("expires: 2s", "expires: 1h")), approvals="suspend")
    return short, long


def _suspend(rec: Recorder, call_id: str) -> tuple[str, str]:
    """A run suspended on one write_query: (run id, approval id)."""
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"query": f"DELETE FROM t -- {call_id}"}, lambda query: "ok",
                          call_id=call_id)
    return pending.value.run_id, pending.value.approval_id


def _resume(rec: Recorder, run_id: str):
    with rec.resume(run_id, tools={("db", "write_query"): lambda query: "ok"}) as run:
        [call] = run.resumed_calls
        return call.outcome


def test_a_denied_or_expired_approval_is_the_calls_outcome_not_held(store, tmp_path):
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec, long = _recorders(store)
    denied_run, denied = _suspend(long, "c-denied")
    answer(store, denied, "deny", "not today", key)
    _, refused = _suspend(long, "c-refused")  # denied, its run not resumed (yet)
    answer(store, refused, "deny", "no", key)
    approved_run, approved = _suspend(long, "c-approved")
    answer(store, approved, "approve", "fine", key)
    expired_run, _ = _suspend(rec, "c-expired")
    _suspend(rec, "c-pending")
    time.sleep(2.2)  # c-expired and c-pending expire; c-waiting is asked after
    _suspend(long, "c-waiting")
    assert _resume(long, denied_run) == "denied"
    assert _resume(rec, expired_run) == "expired"
    assert _resume(long, approved_run) == "approved"
    # an approved call resumed whose process died before its result: outcome unknown, as an allowed one
    dead_run, dead = _suspend(long, "c-died")
    answer(store, dead, "approve", "fine", key)
    dead_call = next(e for e in store.read_run(dead_run) if e.kind == "tool.call")
    store.append(EventDraft("run.resumed", {"approval_ids": [dead], "waited_us": 5, "outcomes": {dead: "approved"}},
                            run_id=dead_run, principal="agent:bot", step=dead_call.step))

    outcomes = {r["call_id"]: (r["decision"], r["outcome"], r["ok"]) for r in store.query_calls()}

    assert outcomes == {
        "c-denied": ("require_approval", "denied", None),
        "c-refused": ("require_approval", "denied", None),
        "c-approved": ("require_approval", "ok", True),
        "c-expired": ("require_approval", "expired", None),
        "c-pending": ("require_approval", "expired", None),  # expired unanswered: nobody can approve it now
        "c-waiting": ("require_approval", "held", None),
        "c-died": ("require_approval", "unknown", None),
    }
    # a --match on the outcome sees the same value (it is tested once the approvals were read)
    assert sorted(r["call_id"] for r in store.query_calls(match="outcome~^(denied|expired)$")) == [
        "c-denied", "c-expired", "c-pending", "c-refused"]
    assert [r["call_id"] for r in store.query_calls(match="outcome~^held$")] == ["c-waiting"]


def test_sealbox_calls_prints_denied_and_expired(store, tmp_path):
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec, long = _recorders(store)
    denied_run, denied = _suspend(long, "c-denied")
    answer(store, denied, "deny", "not today", key)
    expired_run, _ = _suspend(rec, "c-expired")
    time.sleep(2.2)
    with pytest.raises(ToolDenied):
        with long.resume(denied_run) as run:
            run.resumed_calls[0].value()
    _resume(rec, expired_run)
    path = str(store.path)
    store.close()

    out = subprocess.run([SEALBOX, "calls", "--store", path, "--json"], capture_output=True, text=True)

    assert out.returncode == 0, out.stderr
    assert [(r["call_id"], r["outcome"]) for r in json.loads(out.stdout)] == [
        ("c-denied", "denied"), ("c-expired", "expired")]
    table = subprocess.run([SEALBOX, "calls", "--store", path], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "250"})
    assert table.returncode == 0, table.stderr
    assert "held" not in table.stdout
    rows = [line for line in table.stdout.splitlines() if "db/write_query" in line]
    assert [(" denied " in r, " expired " in r) for r in rows] == [(True, False), (False, True)]


def test_the_incident_report_gives_the_same_outcomes(store, tmp_path):
    from sealbox.report import build_report, render_markdown

    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec, long = _recorders(store)
    denied_run, denied = _suspend(long, "c-denied")
    answer(store, denied, "deny", "not today", key)
    _resume(long, denied_run)
    expired_run, _ = _suspend(rec, "c-expired")
    time.sleep(2.2)
    _resume(rec, expired_run)
    waiting_run, _ = _suspend(long, "c-waiting")

    got = {run: [(c.call_id, c.outcome) for c in build_report(store, run, verify=False).tool_calls]
           for run in (denied_run, expired_run, waiting_run)}

    assert got == {denied_run: [("c-denied", "denied")], expired_run: [("c-expired", "expired")],
                   waiting_run: [("c-waiting", "held")]}
    assert "### Step 2: db/write\\_query: expired" in render_markdown(build_report(store, expired_run, verify=False))


def _end(store, run_id: str) -> None:
    """The run ends (cancelled) while its call still waits: as a gateway session closed, or a process
    that gave up on the approval and ended its run."""
    top = max(int(e.step.split(".")[0]) for e in store.read_run(run_id))
    store.append(EventDraft("run.ended", {"status": "cancelled"}, run_id=run_id, principal="agent:bot",
                            step=str(top + 1)))


def test_a_call_whose_run_ended_while_it_waited_is_abandoned_not_held(store, tmp_path):
    """A call held for approval whose run then ended can never run: it is ``abandoned``, not ``held``
    (which an investigator reads as "may still run once someone approves it"). Approved but never
    resumed before its run ended: abandoned too. Denied before its run ended: still denied."""
    from sealbox.report import build_report

    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=Policy.from_text(POLICY.replace("expires: 2s", "expires: 1h")), approvals="suspend")
    closed_run, _ = _suspend(rec, "c-closed")
    _end(store, closed_run)
    approved_run, approved = _suspend(rec, "c-approved-unresumed")
    answer(store, approved, "approve", "fine", key)
    _end(store, approved_run)
    denied_run, denied = _suspend(rec, "c-denied")
    answer(store, denied, "deny", "no", key)
    _end(store, denied_run)
    waiting_run, _ = _suspend(rec, "c-waiting")

    outcomes = {r["call_id"]: (r["decision"], r["outcome"], r["ok"]) for r in store.query_calls()}

    assert outcomes == {
        "c-closed": ("require_approval", "abandoned", None),
        "c-approved-unresumed": ("require_approval", "abandoned", None),
        "c-denied": ("require_approval", "denied", None),
        "c-waiting": ("require_approval", "held", None),
    }
    assert sorted(r["call_id"] for r in store.query_calls(match="outcome~^abandoned$")) == [
        "c-approved-unresumed", "c-closed"]
    assert [r["call_id"] for r in store.query_calls(match="outcome~^held$")] == ["c-waiting"]
    got = {run: [(c.call_id, c.outcome) for c in build_report(store, run, verify=False).tool_calls]
           for run in (closed_run, approved_run, waiting_run)}
    assert got == {closed_run: [("c-closed", "abandoned")], approved_run: [("c-approved-unresumed", "abandoned")],
                   waiting_run: [("c-waiting", "held")]}


def test_a_call_abandoned_before_its_approval_would_expire_stays_abandoned_once_that_time_passes(store):
    """The run ended while the request was pending, before its expiry: the request is ``closed`` and the
    call ``abandoned`` for good. They used to read ``expired`` once the expiry time passed (the listing
    changed with the clock, and said the request ran out of time, though its run had ended first)."""
    from sealbox.approvals import get_approval

    rec = Recorder(store, policy=Policy.from_text(textwrap.dedent(POLICY)), approvals="suspend")  # expires: 2s
    run_id, approval_id = _suspend(rec, "c-ended-early")
    _end(store, run_id)
    before = ([r["outcome"] for r in store.query_calls()], get_approval(store, approval_id).status)
    time.sleep(2.2)
    after = ([r["outcome"] for r in store.query_calls()], get_approval(store, approval_id).status)
    assert before == after == (["abandoned"], "closed")
