"""close() refreshes the planner statistics (PRAGMA optimize) but never waits long for the write
lock to do it: a listing command opened writable, closing while another process holds a long
write transaction, used to wait up to lock_timeout (300 s by default) after it had printed."""

from __future__ import annotations

import sqlite3
import threading

import sealbox
from sealbox.store.sqlite import OPTIMIZE_LOCK_WAIT


def test_close_skips_the_statistics_while_another_writer_holds_the_lock(tmp_path):
    sealbox.init_store(tmp_path / "s").close()
    store = sealbox.open_store(tmp_path / "s", lock_timeout=120)
    assert store.size() >= 1  # used for reading only, as a listing command does
    other = sqlite3.connect(tmp_path / "s" / "sealbox.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    closer = threading.Thread(target=store.close)
    try:
        closer.start()
        closer.join(timeout=30)  # far below lock_timeout: close() must not wait for the lock
        assert not closer.is_alive(), "close() waited for the write lock to refresh statistics"
    finally:
        other.execute("ROLLBACK")
        other.close()
        closer.join()
    assert OPTIMIZE_LOCK_WAIT < 1
    again = sealbox.open_store(tmp_path / "s")
    try:
        assert sealbox.verify_store(again).ok
    finally:
        again.close()


def test_close_still_gathers_statistics_when_the_lock_is_free(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    store.close()
    conn = sqlite3.connect(tmp_path / "s" / "sealbox.db")
    try:
        assert conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'events'").fetchone()[0] >= 1
    finally:
        conn.close()
