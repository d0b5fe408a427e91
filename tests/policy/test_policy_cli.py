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
    assert proc.stderr.startswith(f"error: {cases}:10: {message}") and len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("now, message", [
    ("notatime", "'call.now' 'notatime' is not an RFC 3339 time (e.g. 2026-01-31T09:00:00Z)"),
    ("5", "'call.now' must be an RFC 3339 time as a string, not int"),
])
def test_subprocess_bad_now_names_the_case_exit_2(tmp_path, now, message):
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {{tool: t, now: {now}}}\n  expect: {{effect: deny}}\n",
                  "cases.yaml")  # fmt: skip
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {cases}:10: {message}\n"


@pytest.mark.parametrize("call, message", [
    ("{tool: 5}", "'call.tool' must be a non-empty string, not int 5"),
    ("{tool: null}", "'call.tool' must be a non-empty string, not NoneType null"),
    ('{tool: ""}', "'call.tool' must be a non-empty string, not str \"\""),
    ("{tool: t, server: [db]}", "'call.server' must be a string, not list [\"db\"]"),
    ("{tool: t, principal: []}", "'call.principal' must be an id (a string) or a mapping, not list []"),
    ("{tool: t, principal: 7}", "'call.principal' must be an id (a string) or a mapping, not int 7"),
    ("{tool: t, usage: [1, 2]}", "'call.usage' must be a mapping, not list [1, 2]"),
    ("{tool: t, run: x}", "'call.run' must be a mapping, not str \"x\""),
    ("{tool: t, redacted: 'no'}", "'call.redacted' must be true or false, not str \"no\""),
])
def test_subprocess_wrongly_typed_call_fields_name_the_case_exit_2(tmp_path, call, message):
    """A call field of the wrong type used to be coerced (tool 5 tested as "5", principal [] as
    nobody, redacted 'no' as true): the case is refused instead, before any result is shown."""
    cases = write(tmp_path, CASES + f"- name: bad\n  call: {call}\n  expect: {{effect: deny}}\n", "cases.yaml")
    proc = sealbox_main("policy", "test", str(write(tmp_path, POLICY)), str(cases))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {cases}:10: {message}\n"


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
