"""``runs show`` and the incident report show a run's whole sub-run tree, not only its direct children.

Regression: the report's "Child runs" table and the ``children`` lines of ``sealbox runs show`` listed
the runs naming the run as their parent, and nothing below them: a sub-agent's own sub-agents (what
the run set going two levels down) were visible only from the child's page. Both now list every
sub-run, depth first with its depth, at most :data:`sealbox.query.SUB_RUN_TREE_LIMIT` of them (and
how many more there are).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox import query
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import build_report, render_html, render_markdown

SEALBOX = str(Path(sys.executable).parent / "sealbox")
NOW = "2026-11-29T12:00:00.000000Z"


@pytest.fixture
def tree(tmp_path):
    """root -> a -> (b -> c), root -> d: ids in that order."""
    store = sealbox.init_store(tmp_path / "s")
    rec = Recorder(store, policy=ALLOW_ALL)
    ids = {}
    with rec.run(agent="root") as root:
        ids["root"] = root.run_id
        with rec.run(agent="a") as a:
            ids["a"] = a.run_id
            with rec.run(agent="b") as b:
                ids["b"] = b.run_id
                with rec.run(agent="c") as c:
                    ids["c"] = c.run_id
        with rec.run(agent="d") as d:
            ids["d"] = d.run_id
    yield store, ids, tmp_path / "s"
    store.close()


def test_sub_run_tree_lists_every_depth_depth_first(tree):
    store, ids, _ = tree
    rows, more = query.sub_run_tree(store, ids["root"])
    assert [(r["run_id"], r["depth"], r["parent_run_id"]) for r in rows] == [
        (ids["a"], 1, ids["root"]), (ids["b"], 2, ids["a"]), (ids["c"], 3, ids["b"]), (ids["d"], 1, ids["root"])]
    assert more == 0
    rows, more = query.sub_run_tree(store, ids["root"], limit=2)
    assert ([r["run_id"] for r in rows], more) == ([ids["a"], ids["b"]], 2)
    assert query.sub_run_tree(store, ids["c"]) == ([], 0)


def test_runs_show_lists_grandchildren_with_their_depth(tree):
    _, ids, path = tree
    env = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_DEBUG", "SEALBOX_STORE")}
    proc = subprocess.run([SEALBOX, "runs", "show", ids["root"], "-s", str(path)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2:7] == ["children 2 (4 sub-runs at every depth)",
                          f"  {ids['a']}  agent a  ended (ok)",
                          f"    {ids['b']}  agent b  ended (ok)  depth 2",
                          f"      {ids['c']}  agent c  ended (ok)  depth 3",
                          f"  {ids['d']}  agent d  ended (ok)"]
    assert lines[7] == "snapshot (none)"


def test_runs_show_bounds_a_large_tree(tree, monkeypatch):
    store, ids, path = tree
    from click.testing import CliRunner

    from sealbox.cli.main import cli

    monkeypatch.setattr(query, "SUB_RUN_TREE_LIMIT", 3)
    out = CliRunner().invoke(cli, ["runs", "show", ids["root"], "-s", str(path)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[2] == "children 2 (4 sub-runs at every depth)"
    assert lines[6] == "  … 1 more sub-run not listed (sealbox runs show on a sub-run lists its own)"


def test_the_report_lists_the_whole_tree_with_depth_and_parent(tree, monkeypatch):
    store, ids, _ = tree
    report = build_report(store, ids["root"], verify=False, now=NOW)
    text = render_markdown(report)
    assert "## Child runs (2 direct, 4 at every depth)\n" in text
    table = text.split("## Child runs")[1].split("##")[0]
    assert [line.split(" | ")[:3] for line in table.splitlines() if line.startswith("| 1") or line.startswith("| 2")
            or line.startswith("| 3")] == [
        ["| 1", f"`{ids['a']}`", f"`{ids['root']}`"], ["| 2", f"`{ids['b']}`", f"`{ids['a']}`"],
        ["| 3", f"`{ids['c']}`", f"`{ids['b']}`"], ["| 1", f"`{ids['d']}`", f"`{ids['root']}`"]]
    page = render_html(report)
    assert "<h2>Child runs (2 direct, 4 at every depth)</h2>" in page
    assert all(ids[k] in page for k in "abcd")

    monkeypatch.setattr(query, "SUB_RUN_TREE_LIMIT", 2)
    small = build_report(store, ids["root"], verify=False, now=NOW)
    assert "2 more sub-runs not listed" in render_markdown(small)
    assert "2 more sub-runs not listed" in render_html(small)
    assert ids["d"] not in render_markdown(small).split("## Child runs")[1].split("##")[0]


def test_runs_show_json_gives_the_whole_tree_the_table_shows(tree, monkeypatch):
    """--json had only ``children`` (the direct sub-runs) while the table and the report list every depth: its
    ``run`` now has ``sub_runs`` (the table's rows, each with its depth) and ``sub_runs_not_listed``."""
    import json

    from click.testing import CliRunner

    from sealbox.cli.main import cli

    _, ids, path = tree
    out = CliRunner().invoke(cli, ["runs", "show", ids["root"], "-s", str(path), "--json"])
    assert out.exit_code == 0, out.output
    run = json.loads(out.output)["run"]
    assert [c["run_id"] for c in run["children"]] == [ids["a"], ids["d"]]
    assert [(r["run_id"], r["depth"], r["parent_run_id"], r["agent"], r["status"]) for r in run["sub_runs"]] == [
        (ids["a"], 1, ids["root"], "a", "ended"), (ids["b"], 2, ids["a"], "b", "ended"),
        (ids["c"], 3, ids["b"], "c", "ended"), (ids["d"], 1, ids["root"], "d", "ended")]
    assert run["sub_runs_not_listed"] == 0
    leaf = json.loads(CliRunner().invoke(cli, ["runs", "show", ids["c"], "-s", str(path), "--json"]).output)["run"]
    assert (leaf["children"], leaf["sub_runs"], leaf["sub_runs_not_listed"]) == ([], [], 0)

    monkeypatch.setattr(query, "SUB_RUN_TREE_LIMIT", 3)
    run = json.loads(CliRunner().invoke(cli, ["runs", "show", ids["root"], "-s", str(path), "--json"]).output)["run"]
    assert ([r["run_id"] for r in run["sub_runs"]], run["sub_runs_not_listed"]) == ([ids["a"], ids["b"], ids["c"]], 1)
