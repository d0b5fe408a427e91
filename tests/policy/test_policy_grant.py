"""The grant a call names, in policies: ``call.grant`` in CEL and ``require_grant: true`` on a rule."""

from __future__ import annotations

import pytest
from policy_helpers import NOW, call, load

from sealbox.errors import PolicyLoadError
from sealbox.policy import ALLOW_ALL, REASON_CODES, CallContext, Policy
from sealbox.policy.analysis import explain, lint

GITHUB = """
version: 1
name: github
rules:
  - id: github-needs-grant
    match: {server: github}
    require_grant: true
    effect: allow
  - id: deploys-need-ops
    match: {tool: deploy}
    require_grant: true
    effect: require_approval
    approval: {groups: [ops]}
  - id: rest
    effect: allow
"""

IMPLICIT = "implicit:agent-1"


def payload(policy: Policy, ctx: CallContext) -> dict:
    d = policy.evaluate(ctx).to_payload()
    d.pop("eval_us")
    return d


def test_require_grant_denies_an_implicit_grant_with_grant_required_naming_the_rule(tmp_path):
    policy = load(tmp_path, GITHUB)
    assert payload(policy, call("create_issue", "github", grant=IMPLICIT)) == {
        "effect": "deny", "reason_code": "grant_required", "rule": "github-needs-grant",
        "reason": "rule 'github-needs-grant' requires an explicit grant; the call's grant is implicit:agent-1 "
                  "(implicit: it names no access grant)",
        "policy_fingerprint": policy.fingerprint, "approval": None, "limit": None, "re_evaluable": True,
    }  # fmt: skip


def test_require_grant_lets_an_explicit_grant_take_the_rules_effect(tmp_path):
    policy = load(tmp_path, GITHUB)
    assert payload(policy, call("create_issue", "github", grant="grant_0123")) == {
        "effect": "allow", "reason_code": "policy_allow", "rule": "github-needs-grant",
        "reason": "rule 'github-needs-grant' allows the call", "policy_fingerprint": policy.fingerprint,
        "approval": None, "limit": None, "re_evaluable": True,
    }  # fmt: skip
    d = policy.evaluate(call("deploy", "ci", grant="grant_0123"))
    assert (d.effect, d.reason_code, d.rule, d.approval.groups) == (
        "require_approval", "policy_require_approval", "deploys-need-ops", ("ops",))
    d = policy.evaluate(call("deploy", "ci", grant=IMPLICIT))
    assert (d.effect, d.reason_code, d.rule, d.approval) == ("deny", "grant_required", "deploys-need-ops", None)


def test_a_rule_without_require_grant_ignores_the_grant(tmp_path):
    policy = load(tmp_path, GITHUB)
    for grant in (IMPLICIT, "grant_0123", None):
        d = policy.evaluate(call("read_rows", "db", grant=grant))
        assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "rest")


def test_require_grant_is_checked_only_once_the_rule_matches(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: big-issues-need-grant
            match: {server: github}
            when: 'size(call.arguments.title) > 3'
            require_grant: true
            effect: allow
          - id: github-rest
            match: {server: github}
            effect: deny
        """)
    small = policy.evaluate(call("create_issue", "github", {"title": "x"}, grant=IMPLICIT))
    big = policy.evaluate(call("create_issue", "github", {"title": "long title"}, grant=IMPLICIT))
    assert (small.reason_code, small.rule) == ("policy_deny", "github-rest")
    assert (big.reason_code, big.rule) == ("grant_required", "big-issues-need-grant")


@pytest.mark.parametrize("grant, reason", [
    (None, "rule 'github-needs-grant' requires an explicit grant, and the call's grant is not known (none given, "
           "as in inputs recorded before call.grant)"),
    ("", "rule 'github-needs-grant' requires an explicit grant, and the call's grant '' is not a grant id"),
    (7, "rule 'github-needs-grant' requires an explicit grant, and the call's grant 7 is not a grant id"),
])  # fmt: skip
def test_require_grant_fails_closed_when_the_grant_is_unknown_or_malformed(tmp_path, grant, reason):
    d = load(tmp_path, GITHUB).evaluate(call("create_issue", "github", grant=grant))
    assert (d.effect, d.reason_code, d.rule, d.reason) == ("deny", "guardrail_error", "github-needs-grant", reason)


def test_cel_reads_call_grant(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: no-implicit-writes
            match: {tool: "write_*"}
            when: 'call.grant.startsWith("implicit:")'
            effect: deny
          - id: rest
            effect: allow
        """)
    denied = policy.evaluate(call("write_rows", grant=IMPLICIT))
    allowed = policy.evaluate(call("write_rows", grant="grant_0123"))
    assert (denied.effect, denied.reason_code, denied.rule) == ("deny", "policy_deny", "no-implicit-writes")
    assert (allowed.effect, allowed.reason_code, allowed.rule) == ("allow", "policy_allow", "rest")


