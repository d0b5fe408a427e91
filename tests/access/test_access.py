"""Grants, provider credentials and revocation at a real RFC 7009 + RFC 7662 provider.

The store is a real SQLite store, and a PostgreSQL one when SEALBOX_TEST_POSTGRES_URL is set; the
provider is authlib's RevocationEndpoint and IntrospectionEndpoint served over HTTP on 127.0.0.1
(tests/access/access_provider.py).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from sealbox import verify_store
from sealbox.access import (
    STATUS_ACTIVE,
    STATUS_CONFIRMED,
    STATUS_EXPIRED,
    STATUS_LOCAL,
    STATUS_PENDING,
    STATUS_UNCONFIRMED,
    AccessError,
    ProviderCredential,
    access_status,
    delete_credential,
    grant_access,
    grant_status,
    list_grants,
    load_credential,
    retry,
    revoke,
    show_grant,
)
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, ToolDenied
from identity_testkit import sign_grant_payload, signed_grant  # noqa: E402
from identity_testkit import signed_retry as retry, signed_revoke as revoke  # noqa: E402,F811

AGENT = "agent:deploy-bot"


def steps(store, grant_id):
    return [(e.payload["step"]) for e in store.read_run(SYSTEM_RUN_ID)
            if e.kind == "access.revoked" and e.payload["grant_id"] == grant_id]


def revoked_events(store, grant_id):
    return [e for e in store.read_run(SYSTEM_RUN_ID)
            if e.kind == "access.revoked" and e.payload["grant_id"] == grant_id]


def call(store, grant, fn, *, principal=AGENT, server="github", tool="create_issue"):
    """One tool call in a fresh run under ``grant``; returns (result or ToolDenied, run_id)."""
    rec = Recorder(store, ALLOW_ALL)
    with rec.run(agent="deploy-bot", principal=principal) as run:
        try:
            return run.call_tool(server, tool, {"title": "x"}, fn, grant=grant), run.run_id
        except ToolDenied as exc:
            return exc, run.run_id


def decision_of(store, run_id):
    return next(e.payload for e in store.read_run(run_id) if e.kind == "policy.decision")


def fast(delays):
    return {"backoff": 0.01, "sleep": delays.append}


def github_grant(store, provider, **kw):
    tokens = provider.issue()
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write",
                       credential=provider.credential(tokens, **kw), provider="test-provider")
    return gid, tokens


# --------------------------------------------------------------------------- grant and use


def test_grant_and_use(store, provider):
    gid, _ = github_grant(store, provider)
    ran = []
    result, run_id = call(store, gid, lambda title: ran.append(title) or "ok")
    assert result == "ok" and ran == ["x"]
    d = decision_of(store, run_id)
    assert (d["effect"], d["reason_code"]) == ("allow", "policy_allow")
    tc = next(e.payload for e in store.read_run(run_id) if e.kind == "tool.call")
    assert tc["grant"] == gid
    granted = next(e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted")
    signature = {k: granted.payload.pop(k) for k in ("origin", "identity", "granted_at", "signature", "key_id")}
    assert granted.payload == {"grant_id": gid, "principal": AGENT, "server": "github", "tool": "create_*",
                               "scope": "repo:write", "expires_at": None, "provider": "test-provider",
                               "credential": True}
    assert (signature["origin"], signature["identity"], granted.principal) == (store.origin, "root", "root")
    assert access_status(store, gid) == STATUS_ACTIVE
    assert verify_store(store).ok


@pytest.mark.parametrize("principal, server, tool, words", [
    ("agent:other", "github", "create_issue", "held by agent:deploy-bot, not agent:other"),
    (AGENT, "github", "delete_repo", "covers github/create_*, not github/delete_repo"),
    (AGENT, "gitlab", "create_issue", "not gitlab/create_issue"),
])
def test_a_grant_only_covers_its_principal_and_tools(store, principal, server, tool, words):
    gid = signed_grant(store, AGENT, "github", "create_*", None)
    ran = []
    denied, run_id = call(store, gid, ran.append, principal=principal, server=server, tool=tool)
    assert isinstance(denied, ToolDenied) and ran == []
    d = decision_of(store, run_id)
    assert (d["effect"], d["reason_code"], d["rule"]) == ("deny", "grant_invalid", None)
    assert words in d["reason"]
    assert not any(e.kind == "tool.result" for e in store.read_run(run_id))


def test_unknown_and_expired_grants_are_denied_implicit_ones_are_not_checked(store):
    denied, run_id = call(store, "grant_nope", lambda title: 1)
    assert isinstance(denied, ToolDenied) and decision_of(store, run_id)["reason_code"] == "grant_invalid"
    gid = signed_grant(store, AGENT, "github", "*", None, expires_at="2h")
    later = datetime.now(timezone.utc) + timedelta(hours=3)
    assert grant_status(store, gid, AGENT, "github", "x")[0] is True
    ok, why = grant_status(store, gid, AGENT, "github", "x", later)
    assert not ok and "expired at" in why
    assert access_status(store, gid, now=later) == STATUS_EXPIRED
    result, _ = call(store, None, lambda title: "ran")  # recorded as implicit:<principal>
    assert result == "ran"
    with pytest.raises(AccessError, match="in the past"):
        signed_grant(store, AGENT, "github", "*", None, expires_at="2020-01-01T00:00:00Z")


def test_a_policy_deny_is_kept_when_the_grant_is_invalid(store):
    from sealbox.policy import Policy

    policy = Policy.from_dict({"version": 1, "name": "deny-all", "rules": [{"id": "no", "effect": "deny"}]})
    rec = Recorder(store, policy)
    with rec.run(agent="a", principal=AGENT) as run:
        with pytest.raises(ToolDenied):
            run.call_tool("github", "create_issue", {}, lambda: 1, grant="grant_nope")
    assert decision_of(store, run.run_id)["reason_code"] == "policy_deny"


# --------------------------------------------------------------------------- revocation, live provider


def test_revoke_with_a_live_provider_confirms_both_tokens_inactive(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)
    status = revoke(store, gid, "incident 42: key leaked", **fast(no_sleep))
    assert status == STATUS_CONFIRMED == access_status(store, gid)
    evs = revoked_events(store, gid)
    assert [e.payload["step"] for e in evs] == ["requested", "sent", "confirmed"]
    assert [e.run_seq for e in evs] == sorted(e.run_seq for e in evs)
    assert evs[0].principal == "root" == evs[0].payload["identity"] and evs[0].payload["reason"] == "incident 42: key leaked"
    sent = evs[1].payload["detail"]
    assert sent["tokens"] == [{"token_type_hint": "refresh_token", "http_status": 200},
                              {"token_type_hint": "access_token", "http_status": 200}]
    assert sent["endpoint"] == f"{provider.base}/revoke" and sent["introspection"] is True
    assert evs[2].payload["detail"]["tokens"] == [{"token_type_hint": "refresh_token", "active": False},
                                                  {"token_type_hint": "access_token", "active": False}]
    # the provider itself reports both tokens inactive
    assert not provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])
    assert ("/revoke", "refresh_token") in provider.requests and ("/revoke", "access_token") in provider.requests
    # and calls under the grant are denied
    ran = []
    denied, run_id = call(store, gid, ran.append)
    assert isinstance(denied, ToolDenied) and ran == []
    assert "revoked at" in decision_of(store, run_id)["reason"]
    assert no_sleep == []
    assert verify_store(store).ok
    with pytest.raises(AccessError, match="already revoked \\(confirmed at provider\\)"):
        revoke(store, gid, "again")
    with pytest.raises(AccessError, match="nothing to retry"):
        retry(store, gid)


def test_provider_down_then_back_up_and_retry(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)
    provider.stop()  # the port is closed: connection refused
    status = revoke(store, gid, "offboarding", retries=3, **fast(no_sleep))
    assert status == STATUS_PENDING == access_status(store, gid)
    assert steps(store, gid) == ["requested", "failed"]
    failed = revoked_events(store, gid)[1].payload["detail"]
    assert failed["stage"] == "revocation" and failed["pending"] is True and failed["attempts"] == 3
    assert "Connection refused" in failed["error"]
    assert no_sleep == [0.01, 0.02, 0.01, 0.02]  # two tokens, three attempts each, exponential backoff
    # denied locally at once: the tool function is never invoked
    ran = []
    denied, run_id = call(store, gid, lambda title: ran.append(title))
    assert isinstance(denied, ToolDenied) and ran == []
    assert decision_of(store, run_id)["reason_code"] == "grant_invalid"
    assert [e.kind for e in store.read_run(run_id)] == ["run.started", "tool.call", "policy.decision", "run.ended"]
    # tokens still live at the provider: not confirmed, never shown as confirmed
    assert provider.is_active(tokens["access_token"]) and provider.is_active(tokens["refresh_token"])
    assert show_grant(store, gid)["status"] == STATUS_PENDING
    # the provider comes back: retry sends and confirms
    provider.start()
    assert retry(store, gid, **fast(no_sleep)) == STATUS_CONFIRMED
    assert steps(store, gid) == ["requested", "failed", "sent", "confirmed"]
    assert not provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])
    assert verify_store(store).ok


def test_provider_answers_503_then_recovers(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)
    provider.mode = "unavailable"
    assert revoke(store, gid, "rotate", retries=2, **fast(no_sleep)) == STATUS_PENDING
    assert steps(store, gid) == ["requested", "failed"]
    detail = revoked_events(store, gid)[1].payload["detail"]
    assert "HTTP 503" in detail["error"] and detail["attempts"] == 2
    assert len([r for r in provider.requests if r[0] == "/revoke"]) == 4
    provider.mode = "up"
    # revoking again while pending is a retry
    assert revoke(store, gid, "rotate (again)", **fast(no_sleep)) == STATUS_CONFIRMED
    assert steps(store, gid) == ["requested", "failed", "sent", "confirmed"]


def test_503_on_introspection_is_not_confirmed(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)

    class FlakyIntrospection:
        def __init__(self):
            from sealbox.access import AuthlibProviderClient
            self.inner = AuthlibProviderClient(timeout=5)

        def revoke(self, cred, token, hint):
            answer = self.inner.revoke(cred, token, hint)
            provider.mode = "unavailable" if hint == "access_token" else provider.mode
            return answer

        def introspect(self, cred, token, hint):
            return self.inner.introspect(cred, token, hint)

    assert revoke(store, gid, "x", FlakyIntrospection(), **fast(no_sleep)) == STATUS_PENDING
    assert steps(store, gid) == ["requested", "sent", "failed"]
    failed = revoked_events(store, gid)[2].payload["detail"]
    assert failed["stage"] == "introspection" and "introspection unavailable" in failed["error"]
    # the tokens ARE revoked at the provider, but nothing confirmed it: still pending
    assert not provider.is_active(tokens["access_token"])
    provider.mode = "up"
    assert retry(store, gid, **fast(no_sleep)) == STATUS_CONFIRMED


def test_a_self_contained_access_token_stays_pending(store, provider, no_sleep):
    provider.jwt_access = True
    gid, tokens = github_grant(store, provider)
    assert revoke(store, gid, "leak", **fast(no_sleep)) == STATUS_PENDING
    assert steps(store, gid) == ["requested", "sent", "failed"]
    evs = revoked_events(store, gid)
    assert {t["token_type_hint"]: t["http_status"] for t in evs[1].payload["detail"]["tokens"]} == {
        "refresh_token": 200, "access_token": 401}
    failed = evs[2].payload["detail"]
    assert "access_token is still active" in failed["error"] and "until it expires at" in failed["error"]
    assert provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])


def test_wrong_client_secret_is_refused_not_confirmed(store, provider, no_sleep):
    tokens = provider.issue()
    cred = {**provider.credential(tokens), "client_secret": "wrong"}
    gid = signed_grant(store, AGENT, "github", "*", None, credential=cred)
    assert revoke(store, gid, "x", **fast(no_sleep)) == STATUS_PENDING
    assert steps(store, gid) == ["requested", "sent", "failed"]
    assert no_sleep == []  # a 401 is an answer: not retried
    assert provider.is_active(tokens["access_token"])


def test_without_introspection_it_is_sent_but_never_confirmed(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider, introspection=False)
    assert revoke(store, gid, "x", **fast(no_sleep)) == STATUS_UNCONFIRMED
    assert steps(store, gid) == ["requested", "sent"]
    assert not provider.is_active(tokens["access_token"])


def test_a_grant_without_provider_is_revoked_locally(store):
    gid = signed_grant(store, AGENT, "db", "*", "read")
    assert revoke(store, gid, "not needed") == STATUS_LOCAL
    assert steps(store, gid) == ["requested"]
    assert grant_status(store, gid, AGENT, "db", "q")[0] is False


def test_revoke_unknown_grant_and_empty_reason(store):
    with pytest.raises(AccessError, match="no grant 'grant_x'"):
        revoke(store, "grant_x", "why")
    gid = signed_grant(store, AGENT, "db", "*", None)
    with pytest.raises(AccessError, match="needs a reason"):
        revoke(store, gid, "  ")
    with pytest.raises(AccessError, match="nothing to retry \\(revoke it first\\)"):
        retry(store, gid)
    with pytest.raises(AccessError, match="already exists"):
        signed_grant(store, AGENT, "db", "*", None, grant_id=gid)


def test_the_requested_step_is_committed_before_the_provider_is_called(store, provider):
    gid, _ = github_grant(store, provider)
    seen = []

    class Watching:
        def revoke(self, cred, token, hint):
            seen.append((steps(store, gid), grant_status(store, gid, AGENT, "github", "create_issue")[0]))
            from sealbox.access import ProviderUnavailable
            raise ProviderUnavailable("down")

        def introspect(self, cred, token, hint):  # pragma: no cover
            raise AssertionError

    revoke(store, gid, "x", Watching(), retries=1, sleep=lambda s: None)
    assert seen[0] == (["requested"], False)


# --------------------------------------------------------------------------- secrets never in the log


def test_tokens_never_in_raw_bytes_blobs_or_database_files(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)
    call(store, gid, lambda title: "ok")
    provider.mode = "unavailable"
    revoke(store, gid, "x", retries=1, **fast(no_sleep))
    provider.mode = "up"
    retry(store, gid, **fast(no_sleep))
    secrets = [tokens["access_token"], tokens["refresh_token"], provider.client.client_secret]
    raw = b"".join(e.raw for e in store.read_range(0, store.size()))
    blobs = b"".join(c or b"" for _, _, c in store.iter_blobs())
    for s in secrets:
        assert s.encode() not in raw and s.encode() not in blobs
    store.issue_checkpoint()
    for f in (store.path).iterdir():
        data = f.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s[:6]}… found in {f.name}"
    # and they are there, encrypted, for the revocation
    cred = load_credential(store, gid)
    assert cred.access_token == tokens["access_token"] and "access_token=" not in repr(cred)
    assert tokens["access_token"] not in repr(cred) and tokens["access_token"] not in str(show_grant(store, gid))


def _swap_credential_below_triggers(store, raw_sql, a, b):
    """Below the written-once trigger (as someone with the database's own tools could): ``a``'s nonce and
    ciphertext into ``b``'s row."""
    if store.backend == "sqlite":
        db = sqlite3.connect(store.db_path)
        db.execute("DROP TRIGGER credentials_no_update")
        db.execute("UPDATE credentials SET (nonce, ciphertext) = (SELECT nonce, ciphertext FROM credentials"
                   " WHERE grant_id = ?) WHERE grant_id = ?", (a, b))
        db.commit()
        db.close()
        return
    raw_sql(store, "ALTER TABLE credentials DISABLE TRIGGER credentials_no_update")
    raw_sql(store, "UPDATE credentials SET (nonce, ciphertext) = (SELECT nonce, ciphertext FROM credentials"
                   " WHERE grant_id = ?) WHERE grant_id = ?", (a, b))


def test_ciphertext_is_bound_to_its_grant(store, provider, raw_sql):
    a, _ = github_grant(store, provider)
    b, _ = github_grant(store, provider)
    with pytest.raises(Exception, match="written once"):
        raw_sql(store, "UPDATE credentials SET ciphertext = (SELECT ciphertext FROM credentials WHERE grant_id = ?)"
                       " WHERE grant_id = ?", (a, b))
    replace = ("INSERT OR REPLACE INTO credentials SELECT ?, nonce, ciphertext, created_at FROM credentials"
               " WHERE grant_id = ?" if store.backend == "sqlite" else
               "INSERT INTO credentials SELECT ?, nonce, ciphertext, created_at FROM credentials WHERE grant_id = ?"
               " ON CONFLICT (grant_id) DO UPDATE SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext")
    with pytest.raises(Exception, match="written once"):
        raw_sql(store, replace, (b, a))
    if store.backend == "postgres":  # a plain second INSERT of a grant id: the primary key
        with pytest.raises(Exception, match="credentials_pkey"):
            raw_sql(store, "INSERT INTO credentials SELECT ?, nonce, ciphertext, created_at FROM credentials"
                           " WHERE grant_id = ?", (b, a))
    # below the triggers: swap a's ciphertext into b's row -> does not decrypt
    _swap_credential_below_triggers(store, raw_sql, a, b)
    with pytest.raises(AccessError, match="cannot be decrypted"):
        load_credential(store, b)


# --------------------------------------------------------------------------- deletion


def test_credential_deletion(store, provider, no_sleep, raw_sql):
    gid, tokens = github_grant(store, provider)
    with pytest.raises(AccessError, match="impossible to revoke"):
        delete_credential(store, gid)
    assert revoke(store, gid, "done", **fast(no_sleep)) == STATUS_CONFIRMED
    size = store.size()
    assert delete_credential(store, gid) is True
    assert load_credential(store, gid) is None
    assert delete_credential(store, gid) is False
    assert store.size() == size  # nothing written to the log
    assert show_grant(store, gid)["credential"] == "deleted"
    assert [r["credential"] for r in list_grants(store)] == ["deleted"]
    assert verify_store(store).ok
    assert raw_sql(store, "SELECT count(*) FROM credentials") == [(0,)]
    # deleting is allowed on credentials only
    with pytest.raises(Exception, match="append-only"):
        raw_sql(store, "DELETE FROM events WHERE kind = 'access.granted'")


def test_forced_deletion_leaves_the_revocation_pending(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)
    assert delete_credential(store, gid, force=True) is True
    assert revoke(store, gid, "x", **fast(no_sleep)) == STATUS_PENDING
    failed = revoked_events(store, gid)[-1].payload["detail"]
    assert failed["stage"] == "credential" and "deleted" in failed["error"]
    assert provider.is_active(tokens["refresh_token"])


# --------------------------------------------------------------------------- listing, store


def test_list_and_show(store, provider, no_sleep):
    g1, _ = github_grant(store, provider)
    g2 = signed_grant(store, "agent:other", "db", "read_*", ["db:read"], expires_at="30d")
    revoke(store, g2, "unused")
    rows = {r["grant_id"]: r for r in list_grants(store)}
    assert rows[g1]["status"] == STATUS_ACTIVE and rows[g1]["credential"] == "held"
    assert rows[g2]["status"] == STATUS_LOCAL and rows[g2]["credential"] == "none" and rows[g2]["scope"] == ["db:read"]
    shown = show_grant(store, g2)
    assert [s["step"] for s in shown["steps"]] == ["requested"] and shown["steps"][0]["reason"] == "unused"
    with pytest.raises(AccessError, match="no grant"):
        show_grant(store, "nope")


def test_the_migration_is_applied_and_checksummed(store, raw_sql):
    rows = store._conn().execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    if store.backend == "postgres":  # its migration 0003; the grant's events found through its index
        from sealbox.access import _PG_GRANT_ROWS_SQL

        assert (3, "credentials") in rows
        plan = " ".join(r[0] for r in raw_sql(store, "SET enable_seqscan = off; EXPLAIN " + _PG_GRANT_ROWS_SQL.replace(
            "= ? AND run_id = ?", "= 'g' AND run_id = 'system'")))
        assert "events_access_grant" in plan
        return
    assert (2, "credentials") in rows
    plan = " ".join(r[3] for r in store._conn().execute(
        "EXPLAIN QUERY PLAN SELECT leaf_index, raw FROM events WHERE (CAST(raw AS TEXT) ->> '$.payload.grant_id') = ?"
        " AND kind IN ('access.granted', 'access.revoked') AND run_id = ? ORDER BY leaf_index", ("g", "system")))
    assert "events_access_grant" in plan


def test_credential_validation_never_echoes_values():
    with pytest.raises(AccessError, match="needs 'revocation_endpoint'"):
        ProviderCredential.from_dict({"client_id": "c", "access_token": "SECRET-VALUE"})
    with pytest.raises(AccessError, match="unknown credential keys \\['acess_token'\\]") as exc:
        ProviderCredential.from_dict({"revocation_endpoint": "https://x/r", "client_id": "c", "acess_token": "SECRET-VALUE"})
    assert "SECRET-VALUE" not in str(exc.value)
    with pytest.raises(AccessError, match="'access_token' must be a string"):
        ProviderCredential.from_dict({"revocation_endpoint": "https://x/r", "client_id": "c", "access_token": 5})


def test_a_crash_after_requested_leaves_it_pending_and_retry_finishes(store, provider, no_sleep):
    gid, tokens = github_grant(store, provider)

    class Crash(BaseException):
        pass

    class Dying:
        def revoke(self, cred, token, hint):
            raise Crash()

        def introspect(self, cred, token, hint):  # pragma: no cover
            raise Crash()

    with pytest.raises(Crash):
        revoke(store, gid, "x", Dying())
    assert steps(store, gid) == ["requested"] and access_status(store, gid) == STATUS_PENDING
    assert retry(store, gid, **fast(no_sleep)) == STATUS_CONFIRMED
    assert steps(store, gid) == ["requested", "sent", "confirmed"]


def test_concurrent_revocations_record_one_request(store, provider, no_sleep):
    import threading

    gid, _ = github_grant(store, provider)
    provider.stop()
    outcomes = []

    def one():
        try:
            outcomes.append(revoke(store, gid, "race", retries=1, sleep=lambda s: None))
        except AccessError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert steps(store, gid).count("requested") == 1
    assert verify_store(store).ok


def test_endpoints_must_use_tls_except_on_this_machine():
    base = {"client_id": "c", "refresh_token": "r"}
    with pytest.raises(AccessError, match="must be an https URL"):
        ProviderCredential.from_dict({**base, "revocation_endpoint": "http://auth.example/revoke"})
    with pytest.raises(AccessError, match="must be an https URL"):
        ProviderCredential.from_dict({**base, "revocation_endpoint": "ftp://auth.example/revoke"})
    assert ProviderCredential.from_dict({**base, "revocation_endpoint": "https://auth.example/revoke"})
    assert ProviderCredential.from_dict({**base, "revocation_endpoint": "http://127.0.0.1:9/revoke"})


def test_an_existing_store_gets_the_credentials_table_on_open(tmp_path):
    import sealbox

    path = tmp_path / "old"
    s = sealbox.init_store(path)
    s.close()
    db = sqlite3.connect(path / "sealbox.db", isolation_level=None)  # make it a schema-1 store
    db.execute("DROP TABLE credentials")
    db.execute("DROP INDEX events_access_grant")
    db.execute("DELETE FROM schema_migrations WHERE version = 2")
    db.close()
    with pytest.raises(sealbox.SchemaVersionError, match="pending migrations \\[2\\]"):
        sealbox.open_store(path, readonly=True)
    s = sealbox.open_store(path)
    try:
        gid = signed_grant(s, AGENT, "db", "*", None)
        assert access_status(s, gid) == STATUS_ACTIVE and verify_store(s).ok
    finally:
        s.close()


def test_the_backoff_between_attempts_is_capped(store, provider, no_sleep):
    """`--retries 20` (the CLI's maximum) against a provider that is down slept 0.5 s doubled
    each time with no cap: 0.5 * 2**18 s (36 h) before the last attempt, about 3 days per token
    in all, while `sealbox access revoke` hung. Each wait is now at most MAX_BACKOFF_S."""
    from sealbox.access import MAX_BACKOFF_S

    gid, _ = github_grant(store, provider)
    provider.stop()
    assert revoke(store, gid, "x", retries=20, sleep=no_sleep.append) == STATUS_PENDING
    one_token = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0] + [MAX_BACKOFF_S] * 13
    assert MAX_BACKOFF_S == 30.0 and no_sleep == one_token * 2


