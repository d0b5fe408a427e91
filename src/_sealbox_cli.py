"""The ``sealbox`` console script's entry point, outside the ``sealbox`` package.

Importing :mod:`sealbox.cli.main` takes tens of milliseconds (the ``sealbox`` package, ``click``);
a Ctrl-C in that time arrived before the CLI's own ``KeyboardInterrupt`` handling existed and
printed a traceback, and a SIGTERM ended it silently (exit 143, no word). This module imports nothing
but the standard library's ``os``, ``signal`` and ``sys``, so :func:`main` can take SIGINT and SIGTERM
before anything else is imported: an interrupt while the CLI is loading is one line (``error:
interrupted``) and exit status 130, a SIGTERM ``error: terminated`` and 143, as they are afterwards.
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


def _terminated_while_loading(signum: int, frame: object) -> None:
    # As SIGINT: nothing read or written yet. The CLI replaces this handler with its own as it starts.
    try:
        os.write(2, b"error: terminated\n")
    finally:
        os._exit(143)


#: Tells :func:`sealbox.cli.main.main` that this SIGTERM handler is the loading guard, to be replaced.
_terminated_while_loading.sealbox_loading_guard = True  # type: ignore[attr-defined]


def main() -> None:
    """Run ``sealbox``: SIGINT (exit 130) and SIGTERM (exit 143) end it with one line while the CLI
    loads, then the CLI handles them.

    SIGTERM's guard stays until the CLI's own handler replaces it (no moment in between when it
    would kill the process silently, as the default does); each guard is set only when the signal's
    handler is Python's default (not when the caller chose otherwise, e.g. SIG_IGN).

    Raises:
        SystemExit: always, with the command's exit status (see :func:`sealbox.cli.main.main`).
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not when the caller chose otherwise (e.g. SIG_IGN)
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    guard_term = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if guard_term:
        signal.signal(signal.SIGTERM, _terminated_while_loading)
    try:
        from sealbox.cli.main import main as cli_main
    except BaseException:
        if guard_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise
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
