"""Crash safety: a writer killed with SIGKILL at random moments never loses an acknowledged event.

One store is reused across every iteration. Each iteration starts a child
process that opens the store, starts a new run and appends in a loop (single
events, two-event atomic appends, content large enough to become blobs, repeated
content that is deduplicated), printing every event *after* ``append`` returned.
The parent kills it with SIGKILL 20-200 ms after its first acknowledgement, then
opens the store, verifies it and checks that every acknowledged event is there
with the same run_seq and leaf index.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sealbox
from sealbox import CheckpointPolicy, open_store, verify_store

KILLS = 50
EXTRA_EARLY_KILLS = 6  # killed while importing / opening, before any acknowledgement

CHILD = r'''
import os, random, sys
from sealbox import CheckpointPolicy, EventDraft, open_store
from sealbox.store.base import new_run_id

path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=25, every_seconds=3600))
run = new_run_id()
who = "agent:crash"
FP = "sha256:" + "cd" * 32
SHARED = {"doc": "the same long document, resent every turn " * 40}

def ack(events):
    os.write(1, "".join(f"{e.run_id} {e.run_seq} {e.leaf_index}\n" for e in events).encode())

ack(store.append(EventDraft("run.started", {"agent": "crash", "snapshot": None, "parent_run_id": None,
    "labels": {"seed": str(seed)}, "policy": {"fingerprint": FP, "name": None}}, run_id=run, principal=who)))
i = 0
while True:
    i += 1
    r = rng.random()
    call = f"c{i}"
    if r < 0.35:
        drafts = EventDraft("note", {"text": f"note {i}"}, run_id=run, principal=who)
    elif r < 0.75:
        args = {"blob": os.urandom(400).hex()} if rng.random() < 0.5 else {"i": i}
        drafts = [
            EventDraft("tool.call", {"call_id": call, "server": "s", "tool": "t", "exposed": "s__t",
                                     "arguments": args, "grant": f"implicit:{who}"}, run_id=run, principal=who),
            EventDraft("policy.decision", {"call_id": call, "effect": "allow", "reason_code": "ok", "rule": None,
                                           "reason": "ok", "policy_fingerprint": FP, "eval_us": 1},
                       run_id=run, principal=who),
        ]
    else:
        result = SHARED if rng.random() < 0.5 else {"data": os.urandom(600).hex()}
        drafts = EventDraft("tool.result", {"call_id": call, "ok": True, "result": result, "duration_us": 5},
                            run_id=run, principal=who)
    ack(store.append(drafts))
'''


class Child:
    """A writer process and a thread collecting its acknowledgements."""

    def __init__(self, script: Path, store: Path, seed: int) -> None:
        self.proc = subprocess.Popen([sys.executable, str(script), str(store), str(seed)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.acks: list[tuple[str, int, int]] = []
        self.first = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for line in complete:
                run_id, run_seq, leaf = line.decode().split()
                self.acks.append((run_id, int(run_seq), int(leaf)))
                self.first.set()
        self.first.set()  # EOF: do not leave the parent waiting

    def kill(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc, err


def stored_events(path: Path) -> dict[int, tuple[str, int]]:
    store = open_store(path, readonly=True)
    try:
        return {e.leaf_index: (e.run_id, e.run_seq) for e in store.read_range(0, store.size())}
    finally:
        store.close()


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_event(tmp_path: Path) -> None:
    path = tmp_path / "store"
    sealbox.init_store(path, checkpoint_policy=CheckpointPolicy(every_events=25)).close()
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    rng = random.Random(20261129)
    acked: dict[int, tuple[str, int]] = {}
    kills_after_ack = 0
    started = time.monotonic()
    schedule = ["ack"] * KILLS + ["early"] * EXTRA_EARLY_KILLS
    rng.shuffle(schedule)

    for n, mode in enumerate(schedule):
        child = Child(script, path, seed=n)
        if mode == "ack":
            assert child.first.wait(timeout=60), "the writer never acknowledged an event"
            if child.proc.poll() is not None:  # it died by itself
                rc, err = child.kill()
                pytest.fail(f"iteration {n}: the writer exited with {rc} before being killed:\n{err}")
            time.sleep(rng.uniform(0.020, 0.200))
        else:
            time.sleep(rng.uniform(0.0, 0.4))
        rc, err = child.kill()
        assert rc == -signal.SIGKILL, f"iteration {n}: the writer exited with {rc} on its own:\n{err}"
        if mode == "ack":
            kills_after_ack += 1
            assert child.acks, f"iteration {n}: no acknowledgement collected"

        for run_id, run_seq, leaf in child.acks:
            assert leaf not in acked, f"leaf {leaf} acknowledged twice"
            acked[leaf] = (run_id, run_seq)
        runs = {r for r, _, _ in child.acks}
        assert len(runs) <= 1

        # the store opens for writing after the crash, verifies clean and holds every acknowledged event
        store = open_store(path)
        try:
            report = verify_store(store)
            assert report.ok, f"iteration {n} ({mode}): " + "; ".join(p.line() for p in report.problems)
            size = store.size()
            if child.acks:
                run_id = child.acks[0][0]
                seqs = [e.run_seq for e in store.read_run(run_id)]
                assert seqs == list(range(1, len(seqs) + 1))
                assert len(seqs) >= len(child.acks)
        finally:
            store.close()  # signs a checkpoint covering what the dead writer committed
        stored = stored_events(path)
        assert len(stored) == size and sorted(stored) == list(range(size))
        missing = {leaf: want for leaf, want in acked.items() if stored.get(leaf) != want}
        assert not missing, f"iteration {n}: acknowledged events lost or moved: {sorted(missing.items())[:5]}"

    leftovers = sorted(x.name for x in path.iterdir() if ".tmp." in x.name)
    print(f"{kills_after_ack} kills after an ack, {len(acked)} events acknowledged, {len(stored)} stored, "
          f"{time.monotonic() - started:.1f} s; temp files left by kills: {leftovers}")
    assert kills_after_ack >= 50
    assert len(acked) > 500, f"only {len(acked)} events acknowledged in {kills_after_ack} kills"
    final = open_store(path, readonly=True)
    try:
        report = verify_store(final)
        assert report.ok
        assert report.tree_size_signed == final.size()  # the last close signed everything
        assert report.blobs > 0 and report.checkpoints > KILLS
    finally:
        final.close()
