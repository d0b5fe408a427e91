"""A sealbox.db whose log is intact but whose indexes are not: a query served by a damaged or
inconsistent index silently misses events (``sealbox calls --tool drop_table`` lists nothing), so
``sealbox verify`` runs SQLite's ``PRAGMA integrity_check`` beside its own pass and reports the
problem ``database_integrity`` (exit 1); before, it said "the log is intact"."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = Path(sys.executable).parent / "sealbox"


def store_with_calls(folder: Path) -> Path:
    """One run: 300 calls to db/query, then one to db/drop_table."""
    store = sealbox.init_store(folder)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="p") as run:
        for n in range(300):
            run.call_tool("db", "query", {"n": n}, lambda n: n)
        run.call_tool("db", "drop_table", {"table": "users"}, lambda table: "dropped")
    store.close()
    return folder


def hide_calls_from_the_tool_index(folder: Path, tool: str) -> None:
    """Rebuild ``events_tool`` without ``tool``'s rows, then put back its original SQL text in
    sqlite_master: the schema reads as Sealbox wrote it, the index lacks rows."""
    conn = sqlite3.connect(folder / "sealbox.db", isolation_level=None)
    original = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events_tool'").fetchone()[0]
    conn.execute("DROP INDEX events_tool")
    conn.execute(f"{original} AND tool != '{tool}'")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'events_tool'", (original,))
    conn.execute("PRAGMA writable_schema = OFF")
    conn.close()


def test_an_index_missing_rows_hides_calls_from_queries_and_verify_reports_it(tmp_path):
    folder = store_with_calls(tmp_path / "s")
    hide_calls_from_the_tool_index(folder, "drop_table")
    store = sealbox.open_store(folder, readonly=True)
    try:
        assert "SEARCH c USING INDEX events_tool (tool=?)" in store.explain_query_calls(tool="drop_table")
        assert store.query_calls(tool="drop_table") == []  # the damage this test is about: the call is hidden
        report = sealbox.verify_store(store)
    finally:
        store.close()
    assert not report.ok
    assert [p.code for p in report.problems] == ["database_integrity"]
    message = report.problems[0].message
    assert message.startswith("SQLite's integrity check of the store's database (sealbox.db) failed (")
    assert "missing from index events_tool" in message
    assert message.endswith("): queries (sealbox calls, runs, approvals) may miss or misreport events although the "
                            "log's hashes verify; restore the store from a backup (or, where only indexes are "
                            "named, rebuild them with: sqlite3 sealbox.db REINDEX)")

    res = subprocess.run([str(SEALBOX), "verify", str(folder)], capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (1, ""), res.stdout + res.stderr
    assert res.stdout.splitlines()[0] == f"database_integrity: {message}"

    conn = sqlite3.connect(folder / "sealbox.db", isolation_level=None)  # the remedy the message names
    conn.execute("REINDEX")
    conn.close()
    res = subprocess.run([str(SEALBOX), "verify", str(folder)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([str(SEALBOX), "calls", "--store", str(folder), "--tool", "drop_table", "--json"],
                         capture_output=True, text=True)
    assert res.returncode == 0 and '"tool": "drop_table"' in res.stdout, res.stdout + res.stderr


def test_a_damaged_index_page_is_reported(tmp_path):
    """The root page of events_tool overwritten with 0xff: the log's own pass never reads it."""
    folder = store_with_calls(tmp_path / "s")
    conn = sqlite3.connect(folder / "sealbox.db")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events_tool'").fetchone()[0]
    conn.close()
    with open(folder / "sealbox.db", "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)
    res = subprocess.run([str(SEALBOX), "verify", str(folder)], capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (1, ""), res.stdout + res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("database_integrity: SQLite's integrity check of the store's database (sealbox.db) "
                            "failed ("), first
    assert res.stdout.splitlines()[1].startswith("NOT VERIFIED: 1 problem(s) found.")


def test_an_untouched_store_passes_the_integrity_check(tmp_path):
    folder = store_with_calls(tmp_path / "s")
    store = sealbox.open_store(folder, readonly=True)
    try:
        report = sealbox.verify_store(store)
        assert report.ok and report.problems == ()
        assert store.integrity_problems() == []
    finally:
        store.close()
