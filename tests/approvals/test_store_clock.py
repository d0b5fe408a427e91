"""The store's clock decides an approval's expiry, not the answering program's.

Reproduced before the fix, on SQLite and PostgreSQL: a request expiring 1 s after it was recorded,
answered 1.5 s later by a program whose clock read 1.5 s behind: ``answer()`` recorded ``approved``
with an ``answered_at`` before ``expires_at`` while the event's ``ts`` (the store's stamp) was after
it; and an answer appended around ``answer()`` after the expiry, signed with an ``answered_at``
before it, counted (``approved``) and ``verify`` was silent; on PostgreSQL, a machine whose clock ran a
minute behind the database server's recorded its answer at its own time."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from approval_helpers import policy, request_of
from identity_testkit import admin_key
from test_approval_index import backend, pg_backend  # noqa: F401  (the sqlite and PostgreSQL stores)

import sealbox.approvals as approvals
import sealbox.store.base as base
from sealbox import EventDraft, verify_store
from sealbox.approvals import ApprovalError, ApprovalPending, answer, get_approval, signed_fields
from sealbox.identities import add_identity, load_key, sign_fields
from sealbox.recorder import Recorder


@pytest.fixture
def quick(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "quick", {"n": 1}, lambda **_: "ran")  # expires 1 s after the request
    aid = info.value.approval_id
    expires = datetime.fromisoformat(request_of(store, run.run_id)["expires_at"].replace("Z", "+00:00"))
    while datetime.now(timezone.utc) < expires + timedelta(milliseconds=50):
        time.sleep(0.05)
    yield store, key, aid, run.run_id, expires
    store.close()


def test_an_answer_after_the_expiry_by_the_stores_clock_is_refused_whatever_the_answerers_clock(quick, monkeypatch):
    store, key, aid, run_id, expires = quick
    behind = expires - timedelta(milliseconds=500)  # the answering program's clock, after the request, before expiry
    monkeypatch.setattr(approvals, "_now", lambda: behind)
    with pytest.raises(ApprovalError) as info:
        answer(store, aid, "approve", "ok", key)
    assert info.value.code == "expired"
    state = get_approval(store, aid)
    assert (state.status, state.answers, state.expiry_recorded) == ("expired", (), True)


def test_an_answer_recorded_after_the_expiry_does_not_count_whatever_its_answered_at(quick):
    store, key, aid, run_id, expires = quick
    req = request_of(store, run_id)
    early = approvals._utc(expires - timedelta(milliseconds=500))
    payload = {"approval_id": aid, "binding": req["binding"], "decision": "approve", "identity": "alice",
               "reason": "backdated", "answered_at": early, "client": {"hostname": "h"}, "run_id": run_id}
    payload["signature"] = sign_fields(load_key(key), signed_fields(payload))
    step = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].step
    ev = store.append(EventDraft("approval.answered", payload, run_id=run_id, principal="alice", step=step))[0]
    assert ev.ts > req["expires_at"] and early < req["expires_at"]
    state = get_approval(store, aid)
    assert state.status == "expired"
    assert [(a.identity, a.answered_at, a.problem) for a in state.answers] == [("alice", early, "late")]
    [problem] = verify_store(store).problems
    assert (problem.code, problem.leaf_index) == ("approval_rule", ev.leaf_index)
    assert "the answer came after its request was decided or expired" in problem.message, problem.message


def test_an_answer_in_time_is_recorded_at_the_stores_time(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    state = answer(store, info.value.approval_id, "approve", "ok", key)
    [ev] = [e for e in store.read_run(run.run_id) if e.kind == "approval.answered"]
    assert state.status == "approved" and state.answers[0].answered_at == ev.ts
    store.close()


def test_on_postgres_request_and_answer_are_timed_by_the_servers_clock_whatever_the_machines(pg_backend, tmp_path,  # noqa: F811
                                                                                               monkeypatch):
    """Request and answer both written by processes whose clock runs 60 s behind the database server's:
    before, each was stamped with that clock (and, later, the answer was refused as ``clock_skew``); the
    PostgreSQL store now stamps every event with the server's clock, so the request's ``ts`` and its
    ``expires_at`` and the answer's ``ts`` and ``answered_at`` are the server's times."""
    import psycopg

    name, init, _ = pg_backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    with psycopg.connect(store.url, autocommit=True) as conn:
        server_before = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    behind = lambda: datetime.now(timezone.utc) - timedelta(seconds=60)  # noqa: E731
    monkeypatch.setattr(approvals, "_now", behind)
    monkeypatch.setattr(base, "utc_now", lambda: approvals._utc(behind()))
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    aid = info.value.approval_id
    state = answer(store, aid, "approve", "ok", key)
    with psycopg.connect(store.url, autocommit=True) as conn:
        server_after = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    [req] = [e for e in store.read_run(run.run_id) if e.kind == "approval.requested"]
    [ans] = [e for e in store.read_run(run.run_id) if e.kind == "approval.answered"]
    assert state.status == "approved" and state.answers[0].answered_at == ans.ts
    times = [approvals._parse(t) for t in (req.ts, ans.ts)]
    assert server_before <= times[0] <= times[1] <= server_after, (server_before, req.ts, ans.ts, server_after)
    assert approvals._parse(req.payload["expires_at"]) - times[0] == timedelta(hours=1)
    store.close()
