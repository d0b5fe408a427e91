"""``sealbox policy check|test|explain`` through click's CliRunner and one real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from policy_helpers import write

from sealbox.cli.main import cli
from sealbox.policy import Policy

POLICY = """
version: 1
name: prod-db
rules:
  - id: reads-ok
    match: {server: db, tool: "read_*"}
    when: 'call.arguments.query.matches("(?i)^select")'
    effect: allow
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], expires: 1h}
  - id: never
    match: {server: db, tool: write_query}
    effect: deny
"""

CASES = """
- name: select is allowed
  call: {server: db, tool: read_rows, arguments: {query: SELECT 1}}
  expect: {effect: allow, rule: reads-ok}
- name: delete falls through
  call: {server: db, tool: read_rows, arguments: {query: DELETE FROM t}}
  expect: {effect: deny, reason_code: no_match}
- name: writes need approval
  call: {server: db, tool: write_query, principal: alice}
  expect: {effect: require_approval, rule: writes-need-ops}
"""


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_check_prints_fingerprint_rule_count_and_warnings(tmp_path):
    path = write(tmp_path, POLICY)
    result = invoke("policy", "check", str(path))
    assert result.exit_code == 0
    fp = Policy.load(path).fingerprint
    assert result.stdout == f"ok: {path}: policy 'prod-db', 3 rules\nfingerprint: {fp}\n"
    assert result.stderr == (f"warning: {path}:12: rule 'never' can never match: rule 'writes-need-ops' (line 8) "
                             "matches every call it matches and has no condition\n")  # fmt: skip


def test_check_json(tmp_path):
    path = write(tmp_path, POLICY)
    out = json.loads(invoke("policy", "check", str(path), "--json").stdout)
    assert out["rules"] == 3 and out["name"] == "prod-db"
    assert out["warnings"] == [{"rule": "never", "line": 12, "message": out["warnings"][0]["message"]}]


def test_check_warns_about_a_constant_false_condition(tmp_path):
    path = write(tmp_path, "version: 1\nrules:\n  - id: off\n    when: '1 > 2'\n    effect: allow\n")
    result = invoke("policy", "check", str(path))
    assert result.stderr == f"warning: {path}:3: rule 'off' can never match: its condition is always false\n"


def test_check_of_an_invalid_file_raises_a_load_error_naming_the_line(tmp_path):
    path = write(tmp_path, POLICY.replace("    effect: deny", "    effect: deny\n    weight: 3"))
    result = CliRunner().invoke(cli, ["policy", "check", str(path)])
    assert result.exit_code != 0
    assert str(result.exception) == f"{path}:15: unknown field 'rules[2].weight'"


def test_table_tests_pass(tmp_path):
    result = invoke("policy", "test", str(write(tmp_path, POLICY)), str(write(tmp_path, CASES, "cases.yaml")))
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == "3 passed, 0 failed"
    assert result.stdout.splitlines()[0].startswith("PASS select is allowed (")


@pytest.mark.parametrize("text, message", [
    ("- call: {tool: x}\n  call: {tool: .inf}\n  expect: {effect: allow}\n", '2: invalid YAML: found duplicate key "call"'),
    ("- call: {tool: x\n", "2: invalid YAML: expected ',' or '}', but got '<stream end>'"),
])
def test_a_cases_file_that_is_not_yaml_is_one_error_line_at_its_line(tmp_path, capsys, text, message):
    """It was ruamel's whole report: several lines, no line number in the error line, the value as
    Python writes it ({'tool': inf}) and a link 'To suppress this check see ...'."""
    cases = write(tmp_path, text, "cases.yaml")
    assert run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases)) == (
        2, "", f"error: {cases}:{message}\n")


def test_an_expected_or_decided_null_rule_is_written_null_in_a_failure(tmp_path, capsys):
    """A failed case said "rule: expected None, got 'reads-ok'" (Python's spelling of YAML's null)."""
    cases = write(tmp_path, "- call: {server: db, tool: read_rows, arguments: {query: SELECT 1}}\n"
                            "  expect: {rule: null}\n- call: {tool: other}\n  expect: {rule: reads-ok}\n", "cases.yaml")
    assert run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases)) == (1, (
        f"FAIL case 1 ({cases}:1)\n  rule: expected null, got 'reads-ok'\n"
        f"FAIL case 2 ({cases}:3)\n  rule: expected 'reads-ok', got null\n0 passed, 2 failed\n"), "")


def test_table_tests_fail_with_exit_1(tmp_path):
    cases = write(tmp_path, CASES.replace("expect: {effect: allow, rule: reads-ok}", "expect: {effect: deny}"), "cases.yaml")
    result = invoke("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"FAIL select is allowed ({cases}:1)"
    assert lines[1] == "  effect: expected 'deny', got 'allow'"
    assert lines[-1] == "2 passed, 1 failed"


def test_explain_shows_each_rule_examined(tmp_path):
    path = write(tmp_path, POLICY)
    result = invoke("policy", "explain", str(path), "--server", "db", "--tool", "read_rows",
                    "--args", '{"query": "DELETE"}', "--json")  # fmt: skip
    out = json.loads(result.stdout)
    assert [(s["rule"], s["outcome"]) for s in out["steps"]] == [
        ("reads-ok", "condition_false"), ("writes-need-ops", "not_candidate"), ("never", "not_candidate")]
    assert out["decision"]["reason_code"] == "no_match"
    text = invoke("policy", "explain", str(path), "--tool", "write_query", "--principal", "alice").stdout
    assert text.splitlines()[1] == "decides          writes-need-ops (line 8): matches, no condition; effect require_approval"
    assert text.splitlines()[-1].startswith("decision: require_approval (policy_require_approval) rule=writes-need-ops")


def test_explain_bad_json_is_one_line_error(tmp_path):
    result = CliRunner().invoke(cli, ["policy", "explain", str(write(tmp_path, POLICY)), "--tool", "x", "--args", "{"])
    assert result.exit_code == 2
    assert "--args is not JSON" in result.output


def test_every_policy_command_has_help():
    for name in ("check", "test", "explain"):
        result = invoke("policy", name, "--help")
        assert result.exit_code == 0 and "Usage:" in result.stdout


def test_subprocess_check_error_is_one_line_and_exit_2(tmp_path):
    bad = write(tmp_path, "version: 1\nrules:\n  - id: r\n    effect: no\n")
    proc = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "policy", "check", str(bad)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == f"error: {bad}:4: rules[0].effect: 'no' is not one of allow, deny, require_approval\n"
    good = write(tmp_path, POLICY, "good.yaml")
    proc = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "policy", "check", str(good)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[1] == f"fingerprint: {Policy.load(good).fingerprint}"


def sealbox_main(*args: str) -> subprocess.CompletedProcess:
    """The real ``sealbox`` entry point (``main()``, not click's standalone mode, which CliRunner uses)."""
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *args], capture_output=True, text=True, timeout=60)


