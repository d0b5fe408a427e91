"""Host names are compared case-insensitively by the shared-account flags (DNS names are, RFC 4343):
one person answering from `LAPTOP` and then `laptop` (the name as one tool or OS reports it, then another)
answers from one client, and was flagged `multiple_clients` every time. The OS user is still compared
exactly, another host is still another client, and two approvers on `LAPTOP` and `laptop` are one
client for `quorum_same_client`. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox.approvals import ApprovalPending, answer, get_approval, list_approvals
from sealbox.identities import add_identity
from sealbox.recorder import Recorder


def request(store, tool="write_query"):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", tool, {"sql": "x"}, lambda **_: "ran")
    return info.value.approval_id


def keys_of(store, tmp_path):
    return {name: add_identity(store, name, "approver", groups, key_path=tmp_path / f"{name}.key",
                               admin_key=admin_key(store, tmp_path)).key_path
            for name, groups in (("alice", ["ops"]), ("bob", ["ops"]), ("carol", []))}


def test_one_host_in_two_cases_is_one_client(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    keys = keys_of(store, tmp_path)
    answer(store, request(store), "approve", "ok", keys["alice"], client={"hostname": "LAPTOP", "os_user": "alice"})
    after = answer(store, request(store), "approve", "ok", keys["alice"],
                   client={"hostname": "laptop", "os_user": "alice"})
    assert after.answers[0].flags == ()
    assert get_approval(store, after.approval_id).flags == []
    assert list_approvals(store, flagged=True) == []
    # the OS user is still compared exactly, and another host is another client
    user = answer(store, request(store), "approve", "ok", keys["alice"], client={"hostname": "laptop", "os_user": "Alice"})
    assert [f["code"] for f in user.answers[0].flags] == ["multiple_clients"]
    other = answer(store, request(store), "approve", "ok", keys["alice"], client={"hostname": "kiosk", "os_user": "alice"})
    assert [f["code"] for f in other.answers[0].flags] == ["multiple_clients"]


def test_two_approvers_on_one_host_in_two_cases_are_one_client(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    keys = keys_of(store, tmp_path)
    aid = request(store, "deploy")  # quorum 2
    answer(store, aid, "approve", "ok", keys["alice"], client={"hostname": "LAPTOP", "os_user": "ops"})
    state = answer(store, aid, "approve", "ok", keys["bob"], client={"hostname": "laptop", "os_user": "ops"})
    assert [f["code"] for f in state.answers[-1].flags] == ["quorum_same_client"]
    assert "quorum_same_client" in [f["code"] for f in get_approval(store, aid).flags]
