"""A command whose standard output cannot be written because the disk (or device) it goes to is full:
``sealbox calls --json > calls.json`` on a full disk, ``> /dev/full``. It ended with ``error: internal error:
OSError: [Errno 28] No space left on device (set SEALBOX_DEBUG=1 for a traceback)``, exit 70, as if Sealbox
itself had failed; it is now one line naming standard output, exit 74 (EX_IOERR)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox

SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [["runs", "list"], ["calls", "--json"], ["log", "key"], ["verify"], ["--help"]])
def test_a_full_output_device_is_one_error_line(tmp_path, args):
    sealbox.init_store(tmp_path / "s").close()
    with open("/dev/full", "w") as full:
        proc = subprocess.run([SEALBOX, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "SEALBOX_STORE": str(tmp_path / "s")})
    assert (proc.returncode, proc.stderr) == (
        74, "error: cannot write to standard output: No space left on device (is the disk it goes to full?)\n")


@pytest.mark.parametrize("args", [["runs", "list"], ["log", "key"], ["calls", "--json"]])
def test_a_closed_standard_output_is_one_error_line(tmp_path, args):
    # Regression (input: `sealbox runs list >&-`, a job started with its stdout closed): "internal error:
    # AttributeError: 'NoneType' object has no attribute 'isatty'", exit 70; `sealbox log key >&-` printed
    # nothing and exited 0, its output lost without a word
    sealbox.init_store(tmp_path / "s").close()
    proc = subprocess.run([SEALBOX, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "SEALBOX_STORE": str(tmp_path / "s")},
                          preexec_fn=lambda: os.close(1))
    assert (proc.returncode, proc.stderr) == (
        74, "error: standard output is closed: give the command somewhere to write (> FILE, or > /dev/null to "
            "discard it)\n")
