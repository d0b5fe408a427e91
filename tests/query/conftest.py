"""Fixtures for query tests (the recorded store is described in query_helpers.py)."""

from __future__ import annotations

import importlib.util
import os
import uuid

import pytest
from query_helpers import Recorded, record


BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(scope="session", params=BACKENDS)
def recorded(request, tmp_path_factory) -> Recorded:
    """The recorded store, on each backend: SQLite, and PostgreSQL (its own schema, dropped at the
    session's end) when SEALBOX_TEST_POSTGRES_URL is set."""
    if request.param == "sqlite":
        yield record(tmp_path_factory.mktemp("query") / "store")
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_query_{uuid.uuid4().hex[:16]}"
    try:
        yield record(tmp_path_factory.mktemp("query-pg") / "store", postgres_url=url, schema=schema)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def store(recorded):
    s = recorded.open()
    yield s
    s.close()


