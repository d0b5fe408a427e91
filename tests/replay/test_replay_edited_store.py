"""Replay serves only what was recorded: a recorded run whose events were changed below Sealbox
(its SQLite rows edited, an event removed) is refused, never served as if it were the record."""

from __future__ import annotations

import sqlite3

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.replay import Replayer
from sealbox.errors import StoreError
from sealbox.store.base import DamagedEventError


def agent(run):
    run.complete({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                 lambda r: {"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
                 provider="openai", model="m")
    return run.call_tool("local", "add", {"a": 1}, lambda a: {"sum": 42})


@pytest.fixture
def recorded(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        agent(run)
    store.close()
    return tmp_path / "store", run.run_id


def _edit(path, sql, *args):
    db = sqlite3.connect(path / "sealbox.db")
    db.execute("DROP TRIGGER IF EXISTS events_no_update")
    db.execute("DROP TRIGGER IF EXISTS events_no_delete")
    db.execute(sql, args)
    db.commit()
    db.close()


def _leaf(path, run_id, kind):
    db = sqlite3.connect(path / "sealbox.db")
    row = db.execute("SELECT leaf_index, raw FROM events WHERE run_id = ? AND kind = ?", (run_id, kind)).fetchone()
    db.close()
    return row


def test_an_edited_tool_result_is_not_served(recorded):
    path, run_id = recorded
    leaf, raw = _leaf(path, run_id, "tool.result")
    _edit(path, "UPDATE events SET raw = ? WHERE leaf_index = ?", raw.replace(b'"sum":42', b'"sum":43'), leaf)
    store = sealbox.open_store(path)
    try:
        before = len(store.runs())
        with pytest.raises(DamagedEventError) as caught:
            Replayer(store).replay(run_id, agent)
        assert str(caught.value) == (
            f"the event at leaf {leaf} (run {run_id}, run_seq 5, tool.result) no longer hashes to its recorded "
            "leaf hash: the store was changed below Sealbox, and a replay serves only what was recorded; "
            "replay refused (run `sealbox verify`)")
        assert len(store.runs()) == before  # no replay run was started
    finally:
        store.close()


def test_an_edited_leaf_hash_as_well_breaks_the_chain(recorded):
    path, run_id = recorded
    leaf, raw = _leaf(path, run_id, "tool.result")
    from sealbox.ledger import merkle

    new = raw.replace(b'"sum":42', b'"sum":43')
    _edit(path, "UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = ?", new, merkle.leaf_hash(new), leaf)
    store = sealbox.open_store(path)
    try:
        with pytest.raises(DamagedEventError) as caught:
            Replayer(store).replay(run_id, agent)
        assert str(caught.value) == (
            f"the event at leaf {leaf + 1} (run {run_id}, run_seq 6, run.ended) does not chain to the run's previous "
            "event (its prev is not that event's leaf hash): the store was changed below Sealbox, and a replay "
            "serves only what was recorded; replay refused (run `sealbox verify`)")
    finally:
        store.close()


def test_a_removed_event_breaks_the_chain(recorded):
    path, run_id = recorded
    leaf, _ = _leaf(path, run_id, "tool.result")
    _edit(path, "DELETE FROM events WHERE leaf_index = ?", leaf)
    store = sealbox.open_store(path)
    try:
        with pytest.raises(DamagedEventError) as caught:
            Replayer(store).replay(run_id, agent)
        assert str(caught.value) == (
            f"the event at leaf {leaf + 1} (run {run_id}, run_seq 6, run.ended) does not chain to the run's previous "
            "event (its run_seq does not follow it): the store was changed below Sealbox, and a replay serves only "
            "what was recorded; replay refused (run `sealbox verify`)")
    finally:
        store.close()


def test_the_cli_says_so_in_one_line(recorded, tmp_path, monkeypatch, capsys):
    path, run_id = recorded
    leaf, raw = _leaf(path, run_id, "tool.result")
    _edit(path, "UPDATE events SET raw = ? WHERE leaf_index = ?", raw.replace(b'"sum":42', b'"sum":43'), leaf)
    (tmp_path / "edited_agent.py").write_text("def agent(run):\n    return run.call_tool('local', 'add', {'a': 1}, "
                                              "lambda a: {'sum': 42})\n")
    monkeypatch.chdir(tmp_path)
    from sealbox.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["replay", "--store", str(path), run_id, "--agent", "edited_agent:agent"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the event at leaf {leaf} (run {run_id}, run_seq 5, tool.result) no longer hashes")
    assert "Traceback" not in err and err.count("\n") == 1


BIG = "x" * 2000


def big_agent(run):
    return run.call_tool("local", "fetch", {"url": "https://example.com"}, lambda url: {"body": BIG})


def test_an_edited_blob_is_not_served(tmp_path):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        big_agent(run)
    ref = next(e.payload["result"]["body"]["$blob"] for e in store.read_run(run.run_id) if e.kind == "tool.result")
    store.close()
    db = sqlite3.connect(path / "sealbox.db")
    content = db.execute("SELECT content FROM blobs WHERE ref = ?", (ref,)).fetchone()[0]
    db.execute("DROP TRIGGER IF EXISTS blobs_erase_only")
    db.execute("UPDATE blobs SET content = ? WHERE ref = ?", (bytes(content).replace(b"xxx", b"yyy", 1), ref))
    db.commit()
    db.close()
    store = sealbox.open_store(path)
    try:
        before = len(store.runs())
        with pytest.raises(DamagedEventError) as caught:
            Replayer(store).replay(run.run_id, big_agent)
        assert str(caught.value) == (
            f"blob {ref} of run {run.run_id} no longer matches its commitment: the store "
            "was changed below Sealbox, and a replay serves only what was recorded; replay refused (run "
            "`sealbox verify`)")
        assert len(store.runs()) == before
    finally:
        store.close()


def test_an_edited_snapshot_is_not_compared_as_the_recorded_one(tmp_path):
    from sealbox.snapshot import Snapshot

    path = tmp_path / "store"
    store = sealbox.init_store(path)
    snap = Snapshot(model={"provider": "openai", "name": "gpt-4o"}, system_prompt="Be careful.")
    with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a", snapshot=snap) as run:
        agent(run)
    fp = store.read_run(run.run_id)[0].payload["snapshot"]
    now = {**snap.to_dict(), "system_prompt": "Be reckless."}
    store.close()
    from sealbox.canonical import canonical_bytes

    db = sqlite3.connect(path / "sealbox.db")
    db.execute("DROP TRIGGER snapshots_no_update")
    db.execute("UPDATE snapshots SET content = ? WHERE fingerprint = ?", (canonical_bytes(now), fp))
    db.commit()
    db.close()
    store = sealbox.open_store(path)
    try:
        with pytest.raises(StoreError) as caught:  # the store reads no snapshot changed below it
            Replayer(store).replay(run.run_id, agent, snapshot=now)
        assert str(caught.value) == (f"snapshot {fp} no longer hashes to its fingerprint: the store was changed "
                                     "below Sealbox (run `sealbox verify`)")
    finally:
        store.close()
