"""Grants are signed by an admin's key (``sealbox access grant ... --key-file``).

A call naming a grant counts it only when its ``access.granted`` verifies against the granting
identity's key as the log held it then, and that identity was an enabled admin then; otherwise
the call is recorded and denied ``grant_invalid`` naming why, and ``sealbox verify`` reports the
grant (a note for an unsigned one, as older Sealbox versions wrote them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox import EventDraft, verify_store
from sealbox.access import AccessError, grant_access, grant_problem, grant_status, list_grants
from sealbox.cli.main import main
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity, disable_identity, rotate_key
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, ToolDenied
from identity_testkit import grant_key, sign_grant_payload  # noqa: E402

AGENT = "agent:deploy-bot"
SEALBOX = str(Path(sys.executable).parent / "sealbox")
BASE = {"grant_id": "g1", "principal": AGENT, "server": "github", "tool": "create_*", "scope": "repo",
        "expires_at": None, "provider": None, "credential": False}


@pytest.fixture
def keys(store, tmp_path):
    root = grant_key(store)
    out = {"root": root}
    for name, role in (("boss", "admin"), ("alice", "approver"), ("dave", "agent")):
        out[name] = add_identity(store, name, role, key_path=tmp_path / f"{name}.key", admin_key=root).key_path
    return out


def call(store, grant, *, principal=AGENT):
    """One real recorded call of github/create_issue under ``grant``: (result or ToolDenied, run_id, ran)."""
    ran: list[str] = []
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=principal) as run:
        try:
            result = run.call_tool("github", "create_issue", {"title": "x"}, lambda title: ran.append(title) or "ok",
                                   grant=grant)
        except ToolDenied as exc:
            result = exc
    return result, run.run_id, ran


def decision_of(store, run_id):
    return next(e.payload for e in store.read_run(run_id) if e.kind == "policy.decision")


def put(store, payload, principal=None):
    store.append([EventDraft("access.granted", payload, run_id=SYSTEM_RUN_ID,
                             principal=principal or payload.get("identity", "user:x"))])


def test_a_signed_grant_authorizes_a_real_recorded_call(store, keys):
    gid = grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g1")
    granted = next(e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted")
    assert (granted.principal, granted.payload["identity"], granted.payload["origin"]) == ("boss", "boss", store.origin)
    result, run_id, ran = call(store, gid)
    assert (result, ran) == ("ok", ["x"])
    d = decision_of(store, run_id)
    assert (d["effect"], d["reason_code"]) == ("allow", "policy_allow")
    assert next(e.payload["grant"] for e in store.read_run(run_id) if e.kind == "tool.call") == "g1"
    assert [(r["grant_id"], r["signature"], r["granted_by"]) for r in list_grants(store)] == [("g1", "valid", "boss")]
    report = verify_store(store)
    assert report.ok and report.notes == ()
    # disabling the admin later does not withdraw a grant that was valid when recorded
    disable_identity(store, "boss", admin_key=keys["root"])
    assert call(store, gid)[0] == "ok" and verify_store(store).ok


def forged_grants(store, keys, tmp_path):
    """(grant id, expected problem code, reason words, verify problem code or None for a note)."""
    (tmp_path / "o").mkdir()
    other = sealbox.init_store(tmp_path / "o" / "other")  # another store with its own root admin
    try:
        from_other = sign_grant_payload(other, {**BASE, "grant_id": "g_other"}, key_file=grant_key(other))
    finally:
        other.close()
    cases = []
    # 1. unsigned, as Sealbox wrote grants before (or anyone who can write the store)
    put(store, {**BASE, "grant_id": "g_unsigned"}, principal="user:mallory")
    cases.append(("g_unsigned", "unsigned", "carries no signature", None))
    # 2. signed by boss, then altered: the tool widened to every tool
    put(store, {**sign_grant_payload(store, {**BASE, "grant_id": "g_altered"}, keys["boss"]), "tool": "*"})
    cases.append(("g_altered", "bad_signature", "does not verify", "grant_signature"))
    # 3. boss's signed grant copied to another principal
    put(store, {**sign_grant_payload(store, {**BASE, "grant_id": "g_copy", "principal": "agent:other"}, keys["boss"]),
                "principal": AGENT})
    cases.append(("g_copy", "bad_signature", "does not verify", "grant_signature"))
    # 4. a signed grant of another store copied here (same ids, its own root's key)
    put(store, from_other, principal="root")
    cases.append(("g_other", "wrong_store", "another store", "grant_binding"))
    # 5. the same, with this store's origin written over it
    put(store, {**from_other, "grant_id": "g_other2", "origin": store.origin}, principal="root")
    cases.append(("g_other2", "bad_signature", "does not verify", "grant_signature"))
    # 6. alice's signature, claimed as boss's
    put(store, {**sign_grant_payload(store, {**BASE, "grant_id": "g_claimed"}, keys["alice"]), "identity": "boss"})
    cases.append(("g_claimed", "bad_signature", "does not verify", "grant_signature"))
    # 7. an approver and 8. an agent sign with their own keys
    put(store, sign_grant_payload(store, {**BASE, "grant_id": "g_approver"}, keys["alice"]))
    cases.append(("g_approver", "role", "only admin", "grant_rule"))
    put(store, sign_grant_payload(store, {**BASE, "grant_id": "g_agent", "principal": "dave"}, keys["dave"]))
    cases.append(("g_agent", "role", "only admin", "grant_rule"))
    # 9. boss signs after being disabled
    extra = add_identity(store, "eve", "admin", key_path=tmp_path / "eve.key", admin_key=keys["root"]).key_path
    disable_identity(store, "eve", admin_key=keys["root"])
    put(store, sign_grant_payload(store, {**BASE, "grant_id": "g_disabled"}, extra))
    cases.append(("g_disabled", "disabled", "disabled at that moment", "grant_identity"))
    # 10. signed by a key the identity no longer has (rotated away)
    old = tmp_path / "boss-old.key"
    old.write_bytes(Path(keys["boss"]).read_bytes())
    old.chmod(0o600)
    rotate_key(store, "boss", tmp_path / "boss2.key", admin_key=keys["root"])
    put(store, sign_grant_payload(store, {**BASE, "grant_id": "g_rotated"}, old))
    cases.append(("g_rotated", "bad_signature", "does not verify", "grant_signature"))
    # 11. a valid grant written by another event principal
    put(store, sign_grant_payload(store, {**BASE, "grant_id": "g_principal"}, tmp_path / "boss2.key"),
        principal="user:mallory")
    cases.append(("g_principal", "principal", "not its identity", "grant_rule"))
    return cases


def test_unsigned_forged_altered_copied_and_wrongly_signed_grants_are_denied_and_reported(store, keys, tmp_path):
    cases = forged_grants(store, keys, tmp_path)
    for gid, code, words, _ in cases:
        assert grant_problem(store, gid) == code, gid
        principal = "dave" if gid == "g_agent" else AGENT
        result, run_id, ran = call(store, gid, principal=principal)
        assert isinstance(result, ToolDenied) and ran == [], gid
        d = decision_of(store, run_id)
        assert (d["effect"], d["reason_code"], d["rule"]) == ("deny", "grant_invalid", None), gid
        assert d["reason"].startswith(f"grant {gid} does not count: ") and words in d["reason"], (gid, d["reason"])
        assert not any(e.kind == "tool.result" for e in store.read_run(run_id))
    listed = {r["grant_id"]: r["signature"] for r in list_grants(store)}
    assert listed == {gid: code for gid, code, _, _ in cases}
    report = verify_store(store)
    found = sorted((p.leaf_index, p.code) for p in report.problems)
    leaves = {e.payload["grant_id"]: e.leaf_index for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted"}
    assert found == sorted((leaves[gid], vcode) for gid, _, _, vcode in cases if vcode)
    assert report.notes == (f"the grant g_unsigned of github/create_* to 'agent:deploy-bot' by 'user:mallory' at leaf "
                            f"{leaves['g_unsigned']} is unsigned: it authorizes no call (calls naming it are denied "
                            "grant_invalid until an admin grants again with `sealbox access grant ... --key-file KEY`)",)


def test_a_second_grant_of_an_id_is_reported_and_the_first_decides(store, keys):
    grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g1")
    first = next(e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted")
    put(store, first.payload)  # the same signed event appended again
    assert call(store, "g1")[0] == "ok"
    assert [p.code for p in verify_store(store).problems] == ["grant_binding"]


def test_sealbox_verify_notes_an_unsigned_grant_and_fails_on_a_forged_one(store, keys, tmp_path, capsys):
    put(store, {**BASE, "grant_id": "g_old"}, principal="user:alice")
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "store")])
    out = capsys.readouterr().out.splitlines()
    leaf = store.size() - 1
    assert exc.value.code == 0
    assert out[0] == (f"note: the grant g_old of github/create_* to 'agent:deploy-bot' by 'user:alice' at leaf {leaf} "
                      "is unsigned: it authorizes no call (calls naming it are denied grant_invalid until an admin "
                      "grants again with `sealbox access grant ... --key-file KEY`)")
    assert out[1].startswith("Verified: the log is intact.")
    put(store, {**sign_grant_payload(store, {**BASE, "grant_id": "g_new"}, keys["boss"]), "expires_at": None,
                "scope": ["repo", "admin:org"]})
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "store")])
    out = capsys.readouterr().out.splitlines()
    assert exc.value.code == 1
    assert out[0] == (f"grant_signature [run system, run_seq {store.read_run(SYSTEM_RUN_ID)[-1].run_seq}, "
                      f"access.granted, leaf {leaf + 1}]: the grant g_new of github/create_* to 'agent:deploy-bot' by "
                      "'boss' does not count: its signature does not verify with the identity's key as the log held "
                      "it (forged, altered, or copied to another grant id, principal, tool or expiry)")


def test_grant_access_refuses_a_signer_that_may_not_grant_and_records_nothing(store, keys, tmp_path):
    disable_identity(store, "boss", admin_key=keys["root"])
    stranger = sealbox.init_store(tmp_path / "stranger")
    try:
        add_identity(stranger, "zed", "admin", key_path=tmp_path / "zed.key")
    finally:
        stranger.close()
    size = store.size()
    for key, identity, code, message in (
            (keys["alice"], None, "role", "identity 'alice' has role approver: only an admin may grant"),
            (keys["dave"], None, "role", "identity 'dave' has role agent: only an admin may grant"),
            (keys["boss"], None, "disabled", "identity 'boss' is disabled: it cannot grant"),
            (tmp_path / "zed.key", None, "unknown_identity",
             "the key file names identity 'zed', which this store does not know"),
            (keys["root"], "boss", "identity_mismatch", "the key file is identity 'root''s, not 'boss'")):
        with pytest.raises(AccessError) as exc:
            grant_access(store, AGENT, "github", "*", None, key_file=key, identity=identity,
                         credential={"revocation_endpoint": "https://auth.example/revoke", "client_id": "c",
                                     "access_token": "tok-0123456789"})
        assert (exc.value.code, str(exc.value)) == (code, message)
    assert store.size() == size
    assert store._conn().execute("SELECT count(*) FROM credentials").fetchone() == (0,)


def test_grant_cli_errors_are_one_line_exit_2_and_record_nothing(store, keys, tmp_path):
    disable_identity(store, "boss", admin_key=keys["root"])
    store_dir = str(tmp_path / "store")
    size = store.size()
    base = [SEALBOX, "access", "grant", "-s", store_dir, "--principal", AGENT, "--server", "github", "--tool", "*"]
    for extra, line in (
            ([], "error: Missing option '--key-file'."),
            (["--key-file", str(tmp_path / "missing.key")], f"error: key file {tmp_path / 'missing.key'} does not exist"),
            (["--key-file", str(keys["dave"])], "error: identity 'dave' has role agent: only an admin may grant"),
            (["--key-file", str(keys["alice"])], "error: identity 'alice' has role approver: only an admin may grant"),
            (["--key-file", str(keys["boss"])], "error: identity 'boss' is disabled: it cannot grant"),
            (["--key-file", str(keys["root"]), "--identity", "boss"],
             "error: the key file is identity 'root''s, not 'boss'")):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "250"})
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n"), extra
    assert store.size() == size
    ok = subprocess.run(base + ["--key-file", str(keys["root"]), "--id", "g_cli"], capture_output=True, text=True,
                        timeout=60)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "g_cli\n", "")
    assert grant_status(store, "g_cli", AGENT, "github", "create_issue")[0] and grant_problem(store, "g_cli") is None
