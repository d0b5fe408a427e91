"""``sealbox policy check``: a rule shadowed by a wider earlier glob is reported, and only then.

The globs are ``fnmatch`` patterns (case-sensitive): ``*``, ``?``, ``[seq]``, ``[!seq]``, no
escape character. A false warning is worse than a missed one, so the subsumption check only
says "covered" when it can show it; a property test compares it with fnmatch itself.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import random
import re

import pytest
from click.testing import CliRunner
from policy_helpers import write

from sealbox.cli.main import cli
from sealbox.policy import Policy
from sealbox.policy.analysis import lint
from sealbox.policy.globs import glob_covers


@pytest.mark.parametrize("wide, narrow", [
    ("db__*", "db__read_*"),
    ("db__*", "db__read_?"),
    ("db_?", "db_x"),
    ("db_?", "db_[xy]"),
    ("*", "anything*"),
    ("**", "a*"),
    ("*_query", "read_*_query"),
    ("*x*", "*x*x*"),
    ("*?", "?*"),                 # the same language, spelt two ways
    ("??*", "?*?"),
    ("db_[a-z]*", "db_[a-c]x*"),
    ("db_[!a]*", "db_[b-z]*"),
    ("x[!a]", "x[b]"),
    ("a?c", "a[b]c"),
    ("[]]", "]"),                 # "]" first in a class is a member
    ("a\\*", "a\\x"),             # a backslash is a literal backslash, not an escape
    ("a[*", "a[x"),               # an unclosed "[" is a literal "["
])
def test_wider_glob_covers(wide, narrow):
    assert glob_covers(wide, narrow) is True


@pytest.mark.parametrize("wide, narrow", [
    ("db__read_*", "db__*"),
    ("a*b", "a*"),
    ("a*", "*a"),
    ("*x*x*", "*x*"),
    ("db_[a-c]*", "db_[a-z]*"),
    ("db_[!a]*", "db_[a-z]*"),
    ("[!a]", "?"),
    ("a[b]c", "a?c"),
    ("a\\x", "a\\*"),
    ("DB_*", "db_*"),             # case-sensitive
    ("*.*", "*"),
    ("db_*", "db_[^a]"),          # "[^a]" is "^" or "a" in fnmatch; not read: never covered
    ("[^a]*", "^x"),
    ("db_[a-]", "db_a"),          # a "-" that is no plain range: not read
])
def test_glob_that_does_not_cover(wide, narrow):
    assert glob_covers(wide, narrow) is False


def test_glob_covers_is_never_wrong_on_every_short_name():
    """Soundness against fnmatch itself: for patterns built from every kind of piece, whenever
    glob_covers says "covered", each name (over an alphabet holding the special characters)
    that the narrow pattern matches is matched by the wide one."""
    rnd = random.Random(20261129)
    pieces = ["a", "b", "c", "-", "!", "]", "[", "\\", "*", "?", "**", "*?", "[a-c]", "[!b]", "[ab]", "[]a]",
              "[!]]", "[b-a]", "[a-]", "[!a-c]", "[b-c]", "[^a]", "[\\]"]
    names = [""] + ["".join(p) for n in range(1, 4) for p in itertools.product("abc-!][\\^", repeat=n)]
    patterns = sorted({"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 3))) for _ in range(400)})
    matched = {p: frozenset(filter(re.compile(fnmatch.translate(p)).match, names)) for p in patterns}
    covered = 0
    for wide in patterns:
        for narrow in rnd.sample(patterns, 60):
            if glob_covers(wide, narrow):
                covered += 1
                assert matched[narrow] <= matched[wide], (wide, narrow, sorted(matched[narrow] - matched[wide]))
    assert covered > 500  # and it does find coverings


def _warnings(tmp_path, rules: str) -> list[tuple[str, str]]:
    policy = Policy.load(write(tmp_path, "version: 1\nrules:\n" + rules))
    return [(w.rule, w.message) for w in lint(policy)]


SHADOWED = "rule 'later' can never match: rule 'earlier' (line 3) matches every call it matches and has no condition"


@pytest.mark.parametrize("earlier, later", [
    ('{tool: "db__*"}', '{tool: "db__read_*"}'),
    ('{server: db, tool: "db__*"}', '{server: db, tool: "db__read_*", principal: {role: admin}}'),
    ("{server: db}", '{server: db, tool: "read_*"}'),                        # no tool: "*"
    ('{server: "d?", tool: "*_rows"}', '{server: db, tool: "read_*_rows", labels: {env: prod}}'),
    ('{tool: "db_?"}', "{tool: db_x}"),
    ('{tool: ["a*", "db_*"]}', '{tool: ["db_read_*", "a1"]}'),                # each later glob covered by one
    ('{tool: "*", principal: {role: "adm*"}}', '{tool: "x*", principal: {role: "admin_?"}}'),
    ('{agent: {name: "support-*"}}', '{agent: {name: "support-bot-?"}}'),
])
def test_a_rule_shadowed_by_a_wider_glob_is_reported(tmp_path, earlier, later):
    rules = (f"  - id: earlier\n    match: {earlier}\n    effect: deny\n"
             f"  - id: later\n    match: {later}\n    effect: allow\n")
    assert _warnings(tmp_path, rules) == [("later", SHADOWED)]


@pytest.mark.parametrize("earlier, later", [
    ('{tool: "db__read_*"}', '{tool: "db__*"}'),
    ('{tool: "a*b"}', '{tool: "a*"}'),
    ('{server: db, tool: "db__*"}', '{tool: "db__read_*"}'),                   # later: any server
    ('{server: db, tool: "db__*", principal: {role: admin}}', '{server: db, tool: "db__read_*"}'),
    ('{tool: ["a*", "b*"]}', '{tool: ["a1*", "c*"]}'),                          # "c*" not covered
    ('{tool: "*", principal: {role: "**"}}', '{tool: "x*", principal: {role: "*"}}'),  # "*" also: no role
    ('{tool: "db_[a-c]*"}', '{tool: "db_[a-z]*"}'),
    ('{tool: "Db_*"}', '{tool: "db_*"}'),
])
def test_a_rule_not_shadowed_is_not_reported(tmp_path, earlier, later):
    rules = (f"  - id: earlier\n    match: {earlier}\n    effect: deny\n"
             f"  - id: later\n    match: {later}\n    effect: allow\n")
    assert _warnings(tmp_path, rules) == []


def test_an_earlier_glob_with_a_condition_shadows_nothing(tmp_path):
    rules = ("  - id: earlier\n    match: {tool: \"db__*\"}\n    when: 'call.arguments.x == 1'\n    effect: deny\n"
             "  - id: later\n    match: {tool: \"db__read_*\"}\n    effect: allow\n")
    assert _warnings(tmp_path, rules) == []


POLICY = """
version: 1
name: db-tools
rules:
  - id: db-all-need-ops
    match: {server: db, tool: "db__*"}
    effect: require_approval
    approval: {groups: [ops]}
  - id: db-reads-ok
    match: {server: db, tool: "db__read_*"}
    effect: allow
  - id: any-fs
    match: {server: fs}
    effect: deny
  - id: fs-read
    match: {server: fs, tool: "read_?ile"}
    effect: allow
  - id: reads-elsewhere
    match: {tool: "db__read_*"}
    effect: allow
"""


def test_cli_check_warns_about_glob_shadowing_and_exits_0(tmp_path):
    path = write(tmp_path, POLICY)
    result = CliRunner().invoke(cli, ["policy", "check", str(path)], catch_exceptions=False)
    assert result.exit_code == 0
    fp = Policy.load(path).fingerprint
    assert result.stdout == f"ok: {path}: policy 'db-tools', 5 rules\nfingerprint: {fp}\n"
    assert result.stderr == (
        f"warning: {path}:8: rule 'db-reads-ok' can never match: rule 'db-all-need-ops' (line 4) matches every "
        "call it matches and has no condition\n"
        f"warning: {path}:14: rule 'fs-read' can never match: rule 'any-fs' (line 11) matches every call it "
        "matches and has no condition\n")

    out = json.loads(CliRunner().invoke(cli, ["policy", "check", str(path), "--json"]).stdout)
    assert [(w["rule"], w["line"]) for w in out["warnings"]] == [("db-reads-ok", 8), ("fs-read", 14)]
