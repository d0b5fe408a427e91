"""Many threads and several processes appending to one store at once.

No exception (in particular no "database is locked") reaches any caller, no
event is lost, every run's run_seq is 1..n without a gap, each writer's own
order is kept, and the store verifies clean.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import sealbox
from store_testkit import decision, note, started, tool_call, tool_result
from sealbox import CheckpointPolicy, open_store, verify_store
from sealbox.store.base import new_run_id

OWN_THREADS, SHARED_THREADS, PROCESSES, PER_WRITER = 16, 4, 4, 200

PROCESS_WRITER = r'''
import sys
from sealbox import CheckpointPolicy, EventDraft, open_store
from sealbox.store.base import new_run_id

path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=150, every_seconds=0.5))
run = new_run_id()
who = "agent:" + name
FP = "sha256:" + "ef" * 32
print(run, flush=True)
sys.stdin.readline()  # wait for "go" so that every writer starts together
store.append(EventDraft("run.started", {"agent": name, "snapshot": None, "parent_run_id": None, "labels": {},
                                        "policy": {"fingerprint": FP, "name": None}}, run_id=run, principal=who))
n = 1
while n < count:
    if n + 2 <= count and n % 3 == 0:
        c = f"c{n}"
        store.append([
            EventDraft("tool.call", {"call_id": c, "server": "s", "tool": "t", "exposed": "s__t",
                                     "arguments": {"n": n, "pad": name * 200}, "grant": f"implicit:{who}"}, run_id=run, principal=who),
            EventDraft("policy.decision", {"call_id": c, "effect": "allow", "reason_code": "ok", "rule": None,
                                           "reason": "ok", "policy_fingerprint": FP, "eval_us": 1},
                       run_id=run, principal=who),
        ])
        n += 2
    else:
        store.append(EventDraft("note", {"text": f"{name} {n}"}, run_id=run, principal=who))
        n += 1
if len(sys.argv) > 4 and sys.argv[4] == "noclose":
    store.issue_checkpoint()  # what close() signs, without the rest of close()
else:
    store.close()
print("done", flush=True)
'''


def own_run_writer(store, name: str, count: int, barrier: threading.Barrier, out: dict, errors: list) -> None:
    try:
        run = new_run_id()
        out[name] = run
        barrier.wait()
        store.append(started(run, agent=name))
        n = 1
        while n < count:
            if n + 2 <= count and n % 3 == 0:
                c = f"{name}-c{n}"
                args = {"n": n, "pad": name * 100} if n % 2 else {"n": n}  # some above the blob limit
                store.append([tool_call(run, c, arguments=args), decision(run, c)])
                n += 2
            elif n % 7 == 0:
                store.append(tool_result(run, f"{name}-c{n}", {"shared": "same content every time " * 40}))
                n += 1
            else:
                store.append(note(run, f"{name} {n}"))
                n += 1
    except BaseException as exc:  # noqa: BLE001 - every exception must reach the assertion
        errors.append((name, repr(exc)))


def shared_run_writer(store, run: str, name: str, count: int, barrier: threading.Barrier, errors: list) -> None:
    try:
        barrier.wait()
        for i in range(count):
            store.append(note(run, f"{name} {i}"))
    except BaseException as exc:  # noqa: BLE001
        errors.append((name, repr(exc)))


@pytest.mark.slow
def test_threads_and_processes_append_to_one_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = sealbox.init_store(path, checkpoint_policy=CheckpointPolicy(every_events=150, every_seconds=0.5))
    shared = new_run_id()
    store.append(started(shared, agent="shared"))
    initial = store.size()

    script = tmp_path / "writer.py"
    script.write_text(PROCESS_WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(path), f"proc{i}", str(PER_WRITER)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(PROCESSES)]
    proc_runs = [p.stdout.readline().strip() for p in procs]  # each has opened the store and chosen its run
    assert all(proc_runs), [p.stderr.read() for p in procs]

    errors: list = []
    own: dict[str, str] = {}
    barrier = threading.Barrier(OWN_THREADS + SHARED_THREADS + 1)
    threads = [threading.Thread(target=own_run_writer, args=(store, f"t{i}", PER_WRITER, barrier, own, errors))
               for i in range(OWN_THREADS)]
    threads += [threading.Thread(target=shared_run_writer, args=(store, shared, f"s{i}", PER_WRITER, barrier, errors))
                for i in range(SHARED_THREADS)]
    for t in threads:
        t.start()
    barrier.wait()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    started_at = time.monotonic()
    for t in threads:
        t.join(timeout=300)
    outs = [p.communicate(timeout=300) for p in procs]
    elapsed = time.monotonic() - started_at

    assert not errors, errors[:5]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "done", err
        assert "locked" not in err and "Traceback" not in err, err
    assert not any(t.is_alive() for t in threads)

    expected = initial + OWN_THREADS * PER_WRITER + SHARED_THREADS * PER_WRITER + PROCESSES * PER_WRITER
    assert store.size() == expected

    # every run: run_seq 1..n, no gap, the right number of events
    for run in [*own.values(), *proc_runs]:
        seqs = [e.run_seq for e in store.read_run(run)]
        assert seqs == list(range(1, PER_WRITER + 1)), run
    shared_events = store.read_run(shared)
    assert [e.run_seq for e in shared_events] == list(range(1, SHARED_THREADS * PER_WRITER + 2))
    # each sharing thread's events appear in the order it wrote them
    order: dict[str, list[int]] = defaultdict(list)
    for e in shared_events[1:]:
        name, i = e.payload["text"].split()
        order[name].append(int(i))
    assert {k: v for k, v in order.items()} == {f"s{i}": list(range(PER_WRITER)) for i in range(SHARED_THREADS)}

    # leaf indices are 0..size-1 and each run's events are in increasing leaf order
    all_events = store.read_range(0, store.size())
    assert [e.leaf_index for e in all_events] == list(range(expected))
    last_leaf: dict[str, int] = {}
    for e in all_events:
        assert e.leaf_index > last_leaf.get(e.run_id, -1)
        last_leaf[e.run_id] = e.leaf_index

    store.close()
    final = open_store(path, readonly=True)
    try:
        report = verify_store(final)
        assert report.ok, [p.line() for p in report.problems[:10]]
        assert report.events == expected and report.tree_size_signed == expected
        assert report.runs == 1 + 1 + OWN_THREADS + PROCESSES  # system, shared, own threads, processes
    finally:
        final.close()
    print(f"{expected} events from {OWN_THREADS + SHARED_THREADS} threads and {PROCESSES} processes in {elapsed:.1f} s")


def test_checkpoint_file_holds_the_newest_checkpoint_after_concurrent_writers(tmp_path: Path) -> None:
    """Several processes sign checkpoints; DIR/checkpoint must end at the newest one (it is the rollback floor)."""
    path = tmp_path / "store"
    sealbox.init_store(path).close()
    script = tmp_path / "writer.py"
    script.write_text(PROCESS_WRITER.replace("every_events=150, every_seconds=0.5", "every_events=3, every_seconds=1e-6"))
    procs = [subprocess.Popen([sys.executable, str(script), str(path), f"p{i}", "120", "noclose"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    for p in procs:
        assert p.stdout.readline().strip()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    store = open_store(path, readonly=True)
    try:
        newest = store.latest_checkpoint()
        assert newest is not None and newest.tree_size == store.size() == 1 + 4 * 120
        assert store.checkpoint_file_size() == newest.tree_size
        assert verify_store(store).ok
    finally:
        store.close()


def test_verify_while_writers_append(tmp_path: Path) -> None:
    """verify_store on a live store (other threads appending and checkpointing) must not report problems
    that are only an artefact of reading while the log grows."""
    path = tmp_path / "store"
    store = sealbox.init_store(path, checkpoint_policy=CheckpointPolicy(every_events=5, every_seconds=1e-6))
    stop = threading.Event()
    errors: list = []

    def writer(name: str) -> None:
        try:
            run = new_run_id()
            store.append(started(run, agent=name))
            i = 0
            while not stop.is_set():
                i += 1
                store.append(note(run, f"{name} {i}"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    reader = open_store(path, readonly=True)
    bad = []
    try:
        deadline = time.monotonic() + 4
        rounds = 0
        while time.monotonic() < deadline:
            report = verify_store(reader)
            rounds += 1
            if not report.ok:
                bad.append([p.line() for p in report.problems[:3]])
    finally:
        stop.set()
        for t in threads:
            t.join()
        reader.close()
        store.close()
    assert not errors, errors
    assert rounds > 3
    assert not bad, f"{len(bad)} of {rounds} verifications of a live store reported problems, e.g. {bad[0]}"


def test_close_while_another_writer_appends(tmp_path: Path) -> None:
    """Regression: close() ran PRAGMA optimize / ANALYZE outside the retrying write path, right after SELECTs
    whose cursors were left open (a read transaction that the write then had to upgrade: SQLITE_BUSY at once,
    no busy handler), so with another writer active close() raised "stayed busy for too long". Opening
    stores from two threads of one process also collided on the per-pid write-probe file name."""
    path = tmp_path / "store"
    sealbox.init_store(path).close()
    stop = threading.Event()
    errors: list = []

    def busy_writer() -> None:
        other = open_store(path)
        run = new_run_id()
        other.append(started(run))
        try:
            while not stop.is_set():
                other.append(note(run, "busy"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(repr(exc))
        finally:
            other.close()

    t = threading.Thread(target=busy_writer)
    t.start()
    failures = []
    try:
        for i in range(10):
            store = open_store(path)
            run = new_run_id()
            store.append(started(run))
            store.append(note(run, f"closing {i}"))
            try:
                store.close()
            except sealbox.StoreError as exc:
                failures.append(str(exc))
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert not failures, f"{len(failures)} of 10 close() calls failed: {failures[0]}"


def test_two_stores_taking_turns_on_one_run_keep_its_chain(tmp_path: Path) -> None:
    """Each connection keeps what its last write read (tree size, run heads, nodes) only while
    ``PRAGMA data_version`` says no other connection committed: two stores of one folder, in one
    thread, appending to the same run in turn, and a third connection appending between them."""
    a = sealbox.init_store(tmp_path / "s")
    b = sealbox.open_store(tmp_path / "s")
    c = sealbox.open_store(tmp_path / "s")
    try:
        run = "r-turns"
        (first,) = a.append(started(run))
        seqs = []
        for i in range(30):
            writer = (a, b, a, c, b)[i % 5]
            (event,) = writer.append(note(run, f"note {i}"))
            seqs.append((event.leaf_index, event.run_seq))
        assert seqs == [(first.leaf_index + 1 + i, i + 2) for i in range(30)]
        assert [e.run_seq for e in a.read_run(run)] == list(range(1, 32))
        report = sealbox.verify_store(a)
        assert report.ok, report.problems
    finally:
        for s in (c, b, a):
            s.close()


def test_connections_of_threads_that_ended_are_closed_not_kept_until_the_store_closes(tmp_path: Path) -> None:
    # was: each thread's connection stayed open until store.close(), after the thread had ended: a process
    # recording from a thread per request (socketserver's ThreadingMixIn, a thread per task) held one
    # connection (its sealbox.db and sealbox.db-wal descriptors) per thread it ever ran (observed: 51 after
    # 50 threads), until the process ran out of file descriptors and every tool call was denied
    import contextlib
    import os

    from sealbox import EventDraft

    store = sealbox.init_store(tmp_path / "s", checkpoint_policy=CheckpointPolicy(every_events=10_000))
    db = str(store.db_path)

    def open_fds() -> dict[str, int]:
        counts = {"db": 0, "wal": 0}
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target == db:
                    counts["db"] += 1
                elif target == db + "-wal":
                    counts["wal"] += 1
        return counts

    sizes: list[int] = []
    seen: list[Any] = []

    def append_and_read(i: int) -> None:
        store.append(EventDraft("note", {"text": f"t{i}"}, run_id="system", principal="sealbox"))
        sizes.append(store.size())
        seen.append(store.read_range(i + 1, i + 2)[0].payload["text"])

    try:
        # the main thread's connection, and the WAL checkpointer's
        store.append(EventDraft("note", {"text": "main"}, run_id="system", principal="sealbox"))
        before = open_fds()
        for i in range(1, 51):
            worker = threading.Thread(target=append_and_read, args=(i,))
            worker.start()
            worker.join()
        assert sizes == list(range(3, 53)) and seen == [f"t{i}" for i in range(1, 51)]
        # the main thread's and the last thread's (closed when the next connection is opened)
        assert open_fds() == {"db": before["db"] + 1, "wal": before["wal"] + 1}
        assert len(store._conns) == 2
        worker = threading.Thread(target=lambda: sizes.append(store.size()))  # a new thread: a new connection
        worker.start()
        worker.join()
        assert sizes[-1] == 52 and len(store._conns) == 2
        assert open_fds() == {"db": before["db"] + 1, "wal": before["wal"] + 1}
        assert [e.payload["text"] for e in store.read_range(1, 52)] == ["main"] + [f"t{i}" for i in range(1, 51)]
    finally:
        store.close()
    assert open_fds() == {"db": 0, "wal": 0}


def test_a_reader_made_by_a_thread_that_ended_reads_on_the_connection_of_the_thread_using_it(tmp_path: Path) -> None:
    # the connection of a thread that ended is closed when another thread opens one: a store.reader()
    # made by that thread (it held the thread's connection) then failed every query with
    # sqlite3.ProgrammingError 'Cannot operate on a closed database'; its queries now run on the
    # connection of the thread making them
    from sealbox import EventDraft

    store = sealbox.init_store(tmp_path / "s")
    readers: list[Any] = []
    try:
        store.append(EventDraft("note", {"text": "n1"}, run_id="system", principal="sealbox"))
        for target in (lambda: readers.append(store.reader()), store.size):  # the second closes the first's
            worker = threading.Thread(target=target)
            worker.start()
            worker.join()
        assert len(store._conns) == 2
        assert [(e.leaf_index, e.payload.get("text")) for e in readers[0].events(["note"], run_id="system")] \
            == [(1, "n1")]
    finally:
        store.close()


def test_a_listing_begun_by_a_thread_that_ended_goes_on_in_another_thread(tmp_path: Path) -> None:
    # the connection of a thread that ended is closed when another thread opens one: a streamed listing
    # (iter_run_rows, iter_nodes, ...) begun by that thread and resumed by another then raised
    # sqlite3.ProgrammingError 'Cannot operate on a closed database'; the connection is now kept while
    # such a generator is unfinished, and closed at the next connection opened after it finished
    from sealbox import EventDraft

    store = sealbox.init_store(tmp_path / "s")
    gens: list[Any] = []
    first: list[Any] = []

    def begin() -> None:
        gens.append(store.iter_run_rows())
        first.append(next(gens[0]))

    try:
        store.append(EventDraft("run.started", {"agent": "a", "snapshot": None, "parent_run_id": None, "labels": {},
                                                "policy": {"fingerprint": "sha256:" + "ab" * 32, "name": None}},
                                run_id="r1", principal="agent:a"))
        for target in (begin, store.size):
            worker = threading.Thread(target=target)
            worker.start()
            worker.join()
        assert len(store._conns) == 3  # the main thread's, the listing's, the last thread's
        rest = list(gens[0])
        assert [row[0] for row in first + rest] == [row[0] for row in store.iter_run_rows()]
        assert len(first + rest) == 2
        worker = threading.Thread(target=store.size)  # the finished listing's connection is closed now
        worker.start()
        worker.join()
        assert len(store._conns) == 2
    finally:
        store.close()
