"""A store whose database this user may not read (another user's store, mode 0600) is one `error:` line
saying so: not `cannot open … for writing`, which `runs list`, `calls` or `verify` (readers) never do."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _as_a_user_file_modes_stop() -> None:
    """preexec_fn: as root, drop the capabilities that ignore file modes (as anyone else, nothing to do)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def unreadable(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    store.close()
    db = tmp_path / "store" / "sealbox.db"
    db.chmod(0)
    probe = subprocess.run([sys.executable, "-c", f"open({str(db)!r}, 'rb')"], capture_output=True,
                           preexec_fn=_as_a_user_file_modes_stop)
    if probe.returncode == 0:
        db.chmod(0o600)
        pytest.skip("this process cannot run a subprocess that file modes stop")
    yield tmp_path / "store"
    db.chmod(0o600)
    shutil.rmtree(tmp_path / "store")


@pytest.mark.parametrize("command", [["runs", "list"], ["calls"], ["verify"], ["log", "key"],
                                     ["identities", "add", "x", "--role", "approver"]])
def test_a_store_this_user_cannot_read_is_one_error_line_saying_so(unreadable, command):
    out = subprocess.run([SEALBOX, *command, "-s", str(unreadable)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, preexec_fn=_as_a_user_file_modes_stop, timeout=60)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (f"error: cannot read {unreadable / 'sealbox.db'}: permission denied (the store's "
                          "database is not readable by this user: ask its owner for access)\n")
