"""Ctrl-C while the ``sealbox`` command is still importing (its first tens of milliseconds) is one
line and exit 130, like an interrupt afterwards, never a traceback. The interrupt is delivered
deterministically: an import hook sends SIGINT to the process when ``click`` (or a ``sealbox``
module) starts to load, through the console script's own entry point (``_sealbox_cli:main``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HOOKED = """
import os, signal, sys
class InterruptOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, InterruptOnImport())
sys.argv = ["sealbox", "--version"]
from importlib.metadata import entry_points
(script,) = [e for e in entry_points(group="console_scripts") if e.name == "sealbox"]
main = script.load()
sys.exit(main())
"""


@pytest.mark.parametrize("module", ["click", "sealbox.cli", "sealbox.errors"])
def test_an_interrupt_while_the_cli_loads_is_one_line_exit_130(module):
    proc = subprocess.run([sys.executable, "-c", HOOKED.format(module=module)], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "error: interrupted\n")


def test_the_console_script_is_the_guarded_entry_point_and_runs_the_cli():
    script = Path(sys.executable).parent / "sealbox"
    assert "from _sealbox_cli import main" in script.read_text()
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("sealbox, version ")


def test_after_loading_the_cli_handles_sigint_itself():
    """The loading guard is removed before a command runs: Python's own handler is back, so an
    interrupt during a command goes through the CLI's KeyboardInterrupt handling (its own line)."""
    code = ("import signal, sys; sys.argv = ['sealbox', 'policy', '--help']\n"
            "import _sealbox_cli, sealbox.cli.main as m\n"
            "seen = []\n"
            "real = m.cli.main\n"
            "def spy(*a, **k):\n"
            "    seen.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
            "    raise KeyboardInterrupt\n"
            "m.cli.main = spy\n"
            "try:\n"
            "    _sealbox_cli.main()\n"
            "finally:\n"
            "    print(seen)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "[True]\n", "error: interrupted\n")
