"""With tools="live" the replay's policy decides each call: a policy other than the recorded run's is a
change of the conditions the run was recorded under (config_drift, path ``policy``), never a replay
that reports the run reproduced while its calls were decided by another policy."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policy import Policy
from sealbox.replay import Replayer
from sealbox.snapshot import Snapshot

P1 = Policy.from_text("version: 1\nrules:\n  - id: rest\n    effect: allow\n")
P2 = Policy.from_text("version: 1\nrules:\n  - id: no-t\n    match: {server: local, tool: t}\n    effect: deny\n"
                      "  - id: rest\n    effect: allow\n")


def agent(run):
    try:
        return run.call_tool("local", "t", {"x": 1}, lambda x: {"r": 1})
    except sealbox.ToolDenied:
        return None


@pytest.fixture
def recorded(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with sealbox.Recorder(store, policy=P1).run(agent="a", snapshot=Snapshot(model={"name": "m"}, policy=P1.fingerprint)) as run:
        agent(run)
    yield store, run.run_id
    store.close()


def test_another_policy_deciding_live_calls_is_config_drift(recorded):
    store, run_id = recorded
    before = len(store.runs())
    result = Replayer(store, policy=P2).replay(run_id, agent, tools="live", side_effects=True)
    assert not result.reproduced and result.new_run_id is None
    assert [d.to_dict() for d in result.config_drift] == [
        {"path": "policy", "change": "changed", "a": P1.fingerprint, "b": P2.fingerprint}]
    assert result.divergence.kind == "config_drift"
    assert result.divergence.message == (
        "the configuration differs from the recorded snapshot in 1 field(s): policy; replay did not start "
        "(--allow-config-drift, or allow_config_drift=True, to proceed)")
    assert len(store.runs()) == before


def test_allowed_drift_pins_the_replay_run_to_the_policy_that_decided(recorded):
    store, run_id = recorded
    result = Replayer(store, policy=P2).replay(run_id, agent, tools="live", side_effects=True, allow_config_drift=True)
    assert [d.path for d in result.config_drift] == ["policy"]
    started = store.read_run(result.new_run_id)[0].payload
    assert store.get_snapshot(started["snapshot"])["policy"] == P2.fingerprint
    assert started["policy"]["fingerprint"] == P2.fingerprint


def test_the_same_policy_and_tools_from_the_record_are_no_drift(recorded):
    store, run_id = recorded
    assert Replayer(store, policy=P1).replay(run_id, agent, tools="live", side_effects=True).reproduced
    assert Replayer(store, policy=P2).replay(run_id, agent).reproduced  # decides nothing: recorded decisions
