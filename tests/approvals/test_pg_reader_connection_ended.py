"""`sealbox approvals list` (and every reader of a PostgreSQL store: ``store.reader()``) when the server ends
the reader's connection (pg_terminate_backend, a restart, a failover) between or during its reads: the next
read is answered on a new connection, or the command says one error line; never "internal error ... exit 70".
Real PostgreSQL (SEALBOX_TEST_POSTGRES_URL), each test in its own schema."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import pytest
from approval_helpers import policy

import sealbox
from sealbox.approvals import ApprovalPending
from sealbox.recorder import Recorder

PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not PG_URL, reason="needs SEALBOX_TEST_POSTGRES_URL")


@pytest.fixture
def pending(tmp_path):
    """A PostgreSQL store (its own schema) holding one pending request: (folder, run id, approval id)."""
    psycopg = pytest.importorskip("psycopg")
    schema = f"sbt_rdend_{uuid.uuid4().hex[:12]}"
    path = tmp_path / "store"
    store = sealbox.init_store(path, postgres_url=PG_URL, schema=schema)
    try:
        rec = Recorder(store, policy=policy(), approvals="suspend")
        with pytest.raises(ApprovalPending) as info:
            with rec.run(agent="bot", principal="agent:bot", run_id="r1") as run:
                run.call_tool("db", "write_query", {"sql": "DELETE 1"}, lambda sql: sql)
    finally:
        store.close()
    yield path, info.value.run_id, info.value.approval_id
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from sealbox.cli.main import main

    os.environ.pop("SEALBOX_DEBUG", None)
    try:
        main([*args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _after_identity_book(monkeypatch, then):
    """Run ``then(reader)`` once, after list_approvals read the identities and before it reads the requests."""
    import sealbox.approvals as approvals

    real = approvals.identity_book
    done: list[bool] = []

    def hooked(reader):
        book = real(reader)
        if not done:
            done.append(True)
            then(reader)
        return book

    monkeypatch.setattr(approvals, "identity_book", hooked)
    return done


def test_approvals_list_after_the_server_ended_the_readers_connection_between_its_reads(
        pending, monkeypatch, capsys):
    # was: "error: internal error: AdminShutdown: terminating connection due to
    # administrator command", exit 70: PgReader's queries (store.reader()) ran on the thread's connection
    # as it was, never through the store's read guard, which opens a new one when the server ended it
    import psycopg

    path, run_id, approval_id = pending
    ended: list[int] = []

    def kill(reader) -> None:
        pid = reader._store._pg().info.backend_pid
        with psycopg.connect(PG_URL, autocommit=True) as conn:  # returns once the backend is gone
            assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone() == (True,)
        ended.append(pid)

    _after_identity_book(monkeypatch, kill)
    code, out, err = _cli(capsys, "approvals", "list", "--json", "-s", str(path))
    assert (code, err) == (0, ""), err
    assert len(ended) == 1
    listed = json.loads(out)
    assert [(a["approval_id"], a["run_id"], a["status"]) for a in listed] == [(approval_id, run_id, "pending")]


def test_approvals_list_whose_read_the_server_ends_under_it_is_one_error_line(pending, monkeypatch, capsys):
    # was: exit 70 "internal error"; the read under way cannot be answered (it is not made again: the command
    # says so in one line, exit 2, as the store's other reads). The reader's next query (the requests) waits
    # on a lock another session holds on events, and its backend is ended then, for real.
    import psycopg

    path, _, _ = pending
    ended: list[int] = []
    holder = psycopg.connect(PG_URL)
    killer = psycopg.connect(PG_URL, autocommit=True)
    threads: list[threading.Thread] = []

    def hold_then_kill(reader) -> None:
        schema = reader._store.schema
        holder.execute(f"LOCK TABLE {schema}.events IN ACCESS EXCLUSIVE MODE")
        holder_pid = holder.info.backend_pid

        def end_the_waiting_read() -> None:
            for _ in range(3000):
                waiting = killer.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                         (holder_pid,)).fetchall()
                if waiting:
                    killer.execute("SELECT pg_terminate_backend(%s, 10000)", (waiting[0][0],))
                    ended.append(waiting[0][0])
                    holder.rollback()
                    return
                time.sleep(0.01)

        threads.append(threading.Thread(target=end_the_waiting_read))
        threads[0].start()

    try:
        _after_identity_book(monkeypatch, hold_then_kill)
        code, out, err = _cli(capsys, "approvals", "list", "-s", str(path))
        threads[0].join()
    finally:
        holder.close()
        killer.close()
    assert len(ended) == 1
    assert (code, out) == (2, "")
    assert err == (f"error: {path}: PostgreSQL could not answer a read (terminating connection due to administrator "
                   "command. LINE 1: SELECT leaf_index, raw, leaf_hash FROM events WHERE kind = A... ^)\n")
