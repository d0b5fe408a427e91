"""Loading policy files: YAML 1.2, schema, errors with lines, fingerprints."""

from __future__ import annotations

import pytest
from policy_helpers import call, load, write

from sealbox.errors import PolicyLoadError
from sealbox.policy import ALLOW_ALL, Policy

BASE = """
version: 1
name: prod-db
rules:
  - id: reads-ok
    match: {server: db, tool: "read_*"}
    effect: allow
"""


def load_error(tmp_path, text) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, text)
    return info.value


def test_yaml_11_no_stays_a_string_in_a_tool_match(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            match: {tool: no, server: on}
            effect: allow
    """)
    assert policy.to_dict()["rules"][0]["match"]["tool"] == ["no"]
    assert policy.to_dict()["rules"][0]["match"]["server"] == ["on"]
    assert policy.evaluate(call(tool="no", server="on")).rule == "r"
    assert policy.evaluate(call(tool="false", server="on")).reason_code == "no_match"


@pytest.mark.parametrize("word", ["no", "y", "on", "off", "yes"])
def test_yaml_11_booleans_as_effect_are_errors_naming_the_line(tmp_path, word):
    err = load_error(tmp_path, f"""
        version: 1
        rules:
          - id: r
            effect: {word}
    """)
    assert err.line == 4
    assert err.problem == f"rules[0].effect: '{word}' is not one of allow, deny, require_approval"


def test_yaml_11_directive_turning_no_into_false_is_rejected_by_the_schema(tmp_path):
    err = load_error(tmp_path, """
        %YAML 1.1
        ---
        version: 1
        rules:
          - id: r
            match: {tool: no}
            effect: allow
    """)
    assert err.line == 6
    assert err.problem == "rules[0].match.tool: False is not a string or a list"


def test_unknown_field_is_an_error_naming_its_line(tmp_path):
    err = load_error(tmp_path, BASE + "    priority: 3\n")
    assert (err.line, err.problem) == (7, "unknown field 'rules[0].priority'")
    assert str(err) == f"{tmp_path / 'policy.yaml'}:7: unknown field 'rules[0].priority'"


def test_unknown_top_level_field(tmp_path):
    err = load_error(tmp_path, BASE + "defaults: allow\n")
    assert (err.line, err.problem) == (7, "unknown field 'defaults'")


def test_default_allow_is_rejected(tmp_path):
    err = load_error(tmp_path, BASE.replace("name: prod-db", "name: p\ndefault: allow"))
    assert err.line == 3
    assert "default" in err.problem


def test_invalid_yaml_names_the_line(tmp_path):
    err = load_error(tmp_path, "version: 1\nrules: [\n  {id: a\nname: x\n")
    assert err.line == 4
    assert err.problem.startswith("invalid YAML:")


def test_duplicate_key_names_the_second_line(tmp_path):
    err = load_error(tmp_path, "version: 1\nrules: []\nrules: []\n")
    assert (err.line, err.problem) == (3, 'invalid YAML: found duplicate key "rules"')


def test_missing_file(tmp_path):
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(tmp_path / "nope.yaml")
    assert (info.value.line, info.value.problem) == (None, "file not found")


def test_non_compiling_condition_names_the_when_line(tmp_path):
    err = load_error(tmp_path, BASE + "    when: 'call.arguments.q =='\n")
    assert err.line == 7
    assert err.problem.startswith("rule 'reads-ok': condition does not compile:")


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        ("secrets.x == 1", "condition reads unknown variable 'secrets'"),
        ("shell(call.tool)", "condition calls unknown function 'shell'"),
        ("call.arguments.rows.all(r, r.cols.all(c, c > 0))", "condition nests comprehension macros 2 deep, above the limit of 1"),
        ('call.tool.matches("(")', 'condition has an invalid regular expression "("'),
    ],
)
def test_conditions_rejected_at_load(tmp_path, when, problem):
    err = load_error(tmp_path, BASE + f"    when: '{when}'\n")
    assert err.line == 7
    assert err.problem.startswith(f"rule 'reads-ok': {problem}")


def test_nested_macros_are_accepted_when_expensive(tmp_path):
    policy = load(tmp_path, BASE + "    when: 'call.arguments.rows.all(r, r.cols.all(c, c > 0))'\n    expensive: true\n")
    assert policy.rules[0].condition.expensive is True


def test_duplicate_rule_id(tmp_path):
    err = load_error(tmp_path, BASE + "  - id: reads-ok\n    effect: deny\n")
    assert (err.line, err.problem) == (7, "duplicate rule id 'reads-ok'")


def test_require_approval_needs_an_approval_section(tmp_path):
    err = load_error(tmp_path, BASE.replace("effect: allow", "effect: require_approval"))
    assert (err.line, err.problem) == (6, "rule 'reads-ok': require_approval needs an 'approval' section")


def test_bad_duration(tmp_path):
    err = load_error(tmp_path, BASE.replace("effect: allow", "effect: require_approval\n    approval: {groups: [ops], expires: 1w}"))
    assert err.line == 7
    assert err.problem == "rules[0].approval.expires: '1w' is not a duration (seconds, or a number followed by s, m, h or d)"


def test_fingerprint_ignores_comments_key_order_and_omitted_defaults(tmp_path):
    a = load(tmp_path, BASE)
    b = Policy.from_text("""
# the same policy, spelled differently
rules:
  - effect: allow          # allow reads
    match: {tool: ["read_*"], server: db, principal: {}}
    id: reads-ok
    expensive: false
name: prod-db
default: deny
version: 1
evaluation: {timeout_ms: 50}
limits: {tokens: {per_run: null}}
""")
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint.startswith("sha256:") and len(a.fingerprint) == 71
    assert Policy.from_dict(a.to_dict()).fingerprint == a.fingerprint


def test_fingerprint_changes_with_a_rule(tmp_path):
    a = load(tmp_path, BASE)
    b = Policy.from_text(BASE.replace("read_*", "read_rows"))
    assert a.fingerprint != b.fingerprint


def test_normalized_form_fills_defaults(tmp_path):
    d = load(tmp_path, BASE).to_dict()
    assert d["rules"][0] == {
        "id": "reads-ok", "description": "", "effect": "allow", "when": None, "expensive": False, "approval": None,
        "match": {"server": ["db"], "tool": ["read_*"], "principal": {}, "agent": {}, "labels": {}},
    }  # fmt: skip
    assert d["evaluation"] == {"timeout_ms": 50, "max_input_bytes": 65536}
    assert d["default"] == "deny"
    assert d["limits"]["cost"] == {"per_run": None, "per_day": None, "currency": "USD"}


def test_allow_all_is_explicit_and_fingerprinted():
    assert ALLOW_ALL.name == "ALLOW_ALL"
    assert [r.id for r in ALLOW_ALL.rules] == ["allow-all"]
    assert ALLOW_ALL.fingerprint == Policy.from_dict(ALLOW_ALL.to_dict()).fingerprint
    d = ALLOW_ALL.evaluate(call(tool="anything", server="anywhere"))
    assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "allow-all")
