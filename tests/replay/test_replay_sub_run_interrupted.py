"""A KeyboardInterrupt (or SystemExit) inside a sub-agent run of a replay reaches the caller, and the
replay run is ended. The sub-agent run's end made its missing steps the whole replay's divergence, so
the replay run's ``run.ended`` was compared as if it were a step: ``ReplayStopped`` replaced the
interrupt and the replay run was left without ``run.ended`` (running forever)."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer


def _agent(interrupt):
    def agent(run):
        with run.recorder.run(agent="w", principal="agent:w") as sub:
            if interrupt is not None:
                raise interrupt
            sub.call_tool("t", "f", {"x": 1}, lambda x: x)
        run.note("done")
    return agent


@pytest.mark.parametrize("interrupt,status", [(KeyboardInterrupt(), "cancelled"), (SystemExit(3), "error")])
def test_an_interrupt_in_a_sub_agent_run_reaches_the_caller_and_every_replay_run_ends(tmp_path, interrupt, status):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss") as run:
        _agent(None)(run)

    with pytest.raises(type(interrupt)):
        Replayer(store).replay(run.run_id, _agent(interrupt))

    replays = [r for r in store.query_runs() if r.get("replay_of")]
    assert sorted(r["agent"] for r in replays) == ["boss", "w"]
    for r in replays:
        last = store.read_run(r["run_id"])[-1]
        assert (r["agent"], last.kind, last.payload["status"]) == (r["agent"], "run.ended", status)
    assert sealbox.verify_store(store).ok
    store.close()