def test_subprocess_failing_case_exits_1_also_with_json(tmp_path):
    policy = write(tmp_path, POLICY)
    cases = write(tmp_path, CASES.replace("expect: {effect: allow, rule: reads-ok}", "expect: {effect: deny}"),
                  "cases.yaml")  # fmt: skip
    proc = sealbox_main("policy", "test", str(policy), str(cases))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[-1] == "2 passed, 1 failed" and proc.stderr == ""
    proc = sealbox_main("policy", "test", "--json", str(policy), str(cases))
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["passed"], out["failed"]) == (2, 1)
    assert [r["passed"] for r in out["results"]] == [False, True, True]
    assert out["results"][0]["problems"] == ["effect: expected 'deny', got 'allow'"]


def test_subprocess_passing_cases_exit_0(tmp_path):
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(write(tmp_path, CASES, "cases.yaml")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "3 passed, 0 failed"


@pytest.mark.parametrize("expect, message", [
    ("{effect: maybe}", "'expect.effect' 'maybe' is not one of allow, deny, require_approval"),
    ("{effect: allow, reason_code: nope}", "'expect.reason_code' 'nope' is not one of policy_allow"),
    ("{efect: allow}", "unknown field 'expect.efect' (expect gives effect, rule and/or reason_code)"),
    ("{}", "'expect' is empty: give effect, rule and/or reason_code"),
    ("allow", "'expect' must be a mapping of effect, rule and/or reason_code"),
    ("{rule: [a]}", "'expect.rule' must be a rule id (a string) or null"),
])
def test_subprocess_bad_expect_is_a_bad_cases_file_exit_2(tmp_path, expect, message):
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {{tool: t}}\n  expect: {expect}\n", "cases.yaml")
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2
    assert proc.stdout == ""  # no case is reported: the file is refused whole
    assert proc.stderr.startswith(f"error: {cases}:12: {message}") and len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("expect, message", [
    ("{effect: true}", "'expect.effect' true is not one of allow, deny, require_approval"),
    ("{effect: null}", "'expect.effect' null is not one of allow, deny, require_approval"),
    ("{effect: [allow]}", "'expect.effect' [\"allow\"] is not one of allow, deny, require_approval"),
])
def test_an_expected_effect_that_is_no_string_is_quoted_as_written(tmp_path, expect, message):
    """It was quoted as Python writes it: 'expect.effect' True / None / ['allow'] is not one of ..."""
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {{tool: t}}\n  expect: {expect}\n", "cases.yaml")
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {cases}:12: {message}\n"


@pytest.mark.parametrize("case, message", [
    ("call: {tool: t}\n  expect: {effect: .nan}", "'expect.effect' .nan is not one of allow, deny, require_approval"),
    ("call: {tool: t}\n  expect: {effect: [.inf, -.inf]}",
     "'expect.effect' [.inf, -.inf] is not one of allow, deny, require_approval"),
    ("call: {tool: t}\n  expect: {effect: {a: .nan}}",
     "'expect.effect' {\"a\": .nan} is not one of allow, deny, require_approval"),
    ("call: {tool: t}\n  expect: {reason_code: -.inf}", "'expect.reason_code' -.inf is not one of policy_allow"),
    ("call: {tool: t, principal: [.inf]}\n  expect: {effect: deny}",
     "'call.principal' must be an id (a string) or a mapping, not a list [.inf]"),
    ("call: {tool: t, usage: {tokens_run: [.nan]}}\n  expect: {effect: deny}",
     "'call.usage.tokens_run' must be a number (0 or more), not a list [.nan]"),
])  # fmt: skip
def test_nan_and_infinity_in_a_case_are_quoted_as_yaml_writes_them(tmp_path, capsys, case, message):
    """They were quoted as JSON writes them: 'expect.effect' NaN / [Infinity, -Infinity] is not one of ..."""
    cases = write(tmp_path, CASES + f"- name: bad\n  {case}\n", "cases.yaml")
    code, out, err = run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases))
    line = 12 if message.startswith("'expect") else 11  # the field's own line: call on 11, expect on 12
    assert (code, out) == (2, "") and err.startswith(f"error: {cases}:{line}: {message}") and len(err.splitlines()) == 1


