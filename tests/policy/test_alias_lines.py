"""A rule repeated through an alias (``- &r {...}`` then ``- *r``) was reported as a duplicate rule id at the
anchor's line: the round-trip tree gives an aliased list item, and every key in it, the anchor's line. It is
now reported at the alias, where the repeat is written; the anchored rule keeps its own lines."""

from __future__ import annotations

import pytest
from policy_helpers import write

from sealbox.errors import PolicyLoadError
from sealbox.policy import Policy


@pytest.mark.parametrize("text, line", [
    ("rules:\n  - &r {id: a, effect: allow}\n  - id: b\n    effect: deny\n  - *r\n", 6),
    ("rules:\n  - &r\n    id: a\n    effect: allow\n  - id: b\n    effect: deny\n\n  - *r\n", 9),
    ("rules: [&r {id: a, effect: allow},\n  {id: b, effect: deny},\n  *r]\n", 4),
])
def test_a_duplicate_rule_id_through_an_alias_is_reported_at_the_alias(tmp_path, text, line):
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(write(tmp_path, "version: 1\n" + text))
    assert (info.value.line, info.value.problem) == (line, "duplicate rule id 'a'")


def test_a_mistake_inside_an_aliased_rule_is_reported_at_the_alias_too(tmp_path):
    text = ("version: 1\nrules:\n  - id: a\n    effect: allow\n    match: &m {tool: x}\n"
            "  - id: b\n    effect: allow\n    match: *m\n  - id: a\n    effect: deny\n")
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(write(tmp_path, text))
    assert (info.value.line, info.value.problem) == (9, "duplicate rule id 'a'")


def test_aliases_of_shared_values_still_load(tmp_path):
    policy = Policy.load(write(tmp_path, "version: 1\nrules:\n  - id: a\n    match: {tool: &t [x, y]}\n"
                                         "    effect: allow\n  - id: b\n    match: {tool: *t}\n    effect: deny\n"))
    assert [(r.id, r.line) for r in policy.rules] == [("a", 3), ("b", 6)]
