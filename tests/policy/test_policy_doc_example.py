"""docs/policy.md's example policy and its example cases file, pasted as written into files and run
through ``sealbox policy test`` / ``explain``. The example's own case ("select is allowed", principal
alice) failed against the example policy (its ``reads-ok`` rule asks for a ``svc-*`` agent principal in
a group with ``team: data``, a ``support-*`` agent and ``env: prod`` labels): exit 1, ``FAIL select is
allowed``. And its ``big-query`` rule, matching every call, read ``call.arguments.query`` unguarded: a
call without a ``query`` argument (every ``github`` call) raised ``KeyError`` in it and was denied
``guardrail_error``, so the ``github-needs-grant`` rule shown below it could never decide a call."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from sealbox.cli.main import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"


def _blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _files(tmp_path: Path) -> tuple[str, str]:
    blocks = _blocks()
    policy = next(b for b in blocks if b.startswith("version: 1"))
    cases = next(b for b in blocks if b.startswith("- name:"))
    (tmp_path / "policy.yaml").write_text(policy, encoding="utf-8")
    (tmp_path / "cases.yaml").write_text(cases, encoding="utf-8")
    return str(tmp_path / "policy.yaml"), str(tmp_path / "cases.yaml")


def test_the_doc_example_cases_pass_against_the_doc_example_policy(tmp_path):
    policy, cases = _files(tmp_path)
    result = CliRunner().invoke(cli, ["policy", "test", policy, cases])
    assert (result.exit_code, result.output) == (0, f"PASS select is allowed ({cases}:1)\n1 passed, 0 failed\n")


def test_a_github_call_with_a_grant_reaches_the_doc_example_grant_rule(tmp_path):
    policy, _ = _files(tmp_path)
    result = CliRunner().invoke(cli, ["policy", "explain", policy, "--server", "github", "--tool", "create_issue",
                                      "--args", '{"title": "t"}', "--principal", "agent:deploy-bot",
                                      "--grant", "grant_0123"])
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == (
        "decision: allow (policy_allow) rule=github-needs-grant: rule 'github-needs-grant' allows the call")
