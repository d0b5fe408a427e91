"""Writing an answer reads only the answering identity's answers within the window.

shared_account_flags (run by approvals.answer() inside the write transaction) read every
approval.answered the identity had ever given: answering got slower with its history."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_flags import LAPTOP, request

from sealbox.approvals import answer, signed_fields


def _old_desk_answers(store, key_path, n):
    """``n`` validly signed answers by bob from another client than LAPTOP, not through answer()."""
    from sealbox import EventDraft
    from sealbox.identities import load_key, sign_fields

    key = load_key(key_path)
    aid = request(store)
    req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == aid)
    out = []
    for i in range(n):
        answered_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        payload = {"approval_id": aid, "binding": req.payload["binding"], "decision": "approve", "identity": "bob",
                   "reason": f"old {i}", "answered_at": answered_at,
                   "client": {"hostname": "old-desk", "os_user": "bob"}, "run_id": req.run_id}
        payload["signature"] = sign_fields(key, signed_fields(payload))
        out.append(EventDraft("approval.answered", payload, run_id=req.run_id, principal="bob", step=req.step))
    return out


@pytest.mark.sqlite_only("it traces SQLite statements (set_trace_callback) and reads SQLite's EXPLAIN QUERY PLAN")
def test_answering_does_not_read_the_identitys_answers_outside_the_window(store, keys, monkeypatch):
    import sealbox.store.base as base
    import sealbox.store.sqlite_queries as queries

    month_ago = datetime.now(timezone.utc) - timedelta(days=30)
    stamp = month_ago.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    drafts = _old_desk_answers(store, keys["bob"], 500)
    for d in drafts:  # answered and recorded a month ago
        d.payload["answered_at"] = stamp
    monkeypatch.setattr(base, "utc_now", lambda: stamp)
    old_leaves = {e.leaf_index for e in store.append(drafts)}
    monkeypatch.undo()
    assert len(old_leaves) == 500
    aid = request(store)

    built, statements = [], []
    real = queries.event_from_row
    monkeypatch.setattr(queries, "event_from_row", lambda leaf, *a: built.append(leaf) or real(leaf, *a))
    events = queries.Reader.events

    def traced(self, *a, **k):  # the SQL of every Reader.events query, on the write transaction's connection too
        self.conn.set_trace_callback(statements.append)
        try:
            return events(self, *a, **k)
        finally:
            self.conn.set_trace_callback(None)

    monkeypatch.setattr(queries.Reader, "events", traced)
    state = answer(store, aid, "approve", "ok", keys["bob"], client=LAPTOP)
    monkeypatch.undo()
    assert built and not old_leaves & set(built), sorted(old_leaves & set(built))[:5]
    [query] = [s for s in statements if "approval.answered" in s and "principal = 'bob'" in s]
    for stats in ("none", "ANALYZE"):
        if stats == "ANALYZE":
            store.reader().conn.execute("ANALYZE")
        plan = [row[3] for row in store.reader().conn.execute("EXPLAIN QUERY PLAN " + query)]
        assert plan == ["SEARCH events USING INDEX events_kind_ts (kind=? AND ts>?)", "USE TEMP B-TREE FOR ORDER BY"], \
            (stats, plan)
    # the flags are those of before: the old desk is outside the window
    [ev] = [e for e in store.reader().events(["approval.answered"]) if e.payload["approval_id"] == aid]
    assert ev.payload["flags"] == [] and state.answers[0].flags == ()

    # three answers from the old desk within the window flag bob's next answer, with them as evidence
    recent = [e.leaf_index for e in store.append(_old_desk_answers(store, keys["bob"], 3))]
    again = request(store)
    built.clear()
    monkeypatch.setattr(queries, "event_from_row", lambda leaf, *a: built.append(leaf) or real(leaf, *a))
    answer(store, again, "approve", "ok", keys["bob"], client=LAPTOP)
    monkeypatch.undo()
    assert not old_leaves & set(built)
    [ev] = [e for e in store.reader().events(["approval.answered"]) if e.payload["approval_id"] == again]
    [flag] = ev.payload["flags"]
    assert flag["code"] == "multiple_clients"
    assert [(a.get("leaf_index"), a["hostname"]) for a in flag["evidence"]["answers"]] == [
        (None, "laptop"), (state.answers[0].leaf_index, "laptop"), *((n, "old-desk") for n in recent)]
    assert flag["evidence"]["clients"] == [{"hostname": "laptop", "os_user": "alice", "user_agent": None},
                                           {"hostname": "old-desk", "os_user": "bob", "user_agent": None}]
