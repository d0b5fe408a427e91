"""``sealbox report`` of a replay run states its verdict (as ``sealbox runs show`` does): reproduced,
or where and how it diverged — in both formats, the recorded text escaped."""

from __future__ import annotations

import html

import pytest
from click.testing import CliRunner

import sealbox
from sealbox.cli.main import cli
from sealbox.policy import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer
from sealbox.report import build_report, render_html, render_markdown
from sealbox.report.markdown import md

from .conftest import HOSTILE

NOW = "2026-11-29T12:00:00.000000Z"


def _agent(second: str = "SELECT 2", fail: str | None = None):
    def agent(run):
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "1 row")
        run.call_tool("db", "read_query", {"sql": second}, lambda sql: "2 rows")
        if fail is not None:
            raise RuntimeError(fail)
    return agent


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def recorded(store):
    with Recorder(store, ALLOW_ALL).run(agent="db-bot", principal="agent:db-bot") as run:
        _agent()(run)
    return run.run_id


def _overview_row(text: str, name: str) -> list[str]:
    return [line for line in text.split("## Timeline", 1)[0].splitlines() if line.startswith(f"| **{name}** |")]


def test_the_report_of_a_reproducing_replay_says_reproduced(store, recorded):
    result = Replayer(store).replay(recorded, _agent())
    assert result.reproduced and result.steps_compared == 2

    report = build_report(store, result.new_run_id, now=NOW)
    assert (report.replay.reproduced, report.replay.text) == (True, "reproduced (2 steps compared)")
    text = render_markdown(report)
    assert _overview_row(text, "replay of") == [f"| **replay of** | {md(recorded)} |"]
    assert _overview_row(text, "replay verdict") == ["| **replay verdict** | reproduced (2 steps compared) |"]
    page = render_html(report)
    assert ('<tr><td><b>replay verdict</b></td><td><span class="badge ok">reproduced</span> '
            '<span class="replay-verdict">reproduced (2 steps compared)</span></td></tr>') in page


def test_the_report_of_a_diverged_replay_says_where_and_how(store, recorded):
    result = Replayer(store).replay(recorded, _agent(second="SELECT 3"))
    d = result.divergence
    assert (result.reproduced, d.kind, d.step, result.steps_compared) == (False, "mismatch", "3", 1)
    assert d.message == "step 3: the replay made tool.call db/read_query with different content (1 field(s) differ)"

    report = build_report(store, result.new_run_id, now=NOW)
    line = f"diverged at step 3 (mismatch): {d.message} (1 steps compared)"
    assert (report.replay.reproduced, report.replay.text) == (False, line)
    text = render_markdown(report)
    assert _overview_row(text, "replay verdict") == [f"| **replay verdict** | {md(line)} |"]
    assert "| **status** | ended (cancelled) |" in text  # how the replay ended, not whether it matched
    page = render_html(report)
    assert ('<tr><td><b>replay verdict</b></td><td><span class="badge bad">not reproduced</span> '
            f'<span class="replay-verdict">{html.escape(line)}</span></td></tr>') in page

    # the same line as `sealbox runs show` prints
    shown = CliRunner().invoke(cli, ["runs", "show", result.new_run_id, "-s", str(store.path)])
    assert [x for x in shown.output.splitlines() if x.startswith("verdict")] == [f"verdict  {line}"]


def test_the_verdict_is_escaped_in_both_formats(store, recorded):
    """The agent's exception message (recorded text) is part of an ``outcome`` divergence's message."""
    result = Replayer(store).replay(recorded, _agent(fail=HOSTILE))
    d = result.divergence
    assert (d.kind, d.step) == ("outcome", None)
    line = ("diverged (outcome): every step matched, but the recorded run ended ok and the replay ended error: "
            f"RuntimeError: {HOSTILE} (2 steps compared)")

    report = build_report(store, result.new_run_id, now=NOW)
    assert report.replay.text == line
    text = render_markdown(report)
    assert _overview_row(text, "replay verdict") == [f"| **replay verdict** | {md(line)} |"]
    assert HOSTILE not in text.split("## Timeline", 1)[0]
    page = render_html(report)
    assert f'<span class="replay-verdict">{html.escape(line, quote=True)}</span>' in page
    assert "<script>window.__pwned" not in page and "<img" not in page


def test_a_run_that_is_no_replay_has_no_verdict_row(store, recorded):
    report = build_report(store, recorded, now=NOW)
    assert report.replay is None
    assert _overview_row(render_markdown(report), "replay verdict") == []
    assert "replay verdict" not in render_html(report)


def test_a_verdict_written_by_a_run_that_replays_nothing_is_not_shown_as_a_replay_verdict(store):
    """RunContext.end(verdict=...) is public: an ordinary run could claim "reproduced"; without
    ``replay_of`` it is no replay, and the report gives it no replay-verdict row (no green badge)."""
    run = Recorder(store, ALLOW_ALL).run(agent="db-bot", principal="agent:db-bot").start()
    run.end("ok", verdict={"reproduced": True, "steps_compared": 3, "divergence": None})
    report = build_report(store, run.run_id, now=NOW)
    assert report.replay is None
    assert _overview_row(render_markdown(report), "replay verdict") == []
    assert "replay verdict" not in render_html(report) and "reproduced" not in render_html(report)


def test_a_replay_run_that_has_not_ended_says_it_has_no_verdict(store, recorded):
    run = Recorder(store, ALLOW_ALL).run(agent="db-bot", principal="agent:db-bot", replay_of=recorded)
    run.start()
    report = build_report(store, run.run_id, now=NOW)
    assert (report.replay.reproduced, report.replay.text) == (None, "no verdict: the replay run has not ended")
    assert _overview_row(render_markdown(report), "replay verdict") == [
        "| **replay verdict** | no verdict: the replay run has not ended |"]
    assert ('<span class="badge warn">no verdict</span> '
            '<span class="replay-verdict">no verdict: the replay run has not ended</span>') in render_html(report)


def test_cli_report_of_a_replay_run_in_both_formats(store, recorded, tmp_path):
    result = Replayer(store).replay(recorded, _agent(second="SELECT 3"))
    line = f"diverged at step 3 (mismatch): {result.divergence.message} (1 steps compared)"
    runner = CliRunner()
    for name in ("incident.md", "incident.html"):
        res = runner.invoke(cli, ["report", result.new_run_id[:13], "-o", str(tmp_path / name), "-s", str(store.path)])
        assert res.exit_code == 0, res.output
    assert f"| **replay verdict** | {md(line)} |\n" in (tmp_path / "incident.md").read_text()
    assert (f'<span class="badge bad">not reproduced</span> <span class="replay-verdict">{html.escape(line)}</span>'
            in (tmp_path / "incident.html").read_text())
