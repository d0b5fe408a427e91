"""A condition reading a field no call has (``call.argumnts.query``, ``call.args``) loaded without a word:
every call it reached was then denied ``guardrail_error`` (``KeyError: 'argumnts'``), or, behind ``has()``,
the rule never matched, and ``policy check`` said ``ok``. A ``call`` holds exactly ``server``, ``tool``,
``arguments`` and ``grant``, so such a condition is now refused at load, naming the field and the line, as
a condition reading an unknown variable is."""

from __future__ import annotations

import pytest
from policy_helpers import call, load

from sealbox.errors import PolicyLoadError


@pytest.mark.parametrize("when, field", [
    ("call.argumnts.query == 'x'", "argumnts"),
    ("has(call.args)", "args"),
    ("call.tool == 'a' && call.method == 'tools/call'", "method"),
])
def test_a_condition_reading_a_field_no_call_has_is_refused(tmp_path, when, field):
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, f"""
            version: 1
            rules:
              - id: r
                when: "{when}"
                effect: allow
        """)
    assert (info.value.line, info.value.problem) == (
        4, f"rule 'r': condition reads call.{field}, which no call has (a call has arguments, grant, server, tool)")


def test_the_fields_a_call_has_still_load_and_decide(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            when: "call.server == 'db' && call.tool == 'read_rows' && has(call.grant) && call.arguments.n > 1"
            effect: allow
    """)
    assert policy.evaluate(call(arguments={"n": 2}, grant="implicit:agent-1")).effect == "allow"
    assert policy.evaluate(call(arguments={"n": 2})).reason_code == "no_match"


def test_a_macro_variable_named_like_a_field_is_not_a_call_field(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            when: "call.arguments.rows.all(row, row.owner == principal.id)"
            effect: allow
    """)
    assert policy.evaluate(call(arguments={"rows": [{"owner": "agent-1"}]})).effect == "allow"