@pytest.mark.parametrize("effect, message", [
    (".inf", "rules[0].effect: .inf is not one of allow, deny, require_approval"),
    ("[.nan]", "rules[0].effect: [.nan] is not one of allow, deny, require_approval"),
])
def test_nan_and_infinity_in_the_policy_are_quoted_as_yaml_writes_them(tmp_path, capsys, effect, message):
    """The policy's own errors said inf and [NaN]."""
    policy = write(tmp_path, f"version: 1\nrules:\n  - id: r\n    effect: {effect}\n")
    cases = write(tmp_path, CASES, "cases.yaml")
    assert run_main(capsys, "policy", "test", str(policy), str(cases)) == (2, "", f"error: {policy}:4: {message}\n")


@pytest.mark.parametrize("now, message", [
    ("notatime", "'call.now' 'notatime' is not an RFC 3339 time (e.g. 2026-01-31T09:00:00Z)"),
    ("5", "'call.now' must be an RFC 3339 time as a string, not the number 5"),
])
def test_subprocess_bad_now_names_the_case_exit_2(tmp_path, now, message):
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {{tool: t, now: {now}}}\n  expect: {{effect: deny}}\n",
                  "cases.yaml")  # fmt: skip
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {cases}:11: {message}\n"


@pytest.mark.parametrize("call, message", [
    ("{tool: 5}", "'call.tool' must be a non-empty string, not the number 5"),
    ("{tool: null}", "'call.tool' must be a non-empty string, not null"),
    ('{tool: ""}', "'call.tool' must be a non-empty string, not the string \"\""),
    ("{tool: t, server: [db]}", "'call.server' must be a string, not a list [\"db\"]"),
    ("{tool: t, principal: []}", "'call.principal' must be an id (a string) or a mapping, not a list []"),
    ("{tool: t, principal: 7}", "'call.principal' must be an id (a string) or a mapping, not the number 7"),
    ("{tool: t, usage: [1, 2]}", "'call.usage' must be a mapping, not a list [1, 2]"),
    ("{tool: t, run: x}", "'call.run' must be a mapping, not the string \"x\""),
    ("{tool: t, redacted: 'no'}", "'call.redacted' must be true or false, not the string \"no\""),
])
def test_subprocess_wrongly_typed_call_fields_name_the_case_exit_2(tmp_path, call, message):
    """A call field of the wrong type used to be coerced (tool 5 tested as "5", principal [] as
    nobody, redacted 'no' as true): the case is refused instead, before any result is shown."""
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {call}\n  expect: {{effect: deny}}\n", "cases.yaml")
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {cases}:11: {message}\n"


