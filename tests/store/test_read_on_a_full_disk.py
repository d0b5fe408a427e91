"""A full disk (here a file-size limit: RLIMIT_FSIZE, SIGXFSZ ignored, so writes fail with EFBIG)
must not stop an operator from reading and verifying a store that no writer has open: SQLite could
not create the `-shm` index a WAL-mode reader normally makes, and every reading command said only
`error: cannot open …/sealbox.db: disk I/O error`. With no `-wal` holding commits, the database
file is the whole store, and readers open it as an immutable file instead."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _no_room():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))


def _sealbox(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, preexec_fn=_no_room, timeout=120)


def test_verify_runs_and_calls_read_a_closed_store_when_no_file_can_grow(tmp_path):
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    store = sealbox.open_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("srv", "t", {"n": 1}, lambda n: n)
    store.close()
    assert sorted(p.name for p in path.iterdir()) == ["checkpoint", "log.key", "log.vkey", "runs.lock", "sealbox.db"]
    verified = _sealbox("verify", str(path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("Verified: the log is intact. 6 events in 2 runs"), verified.stdout
    calls = _sealbox("calls", "-s", str(path), "--json")
    assert calls.returncode == 0, calls.stderr
    assert [c["arguments"] for c in json.loads(calls.stdout)] == [{"n": 1}]
    listed = _sealbox("runs", "list", "-s", str(path), "--json")
    assert listed.returncode == 0, listed.stderr
    assert run.run_id in listed.stdout
    # a writer still cannot: one line, no traceback
    added = _sealbox("identities", "add", "bob", "--role", "approver", "-s", str(path))
    assert added.returncode != 0 and added.stderr.startswith("error: ") and "Traceback" not in added.stderr
