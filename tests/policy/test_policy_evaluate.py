"""Evaluation: precedence, no-match deny, approvals, and every fail-closed path.

Fault-injection tests wrap the tool function and assert it never ran when the
decision is not allow.
"""

from __future__ import annotations

import pytest
from policy_helpers import call, load, run_if_allowed

from sealbox.policy import ApprovalSpec, CallContext, Policy

PRECEDENCE = """
version: 1
rules:
  - id: reads-ok
    match: {server: db, tool: "read_*"}
    effect: allow
  - id: deny-everything
    effect: deny
"""


def test_first_matching_rule_decides_a_later_deny_does_not_win(tmp_path, tool):
    policy = load(tmp_path, PRECEDENCE)
    d = policy.evaluate(call(tool="read_rows"))
    assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "reads-ok")
    assert run_if_allowed(d, tool) == "ran" and tool.calls == 1


def test_later_rule_decides_when_earlier_ones_do_not_match(tmp_path, tool):
    d = load(tmp_path, PRECEDENCE).evaluate(call(tool="drop_table"))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "policy_deny", "deny-everything")
    assert run_if_allowed(d, tool) is None and tool.calls == 0


def test_no_matching_rule_is_a_deny_with_no_match(tmp_path, tool):
    policy = load(tmp_path, "version: 1\nrules:\n  - id: r\n    match: {tool: x}\n    effect: allow\n")
    d = policy.evaluate(call(tool="y", server="s"))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "no_match", None)
    assert d.reason == "no rule matches s/y; default is deny"
    assert d.policy_fingerprint == policy.fingerprint
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_an_empty_policy_denies_everything(tmp_path):
    assert load(tmp_path, "version: 1\nrules: []\n").evaluate(call()).reason_code == "no_match"


def test_principal_agent_and_label_matchers(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: ops-only
            match: {principal: {groups: [ops]}, agent: {name: "support-*"}, labels: {env: [prod, staging]}}
            effect: allow
          - id: by-role
            match: {principal: {role: [human], attributes: {team: payments}}}
            effect: allow
    """)
    ops = {"id": "u1", "role": "agent", "groups": ["ops"], "attributes": {}}
    assert policy.evaluate(call(principal=ops)).rule == "ops-only"
    assert policy.evaluate(call(principal=ops, run={"labels": {"env": "dev"}})).reason_code == "no_match"
    assert policy.evaluate(call(principal=ops, agent={"name": "billing-bot"})).reason_code == "no_match"
    human = {"id": "u2", "role": "human", "groups": [], "attributes": {"team": "payments"}}
    assert policy.evaluate(call(principal=human)).rule == "by-role"
    assert policy.evaluate(call(principal={**human, "attributes": {"team": "infra"}})).reason_code == "no_match"


def test_require_approval_carries_the_approval_spec(tmp_path, tool):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: writes-need-ops
            match: {tool: write_query}
            effect: require_approval
            approval: {groups: [ops], identities: [alice], quorum: 2, expires: 30m}
    """)
    d = policy.evaluate(call(tool="write_query"))
    assert (d.effect, d.reason_code, d.rule) == ("require_approval", "policy_require_approval", "writes-need-ops")
    assert d.approval == ApprovalSpec(groups=("ops",), identities=("alice",), quorum=2, expires_s=1800)
    assert d.to_payload()["approval"] == {"groups": ["ops"], "identities": ["alice"], "quorum": 2, "expires": 1800}
    unavailable = d.denied_as("approval_unavailable", "approvals are not available yet")
    assert (unavailable.effect, unavailable.reason_code, unavailable.rule) == ("deny", "approval_unavailable", "writes-need-ops")
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_condition_true_and_false(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: selects
            match: {tool: query}
            when: 'call.arguments.sql.matches("(?i)^\\\\s*select\\\\b") && principal.role == "agent"'
            effect: allow
    """)
    assert policy.evaluate(call(tool="query", arguments={"sql": "SELECT 1"})).effect == "allow"
    d = policy.evaluate(call(tool="query", arguments={"sql": "DELETE FROM t"}))
    assert (d.effect, d.reason_code) == ("deny", "no_match")


def test_conditions_see_usage_run_and_now(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: office-hours
            when: 'now.getHours() >= 9 && now.getHours() < 17 && run.labels.env == "prod" && usage.tool_calls_run < 3'
            effect: allow
    """)
    assert policy.evaluate(call(usage={"tool_calls_run": 2})).rule == "office-hours"
    assert policy.evaluate(call(usage={"tool_calls_run": 3})).reason_code == "no_match"


