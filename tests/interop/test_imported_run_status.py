"""An imported run's status is its source's, marked imported: a run exported by Sealbox while suspended
or still running is imported with a ``run.ended`` (status ``ok``, the source status kept in its
``imported`` facts), and ``runs list`` listed it as ``ended (ok)``, ``--status ok`` included it, and
``runs show`` and ``report`` called it a successful run.

Recorded with the real Recorder, exported with ``sealbox export --otlp`` to a real OTLP/HTTP endpoint on
127.0.0.1, imported with ``sealbox import``, read back with the CLI. On every backend: SQLite, and
PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_import_vs_live import REQUEST, RESPONSE, _export, backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

from sealbox.approvals import ApprovalPending
from sealbox.policy import Policy
from sealbox.errors import RecordingError
from sealbox.interop.otlp import build_otlp
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
POLICY = textwrap.dedent("""
    version: 1
    rules:
      - id: writes-need-ops
        match: {tool: write}
        effect: require_approval
        approval: {groups: [ops], expires: 1h}
      - id: allow-rest
        effect: allow
""")


def _json(*args):
    out = _sb(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_imported_run_shows_its_source_status_marked_imported(backend, tmp_path):
    source = backend(tmp_path / "source")
    rec = Recorder(source, policy=Policy.from_text(POLICY), approvals="suspend")
    with rec.run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "read", {}, lambda: "rows")
        done = run.run_id
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write", {}, lambda: "written")
    held = pending.value.run_id
    ctx = rec.run(agent="bot", principal="agent:bot")
    run = ctx.__enter__()
    run.model_call(REQUEST, RESPONSE, usage={"input_tokens": 1, "output_tokens": 1}, provider="openai", model="gpt-4o")
    busy = run.run_id
    file = _export(tmp_path / "source", [done, held, busy], tmp_path)  # the third run still running
    ctx.__exit__(None, None, None)
    source.close()

    live = backend(tmp_path / "live")
    with Recorder(live, policy=Policy.from_text(POLICY)).run(agent="bot", principal="agent:bot") as run:
        run.call_tool("db", "read", {}, lambda: "rows")
        mine = run.run_id
    live.close()
    store = tmp_path / "live"
    summary = _json("import", "-s", store, file)
    rows = {r["run_id"]: r for r in _json("runs", "list", "-s", store)}
    by_source = {}
    # which imported run is which: the source run id is among the imported run's original ids
    from sealbox import open_store

    s = open_store(store, readonly=True)
    try:
        for run_id in summary["runs"]:
            ids = s.read_run(run_id)[0].payload["imported"]["original_ids"]
            by_source[ids["sealbox_run_id"]] = run_id
        # exported again (to the next store, a collector), each says the status runs list shows
        batch = build_otlp(s, summary["runs"])
        exported = {span.attributes["sealbox.run_id"]: span.attributes["sealbox.run.status"] for span in batch.spans
                    if span.attributes.get("gen_ai.operation.name") == "invoke_agent"}
        assert exported == {by_source[done]: "ok", by_source[held]: "suspended", by_source[busy]: "running"}
    finally:
        s.close()
    got = {k: (rows[by_source[k]]["status"], rows[by_source[k]]["ending"], rows[by_source[k]]["imported"])
           for k in (done, held, busy)}
    assert got == {done: ("ended", "ok", True), held: ("suspended", None, True), busy: ("running", None, True)}
    assert (rows[mine]["status"], rows[mine]["ending"], rows[mine]["imported"]) == ("ended", "ok", False)
    assert rows[by_source[held]]["ended_at"] is None

    # --status filters on the status shown
    assert {r["run_id"] for r in _json("runs", "list", "-s", store, "--status", "ok")} == {mine, by_source[done]}
    assert [r["run_id"] for r in _json("runs", "list", "-s", store, "--status", "suspended")] == [by_source[held]]
    running = [r["run_id"] for r in _json("runs", "list", "-s", store, "--status", "running")]
    assert running == [by_source[busy], "system"]  # the store's own system run never ends
    assert {r["run_id"] for r in _json("runs", "list", "-s", store, "--status", "ended")} == {mine, by_source[done]}

    # the table, runs show and the report say it
    out = _sb("runs", "list", "-s", store)
    assert out.returncode == 0, out.stderr
    table = out.stdout
    assert "suspended (imported)" in table and "running (imported)" in table and "ended (ok, imported)" in table
    out = _sb("runs", "show", by_source[held], "-s", store)
    assert out.returncode == 0, out.stderr
    assert f"run      {by_source[held]}  agent bot  principal imported:bot  suspended (imported)" in out.stdout
    # sealbox calls lists them among the live calls: each imported call's outcome says so
    calls = {(r["run_id"], r["outcome"], r["reason_code"]) for r in _json("calls", "-s", store)}
    assert calls == {(mine, "ok", "policy_allow"), (by_source[done], "ok", "imported"),
                     (by_source[held], "held", "imported")}
    table = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "calls", "-s", str(store)], capture_output=True,
                           text=True, env={**os.environ, "COLUMNS": "300"}, timeout=120).stdout
    outcomes = [line.split("│")[8].strip() for line in table.splitlines() if line.startswith("│")]
    assert sorted(outcomes) == ["(imported) held", "(imported) ok", "ok"]
    report = tmp_path / "held.md"
    out = _sb("report", by_source[held], "-s", store, "-o", report, "--no-verify")
    assert out.returncode == 0, out.stderr
    text = report.read_text(encoding="utf-8")
    assert "| **status** | suspended (imported) |" in text
    assert "| **ended** | (not ended) |" in text


def test_a_runstate_interrupted_for_approvals_is_listed_suspended(tmp_path):
    """An Agents SDK RunState saved while waiting for an approval was a run paused for it, not one ended ok."""
    import sealbox
    from sealbox.interop.importers import import_file

    store = sealbox.init_store(tmp_path / "s")
    try:
        (run,) = import_file(store, CORPUS / "openai-agents-runstate/resume/v1_13_pending_tool_approval.json").runs
        row = store.get_run(run)
        assert (row["status"], row["ending"], row["imported"], row["ended_at"]) == ("suspended", None, True, None)
        assert [r["run_id"] for r in store.query_runs(status="suspended")] == [run]
        assert store.query_runs(status="ok") == []
        # listed as suspended, it is a copy: resuming it says so (it said "has ended", contradicting the listing)
        with pytest.raises(RecordingError) as refused:
            Recorder(store, policy=ALLOW_ALL).resume(run)
        assert str(refused.value) == (f"run {run} was imported (sealbox import): a copy of a run recorded "
                                      "elsewhere, which cannot be continued or resumed in this store")
    finally:
        store.close()
