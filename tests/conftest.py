"""Shared by every test folder: ``from identity_testkit import admin_key`` (tests/identity_testkit.py).

The suite does not inherit the caller's terminal size: ``COLUMNS`` / ``LINES`` exported by a shell
(or a tool running the tests) changed the width of the CLI's tables and failed tests that read them;
a test that needs a width sets ``COLUMNS`` itself.

Nor does it inherit an ignored SIGINT: a shell without job control starts a command run in the
background (``make test &`` in a script, ``nohup``) with SIGINT ignored, Python then installs no
handler, and every process the tests start inherits the ignored signal, so the tests that press
Ctrl-C on a ``sealbox`` command (tests/cli/test_interrupt_*.py, the demo's) saw it ignored. The
suite restores Python's default handler, which its children get back as the default action."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
