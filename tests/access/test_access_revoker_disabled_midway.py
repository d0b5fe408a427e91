"""The revoking identity is disabled while its revocation is at the provider.

The ``requested`` step is recorded (calls are denied) and the tokens are sent, but the next step
cannot be signed by a disabled identity (it would not count). Before the fix ``revoke`` raised the
refusal of a revocation that never started (``identity 'alice' is disabled: it cannot revoke``; on
the command line ``error: …``, exit 2, which the docs say means nothing was recorded), so the
operator was told their revocation had been refused though the grant was denied here and its
tokens had gone to the provider. The error now says what was recorded, and what to do.
"""

from __future__ import annotations

import pytest

from identity_testkit import grant_key, signed_grant  # noqa: E402
from sealbox.access import (STATUS_CONFIRMED, STATUS_PENDING, AccessError, AuthlibProviderClient, access_status,
                            retry, revoke, show_grant)
from sealbox.identities import add_identity, disable_identity


def test_a_revoker_disabled_midway_is_told_what_was_recorded(store, provider, tmp_path):
    root = grant_key(store)
    alice = add_identity(store, "alice", "approver", key_path=tmp_path / "alice.key", admin_key=root).key_path
    tokens = provider.issue()
    gid = signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=provider.credential(tokens))

    class DisablesAlice(AuthlibProviderClient):
        def revoke(self, cred, token, hint):
            if hint == "access_token":
                disable_identity(store, "alice", "left the company", admin_key=root)
            return super().revoke(cred, token, hint)

    with pytest.raises(AccessError) as err:
        revoke(store, gid, "incident", DisablesAlice(), key_file=alice, sleep=lambda s: None)
    assert err.value.code == "disabled"
    assert str(err.value) == (
        f"grant {gid} is revoked here (its 'requested' step is recorded: calls under it are denied), but what "
        "the provider answered could not be recorded: identity 'alice' is disabled: it cannot revoke; an "
        f"enabled admin or approver must run `sealbox access retry {gid}`")
    assert [s["step"] for s in show_grant(store, gid)["steps"]] == ["requested"]
    assert access_status(store, gid) == STATUS_PENDING
    assert retry(store, gid, key_file=root, sleep=lambda s: None) == STATUS_CONFIRMED
