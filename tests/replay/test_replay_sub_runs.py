"""A sub-agent's run started inside a replay: it used to run live (its tools executed for real) and the
replay said "reproduced"; now the replay stops before that run is written."""

from __future__ import annotations

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer


def test_a_sub_agent_run_inside_a_replay_stops_it_before_anything_runs_for_real(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    sent: list[str] = []

    def send(to):
        sent.append(to)
        return "sent"

    def agent(run):
        run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
        with run.recorder.run(agent="mailer", principal="agent:mailer") as sub:
            sub.call_tool("mail", "send", {"to": "ceo@example.com"}, send)
        run.note("done")

    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss") as run:
        run_id = run.run_id
        agent(run)
    assert sent == ["ceo@example.com"]
    runs_before = {r["run_id"] for r in store.query_runs()}

    result = Replayer(store).replay(run_id, agent)

    assert sent == ["ceo@example.com"]  # the e-mail was not sent a second time
    assert not result.reproduced
    assert result.head() == "NOT reproduced: diverged at step 3 (unreplayable); 1 step(s) matched before it"
    assert (result.divergence.kind, result.divergence.step) == ("unreplayable", "3")
    assert result.divergence.message == (
        "step 3: the agent started a run of its own (agent 'mailer') inside the replay; sub-agent runs are not "
        "served from the record, so replay stopped before anything in that run could execute for real")
    new_runs = {r["run_id"] for r in store.query_runs()} - runs_before
    assert new_runs == {result.new_run_id}  # no sub-agent run was written
    end = store.read_run(result.new_run_id)[-1]
    assert (end.kind, end.payload["status"], end.payload["verdict"]["reproduced"]) == ("run.ended", "cancelled", False)
    assert sealbox.verify_store(store).ok
    store.close()


def test_a_sub_agent_run_started_in_a_thread_naming_the_replay_run_as_parent_stops_it(tmp_path):
    import threading

    store = sealbox.init_store(tmp_path / "s")
    sent: list[str] = []

    def agent(run):
        errors: list[BaseException] = []

        def worker():
            try:
                with run.recorder.run(agent="mailer", principal="agent:mailer", parent_run_id=run.run_id) as sub:
                    sub.call_tool("mail", "send", {"to": "ceo@example.com"}, lambda to: sent.append(to))
            except BaseException as exc:  # noqa: BLE001 - the thread's ReplayStopped, kept for the check below
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        run.note("done")

    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss") as run:
        run_id = run.run_id
        agent(run)
    assert sent == ["ceo@example.com"]

    result = Replayer(store).replay(run_id, agent)

    assert sent == ["ceo@example.com"]
    assert result.head() == "NOT reproduced: diverged at step 2 (unreplayable); 0 step(s) matched before it"
    assert result.divergence.message.startswith("step 2: the agent started a run of its own (agent 'mailer')")
    assert [r["run_id"] for r in store.query_runs(agent="mailer")] != [] and len(store.query_runs(agent="mailer")) == 1
    store.close()
