"""An approver acting as an agent is found on every backend: the principals that name the same actor
as an identity (one scheme stripped, ASCII case folded) are read by the same query on SQLite and
PostgreSQL, and the `acts_as_agent` flag follows from them."""

from __future__ import annotations

import textwrap

import pytest

from identity_testkit import admin_key
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.policy import Policy
from sealbox.recorder import Recorder

PRINCIPALS = ("user:Carol", "agent:carol", "CAROL", "svc:CaRoL", "carol", "user:caroline", "a:b:carol", "user:bob")
ASKS = Policy.from_text(textwrap.dedent("""
    version: 1
    rules:
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
"""))


def test_principals_naming_an_actor_are_read_whatever_their_case(store):
    """SQLite's LIKE folds ASCII case and PostgreSQL's does not: `svc:CaRoL` and `user:Carol` were
    left out on PostgreSQL (an approver `carol` acting as an agent went unflagged there)."""
    rec = Recorder(store, policy=ASKS)
    for principal in PRINCIPALS:
        with rec.run(agent="a", principal=principal):
            pass
    found = [e.principal for e in store.reader().events(["run.started"], principal_actor="carol")]
    # candidates for same_actor: the name itself or any "...:name", ASCII case folded
    assert found == ["user:Carol", "agent:carol", "CAROL", "svc:CaRoL", "carol", "a:b:carol"]


@pytest.mark.parametrize("principal", ["agent:Carol", "svc:CAROL"])
def test_an_approver_acting_as_an_agent_in_another_case_is_flagged(store, tmp_path, principal):
    with Recorder(store, policy=ASKS).run(agent="helper", principal=principal) as helper:
        pass
    key = add_identity(store, "carol", "approver", ["ops"], key_path=tmp_path / "carol.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=ASKS, approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    state = answer(store, info.value.approval_id, "approve", "ok", key, client={"hostname": "laptop"})
    (flag,) = state.answers[0].flags
    assert (flag["code"], flag["evidence"]["principal"], flag["evidence"]["run_id"]) == (
        "acts_as_agent", principal, helper.run_id)


@pytest.mark.parametrize("principal", ["user:carol\u200b", "user:ｃａｒｏｌ", "agent:ca\u00adrol", "CAROL\u2060",
                                       "user\uff1acarol"])
def test_an_approver_acting_as_an_agent_under_a_unicode_variant_is_flagged(store, tmp_path, principal):
    """The candidates were read with an ASCII-only fold: a run whose principal was `user:carol` with
    an invisible U+200B, or full-width letters (the same actor for actor_key), was never a candidate,
    and carol approving under that name went unflagged. A principal holding any non-ASCII character is
    now a candidate too (same_actor decides), on both backends; ASCII ones are read as before."""
    with Recorder(store, policy=ASKS).run(agent="other", principal="user:\u0436arol"):  # a Cyrillic ж: not carol
        pass
    with Recorder(store, policy=ASKS).run(agent="helper", principal=principal) as helper:
        pass
    found = [e.principal for e in store.reader().events(["run.started"], principal_actor="carol")]
    assert found == ["user:\u0436arol", principal]
    key = add_identity(store, "carol", "approver", ["ops"], key_path=tmp_path / "carol.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=ASKS, approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    state = answer(store, info.value.approval_id, "approve", "ok", key, client={"hostname": "laptop"})
    (flag,) = state.answers[0].flags
    assert (flag["code"], flag["evidence"]["principal"], flag["evidence"]["run_id"]) == (
        "acts_as_agent", principal, helper.run_id)
