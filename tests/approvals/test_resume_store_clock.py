"""``Recorder.resume`` decides an approval's expiry by the store's clock (``reader.stamp``: the ``ts`` its
``run.resumed`` gets), not by the resuming machine's. Before, ``claim`` read ``datetime.now`` inside its
transaction: a machine whose clock ran two hours ahead (of the PostgreSQL server, whose clock stamps the
events; on SQLite, of the store's stamp, ``time.time_ns``) recorded ``approval.expired`` and
``run.resumed`` (outcome ``expired``) with a ``ts`` an hour *before* the request's ``expires_at``; a
``sealbox approvals`` reading the log then had an expiry the log's own times contradict. Now the request
is still pending there: ``ApprovalPending``, nothing written. Real stores (SQLite, and PostgreSQL when the
URL is set); the machine's clock is Sealbox's ``datetime.now`` reading (``approvals._now``) moved ahead."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from approval_helpers import kinds, policy, request_of
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

import sealbox.approvals as approvals
import sealbox.pause as pause
from sealbox.approvals import ApprovalPending
from sealbox.recorder import Recorder


def test_a_machine_clock_ahead_does_not_record_an_expiry_before_expires_at(backend, tmp_path, monkeypatch):  # noqa: F811
    _, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")  # expires an hour after the request
    aid = info.value.approval_id
    expires_at = request_of(store, run.run_id)["expires_at"]
    before = kinds(store, run.run_id)
    ahead = lambda: datetime.now(timezone.utc) + timedelta(hours=2)  # noqa: E731
    monkeypatch.setattr(approvals, "_now", ahead)
    monkeypatch.setattr(pause, "_now", ahead, raising=False)  # the name claim read it under before
    with pytest.raises(ApprovalPending) as again:
        rec.resume(run.run_id, tools={("db", "write_query"): lambda **_: "ran"})
    assert again.value.approval_ids == (aid,)
    assert kinds(store, run.run_id) == before  # before: + approval.expired, run.resumed (ts an hour before expiry)
    assert all(e.ts < expires_at for e in store.read_run(run.run_id))
    store.close()
