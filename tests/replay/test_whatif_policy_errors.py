"""``sealbox whatif --policy`` listed only the calls whose *effect* would change. A new policy whose
condition raised on a call (division by zero, a missing key, a type error) denies it ``guardrail_error``;
when the recorded decision was a deny too, nothing showed that the new policy could not decide that call
at all: its CEL error was invisible. Every call the new policy denies ``guardrail_error`` is now listed
with its rule and the error, whether or not the effect changes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import sealbox
from sealbox.cli.main import cli
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied
from sealbox.replay.whatif import whatif_policy

OLD = """
version: 1
name: old
rules:
  - id: no-x
    match: {tool: x}
    effect: deny
  - id: rest
    effect: allow
"""

NEW = """
version: 1
name: new
rules:
  - id: ratio
    match: {tool: x}
    when: 'call.arguments.a / call.arguments.b > 1'
    effect: deny
  - id: named
    match: {tool: y}
    when: 'call.arguments.name == "bob"'
    effect: allow
  - id: rest
    effect: allow
"""


@pytest.fixture
def recorded(tmp_path):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with Recorder(store, policy=Policy.from_text(OLD)).run(agent="bot") as run:
        for arguments in ({"a": 4, "b": 0}, {"a": 4, "b": 1}):
            with pytest.raises(ToolDenied):
                run.call_tool("local", "x", arguments, lambda a, b: a)
        run.call_tool("local", "y", {"nom": "bob"}, lambda nom: nom)
        run.call_tool("local", "y", {"name": "bob"}, lambda name: name)
    yield store, path, run.run_id
    store.close()


def test_every_call_the_new_policy_cannot_decide_is_listed_with_its_error(recorded):
    store, _, run_id = recorded
    report = whatif_policy(store, Policy.from_text(NEW), [run_id])
    assert report.evaluated == 4
    assert [(c.step, c.tool, c.before, c.after, c.rule) for c in report.changed] == [
        ("4", "y", "allow", "deny", "named")]
    assert [(e.step, e.tool, e.before, e.rule, e.reason) for e in report.errors] == [
        ("2", "x", "deny", "ratio", "rule 'ratio': condition raised ZeroDivisionError: division by zero in CEL "
                                    "expression"),
        ("4", "y", "allow", "named", "rule 'named': condition raised KeyError: 'name'"),
    ]
    assert report.to_dict()["errors"] == [
        {"run_id": run_id, "step": "2", "call_id": report.errors[0].call_id, "server": "local", "tool": "x",
         "before": "deny", "rule": "ratio",
         "reason": "rule 'ratio': condition raised ZeroDivisionError: division by zero in CEL expression"},
        {"run_id": run_id, "step": "4", "call_id": report.errors[1].call_id, "server": "local", "tool": "y",
         "before": "allow", "rule": "named", "reason": "rule 'named': condition raised KeyError: 'name'"},
    ]


def test_the_cli_shows_them_in_a_table_of_their_own(recorded, tmp_path):
    _, path, run_id = recorded
    (tmp_path / "new.yaml").write_text(NEW)
    result = CliRunner().invoke(cli, ["whatif", "--policy", str(tmp_path / "new.yaml"), run_id, "--store", str(path)],
                                terminal_width=400)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("4 decision(s) in 1 run(s) evaluated again under new (sha256:")
    assert lines[0].endswith("…); 1 would change; the policy could not decide 2 (guardrail_error)")
    table = result.output[result.output.index("Calls the policy could not decide"):]
    assert "division by zero in CEL expression" in table and "KeyError: 'name'" in table
    data = json.loads(CliRunner().invoke(cli, ["whatif", "--policy", str(tmp_path / "new.yaml"), run_id, "--json",
                                               "--store", str(path)]).output)
    assert [(e["step"], e["rule"]) for e in data["errors"]] == [("2", "ratio"), ("4", "named")]


def test_a_policy_that_decides_every_call_lists_no_errors(recorded, tmp_path):
    store, path, run_id = recorded
    report = whatif_policy(store, Policy.from_text(OLD), [run_id])
    assert (report.changed, report.errors, report.to_dict()["errors"]) == ((), (), [])
    (tmp_path / "old.yaml").write_text(OLD)
    result = CliRunner().invoke(cli, ["whatif", "--policy", str(tmp_path / "old.yaml"), run_id, "--store", str(path)])
    assert result.output.splitlines()[0].endswith("…); 0 would change")
    assert "could not decide" not in result.output
