"""``sealbox policy test`` reported every mistake in a case at the case's first line, not the field's
(``expect.effect`` written on line 4 was reported at line 1): the cases were read with no line map for
their fields. Each is now reported at the line of the field that holds it."""

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


@pytest.mark.parametrize("cases, message", [
    ("- name: bad\n  call: {tool: t}\n  expect:\n    effect: maybe\n",
     "4: 'expect.effect' 'maybe' is not one of allow, deny, require_approval"),
    ("- name: bad\n  call: {tool: t}\n  expect:\n    effect: deny\n    reason_code: nope\n",
     "5: 'expect.reason_code' 'nope' is not one of policy_allow"),
    ("- name: bad\n  call:\n    tool: t\n    principal:\n      id: a\n      grups: [o]\n  expect: {effect: deny}\n",
     "6: unknown field 'call.principal.grups' (a principal has id, role, groups, attributes)"),
    ("- name: bad\n  call:\n    tool: t\n    run:\n      id: r\n      elapsed_s: -1\n  expect: {effect: deny}\n",
     "6: 'call.run.elapsed_s' must be a number of seconds (0 or more), not the number -1"),
    ("- name: bad\n  call:\n    tool: t\n    usage:\n      tokens_run: 1\n      cost_run: x\n  expect: {effect: deny}\n",
     "6: 'call.usage.cost_run' must be a number (0 or more), not the string \"x\""),
    ("- name: bad\n  call:\n    tool: t\n\n    now: nope\n  expect: {effect: deny}\n",
     "5: 'call.now' 'nope' is not an RFC 3339 time (e.g. 2026-01-31T09:00:00Z)"),
])  # fmt: skip
def test_a_mistake_is_reported_at_the_line_of_its_field(capsys, tmp_path, cases, message):
    code, out, err = run(capsys, tmp_path, cases)
    assert (code, out) == (2, "") and err.startswith(f"error: cases.yaml:{message}") and len(err.splitlines()) == 1
