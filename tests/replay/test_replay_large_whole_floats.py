"""A whole-number float beyond 2**53 (``1e16``, a nanosecond timestamp as a float) is stored as its digits,
a bare integer (docs/canonical.md, "Whole-number floats"), which reads back as a Python ``int`` outside
I-JSON's range. Hashing the recorded step for its key then raised ``CanonicalizationError: integer outside
±(2**53 - 1)``: ``Replayer.replay`` and ``sealbox replay`` of such a run failed before starting, whatever
the agent did. The recorded content is now hashed as the double it came from, so the run replays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer


def agent_with(x):
    def agent(run):
        run.call_tool("local", "t", {"x": x, "n": 1}, lambda x, n: n)
        run.complete({"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": x},
                     lambda r: {"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
    return agent


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "s")
    yield s
    s.close()


def test_a_run_with_a_float_beyond_2_53_replays_reproduced(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_with(1e16)(run)
    result = Replayer(store).replay(run.run_id, agent_with(1e16))
    assert (result.reproduced, result.steps_compared, result.divergence) == (True, 2, None)


def test_another_large_float_still_diverges_at_its_field(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_with(1e16)(run)
    result = Replayer(store).replay(run.run_id, agent_with(2e16))
    assert (result.reproduced, result.divergence.kind, result.divergence.step) == (False, "mismatch", "2")
    assert [(d.path, d.a, d.b) for d in result.divergence.diff] == [("x", 10**16, 2e16)]


def test_sealbox_replay_of_such_a_run(tmp_path, store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_with(1e16)(run)
    (tmp_path / "big_float_agent.py").write_text(
        "def agent(run):\n"
        "    run.call_tool('local', 't', {'x': 1e16, 'n': 1}, lambda x, n: n)\n"
        "    run.complete({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}], 'seed': 1e16},\n"
        "                 lambda r: {'choices': [{'message': {'role': 'assistant', 'content': 'ok'}}]})\n")
    done = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "replay", run.run_id, "--agent",
                           "big_float_agent:agent", "--store", str(tmp_path / "s")], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("reproduced: 2 step(s) matched; replay run ")


def test_a_snapshot_holding_such_a_float_is_not_taken_for_a_changed_store(store):
    """The recorded snapshot is checked against its fingerprint before the replay; recomputed from the
    stored content (the int the digits read back as), that raised, and was reported as a snapshot changed
    below Sealbox, refusing the replay of an intact store (``sealbox verify`` passes)."""
    from sealbox.snapshot import Snapshot

    snap = Snapshot(model={"name": "m", "parameters": {"seed": 1e16}})
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", snapshot=snap) as run:
        agent_with(1.5)(run)
    for given in (None, snap):
        result = Replayer(store).replay(run.run_id, agent_with(1.5), snapshot=given)
        assert (result.reproduced, result.config_drift, result.divergence) == (True, (), None)
