"""Round trip of every outcome a call held for approval can have: recorded with the real Recorder and
approvals API, ``sealbox export --otlp`` to a real OTLP/HTTP endpoint on 127.0.0.1, ``sealbox import``
of what it received into a fresh store, then ``sealbox calls --json`` of both stores compared field
by field. The import gave every call without a result ``held`` (it has no ``approval.requested``: an
imported approval is a note), so ``denied``, ``expired``, ``abandoned`` and ``unknown`` calls came back
as ``held``; a re-export of the imported run said ``held`` too.

On every backend: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
import time
import uuid

import pytest
from identity_testkit import admin_key
from test_otlp_roundtrip import Collector, _sb

import sealbox
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.interop.otlp import build_otlp
from sealbox.interop.parquet import call_rows
from sealbox.policy import Policy
from sealbox.recorder import Recorder

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")

POLICY = textwrap.dedent("""
    version: 1
    rules:
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], expires: EXPIRES}
""")

#: call id -> the outcome `sealbox calls` gives it, one run each
EXPECTED = {"c-held": "held", "c-denied": "denied", "c-expired": "expired", "c-abandoned": "abandoned",
            "c-unknown": "unknown", "c-ok": "ok", "c-error": "error"}
#: `calls --json` fields that are the source's own facts and must come back unchanged
SAME = ("step", "call_id", "server", "tool", "exposed", "arguments", "decision", "rule", "outcome", "ok", "error",
        "duration_us", "agent")


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    """``init(path)``: a new store at ``path`` on the backend (PostgreSQL: its own schema, dropped after)."""
    schemas: list[str] = []

    def init(path):
        if request.param == "sqlite":
            return sealbox.init_store(path)
        schemas.append(f"sbt_otlp_out_{uuid.uuid4().hex[:16]}")
        return sealbox.init_store(path, postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"], schema=schemas[-1])

    yield init
    if schemas:
        import psycopg

        with psycopg.connect(os.environ["SEALBOX_TEST_POSTGRES_URL"], autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _suspend(rec: Recorder, call_id: str) -> tuple[str, str]:
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"query": f"DELETE FROM t -- {call_id}"}, lambda query: "ok",
                          call_id=call_id)
    return pending.value.run_id, pending.value.approval_id


def _resume(rec: Recorder, run_id: str, fn=lambda query: "deleted") -> str:
    with rec.resume(run_id, tools={("db", "write_query"): fn}) as run:
        [call] = run.resumed_calls
        return call.outcome


def _fail(query):
    raise ValueError("table locked")


def _record(store, tmp_path) -> list[str]:
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    short = Recorder(store, policy=Policy.from_text(POLICY.replace("EXPIRES", "2s")), approvals="suspend")
    long = Recorder(store, policy=Policy.from_text(POLICY.replace("EXPIRES", "1h")), approvals="suspend")
    runs = {}
    runs["c-held"], _ = _suspend(long, "c-held")
    runs["c-denied"], aid = _suspend(long, "c-denied")
    answer(store, aid, "deny", "not today", key)
    assert _resume(long, runs["c-denied"]) == "denied"
    runs["c-expired"], _ = _suspend(short, "c-expired")
    runs["c-abandoned"], _ = _suspend(long, "c-abandoned")
    top = max(int(e.step.split(".")[0]) for e in store.read_run(runs["c-abandoned"]))
    store.append(EventDraft("run.ended", {"status": "cancelled"}, run_id=runs["c-abandoned"], principal="agent:bot",
                            step=str(top + 1)))
    # approved and resumed, and the process died while the tool ran: no tool.result
    runs["c-unknown"], aid = _suspend(long, "c-unknown")
    answer(store, aid, "approve", "fine", key)
    call = next(e for e in store.read_run(runs["c-unknown"]) if e.kind == "tool.call")
    store.append(EventDraft("run.resumed", {"approval_ids": [aid], "waited_us": 5, "outcomes": {aid: "approved"}},
                            run_id=runs["c-unknown"], principal="agent:bot", step=call.step))
    runs["c-ok"], aid = _suspend(long, "c-ok")
    answer(store, aid, "approve", "fine", key)
    assert _resume(long, runs["c-ok"]) == "approved"
    runs["c-error"], aid = _suspend(long, "c-error")
    answer(store, aid, "approve", "fine", key)
    assert _resume(long, runs["c-error"], _fail) == "approved"  # the tool raised: its result is an error
    time.sleep(2.2)
    assert _resume(short, runs["c-expired"]) == "expired"
    return [runs[c] for c in EXPECTED]


def _calls(path) -> list[dict]:
    out = _sb("calls", "-s", path, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_every_outcome_comes_back_from_an_otlp_export_and_import(backend, tmp_path):
    store = backend(tmp_path / "source")
    run_ids = _record(store, tmp_path)
    store.close()
    source = _calls(tmp_path / "source")
    assert {r["call_id"]: r["outcome"] for r in source} == EXPECTED

    collector = Collector()
    try:
        out = _sb("export", *run_ids, "-s", tmp_path / "source", "--otlp", collector.url, "--otlp-content")
        assert out.returncode == 0, out.stderr
    finally:
        collector.close()
    path = tmp_path / "otlp.json"
    path.write_text(json.dumps(collector.otlp_json(hex_ids=True)), encoding="utf-8")
    backend(tmp_path / "target").close()
    out = _sb("import", "-s", tmp_path / "target", "--json", path)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["runs"]) == len(EXPECTED)

    imported = _calls(tmp_path / "target")
    by_call = {r["call_id"]: r for r in imported}
    assert sorted(by_call) == sorted(EXPECTED)
    for row in source:
        got = by_call[row["call_id"]]
        assert {k: got[k] for k in SAME} == {k: row[k] for k in SAME}, row["call_id"]
    assert {c: by_call[c]["outcome"] for c in EXPECTED} == EXPECTED
    # a --match on the outcome sees the same value in the imported store
    out = _sb("calls", "-s", tmp_path / "target", "--json", "--match", "outcome~^(denied|expired|abandoned)$")
    assert sorted(r["call_id"] for r in json.loads(out.stdout)) == ["c-abandoned", "c-denied", "c-expired"]
    # imported data is never evidence: no grant, no approver, reason code "imported"
    assert {(r["grant"], r["reason_code"]) for r in imported} == {("imported:unknown", "imported")}
    assert [r["approvers"] for r in imported] == [[]] * len(EXPECTED)

    # the imported store's own exports and report give the same outcomes
    target = sealbox.open_store(tmp_path / "target", readonly=True)
    try:
        ids = [r["run_id"] for r in imported]
        assert {r["call_id"]: r["outcome"] for r in call_rows(target, ids)} == EXPECTED
        batch = build_otlp(target, ids)
        assert {s.attributes["gen_ai.tool.call.id"]: s.attributes["sealbox.tool.outcome"] for s in batch.spans
                if s.attributes.get("gen_ai.operation.name") == "execute_tool"} == EXPECTED
        from sealbox.report.model import build_report

        got = {}
        for run_id in ids:
            got.update({c.call_id: c.outcome for c in build_report(target, run_id, verify=False).tool_calls})
        assert got == EXPECTED
    finally:
        target.close()