GUARD = """
version: 1
evaluation: {{timeout_ms: {timeout}, max_input_bytes: {cap}}}
rules:
  - id: guard
    when: '{when}'
    effect: deny
  - id: allow-rest
    effect: allow
"""


def guarded(tmp_path, when: str, timeout: int = 50, cap: int = 65536, expensive: bool = False) -> Policy:
    text = GUARD.format(when=when, timeout=timeout, cap=cap)
    if expensive:
        text = text.replace("    effect: deny", "    expensive: true\n    effect: deny", 1)
    return load(tmp_path, text)


@pytest.mark.parametrize(
    ("when", "arguments", "reason"),
    [
        ("call.arguments.n / call.arguments.d > 1", {"n": 1, "d": 0}, "rule 'guard': condition raised ZeroDivisionError: division by zero in CEL expression"),
        ('call.arguments.q + 1 > 2', {"q": "text"}, "rule 'guard': condition raised TypeError: Unsupported operation: string + int."),
        ("call.arguments.missing == 1", {}, "rule 'guard': condition raised KeyError: 'missing'"),
        ("size(call.arguments.q)", {"q": "abc"}, "rule 'guard': condition returned int, not a bool"),
        ("call.arguments.q", {"q": None}, "rule 'guard': condition returned NoneType, not a bool"),
    ],
)
def test_failing_condition_denies_with_guardrail_error_never_skipped(tmp_path, tool, when, arguments, reason):
    # the deny rule errors; were it skipped, allow-rest would allow the call
    d = guarded(tmp_path, when).evaluate(call(arguments=arguments))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert d.reason.startswith(reason)
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_oversized_arguments_deny_before_evaluating(tmp_path, tool):
    policy = guarded(tmp_path, 'call.arguments.q == "x"', cap=100)
    ok = policy.evaluate(call(arguments={"q": "a" * 84}))  # {"q":"aaa…"} is exactly 92 bytes
    assert (ok.effect, ok.rule) == ("allow", "allow-rest")
    d = policy.evaluate(call(arguments={"q": "a" * 93}))  # 101 bytes
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert d.reason == "rule 'guard': arguments are 101 bytes of canonical JSON, above max_input_bytes 100"
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_size_cap_counts_escaped_and_multibyte_characters(tmp_path):
    policy = guarded(tmp_path, 'call.arguments.q == "x"', cap=100)
    assert policy.evaluate(call(arguments={"q": "é" * 45})).effect == "allow"  # 8 + 90 bytes
    assert policy.evaluate(call(arguments={"q": "é" * 47})).reason_code == "guardrail_error"  # 102 bytes


