"""A policy (or cases) file holding a control character YAML does not allow (a NUL, a BEL pasted from a
terminal) ended ``sealbox policy check`` with two lines, the second ruamel's ``in "<unicode string>",
position 18``, and no line number. It is now one line naming the line the character is on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sealbox.errors import PolicyLoadError
from sealbox.policy import Policy

SEALBOX = str(Path(sys.executable).parent / "sealbox")


@pytest.mark.parametrize("char, line", [("\x07", 2), ("\x00", 1)])
def test_a_control_character_is_one_error_line_with_its_line(tmp_path, char, line):
    text = "version: 1\nname: a" + char + "b\nrules: []\n" if line == 2 else char + "version: 1\nrules: []\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(path)
    problem = f"invalid YAML: unacceptable character #x{ord(char):04x}: special characters are not allowed"
    assert (info.value.line, info.value.problem) == (line, problem)
    done = subprocess.run([SEALBOX, "policy", "check", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {path}:{line}: {problem}\n")


def test_in_a_cases_file_too(tmp_path):
    (tmp_path / "p.yaml").write_text("version: 1\nrules:\n  - id: r\n    effect: allow\n")
    (tmp_path / "c.yaml").write_text("- name: a\n  call: {tool: x\x07}\n  expect: {effect: allow}\n")
    done = subprocess.run([SEALBOX, "policy", "test", "p.yaml", "c.yaml"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "error: c.yaml:2: invalid YAML: unacceptable character #x0007: special characters are not allowed\n")
