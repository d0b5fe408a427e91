"""Closing a store while other threads are still appending and reading (real SQLite files).

Before, close() closed every thread's connection while other threads were using them: the
interpreter crashed (SIGSEGV) in most runs, or a raw sqlite3.ProgrammingError escaped (a
fresh-clone break test). Now close() lets the writes and read snapshots under way finish,
refuses new ones with StoreError, and every event a writer was told is stored is there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(r'''
    import sys, threading, time
    import sealbox
    from sealbox import EventDraft
    from sealbox.store.base import new_run_id

    store = sealbox.init_store(sys.argv[1], durability=sys.argv[2])
    acknowledged, problems, reads = {}, [], [0]

    def writer(k):
        run = new_run_id()
        store.append(EventDraft("run.started", {"agent": f"w{k}", "snapshot": None, "parent_run_id": None,
                                                "labels": {}, "policy": {"fingerprint": "sha256:" + "ab" * 32,
                                                                         "name": None}},
                                run_id=run, principal=f"agent:w{k}"))
        acknowledged[run] = 0
        try:
            while True:
                store.append(EventDraft("note", {"text": f"{acknowledged[run]} " + "x" * 2000}, run_id=run,
                                        principal="investigator"))
                acknowledged[run] += 1
        except sealbox.StoreError as exc:
            if "closed" not in str(exc):
                problems.append(repr(exc))
        except BaseException as exc:  # anything else is a defect
            problems.append(repr(exc))

    def reader():
        try:
            while True:
                store.size()
                store.query_calls(limit=5)
                reads[0] += 1
        except sealbox.StoreError as exc:
            if "closed" not in str(exc):
                problems.append(repr(exc))
        except BaseException as exc:
            problems.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    # close while every thread is in its loop (not after a fixed delay: on a loaded host the threads could
    # still be starting, the close would then race nothing and a writer's first append fail unexpectedly)
    deadline = time.monotonic() + 120
    while len(acknowledged) < 6 or min(acknowledged.values()) < 3 or reads[0] < 3:
        assert time.monotonic() < deadline and not problems, (acknowledged, reads, problems)
        time.sleep(0.01)
    store.close()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread did not stop"
    assert not problems, problems
    with sealbox.open_store(sys.argv[1], readonly=True) as s:
        for run, count in acknowledged.items():
            notes = s.read_run(run)[1:]
            assert len(notes) == count, (run, len(notes), count)
            assert [int(e.payload["text"].split(" ")[0]) for e in notes] == list(range(count))
        report = sealbox.verify_store(s)
        assert report.ok, report.summary()
        print("ok", sum(acknowledged.values()))
''')


def test_close_while_six_threads_append_and_one_reads(tmp_path: Path) -> None:
    script = tmp_path / "close_race.py"
    script.write_text(SCRIPT)
    for attempt, durability in enumerate(["full", "fast", "full", "fast"]):
        proc = subprocess.run([sys.executable, str(script), str(tmp_path / f"s{attempt}"), durability],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, (durability, proc.returncode, proc.stdout, proc.stderr[-3000:])
        assert proc.stdout.startswith("ok "), proc.stdout
        assert int(proc.stdout.split()[1]) > 0


READERS_SCRIPT = textwrap.dedent(r'''
    import sys, threading, time
    import sealbox
    from sealbox import EventDraft
    from sealbox.approvals import list_approvals
    from sealbox.store.base import new_run_id

    path = sys.argv[1]
    store = sealbox.init_store(path, durability="fast")
    run = new_run_id()
    store.append([EventDraft("run.started", {"agent": "a", "snapshot": None, "parent_run_id": None, "labels": {},
                                             "policy": {"fingerprint": "sha256:" + "ab" * 32, "name": None}},
                             run_id=run, principal="agent:a")]
                 + [EventDraft("note", {"text": f"n{i} " + "x" * 300}, run_id=run, principal="investigator")
                    for i in range(4000)])
    problems, stopped, rounds = [], [], {}

    def loop(name, fn):
        me = threading.get_ident()
        rounds[me] = 0
        try:
            while True:
                fn()
                rounds[me] += 1
        except sealbox.StoreError as exc:
            (stopped if "closed" in str(exc) else problems).append((name, str(exc)))
        except BaseException as exc:  # noqa: BLE001
            problems.append((name, repr(exc)))

    def consume_rows():
        for _ in store.iter_rows(batch=50):
            pass

    def consume_nodes():
        for _ in store.iter_nodes():
            pass

    jobs = {"approvals": lambda: list_approvals(store), "reader": lambda: store.reader().events(["note"], run_id=run),
            "iter_rows": consume_rows, "iter_nodes": consume_nodes, "size": store.size}
    threads = [threading.Thread(target=loop, args=(n, f)) for n, f in jobs.items() for _ in range(2)]
    paused = store.iter_rows(batch=10)
    next(paused)  # a generator left paused on this thread: close() must not wait for it
    for t in threads:
        t.start()
    # close while every reader is in its loop, whatever the host's load (was a fixed 0.4 s)
    deadline = time.monotonic() + 120
    while len(rounds) < len(threads) or min(rounds.values()) < 2:
        assert time.monotonic() < deadline and not problems, (rounds, problems)
        time.sleep(0.01)
    closers = [threading.Thread(target=store.close) for _ in range(2)]
    for t in closers:
        t.start()
    for t in closers + threads:
        t.join(60)
    assert not any(t.is_alive() for t in closers + threads), "a thread did not stop"
    assert store._closed and not problems, problems
    assert len(stopped) == len(threads), stopped
    for _ in range(2):
        try:
            for _ in paused:
                pass
            raise AssertionError("a paused generator went on after close")
        except sealbox.StoreError as exc:
            assert "closed" in str(exc), exc
        paused = store.iter_nodes()
    with sealbox.open_store(path, readonly=True) as s:
        assert s.size() == 4002 and sealbox.verify_store(s).ok
    print("ok")
''')


def test_close_while_readers_listings_and_generators_run(tmp_path: Path) -> None:
    """Readers of every kind (a Reader from store.reader(), approval listings, iter_* generators being
    consumed) on other threads while two threads call close(): the interpreter crashed with SIGSEGV
    or a raw sqlite3.ProgrammingError escaped (a second break test)."""
    script = tmp_path / "readers.py"
    script.write_text(READERS_SCRIPT)
    for attempt in range(3):
        proc = subprocess.run([sys.executable, str(script), str(tmp_path / f"s{attempt}")],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stdout, proc.stderr[-3000:])


def test_close_inside_an_append_callback_is_refused_and_the_store_goes_on(tmp_path: Path) -> None:
    import pytest

    import sealbox
    from sealbox import EventDraft
    from sealbox.store.base import new_run_id

    store = sealbox.init_store(tmp_path / "s")
    run = new_run_id()
    store.append(EventDraft("run.started", {"agent": "a", "snapshot": None, "parent_run_id": None, "labels": {},
                                            "policy": {"fingerprint": "sha256:" + "ab" * 32, "name": None}},
                            run_id=run, principal="agent:a"))

    def build(reader):
        store.close()
        return [EventDraft("note", {"text": "never"}, run_id=run, principal="investigator")]

    with pytest.raises(sealbox.StoreError, match="inside a write or a read"):
        store.append_with(build)
    with pytest.raises(sealbox.StoreError, match="inside a write or a read"):
        with store.read_snapshot():
            store.close()
    assert store.size() == 2  # nothing written, still open
    store.append(EventDraft("note", {"text": "after"}, run_id=run, principal="investigator"))
    store.close()
    with sealbox.open_store(tmp_path / "s", readonly=True) as s:
        assert [e.kind for e in s.read_run(run)] == ["run.started", "note"] and sealbox.verify_store(s).ok
