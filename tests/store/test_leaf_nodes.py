"""Leaves are not stored as tree nodes: a leaf's hash lives in its event row.

``tree_nodes`` holds the full subtrees of level 1 and up; the leaf (level 0) is the
event's ``leaf_hash``. Stores written before 2026-12 hold a level-0 row per leaf as
well: they keep working (appends, proofs), and ``verify`` still checks those rows.
"""

from __future__ import annotations

from pathlib import Path

from store_testkit import closing_db, tag, tamper
from sealbox import EventDraft, init_store, open_store, verify_store
from sealbox.events import SYSTEM_RUN_ID
from sealbox.ledger import merkle


def _note(run_id: str, i: int) -> EventDraft:
    return EventDraft(run_id=run_id, kind="note", principal="alice", payload={"text": f"note {i}"})


def _fill(path: Path, count: int, *, init: bool = True) -> None:
    store = init_store(path) if init else open_store(path)
    try:
        done = store.size()
        for i in range(count):  # one commit each: the write path reads the left sibling leaf
            store.append(_note(SYSTEM_RUN_ID, done + i))
    finally:
        store.close()


def _rows(path: Path, sql: str) -> list[tuple]:
    with closing_db(path) as db:
        return db.execute(sql).fetchall()


def _check_every_proof(path: Path) -> None:
    store = open_store(path, readonly=True)
    try:
        size = store.size()
        root = store.root()
        leaves = [bytes(h) for (h,) in _rows(path, "SELECT leaf_hash FROM events ORDER BY leaf_index")]
        assert root == _reference_root(leaves)
        for i in range(size):
            merkle.verify_inclusion(leaves[i], i, size, store.inclusion_proof(i, size), root)
        for old in range(1, size):
            merkle.verify_consistency(old, size, store.consistency_proof(old, size), store.root(old), root)
    finally:
        store.close()


def _reference_root(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH, computed directly."""
    import hashlib

    def mth(items: list[bytes]) -> bytes:
        if len(items) == 1:
            return items[0]
        k = 1 << ((len(items) - 1).bit_length() - 1)
        return hashlib.sha256(b"\x01" + mth(items[:k]) + mth(items[k:])).digest()

    return mth(leaves) if leaves else hashlib.sha256(b"").digest()


def test_a_new_store_writes_no_leaf_rows(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 22)
    size = _rows(path, "SELECT count(*) FROM events")[0][0]
    nodes = _rows(path, "SELECT level, idx FROM tree_nodes ORDER BY level, idx")
    # every full subtree of level >= 1, and nothing else: n - popcount(n) of them
    want = [(lv, i) for lv in range(1, size.bit_length()) for i in range(size >> lv)]
    assert nodes == want
    assert len(nodes) == size - bin(size).count("1")
    _check_every_proof(path)
    assert verify_store(open_store(path, readonly=True)).ok


def test_a_store_with_leaf_rows_written_before_keeps_working(tmp_path: Path) -> None:
    """The layout of earlier stores: a level-0 row per leaf. Appends after it (from a fresh
    process's view: an empty cache, an odd tree size, so the first append reads its left
    sibling leaf from the events table) and every proof stay right, and verify passes."""
    path = tmp_path / "s"
    _fill(path, 12)
    with closing_db(path) as db:  # what the earlier code wrote for each leaf
        db.execute("INSERT INTO tree_nodes (level, idx, hash) SELECT 0, leaf_index, leaf_hash FROM events")
    legacy = _rows(path, "SELECT count(*) FROM tree_nodes WHERE level = 0")[0][0]
    size_before = _rows(path, "SELECT count(*) FROM events")[0][0]
    assert legacy == size_before and size_before % 2 == 1
    report = verify_store(open_store(path, readonly=True))
    assert report.ok, report.summary()

    _fill(path, 9, init=False)
    size = _rows(path, "SELECT count(*) FROM events")[0][0]
    assert size == size_before + 9
    assert _rows(path, "SELECT count(*) FROM tree_nodes WHERE level = 0")[0][0] == legacy  # none added
    _check_every_proof(path)
    report = verify_store(open_store(path, readonly=True))
    assert report.ok, report.summary()
    assert report.events == size


def test_a_changed_leaf_row_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 6)
    with closing_db(path) as db:
        db.execute("INSERT INTO tree_nodes (level, idx, hash) SELECT 0, leaf_index, leaf_hash FROM events")
    (leaf5,), = _rows(path, "SELECT leaf_hash FROM events WHERE leaf_index = 5")
    tamper(path, "UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = 0 AND idx = 5")
    report = verify_store(open_store(path, readonly=True))
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("tree_node_mismatch", tag(bytes(leaf5)), tag(bytes(32)))]
    assert "(0, 5)" in report.problems[0].message


def test_a_leaf_row_beyond_the_log_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 6)
    size = _rows(path, "SELECT count(*) FROM events")[0][0]
    with closing_db(path) as db:
        db.execute("INSERT INTO tree_nodes (level, idx, hash) SELECT 0, leaf_index, leaf_hash FROM events")
        db.execute("INSERT INTO tree_nodes (level, idx, hash) VALUES (0, ?, zeroblob(32))", (size + 3,))
    report = verify_store(open_store(path, readonly=True))
    assert [p.code for p in report.problems] == ["tree_node_extra"]
    assert f"(0, {size + 3})" in report.problems[0].message
