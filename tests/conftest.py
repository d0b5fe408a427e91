"""Shared by every test folder: ``from identity_testkit import admin_key`` (tests/identity_testkit.py).

The suite does not inherit the caller's terminal size: ``COLUMNS`` / ``LINES`` exported by a shell
(or a tool running the tests) changed the width of the CLI's tables and failed tests that read them;
a test that needs a width sets ``COLUMNS`` itself."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
