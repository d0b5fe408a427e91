"""A file whose JSON parses into more memory than the process has is one error line, not an internal error.

Regression (found by attacking ``sealbox import`` with hostile files): a 60 MB file (within the size
limit) ``[{},{},...]`` (20 million empty objects, 3 bytes each, 64 bytes each once parsed) ran import
out of memory under ``ulimit -v 1200000``: ``error: internal error: MemoryError`` (exit 70). Running out
of memory while parsing or converting is now an ImportFormatError saying so: one line, exit 2,
nothing imported.
"""

from __future__ import annotations

import resource
import subprocess
import sys


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1200 << 20, 1200 << 20))


def _sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, preexec_fn=_limited)


def test_running_out_of_memory_is_one_error_line_and_nothing_is_imported(tmp_path):
    st = tmp_path / "s"
    assert _sb("init", st).returncode == 0
    f = tmp_path / "objects.json"
    f.write_bytes(b"[" + b"{}," * (20_000_000 - 1) + b"{}]")
    p = _sb("import", "-s", st, f)
    assert (p.returncode, p.stdout, p.stderr) == (
        2, "", f"error: {f.name} could not be imported in the memory available (it ran out while parsing its "
               f"{f.stat().st_size} bytes: JSON can take far more memory than its size); nothing was imported\n")
    runs = _sb("runs", "list", "-s", st, "--json")
    assert runs.returncode == 0 and runs.stdout.count('"run_id"') == 1  # the system run only
