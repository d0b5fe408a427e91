"""Shared by every test folder: ``from identity_testkit import admin_key`` (tests/identity_testkit.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
