"""On PostgreSQL a resume lease survives the server ending its session.

The resume lease's advisory lock was held on a connection of its own that nothing watched: when the
server ended that session (``pg_terminate_backend``, a restart) the lock was gone while the process
still ran the resumed run, and another process could resume it too. It is now held on the process's
watched lease connection (the liveness leases' one), whose watcher reconnects and takes it again."""

from __future__ import annotations

import hashlib
import time

import pytest
from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import PG_URL, pg_backend  # noqa: F401

from sealbox.approvals import ApprovalError, ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.pause import take_lease
from sealbox.recorder import Recorder


def _holders(admin, schema: str, run_id: str) -> list[int]:
    key = int.from_bytes(hashlib.sha256(f"sealbox-resume:{schema}:{run_id}".encode()).digest()[:8], "big", signed=True)
    return [r[0] for r in admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
        " AND classid::bigint = %s AND objid::bigint = %s", ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchall()]


def test_a_resume_lease_is_taken_again_after_the_server_ended_its_session(pg_backend, tmp_path):  # noqa: F811
    psycopg = pytest.importorskip("psycopg")
    name, init, _ = pg_backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    answer(store, info.value.approval_id, "approve", "ok", key)
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        with Recorder(store, policy=policy()).resume(run.run_id, tools={("db", "write_query"): lambda sql: "ran"}) as r:
            assert r._lease is not None and r._lease.db_key is not None
            (holder,) = _holders(admin, store.schema, run.run_id)
            assert admin.execute("SELECT pg_terminate_backend(%s)", (holder,)).fetchone() == (True,)
            deadline = time.monotonic() + 30  # the watcher reconnects at once; generous for a loaded machine
            while time.monotonic() < deadline:
                again = _holders(admin, store.schema, run.run_id)
                if again and again != [holder]:  # the ended backend may still show for a moment
                    break
                time.sleep(0.05)
            assert len(again) == 1 and again != [holder]
            # another session (as another process would) cannot take the run meanwhile
            other = psycopg.connect(PG_URL, autocommit=True)
            try:
                k = int.from_bytes(hashlib.sha256(f"sealbox-resume:{store.schema}:{run.run_id}".encode()).digest()[:8],
                                   "big", signed=True)
                assert other.execute("SELECT pg_try_advisory_lock(%s)", (k,)).fetchone() == (False,)
            finally:
                other.close()
        assert _holders(admin, store.schema, run.run_id) == []  # released with the block
    # and this process may take it again (a lease released is not left behind)
    lease = take_lease(store, run.run_id)
    assert lease is not None
    lease.release()
    store.close()
