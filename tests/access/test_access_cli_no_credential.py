"""``sealbox access revoke`` / ``retry`` of a grant whose credential Sealbox no longer holds.

A credential deleted with ``delete-credential --force`` (or one that no longer decrypts) can never
be used again: every revocation records ``failed`` (stage ``credential``) and the grant stays pending
at its provider. Before the fix the warning still told the operator to run ``sealbox access retry``,
which only records the same ``failed`` step again, while the tokens stayed live at the provider. The
warning now says that Sealbox cannot revoke them and that they must be revoked at the provider.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from identity_testkit import grant_key, signed_grant  # noqa: E402
from sealbox.access import delete_credential

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def test_revoke_and_retry_say_the_tokens_must_be_revoked_at_the_provider(store, provider):
    tokens = provider.issue()
    gid = signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=provider.credential(tokens))
    assert delete_credential(store, gid, force=True) is True
    key = str(grant_key(store))
    warning = (f"warning: Sealbox cannot use the credential of {gid} (the grant's credential was deleted: its "
               f"tokens cannot be revoked at the provider); calls under {gid} are denied here, but its tokens stay "
               f"valid at the provider until they are revoked there (`sealbox access retry` cannot do it)\n")
    for args in (["revoke", gid, "--reason", "incident"], ["retry", gid]):
        proc = subprocess.run([SEALBOX, "access", *args, "-s", str(store.path), "--key-file", key],
                              capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (3, f"{gid}: revoked (pending at provider)\n", warning)
    assert provider.is_active(tokens["access_token"]) and provider.is_active(tokens["refresh_token"])
