"""Two writers of one run (an agent's RunContext and another process's continue_run, each with its
own step counter): a step taken by one is moved past the steps the other wrote, inside the write;
a run written by one context reads nothing more for it (no query per call)."""

from __future__ import annotations

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


def _top_step_queries(store):
    seen: list[str] = []
    store._conn().set_trace_callback(lambda sql: seen.append(sql) if "CAST(step AS INTEGER)" in sql else None)
    return seen


def test_a_run_written_by_one_context_never_reads_its_top_step(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    try:
        run = Recorder(store, ALLOW_ALL).run(agent="a", principal="agent:a")
        run.start()
        seen = _top_step_queries(store)
        for i in range(5):
            assert run.call_tool("s", "t", {"x": i}, lambda x: x) == i
        run.note("n")
        run.save_state({"k": 1})
        run.end()
        assert seen == []
        assert [e.step for e in store.read_run(run.run_id) if e.kind != "policy.decision"] == [
            "1", "2", "2", "3", "3", "4", "4", "5", "5", "6", "6", "7", "8", "9"]
    finally:
        store.close()


def test_two_contexts_of_one_run_in_two_stores_take_steps_past_each_other(tmp_path):
    first = sealbox.init_store(tmp_path / "s")
    second = sealbox.open_store(tmp_path / "s")  # another process's connection
    try:
        run = Recorder(first, ALLOW_ALL).run(agent="a", principal="agent:a")
        run.start()
        other = Recorder(second, ALLOW_ALL).continue_run(run.run_id)  # next step 2, as is run's
        assert run.call_tool("s", "mine", {}, lambda: 1) == 1  # step 2
        seen = _top_step_queries(second)
        assert other.call_tool("s", "theirs", {}, lambda: 2) == 2  # 2 is taken: 3
        other.save_state({"k": 1})  # 4
        assert len(seen) == 2  # the run's highest step and whether 2 is used, once: its own head afterwards
        run.note("after")  # 5
        run.end()  # 6
        steps = [(e.step, e.kind) for e in first.read_run(run.run_id) if e.kind != "policy.decision"]
        assert steps == [("1", "run.started"), ("2", "tool.call"), ("2", "tool.result"), ("3", "tool.call"),
                         ("3", "tool.result"), ("4", "state.saved"), ("5", "note"), ("6", "run.ended")]
    finally:
        second.close()
        first.close()
