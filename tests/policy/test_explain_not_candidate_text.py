"""``policy explain``'s ``not_candidate`` line printed Python list syntax and an empty server as nothing:
"server/tool /x not in ['db']/['describe_table', 'list_tables', 'read_query']". It now says which of the
two did not match, in text: "tool 'x' is none of describe_table, list_tables, read_query" (and the server,
"(none)" when the call names none). --json carries the same text."""

from __future__ import annotations

import json
import subprocess
import sys

POLICY = """version: 1
name: t
rules:
  - id: reads-ok
    match: {server: db, tool: [read_query, list_tables, describe_table]}
    effect: allow
  - id: clock-ok
    match: {server: time}
    effect: allow
"""


def _explain(tmp_path, *args):
    (tmp_path / "p.yaml").write_text(POLICY)
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", "policy", "explain", str(tmp_path / "p.yaml"),
                           *args], capture_output=True, text=True)


def test_not_candidate_says_which_part_missed_in_text(tmp_path):
    out = _explain(tmp_path, "--tool", "x")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("not_candidate    reads-ok (line 4): server (none) is not db; tool 'x' is none of describe_table, "
                        "list_tables, read_query")
    assert lines[1] == "not_candidate    clock-ok (line 7): server (none) is not time"
    assert "[" not in out.stdout


def test_only_the_part_that_missed_is_named(tmp_path):
    out = _explain(tmp_path, "--tool", "db/write_query", "--json")
    steps = {s["rule"]: s for s in json.loads(out.stdout)["steps"]}
    assert steps["reads-ok"]["why"] == "tool 'write_query' is none of describe_table, list_tables, read_query"
    assert steps["clock-ok"]["why"] == "server 'db' is not time"
