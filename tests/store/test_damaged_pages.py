"""A sealbox.db whose pages SQLite cannot read (a -wal file truncated under a writer, a disk fault):
opening it raises a StoreError saying it is damaged, and every command prints one line saying so,
never "internal error: DatabaseError: database disk image is malformed" (exit 70)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.errors import NotAStoreError, StoreError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = Path(sys.executable).parent / "sealbox"


def damaged_store(folder: Path, table: str) -> Path:
    """A store of one run of 50 calls, then the root page of ``table`` overwritten with 0xff bytes."""
    store = sealbox.init_store(folder)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        for n in range(50):
            run.call_tool("srv", "t", {"n": n}, lambda n: n)
    store.close()
    conn = sqlite3.connect(folder / "sealbox.db")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    conn.close()
    with open(folder / "sealbox.db", "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)
    return folder


def test_opening_a_damaged_store_raises_a_store_error_saying_so(tmp_path):
    folder = damaged_store(tmp_path / "s", "events")
    with pytest.raises(StoreError) as caught:
        sealbox.open_store(folder)
    assert not isinstance(caught.value, NotAStoreError)
    assert str(caught.value) == (
        f"{folder / 'sealbox.db'} is damaged (database disk image is malformed): SQLite cannot read some of its "
        "pages (a -wal file deleted or truncated while the store was open, a disk fault); restore the store "
        "from a backup")


@pytest.mark.parametrize("args", [["runs", "list", "--store"], ["calls", "--store"]])
def test_a_listing_of_a_damaged_store_prints_one_line(tmp_path, args):
    folder = damaged_store(tmp_path / "s", "runs")
    res = subprocess.run([str(SEALBOX), *args, str(folder)], capture_output=True, text=True)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [
        "error: the store database (sealbox.db) is damaged (database disk image is malformed): SQLite cannot read "
        "some of its pages (a -wal file deleted or truncated while the store was open, a disk fault); restore the "
        "store from a backup"]


@pytest.mark.parametrize("table", ["events", "runs"])
def test_verify_reports_a_damaged_database_as_a_problem(tmp_path, table):
    """Exit 1 and the problem ``database_damaged`` (verification found the store not intact), not a bad-input
    error (exit 2) nor an internal error (exit 70)."""
    folder = damaged_store(tmp_path / "s", table)
    res = subprocess.run([str(SEALBOX), "verify", str(folder)], capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (1, ""), res.stdout + res.stderr
    assert res.stdout.splitlines()[0] == (
        "database_damaged: the store's database (sealbox.db) is damaged (database disk image is malformed): SQLite "
        "cannot read some of its pages (a -wal file deleted or truncated while the store was open, a disk fault), "
        "so verification stopped there; restore the store from a backup")
    assert res.stdout.splitlines()[1].startswith("NOT VERIFIED: 1 problem(s) found.")
