"""Identities: keys written once (0600), every change an identity.changed event, history by leaf."""

from __future__ import annotations

import os
import stat

import pytest

from sealbox import SYSTEM_RUN_ID
from sealbox.identities import (IdentityBook, IdentityError, add_identity, disable_identity, enable_identity,
                                identity_book, load_key, rotate_key)
from sealbox.ledger.checkpoint import Verifier


def test_add_writes_the_private_key_once_with_mode_0600_and_logs_only_the_public_key(store, tmp_path):
    new = add_identity(store, "alice", "approver", ["ops", "dba"], key_path=tmp_path / "alice.key")
    assert stat.S_IMODE(os.stat(new.key_path).st_mode) == 0o600
    signer = load_key(new.key_path)
    assert signer.name == "alice" and signer.verifier.vkey == new.identity.public_key
    event = store.read_run(SYSTEM_RUN_ID)[-1]
    assert (event.kind, event.payload) == ("identity.changed", {
        "name": "alice", "change": "added", "role": "approver", "groups": ["dba", "ops"],
        "public_key": new.identity.public_key, "shared": False})
    assert Verifier.from_vkey(event.payload["public_key"]).name == "alice"
    private = new.key_path.read_text().strip()
    assert private.startswith("PRIVATE+KEY+alice+")
    assert all(private.encode() not in bytes(raw) for _, raw, _, _ in store.iter_rows())


def test_a_key_file_is_never_overwritten_and_nothing_is_recorded(store, tmp_path):
    path = tmp_path / "taken.key"
    path.write_text("precious")
    before = store.size()
    with pytest.raises(IdentityError, match="refusing to overwrite"):
        add_identity(store, "bob", "approver", key_path=path)
    assert path.read_text() == "precious" and store.size() == before


def test_names_are_unique_and_roles_closed(store, tmp_path):
    add_identity(store, "alice", "approver", key_path=tmp_path / "a1.key")
    with pytest.raises(IdentityError, match="already exists"):
        add_identity(store, "alice", "admin", key_path=tmp_path / "a2.key")
    assert not (tmp_path / "a2.key").exists()
    with pytest.raises(IdentityError, match="role must be one of approver, agent, auditor, admin"):
        add_identity(store, "x", "boss", key_path=tmp_path / "x.key")
    with pytest.raises(IdentityError, match="invalid identity name"):
        add_identity(store, "a b", "approver", key_path=tmp_path / "y.key")


def test_disable_enable_and_rotate_are_events_and_the_book_answers_at_any_leaf(store, tmp_path):
    first = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "a.key")
    disabled = disable_identity(store, "alice", "left the team")
    with pytest.raises(IdentityError, match="already disabled"):
        disable_identity(store, "alice")
    enabled = enable_identity(store, "alice", "came back")
    rotated = rotate_key(store, "alice", tmp_path / "a2.key")
    changes = [(e.payload["change"], e.payload.get("reason")) for e in store.read_run(SYSTEM_RUN_ID)
               if e.kind == "identity.changed"]
    assert changes == [("added", None), ("disabled", "left the team"), ("enabled", "came back"), ("key_changed", None)]
    book = identity_book(store)
    assert book.get("alice", disabled.since_leaf).disabled is False
    assert book.get("alice", disabled.since_leaf + 1).disabled is True
    assert book.get("alice", enabled.since_leaf + 1).disabled is False
    assert book.get("alice", rotated.identity.since_leaf).public_key == first.identity.public_key
    assert book.get("alice").public_key == rotated.identity.public_key != first.identity.public_key
    assert book.get("alice", first.identity.since_leaf) is None  # not yet added
    assert IdentityBook.from_events(store.read_run(SYSTEM_RUN_ID)).get("alice") == book.get("alice")


def test_unknown_identity_changes_are_refused(store, tmp_path):
    with pytest.raises(IdentityError, match="no identity named 'ghost'"):
        disable_identity(store, "ghost")
    with pytest.raises(IdentityError, match="no identity named 'ghost'"):
        rotate_key(store, "ghost", tmp_path / "g.key")
    assert not (tmp_path / "g.key").exists()


def test_a_key_file_readable_by_others_or_malformed_is_refused(store, tmp_path):
    new = add_identity(store, "alice", "approver", key_path=tmp_path / "a.key")
    os.chmod(new.key_path, 0o644)
    with pytest.raises(IdentityError, match="readable by others"):
        load_key(new.key_path)
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    os.chmod(bad, 0o600)
    with pytest.raises(IdentityError, match="not a Sealbox identity key"):
        load_key(bad)
    with pytest.raises(IdentityError, match="does not exist"):
        load_key(tmp_path / "missing.key")
