"""docs/storage.md, "Backing up a store": the procedure it gives, run word for word (the shell lines)
while another process records tool calls and signs checkpoints every few events, gives a folder that
`sealbox verify --key` passes, holding every event up to the copy's checkpoint and more. Copying the
checkpoint file after the database instead (or `cp` of the database) is what the order is there for."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sealbox

BIN = Path(sys.executable).parent

WRITER = r"""
import os, sys
import sealbox
from sealbox import CheckpointPolicy
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
store = sealbox.open_store(sys.argv[1], checkpoint_policy=CheckpointPolicy(every_events=4, every_seconds=None))
n = 0
with Recorder(store, policy=ALLOW_ALL).run(agent="writer") as run:
    while not os.path.exists(sys.argv[2]):
        run.call_tool("srv", "t", {"n": n, "pad": "x" * 700}, lambda n, pad: n)
        n += 1
        if n == 20:
            open(sys.argv[3], "w").close()
store.close()
"""

SQLITE_CLI = 'sqlite3 -readonly .sealbox/sealbox.db ".backup \'BACKUP/sealbox.db\'"'
VACUUM_INTO = 'sqlite3 -readonly .sealbox/sealbox.db "VACUUM INTO \'BACKUP/sealbox.db\'"'
PYTHON_BACKUP = ('python3 -c "import sqlite3, sys; s, d = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2]); '
                 's.backup(d); d.close(); s.close()" .sealbox/sealbox.db BACKUP/sealbox.db')


def _docs() -> str:
    return (Path(__file__).resolve().parents[2] / "docs" / "storage.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("copy", [SQLITE_CLI, VACUUM_INTO, PYTHON_BACKUP], ids=["sqlite3-cli", "vacuum-into", "python"])
def test_the_documented_backup_of_a_store_being_written_verifies(tmp_path, copy):
    if copy.startswith("sqlite3") and shutil.which("sqlite3") is None:
        pytest.skip("no sqlite3 command-line shell on this machine")
    docs = _docs()
    for line in ("umask 077 && mkdir BACKUP", "cp .sealbox/checkpoint .sealbox/log.vkey BACKUP/", copy,
                 "sealbox verify BACKUP --key BACKUP/log.vkey"):
        assert line in docs, line
    sealbox.init_store(tmp_path / ".sealbox").close()
    stop, started = tmp_path / "stop", tmp_path / "started"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / ".sealbox"), str(stop), str(started)])
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    try:
        while not started.exists():
            assert writer.poll() is None
            time.sleep(0.05)
        for _ in range(3):  # three backups while the writer appends and signs
            shutil.rmtree(tmp_path / "BACKUP", ignore_errors=True)
            script = "\n".join(["set -e", "umask 077 && mkdir BACKUP", "cp .sealbox/checkpoint .sealbox/log.vkey BACKUP/",
                                copy.replace("python3", sys.executable)])
            subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, check=True)
            assert (tmp_path / "BACKUP" / "sealbox.db").stat().st_mode & 0o777 == 0o600
            done = subprocess.run(["sealbox", "verify", "BACKUP", "--key", "BACKUP/log.vkey"], cwd=tmp_path, env=env,
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
            assert done.stdout.startswith("Verified: the log is intact."), done.stdout
    finally:
        stop.touch()
        writer.wait(timeout=120)
    assert writer.returncode == 0
    with sealbox.open_store(tmp_path / "BACKUP", readonly=True) as backup, \
            sealbox.open_store(tmp_path / ".sealbox", readonly=True) as live:
        copied = backup.size()
        assert copied >= 2 + 20 * 3  # init's event, run.started, the 20 calls made before the first backup
        assert backup.root() == live.root(copied)  # the copy is the live log's prefix
        assert copied >= backup.latest_checkpoint().tree_size
