"""The "every call to tool X" query uses the partial index on events(tool) of tool.call rows, with and without
planner statistics, and a writer's close keeps the statistics current (LESSONS.md:
MLflow never gathered statistics, so SQLite picked the wrong index)."""

from __future__ import annotations

import sqlite3

import pytest

from sealbox import init_store, open_store
from sealbox.policy import Policy
from sealbox.recorder import Recorder

POLICY = Policy.from_text("version: 1\nrules:\n  - id: all\n    effect: allow\n")
TOOLS = [f"tool_{i:02d}" for i in range(20)]


@pytest.fixture(scope="module")
def busy_store(tmp_path_factory):
    """A store with 600 calls over 20 tools on 3 servers, closed by its writer."""
    path = tmp_path_factory.mktemp("plan") / "store"
    store = init_store(path, durability="fast")
    rec = Recorder(store, policy=POLICY)
    for r in range(6):
        with rec.run(agent=f"agent-{r % 2}") as run:
            for i in range(100):
                run.call_tool(f"srv{i % 3}", TOOLS[i % 20], {"i": i}, lambda i: i, call_id=f"r{r}-{i}")
    store.close()
    return path


def _stats(path) -> list[tuple]:
    conn = sqlite3.connect(path / "sealbox.db")
    try:
        return conn.execute("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'events' ORDER BY idx").fetchall()
    finally:
        conn.close()


def test_a_writer_closing_the_store_leaves_planner_statistics(busy_store):
    stats = dict(_stats(busy_store))
    assert {"events_tool", "events_kind_ts", "events_call", "events_run_kind"} <= set(stats)
    rows, per_tool = (int(x) for x in stats["events_tool"].split()[:2])  # estimates (analysis_limit bounds the scan)
    assert rows > 0 and 1 <= per_tool < rows


def test_a_reader_does_not_write_statistics(tmp_path):
    store = init_store(tmp_path / "s")
    store.close()
    conn = sqlite3.connect(tmp_path / "s" / "sealbox.db")
    conn.execute("DELETE FROM sqlite_stat1")
    conn.commit()
    conn.close()
    open_store(tmp_path / "s", readonly=True).close()
    assert _stats(tmp_path / "s") == []
    open_store(tmp_path / "s").close()  # the next writer gathers them again
    assert _stats(tmp_path / "s") != []


def _plan(path, **filters) -> list[str]:
    store = open_store(path, readonly=True)
    try:
        return store.explain_query_calls(**filters)
    finally:
        store.close()


@pytest.mark.parametrize("with_stats", [True, False])
def test_every_call_to_tool_x_uses_the_tool_index(busy_store, tmp_path, with_stats):
    path = busy_store
    if not with_stats:  # a copy whose statistics were dropped, as in a store no writer ever closed
        import shutil

        path = tmp_path / "copy"
        shutil.copytree(busy_store, path)
        conn = sqlite3.connect(path / "sealbox.db")
        conn.execute("DELETE FROM sqlite_stat1")
        conn.commit()
        conn.close()
        assert _stats(path) == []
    plan = _plan(path, tool="tool_07")
    assert plan[0] == "SEARCH c USING INDEX events_tool (tool=?)"  # partial: WHERE kind = 'tool.call' (0004)
    assert not any("events_kind_ts" in line for line in plan)
    assert "SEARCH e USING INDEX events_call (call_id=? AND kind=? AND rowid>?)" in plan  # its decision and result
    store = open_store(path, readonly=True)
    assert [r["call_id"] for r in store.query_calls(tool="tool_07")] == [
        f"r{r}-{i}" for r in range(6) for i in (7, 27, 47, 67, 87)]
    store.close()


def test_other_filters_use_their_indexes(busy_store):
    assert _plan(busy_store, tool="tool_0*")[0] == "SEARCH c USING INDEX events_tool (tool>? AND tool<?)"
    assert _plan(busy_store, server="srv1", tool="tool_03")[0].startswith("SEARCH c USING INDEX events_server_tool")
    assert _plan(busy_store, since="1h")[0] == "SEARCH c USING INDEX events_kind_ts (kind=? AND ts>?)"
    store = open_store(busy_store, readonly=True)
    run_id = store.query_calls(limit=1)[0]["run_id"]
    store.close()
    assert _plan(busy_store, run_id=run_id)[0].startswith("SEARCH c USING INDEX events_run_kind (run_id=? AND kind=?)")
