"""Fixtures for query tests (the recorded store is described in query_helpers.py)."""

from __future__ import annotations

import pytest
from query_helpers import Recorded, record


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Recorded:
    return record(tmp_path_factory.mktemp("query") / "store")


@pytest.fixture
def store(recorded):
    s = recorded.open()
    yield s
    s.close()


