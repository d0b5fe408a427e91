"""lock_timeout is kept when it is below SQLite's 5 s busy wait, and must be a finite number >= 0
(real SQLite files; the write lock is held by a plain sqlite3 connection)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import sealbox
from sealbox import EventDraft, open_store
from sealbox.errors import StoreError
from sealbox.store import StoreConfigError


def _count(path: Path) -> int:
    db = sqlite3.connect(path / "sealbox.db")
    try:
        return db.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        db.close()


@pytest.mark.parametrize("lock_timeout", [0.0, 0.3, 1.0, 2.0])
def test_an_append_waits_no_longer_than_lock_timeout(tmp_path: Path, lock_timeout: float) -> None:
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    store = open_store(path, lock_timeout=lock_timeout)
    try:
        store.append(EventDraft(kind="note", payload={"text": "warm"}))
        conn = store._conn()
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == int(lock_timeout * 1000)
        hold = sqlite3.connect(path / "sealbox.db", isolation_level=None)
        hold.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(StoreError, match="stayed busy for too long"):
                store.append(EventDraft(kind="note", payload={"text": "refused"}))
            waited = time.monotonic() - started
        finally:
            hold.execute("ROLLBACK")
            hold.close()
        # was >= 5 s: SQLite's busy_timeout ran past the deadline (a margin of 2.5 s, was 0.75 s: a loaded
        # host's stall could use that up; the largest lock_timeout here, 2 s, stays below 5 s with it)
        assert waited < lock_timeout + 2.5, waited
        assert waited >= lock_timeout * 0.9
        # the connection's own wait is back where it was, and the store works again
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == int(lock_timeout * 1000)
        store.append(EventDraft(kind="note", payload={"text": "after"}))
        assert _count(path) == 3  # run.started, warm, after: the refused one was not written
    finally:
        store.close()


def test_the_default_lock_timeout_keeps_sqlites_5_s_wait(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = sealbox.init_store(path)
    try:
        assert store.lock_timeout == 300.0
        assert store._conn().execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    finally:
        store.close()


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), float("inf"), "5", True, None])
def test_a_bad_lock_timeout_is_refused_before_opening(tmp_path: Path, bad) -> None:
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(StoreConfigError, match="lock_timeout"):
        open_store(path, lock_timeout=bad)
    assert sorted(p.name for p in path.iterdir()) == before
    assert isinstance(StoreConfigError("x"), ValueError)
