"""``init_store`` on PostgreSQL takes the schema's write lock (two inits of one schema: one creates
it). It waited for it without end: a second init while another session held it hung for ever,
whatever ``lock_timeout`` / ``SEALBOX_LOCK_TIMEOUT`` said. It now waits at most that long, as a
migration does, then fails with one line. Real PostgreSQL; the lock is held by a second, real
connection."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

import sealbox
from sealbox.errors import StoreError
from sealbox.store.postgres import _lock_key

SEALBOX = Path(sys.executable).parent / "sealbox"
PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not PG_URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: needs PostgreSQL")


@pytest.fixture
def held_schema():
    """A schema name whose store write lock a second session holds (as an init in progress does)."""
    import psycopg

    schema = f"sbt_init_{uuid.uuid4().hex[:16]}"
    holder = psycopg.connect(PG_URL)
    holder.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
    try:
        yield schema
    finally:
        holder.rollback()
        holder.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_init_store_waits_at_most_lock_timeout_for_the_schemas_lock(tmp_path, held_schema):
    outcome: dict = {}

    def init() -> None:
        try:
            sealbox.init_store(tmp_path / "s", postgres_url=PG_URL, schema=held_schema, lock_timeout=1).close()
            outcome["made"] = True
        except Exception as exc:  # noqa: BLE001 - reported by the asserts below
            outcome["error"] = exc

    thread = threading.Thread(target=init, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "init_store still waiting after 60 s with lock_timeout=1"
    assert type(outcome.get("error")) is StoreError, outcome
    assert str(outcome["error"]) == (
        f"cannot create the store's schema {held_schema!r} in PostgreSQL: waited 1 s for the schema's write lock, "
        "held by another session (another init of this schema, or a writer of a store in it): lock_timeout, "
        "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands")
    assert not (tmp_path / "s").exists()  # nothing left in the folder


def test_sealbox_init_waits_at_most_sealbox_lock_timeout(tmp_path, held_schema):
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    try:
        out = subprocess.run([str(SEALBOX), "init", str(tmp_path / "s"), "--postgres", PG_URL, "--schema", held_schema],
                             capture_output=True, text=True, env={**env, "SEALBOX_LOCK_TIMEOUT": "1", "COLUMNS": "250"},
                             timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("sealbox init still waiting after 60 s with SEALBOX_LOCK_TIMEOUT=1")
    assert out.returncode == 2, out
    assert out.stdout == ""
    assert out.stderr == (
        f"error: cannot create the store's schema {held_schema!r} in PostgreSQL: waited 1 s for the schema's write "
        "lock, held by another session (another init of this schema, or a writer of a store in it): lock_timeout, "
        "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands\n")
    assert not (tmp_path / "s").exists()
