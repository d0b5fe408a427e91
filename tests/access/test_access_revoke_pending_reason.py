"""``revoke`` of a grant already pending at its provider retries it; its reason is recorded.

Before the fix the second revocation's ``reason`` was dropped: an operator re-running
``sealbox access revoke GRANT --reason "incident 43"`` after a provider outage (or a second
approver revoking while the first one's request was at the provider) got ``revoked (confirmed at
provider)``, exit 0, and the log held their signed steps but not why they revoked. The first step
that revoke records now carries its ``reason`` (signed, as every field of a step).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from identity_testkit import grant_key, signed_grant  # noqa: E402
from sealbox import verify_store
from sealbox.access import STATUS_CONFIRMED, STATUS_PENDING, revoke, show_grant
from sealbox.identities import add_identity

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def test_the_second_revoke_records_its_reason(store, provider, tmp_path):
    root = grant_key(store)
    carol = add_identity(store, "carol", "approver", key_path=tmp_path / "carol.key", admin_key=root).key_path
    tokens = provider.issue()
    gid = signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=provider.credential(tokens))
    provider.stop()
    assert revoke(store, gid, "incident 42", key_file=root, retries=1, sleep=lambda s: None) == STATUS_PENDING
    provider.start()
    assert revoke(store, gid, "incident 43", key_file=carol, sleep=lambda s: None) == STATUS_CONFIRMED
    steps = show_grant(store, gid)["steps"]
    assert [(s["step"], s["identity"], s.get("reason"), s["signature"]) for s in steps] == [
        ("requested", "root", "incident 42", "valid"), ("failed", "root", None, "valid"),
        ("sent", "carol", "incident 43", "valid"), ("confirmed", "carol", None, "valid")]
    assert not provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])
    shown = subprocess.run([SEALBOX, "access", "show", gid, "-s", str(store.path)], capture_output=True, text=True)
    assert [ln.split("reason: ")[1].split("  ")[0] for ln in shown.stdout.splitlines() if ln.startswith("  ") and "reason:" in ln] == [
        "incident 42", "incident 43"]
    report = verify_store(store)
    assert report.ok, report.problems
