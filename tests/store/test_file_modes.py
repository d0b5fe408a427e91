"""The files ``init`` creates, and their modes: ``sealbox.db`` holds the store secret (the HMAC key
behind every redaction marker), so it is the owner's only, as ``log.key`` is; SQLite gives its
``-wal``/``-shm`` files the database's mode. ``log.vkey`` and ``checkpoint`` are public. Real
stores, real files, the real ``sealbox`` command."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest
from store_testkit import SEALBOX

import sealbox
from sealbox.errors import StoreError
from sealbox.recorder import Recorder
from sealbox import policies


def _modes(folder: Path) -> dict[str, str]:
    return {p.name: oct(stat.S_IMODE(p.lstat().st_mode)) for p in sorted(folder.iterdir())}


def _umask(mask: int):
    class _Ctx:
        def __enter__(self):
            self.old = os.umask(mask)

        def __exit__(self, *exc):
            os.umask(self.old)

    return _Ctx()


def _record_one_call(store) -> None:
    rec = Recorder(store, policy=policies.ALLOW_ALL)
    with rec.run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "read_query", {"password": "hunter2"}, lambda **kw: [[1]])


@pytest.mark.parametrize("mask, public", [(0o022, "0o644"), (0o002, "0o644"), (0o000, "0o644"), (0o077, "0o600")])
def test_init_creates_the_database_and_its_wal_and_shm_owner_only_whatever_the_umask(tmp_path, mask, public):
    with _umask(mask):
        store = sealbox.init_store(tmp_path / "st")
        try:
            _record_one_call(store)
            # while the store is open, SQLite's -wal and -shm exist, with the database's mode
            # (runs.lock: the run liveness lock file a run's start creates, owner only too)
            assert _modes(tmp_path / "st") == {"checkpoint": public, "log.key": "0o600", "log.vkey": public,
                                               "runs.lock": "0o600", "sealbox.db": "0o600",
                                               "sealbox.db-shm": "0o600", "sealbox.db-wal": "0o600"}
        finally:
            store.close()
    assert _modes(tmp_path / "st") == {"checkpoint": public, "log.key": "0o600", "log.vkey": public,
                                       "runs.lock": "0o600", "sealbox.db": "0o600"}
    # the secret the mode protects is in that file
    with sqlite3.connect(tmp_path / "st" / "sealbox.db") as conn:
        assert len(conn.execute("SELECT * FROM store_secret").fetchone()[1]) == 32


def test_sealbox_init_on_the_command_line_and_verify_say_nothing_new(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
    proc = subprocess.run([str(SEALBOX), "init", str(tmp_path / "st")], capture_output=True, text=True, env=env,
                          preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith(f"Created a Sealbox store in {tmp_path / 'st'}\n")
    assert _modes(tmp_path / "st") == {"checkpoint": "0o644", "log.key": "0o600", "log.vkey": "0o644",
                                       "sealbox.db": "0o600"}
    proc = subprocess.run([str(SEALBOX), "verify", str(tmp_path / "st")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("Verified: the log is intact.")
    assert len(proc.stdout.splitlines()) == 1


def test_a_store_made_before_with_a_world_readable_database_opens_and_verifies_as_before(tmp_path):
    """No warning is added: docs/storage.md says to chmod 600 such a store's sealbox.db*."""
    sealbox.init_store(tmp_path / "st").close()
    os.chmod(tmp_path / "st" / "sealbox.db", 0o644)
    store = sealbox.open_store(tmp_path / "st")
    try:
        _record_one_call(store)
    finally:
        store.close()
    assert _modes(tmp_path / "st")["sealbox.db"] == "0o644"  # opening changes no mode
    proc = subprocess.run([str(SEALBOX), "verify", str(tmp_path / "st")], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "" and len(proc.stdout.splitlines()) == 1


def test_init_into_a_folder_holding_a_signing_key_is_refused_and_writes_nothing(tmp_path):
    folder = tmp_path / "st"
    folder.mkdir()
    (folder / "log.key").write_text("someone's key\n")
    with pytest.raises(StoreError) as exc:
        sealbox.init_store(folder)
    assert str(exc.value) == (f"{folder} holds a log.key (a signing key) but no sealbox.db: init does not overwrite "
                              "a key; move it away, or create the store in another folder")
    assert sorted(p.name for p in folder.iterdir()) == ["log.key"]
    assert (folder / "log.key").read_text() == "someone's key\n"
    # on the command line: one error line, exit 2 (it was an internal error: FileExistsError, exit 70)
    proc = subprocess.run([str(SEALBOX), "init", str(folder)], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: {exc.value}\n"


def test_init_never_creates_the_database_through_a_symbolic_link(tmp_path):
    folder, target = tmp_path / "st", tmp_path / "elsewhere.db"
    folder.mkdir()
    (folder / "sealbox.db").symlink_to(target)  # dangling: exists() is False
    with pytest.raises(StoreError) as exc:
        sealbox.init_store(folder)
    assert str(exc.value) == (f"{folder / 'sealbox.db'} is a symbolic link to a missing file: init does not create "
                              "a store through it")
    assert not target.exists() and not os.path.lexists(target)
    assert sorted(p.name for p in folder.iterdir()) == ["sealbox.db"]


def test_init_into_an_existing_empty_folder_keeps_the_folder_mode(tmp_path):
    folder = tmp_path / "st"
    folder.mkdir(mode=0o750)
    os.chmod(folder, 0o750)
    sealbox.init_store(folder).close()
    assert oct(stat.S_IMODE(folder.stat().st_mode)) == "0o750"
    assert _modes(folder)["sealbox.db"] == "0o600"


@pytest.mark.parametrize("leftover, as_link", [("sealbox.db-shm", True), ("sealbox.db-wal", False),
                                               ("sealbox.db-wal", True), ("sealbox.db-journal", False)])
def test_init_beside_a_leftover_wal_shm_or_journal_is_refused_and_writes_nothing(tmp_path, leftover, as_link):
    """A -shm symbolic link left in the folder made init fail half-way (internal error, exit 70)
    after writing log.key, log.vkey and an empty sealbox.db, and the folder could be neither used
    nor initialised again (fresh-clone break test); SQLite would also take a stale -wal for the
    new database's."""
    folder, target = tmp_path / "st", tmp_path / "elsewhere"
    folder.mkdir()
    if as_link:
        (folder / leftover).symlink_to(target)
    else:
        (folder / leftover).write_bytes(b"\x00" * 64)
    message = (f"{folder} holds a {leftover} (left from another database) but no sealbox.db: SQLite would take it "
               "for the new store's; move it away, or create the store in another folder")
    with pytest.raises(StoreError) as exc:
        sealbox.init_store(folder)
    assert str(exc.value) == message
    assert sorted(p.name for p in folder.iterdir()) == [leftover] and not os.path.lexists(target)
    proc = subprocess.run([str(SEALBOX), "init", str(folder)], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n")
    (folder / leftover).unlink()
    sealbox.init_store(folder).close()  # once moved away, init works
    assert sealbox.verify_store(sealbox.open_store(folder, readonly=True)).ok
