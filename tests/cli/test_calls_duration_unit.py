"""``sealbox calls`` shows a call's duration with its unit, as ``runs show`` does (``16.4 ms``).

Found walking the README on the drill's store: at 160 columns the table's header ``duration_us`` was cut
to ``duration…`` and its cells were bare integers (``33525``): a reader could not tell microseconds
from milliseconds, while ``runs show`` printed the same call's ``33.5 ms``. ``--json`` and ``--csv``
keep ``duration_us`` as an integer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sealbox import init_store
from sealbox.events import EventDraft
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _sealbox(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_DEBUG", "SEALBOX_STORE")}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**env, "COLUMNS": "160"})


def _cells(stdout: str, first: str) -> list[str]:
    row = next(line for line in stdout.splitlines() if line.startswith("│ " + first))
    return [c.strip() for c in row.strip("│").split("│")]


def test_the_calls_table_shows_durations_with_their_unit(tmp_path):
    path = tmp_path / "store"
    store = init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "q", {"n": 1}, lambda **kw: 1)
        run_id = run.run_id
    store.close()
    listed = json.loads(_sealbox("calls", "-s", str(path), "--json").stdout)
    us = listed[0]["duration_us"]
    assert isinstance(us, int)
    proc = _sealbox("calls", "-s", str(path))
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("┃ ts"))
    assert [c.strip() for c in header.strip("┃").split("┃")][8] == "duration"
    shown = _cells(proc.stdout, listed[0]["ts"])[8]
    expected = f"{us} µs" if us < 1000 else f"{us / 1000:.1f} ms" if us < 1_000_000 else f"{us / 1e6:.2f} s"
    assert shown == expected
    assert run_id == listed[0]["run_id"]
