"""``DIR/checkpoint`` never moves backwards when two stores (two processes) sign at once.

Each signer commits its checkpoint row, then replaces the file. Comparing the file's size and
replacing it is one step under a lock on the folder: a signer of a smaller tree that finds a
larger checkpoint there (written by another process after this one committed) leaves it.
"""

from __future__ import annotations

import threading

import sealbox.store.base as _base
import sealbox.store.sqlite as _sqlite
from store_testkit import note, started
from sealbox import CheckpointPolicy, init_store, open_store, verify_store
from sealbox.store.base import new_run_id

NEVER = CheckpointPolicy(every_events=None, every_seconds=None)


def test_a_smaller_checkpoint_written_late_does_not_replace_a_larger_one(tmp_path, monkeypatch):
    init_store(tmp_path / "s").close()
    a = open_store(tmp_path / "s", checkpoint_policy=NEVER)
    b = open_store(tmp_path / "s", checkpoint_policy=NEVER)
    run = new_run_id()
    a.append([started(run)] + [note(run, f"a{i}") for i in range(4)])  # 1 (init's) + 5 = 6 events

    real = _base.fsync_write
    a_at_write, release_a = threading.Event(), threading.Event()

    def slow_for_a(path, data, *args, **kwargs):
        if threading.current_thread().name == "signer-a" and str(path).endswith("checkpoint"):
            a_at_write.set()
            release_a.wait(10)
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(_base, "fsync_write", slow_for_a)
    monkeypatch.setattr(_sqlite, "fsync_write", slow_for_a)
    done: dict[str, int] = {}
    ta = threading.Thread(target=lambda: done.__setitem__("a", a.issue_checkpoint().tree_size), name="signer-a")
    ta.start()
    assert a_at_write.wait(10)  # a committed its row of size 6 and is about to write the file

    def sign_b() -> None:
        b.append([note(run, f"b{i}") for i in range(3)])  # 9 events
        done["b"] = b.issue_checkpoint().tree_size

    tb = threading.Thread(target=sign_b, name="signer-b")
    tb.start()
    tb.join(1.5)  # without the lock b writes its file now; with it, b waits for a
    release_a.set()
    ta.join(10)
    tb.join(10)
    assert done == {"a": 6, "b": 9}
    assert a.checkpoint_file_size() == 9
    assert (tmp_path / "s" / "checkpoint").read_text() == b.latest_checkpoint().note
    a.close()
    b.close()
    with open_store(tmp_path / "s") as store:
        report = verify_store(store)
    assert report.ok, report


def test_a_process_forked_while_the_file_is_replaced_does_not_keep_the_lock(tmp_path, monkeypatch):
    """A flock belongs to the open file description, which a forked child shares: a child forked (a
    multiprocessing worker, by fork) while a signer held the folder's lock kept it for its whole life,
    and every later signer of the store blocked in flock until the child exited (issue_checkpoint,
    close() at the end of the program). The child now closes the descriptor at fork."""
    import os
    import time

    init_store(tmp_path / "s").close()
    a = open_store(tmp_path / "s", checkpoint_policy=NEVER)
    b = open_store(tmp_path / "s", checkpoint_policy=NEVER)
    run = new_run_id()
    a.append([started(run), note(run, "a")])

    real = _base.fsync_write
    at_write, release = threading.Event(), threading.Event()

    def slow(path, data, *args, **kwargs):
        if threading.current_thread().name == "signer-a" and str(path).endswith("checkpoint"):
            at_write.set()
            release.wait(10)
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(_base, "fsync_write", slow)
    monkeypatch.setattr(_sqlite, "fsync_write", slow)
    ta = threading.Thread(target=a.issue_checkpoint, name="signer-a")
    ta.start()
    assert at_write.wait(10)  # a holds the folder's lock
    pid = os.fork()
    if pid == 0:  # the child: lives on without touching the store (until killed below)
        time.sleep(120)
        os._exit(0)
    try:
        release.set()
        ta.join(10)
        b.append([note(run, "b")])
        done = threading.Event()
        tb = threading.Thread(target=lambda: (b.issue_checkpoint(), done.set()), name="signer-b")
        started_at = time.monotonic()
        tb.start()
        # the child lives 120 s (was 6 s, with a 4 s bound on b: a loaded host taking 2 s from the fork to
        # here let the child exit first, and b would no longer be shown not to wait for it)
        assert done.wait(30), "signer b blocked on the lock the forked child holds"
        assert time.monotonic() - started_at < 30
        assert b.checkpoint_file_size() == 4
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        tb.join(10)
        a.close()
        b.close()
