"""``sealbox access rotate``: the real command in a subprocess, against the rotating OAuth provider on
127.0.0.1; the new tokens come on standard input or from a file, never from the command line."""

from __future__ import annotations

import json
import os
import subprocess

import requests

from test_access_cli import SEALBOX, alice_key, cli, cred_file, grant, one_error_line, store_dir  # noqa: F401


def rotate(store_dir, gid, stdin, *extra):
    return subprocess.run([SEALBOX, "access", "rotate", gid, "-s", store_dir, "--key-file", alice_key(store_dir),
                           *extra], input=stdin, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "250"})


def refresh(provider, refresh_token):
    """The agent's OAuth client refreshing (RFC 6749 §6): the provider's answer, as JSON text."""
    resp = requests.post(f"{provider.base}/token", data={"grant_type": "refresh_token", "refresh_token": refresh_token},
                         auth=(provider.client.client_id, provider.client.client_secret), timeout=10)
    assert resp.status_code == 200
    return resp.text


def test_rotate_from_stdin_then_show_and_revoke_the_live_tokens(store_dir, tmp_path, provider):
    first = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, first))
    answer = refresh(provider, first["refresh_token"])
    live = json.loads(answer)
    proc = rotate(store_dir, gid, answer)  # the provider's answer piped in as it came
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{gid}: credential rotated (rotation 1; refresh_token hmac-sha256:")
    assert "access_token hmac-sha256:" in proc.stdout and proc.stderr == ""
    shown = cli("access", "show", gid, "-s", store_dir)
    rotations = [ln for ln in shown.stdout.splitlines() if ln.startswith("rotation ")]
    assert len(rotations) == 1 and rotations[0].startswith("rotation 1  ")
    assert " by user:alice  refresh_token hmac-sha256:" in rotations[0]
    as_json = json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)
    assert [(r["seq"], r["by"], r["signature"], sorted(r["fingerprints"])) for r in as_json["rotations"]] == [
        (1, "user:alice", "valid", ["access_token", "refresh_token"])]
    revoked = cli("access", "revoke", gid, "-s", store_dir, "--reason", "offboarding", "--key-file",
                  alice_key(store_dir))
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == f"{gid}: revoked (confirmed at provider)"
    assert not provider.is_active(live["refresh_token"]) and not provider.is_active(live["access_token"])
    everything = proc.stdout + proc.stderr + shown.stdout + json.dumps(as_json) + revoked.stdout + revoked.stderr
    for secret in (first["access_token"], first["refresh_token"], live["access_token"], live["refresh_token"],
                   provider.client.client_secret):
        assert secret not in everything
    verified = cli("verify", "-s", store_dir)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_rotate_from_a_file_and_a_late_rotation_makes_a_confirmed_grant_pending(store_dir, tmp_path, provider):
    first = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, first))
    live = json.loads(refresh(provider, first["refresh_token"]))
    assert cli("access", "revoke", gid, "-s", store_dir, "--reason", "x", "--key-file",
               alice_key(store_dir)).returncode == 0  # "confirmed" about the rotated-away token
    path = tmp_path / "new.json"
    path.write_text(json.dumps({"refresh_token": live["refresh_token"], "access_token": live["access_token"]}))
    path.chmod(0o600)
    proc = rotate(store_dir, gid, "", "--tokens-file", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (f"warning: {gid} is revoked but the new tokens are not confirmed revoked at the "
                                   f"provider: run `sealbox access retry {gid}`")
    status = json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)["status"]
    assert status == "revoked (pending at provider)"
    retried = cli("access", "retry", gid, "-s", store_dir, "--key-file", alice_key(store_dir))
    assert retried.returncode == 0 and retried.stdout.strip() == f"{gid}: revoked (confirmed at provider)"
    assert not provider.is_active(live["refresh_token"])


def test_bad_rotation_input_is_one_error_line_and_never_echoed(store_dir, tmp_path, provider):
    first = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, first))
    one_error_line(rotate(store_dir, gid, "not json sekrit-token"), "not valid JSON (line 1)")
    one_error_line(rotate(store_dir, gid, '{"refresh_token": "sekrit-token", "client_secret": "s"}'),
                   "unknown rotation keys ['client_secret']")
    one_error_line(rotate(store_dir, gid, '["sekrit-token"]'), "must be a JSON object")
    one_error_line(rotate(store_dir, "nope", '{"refresh_token": "sekrit-token"}'), "no grant 'nope'")
    one_error_line(rotate(store_dir, gid, "", "--tokens-file", str(tmp_path / "missing.json")),
                   "cannot read tokens file")
    for proc in (rotate(store_dir, gid, "not json sekrit-token"),
                 rotate(store_dir, gid, '{"refresh_token": "sekrit-token", "client_secret": "s"}')):
        assert "sekrit-token" not in proc.stdout + proc.stderr
    shown = json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)
    assert shown["rotations"] == []


def test_nothing_on_stdin_says_no_tokens_were_given(store_dir, tmp_path, provider):
    # Regression (input: `sealbox access rotate G --key-file K < /dev/null`, or `echo "$NEW" | …` with NEW
    # unset): it said "the tokens on standard input is not valid JSON (line 1)", as if something had been
    # given that was wrong; an empty tokens file the same
    first = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, first))
    for stdin in ("", "\n", "  \r\n"):
        proc = rotate(store_dir, gid, stdin)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == ("error: no tokens on standard input (it was empty): pipe the new tokens in as a JSON "
                               "object (the provider's refresh answer), or give --tokens-file FILE\n")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    empty.chmod(0o600)
    proc = rotate(store_dir, gid, "", "--tokens-file", str(empty))
    assert (proc.returncode, proc.stderr) == (2, f"error: tokens file {empty} is empty: it must hold a JSON object\n")
    assert json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)["rotations"] == []
