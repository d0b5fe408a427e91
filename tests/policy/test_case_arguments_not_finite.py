"""A case with ``arguments: {a: .nan}`` was accepted and ran with a float NaN, though a call's arguments are
JSON (``explain --args`` refuses NaN, and no call the gateway takes can carry one). NaN and ±Infinity
anywhere in ``arguments`` are now refused, naming the value and its line."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize("arguments, line, name, shown", [
    ("{a: .nan}", 3, "call.arguments.a", ".nan"),
    ("\n      a: 1\n      b: [1, {c: -.inf}]", 5, "call.arguments.b[1].c", "-.inf"),
    ("{deep: {x: .inf}}", 3, "call.arguments.deep.x", ".inf"),
])
def test_nan_or_infinity_in_arguments_is_refused(capsys, tmp_path, arguments, line, name, shown):
    cases = f"- call:\n    tool: t\n    arguments: {arguments}\n  expect: {{effect: deny}}\n"
    assert run(capsys, tmp_path, cases) == (
        2, "", f"error: cases.yaml:{line}: '{name}' is {shown}: a call's arguments are JSON, which has no NaN or "
               "Infinity\n")


def test_finite_floats_in_arguments_still_run(capsys, tmp_path):
    code, out, err = run(capsys, tmp_path, "- call: {tool: read, arguments: {a: 1.5, b: [0.0, -2e3]}}\n"
                                           "  expect: {effect: allow, rule: reads}\n")
    assert (code, out, err) == (0, "PASS case 1 (cases.yaml:1)\n1 passed, 0 failed\n".replace(
        "cases.yaml", str(tmp_path / "cases.yaml")), "")
