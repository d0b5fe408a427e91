"""A revocation the provider refused because it did not accept the client is never confirmed.

RFC 7662 §2.2 / §4 lets an introspection endpoint answer ``{"active": false}`` to a caller that
may not introspect a token, so when the revocation endpoint has just refused the same client
(``invalid_client`` / ``unauthorized_client``, or HTTP 401 / 403 without an answer about the token
itself), an ``active: false`` from introspection by that client proves nothing. Reproduced before
the fix with a provider on 127.0.0.1 answering every revocation 401 ``invalid_client`` and every
introspection 200 ``{"active": false}``: ``revoke`` recorded ``confirmed`` and ``sealbox access
revoke`` printed ``revoked (confirmed at provider)`` and exited 0, though nothing was revoked.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from access_provider import ScriptedServer
from identity_testkit import grant_key, signed_grant  # noqa: E402
from sealbox.access import STATUS_CONFIRMED, STATUS_PENDING, revoke, show_grant

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def server(revocation):
    return ScriptedServer(lambda method, path, form: revocation(form) if path.startswith("/revoke")
                          else (200, {}, {"active": False}))


def grant_at(store, srv):
    cred = {"revocation_endpoint": srv.base + "/revoke", "introspection_endpoint": srv.base + "/introspect",
            "client_id": "sealbox", "client_secret": "s3cr3t-of-the-client", "access_token": "access-token-abcdefgh",
            "refresh_token": "refresh-token-abcdefgh"}
    return signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=cred)


@pytest.mark.parametrize("answer, shown", [
    ((401, {}, {"error": "invalid_client"}), "HTTP 401 invalid_client"),
    ((400, {}, {"error": "unauthorized_client"}), "HTTP 400 unauthorized_client"),
    ((403, {}, b"Forbidden"), "HTTP 403"),
])
def test_introspection_does_not_confirm_what_the_revocation_endpoint_refused_the_client(store, answer, shown):
    srv = server(lambda form: answer)
    try:
        gid = grant_at(store, srv)
        assert revoke(store, gid, "incident", key_file=grant_key(store), sleep=lambda s: None) == STATUS_PENDING
    finally:
        srv.stop()
    row = show_grant(store, gid)
    assert [s["step"] for s in row["steps"]] == ["requested", "sent", "failed"]
    failed = row["steps"][2]["detail"]
    assert failed["stage"] == "introspection" and failed["pending"] is True
    assert failed["error"] == (
        f"refresh_token: the revocation endpoint refused the client ({shown}), so an introspection answer to the "
        f"same client does not confirm it; access_token: the revocation endpoint refused the client ({shown}), so "
        "an introspection answer to the same client does not confirm it")
    assert failed["tokens"] == [{"token_type_hint": "refresh_token", "active": False},
                                {"token_type_hint": "access_token", "active": False}]


def test_an_answer_about_the_token_is_still_confirmed_by_introspection(store):
    # unsupported_token_type (authlib answers it with 401) is about the token, not the client
    srv = server(lambda form: (401, {}, {"error": "unsupported_token_type"}) if form["token_type_hint"] == "access_token"
                 else (200, {}, {}))
    try:
        gid = grant_at(store, srv)
        assert revoke(store, gid, "incident", key_file=grant_key(store), sleep=lambda s: None) == STATUS_CONFIRMED
    finally:
        srv.stop()


def test_the_command_exits_3_pending(store, tmp_path):
    srv = server(lambda form: (401, {}, {"error": "invalid_client"}))
    try:
        gid = grant_at(store, srv)
        proc = subprocess.run([SEALBOX, "access", "revoke", gid, "-s", str(store.path), "--reason", "incident",
                               "--key-file", str(grant_key(store)), "--retries", "1"],
                              capture_output=True, text=True, timeout=120)
    finally:
        srv.stop()
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == f"{gid}: revoked (pending at provider)\n"
    assert "access_token" not in proc.stderr or "abcdefgh" not in proc.stderr