@pytest.mark.parametrize("text", ["[]\n", "cases: []\n"])
def test_subprocess_a_cases_file_without_cases_is_refused(tmp_path, text):
    cases = write(tmp_path, text, "cases.yaml")
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "the cases file holds no case" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_call_now_accepts_rfc3339_and_yaml_timestamps(tmp_path):
    policy = write(tmp_path, """
        version: 1
        name: hours
        rules:
          - id: day
            match: {tool: t}
            when: 'now.getHours() >= 9'
            effect: allow
        """)
    cases = write(tmp_path, """
        - call: {tool: t, now: "2026-01-31T10:00:00Z"}
          expect: {effect: allow, rule: day}
        - call: {tool: t, now: 2026-01-31T03:00:00Z}
          expect: {effect: deny, reason_code: no_match}
        """, "cases.yaml")
    proc = sealbox_main("policy", "test", str(policy), str(cases))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "2 passed, 0 failed"


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """The real entry point (``main()``: errors as one ``error:`` line), in this process."""
    from sealbox.cli.main import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


FLOAT_LIMITS = [("limits: {cost: {per_run: V}}", "limits.cost.per_run"),
                ("limits: {cost: {per_day: V}}", "limits.cost.per_day"),
                ("limits: {max_run_seconds: V}", "limits.max_run_seconds"),
                ('prices: {"a/b": {input: V, output: 1}}', "prices.a/b.input"),
                ('prices: {"a/b": {input: 1, output: V}}', "prices.a/b.output")]  # fmt: skip


@pytest.mark.parametrize(("line", "field"), FLOAT_LIMITS)
@pytest.mark.parametrize(("value", "problem"), [(".nan", ".nan is not a finite number"), (".inf", ".inf is not a finite number"),
                                                ("-.inf", "-.inf is not a finite number"),
                                                ("-1", "-1 is less than the minimum of 0")])  # fmt: skip
def test_check_refuses_a_non_finite_or_negative_float_limit(tmp_path, capsys, line, field, value, problem):
    path = write(tmp_path, "version: 1\n" + line.replace("V", value) + "\nrules: [{id: a, effect: allow}]\n")
    assert run_main(capsys, "policy", "check", str(path)) == (2, "", f"error: {path}:2: {field}: {problem}\n")


