"""A small sample run written straight to the ledger (used by ``sealbox demo``).

It follows the order of a tool call in DESIGN.md: ``tool.call`` and its
``policy.decision`` committed together before the tool runs, then ``tool.result``.
"""

from __future__ import annotations

import time

from sealbox.canonical import fingerprint
from sealbox.events import EventDraft
from sealbox.store.base import new_run_id

SAMPLE_POLICY = {"name": "demo", "rules": [{"id": "reads-ok", "match": {"tool": "read_*"}, "effect": "allow"}]}


def record_sample_run(store) -> str:
    """Record a run with one model call, two tool calls and a saved state; return its run id."""
    run_id = new_run_id()
    agent = "agent:support-bot"
    policy_fp = fingerprint(SAMPLE_POLICY)

    def ev(kind: str, payload: dict, step: str | None = None) -> EventDraft:
        return EventDraft(kind, payload, run_id=run_id, principal=agent, step=step)

    store.append(ev("run.started", {"agent": "support-bot", "snapshot": None, "parent_run_id": None,
                                     "labels": {"env": "demo"}, "policy": {"fingerprint": policy_fp, "name": "demo"}}))
    store.append(ev("model.call", {
        "provider": "openai", "model": "gpt-4o-2024-08-06", "format": "openai.chat",
        "request": {"messages": [{"role": "user", "content": "How many open orders does customer 42 have?"}]},
        "response": {"tool_calls": [{"id": "call_1", "name": "read_query",
                                     "arguments": "{\"query\": \"SELECT count(*) FROM orders WHERE customer_id = 42\"}"}]},
        "usage": {"input_tokens": 812, "output_tokens": 31}, "latency_us": 640_000, "tool_call_ids": ["call_1"],
    }, step="2"))
    _tool_call(store, ev, "call_1", "2.1", {"query": "SELECT count(*) FROM orders WHERE customer_id = 42"},
               policy_fp, result={"rows": [[3]]})
    store.append(ev("state.saved", {"state": {"customer_id": 42, "open_orders": 3}}))
    store.append(ev("run.ended", {"status": "ok", "usage": {"input_tokens": 812, "output_tokens": 31}}))
    return run_id


def _tool_call(store, ev, call_id: str, step: str, arguments: dict, policy_fp: str, result: dict) -> None:
    store.append([
        ev("tool.call", {"call_id": call_id, "server": "db", "tool": "read_query", "exposed": "db__read_query",
                         "arguments": arguments, "grant": "implicit:agent:support-bot"}, step=step),
        ev("policy.decision", {"call_id": call_id, "effect": "allow", "reason_code": "policy_allow", "rule": "reads-ok",
                               "reason": "rule reads-ok allows read_*", "policy_fingerprint": policy_fp, "eval_us": 4},
           step=step),
    ])
    started = time.perf_counter()
    duration = int((time.perf_counter() - started) * 1e6)
    store.append(ev("tool.result", {"call_id": call_id, "ok": True, "result": result, "duration_us": duration}, step=step))
