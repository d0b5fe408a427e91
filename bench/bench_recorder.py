"""Per tool call cost of record-before-act through ``RunContext.call_tool`` (prints figures, asserts nothing).

Issue 3 "Benchmarks" and issue 4 "Ratio of a recorded tool call with the policy to one with ALLOW_ALL".

Cases (each a median over >= 600 calls of a trivial tool, measured in interleaved rounds so that
machine noise hits ours and the baseline alike):

* ``durability="full"``: a whole recorded call (the fsync'd commit of ``tool.call`` + ``policy.decision``
  that gates the call, the tool, the commit of ``tool.result``), against a raw single-row ``FULL``
  commit in WAL of the same bytes (the three events' raw bytes; target <= 1.5x), against two raw
  commits (the recorder's shape: gate, then result), and against an OpenTelemetry SDK span with 2
  attributes and a ``BatchSpanProcessor`` exporting to a no-op exporter (for information). The gate
  alone (call start until the tool runs) is shown against the raw commit too.
* ``durability="fast"``: the same against raw ``synchronous=NORMAL`` commits; target <= 2x the span.
* where the time goes: the call's SQL alone (its rows, in the store's schema, with plain ``sqlite3``;
  ``SqlFloor``), the same without the query indexes, so that ours minus the SQL is Sealbox's Python.
* a 100-rule policy where the call's (server, tool) selects one rule with one condition that matches,
  against ``ALLOW_ALL`` (both modes).

Needs ``opentelemetry-sdk`` for the span baseline (skipped with a note when missing).

Run: ``.venv/bin/python bench/bench_recorder.py``
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import print_machine_once, print_table, report  # noqa: E402

from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.policy import Policy  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402
from sealbox.store import init_store  # noqa: E402

ROUNDS, PER_ROUND, WARMUP = 6, 100, 50
SERVER, TOOL, ARGS = "db", "tool_57", {"query": "select * from orders where id = 42"}


def hundred_rules() -> Policy:
    rules = [{"id": f"r{i}", "match": {"server": "db", "tool": f"tool_{i}"},
              "when": 'call.arguments.query.startsWith("select")', "effect": "allow"} for i in range(100)]
    return Policy.from_dict({"version": 1, "name": "bench-100", "rules": rules})


def trivial_tool(query: str) -> int:
    return len(query)


class RecordedCalls:
    """One store, one open run; ``one()`` records one call and returns (total µs, gate µs)."""

    def __init__(self, folder: Path, durability: str, policy: Policy) -> None:
        self.store = init_store(folder, durability=durability)
        self.run = Recorder(self.store, policy=policy).run(agent="bench").start()
        self.entered = 0

        def tool(query: str) -> int:
            self.entered = time.perf_counter_ns()
            return len(query)

        self.tool = tool

    def one(self) -> tuple[float, float]:
        t0 = time.perf_counter_ns()
        self.run.call_tool(SERVER, TOOL, ARGS, self.tool)
        t1 = time.perf_counter_ns()
        return (t1 - t0) / 1000, (self.entered - t0) / 1000

    def last_call_bytes(self) -> tuple[bytes, bytes]:
        """(gate bytes: tool.call + policy.decision raw, result bytes: tool.result raw) of the last call."""
        events = self.store.read_range(self.store.size() - 3, self.store.size())
        assert [e.kind for e in events] == ["tool.call", "policy.decision", "tool.result"], [e.kind for e in events]
        return events[0].raw + events[1].raw, events[2].raw

    def close(self) -> None:
        self.run.end()
        self.store.close()


class RawCommits:
    """A bare SQLite table in WAL; ``one(*blobs)`` commits each blob as one row in its own transaction."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, raw BLOB NOT NULL)")

    def one(self, *rows: bytes) -> float:
        t0 = time.perf_counter_ns()
        for raw in rows:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO events (raw) VALUES (?)", (raw,))
            self.conn.execute("COMMIT")
        return (time.perf_counter_ns() - t0) / 1000

    def close(self) -> None:
        self.conn.close()


