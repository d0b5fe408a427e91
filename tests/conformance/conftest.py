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
