"""A migration waits for the store's write lock as long as a write does (``lock_timeout``, or
``SEALBOX_LOCK_TIMEOUT`` for the ``sealbox`` commands), then fails with one line naming the lock
and the setting. Real SQLite files and a real PostgreSQL schema; the lock is held by a second,
real connection."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import sealbox
from sealbox.store import sqlite as sqlite_mod

SEALBOX = Path(sys.executable).parent / "sealbox"
PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")


def _older_sqlite_store(path: Path) -> None:
    """A store as the Sealbox before migration 7 left it (no events_approval index, nor 0008's
    events_other_kinds_tool, nor 0009's credential_rotations, no row of any)."""
    sealbox.init_store(path).close()
    db = sqlite3.connect(path / "sealbox.db", isolation_level=None)
    try:
        db.execute("DROP INDEX events_approval")
        db.execute("DROP INDEX events_other_kinds_tool")
        db.execute("DROP TABLE credential_rotations")
        db.execute("DELETE FROM schema_migrations WHERE version >= 7")
    finally:
        db.close()


def _upgrade(path: Path, lock_timeout: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([str(SEALBOX), "upgrade", "--store", str(path)], capture_output=True, text=True,
                          env={**env, "SEALBOX_LOCK_TIMEOUT": lock_timeout, "COLUMNS": "250"}, timeout=120)


def test_sqlite_a_migration_waits_past_sqlites_5_s_for_the_lock_timeout(tmp_path, monkeypatch):
    """The migration's BEGIN IMMEDIATE ran under SQLite's own 5 s busy wait only: opening an older store
    with lock_timeout=60 (or `sealbox upgrade` with SEALBOX_LOCK_TIMEOUT=60) while another connection held
    the write lock gave up after 5 s with "cannot open .../sealbox.db: database is locked". Here the lock
    is held for 7 s after the open began to wait for it: the open waits, then applies the migration."""
    path = tmp_path / "s"
    _older_sqlite_store(path)
    begun = threading.Event()
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):  # observes the statements of the store's connections (runs them as they are)
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: begun.set() if sql == "BEGIN IMMEDIATE" else None)
        return conn

    monkeypatch.setattr(sqlite_mod.sqlite3, "connect", connect)
    holder = sqlite3.connect(path / "sealbox.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    outcome: dict = {}

    def open_it() -> None:
        try:
            store = sealbox.open_store(path, lock_timeout=60)
            outcome["migrated"] = list(store.migrated)
            store.close()
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    opener = threading.Thread(target=open_it)
    opener.start()
    try:
        assert begun.wait(60), "the open never came to take the write lock"
        opener.join(7.0)  # held well past SQLite's 5 s busy wait
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    opener.join(60)
    assert not opener.is_alive()
    assert outcome == {"migrated": [7, 8, 9]}
    db = real_connect(path / "sealbox.db")
    try:
        assert db.execute("SELECT max(version) FROM schema_migrations").fetchone() == (9,)
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'events_approval'").fetchone() == (1,)
    finally:
        db.close()


def test_sqlite_upgrade_past_the_lock_timeout_is_one_line_naming_the_lock_and_the_setting(tmp_path):
    """When the wait runs out, `sealbox upgrade` said "error: cannot open .../sealbox.db: database is locked":
    neither the writer holding the store nor the setting that makes it wait longer."""
    path = tmp_path / "s"
    _older_sqlite_store(path)
    holder = sqlite3.connect(path / "sealbox.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        res = _upgrade(path, "0.5")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"error: {path / 'sealbox.db'} stayed busy for too long: another writer holds it (migration 7 "
                          "waited 0.5 s for the store's write lock: lock_timeout, SEALBOX_LOCK_TIMEOUT=SECONDS for "
                          "`sealbox` commands)\n")
    res = _upgrade(path, "0.5")  # the lock free, the same command upgrades it
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Upgraded {path}: applied migrations [7, 8, 9]\n", "")


def test_sqlite_an_upgrade_waits_the_lock_timeout_for_another_upgrade_not_forever(tmp_path):
    """An upgrade holds an flock on the store's folder across its migrations (so that two upgrades do
    not split them between them). One that finds it held by another process waits lock_timeout, not
    without end, then fails with one line naming the setting; nothing is applied. Here a second process
    holds the flock, as an upgrade in progress does."""
    path = tmp_path / "s"
    _older_sqlite_store(path)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        res = _upgrade(path, "0.5")
    finally:
        holder.communicate("")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"error: {path / 'sealbox.db'} stayed busy for too long: another writer holds it (migration 7 "
                          "waited 0.5 s for another process's upgrade of the store: lock_timeout, "
                          "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands)\n")
    res = _upgrade(path, "0.5")  # the flock free, the same command upgrades it
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Upgraded {path}: applied migrations [7, 8, 9]\n", "")


@pytest.mark.skipif(not PG_URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: needs PostgreSQL")
def test_postgres_upgrade_waits_the_lock_timeout_for_the_write_lock_not_forever(tmp_path):
    """A PostgreSQL migration took the store's advisory lock with no lock_timeout: `sealbox upgrade` with
    SEALBOX_LOCK_TIMEOUT=0.5 waited without end while another session held the lock (and an open through
    the API ignored its lock_timeout). Now it waits lock_timeout, then fails with one line."""
    import psycopg

    from sealbox.store.postgres import _lock_key

    schema = f"sbt_miglock_{uuid.uuid4().hex[:12]}"
    path = tmp_path / "s"
    try:
        sealbox.init_store(path, postgres_url=PG_URL, schema=schema).close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            conn.execute("DROP INDEX events_approval")
            conn.execute("DROP FUNCTION sealbox_approval_id(bytea)")
            conn.execute("DELETE FROM schema_migrations WHERE version = 2")
        key = _lock_key(json.loads((path / "postgres.json").read_text())["schema"]) & (2**64 - 1)
        with psycopg.connect(PG_URL, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (key - 2**64 if key >= 2**63 else key,))
            res = _upgrade(path, "0.5")
            holder.execute("SELECT pg_advisory_unlock_all()")
        assert (res.returncode, res.stdout) == (2, "")
        assert res.stderr == (f"error: {path} (schema {schema}): migration 2 waited 0.5 s for the store's write lock, "
                              "held by another writer: lock_timeout, SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` "
                              "commands\n")
        res = _upgrade(path, "0.5")
        assert (res.returncode, res.stdout, res.stderr) == (0, f"Upgraded {path}: applied migrations [2]\n", "")
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.skipif(not PG_URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: needs PostgreSQL")
def test_postgres_a_table_lock_another_session_holds_fails_the_migration_after_the_lock_timeout(tmp_path):
    """The migration's CREATE INDEX waits for a lock on events: held by a session that is no Sealbox writer
    (a VACUUM, a LOCK TABLE), it waited without end too. Now lock_timeout, then one line."""
    import psycopg

    schema = f"sbt_miglock_{uuid.uuid4().hex[:12]}"
    path = tmp_path / "s"
    try:
        sealbox.init_store(path, postgres_url=PG_URL, schema=schema).close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            conn.execute("DROP INDEX events_approval")
            conn.execute("DROP FUNCTION sealbox_approval_id(bytea)")
            conn.execute("DELETE FROM schema_migrations WHERE version = 2")
        with psycopg.connect(PG_URL) as holder:  # a transaction holding the lock until it ends
            holder.execute(f"LOCK TABLE {schema}.events IN SHARE UPDATE EXCLUSIVE MODE")  # what VACUUM takes
            res = _upgrade(path, "0.5")
            holder.rollback()
        assert (res.returncode, res.stdout) == (2, "")
        assert res.stderr == (f"error: {path} (schema {schema}): migration 2 waited 0.5 s for a lock on a table of "
                              "the store, held by another PostgreSQL session: lock_timeout, "
                              "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands\n")
        res = _upgrade(path, "0.5")
        assert (res.returncode, res.stdout, res.stderr) == (0, f"Upgraded {path}: applied migrations [2]\n", "")
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