def test_subprocess_nan_limits_no_longer_fail_open(tmp_path):
    """The user's report: check said ok and test allowed a call a million over budget."""
    policy = write(tmp_path, "version: 1\nlimits: {cost: {per_run: .nan}, max_run_seconds: .nan}\n"
                             "rules: [{id: a, effect: allow}]\n")  # fmt: skip
    proc = sealbox_main("policy", "check", str(policy))
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {policy}:2: limits.cost.per_run: .nan is not a finite number\n")
    cases = write(tmp_path, "- call: {tool: t, usage: {cost_run: 1000000}}\n  expect: {effect: deny}\n", "cases.yaml")
    proc = sealbox_main("policy", "test", str(policy), str(cases))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: {policy}:2: limits.cost.per_run: .nan is not a finite number\n"


def test_check_zero_limits_are_ok(tmp_path, capsys):
    path = write(tmp_path, "version: 1\nlimits: {cost: {per_run: 0}, max_run_seconds: 0}\nrules: [{id: a, effect: allow}]\n")
    code, out, err = run_main(capsys, "policy", "check", str(path))
    assert (code, out.splitlines()[0], err) == (0, f"ok: {path}: policy 'policy', 1 rule", "")


@pytest.mark.parametrize("expires", ["-5", "0", "1.5"])
def test_check_bad_expires_says_what_is_accepted(tmp_path, capsys, expires):
    path = write(tmp_path, "version: 1\nrules:\n  - id: r\n    effect: require_approval\n"
                           f"    approval: {{groups: [ops], expires: {expires}}}\n")  # fmt: skip
    assert run_main(capsys, "policy", "check", str(path)) == (
        2, "", f"error: {path}:5: rules[0].approval.expires must be a positive whole number of seconds or a "
               f"duration like 30s, 15m, 1h, 2d, not {expires}\n")  # fmt: skip


@pytest.mark.parametrize(("when", "problem"), [
    ('"1"', "condition is always the int 1, never true or false"),
    ("'\"yes\"'", 'condition is always the string "yes", never true or false'),
])  # fmt: skip
def test_check_refuses_a_condition_that_is_never_a_bool(tmp_path, capsys, when, problem):
    path = write(tmp_path, f"version: 1\nrules:\n  - id: r\n    when: {when}\n    effect: allow\n")
    assert run_main(capsys, "policy", "check", str(path)) == (
        2, "", f"error: {path}:4: rule 'r': {problem}: every call it reaches would be denied with guardrail_error\n")


GROUPS = "version: 1\nrules:\n  - id: o\n    match: {principal: {groups: [o]}}\n    effect: allow\n"


@pytest.mark.parametrize(("principal", "message"), [
    ('{"id": "a", "groups": "ops"}', "principal a: groups must be a list of group names (strings), got 'ops'"),
    ('{"id": "a", "groups": ["o", 5]}', "principal a: groups must be a list of group names (strings), got ['o', 5]"),
    ('{"groups": ["o"]}', "principal id must be a non-empty string, got None"),
    ('{"id": 5}', "principal id must be a non-empty string, got 5"),
    ("", "principal id must be a non-empty string, got ''"),
    ('{"id": "a", "role": 5}', "principal a: role must be a string or null, got int"),
    ('{"id": "a", "attributes": [1]}', "principal a: attributes must be a dict, got list"),
    ('{"id": "a", "group": ["o"]}', "unknown field 'principal.group' (a principal has id, role, groups, attributes)"),
])  # fmt: skip
def test_explain_principal_is_checked_as_the_recorder_checks_it(tmp_path, capsys, principal, message):
    """groups "ops" used to be read as the groups o, p, s (so a rule for group o matched)."""
    path = write(tmp_path, GROUPS)
    assert run_main(capsys, "policy", "explain", str(path), "--tool", "t", "--principal", principal) == (
        2, "", f"error: --principal: {message}\n")


def test_explain_a_valid_principal_mapping_still_matches(tmp_path, capsys):
    path = write(tmp_path, GROUPS)
    code, out, _ = run_main(capsys, "policy", "explain", str(path), "--tool", "t",
                            "--principal", '{"id": "a", "role": null, "groups": ["o"], "attributes": {}}')  # fmt: skip
    assert (code, out.splitlines()[-1]) == (0, "decision: allow (policy_allow) rule=o: rule 'o' allows the call")


