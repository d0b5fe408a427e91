"""A long listing's table is written without rich laying out every cell, byte for byte as rich lays it out.

Regression: ``sealbox runs show RUN`` of a 10,001-event run spent 5-6 s of CPU (20 s and more of
wall time on a loaded machine) in rich measuring and rendering each cell, against 0.5 s for
``--csv``; ``sealbox calls`` and ``runs list`` with ``--limit 10000`` the same. Tables of more than
:data:`FAST_TABLE_ROWS` rows are now written by ``_table_text`` (column widths from rich, rows padded
here); these tests pin its output to rich's own layout of the same rows.
"""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sealbox.cli import common
from sealbox.cli.common import emit_rows

RUN = "01a245af-0c3f-75b8-941b-0516e4afa9c6"

ROWS = [
    {"run_id": RUN, "ts": "2026-12-05T10:10:29.574092Z", "kind": "run.started", "tool": "", "detail": "agent big-bot"},
    {"run_id": RUN, "ts": "2026-12-05T10:10:29.576929Z", "kind": "tool.call", "tool": "db/write_query",
     "detail": 'db/write_query call call_a0512435 args={"q": "SELECT 0 FROM t WHERE name = \'x y z\'"}'},
    {"run_id": RUN, "ts": "", "kind": "note", "tool": "", "detail": "   trailing and leading spaces   "},
    {"run_id": RUN, "ts": "x", "kind": "note", "tool": "wide/工具名", "detail": "日本語のテキスト 🎉 mixed with words [bold]not markup[/bold]"},
    {"run_id": RUN, "ts": None, "kind": "note", "tool": "a" * 70, "detail": "b" * 130},
    {"run_id": RUN, "ts": "y", "kind": "note", "tool": "t", "detail": "two\nlines\tand a tab"},
    {"run_id": RUN, "ts": "z", "kind": "", "tool": "", "detail": ""},
    {"run_id": "short", "ts": "z", "kind": "anomaly", "tool": "x y", "detail": "last row"},
]
COLUMNS = ["run_id", "ts", "kind", "tool", "detail"]


def _printed(capsys, monkeypatch, rows, fast: bool, title: str | None) -> str:
    monkeypatch.setattr(common, "FAST_TABLE_ROWS", 0 if fast else 10**9)
    emit_rows(rows, COLUMNS, as_json=False, as_csv=False, title=title)
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [160, 100, 60, 40, 20])
@pytest.mark.parametrize("title", [None, "Run " + RUN])
def test_the_fast_table_prints_the_bytes_rich_prints(capsys, monkeypatch, width, title):
    monkeypatch.setenv("COLUMNS", str(width))
    for rows in (ROWS, ROWS[:1], ROWS[1:2], ROWS[::-1]):
        slow = _printed(capsys, monkeypatch, rows, False, title)
        fast = _printed(capsys, monkeypatch, rows, True, title)
        assert fast == slow
        assert slow.count("\n") > len(rows) + 3  # every row printed, below the header


def test_the_fast_table_prints_the_bytes_rich_prints_on_a_colour_terminal():
    def table() -> Table:
        t = Table(title=Text("Calls"), show_lines=False)
        t.add_column("run_id", no_wrap=True, min_width=len(RUN), overflow="fold")
        t.add_column("tool", overflow="fold")
        t.add_column("detail")
        return t

    cells = [[r["run_id"], r["tool"], r["detail"]] for r in ROWS]
    for width in (120, 70):
        console = Console(width=width, force_terminal=True, color_system="truecolor")
        slow = table()
        for row in cells:
            slow.add_row(*(Text(c) for c in row))
        with console.capture() as captured:
            console.print(slow)
        assert "\x1b[" in captured.get()  # the header is bold
        assert common._table_text(console, table(), cells) == captured.get()


def test_a_long_listing_keeps_every_row(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    rows = [{"run_id": RUN, "ts": str(i), "kind": "note", "tool": "", "detail": f"row {i}"} for i in range(common.FAST_TABLE_ROWS + 5)]
    out = _printed(capsys, monkeypatch, rows, True, None)
    assert out == _printed(capsys, monkeypatch, rows, False, None)
    assert [line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│ " + RUN)] == [str(i) for i in range(len(rows))]