class SqlFloor:
    """The SQL a recorded call issues, without Sealbox's Python: the last call's three event rows
    (and its decision's inputs blob) inserted with plain ``sqlite3`` into a fresh database built by
    the store's own migrations, in the recorder's two transactions (gate, then result; in ``full``
    mode the result's commit is not fsync'd, as the recorder's is not). ``indexes=False`` drops the
    query indexes on ``events`` first (the primary key and the append-only triggers stay): what the
    indexes that answer "every call to X" cost each call."""

    def __init__(self, path: Path, store_db: Path, durability: str, *, indexes: bool = True) -> None:
        from sealbox.store.migrate import load_migrations

        self.full = durability == "full"
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {'FULL' if self.full else 'NORMAL'}")
        for mig in load_migrations("sqlite"):
            self.conn.executescript(mig.sql)
        if not indexes:
            for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                                             "tbl_name = 'events' AND sql IS NOT NULL").fetchall():
                self.conn.execute(f"DROP INDEX {name}")
        src = sqlite3.connect(store_db)
        cur = src.execute("SELECT * FROM events ORDER BY leaf_index DESC LIMIT 3")
        self.cols = [d[0] for d in cur.description]
        self.rows = [list(r) for r in reversed(cur.fetchall())]
        self.blobs = src.execute("SELECT ref, salt, content, size FROM blobs").fetchall()
        src.close()
        self.i = 0
        self.sql = f"INSERT INTO events ({', '.join(self.cols)}) VALUES ({', '.join('?' * len(self.cols))})"
        self.li, self.seq = self.cols.index("leaf_index"), self.cols.index("run_seq")

    def _insert(self, row: list) -> None:
        row[self.li] = row[self.seq] = self.i
        self.i += 1
        self.conn.execute(self.sql, row)

    def one(self) -> float:
        c = self.conn
        t0 = time.perf_counter_ns()
        c.execute("BEGIN IMMEDIATE")
        c.executemany("INSERT OR IGNORE INTO blobs (ref, salt, content, size) VALUES (?, ?, ?, ?)", self.blobs)
        self._insert(self.rows[0])
        self._insert(self.rows[1])
        c.execute("COMMIT")
        if self.full:
            c.execute("PRAGMA synchronous = NORMAL")
        c.execute("BEGIN IMMEDIATE")
        self._insert(self.rows[2])
        c.execute("COMMIT")
        if self.full:
            c.execute("PRAGMA synchronous = FULL")
        return (time.perf_counter_ns() - t0) / 1000

    def close(self) -> None:
        self.conn.close()


class OtelSpans:
    """An OpenTelemetry SDK tracer with a BatchSpanProcessor exporting to a no-op exporter."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class NoopExporter(SpanExporter):
            def export(self, spans):  # noqa: ANN001, ANN201
                return SpanExportResult.SUCCESS

            def shutdown(self) -> None:
                pass

        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
        self.tracer = self.provider.get_tracer("sealbox.bench")

    def one(self) -> float:
        t0 = time.perf_counter_ns()
        with self.tracer.start_as_current_span(
                "execute_tool tool_57", attributes={"gen_ai.tool.name": TOOL, "gen_ai.tool.call.id": "call_1"}):
            trivial_tool(ARGS["query"])
        return (time.perf_counter_ns() - t0) / 1000

    def close(self) -> None:
        self.provider.shutdown()


def interleaved(measures: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Run every measure WARMUP times, then ROUNDS rounds of PER_ROUND each, in turn."""
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for fn in measures.values():
        for _ in range(WARMUP):
            fn()
    for _ in range(ROUNDS):
        for name, fn in measures.items():
            samples[name].extend(fn() for _ in range(PER_ROUND))
    return samples


def otel_or_none() -> OtelSpans | None:
    try:
        return OtelSpans()
    except ImportError:
        print("opentelemetry-sdk is not installed: the span baseline is skipped (pip install opentelemetry-sdk)")
        return None


