"""A table closed early by its reader (``sealbox runs show RUN | head``) ends the command quietly with exit 0,
as the JSON, CSV and long-table outputs do. A table of at most ``FAST_TABLE_ROWS`` rows is printed by rich,
whose broken-pipe handler exits 1 (silently: ``set -o pipefail`` scripts failed on ``| head``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory) -> tuple[Path, str]:
    """A run of about 100 events whose table is far larger than a pipe's buffer (64 KiB)."""
    path = tmp_path_factory.mktemp("wide") / "store"
    store = sealbox.init_store(path, durability="fast")
    with Recorder(store, policy=ALLOW_ALL).run(agent="wide") as run:
        for i in range(30):
            run.call_tool("db", "read_query", {"query": f"SELECT {i}, '" + "x" * 3000 + "'"}, lambda **_k: "ok")
    store.close()
    return path, run.run_id


@pytest.mark.parametrize("cmd", [["runs", "show", "RUN"], ["calls"], ["runs", "show", "RUN", "--json"]],
                         ids=" ".join)
def test_a_table_closed_early_by_its_reader_exits_0_quietly(wide_run, cmd):
    store, run_id = wide_run
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "SEALBOX_DEBUG")}
    proc = subprocess.Popen([SEALBOX, *[run_id if c == "RUN" else c for c in cmd], "-s", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait(timeout=60) == 0
    assert stderr == ""


class _ClosedPipe:
    """A stdout whose reader went away: every write fails as a pipe's does (EPIPE)."""

    def __init__(self) -> None:
        self.real = sys.stdout

    def write(self, _text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        return False


def test_a_rich_table_on_a_closed_pipe_raises_broken_pipe_not_exit_1(monkeypatch, tmp_path):
    # rich's own handler raised SystemExit(1), which no caller can tell from a failed command
    from sealbox.cli.common import emit_rows

    saved = os.dup(1)
    sink = os.open(tmp_path / "sink", os.O_WRONLY | os.O_CREAT)
    os.dup2(sink, 1)  # what the handler points fd 1 at (/dev/null) must not be the test runner's stdout
    try:
        monkeypatch.setattr(sys, "stdout", _ClosedPipe())
        monkeypatch.delenv("COLUMNS", raising=False)
        with pytest.raises(BrokenPipeError):
            emit_rows([{"a": "1", "b": "2"}], ["a", "b"], as_json=False, as_csv=False)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(sink)
