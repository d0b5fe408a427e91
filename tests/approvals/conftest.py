"""Fixtures for approval tests: a real store, identities with key files, a policy that asks.

Every test taking ``store`` (or ``init_store``, ``keys``) runs on SQLite and, when
``SEALBOX_TEST_POSTGRES_URL`` is set, on PostgreSQL: the store's folder is ``tmp_path / "store"`` on
both, and on PostgreSQL its tables live in a schema of their own, dropped at the test's end (as in
tests/access and tests/query). ``store_backend`` names the backend under test. A test that reads
SQLite's own machinery (its statement trace, its query plans, the file) carries
``@pytest.mark.sqlite_only("why")``: its PostgreSQL run is skipped with that reason."""

from __future__ import annotations

import contextlib
import os
import uuid

import pytest

import sealbox
from sealbox.identities import add_identity
from identity_testkit import admin_key

PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
_POSTGRES = pytest.param("postgres", marks=pytest.mark.skipif(not PG_URL, reason="needs SEALBOX_TEST_POSTGRES_URL"))


@pytest.fixture(params=["sqlite", _POSTGRES])
def store_backend(request) -> str:
    """The backend of the stores :func:`init_store` makes: ``sqlite`` or ``postgres``."""
    only = request.node.get_closest_marker("sqlite_only")
    if request.param == "postgres" and only is not None:
        pytest.skip(f"SQLite only: {only.args[0]}")
    return request.param


@pytest.fixture
def init_store(store_backend):
    """``init_store(path, **kwargs)``: a new store of the backend under test in folder ``path``
    (``sealbox.init_store``; on PostgreSQL in a fresh schema of the test database).
    ``init_store.cli_args(path)``: the arguments of ``sealbox init`` making such a store (``--postgres URL
    --schema NAME`` added on PostgreSQL). Stores closed, and their schemas dropped, at the test's end."""
    made, schemas = [], []

    def new_schema() -> str:
        schemas.append(f"sbt_apr_{uuid.uuid4().hex[:16]}")
        return schemas[-1]

    def init(path, **kwargs):
        if store_backend == "postgres":
            kwargs.setdefault("postgres_url", PG_URL)
            kwargs.setdefault("schema", new_schema())
        s = sealbox.init_store(path, **kwargs)
        made.append(s)
        return s

    def cli_args(path) -> list[str]:
        extra = ["--postgres", PG_URL, "--schema", new_schema()] if store_backend == "postgres" else []
        return ["init", str(path), *extra]

    init.cli_args = cli_args
    yield init
    for s in made:
        with contextlib.suppress(Exception):
            s.close()
    if schemas:
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def store(init_store, tmp_path):
    s = init_store(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def keys(store, tmp_path):
    """alice, bob (ops approvers), carol (approver, no group), dave (ops, agent role), erin (auditor)."""
    out = {}
    for name, role, groups in (("alice", "approver", ["ops"]), ("bob", "approver", ["ops"]), ("carol", "approver", []),
                               ("dave", "agent", ["ops"]), ("erin", "auditor", ["ops"])):
        out[name] = add_identity(store, name, role, groups, key_path=tmp_path / f"{name}.key",
                                 admin_key=admin_key(store, tmp_path)).key_path
    return out


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_only(reason): the test reads SQLite's own machinery; "
                                       "its PostgreSQL run is skipped with the reason")
