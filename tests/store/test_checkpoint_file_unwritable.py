"""The folder cannot take a new ``checkpoint`` file (made read-only, immutable, or full) while a run
records: the events an append committed are still an append made. A tool.call committed and then
reported as RecordingError leaves a call whose tool never ran shown as "outcome unknown" forever."""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

import sealbox
from sealbox import CheckpointPolicy
from sealbox.errors import StoreError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@contextmanager
def unwritable(folder: Path):
    """Make ``folder`` refuse new files for real: chmod for a plain user, ``chattr +i`` for root."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        try:
            yield
        finally:
            os.chmod(folder, 0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
        pytest.skip("running as root without a working chattr: cannot make a folder unwritable")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_call_is_made_and_its_result_recorded_while_the_checkpoint_file_cannot_be_written(tmp_path, caplog):
    sealbox.init_store(tmp_path / "s").close()
    store = sealbox.open_store(tmp_path / "s", checkpoint_policy=CheckpointPolicy(every_events=2, every_seconds=None))
    recorder = Recorder(store, policy=ALLOW_ALL)
    ran = []
    with recorder.run(agent="a") as run:
        with unwritable(tmp_path / "s"):
            for n in range(3):  # each append is due a checkpoint
                assert run.call_tool("srv", "t", {"n": n}, lambda n: ran.append(n) or n * 10) == n * 10
    assert ran == [0, 1, 2]
    assert "checkpoint not signed now" in caplog.text and "could not be written" in caplog.text
    store.close()
    with sealbox.open_store(tmp_path / "s", readonly=True) as ro:
        assert [(c["arguments"], c["outcome"]) for c in ro.query_calls()] == [
            ({"n": 0}, "ok"), ({"n": 1}, "ok"), ({"n": 2}, "ok")]
    done = subprocess.run([str(Path(os.sys.executable).parent / "sealbox"), "verify", str(tmp_path / "s")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_close_says_in_a_store_error_that_the_checkpoint_file_could_not_be_written(tmp_path):
    sealbox.init_store(tmp_path / "s").close()
    store = sealbox.open_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("srv", "t", {}, lambda: 1)
    with unwritable(tmp_path / "s"):
        with pytest.raises(StoreError) as caught:
            store.close()
    assert str(caught.value).startswith(f"{tmp_path / 's' / 'checkpoint'} could not be written (")
    # the checkpoint is signed and stored: the store opens and verifies
    sealbox.open_store(tmp_path / "s").close()
    done = subprocess.run([str(Path(os.sys.executable).parent / "sealbox"), "verify", str(tmp_path / "s")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_checkpoint_file_that_cannot_be_written_does_not_make_every_append_sign_one(tmp_path, caplog):
    """While the file cannot be written, checkpoints are still signed when due (every 6 events here),
    not on every append: each failed write used to leave the store thinking none was signed, so every
    later append signed (and fsync'd) another checkpoint row and logged another warning."""
    sealbox.init_store(tmp_path / "s").close()
    store = sealbox.open_store(tmp_path / "s", checkpoint_policy=CheckpointPolicy(every_events=6, every_seconds=None))
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        with unwritable(tmp_path / "s"):
            for n in range(10):  # 2 appends a call (tool.call + policy.decision, tool.result): 32 events
                run.call_tool("srv", "t", {"n": n}, lambda n: n)
        signed = [c.tree_size for c in store.checkpoints()]
        assert signed == [1, 7, 13, 19, 25, 31]
        assert caplog.text.count("could not be written") == 5
        run.call_tool("srv", "t", {"n": 10}, lambda n: n)  # 35 events: none due
    store.close()  # signs the final one (36 events, run.ended included) and writes the file
    with sealbox.open_store(tmp_path / "s", readonly=True) as ro:
        assert [c.tree_size for c in ro.checkpoints()] == [1, 7, 13, 19, 25, 31, 36]
        assert ro.checkpoint_file_size() == 36
