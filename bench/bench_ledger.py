"""Ledger benchmarks: batched append, single durable append, verify (issue 2, "Benchmarks").

Each figure is measured against its baseline in the same run, on the same bytes:
the baseline rows are read back from our store's ``events`` table (every column,
the exact hashed bytes) and written by plain ``sqlite3`` into a table with the
same columns and the same indexes (copied from our store's ``sqlite_master``),
in WAL mode with the same ``synchronous`` setting. Ours and the baseline are
timed alternately (one batch or one event of ours, then the same of the
baseline) so drift in the machine affects both alike.

Automatic checkpoints are switched off during the timed loops
(``CheckpointPolicy(every_events=10**9, every_seconds=10**9)``); the batched and
single appends are also reported once with the default policy, whose signing
cost is then inside our figure.

Run: ``.venv/bin/python bench/bench_ledger.py`` (``--quick`` for a smoke run).
Stores go to a fresh folder under ``$TMPDIR`` per measurement.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Sequence

from _util import print_machine_once, print_table, report, timed

from sealbox import CheckpointPolicy, EventDraft, init_store, verify_store
from sealbox.store.base import new_run_id

NO_CHECKPOINTS = CheckpointPolicy(every_events=10**9, every_seconds=10**9)
DEFAULT_POLICY = CheckpointPolicy()
PRINCIPAL = "agent:bench"
SYNCHRONOUS = {"full": "FULL", "fast": "NORMAL"}
ZERO_FP = "sha256:" + "0" * 64


# ---------------------------------------------------------------- events


def run_started(run_id: str) -> EventDraft:
    """The first event of a run."""
    return EventDraft("run.started", {
        "agent": "bench", "snapshot": None, "parent_run_id": None, "labels": {"bench": "ledger"},
        "policy": {"fingerprint": ZERO_FP, "name": None},
    }, run_id=run_id, principal=PRINCIPAL)


def tool_call(run_id: str, i: int) -> EventDraft:
    """A tool.call whose payload is about 300 bytes of canonical JSON (arguments stay inline)."""
    return EventDraft("tool.call", {
        "call_id": f"call_{i:08d}", "server": "db", "tool": "read_query", "exposed": "db__read_query",
        "arguments": {
            "query": "SELECT id, status, total FROM orders WHERE customer_id = ? AND status = ? LIMIT 20",
            "params": [i % 9973, "open"],
        },
        "grant": "implicit:agent:bench",
    }, run_id=run_id, principal=PRINCIPAL)


def start_runs(store, count: int) -> list[str]:
    """Start ``count`` runs (untimed) and return their ids."""
    run_ids = [new_run_id() for _ in range(count)]
    store.append([run_started(r) for r in run_ids])
    return run_ids


# ---------------------------------------------------------------- the raw sqlite3 baseline


def events_schema(db_path: Path) -> tuple[list[str], list[str]]:
    """Our ``events`` table as the store created it: (CREATE statements, table first; column names).

    Read from the store itself, so the baseline follows any migration.
    """
    conn = sqlite3.connect(db_path)
    try:
        statements = [r[0] for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'events' AND type IN ('table', 'index')"
            " AND sql IS NOT NULL ORDER BY type = 'table' DESC, name"
        )]
        columns = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
    finally:
        conn.close()
    return statements, columns


class RowReader:
    """Reads rows back from our store's events table, every column exactly as stored."""

    def __init__(self, db_path: Path, columns: Sequence[str]) -> None:
        self.conn = sqlite3.connect(db_path)
        self.sql = f"SELECT {', '.join(columns)} FROM events WHERE leaf_index >= ? AND leaf_index < ? ORDER BY leaf_index"
        self.raw_at = list(columns).index("raw")

    def rows(self, start: int, end: int) -> list[tuple]:
        return self.conn.execute(self.sql, (start, end)).fetchall()

    def close(self) -> None:
        self.conn.close()


