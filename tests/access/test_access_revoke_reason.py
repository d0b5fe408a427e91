"""``access revoke --reason`` is checked as an answer's reason is.

A revocation's reason is signed into its ``requested`` step and kept forever, as an approval answer's is,
but it was taken at any length (100,000 characters recorded), and one holding a byte that is not UTF-8
ended in ``error: a string or key contains a lone surrogate (I-JSON, RFC 7493 §2.1)``, naming neither
the option nor the fix. Both are now one ``error:`` line naming ``--reason``, exit 2, nothing recorded;
from Python, ``AccessError``."""

from __future__ import annotations

import subprocess

import pytest
from identity_testkit import grant_key, signed_grant

from sealbox.access import AccessError, revoke
from sealbox.approvals import REASON_MAX_CHARS
from sealbox.events import SYSTEM_RUN_ID
from test_access_cli import SEALBOX, alice_key, grant, store_dir  # noqa: F401

import sealbox


def revoked_steps(path):
    s = sealbox.open_store(path)
    try:
        return [e.payload for e in s.read_run(SYSTEM_RUN_ID) if e.kind == "access.revoked"]
    finally:
        s.close()


def test_a_long_or_non_utf8_reason_is_one_error_line_and_nothing_is_recorded(store_dir):
    gid = grant(store_dir)
    for reason, message in (
            ("a" * (REASON_MAX_CHARS + 1), f"error: --reason is {REASON_MAX_CHARS + 1} characters long: at most "
                                           f"{REASON_MAX_CHARS} are recorded (say why in short; link to the details)\n"),
            (b"caf\xe9", "error: --reason is not UTF-8 text (it holds a byte that is not UTF-8): write it again in "
                         "UTF-8 (check the terminal's or the script's encoding)\n")):
        proc = subprocess.run([SEALBOX, "access", "revoke", gid, "-s", store_dir, "--reason", reason, "--key-file",
                               alice_key(store_dir)], capture_output=True)
        assert (proc.returncode, proc.stderr.decode()) == (2, message)
    assert revoked_steps(store_dir) == []
    ok = subprocess.run([SEALBOX, "access", "revoke", gid, "-s", store_dir, "--reason", "a" * REASON_MAX_CHARS,
                         "--key-file", alice_key(store_dir)], capture_output=True)
    assert ok.returncode == 0, ok.stderr
    assert [p["step"] for p in revoked_steps(store_dir)] == ["requested"]


@pytest.mark.parametrize("reason", ["a" * (REASON_MAX_CHARS + 1), "caf\udce9"])
def test_python_refuses_such_a_reason(store, reason):
    gid = signed_grant(store, "agent:bot", "db", "*", None)
    with pytest.raises(AccessError) as info:
        revoke(store, gid, reason, key_file=grant_key(store))
    assert str(info.value).startswith("the reason is ")
    assert [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.revoked"] == []
