"""Human tables show recorded text exactly: square brackets are not console markup.

Regression (input: agent names, labels, tool names and arguments holding ``[...]``): rich read
every table cell as markup, so ``read[x]`` was shown as ``read`` and a value holding ``[/b]``
(a closing tag with nothing open) stopped ``sealbox calls``, ``runs list`` and ``runs show``
with ``internal error: MarkupError`` (exit 70).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sealbox import init_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _sealbox(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**env, "COLUMNS": "400"})


@pytest.fixture(scope="module")
def store_with_brackets(tmp_path_factory) -> tuple[str, str]:
    path = tmp_path_factory.mktemp("markup") / "store"
    store = init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="[bold]bot[/bold]", principal="agent:x", labels={"k": "[/]"}) as run:
        run.call_tool("db", "read[x]", {"query": "SELECT '[/b]'"}, lambda **kw: 1)
        run_id = run.run_id
    store.close()
    return str(path), run_id


def test_calls_table_shows_brackets_in_tool_names_and_arguments(store_with_brackets):
    path, run_id = store_with_brackets
    proc = _sealbox("calls", "-s", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    row = next(line for line in proc.stdout.splitlines() if run_id in line)
    assert "│ db/read[x] │" in row
    assert """{"query": "SELECT '[/b]'"}""" in row


def test_runs_list_table_shows_bracketed_agent_and_label(store_with_brackets):
    path, run_id = store_with_brackets
    proc = _sealbox("runs", "list", "-s", path)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if run_id in line)
    assert "│ [bold]bot[/bold] │" in row
    assert "│ k=[/]" in row


def test_runs_show_table_shows_bracketed_arguments(store_with_brackets):
    path, run_id = store_with_brackets
    proc = _sealbox("runs", "show", run_id, "-s", path)
    assert proc.returncode == 0, proc.stderr
    call = next(line for line in proc.stdout.splitlines() if "│ tool.call" in line)
    assert "│ db/read[x] │" in call
    assert """args={"query": "SELECT '[/b]'"}""" in call
