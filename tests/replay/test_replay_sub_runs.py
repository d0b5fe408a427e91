"""Sub-agent runs inside a replay are served from the record (docs/replay.md, "Sub-agent runs").

A run started while the replayed run is current (or naming it as parent, from any thread) used to run
live — its tools executed for real, the e-mail was sent again — and later stopped the replay as
``unreplayable``. It is now a replay of the recorded run's sub-agent run of the same agent: its tool
calls get their recorded results (nothing runs), every step is compared, and a divergence inside it
stops the whole replay, naming the sub-agent run.
"""

from __future__ import annotations

import threading

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer
from sealbox.snapshot import Snapshot


def _record(store, agent, **kwargs):
    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss", **kwargs) as run:
        agent(run)
        return run.run_id


def _runs(store):
    return {r["run_id"]: r for r in store.query_runs()}


def _mailer_agent(sent, to="ceo@example.com"):
    def send(to):
        sent.append(to)
        return f"sent to {to}"

    def agent(run):
        run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
        with run.recorder.run(agent="mailer", principal="agent:mailer") as sub:
            got = sub.call_tool("mail", "send", {"to": to}, send)
            sub.note(got)
        run.note("done")
    return agent


def test_a_sub_agent_run_is_served_from_the_record_and_nothing_runs_for_real(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    sent: list[str] = []
    run_id = _record(store, _mailer_agent(sent))
    assert sent == ["ceo@example.com"]
    before = _runs(store)
    (child,) = [r for r in before.values() if r["parent_run_id"] == run_id]

    result = Replayer(store).replay(run_id, _mailer_agent(sent))

    assert sent == ["ceo@example.com"]  # the e-mail was not sent a second time
    assert result.reproduced, result.divergence
    assert result.head() == "reproduced: 2 step(s) matched, and 2 in 1 sub-agent run(s)"
    new = {k: v for k, v in _runs(store).items() if k not in before}
    assert set(new) == {result.new_run_id, result.sub_runs[0]["new_run_id"]}
    sub_run = new[result.sub_runs[0]["new_run_id"]]
    assert (sub_run["agent"], sub_run["principal"], sub_run["parent_run_id"], sub_run["replay_of"]) == \
        ("mailer", "agent:mailer", result.new_run_id, child["run_id"])
    assert result.sub_runs == ({"replay_of": child["run_id"], "parent": run_id, "agent": "mailer",
                                "new_run_id": sub_run["run_id"], "steps_compared": 2, "reproduced": True},)
    events = store.read_run(sub_run["run_id"])
    assert [e.kind for e in events] == ["run.started", "tool.call", "policy.decision", "tool.result", "note",
                                        "run.ended"]
    assert events[3].payload["result"] == "sent to ceo@example.com"
    assert events[-1].payload["status"] == "ok"
    assert events[-1].payload["verdict"] == {"reproduced": True, "replay_of": child["run_id"], "steps_compared": 2,
                                             "divergence": None, "config_drift": []}
    top = store.read_run(result.new_run_id)[-1].payload["verdict"]
    assert top["sub_runs"] == [{"replay_of": child["run_id"], "new_run_id": sub_run["run_id"], "reproduced": True,
                                "steps_compared": 2}]
    assert sealbox.verify_store(store).ok
    store.close()


def test_a_divergence_inside_the_sub_agent_run_stops_the_whole_replay_and_names_it(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    sent: list[str] = []
    run_id = _record(store, _mailer_agent(sent))
    (child,) = [r for r in _runs(store).values() if r["parent_run_id"] == run_id]
    after: list[str] = []

    def changed(run):
        _mailer_agent(sent, to="everyone@example.com")(run)
        after.append("went on")

    result = Replayer(store).replay(run_id, changed)

    assert sent == ["ceo@example.com"] and after == []
    assert not result.reproduced
    d = result.divergence
    assert (d.kind, d.step, d.sub_run) == ("mismatch", "2", (child["run_id"],))
    assert d.message == (f"in sub-agent run {child['run_id']} (agent 'mailer'): step 2: the replay made "
                         "tool.call mail/send with different content (1 field(s) differ)")
    assert [(x.path, x.a, x.b) for x in d.diff] == [("to", "ceo@example.com", "everyone@example.com")]
    assert result.head() == (f"NOT reproduced: diverged at step 2 of sub-agent run {child['run_id']} (mismatch); "
                             "1 step(s) of the run matched")
    (sub,) = result.sub_runs
    assert (sub["reproduced"], sub["steps_compared"]) == (False, 0)
    sub_end = store.read_run(sub["new_run_id"])[-1].payload
    assert (sub_end["status"], sub_end["verdict"]["reproduced"], sub_end["verdict"]["divergence"]["kind"]) == \
        ("cancelled", False, "mismatch")
    top_end = store.read_run(result.new_run_id)[-1].payload
    assert top_end["status"] == "cancelled"
    assert top_end["verdict"]["divergence"]["sub_run"] == [child["run_id"]]
    assert sealbox.verify_store(store).ok
    store.close()


def test_a_sub_agent_run_the_record_does_not_have_stops_before_it_is_written(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    sent: list[str] = []

    def alone(run):
        run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
        run.note("done")

    run_id = _record(store, alone)
    before = _runs(store)

    result = Replayer(store).replay(run_id, _mailer_agent(sent))

    assert sent == []
    assert (result.divergence.kind, result.divergence.step) == ("extra", "3")
    assert result.divergence.message == (
        "at step 3 the agent started a sub-agent run (agent 'mailer') that the record does not have (the recorded "
        "run has 0 of that agent, all served already); replay stopped before anything in that run could execute")
    assert set(_runs(store)) - set(before) == {result.new_run_id}  # no sub-agent run was written
    store.close()


def test_a_recorded_sub_agent_run_the_replay_never_starts_is_missing(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    sent: list[str] = []
    run_id = _record(store, _mailer_agent(sent))
    (child,) = [r for r in _runs(store).values() if r["parent_run_id"] == run_id]

    def forgot(run):
        run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
        run.note("done")

    result = Replayer(store).replay(run_id, forgot)

    assert not result.reproduced
    assert (result.divergence.kind, result.divergence.step) == ("missing", None)
    assert result.divergence.message == (f"the replay ended without starting the recorded sub-agent run "
                                         f"{child['run_id']} (agent 'mailer')")
    store.close()


def test_a_sub_agent_run_that_ends_differently_is_an_outcome_divergence(tmp_path):
    store = sealbox.init_store(tmp_path / "s")

    def agent_with(fail):
        def agent(run):
            try:
                with run.recorder.run(agent="worker") as sub:
                    sub.note("working")
                    if fail:
                        raise ValueError("disk full")
            except ValueError:
                pass
            run.note("done")
        return agent

    run_id = _record(store, agent_with(False))
    (child,) = [r for r in _runs(store).values() if r["parent_run_id"] == run_id]

    result = Replayer(store).replay(run_id, agent_with(True))

    assert not result.reproduced
    d = result.divergence
    assert (d.kind, d.sub_run) == ("outcome", (child["run_id"],))
    assert d.message == (f"in sub-agent run {child['run_id']} (agent 'worker'): every step matched, but the "
                         "recorded run ended ok and the replay ended error: ValueError: disk full")
    sub_end = store.read_run(result.sub_runs[0]["new_run_id"])[-1].payload
    assert sub_end["status"] == "error" and sub_end["error"]["message"] == "disk full"
    store.close()


def test_sub_agent_runs_in_threads_naming_the_replay_as_parent_and_nested_ones_are_served(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    ran: list[str] = []

    def agent(run):
        def worker(name):
            with run.recorder.run(agent=name, parent_run_id=run.run_id) as sub:
                sub.call_tool("t", name, {}, lambda: ran.append(name) or name)
                with run.recorder.run(agent=f"{name}-helper") as inner:  # nested: its parent is `sub`
                    inner.call_tool("t", "help", {"who": name}, lambda who: ran.append(f"help {who}"))

        threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.note("joined")

    run_id = _record(store, agent)
    assert sorted(ran) == ["a", "b", "help a", "help b"]

    result = Replayer(store).replay(run_id, agent)

    assert sorted(ran) == ["a", "b", "help a", "help b"]  # nothing ran again
    assert result.reproduced, result.divergence
    assert sorted((r["agent"], r["steps_compared"], r["reproduced"]) for r in result.sub_runs) == [
        ("a", 1, True), ("a-helper", 1, True), ("b", 1, True), ("b-helper", 1, True)]
    runs = _runs(store)
    for r in result.sub_runs:
        mine = runs[r["new_run_id"]]
        assert runs[mine["replay_of"]]["agent"] == mine["agent"]
        if mine["agent"].endswith("-helper"):  # nested under the replay of its parent's recorded run
            parent_replay = runs[mine["parent_run_id"]]
            assert parent_replay["replay_of"] == runs[r["replay_of"]]["parent_run_id"]
    assert sealbox.verify_store(store).ok
    store.close()


def test_a_sub_agent_run_with_another_snapshot_is_config_drift_unless_allowed(tmp_path):
    store = sealbox.init_store(tmp_path / "s")

    def agent_with(model):
        def agent(run):
            snap = Snapshot(model={"provider": "openai", "name": model})
            with run.recorder.run(agent="worker", snapshot=snap) as sub:
                sub.note("working")
        return agent

    run_id = _record(store, agent_with("gpt-4o"))
    before = _runs(store)

    result = Replayer(store).replay(run_id, agent_with("gpt-5"))

    assert not result.reproduced
    assert result.divergence.kind == "config_drift"
    assert "differs from the recorded snapshot in 1 field(s): model.name" in result.divergence.message
    assert set(_runs(store)) - set(before) == {result.new_run_id}  # the sub-agent run did not start

    allowed = Replayer(store).replay(run_id, agent_with("gpt-5"), allow_config_drift=True)
    assert allowed.reproduced, allowed.divergence
    store.close()


@pytest.mark.parametrize("principal", ["agent:other"])
def test_a_sub_agent_run_as_another_principal_is_a_mismatch(tmp_path, principal):
    store = sealbox.init_store(tmp_path / "s")

    def agent_as(who):
        def agent(run):
            with run.recorder.run(agent="worker", principal=who) as sub:
                sub.note("working")
        return agent

    run_id = _record(store, agent_as("agent:worker"))
    result = Replayer(store).replay(run_id, agent_as(principal))
    assert result.divergence.kind == "mismatch"
    assert "as principal 'agent:other'; the record's sub-agent run" in result.divergence.message
    store.close()


def test_cli_replay_prints_each_sub_agent_run(tmp_path, monkeypatch):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from sealbox.cli.main import cli

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.chdir(Path(__file__).parent)  # so that --agent replay_agents:... imports as from a project
    import replay_agents as ra
    store = sealbox.init_store(tmp_path / "s")
    run_id = _record(store, ra.delegating)
    (child,) = [r for r in _runs(store).values() if r["parent_run_id"] == run_id]
    store.close()

    out = CliRunner().invoke(cli, ["replay", "-s", str(tmp_path / "s"), run_id, "--agent",
                                   "replay_agents:delegating"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith("reproduced: 1 step(s) matched, and 1 in 1 sub-agent run(s); replay run ")
    assert lines[1].startswith(f"  sub-agent run mailer (recorded {child['run_id']}): reproduced, 1 step(s) "
                               "matched; replay run ")

    out = CliRunner().invoke(cli, ["replay", "-s", str(tmp_path / "s"), run_id, "--agent",
                                   "replay_agents:delegating_changed", "--json"], catch_exceptions=False)
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert (doc["divergence"]["kind"], doc["divergence"]["step"], doc["divergence"]["sub_run"]) == \
        ("mismatch", "2", [child["run_id"]])
    assert doc["divergence"]["diff"] == [{"path": "to", "change": "changed", "a": "ceo@example.com",
                                          "b": "everyone@example.com"}]
    assert [(s["agent"], s["reproduced"]) for s in doc["sub_runs"]] == [("mailer", False)]


def test_sub_agent_runs_of_one_agent_started_at_once_are_told_apart_by_their_labels(tmp_path):
    """Two sub-agent runs of the same agent started in threads start in either order; matched by start order
    alone, a replay whose threads started the other way round diverged. Their labels tell them apart."""
    store = sealbox.init_store(tmp_path / "s")
    ran: list[str] = []

    def agent_with(order):
        def agent(run):
            def worker(city, wait):
                wait.wait(5)
                with run.recorder.run(agent="weather", parent_run_id=run.run_id, labels={"city": city}) as sub:
                    sub.call_tool("w", "forecast", {"city": city}, lambda city: ran.append(city) or f"sun in {city}")
            gates = {c: threading.Event() for c in order}
            threads = [threading.Thread(target=worker, args=(c, gates[c])) for c in order]
            for t in threads:
                t.start()
            for c in order:  # start them in this order, one after the other
                gates[c].set()
                for _ in range(200):
                    if any(r.get("labels") == {"city": c} for r in store.query_runs(agent="weather")
                           if r["run_id"] not in before_ids):
                        break
                    threading.Event().wait(0.01)
            for t in threads:
                t.join()
        return agent

    before_ids: set = set()
    run_id = _record(store, agent_with(["Paris", "Oslo"]))
    assert ran == ["Paris", "Oslo"]
    before_ids = {r["run_id"] for r in store.query_runs()}

    result = Replayer(store).replay(run_id, agent_with(["Oslo", "Paris"]))  # the other order

    assert ran == ["Paris", "Oslo"]
    assert result.reproduced, result.divergence
    runs = _runs(store)
    for sub in result.sub_runs:
        assert runs[sub["new_run_id"]]["labels"] == runs[sub["replay_of"]]["labels"]
    store.close()


def test_a_sub_agent_run_opened_inside_a_tool_function_is_served_from_the_record(tmp_path):
    """``run.call_tool``'s function opens the sub-agent run: the tool was answered from the record without
    running, so the recorded sub-agent run was reported ``missing``. Its function runs now (it held a
    sub-agent run in the record), the sub-agent's model call and tool served from the record."""
    store = sealbox.init_store(tmp_path / "s")
    sent: list = []

    def agent(run, ask="hi"):
        def delegate(task):
            with run.recorder.run(agent="mailer") as child:
                answer = child.complete({"messages": [task + ask]}, lambda req: {"text": "sent"})
                child.call_tool("mail", "send", {"to": "a"}, lambda to: sent.append(to) or "ok")
            return answer["text"]
        return run.call_tool("local", "delegate", {"task": "mail "}, delegate)

    with Recorder(store, policy=ALLOW_ALL).run(agent="top") as run:
        assert agent(run) == "sent"
    assert sent == ["a"]
    (child,) = store.get_run(run.run_id)["children"]
    result = Replayer(store).replay(run.run_id, agent)
    assert result.head() == "reproduced: 1 step(s) matched, and 2 in 1 sub-agent run(s)"
    assert sent == ["a"]  # the sub-agent's tool was served, not run
    changed = Replayer(store).replay(run.run_id, lambda r: agent(r, "there"))
    assert (changed.divergence.kind, changed.divergence.step, changed.divergence.sub_run) == \
        ("mismatch", "2", (child["run_id"],))
    store.close()
