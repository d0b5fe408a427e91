"""An event that verification found wrong is marked where an incident reader reads it: its timeline row and
its tool call carry ``FAILED VERIFICATION`` and the problem's line, as the Verification section words it;
the honest rows are not marked. Both formats.

Regression (an auditor's report): in a store whose ``tool.result`` row was edited with sqlite3 (its bytes and
its stored hash rewritten together), the report showed the edited result in the timeline and the calls
without any mark; the problem (``chain_broken`` at the next event: its ``prev`` is not the edited event's
hash) was listed only in the Verification section at the end."""

from __future__ import annotations

import hashlib
import html
import sqlite3
import subprocess
import sys

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture
def tampered(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "one row")
        run.call_tool("db", "read_query", {"sql": "SELECT 2"}, lambda sql: "two rows")
    store.close()
    db = sqlite3.connect(tmp_path / "store" / "sealbox.db")
    db.execute("DROP TRIGGER events_no_update")
    (leaf, raw), = db.execute("SELECT leaf_index, raw FROM events WHERE run_id = ? AND kind = 'tool.result' "
                              "ORDER BY leaf_index DESC LIMIT 1", (run.run_id,))
    new = bytes(raw).replace(b'"result":"two rows"', b'"result":"no rows"')
    assert new != bytes(raw)
    # the careful edit: the stored hash rewritten too, so only the next event's prev (and the roots) show it
    db.execute("UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = ?", (new, hashlib.sha256(b"\0" + new).digest(), leaf))
    db.commit()
    db.close()
    return tmp_path / "store", run.run_id, leaf


def _report(store, run_id, fmt):
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "report", "-s", str(store), run_id, "--format", fmt],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _chain_line(text, run_id, leaf):
    line = next(p for p in text.splitlines() if p.startswith("- `chain_broken"))[3:-1]
    assert line.startswith(f"chain_broken [run {run_id}, run_seq 8, run.ended, leaf {leaf + 1}]: prev is not the "
                           "leaf hash of the run's previous event (expected sha256:")
    return line


def test_markdown_marks_the_changed_event_and_its_call(tampered):
    store, run_id, leaf = tampered
    text = _report(store, run_id, "md")
    line = _chain_line(text, run_id, leaf)
    escaped = line.replace("_", "\\_").replace("[", "\\[").replace("]", "\\]")
    rows = [r for r in text.splitlines() if r.startswith("| ") and "+" in r.split("|")[3]]
    assert len(rows) == 8
    marked = [r.split(" | ")[0][2:] for r in rows if "FAILED VERIFICATION" in r]
    assert marked == ["7", "8"]  # the edited tool.result and run.ended, whose prev no longer matches it
    assert rows[6].endswith(f" | tool.result | agent:a | **FAILED VERIFICATION**: {escaped} — ok |")
    assert rows[7].split(" | ")[3:5] == ["run.ended", "agent:a"]
    assert rows[7].split(" | ")[5].startswith(f"**FAILED VERIFICATION**: {escaped} — ")
    calls = text.split("## Tool calls (2)")[1].split("## Model calls")[0].split("### Step ")[1:]
    assert "FAILED VERIFICATION" not in calls[0]
    assert f"**FAILED VERIFICATION**: `{line}`\n" in calls[1]
    assert text.count("FAILED VERIFICATION") == 3


def test_html_marks_the_changed_event_and_its_call(tampered):
    store, run_id, leaf = tampered
    md_text = _report(store, run_id, "md")
    line = html.escape(_chain_line(md_text, run_id, leaf), quote=True)
    page = _report(store, run_id, "html")
    mark = f'<span class="badge bad">FAILED VERIFICATION</span> <code>{line}</code> — '
    assert page.count(mark) == 3  # two timeline rows, one call
    assert f"<td>tool.result</td><td>agent:a</td><td>{mark}ok</td>" in page
    calls = page.split("<h2>Tool calls (2)</h2>")[1].split("<h2>Model calls")[0].split('<div class="card">')[1:]
    assert mark not in calls[0] and f"<p>{mark}</p>" in calls[1]
    assert f"<li><code>{line}</code></li>" in page  # the Verification section's words


def test_an_honest_store_marks_nothing(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "one row")
    store.close()
    for fmt in ("md", "html"):
        assert "FAILED VERIFICATION" not in _report(tmp_path / "store", run.run_id, fmt)


def test_an_edit_that_left_the_stored_hash_marks_the_row_with_leaf_hash_mismatch(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "one row")
    store.close()
    db = sqlite3.connect(tmp_path / "store" / "sealbox.db")
    db.execute("DROP TRIGGER events_no_update")
    (leaf, raw), = db.execute("SELECT leaf_index, raw FROM events WHERE run_id = ? AND kind = 'tool.result'",
                              (run.run_id,))
    db.execute("UPDATE events SET raw = ? WHERE leaf_index = ?", (bytes(raw).replace(b"one row", b"no rows"), leaf))
    db.commit()
    db.close()
    text = _report(tmp_path / "store", run.run_id, "md")
    line = next(p for p in text.splitlines() if p.startswith("- `leaf_hash_mismatch"))[3:-1]
    assert line.startswith(f"leaf_hash_mismatch [run {run.run_id}, run_seq 4, tool.result, leaf {leaf}]: ")
    row = next(r for r in text.splitlines() if r.startswith("| 4 | "))
    assert row.split(" | ")[5].startswith("**FAILED VERIFICATION**: " + line.replace("_", "\\_").replace(
        "[", "\\[").replace("]", "\\]"))
    assert [r[:5] for r in text.splitlines() if r.startswith("| ") and "FAILED VERIFICATION" in r] == ["| 4 |", "| 5 |"]