def test_a_condition_reading_an_unknown_grant_fails_closed_and_has_is_false(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: no-implicit
            when: 'call.grant.startsWith("implicit:")'
            effect: deny
          - id: has-grant
            when: 'has(call.grant)'
            effect: allow
          - id: rest
            effect: deny
        """)
    unknown = policy.evaluate(call(grant=None))
    assert (unknown.effect, unknown.reason_code, unknown.rule) == ("deny", "guardrail_error", "no-implicit")
    assert unknown.reason.startswith("rule 'no-implicit': condition raised")
    tail = Policy.from_text("version: 1\nrules:\n  - {id: has-grant, when: 'has(call.grant)', effect: allow}\n"
                            "  - {id: rest, effect: deny}\n")
    assert tail.evaluate(call(grant=None)).rule == "rest"
    assert tail.evaluate(call(grant="grant_0123")).rule == "has-grant"


def test_the_grant_is_a_decision_input_and_survives_the_round_trip(tmp_path):
    policy = load(tmp_path, GITHUB)
    ctx = call("create_issue", "github", {"title": "t"}, grant=IMPLICIT)
    inputs = ctx.to_inputs()
    assert inputs == {
        "server": "github", "tool": "create_issue", "arguments": {"title": "t"},
        "principal": {"id": "agent-1", "role": "agent", "groups": ["bots"], "attributes": {}},
        "agent": {"name": "support-bot", "attributes": {}},
        "run": {"id": "run-1", "labels": {"env": "prod"}, "started_at": "2026-11-29T11:59:00Z", "elapsed_s": 60.0},
        "usage": {}, "now": "2026-11-29T12:00:00Z", "redacted": False, "grant": IMPLICIT,
    }  # fmt: skip
    again = CallContext.from_inputs(inputs)
    assert (again.grant, again.now) == (IMPLICIT, NOW)
    assert payload(policy, again) == payload(policy, ctx)


def test_inputs_recorded_before_call_grant_load_with_no_grant(tmp_path):
    ctx = call("create_issue", "github")
    old = ctx.to_inputs()
    assert "grant" not in old  # what every decision recorded before call.grant holds
    rebuilt = CallContext.from_inputs(old)
    assert rebuilt.grant is None and rebuilt.to_inputs() == old
    d = load(tmp_path, GITHUB).evaluate(rebuilt)
    assert (d.effect, d.reason_code, d.rule) == ("deny", "guardrail_error", "github-needs-grant")
    d = load(tmp_path, GITHUB).evaluate(CallContext.from_inputs({**old, "server": "db"}))
    assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "rest")


def test_grant_required_is_a_reason_code():
    assert "grant_required" in REASON_CODES
    assert REASON_CODES.index("grant_required") == REASON_CODES.index("grant_invalid") + 1


# --------------------------------------------------------------------------- loading and fingerprint


def test_require_grant_must_be_a_boolean_one_error_naming_the_line(tmp_path):
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, GITHUB.replace("require_grant: true\n    effect: allow", "require_grant: yes\n    effect: allow"))
    err = info.value
    assert (err.line, err.problem) == (6, "rules[0].require_grant must be true or false, not 'yes'")
    assert str(err) == f"{tmp_path / 'policy.yaml'}:6: rules[0].require_grant must be true or false, not 'yes'"


def test_require_grant_on_a_deny_rule_is_refused(tmp_path):
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, "version: 1\nrules:\n  - id: no\n    effect: deny\n    require_grant: true\n")
    assert (info.value.line, info.value.problem) == (
        5, "rule 'no': require_grant is only allowed with effect allow or require_approval (a deny rule denies "
           "every call it matches, with or without a grant)")


def test_require_grant_is_part_of_the_fingerprint_and_false_is_the_default(tmp_path):
    with_grant = load(tmp_path, GITHUB)
    without = Policy.from_text(GITHUB.replace("    require_grant: true\n", ""))
    spelled_false = Policy.from_text(GITHUB.replace("require_grant: true", "require_grant: false"))
    assert with_grant.fingerprint != without.fingerprint
    assert spelled_false.fingerprint == without.fingerprint
    assert with_grant.to_dict()["rules"][0]["require_grant"] is True
    assert "require_grant" not in without.to_dict()["rules"][0]  # written only when true
    again = Policy.from_dict(with_grant.to_dict())
    assert again.fingerprint == with_grant.fingerprint and again.rules[0].require_grant is True


def test_policies_without_require_grant_keep_their_fingerprint():
    """Written only when true, so no policy recorded before the field changed fingerprint."""
    assert ALLOW_ALL.fingerprint == "sha256:257c1607be2bec0f5f43ba21f8f35675bbd192d1e7ca58ffd108b27c778b3fdd"


def test_explain_says_a_require_grant_rule_denies_an_implicit_grant(tmp_path):
    policy = load(tmp_path, GITHUB)
    decision, steps = explain(policy, call("create_issue", "github", grant=IMPLICIT))
    assert decision.reason_code == "grant_required"
    assert steps[0] == {"rule": "github-needs-grant", "line": 4, "outcome": "decides",
                        "why": "matches, no condition; requires an explicit grant: deny (grant_required)"}
    _, steps = explain(policy, call("create_issue", "github", grant="grant_0123"))
    assert steps[0]["why"] == "matches, no condition; effect allow; explicit grant named"
    assert lint(policy) == []
