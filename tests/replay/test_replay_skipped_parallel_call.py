"""A parallel call the replay never made is the first divergence, in step order: a replay that skips
call 2.2 of the three a model call requested and then diverges at the next model call reports 2.2 as
missing, not 'diverged at step 3 (mismatch); 3 step(s) matched before it'."""

from __future__ import annotations

import json

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.replay import Replayer

TURN = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
    {"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": json.dumps({"i": i})}}
    for i in (1, 2, 3)]}}]}
DONE = {"choices": [{"message": {"role": "assistant", "content": "done"}}]}


def agent_skipping(*skipped):
    def agent(run):
        messages = [{"role": "user", "content": "hi"}]
        run.complete({"model": "m", "messages": messages}, lambda r: TURN, provider="openai", model="m")
        for i in (1, 2, 3):
            if i not in skipped:
                out = run.call_tool("local", "t", {"i": i}, lambda i: {"r": i}, call_id=f"c{i}")
                messages = messages + [{"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps(out)}]
        run.complete({"model": "m", "messages": messages}, lambda r: DONE, provider="openai", model="m")
    return agent


def test_a_skipped_parallel_call_is_the_first_divergence(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    try:
        with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            agent_skipping()(run)
        result = Replayer(store).replay(run.run_id, agent_skipping(2))
        d = result.divergence
        assert (d.kind, d.step, d.recorded.kind, d.recorded.name, d.attempted) == (
            "missing", "2.2", "tool.call", "local/t", None)
        assert d.message == ("the replay made step 3 (model.call m) without having made step 2.2 (tool.call "
                             "local/t) of the record")
        assert result.head() == "NOT reproduced: diverged at step 2.2 (missing); 2 step(s) matched before it and 1 after it"
        assert store.read_run(result.new_run_id)[-1].payload["verdict"]["divergence"]["step"] == "2.2"
        # the last call skipped, the model call after it matching: missing at the end, as before
        assert Replayer(store).replay(run.run_id, agent_skipping(3)).divergence.step == "2.3"
        assert Replayer(store).replay(run.run_id, agent_skipping()).reproduced
    finally:
        store.close()
