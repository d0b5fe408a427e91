"""The conformance suite runs against every Store backend.

Each backend contributes a factory that creates a fresh, empty store (its own
folder or database). SQLite is always available; a PostgreSQL backend joins the
parametrisation when it exists and ``SEALBOX_TEST_POSTGRES_URL`` is set.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from sealbox.store import CheckpointPolicy, init_store


def _sqlite_factory(tmp_path):
    def make(**kwargs):
        kwargs.setdefault("checkpoint_policy", CheckpointPolicy(every_events=10, every_seconds=3600))
        return init_store(tmp_path / f"store-{len(list(tmp_path.iterdir()))}", **kwargs)
    return make


BACKENDS = ["sqlite"]
if importlib.util.find_spec("sealbox.store.postgres") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(params=BACKENDS)
def make_store(request, tmp_path):
    """A factory of fresh stores for the backend under test."""
    if request.param == "sqlite":
        stores = []
        factory = _sqlite_factory(tmp_path)

        def make(**kwargs):
            store = factory(**kwargs)
            stores.append(store)
            return store
        yield make
        for store in stores:
            store.close()
        return
    url = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("SEALBOX_TEST_POSTGRES_URL is not set: PostgreSQL conformance tests need a server")
    from sealbox.store import postgres  # noqa: F401  (backend-specific factory lives there)

    yield postgres.test_factory(url, request)  # type: ignore[attr-defined]


@pytest.fixture
def store(make_store):
    """One fresh store of the backend under test."""
    return make_store()


@pytest.fixture
def raw_sql():
    """:func:`_raw_sql`: SQL run on a store's database below Sealbox."""
    return _raw_sql


def _raw_sql(store, sql: str, *, below_triggers: bool = False) -> None:
    """Run ``sql`` on the store's database directly, as someone with the database's own tools would
    (``sqlite3`` on the file; ``psql`` as the PostgreSQL superuser, in the store's schema). With
    ``below_triggers`` the append-only triggers are not in force for it (SQLite: the store's triggers
    dropped first; PostgreSQL: ``session_replication_role = replica``, which only a superuser may set).
    Errors propagate (sqlite3.Error / psycopg.Error)."""
    if store.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(store.db_path, isolation_level=None)
        try:
            if below_triggers:
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                    conn.execute(f"DROP TRIGGER {name}")
            conn.execute(sql)
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {store.schema}")
        if below_triggers:
            conn.execute("SET session_replication_role = replica")
        conn.execute(sql)
