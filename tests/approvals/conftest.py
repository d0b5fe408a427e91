"""Fixtures for approval tests: a real SQLite store, identities with key files, a policy that asks."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.identities import add_identity
from identity_testkit import admin_key


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def keys(store, tmp_path):
    """alice, bob (ops approvers), carol (approver, no group), dave (ops, agent role), erin (auditor)."""
    out = {}
    for name, role, groups in (("alice", "approver", ["ops"]), ("bob", "approver", ["ops"]), ("carol", "approver", []),
                               ("dave", "agent", ["ops"]), ("erin", "auditor", ["ops"])):
        out[name] = add_identity(store, name, role, groups, key_path=tmp_path / f"{name}.key",
                                 admin_key=admin_key(store, tmp_path)).key_path
    return out
