"""The background WAL checkpointer of the SQLite store (real SQLite files, no mocks of the store).

A writable store copies its WAL into the database from a daemon thread and starts
the WAL over, so that writers never run a checkpoint on their own COMMIT (except
as a backstop). These tests look at the real files: the database file grows while
the WAL stays bounded, the thread is there only while a writable store is open,
and heavy (multi-thread, multi-process) writing loses nothing and verifies.
"""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sealbox
from sealbox import CheckpointPolicy, EventDraft, verify_store
from sealbox.store import sqlite as sqlite_store
from sealbox.store.base import new_run_id
from sealbox.store.sqlite import WAL_AUTOCHECKPOINT_BACKSTOP, WAL_CHECKPOINT_PAGES, SqliteStore

THREAD_PREFIX = "sealbox-wal-checkpointer"
FP = "sha256:" + "ab" * 32


def wal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]


def wait_for(cond, timeout: float = 15.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Every store a test opens is closed (or dropped) by its end: no checkpointer thread is left."""
    before = set(wal_threads())
    yield
    gc.collect()
    assert wait_for(lambda: not (set(wal_threads()) - before), timeout=10), [t.name for t in wal_threads()]


def started(run: str, agent: str = "wal") -> EventDraft:
    return EventDraft("run.started", {"agent": agent, "snapshot": None, "parent_run_id": None, "labels": {},
                                      "policy": {"fingerprint": FP, "name": None}}, run_id=run, principal=f"agent:{agent}")


def big_note(run: str, tag: str, size: int = 12000) -> EventDraft:
    """A note of ``size`` random hex characters (a few database pages each, never compressible)."""
    return EventDraft("note", {"text": f"{tag} " + os.urandom(size // 2).hex()}, run_id=run, principal="investigator")


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def page_size(store: SqliteStore) -> int:
    return store._conn().execute("PRAGMA page_size").fetchone()[0]


# --------------------------------------------------------------------------- the thread does the checkpoints


@pytest.mark.parametrize("durability", ["fast", "full"])
def test_background_thread_copies_the_wal_and_keeps_it_bounded(tmp_path: Path, durability: str) -> None:
    store = sealbox.init_store(tmp_path / "s", durability=durability)
    try:
        db, wal = store.db_path, store.db_path.with_name("sealbox.db-wal")
        psize = page_size(store)
        # writer connections checkpoint on their own only as a backstop
        assert store._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_AUTOCHECKPOINT_BACKSTOP
        assert WAL_AUTOCHECKPOINT_BACKSTOP >= 10 * WAL_CHECKPOINT_PAGES
        run = new_run_id()
        store.append(started(run))
        ckpt = store._wal_ckpt
        assert ckpt is not None and ckpt.is_alive()
        db_before = file_size(db)

        # write about 10x the threshold (far below the writers' backstop): only the thread can copy it
        target = 10 * WAL_CHECKPOINT_PAGES * psize
        written, i, wal_max = 0, 0, 0
        while written < target:
            store.append(big_note(run, f"n{i}"), sync=(i % 4 == 0))
            written += 12000
            i += 1
            wal_max = max(wal_max, file_size(wal))

        # the database file received the pages (it only grows by checkpoints) ...
        assert wait_for(lambda: file_size(db) - db_before >= 3 * WAL_CHECKPOINT_PAGES * psize), \
            (file_size(db) - db_before, ckpt.checkpoints)
        # ... the thread ran checkpoints and started the WAL over, so the WAL stayed well below what was written
        assert ckpt.checkpoints >= 2 and ckpt.restarts >= 1, (ckpt.checkpoints, ckpt.restarts, ckpt.errors)
        # a burst faster than the disk can absorb (fast mode on a busy machine) lets it grow past the
        # threshold, even past what was written since the last restart, but never past the writers'
        # backstop (plus the one transaction that finds it reached)
        assert wal_max <= (WAL_AUTOCHECKPOINT_BACKSTOP + 16) * psize, (wal_max, target)
        time.sleep(3 * ckpt.interval)  # its last round, after the last commit

        # an independent connection sees a WAL far shorter than what was written, with nothing left to copy
        probe = sqlite3.connect(db, isolation_level=None)
        try:
            for _ in range(50):  # busy = 1 while the store's own thread runs a checkpoint at that instant
                busy, frames, copied = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
                if not busy:
                    break
                time.sleep(ckpt.interval)
        finally:
            probe.close()
        assert busy == 0 and frames == copied
        # (how far the WAL got before its last restart depends on the machine's load: bounded by the backstop)
        assert frames <= WAL_AUTOCHECKPOINT_BACKSTOP + 16, (frames, target)
        assert ckpt.errors == 0
        assert store.size() == i + 2  # system run.started + our run.started + i notes
    finally:
        store.close()
    assert not store._wal_ckpt and not wal_threads()
    reopened = sealbox.open_store(tmp_path / "s", readonly=True)
    try:
        assert verify_store(reopened).ok
    finally:
        reopened.close()


def parked(ckpt) -> bool:
    """The checkpointer thread waits for a wake-up (in ``_wake.wait()``): no round under way, none due."""
    frame = sys._current_frames().get(ckpt._thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_locals.get("self") is ckpt._wake:
            return not ckpt._wake.is_set()
        frame = frame.f_back
    return False


def test_an_idle_store_thread_sleeps(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s")
    try:
        ckpt = store._wal_ckpt
        assert ckpt is not None and ckpt.is_alive()
        # let it handle the wake-ups of init (a fixed 0.3 s was not always enough: a round's fsync on a
        # loaded disk outlasted it, and the round's count then changed below)
        assert wait_for(lambda: parked(ckpt))
        looks = ckpt.checkpoints
        # the checkpointer thread's own CPU time (time.thread_time() read the test's thread, which sleeps:
        # the bound held whatever the checkpointer did)
        clock = time.pthread_getcpuclockid(ckpt._thread.ident)
        t0 = time.clock_gettime(clock)
        time.sleep(0.5)
        assert ckpt.checkpoints == looks  # nothing written: nothing checkpointed, no polling
        assert ckpt.is_alive() and not ckpt._wake.is_set()
        assert time.clock_gettime(clock) - t0 < 0.05
    finally:
        store.close()


# --------------------------------------------------------------------------- lifecycle


def test_close_stops_and_joins_the_thread_and_is_idempotent(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s")
    run = new_run_id()
    store.append(started(run))
    ckpt = store._wal_ckpt
    assert ckpt is not None and ckpt.is_alive() and len(wal_threads()) == 1
    store.close()
    assert not ckpt.is_alive() and not wal_threads()
    store.close()  # again: nothing happens
    store.close()
    assert not wal_threads()
    # close() still signed the final checkpoint and left no WAL behind (the last connection checkpointed it)
    assert not store.db_path.with_name("sealbox.db-wal").exists()
    with pytest.raises(sealbox.StoreError):
        store.append(big_note(run, "after close"))
    assert not wal_threads()


def test_a_read_only_store_starts_no_thread(tmp_path: Path) -> None:
    sealbox.init_store(tmp_path / "s").close()
    store = sealbox.open_store(tmp_path / "s", readonly=True)
    try:
        assert store.size() == 1 and verify_store(store).ok
        list(store.iter_rows())
        assert store._wal_ckpt is None and not wal_threads()
        with pytest.raises(sealbox.StoreReadOnlyError):
            store.append(big_note(new_run_id(), "x"))
        assert store._wal_ckpt is None and not wal_threads()
    finally:
        store.close()
    assert not wal_threads()


def test_a_writable_store_that_only_reads_starts_no_thread_not_even_to_close(tmp_path: Path) -> None:
    sealbox.init_store(tmp_path / "s").close()
    store = sealbox.open_store(tmp_path / "s")
    try:
        assert store.size() == 1
        assert store._wal_ckpt is None and not wal_threads()
    finally:
        store.close()  # optimize() writes, but no thread is started for it
    assert store._wal_ckpt is None and not wal_threads()


def test_a_store_dropped_without_close_stops_its_thread(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s")
    store.append(started(new_run_id()))
    thread = store._wal_ckpt._thread
    assert thread.is_alive()
    del store
    gc.collect()
    assert wait_for(lambda: not thread.is_alive(), timeout=10)


def test_a_failing_checkpointer_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception in the thread is logged and ignored: writes go on (the backstop bounds the WAL)."""
    def broken(self, conn, mode):
        raise sqlite3.OperationalError("disk I/O error (injected)")

    monkeypatch.setattr(sqlite_store._WalCheckpointer, "_checkpoint", broken)
    store = sealbox.init_store(tmp_path / "s", durability="fast")
    try:
        run = new_run_id()
        store.append(started(run))
        ckpt = store._wal_ckpt
        for i in range(2 * WAL_CHECKPOINT_PAGES * page_size(store) // 12000):
            store.append(big_note(run, f"n{i}"))
        assert wait_for(lambda: ckpt.errors >= 1)
        assert ckpt.is_alive()  # the thread survived its errors
        assert store.size() == i + 3 and verify_store(store).ok
    finally:
        store.close()
    assert not wal_threads()
    monkeypatch.undo()
    with sealbox.open_store(tmp_path / "s", readonly=True) as reopened:
        assert reopened.size() == i + 3 and verify_store(reopened).ok


# --------------------------------------------------------------------------- heavy concurrent writing


def test_many_threads_appending_while_the_thread_checkpoints(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s", checkpoint_policy=CheckpointPolicy(every_events=200))
    nthreads, per = 8, 120
    runs: dict[str, str] = {}
    errors: list = []
    barrier = threading.Barrier(nthreads)

    def writer(name: str) -> None:
        try:
            run = new_run_id()
            runs[name] = run
            barrier.wait()
            store.append(started(run, agent=name))
            for i in range(per):
                store.append(big_note(run, f"{name}-{i}", size=6000), sync=(i % 3 == 0))
        except BaseException as exc:  # noqa: BLE001 - every exception must reach the assertion
            errors.append((name, repr(exc)))

    try:
        threads = [threading.Thread(target=writer, args=(f"w{k}",)) for k in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        ckpt = store._wal_ckpt
        assert ckpt.checkpoints >= 1 and ckpt.errors == 0, (ckpt.checkpoints, ckpt.errors)
        assert store.size() == 1 + nthreads * (per + 1)
        for name, run in runs.items():  # each run is complete and in its writer's order
            texts = [e.payload["text"].split(" ")[0] for e in store.read_run(run)[1:]]
            assert texts == [f"{name}-{i}" for i in range(per)]
    finally:
        store.close()
    assert not wal_threads()
    with sealbox.open_store(tmp_path / "s", readonly=True) as reopened:
        report = verify_store(reopened)
        assert report.ok, report
        assert reopened.size() == 1 + nthreads * (per + 1)


PROCESS_WRITER = r'''
import os, sys, threading
from sealbox import EventDraft, open_store
from sealbox.store.base import new_run_id

path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(path, durability="fast")
run = new_run_id()
print(run, flush=True)
sys.stdin.readline()
store.append(EventDraft("run.started", {"agent": name, "snapshot": None, "parent_run_id": None, "labels": {},
                                        "policy": {"fingerprint": "sha256:" + "ab" * 32, "name": None}},
                        run_id=run, principal="agent:" + name))
for i in range(count):
    store.append(EventDraft("note", {"text": f"{name}-{i} " + os.urandom(3000).hex()}, run_id=run,
                            principal="investigator"))
own = [t.name for t in threading.enumerate() if t.name.startswith("sealbox-wal-checkpointer")]
ckpt = store._wal_ckpt
print(len(own), ckpt.pid == os.getpid(), ckpt.errors, flush=True)
store.close()
print(len([t for t in threading.enumerate() if t.name.startswith("sealbox-wal-checkpointer")]), flush=True)
'''


def test_several_processes_each_with_their_own_checkpointer(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = sealbox.init_store(path, durability="fast")
    script = tmp_path / "writer.py"
    script.write_text(PROCESS_WRITER)
    nproc, per = 3, 250
    procs = [subprocess.Popen([sys.executable, str(script), str(path), f"p{k}", str(per)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(nproc)]
    try:
        proc_runs = [p.stdout.readline().strip() for p in procs]
        assert all(proc_runs), [p.stderr.read() for p in procs]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        run = new_run_id()
        store.append(started(run, agent="main"))
        for i in range(per):
            store.append(big_note(run, f"main-{i}", size=6000))
        outs = [p.communicate(timeout=180) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, err
            lines = out.split()
            assert lines == ["1", "True", "0", "0"], (out, err)  # one thread of its own, no error, none left
        assert store._wal_ckpt.errors == 0
        assert store.size() == 1 + (nproc + 1) * (per + 1)
        for r in proc_runs + [run]:
            assert len(store.read_run(r)) == per + 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        store.close()
    with sealbox.open_store(path, readonly=True) as reopened:
        report = verify_store(reopened)
        assert report.ok, report


# --------------------------------------------------------------------------- fork


def _run_in_child(fn) -> int:
    """Fork, run ``fn()`` in the child, return its exit code (0: returned, 1: raised)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    deadline = time.monotonic() + 120  # a child stuck (e.g. on a lock copied by the fork) fails, never hangs
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish in 120 s (deadlocked?)")
        time.sleep(0.01)


@pytest.mark.parametrize("case", ["open-at-fork:full", "open-at-fork:fast", "closed-before-fork"])
def test_fork_cases_in_a_fresh_interpreter(tmp_path: Path, case: str) -> None:
    """The fork cases below run in a fresh interpreter: a fork copies every lock of every thread,
    and in the test process other tests' threads (servers, stores, exporters) may be inside SQLite
    or hold a lock at that moment. A CI run hung once on that, the child stuck in its first
    ``sqlite3.connect``. Sealbox's own checkpointer is guarded (store/sqlite.py, _FORK_GUARD)."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "import test_wal_checkpointer as m; m.run_fork_case(sys.argv[2], Path(sys.argv[3]))")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), case, str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{case}: ok", proc.stdout + proc.stderr


def run_fork_case(case: str, tmp_path: Path) -> None:
    """Run one fork case (called in a fresh interpreter by test_fork_cases_in_a_fresh_interpreter)."""
    if case.startswith("open-at-fork:"):
        _a_store_open_at_a_fork_refuses_use_in_the_child_and_the_parent_goes_on(tmp_path, case.split(":")[1])
    else:
        _a_store_closed_before_the_fork_can_be_opened_in_the_child(tmp_path)
    print(f"{case}: ok")


def _a_store_open_at_a_fork_refuses_use_in_the_child_and_the_parent_goes_on(tmp_path: Path,
                                                                            durability: str) -> None:
    """SQLite's per-process state for an open database crosses a fork: a child writing through the
    inherited store object lost its events, and so did one writing through a store it opened itself
    (two break tests). In the child both are refused with one clear StoreError; the parent's
    connections are never touched, and the parent goes on writing."""
    path = tmp_path / "s"
    store = sealbox.init_store(path, durability=durability)
    run = new_run_id()
    store.append(started(run))  # the parent's connection and checkpointer thread exist now

    def child() -> None:
        with pytest.raises(sealbox.StoreError, match="before os.fork"):
            store.append(big_note(run, "child"))
        with pytest.raises(sealbox.StoreError, match="before os.fork"):
            store.size()
        store.close()  # nothing to close in the child; the parent's connections are left alone
        for readonly in (False, True):
            with pytest.raises(sealbox.StoreError, match="open in the parent process when it forked"):
                sealbox.open_store(path, readonly=readonly)
        other = sealbox.init_store(tmp_path / "other")  # another store is fine
        other.append(started(new_run_id()))
        other.close()

    assert _run_in_child(child) == 0
    for i in range(50):
        store.append(big_note(run, f"p{i}", size=300))
    store.close()
    with sealbox.open_store(path, readonly=True) as reopened:
        assert [e.payload["text"].split(" ")[0] for e in reopened.read_run(run)[1:]] == [f"p{i}" for i in range(50)]
        report = verify_store(reopened)
        assert report.ok, report
    with sealbox.open_store(tmp_path / "other", readonly=True) as other:
        assert other.size() == 2 and verify_store(other).ok


def _a_store_closed_before_the_fork_can_be_opened_in_the_child(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = sealbox.init_store(path, durability="fast")
    store.append(started(new_run_id()))
    store.close()  # closed before the fork: no SQLite state of it crosses
    busy = sealbox.init_store(tmp_path / "busy")  # another store open at the fork does not matter
    busy.append(started(new_run_id()))
    run = new_run_id()

    def child() -> None:
        own = sealbox.open_store(path, durability="fast")
        own.append([started(run)] + [big_note(run, f"c{i}", size=300) for i in range(100)])
        own.close()

    assert _run_in_child(child) == 0
    busy.close()
    with sealbox.open_store(path, readonly=True) as reopened:
        assert [e.payload["text"].split(" ")[0] for e in reopened.read_run(run)[1:]] == [f"c{i}" for i in range(100)]
        report = verify_store(reopened)
        assert report.ok, report
