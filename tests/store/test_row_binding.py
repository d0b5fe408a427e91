"""How the SQLite store binds event rows (``_event_groups``): a NULL derived column is left out
of the INSERT and BLOBs are bound as ``bytearray`` (faster in Python's ``sqlite3``); the rows
stored must be exactly those the full 19-column INSERT would store."""

from __future__ import annotations

import sqlite3

import sealbox
from sealbox.events import derived_columns
from sealbox.store.base import new_run_id
from sealbox.store.sqlite import _EVENT_COLUMNS, _event_groups

from store_testkit import big_result, decision, ended, note, started, tool_call, tool_result


def test_groups_follow_the_rows_order_and_leave_out_only_null_derived_columns():
    blob = b"\x00\xff" * 3
    rows = [
        (0, "r", 1, "tool.call", "t", "p", "1", "db", "q", "c1", None, None, None, None, None, None, None, blob, b"h0"),
        (1, "r", 2, "tool.call", "t", "p", "2", "db", "q", "c2", None, None, None, None, None, None, None, blob, b"h1"),
        (2, "r", 3, "tool.result", "t", "p", "3", None, None, "c1", None, 0, None, None, None, None, 15, blob, b"h2"),
        (3, "r", 4, "tool.call", "t", "p", "4", "db", "q", "c3", None, None, None, None, None, None, None, blob, b"h3"),
    ]
    groups = _event_groups(rows)
    assert [len(batch) for _, batch in groups] == [2, 1, 1]
    assert groups[0][0] == ("INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, server, tool,"
                            " call_id, raw, leaf_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    assert groups[1][0] == ("INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, call_id, ok,"
                            " duration_us, raw, leaf_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    assert groups[2][0] == groups[0][0]
    assert groups[1][1] == [(2, "r", 3, "tool.result", "t", "p", "3", "c1", 0, 15, bytearray(blob), bytearray(b"h2"))]
    assert [type(v) for v in groups[0][1][0][-2:]] == [bytearray, bytearray]
    # 0 and "" are values, not NULL
    zero = (5, "r", 5, "note", "t", "p", "5", "", None, None, None, 0, 0, 0.0, None, None, 0, b"x", b"y")
    (sql, [bound]), = _event_groups([zero])
    assert "server" in sql and "ok" in sql and "tokens" in sql and "cost" in sql and "duration_us" in sql
    assert bound == (5, "r", 5, "note", "t", "p", "5", "", 0, 0, 0.0, 0, bytearray(b"x"), bytearray(b"y"))


def test_stored_rows_hold_null_and_blob_exactly_where_the_full_insert_would(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    run_id = new_run_id()
    # one transaction mixing every shape of derived columns, then single appends
    placed = store.append([started(run_id), tool_call(run_id, "c1"), decision(run_id, "c1"),
                           tool_result(run_id, "c1", big_result("r1")), note(run_id, "n")])
    placed += store.append(ended(run_id))
    store.close()
    conn = sqlite3.connect(tmp_path / "store" / "sealbox.db")
    cols = ", ".join(_EVENT_COLUMNS)
    types = ", ".join(f"typeof({c})" for c in _EVENT_COLUMNS)
    for event in placed:
        row = conn.execute(f"SELECT {cols} FROM events WHERE leaf_index = ?", (event.leaf_index,)).fetchone()
        kinds = conn.execute(f"SELECT {types} FROM events WHERE leaf_index = ?", (event.leaf_index,)).fetchone()
        expected = (event.leaf_index, event.run_id, event.run_seq, event.kind, event.ts, event.principal, event.step,
                    *derived_columns(event.kind, event.payload), event.raw, bytes.fromhex(event.leaf_hash[7:]))
        assert row == expected, event.kind
        assert kinds[-2:] == ("blob", "blob")
        assert [k == "null" for k in kinds[7:17]] == [v is None for v in expected[7:17]], event.kind
    blob_types = conn.execute("SELECT DISTINCT typeof(salt), typeof(content) FROM blobs").fetchall()
    assert blob_types == [("blob", "blob")]
    node_types = conn.execute("SELECT DISTINCT typeof(hash) FROM tree_nodes").fetchall()
    assert node_types in ([], [("blob",)])
    conn.close()
    reopened = sealbox.open_store(tmp_path / "store")
    try:
        assert sealbox.verify_store(reopened).ok
        assert [e.raw for e in reopened.read_range(0, reopened.size())][-len(placed):] == [e.raw for e in placed]
    finally:
        reopened.close()
