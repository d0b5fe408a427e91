"""Blocking mode: the agent waits in-process; an approver answers from another thread."""

from __future__ import annotations

import threading
import time

import pytest
from approval_helpers import kinds, policy

from sealbox import verify_store
from sealbox.approvals import ApprovalPending, answer, list_approvals
from sealbox.recorder import Recorder, ToolDenied


def approver(store, keys, name, decision, count=1, reason="reviewed"):
    """Answer the first ``count`` pending requests as they appear (in request order)."""
    def work():
        done: set[str] = set()
        deadline = time.monotonic() + 20
        while len(done) < count and time.monotonic() < deadline:
            for s in list_approvals(store, pending=True)[::-1]:
                if s.approval_id not in done and len(done) < count:
                    answer(store, s.approval_id, decision, reason, keys[name])
                    done.add(s.approval_id)
            time.sleep(0.02)
    t = threading.Thread(target=work)
    t.start()
    return t


def test_approved_the_tool_runs_once_after_run_resumed(store, keys):
    ran = []
    rec = Recorder(store, policy=policy(), approvals="block", approval_poll=0.02)
    t = approver(store, keys, "alice", "approve")
    with rec.run(agent="bot") as run:
        out = run.call_tool("db", "write_query", {"sql": "UPDATE t"}, lambda sql: ran.append(sql) or "1 row")
    t.join()
    assert (out, ran) == ("1 row", ["UPDATE t"])
    assert kinds(store, run.run_id) == ["run.started", "tool.call", "policy.decision", "approval.requested",
                                        "run.suspended", "approval.answered", "run.resumed", "tool.result", "run.ended"]
    resumed = [e.payload for e in store.read_run(run.run_id) if e.kind == "run.resumed"][0]
    aid = resumed["approval_ids"][0]
    assert resumed["outcomes"] == {aid: "approved"} and resumed["waited_us"] > 0
    assert verify_store(store).ok


def test_denied_the_tool_does_not_run_and_the_error_names_the_approver(store, keys):
    rec = Recorder(store, policy=policy(), approvals="block", approval_poll=0.02)
    t = approver(store, keys, "bob", "deny", reason="no writes today")
    with pytest.raises(ToolDenied) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "UPDATE t"}, lambda sql: pytest.fail("ran"))
    t.join()
    assert info.value.decision.reason_code == "approval_denied"
    assert "denied by bob: no writes today" in str(info.value)
    assert kinds(store, run.run_id)[-3:] == ["approval.answered", "run.resumed", "run.ended"]


def test_a_timeout_raises_approval_pending_and_the_run_stays_suspended(store, keys):
    rec = Recorder(store, policy=policy(), approvals="block", approval_timeout=0.2, approval_poll=0.02)
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: pytest.fail("ran"))
    assert info.value.run_id == run.run_id
    assert kinds(store, run.run_id)[-1] == "run.suspended"


def test_an_expiry_noticed_by_the_waiting_agent_denies_and_is_recorded(store, keys):
    rec = Recorder(store, policy=policy(), approvals="block", approval_poll=0.05)
    with pytest.raises(ToolDenied) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "quick", {"n": 1}, lambda n: pytest.fail("ran"))
    assert info.value.decision.reason_code == "approval_expired"
    assert kinds(store, run.run_id)[-3:] == ["approval.expired", "run.resumed", "run.ended"]


def test_parallel_approvals_in_one_run_have_distinct_ids_and_resolve_independently(store, keys):
    rec = Recorder(store, policy=policy(), approvals="block", approval_poll=0.02)
    results: dict[str, object] = {}
    ran = []
    with rec.run(agent="bot") as run:
        def call(name):
            try:
                results[name] = run.call_tool("db", "write_query", {"sql": name}, lambda sql: ran.append(sql) or sql,
                                              call_id=f"c-{name}")
            except ToolDenied as exc:
                results[name] = exc.decision.reason_code
        threads = [threading.Thread(target=call, args=(n,)) for n in ("a", "b")]
        [t.start() for t in threads]
        deadline = time.monotonic() + 10
        while len(list_approvals(store, pending=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        pending = {s.call_id: s.approval_id for s in list_approvals(store, pending=True)}
        assert len(set(pending.values())) == 2
        answer(store, pending["c-b"], "deny", "not b", keys["alice"])
        answer(store, pending["c-a"], "approve", "a is fine", keys["bob"])
        [t.join() for t in threads]
    assert results == {"a": "a", "b": "approval_denied"} and ran == ["a"]
    resumed = [e.payload["outcomes"] for e in store.read_run(run.run_id) if e.kind == "run.resumed"]
    assert sorted(resumed, key=str) == sorted([{pending["c-a"]: "approved"}, {pending["c-b"]: "denied"}], key=str)
    assert verify_store(store).ok


def test_calls_listing_names_the_approver_and_the_flags(store, keys, tmp_path):
    from sealbox.identities import add_identity
    from identity_testkit import admin_key

    shared = add_identity(store, "ops-oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "oncall.key",
                          admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=policy(), approvals="block", approval_poll=0.02)
    t = approver(store, {"ops-oncall": shared}, "ops-oncall", "approve")
    with rec.run(agent="bot") as run:
        run.call_tool("db", "write_query", {"sql": "DELETE FROM t"}, lambda sql: "done", call_id="w1")
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "1", call_id="r1")
    t.join()
    rows = {r["call_id"]: r for r in store.query_calls(run_id=run.run_id)}
    assert [(a["identity"], a["decision"]) for a in rows["w1"]["approvers"]] == [("ops-oncall", "approve")]
    assert rows["w1"]["flags"] == ["shared_identity"] and rows["w1"]["outcome"] == "ok"
    assert (rows["r1"]["approvers"], rows["r1"]["flags"]) == ([], [])


@pytest.mark.parametrize("kwargs, message", [
    ({"approval_timeout": "5"}, "approval_timeout must be a number of seconds, 0 or more, or None, not '5'"),
    ({"approval_timeout": -1}, "approval_timeout must be a number of seconds, 0 or more, or None, not -1"),
    ({"approval_timeout": float("nan")}, "approval_timeout must be a number of seconds, 0 or more, or None, not nan"),
    ({"approval_poll": 0}, "approval_poll must be a number of seconds above 0, not 0"),
    ({"approval_poll": -1}, "approval_poll must be a number of seconds above 0, not -1"),
    ({"approval_poll": None}, "approval_poll must be a number of seconds above 0, not None"),
    ({"breaker": "x"}, "breaker must be a sealbox CircuitBreaker, got str"),
])
def test_bad_wait_settings_are_refused_before_a_request_is_recorded(store, kwargs, message):
    """`approval_timeout="5"` failed with TypeError once a call had been recorded and held (time.monotonic()
    + "5"), `approval_poll=-1` with ValueError from time.sleep mid-wait, `approval_poll=0` polled the store
    in a busy loop, and `breaker="x"` raised AttributeError: ConfigError at construction instead."""
    from sealbox.errors import ConfigError

    before = store.size()
    with pytest.raises(ConfigError) as info:
        Recorder(store, policy=policy(), approvals="block", **kwargs)
    assert str(info.value) == message
    assert store.size() == before
