"""A changed field whose two values share a long beginning (a system prompt with a sentence added
at its end, a long SQL query with one condition changed) must show where they differ: cut at the
same width, both sides read the same and the divergence printed hides the difference."""

from __future__ import annotations

from sealbox.replay import render_divergence
from sealbox.replay.divergence import Divergence
from sealbox.snapshot import FieldDiff

PROMPT = ("You are cleanup-bot, an operations agent with access to the production customer database "
          "through MCP tools. Keep changes minimal and explain what you did.")
QUERY = ("SELECT id, email, name, created_at, plan FROM customers WHERE plan = 'free' AND email LIKE "
         "'%@example.test' AND created_at < '2026-01-01'")


def _changed(a, b, path="instructions"):
    d = Divergence("mismatch", "2", "step 2: the replay made model.call M with different content",
                   diff=(FieldDiff(path, "changed", a, b),), mismatched=("hash",))
    return [line for line in render_divergence(d).splitlines() if line.startswith("    ~ ")]


def test_long_strings_differing_at_their_end_show_the_difference():
    (line,) = _changed(PROMPT, PROMPT + " Be careful.")
    assert line == ('    ~ instructions: …imal and explain what you did." -> …imal and explain what you did. '
                    'Be careful."  (first difference at character 155)')


def test_long_strings_differing_past_the_cut_show_both_sides_around_it():
    (line,) = _changed(QUERY, QUERY.replace("'%@example.test'", "'%test%'"), path="query")
    assert line == ("    ~ query: …lan = 'free' AND email LIKE '%@example.test' AND created_at < '2026-0… -> "
                    "…lan = 'free' AND email LIKE '%test%' AND created_at < '2026-01-01'\"  "
                    "(first difference at character 94)")


def test_short_values_and_values_differing_early_are_printed_as_before():
    assert _changed(1, 2) == ["    ~ instructions: 1 -> 2"]
    (line,) = _changed("A" + PROMPT, "B" + PROMPT)
    assert line == f'    ~ instructions: "A{PROMPT[:67]}… -> "B{PROMPT[:67]}…'
    assert _changed({"a": 1}, {"a": 2}) == ['    ~ instructions: {"a": 1} -> {"a": 2}']


def test_the_position_counts_the_string_s_characters_not_its_json_escapes():
    a = 'say "hi"\n' * 10 + "end"
    (line,) = _changed(a, a + "!")
    assert line.endswith(f"(first difference at character {len(a) + 1})")
