"""The store's folder, or its database file, removed or renamed while a run records: SQLite keeps
writing through the descriptors it holds, into a file no one will open again (removed) or one at
another path (renamed). A tool must not run on a tool.call committed there: the next write is refused
with one StoreError (RecordingError to the caller), nothing written, and so is every later one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _recording(path):
    store = sealbox.open_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="a").start()
    return store, run


def test_no_tool_runs_once_the_store_folder_is_removed(tmp_path):
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    store, run = _recording(path)
    ran = []
    assert run.call_tool("srv", "t", {"n": 0}, lambda n: ran.append(n) or n) == 0
    shutil.rmtree(path)
    for n in (1, 2):
        with pytest.raises(RecordingError) as caught:
            run.call_tool("srv", "t", {"n": n}, lambda n: ran.append(n) or n)
        assert str(caught.value) == (
            f"could not record: {path / 'sealbox.db'} was removed while this store had it open (its folder "
            "deleted or renamed, or the file itself): nothing was written, and nothing more is (open the store "
            "again where it is now)")
    assert ran == [0]
    with pytest.raises(RecordingError):
        run.end()
    store.close()


def test_no_tool_runs_once_the_store_folder_is_renamed_and_the_moved_store_verifies(tmp_path):
    path, moved = tmp_path / "s", tmp_path / "moved"
    sealbox.init_store(path).close()
    store, run = _recording(path)
    ran = []
    assert run.call_tool("srv", "t", {"n": 0}, lambda n: ran.append(n) or n) == 0
    os.rename(path, moved)
    with pytest.raises(RecordingError) as caught:
        run.call_tool("srv", "t", {"n": 1}, lambda n: ran.append(n) or n)
    assert "sealbox.db was removed while this store had it open" in str(caught.value)
    assert ran == [0]
    store.close()
    with sealbox.open_store(moved, readonly=True) as ro:
        assert [e.kind for e in ro.read_run(run.run_id)] == ["run.started", "tool.call", "policy.decision",
                                                              "tool.result"]
    done = subprocess.run([SEALBOX, "verify", str(moved)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


CHILD = r"""
import json, os, sys
import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
store = sealbox.open_store(sys.argv[1])
run = Recorder(store, policy=ALLOW_ALL).run(agent="a").start()
ran, errors = [], []
run.call_tool("srv", "t", {"n": 0}, lambda n: ran.append(n) or n)
os.unlink(os.path.join(sys.argv[1], "sealbox.db-wal"))
for n in (1, 2):
    try:
        run.call_tool("srv", "t", {"n": n}, lambda n: ran.append(n) or n)
    except sealbox.RecordingError as exc:
        errors.append(str(exc))
print(json.dumps({"run": run.run_id, "ran": ran, "errors": errors}), flush=True)
os._exit(0)  # the process dies without closing the store (a crash, a kill)
"""


def test_no_tool_runs_once_the_wal_file_is_removed_and_what_was_committed_before_is_kept(tmp_path):
    import json

    path = tmp_path / "s"
    sealbox.init_store(path).close()
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ran"] == [0]
    assert out["errors"] == [
        f"could not record: {path / 'sealbox.db-wal'} was removed while this store had it open: the events "
        "committed before it are copied into the database; nothing was written, and nothing more is (close "
        "the store and open it again)"] * 2
    with sealbox.open_store(path, readonly=True) as ro:
        assert [e.kind for e in ro.read_run(out["run"])] == ["run.started", "tool.call", "policy.decision",
                                                              "tool.result"]
    verified = subprocess.run([SEALBOX, "verify", str(path)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
