"""A table printed to a file or a pipe (`sealbox runs list > runs.txt`, `| grep`, `| less`) was laid out
for 160 columns: `runs list`'s "replay of" and "parent" showed `01a24305-f521…` and `calls` folded a
tool name onto two lines (`db/write_q` / `uery`), so neither could be found with grep or pasted whole.
Not on a terminal, and without COLUMNS, a table is now as wide as its content: every cell on one line,
whole. COLUMNS=N still sets a width (folded, never cut, as on a terminal)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sealbox import EventDraft, init_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

ZERO_FP = "sha256:" + "0" * 64
TOOL = "write_query_against_the_customer_database_of_the_eu_region"


def sb(*args, columns=None):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "SEALBOX_DEBUG", "SEALBOX_STORE")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide") / "store"
    store = init_store(path)
    long = "x" * 120
    with Recorder(store, policy=ALLOW_ALL).run(agent="cleanup-bot", labels={"ticket": long, "env": long}) as run:
        run.call_tool("db", TOOL, {"query": "DELETE FROM customers WHERE " + long}, lambda **kw: 1)
    replay = "02b35416-0000-7000-8000-000000000001"
    store.append([
        EventDraft("run.started", {"agent": "cleanup-bot", "snapshot": None, "parent_run_id": run.run_id,
                                   "replay_of": run.run_id, "labels": {"ticket": long},
                                   "policy": {"fingerprint": ZERO_FP, "name": None}}, run_id=replay,
                   principal="agent:bot"),
        EventDraft("run.ended", {"status": "ok"}, run_id=replay, principal="agent:bot"),
    ])
    store.close()
    return path, run.run_id, replay


def _row(stdout: str, first: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith("│ " + first))
    return [c.strip() for c in line.strip().strip("│").split("│")]


def test_runs_list_into_a_pipe_shows_whole_parent_and_replay_ids(store_path):
    path, run_id, replay = store_path
    proc = sb("runs", "list", "-s", path)
    assert proc.returncode == 0, proc.stderr
    cells = _row(proc.stdout, replay)
    assert cells[:2] == [replay, "cleanup-bot"]
    assert cells[5:7] == [run_id, run_id]  # parent, replay of
    assert "…" not in proc.stdout


def test_calls_into_a_pipe_shows_the_whole_tool_name_on_its_line(store_path):
    path, run_id, _ = store_path
    proc = sb("calls", "-s", path, "--replays")
    assert proc.returncode == 0, proc.stderr
    cells = _row(proc.stdout, "20")
    assert cells[1:4] == [run_id, "2", f"db/{TOOL}"]


def test_columns_still_sets_the_width_and_folds_without_cutting(store_path):
    path, run_id, _ = store_path
    proc = sb("calls", "-s", path, columns="100")
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100
    run_column = "".join(line.split("│")[2].strip() for line in proc.stdout.splitlines() if line.startswith("│"))
    assert run_id in run_column


@pytest.mark.parametrize("columns", ["abc", "", "-5", "0"])
def test_a_columns_that_is_no_width_is_ignored(store_path, columns):
    """COLUMNS=abc was an internal error (int('abc')), exit 70."""
    path, _, replay = store_path
    proc = sb("runs", "list", "-s", path, columns=columns)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert _row(proc.stdout, replay)[0] == replay
