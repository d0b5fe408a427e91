"""The ``snapshot diff`` table never shows a changed field with two identical cells.

Regression (found by ``sealbox snapshot diff A B`` on two snapshots whose system prompts differ
only in their last sentence, and whose ``extra.flag`` went from the string ``"true"`` to the
boolean ``true``): both rows read the same on each side (``You are cleanup-bot, … productio…``
twice; ``true`` twice), so the table said "changed" without showing any change. ``--json`` and
``--csv`` were right.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sealbox import init_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.snapshot import Snapshot

SEALBOX = str(Path(sys.executable).parent / "sealbox")
BASE = "You are cleanup-bot, an operations agent with access to the production customer database. "


def _table_rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if len(cells) == 4 and cells[1] in ("added", "removed", "changed", "reordered"):
            rows[cells[0]] = cells[1:]
    return rows


def test_each_changed_row_shows_two_different_values(tmp_path):
    path = tmp_path / "store"
    store = init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    fps = []
    for tail, flag, n in (("Never delete rows.", "true", "5"), ("Always delete rows.", True, 5)):
        snap = Snapshot(model={"name": "m"}, system_prompt=BASE + tail, extra={"flag": flag, "n": n, "same": "x"})
        with rec.run(agent="a", snapshot=snap):
            pass
        fps.append(snap.fingerprint)
    store.close()
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    p = subprocess.run([SEALBOX, "snapshot", "diff", "-s", str(path), *fps], capture_output=True, text=True,
                       env={**env, "COLUMNS": "400"})
    assert p.returncode == 0, p.stderr
    rows = _table_rows(p.stdout)
    assert set(rows) == {"extra.flag", "extra.n", "system_prompt"}
    for path_, (change, a, b) in rows.items():
        assert change == "changed" and a != b, (path_, a, b)
    # a string and the JSON value that prints like it are told apart as JSON, as --csv does
    assert rows["extra.flag"][1:] == ['"true"', "true"]
    assert rows["extra.n"][1:] == ['"5"', "5"]
    # a long text that differs past the cut is shown around its first difference
    a, b = rows["system_prompt"][1:]
    assert "Never delete rows." in a and "Always delete rows." in b
    assert a.startswith("…") and b.startswith("…")
