"""Human tables show recorded text exactly: square brackets are not console markup.

Regression (input: agent names, labels, tool names and arguments holding ``[...]``): rich read
every table cell as markup, so ``read[x]`` was shown as ``read`` and a value holding ``[/b]``
(a closing tag with nothing open) stopped ``sealbox calls``, ``runs list`` and ``runs show``
with ``internal error: MarkupError`` (exit 70).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sealbox import init_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _sealbox(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**env, "COLUMNS": "400"})


@pytest.fixture(scope="module")
def store_with_brackets(tmp_path_factory) -> tuple[str, str]:
    path = tmp_path_factory.mktemp("markup") / "store"
    store = init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="[bold]bot[/bold]", principal="agent:x", labels={"k": "[/]"}) as run:
        run.call_tool("db", "read[x]", {"query": "SELECT '[/b]'"}, lambda **kw: 1)
        run_id = run.run_id
    store.close()
    return str(path), run_id


def test_calls_table_shows_brackets_in_tool_names_and_arguments(store_with_brackets):
    path, run_id = store_with_brackets
    proc = _sealbox("calls", "-s", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    row = next(line for line in proc.stdout.splitlines() if run_id in line)
    assert "│ db/read[x] │" in row
    assert """{"query": "SELECT '[/b]'"}""" in row


def test_runs_list_table_shows_bracketed_agent_and_label(store_with_brackets):
    path, run_id = store_with_brackets
    proc = _sealbox("runs", "list", "-s", path)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if run_id in line)
    assert "│ [bold]bot[/bold] │" in row
    assert "│ k=[/]" in row


def test_runs_show_table_shows_bracketed_arguments(store_with_brackets):
    path, run_id = store_with_brackets
    proc = _sealbox("runs", "show", run_id, "-s", path)
    assert proc.returncode == 0, proc.stderr
    call = next(line for line in proc.stdout.splitlines() if "│ tool.call" in line)
    assert "│ db/read[x] │" in call
    assert """args={"query": "SELECT '[/b]'"}""" in call


# Regression (input: recorded text holding terminal control sequences or bidirectional overrides):
# tables, the runs show header and approvals show printed them raw, so a tool name or an argument
# chosen by the agent could clear the screen, retitle the terminal, move the cursor over the lines
# an approver reads before approving, or reverse the text shown after it.
ESC_TOOL = "write\x1b]0;pwned\x07\x1b[1A\x1b[2K"  # OSC retitle, cursor up, erase line
BIDI_SQL = "DELETE FROM users -- \u202e;tset_ni_ylno\u202c"


@pytest.fixture(scope="module")
def store_with_controls(tmp_path_factory):
    import textwrap

    from identity_testkit import admin_key

    from sealbox.approvals import ApprovalPending
    from sealbox.identities import add_identity
    from sealbox.policy import Policy

    path = tmp_path_factory.mktemp("controls") / "store"
    store = init_store(path)
    add_identity(store, "alice", "approver", ["ops"], key_path=path.parent / "alice.key",
                 admin_key=admin_key(store, path.parent))
    policy = Policy.from_text(textwrap.dedent("""
        version: 1
        rules:
          - {id: ask, effect: require_approval, approval: {groups: [ops]}}
    """))
    rec = Recorder(store, policy=policy, approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot\x1b[2J", principal="agent:bot") as run:
            run_id = run.run_id
            run.call_tool("db", ESC_TOOL, {"query": BIDI_SQL}, lambda **kw: 1)
    store.close()
    return str(path), run_id, pending.value.approval_id


def _no_controls(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\u202e\u202c"), repr(text)


def test_approvals_show_escapes_control_sequences_and_bidi_overrides(store_with_controls):
    path, run_id, approval_id = store_with_controls
    proc = _sealbox("approvals", "show", approval_id, "-s", path)
    assert proc.returncode == 0, proc.stderr
    _no_controls(proc.stdout)
    lines = proc.stdout.splitlines()
    assert lines[3].startswith("call       call_") and lines[3].endswith(
        r"  db/write\x1b]0;pwned\x07\x1b[1A\x1b[2K")
    assert lines[4] == r'arguments  {"query": "DELETE FROM users -- \u202e;tset_ni_ylno\u202c"}'
    # --json keeps the recorded text
    import json
    doc = json.loads(_sealbox("approvals", "show", approval_id, "-s", path, "--json").stdout)
    assert (doc["tool"], doc["arguments"]) == (ESC_TOOL, {"query": BIDI_SQL})


def test_calls_table_and_runs_show_escape_control_sequences(store_with_controls):
    path, run_id, _ = store_with_controls
    calls = _sealbox("calls", "-s", path)
    assert calls.returncode == 0, calls.stderr
    _no_controls(calls.stdout)
    assert r"│ db/write\x1b]0;pwned\x07\x1b[1A\x1b[2K │" in calls.stdout
    shown = _sealbox("runs", "show", run_id, "-s", path)
    assert shown.returncode == 0, shown.stderr
    _no_controls(shown.stdout)
    assert shown.stdout.splitlines()[0] == rf"run      {run_id}  agent bot\x1b[2J  principal agent:bot  suspended"


def test_runs_show_keeps_an_agent_name_with_a_newline_on_its_own_line(tmp_path):
    """An agent name is whatever the client says it is (an MCP client's clientInfo.name through the gateway):
    ``runs show`` printed one holding a newline as it was, so its header gained a line of the agent's choosing
    (``parent   <another run>``, ``principal admin``) indistinguishable from its own. The header's agent and
    principal are shown on their line, a newline or tab written as ``\\n`` / ``\\t``; --json keeps the text."""
    store = init_store(tmp_path / "store")
    rec = Recorder(store, policy=ALLOW_ALL)
    agent = "bot\nparent   01-forged-parent\tx"
    with rec.run(agent=agent, principal="agent:bot") as run:
        run.call_tool("db", "read", {}, lambda **kw: 1)
        run_id = run.run_id
    store.close()
    shown = _sealbox("runs", "show", run_id, "-s", str(tmp_path / "store"))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [
        rf"run      {run_id}  agent bot\nparent   01-forged-parent\tx  principal agent:bot  ended (ok)",
        "parent   (none)"]
