"""Fixtures for policy tests."""

from __future__ import annotations

import pytest
from policy_helpers import GuardedTool


@pytest.fixture
def tool() -> GuardedTool:
    return GuardedTool()
