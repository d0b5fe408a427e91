"""Identities: keys written once (0600), every change a signed identity.changed event, history by leaf;
a process that can write the store cannot mint an approver (break test of 2026-12-02)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from identity_testkit import admin_key
from sealbox import SYSTEM_RUN_ID, verify_store
from sealbox.events import EventDraft
from sealbox.identities import (IdentityBook, IdentityError, add_identity, change_fields, disable_identity,
                                enable_identity, identity_book, load_key, rotate_key, verify_fields)
from sealbox.ledger.checkpoint import Verifier, generate_key


def test_add_writes_the_private_key_once_with_mode_0600_and_logs_only_the_public_key(store, tmp_path):
    root = admin_key(store, tmp_path)
    new = add_identity(store, "alice", "approver", ["ops", "dba"], key_path=tmp_path / "alice.key", admin_key=root)
    assert stat.S_IMODE(os.stat(new.key_path).st_mode) == 0o600
    signer = load_key(new.key_path)
    assert signer.name == "alice" and signer.verifier.vkey == new.identity.public_key
    event = store.read_run(SYSTEM_RUN_ID)[-1]
    auth = event.payload["authorization"]
    root_vkey = identity_book(store).get("root").public_key
    assert (event.kind, event.principal, event.payload) == ("identity.changed", "root", {
        "name": "alice", "change": "added", "role": "approver", "groups": ["dba", "ops"],
        "public_key": new.identity.public_key, "shared": False, "after": None,
        "authorization": {"by": "root", "key_id": root_vkey.split("+", 2)[1], "signature": auth["signature"]}})
    assert verify_fields(root_vkey, change_fields(event.payload), auth["signature"])
    assert not verify_fields(root_vkey, {**change_fields(event.payload), "after": 0}, auth["signature"])
    assert Verifier.from_vkey(event.payload["public_key"]).name == "alice"
    private = new.key_path.read_text().strip()
    assert private.startswith("PRIVATE+KEY+alice+")
    assert all(private.encode() not in bytes(raw) for _, raw, _, _ in store.iter_rows())


def test_a_key_file_is_never_overwritten_and_nothing_is_recorded(store, tmp_path):
    path = tmp_path / "taken.key"
    path.write_text("precious")
    before = store.size()
    root = admin_key(store, tmp_path)
    before = store.size()
    with pytest.raises(IdentityError, match="refusing to overwrite"):
        add_identity(store, "bob", "approver", key_path=path, admin_key=root)
    assert path.read_text() == "precious" and store.size() == before


def test_names_are_unique_and_roles_closed(store, tmp_path):
    root = admin_key(store, tmp_path)
    add_identity(store, "alice", "approver", key_path=tmp_path / "a1.key", admin_key=root)
    with pytest.raises(IdentityError, match="already exists"):
        add_identity(store, "alice", "admin", key_path=tmp_path / "a2.key", admin_key=root)
    assert not (tmp_path / "a2.key").exists()
    with pytest.raises(IdentityError, match="role must be one of approver, agent, auditor, admin"):
        add_identity(store, "x", "boss", key_path=tmp_path / "x.key", admin_key=root)
    with pytest.raises(IdentityError, match="invalid identity name"):
        add_identity(store, "a b", "approver", key_path=tmp_path / "y.key", admin_key=root)


def test_disable_enable_and_rotate_are_events_and_the_book_answers_at_any_leaf(store, tmp_path):
    root = admin_key(store, tmp_path)
    first = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "a.key", admin_key=root)
    disabled = disable_identity(store, "alice", "left the team", admin_key=root)
    with pytest.raises(IdentityError, match="already disabled"):
        disable_identity(store, "alice", admin_key=root)
    enabled = enable_identity(store, "alice", "came back", admin_key=root)
    rotated = rotate_key(store, "alice", tmp_path / "a2.key", admin_key=tmp_path / "a.key")  # her own key
    changes = [(e.payload["name"], e.payload["change"], e.payload.get("reason"), e.principal)
               for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"]
    assert changes == [("root", "added", None, "root"), ("alice", "added", None, "root"),
                       ("alice", "disabled", "left the team", "root"), ("alice", "enabled", "came back", "root"),
                       ("alice", "key_changed", None, "alice")]
    book = identity_book(store)
    assert book.get("alice", disabled.since_leaf).disabled is False
    assert book.get("alice", disabled.since_leaf + 1).disabled is True
    assert book.get("alice", enabled.since_leaf + 1).disabled is False
    assert book.get("alice", rotated.identity.since_leaf).public_key == first.identity.public_key
    assert book.get("alice").public_key == rotated.identity.public_key != first.identity.public_key
    assert book.get("alice", first.identity.since_leaf) is None  # not yet added
    assert IdentityBook.from_events(store.read_run(SYSTEM_RUN_ID)).get("alice") == book.get("alice")


def test_unknown_identity_changes_are_refused(store, tmp_path):
    root = admin_key(store, tmp_path)
    with pytest.raises(IdentityError, match="no identity named 'ghost'"):
        disable_identity(store, "ghost", admin_key=root)
    with pytest.raises(IdentityError, match="no identity named 'ghost'"):
        rotate_key(store, "ghost", tmp_path / "g.key", admin_key=root)
    assert not (tmp_path / "g.key").exists()


def test_a_key_file_readable_by_others_or_malformed_is_refused(store, tmp_path):
    new = add_identity(store, "alice", "approver", key_path=tmp_path / "a.key", admin_key=admin_key(store, tmp_path))
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


# --------------------------------------------------------------------------- who may change identities


def test_without_an_admin_key_only_the_first_admin_can_be_added(store, tmp_path):
    """The agent process can write the store; it used to add an approver of its own and approve
    its own calls (break test of 2026-12-02). Now every change but the first admin's is signed."""
    with pytest.raises(IdentityError, match="^this store has no admin identity yet: add one first"):
        add_identity(store, "mallory", "approver", ["ops"], key_path=tmp_path / "m.key")
    assert not (tmp_path / "m.key").exists()
    root = add_identity(store, "root", "admin", key_path=tmp_path / "root.key")
    event = store.read_run(SYSTEM_RUN_ID)[-1]
    assert event.principal == "root" and event.payload["authorization"]["by"] == "root"  # signed with its own key
    assert verify_fields(root.identity.public_key, change_fields(event.payload),
                         event.payload["authorization"]["signature"])
    for role in ("approver", "admin"):
        with pytest.raises(IdentityError, match=r"^an identity change must be signed by an admin identity's key"):
            add_identity(store, "mallory", role, ["ops"], key_path=tmp_path / f"m-{role}.key")
    alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "a.key", admin_key=root.key_path)
    with pytest.raises(IdentityError, match=r"^identity 'alice' is not an admin \(role approver\)"):
        add_identity(store, "mallory", "approver", key_path=tmp_path / "m2.key", admin_key=alice.key_path)
    with pytest.raises(IdentityError, match="^identity 'alice' is not an admin"):
        disable_identity(store, "root", admin_key=alice.key_path)
    disable_identity(store, "alice", "my laptop was stolen", admin_key=alice.key_path)  # herself: allowed
    with pytest.raises(IdentityError, match="^identity 'alice' is disabled"):
        enable_identity(store, "alice", admin_key=alice.key_path)
    assert [i.name for i in identity_book(store).all()] == ["alice", "root"] and verify_store(store).ok


