"""A case expecting a rule the policy does not have (``expect: {rule: nosuch}``) was a FAIL saying
"got 'rest'", as though the policy had decided wrongly; it is now a bad cases file (exit 2) naming the rule
and the policy's rules, at the line of ``expect.rule``."""

from __future__ import annotations

from policy_helpers import write

from sealbox.cli.main import main

POLICY = "version: 1\nrules:\n  - id: reads\n    match: {tool: read}\n    effect: allow\n  - id: rest\n    effect: deny\n"


def run(capsys, tmp_path, cases: str) -> tuple[int, str, str]:
    path = write(tmp_path, cases, "cases.yaml")
    try:
        main(["policy", "test", str(write(tmp_path, POLICY)), str(path)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err.replace(str(path), "cases.yaml")


def test_an_expected_rule_the_policy_lacks_is_a_bad_cases_file(capsys, tmp_path):
    assert run(capsys, tmp_path, "- call: {tool: write}\n  expect:\n    effect: deny\n    rule: nosuch\n") == (
        2, "", "error: cases.yaml:4: 'expect.rule' 'nosuch' is not a rule of the policy (its rules: reads, rest)\n")


def test_an_expected_rule_the_policy_has_still_passes_or_fails_as_decided(capsys, tmp_path):
    code, out, err = run(capsys, tmp_path, "- call: {tool: write}\n  expect: {rule: reads}\n"
                                           "- call: {tool: write}\n  expect: {rule: rest}\n"
                                           "- call: {tool: write}\n  expect: {rule: null, effect: deny}\n")
    assert (code, err) == (1, "")
    assert out.splitlines()[-1] == "1 passed, 2 failed"
    assert "  rule: expected 'reads', got 'rest'" in out.splitlines()
