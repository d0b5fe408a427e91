"""``delete-credential`` without ``--force`` on a grant whose only revocation steps are unsigned.

An unsigned ``access.revoked`` step (anyone who can write the store can append one) denies calls
locally, but no one with a key asked for the revocation and nothing was sent to the provider:
the status is ``revoked (unsigned request only: ...; revoke again with a key)``. Deleting the
credential then would leave the tokens live at the provider with no way for Sealbox to revoke
them, so it is refused as for an active or pending grant (``--force`` still deletes).
"""

from __future__ import annotations

import pytest

from sealbox import EventDraft
from sealbox.access import (STATUS_CONFIRMED, STATUS_UNSIGNED, AccessError, access_status, delete_credential,
                            load_credential, revoke, show_grant)
from sealbox.events import SYSTEM_RUN_ID
from identity_testkit import grant_key, signed_grant  # noqa: E402


def unsigned_step(store, gid, step):
    store.append([EventDraft("access.revoked", {"grant_id": gid, "step": step, "reason": "x", "detail": {}},
                             run_id=SYSTEM_RUN_ID, principal="mallory")])


@pytest.mark.parametrize("steps", [["requested"], ["requested", "confirmed"]])
def test_delete_credential_is_refused_while_only_unsigned_steps_revoked_it(store, provider, steps):
    tokens = provider.issue()
    gid = signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=provider.credential(tokens))
    for step in steps:
        unsigned_step(store, gid, step)
    assert access_status(store, gid) == STATUS_UNSIGNED
    with pytest.raises(AccessError) as err:
        delete_credential(store, gid)
    assert str(err.value) == (f"grant {gid} is {STATUS_UNSIGNED}: deleting its credential would make it impossible "
                              "to revoke the tokens at the provider; revoke it first, or force")
    assert load_credential(store, gid) is not None
    assert show_grant(store, gid)["credential"] == "held"
    # the signed revocation still reaches the provider, and the credential may go afterwards
    assert revoke(store, gid, "again, with a key", key_file=grant_key(store), sleep=lambda s: None) == STATUS_CONFIRMED
    assert not provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])
    assert delete_credential(store, gid) is True
    assert show_grant(store, gid)["credential"] == "deleted"


def test_force_still_deletes_it(store, provider):
    gid = signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=provider.credential(provider.issue()))
    unsigned_step(store, gid, "requested")
    assert delete_credential(store, gid, force=True) is True
    assert load_credential(store, gid) is None