def test_a_disabled_or_rotated_admin_key_signs_nothing(store, tmp_path):
    root = admin_key(store, tmp_path)
    second = add_identity(store, "sec", "admin", key_path=tmp_path / "sec.key", admin_key=root)
    disable_identity(store, "root", "left", admin_key=second.key_path)
    with pytest.raises(IdentityError, match="^identity 'root' is disabled: it cannot sign identity changes$"):
        add_identity(store, "bob", "approver", key_path=tmp_path / "b.key", admin_key=root)
    rotate_key(store, "sec", tmp_path / "sec2.key", admin_key=second.key_path)
    with pytest.raises(IdentityError, match="^this key is not sec's current key"):
        add_identity(store, "bob", "approver", key_path=tmp_path / "b.key", admin_key=second.key_path)
    add_identity(store, "bob", "approver", key_path=tmp_path / "b.key", admin_key=tmp_path / "sec2.key")
    assert verify_store(store).ok


def _append_change(store, payload):
    return store.append(EventDraft("identity.changed", payload, run_id=SYSTEM_RUN_ID, principal="os-user:admin"))[0]


def test_a_change_appended_below_the_identities_api_is_ignored_and_reported(store, keys, tmp_path):
    """Whoever can append events can write an identity.changed of their own: unsigned, self-signed
    after the first admin, or signed by a non-admin, it does not count and verify names it."""
    from approval_helpers import policy

    from sealbox.approvals import ApprovalError, ApprovalPending, answer, get_approval
    from sealbox.identities import sign_fields
    from sealbox.recorder import Recorder

    skey, vkey = generate_key("mallory")
    (tmp_path / "mallory.key").write_text(skey + "\n")
    os.chmod(tmp_path / "mallory.key", 0o600)
    added = {"name": "mallory", "change": "added", "role": "approver", "groups": ["ops"], "public_key": vkey,
             "shared": False, "after": None}
    from sealbox.ledger.checkpoint import Signer
    mallory = Signer.from_key(skey)
    unsigned = _append_change(store, added)
    self_signed = _append_change(store, {**added, "role": "admin", "authorization": {
        "by": "mallory", "key_id": vkey.split("+", 2)[1], "signature": sign_fields(mallory, change_fields(
            {**added, "role": "admin"}))}})
    by_approver = _append_change(store, {**added, "authorization": {
        "by": "alice", "key_id": load_key(keys["alice"]).verifier.vkey.split("+", 2)[1],
        "signature": sign_fields(load_key(keys["alice"]), change_fields(added))}})
    assert identity_book(store).get("mallory") is None
    assert [(leaf, why) for leaf, _, _, why in identity_book(store).unauthorized] == [
        (unsigned.leaf_index, "it carries no authorization (it was not written by sealbox.identities)"),
        (self_signed.leaf_index, "it is signed by 'mallory', which is not an identity of the log at that point"),
        (by_approver.leaf_index, "it is signed by 'alice', which is not an admin (role approver)")]
    with pytest.raises(ApprovalPending) as pending:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM customers"}, lambda **_: "ran")
    aid = pending.value.approval_id
    with pytest.raises(ApprovalError) as info:
        answer(store, aid, "approve", "mine", tmp_path / "mallory.key")
    assert info.value.code == "unknown_identity"
    assert get_approval(store, aid).status == "pending"
    report = verify_store(store)
    assert [(p.code, p.leaf_index) for p in report.problems] == [
        ("identity_unauthorized", unsigned.leaf_index), ("identity_unauthorized", self_signed.leaf_index),
        ("identity_unauthorized", by_approver.leaf_index)]
    assert report.problems[2].message == (
        "the identity change 'added' of 'mallory' is not signed by an admin identity of the log at that point (it is "
        "signed by 'alice', which is not an admin (role approver)): it was not written through sealbox.identities, and "
        "it is ignored (answers by an identity it added do not count)")