def test_in_process_condition_over_the_time_limit_denies(tmp_path, tool):
    items = list(range(40))
    policy = guarded(tmp_path, "call.arguments.items.map(x, x * 2).exists(y, y < 0)", timeout=1)
    d = policy.evaluate(call(arguments={"items": items * 25}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert "above the time limit of 1 ms" in d.reason
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_a_cheap_condition_is_not_over_the_time_limit_because_the_process_was_descheduled(tmp_path, monkeypatch):
    """The in-process limit is wall-clock time: a process descheduled for 60 ms while a cheap condition ran (a
    loaded host does that now and then: 8 stalls over 50 ms in 20 s beside three busy loops on 2 cores) had
    the call denied guardrail_error 'condition took 60.0 ms, above the time limit of 50 ms'. Timed once more
    when over the limit, it is allowed; a condition over the limit each time is still denied (above)."""
    import time as real_time

    from sealbox.policy import engine

    policy = guarded(tmp_path, 'call.arguments.q == "x"')  # 50 ms
    clock = {"reads": 0}

    class Stalled:  # the first condition's timing spans a 60 ms stall; nothing else is changed
        def __getattr__(self, name):
            return getattr(real_time, name)

        @staticmethod
        def perf_counter() -> float:
            clock["reads"] += 1
            return real_time.perf_counter() + (0.060 if clock["reads"] == 2 else 0.0)

    monkeypatch.setattr(engine, "time", Stalled())
    d = policy.evaluate(call(arguments={"q": "y"}))
    assert clock["reads"] >= 2
    assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "allow-rest")


def test_expensive_condition_runs_in_the_worker(tmp_path):
    policy = guarded(tmp_path, "call.arguments.rows.exists(r, r.cols.exists(c, c < 0))", timeout=5000, expensive=True)
    d = policy.evaluate(call(arguments={"rows": [{"cols": [1, -1]}]}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "policy_deny", "guard")
    assert policy.evaluate(call(arguments={"rows": [{"cols": [1, 2]}]})).rule == "allow-rest"


def test_expensive_condition_over_the_time_limit_is_killed_and_denied(tmp_path, tool):
    from sealbox.policy.worker import default_worker

    default_worker().start()  # start-up time is not part of the limit
    restarts = default_worker().restarts
    policy = guarded(tmp_path, "call.arguments.items.map(x, call.arguments.items.map(y, x + y)).size() < 0",
                     timeout=200, expensive=True)  # fmt: skip
    d = policy.evaluate(call(arguments={"items": list(range(400))}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert d.reason == "rule 'guard': expensive condition exceeded the time limit of 200 ms twice; worker killed"
    assert default_worker().restarts == restarts + 2  # tried once more in a fresh worker, killed again
    run_if_allowed(d, tool)
    assert tool.calls == 0
    # a fresh worker answers the next call
    assert policy.evaluate(call(arguments={"items": [1]})).rule == "allow-rest"


def test_an_expensive_condition_is_not_denied_because_the_worker_was_stalled(tmp_path):
    """The worker's answer was awaited for timeout_ms from the moment the request was sent, with no second
    try: on a loaded host (four busy loops on 2 cores) 1 call in 47452 of a cheap expensive condition was
    denied guardrail_error 'expensive condition exceeded the time limit of 50 ms; worker killed'. Here the
    worker process is really stopped (SIGSTOP, as a descheduled process is) for 1 s right after the request
    is sent; the condition is tried once more in a fresh worker, as the in-process path times it once more."""
    import os
    import signal
    import threading

    from sealbox.policy.worker import default_worker

    if not hasattr(signal, "SIGSTOP"):
        pytest.skip("needs SIGSTOP")
    worker = default_worker()
    worker.start()
    restarts = worker.restarts
    policy = guarded(tmp_path, "call.arguments.rows.exists(r, r < 0)", timeout=200, expensive=True)
    real_send = worker._conn.send
    stalled = []

    def resume(pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # killed meanwhile
            pass

    def send_then_stall(obj):
        pid = worker._proc.pid
        os.kill(pid, signal.SIGSTOP)
        stalled.append(pid)
        threading.Timer(1.0, resume, (pid,)).start()
        real_send(obj)

    worker._conn.send = send_then_stall  # only this worker's connection: a fresh worker is not stalled
    d = policy.evaluate(call(arguments={"rows": [1, 2, 3]}))
    assert len(stalled) == 1
    assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "allow-rest")
    assert worker.restarts == restarts + 1
    assert policy.evaluate(call(arguments={"rows": [1, -2]})).rule == "guard"


def test_expensive_condition_error_in_the_worker_denies(tmp_path):
    policy = guarded(tmp_path, "call.arguments.n / 0 > 1", timeout=5000, expensive=True)
    d = policy.evaluate(call(arguments={"n": 1}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert d.reason.startswith("rule 'guard': condition raised ZeroDivisionError")


def test_unexpected_exception_anywhere_is_a_guardrail_error(tmp_path, tool):
    policy = load(tmp_path, "version: 1\nrules:\n  - id: agents\n    match: {principal: {role: agent}}\n    effect: allow\n")
    d = policy.evaluate(call(principal=["not", "a", "mapping"]))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", None)
    assert d.reason == "policy evaluation failed: AttributeError: 'list' object has no attribute 'get'"
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_condition_inputs_that_cannot_be_prepared_deny(tmp_path, tool):
    bad = call(arguments={"q": "x"})
    bad.now = "not a datetime"  # type: ignore[assignment]
    d = guarded(tmp_path, 'call.arguments.q == "x"').evaluate(bad)
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert d.reason == "rule 'guard': cannot prepare condition inputs: AttributeError: 'str' object has no attribute 'tzinfo'"
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_non_json_arguments_that_cel_cannot_convert_deny(tmp_path, tool):
    d = guarded(tmp_path, 'call.arguments.q == "x"').evaluate(call(arguments={"q": object()}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    run_if_allowed(d, tool)
    assert tool.calls == 0


def test_redacted_arguments_make_the_decision_not_re_evaluable(tmp_path):
    policy = guarded(tmp_path, 'call.arguments.q == "x"')
    assert policy.evaluate(call(arguments={"q": "y"})).re_evaluable is True
    d = policy.evaluate(call(arguments={"q": "[redacted]"}, redacted=True))
    assert (d.rule, d.re_evaluable) == ("allow-rest", False)


def test_redaction_does_not_matter_when_no_condition_reads_arguments(tmp_path):
    d = guarded(tmp_path, 'call.tool == "drop"').evaluate(call(redacted=True))
    assert (d.rule, d.re_evaluable) == ("allow-rest", True)


def test_decision_payload_and_inputs_round_trip(tmp_path):
    policy = guarded(tmp_path, 'call.arguments.q == "x"')
    c = call(arguments={"q": "x"})
    d = policy.evaluate(c)
    payload = d.to_payload()
    assert set(payload) == {"effect", "reason_code", "rule", "reason", "policy_fingerprint", "eval_us",
                            "approval", "limit", "re_evaluable"}  # fmt: skip
    assert payload["effect"] == "deny" and payload["rule"] == "guard" and isinstance(payload["eval_us"], int)
    inputs = c.to_inputs()
    assert inputs["now"] == "2026-11-29T12:00:00Z"
    again = policy.evaluate(CallContext.from_inputs(inputs))
    assert (again.effect, again.rule, again.reason_code) == (d.effect, d.rule, d.reason_code)


def test_candidates_are_only_rules_whose_server_and_tool_match(tmp_path):
    rules = "".join(f"  - id: r{i}\n    match: {{server: s{i}, tool: t{i}}}\n    effect: allow\n" for i in range(100))
    policy = load(tmp_path, "version: 1\nrules:\n" + rules + "  - id: any-db\n    match: {server: 's5*'}\n    effect: deny\n")
    assert [r.id for r in policy.candidates("s50", "t50")] == ["r50", "any-db"]
    assert [r.id for r in policy.candidates("s1", "t50")] == []


@pytest.mark.parametrize("expensive", [False, True])
def test_a_condition_error_never_quotes_an_arguments_value_in_the_reason(tmp_path, expensive):
    """CEL's matches() quotes the regex it could not compile; a rule matching a value against a
    pattern taken from the arguments put that value in the decision's reason, which is stored in
    clear in every content mode (the arguments themselves redacted, or markers in hashes-only)."""
    secret = "(sk-prefix-of-a-Secret-91"
    policy = guarded(tmp_path, "call.arguments.name.matches(call.arguments.pattern)", timeout=5000, expensive=expensive)
    d = policy.evaluate(call(arguments={"name": "alice", "pattern": secret, "other": ["abc", {"k": "Secret"}]}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert secret not in d.reason and "sk-prefix" not in d.reason
    assert d.reason.startswith("rule 'guard': condition raised ")
    assert "'<an argument's value>' not a valid regex" in d.reason


@pytest.mark.parametrize("expensive", [False, True])
def test_a_condition_error_never_quotes_the_lines_of_a_multi_line_argument(tmp_path, expensive):
    # the regex crate's error shows a pattern of several lines as numbered lines: "1: (sk-first-line-31 ^ 2: …"
    secret = "(sk-first-line-31\nsecond-line-of-it-47"
    policy = guarded(tmp_path, "call.arguments.name.matches(call.arguments.pattern)", timeout=5000, expensive=expensive)
    d = policy.evaluate(call(arguments={"name": "alice", "pattern": secret}))
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "guard")
    assert "first-line" not in d.reason and "second-line" not in d.reason
    assert "'<an argument's value>' not a valid regex" in d.reason


def test_a_condition_error_quoting_an_argument_is_stored_without_it_in_a_hashes_only_store(tmp_path):
    from sealbox import init_store
    from sealbox.recorder import Recorder, ToolDenied
    from sealbox.redaction import ContentPolicy

    store = init_store(tmp_path / "store", content=ContentPolicy(mode="hashes-only"))
    policy = guarded(tmp_path, "call.arguments.name.matches(call.arguments.pattern)")
    with Recorder(store, policy=policy).run(agent="a") as run:
        with pytest.raises(ToolDenied):
            run.call_tool("db", "lookup", {"name": "x", "pattern": "[Private-Pattern-77"}, lambda **_: 1)
    decision = [e for e in store.read_run(run.run_id) if e.kind == "policy.decision"][0]
    assert decision.payload["reason"].startswith("rule 'guard': condition raised RuntimeError: Function 'matches' "
                                                 "error: '<an argument's value>' not a valid regex")
    store.close()
    assert b"Private-Pattern-77" not in (tmp_path / "store" / "sealbox.db").read_bytes()
