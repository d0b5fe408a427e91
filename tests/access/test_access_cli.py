"""``sealbox access``: the real command in a subprocess, against a real provider on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import uuid

import pytest
from access_db import PG_URL

import sealbox
from identity_testkit import sign_revocation_payload, signed_grant  # noqa: E402
from sealbox.identities import add_identity

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "250"})


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0], proc.stderr


@pytest.fixture
def store_dir(tmp_path, backend):
    """A store made by `sealbox init` (with `--postgres URL --schema NAME` on PostgreSQL), alice its admin."""
    path = tmp_path / "s"
    if backend == "sqlite":
        made = cli("init", str(path))
    else:
        schema = f"sbt_acccli_{uuid.uuid4().hex[:16]}"
        made = cli("init", "--postgres", PG_URL, "--schema", schema, str(path))
    assert made.returncode == 0, made.stderr
    try:
        s = sealbox.open_store(path)
        add_identity(s, "user:alice", "admin", key_path=tmp_path / "alice.key")  # signs the grants (--key-file)
        s.close()
        yield str(path)
    finally:
        if backend == "postgres":
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def alice_key(store_dir: str) -> str:
    return str(Path(store_dir).parent / "alice.key")


def cred_file(tmp_path, provider, tokens, **kw) -> str:
    path = tmp_path / "cred.json"
    path.write_text(json.dumps(provider.credential(tokens, **kw)))
    path.chmod(0o600)
    return str(path)


def grant(store_dir, *extra) -> str:
    proc = cli("access", "grant", "-s", store_dir, "--principal", "agent:bot", "--server", "github",
               "--tool", "create_*", "--scope", "repo", "--key-file", alice_key(store_dir), *extra)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_grant_list_show_revoke_confirmed(store_dir, tmp_path, provider):
    tokens = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, tokens), "--expires", "30d")
    assert gid.startswith("grant_")
    rows = json.loads(cli("access", "list", "-s", store_dir, "--json").stdout)
    assert [(r["grant_id"], r["status"], r["credential"], r["granted_by"]) for r in rows] == [
        (gid, "active", "held", "user:alice")]
    assert rows[0]["provider"] == "127.0.0.1"  # the endpoint's host name, without the port
    table = cli("access", "list", "-s", store_dir)
    assert table.returncode == 0 and gid in table.stdout
    proc = cli("access", "revoke", gid, "-s", store_dir, "--reason", "incident 7", "--key-file", alice_key(store_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{gid}: revoked (confirmed at provider)"
    shown = cli("access", "show", gid, "-s", store_dir)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert "status     revoked (confirmed at provider)" in lines
    steps = [ln.split()[1] for ln in lines if ln.startswith("  ")]
    assert steps == ["requested", "sent", "confirmed"]
    as_json = json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)
    assert [s["step"] for s in as_json["steps"]] == ["requested", "sent", "confirmed"]
    everything = proc.stdout + proc.stderr + shown.stdout + json.dumps(as_json) + json.dumps(rows)
    for secret in (*tokens.values(), provider.client.client_secret):
        assert secret not in everything
    assert cli("verify", "-s", store_dir).returncode == 0
    # the credential can now be deleted
    deleted = cli("access", "delete-credential", gid, "-s", store_dir)
    assert deleted.returncode == 0 and "credential deleted" in deleted.stdout


def test_provider_down_pending_then_retry(store_dir, tmp_path, provider):
    tokens = provider.issue()
    gid = grant(store_dir, "--credential-file", cred_file(tmp_path, provider, tokens))
    provider.stop()
    proc = cli("access", "revoke", gid, "-s", store_dir, "--reason", "offboarding", "--retries", "1", "--key-file", alice_key(store_dir))
    assert proc.returncode == 3
    assert proc.stdout.strip() == f"{gid}: revoked (pending at provider)"
    assert "retry" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    shown = cli("access", "show", gid, "-s", store_dir).stdout
    assert "Connection refused" in shown and "pending at provider" in shown
    again = cli("access", "retry", gid, "-s", store_dir, "--retries", "1", "--key-file", alice_key(store_dir))
    assert again.returncode == 3
    provider.start()
    ok = cli("access", "retry", gid, "-s", store_dir, "--key-file", alice_key(store_dir))
    assert ok.returncode == 0 and ok.stdout.strip() == f"{gid}: revoked (confirmed at provider)"
    assert not provider.is_active(tokens["access_token"]) and not provider.is_active(tokens["refresh_token"])
    steps = [s["step"] for s in json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)["steps"]]
    assert steps == ["requested", "failed", "failed", "sent", "confirmed"]


def test_local_grant_and_errors(store_dir, tmp_path):
    gid = grant(store_dir)
    proc = cli("access", "revoke", gid, "-s", store_dir, "--reason", "x", "--key-file", alice_key(store_dir))
    assert proc.returncode == 0 and proc.stdout.strip() == f"{gid}: revoked (local only: no provider)"
    one_error_line(cli("access", "revoke", gid, "-s", store_dir, "--reason", "x", "--key-file", alice_key(store_dir)), "already revoked")
    one_error_line(cli("access", "retry", gid, "-s", store_dir, "--key-file", alice_key(store_dir)), "nothing to retry")
    one_error_line(cli("access", "show", "grant_nope", "-s", store_dir), "no grant 'grant_nope'")
    one_error_line(cli("access", "revoke", "grant_nope", "-s", store_dir, "--reason", "x", "--key-file", alice_key(store_dir)), "no grant")
    one_error_line(cli("access", "revoke", gid, "-s", store_dir, "--key-file", alice_key(store_dir)), "--reason")
    one_error_line(cli("access", "grant", "-s", store_dir, "--principal", "p", "--server", "s", "--tool", "t", "--key-file", alice_key(store_dir),
                       "--credential-file", str(tmp_path / "missing.json")), "cannot read credential file")
    bad = tmp_path / "bad.json"
    bad.write_text('{"access_token": "SECRET-TOKEN-VALUE", ')
    proc = cli("access", "grant", "-s", store_dir, "--principal", "p", "--server", "s", "--tool", "t", "--key-file", alice_key(store_dir),
               "--credential-file", str(bad))
    one_error_line(proc, "not valid JSON")
    assert "SECRET-TOKEN-VALUE" not in proc.stderr
    incomplete = tmp_path / "incomplete.json"
    incomplete.write_text(json.dumps({"access_token": "SECRET-TOKEN-VALUE", "client_id": "c"}))
    proc = cli("access", "grant", "-s", store_dir, "--principal", "p", "--server", "s", "--tool", "t", "--key-file", alice_key(store_dir),
               "--credential-file", str(incomplete))
    one_error_line(proc, "revocation_endpoint")
    assert "SECRET-TOKEN-VALUE" not in proc.stderr
    one_error_line(cli("access", "grant", "-s", store_dir, "--principal", "p", "--server", "s", "--tool", "t", "--key-file", alice_key(store_dir),
                       "--expires", "yesterday-ish"), "expires_at")
    one_error_line(cli("access", "list", "-s", str(tmp_path / "nostore")), "does not exist")
    assert cli("access", "--help").returncode == 0


def test_show_escapes_control_sequences(store_dir):
    # Regression (input: a tool glob holding ESC/BEL sequences): access show printed them raw (who
    # grants is now the signing identity, whose name holds no control character)
    gid = cli("access", "grant", "-s", store_dir, "--principal", "agent:x", "--server", "db",
              "--tool", "q\x1b]0;t\x07", "--key-file", alice_key(store_dir)).stdout.strip()
    proc = cli("access", "show", gid, "-s", store_dir)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[3] == r"tool       db/q\x1b]0;t\x07"
    assert lines[7].endswith(" by user:alice") and lines[8] == "signature  valid"
    assert json.loads(cli("access", "show", gid, "-s", store_dir, "--json").stdout)["tool"] == "q\x1b]0;t\x07"


def test_show_prints_a_newline_in_a_recorded_value_as_an_escape_never_a_line(store_dir):
    """A tool glob or a revocation reason holding a newline printed a second line, which could
    pass for a field of the grant: `status     revoked (confirmed at provider)` under a grant
    whose revocation is local, or a forged `confirmed` step."""
    forged_status = "status     revoked (confirmed at provider)"
    gid = cli("access", "grant", "-s", store_dir, "--principal", "agent:x", "--server", "db",
              "--tool", "t\n" + forged_status, "--key-file", alice_key(store_dir)).stdout.strip()
    reason = "done\n  2026-12-03T00:00:00.000000Z  confirmed by sealbox"
    assert cli("access", "revoke", gid, "-s", store_dir, "--reason", reason, "--key-file", alice_key(store_dir)).returncode == 0
    lines = cli("access", "show", gid, "-s", store_dir).stdout.splitlines()
    assert len(lines) == 10 and [ln.split()[0] for ln in lines[:9]] == [
        "grant", "status", "principal", "tool", "scope", "expires", "provider", "granted", "signature"]
    assert lines[1] == "status     revoked (local only: no provider)"
    assert lines[3] == r"tool       db/t\n" + forged_status
    assert lines[9].endswith(r"requested by user:alice  reason: done\n  2026-12-03T00:00:00.000000Z  confirmed by sealbox")


def test_a_credential_file_that_is_not_a_regular_file_is_one_error_line(store_dir, tmp_path):
    """`--credential-file /dev/zero` was read without end (memory) and a FIFO blocked for ever."""
    fifo = tmp_path / "cred.fifo"
    os.mkfifo(fifo, 0o600)
    for path in (str(fifo), "/dev/zero"):
        proc = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "access", "grant", "-s", store_dir,
                               "--principal", "agent:x", "--server", "db", "--tool", "*", "--credential-file", path,
                               "--key-file", alice_key(store_dir)],
                              capture_output=True, text=True, timeout=30)
        one_error_line(proc, f"credential file {path} is not a regular file")
    big = tmp_path / "big.json"
    big.write_text('{"client_id": "' + "x" * (2 << 20) + '"}')
    one_error_line(cli("access", "grant", "-s", store_dir, "--principal", "agent:x", "--server", "db", "--tool", "*",
                       "--key-file", alice_key(store_dir), "--credential-file", str(big)), f"credential file {big} is larger than 1 MiB")


def test_a_revocation_step_with_odd_detail_is_shown_not_a_crash(store_dir):
    """Steps appended below revoke() may hold any JSON in `detail` (the schema leaves it open):
    a token entry that is not an object made `access show` exit 70 (internal error), and, as
    the last step, `access list` too."""
    from sealbox.events import SYSTEM_RUN_ID, EventDraft

    from sealbox.access import get_grant

    s = sealbox.open_store(store_dir)
    try:
        gid = grant_access_cred(s, alice_key(store_dir))
        after = get_grant(s, gid).leaf_index
        for payload in ({"grant_id": gid, "step": "requested", "reason": "x", "detail": {"at_provider": True}},
                        {"grant_id": gid, "step": "failed", "detail": {"tokens": [1, {"token_type_hint": 5}], "error": 7}},
                        {"grant_id": gid, "step": "sent", "detail": {"introspection": False, "tokens": [1, "x"]}}):
            # validly signed (by an admin writing below revoke()): only signed steps decide the status
            signed = sign_revocation_payload(s, payload, after, alice_key(store_dir))
            [ev] = s.append([EventDraft("access.revoked", signed, run_id=SYSTEM_RUN_ID, principal="user:alice")])
            after = ev.leaf_index
    finally:
        s.close()
    listed = cli("access", "list", "-s", store_dir, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["status"] for r in json.loads(listed.stdout)] == ["revoked (pending at provider)"]
    shown = cli("access", "show", gid, "-s", store_dir)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[10].endswith("failed    by user:alice  1, 5: None  error: 7")
    assert lines[11].endswith("sent      by user:alice  1, x")


def grant_access_cred(store, key_file):
    return signed_grant(store, "agent:x", "db", "*", None, key_file=key_file, credential={
        "revocation_endpoint": "https://auth.example/revoke", "client_id": "c", "access_token": "tok-0123456789"})
