"""Look-alike letters of other scripts in a principal (TR39 confusables).

A run whose principal was ``user:аlice`` (a Cyrillic ``а``, U+0430) or ``оps-oncall`` (a Cyrillic
``о``) shows as the identity's own name, yet the requester rule and the ``acts_as_agent`` flag compared
principals in NFKC form only, so the identity ``alice`` approved the call she requested herself, and an
approver acting as an agent under a look-alike name went unflagged. Principals are now compared by
their TR39 skeleton as well (look-alikes of ASCII letters map to the letter)."""

from __future__ import annotations

import textwrap

import pytest
from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox.approvals import ApprovalError, ApprovalPending, actor_key, answer, get_approval, same_actor
from sealbox.identities import add_identity
from sealbox.policy import Policy
from sealbox.recorder import Recorder

ASKS = Policy.from_text(textwrap.dedent("""
    version: 1
    rules:
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
"""))


@pytest.mark.parametrize("principal", ["user:\u0430lice", "\u0430lice", "ALIC\u0415", "agent:\u0251lic\u0435",
                                       "user:\u03b1l\u0456ce"])
def test_alice_cannot_approve_a_call_requested_under_a_look_alike_of_her_name(backend, tmp_path, principal):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot", principal=principal) as run:
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda **_: "ran")
    aid = info.value.approval_id
    before = store.size()
    with pytest.raises(ApprovalError) as refused:
        answer(store, aid, "approve", "mine", key)
    assert refused.value.code == "requester"
    assert str(refused.value) == f"answer refused: the identity that requested the call cannot answer its approval (alice on {aid})"
    assert store.size() == before
    assert get_approval(store, aid).status == "pending"
    store.close()


@pytest.mark.parametrize("principal", ["\u043eps-oncall", "svc:\u041ePS-\u041eNCALL", "\u03bfps-\u043encall"])
def test_an_approver_acting_as_an_agent_under_a_look_alike_is_flagged(backend, tmp_path, principal):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    with Recorder(store, policy=ASKS).run(agent="other", principal="user:ops-oncal1") as other:  # ASCII 1: not ops-oncall
        pass
    with Recorder(store, policy=ASKS).run(agent="helper", principal=principal) as helper:
        pass
    key = add_identity(store, "ops-oncall", "approver", ["ops"], key_path=tmp_path / "oncall.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=ASKS, approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    state = answer(store, info.value.approval_id, "approve", "ok", key, client={"hostname": "laptop"})
    (flag,) = state.answers[0].flags
    assert (flag["code"], flag["evidence"]["principal"], flag["evidence"]["run_id"]) == (
        "acts_as_agent", principal, helper.run_id)
    assert other.run_id != helper.run_id
    # every reader computes it again from the log (an answer written without it still shows it)
    (read,) = get_approval(store, info.value.approval_id).answers
    assert [f["code"] for f in read.flags] == ["acts_as_agent"]
    store.close()


def test_actor_key_folds_look_alikes_of_ascii_letters():
    assert actor_key("user:\u0430lice") == actor_key("\u0410LICE") == actor_key("alice") == "alice"
    assert actor_key("\u043eps-oncall") == actor_key("\u039fPS-\u041eNCALL") == "ops-oncall"
    assert actor_key("\u0440\u0435\u0445\u0430") == "pexa"  # all-Cyrillic: the skeleton, whatever the script
    assert same_actor("agent-1", "\u0430gent-1") and same_actor("ops", "\u0585ps")
    # letters that look like no ASCII letter stay themselves; ASCII is not folded further (1 is not l)
    assert actor_key("\u0436\u0434") == "\u0436\u0434" and not same_actor("ops-oncall", "ops-oncal1")