def bench_mode(tmp: Path, durability: str, otel: OtelSpans | None) -> None:
    sync = "FULL" if durability == "full" else "NORMAL"
    ours = RecordedCalls(tmp / f"store-{durability}", durability, ALLOW_ALL)
    ours.one()
    gate_bytes, result_bytes = ours.last_call_bytes()
    raw = RawCommits(tmp / f"raw-{durability}.db", sync)
    gates: list[float] = []

    def recorded() -> float:
        total, gate = ours.one()
        gates.append(gate)
        return total

    floor = SqlFloor(tmp / f"floor-{durability}.db", ours.store.db_path, durability)
    floor_bare = SqlFloor(tmp / f"floor-bare-{durability}.db", ours.store.db_path, durability, indexes=False)
    measures: dict[str, Callable[[], float]] = {
        "ours": recorded,
        "raw1": lambda: raw.one(gate_bytes + result_bytes),
        "raw2": lambda: raw.one(gate_bytes, result_bytes),
        "floor": floor.one,
        "floor_bare": floor_bare.one,
    }
    if otel is not None:
        measures["span"] = otel.one
    s = interleaved(measures)
    gates = gates[WARMUP:]
    n = len(s["ours"])
    print(f"\n== durability={durability} (raw baseline: WAL, synchronous={sync}); {n} calls per figure; "
          f"bytes per call: gate {len(gate_bytes)} B + result {len(result_bytes)} B ==")
    target_raw = 1.5 if durability == "full" else None
    report(f"[{durability}] recorded call vs 1 raw {sync} commit of the same bytes", s["ours"], s["raw1"], "µs",
           target_raw)
    report(f"[{durability}] recorded call vs 2 raw {sync} commits (gate, result)", s["ours"], s["raw2"], "µs", None)
    report(f"[{durability}] gate only (until the tool runs) vs 1 raw {sync} commit", gates, s["raw1"], "µs", None)
    if otel is not None:
        report(f"[{durability}] recorded call vs OpenTelemetry span (BatchSpanProcessor)", s["ours"], s["span"], "µs",
               2.0 if durability == "fast" else None)
    report(f"[{durability}] recorded call vs its SQL alone (same rows, store schema, plain sqlite3)", s["ours"],
           s["floor"], "µs", None, note="the difference is Sealbox's Python: encoding, redaction, policy, hashing, "
           "Merkle tree, checks")
    report(f"[{durability}] its SQL alone vs the same without the query indexes", s["floor"], s["floor_bare"], "µs",
           None, note="the difference is what the indexes on events (every call to X, runs, approvals) cost")
    report(f"[{durability}] its SQL alone without the query indexes vs 2 raw {sync} commits", s["floor_bare"],
           s["raw2"], "µs", None, note="the difference is rows, triggers and the blob: the schema's floor")
    floor.close()
    floor_bare.close()
    raw.close()
    ours.close()


def bench_policy(tmp: Path, durability: str) -> None:
    with_policy = RecordedCalls(tmp / f"policy-{durability}", durability, hundred_rules())
    allow_all = RecordedCalls(tmp / f"allowall-{durability}", durability, ALLOW_ALL)
    with_policy.one()
    decision = with_policy.store.read_range(with_policy.store.size() - 2, with_policy.store.size() - 1)[0]
    assert decision.payload["rule"] == "r57" and decision.payload["effect"] == "allow", decision.payload
    s = interleaved({"policy": lambda: with_policy.one()[0], "allow_all": lambda: allow_all.one()[0]})
    report(f"[{durability}] recorded call, 100-rule policy (1 condition) vs ALLOW_ALL", s["policy"], s["allow_all"],
           "µs", None, note=f"decision latency inside: eval_us of the last decision = {decision.payload['eval_us']}")
    with_policy.close()
    allow_all.close()


def main() -> None:
    print_machine_once()
    try:
        from importlib.metadata import version
        print(f"opentelemetry-sdk {version('opentelemetry-sdk')}, opentelemetry-api {version('opentelemetry-api')}")
    except Exception:  # noqa: BLE001
        pass
    otel = otel_or_none()
    with tempfile.TemporaryDirectory(prefix="sealbox-bench-recorder-") as d:
        tmp = Path(d)
        for durability in ("full", "fast"):
            bench_mode(tmp, durability, otel)
        print("\n== policy: 100 rules vs ALLOW_ALL ==")
        for durability in ("fast", "full"):
            bench_policy(tmp, durability)
    if otel is not None:
        otel.close()
    print_table("Recorder benchmarks")


if __name__ == "__main__":
    main()
