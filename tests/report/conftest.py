"""A recorded run with everything a report shows: model call, tool calls, an approval by a shared
account, state, a child run, a snapshot — and hostile strings in arguments, results and state."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

import sealbox
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.snapshot import Snapshot

HOSTILE = ('</code></pre><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
           ' | ``` ~~~ **bold** [link](javascript:alert(1)) & &amp; <b>')
DELETE = "DELETE FROM customers WHERE email LIKE '%test%'"
CLIENT = {"hostname": "oncall-laptop", "os_user": "pat", "user_agent": "test/1"}

POLICY = textwrap.dedent("""
    version: 1
    name: prod-db
    rules:
      - id: reads-ok
        match: {tool: read_query}
        effect: allow
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
""")


@dataclass
class Recorded:
    store: object
    run_id: str
    child_id: str
    approval_id: str
    key_id: str


def _read_query(query: str) -> dict:
    return {"rows": [[12]], "note": HOSTILE}


def _write_query(query: str) -> dict:
    return {"affected_rows": 17}


@pytest.fixture
def recorded(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    new = add_identity(store, "ops-oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "ops-oncall.key",
                       admin_key=admin_key(store, tmp_path))
    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend")
    snap = Snapshot(model={"provider": "openai", "name": "gpt-test"}, system_prompt="Be careful. " + HOSTILE)
    run = rec.run(agent="cleanup-bot", snapshot=snap, labels={"env": "prod"})
    with pytest.raises(ApprovalPending) as pending:
        with run:
            run.model_call({"messages": [{"role": "user", "content": "Clean up the test accounts " + HOSTILE}]},
                           {"tool_calls": [{"id": "c1", "name": "read_query"}]},
                           usage={"input_tokens": 100, "output_tokens": 10}, latency=0.25, provider="openai",
                           model="gpt-test")
            run.call_tool("db", "read_query", {"query": "SELECT count(*) FROM customers"}, _read_query)
            run.save_state({"seen": 12, "note": HOSTILE, "long": ["line"] * 40}, label="after read")
            with rec.run(agent="sub-checker", parent_run_id=run.run_id) as child:
                child.note("checked the list")
            run.call_tool("db", "write_query", {"query": DELETE}, _write_query)
    answer(store, pending.value.approval_id, "approve", "ticket OPS-1 " + HOSTILE, tmp_path / "ops-oncall.key",
           client=CLIENT)
    with rec.resume(run.run_id, tools={("db", "write_query"): _write_query}) as resumed:
        resumed.note("cleanup done")
    yield Recorded(store, run.run_id, child.run_id, pending.value.approval_id, new.identity.key_id)
    store.close()
