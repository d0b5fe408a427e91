"""The Recorder: runs, tool calls recorded and decided before they run, model calls, state."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sealbox
from sealbox import ConfigError, RecordingError, StoreReadOnlyError, open_store, verify_store
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.policy.breaker import CircuitBreaker
from sealbox.recorder import Recorder, ToolDenied
from identity_testkit import signed_grant  # noqa: E402


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def kinds(store, run_id):
    return [(e.step, e.kind) for e in store.read_run(run_id)]


def payloads(store, run_id, kind):
    return [e.payload for e in store.read_run(run_id) if e.kind == kind]


def test_a_policy_is_required_and_allow_all_is_explicit_and_recorded(store):
    with pytest.raises(ConfigError, match="ALLOW_ALL"):
        Recorder(store)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        pass
    started = store.read_run(run.run_id)[0].payload
    assert started["policy"] == {"fingerprint": ALLOW_ALL.fingerprint, "name": "ALLOW_ALL"}
    assert ALLOW_ALL.fingerprint.startswith("sha256:") and len(ALLOW_ALL.fingerprint) == 71
    assert kinds(store, run.run_id) == [("1", "run.started"), ("2", "run.ended")]


def test_a_tool_call_is_recorded_in_order_with_its_result(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot", principal="agent:bot", labels={"env": "test"}) as run:
        out = run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda query: [[1]], call_id="c1")
    assert out == [[1]]
    assert kinds(store, run.run_id) == [("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"),
                                        ("2", "tool.result"), ("3", "run.ended")]
    call = payloads(store, run.run_id, "tool.call")[0]
    assert call == {"call_id": "c1", "server": "db", "tool": "read_query", "exposed": "db.read_query",
                    "arguments": {"query": "SELECT 1"}, "grant": "implicit:agent:bot"}
    decision = payloads(store, run.run_id, "policy.decision")[0]
    assert (decision["effect"], decision["rule"], decision["reason_code"]) == ("allow", "allow-all", "policy_allow")
    assert decision["policy_fingerprint"] == ALLOW_ALL.fingerprint and decision["eval_us"] >= 0
    inputs = store.resolve(decision["inputs"])
    assert inputs["arguments"] == {"query": "SELECT 1"} and inputs["run"]["labels"] == {"env": "test"}
    result = payloads(store, run.run_id, "tool.result")[0]
    assert result["ok"] is True and result["result"] == [[1]] and result["duration_us"] >= 0
    assert payloads(store, run.run_id, "run.ended")[0]["status"] == "ok"


def test_the_call_and_its_decision_are_durable_before_the_tool_runs(store):
    seen = {}

    def tool(query):
        other = open_store(store.path, readonly=True)  # another connection sees the committed record
        seen["kinds"] = [e.kind for e in other.read_run(run.run_id)]
        other.close()
        return "ok"

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("db", "q", {"query": "x"}, tool)
    assert seen["kinds"] == ["run.started", "tool.call", "policy.decision"]


def test_an_explicit_grant_is_recorded(store):
    from sealbox.access import grant_access

    signed_grant(store, "agent:bot", "crm", "lookup", None, grant_id="grant-42")  # an unknown grant is denied
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("crm", "lookup", {"id": 7}, lambda id: id, grant="grant-42")
    assert payloads(store, run.run_id, "tool.call")[0]["grant"] == "grant-42"


def test_a_tool_exception_is_recorded_and_reraised_unchanged(store):
    boom = ValueError("no such table: orders")

    def tool():
        raise boom

    with pytest.raises(ValueError) as caught:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            run.call_tool("db", "q", None, tool)
    assert caught.value is boom
    result = payloads(store, run.run_id, "tool.result")[0]
    assert result["ok"] is False and "result" not in result
    assert result["error"]["type"] == "ValueError" and result["error"]["message"] == "no such table: orders"
    assert "raise boom" in result["error"]["traceback"]
    ended = payloads(store, run.run_id, "run.ended")[0]
    assert ended["status"] == "error" and ended["error"] == {"type": "ValueError", "message": "no such table: orders"}


def test_an_interrupted_run_ends_cancelled(store):
    with pytest.raises(KeyboardInterrupt):
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            raise KeyboardInterrupt
    assert payloads(store, run.run_id, "run.ended")[0]["status"] == "cancelled"


def test_no_record_no_action_on_a_read_only_store(store):
    reader = open_store(store.path, readonly=True)
    ran = []
    rec = Recorder(reader, policy=ALLOW_ALL)
    with pytest.raises(RecordingError) as caught:
        rec.run(agent="bot").start()
    assert isinstance(caught.value.__cause__, StoreReadOnlyError)
    run = rec.run(agent="bot")
    with pytest.raises(RecordingError):
        run.call_tool("db", "q", {"x": 1}, lambda x: ran.append(x))
    assert ran == []
    reader.close()


def test_no_record_no_action_when_the_store_was_rolled_back(tmp_path):
    import shutil

    path = tmp_path / "store"
    store = sealbox.init_store(path)
    store.close()
    shutil.copy(path / "sealbox.db", tmp_path / "backup.db")
    store = open_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.note("after the backup")
    store.close()
    shutil.copy(tmp_path / "backup.db", path / "sealbox.db")
    for suffix in ("-wal", "-shm"):
        (path / f"sealbox.db{suffix}").unlink(missing_ok=True)
    restored = open_store(path)
    ran = []
    with pytest.raises(RecordingError, match="refusing to append"):
        with Recorder(restored, policy=ALLOW_ALL).run(agent="bot") as run2:
            run2.call_tool("db", "q", {"x": 1}, lambda x: ran.append(x))
    assert ran == [] and restored.size() == 1


def test_outside_a_run_a_decorated_tool_never_runs(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    ran = []

    @rec.tool("db")
    def write(x):
        ran.append(x)

    with pytest.raises(RecordingError, match="outside a recorded run"):
        write(1)
    assert ran == []


def test_the_decorator_records_bound_arguments_with_defaults(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    @rec.tool("math", "multiply")
    def mul(x, y=3):
        return x * y

    with rec.run(agent="bot") as run:
        assert mul(5) == 15
    call = payloads(store, run.run_id, "tool.call")[0]
    assert (call["tool"], call["arguments"]) == ("multiply", {"x": 5, "y": 3})
    assert payloads(store, run.run_id, "tool.result")[0]["result"] == 15


def test_async_runs_tools_and_decorators(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    @rec.tool("web")
    async def fetch(url):
        await asyncio.sleep(0)
        return {"status": 200, "url": url}

    async def agent():
        async with rec.run(agent="async-bot") as run:
            a = await fetch("https://example.org")
            b = await run.acall_tool("math", "add", {"x": 1, "y": 2}, lambda x, y: x + y)
            return run, a, b

    run, a, b = asyncio.run(agent())
    assert a == {"status": 200, "url": "https://example.org"} and b == 3
    assert [k for _, k in kinds(store, run.run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                        "tool.call", "policy.decision", "tool.result", "run.ended"]


def test_runs_nest_and_the_child_names_its_parent(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="planner") as parent:
        with rec.run(agent="researcher", parent_run_id=parent.run_id) as child:
            child.note("sub-agent work")
    assert store.read_run(child.run_id)[0].payload["parent_run_id"] == parent.run_id
    rows = {r["run_id"]: r for r in store.runs()}
    assert rows[child.run_id]["parent_run_id"] == parent.run_id


def test_parallel_tool_calls_are_siblings_under_their_model_call_whatever_the_completion_order(store):
    response = {"id": "r1", "model": "gpt-4o", "choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"n": i})}}
        for i in (1, 2, 3)]}}], "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        mc = run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}]}, response, latency=0.25)
        assert mc.step == "2" and [tc.id for tc in mc.tool_calls] == ["call_1", "call_2", "call_3"]
        # call_3 is recorded first, then call_2, then call_1: an order made by events (staggered sleeps
        # of 0-40 ms did not make it on a loaded host, where the test then passed without reversing anything)
        turn = {i: threading.Event() for i in (1, 2, 3)}
        turn[3].set()

        def worker(i):
            assert turn[i].wait(60)
            try:
                run.call_tool("kb", "lookup", {"n": i}, lambda n: n * 10, call_id=f"call_{i}")
            finally:
                if i > 1:
                    turn[i - 1].set()

        threads = [threading.Thread(target=worker, args=(i,)) for i in (1, 2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    calls = [(e.payload["call_id"], e.step) for e in store.read_run(run.run_id) if e.kind == "tool.call"]
    assert calls == [("call_3", "2.3"), ("call_2", "2.2"), ("call_1", "2.1")]  # in completion order, steps by id
    model = payloads(store, run.run_id, "model.call")[0]
    assert (model["provider"], model["model"], model["format"]) == ("openai", "gpt-4o", "openai.chat")
    assert model["usage"] == {"input_tokens": 100, "output_tokens": 20} and model["latency_us"] == 250000
    assert model["tool_call_ids"] == ["call_1", "call_2", "call_3"]
    assert verify_store(store).ok


def test_token_usage_is_kept_per_call_and_summed_per_run(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    anthropic = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                 "content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 40, "output_tokens": 7}}
    with rec.run(agent="bot") as run:
        run.model_call({"model": "claude-sonnet-4-5", "messages": []}, anthropic)
        run.model_call({"model": "claude-sonnet-4-5", "messages": []}, anthropic, usage={"output_tokens": 9})
    usages = [p["usage"] for p in payloads(store, run.run_id, "model.call")]
    assert usages == [{"input_tokens": 40, "output_tokens": 7}, {"input_tokens": 40, "output_tokens": 9}]
    assert payloads(store, run.run_id, "run.ended")[0]["usage"] == {"input_tokens": 80, "output_tokens": 16, "cost": 0.0}


def test_state_is_saved_through_the_canonical_encoder(store):
    import datetime

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.save_state({"cursor": 3, "at": datetime.date(2026, 11, 29), "seen": {1, 2}}, label="after-step-3")
    state = payloads(store, run.run_id, "state.saved")[0]
    assert state == {"state": {"cursor": 3, "at": {"$date": "2026-11-29"}, "seen": {"$set": [1, 2]}},
                     "label": "after-step-3"}


POLICY = """
version: 1
name: prod-db
rules:
  - id: no-drops
    match: {server: db, tool: write_query}
    when: 'call.arguments.query.matches("(?i)drop")'
    effect: deny
  - id: writes-need-ops
    match: {server: db, tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: reads-ok
    match: {server: db, tool: "read_*"}
    effect: allow
  - id: broken-condition
    match: {server: db, tool: explode}
    when: 'call.arguments.n / 0 > 1'
    effect: allow
limits:
  max_tool_calls_per_run: 3
"""


def test_policy_decisions_deny_before_the_tool_runs_and_name_the_rule(store):
    rec = Recorder(store, policy=Policy.from_text(POLICY))
    ran = []
    outcomes = {}
    with rec.run(agent="bot") as run:
        for tool, args in [("read_query", {"query": "SELECT 1"}), ("write_query", {"query": "DROP TABLE x"}),
                           ("write_query", {"query": "DELETE FROM x"}), ("explode", {"n": 1}),
                           ("other", {})]:
            try:
                run.call_tool("db", tool, args, lambda **kw: ran.append((tool, kw)))
                outcomes[(tool, json.dumps(args))] = "ran"
            except ToolDenied as denied:
                outcomes[(tool, json.dumps(args))] = (denied.decision.reason_code, denied.decision.rule)
    assert ran == [("read_query", {"query": "SELECT 1"})]
    assert list(outcomes.values()) == ["ran", ("policy_deny", "no-drops"), ("approval_unavailable", "writes-need-ops"),
                                       ("guardrail_error", "broken-condition"), ("no_match", None)]
    decisions = payloads(store, run.run_id, "policy.decision")
    assert [d["effect"] for d in decisions] == ["allow", "deny", "deny", "deny", "deny"]
    assert decisions[2]["approval"] == {"groups": ["ops"], "identities": [], "quorum": 1, "expires": 3600}
    assert len(payloads(store, run.run_id, "tool.result")) == 1  # a denied call never ran


def test_limits_trip_from_counts_kept_in_the_store_across_restarts_and_processes(tmp_path):
    path = tmp_path / "store"
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    store = sealbox.init_store(path)
    rec = Recorder(store, policy=Policy.load(policy_file))
    run = rec.run(agent="bot", run_id="run-limits").start()
    run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda query: 1)
    store.close()
    child = f"""
import sealbox
from sealbox.policy import Policy
from sealbox.recorder import Recorder
store = sealbox.open_store({str(path)!r})
rec = Recorder(store, policy=Policy.load({str(policy_file)!r}))
run = rec.continue_run("run-limits")  # the same run, in another process
run.call_tool("db", "read_query", {{"query": "SELECT 2"}}, lambda query: 2)
store.close()
"""
    subprocess.run([sys.executable, "-c", child], check=True)
    store = open_store(path)
    run = Recorder(store, policy=Policy.load(policy_file)).continue_run("run-limits")  # after a restart
    run.call_tool("db", "read_query", {"query": "SELECT 3"}, lambda query: 3)
    with pytest.raises(ToolDenied) as denied:
        run.call_tool("db", "read_query", {"query": "SELECT 4"}, lambda query: 4)
    assert denied.value.decision.reason_code == "limit_exceeded"
    tripped = payloads(store, "run-limits", "guardrail.tripped")
    assert tripped == [{"call_id": denied.value.call_id, "limit": "max_tool_calls_per_run", "current": 4, "bound": 3}]
    assert [p["result"] for p in payloads(store, "run-limits", "tool.result")] == [1, 2, 3]
    assert [e.step for e in store.read_run("run-limits") if e.kind == "tool.call"] == ["2", "3", "4", "5"]
    store.close()


def test_the_breaker_opens_after_consecutive_errors_and_records_each_change(store):
    clock = [0.0]
    rec = Recorder(store, policy=ALLOW_ALL, breaker=CircuitBreaker(threshold=2, cooldown_s=10, clock=lambda: clock[0]))
    calls = []

    def flaky():
        calls.append(1)
        raise TimeoutError("upstream timed out")

    with rec.run(agent="bot") as run:
        for _ in range(2):
            with pytest.raises(TimeoutError):
                run.call_tool("api", "search", None, flaky)
        with pytest.raises(ToolDenied) as denied:
            run.call_tool("api", "search", None, flaky)
        assert denied.value.decision.reason_code == "breaker_open" and len(calls) == 2
        clock[0] = 11.0
        assert run.call_tool("api", "search", None, lambda: "back") == "back"  # the probe closes it
    changes = [(e.payload["from"], e.payload["to"], e.payload["reason"]) for e in store.read_run("system")
               if e.kind == "breaker.changed"]
    assert changes == [("closed", "open", "failures"), ("open", "half_open", "cooldown_elapsed"),
                       ("half_open", "closed", "probe_succeeded")]


def test_a_server_that_is_down_opens_the_breakers_of_all_its_tools(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("crm", "lookup", None, lambda: 1)
        run.call_tool("crm", "update", None, lambda: 1)
        with pytest.raises(ConnectionRefusedError):
            run.call_tool("crm", "lookup", None, lambda: (_ for _ in ()).throw(ConnectionRefusedError("refused")))
        with pytest.raises(ToolDenied, match="breaker"):
            run.call_tool("crm", "update", None, lambda: 1)
    opened = sorted(e.payload["tool"] for e in store.read_run("system") if e.kind == "breaker.changed")
    assert opened == ["lookup", "update"]


def test_an_unpriced_model_under_a_cost_budget_fails_closed(store):
    policy = Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                              "limits:\n  cost: {per_run: 1.0}\nprices:\n  'openai/gpt-4o': {input: 2.5, output: 10}\n")
    rec = Recorder(store, policy=policy)
    with rec.run(agent="bot") as run:
        run.model_call({"model": "mystery-1"}, {"object": "response", "model": "mystery-1", "output": [],
                                                "usage": {"input_tokens": 10, "output_tokens": 10}})
        with pytest.raises(ToolDenied) as denied:
            run.call_tool("db", "q", None, lambda: 1)
    assert denied.value.decision.reason_code == "guardrail_error"
    assert "budgets cannot be enforced" in denied.value.decision.reason


def test_cost_comes_from_the_policys_price_table(store):
    policy = Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                              "limits:\n  cost: {per_run: 0.001}\nprices:\n  'openai/gpt-4o': {input: 2.5, output: 10}\n")
    rec = Recorder(store, policy=policy)
    resp = {"id": "x", "model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}
    with rec.run(agent="bot") as run:
        run.model_call({"model": "gpt-4o"}, resp)
        with pytest.raises(ToolDenied) as denied:
            run.call_tool("db", "q", None, lambda: 1)
    assert payloads(store, run.run_id, "model.call")[0]["usage"]["cost"] == pytest.approx(0.0035)
    assert denied.value.decision.limit.limit == "cost.per_run"


def test_every_recorded_run_verifies(store):
    rec = Recorder(store, policy=Policy.from_text(POLICY))
    for i in range(3):
        with rec.run(agent=f"bot{i}") as run:
            run.call_tool("db", "read_query", {"query": "SELECT " + "x" * 600}, lambda query: query[:5])
            run.save_state({"i": i})
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
    assert report.runs == 4


def test_every_decision_can_be_rerun_offline_from_the_log_alone(tmp_path):
    from sealbox.policy.audit import reevaluate_run

    store = sealbox.init_store(tmp_path / "s")
    policy = Policy.from_text(POLICY)
    rec = Recorder(store, policy=policy)
    with rec.run(agent="bot") as run:
        for tool, args in [("read_query", {"query": "SELECT 1"}), ("write_query", {"query": "DROP TABLE x"}),
                           ("write_query", {"query": "DELETE FROM x"}), ("other", {})]:
            try:
                run.call_tool("db", tool, args, lambda **kw: None)
            except ToolDenied:
                pass
    store.close()
    reader = open_store(tmp_path / "s", readonly=True)
    decision = next(e for e in reader.read_run(run.run_id) if e.kind == "policy.decision")
    assert set(decision.payload["inputs"]) == {"$blob"}  # kept by blob reference
    again = list(reevaluate_run(reader, Policy.from_text(POLICY), run.run_id))
    assert [(r.call_id != "", r.re_evaluable, r.same) for r in again] == [(True, True, True)] * 4
    assert [r.decision.rule for r in again] == ["reads-ok", "no-drops", "writes-need-ops", None]
    relaxed = Policy.from_text(POLICY.replace("effect: require_approval\n    approval: {groups: [ops], quorum: 1, expires: 1h}",
                                              "effect: allow"))
    changed = [r for r in reevaluate_run(reader, relaxed, run.run_id) if not r.same]
    assert [(r.recorded["reason_code"], r.decision.effect, r.decision.rule) for r in changed] == [
        ("approval_unavailable", "allow", "writes-need-ops")]
    reader.close()


def test_a_decision_on_redacted_content_is_not_re_evaluable(tmp_path):
    from sealbox.policy.audit import reevaluate_run

    store = sealbox.init_store(tmp_path / "s")
    policy = Policy.from_text("version: 1\nname: p\nrules:\n  - id: pw\n    when: 'call.arguments.password != \"\"'\n"
                              "    effect: allow\n")
    with Recorder(store, policy=policy).run(agent="bot") as run:
        run.call_tool("auth", "login", {"user": "ann", "password": "hunter2"}, lambda **kw: "ok")
    [r] = list(reevaluate_run(store, policy, run.run_id))
    assert (r.re_evaluable, r.decision, r.why_not) == (False, None, "the decision read content that was redacted before it was recorded")
    assert b"hunter2" not in b"".join(e.raw for e in store.read_run(run.run_id))
    store.close()


@pytest.mark.parametrize("principal, words", [
    ({"id": "bob", "groups": "ops"}, "groups must be a list of group names (strings), got 'ops'"),
    ({"id": "bob", "groups": ["ops", 3]}, "groups must be a list of group names"),
    ({"id": "bob", "role": 5}, "role must be a string"),
    ({"id": "bob", "attributes": ["x"]}, "attributes must be a dict"),
    ({"id": ""}, "principal id must be a non-empty string"),
])
def test_a_wrongly_typed_principal_is_refused_before_anything_is_recorded(store, principal, words):
    """groups given as "ops" used to become the groups o, p and s for the policy."""
    rec = Recorder(store, policy=ALLOW_ALL)
    size = store.size()
    with pytest.raises(ConfigError, match=re.escape(words)):
        with rec.run(agent="a", principal=principal):
            pass
    assert store.size() == size


def test_principal_groups_from_a_set_are_sorted_and_a_list_kept(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="a", principal={"id": "bob", "groups": {"b", "a"}}) as run:
        pass
    with rec.run(agent="a", principal={"id": "eve", "groups": ["z", "y"]}) as run2:
        pass
    assert run.principal.groups == ("a", "b") and run2.principal.groups == ("z", "y")
