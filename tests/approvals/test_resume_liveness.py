"""A run resumed after an approval is 'running' while the resuming process carries out its approved
call (Recorder.resume runs it before returning), and 'interrupted' once that process has died."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from approval_helpers import POLICY, policy

from sealbox.approvals import ApprovalPending, answer
from sealbox.recorder import Recorder

RESUMER = textwrap.dedent("""
    import sys, textwrap, time
    from sealbox import open_store
    from sealbox.policy import Policy
    from sealbox.recorder import Recorder

    store = open_store(sys.argv[1])
    rec = Recorder(store, policy=Policy.from_text(open(sys.argv[3]).read()), approvals="suspend")

    def write_query(sql):
        print("in the tool", flush=True)
        time.sleep(3600)

    rec.resume(sys.argv[2], tools={("db", "write_query"): write_query})
""")


def _status(store, run_id):
    return store.get_run(run_id)["status"]


def _settled_status(store, run_id):
    """The run's status once a killed process's lease is gone: on PostgreSQL the server drops the
    session's advisory locks a moment after the kill, when it notices the closed connection (as
    tests/query/test_runs_interrupted.py waits); on SQLite the lock goes with the process at once."""
    deadline = time.monotonic() + 60
    while _status(store, run_id) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    return _status(store, run_id)


def test_a_resumed_run_is_running_while_its_approved_call_runs_and_interrupted_once_its_process_died(
        store, keys, tmp_path):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    try:
        with rec.run(agent="par") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE"}, lambda sql: "deleted", call_id="call_W")
    except ApprovalPending as pending:
        aid = pending.approval_id
    assert _status(store, run.run_id) == "suspended"
    answer(store, aid, "approve", "ok", keys["alice"])
    (tmp_path / "resumer.py").write_text(RESUMER)
    (tmp_path / "policy.yaml").write_text(textwrap.dedent(POLICY))
    proc = subprocess.Popen([sys.executable, str(tmp_path / "resumer.py"), str(store.path), run.run_id,
                             str(tmp_path / "policy.yaml")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "in the tool"
        assert _status(store, run.run_id) == "running"
        assert [r["run_id"] for r in store.query_runs(status="interrupted")] == []
    finally:
        proc.kill()
        proc.wait()
    assert _settled_status(store, run.run_id) == "interrupted"
    assert [r["run_id"] for r in store.query_runs(status="interrupted")] == [run.run_id]
