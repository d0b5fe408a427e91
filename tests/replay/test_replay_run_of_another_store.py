"""A run of another store started inside a replay cannot be served from the replayed store's record.
The replay stops before it runs (nothing in it may execute for real), and now says why; it said the
record had no further sub-agent run of that agent ("extra"), as if the agent had started one too many."""

from __future__ import annotations

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer


def test_a_run_of_another_store_inside_a_replay_stops_it_saying_so(tmp_path):
    store = sealbox.init_store(tmp_path / "a")
    other = sealbox.init_store(tmp_path / "b")
    audit = Recorder(other, policy=ALLOW_ALL)

    def agent(run):
        run.note("x")
        with audit.run(agent="audit", principal="agent:audit") as elsewhere:
            elsewhere.note("audited")

    with Recorder(store, policy=ALLOW_ALL).run(agent="boss") as run:
        agent(run)
    audit_runs = len(other.query_runs())

    result = Replayer(store).replay(run.run_id, agent)

    assert result.divergence.kind == "unreplayable"
    assert result.divergence.message == (
        f"at step 3 the agent started a run (agent 'audit') of another store ({other.origin}), which the "
        "replayed store's record cannot serve; replay stopped before anything in that run could execute")
    assert len(other.query_runs()) == audit_runs  # nothing was written there
    store.close()
    other.close()
