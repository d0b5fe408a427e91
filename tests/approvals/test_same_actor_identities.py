"""Two identities naming one actor (``alice`` and ``Alice``, or ``user:alice``).

The requester rule and the acts_as_agent flag take ``Alice`` and ``user:alice`` for ``alice``, yet
``sealbox identities add Alice`` was accepted beside ``alice``, and the two then made a quorum of two on
one request, from two hosts, with no flag: one person passed a four-eyes rule alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

import sealbox.identities as identities
from sealbox.approvals import ApprovalPending, answer, get_approval
from sealbox.identities import IdentityError, add_identity, identity_book
from sealbox.recorder import Recorder

LAPTOP = {"hostname": "laptop", "os_user": "alice"}
DESK = {"hostname": "desk", "os_user": "alice"}


@pytest.fixture
def ops(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    yield store, key
    store.close()


@pytest.mark.parametrize("name", ["Alice", "ALICE", "user:alice", "agent:Alice"])
def test_an_identity_naming_the_same_actor_as_another_is_refused(ops, tmp_path, name):
    store, _ = ops
    before = store.size()
    with pytest.raises(IdentityError) as info:
        add_identity(store, name, "approver", ["ops"], key_path=tmp_path / "second.key",
                     admin_key=admin_key(store, tmp_path))
    assert str(info.value) == (
        f"identity {name!r} would name the same actor as the existing identity 'alice' (names are compared "
        "case-folded, without one leading 'scheme:'): one person must not hold two approvers of one request; "
        "choose another name")
    assert store.size() == before and not (tmp_path / "second.key").exists()
    assert [i.name for i in identity_book(store).all() if i.role != "admin"] == ["alice"]


def test_the_cli_refuses_it_in_one_line(ops, tmp_path):
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "identities", "add", "Alice", "--role", "approver",
                          "--group", "ops", "--key-out", str(tmp_path / "second.key"), "--admin-key",
                          str(admin_key(ops[0], tmp_path)), "-s", str(tmp_path / "store")],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "error: identity 'Alice' would name the same actor as the existing identity 'alice' (names are compared "
        "case-folded, without one leading 'scheme:'): one person must not hold two approvers of one request; "
        "choose another name"]


def test_two_such_identities_from_an_older_store_do_not_make_a_quorum_of_two(ops, tmp_path, monkeypatch):
    store, alice = ops
    monkeypatch.setattr(identities, "_refuse_same_actor", lambda book, name: None)  # as an older Sealbox added it
    upper = add_identity(store, "Alice", "approver", ["ops"], key_path=tmp_path / "Alice.key",
                         admin_key=admin_key(store, tmp_path)).key_path
    monkeypatch.undo()
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("ci", "deploy", {"env": "prod"}, lambda **_: "ran")
    aid = info.value.approval_id
    answer(store, aid, "approve", "ok", alice, client=LAPTOP)
    with pytest.raises(Exception) as refused:
        answer(store, aid, "approve", "ok", upper, client=DESK)
    assert (type(refused.value).__name__, refused.value.code, str(refused.value)) == (
        "ApprovalError", "duplicate", f"answer refused: the identity has already answered this request "
        f"(Alice on {aid})")
    state = get_approval(store, aid)
    assert (state.status, [(a.identity, a.problem) for a in state.answers]) == ("pending", [("alice", None)])