def test_a_credential_that_does_not_decrypt_is_a_recorded_failure_not_an_error_after_the_local_deny(
        store, provider, no_sleep, raw_sql):
    """`requested` was committed (calls denied), then load_credential raised AccessError: `revoke`
    raised as though nothing had happened (the CLI said `error:` and exit 2), and the log held no
    `failed` step saying why the provider part never ran."""
    a, _ = github_grant(store, provider)
    b, _ = github_grant(store, provider)
    _swap_credential_below_triggers(store, raw_sql, a, b)
    assert revoke(store, b, "x", **fast(no_sleep)) == STATUS_PENDING
    assert steps(store, b) == ["requested", "failed"]
    detail = revoked_events(store, b)[-1].payload["detail"]
    assert detail == {"stage": "credential", "pending": True,
                      "error": f"the credential of grant {b} cannot be decrypted (altered, or moved from another grant "
                               "or store): its tokens cannot be revoked at the provider through Sealbox"}
    assert provider.requests == []


def test_a_grant_recorded_with_an_impossible_expiry_is_expired_and_does_not_break_listings(store):
    """`2026-13-45T00:00:00Z` has the schema's form, so the store takes it; parsing it raised
    AccessError in every listing (`access list` failed for all grants) and in `access show`."""
    from sealbox import EventDraft

    good = signed_grant(store, AGENT, "github", "*", None)
    store.append(EventDraft("access.granted", sign_grant_payload(store, {
        "grant_id": "g_bad", "principal": AGENT, "server": "github", "tool": "*", "scope": None,
        "expires_at": "2026-13-45T00:00:00Z", "provider": None, "credential": False}),
        run_id=SYSTEM_RUN_ID, principal="root"))
    assert [(r["grant_id"], r["status"]) for r in list_grants(store)] == [(good, STATUS_ACTIVE), ("g_bad", STATUS_EXPIRED)]
    assert show_grant(store, "g_bad")["status"] == STATUS_EXPIRED == access_status(store, "g_bad")
    assert grant_status(store, "g_bad", AGENT, "github", "create_issue") == (
        False, "grant g_bad expired at 2026-13-45T00:00:00Z")
    ran = []
    denied, run_id = call(store, "g_bad", lambda title: ran.append(title))
    assert isinstance(denied, ToolDenied) and ran == [] and decision_of(store, run_id)["reason_code"] == "grant_invalid"


@pytest.mark.parametrize("principal", ["agent:bot\nx", "agent:\tbot", "agent:bot\x1b[2J", "   "])
def test_a_grant_to_a_principal_no_run_can_hold_is_refused(store, principal):
    """A run's principal may not hold a control character or be only spaces (the Recorder refuses it),
    but `access grant --principal $'agent:bot\\nx'` was signed and recorded: a grant no run could ever
    hold, whose principal printed a line of its own in error messages. It is now refused, nothing recorded."""
    size = store.reader().size()
    with pytest.raises(AccessError, match="control character .* or only spaces"):
        signed_grant(store, principal, "github", "*", None)
    assert store.reader().size() == size
