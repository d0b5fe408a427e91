"""The log's signing key given where an identity's key is expected."""

from __future__ import annotations

from test_id_prefixes import sample, sb  # noqa: F401  (the module's store with two approval requests)


def test_the_log_signing_key_given_as_an_identity_key_says_what_it_is(sample) -> None:
    """`approvals approve ID --key-file store/log.key` (the only key file a new user sees in the store)
    said "the key file names identity 'sealbox.local/…', which this store does not know", an identity
    name no one ever chose. No identity can have that name: the error now says it is a log's key."""
    path, (first, _), _ = sample
    origin = (path / "log.vkey").read_text().split("+")[0]
    hint = (f"the key file names identity {origin!r}, which this store does not know: no identity has such a name, "
            "it is a log's signing key (a store's log.key), not an identity's; give the key file "
            "`sealbox identities add … --key-out` wrote")
    res = sb("approvals", "approve", first, "--reason", "ok", "--key-file", path / "log.key", "-s", path)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"error: {hint}\n")
    res = sb("identities", "add", "bob", "--role", "approver", "--admin-key", path / "log.key", "-s", path)
    assert (res.returncode, res.stderr) == (2, f"error: {hint.replace('the key file', 'the admin key file', 1)}\n")