def test_a_signed_change_replayed_later_does_not_count(store, tmp_path):
    """A genuine key_changed appended again after a later rotation (to bring back a key that
    leaked) is bound to the identity's previous change (`after`), so it no longer verifies."""
    root = admin_key(store, tmp_path)
    add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "a.key", admin_key=root)
    rotate_key(store, "alice", tmp_path / "a2.key", admin_key=root)
    old = store.read_run(SYSTEM_RUN_ID)[-1]
    rotate_key(store, "alice", tmp_path / "a3.key", admin_key=root)
    replayed = _append_change(store, old.payload)
    assert identity_book(store).get("alice").public_key == load_key(tmp_path / "a3.key").verifier.vkey
    problems = verify_store(store).problems
    assert [(p.code, p.leaf_index) for p in problems] == [("identity_unauthorized", replayed.leaf_index)]
    assert (f"(it follows 'alice''s change at leaf {old.payload['after']}, but 'alice' changed again at leaf "
            f"{old.leaf_index + 1}: it was replayed)") in problems[0].message
    forged_after = _append_change(store, {**old.payload, "after": identity_book(store).last_leaf("alice")})
    assert identity_book(store).unauthorized[-1][3] == "its signature does not verify with 'root''s key"
    assert forged_after.leaf_index == identity_book(store).unauthorized[-1][0]


def test_a_change_left_out_of_an_export_bundle_shows_as_a_gap(store, tmp_path):
    """A bundle holds the system run's identity.changed events; a producer who leaves one out
    (and re-signs the bundle) leaves the next change of that identity pointing at a leaf the
    history lacks: the next change, and the answers it would allow, do not count."""
    root = admin_key(store, tmp_path)
    add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "a.key", admin_key=root)
    disable_identity(store, "alice", "left", admin_key=root)
    enable_identity(store, "alice", "back", admin_key=root)
    changes = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"]
    without_disable = [e for e in changes if e.payload["change"] != "disabled"]
    book = IdentityBook.from_events(without_disable)
    ((leaf, name, change, why),) = book.unauthorized
    assert (leaf, name, change) == (changes[-1].leaf_index, "alice", "enabled")
    assert why == (f"it follows a change of 'alice' at leaf {changes[2].leaf_index} that is not in the history (its "
                   f"previous change here is at leaf {changes[1].leaf_index}): a change was left out, or this one was "
                   "replayed")


