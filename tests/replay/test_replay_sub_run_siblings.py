"""Once a sub-agent run diverges, the whole replay has stopped: its sibling sub-agent runs (other
threads) stop at their next step too. They went on being served, and with ``tools="live"`` ran their
tools for real after the replay had stopped; their runs ended ``ok`` and counted as reproduced."""

from __future__ import annotations

import threading

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer


def _agent(value, ran):
    def agent(run):
        a_done = threading.Event()

        def a():
            try:
                with run.recorder.run(agent="A", principal="agent:A", parent_run_id=run.run_id) as sub:
                    sub.call_tool("t", "a", {"x": value}, lambda x: ran.append(("A", x)) or 1)
            except BaseException as exc:  # noqa: BLE001 - ReplayStopped in the replay
                ran.append(("A stopped", type(exc).__name__))
            finally:
                a_done.set()

        def b():
            try:
                with run.recorder.run(agent="B", principal="agent:B", parent_run_id=run.run_id) as sub:
                    a_done.wait(10)  # A has diverged (in the replay) before B's tool call
                    sub.call_tool("t", "b", {"x": 1}, lambda x: ran.append(("B", x)) or 1)
                    sub.note("after")
            except BaseException as exc:  # noqa: BLE001
                ran.append(("B stopped", type(exc).__name__))

        tb = threading.Thread(target=b)
        tb.start()
        while not any(r["agent"] == "B" for r in run.store.query_runs() if r.get("parent_run_id") == run.run_id):
            a_done.wait(0.01)  # B has started first (its recorded sub-agent run is served to it)
        ta = threading.Thread(target=a)
        ta.start()
        ta.join(20)
        tb.join(20)
    return agent


def test_a_sibling_sub_agent_run_stops_once_another_diverged_and_runs_no_live_tool(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    ran: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss") as run:
        _agent(1, ran)(run)
    assert ran == [("A", 1), ("B", 1)]
    ran.clear()

    result = Replayer(store, policy=ALLOW_ALL).replay(run.run_id, _agent(2, ran), tools="live", side_effects=True)

    assert result.divergence.kind == "mismatch" and result.divergence.sub_run[0] != ""
    assert sorted(ran) == [("A stopped", "ReplayStopped"), ("B stopped", "ReplayStopped")]  # B's tool never ran
    by_agent = {r["agent"]: r for r in result.sub_runs}
    assert (by_agent["A"]["reproduced"], by_agent["B"]["reproduced"]) == (False, False)
    b_events = store.read_run(by_agent["B"]["new_run_id"])
    assert [e.kind for e in b_events] == ["run.started", "run.ended"]
    assert b_events[-1].payload["status"] == "cancelled"
    assert b_events[-1].payload["verdict"]["reproduced"] is False
    store.close()
