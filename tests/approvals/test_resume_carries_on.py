"""A run resumed after an approval carries on with its earlier token usage and model-call links."""

from __future__ import annotations

from approval_helpers import policy

from sealbox import verify_store
from sealbox.approvals import ApprovalPending, answer
from sealbox.recorder import Recorder

RESP = {"object": "chat.completion", "model": "gpt-4o", "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        "choices": [{"message": {"tool_calls": [
            {"id": "call_W", "type": "function", "function": {"name": "write_query", "arguments": '{"sql": "DELETE"}'}},
            {"id": "call_R", "type": "function", "function": {"name": "read_query", "arguments": '{"sql": "SELECT"}'}},
        ]}}]}


def test_resume_keeps_usage_and_the_parallel_calls_sibling_step(store, keys):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    rec.tools[("db", "write_query")] = lambda sql: "deleted"
    try:
        with rec.run(agent="par") as run:
            assert run.model_call({}, RESP).step == "2"
            run.call_tool("db", "write_query", {"sql": "DELETE"}, rec.tools[("db", "write_query")], call_id="call_W")
    except ApprovalPending as pending:
        aid = pending.approval_id
    answer(store, aid, "approve", "ok", keys["alice"])

    later = Recorder(store, policy=policy(), approvals="suspend")  # another process
    with later.resume(run.run_id, tools={("db", "write_query"): lambda sql: "deleted"}) as again:
        assert [c.outcome for c in again.resumed_calls] == ["approved"]
        assert again.usage == {"input_tokens": 100, "output_tokens": 10, "cost": 0.0}
        again.call_tool("db", "read_query", {"sql": "SELECT"}, lambda sql: [[1]], call_id="call_R")
        again.model_call({}, {"object": "chat.completion", "model": "gpt-4o", "choices": [],
                              "usage": {"prompt_tokens": 50, "completion_tokens": 5}})
    events = store.read_run(run.run_id)
    steps = {e.payload["call_id"]: e.step for e in events if e.kind == "tool.call"}
    assert steps == {"call_W": "2.1", "call_R": "2.2"}
    assert events[-1].kind == "run.ended"
    assert events[-1].payload["usage"] == {"input_tokens": 150, "output_tokens": 15, "cost": 0}
    assert verify_store(store).ok