def test_the_only_enabled_admin_cannot_disable_itself(store, tmp_path):
    """It used to succeed and leave identity administration locked for good (no admin could
    sign a change, nor re-enable it); docs/approvals.md offers self-disable for a leaked key."""
    root = admin_key(store, tmp_path)
    before = store.size()
    with pytest.raises(IdentityError) as info:
        disable_identity(store, "root", "key leaked", admin_key=root)
    assert str(info.value).startswith("identity 'root' is the only enabled admin: disabled, no one could change "
                                      "identities again (nor re-enable it); add another admin first")
    assert store.size() == before
    second = add_identity(store, "sec", "admin", key_path=tmp_path / "sec.key", admin_key=root)
    disable_identity(store, "root", "key leaked", admin_key=root)  # now another admin remains
    with pytest.raises(IdentityError, match="^identity 'sec' is the only enabled admin"):
        disable_identity(store, "sec", admin_key=second.key_path)
    enable_identity(store, "root", "new laptop", admin_key=second.key_path)
    assert verify_store(store).ok


def test_an_identity_change_outside_the_system_run_is_reported(store, tmp_path):
    """IdentityBook reads only the system run, so such a change never counted; verify said
    nothing of it (fresh-clone break test)."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    admin_key(store, tmp_path)
    skey, vkey = generate_key("mallory")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        forged = store.append(EventDraft("identity.changed", {"name": "mallory", "change": "added", "role": "admin",
                                                              "groups": [], "public_key": vkey, "shared": False},
                                         run_id=run.run_id, principal="agent:bot"))
    problems = verify_store(store).problems
    assert [(p.code, p.run_id, p.leaf_index, p.message) for p in problems] == [(
        "identity_unauthorized", run.run_id, forged[0].leaf_index,
        f"an identity change of 'mallory' recorded in run {run.run_id}, not in the store's system run, where "
        "sealbox.identities writes them: it is ignored")]
    assert identity_book(store).get("mallory") is None


@pytest.mark.parametrize("name", ["bob\n", "bob\u202e", "b\u00f6b", "bob\x00", "\u0431ob", "x" * 129])
def test_a_name_with_a_control_or_non_ascii_character_is_an_identity_error(store, tmp_path, name):
    """`$` in the name pattern also matched before a final newline, so "bob\\n" got past the
    name check and failed later with the key library's NoteError, not IdentityError."""
    root = admin_key(store, tmp_path)
    size = store.size()
    with pytest.raises(IdentityError, match="invalid identity name"):
        add_identity(store, name, "approver", key_path=tmp_path / "n.key", admin_key=root)
    assert not (tmp_path / "n.key").exists() and store.size() == size


@pytest.mark.parametrize("group", ["ops\n", "ops\x1b[31m", "o\u200bps", "ops\u202e", " ops", "ops ", "", "g" * 129])
def test_a_group_with_control_or_invisible_characters_is_refused(store, tmp_path, group):
    """A group is matched by exact string against the policy's `approval.groups`: `ops\\u200b` or
    `ops ` shows as `ops` in a listing but is never asked. Such groups were recorded."""
    root = admin_key(store, tmp_path)
    size = store.size()
    with pytest.raises(IdentityError, match="invalid group"):
        add_identity(store, "gina", "approver", ["ops", group], key_path=tmp_path / "g.key", admin_key=root)
    assert not (tmp_path / "g.key").exists() and store.size() == size


def test_a_group_with_spaces_inside_or_non_ascii_letters_is_kept(store, tmp_path):
    new = add_identity(store, "gina", "approver", ["Ops Team", "équipe"], key_path=tmp_path / "g.key",
                       admin_key=admin_key(store, tmp_path))
    assert new.identity.groups == ("Ops Team", "équipe")


def test_a_key_file_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path):
    """`--key-file /dev/zero` read without end (memory), a FIFO blocked for ever: a key file must
    be a regular file, and at most 4 KiB of it is read."""
    import threading

    fifo = tmp_path / "k.fifo"
    os.mkfifo(fifo, 0o600)
    out: list = []

    def load(path):
        try:
            load_key(path)
        except IdentityError as exc:
            out.append(str(exc))

    for path in (fifo, Path("/dev/zero"), tmp_path):
        worker = threading.Thread(target=load, args=(path,), daemon=True)
        worker.start()
        worker.join(5)
        assert not worker.is_alive(), f"load_key({path}) still reading"
        assert out[-1] == f"key file {path} is not a regular file"
    big = tmp_path / "big.key"
    big.write_bytes(b"A" * 10_000)
    os.chmod(big, 0o600)
    with pytest.raises(IdentityError, match="is larger than 4096 bytes: not a Sealbox identity key"):
        load_key(big)
