"""Which of a replay's commits are fsync'd in a ``full`` store.

A replay's model calls (and the calls served from the record, written with them) are not
fsync'd on their own: nothing outside depends on them, and they become durable with the
replay's next fsync'd commit (its run.ended here). A live run's model calls still are. The
store is real; only its ``append_with`` is wrapped to see the ``sync`` each commit asks for.
"""

from __future__ import annotations

import json

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer
from sealbox.store import init_store, open_store

MODEL = "gpt-4o-2024-08-06"


def reply(turn: int) -> dict:
    calls = [{"id": f"call_{turn}", "type": "function",
              "function": {"name": "lookup", "arguments": json.dumps({"key": f"k{turn}"})}}] if turn < 2 else []
    return {"object": "chat.completion", "model": MODEL, "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None if calls else "done",
                                                 **({"tool_calls": calls} if calls else {})}}]}


def agent(run) -> None:
    for turn in (1, 2):
        answer = run.complete({"model": MODEL, "turn": turn}, lambda _req, turn=turn: reply(turn))
        for tc in answer["choices"][0]["message"].get("tool_calls") or []:
            run.call_tool("kv", "lookup", json.loads(tc["function"]["arguments"]), lambda key: f"v-{key}",
                          call_id=tc["id"])


def commits(store) -> list:
    seen: list = []
    append_with = store.append_with  # what append writes through, and the recorder's own steps (_append_fresh)

    def spy(build, *, sync=True):
        def seeing(reader):
            drafts = list(build(reader))
            seen.append(([d.kind for d in drafts], sync))
            return drafts

        return append_with(seeing, sync=sync)

    store.append_with = spy
    return seen


def test_a_replays_model_calls_are_not_fsynced_alone_but_a_live_runs_are(tmp_path):
    store = init_store(tmp_path / "s", durability="full")
    live = commits(store)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        agent(run)
    assert [sync for kinds, sync in live if kinds[0] == "model.call"] == [True, True]
    assert [sync for kinds, sync in live if kinds[0] == "tool.result"] == [False]
    store.close()

    store = open_store(tmp_path / "s", durability="full")
    replayed = commits(store)
    result = Replayer(store).replay(run.run_id, agent)
    assert result.reproduced
    assert [(kinds, sync) for kinds, sync in replayed if "model.call" in kinds] == [
        (["model.call"], False),
        (["tool.call", "policy.decision", "tool.result", "model.call"], False),  # served call 1.1, written with it
    ]
    assert replayed[-1] == (["run.ended"], True)  # what makes the replay durable
    kinds = [e.kind for e in store.read_run(result.new_run_id)]
    assert kinds == ["run.started", "model.call", "tool.call", "policy.decision", "tool.result", "model.call",
                     "run.ended"]
    store.close()
