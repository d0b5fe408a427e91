"""``Recorder.resume`` of a run suspended for a reason outside Sealbox's approvals (``RunContext.suspend``:
``run.suspended`` with ``approval_ids: []``, e.g. a LangGraph sub-agent stopped by ``interrupt()``) is
refused with a typed error, and writes nothing: there is no approval to wait for or claim, and whatever
suspended the run resumes it (LangGraph: ``Command(resume=...)``, which opens a new sub-agent run; the
suspended one stays suspended, the record of the wait, docs/integrations.md). Before, ``resume`` returned a
context with nothing resumed, and leaving its block recorded ``run.ended`` straight after ``run.suspended``,
with no ``run.resumed``. A run suspended for an approval, and a running run (step 4 of docs/approvals.md,
a resuming process that died), are resumed as before. Real stores (SQLite, and PostgreSQL when the URL is set)."""

from __future__ import annotations

import pytest
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox.approvals import ApprovalError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

REASON = "waiting for a human: LangGraph interrupt() stopped the graph"


def test_resuming_a_run_suspended_outside_approvals_is_refused_and_writes_nothing(backend, tmp_path):  # noqa: F811
    _, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, ALLOW_ALL)
    run = rec.run(agent="sub-agent").start()
    run.note("asked a human")
    run.suspend(REASON)
    kinds = [e.kind for e in store.read_run(run.run_id)]
    assert kinds == ["run.started", "note", "run.suspended"]
    with pytest.raises(ApprovalError) as caught:
        with rec.resume(run.run_id):
            pass
    assert caught.value.code == "not_awaiting_approval"
    assert str(caught.value) == (
        f"run {run.run_id} is suspended for a reason outside Sealbox's approvals ({REASON!r}), not waiting for an "
        "approval: Recorder.resume has nothing to resume; what suspended it resumes it (LangGraph: "
        f"Command(resume=...)), or Recorder.continue_run({run.run_id!r}) records more in it")
    assert [e.kind for e in store.read_run(run.run_id)] == kinds
    assert store.get_run(run.run_id)["status"] == "suspended"
    with rec.continue_run(run.run_id) as again:  # the leases were let go: the run can still be taken up
        again.note("taken up")
    assert [e.kind for e in store.read_run(run.run_id)] == kinds + ["note", "run.ended"]


def test_a_running_run_is_still_resumed_for_its_unknown_calls(backend, tmp_path):  # noqa: F811
    _, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, ALLOW_ALL)
    run = rec.run(agent="a").start()
    run.note("before")
    run.suspend(REASON)
    more = rec.continue_run(run.run_id)  # not suspended any more: its last event is this note
    more.note("taken up")
    more._release_live()  # its process "died" here: no run.ended
    with rec.resume(run.run_id) as resumed:
        assert resumed.resumed_calls == []
    assert [e.kind for e in store.read_run(run.run_id)] == [
        "run.started", "note", "run.suspended", "note", "run.ended"]
