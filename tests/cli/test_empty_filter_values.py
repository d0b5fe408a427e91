"""An empty filter value (``--tool ''``, typically an unset shell variable in quotes) matched
nothing, silently: ``no tool calls match`` and exit 0. It is now one ``error:`` line naming the
option and exit 2, before the store is read; a real value still filters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def sb(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *map(str, args)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, str]:
    from sealbox.demo_sample import record_sample_run
    from sealbox.store import init_store

    path = tmp_path_factory.mktemp("empty") / "store"
    store = init_store(path)
    run_id = record_sample_run(store)
    store.close()
    return path, run_id


@pytest.mark.parametrize("command, option", [
    (["calls"], "--tool"), (["calls"], "--server"), (["calls"], "--agent"), (["calls"], "--principal"),
    (["calls", "--json"], "--tool"), (["runs", "list"], "--agent"), (["runs", "list"], "--principal"),
    (["export", "--parquet", "OUT"], "--agent"),
])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_filter_value_is_one_error_line(sample, tmp_path, command, option, value):
    store, _ = sample
    args = [str(tmp_path / "out.parquet") if a == "OUT" else a for a in command]
    proc = sb(*args, option, value, "--store", store)
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert proc.stderr == (f"error: {option} is empty: give a value (an empty filter matches nothing; "
                           "is a shell variable unset?)\n")
    assert not (tmp_path / "out.parquet").exists()


def test_a_real_filter_value_still_filters(sample):
    store, run_id = sample
    calls = json.loads(sb("calls", "--json", "--store", store).stdout)
    tool = calls[0]["tool"]
    proc = sb("calls", "--json", "--tool", tool, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert [c["tool"] for c in json.loads(proc.stdout)] == [c["tool"] for c in calls if c["tool"] == tool]
    agent = calls[0]["agent"]
    proc = sb("runs", "list", "--json", "--agent", agent, "--store", store)
    assert proc.returncode == 0, proc.stderr
    assert [r["run_id"] for r in json.loads(proc.stdout)] == [run_id]
