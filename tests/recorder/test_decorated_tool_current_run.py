"""A ``@recorder.tool`` function records into the run current where it is called, whichever Recorder
started it: that run's store keeps the call and that run's policy decides it. A replay depends on it:
it starts its run with a Recorder of its own, and serves the agent's decorated tools from the record."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

DENY_ALL = """
version: 1
name: deny-all
rules:
  - id: nothing
    effect: deny
"""


@pytest.fixture
def stores(tmp_path):
    a, b = sealbox.init_store(tmp_path / "a"), sealbox.init_store(tmp_path / "b")
    yield a, b
    a.close()
    b.close()


def _tool_events(store, run_id):
    return [(e.kind, e.payload.get("tool"), e.payload.get("effect")) for e in store.read_run(run_id)
            if e.kind in ("tool.call", "policy.decision", "tool.result")]


def test_the_current_run_of_another_recorder_records_and_decides_the_call(stores, tmp_path):
    store_a, store_b = stores
    rec_a = Recorder(store_a, policy=ALLOW_ALL)
    ran = []

    @rec_a.tool("db")
    def lookup(key):
        ran.append(key)
        return key.upper()

    with Recorder(store_b, policy=ALLOW_ALL).run(agent="b") as run_b:
        assert lookup("k") == "K"
    assert _tool_events(store_b, run_b.run_id) == [
        ("tool.call", "lookup", None), ("policy.decision", "lookup", "allow"), ("tool.result", None, None)]
    assert [r["run_id"] for r in store_a.runs()] == ["system"]  # nothing in the decorating recorder's store

    path = tmp_path / "deny.yaml"
    path.write_text(DENY_ALL)
    with Recorder(store_b, policy=Policy.load(path)).run(agent="b") as run_denied:
        with pytest.raises(ToolDenied):
            lookup("x")  # the current run's policy decides, not the decorating recorder's ALLOW_ALL
    assert ran == ["k"]
    assert _tool_events(store_b, run_denied.run_id) == [("tool.call", "lookup", None), ("policy.decision", "lookup", "deny")]


def test_a_replay_serves_the_agents_decorated_tools_from_the_record(stores):
    from sealbox.replay import Replayer

    store, _ = stores
    rec = Recorder(store, policy=ALLOW_ALL)
    ran = []

    @rec.tool("db")
    def lookup(key):
        ran.append(key)
        return key.upper()

    def agent(run):
        return lookup("k")

    with rec.run(agent="a") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)  # its own Recorder's run is the current one
    assert result.reproduced, result.divergence
    assert result.steps_compared == 1
    assert ran == ["k"]  # served from the record, not run again
