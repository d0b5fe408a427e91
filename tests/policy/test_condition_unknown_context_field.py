"""Only ``call.*`` fields were checked at load: a condition reading a field no principal, agent or run has
(``principal.group``, ``agent.nme``, ``run.label``) loaded, and then every call it reached was denied
``guardrail_error`` (or, behind ``has()``, the rule never matched). The engine gives each of them a fixed
set of fields (docs/policy.md, CEL variables), so such a condition is now refused at load, like ``call.*``."""

from __future__ import annotations

import pytest
from policy_helpers import call, load

from sealbox.errors import PolicyLoadError


@pytest.mark.parametrize("when, problem", [
    ("'ops' in principal.group",
     "condition reads principal.group, which no principal has (a principal has attributes, groups, id, role)"),
    ("has(principal.email)",
     "condition reads principal.email, which no principal has (a principal has attributes, groups, id, role)"),
    ("agent.nme == 'bot'", "condition reads agent.nme, which no agent has (an agent has attributes, name)"),
    ("run.label.env == 'prod'",
     "condition reads run.label, which no run has (a run has elapsed_s, id, labels, started_at)"),
    ("run.elapsed < 10.0",
     "condition reads run.elapsed, which no run has (a run has elapsed_s, id, labels, started_at)"),
])
def test_a_condition_reading_a_field_the_context_lacks_is_refused(tmp_path, when, problem):
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, f"""
            version: 1
            rules:
              - id: r
                effect: allow
                when: "{when}"
        """)
    assert (info.value.line, info.value.problem) == (5, f"rule 'r': {problem}")


def test_every_field_the_context_has_still_loads_and_decides(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            effect: allow
            when: >-
              principal.id == 'agent-1' && principal.role == 'agent' && 'bots' in principal.groups &&
              size(principal.attributes) == 0 && agent.name == 'support-bot' && size(agent.attributes) == 0 &&
              run.id == 'run-1' && run.labels.env == 'prod' && run.started_at == '2026-11-29T11:59:00Z' &&
              run.elapsed_s == 60.0
    """)
    assert policy.evaluate(call()).effect == "allow"
    assert policy.evaluate(call(run={"id": "run-2"})).reason_code == "no_match"


def test_a_macro_variable_named_principal_is_not_the_principal(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            effect: allow
            when: "call.arguments.rows.all(principal, principal.owner == 'x')"
    """)
    assert policy.evaluate(call(arguments={"rows": [{"owner": "x"}]})).effect == "allow"


@pytest.mark.parametrize("when, field", [("usage.calls_run < 5", "calls_run"),
                                         ("has(usage.tool_call_run)", "tool_call_run")])
def test_a_condition_reading_a_usage_counter_that_does_not_exist_is_refused(tmp_path, when, field):
    """``usage.calls_run`` (the counter is ``tool_calls_run``) loaded, and every call it reached was denied
    guardrail_error (KeyError), or behind has() the rule never matched."""
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, f"""
            version: 1
            rules:
              - id: r
                effect: allow
                when: "{when}"
        """)
    assert (info.value.line, info.value.problem) == (
        5, f"rule 'r': condition reads usage.{field}, which is no usage counter (the counters are calls_minute_agent, "
           "calls_minute_tool, cost_day, cost_run, tokens_day, tokens_run, tool_calls_run)")


def test_every_usage_counter_still_loads(tmp_path):
    load(tmp_path, """
        version: 1
        rules:
          - id: r
            effect: allow
            when: >-
              usage.tool_calls_run + usage.calls_minute_agent + usage.calls_minute_tool + usage.tokens_run +
              usage.tokens_day >= 0 && usage.cost_run + usage.cost_day >= 0.0
    """)
