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
    acknowledged, problems = {}, []

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
        except sealbox.StoreError as exc:
            if "closed" not in str(exc):
                problems.append(repr(exc))
        except BaseException as exc:
            problems.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    time.sleep(0.4)
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
