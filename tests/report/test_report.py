"""``sealbox report``: exact facts in the Markdown, escaping in both formats, the CLI."""

from __future__ import annotations

import html
import json
import re

import pytest
from click.testing import CliRunner

from sealbox.cli.main import main
from sealbox.report import build_report, render_html, render_markdown
from sealbox.report.markdown import md

from .conftest import DELETE, HOSTILE

NOW = "2026-11-29T12:00:00.000000Z"


def test_the_markdown_states_the_facts_of_the_run(recorded):
    store, run_id = recorded.store, recorded.run_id
    events = store.read_run(run_id)
    report = build_report(store, run_id, now=NOW)
    text = render_markdown(report)

    assert text.startswith(f"# Sealbox incident report: run `{run_id}`\n\nGenerated {md(NOW)} ")
    assert "| **agent** | cleanup-bot |" in text
    assert "| **status** | ended (ok) |" in text
    assert f"## Timeline ({len(events)} events)" in text
    rows = [line for line in text.split("## Timeline", 1)[1].split("## Approvals", 1)[0].splitlines()
            if re.match(r"^\| \d+ \|", line)]
    assert [int(r.split("|")[1]) for r in rows] == [e.run_seq for e in events]
    # the DELETE, exactly, with its decision, its approval and its result
    assert json.dumps({"query": DELETE}, indent=2) in text
    assert "| require\\_approval | writes-need-ops | policy\\_require\\_approval |" in text
    assert '"affected_rows": 17' in text
    # the approval chain: who, verified signature, counted, shared account, flag, wait
    answered = next(e for e in events if e.kind == "approval.answered").payload
    resumed = next(e for e in events if e.kind == "run.resumed").payload
    assert (f"- **approve** by **ops-oncall** at {md(answered['answered_at'])}: signature verified; counts; "
            f"identity: role approver, groups ops, key {recorded.key_id}, SHARED ACCOUNT;") in text
    assert "  - flag **shared\\_identity**: " in text
    wait = resumed["waited_us"] / 1e6
    assert f"| **run waited** | {wait * 1000:.1f} ms |" in text or f"| **run waited** | {wait:.2f} s |" in text
    assert f"### Approval `{recorded.approval_id}`: approved" in text
    # model call, state, child run, snapshot, verification
    assert "### Step 2: openai/gpt\\-test" not in text and "### Step 2: openai/gpt-test" in text
    assert "### Step 4: after read" in text and '"seen": 12' in text
    assert f"| 1 | `{recorded.child_id}` | `{run_id}` | sub-checker | ended ok | 3 |" in text  # depth, run, parent
    fp = events[0].payload["snapshot"]
    assert f"## Configuration snapshot\n\n{md(fp)}\n" in text and '"name": "gpt-test"' in text
    assert "Verified: the log is intact." in text


def test_hostile_strings_cannot_inject_html(recorded):
    page = render_html(build_report(recorded.store, recorded.run_id, now=NOW))
    assert HOSTILE not in page
    assert "<script>window.__pwned" not in page and "<img" not in page and "&amp; <b>" not in page
    assert page.count("<script>") == 1  # ours, allowed by its hash in the CSP
    assert html.escape(HOSTILE, quote=True) in page
    assert "content=\"default-src &#x27;none&#x27;;" in page
    # self-contained: nothing fetched from anywhere
    for needle in ("<link", "@import", "url(", 'src="http', "src='http", 'href="http'):
        assert needle not in page


def test_hostile_strings_cannot_break_out_of_the_markdown(recorded):
    text = render_markdown(build_report(recorded.store, recorded.run_id, now=NOW))
    # every fence that holds content is longer than the backtick runs inside it
    for fence, body in re.findall(r"^(`{3,})json\n(.*?)\n\1$", text, flags=re.S | re.M):
        assert all(len(run) < len(fence) for run in re.findall(r"`+", body))
    assert "````json" in text  # HOSTILE holds ``` so its blocks need four
    # inline text (the approver's reason) is escaped: no raw HTML, no link
    reason_line = next(line for line in text.splitlines() if line.startswith("- **approve**"))
    assert "<b>" not in reason_line and "\\<b\\>" in reason_line and "\\[link\\]" in reason_line
    assert "\\`\\`\\`" in reason_line


def test_redacted_values_are_shown_as_markers(tmp_path):
    import sealbox
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("api", "login", {"user": "pat", "password": "hunter2"}, lambda **_: "ok")
    report = build_report(store, run.run_id)
    [call] = report.tool_calls
    assert call.arguments.redacted == 1 and "hunter2" not in call.arguments.text
    assert "1 redacted value(s), shown as markers" in render_markdown(report)
    assert "1 redacted value(s), shown as markers" in render_html(report)
    store.close()


def test_long_content_is_collapsed_in_details(recorded):
    page = render_html(build_report(recorded.store, recorded.run_id, now=NOW))
    assert re.search(r"<details><summary>state .*?\(4\d lines, \d+ characters\)</summary><pre>", page)


def test_cli_writes_html_and_markdown_by_extension(recorded, tmp_path):
    store_dir = str(recorded.store.path)
    runner = CliRunner()
    for name, fmt in (("incident.html", "html"), ("incident.md", "md")):
        out = tmp_path / name
        res = runner.invoke(_cli, ["report", recorded.run_id, "-o", str(out), "-s", store_dir])
        assert res.exit_code == 0, res.output
        assert res.output.startswith(f"wrote {out} ({fmt}, ")
        assert "store verified" in res.output
    assert (tmp_path / "incident.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "incident.md").read_text().startswith("# Sealbox incident report")
    bad = runner.invoke(_cli, ["report", recorded.run_id, "-o", str(tmp_path / "x.pdf"), "-s", store_dir])
    assert bad.exit_code != 0 and "use .html or .md" in bad.output
    missing = runner.invoke(_cli, ["report", "no-such-run", "-s", store_dir])
    assert missing.exit_code != 0 and "no run 'no-such-run'" in missing.output


def _cli_entry():
    from sealbox.cli.main import cli

    return cli


_cli = _cli_entry()


def test_report_of_an_unknown_run_is_one_line_error(recorded, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "nope", "-s", str(recorded.store.path)])
    assert exc.value.code != 0
    assert capsys.readouterr().err.strip() == "error: no run 'nope' in this store"


def test_a_decision_no_rule_made_is_not_shown_as_rule_none(tmp_path):
    # No rule matched (the default deny): the decision's rule is null. The timeline said
    # "deny by rule None (no_match)", naming a rule "None" that does not exist; `runs show` says "no rule".
    import textwrap

    import sealbox
    from sealbox.policy import Policy
    from sealbox.recorder import Recorder, ToolDenied

    store = sealbox.init_store(tmp_path / "store")
    policy = Policy.from_text(textwrap.dedent("""
        version: 1
        name: reads-only
        rules:
          - id: reads-ok
            match: {tool: read_query}
            effect: allow
    """))
    with Recorder(store, policy=policy).run(agent="a") as run:
        with pytest.raises(ToolDenied):
            run.call_tool("db", "drop_table", {"name": "customers"}, lambda **_: "dropped")
    [decision] = [e.payload for e in store.read_run(run.run_id) if e.kind == "policy.decision"]
    assert decision["rule"] is None and decision["effect"] == "deny"
    report = build_report(store, run.run_id, now=NOW)
    [row] = [e for e in report.timeline if e.kind == "policy.decision"]
    assert row.summary == f"deny, no rule ({decision['reason_code']})"
    text = render_markdown(report)
    assert "by rule None" not in text and "by rule None" not in render_html(report)
    store.close()
