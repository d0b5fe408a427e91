"""A call made for another agent than the run's (``call_tool(agent=...)``: an agent handed off to)
is decided again, when its run resumes under a changed policy, as that agent."""

from __future__ import annotations

import pytest
from approval_helpers import policy

from sealbox import verify_store
from sealbox.approvals import ApprovalPending, answer
from sealbox.errors import ConfigError
from sealbox.recorder import Recorder

BEFORE = """
version: 1
rules:
  - id: specialist-pays-with-ops
    match: {agent: {name: specialist}, tool: pay}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
"""
#: the same, and the run's own agent may not pay at all
AFTER = """
version: 1
rules:
  - id: triage-never-pays
    match: {agent: {name: triage}, tool: pay}
    effect: deny
""" + BEFORE.split("rules:\n", 1)[1]


def test_an_approved_call_is_reevaluated_as_the_agent_that_made_it(store, keys):
    paid: list[int] = []
    run = Recorder(store, policy=policy(BEFORE), approvals="suspend").run(agent="triage")
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("local", "pay", {"amount": 3}, lambda amount: paid.append(amount), agent="specialist")
    answer(store, pending.value.approval_id, "approve", "fine", keys["alice"])
    with Recorder(store, policy=policy(AFTER), approvals="suspend").resume(
            run.run_id, {("local", "pay"): lambda amount: paid.append(amount)}) as resumed:
        (call,) = resumed.resumed_calls
    assert (call.outcome, call.ran, paid) == ("approved", True, [3])
    decisions = [store.resolve(e.payload) for e in store.read_run(run.run_id) if e.kind == "policy.decision"]
    assert [(d["rule"], d["effect"], d["inputs"]["agent"]["name"], d.get("reevaluated", False)) for d in decisions] == [
        ("specialist-pays-with-ops", "require_approval", "specialist", False),
        ("specialist-pays-with-ops", "require_approval", "specialist", True)]
    assert verify_store(store).ok


@pytest.mark.parametrize("agent", ["", 5, "\ud800"])
def test_an_agent_that_is_no_name_is_refused_before_anything_is_recorded(store, agent):
    with Recorder(store, policy=policy(BEFORE)).run(agent="triage") as run:
        with pytest.raises(ConfigError) as refused:
            run.call_tool("local", "pay", {"amount": 3}, lambda amount: amount, agent=agent)
    assert str(refused.value) == (f"local/pay: agent must be an agent's name (a non-empty string) or None, got "
                                  f"{agent!r}; nothing was recorded")
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "run.ended"]
