"""The report says why a run failed: the exception its ``run.ended`` holds (docs/recording.md, ``runs
show``'s ``error`` line). It used to show only ``ended (error)``: the overview and the timeline's
``run.ended`` row both left out the recorded type and message, which ``sealbox runs show`` prints."""

from __future__ import annotations

import html

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import build_report, render_html, render_markdown

NOW = "2026-11-29T12:00:00.000000Z"


def _failed_run(store) -> str:
    with pytest.raises(RuntimeError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
            run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
            raise RuntimeError("refund limit <exceeded> for order 7")
    return run.run_id


def test_the_report_of_a_failed_run_names_the_error_it_ended_with(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    run_id = _failed_run(store)
    report = build_report(store, run_id, verify=False, now=NOW)
    assert report.error == {"type": "RuntimeError", "message": "refund limit <exceeded> for order 7"}

    text = render_markdown(report)
    assert "| **status** | ended (error) |\n" in text
    assert "| **error** | RuntimeError: refund limit \\<exceeded\\> for order 7 |\n" in text
    assert "| run.ended | agent:bot | error RuntimeError: refund limit \\<exceeded\\> for order 7 |\n" in text

    page = render_html(report)
    assert "<b>error</b></td><td>RuntimeError: refund limit &lt;exceeded&gt; for order 7</td>" in page
    assert "error RuntimeError: refund limit &lt;exceeded&gt; for order 7" in page
    assert "refund limit <exceeded>" not in page
    store.close()


def test_a_run_that_ended_ok_has_no_error_row(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        run.note("fine")
    report = build_report(store, run.run_id, verify=False, now=NOW)
    assert report.error is None
    assert "**error**" not in render_markdown(report) and "<b>error</b>" not in render_html(report)
    store.close()
