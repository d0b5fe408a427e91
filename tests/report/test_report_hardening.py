"""Break-test fixes in the incident report: a line break other than ``\\n`` cannot end an inline
code span (a ``\\r`` in an error message made the next text a raw HTML block), a literal
``{"$redacted": ...}`` in a tool's own result is shown as its content, never counted as a redaction,
and ``report -o`` never replaces one of the store's own files."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.report import build_report, render_html, render_markdown
from sealbox.report.markdown import _code, md

SCRIPT = "<script>alert(document.domain)</script>"
BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@pytest.fixture
def failed_run(tmp_path):
    store = sealbox.init_store(tmp_path / "store")

    def bad(**_):
        raise RuntimeError(f"disk full\r{SCRIPT}\r")

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        with pytest.raises(RuntimeError):
            run.call_tool("fs", "write", {"path": "/tmp/x"}, bad)
    yield store, run.run_id
    store.close()


def test_a_carriage_return_in_an_error_cannot_leave_its_code_span(failed_run):
    store, run_id = failed_run
    text = render_markdown(build_report(store, run_id, verify=False))
    assert f"\nError: `RuntimeError: disk full {SCRIPT} `\n" in text
    assert "\r" not in text
    # the timeline row holds the same message as escaped inline text
    assert "| tool.result | agent:bot | error RuntimeError: disk full \\<script\\>alert(document.domain)" \
           "\\</script\\>  |\n" in text  # the message's own trailing \r is a space, then the cell's


def test_the_rendered_markdown_holds_no_raw_script(failed_run):
    markdown_it = pytest.importorskip("markdown_it")
    store, run_id = failed_run
    page = markdown_it.MarkdownIt("commonmark").render(render_markdown(build_report(store, run_id, verify=False)))
    assert "<script" not in page
    assert f"<code>RuntimeError: disk full {SCRIPT.replace('<', '&lt;').replace('>', '&gt;')} </code>" in page


def test_every_line_break_is_flattened_in_inline_text_and_code():
    value = "a" + "".join(f"{b}{i}" for i, b in enumerate(BREAKS))
    assert _code(value) == "`a 0 1 2 3 4 5 6 7 8 9`"
    assert md(value) == "a 0 1 2 3 4 5 6 7 8 9"
    assert _code(f"x\u2028{SCRIPT}") == f"`x {SCRIPT}`"


def test_a_literal_redaction_marker_in_a_result_is_content_not_a_redaction(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    result = {"literal": {"$redacted": "hmac-sha256:00"}, "password": "hunter2", "$esc": {"a": 1}}
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("api", "forged", {"q": 1}, lambda **_: {"$redacted": "hmac-sha256:00"})
        run.call_tool("api", "mixed", {"q": 2}, lambda **_: result)
    raw = [e.raw for e in store.read_run(run.run_id) if e.kind == "tool.result"]
    assert b'"result":{"$esc":{"$redacted":"hmac-sha256:00"}}' in raw[0]  # how the store keeps it
    report = build_report(store, run.run_id, verify=False)
    forged, mixed = (c.result for c in report.tool_calls)
    assert (forged.redacted, forged.look_alikes) == (0, 1)
    assert forged.value == {"$redacted": "hmac-sha256:00"}  # shown as the tool returned it, no "$esc"
    assert forged.text == '{\n  "$redacted": "hmac-sha256:00"\n}'
    # one real redaction (the password), one look-alike; the user's own "$esc" key is shown once, as theirs
    assert (mixed.redacted, mixed.look_alikes) == (1, 1)
    assert mixed.value["literal"] == {"$redacted": "hmac-sha256:00"} and mixed.value["$esc"] == {"a": 1}
    assert mixed.value["password"]["$redacted"].startswith("hmac-sha256:") and "hunter2" not in mixed.text
    text = render_markdown(report)
    assert "Result (1 look-alike redaction marker(s) from the source's own content, not redactions):" in text
    assert ("Result (1 redacted value(s), shown as markers; 1 look-alike redaction marker(s) from the source's "
            "own content, not redactions):") in text
    assert text.count("redacted value(s)") == 1
    page = render_html(report)
    assert page.count("look-alike redaction marker(s) from the source&#x27;s own content, not redactions") == 2
    assert page.count("redacted value(s), shown as markers") == 1
    store.close()


def _cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
    p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_report_to_one_of_the_stores_own_files_is_refused(tmp_path):
    store = sealbox.init_store(tmp_path / "st")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "q", {}, lambda: 1)
    store.close()
    (tmp_path / "out").mkdir()
    os.link(tmp_path / "st" / "log.vkey", tmp_path / "out" / "pinned.md")
    before = {p.name: p.read_bytes() for p in (tmp_path / "st").iterdir()}
    cases = [("st/sealbox.db", "sealbox.db", "database"), ("st/log.key", "log.key", "signing key"),
             ("st/checkpoint", "checkpoint", "checkpoint file"),
             ("st/../st/sealbox.db-journal", "sealbox.db-journal", "rollback journal"),
             ("out/pinned.md", "log.vkey", "pinned verifier key")]  # a hard link of st/log.vkey
    for target, name, what in cases:
        code, out, err = _cli("report", run.run_id, "-s", "st", "-o", target, "--format", "md", cwd=tmp_path)
        # before the fix: "wrote st/sealbox.db (md, ...)", exit 0, and the store was a Markdown file
        assert (code, out) == (2, ""), target
        assert err == (f"error: cannot write {target}: it is the store's own {what} (st/{name}), which is never "
                       "replaced (nothing was written)\n")
    assert {p.name: p.read_bytes() for p in (tmp_path / "st").iterdir()} == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pinned.md"]
    assert os.stat(tmp_path / "st" / "log.vkey").st_nlink == 2
    code, out, err = _cli("report", run.run_id, "-s", "st", "-o", "st/report.md", cwd=tmp_path)  # any other name
    assert (code, err) == (0, "")
    assert out == "wrote st/report.md (md, 5 events, 1 tool call, 0 approvals; store verified)\n"
    assert (tmp_path / "st" / "report.md").read_text(encoding="utf-8").startswith("# Sealbox incident report")


def test_report_into_a_folder_where_no_file_can_be_created_fails_before_any_work(tmp_path):
    store = sealbox.init_store(tmp_path / "st")
    store.close()
    # the run does not exist either: the target is refused first, when its temporary file is created
    code, out, err = _cli("report", "no-such-run", "-s", "st", "-o", "/proc/self/r.md", cwd=tmp_path)
    assert (code, out, err) == (2, "", "error: cannot write /proc/self/r.md: No such file or directory\n")


@pytest.mark.parametrize("fmt, start", [([], "# Sealbox incident report: run"), (["--format", "html"], "<!DOCTYPE html>")])
def test_report_to_dash_is_stdout_not_a_file_named_dash(failed_run, tmp_path, fmt, start):
    store, run_id = failed_run
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "sealbox"), "report", run_id, "-o", "-",
                           *fmt, "--no-verify", "-s", str(tmp_path / "store")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith(start) and run_id in proc.stdout
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("flag, message", [
    ("-o", "error: -o -: an export is written to a file (a bundle is a ZIP checked as a whole, Parquet needs a "
           "seekable file), not to stdout: give a path"),
    ("--parquet", "error: --parquet -: an export is written to a file (a bundle is a ZIP checked as a whole, "
                  "Parquet needs a seekable file), not to stdout: give a path"),
])
def test_export_to_dash_is_one_error_line_and_no_file_named_dash(failed_run, tmp_path, flag, message):
    store, run_id = failed_run
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "sealbox"), "export", run_id, flag, "-",
                           "-s", str(tmp_path / "store")], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message + "\n")
    assert not (tmp_path / "-").exists()


def test_terminal_controls_and_bidi_overrides_in_recorded_names_are_shown_escaped(tmp_path):
    """An agent name, principal, tool name or result chosen by whoever drives the agent went into the
    report as is: ESC sequences (``cat incident.md`` cleared the screen, retitled the window) and bidi
    overrides (a tool named U+202E + 'yreuq_daer' read 'read_query' in the HTML and Markdown reports),
    while `sealbox runs show` and `calls` print them escaped. Both reports now escape them the same way."""
    store = sealbox.init_store(tmp_path / "store")
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot\x1b]0;pwned\x07", principal="agent:bot") as run:
            run.call_tool("db", "\u202eyreuq_daer", {"q": "x"}, lambda q: "ok\u202e\x9b31m")
        report = build_report(store, run.run_id, verify=False)
    finally:
        store.close()
    text = render_markdown(report)
    page = render_html(report)
    for out in (text, page):
        assert not any(ch in out for ch in "\x1b\x07\x9b\u202e")
    assert "bot\\\\x1b\\]0;pwned\\\\x07" in text  # \x1b shown, its backslash escaped for Markdown
    assert "\\\\u202eyreuq\\_daer" in text
    assert "bot\\x1b]0;pwned\\x07" in page and "\\u202eyreuq_daer" in page
    assert "&quot;ok\\u202e\\x9b31m&quot;" in page and '"ok\\u202e\\x9b31m"' in text  # the result's JSON text too
