"""A rule whose ``when`` is an empty or blank string (``when: ''``, a template whose condition came out
empty) was loaded as a rule without a condition: an ``allow`` rule then allowed every call it matched,
the opposite of what a condition is for, and with the fingerprint of a policy that never had one. It is
now refused at load, one line naming the rule and the line, like any condition that does not compile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from policy_helpers import call, load

from sealbox.errors import PolicyLoadError
from sealbox.policy import Policy


@pytest.mark.parametrize("when", ["''", '"   "', '"\\n"'])
def test_an_empty_condition_is_refused_at_load(tmp_path, when):
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, f"""
            version: 1
            rules:
              - id: admins-only
                match: {{tool: drop_table}}
                when: {when}
                effect: allow
        """)
    assert (info.value.line, info.value.problem) == (
        5, "rule 'admins-only': condition is empty: write a CEL expression, or leave 'when' out "
           "for a rule without a condition")


def test_an_empty_condition_in_a_dict_is_refused_too():
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_dict({"version": 1, "rules": [{"id": "r", "when": " ", "effect": "allow"}]})
    assert info.value.problem.startswith("rule 'r': condition is empty")


def test_a_null_condition_is_still_no_condition(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            when: null
            effect: allow
    """)
    assert policy.to_dict()["rules"][0]["when"] is None
    assert policy.evaluate(call(tool="x")).effect == "allow"


def test_policy_check_says_it_in_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nrules:\n  - id: r\n    when: ''\n    effect: allow\n")
    done = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "policy", "check", str(path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: {path}:4: rule 'r': condition is empty: write a CEL expression, or leave "
                           "'when' out for a rule without a condition\n")