@pytest.mark.parametrize(("args", "shown"), [("[1]", "a list [1]"), ('"s"', 'the string "s"'), ("null", "null"),
                                             ("5", "the number 5")])  # fmt: skip
def test_explain_args_must_be_a_json_object(tmp_path, capsys, args, shown):
    path = write(tmp_path, GROUPS)
    assert run_main(capsys, "policy", "explain", str(path), "--tool", "t", "--args", args) == (
        2, "", f"error: --args must be a JSON object, not {shown}\n")


def test_explain_empty_tool_is_refused(tmp_path, capsys):
    assert run_main(capsys, "policy", "explain", str(write(tmp_path, GROUPS)), "--tool", "") == (
        2, "", "error: --tool must be a non-empty tool name\n")


@pytest.mark.parametrize(("call", "message"), [
    ("{tool: t, principal: {id: a, groups: ops}}", "principal a: groups must be a list of group names (strings), got 'ops'"),
    ("{tool: t, principal: {groups: [o]}}", "principal id must be a non-empty string, got None"),
    ("{tool: t, principal: ''}", "principal id must be a non-empty string, got ''"),
    ("{tool: t, principal: {id: a, role: [x]}}", "principal a: role must be a string or null, got list"),
    ("{tool: t, principal: {id: a, attributes: x}}", "principal a: attributes must be a dict, got str"),
    ("{tool: t, principal: {id: a, grups: [o]}}",
     "unknown field 'call.principal.grups' (a principal has id, role, groups, attributes)"),
    ("{tool: t, arguments: [1, 2]}", "'call.arguments' must be a mapping, not a list [1, 2]"),
    ("{tool: t, arguments: x}", "'call.arguments' must be a mapping, not the string \"x\""),
    ("{tool: t, arguments: null}", "'call.arguments' must be a mapping, not null"),
])  # fmt: skip
def test_case_principal_and_arguments_are_checked(tmp_path, capsys, call, message):
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {call}\n  expect: {{effect: deny}}\n", "cases.yaml")
    assert run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases)) == (
        2, "", f"error: {cases}:11: {message}\n")


def test_case_principal_mapping_with_null_role_matches_its_groups(tmp_path, capsys):
    cases = write(tmp_path, "- call: {tool: t, principal: {id: a, role: null, groups: [o]}}\n"
                            "  expect: {effect: allow, rule: o}\n", "cases.yaml")  # fmt: skip
    code, out, err = run_main(capsys, "policy", "test", str(write(tmp_path, GROUPS)), str(cases))
    assert (code, out.splitlines()[-1], err) == (0, "1 passed, 0 failed", "")


@pytest.mark.parametrize("call, message", [
    ("{tool: t, run: {labels: 5}}", "'call.run.labels' must be a mapping of strings, not the number 5"),
    ("{tool: t, run: {labels: {env: 1}}}", "'call.run.labels' must be a mapping of strings, not a mapping {\"env\": 1}"),
    ("{tool: t, run: {elapsed_s: abc}}", "'call.run.elapsed_s' must be a number of seconds (0 or more), not the string \"abc\""),
    ("{tool: t, run: {elapsed_s: -1}}", "'call.run.elapsed_s' must be a number of seconds (0 or more), not the number -1"),
    ("{tool: t, run: {elapsed_s: .nan}}", "'call.run.elapsed_s' must be a number of seconds (0 or more), not the number .nan"),
    ("{tool: t, run: {started_at: yesterday}}",
     "'call.run.started_at' must be an RFC 3339 time as a string, not the string \"yesterday\""),
    ("{tool: t, run: {lables: {}}}", "unknown field 'call.run.lables' (it has id, labels, started_at, elapsed_s)"),
    ("{tool: t, agent: {name: 5}}", "'call.agent.name' must be a string, not the number 5"),
    ("{tool: t, agent: {attributes: [x]}}", "'call.agent.attributes' must be a mapping, not a list [\"x\"]"),
    ("{tool: t, agent: {nmae: bot}}", "unknown field 'call.agent.nmae' (it has name, attributes)"),
    ("{tool: t, usage: {tokens_run: lots}}", "'call.usage.tokens_run' must be a number (0 or more), not the string \"lots\""),
    ("{tool: t, usage: {tokens_run: true}}", "'call.usage.tokens_run' must be a number (0 or more), not true"),
    ("{tool: t, usage: {tokens: 5}}", "unknown usage counter 'call.usage.tokens' (counters: tool_calls_run, "
                                      "calls_minute_agent, calls_minute_tool, tokens_run, tokens_day, cost_run, cost_day)"),
])  # fmt: skip
def test_case_agent_run_and_usage_fields_are_checked(tmp_path, capsys, call, message):
    """Such cases used to be evaluated as written and end as a guardrail_error deny, which a case
    expecting a deny took for a pass (break test of 2026-12-02)."""
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {call}\n  expect: {{effect: deny}}\n", "cases.yaml")
    assert run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases)) == (
        2, "", f"error: {cases}:11: {message}\n")


