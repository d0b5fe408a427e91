"""Only subtrees of 16 leaves or more are rows of ``tree_nodes``.

A smaller full subtree (a leaf included) is computed when needed from its leaves'
``leaf_hash`` in the events table (``STORED_NODE_LEVEL``, docs/storage.md). Stores
written before 2026-12 hold rows of every level, the leaves included: they keep
working (appends, proofs), and ``verify`` still checks the rows of levels 0 to 3.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from store_testkit import closing_db, tag, tamper
from sealbox import EventDraft, StoreError, init_store, open_store, verify_store
from sealbox.events import SYSTEM_RUN_ID
from sealbox.ledger import merkle
from sealbox.store.sqlite import STORED_NODE_LEVEL


def _note(i: int) -> EventDraft:
    return EventDraft(run_id=SYSTEM_RUN_ID, kind="note", principal="alice", payload={"text": f"note {i}"})


def _fill(path: Path, count: int, *, init: bool = True) -> None:
    """``count`` notes, one commit each (each append reads its left siblings)."""
    store = init_store(path) if init else open_store(path)
    try:
        done = store.size()
        for i in range(count):
            store.append(_note(done + i))
    finally:
        store.close()


def _rows(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    with closing_db(path) as db:
        return db.execute(sql, params).fetchall()


def _leaves(path: Path) -> list[bytes]:
    return [bytes(h) for (h,) in _rows(path, "SELECT leaf_hash FROM events ORDER BY leaf_index")]


def _mth(items: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH of leaf hashes, computed directly."""
    if not items:
        return hashlib.sha256(b"").digest()
    if len(items) == 1:
        return items[0]
    k = 1 << ((len(items) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(items[:k]) + _mth(items[k:])).digest()


def _full_subtrees(size: int, levels: range) -> list[tuple[int, int]]:
    return [(lv, i) for lv in levels for i in range(size >> lv)]


def _write_old_layout(path: Path) -> int:
    """The rows the code before 2026-12 wrote: every full subtree of levels 0 to 3."""
    leaves = _leaves(path)
    rows = [(lv, i, _mth(leaves[i << lv:(i + 1) << lv])) for lv, i in _full_subtrees(len(leaves), range(STORED_NODE_LEVEL))]
    with closing_db(path) as db:
        db.executemany("INSERT INTO tree_nodes (level, idx, hash) VALUES (?, ?, ?)", rows)
    return len(rows)


def _check_every_proof(path: Path) -> None:
    store = open_store(path, readonly=True)
    try:
        size, root, leaves = store.size(), store.root(), _leaves(path)
        assert root == _mth(leaves)
        for i in range(size):
            merkle.verify_inclusion(leaves[i], i, size, store.inclusion_proof(i, size), root)
        for old in range(1, size):
            assert store.root(old) == _mth(leaves[:old])
            merkle.verify_consistency(old, size, store.consistency_proof(old, size), store.root(old), root)
    finally:
        store.close()


def test_a_new_store_writes_only_subtrees_of_16_leaves_or_more(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 70)
    size = len(_leaves(path))
    assert STORED_NODE_LEVEL == 4 and size == 71
    nodes = _rows(path, "SELECT level, idx, hash FROM tree_nodes ORDER BY level, idx")
    leaves = _leaves(path)
    assert [(lv, i) for lv, i, _ in nodes] == [(4, 0), (4, 1), (4, 2), (4, 3), (5, 0), (5, 1), (6, 0)]
    assert all(bytes(h) == _mth(leaves[i << lv:(i + 1) << lv]) for lv, i, h in nodes)
    _check_every_proof(path)
    assert verify_store(open_store(path, readonly=True)).ok


def test_a_store_in_the_old_layout_keeps_working(tmp_path: Path) -> None:
    """Rows of levels 0 to 3 as earlier code wrote them. Appends after that (from a new store
    object: an empty cache, so the first appends compute their left siblings from the events
    table) and every proof stay right, verify passes, and no small-subtree row is added."""
    path = tmp_path / "s"
    _fill(path, 20)
    old_rows = _write_old_layout(path)
    size_before = len(_leaves(path))
    assert size_before == 21 and old_rows == 21 + 10 + 5 + 2
    report = verify_store(open_store(path, readonly=True))
    assert report.ok, report.summary()

    _fill(path, 30, init=False)
    assert len(_leaves(path)) == size_before + 30
    assert _rows(path, "SELECT count(*) FROM tree_nodes WHERE level < 4") == [(old_rows,)]
    assert [(lv, i) for lv, i in _rows(path, "SELECT level, idx FROM tree_nodes WHERE level >= 4 ORDER BY level, idx")] \
        == [(4, 0), (4, 1), (4, 2), (5, 0)]
    _check_every_proof(path)
    report = verify_store(open_store(path, readonly=True))
    assert report.ok, report.summary()
    assert report.events == 51


@pytest.mark.parametrize("level, idx", [(0, 5), (1, 3), (3, 1)])
def test_a_changed_old_layout_row_is_named(tmp_path: Path, level: int, idx: int) -> None:
    path = tmp_path / "s"
    _fill(path, 20)
    _write_old_layout(path)
    (good,), = _rows(path, "SELECT hash FROM tree_nodes WHERE level = ? AND idx = ?", (level, idx))
    tamper(path, ("UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = ? AND idx = ?", (level, idx)))
    report = verify_store(open_store(path, readonly=True))
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("tree_node_mismatch", tag(bytes(good)), tag(bytes(32)))]
    assert f"({level}, {idx})" in report.problems[0].message


