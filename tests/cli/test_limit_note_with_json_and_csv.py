"""`sealbox calls --limit N` and `sealbox runs list` (50 runs unless --limit) said that the limit cut
the listing only under the table: with --json or --csv the cut was silent. It is now said on stderr
in every format, stdout staying the valid JSON / CSV of the rows listed."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("limit") / "store"
    store = sealbox.init_store(path)
    ids = []
    for n in range(3):
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
            run.call_tool("fs", "read", {"n": n}, lambda n: "ok")
            ids.append(run.run_id)
    store.close()
    return path, ids


@pytest.mark.parametrize("fmt", ["--json", "--csv"])
def test_calls_limit_says_more_match_on_stderr(store, fmt):
    path, ids = store
    out = sb("calls", "--limit", "2", fmt, "-s", path)
    assert out.returncode == 0
    assert out.stderr == "the newest 2 calls shown; more match (--limit N to see more)\n"
    rows = json.loads(out.stdout) if fmt == "--json" else list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["run_id"] for r in rows] == ids[1:]
    whole = sb("calls", "--limit", "3", fmt, "-s", path)  # nothing cut: nothing said
    assert (whole.returncode, whole.stderr) == (0, "")


@pytest.mark.parametrize("fmt", ["--json", "--csv"])
def test_runs_list_limit_says_more_match_on_stderr(store, fmt):
    path, ids = store
    out = sb("runs", "list", "--limit", "2", fmt, "-s", path)
    assert out.returncode == 0
    assert out.stderr == "the newest 2 runs shown; more match (--limit N to see more)\n"
    rows = json.loads(out.stdout) if fmt == "--json" else list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["run_id"] for r in rows] == ids[:0:-1]
    whole = sb("runs", "list", "--limit", "4", fmt, "-s", path)  # (and the store's "system" run)
    assert (whole.returncode, whole.stderr) == (0, "")
