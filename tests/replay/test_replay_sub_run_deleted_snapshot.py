"""A sub-agent run whose pinned snapshot was deleted below Sealbox still replayed as "reproduced": its snapshot
was compared by fingerprint only (the replay's sub-agent run names the same one), its content never read,
while the parent in the same situation is refused as a changed store. Every sub-agent run's snapshot is now
read before the replay starts, as the parent's is: the replay is refused, naming the sub-agent run, and
nothing is recorded."""

from __future__ import annotations

import sqlite3

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.replay import Replayer
from sealbox.snapshot import Snapshot
from sealbox.store.base import DamagedEventError

BOSS = Snapshot(model={"provider": "openai", "name": "gpt-4o"}, system_prompt="Lead.")
MAILER = Snapshot(model={"provider": "openai", "name": "gpt-4o-mini"}, system_prompt="Send mail.")
GRUNT = Snapshot(model={"provider": "openai", "name": "gpt-4o-mini"}, system_prompt="Fetch.")


def agent(run):
    run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
    with run.recorder.run(agent="mailer", principal="agent:mailer", snapshot=MAILER) as sub:
        sub.call_tool("mail", "send", {"to": "a@example.com"}, lambda to: "sent")
        with sub.recorder.run(agent="grunt", principal="agent:grunt", snapshot=GRUNT) as leaf:
            leaf.call_tool("db", "get", {"k": 1}, lambda k: "v")


def record(tmp_path, deleted):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss", snapshot=BOSS) as run:
        agent(run)
    runs = {r["agent"]: r["run_id"] for r in store.query_runs()}
    store.close()
    if deleted is not None:
        db = sqlite3.connect(path / "sealbox.db")
        db.execute("DROP TRIGGER snapshots_no_delete")
        db.execute("DELETE FROM snapshots WHERE fingerprint = ?", (deleted.fingerprint,))
        db.commit()
        db.close()
    return path, runs


@pytest.mark.parametrize("deleted, whose", [(MAILER, "mailer"), (GRUNT, "grunt"), (BOSS, "boss")])
def test_a_deleted_snapshot_of_any_run_in_the_tree_refuses_the_replay(tmp_path, deleted, whose):
    path, runs = record(tmp_path, deleted)
    store = sealbox.open_store(path)
    try:
        before = len(store.runs())
        with pytest.raises(DamagedEventError) as caught:
            Replayer(store).replay(runs["boss"], agent)
        assert str(caught.value) == (
            f"snapshot {deleted.fingerprint} of run {runs[whose]} is named by the run but not stored: the store "
            "was changed below Sealbox, and a replay serves only what was recorded; replay refused (run "
            "`sealbox verify`)")
        assert len(store.runs()) == before  # nothing recorded
    finally:
        store.close()


def test_with_every_snapshot_stored_the_tree_reproduces(tmp_path):
    path, runs = record(tmp_path, None)
    store = sealbox.open_store(path)
    try:
        result = Replayer(store).replay(runs["boss"], agent)
        assert result.reproduced, result.divergence
    finally:
        store.close()
