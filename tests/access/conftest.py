"""Fixtures for the access tests: a real SQLite store and a real OAuth provider on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import sealbox  # noqa: E402
from access_provider import OAuthProvider  # noqa: E402
from identity_testkit import grant_key  # noqa: E402


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    grant_key(s)  # the admin whose key signs grants (tmp_path / "root.key"): added before any test counts events
    yield s
    s.close()


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
