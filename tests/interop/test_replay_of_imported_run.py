"""Replaying an imported run compares the replay's ending with the run's status at its source.

The importer closes every imported run with a ``run.ended`` whose status is ``ok`` and keeps the source's
status in its ``imported`` facts; listings show the source's status (``suspended (imported)``,
``sealbox.query.imported_run_status``). The replay compared its ending with that ``ok``: a run suspended
or still running at its source, replayed by an agent that ended ok, was reported as reproduced. And the
note the importer writes at a held call's step for its approval hid the call: replaying a run imported
suspended said the replay made a tool.call "where the record has a note" (now ``pending_approval``).

Recorded with the real Recorder, exported with ``sealbox export --otlp`` to a real OTLP/HTTP endpoint on
127.0.0.1, imported with ``sealbox import``, replayed with the real Replayer. On every backend: SQLite,
and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from test_import_vs_live import _export, backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

from sealbox import open_store
from sealbox.approvals import ApprovalPending
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

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


def agent(run):
    run.call_tool("db", "read", {}, lambda: "rows")


def writer(run):
    run.call_tool("db", "read", {}, lambda: "rows")
    run.call_tool("db", "write", {}, lambda: "written")


def test_replay_of_imported_runs(backend, tmp_path):
    source = backend(tmp_path / "source")
    rec = Recorder(source, policy=Policy.from_text(POLICY), approvals="suspend")
    with rec.run(agent="bot", principal="agent:bot") as run:
        agent(run)
        done = run.run_id
    with pytest.raises(ApprovalPending):
        with rec.run(agent="bot", principal="agent:bot") as run:
            writer(run)
    held = run.run_id
    ctx = rec.run(agent="bot", principal="agent:bot")
    run = ctx.__enter__()
    agent(run)
    busy = run.run_id
    file = _export(tmp_path / "source", [done, held, busy], tmp_path)
    ctx.__exit__(None, None, None)
    source.close()
    backend(tmp_path / "store").close()
    out = _sb("import", "-s", tmp_path / "store", file, "--json")
    assert out.returncode == 0, out.stderr
    imported = json.loads(out.stdout)["runs"]
    store = open_store(tmp_path / "store")
    try:
        by_source = {store.read_run(r)[0].payload["imported"]["original_ids"]["sealbox_run_id"]: r for r in imported}
        replayer = Replayer(store)

        # ended ok at its source, replayed ending ok: reproduced
        assert replayer.replay(by_source[done], agent).head() == "reproduced: 1 step(s) matched"

        # still running at its source: the replay ending ok is not what the source recorded
        result = replayer.replay(by_source[busy], agent)
        d = result.divergence
        assert (result.reproduced, result.steps_compared, d.kind, d.step) == (False, 1, "outcome", None)
        assert d.message == ("every step matched, but the recorded run was still running at its source (an "
                             "imported run: it never ended there; its run.ended, status ok, was written by "
                             "sealbox import) and the replay ended ok")
        ended = [e.payload for e in store.read_run(result.new_run_id) if e.kind == "run.ended"][0]
        assert (ended["status"], ended["verdict"]["reproduced"], ended["verdict"]["divergence"]["message"]) == (
            "ok", False, d.message)

        # suspended at its source: the held call (its approval imported as a note at its step) is where the
        # replay ends, as for a run suspended in this store
        result = replayer.replay(by_source[held], writer)
        d = result.divergence
        assert (result.reproduced, result.steps_compared, d.kind, d.step) == (False, 2, "pending_approval", "3")
        approval_id = [e.payload["about"]["imported_approval"]["approval_id"] for e in store.read_run(by_source[held])
                       if e.kind == "note"][0]
        assert d.message == (f"step 3: the recorded call db/write was held for an approval at its source (imported "
                             f"approval {approval_id}: pending); the run was imported, and was never resumed past it "
                             "there; replay ends here")
        # an agent that stops before it: the replay ended before the held call
        d = replayer.replay(by_source[held], agent).divergence
        assert (d.kind, d.step) == ("missing", "3")
        assert d.message == "the replay ended before step 3 (tool.call db/write) of the record"
    finally:
        store.close()
