"""The requester rule against Unicode variants of the requesting principal.

A run whose principal was ``user:alice`` followed by an invisible U+200B (shown as ``user:alice``), or
the full-width ``user:ａｌｉｃｅ``, requested an approval that the identity ``alice`` then approved:
answer() accepted it and the record showed alice approving her own call."""

from __future__ import annotations

import pytest
from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox.approvals import ApprovalError, ApprovalPending, actor_key, answer, get_approval
from sealbox.identities import add_identity
from sealbox.recorder import Recorder


@pytest.fixture
def alice(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    yield store, key
    store.close()


@pytest.mark.parametrize("principal", ["user:alice\u200b", "user:ａｌｉｃｅ", "agent:al\u00adice", "ALICE\u2060",
                                       "user\u200b:alice", "user\uff1aalice"])
def test_alice_cannot_approve_a_call_requested_under_a_unicode_variant_of_her_name(alice, principal):
    store, key = alice
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


def test_actor_key_folds_invisible_and_compatibility_forms():
    assert actor_key("user:alice\u200b") == actor_key("ｕｓｅｒ：ＡＬＩＣＥ") == actor_key("alice") == "alice"
    # a Cyrillic а: a look-alike, folded too (test_confusable_principals)
    assert actor_key("user:\u0430lice") == "alice"
