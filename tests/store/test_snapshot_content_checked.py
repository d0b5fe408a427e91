"""A stored snapshot is read only when its content still hashes to its fingerprint: ``get_snapshot``
(``snapshot show`` / ``diff``, ``whatif --snapshot``, reports, replay) never hands back a configuration
changed below Sealbox as the one a run is pinned to. SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import os
import sqlite3
import uuid

import pytest

from sealbox.canonical import canonical_bytes
from sealbox.errors import SnapshotDamagedError
from sealbox.store import init_store, open_store

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
SAFE = {"model": {"provider": "p", "name": "safe-model"}, "tools": []}
FORGED = {"model": {"provider": "p", "name": "forged-model"}, "tools": []}


def _sqlite(tmp_path):
    path = tmp_path / "store"
    store = init_store(path)
    fp = store.put_snapshot(SAFE)
    store.close()

    def forge():
        db = sqlite3.connect(path / "sealbox.db")
        db.execute("DROP TRIGGER snapshots_no_update")
        db.execute("UPDATE snapshots SET content = ? WHERE fingerprint = ?", (canonical_bytes(FORGED), fp))
        db.commit()
        db.close()

    return path, fp, forge, None


def _postgres(tmp_path):
    import psycopg

    schema = f"sbt_{uuid.uuid4().hex[:20]}"
    path = tmp_path / "pg"
    store = init_store(path, postgres_url=URL, schema=schema)
    fp = store.put_snapshot(SAFE)
    store.close()

    def forge():
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            conn.execute("SET session_replication_role = replica")  # below the triggers
            conn.execute("UPDATE snapshots SET content = %s WHERE fingerprint = %s", (canonical_bytes(FORGED), fp))

    def drop():
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    return path, fp, forge, drop


BACKENDS = [pytest.param(_sqlite, id="sqlite"),
            pytest.param(_postgres, id="postgres",
                         marks=pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_snapshot_changed_below_sealbox_is_not_read(tmp_path, backend, capsys):
    path, fp, forge, drop = backend(tmp_path)
    try:
        store = open_store(path)
        assert store.get_snapshot(fp) == SAFE
        store.close()
        forge()
        store = open_store(path)
        try:
            for ref in (fp, fp[:15]):
                with pytest.raises(SnapshotDamagedError) as caught:  # a StoreError: reports name it
                    store.get_snapshot(ref)
                assert str(caught.value) == (f"snapshot {fp} no longer hashes to its fingerprint: the store was "
                                             "changed below Sealbox (run `sealbox verify`)")
        finally:
            store.close()
        from sealbox.cli.main import main

        with pytest.raises(SystemExit) as exited:
            main(["snapshot", "show", fp, "--store", str(path)])
        assert exited.value.code == 2
        assert capsys.readouterr().err == (f"error: snapshot {fp} no longer hashes to its fingerprint: the store was "
                                           "changed below Sealbox (run `sealbox verify`)\n")
    finally:
        if drop:
            drop()
