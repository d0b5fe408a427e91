"""The ``--reason`` of an identity change is checked as an answer's is.

An approval answer's reason is refused when longer than ``REASON_MAX_CHARS`` (signed and kept forever:
link to the details) or not UTF-8 text; an identity change's reason, as signed and as permanent, was
taken at any length (100,000 characters recorded in the system run), and a reason holding a byte that is
not UTF-8 ended in ``error: a string or key contains a lone surrogate (I-JSON, RFC 7493 §2.1)``, naming
neither the option nor the fix; from Python a reason that is not a string reached the store's schema."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sealbox.approvals import REASON_MAX_CHARS
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import IdentityError, disable_identity, enable_identity, rotate_key
from identity_testkit import admin_key


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *(a if isinstance(a, bytes) else str(a) for a in args)],
                          capture_output=True)


def changes(store):
    return [e.payload.get("change") for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"]


def test_a_reason_too_long_or_not_utf8_is_one_error_line_and_nothing_is_recorded(store, keys, tmp_path):
    root = admin_key(store, tmp_path)
    before = changes(store)
    path = tmp_path / "store"
    long = sb("identities", "disable", "alice", "--reason", "a" * (REASON_MAX_CHARS + 1), "--admin-key", root,
              "-s", path)
    assert (long.returncode, long.stderr.decode()) == (2, (
        f"error: --reason is {REASON_MAX_CHARS + 1} characters long: at most {REASON_MAX_CHARS} are recorded (say "
        "why in short; link to the details)\n"))
    bad = sb("identities", "rotate", "alice", "--key-out", tmp_path / "new.key", "--reason", b"caf\xe9",
             "--admin-key", root, "-s", path)
    assert (bad.returncode, bad.stderr.decode()) == (2, (
        "error: --reason is not UTF-8 text (it holds a byte that is not UTF-8): write it again in UTF-8 (check "
        "the terminal's or the script's encoding)\n"))
    assert not (tmp_path / "new.key").exists()
    assert changes(store) == before
    ok = sb("identities", "disable", "alice", "--reason", "a" * REASON_MAX_CHARS, "--admin-key", root, "-s", path)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("reason", [5, "a" * (REASON_MAX_CHARS + 1), "caf\udce9"])
def test_python_refuses_such_a_reason_before_anything_is_written(store, keys, tmp_path, reason):
    root = admin_key(store, tmp_path)
    before = changes(store)
    for change in (lambda: disable_identity(store, "alice", reason, admin_key=root),
                   lambda: enable_identity(store, "alice", reason, admin_key=root),
                   lambda: rotate_key(store, "alice", tmp_path / "n.key", reason, admin_key=root)):
        with pytest.raises(IdentityError) as info:
            change()
        assert str(info.value).startswith("reason ")
    assert not os.path.exists(tmp_path / "n.key")
    assert changes(store) == before
