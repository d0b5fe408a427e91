"""The demo's "Explore it" line when `sealbox` is not on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_demo_explore_line_works_when_sealbox_is_not_on_path(tmp_path):
    """After `make demo` (sealbox installed in .venv only) the demo's "Explore it: … sealbox runs show"
    line answered `sealbox: command not found` when pasted into a new shell. When `sealbox` is not
    on PATH, the line now starts by putting the folder of the running sealbox on it."""
    bindir = os.path.dirname(SEALBOX)
    proc = run("demo", "--sample", "--dir", str(tmp_path / "ws"), env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    explore = next(line for line in proc.stdout.splitlines() if line.startswith("Explore it: "))
    assert explore.startswith(f"Explore it: export PATH={bindir}:$PATH; export SEALBOX_STORE="), explore
    on_path = run("demo", "--sample", "--dir", str(tmp_path / "ws2"), env={"PATH": f"{bindir}:/usr/bin:/bin"})
    explore = next(line for line in on_path.stdout.splitlines() if line.startswith("Explore it: "))
    assert explore.startswith("Explore it: export SEALBOX_STORE="), explore
