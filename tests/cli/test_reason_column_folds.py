"""The `reason` (and `why`) column of a table cut a long word of its text with '…'.

`make demo`'s what-if table ("Decisions that would change") printed a denial's reason as
``rule 'deletes-name-the-test-domai…`` and ``call.arguments.query.matches…``: the rule and the
CEL condition the investigator reads the row for, cut. Those columns now fold a word longer than
the column onto more lines: every character is still there."""

from __future__ import annotations

import os
import subprocess
import sys

REASON = ("rule 'deletes-name-the-test-domain' denies the call (condition true: "
          "call.arguments.query.matches('(?i)delete') && !call.arguments.query.contains('test'))")

SCRIPT = f"""
from sealbox.cli.common import emit_rows
emit_rows([{{"run_id": "01a24344-0371-7d75-b44f-db381ea46ecc", "tool": "write_query", "reason": {REASON!r},
             "why": {REASON!r}}}], ["run_id", "tool", "reason", "why"], as_json=False, as_csv=False, title="T")
"""


def test_a_long_word_of_a_reason_is_folded_not_cut():
    env = {**os.environ, "COLUMNS": "100"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    body = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("┃"))
    names = [c.strip() for c in header.strip("┃").split("┃")]
    cols = [[c.strip() for c in line.strip("│").split("│")] for line in body]
    for name in ("reason", "why"):
        i = names.index(name)
        cells = [row[i] for row in cols]
        assert "…" not in "".join(cells), cells
        assert "".join(cells).replace(" ", "") == REASON.replace(" ", "")
