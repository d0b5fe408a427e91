"""The ``sealbox`` console script's entry point, outside the ``sealbox`` package.

Importing :mod:`sealbox.cli.main` takes tens of milliseconds (the ``sealbox`` package, ``click``);
a Ctrl-C in that time arrived before the CLI's own ``KeyboardInterrupt`` handling existed and
printed a traceback. This module imports nothing but the standard library's ``os``, ``signal`` and
``sys``, so :func:`main` can take SIGINT before anything else is imported: an interrupt while the CLI
is loading is one line (``error: interrupted``) and exit status 130, as it is afterwards.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_loading(signum: int, frame: object) -> None:
    # Nothing has been read or written yet: leave at once, without unwinding half-done imports.
    try:
        os.write(2, b"error: interrupted\n")
    finally:
        os._exit(130)


def main() -> None:
    """Run ``sealbox``: SIGINT ends quietly (exit 130) while the CLI loads, then the CLI handles it.

    Raises:
        SystemExit: always, with the command's exit status (see :func:`sealbox.cli.main.main`).
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not when the caller chose otherwise (e.g. SIG_IGN)
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    try:
        from sealbox.cli.main import main as cli_main
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli_main()
    finally:
        # The command is done and its exit status decided: a signal while Python shuts down (closing
        # files, freeing modules: up to a tenth of a second) must not turn it into 143 / 130 or a traceback.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
