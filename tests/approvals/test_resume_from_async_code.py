"""``Recorder.resume`` called from async code (an approval webhook in an async web server) with an
``async def`` tool.

The approved call's coroutine was run with ``asyncio.run``, which refuses to start inside a running event
loop: ``run.resumed`` had already spent the approval, the tool never ran (its coroutine was dropped,
"never awaited"), the call was recorded as run with the error ``asyncio.run() cannot be called from a
running event loop``, and leaving the block ended the run. The coroutine now runs to its end on an event
loop of its own in a helper thread while ``resume`` waits (``resume`` blocks, as it always did)."""

from __future__ import annotations

import asyncio

from approval_helpers import kinds, policy

from sealbox.approvals import ApprovalPending, answer
from sealbox.recorder import Recorder


def test_an_async_tool_resumed_from_a_running_event_loop_runs_and_its_result_is_recorded(store, keys):
    try:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: "unused")
    except ApprovalPending as pending:
        aid, run_id = pending.approval_id, pending.run_id
    answer(store, aid, "approve", "ok", keys["alice"])
    ran = []

    async def write_query(sql):
        await asyncio.sleep(0)
        ran.append(sql)
        return f"wrote {sql}"

    async def webhook():
        rec = Recorder(store, policy=policy())
        with rec.resume(run_id, tools={("db", "write_query"): write_query}) as again:
            return [(c.outcome, c.ran, c.result, c.error) for c in again.resumed_calls]

    assert asyncio.run(webhook()) == [("approved", True, "wrote x", None)]
    assert ran == ["x"]
    events = store.read_run(run_id)
    assert [e.kind for e in events][-3:] == ["run.resumed", "tool.result", "run.ended"]
    result = events[-2].payload
    assert (result["ok"], store.resolve(result["result"])) == (True, "wrote x")
    assert kinds(store, run_id).count("tool.result") == 1