class RawTable:
    """Plain sqlite3: one WAL database holding a copy of our events table's shape."""

    def __init__(self, db_path: Path, schema: Sequence[str], columns: Sequence[str], synchronous: str) -> None:
        self.conn = sqlite3.connect(db_path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        for statement in schema:
            self.conn.execute(statement)
        marks = ", ".join("?" * len(columns))
        self.sql = f"INSERT INTO events ({', '.join(columns)}) VALUES ({marks})"

    def insert_many(self, rows: Sequence[tuple]) -> None:
        """All rows in one transaction."""
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(self.sql, rows)
        self.conn.execute("COMMIT")

    def insert_one(self, row: tuple) -> None:
        """One row, one commit."""
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(self.sql, row)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def paired(tmp: Path, durability: str, policy: CheckpointPolicy, runs: int):
    """A fresh store, a raw table of the same shape holding the same starting rows, a row reader."""
    store = init_store(tmp / "store", durability=durability, checkpoint_policy=policy)
    run_ids = start_runs(store, runs)
    schema, columns = events_schema(store.db_path)
    raw = RawTable(tmp / "raw.db", schema, columns, SYNCHRONOUS[durability])
    reader = RowReader(store.db_path, columns)
    raw.insert_many(reader.rows(0, store.size()))
    return store, run_ids, raw, reader


# ---------------------------------------------------------------- 1. batched append


def bench_batched(name: str, durability: str, policy: CheckpointPolicy, batches: int, size: int,
                  runs: int = 10) -> None:
    """``batches`` appends of ``size`` tool.call events each, spread over ``runs`` runs."""
    with tempfile.TemporaryDirectory(prefix="sealbox-bench-") as tmp:
        store, run_ids, raw, reader = paired(Path(tmp), durability, policy, runs)
        drafts = [[tool_call(run_ids[j % runs], b * size + j) for j in range(size)] for b in range(batches)]
        ours, base, nbytes = [], [], []
        gc.collect()
        for batch in drafts:
            placed: list = []
            t_ours = timed(lambda: placed.extend(store.append(batch)))
            rows = reader.rows(placed[0].leaf_index, placed[-1].leaf_index + 1)
            t_raw = timed(lambda: raw.insert_many(rows))
            ours.append(size / t_ours)
            base.append(size / t_raw)
            nbytes.extend(len(r[reader.raw_at]) for r in rows)
        checkpoints = len(store.checkpoints())
        store.close()
        raw.close()
        reader.close()
    note = (f"{batches} x {size} tool.call events over {runs} runs; hashed bytes {min(nbytes)}-{max(nbytes)} B "
            f"(mean {sum(nbytes) / len(nbytes):.0f}); synchronous={SYNCHRONOUS[durability]}; "
            f"{checkpoints} signed checkpoints in the store")
    report(name, ours, base, "events/s", 0.4, note)


# ---------------------------------------------------------------- 2. single append


def bench_single(name: str, durability: str, policy: CheckpointPolicy, reps: int, target: float | None,
                 warmup: int = 20) -> None:
    """``reps`` appends of one tool.call each (one commit each), against one raw INSERT+COMMIT each."""
    with tempfile.TemporaryDirectory(prefix="sealbox-bench-") as tmp:
        store, run_ids, raw, reader = paired(Path(tmp), durability, policy, 1)
        ours, base, nbytes = [], [], []
        gc.collect()
        for i in range(warmup + reps):
            draft = tool_call(run_ids[0], i)
            placed: list = []
            t_ours = timed(lambda: placed.extend(store.append(draft)))
            row = reader.rows(placed[0].leaf_index, placed[0].leaf_index + 1)[0]
            t_raw = timed(lambda: raw.insert_one(row))
            if i >= warmup:
                ours.append(t_ours * 1e6)
                base.append(t_raw * 1e6)
                nbytes.append(len(row[reader.raw_at]))
        checkpoints = len(store.checkpoints())
        store.close()
        raw.close()
        reader.close()
    mean_ours, mean_base = sum(ours) / len(ours), sum(base) / len(base)
    note = (f"{reps} appends after {warmup} warm-up; hashed bytes mean {sum(nbytes) / len(nbytes):.0f} B; "
            f"synchronous={SYNCHRONOUS[durability]}; mean ours {mean_ours:,.0f} µs, baseline {mean_base:,.0f} µs; "
            f"max ours {max(ours):,.0f} µs; {checkpoints} signed checkpoints in the store")
    report(name, ours, base, "µs", target, note)


# ---------------------------------------------------------------- 3. verify


def fill_store(folder: Path, policy: CheckpointPolicy, total: int, runs: int = 20, batch: int = 1000):
    """A store of exactly ``total`` events: runs started, then tool.calls in batches (fast mode: untimed)."""
    store = init_store(folder, durability="fast", checkpoint_policy=policy)
    run_ids = start_runs(store, runs)
    i = 0
    while store.size() < total:
        n = min(batch, total - store.size())
        store.append([tool_call(run_ids[(i + j) % runs], i + j) for j in range(n)])
        i += n
    return store


def baseline_verify(db_path: Path) -> int:
    """Read every event's bytes and stored hash in log order, parse them, hash them; return the count."""
    conn = sqlite3.connect(db_path)
    try:
        count = bad = 0
        sha256, loads = hashlib.sha256, json.loads
        for raw, leaf_hash in conn.execute("SELECT raw, leaf_hash FROM events ORDER BY leaf_index"):
            loads(raw)
            if sha256(b"\x00" + raw).digest() != leaf_hash:
                bad += 1
            count += 1
    finally:
        conn.close()
    if bad:
        raise RuntimeError(f"baseline found {bad} bad leaf hashes")
    return count


def bench_verify(name: str, policy: CheckpointPolicy, total: int, reps: int) -> None:
    """verify_store over ``total`` events against read + json.loads + SHA-256 of the same rows."""
    with tempfile.TemporaryDirectory(prefix="sealbox-bench-") as tmp:
        store = fill_store(Path(tmp) / "store", policy, total)
        verify_store(store)  # warm the page cache for both
        baseline_verify(store.db_path)
        ours, base = [], []
        for _ in range(reps):
            gc.collect()
            reports: list = []
            t_ours = timed(lambda: reports.append(verify_store(store)))
            result = reports[0]
            if not result.ok:
                raise RuntimeError("verify found problems in an untouched store:\n" + result.summary())
            t_raw = timed(lambda: baseline_verify(store.db_path))
            ours.append(result.events / t_ours)
            base.append(result.events / t_raw)
        store.close()
    note = (f"{result.events} events, {result.runs} runs, {result.checkpoints} checkpoints, {reps} runs each; "
            f"median verify {result.events / sorted(ours)[len(ours) // 2]:.2f} s")
    report(name, ours, base, "events/s", 0.5, note)


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    args = parser.parse_args(argv)
    batches, single, single_default, verify_n, verify_reps = (
        (3, 50, 1100, 3000, 2) if args.quick else (20, 500, 2500, 20_000, 5)
    )
    print_machine_once()
    print("== bench_ledger: batched append, single append, verify ==\n")

    bench_batched("batched append, full, no auto-checkpoint", "full", NO_CHECKPOINTS, batches, 1000)
    bench_batched("batched append, full, default policy", "full", DEFAULT_POLICY, batches, 1000)
    bench_batched("batched append, fast, no auto-checkpoint", "fast", NO_CHECKPOINTS, batches, 1000)

    bench_single("single append, full (FULL commit)", "full", NO_CHECKPOINTS, single, 1.5)
    bench_single("single append, fast (NORMAL commit)", "fast", NO_CHECKPOINTS, single, None)
    bench_single(f"single append, full, default policy ({single_default})", "full", DEFAULT_POLICY,
                 single_default, 1.5)

    bench_verify("verify, no auto-checkpoint", NO_CHECKPOINTS, verify_n, verify_reps)
    bench_verify("verify, default policy", DEFAULT_POLICY, verify_n, verify_reps)

    print_table("bench_ledger summary")


if __name__ == "__main__":
    main()
