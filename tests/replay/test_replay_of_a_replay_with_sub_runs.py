"""A replay run is a run like any other and can be replayed; its sub-agent runs are replays themselves
(``replay_of`` set), and the record's sub-agent runs left every replay out: replaying a replay run whose
agent started a sub-agent run stopped as ``extra`` ("the recorded run has 0 of that agent")."""

from __future__ import annotations

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer


def _agent(sent):
    def agent(run):
        with run.recorder.run(agent="mailer", principal="agent:mailer") as sub:
            sub.call_tool("mail", "send", {"to": "ceo"}, lambda to: sent.append(to) or f"sent to {to}")
        run.note("done")
    return agent


def test_a_replay_run_with_sub_agent_runs_replays_and_serves_them(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    sent: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss") as run:
        _agent(sent)(run)
    first = Replayer(store).replay(run.run_id, _agent(sent))
    assert first.reproduced, first.divergence

    again = Replayer(store).replay(first.new_run_id, _agent(sent))

    assert again.divergence is None, again.divergence.message
    assert again.head() == "reproduced: 1 step(s) matched, and 1 in 1 sub-agent run(s)"
    assert again.sub_runs[0]["replay_of"] == first.sub_runs[0]["new_run_id"]
    assert sent == ["ceo"]  # sent once, when recorded
    events = store.read_run(again.sub_runs[0]["new_run_id"])
    assert events[3].kind == "tool.result" and events[3].payload["result"] == "sent to ceo"
    store.close()
