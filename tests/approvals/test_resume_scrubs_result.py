"""A call resumed after its approval, in a new process's recorder: its result is scrubbed of the
secrets redacted from its arguments (docs/content-modes.md, "A result that repeats its
arguments' secrets"), as a call recorded in one go is."""

from __future__ import annotations

import pytest
from approval_helpers import policy

from sealbox import verify_store
from sealbox.approvals import ApprovalPending, answer
from sealbox.recorder import Recorder

SECRET = "pg-password-5f1d9c2e"


def test_a_resumed_call_echoing_a_redacted_argument_records_the_marker(store, keys, tmp_path):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run = rec.run(agent="bot", principal="agent:bot")
    arguments = {"sql": "UPDATE users SET active = 0", "password": SECRET}
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.call_tool("db", "write_query", arguments, lambda sql, password: "never")
    answer(store, pending.value.approval_id, "approve", "ok", keys["alice"])
    call = next(e for e in store.read_run(run.run_id) if e.kind == "tool.call")
    marker = call.payload["arguments"]["password"]["$redacted"]

    def tool(sql: str, password: str) -> dict:
        return {"ran": sql, "connected_as": f"app:{password}"}

    later = Recorder(store, policy=policy(), approvals="suspend")  # as another process would
    with later.resume(run.run_id, {("db", "write_query"): tool},
                      arguments={call.payload["call_id"]: arguments}) as resumed:
        (done,) = resumed.resumed_calls
    assert done.value() == {"ran": "UPDATE users SET active = 0", "connected_as": f"app:{SECRET}"}
    result = next(e for e in store.read_run(run.run_id) if e.kind == "tool.result")
    assert store.resolve(result.payload)["result"] == {"connected_as": f"app:⟦redacted:{marker}⟧",
                                                       "ran": "UPDATE users SET active = 0"}
    assert verify_store(store).ok
    blobs = b"".join(c for _, _, c in store.iter_blobs() if c is not None)
    assert SECRET.encode() not in blobs
