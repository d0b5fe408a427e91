"""A call held by a malformed ``approval.requested`` (its event fails the kind's schema: written below
Sealbox, or by an older writer with missing or invalid fields) and without a result: ``sealbox calls``,
``report``, the Parquet and the OTLP exports all give it ``unknown`` (the log cannot say whether it was
approved, or ran), flagged ``malformed_request``, and none of them crashes. ``calls`` listed it ``held``
in an open run (it can never be approved); a request naming no call (its ``call_id`` no string) left
its call ``held`` even in an ended run; the Parquet export failed on a request id that is no string
(``no approval request 7``) and the OTLP export on an ``ask`` that is no object.

On every backend: SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set (the events are changed
below Sealbox with the database's own tools).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid

import pytest
from conftest import BACKENDS
from query_helpers import SEALBOX

import sealbox
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending
from sealbox.canonical import canonical_bytes
from sealbox.interop.otlp import build_otlp
from sealbox.interop.parquet import call_rows
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.report.model import build_report

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], expires: 1h}
"""

#: call id -> (the request field changed below Sealbox, its new value, whether the run then ends)
CASES = {
    "c-quorum": ("quorum", "many", False),
    "c-no-call": ("call_id", 7, False),
    "c-id": ("approval_id", 7, False),
    "c-ask": ("ask", [1], True),
    "c-no-call-ended": ("call_id", None, True),
}


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
        yield s
        s.close()
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_malformed_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "store", postgres_url=url, schema=schema)
    try:
        yield s
    finally:
        s.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _change_below_sealbox(store, leaf: int, field: str, value) -> None:
    """Set ``payload.<field>`` of the event at ``leaf`` in the database itself (append-only triggers
    not in force), as someone with the database's own tools would."""
    if store.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(store.db_path, isolation_level=None)
        try:
            raw = json.loads(conn.execute("SELECT raw FROM events WHERE leaf_index = ?", (leaf,)).fetchone()[0])
            raw["payload"][field] = value
            saved = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
            conn.execute("BEGIN IMMEDIATE")
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                conn.execute(f'DROP TRIGGER "{name}"')
            conn.execute("UPDATE events SET raw = ? WHERE leaf_index = ?", (canonical_bytes(raw), leaf))
            for sql in saved:
                conn.execute(sql)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {store.schema}")
        conn.execute("SET session_replication_role = replica")
        raw = json.loads(bytes(conn.execute("SELECT raw FROM events WHERE leaf_index = %s", (leaf,)).fetchone()[0]))
        raw["payload"][field] = value
        conn.execute("UPDATE events SET raw = %s WHERE leaf_index = %s", (canonical_bytes(raw), leaf))


def _record(store) -> dict[str, str]:
    rec = Recorder(store, policy=Policy.from_text(textwrap.dedent(POLICY)), approvals="suspend")
    runs = {}
    for call_id, (field, value, ends) in CASES.items():
        with pytest.raises(ApprovalPending) as pending:
            with rec.run(agent="bot", principal="agent:bot") as run:
                run.call_tool("db", "write_query", {"query": f"DELETE FROM t -- {call_id}"}, lambda query: "ok",
                              call_id=call_id)
        run_id = runs[call_id] = pending.value.run_id
        if ends:
            store.append(EventDraft("run.ended", {"status": "cancelled"}, run_id=run_id, principal="agent:bot",
                                    step="3"))
        leaf = next(e.leaf_index for e in store.read_run(run_id) if e.kind == "approval.requested")
        _change_below_sealbox(store, leaf, field, value)
    return runs


def test_a_call_held_by_a_malformed_request_is_unknown_everywhere(store):
    runs = _record(store)
    ids = list(runs.values())
    expected = {call_id: "unknown" for call_id in CASES}

    rows = store.query_calls()
    assert {r["call_id"]: (r["outcome"], r["flags"]) for r in rows} == {
        c: ("unknown", ["malformed_request"]) for c in CASES}
    assert sorted(r["call_id"] for r in store.query_calls(match="flags~malformed_request")) == sorted(CASES)
    assert store.query_calls(match="outcome~^held$") == []

    parquet = call_rows(store, ids)
    assert {r["call_id"]: (r["outcome"], r["approval"], r["flags"]) for r in parquet} == {
        c: ("unknown", "malformed", ["malformed_request", "outcome_unknown"]) for c in CASES}

    batch = build_otlp(store, ids)
    assert {s.attributes["gen_ai.tool.call.id"]: s.attributes["sealbox.tool.outcome"] for s in batch.spans
            if s.attributes.get("gen_ai.operation.name") == "execute_tool"} == expected
    requested = [r.log_record for r in batch.logs if r.log_record.attributes["event.name"] == "sealbox.approval.requested"]
    assert [(r.attributes.get("gen_ai.tool.call.id"), r.severity_text) for r in requested] == [
        (c, "WARN") for c in CASES]
    assert [r.attributes["sealbox.approval.malformed"] for r in requested] == [
        "approval.requested: data.quorum must be integer", "approval.requested: data.call_id must be string",
        "approval.requested: data.approval_id must be string", "approval.requested: data.ask must be object",
        "approval.requested: data.call_id must be string"]

    reported = {}
    for run_id in ids:
        reported.update({c.call_id: c.outcome for c in build_report(store, run_id, verify=False).tool_calls})
    assert reported == expected


def test_sealbox_calls_prints_them_unknown_and_flagged(store):
    _record(store)
    path = str(store.path)
    store.close()
    out = subprocess.run([SEALBOX, "calls", "--store", path, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert {r["call_id"]: (r["outcome"], r["flags"]) for r in json.loads(out.stdout)} == {
        c: ("unknown", ["malformed_request"]) for c in CASES}
    table = subprocess.run([SEALBOX, "calls", "--store", path], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    lines = [line for line in table.stdout.splitlines() if "c-" in line or "db/write_query" in line]
    assert len(lines) == len(CASES)
    assert all("unknown" in line and "⚑ malformed_request" in line for line in lines)
