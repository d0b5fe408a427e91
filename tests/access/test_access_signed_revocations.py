"""Revocation steps are signed (``sealbox access revoke/retry ... --key-file``).

Each ``access.revoked`` step carries the revoking identity (an enabled admin or approver) and an
Ed25519 signature over the store origin, grant id, step, reason, detail (the provider's answer
summary: status codes, ``active`` values), time and the previous valid step's leaf. ``access show``
and ``list`` read only valid steps: an appended ``confirmed`` never shows as confirmed. Any step, even
an unsigned ``requested``, still denies calls locally (the safe direction). ``sealbox verify`` notes
unsigned steps and reports forged ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox import EventDraft, verify_store
from sealbox.access import (STATUS_CONFIRMED, STATUS_LOCAL, STATUS_PENDING, STATUS_UNSIGNED, AccessError,
                            access_status, get_grant, list_grants, retry, revoke, show_grant)
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity, disable_identity, rotate_key
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, ToolDenied
from identity_testkit import grant_key, sign_revocation_payload, signed_grant  # noqa: E402

AGENT = "agent:deploy-bot"
SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.fixture
def keys(store, tmp_path):
    root = grant_key(store)
    out = {"root": root}
    for name, role in (("alice", "approver"), ("dave", "agent"), ("aud", "auditor"), ("carol", "approver")):
        out[name] = add_identity(store, name, role, key_path=tmp_path / f"{name}.key", admin_key=root).key_path
    return out


def github_grant(store, provider, **kw):
    tokens = provider.issue()
    gid = signed_grant(store, AGENT, "github", "create_*", "repo", credential=provider.credential(tokens, **kw))
    return gid, tokens


def step_events(store, gid):
    return [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.revoked" and e.payload["grant_id"] == gid]


def call(store, grant):
    ran: list[str] = []
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
        try:
            result = run.call_tool("github", "create_issue", {"title": "x"}, lambda title: ran.append(title) or "ok",
                                   grant=grant)
        except ToolDenied as exc:
            result = exc
    decision = next(e.payload for e in store.read_run(run.run_id) if e.kind == "policy.decision")
    return result, decision, ran


def put(store, payload, principal):
    [ev] = store.append([EventDraft("access.revoked", payload, run_id=SYSTEM_RUN_ID, principal=principal)])
    return ev


def test_a_full_signed_revocation_by_an_approver_is_confirmed_at_the_real_provider(store, provider, keys):
    gid, tokens = github_grant(store, provider)
    grant_leaf = get_grant(store, gid).leaf_index
    assert revoke(store, gid, "incident 42", key_file=keys["alice"], backoff=0.01,
                  sleep=lambda s: None) == STATUS_CONFIRMED
    assert not provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])
    evs = step_events(store, gid)
    assert [e.payload["step"] for e in evs] == ["requested", "sent", "confirmed"]
    assert [(e.principal, e.payload["identity"], e.payload["origin"]) for e in evs] == [("alice", "alice", store.origin)] * 3
    # a chain: each names the previous step's leaf, the first the grant's
    assert [e.payload["after"] for e in evs] == [grant_leaf, evs[0].leaf_index, evs[1].leaf_index]
    assert [t["http_status"] for t in evs[1].payload["detail"]["tokens"]] == [200, 200]
    assert [t["active"] for t in evs[2].payload["detail"]["tokens"]] == [False, False]
    raw = b"".join(bytes(r[0]) for r in store._conn().execute("SELECT raw FROM events"))
    assert all(t.encode() not in raw for t in tokens.values())
    shown = show_grant(store, gid)
    assert [(s["step"], s["signature"], s["identity"]) for s in shown["steps"]] == [
        ("requested", "valid", "alice"), ("sent", "valid", "alice"), ("confirmed", "valid", "alice")]
    report = verify_store(store)
    assert report.ok and report.notes == ()


def test_retry_signs_its_steps_and_chains_after_the_failed_one(store, provider, keys):
    gid, tokens = github_grant(store, provider)
    provider.stop()
    assert revoke(store, gid, "offboarding", retries=1, key_file=keys["root"], backoff=0.01,
                  sleep=lambda s: None) == STATUS_PENDING
    provider.start()
    assert retry(store, gid, key_file=keys["carol"], backoff=0.01, sleep=lambda s: None) == STATUS_CONFIRMED
    evs = step_events(store, gid)
    assert [(e.payload["step"], e.principal) for e in evs] == [
        ("requested", "root"), ("failed", "root"), ("sent", "carol"), ("confirmed", "carol")]
    assert [e.payload["after"] for e in evs[1:]] == [e.leaf_index for e in evs[:-1]]
    assert verify_store(store).ok


def test_a_forged_confirmed_is_not_shown_as_confirmed_and_verify_reports_it(store, provider, keys, tmp_path):
    gid, tokens = github_grant(store, provider)
    provider.stop()
    assert revoke(store, gid, "x", retries=1, key_file=keys["root"], backoff=0.01,
                  sleep=lambda s: None) == STATUS_PENDING
    last = step_events(store, gid)[-1]
    # 1. the brief's attack: an unsigned confirmed appended by whoever can write the store
    put(store, {"grant_id": gid, "step": "confirmed"}, "x")
    # 2. signed by an agent's key (role may not revoke)
    put(store, sign_revocation_payload(store, {"grant_id": gid, "step": "confirmed", "detail": {}},
                                       last.leaf_index, keys["dave"]), "dave")
    # 3. an approver's valid confirmed, with its answer summary altered afterwards
    good = sign_revocation_payload(store, {"grant_id": gid, "step": "confirmed",
                                           "detail": {"tokens": [{"token_type_hint": "access_token", "active": True}]}},
                                   last.leaf_index, keys["alice"])
    good["detail"]["tokens"][0]["active"] = False
    put(store, good, "alice")
    # 4. a replay of the grant's own failed step (a valid signature, but not after the last valid step)
    put(store, dict(last.payload), "root")
    assert access_status(store, gid) == STATUS_PENDING
    row = show_grant(store, gid)
    assert row["status"] == STATUS_PENDING
    assert [s["signature"] for s in row["steps"]] == ["valid", "valid", "unsigned", "role", "bad_signature", "order"]
    assert [r["status"] for r in list_grants(store)] == [STATUS_PENDING]
    assert provider.is_active(tokens["access_token"])  # the tokens are live: never "confirmed"
    report = verify_store(store)
    assert not report.ok
    assert sorted(p.code for p in report.problems) == ["revocation_binding", "revocation_rule",
                                                       "revocation_signature"]
    assert [n for n in report.notes if "revocation step 'confirmed'" in n and "unsigned" in n]
    # the CLI shows the forged steps as not counted, and verify exits 1
    store_dir = str(Path(store.path))
    shown = subprocess.run([SEALBOX, "access", "show", gid, "-s", store_dir], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "250"})
    lines = shown.stdout.splitlines()
    assert lines[1] == f"status     {STATUS_PENDING}"
    assert [ln for ln in lines if "confirmed" in ln and "NOT COUNTED" not in ln] == []
    assert sum("NOT COUNTED (" in ln for ln in lines) == 4
    v = subprocess.run([SEALBOX, "verify", "-s", store_dir], capture_output=True, text=True)
    assert v.returncode == 1 and "revocation_signature" in v.stdout + v.stderr
    # the provider comes back: a genuine retry still confirms, chained after the last valid step
    provider.start()
    assert retry(store, gid, key_file=keys["alice"], backoff=0.01, sleep=lambda s: None) == STATUS_CONFIRMED
    assert step_events(store, gid)[-2].payload["after"] == last.leaf_index


def test_a_forged_unsigned_requested_still_denies_calls_and_can_be_revoked_properly(store, keys):
    gid = signed_grant(store, AGENT, "github", "create_*", "repo")
    assert call(store, gid)[0] == "ok"
    put(store, {"grant_id": gid, "step": "requested", "reason": "by hand"}, "user:mallory")
    result, decision, ran = call(store, gid)
    assert isinstance(result, ToolDenied) and ran == []
    assert (decision["effect"], decision["reason_code"]) == ("deny", "grant_invalid")
    assert decision["reason"].endswith("by user:mallory: by hand")
    assert access_status(store, gid) == STATUS_UNSIGNED
    report = verify_store(store)
    assert report.ok and [n for n in report.notes if "revocation step 'requested'" in n]
    # revoking it with a key records a valid request (the upgrade path for older, unsigned revocations)
    assert revoke(store, gid, "properly", key_file=keys["alice"]) == STATUS_LOCAL
    assert [s["signature"] for s in show_grant(store, gid)["steps"]] == ["unsigned", "valid"]
    assert isinstance(call(store, gid)[0], ToolDenied)
    with pytest.raises(AccessError, match="already revoked"):
        revoke(store, gid, "again", key_file=keys["alice"])


def count(store_dir):
    s = sealbox.open_store(store_dir)
    try:
        return s._conn().execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        s.close()


def test_bad_key_role_or_disabled_is_one_error_line_exit_2_nothing_recorded(store, provider, keys, tmp_path):
    gid, _ = github_grant(store, provider)
    pending, _ = github_grant(store, provider)
    provider.stop()
    revoke(store, pending, "x", retries=1, key_file=keys["root"], backoff=0.01, sleep=lambda s: None)
    disable_identity(store, "carol", admin_key=keys["root"])
    old = tmp_path / "alice-old.key"
    old.write_bytes(Path(keys["alice"]).read_bytes())
    old.chmod(0o600)
    rotate_key(store, "alice", tmp_path / "alice-new.key", admin_key=keys["root"])
    (tmp_path / "o").mkdir()
    other = sealbox.init_store(tmp_path / "o" / "other")
    stranger = add_identity(other, "stranger", "admin", key_path=tmp_path / "stranger.key").key_path
    other.close()
    store_dir = str(Path(store.path))
    store.close()
    before = count(store_dir)
    cases = [
        (keys["dave"], (), "identity 'dave' has role agent: only an admin or an approver may revoke"),
        (keys["aud"], (), "identity 'aud' has role auditor: only an admin or an approver may revoke"),
        (keys["carol"], (), "identity 'carol' is disabled: it cannot revoke"),
        (str(old), (), "this key is not alice's current key"),
        (str(stranger), (), "the key file names identity 'stranger', which this store does not know"),
        (keys["root"], ("--identity", "alice"), "the key file is identity 'root''s, not 'alice'"),
        (str(tmp_path / "missing.key"), (), "missing.key"),
    ]
    for key, extra, words in cases:
        for args in (["revoke", gid, "--reason", "r"], ["retry", pending]):
            proc = subprocess.run([SEALBOX, "access", *args, "-s", store_dir, "--key-file", str(key), *extra],
                                  capture_output=True, text=True)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)
            assert words in lines[0], (args, lines)
            assert proc.stdout == ""
    no_key = subprocess.run([SEALBOX, "access", "revoke", gid, "-s", store_dir, "--reason", "r"],
                            capture_output=True, text=True)
    assert no_key.returncode == 2 and "--key-file" in no_key.stderr
    assert count(store_dir) == before  # nothing recorded
    s = sealbox.open_store(store_dir)
    try:
        assert access_status(s, gid) == "active" and access_status(s, pending) == STATUS_PENDING
        with pytest.raises(AccessError, match="key_file"):
            revoke(s, gid, "r")
    finally:
        s.close()
