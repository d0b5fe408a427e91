"""A path option or argument given as ``""`` (a quoted, unset shell variable: ``--key-file "$KEY"``) is one
error line naming it, exit 2, before anything is read or written.

Found by a bad-input sweep: ``access grant … --credential-file ''`` recorded a grant with no credential
(exit 0); ``identities add … --key-out ''`` said ``error: . already exists: refusing to overwrite a key file``;
``--key-file ''`` said ``key file . is not a regular file``; ``policy check ''`` said ``: cannot read file: Is
a directory``; ``verify --checkpoint ''`` said ``cannot read the checkpoint file : [Errno 2] …``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from sealbox import init_store

    path = tmp_path_factory.mktemp("empty") / "store"
    init_store(path).close()
    return path


@pytest.mark.parametrize("args, name", [
    (["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "K",
      "--credential-file", ""], "--credential-file"),
    (["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", ""], "--key-file"),
    (["access", "revoke", "g", "--reason", "r", "--key-file", ""], "--key-file"),
    (["approvals", "approve", "apr_x", "--reason", "r", "--key-file", ""], "--key-file"),
    (["identities", "add", "e", "--role", "approver", "--key-out", ""], "--key-out"),
    (["identities", "add", "e", "--role", "approver", "--admin-key", ""], "--admin-key"),
    (["identities", "rotate", "e", "--key-out", "", "--reason", "r", "--admin-key", "K"], "--key-out"),
    (["export", "RUN", "-o", "x.sbx", "--prove-from", ""], "--prove-from"),
    (["replay", "RUN", "--agent", "m:f", "--policy", ""], "--policy"),
    (["replay", "RUN", "--agent", "m:f", "--snapshot", ""], "--snapshot"),
    (["whatif", "RUN", "--policy", ""], "--policy"),
    (["gateway", "check", "-c", ""], "--config"),
    (["gateway", "replay", "RUN", "-c", ""], "--config"),
    (["gateway", "replay", "RUN", "--output", ""], "--output"),
    (["gateway", "reapprove", "db", "t", "--reason", "r", "--key-file", ""], "--key-file"),
    (["verify", "--checkpoint", ""], "--checkpoint"),
    (["verify", "x.sbx", "--consistency", ""], "--consistency"),
    (["verify", "x.sbx", "--proof-from-saved", ""], "--proof-from-saved"),
    (["import", ""], "FILE"),
    (["policy", "check", ""], "FILE"),
    (["policy", "test", "p.yaml", ""], "CASES"),
    (["policy", "explain", "", "--tool", "t"], "FILE"),
    (["demo", "--dir", ""], "--dir"),
])
def test_an_empty_path_is_one_error_line_naming_it(store, tmp_path, args, name):
    env = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_DEBUG",)}
    env["SEALBOX_STORE"] = str(store)
    before = sorted(os.listdir(store))
    proc = subprocess.run([SEALBOX, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {name} is empty: give a path\n")
    assert sorted(os.listdir(store)) == before and os.listdir(tmp_path) == []