def test_small_subtree_rows_are_checked_where_a_new_store_has_none(tmp_path: Path) -> None:
    """A row slipped into a level the store does not write is still compared with the tree."""
    path = tmp_path / "s"
    _fill(path, 20)
    with closing_db(path) as db:
        db.execute("INSERT INTO tree_nodes (level, idx, hash) VALUES (2, 1, zeroblob(32))")
    report = verify_store(open_store(path, readonly=True))
    assert [p.code for p in report.problems] == ["tree_node_mismatch"]
    assert "(2, 1)" in report.problems[0].message


def test_an_old_layout_row_beyond_the_log_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 6)
    size = len(_leaves(path))
    _write_old_layout(path)
    with closing_db(path) as db:
        db.execute("INSERT INTO tree_nodes (level, idx, hash) VALUES (0, ?, zeroblob(32))", (size + 3,))
    report = verify_store(open_store(path, readonly=True))
    assert [p.code for p in report.problems] == ["tree_node_extra"]
    assert f"(0, {size + 3})" in report.problems[0].message


def test_a_small_subtree_whose_leaves_are_gone_is_a_store_error(tmp_path: Path) -> None:
    """A proof needing a small subtree whose leaf rows were deleted below Sealbox fails with
    StoreError naming the node, not with a wrong hash."""
    path = tmp_path / "s"
    _fill(path, 20)
    tamper(path, "DELETE FROM events WHERE leaf_index = 2")
    store = open_store(path, readonly=True)
    try:
        with pytest.raises(StoreError, match=r"tree node \(0, 2\) cannot be computed: leaf 2 is not stored"):
            store.inclusion_proof(3, 8)
    finally:
        store.close()


def test_the_layout_is_schema_5_so_older_versions_refuse_the_store(tmp_path: Path) -> None:
    """Migration 0005 marks the layout: an older Sealbox (which knows 4 migrations) refuses the store
    as newer than it instead of reporting the rows it expects as missing; a schema-4 store is
    upgraded by its first writer, and read-only opens say so until then."""
    from sealbox import SchemaVersionError
    from sealbox.store import migrate

    path = tmp_path / "s"
    _fill(path, 3)
    newest = len(migrate.load_migrations("sqlite"))
    assert newest >= 5
    assert _rows(path, "SELECT max(version) FROM schema_migrations") == [(newest,)]
    assert _rows(path, "SELECT value FROM store_meta WHERE key = 'tree_stored_node_level'") == [(str(STORED_NODE_LEVEL),)]
    known4 = [m for m in migrate.load_migrations("sqlite") if m.version <= 4]
    applied = dict(_rows(path, "SELECT version, checksum FROM schema_migrations"))
    with pytest.raises(SchemaVersionError, match=f"schema version {newest}, newer than this Sealbox supports \\(4\\)"):
        migrate.check_applied(applied, known4, str(path))  # what a version with 4 migrations does at open

    with closing_db(path) as db:  # back to schema 4, as a store written before the change
        db.execute("DELETE FROM schema_migrations WHERE version >= 5")
        db.execute("DROP INDEX events_approval")  # schema 7's index
        db.execute("DROP INDEX events_other_kinds_tool")  # schema 8's index
        db.execute("DROP TABLE credential_rotations")  # schema 9's table
        db.execute("DELETE FROM store_meta WHERE key = 'tree_stored_node_level'")
        for column in ("rule", "reason_code", "duration_us"):  # schema 6's columns
            db.execute(f"ALTER TABLE events DROP COLUMN {column}")
    later = list(range(5, newest + 1))
    with pytest.raises(SchemaVersionError, match=re.escape(f"pending migrations {later}")):
        open_store(path, readonly=True)
    _fill(path, 1, init=False)  # a writer upgrades it
    assert _rows(path, "SELECT max(version) FROM schema_migrations") == [(newest,)]
    assert verify_store(open_store(path, readonly=True)).ok


