"""A `sealbox` command that could not get the store's write lock in time said only
"…/sealbox.db stayed busy for too long: another writer holds it" (PostgreSQL: "the write lock was
held by another writer for more than lock_timeout"): not how long it waited, nor the setting that
changes the wait. Both now name the wait and SEALBOX_LOCK_TIMEOUT (and the API's lock_timeout).
Real SQLite file / real PostgreSQL server; the lock is held by another connection."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import sealbox

SEALBOX = str(Path(sys.executable).parent / "sealbox")
URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")


def sb(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SEALBOX_LOCK_TIMEOUT": "1.5"})


def test_sqlite_lock_wait_error_names_the_setting(tmp_path):
    path = tmp_path / "store"
    sealbox.init_store(path).close()
    holder = sqlite3.connect(path / "sealbox.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        out = sb("identities", "add", "bob", "--role", "admin", "--key-out", tmp_path / "bob.key", "-s", path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (f"error: {path / 'sealbox.db'} stayed busy for too long: another writer holds it (the "
                          "store's write lock stayed taken past the lock timeout, 1.5 s: lock_timeout, "
                          "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands)\n")
    assert not (tmp_path / "bob.key").exists()


@pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: this test needs PostgreSQL")
def test_postgres_lock_wait_error_names_the_setting(tmp_path):
    import psycopg

    from sealbox.store.postgres import _lock_key

    schema = f"sbt_{uuid.uuid4().hex[:20]}"
    path = tmp_path / "store"
    try:
        sealbox.init_store(path, postgres_url=URL, schema=schema).close()
        with psycopg.connect(URL) as holder:  # another writer's transaction, holding the lock
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
            out = sb("identities", "add", "bob", "--role", "admin", "--key-out", tmp_path / "bob.key", "-s", path)
            holder.rollback()
        assert (out.returncode, out.stdout) == (2, "")
        assert out.stderr == (f"error: {path}: the write lock was held by another writer for more than lock_timeout "
                              "(1.5 s; SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands)\n")
        assert not (tmp_path / "bob.key").exists()
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
