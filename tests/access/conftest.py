"""Fixtures for the access tests: a real store and a real OAuth provider on 127.0.0.1.

Every test taking ``store`` (or ``init_store``) runs on SQLite and, when ``SEALBOX_TEST_POSTGRES_URL``
is set, on PostgreSQL (a schema of its own per store, dropped at the test's end): grants behave the
same on both. ``backend`` names the one under test; ``raw_sql`` runs SQL on the store's database below
Sealbox (``sqlite3`` on the file; psycopg in the store's schema)."""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import sealbox  # noqa: E402
from access_provider import OAuthProvider  # noqa: E402
from access_db import PG_URL, _raw_sql  # noqa: E402
from identity_testkit import grant_key  # noqa: E402

_POSTGRES = pytest.param("postgres", marks=pytest.mark.skipif(not PG_URL, reason="needs SEALBOX_TEST_POSTGRES_URL"))


@pytest.fixture(params=["sqlite", _POSTGRES])
def backend(request):
    """The backend of the stores :func:`init_store` makes: ``sqlite`` or ``postgres``."""
    return request.param


@pytest.fixture
def init_store(backend, request):
    """``init_store(path, **kwargs)``: a new store of the backend under test in folder ``path``
    (``sealbox.init_store``; on PostgreSQL in a fresh schema of the test database). Closed, and its
    schema dropped, at the test's end."""
    made = []

    def init(path, **kwargs):
        if backend == "postgres":
            kwargs.setdefault("postgres_url", PG_URL)
            kwargs.setdefault("schema", f"sbt_acc_{uuid.uuid4().hex[:16]}")
        s = sealbox.init_store(path, **kwargs)
        made.append(s)
        return s

    yield init
    for s in made:
        with contextlib.suppress(Exception):
            s.close()
    if backend == "postgres":
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for s in made:
                conn.execute(f'DROP SCHEMA IF EXISTS "{s.schema}" CASCADE')


@pytest.fixture
def store(init_store, tmp_path):
    s = init_store(tmp_path / "store")
    grant_key(s)  # the admin whose key signs grants (tmp_path / "root.key"): added before any test counts events
    yield s
    s.close()


@pytest.fixture
def raw_sql():
    """:func:`_raw_sql`: ``raw_sql(store, sql, params=())``."""
    return _raw_sql


@pytest.fixture
def provider():
    p = OAuthProvider().start()
    yield p
    p.stop()


@pytest.fixture
def no_sleep():
    """A sleep that records the backoff delays instead of waiting."""
    delays: list[float] = []
    return delays
