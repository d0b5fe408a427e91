"""A SKETCH, not a shipped feature: the lower bound of a recorded tool call if the gate appended to a
journal file and an ingester moved the records into the store off the call path (prints figures,
asserts nothing).

README, "What the missed targets need", proposes that redesign for the targets the current design
misses (recorded call ``full`` <= 1.5x one raw ``FULL`` commit of the same bytes, ``fast`` <= 2x an
OpenTelemetry span). Nothing here is product code: this file builds the journal path from Sealbox's
real pieces to measure what the redesign could reach before anyone builds it.

The journal call (what has to stay on the call path), per tool call of a trivial tool:

1. the gate: the policy decision (``CallContext`` built as the recorder builds it, ``policy.evaluate``;
   ``ALLOW_ALL``, or the 100-rule policy of ``bench_recorder``/``bench_policy`` where the call's
   (server, tool) selects one rule with one condition), the redaction check the recorder applies to
   the arguments (``Redactor.would_redact``), the ``tool.call`` and ``policy.decision`` (with its
   inputs) encoded with ``sealbox.canonical`` (``encode``, then the RFC 8785 bytes) as one journal
   record, the store's redaction of that record (one ``Redactor.surely_clean`` check over the canonical
   text of its content fields together, falling back to the store's per-field redaction), the record
   framed (4-byte length, SHA-256 chain: ``h_i = SHA-256(h_{i-1} || length || body)``, so that the
   journal is tamper-evident before ingestion), ``write(2)`` into a preallocated file (zeros written
   and fsync'd beforehand, as a WAL segment is), and ``os.fdatasync`` in ``full`` mode (OS-buffered
   in ``fast``: the crash guarantee of ``synchronous=NORMAL``);
2. the tool;
3. the ``tool.result`` record: encoded, checked, framed and written the same way, not synced (the
   recorder does not fsync a result's commit either).

Left OUT of the call path (so this is a lower bound, not what a built feature would cost): the
store's payload validation, blob commitments, the run's hash chain and Merkle tree, the query
indexes, the checks that today run inside the write transaction (a step another writer took, a
call id reused, usage counters a policy reads, approvals, grants, the circuit breaker), and
read-your-writes for queries.

Baselines, measured in the same run in interleaved rounds (as in bench_recorder):
one raw single-row commit in WAL of the same bytes (``FULL`` / ``NORMAL``), an OpenTelemetry SDK
span with a ``BatchSpanProcessor`` exporting nowhere (bench_recorder's ``OtelSpans``), today's
recorded call (bench_recorder's ``RecordedCalls``, ``full`` and ``fast``), and the journal's bare
``write`` (+ ``fdatasync``) of the same frames.

The ingester side: journal records (read, chain verified, parsed) appended into a real
``SqliteStore`` with its batched ``append`` (events/s), against a raw batched insert of the same
events' bytes, and the call rate that ingestion sustains (3 events a call). And the GIL: the journal
call's latency while an ingester thread of the same process appends, against the same with the
thread idle.

Run: ``.venv/bin/python bench/bench_journal_sketch.py [--quick]``
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import median, p99, print_machine_once, print_table, report  # noqa: E402
from bench_recorder import ARGS, SERVER, TOOL, OtelSpans, RawCommits, RecordedCalls, hundred_rules  # noqa: E402

import orjson  # noqa: E402

from sealbox.canonical import _encode_noting_floats, canonical_bytes_encoded, encode  # noqa: E402
from sealbox.events import EventDraft, content_fields  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.policy import CallContext, Policy  # noqa: E402
from sealbox.recorder import Principal  # noqa: E402
from sealbox.store import init_store  # noqa: E402
from sealbox.store.base import EventBuilder, new_run_id, utc_now  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS, PER_ROUND, WARMUP = (3, 60, 30) if QUICK else (6, 100, 50)
INGEST_CALLS = 600 if QUICK else 2000  # journal records (calls) moved per ingestion measure
BATCH_CALLS = 100  # calls per ingester batch: 300 events (tool.call, policy.decision, tool.result)
JOURNAL_BYTES = 8 << 20  # 8 MiB: the largest journal here (ingestion, 2,000 calls) holds ~3.2 MB


def trivial_tool(query: str) -> int:
    return len(query)


# ---------------------------------------------------------------- the journal


class Journal:
    """An append-only journal file, preallocated (zeros written and fsync'd, so that ``fdatasync``
    flushes data, not extent metadata). A frame: ``>I`` body length, 32-byte chain hash
    ``SHA-256(previous hash || length || body)``, body. Starts over at offset 0 when full (a sketch:
    a real journal would move to its next segment once the ingester is past this one)."""

    HEAD = struct.Struct(">I32s")

    def __init__(self, path: Path, size: int = JOURNAL_BYTES) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        zeros = bytes(1 << 20)
        for _ in range(size >> 20):
            os.write(self.fd, zeros)
        os.fsync(self.fd)
        os.lseek(self.fd, 0, os.SEEK_SET)
        self.size, self.pos, self.prev = size, 0, bytes(32)
        self.lock = threading.Lock()  # the gate of a multi-threaded agent: one frame at a time

    def append(self, body: bytes, sync: bool) -> None:
        n = len(body)
        with self.lock:
            h = hashlib.sha256(self.prev)
            h.update(n.to_bytes(4, "big"))
            h.update(body)
            digest = self.prev = h.digest()
            frame = self.HEAD.pack(n, digest) + body
            if self.pos + len(frame) > self.size:
                os.lseek(self.fd, 0, os.SEEK_SET)
                self.pos = 0
            os.write(self.fd, frame)
            self.pos += len(frame)
            if sync:
                os.fdatasync(self.fd)

    def contents(self) -> bytes:
        return os.pread(self.fd, self.pos, 0)

    def close(self) -> None:
        os.close(self.fd)


def read_frames(data: bytes, prev: bytes = bytes(32)) -> list[bytes]:
    """The bodies of a journal's frames, each one's chain hash checked (what an ingester does first)."""
    head, out, pos = Journal.HEAD, [], 0
    while pos + head.size <= len(data):
        n, digest = head.unpack_from(data, pos)
        if n == 0:
            break
        body = data[pos + head.size:pos + head.size + n]
        h = hashlib.sha256(prev)
        h.update(n.to_bytes(4, "big"))
        h.update(body)
        if h.digest() != digest:
            raise ValueError(f"journal frame at offset {pos}: chain hash mismatch")
        prev = digest
        out.append(body)
        pos += head.size + n
    return out


class JournalCalls:
    """Tool calls recorded the journal way: ``one()`` returns (total µs, gate µs)."""

    def __init__(self, path: Path, durability: str, policy: Policy, builder: EventBuilder) -> None:
        self.journal = Journal(path)
        self.sync = durability == "full"
        self.policy, self.builder, self.redactor = policy, builder, builder.redactor
        principal = Principal.of(None, "bench")
        self.principal_id, self.principal = principal.id, principal.to_dict()
        self.run_id = new_run_id()
        self.started = datetime.now(timezone.utc)
        self.started_text = utc_now()
        self.grant = f"implicit:{principal.id}"
        self.seq = 0
        self.redacted_records = 0  # records the whole-text check did not clear (per-field redaction ran)

    def record(self, items: list[tuple[str, dict[str, Any]]], step: str) -> bytes:
        """One journal record's body: the events' envelopes (no hash chain, run_seq or Merkle leaf:
        the ingester's), type-tag encoded, redacted as the store redacts, as RFC 8785 bytes."""
        ts = utc_now()
        events = [{"kind": kind, "run_id": self.run_id, "principal": self.principal_id, "step": step, "ts": ts,
                   "payload": payload} for kind, payload in items]
        enc, floats = _encode_noting_floats(events)  # list > envelope > payload: the store's payload depth
        fields = [(ev["payload"], name) for ev in enc for name in content_fields(ev["kind"], ev["payload"])
                  if name in ev["payload"]]
        content = [payload[name] for payload, name in fields]
        bounded = True  # encode() bounded it; a redaction marker adds levels
        if not self.redactor.surely_clean(content, canonical_bytes_encoded(content, floats=floats, finite=True,
                                                                              bounded=True)):
            self.redacted_records += 1  # not cleared by one C-speed search: the store's per-field redaction
            for payload, name in fields:
                payload[name] = self.builder._redact(name, payload[name])
            bounded = False
        return canonical_bytes_encoded(enc, floats=floats, finite=True, bounded=bounded)

    def one(self, marks: list[int] | None = None) -> tuple[float, float]:
        t0 = time.perf_counter_ns()
        call_id = "call_" + os.urandom(12).hex()
        self.seq += 1
        step = str(self.seq)
        now = datetime.now(timezone.utc)
        view = encode(ARGS)  # the recorder's _policy_view
        redacted = self.redactor.would_redact("arguments", view)
        ctx = CallContext(server=SERVER, tool=TOOL, arguments=view, redacted=redacted, principal=self.principal,
                          agent={"name": "bench", "attributes": {}},
                          run={"id": self.run_id, "labels": {}, "started_at": self.started_text,
                               "elapsed_s": (now - self.started).total_seconds()},
                          usage={}, now=now, grant=self.grant)
        decision = self.policy.evaluate(ctx)
        if marks is not None:
            marks.append(time.perf_counter_ns())
        inputs = ctx.to_inputs()
        inputs["arguments"] = ARGS
        call = {"call_id": call_id, "server": SERVER, "tool": TOOL, "exposed": f"{SERVER}.{TOOL}",
                "arguments": ARGS, "grant": self.grant}
        body = self.record([("tool.call", call), ("policy.decision", {"call_id": call_id, "server": SERVER,
                            "tool": TOOL, **decision.to_payload(), "inputs": inputs})], step)
        if marks is not None:
            marks.append(time.perf_counter_ns())
        self.journal.append(body, self.sync)
        gate = time.perf_counter_ns()
        if not decision.allowed:
            raise RuntimeError(f"the bench call was denied: {decision.reason}")
        started = time.perf_counter_ns()
        result = trivial_tool(**ARGS)
        payload = {"call_id": call_id, "ok": True, "duration_us": (time.perf_counter_ns() - started) // 1000,
                   "result": result}
        if marks is not None:
            marks.append(time.perf_counter_ns())
        self.journal.append(self.record([("tool.result", payload)], step), False)
        t1 = time.perf_counter_ns()
        if marks is not None:
            marks.append(t1)
        return (t1 - t0) / 1000, (gate - t0) / 1000

    def close(self) -> None:
        self.journal.close()


class BareWrites:
    """The journal's floor: ``write`` of ready frames (+ ``fdatasync`` of the first in ``full`` mode)."""

    def __init__(self, path: Path, durability: str, frames: list[bytes]) -> None:
        self.journal = Journal(path)
        self.sync = durability == "full"
        self.frames = frames

    def one(self) -> float:
        fd, (gate, result) = self.journal.fd, self.frames
        t0 = time.perf_counter_ns()
        if self.journal.pos + len(gate) + len(result) > self.journal.size:
            os.lseek(fd, 0, os.SEEK_SET)
            self.journal.pos = 0
        os.write(fd, gate)
        if self.sync:
            os.fdatasync(fd)
        os.write(fd, result)
        self.journal.pos += len(gate) + len(result)
        return (time.perf_counter_ns() - t0) / 1000

    def close(self) -> None:
        self.journal.close()


def interleaved(measures: dict[str, Callable[[], float]], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Every measure WARMUP times, then ``rounds`` rounds of PER_ROUND calls each, in turn."""
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for fn in measures.values():
        for _ in range(WARMUP):
            fn()
    for _ in range(rounds):
        for name, fn in measures.items():
            samples[name].extend(fn() for _ in range(PER_ROUND))
    return samples


# ---------------------------------------------------------------- 1. the call path


def bench_calls(tmp: Path, durability: str, otel: OtelSpans | None, builder: EventBuilder) -> float:
    """Returns the journal call's median µs (ALLOW_ALL)."""
    sync = "FULL" if durability == "full" else "NORMAL"
    allow = JournalCalls(tmp / f"journal-allow-{durability}", durability, ALLOW_ALL, builder)
    rules = JournalCalls(tmp / f"journal-rules-{durability}", durability, hundred_rules(), builder)
    today = RecordedCalls(tmp / f"store-{durability}", durability, ALLOW_ALL)
    allow.one()
    rules.one()
    bodies = read_frames(allow.journal.contents())
    gate_body, result_body = bodies[-2], bodies[-1]
    decision = orjson.loads(read_frames(rules.journal.contents())[-2])[1]["payload"]
    assert decision["rule"] == "r57" and decision["effect"] == "allow", decision
    head = Journal.HEAD.size
    raw = RawCommits(tmp / f"raw-{durability}.db", sync)
    bare = BareWrites(tmp / f"bare-{durability}", durability,
                      [bytes(head) + gate_body, bytes(head) + result_body])
    gates: list[float] = []

    def journal_allow() -> float:
        total, gate = allow.one()
        gates.append(gate)
        return total

    measures: dict[str, Callable[[], float]] = {
        "allow": journal_allow,
        "rules": lambda: rules.one()[0],
        "today": lambda: today.one()[0],
        "raw1": lambda: raw.one(gate_body + result_body),
        "bare": bare.one,
    }
    if otel is not None:
        measures["span"] = otel.one
    s = interleaved(measures)
    gates = gates[WARMUP + 1:]
    n = len(s["allow"])
    how = "write + fdatasync" if durability == "full" else "write, OS-buffered"
    print(f"\n== durability={durability}: journal {how}"
          f"; raw baseline WAL synchronous={sync}; {n} calls per figure; journal bytes per call: gate "
          f"{len(gate_body) + head} B + result {len(result_body) + head} B; "
          f"records not cleared by the one-search redaction check: {allow.redacted_records} ==")
    target_raw = 1.5 if durability == "full" else None
    report(f"[{durability}] journal call, ALLOW_ALL vs 1 raw {sync} commit of the same bytes", s["allow"],
           s["raw1"], "µs", target_raw)
    report(f"[{durability}] journal call, 100-rule policy vs 1 raw {sync} commit of the same bytes", s["rules"],
           s["raw1"], "µs", target_raw)
    if otel is not None:
        target_span = 2.0 if durability == "fast" else None
        report(f"[{durability}] journal call, ALLOW_ALL vs OpenTelemetry span (BatchSpanProcessor)", s["allow"],
               s["span"], "µs", target_span)
        report(f"[{durability}] journal call, 100-rule policy vs OpenTelemetry span", s["rules"], s["span"], "µs",
               target_span)
    report(f"[{durability}] journal call, ALLOW_ALL vs today's recorded call", s["allow"], s["today"], "µs", None)
    report(f"[{durability}] journal gate only (until the tool runs) vs 1 raw {sync} commit", gates, s["raw1"], "µs",
           None)
    report(f"[{durability}] journal call vs its bare write{' + fdatasync' if durability == 'full' else ''} "
           "of the same frames", s["allow"], s["bare"], "µs", None,
           note="the difference is the Python kept on the path: policy, encoding, redaction check, framing")
    report(f"[{durability}] (reference) today's recorded call vs 1 raw {sync} commit", s["today"], s["raw1"], "µs",
           target_raw)
    if otel is not None:
        report(f"[{durability}] (reference) today's recorded call vs OpenTelemetry span", s["today"], s["span"], "µs",
               2.0 if durability == "fast" else None)
    breakdown(allow, durability)
    cpu = cpu_times({k: v for k, v in measures.items() if k != "bare"})
    report(f"[{durability}] CPU time of the calling thread: journal call, ALLOW_ALL vs 1 raw {sync} commit",
           cpu["allow"], cpu["raw1"], "µs", None)
    if otel is not None:
        report(f"[{durability}] CPU time of the calling thread: journal call, ALLOW_ALL vs OpenTelemetry span",
               cpu["allow"], cpu["span"], "µs", None)
        report(f"[{durability}] CPU time of the calling thread: journal call, 100-rule policy vs OpenTelemetry "
               "span", cpu["rules"], cpu["span"], "µs", None)
    report(f"[{durability}] CPU time of the calling thread: journal call vs today's recorded call", cpu["allow"],
           cpu["today"], "µs", None)
    for x in (allow, rules, bare):
        x.close()
    raw.close()
    today.close()
    return median(s["allow"])


def cpu_times(measures: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """A separate pass, interleaved the same way: each call's CPU time in the calling thread
    (``time.thread_time``, µs). Waiting for the disk is not in it, nor time the thread lost to other
    processes of a shared machine: what the Python and the system calls cost themselves."""
    def cpu(fn: Callable[[], float]) -> Callable[[], float]:
        def one() -> float:
            c0 = time.thread_time_ns()
            fn()
            return (time.thread_time_ns() - c0) / 1000
        return one

    return interleaved({k: cpu(fn) for k, fn in measures.items()}, rounds=max(2, ROUNDS // 2))


def breakdown(calls: JournalCalls, durability: str) -> None:
    """Where the journal call's time goes (a separate, instrumented pass)."""
    parts: dict[str, list[float]] = {k: [] for k in ("policy", "encode+redact+frame", "write", "result record")}
    for _ in range(WARMUP + ROUNDS * PER_ROUND // 2):
        marks: list[int] = []
        t0 = time.perf_counter_ns()
        calls.one(marks)
        p, enc, w, r = marks
        parts["policy"].append((p - t0) / 1000)  # CallContext, would_redact, evaluate
        parts["encode+redact+frame"].append((enc - p) / 1000)
        parts["write"].append((w - enc) / 1000)  # frame + write (+ fdatasync) of the gate record, the tool
        parts["result record"].append((r - w) / 1000)
    text = ", ".join(f"{k} {median(v[WARMUP:]):.1f}" for k, v in parts.items())
    print(f"    breakdown (median µs, instrumented pass): {text}")
    print("      (policy: arguments encoded, redaction check, CallContext, evaluate; write: chain hash, "
          f"write(2){' + fdatasync' if durability == 'full' else ''}, and the tool)")


# ---------------------------------------------------------------- 2. the ingester


def fill_journal(path: Path, calls: int, builder: EventBuilder) -> tuple[JournalCalls, list[bytes]]:
    """A journal of ``calls`` recorded calls (fast mode), and its chain-checked bodies."""
    jc = JournalCalls(path, "fast", ALLOW_ALL, builder)
    for _ in range(calls):
        jc.one()
    return jc, read_frames(jc.journal.contents())


def drafts_of(body: bytes) -> list[EventDraft]:
    return [EventDraft(ev["kind"], ev["payload"], run_id=ev["run_id"], principal=ev["principal"], step=ev["step"])
            for ev in orjson.loads(body)]


def start_run(store: Any, run_id: str) -> None:
    store.append(EventDraft("run.started", {"agent": "bench", "snapshot": None, "parent_run_id": None,
                                            "labels": {}, "policy": {"fingerprint": ALLOW_ALL.fingerprint,
                                                                     "name": None}},
                            run_id=run_id, principal="agent:bench"))


class Ingester:
    """Moves journal frames into a real SqliteStore with its batched append, one batch a call of
    :meth:`batch`: the frames' chain checked, their bodies parsed into drafts, ``store.append``."""

    def __init__(self, folder: Path, durability: str, run_id: str) -> None:
        self.store = init_store(folder, durability=durability)
        start_run(self.store, run_id)

    def batch(self, frames: bytes, prev: bytes) -> int:
        drafts: list[EventDraft] = []
        for body in read_frames(frames, prev):
            drafts.extend(drafts_of(body))
        self.store.append(drafts)
        return len(drafts)

    def close(self) -> None:
        self.store.close()


def frame_batches(data: bytes, per_batch: int) -> list[tuple[bytes, bytes]]:
    """The journal's bytes cut into batches of ``per_batch`` frames: (frames, chain hash before them)."""
    head, out, pos, prev = Journal.HEAD, [], 0, bytes(32)
    starts = []
    while pos + head.size <= len(data):
        n, digest = head.unpack_from(data, pos)
        if n == 0:
            break
        starts.append((pos, digest))
        pos += head.size + n
    starts.append((pos, b""))
    for i in range(0, len(starts) - 1, per_batch):
        j = min(i + per_batch, len(starts) - 1)
        out.append((data[starts[i][0]:starts[j][0]], prev))
        prev = starts[j - 1][1]
    return out


class RawBatches:
    """The baseline: the same events' bytes (one canonical JSON envelope each), inserted in one
    transaction per batch into a bare table in WAL, as plain sqlite3 code would."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, raw BLOB NOT NULL)")

    def batch(self, rows: list[tuple[bytes]]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("INSERT INTO events (raw) VALUES (?)", rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def bench_ingester(tmp: Path, durability: str, builder: EventBuilder, journal_call_us: float) -> None:
    sync = "FULL" if durability == "full" else "NORMAL"
    jc, _bodies = fill_journal(tmp / f"ingest-journal-{durability}", INGEST_CALLS, builder)
    batches = frame_batches(jc.journal.contents(), BATCH_CALLS * 2)  # 2 frames a call: gate, result
    rows = [[(canonical_bytes_encoded(ev),) for body in read_frames(frames, prev) for ev in orjson.loads(body)]
            for frames, prev in batches]
    ingester = Ingester(tmp / f"ingest-store-{durability}", durability, jc.run_id)
    raw = RawBatches(tmp / f"ingest-raw-{durability}.db", sync)
    before = ingester.store.size()
    ours: list[float] = []
    base: list[float] = []
    ours_cpu: list[float] = []
    base_cpu: list[float] = []
    for (frames, prev), batch_rows in zip(batches, rows):
        c0, t0 = time.thread_time(), time.perf_counter()
        n = ingester.batch(frames, prev)
        c1, t1 = time.thread_time(), time.perf_counter()
        raw.batch(batch_rows)
        c2, t2 = time.thread_time(), time.perf_counter()
        ours.append(n / (t1 - t0))
        base.append(len(batch_rows) / (t2 - t1))
        ours_cpu.append(n / (c1 - c0))
        base_cpu.append(len(batch_rows) / max(c2 - c1, 1e-6))
    assert ingester.store.size() - before == 3 * INGEST_CALLS, (before, ingester.store.size())
    events_per_call = 3
    synced = "fsync'd" if durability == "full" else "not fsync'd"
    print(f"\n== ingester, store durability={durability} (one commit a batch, {synced}): {INGEST_CALLS} calls = "
          f"{events_per_call * INGEST_CALLS} events, batches of {BATCH_CALLS * events_per_call} events; wall time, "
          "then the thread's CPU time (what a machine shared with other work does not inflate) ==")
    report(f"[{durability}] ingester: journal -> SqliteStore batched append vs raw batched {sync} insert",
           ours, base, "events/s", None,
           note="ours: chain check, parse, drafts, store.append (encode, validate, redact, blob, hash chain, "
           "Merkle, indexes)")
    report(f"[{durability}] the same, events per CPU-second of the ingesting thread", ours_cpu, base_cpu,
           "events/s", None)
    journal_rate = 1e6 / journal_call_us
    report(f"[{durability}] calls/s the ingester sustains (wall) vs calls/s of the journal call path (1 thread)",
           [x / events_per_call for x in ours], journal_rate, "calls/s", None,
           note="below 1.0x the journal grows without bound when calls come at the journal path's full rate")
    report(f"[{durability}] calls/s per ingester CPU-second vs calls/s of the journal call path (1 thread)",
           [x / events_per_call for x in ours_cpu], journal_rate, "calls/s", None)
    ingester.close()
    raw.close()
    jc.close()


# ---------------------------------------------------------------- 3. the GIL


def bench_gil(tmp: Path, durability: str, builder: EventBuilder) -> None:
    """The journal call's latency with an ingester thread of the same process busy (appending batches
    of a pre-filled journal again and again), against the same calls with the thread idle; rounds
    alternate. Two patterns: calls back to back (the calling thread holds the GIL but for the
    interpreter's forced switches and its own I/O), and calls 1 ms apart (``time.sleep``, untimed: an
    agent awaiting its model between calls, when the ingester takes the GIL and the call waits for it)."""
    feed, _ = fill_journal(tmp / f"gil-feed-{durability}", BATCH_CALLS * 4, builder)
    batches = frame_batches(feed.journal.contents(), BATCH_CALLS * 2)
    ingester = Ingester(tmp / f"gil-store-{durability}", durability, feed.run_id)
    calls = JournalCalls(tmp / f"gil-journal-{durability}", durability, ALLOW_ALL, builder)
    busy = threading.Event()
    stop = threading.Event()
    ingested = [0]

    def work() -> None:
        i = 0
        while not stop.is_set():
            if not busy.wait(0.05):
                continue
            frames, prev = batches[i % len(batches)]
            ingested[0] += ingester.batch(frames, prev)
            i += 1

    def spaced() -> float:
        time.sleep(0.001)
        return calls.one()[0]

    thread = threading.Thread(target=work, name="ingester", daemon=True)
    thread.start()
    for _ in range(WARMUP):
        calls.one()
    print(f"\n== GIL: journal call ({durability}) while an ingester thread appends in the same process; "
          f"sys.getswitchinterval() = {sys.getswitchinterval() * 1000:.1f} ms ==")
    for label, one in (("back to back", lambda: calls.one()[0]), ("1 ms apart", spaced)):
        idle: list[float] = []
        loaded: list[float] = []
        before = ingested[0]
        busy_s = 0.0
        for _ in range(ROUNDS):
            idle.extend(one() for _ in range(PER_ROUND))
            busy.set()
            time.sleep(0.02)  # the thread is inside a batch
            t0 = time.perf_counter()
            loaded.extend(one() for _ in range(PER_ROUND))
            busy_s += time.perf_counter() - t0
            busy.clear()
            time.sleep(0.2)  # its batch finishes
        report(f"[{durability}] journal call, {label}, with an ingester thread busy vs idle", loaded, idle, "µs",
               None, note=f"busy rounds: {len(loaded)} calls in {busy_s:.2f} s; the thread ingested "
               f"{ingested[0] - before} events over these rounds")
        report(f"[{durability}] the same, p99", p99(loaded), p99(idle), "µs", None)
    stop.set()
    thread.join()
    ingester.close()
    calls.close()
    feed.close()


def main() -> None:
    print_machine_once()
    print("A SKETCH's lower bound: the journal design is not built; see this file's docstring for what the "
          "journal call leaves out.")
    try:
        otel: OtelSpans | None = OtelSpans()
    except ImportError:
        print("opentelemetry-sdk is not installed: the span baseline is skipped (pip install opentelemetry-sdk)")
        otel = None
    builder = EventBuilder(os.urandom(32))  # the store's redaction, default content policy ("redacted")
    with tempfile.TemporaryDirectory(prefix="sealbox-bench-journal-") as d:
        tmp = Path(d)
        medians = {m: bench_calls(tmp, m, otel, builder) for m in ("full", "fast")}
        for m in ("full", "fast"):
            bench_ingester(tmp, m, builder, medians[m])
        for m in ("fast", "full"):
            bench_gil(tmp, m, builder)
    if otel is not None:
        otel.close()
    print_table("Journal sketch (lower bound, not a shipped feature)")


if __name__ == "__main__":
    main()
