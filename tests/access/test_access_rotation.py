"""Refresh token rotation (RFC 6749 §6, RFC 9700 §4.14): after the provider rotates a grant's tokens,
revocation must revoke and confirm the live ones, never the tokens rotated away.

Real stores (SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set) and the real OAuth provider
of tests/access/access_provider.py on 127.0.0.1, which rotates: after a refresh the old refresh token
is invalid (and introspects as inactive), the new one is active.
"""

from __future__ import annotations

import json

import pytest
import requests

from sealbox.access import (
    STATUS_CONFIRMED,
    STATUS_PENDING,
    AccessError,
    access_status,
    delete_credential,
    load_credential,
    rotate_credential,
    show_grant,
    token_fingerprint,
)
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity
from identity_testkit import grant_key, signed_grant  # noqa: E402
from identity_testkit import signed_retry as retry, signed_revoke as revoke  # noqa: E402

AGENT = "agent:deploy-bot"
FAST = {"backoff": 0.01, "sleep": lambda s: None}


def grant(store, provider):
    tokens = provider.issue()
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write", credential=provider.credential(tokens),
                       provider="test-provider")
    return gid, tokens


def refresh_over_http(provider, refresh_token):
    """What the agent's OAuth client does (RFC 6749 §6): POST grant_type=refresh_token to the token endpoint."""
    resp = requests.post(f"{provider.base}/token", data={"grant_type": "refresh_token", "refresh_token": refresh_token},
                         auth=(provider.client.client_id, provider.client.client_secret), timeout=10)
    return resp.status_code, resp.json()


def test_the_test_provider_rotates_refresh_tokens(provider):
    first = provider.issue()
    status, second = refresh_over_http(provider, first["refresh_token"])
    assert status == 200 and second["refresh_token"] != first["refresh_token"]
    assert not provider.is_active(first["refresh_token"])  # rotated away
    assert provider.is_active(second["refresh_token"]) and provider.is_active(second["access_token"])
    assert refresh_over_http(provider, first["refresh_token"]) == (400, {"error": "invalid_grant"})


def test_without_a_recorded_rotation_confirmed_is_said_while_the_live_token_works(store, provider):
    """The gap this feature closes, kept as a record of why: the rotated-away token is what gets checked."""
    gid, first = grant(store, provider)
    _, live = refresh_over_http(provider, first["refresh_token"])
    assert revoke(store, gid, "offboarding", **FAST) == STATUS_CONFIRMED
    assert provider.is_active(live["refresh_token"])  # the live token still works: why rotations must be recorded


def test_a_recorded_rotation_makes_revocation_revoke_and_confirm_the_live_tokens(store, provider):
    gid, first = grant(store, provider)
    _, live = refresh_over_http(provider, first["refresh_token"])
    seq = rotate_credential(store, gid, {"access_token": live["access_token"], "refresh_token": live["refresh_token"]},
                            key_file=grant_key(store))
    assert seq == 1
    assert load_credential(store, gid).refresh_token == live["refresh_token"]
    provider.requests.clear()
    assert revoke(store, gid, "offboarding", **FAST) == STATUS_CONFIRMED
    assert not provider.is_active(live["refresh_token"]) and not provider.is_active(live["access_token"])
    assert not provider.is_active(first["access_token"])  # the earlier access token: revoked best effort
    events = [e for e in store.read_run(SYSTEM_RUN_ID) if e.payload.get("grant_id") == gid]
    sent = next(e.payload["detail"] for e in events if e.kind == "access.revoked" and e.payload["step"] == "sent")
    confirmed = next(e.payload["detail"] for e in events
                     if e.kind == "access.revoked" and e.payload["step"] == "confirmed")
    assert sent["credential"] == 1 and confirmed["credential"] == 1
    assert sent["earlier"] == [{"credential": 0, "token_type_hint": "refresh_token", "http_status": 200},
                               {"credential": 0, "token_type_hint": "access_token", "http_status": 200}]
    assert [t["active"] for t in confirmed["tokens"]] == [False, False]
    # introspection asked about the live tokens only
    assert [p for p, _h in provider.requests].count("/introspect") == 2


def test_the_rotation_event_carries_fingerprints_and_no_secret(store, provider):
    gid, first = grant(store, provider)
    _, live = refresh_over_http(provider, first["refresh_token"])
    rotate_credential(store, gid, {"refresh_token": live["refresh_token"]}, key_file=grant_key(store))
    (event,) = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.credential_rotated"]
    p = event.payload
    assert p["grant_id"] == gid and p["seq"] == 1 and p["identity"] == "root" and event.principal == "root"
    assert p["fingerprints"] == {"refresh_token": token_fingerprint(store, live["refresh_token"])}
    assert p["fingerprints"]["refresh_token"].startswith("hmac-sha256:")
    raw = json.dumps(event.payload) + json.dumps(show_grant(store, gid))
    for secret in (live["access_token"], live["refresh_token"], *first.values(), provider.client.client_secret):
        assert secret not in raw
    # the access token left out stays the live one (a provider may keep it)
    cred = load_credential(store, gid)
    assert (cred.refresh_token, cred.access_token) == (live["refresh_token"], first["access_token"])
    row = show_grant(store, gid)
    assert [(r["seq"], r["by"], r["signature"]) for r in row["rotations"]] == [(1, "root", "valid")]
    assert row["rotations"][0]["ts"] == event.ts


