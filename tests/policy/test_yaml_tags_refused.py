"""``match: !!python/object:os.system {}`` loaded as an empty ``match`` (the round-trip loader keeps an unknown
tag on a mapping or a list and builds the plain value anyway), and an empty match matches every call: an
``allow`` rule written so allowed everything. A tagged scalar was refused, a tagged mapping or list was not.
Every tag, on any node of a policy or a cases file, is now refused at load: one error naming it, at its line."""

from __future__ import annotations

import pytest
from policy_helpers import write

from sealbox.cli.main import main
from sealbox.errors import PolicyLoadError
from sealbox.policy import Policy

HINT = "(a tag changes what a value means; write the plain value, without a tag)"


@pytest.mark.parametrize("text, line, tag", [
    ("rules:\n  - id: r\n    effect: allow\n    match: !!python/object:os.system {}\n", 5,
     "!!python/object:os.system"),
    ("rules:\n  - id: r\n    effect: allow\n    match: !!python/object:os.system\n      tool: x\n", 5,
     "!!python/object:os.system"),
    ("rules:\n  - id: r\n    effect: allow\n    match: !anything {tool: x}\n", 5, "!anything"),
    ("rules:\n  - id: r\n    effect: allow\n    match:\n      tool: !foo [a, b]\n", 6, "!foo"),
    ("rules:\n  - !rule\n    id: r\n    effect: allow\n", 3, "!rule"),
    ("rules: !!python/list\n  - id: r\n    effect: allow\n", 2, "!!python/list"),
    ("rules:\n  - id: r\n    effect: !!str allow\n", 4, "!!str"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {labels: {env: !!binary cHJvZA==}}\n", 5, "!!binary"),
    ("rules: !!set {? a}\n", 2, "!!set"),
    ("rules: !!omap [{r: 1}]\n", 2, "!!omap"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {principal: {attributes: {? !k team : x}}}\n", 5, "!k"),
    ("rules:\n  - id: r\n    effect: allow\n    match: &m !m {tool: a}\n  - id: s\n    effect: allow\n"
     "    match: *m\n", 5, "!m"),
])  # fmt: skip
def test_a_tag_anywhere_in_a_policy_is_refused_at_its_line(tmp_path, text, line, tag):
    path = write(tmp_path, "version: 1\n" + text)
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(path)
    assert (info.value.line, info.value.problem) == (line, f"invalid YAML: unsupported tag '{tag}' {HINT}")


def test_a_tagged_whole_document_is_refused(tmp_path):
    path = write(tmp_path, "!policy\nversion: 1\nrules: []\n")
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(path)
    assert (info.value.line, info.value.problem) == (1, f"invalid YAML: unsupported tag '!policy' {HINT}")


def test_the_core_types_written_plainly_or_as_map_and_seq_still_load(tmp_path):
    policy = Policy.load(write(tmp_path, "version: 1\nrules: !!seq\n  - !!map {id: r, effect: allow, "
                                         "match: {tool: [a, b]}}\n"))
    assert [r.id for r in policy.rules] == ["r"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("cases, line, tag", [
    ("- call: !!python/object:os.system {tool: t}\n  expect: {effect: deny}\n", 1, "!!python/object:os.system"),
    ("- call: {tool: t}\n  expect: !e {effect: deny}\n", 2, "!e"),
    ("- call: {tool: t, arguments: {a: !x [1]}}\n  expect: {effect: deny}\n", 1, "!x"),
    ("cases: !c\n  - call: {tool: t}\n    expect: {effect: deny}\n", 1, "!c"),
    ("!top\n- call: {tool: t}\n  expect: {effect: deny}\n", 1, "!top"),
])
def test_a_tag_anywhere_in_a_cases_file_is_one_error_line(tmp_path, capsys, cases, line, tag):
    policy = write(tmp_path, "version: 1\nrules:\n  - id: r\n    effect: allow\n")
    path = write(tmp_path, cases, "cases.yaml")
    assert run(capsys, "policy", "test", str(policy), str(path)) == (
        2, "", f"error: {path}:{line}: invalid YAML: unsupported tag '{tag}' {HINT}\n")


@pytest.mark.parametrize("text, line, tag", [
    # a core scalar tag resolves the value to another type and leaves no trace in the loaded tree: `when: !!null …`
    # loaded as no condition at all, so the allow rule allowed every call
    ("rules:\n  - id: r\n    effect: allow\n    when: !!null call.arguments.q == 'x'\n", 5, "!!null"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {tool: !!int '5'}\n", 5, "!!int"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {tool: !!bool 'true'}\n", 5, "!!bool"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {tool: !!float '1'}\n", 5, "!!float"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {tool: !<tag:yaml.org,2002:str> a}\n", 5, "!!str"),
    ("rules:\n  - id: r\n    effect: allow\n    match: {tool: ! a}\n", 5, "!"),
])  # fmt: skip
def test_a_core_scalar_tag_is_refused_too(tmp_path, text, line, tag):
    path = write(tmp_path, "version: 1\n" + text)
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(path)
    assert (info.value.line, info.value.problem) == (line, f"invalid YAML: unsupported tag '{tag}' {HINT}")
