"""The SQL statements of one recorded call's writes (real SQLite files, traced with
``set_trace_callback``): each blob is inserted once, and nothing redundant creeps back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sealbox
from sealbox import EventDraft
from sealbox.errors import InvalidEventError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store.base import new_run_id

from store_testkit import big_result, started, tool_result


class _Trace:
    """Every statement the store's connections run inside the block (first words only)."""

    def __init__(self, store: Any) -> None:
        self.store, self.sql = store, []

    def __enter__(self) -> list[str]:
        self.store._conn()  # this thread's connection exists before tracing starts
        for conn in self.store._conns:
            conn.set_trace_callback(lambda s: self.sql.append(" ".join(s.split()[:5])))
        return self.sql

    def __exit__(self, *exc: Any) -> None:
        for conn in self.store._conns:
            conn.set_trace_callback(None)


#: One INSERT into blobs is traced twice: the statement, then its ``blobs_no_replace`` trigger
#: program (SQLite traces a trigger's start, and CPython reports it with the statement's text).
BLOB_INSERT = ["INSERT OR IGNORE INTO blobs"] * 2
GATE = ["BEGIN IMMEDIATE", "PRAGMA data_version",
        *BLOB_INSERT,  # the call's context blob: once, though its tool.call and policy.decision both name it
        "INSERT INTO events (leaf_index, run_id,", "INSERT INTO events (leaf_index, run_id,", "COMMIT"]
RESULT = ["BEGIN IMMEDIATE", "PRAGMA data_version", "INSERT INTO events (leaf_index, run_id,", "COMMIT"]


@pytest.mark.parametrize("no_wait", [False, True], ids=["sdk", "no_wait"])
def test_a_recorded_call_runs_exactly_these_statements(tmp_path: Path, no_wait: bool) -> None:
    store = sealbox.init_store(tmp_path / "s", durability="fast")
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:a") as run:
            run.call_tool("db", "query", {"sql": "select 0"}, lambda sql: sql)  # connection warm
            with _Trace(store) as sql:
                if no_wait:
                    with store.no_wait():
                        run.call_tool("db", "query", {"sql": "select 1"}, lambda sql: sql)
                else:
                    run.call_tool("db", "query", {"sql": "select 1"}, lambda sql: sql)
        if no_wait:  # SQLite's busy wait set to 0 once, before the first write; no statement per write
            assert sql == ["PRAGMA busy_timeout = 0"] + GATE + RESULT, sql
            assert store._conn().execute("PRAGMA busy_timeout").fetchone()[0] == 5000  # put back to read
        else:
            assert sql == GATE + RESULT, sql
        calls = [e for e in store.read_range(0, store.size()) if e.kind == "tool.call"]
        ref = calls[1].payload["context"]["$blob"] if "context" in calls[1].payload else None
        if ref is not None:
            assert store.get_blob(ref)  # stored, once
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


def test_a_blob_committed_earlier_is_not_inserted_again_and_one_rolled_back_is(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s", durability="fast")
    try:
        run_id = new_run_id()
        store.append(started(run_id))
        store.append(tool_result(run_id, "c1", big_result("same")))
        with _Trace(store) as sql:
            store.append(tool_result(run_id, "c2", big_result("same")))
        assert not [s for s in sql if "blobs" in s]  # committed by this connection, which no other changed
        # a transaction that inserts a new blob, then fails: rolled back, and the ref is not remembered
        with pytest.raises(InvalidEventError):
            store.append([tool_result(run_id, "c3", big_result("new")), EventDraft("no.such.kind", {}, run_id=run_id)])
        with _Trace(store) as sql:
            store.append(tool_result(run_id, "c4", big_result("new")))
        assert sql.count("INSERT OR IGNORE INTO blobs") == len(BLOB_INSERT)
        assert len([c for _, _, c in store.iter_blobs() if c is not None]) == 2  # "same" and "new", stored
        # another connection committed since: nothing cached is trusted, the blob is inserted (and ignored)
        other = sealbox.open_store(tmp_path / "s")
        other.append(tool_result(run_id, "c5", {"small": 1}))
        other.close()
        with _Trace(store) as sql:
            store.append(tool_result(run_id, "c6", big_result("new")))
        assert "INSERT OR IGNORE INTO blobs" in sql  # (an ignored one traces its trigger again)
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


def test_a_waiting_write_or_a_read_after_no_wait_writes_gets_the_usual_busy_wait_back(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s", durability="fast")
    try:
        run_id, before = new_run_id(), store.size()
        with _Trace(store) as sql:
            with store.no_wait():
                store.append(started(run_id))
                store.append(tool_result(run_id, "c1", {"n": 1}))
            store.append(tool_result(run_id, "c2", {"n": 2}))  # waits for the lock as usual
        begins = [i for i, s in enumerate(sql) if s == "BEGIN IMMEDIATE"]
        assert [s for s in sql if s.startswith("PRAGMA busy_timeout")] == ["PRAGMA busy_timeout = 0",
                                                                          "PRAGMA busy_timeout = 5000"]
        assert sql.index("PRAGMA busy_timeout = 0") < begins[0] and begins[1] < sql.index(
            "PRAGMA busy_timeout = 5000") < begins[2]
        with store.no_wait():
            store.append(tool_result(run_id, "c3", {"n": 3}))
        assert store._conn().execute("PRAGMA busy_timeout").fetchone()[0] == 5000  # a read: put back first
        assert store.size() == before + 4
    finally:
        store.close()
