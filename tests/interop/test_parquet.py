"""Analyst export: one Parquet row per tool call, read back with pyarrow."""

from __future__ import annotations

import json

import pytest
from bundle_helpers import BIG_ROWS, cli, record_runs

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parquet")
    store_path, runs, _ = record_runs(folder)
    return folder, store_path, runs


def test_every_tool_call_is_one_row_with_exact_values(recorded, tmp_path):
    _, store_path, runs = recorded
    code, out, err = cli("export", "-s", store_path, "--parquet", tmp_path / "calls.parquet", cwd=tmp_path)
    assert code == 0, err
    assert out.strip() == f"Wrote {tmp_path / 'calls.parquet'}: 5 tool calls of 3 runs."
    rows = pq.read_table(tmp_path / "calls.parquet").to_pylist()
    keep = ("run_id", "agent", "principal", "server", "tool", "decision", "rule", "approval", "approver", "flags",
            "outcome", "ok", "error_type", "error")
    assert [{k: r[k] for k in keep} for r in rows] == [
        dict(zip(keep, v)) for v in (
            (runs[0], "dba", "agent:dba", "db", "read_query", "allow", "reads", None, [], [], "ok", True, None, None),
            (runs[0], "dba", "agent:dba", "db", "write_query", "require_approval", "writes-need-ops", "approved",
             ["alice"], [], "ok", True, None, None),
            (runs[0], "dba", "agent:dba", "db", "drop_table", "deny", "no-drops", None, [], [], "denied", None, None,
             None),
            (runs[1], "dba", "agent:dba", "db", "read_query", "allow", "reads", None, [], [], "ok", True, None, None),
            (runs[2], "other", "agent:other", "db", "read_query", "allow", "reads", None, [], [], "error", False,
             "ValueError", "boom"),
        )]
    assert json.loads(rows[0]["arguments"]) == BIG_ROWS  # resolved from its list chain of blobs
    assert rows[1]["arguments"] == '{"sql":"UPDATE t SET a = 1"}'
    assert all(isinstance(r["duration_us"], int) for r in rows if r["ok"] is not None)
    assert rows[2]["duration_us"] is None


def test_parquet_export_of_named_runs_only(recorded, tmp_path):
    _, store_path, runs = recorded
    code, _, err = cli("export", "-s", store_path, runs[2], "--parquet", tmp_path / "one.parquet", cwd=tmp_path)
    assert code == 0, err
    assert pq.read_table(tmp_path / "one.parquet").column("run_id").to_pylist() == [runs[2]]


def test_calls_of_a_replay_run_are_flagged_replayed(tmp_path):
    """A replay serves its tool calls from the record: in the Parquet export they were rows like any
    other (a `write_query` that required an approval, no approval, outcome `ok`), nothing telling an
    analyst that they never ran (`sealbox calls` leaves them out unless --replays)."""
    import sealbox
    from sealbox.replay.engine import Replayer

    store = sealbox.init_store(tmp_path / "s")
    rec = sealbox.Recorder(store, policy=sealbox.policies.ALLOW_ALL)

    def agent(run):
        run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: 3)

    with rec.run(agent="dba") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert result.reproduced
    store.close()
    code, _, err = cli("export", "-s", tmp_path / "s", "--parquet", tmp_path / "c.parquet", cwd=tmp_path)
    assert code == 0, err
    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert [(r["run_id"], r["tool"], r["outcome"], r["flags"]) for r in rows] == [
        (run.run_id, "write_query", "ok", []),
        (result.new_run_id, "write_query", "ok", ["replayed"]),
    ]
