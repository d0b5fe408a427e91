"""An identity add or key rotation stopped part-way leaves the key file exactly when its key was recorded.

Found by sending SIGTERM to `sealbox identities rotate fred --key-out K` at different delays: killed while
K was being written (its fsync), the command exited 143 with K on disk and the rotation not recorded, so
the retry refused ('K already exists') and K held a key that was never fred's; the cleanup that removed K
only covered the recording, not the write. And an interrupt after the recording committed would have
removed the private key of a recorded key. Now a partial key file is removed by the write itself, and
after it, K is removed only if the store does not hold its key."""

from __future__ import annotations

import os

import pytest

from sealbox import identities
from sealbox.identities import add_identity, identity_book, rotate_key
from tests.identity_testkit import admin_key


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("change", ["add", "rotate"])
def test_interrupted_while_writing_the_key_file_leaves_none(store, tmp_path, monkeypatch, change):
    root = admin_key(store, tmp_path)
    add_identity(store, "fred", "approver", ["ops"], key_path=tmp_path / "fred.key", admin_key=root)
    before = identity_book(store).get("fred").public_key
    target = tmp_path / "new.key"
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", _interrupt)
        with pytest.raises(KeyboardInterrupt):
            if change == "add":
                add_identity(store, "gina", "approver", ["ops"], key_path=target, admin_key=root)
            else:
                rotate_key(store, "fred", target, "r", admin_key=root)
    assert not target.exists()
    assert identity_book(store).get("gina") is None
    assert identity_book(store).get("fred").public_key == before


@pytest.mark.parametrize("change", ["add", "rotate"])
def test_interrupted_after_the_record_keeps_the_key_file(store, tmp_path, monkeypatch, change):
    root = admin_key(store, tmp_path)
    add_identity(store, "fred", "approver", ["ops"], key_path=tmp_path / "fred.key", admin_key=root)
    real = identities._record

    def recorded_then_interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    target = tmp_path / "new.key"
    with monkeypatch.context() as patch:
        patch.setattr(identities, "_record", recorded_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            if change == "add":
                add_identity(store, "gina", "approver", ["ops"], key_path=target, admin_key=root)
            else:
                rotate_key(store, "fred", target, "r", admin_key=root)
    name = "gina" if change == "add" else "fred"
    key = identities.load_key(target)
    assert identity_book(store).get(name).public_key == key.verifier.vkey
