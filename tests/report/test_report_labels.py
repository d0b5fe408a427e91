"""The report's labels row joined KEY=VALUE pairs with ", ": a value holding a comma or an '=' read as
two labels (`env=pr,od, k==1+1` for {"env": "pr,od", "k": "=1+1"}). Each label is now its own row of a
small key/value table, in HTML and in Markdown, values escaped."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import build_report, render_html, render_markdown

LABELS = {"env": "pr,od", "k": "=1+1", "team": "a | b <i>x</i>"}


@pytest.fixture
def labelled(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot", labels=LABELS) as run:
        run.call_tool("fs", "read", {"path": "/tmp/x"}, lambda path: "ok")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as bare:
        pass
    yield store, run.run_id, bare.run_id
    store.close()


def test_html_report_shows_each_label_as_its_own_row(labelled):
    store, run_id, bare_id = labelled
    page = render_html(build_report(store, run_id, verify=False))
    assert "env=pr,od" not in page
    assert ('<tr><td><b>labels</b></td><td><table class="labels"><tbody>'
            '<tr><td>env</td><td>pr,od</td></tr>'
            '<tr><td>k</td><td>=1+1</td></tr>'
            '<tr><td>team</td><td>a | b &lt;i&gt;x&lt;/i&gt;</td></tr>'
            '</tbody></table></td></tr>') in page
    assert "<tr><td><b>labels</b></td><td>(none)</td></tr>" in render_html(build_report(store, bare_id, verify=False))


def test_markdown_report_shows_each_label_as_its_own_row(labelled):
    store, run_id, bare_id = labelled
    text = render_markdown(build_report(store, run_id, verify=False))
    assert "env=pr,od" not in text
    assert "| **labels** | 3, in the table Labels below |" in text
    assert ("### Labels\n\n| key | value |\n| --- | --- |\n| env | pr,od |\n| k | =1+1 |\n"
            "| team | a \\| b \\<i\\>x\\</i\\> |\n") in text
    bare = render_markdown(build_report(store, bare_id, verify=False))
    assert "| **labels** | (none) |" in bare and "### Labels" not in bare
