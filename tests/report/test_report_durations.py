"""Durations under a millisecond read as the CLI prints them, not as ``0.0 ms``.

Regression (found by ``sealbox report RUN -o r.md`` on a run whose tools took a few microseconds):
the report said ``took 0.0 ms`` for a call whose ``tool.result`` holds ``duration_us: 8``, and
``sealbox runs show`` printed ``8 µs`` for the same call.
"""

from __future__ import annotations

from sealbox import init_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import build_report, render_html, render_markdown
from sealbox.cli.runs_cmds import _duration


def test_a_call_faster_than_a_millisecond_is_reported_in_microseconds(tmp_path):
    store = init_store(tmp_path / "store")
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="fast-bot") as run:
        run.call_tool("db", "read_query", {"query": "select 1"}, lambda **kw: 1)
        run_id = run.run_id
    result = next(e for e in store.read_run(run_id) if e.kind == "tool.result").payload
    us = result["duration_us"]
    assert us > 0
    report = build_report(store, run_id)
    md_text, page = render_markdown(report), render_html(report)
    store.close()
    shown = _duration(us)  # what `sealbox runs show` prints for the same call
    if us < 1000:
        assert shown == f"{us} µs"
    assert f", took {shown}\n" in md_text
    assert f" · took {shown}" in page
    assert "took 0.0 ms" not in md_text and "took 0.0 ms" not in page
