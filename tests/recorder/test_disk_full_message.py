"""A tool call whose records cannot be written because no file may grow (a full disk; here a file-size
limit, RLIMIT_FSIZE with SIGXFSZ ignored, so SQLite's writes fail with EFBIG and it says only "disk
I/O error"): the tool does not run, the caller gets one RecordingError that says what to look at, and
once space returns the store takes writes again and verifies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import sealbox

CHILD = r"""
import json, os, resource, signal, sys
import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
store = sealbox.open_store(sys.argv[1])
run = Recorder(store, policy=ALLOW_ALL).run(agent="a").start()
ran, errors = [], []
run.call_tool("srv", "t", {"n": 0}, lambda n: ran.append(n) or n)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
wal = os.path.getsize(os.path.join(sys.argv[1], "sealbox.db-wal"))
resource.setrlimit(resource.RLIMIT_FSIZE, (wal, resource.RLIM_INFINITY))  # the files may not grow
try:
    run.call_tool("srv", "t", {"n": 1, "pad": "x" * 5000}, lambda n, pad: ran.append(n) or n)
except sealbox.RecordingError as exc:
    errors.append(str(exc))
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))  # space returns
run.call_tool("srv", "t", {"n": 2}, lambda n: ran.append(n) or n)
run.end()
store.close()
print(json.dumps({"ran": ran, "errors": errors, "run": run.run_id}))
"""


def test_a_call_that_cannot_be_recorded_for_lack_of_space_does_not_run_and_says_so(tmp_path):
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ran"] == [0, 2]
    assert out["errors"] == [
        f"could not record: cannot write to {path / 'sealbox.db'}: disk I/O error (SQLITE_IOERR_WRITE: the disk "
        "may be full, a file size limit reached, or the disk failing)"]
    with sealbox.open_store(path, readonly=True) as ro:
        assert [(c["arguments"]["n"], c["outcome"]) for c in ro.query_calls()] == [(0, "ok"), (2, "ok")]
    verified = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "verify", str(path)],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
