"""Human tables never cut an id a person copies into the next command.

Regression (the incident drill's own output): at the 160 columns a listing piped to a file or a
pager gets, ``sealbox runs list`` printed run ids as ``01a2409a-c792-7209-8b58-63fb03e95…`` and
``sealbox calls`` as ``01a2409a-c792-…`` with the time cut to ``2026-12-04T10:…``, because long
labels and arguments took their width: the id could not be pasted into ``sealbox runs show``.
Now run ids, call and approval ids and times keep their whole width while they fit in 60% of the
table, and are folded onto more lines (every character still there) where they do not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sealbox import init_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _sealbox(columns: int, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_DEBUG", "SEALBOX_STORE")}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**env, "COLUMNS": str(columns)})


@pytest.fixture(scope="module")
def wide_store(tmp_path_factory) -> tuple[str, str, str]:
    path = tmp_path_factory.mktemp("ids") / "store"
    store = init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    long = "x" * 150
    with rec.run(agent="cleanup-bot", labels={k: long for k in ("ticket", "env", "team", "region")}) as run:
        run.call_tool("db", "write_query", {"query": "DELETE FROM customers WHERE " + long}, lambda **kw: 1)
        run_id = run.run_id
        with rec.run(agent="sub-agent", labels={"ticket": long}):  # a parent column, as in the drill
            pass
    ts = store.query_calls(run_id=run_id)[0]["ts"]
    store.close()
    return str(path), run_id, ts


def _cells(stdout: str, first: str) -> list[str]:
    row = next(line for line in stdout.splitlines() if line.startswith("│ " + first))
    return [c.strip() for c in row.strip("│").split("│")]


def test_runs_list_prints_whole_run_ids_beside_long_labels(wide_store):
    path, run_id, _ = wide_store
    proc = _sealbox(160, "runs", "list", "-s", path)
    assert proc.returncode == 0, proc.stderr
    cells = _cells(proc.stdout, run_id)
    assert cells[0] == run_id
    assert cells[1] == "cleanup-bot"


def test_calls_prints_whole_time_and_run_id_beside_long_arguments(wide_store):
    path, run_id, ts = wide_store
    proc = _sealbox(160, "calls", "-s", path)
    assert proc.returncode == 0, proc.stderr
    cells = _cells(proc.stdout, ts)
    assert cells[:3] == [ts, run_id, "2"]


def test_a_table_too_narrow_folds_ids_without_cutting_them(wide_store):
    path, run_id, _ = wide_store
    proc = _sealbox(50, "runs", "list", "-s", path)
    assert proc.returncode == 0, proc.stderr
    first_column = "".join(line.split("│")[1].strip() for line in proc.stdout.splitlines()
                           if line.startswith("│"))
    assert run_id in first_column
    assert not re.search(r"01[0-9a-f-]*…", proc.stdout)


def test_calls_table_folds_the_tool_name_instead_of_cutting_it(wide_store):
    """The drill's own `sealbox calls --tool write_query` printed the tool as `db/write…`, the
    decision `require_…`, the rule `writes-n…` and the approver `ops-onca…`: the facts the listing
    is for, cut with an ellipsis while the arguments wrapped. Such columns now fold (every
    character still there, on more lines)."""
    path, run_id, _ = wide_store
    proc = _sealbox(160, "calls", "-s", path)
    assert proc.returncode == 0, proc.stderr
    body = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    cols = [[c.strip() for c in line.strip("│").split("│")] for line in body]
    assert cols[0][1] == run_id
    header = next(line for line in proc.stdout.splitlines() if line.startswith("┃"))
    i = [c.strip() for c in header.strip("┃").split("┃")].index("tool")
    assert "".join(row[i] for row in cols) == "db/write_query"
    assert "…" not in "".join(row[i] for row in cols)
