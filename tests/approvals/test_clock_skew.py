"""Clock skew between the process that requested an approval and the one that answers it.

An answering process whose clock ran 2 h behind recorded ``approved`` with an ``answered_at`` two hours
before the request's ``requested_at``: the record said the approver answered before being asked (and
such a clock would also let an answer in after ``expires_at`` had passed by the requester's clock)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from approval_helpers import policy
from identity_testkit import admin_key

import sealbox.approvals as approvals
import sealbox.store.base as base
from sealbox import init_store
from sealbox.approvals import ApprovalError, ApprovalPending, answer, get_approval
from sealbox.identities import add_identity
from sealbox.recorder import Recorder


def _stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def pending(tmp_path):
    """SQLite only: a PostgreSQL store stamps its events with the database server's clock, whatever this
    process's clock says, so an answer from a machine behind cannot be recorded there
    (tests/store/test_postgres_server_clock.py)."""
    store = init_store(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    yield store, key
    store.close()


def _request(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda **_: "ran")
    return info.value.approval_id


def test_an_answer_from_a_clock_behind_the_request_is_refused_and_nothing_recorded(pending, monkeypatch):
    store, key = pending
    aid = _request(store)
    requested_at = get_approval(store, aid).requested_at
    fixed = datetime.fromisoformat(requested_at.replace("Z", "+00:00")) - timedelta(hours=2)
    monkeypatch.setattr(approvals, "_now", lambda: fixed)
    monkeypatch.setattr(base, "utc_now", lambda: _stamp(fixed))
    before = store.size()
    with pytest.raises(ApprovalError) as info:
        answer(store, aid, "approve", "ok", key)
    assert info.value.code == "clock_skew"
    assert str(info.value) == (
        f"answer refused: this machine's clock says {_stamp(fixed)[:-1]}Z, before approval {aid} was requested "
        f"({requested_at}, by the clock of the process that recorded it): the answer would be recorded as given "
        "7200.000 s before it was asked; one of the two clocks is wrong: fix it (or wait until this clock has "
        "passed the request's time)")
    assert store.size() == before
    state = get_approval(store, aid)
    assert (state.status, state.answers) == ("pending", ())
    monkeypatch.undo()
    # once the clocks agree, the same approver answers
    state = answer(store, aid, "approve", "ok", key)
    assert state.status == "approved" and state.answers[0].answered_at >= requested_at


def test_the_cli_refuses_it_in_one_line(pending, tmp_path, monkeypatch):
    """The request recorded by a process whose clock runs an hour ahead: `approvals approve` now is refused."""
    store, key = pending
    ahead = datetime.now(timezone.utc) + timedelta(hours=1)
    monkeypatch.setattr(approvals, "_now", lambda: ahead)
    monkeypatch.setattr(base, "utc_now", lambda: _stamp(ahead))
    aid = _request(store)
    monkeypatch.undo()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "approvals", "approve", aid, "--reason", "ok",
                          "--key-file", str(key), "-s", str(tmp_path / "store")], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "400"})
    assert out.returncode != 0 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith(f"error: answer refused: this machine's clock says ") and "Traceback" not in out.stderr
    assert f"before approval {aid} was requested ({_stamp(ahead)[:-1]}Z" in line
    assert get_approval(store, aid).answers == ()
