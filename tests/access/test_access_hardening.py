"""Endpoint checks, redirects, and scrubbing of what a provider echoes.

Real SQLite stores (and PostgreSQL ones when SEALBOX_TEST_POSTGRES_URL is set); providers are real HTTP
servers on 127.0.0.1 (``ScriptedServer`` for misbehaviour authlib's endpoints never show, ``OAuthProvider``
otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from access_provider import ScriptedServer

from sealbox.access import (
    STATUS_PENDING,
    AccessError,
    ProviderCredential,
    _scrub,
    _seal,
    access_status,
    grant_access,
    parse_expiry,
    revoke,
)
from sealbox.events import SYSTEM_RUN_ID, EventDraft
from identity_testkit import grant_key, signed_grant  # noqa: E402
from identity_testkit import signed_retry as retry, signed_revoke as revoke  # noqa: E402,F811

AGENT = "agent:deploy-bot"
SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.fixture
def refused_port():
    """A 127.0.0.1 port bound for the whole test and never listening: connections to it are refused. (A
    port bound, closed and then used could meanwhile be taken by another socket of this busy host, and a
    client's own ephemeral port could even equal it, a TCP self-connect.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def revoked_details(store, gid):
    return [(e.payload["step"], e.payload["detail"]) for e in store.read_run(SYSTEM_RUN_ID)
            if e.kind == "access.revoked" and e.payload["grant_id"] == gid]


def all_raw(store) -> bytes:
    return b"".join(e.raw for e in store.read_range(0, store.size()))


@pytest.fixture
def servers():
    started: list[ScriptedServer] = []

    def start(answer):
        started.append(ScriptedServer(answer))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def cred_for(base, *, introspection=False, **kw):
    cred = {"revocation_endpoint": f"{base}/revoke", "client_id": "c", "client_secret": "client-secret-value",
            "access_token": "access-token-value-0123456789", "refresh_token": "refresh-token-value-0123456789"}
    if introspection:
        cred["introspection_endpoint"] = f"{base}/introspect"
    return {**cred, **kw}


# --------------------------------------------------------------------------- endpoints


BASE = {"client_id": "c", "refresh_token": "r"}


@pytest.mark.parametrize("url, message", [
    ("https://svc:BasicAuthPassw0rd@auth.example/oauth/revoke",
     "must not carry a user name or password (the part before '@'); Sealbox authenticates to the provider "
     "with 'client_id' and 'client_secret'"),
    ("https://svc@auth.example/oauth/revoke", "must not carry a user name or password"),
    ("https://:BasicAuthPassw0rd@auth.example/oauth/revoke", "must not carry a user name or password"),
    ("https://@auth.example/oauth/revoke", "must not carry a user name or password"),
    ("http://127.0.0.1:99999/revoke", "has an invalid port (a port must be a number from 1 to 65535)"),
    ("http://127.0.0.1:0/revoke", "has an invalid port (a port must be a number from 1 to 65535)"),
    ("https://auth.example:https/revoke", "has an invalid port (a port must be a number from 1 to 65535)"),
    ("https://[::1/revoke",
     "is not a valid URL (its host is malformed; an IPv6 address goes in brackets: https://[::1]/...)"),
    ("https://[::g]/revoke", "is not a valid URL (its host is malformed"),
    ("https://auth..example/revoke",
     "has an invalid host (a DNS name, an IPv4 address, or an IPv6 address in brackets)"),
    ("https://-auth.example/revoke",
     "has an invalid host (a DNS name, an IPv4 address, or an IPv6 address in brackets)"),
    ("https:///revoke", "must be an https URL with a host"),
    ("https://auth example/revoke", "must be a URL without spaces or control characters"),
    ("https://auth.example/revoke\n", "must be a URL without spaces or control characters"),
    ("http://auth.example/revoke", "must be an https URL (RFC 7009 §2 requires TLS; plain http is accepted "
                                   "only for a provider on this machine)"),
])
@pytest.mark.parametrize("key", ["revocation_endpoint", "introspection_endpoint"])
def test_an_endpoint_sealbox_cannot_call_is_refused_without_echoing_it(store, url, message, key):
    cred = {**BASE, "revocation_endpoint": "https://auth.example/revoke", key: url}
    with pytest.raises(AccessError) as exc:
        ProviderCredential.from_dict(cred)
    assert str(exc.value).startswith(f"credential key {key!r} ") and message in str(exc.value)
    assert url.strip() not in str(exc.value) and "Passw0rd" not in str(exc.value)
    # nothing is written: no event, no credential row
    size = store.size()
    with pytest.raises(AccessError):
        signed_grant(store, AGENT, "db", "*", None, credential=cred)
    assert store.size() == size
    assert store._conn().execute("SELECT count(*) FROM credentials").fetchone() == (0,)


def test_a_credential_built_directly_is_checked_too(store):
    cred = ProviderCredential(revocation_endpoint="https://svc:BasicAuthPassw0rd@auth.example/oauth/revoke",
                              client_id="c", refresh_token="r")
    with pytest.raises(AccessError, match="must not carry a user name or password"):
        signed_grant(store, AGENT, "db", "*", None, credential=cred)
    assert b"BasicAuthPassw0rd" not in all_raw(store)


@pytest.mark.parametrize("url", [
    "https://auth.example/oauth/revoke", "https://auth.example:8443/r", "https://auth.example./r",
    "https://10.0.0.1/r", "https://xn--bcher-kva.example/r", "https://bücher.example/r",
    "https://auth_server.internal/r", "http://localhost:1/r", "http://127.0.0.1:65535/r", "http://[::1]:8080/r",
    "https://auth.example/r?tenant=a b".replace(" ", "%20"),
])
def test_an_endpoint_that_passes_is_one_requests_can_send_to(url):
    assert ProviderCredential.from_dict({**BASE, "revocation_endpoint": url}).revocation_endpoint == url
    requests.Request("POST", url).prepare()  # raises if requests could not send it


@pytest.mark.parametrize("endpoint, provider", [
    ("https://Auth.Example:8443/oauth/revoke", "auth.example"),
    ("https://auth.example/oauth/revoke", "auth.example"),
    ("http://[::1]:8080/revoke", "::1"),
])
def test_the_default_provider_name_is_the_host_name(store, endpoint, provider):
    gid = signed_grant(store, AGENT, "db", "*", None, credential={**BASE, "revocation_endpoint": endpoint})
    granted = next(e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted")
    assert {k: v for k, v in granted.payload.items() if k not in ("origin", "identity", "granted_at", "signature",
                                                                   "key_id")} == {
        "grant_id": gid, "principal": AGENT, "server": "db", "tool": "*", "scope": None, "expires_at": None,
        "provider": provider, "credential": True}


def _store_old_credential(store, gid, cred: ProviderCredential) -> None:
    from access_db import _raw_sql as raw_sql

    """A grant as a store written before endpoint checks holds it (the same rows grant_access writes)."""
    nonce, ciphertext = _seal(store._secret, gid, cred)
    raw_sql(store, "INSERT INTO credentials (grant_id, nonce, ciphertext, created_at) VALUES (?, ?, ?, ?)",
            (gid, nonce, ciphertext, "2026-01-01T00:00:00.000000Z"))
    store.append(EventDraft("access.granted", {"grant_id": gid, "principal": AGENT, "server": "db", "tool": "*",
                                               "scope": None, "expires_at": None, "provider": "old",
                                               "credential": True}, run_id=SYSTEM_RUN_ID, principal="sealbox"))


def test_an_old_credential_with_userinfo_is_revoked_and_its_password_never_recorded(store, servers, no_sleep):
    srv = servers(lambda method, path, form: (200, {}, b""))
    cred = ProviderCredential(revocation_endpoint=f"http://svc:OldPassw0rd@127.0.0.1:{srv.port}/revoke",
                              client_id="c", client_secret="client-secret-value", access_token="tok-0123456789")
    _store_old_credential(store, "grant_old", cred)
    assert revoke(store, "grant_old", "x", backoff=0.01, sleep=no_sleep.append) == \
        "revoked (sent to provider, unconfirmed: no introspection endpoint)"
    assert revoked_details(store, "grant_old")[1] == ("sent", {
        "endpoint": f"http://127.0.0.1:{srv.port}/revoke", "attempts": 1, "introspection": False,
        "tokens": [{"token_type_hint": "access_token", "http_status": 200}]})
    assert [(m, p, f["token"]) for m, p, f in srv.requests] == [("POST", "/revoke", "tok-0123456789")]
    assert b"OldPassw0rd" not in all_raw(store)


def test_an_old_credential_with_an_unusable_endpoint_fails_at_once_and_says_why(store, no_sleep):
    cred = ProviderCredential(revocation_endpoint="http://127.0.0.1:99999/revoke", client_id="c",
                              access_token="tok-0123456789")
    _store_old_credential(store, "grant_old", cred)
    assert revoke(store, "grant_old", "x", backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    assert revoked_details(store, "grant_old")[1] == ("failed", {
        "stage": "credential", "pending": True,
        "error": "credential key 'revocation_endpoint' has an invalid port (a port must be a number from 1 to "
                 "65535): its tokens cannot be revoked at the provider through Sealbox"})
    assert no_sleep == []  # not retried as an outage


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirected_revocation_is_a_failure_and_is_not_followed(store, servers, no_sleep, status):
    elsewhere = servers(lambda method, path, form: (200, {}, b"login"))
    srv = servers(lambda method, path, form: (status, {"Location": f"{elsewhere.base}/collect"}, b""))
    gid = signed_grant(store, AGENT, "db", "*", None, credential=cred_for(srv.base, introspection=True))
    assert revoke(store, gid, "x", backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    assert access_status(store, gid) == STATUS_PENDING
    assert revoked_details(store, gid)[1:] == [("failed", {
        "stage": "revocation", "endpoint": f"{srv.base}/revoke", "attempts": 1, "pending": True,
        "answered": [], "unanswered": [],
        "redirected": [{"token_type_hint": "refresh_token", "http_status": status},
                       {"token_type_hint": "access_token", "http_status": status}],
        "error": f"the provider answered a redirect (HTTP {status}); redirects are not followed"})]
    assert [(m, p) for m, p, _ in srv.requests] == [("POST", "/revoke"), ("POST", "/revoke")]
    assert elsewhere.requests == []  # neither the token nor the client secret went anywhere else
    assert no_sleep == []  # an answer, not an outage: not retried


def test_a_redirected_introspection_never_confirms(store, servers, no_sleep):
    elsewhere = servers(lambda method, path, form: (200, {}, {"active": False}))

    def answer(method, path, form):
        if path == "/revoke":
            return 200, {}, b""
        return 307, {"Location": f"{elsewhere.base}/introspect"}, b""

    srv = servers(answer)
    gid = signed_grant(store, AGENT, "db", "*", None, credential=cred_for(srv.base, introspection=True))
    assert revoke(store, gid, "x", backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    why = "introspection: the provider answered a redirect (HTTP 307); redirects are not followed"
    assert revoked_details(store, gid)[2] == ("failed", {
        "stage": "introspection", "pending": True, "endpoint": f"{srv.base}/introspect", "attempts": 1,
        "error": f"refresh_token: {why}; access_token: {why}",
        "tokens": [{"token_type_hint": "refresh_token", "http_status": 307,
                    "error": "the provider answered a redirect (HTTP 307); redirects are not followed"},
                   {"token_type_hint": "access_token", "http_status": 307,
                    "error": "the provider answered a redirect (HTTP 307); redirects are not followed"}]})
    assert elsewhere.requests == []


def test_an_exp_no_datetime_can_hold_is_left_out(store, servers, no_sleep):
    srv = servers(lambda method, path, form: (200, {}, {"active": True, "exp": 10 ** 20} if path == "/introspect"
                                                   else b""))
    gid = signed_grant(store, AGENT, "db", "*", None, credential=cred_for(srv.base, introspection=True))
    assert revoke(store, gid, "x", backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    step, detail = revoked_details(store, gid)[2]
    assert step == "failed" and detail["tokens"] == [{"token_type_hint": "refresh_token", "active": True},
                                                     {"token_type_hint": "access_token", "active": True}]
    assert detail["error"] == ("refresh_token is still active at the provider; "
                               "access_token is still active at the provider")


# --------------------------------------------------------------------------- what the provider echoes


TOKEN = "gho_SECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRET0123456789"


@pytest.mark.parametrize("echo, recorded", [
    # the whole token echoed, past the 80-character limit: scrubbed first, then clipped
    (lambda tok: f"invalid_request: token {tok} unknown", "invalid_request: token [secret] unknown"),
    # the provider itself cut the token short: its first characters are dropped
    (lambda tok: f"invalid_request: the token {tok[:40]}", "invalid_request: the token "),
    # a cut token the 80-character limit cuts again
    (lambda tok: "z" * 60 + " " + tok[:50] + "!", "z" * 60 + " "),
    # a long secret is scrubbed inside a word too
    (lambda tok: f"bad:{tok}:bad", "bad:[secret]:bad"),
])
def test_an_echoed_token_is_scrubbed_before_it_is_clipped(store, servers, no_sleep, echo, recorded):
    srv = servers(lambda method, path, form: (400, {}, {"error": echo(form["token"])}))
    gid = signed_grant(store, AGENT, "db", "*", None, credential={
        "revocation_endpoint": f"{srv.base}/revoke", "client_id": "c", "client_secret": "cs-0123456789",
        "access_token": TOKEN})
    assert revoke(store, gid, "x", backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    details = revoked_details(store, gid)
    assert details[1] == ("sent", {"endpoint": f"{srv.base}/revoke", "attempts": 1, "introspection": False,
                                   "tokens": [{"token_type_hint": "access_token", "http_status": 400,
                                               "error": recorded}]})
    assert details[2][1]["refused"] == [{"token_type_hint": "access_token", "http_status": 400, "error": recorded}]
    assert TOKEN[:8].encode() not in all_raw(store)


def test_a_5xx_error_text_is_scrubbed_before_it_is_clipped(store, servers, no_sleep):
    srv = servers(lambda method, path, form: (503, {}, {"error": f"temporarily_unavailable for {form['token']}!"}))
    gid = signed_grant(store, AGENT, "db", "*", None, credential={
        "revocation_endpoint": f"{srv.base}/revoke", "client_id": "c", "access_token": TOKEN})
    assert revoke(store, gid, "x", retries=2, backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    detail = revoked_details(store, gid)[1][1]
    assert detail["unanswered"] == [{"token_type_hint": "access_token",
                                     "error": "HTTP 503 temporarily_unavailable for [secret]!"}]
    assert TOKEN[:8].encode() not in all_raw(store)


def test_short_secrets_are_scrubbed_only_as_whole_tokens(store, servers, no_sleep):
    srv = servers(lambda method, path, form: (
        400, {}, {"error": f"invalid_request: token {form['token']} unknown ({form['token']}); client e rejected"}))
    gid = signed_grant(store, AGENT, "db", "*", None, credential={
        "revocation_endpoint": f"{srv.base}/revoke", "client_id": "c", "client_secret": "e", "access_token": "t"})
    assert revoke(store, gid, "x", backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    details = revoked_details(store, gid)
    recorded = "invalid_request: token [secret] unknown ([secret]); client [secret] rejected"
    assert details[1][1]["tokens"] == [{"token_type_hint": "access_token", "http_status": 400, "error": recorded}]
    assert details[2] == ("failed", {
        "stage": "revocation", "pending": True,
        "refused": [{"token_type_hint": "access_token", "http_status": 400, "error": recorded}],
        "error": "the provider refused to revoke access_token; it has no introspection endpoint to check the tokens"})


def test_a_short_secret_does_not_garble_an_outage_record(refused_port, store, no_sleep):
    port = refused_port
    gid = signed_grant(store, AGENT, "db", "*", None, credential={
        "revocation_endpoint": f"http://127.0.0.1:{port}/revoke", "client_id": "c", "client_secret": "e",
        "access_token": "t"})
    assert revoke(store, gid, "x", retries=1, backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    detail = revoked_details(store, gid)[1][1]
    refused = f"ConnectionError: [Errno {errno.ECONNREFUSED}] {os.strerror(errno.ECONNREFUSED)}"
    assert detail["error"] == f"the provider could not be reached or was unavailable: {refused}"
    assert detail["unanswered"] == [{"token_type_hint": "access_token", "error": refused}]


def test_scrub_shapes():
    secrets = ["e", "secret", "a-long-secret-value"]
    assert _scrub({"a": ["the e key", "see", "x a-long-secret-value y", "secret [secret] e.x"]}, secrets) == {
        "a": ["the [secret] key", "see", "x [secret] y", "[secret] [secret] e.x"]}
    assert _scrub("prefix-a-long-secret-valuesuffix", secrets) == "prefix-[secret]suffix"
    assert _scrub(5, secrets) == 5


# --------------------------------------------------------------------------- times


@pytest.mark.parametrize("value, message", [
    ("99999999999d", "expires_at: the duration is too long (it would end after year 9999)"),
    ("9999-12-31T23:59:59-01:00", "expires_at is out of range (before year 1 or after year 9999 in UTC)"),
    ("tok_PASTED_IN_WRONG_FIELD", "expires_at is not an RFC 3339 time, a date, or a duration "
                                  "(90s, 15m, 12h, 30d, 1w)"),
    ("2026-12-01T00:00:00", "expires_at has no UTC offset (add Z or +hh:mm)"),
    ("", "expires_at must be a time or a duration, got an empty string"),
    (5, "expires_at must be a time or a duration, got int"),
])
def test_bad_expiries_name_the_key_never_the_value(value, message):
    with pytest.raises(AccessError) as exc:
        parse_expiry(value)
    assert str(exc.value) == message


def test_a_bad_access_token_expiry_names_the_key_never_the_value():
    with pytest.raises(AccessError) as exc:
        ProviderCredential.from_dict({**BASE, "revocation_endpoint": "https://a/r",
                                      "access_token_expires_at": "tok_PASTED_IN_WRONG_FIELD"})
    assert str(exc.value) == "access_token_expires_at is not an RFC 3339 time"


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("cred, extra, line", [
    ({"revocation_endpoint": "https://[::1/revoke"}, (),
     "error: credential key 'revocation_endpoint' is not a valid URL (its host is malformed; an IPv6 address goes "
     "in brackets: https://[::1]/...)"),
    ({"revocation_endpoint": "http://127.0.0.1:99999/revoke"}, (),
     "error: credential key 'revocation_endpoint' has an invalid port (a port must be a number from 1 to 65535)"),
    ({"revocation_endpoint": "https://svc:BasicAuthPassw0rd@auth.example/oauth/revoke"}, (),
     "error: credential key 'revocation_endpoint' must not carry a user name or password (the part before '@'); "
     "Sealbox authenticates to the provider with 'client_id' and 'client_secret'"),
    ({"revocation_endpoint": "https://a/r", "access_token_expires_at": "tok_PASTED_IN_WRONG_FIELD"}, (),
     "error: access_token_expires_at is not an RFC 3339 time"),
    (None, ("--expires", "99999999999d"), "error: expires_at: the duration is too long (it would end after year 9999)"),
])
def test_grant_mistakes_are_one_error_line_exit_2(tmp_path, cred, extra, line):
    import sealbox

    s = sealbox.init_store(tmp_path / "s")
    grant_key(s)
    s.close()
    args = [SEALBOX, "access", "grant", "-s", str(tmp_path / "s"), "--principal", "p", "--server", "s", "--tool", "t",
            "--key-file", str(tmp_path / "root.key"), *extra]
    if cred is not None:
        path = tmp_path / "cred.json"
        path.write_text(json.dumps({"access_token": "t", "client_id": "c", **cred}))
        path.chmod(0o600)
        args += ["--credential-file", str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


# --------------------------------------------------------------------------- endpoint query strings


def test_an_endpoints_query_string_is_never_recorded(store, no_sleep):
    """RFC 6749 §3.1 lets an endpoint URL carry a query (some providers put an API key or a
    tenant secret there); it was recorded in the `sent`/`confirmed`/`failed` steps' `endpoint`
    in the clear, in hashed bytes no one can ever erase."""
    from access_provider import OAuthProvider

    provider = OAuthProvider().start()
    try:
        tokens = provider.issue()
        cred = provider.credential(tokens)
        cred["revocation_endpoint"] += "?api_key=QuerySecret-rev-0123#frag-secret-0123"
        cred["introspection_endpoint"] += "?api_key=QuerySecret-int-0123"
        gid = signed_grant(store, AGENT, "github", "*", None, credential=cred)
        assert revoke(store, gid, "x", backoff=0.01, sleep=no_sleep.append) == "revoked (confirmed at provider)"
        details = revoked_details(store, gid)
        assert [(s, d.get("endpoint")) for s, d in details] == [
            ("requested", None), ("sent", f"{provider.base}/revoke"), ("confirmed", f"{provider.base}/introspect")]
        provider.stop()  # and when the provider is down, the failure names no query either
        gid2 = signed_grant(store, AGENT, "github", "*", None, credential=cred)
        assert revoke(store, gid2, "x", retries=1, backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
        assert revoked_details(store, gid2)[1][1]["endpoint"] == f"{provider.base}/revoke"
    finally:
        provider.stop()
    raw = all_raw(store)
    for secret in (b"QuerySecret-rev-0123", b"QuerySecret-int-0123", b"frag-secret-0123", b"api_key"):
        assert secret not in raw
    store.issue_checkpoint()
    for f in store.path.iterdir():
        assert b"QuerySecret" not in f.read_bytes(), f.name


def test_a_query_secret_echoed_in_an_error_is_scrubbed():
    cred = ProviderCredential.from_dict({**BASE, "revocation_endpoint":
                                         "https://auth.example/revoke?key=QuerySecret-0123&t=ab%2Bcd-long-value"})
    assert "QuerySecret-0123" in cred.secrets() and "ab+cd-long-value" in cred.secrets()
    assert _scrub("HTTPSConnectionPool: url: /revoke?key=QuerySecret-0123&t=ab%2Bcd-long-value (SSLError)",
                  cred.secrets()) == "HTTPSConnectionPool: url: /revoke?key=[secret]&t=[secret] (SSLError)"


@pytest.mark.parametrize("body, why", [
    ({"active": 0}, "with 'active' not a boolean (int)"),
    ({"active": "false"}, "with 'active' not a boolean (str)"),
    ({"active": None}, "with 'active' not a boolean (null)"),
    ({"exp": 1}, "without an 'active' field"),
    (b"<html>ok</html>", "without a JSON object body"),
])
def test_an_introspection_answer_without_a_boolean_active_never_confirms_and_says_why(store, servers, no_sleep,
                                                                                      body, why):
    """`{"active": 0}` or `"false"` is not RFC 7662's boolean: never confirmed, and the failure
    said the answer had no 'active' field when it had one."""
    srv = servers(lambda method, path, form: (200, {}, body) if path == "/introspect" else (200, {}, b""))
    gid = signed_grant(store, AGENT, "db", "*", None, credential=cred_for(srv.base, introspection=True))
    assert revoke(store, gid, "x", retries=1, backoff=0.01, sleep=no_sleep.append) == STATUS_PENDING
    step, detail = revoked_details(store, gid)[-1]
    assert step == "failed" and detail["stage"] == "introspection"
    assert detail["error"] == (f"refresh_token: introspection answered HTTP 200 {why}; "
                               f"access_token: introspection answered HTTP 200 {why}")


# --------------------------------------------------------------------------- a provider that never finishes


class _Trickler:
    """A raw TCP server on 127.0.0.1 that answers every connection with a status line, then one
    header byte every `every` seconds, forever (or a `body` of any size after valid headers)."""

    def __init__(self, every=0.2, body=None):
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.every, self.body, self.stopped = every, body, False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading

        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        import time

        try:
            conn.recv(65536)
            if self.body is not None:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(self.body)).encode() + b"\r\n\r\n" + self.body)
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not self.stopped:
                conn.sendall(b"a")
                time.sleep(self.every)
        except OSError:
            pass
        finally:
            conn.close()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.stopped = True
        self.sock.close()


def test_a_provider_that_trickles_its_answer_cannot_hold_the_revocation_forever(store):
    """The HTTP timeout is per socket read: a provider sending one byte every 0.2 s (under the
    1 s timeout) held `revoke` for as long as it liked, with nothing recorded after `requested`.
    Each request now has a total deadline; past it the provider counts as unavailable."""
    import threading
    import time

    from sealbox.access import AuthlibProviderClient

    srv = _Trickler()
    try:
        gid = signed_grant(store, AGENT, "db", "*", None, credential=cred_for(srv.base, introspection=True))
        out: list = []
        started = time.monotonic()
        worker = threading.Thread(target=lambda: out.append(revoke(
            store, gid, "x", AuthlibProviderClient(timeout=1, deadline=1.5), retries=1, sleep=lambda s: None)),
            daemon=True)
        worker.start()
        worker.join(20)
        assert not worker.is_alive(), "revoke still waiting on a provider that never finishes its answer"
        assert out == [STATUS_PENDING] and time.monotonic() - started < 10
        step, detail = revoked_details(store, gid)[-1]
        assert (step, detail["stage"]) == ("failed", "revocation")
        assert [u["error"] for u in detail["unanswered"]] == [
            "ProviderUnavailable: no complete answer within 1.5 s"] * 2
    finally:
        srv.stop()


def test_an_oversized_provider_answer_is_not_read_whole(store):
    """A 64 MiB introspection answer was read into memory whole; answers over 1 MiB are now
    cut there and count as no JSON object (never confirmed)."""
    from sealbox.access import MAX_ANSWER_BYTES, AuthlibProviderClient, ProviderCredential

    big = b'{"active": false, "pad": "' + b"x" * (64 << 20) + b'"}'
    srv = _Trickler(body=big)
    try:
        cred = ProviderCredential.from_dict(cred_for(srv.base, introspection=True))
        client = AuthlibProviderClient(timeout=5)
        answer = client.introspect(cred, cred.access_token, "access_token")
        assert MAX_ANSWER_BYTES == 1 << 20 and answer.status == 200 and answer.body is None
    finally:
        srv.stop()
