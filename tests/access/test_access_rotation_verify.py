"""`sealbox verify` checks access.credential_rotated: its signature chain, and that the stored rotated
credential holds the tokens its fingerprints name. Real stores (SQLite, PostgreSQL when configured) and
the rotating OAuth provider of tests/access/access_provider.py on 127.0.0.1."""

from __future__ import annotations

import pytest

from sealbox import EventDraft, verify_store
from sealbox.access import (
    rotate_credential,
    rotation_fields,
    show_grant,
)
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity, load_key, sign_fields
from identity_testkit import grant_key, signed_grant  # noqa: E402
from identity_testkit import signed_revoke as revoke  # noqa: E402

FAST = {"backoff": 0.01, "sleep": lambda s: None}


def rotated(store, provider):
    first = provider.issue()
    gid = signed_grant(store, "agent:bot", "github", "*", credential=provider.credential(first))
    live = provider.refresh(first["refresh_token"])
    rotate_credential(store, gid, live, key_file=grant_key(store))
    return gid, first, live


def rotation_event(store, gid):
    return [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.credential_rotated"
            and e.payload["grant_id"] == gid]


def codes(report):
    return sorted(p.code for p in report.problems)


def test_a_recorded_rotation_verifies(store, provider):
    gid, _first, _live = rotated(store, provider)
    report = verify_store(store)
    assert report.ok, report.problems
    assert not [n for n in report.notes if "rotation" in n]


def test_a_forged_or_unsigned_rotation_is_reported_and_ignored_by_revocation(store, provider, tmp_path):
    gid, first, live = rotated(store, provider)
    (ev,) = rotation_event(store, gid)
    # replayed with an altered fingerprint: the signature no longer covers it
    forged = {**ev.payload, "seq": 2, "after": ev.leaf_index,
              "fingerprints": {"refresh_token": "hmac-sha256:" + "0" * 64}}
    (bad,) = store.append([EventDraft("access.credential_rotated", forged, run_id=SYSTEM_RUN_ID, principal="root")])
    # signed by an approver: not allowed to record a rotation
    add_identity(store, "carol", "approver", key_path=tmp_path / "carol.key", admin_key=grant_key(store))
    carol = load_key(tmp_path / "carol.key")
    by_carol = {"grant_id": gid, "seq": 2, "fingerprints": {"refresh_token": "hmac-sha256:" + "1" * 64},
                "origin": store.origin, "identity": "carol", "at": ev.payload["at"], "after": ev.leaf_index}
    by_carol["signature"] = sign_fields(carol, rotation_fields(by_carol))
    by_carol["key_id"] = carol.verifier.vkey.split("+")[1]
    (role,) = store.append([EventDraft("access.credential_rotated", by_carol, run_id=SYSTEM_RUN_ID,
                                       principal="carol")])
    unsigned = {k: v for k, v in forged.items() if k not in ("signature", "key_id")}
    (nosig,) = store.append([EventDraft("access.credential_rotated", unsigned, run_id=SYSTEM_RUN_ID,
                                        principal="root")])
    report = verify_store(store)
    found = {(p.code, p.leaf_index) for p in report.problems}
    assert found == {("rotation_signature", bad.leaf_index), ("rotation_rule", role.leaf_index)}
    assert [n for n in report.notes if "credential rotation" in n] == [
        f"the credential rotation 2 of grant {gid} at leaf {nosig.leaf_index} by 'root' does not count: it carries "
        "no signature (written by hand); revocation ignores it (record the rotation again with `sealbox access "
        "rotate ... --key-file KEY`)"]
    marks = [(r["seq"], r["signature"]) for r in show_grant(store, gid)["rotations"]]
    assert marks == [(1, "valid"), (2, "bad_signature"), (2, "role"), (2, "unsigned")]


def test_a_rotated_row_deleted_or_swapped_below_sealbox_is_reported(store, provider, raw_sql):
    gid, first, live = rotated(store, provider)
    (ev,) = rotation_event(store, gid)
    other, _f, _l = rotated(store, provider)
    # another grant's rotated row copied over this one's: it does not decrypt here
    raw_sql(store, "DELETE FROM credential_rotations WHERE grant_id = ?", (gid,))
    assert codes(verify_store(store)) == ["rotation_credential_missing"]
    raw_sql(store, "INSERT INTO credential_rotations (grant_id, seq, nonce, ciphertext, created_at) "
                   "SELECT ?, seq, nonce, ciphertext, created_at FROM credential_rotations WHERE grant_id = ?",
            (gid, other))
    report = verify_store(store)
    assert codes(report) == ["rotation_credential_mismatch"]
    assert report.problems[0].leaf_index == ev.leaf_index and "does not decrypt" in report.problems[0].message


def test_after_delete_credential_nothing_is_missing(store, provider):
    gid, first, live = rotated(store, provider)
    revoke(store, gid, "done", **FAST)
    from sealbox.access import delete_credential

    assert delete_credential(store, gid)
    assert verify_store(store).ok
