"""SIGTERM while the ``sealbox`` command is still importing (its first tens of milliseconds, half a
second on a loaded machine) ended it with exit 143 and no word: the console script guarded SIGINT
while loading but left SIGTERM to its default, and the CLI took SIGTERM only once ``main`` ran. It is
now one line, ``error: terminated``, and exit 143, as SIGTERM during a command. The signal is sent
deterministically by an import hook, as in test_interrupt_while_loading.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

HOOKED = """
import os, signal, sys
class TerminateOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None
sys.meta_path.insert(0, TerminateOnImport())
sys.argv = ["sealbox", "--version"]
from importlib.metadata import entry_points
(script,) = [e for e in entry_points(group="console_scripts") if e.name == "sealbox"]
main = script.load()
sys.exit(main())
"""


@pytest.mark.parametrize("module", ["click", "sealbox.cli", "sealbox.errors", "sealbox.cli.main"])
def test_sigterm_while_the_cli_loads_is_one_line_exit_143(module):
    proc = subprocess.run([sys.executable, "-c", HOOKED.format(module=module)], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (143, "", "error: terminated\n")


def test_sigterm_between_loading_and_the_command_is_taken_by_the_cli():
    """No gap between the loading guard and the CLI's own handler: SIGTERM just as ``main`` starts
    goes through the CLI's handling (its line, exit 143), not the default (silent death)."""
    code = ("import os, signal, sys; sys.argv = ['sealbox', '--version']\n"
            "import _sealbox_cli, sealbox.cli.main as m\n"
            "real = m._take_sigterm\n"
            "def late():\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return real()\n"
            "m._take_sigterm = late\n"
            "_sealbox_cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (143, "", "error: terminated\n")


def test_a_caller_that_ignores_sigterm_keeps_it_ignored():
    code = ("import os, signal, sys; sys.argv = ['sealbox', '--version']\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "class Hook:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'click':\n"
            "            sys.meta_path.remove(self); os.kill(os.getpid(), signal.SIGTERM)\n"
            "sys.meta_path.insert(0, Hook())\n"
            "import _sealbox_cli\n"
            "_sealbox_cli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("sealbox, version ")
