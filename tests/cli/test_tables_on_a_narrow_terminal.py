"""A table too narrow for its columns is printed one field per line.

Regression: ``COLUMNS=5 sealbox runs list`` printed a frame of empty columns (``┏┳┳┳┳``, no header, no
value), and at 40 columns every cell was folded two characters a line: nothing could be read or copied.
Below :data:`sealbox.cli.common.NARROW_COLUMN_MIN` characters a column (after the borders), each row is
now printed as ``field: value`` lines (every value whole), rows apart by an empty line; wider tables are
printed as before (tests/cli/test_fast_table_layout.py, test_tables_keep_ids_whole.py)."""

from __future__ import annotations

import pytest

from sealbox.cli import common
from sealbox.cli.common import emit_rows

ROWS = [{"run_id": "01a245af-0c3f-75b8-941b-0516e4afa9c6", "agent": "billing-bot", "status": "ended (ok)",
         "detail": "two\nlines"},
        {"run_id": "01a245af-0c3f-75b8-941b-0516e4afa9c7", "agent": "sub-agent", "status": "running", "detail": None}]
COLUMNS = ["run_id", "agent", "status", "detail"]


def _printed(capsys, monkeypatch, width: int, fast: bool = False) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr(common, "FAST_TABLE_ROWS", 0 if fast else 10**9)
    emit_rows(ROWS, COLUMNS, as_json=False, as_csv=False, title="Runs")
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [1, 5, 20, 24])
@pytest.mark.parametrize("fast", [False, True])
def test_a_table_too_narrow_prints_one_field_per_line(capsys, monkeypatch, width, fast):
    assert _printed(capsys, monkeypatch, width, fast) == (
        "Runs\n"
        "run_id: 01a245af-0c3f-75b8-941b-0516e4afa9c6\n"
        "agent: billing-bot\n"
        "status: ended (ok)\n"
        "detail: two\n"
        "  lines\n"
        "\n"
        "run_id: 01a245af-0c3f-75b8-941b-0516e4afa9c7\n"
        "agent: sub-agent\n"
        "status: running\n"
        "detail:\n")


def test_a_table_with_room_for_its_columns_is_a_table(capsys, monkeypatch):
    # 4 columns: 13 characters of borders, 3 a column at least
    out = _printed(capsys, monkeypatch, 25)
    assert out.splitlines()[1].startswith("┏") and "run_id:" not in out
    assert _printed(capsys, monkeypatch, 25, fast=True) == out
