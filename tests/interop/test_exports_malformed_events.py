"""An event that fails its kind's schema (changed below Sealbox, or written by an older writer) never stops
the Parquet or the OTLP export. A ``tool.call`` whose ``server`` or ``call_id`` was a number made
``sealbox export --parquet`` fail with ``internal error: ArrowTypeError``, and ``build_otlp`` with a
``TypeError``; ``run.started`` labels that were a list made ``build_otlp`` fail with an ``AttributeError``.
Now the Parquet row holds the value's JSON text and the flag ``malformed_event``; the OTLP span carries
what is of the right type.

Real SQLite stores, changed with plain sqlite3 below Sealbox (triggers dropped, then put back).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import sealbox
from sealbox.approvals import ApprovalPending
from sealbox.canonical import canonical_bytes
from sealbox.interop.otlp import build_otlp
from sealbox.interop.parquet import call_rows
from sealbox.policy import Policy
from sealbox.recorder import Recorder

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], expires: 1h}
"""


def _change(folder, leaf: int, field: str, value) -> None:
    conn = sqlite3.connect(folder / "sealbox.db", isolation_level=None)
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


@pytest.fixture
def changed(tmp_path, request):
    """A run held on one write_query (call id ``c-1``), then ``(kind, field, value)`` set below Sealbox."""
    kind, field, value = request.param
    folder = tmp_path / "store"
    store = sealbox.init_store(folder)
    with pytest.raises(ApprovalPending) as pending:
        with Recorder(store, policy=Policy.from_text(textwrap.dedent(POLICY)), approvals="suspend").run(
                agent="bot", principal="agent:bot", labels={"env": "test"}) as run:
            run.call_tool("db", "write_query", {"query": "DELETE FROM t"}, lambda query: "ok", call_id="c-1")
    run_id = pending.value.run_id
    _change(folder, next(e.leaf_index for e in store.read_run(run_id) if e.kind == kind), field, value)
    yield store, folder, run_id
    store.close()


@pytest.mark.parametrize("changed", [("tool.call", "server", 7)], indirect=True)
def test_a_server_that_is_a_number_is_its_json_text_in_the_parquet_row(changed, tmp_path):
    store, folder, run_id = changed
    [row] = call_rows(store, [run_id])
    assert (row["call_id"], row["server"], row["tool"], row["outcome"], row["flags"]) == (
        "c-1", "7", "write_query", "held", ["malformed_event"])
    [span] = [s for s in build_otlp(store, [run_id]).spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert (span.attributes["gen_ai.tool.call.id"], "sealbox.server" in span.attributes) == ("c-1", False)
    store.close()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", run_id, "--parquet",
                          str(tmp_path / "calls.parquet"), "-s", str(folder)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    import pyarrow.parquet as pq

    [written] = pq.read_table(tmp_path / "calls.parquet").to_pylist()
    assert (written["server"], written["flags"]) == ("7", ["malformed_event"])


@pytest.mark.parametrize("changed", [("tool.call", "call_id", 7), ("tool.call", "call_id", [1])], indirect=True)
def test_a_call_id_that_is_no_string_stops_no_export(changed):
    store, _, run_id = changed
    [row] = call_rows(store, [run_id])
    assert (row["call_id"], row["flags"]) == (canonical_bytes(store.read_run(run_id)[1].payload["call_id"]).decode(),
                                              ["malformed_event", "outcome_unknown"])
    [span] = [s for s in build_otlp(store, [run_id]).spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert span.attributes["gen_ai.tool.call.id"] == "malformed:" + json.dumps(
        store.read_run(run_id)[1].payload["call_id"], separators=(",", ":"))


@pytest.mark.parametrize("changed", [("run.started", "labels", [1])], indirect=True)
def test_labels_that_are_no_object_stop_no_otlp_export(changed):
    store, _, run_id = changed
    [run_span] = [s for s in build_otlp(store, [run_id]).spans
                  if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert not [k for k in run_span.attributes if k.startswith("sealbox.label.")]


@pytest.mark.parametrize("changed", [("tool.call", "call_id", [1]), ("tool.call", "call_id", {"a": 1})],
                         indirect=True)
def test_a_call_id_that_is_a_list_or_object_stops_no_report(changed, tmp_path):
    """`sealbox report RUN` of such a store failed with ``internal error: TypeError: unhashable type``; the
    report (of a store that no longer verifies) is written, the call named by the value's JSON text."""
    from sealbox.report import build_report, render

    store, folder, run_id = changed
    value = store.read_run(run_id)[1].payload["call_id"]
    report = build_report(store, run_id)
    assert [c.call_id for c in report.tool_calls] == ["malformed:" + json.dumps(value, separators=(",", ":"))]
    assert "malformed:" in render(report, "md")
    store.close()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "report", run_id, "-o", str(tmp_path / "r.html"),
                          "-s", str(folder)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == "" and "store NOT VERIFIED" in out.stdout, out.stderr


def test_a_held_call_without_request_beside_a_call_id_that_is_a_list_stops_no_calls(tmp_path):
    """`sealbox calls` reads the imported outcome of a held call its run holds no request for among the run's
    tool.call events; one of them with a ``call_id`` that is a list failed with ``internal error: TypeError:
    unhashable type: 'list'``. Now that event is passed over: the other calls are listed."""
    policy = Policy.from_text(textwrap.dedent(POLICY) + "  - id: reads\n    match: {tool: read_query}\n    effect: allow\n")
    folder = tmp_path / "store"
    store = sealbox.init_store(folder)
    with pytest.raises(ApprovalPending):
        with Recorder(store, policy=policy, approvals="suspend").run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda query: "ok", call_id="c-0")
            run.call_tool("db", "write_query", {"query": "DELETE FROM t"}, lambda query: "ok", call_id="c-1")
    events = store.read_run(run.run_id)
    store.close()
    _change(folder, next(e.leaf_index for e in events if e.kind == "tool.call"), "call_id", [1])
    # the request names another call: c-1 is held with no request of its own (as an imported call)
    _change(folder, next(e.leaf_index for e in events if e.kind == "approval.requested"), "call_id", "c-x")
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "calls", "--json", "-s", str(folder)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert [(c["call_id"], c["outcome"]) for c in json.loads(out.stdout) if c["call_id"] == "c-1"] == [("c-1", "held")]
