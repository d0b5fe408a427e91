"""A store path the OS refuses to look up (a name longer than NAME_MAX, ENAMETOOLONG) is one `error:` line
naming the cause, exit 2: not `error: internal error: OSError …` (exit 70). Found by a CLI sweep:
`sealbox runs list --store $(printf 'x%.0s' {1..300})`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SEALBOX = str(Path(sys.executable).parent / "sealbox")
LONG = "x" * 300  # one path component over NAME_MAX (255) on every common file system


def sb(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={k: v for k, v in os.environ.items() if k not in ("SEALBOX_STORE", "SEALBOX_DEBUG")})


@pytest.mark.parametrize("command", [["runs", "list", "--store", LONG], ["calls", "-s", LONG],
                                     ["verify", "-s", LONG], ["log", "key", "-s", LONG], ["init", LONG]])
def test_a_name_too_long_is_one_error_line(tmp_path, command):
    proc = sb(*command, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr == f"error: cannot use {LONG} as a store folder: File name too long\n"
    assert list(tmp_path.iterdir()) == []
