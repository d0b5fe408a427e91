"""click's own usage errors are one ``error:`` line too.

Found by a bad-input sweep of every command: ``sealbox identities add bob`` (no --role) printed five lines,
``error: Missing option '--role'. Choose from:`` then one tab-indented line per role (click 8.2 lists a
Choice's values that way), where every other error is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.mark.parametrize("args, expected", [
    (["identities", "add", "bob"], "error: Missing option '--role'. Choose from: approver, agent, auditor, admin"),
    (["identities", "add", "bob", "--role", "boss"],
     "error: Invalid value for '--role': 'boss' is not one of 'approver', 'agent', 'auditor', 'admin'."),
])
def test_a_missing_choice_is_one_error_line(tmp_path, args, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_DEBUG", "SEALBOX_STORE")}
    proc = subprocess.run([SEALBOX, *args, "-s", str(tmp_path)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == expected + "\n"
