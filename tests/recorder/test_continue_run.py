"""A run continued after a restart (``Recorder.continue_run``) carries on with what it recorded
before: its token usage and the links from its model calls to the tool calls they requested."""

from __future__ import annotations

import pytest

import sealbox
from sealbox import verify_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

RESP = {"object": "chat.completion", "model": "gpt-4o", "choices": [],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}


def _parallel(*ids: str) -> dict:
    return {"object": "chat.completion", "model": "gpt-4o", "usage": {"prompt_tokens": 7, "completion_tokens": 3},
            "choices": [{"message": {"tool_calls": [
                {"id": i, "type": "function", "function": {"name": "read_query", "arguments": "{}"}} for i in ids]}}]}


@pytest.fixture
def path(tmp_path):
    return tmp_path / "store"


def test_usage_after_continue_run_counts_the_calls_before_the_restart(path):
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="crashy").start()
    run.model_call({"model": "gpt-4o"}, RESP)
    run.model_call({"model": "gpt-4o"}, RESP, usage={"input_tokens": 5, "output_tokens": 1})
    store.close()  # the process "dies" here

    store = sealbox.open_store(path)
    again = Recorder(store, policy=ALLOW_ALL).continue_run(run.run_id)
    assert again.usage == {"input_tokens": 1005, "output_tokens": 501, "cost": 0.0}
    with again:
        again.model_call({"model": "gpt-4o"}, RESP)
    ended = store.read_run(run.run_id)[-1]
    assert ended.kind == "run.ended"
    assert ended.payload["usage"] == {"input_tokens": 2005, "output_tokens": 1001, "cost": 0}
    assert verify_store(store).ok
    store.close()


def test_usage_after_continue_run_of_a_run_without_model_calls_is_zero(path):
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="quiet").start()
    run.note("nothing yet")
    again = Recorder(store, policy=ALLOW_ALL).continue_run(run.run_id)
    assert again.usage == {"input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    store.close()


def test_a_parallel_tool_call_after_continue_run_is_still_the_model_calls_sibling(path):
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="par").start()
    mc = run.model_call({}, _parallel("call_A", "call_B", "call_C"))
    assert mc.step == "2"
    run.call_tool("db", "read_query", {}, lambda: "a", call_id="call_A")
    store.close()

    store = sealbox.open_store(path)
    again = Recorder(store, policy=ALLOW_ALL).continue_run(run.run_id)
    assert again.step_of_call("call_A") is None  # carried out before: its link was taken
    assert again.step_of_call("call_B") == "2.2" and again.step_of_call("call_C") == "2.3"
    with again:
        again.call_tool("db", "read_query", {}, lambda: "c", call_id="call_C")
        again.call_tool("db", "read_query", {}, lambda: "b", call_id="call_B")
        again.call_tool("db", "read_query", {}, lambda: "x", call_id="call_X")  # asked by no model call
    steps = {e.payload["call_id"]: e.step for e in store.read_run(run.run_id) if e.kind == "tool.call"}
    assert steps == {"call_A": "2.1", "call_B": "2.2", "call_C": "2.3", "call_X": "3"}
    assert verify_store(store).ok
    store.close()


def test_links_after_continue_run_follow_the_latest_model_call_asking_for_an_id(path):
    store = sealbox.init_store(path)
    run = Recorder(store, policy=ALLOW_ALL).run(agent="repeat").start()
    run.model_call({}, _parallel("call_0", "call_1"))   # step 2
    run.call_tool("db", "read_query", {}, lambda: 1, call_id="call_0")  # 2.1
    run.model_call({}, _parallel("call_2", "call_1"))   # step 3: call_1 asked again, now at 3.2
    live = dict(run._links)
    store.close()

    store = sealbox.open_store(path)
    again = Recorder(store, policy=ALLOW_ALL).continue_run(run.run_id)
    assert again._links == live == {"call_1": "3.2", "call_2": "3.1"}
    store.close()
