"""A credential file, or a rotation's tokens, whose JSON names a key twice.

``json.loads`` keeps the last value, so a credential file naming ``revocation_endpoint`` twice (a hand edit
that added the new endpoint below the old one) stored one of them without a word, and a rotation naming
``refresh_token`` twice recorded one token as live while the other may be the one the provider issued: a
later revocation would then revoke and "confirm" a token nobody uses. RFC 8259 §4 leaves such an object's
meaning to the parser; Sealbox refuses it: one ``error:`` line naming the key (never its value), exit 2,
nothing recorded."""

from __future__ import annotations

import json

from test_access_cli import alice_key, cli, cred_file, grant, one_error_line, store_dir  # noqa: F401
from test_access_rotate_cli import rotate

import sealbox
from sealbox.events import SYSTEM_RUN_ID


def kinds(store_dir):
    s = sealbox.open_store(store_dir)
    try:
        return [e.kind for e in s.read_run(SYSTEM_RUN_ID)]
    finally:
        s.close()


def test_a_credential_file_naming_a_key_twice_is_refused(store_dir, tmp_path, provider):
    tokens = provider.issue()
    cred = provider.credential(tokens)
    text = json.dumps(cred)[:-1] + ', "revocation_endpoint": "http://127.0.0.1:1/revoke"}'
    path = tmp_path / "cred.json"
    path.write_text(text)
    path.chmod(0o600)
    before = kinds(store_dir)
    proc = cli("access", "grant", "-s", store_dir, "--principal", "agent:bot", "--server", "github", "--tool",
               "create_*", "--scope", "repo", "--key-file", alice_key(store_dir), "--credential-file", str(path))
    one_error_line(proc, f"credential file {path} names 'revocation_endpoint' twice")
    assert proc.returncode == 2
    assert tokens["access_token"] not in proc.stderr and tokens["refresh_token"] not in proc.stderr
    assert kinds(store_dir) == before


def test_a_rotation_naming_a_token_twice_is_refused(store_dir, tmp_path, provider):
    first = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, first))
    before = kinds(store_dir)
    proc = rotate(store_dir, gid, '{"refresh_token": "new-refresh-one-0123456789", '
                                  '"refresh_token": "new-refresh-two-0123456789"}')
    one_error_line(proc, "the tokens on standard input names 'refresh_token' twice")
    assert proc.returncode == 2
    assert "new-refresh" not in proc.stderr
    assert kinds(store_dir) == before
