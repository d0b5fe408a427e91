"""`sealbox approvals show` printed who was asked as Python list syntax (`groups ['ops'] identities []`).
It now prints text (`groups: ops; identities: -`, names joined by `, `); --json is unchanged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from approval_helpers import policy

from sealbox.approvals import ApprovalPending
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


def request(store, tool):
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", tool, {"sql": "x"}, lambda sql: "ran")
    return info.value.approval_id


def test_show_prints_who_was_asked_as_text(store):
    one, two = request(store, "write_query"), request(store, "deploy")
    path = store.path
    lines = sb("approvals", "show", one, "-s", path).stdout.splitlines()
    assert [line for line in lines if line.startswith("asked")] == ["asked      groups: ops; identities: -"]
    lines = sb("approvals", "show", two, "-s", path).stdout.splitlines()
    assert [line for line in lines if line.startswith("asked")] == ["asked      groups: ops; identities: carol"]
    shown = json.loads(sb("approvals", "show", two, "--json", "-s", path).stdout)
    assert shown["ask"] == {"groups": ["ops"], "identities": ["carol"]}


def test_the_report_timeline_says_who_was_asked_as_approvals_show_does(store):
    """The report's timeline summarised an approval.requested as `db/deploy asks groups ['ops'] identities
    ['carol']` (Python list syntax); it now words it as `approvals show` does."""
    from sealbox.approvals import get_approval
    from sealbox.report import build_report, render_html, render_markdown

    report = build_report(store, get_approval(store, request(store, "deploy")).run_id, verify=False)
    assert [t.summary for t in report.timeline if t.kind == "approval.requested"] == [
        "db/deploy asks groups: ops; identities: carol"]
    assert "db/deploy asks groups: ops; identities: carol" in render_markdown(report)
    assert "db/deploy asks groups: ops; identities: carol" in render_html(report)
    assert "['" not in render_markdown(report)


def test_the_reports_asked_row_says_who_was_asked_as_approvals_show_does(store):
    """Each approval's **asked** row in the report read `groups ops; identities -` (no colons), where
    `approvals show` and the report's own timeline say `groups: ops; identities: carol`: one helper now
    (sealbox.approvals.asked_text) words all three."""
    from sealbox.approvals import get_approval
    from sealbox.report import build_report, render_html, render_markdown

    one, two = request(store, "write_query"), request(store, "deploy")
    for aid, asked in ((one, "groups: ops; identities: -"), (two, "groups: ops; identities: carol")):
        report = build_report(store, get_approval(store, aid).run_id, verify=False)
        md = render_markdown(report)
        assert [line for line in md.splitlines() if line.startswith("| **asked**")] == [f"| **asked** | {asked} |"]
        assert f"<tr><td><b>asked</b></td><td>{asked}</td></tr>" in render_html(report)
