"""A run suspended outside a ``with`` block (``RunContext.start()``, no block) gave up neither its leases.

Durable pause means another process may resume a suspended run while the one that suspended it lives
on (docs/approvals.md, "Durable pause"). A blocking wait that timed out (``ApprovalPending``) outside a
block kept the run's resume lease until the process exited, so ``Recorder.resume`` in another process
was refused with ``already_resumed``; in suspend mode the suspending process kept the liveness lease,
so the resuming process recorded without one of its own (the run read ``interrupted`` once the
suspending process exited, while the resuming one still ran it). Suspending now releases both."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from approval_helpers import POLICY, policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox import liveness
from sealbox.approvals import answer
from sealbox.identities import add_identity
from sealbox.recorder import Recorder

SUSPENDER = textwrap.dedent("""
    import sys, time
    from sealbox import open_store
    from sealbox.approvals import ApprovalPending
    from sealbox.policy import Policy
    from sealbox.recorder import Recorder

    store = open_store(sys.argv[1])
    rec = Recorder(store, policy=Policy.from_text(open(sys.argv[2]).read()), approvals=sys.argv[3],
                   approval_timeout=0.2, approval_poll=0.05)
    run = rec.run(agent="outside").start()  # no with block
    try:
        run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: "ran here")
    except ApprovalPending as pending:
        print(pending.approval_id, run.run_id, flush=True)
    time.sleep(3600)  # the process lives on; the run stays suspended
""")


@pytest.mark.parametrize("mode", ["block", "suspend"])
def test_a_run_suspended_outside_a_block_is_resumed_by_another_process(backend, tmp_path, mode):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    (tmp_path / "suspender.py").write_text(SUSPENDER)
    (tmp_path / "policy.yaml").write_text(textwrap.dedent(POLICY))
    proc = subprocess.Popen([sys.executable, str(tmp_path / "suspender.py"), str(store.path),
                             str(tmp_path / "policy.yaml"), mode], stdout=subprocess.PIPE, text=True)
    try:
        aid, run_id = proc.stdout.readline().split()
        assert store.get_run(run_id)["status"] == "suspended"
        answer(store, aid, "approve", "ok", key)
        rec = Recorder(store, policy=policy())
        with rec.resume(run_id, tools={("db", "write_query"): lambda sql: f"ran: {sql}"}) as run:
            [call] = run.resumed_calls
            assert (call.outcome, call.ran, call.value()) == ("approved", True, "ran: DELETE FROM t")
            assert run._live is not None and run._live.held  # this process's own liveness lease
            assert liveness.checker(store)(run_id) is True
            assert store.get_run(run_id)["status"] == "running"
        assert proc.poll() is None  # the suspending process still lives
        assert store.get_run(run_id)["status"] == "ended"
        assert [e.kind for e in store.read_run(run_id)] == [
            "run.started", "tool.call", "policy.decision", "approval.requested", "run.suspended",
            "approval.answered", "run.resumed", "tool.result", "run.ended"]
    finally:
        proc.kill()
        proc.wait()
        store.close()
