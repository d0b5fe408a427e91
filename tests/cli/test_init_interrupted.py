"""An init stopped part-way (Ctrl-C, SIGTERM: both reach it as KeyboardInterrupt) removes what it created.

Found by sending SIGTERM to `sealbox init DIR` at different delays: killed after its empty database, key and
verifier key were written (before the schema, or before the system run's first event), it exited 143 but left
DIR holding them, so that `sealbox runs list -s DIR` said "DIR/sealbox.db is not a Sealbox store (an empty
database)" or "no runs match" (a store with no system run and no checkpoint), and `sealbox init DIR` refused
it ("already holds a file sealbox.db that is not a Sealbox store"; "already holds a Sealbox store"). Now
init removes the files it created (database and its -wal/-shm, log.key, log.vkey, checkpoint) and the folder
if it created it, then lets the interrupt go on; files that were there before are left alone."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.store.sqlite import SqliteStore


@pytest.mark.parametrize("where", ["_write_meta", "append", "issue_checkpoint"])
@pytest.mark.parametrize("existing", [False, True])
def test_an_interrupted_init_leaves_nothing_behind(tmp_path, monkeypatch, where, existing):
    folder = tmp_path / "store"
    if existing:
        folder.mkdir()
        (folder / "notes.txt").write_text("mine\n")

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(SqliteStore, where, interrupted)
        with pytest.raises(KeyboardInterrupt):
            sealbox.init_store(folder)
    if existing:
        assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
        assert (folder / "notes.txt").read_text() == "mine\n"
    else:
        assert not folder.exists()
    store = sealbox.init_store(folder)  # and the same init, run again, succeeds
    try:
        assert [r["run_id"] for r in store.query_runs()] == ["system"]
    finally:
        store.close()