def _as_schema_4(path: Path) -> None:
    """Back to schema 4, as a store written before migrations 5 and 6."""
    with closing_db(path) as db:
        db.execute("DELETE FROM schema_migrations WHERE version >= 5")
        db.execute("DROP INDEX events_approval")  # schema 7's index
        db.execute("DROP INDEX events_other_kinds_tool")  # schema 8's index
        db.execute("DROP TABLE credential_rotations")  # schema 9's table
        db.execute("DELETE FROM store_meta WHERE key = 'tree_stored_node_level'")
        for column in ("rule", "reason_code", "duration_us"):
            db.execute(f"ALTER TABLE events DROP COLUMN {column}")


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def test_verify_checks_an_older_store_without_writing_it(tmp_path: Path) -> None:
    """An auditor given a store an older Sealbox wrote verifies it as it is: `sealbox verify` checks
    an upgraded private copy (read-only opens refuse the store until a writer upgrades it), and a
    change made below Sealbox in the original is still found."""
    import subprocess
    import sys

    from sealbox import StoreUpgradeNeededError
    from sealbox.store.sqlite import upgraded_copy

    path = tmp_path / "s"
    _fill(path, 40)
    _as_schema_4(path)
    before = _files(path)
    with pytest.raises(StoreUpgradeNeededError) as info:
        open_store(path, readonly=True)
    assert info.value.pending[:2] == [5, 6] and "`sealbox verify` checks it as it is" in str(info.value)

    def cli() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", "-s", str(path)],
                              capture_output=True, text=True)

    res = cli()
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == (f"note: {path} was written by an older Sealbox (pending migrations {info.value.pending}): "
                        "verified through an upgraded private copy, removed afterwards; the store itself was not changed")
    assert lines[1].startswith("Verified: the log is intact. 41 events in 1 run, 0 blobs,")
    assert _files(path) == before  # not a byte written, no -wal or -shm left
    copy = tmp_path / "copy"
    copy.mkdir()
    store = upgraded_copy(path, copy)
    try:
        assert store.readonly and store.size() == 41 and not (copy / "log.key").exists()
        assert verify_store(store).root == "sha256:" + _mth(_leaves(path)).hex()
    finally:
        store.close()

    tamper(path, ("UPDATE events SET raw = CAST(replace(CAST(raw AS TEXT), 'note 8\"', 'note 9\"') AS BLOB) "
                  "WHERE leaf_index = 8", ()))
    res = cli()
    assert res.returncode == 1
    assert res.stdout.startswith("leaf_hash_mismatch [run system, run_seq 9, note, leaf 8]: ")
    lines = res.stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines[:6]] == [
        "leaf_hash_mismatch", "chain_broken", "tree_node_mismatch:", "tree_node_mismatch:", "checkpoint_root_mismatch:",
        "checkpoint_root_mismatch:"]
    assert lines[6].startswith(f"note: {path} was written by an older Sealbox")
    assert lines[7].startswith("NOT VERIFIED: 6 problem(s) found.")


@pytest.mark.parametrize("old_layout, sql, code, words", [
    (False, "UPDATE tree_nodes SET hash = 'not-a-hash' WHERE level = 4 AND idx = 0", "tree_node_mismatch", "(4, 0)"),
    (False, "INSERT INTO tree_nodes VALUES (1, 3, 'zz')", "tree_node_mismatch", "(1, 3)"),
    (True, "UPDATE tree_nodes SET hash = 'not-a-hash' WHERE level = 1 AND idx = 4", "tree_node_mismatch", "(1, 4)"),
    (True, "UPDATE tree_nodes SET idx = 2.5 WHERE level = 2 AND idx = 2", "tree_node_extra", "(2, 2.5)"),
    (True, "UPDATE tree_nodes SET level = 'x' WHERE level = 3 AND idx = 1", "tree_node_extra", "level 'x'"),
    (False, "UPDATE events SET leaf_hash = 'zz' WHERE leaf_index = 9", "leaf_hash_mismatch", "stored hash"),
])
def test_rows_of_the_wrong_type_are_reported_not_raised(tmp_path: Path, old_layout: bool, sql: str, code: str,
                                                        words: str) -> None:
    """SQLite's affinity lets TEXT or a REAL into these columns when a row is changed below Sealbox:
    verify names the row (it used to stop with a TypeError)."""
    path = tmp_path / "s"
    _fill(path, 20)
    if old_layout:
        _write_old_layout(path)
    tamper(path, sql)
    report = verify_store(open_store(path, readonly=True))
    assert code in [p.code for p in report.problems], report.problems
    assert any(words in p.message for p in report.problems if p.code == code), report.problems


def test_a_leaf_hash_of_the_wrong_type_makes_proofs_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _fill(path, 20)
    tamper(path, "UPDATE events SET leaf_hash = 'zz' WHERE leaf_index = 9")
    store = open_store(path, readonly=True)
    try:
        with pytest.raises(StoreError, match="the leaf hash of event 9 is not a 32-byte hash"):
            store.inclusion_proof(8, 16)
    finally:
        store.close()
