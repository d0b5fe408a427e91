"""A provider client that fails with an error of its own (not ProviderUnavailable).

``revoke(provider_client=…)`` takes any client; AuthlibProviderClient re-raises what is not a network
error. A client raising RuntimeError after the local ``requested`` step made revoke() raise it: no step
recorded what happened at the provider, and `sealbox access show` gave no reason."""

from __future__ import annotations

from access_provider import OAuthProvider
from identity_testkit import signed_grant
from identity_testkit import signed_retry as retry, signed_revoke as revoke  # noqa: F811

from sealbox.access import STATUS_CONFIRMED, STATUS_PENDING, AuthlibProviderClient, show_grant
from sealbox.events import SYSTEM_RUN_ID


class Broken:
    def __init__(self) -> None:
        self.calls = 0

    def revoke(self, cred, token, hint):
        self.calls += 1
        raise RuntimeError(f"client bug while sending {token}")

    def introspect(self, cred, token, hint):
        raise AssertionError("not reached")


def test_a_client_failing_is_a_recorded_failure_not_retried_and_retry_finishes(store):
    provider = OAuthProvider().start()
    try:
        tokens = provider.issue()
        gid = signed_grant(store, "agent:deploy-bot", "db", "*", None, credential=provider.credential(tokens))
        broken = Broken()
        assert revoke(store, gid, "offboarding", provider_client=broken, backoff=0.01, sleep=lambda _: None) \
            == STATUS_PENDING
        assert broken.calls == 2  # once per token: not retried
        steps = [(e.payload["step"], e.payload["detail"]) for e in store.read_run(SYSTEM_RUN_ID)
                 if e.kind == "access.revoked" and e.payload["grant_id"] == gid]
        assert [s for s, _ in steps] == ["requested", "failed"]
        why = "the request failed in the provider client: RuntimeError: client bug while sending [secret]"
        assert steps[1][1] == {
            "stage": "revocation", "endpoint": f"{provider.base}/revoke", "attempts": 1, "pending": True, "answered": [],
            "unanswered": [{"token_type_hint": "refresh_token", "error": why},
                           {"token_type_hint": "access_token", "error": why}],
            "error": f"the provider could not be reached or was unavailable: {why}"}
        assert show_grant(store, gid)["status"] == STATUS_PENDING
        assert retry(store, gid, provider_client=AuthlibProviderClient(timeout=5), backoff=0.01,
                     sleep=lambda _: None) == STATUS_CONFIRMED
    finally:
        provider.stop()
