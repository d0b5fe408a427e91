"""The "every T seconds" checkpoint trigger also fires while the store is idle, and the policy is
validated (real SQLite files, read back with plain sqlite3)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

import sealbox
from sealbox import CheckpointPolicy, open_store, verify_store
from sealbox.errors import ConfigError
from sealbox.ledger.checkpoint import verify_checkpoint
from sealbox.store import StoreConfigError


def _checkpoint_rows(path: Path) -> list[tuple[int, str]]:
    db = sqlite3.connect(path / "sealbox.db")
    try:
        return db.execute("SELECT tree_size, note FROM checkpoints ORDER BY id").fetchall()
    finally:
        db.close()


def _until(cond, timeout: float = 30.0) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` seconds pass (a timer's signing is a write and an fsync:
    on a loaded machine it may come well after its due time)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _events(path: Path) -> int:
    db = sqlite3.connect(path / "sealbox.db")
    try:
        return db.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        db.close()


def test_idle_store_signs_the_due_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    vkey = (path / "log.vkey").read_text().strip()
    # every 3 s (was 1 s): the appends below that must NOT sign at once have to come within every_seconds of
    # the last checkpoint (init's, then the second note's); a loaded host stalling 1 s broke that
    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=1000, every_seconds=3))
    try:
        before = _checkpoint_rows(path)
        assert [size for size, _ in before] == [1]
        store.append(sealbox.EventDraft(kind="note", payload={"text": "written just before an idle period"}))
        assert _events(path) == 2
        # no append, no close: signed by the timer (about 3 s later; a fixed wait was not always enough)
        assert _until(lambda: [size for size, _ in _checkpoint_rows(path)] == [1, 2] and store._ckpt_timer.signed == 1)
        rows = _checkpoint_rows(path)
        signed = verify_checkpoint(rows[-1][1], vkey)  # a real signature by the log's key
        assert signed.size == 2
        assert (path / "checkpoint").read_text() == rows[-1][1]  # the checkpoint file follows
        assert store._ckpt_timer is not None and store._ckpt_timer.signed == 1
        # idle with nothing unsigned: no further checkpoint
        time.sleep(3.5)
        assert len(_checkpoint_rows(path)) == 2
        # more than every_seconds since the last checkpoint: the next append signs at once (as before);
        # the one after it is left to the timer
        store.append(sealbox.EventDraft(kind="note", payload={"text": "second"}))
        assert [size for size, _ in _checkpoint_rows(path)] == [1, 2, 3]
        store.append(sealbox.EventDraft(kind="note", payload={"text": "third"}))
        assert [size for size, _ in _checkpoint_rows(path)] == [1, 2, 3]
        assert _until(lambda: [size for size, _ in _checkpoint_rows(path)] == [1, 2, 3, 4] and store._ckpt_timer.signed == 2)
        timer = store._ckpt_timer
    finally:
        store.close()
    assert not timer._thread.is_alive()  # stopped by close
    assert [size for size, _ in _checkpoint_rows(path)] == [1, 2, 3, 4]  # close had nothing left to sign
    ro = open_store(path, readonly=True)
    try:
        assert verify_store(ro).ok
    finally:
        ro.close()


def test_timer_is_not_started_without_every_seconds(tmp_path: Path) -> None:
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=1000, every_seconds=None))
    try:
        store.append(sealbox.EventDraft(kind="note", payload={"text": "x"}))
        time.sleep(0.3)
        assert store._ckpt_timer is None
        assert [size for size, _ in _checkpoint_rows(path)] == [1]
    finally:
        store.close()
    assert [size for size, _ in _checkpoint_rows(path)] == [1, 2]  # clean close still signs


def test_close_right_after_append_stops_the_timer(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = sealbox.init_store(path, checkpoint_policy=CheckpointPolicy(every_events=1000, every_seconds=0.2))
    store.append(sealbox.EventDraft(kind="note", payload={"text": "x"}))
    timer = store._ckpt_timer
    store.close()
    assert timer is not None and not timer._thread.is_alive()
    sizes = [size for size, _ in _checkpoint_rows(path)]
    assert sizes == [1, 2]  # signed once (by close or the timer), never twice at one size


def test_two_stores_on_one_database_sign_each_size_once(tmp_path: Path) -> None:
    """Two writers (two store objects, as two processes would be) with a short interval, appending
    in bursts from several threads: every event ends up signed and no size is signed twice."""
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    pol = CheckpointPolicy(every_events=10**6, every_seconds=0.3)
    stores = [open_store(path, checkpoint_policy=pol) for _ in range(2)]
    errors: list[str] = []

    def writer(store, name: str) -> None:
        try:
            for i in range(20):
                store.append(sealbox.EventDraft(kind="note", payload={"text": f"{name} {i}"}))
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(stores[i % 2], f"w{i}")) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        # idle: each store's timer signs what it appended (a fixed 1 s was not always enough)
        assert _until(lambda: [size for size, _ in _checkpoint_rows(path)][-1] == 81)
        rows = _checkpoint_rows(path)
        sizes = [size for size, _ in rows]
        assert not errors
        assert sizes == sorted(set(sizes))
        assert sizes[-1] == _events(path) == 81
    finally:
        for s in stores:
            s.close()
    assert [size for size, _ in _checkpoint_rows(path)] == sizes  # nothing left for close
    ro = open_store(path, readonly=True)
    try:
        assert verify_store(ro).ok
    finally:
        ro.close()


@pytest.mark.parametrize("kwargs", [
    {"every_events": 0}, {"every_events": -1}, {"every_events": 1.5}, {"every_events": True},
    {"every_events": "10"}, {"every_seconds": 0}, {"every_seconds": -1.0}, {"every_seconds": float("nan")},
    {"every_seconds": float("inf")}, {"every_seconds": True}, {"every_seconds": "60"},
])
def test_checkpoint_policy_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(StoreConfigError) as info:
        CheckpointPolicy(**kwargs)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
    assert next(iter(kwargs)) in str(info.value)


def test_checkpoint_policy_accepts_none_and_positive_values() -> None:
    assert CheckpointPolicy(every_events=None, every_seconds=None).every_events is None
    assert CheckpointPolicy(every_events=1, every_seconds=0.001).every_seconds == 0.001
    assert CheckpointPolicy(every_seconds=5).every_seconds == 5


def test_open_store_refuses_a_policy_of_another_type(tmp_path: Path) -> None:
    path = tmp_path / "s"
    sealbox.init_store(path).close()
    with pytest.raises(StoreConfigError):
        open_store(path, checkpoint_policy={"every_events": 1})


def test_a_store_dropped_without_close_stops_its_timer(tmp_path: Path) -> None:
    import gc

    path = tmp_path / "s"
    sealbox.init_store(path).close()
    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=1000, every_seconds=0.2))
    store.append(sealbox.EventDraft(kind="note", payload={"text": "x"}))
    timer = store._ckpt_timer
    # signed by the timer, which then waits for the next append without holding the store
    assert _until(lambda: [size for size, _ in _checkpoint_rows(path)] == [1, 2] and timer.signed == 1)
    del store
    gc.collect()
    timer._thread.join(5)
    assert not timer._thread.is_alive()
