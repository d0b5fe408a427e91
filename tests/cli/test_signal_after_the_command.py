"""A SIGTERM or SIGINT that arrives once the command has finished (while Python shuts down) does not turn
its exit status into 143 / 130.

Found by sending SIGTERM to `sealbox identities rotate … --key-out K` at different delays: in a window of
about 0.1 s after the rotation was committed and the key file written, the process died of the signal
(exit 143, no message: the CLI's handler had been given back at its end), so a script saw a failure for a
change that was made, and its retry refused ('K already exists'). The console script's entry point now
ignores both signals once the command has returned: its status is decided and nothing is left to clean up."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import os, signal, sys
import _sealbox_cli
sys.argv = ["sealbox", "--version"]
try:
    _sealbox_cli.main()
finally:
    os.kill(os.getpid(), signal.{sig})  # as if it came while the interpreter shuts down
    signal.raise_signal(signal.{sig})
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_once_the_command_is_done_keeps_its_status(sig):
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(sig=sig)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.startswith("sealbox, version ")
    assert proc.stderr == ""