def test_a_rotation_after_a_confirmed_revocation_makes_it_pending_until_retried(store, provider):
    """A rotation recorded late (the agent refreshed before it was revoked) withdraws the confirmation:
    that confirmation checked a token rotated away."""
    gid, first = grant(store, provider)
    _, live = refresh_over_http(provider, first["refresh_token"])
    assert revoke(store, gid, "offboarding", **FAST) == STATUS_CONFIRMED
    rotate_credential(store, gid, live, key_file=grant_key(store))
    assert access_status(store, gid) == STATUS_PENDING
    assert retry(store, gid, **FAST) == STATUS_CONFIRMED
    assert not provider.is_active(live["refresh_token"]) and not provider.is_active(live["access_token"])


def test_two_rotations_chain_and_the_latest_is_revoked(store, provider):
    gid, first = grant(store, provider)
    _, second = refresh_over_http(provider, first["refresh_token"])
    rotate_credential(store, gid, second, key_file=grant_key(store))
    _, third = refresh_over_http(provider, second["refresh_token"])
    assert rotate_credential(store, gid, third, key_file=grant_key(store)) == 2
    events = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.credential_rotated"]
    assert [e.payload["seq"] for e in events] == [1, 2]
    assert events[1].payload["after"] == events[0].leaf_index
    assert revoke(store, gid, "offboarding", **FAST) == STATUS_CONFIRMED
    for t in (second["access_token"], second["refresh_token"], third["access_token"], third["refresh_token"]):
        assert not provider.is_active(t)


def test_bad_rotations_are_refused_and_record_nothing(store, provider, tmp_path, raw_sql):
    gid, first = grant(store, provider)
    key = grant_key(store)
    local = signed_grant(store, AGENT, "github", "create_*")
    add_identity(store, "user:appr", "approver", key_path=tmp_path / "appr.key", admin_key=key)
    before = len(list(store.read_run(SYSTEM_RUN_ID)))
    cases = [
        (gid, {}, "needs the new 'refresh_token' or 'access_token'", None),
        (gid, {"client_secret": "x"}, "unknown rotation keys ['client_secret']", None),
        (gid, {"refresh_token": "n", "expires_in": -5}, "'expires_in' must be a number of seconds", None),
        (gid, {"refresh_token": 7}, "'refresh_token' must be a non-empty string", None),
        (gid, {"refresh_token": first["refresh_token"]}, "no new token", None),
        (gid, {"refresh_token": "n", "access_token_expires_at": "soon"}, "access_token_expires_at", None),
        ("nope", {"refresh_token": "n"}, "no grant 'nope'", None),
        (local, {"refresh_token": "n"}, "holds no provider credential", None),
    ]
    for g, tokens, words, code in cases:
        with pytest.raises(AccessError, match=None) as info:
            rotate_credential(store, g, tokens, key_file=key)
        assert words in str(info.value)
        assert "n" not in [str(info.value)]
    with pytest.raises(AccessError) as info:
        rotate_credential(store, gid, {"refresh_token": "new-one"}, key_file=tmp_path / "appr.key")
    assert info.value.code == "role"
    with pytest.raises(AccessError, match="a rotation is signed"):
        rotate_credential(store, gid, {"refresh_token": "new-one"}, key_file=None)
    assert len(list(store.read_run(SYSTEM_RUN_ID))) == before + 0
    assert raw_sql(store, "SELECT count(*) FROM credential_rotations") == [(0,)]
    # deleted credential: nothing to rotate
    revoke(store, gid, "done", **FAST)
    assert delete_credential(store, gid)
    with pytest.raises(AccessError, match="was deleted"):
        rotate_credential(store, gid, {"refresh_token": "new-one"}, key_file=key)


def test_rotated_rows_are_append_only_and_deleted_with_the_credential(store, provider, raw_sql):
    gid, first = grant(store, provider)
    _, live = refresh_over_http(provider, first["refresh_token"])
    rotate_credential(store, gid, live, key_file=grant_key(store))
    with pytest.raises(Exception, match="rotated credentials are appended"):
        raw_sql(store, "UPDATE credential_rotations SET created_at = 'x'")
    assert revoke(store, gid, "done", **FAST) == STATUS_CONFIRMED
    assert delete_credential(store, gid)
    assert raw_sql(store, "SELECT count(*) FROM credential_rotations") == [(0,)]
    assert raw_sql(store, "SELECT count(*) FROM credentials") == [(0,)]
    assert show_grant(store, gid)["credential"] == "deleted"


def test_a_store_made_before_rotations_is_upgraded_when_opened(store, provider, raw_sql):
    """A store of the schema before credential_rotations (SQLite 8, PostgreSQL 3) gets the table from its
    first writer, as every migration; its grants can then record rotations."""
    import sealbox

    gid, first = grant(store, provider)
    version = 9 if store.backend == "sqlite" else 4
    path = store.path
    store.close()
    if store.backend == "sqlite":
        raw_sql(store, "DROP TABLE credential_rotations")
        raw_sql(store, "DELETE FROM schema_migrations WHERE version = 9")
    else:
        raw_sql(store, "DROP TABLE credential_rotations; DROP FUNCTION sealbox_credential_rotations_appended();"
                       " DELETE FROM schema_migrations WHERE version = 4")
    assert raw_sql(store, "SELECT max(version) FROM schema_migrations") == [(version - 1,)]
    reopened = sealbox.open_store(path)
    try:
        assert raw_sql(reopened, "SELECT max(version) FROM schema_migrations") == [(version,)]
        _, live = refresh_over_http(provider, first["refresh_token"])
        assert rotate_credential(reopened, gid, live, key_file=grant_key(reopened)) == 1
        assert revoke(reopened, gid, "offboarding", **FAST) == STATUS_CONFIRMED
        assert not provider.is_active(live["refresh_token"])
    finally:
        reopened.close()
