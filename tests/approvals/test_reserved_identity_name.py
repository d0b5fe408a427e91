"""An identity may not be named ``sealbox``, the principal Sealbox records its own events with.

``sealbox identities add sealbox --role approver …`` was accepted: its answers read ``decided by sealbox``
in ``approvals show/list``, ``runs show`` and reports, as if Sealbox had approved the call itself, and the
system run's own ``run.started`` (principal ``sealbox``) flagged every one of them ``acts_as_agent``. Names
naming that actor (``Sealbox``, ``svc:sealbox``) are refused as names of one existing identity are."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import IdentityError, add_identity
from identity_testkit import admin_key


@pytest.mark.parametrize("name", ["sealbox", "Sealbox", "svc:sealbox"])
def test_an_identity_naming_sealbox_is_refused_and_nothing_is_recorded(store, tmp_path, name):
    root = admin_key(store, tmp_path)
    before = [e.payload for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"]
    with pytest.raises(IdentityError) as info:
        add_identity(store, name, "approver", ["ops"], key_path=tmp_path / "s.key", admin_key=root)
    assert str(info.value) == (
        f"identity {name!r} would name the same actor as 'sealbox', the principal Sealbox records its own events "
        "with (the system run, its notes): its answers would read as given by Sealbox itself, and the system run "
        "would flag it acts_as_agent; choose another name")
    assert not (tmp_path / "s.key").exists()
    assert [e.payload for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"] == before


def test_the_cli_says_it_in_one_line(store, tmp_path):
    root = admin_key(store, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "identities", "add", "sealbox", "--role",
                           "approver", "--key-out", str(tmp_path / "s.key"), "--admin-key", str(root), "-s",
                           str(tmp_path / "store")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: identity 'sealbox' would name the same actor as 'sealbox'")
    assert len(proc.stderr.splitlines()) == 1
