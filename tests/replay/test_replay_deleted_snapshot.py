"""A run pins its snapshot by fingerprint; a snapshot row deleted below Sealbox (the table is append-only
for Sealbox) left a replay ending in ``error: no snapshot 'sha256:…' in this store``, which names neither
the run nor what happened, while an edited snapshot was refused as a store changed below Sealbox. A
missing recorded snapshot is now refused the same way, before anything is recorded, naming the run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.replay import Replayer
from sealbox.snapshot import Snapshot
from sealbox.store.base import DamagedEventError

SNAP = Snapshot(model={"provider": "openai", "name": "gpt-4o"}, system_prompt="Be careful.")


def agent(run):
    return run.call_tool("local", "add", {"a": 1}, lambda a: {"sum": 42})


@pytest.fixture
def recorded(tmp_path):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a", snapshot=SNAP) as run:
        agent(run)
    store.close()
    db = sqlite3.connect(path / "sealbox.db")
    db.execute("DROP TRIGGER snapshots_no_delete")
    db.execute("DELETE FROM snapshots WHERE fingerprint = ?", (SNAP.fingerprint,))
    db.commit()
    db.close()
    return path, run.run_id


def message(run_id: str) -> str:
    return (f"snapshot {SNAP.fingerprint} of run {run_id} is named by the run but not stored: the store was "
            "changed below Sealbox, and a replay serves only what was recorded; replay refused (run "
            "`sealbox verify`)")


def test_a_deleted_snapshot_refuses_the_replay_naming_the_run(recorded):
    path, run_id = recorded
    store = sealbox.open_store(path)
    try:
        before = len(store.runs())
        with pytest.raises(DamagedEventError) as caught:
            Replayer(store).replay(run_id, agent)
        assert str(caught.value) == message(run_id)
        assert len(store.runs()) == before
    finally:
        store.close()


def test_sealbox_replay_says_it_in_one_line(recorded, tmp_path):
    path, run_id = recorded
    (tmp_path / "replay_agent_mod.py").write_text(
        "def agent(run):\n    return run.call_tool('local', 'add', {'a': 1}, lambda a: {'sum': 42})\n")
    done = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "replay", run_id, "--agent",
                           "replay_agent_mod:agent", "--store", str(path)], capture_output=True, text=True,
                          cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {message(run_id)}\n")