def test_well_formed_agent_run_and_usage_fields_are_accepted(tmp_path, capsys):
    cases = write(tmp_path, "- call: {tool: t, agent: {name: bot, attributes: {team: a}}, run: {id: r1, labels: "
                            "{env: prod}, started_at: '2026-01-31T09:00:00Z', elapsed_s: 1.5}, usage: {tokens_run: 10, "
                            "cost_day: 0.5}}\n  expect: {effect: deny}\n", "cases.yaml")
    code, out, err = run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert (code, err) == (0, ""), out


GRANTED = """
version: 1
rules:
  - id: github-needs-grant
    match: {server: github}
    require_grant: true
    effect: allow
  - id: rest
    effect: allow
"""

GRANT_CASES = """
- name: no grant named is implicit and denied
  call: {server: github, tool: create_issue, principal: agent:bot}
  expect: {effect: deny, reason_code: grant_required, rule: github-needs-grant}
- name: the implicit grant spelled out is the same
  call: {server: github, tool: create_issue, principal: agent:bot, grant: "implicit:agent:bot"}
  expect: {effect: deny, reason_code: grant_required, rule: github-needs-grant}
- name: an explicit grant is allowed (its validity is the recorder's check)
  call: {server: github, tool: create_issue, principal: agent:bot, grant: grant_0123}
  expect: {effect: allow, reason_code: policy_allow, rule: github-needs-grant}
- name: no principal and no grant is a grant not known
  call: {server: github, tool: create_issue}
  expect: {effect: deny, reason_code: guardrail_error, rule: github-needs-grant}
"""


def test_policy_test_cases_give_the_calls_grant(tmp_path, capsys):
    cases = write(tmp_path, GRANT_CASES, "cases.yaml")
    code, out, err = run_main(capsys, "policy", "test", str(write(tmp_path, GRANTED)), str(cases), "--json")
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert (result["passed"], result["failed"]) == (4, 0)
    assert [r["decision"]["reason_code"] for r in result["results"]] == [
        "grant_required", "grant_required", "policy_allow", "guardrail_error"]


@pytest.mark.parametrize(("call", "message"), [
    ("{tool: t, principal: a, grant: 5}",
     "'call.grant' must be a grant id or 'implicit:<principal id>' (a non-empty string), not the number 5"),
    ("{tool: t, principal: a, grant: ''}",
     "'call.grant' must be a grant id or 'implicit:<principal id>' (a non-empty string), not the string \"\""),
    ("{tool: t, principal: a, grant: 'implicit:b'}",
     "'call.grant' 'implicit:b' is not this call's implicit grant: it may name only 'implicit:a', or an access grant id"),
    ("{tool: t, grant: 'implicit:b'}",
     "'call.grant' 'implicit:b' is not this call's implicit grant: it may name none (the case gives no principal), "
     "or an access grant id"),
])  # fmt: skip
def test_case_grant_is_checked_as_the_recorder_checks_it(tmp_path, capsys, call, message):
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {call}\n  expect: {{effect: deny}}\n", "cases.yaml")
    assert run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases)) == (
        2, "", f"error: {cases}:11: {message}\n")


def test_check_refuses_a_wrongly_typed_require_grant_with_one_line(tmp_path, capsys):
    path = write(tmp_path, GRANTED.replace("require_grant: true", "require_grant: 'yes'"))
    assert run_main(capsys, "policy", "check", str(path)) == (
        2, "", f"error: {path}:5: rules[0].require_grant must be true or false, not 'yes'\n")


def test_explain_takes_the_calls_grant(tmp_path, capsys):
    path = str(write(tmp_path, GRANTED))
    base = ("policy", "explain", path, "--server", "github", "--tool", "create_issue", "--principal", "agent:bot")
    code, out, _ = run_main(capsys, *base, "--json")
    assert (code, json.loads(out)["decision"]["reason_code"]) == (0, "grant_required")
    code, out, _ = run_main(capsys, *base, "--grant", "grant_0123", "--json")
    assert (code, json.loads(out)["decision"]["rule"], json.loads(out)["decision"]["effect"]) == (
        0, "github-needs-grant", "allow")


@pytest.mark.parametrize("extra, field", [("expetc: {rule: nope}", "expetc"), ("note: why", "note")])
def test_subprocess_unknown_case_field_is_a_bad_cases_file_exit_2(tmp_path, extra, field):
    # Regression (input: a misspelt case key beside a valid expect): the key was ignored, so the
    # expectation written under it was never checked and the case passed
    cases = write(tmp_path, CASES + f"- name: typo\n  call: {{tool: t}}\n  expect: {{effect: deny}}\n  {extra}\n",
                  "cases.yaml")
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: {cases}:13: unknown field '{field}' (a case has name, call, expect)\n"


@pytest.mark.parametrize("case, message", [
    ("- name: typo\n  call: {tool: t}\n  expext: {effect: deny}\n",
     "unknown field 'expext' (a case has name, call, expect)"),
    ("- name: typo\n  cal: {tool: t}\n  expect: {effect: deny}\n",
     "unknown field 'cal' (a case has name, call, expect)"),
    ("- name: short\n  call: {tool: t}\n", "a case needs 'call' and 'expect'"),
])
def test_a_misspelt_expect_or_call_is_named_as_the_unknown_field(tmp_path, capsys, case, message):
    # docs/policy.md: "any other field (a misspelt `expect`) is refused, FILE:LINE: unknown field …".
    # A case whose only `expect` was misspelt was answered "a case needs 'call' and 'expect'", which
    # does not point at the typo; a case missing one without a misspelling still gets that line.
    cases = write(tmp_path, case, "cases.yaml")
    line = 2 if "cal:" in case else 3 if "expext" in case else 1  # the unknown field's own line
    assert run_main(capsys, "policy", "test", str(write(tmp_path, POLICY)), str(cases)) == (
        2, "", f"error: {cases}:{line}: {message}\n")


def test_explain_reads_a_tool_given_as_server_slash_tool_as_listings_print_it(tmp_path, capsys):
    """`--tool db/write_query` (as `sealbox calls` and `runs show` print a call, and as `calls --tool` takes
    it) was explained as a call to a tool named 'db/write_query' on no server: every rule 'not_candidate',
    `decision: deny (no_match)`, where the policy sends that call for approval. Without --server it is now
    SERVER/TOOL, said on stderr; --server (even empty) keeps the tool's name as given."""
    path = str(write(tmp_path, POLICY))
    code, out, err = run_main(capsys, "policy", "explain", path, "--tool", "db/write_query", "--principal", "alice")
    assert code == 0
    assert err == ("note: --tool 'db/write_query' read as --server db --tool write_query (SERVER/TOOL, as listings "
                   "print a call); give --server to name a tool whose own name holds a '/'\n")
    assert out.splitlines()[-1] == ("decision: require_approval (policy_require_approval) rule=writes-need-ops: "
                                    "rule 'writes-need-ops' requires approval for the call")
    code, out, err = run_main(capsys, "policy", "explain", path, "--server", "", "--tool", "db/write_query",
                              "--principal", "alice")
    assert (code, err) == (0, "") and out.splitlines()[-1].startswith("decision: deny (no_match) rule=None")
