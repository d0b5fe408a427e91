"""Round trip: a recorded run, ``sealbox export --otlp`` to a real OTLP/HTTP endpoint on 127.0.0.1,
what it received written as OTLP/JSON, ``sealbox import`` of that file into another store.

What Sealbox itself wrote comes back: each call's decision effect and rule, the tool's own duration
(not the span, which covers the approval wait), server and exposed name, which model call requested
which tool call (steps 2.1, 2.2…, ``tool_call_ids``), denied and held calls without a result, and the
approval, as an imported note whose identity is not authenticated (never an ``approval.answered``:
imported data is not signed evidence). Real stores, the real exporter, the real command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.protobuf.json_format import MessageToDict
from identity_testkit import admin_key
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

import sealbox
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.interop.importers import IMPORTED_POLICY_FINGERPRINT
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied
from sealbox.verify import verify_store

POLICY = textwrap.dedent("""
    version: 1
    name: roundtrip
    rules:
      - id: reads
        match: {tool: "read_*"}
        effect: allow
      - id: no-deletes
        match: {tool: delete_file}
        effect: deny
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
""")


def _call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


RESPONSE = {
    "id": "chatcmpl-rt-1", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
                 "tool_calls": [_call("call_A", "read_file", {"path": "/tmp/a.txt"}),
                                _call("call_B", "delete_file", {"path": "/etc/passwd"}),
                                _call("call_C", "read_query", {"sql": "SELECT * FROM locked"}),
                                _call("call_W", "write_query", {"sql": "DELETE FROM t WHERE old"})]}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
}


class Collector:
    """An OTLP/HTTP (protobuf) endpoint keeping each request as the protobuf JSON mapping."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    msg, reply = ExportTraceServiceRequest.FromString(body), ExportTraceServiceResponse()
                elif self.path == "/v1/logs":
                    msg, reply = ExportLogsServiceRequest.FromString(body), ExportLogsServiceResponse()
                else:
                    self.send_error(404)
                    return
                collector.requests.append(MessageToDict(msg))
                out = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def otlp_json(self, hex_ids: bool) -> dict:
        """One document with every span and log record received; ids base64 (protobuf JSON mapping)
        or lowercase hex (OTLP/JSON, as the Collector's file exporter writes)."""
        doc = {"resourceSpans": [rs for r in self.requests for rs in r.get("resourceSpans", [])],
               "resourceLogs": [rl for r in self.requests for rl in r.get("resourceLogs", [])]}
        return _hex_ids(doc) if hex_ids else doc

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _hex_ids(value):
    import base64

    if isinstance(value, dict):
        return {k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v else _hex_ids(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """One run: a model call requesting four parallel calls (allowed; denied by rule; allowed, raising;
    held for approval, approved by alice after a wait, resumed), then a call no model requested."""
    base = tmp_path_factory.mktemp("rt")
    store = sealbox.init_store(base / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=base / "alice.key",
                       admin_key=admin_key(store, base)).key_path
    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="support-bot", principal="agent:support", labels={"env": "test"}) as run:
            run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "tidy up"}]}, RESPONSE,
                           latency=2000)
            run.call_tool("fs", "read_file", {"path": "/tmp/a.txt"}, lambda path: {"text": "buy milk"},
                          call_id="call_A")
            with pytest.raises(ToolDenied):
                run.call_tool("fs", "delete_file", {"path": "/etc/passwd"}, lambda path: pytest.fail("ran"),
                              call_id="call_B")
            with pytest.raises(ValueError):
                run.call_tool("db", "read_query", {"sql": "SELECT * FROM locked"},
                              lambda sql: (_ for _ in ()).throw(ValueError("table locked")), call_id="call_C")
            run.call_tool("db", "write_query", {"sql": "DELETE FROM t WHERE old"}, lambda sql: pytest.fail("ran"),
                          call_id="call_W")
    answer(store, pending.value.approval_id, "approve", "old rows only", key)
    time.sleep(0.6)  # the approval wait: the tool span covers it, the tool's duration (10 ms) does not

    def write(sql):
        time.sleep(0.01)
        return "deleted 3 rows"

    with rec.resume(run.run_id, {("db", "write_query"): write}) as resumed:
        resumed.call_tool("fs", "read_file", {"path": "/tmp/b.txt"}, lambda path: "b", call_id="call_D")
    store.close()
    return {"base": base, "path": base / "store", "run": run.run_id, "approval": pending.value.approval_id}


def _sb(*args):
    env = {k: v for k, v in os.environ.items()
           if "proxy" not in k.lower() and not k.startswith("OTEL_") and k != "SEALBOX_DEBUG"}
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


def _round_trip(original, tmp_path, content: bool, hex_ids: bool):
    collector = Collector()
    try:
        out = _sb("export", original["run"], "-s", original["path"], "--otlp", collector.url,
                  *(["--otlp-content"] if content else []))
        assert out.returncode == 0, out.stderr
    finally:
        collector.close()
    path = tmp_path / "roundtrip.json"
    path.write_text(json.dumps(collector.otlp_json(hex_ids)), encoding="utf-8")
    target = tmp_path / "target"
    assert _sb("init", target).returncode == 0
    out = _sb("import", "-s", target, "--json", path)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["format"], len(summary["runs"])) == ("otlp-json", 1)
    return target, summary["runs"][0]


FIELDS = ("step", "call_id", "server", "tool", "exposed", "arguments", "decision", "rule", "outcome", "ok", "error",
          "duration_us")


def _events(path, run_id):
    store = sealbox.open_store(path, readonly=True)
    try:
        return [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(run_id)], \
            store.query_calls(run_id=run_id), verify_store(store).ok
    finally:
        store.close()


@pytest.mark.parametrize("hex_ids", [False, True], ids=["protobuf-json-base64-ids", "otlp-json-hex-ids"])
def test_what_sealbox_exported_comes_back_on_import(original, tmp_path, hex_ids):
    target, imported = _round_trip(original, tmp_path, content=True, hex_ids=hex_ids)
    orig_events, orig_calls, _ = _events(original["path"], original["run"])
    events, calls, verified = _events(target, imported)
    assert verified

    # the calls, field by field, as `sealbox calls` shows them
    assert [{k: c[k] for k in FIELDS} for c in calls] == [{k: c[k] for k in FIELDS} for c in orig_calls]
    assert [(c["step"], c["call_id"], c["decision"], c["rule"], c["outcome"]) for c in calls] == [
        ("2.1", "call_A", "allow", "reads", "ok"),
        ("2.2", "call_B", "deny", "no-deletes", "not_run"),
        ("2.3", "call_C", "allow", "reads", "error"),
        ("2.4", "call_W", "require_approval", "writes-need-ops", "ok"),
        ("3", "call_D", "allow", "reads", "ok")]
    assert calls[2]["error"] == {"type": "ValueError", "message": "table locked"}
    # imported data is never evidence: no grant, no approver, reason code "imported"
    assert {c["grant"] for c in calls} == {"imported:unknown"}
    assert [c["approvers"] for c in calls] == [[], [], [], [], []]
    assert [a["identity"] for a in orig_calls[3]["approvers"]] == ["alice"]
    assert {c["reason_code"] for c in calls} == {"imported"}

    # the tool's own duration, not the span's length (which holds the 0.6 s approval wait; 0.2 s was within reach of a
    # loaded host stalling the 10 ms tool)
    (w_call,) = [p for k, _, p in events if k == "tool.call" and p["call_id"] == "call_W"]
    span_us = (_us(w_call["imported"]["end_ts"]) - _us(w_call["imported"]["ts"]))
    assert span_us > 600_000 > calls[3]["duration_us"] >= 10_000

    # the model call and what it requested
    (orig_model,) = [p for k, _, p in orig_events if k == "model.call"]
    (model,) = [(s, p) for k, s, p in events if k == "model.call"]
    assert model[0] == "2"
    assert model[1]["tool_call_ids"] == orig_model["tool_call_ids"] == ["call_A", "call_B", "call_C", "call_W"]
    assert (model[1]["provider"], model[1]["model"], model[1]["latency_us"]) == ("openai", "gpt-4o-2024-08-06", 2000)
    assert model[1]["usage"] == {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    assert model[1]["imported"]["sealbox"]["format"] == "openai.chat"

    # decisions: the source's facts in `imported`, this store's pseudo-policy named
    decisions = {p["call_id"]: p for k, _, p in events if k == "policy.decision"}
    orig_decisions = {p["call_id"]: p for k, _, p in orig_events if k == "policy.decision"}
    assert decisions["call_B"]["imported"] == {
        "source": "sealbox.decision", "effect": "deny", "rule": "no-deletes", "reason_code": "policy_deny",
        "policy_fingerprint": orig_decisions["call_B"]["policy_fingerprint"],
        "reason": orig_decisions["call_B"]["reason"]}
    assert decisions["call_B"]["reason"] == ("imported decision of the exporting Sealbox store: deny by rule "
                                             "no-deletes (policy_deny); this store's policy did not decide it")
    assert {p["policy_fingerprint"] for p in decisions.values()} == {IMPORTED_POLICY_FINGERPRINT}
    assert not any(p["re_evaluable"] for p in decisions.values())
    # denied and never-run calls have no result
    assert [p["call_id"] for k, _, p in events if k == "tool.result"] == ["call_A", "call_C", "call_W", "call_D"]

    # the approval: a note at the call's step, never an approval event
    assert not [k for k, _, _ in events if k.startswith("approval.")]
    (note,) = [(s, p) for k, s, p in events if k == "note"]
    (answered,) = [p for k, _, p in orig_events if k == "approval.answered"]
    (requested,) = [p for k, _, p in orig_events if k == "approval.requested"]
    assert note[0] == "2.4"
    assert note[1] == {
        "text": "imported approval (approved by alice) of call call_W, from a Sealbox OTLP export: not a signed "
                "approval of this store; the approver's identity is not authenticated",
        "about": {"imported_approval": {
            "source": "sealbox.approval.answered", "approval_id": original["approval"], "tool": "write_query",
            "call_id": "call_W", "scope": "call", "decision": "approve", "identity": "alice",
            "identity_authenticated": False, "message": "old rows only", "answered_at": answered["answered_at"],
            "key_id": answered["key_id"],
            "request": {"rule": "writes-need-ops", "groups": ["ops"], "quorum": 1,
                        "expires_at": requested["expires_at"], "requested_by": "agent:support"}}}}
    # order at the held call's step: call, decision, the approval note, the result
    assert [k for k, s, _ in events if s == "2.4"] == ["tool.call", "policy.decision", "note", "tool.result"]

    # the run
    (started,) = [p for k, _, p in events if k == "run.started"]
    ids = started["imported"]["original_ids"]
    assert (started["agent"], ids["sealbox_run_id"], ids["sealbox_principal"]) == (
        "support-bot", original["run"], "agent:support")
    assert ids["sealbox_policy"]["name"] == "roundtrip"
    assert started["labels"] == {"imported": "true", "import_format": "otlp-json", "env": "test"}
    (ended,) = [p for k, _, p in events if k == "run.ended"]
    assert ended["status"] == "ok"
    anomalies = [p for k, _, p in events if k == "anomaly"]
    assert anomalies == []


def test_without_content_the_links_and_decisions_still_come_back(original, tmp_path):
    target, imported = _round_trip(original, tmp_path, content=False, hex_ids=True)
    events, calls, verified = _events(target, imported)
    assert verified
    # one anomaly (step 2) says what was not sent; the model call is step 3
    assert [(c["step"], c["call_id"], c["decision"], c["rule"], c["outcome"], c["arguments"]) for c in calls] == [
        ("3.1", "call_A", "allow", "reads", "ok", None),
        ("3.2", "call_B", "deny", "no-deletes", "not_run", None),
        ("3.3", "call_C", "allow", "reads", "error", None),
        ("3.4", "call_W", "require_approval", "writes-need-ops", "ok", None),
        ("4", "call_D", "allow", "reads", "ok", None)]
    assert calls[2]["error"] == {"type": "ValueError", "message": "the error message was not exported "
                                                                  "(sealbox export --otlp without --otlp-content)"}
    (anomaly,) = [(s, p) for k, s, p in events if k == "anomaly"]
    spans = [p["imported"]["span_id"] for k, _, p in events if k == "tool.call"]
    assert anomaly == ("2", {"what": "content_not_exported", "detail": {
        "message": "a Sealbox OTLP export without --otlp-content: tool arguments, results and error messages were "
                   "not sent; arguments and results recorded as null",
        "aggregated": True, "count": 5, "where": [f"span {sid}" for sid in spans]}})
    assert [p.get("result") for k, _, p in events if k == "tool.result"] == [None, None, None, None]


def _us(ts: str) -> int:
    from datetime import datetime, timezone

    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return int((dt - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000)


def test_without_tool_call_ids_the_span_links_say_which_model_call_asked(original, tmp_path):
    """A backend that dropped ``sealbox.model.tool_call_ids``: the tool spans' ``requested_by`` links
    still put each call under its model call."""
    collector = Collector()
    try:
        assert _sb("export", original["run"], "-s", original["path"], "--otlp", collector.url).returncode == 0
    finally:
        collector.close()
    doc = collector.otlp_json(hex_ids=True)
    dropped = 0
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                kept = [a for a in span["attributes"] if a["key"] != "sealbox.model.tool_call_ids"]
                dropped += len(span["attributes"]) - len(kept)
                span["attributes"] = kept
    assert dropped == 1
    path = tmp_path / "no-ids.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert _sb("init", tmp_path / "t").returncode == 0
    out = _sb("import", "-s", tmp_path / "t", "--json", path)
    assert out.returncode == 0, out.stderr
    events, calls, verified = _events(tmp_path / "t", json.loads(out.stdout)["runs"][0])
    assert verified
    assert [(c["step"], c["call_id"]) for c in calls] == [("3.1", "call_A"), ("3.2", "call_B"), ("3.3", "call_C"),
                                                          ("3.4", "call_W"), ("4", "call_D")]
    (model,) = [p for k, _, p in events if k == "model.call"]
    assert model["tool_call_ids"] == ["call_A", "call_B", "call_C", "call_W"]  # the linked spans' ids


def test_a_call_still_held_for_approval_is_pending_with_no_result(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                 admin_key=admin_key(store, tmp_path))
    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="cleanup-bot", principal="agent:cleanup") as run:
            run.call_tool("db", "write_query", {"sql": "DROP TABLE t"}, lambda sql: pytest.fail("ran"),
                          call_id="call_H")
    store.close()
    target, imported = _round_trip({"run": run.run_id, "path": tmp_path / "store"}, tmp_path, content=True,
                                   hex_ids=False)
    events, calls, verified = _events(target, imported)
    assert verified
    assert [(c["step"], c["call_id"], c["decision"], c["rule"], c["outcome"]) for c in calls] == [
        ("2", "call_H", "require_approval", "writes-need-ops", "held")]
    assert [k for k, _, _ in events] == ["run.started", "tool.call", "policy.decision", "note", "run.ended"]
    note = events[3][2]
    assert note["text"] == ("imported approval (pending) of call call_H, from a Sealbox OTLP export: not a signed "
                            "approval of this store; the approver's identity is not authenticated")
    assert note["about"]["imported_approval"]["decision"] == "pending"
    assert note["about"]["imported_approval"]["approval_id"] == pending.value.approval_id
    assert note["about"]["imported_approval"]["identity"] is None
    started, ended = events[0][2], events[-1][2]
    assert started["imported"]["original_ids"]["sealbox_run_id"] == run.run_id
    assert ended["status"] == "ok" and ended["imported"] == {"sealbox_run_status": "suspended"}


def test_an_unknown_model_latency_comes_back_unknown_and_a_zero_comes_back_zero(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    rec = Recorder(store, policy=Policy.from_text(POLICY))
    with rec.run(agent="support-bot") as run:
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, RESPONSE)  # no latency
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "again"}]}, RESPONSE, latency=0)
    store.close()
    target, imported = _round_trip({"run": run.run_id, "path": tmp_path / "store"}, tmp_path, content=False,
                                   hex_ids=False)
    events, _, verified = _events(target, imported)
    assert verified
    assert [(s, p["latency_us"]) for k, s, p in events if k == "model.call"] == [("2", None), ("3", 0)]


@pytest.mark.parametrize("content", [False, True], ids=["no-content", "content"])
def test_a_requested_tool_call_without_an_id_keeps_its_place(tmp_path, content):
    """A model call may request a tool call that carries no id (kept in ``tool_call_ids`` as null, in its
    place): the calls after it are at the steps their places give (2.2, 2.4), and so they come back on
    import; the null stays in ``tool_call_ids``, so no call moves up a step."""
    no_id = {"type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": "/x"})}}
    response = {**RESPONSE, "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [no_id, _call("call_B", "read_file", {"path": "/b"}), no_id,
                       _call("call_C", "read_query", {"sql": "SELECT 1"})]}}]}
    store = sealbox.init_store(tmp_path / "store")
    rec = Recorder(store, policy=Policy.from_text(POLICY))
    with rec.run(agent="support-bot") as run:
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, response, latency=5)
        run.call_tool("fs", "read_file", {"path": "/b"}, lambda path: "b", call_id="call_B")
        run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: 1, call_id="call_C")
    store.close()
    orig_events, orig_calls, _ = _events(tmp_path / "store", run.run_id)
    assert [p["tool_call_ids"] for k, _, p in orig_events if k == "model.call"] == [[None, "call_B", None, "call_C"]]
    assert [(c["step"], c["call_id"]) for c in orig_calls] == [("2.2", "call_B"), ("2.4", "call_C")]
    target, imported = _round_trip({"run": run.run_id, "path": tmp_path / "store"}, tmp_path, content=content,
                                   hex_ids=False)
    events, calls, verified = _events(target, imported)
    assert verified
    step = "2" if content else "3"  # without content, an anomaly (content_not_exported) is step 2
    assert [(s, p["tool_call_ids"]) for k, s, p in events if k == "model.call"] == [
        (step, [None, "call_B", None, "call_C"])]
    assert [(c["step"], c["call_id"], c["outcome"]) for c in calls] == [
        (f"{step}.2", "call_B", "ok"), (f"{step}.4", "call_C", "ok")]


def test_a_model_calls_cost_comes_back(tmp_path):
    """The export sends each model call's ``usage.cost`` (``sealbox.usage.cost``); the import left it out,
    so the imported run's model calls and its ``run.ended`` usage had tokens but no cost."""
    priced = POLICY + 'prices:\n  "openai/*": {input: 2.5, output: 10}\n'
    store = sealbox.init_store(tmp_path / "store")
    rec = Recorder(store, policy=Policy.from_text(priced))
    with rec.run(agent="support-bot") as run:
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, RESPONSE, latency=5)
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "again"}]}, RESPONSE, latency=5)
    orig = [(e.kind, e.payload["usage"]) for e in store.read_run(run.run_id) if e.kind in ("model.call", "run.ended")]
    store.close()
    target, imported = _round_trip({"run": run.run_id, "path": tmp_path / "store"}, tmp_path, content=True,
                                   hex_ids=False)
    events, _, verified = _events(target, imported)
    assert verified
    cost = (120 * 2.5 + 30 * 10) / 1_000_000
    assert [u.get("cost") for k, u in orig] == [cost, cost, 2 * cost]
    assert [(k, p["usage"]) for k, _, p in events if k in ("model.call", "run.ended")] == [
        ("model.call", {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150, "cost": cost}),
        ("model.call", {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150, "cost": cost}),
        ("run.ended", {"input_tokens": 240, "output_tokens": 60, "cost": 2 * cost})]


def test_an_answer_the_store_did_not_count_comes_back_as_not_counted(tmp_path):
    """The export says whether each answer counted (``sealbox.approval.counted``, ``.problem``); the
    import made every answer an imported approval note alike, so an approval withdrawn in the source
    (its identity disabled) read as one more approval."""
    from sealbox.identities import disable_identity

    store = sealbox.init_store(tmp_path / "store")
    root = admin_key(store, tmp_path)
    alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key", admin_key=root).key_path
    bob = add_identity(store, "bob", "approver", ["ops"], key_path=tmp_path / "bob.key", admin_key=root).key_path
    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="cleanup-bot", principal="agent:cleanup") as run:
            run.call_tool("db", "write_query", {"sql": "DROP TABLE t"}, lambda sql: "dropped", call_id="call_H")
    answer(store, pending.value.approval_id, "approve", "ok", alice)
    disable_identity(store, "alice", "left the team", admin_key=root)
    answer(store, pending.value.approval_id, "approve", "checked", bob)
    with rec.resume(run.run_id, {("db", "write_query"): lambda sql: "dropped"}):
        pass
    [orig] = store.query_calls(run_id=run.run_id)
    assert ([a["identity"] for a in orig["approvers"]], [(a["identity"], a["problem"]) for a in orig["uncounted"]]) \
        == (["bob"], [("alice", "identity_disabled")])
    store.close()
    target, imported = _round_trip({"run": run.run_id, "path": tmp_path / "store"}, tmp_path, content=False,
                                   hex_ids=False)
    events, _, verified = _events(target, imported)
    assert verified
    notes = [p for k, _, p in events if k == "note"]
    assert [(n["about"]["imported_approval"]["identity"], n["about"]["imported_approval"].get("counted"),
             n["about"]["imported_approval"].get("problem")) for n in notes] == [
        ("alice", False, "identity_disabled"), ("bob", None, None)]
    assert notes[0]["text"] == (
        "imported approval (approved by alice; the exporting store did not count it: identity_disabled) of call "
        "call_H, from a Sealbox OTLP export: not a signed approval of this store; the approver's identity is not "
        "authenticated")


def test_the_runs_snapshot_fingerprint_comes_back_among_its_original_ids(tmp_path):
    """The run span carries ``sealbox.snapshot`` (the snapshot's fingerprint); the import dropped it, so
    nothing in the imported run said which configuration the source run ran under."""
    from sealbox.snapshot import Snapshot, ToolSpec

    snap = Snapshot(model={"provider": "openai", "name": "gpt-4o", "version": "2024-08-06", "parameters": {}},
                    system_prompt="You tidy up.", tools=(ToolSpec("fs", "read_file", "Read a file"),), limits={})
    store = sealbox.init_store(tmp_path / "store")
    rec = Recorder(store, policy=Policy.from_text(POLICY))
    with rec.run(agent="support-bot", snapshot=snap) as run:
        run.call_tool("fs", "read_file", {"path": "/tmp/a"}, lambda path: "a", call_id="call_A")
    fingerprint = store.read_run(run.run_id)[0].payload["snapshot"]
    assert fingerprint.startswith("sha256:")
    store.close()
    target, imported = _round_trip({"run": run.run_id, "path": tmp_path / "store"}, tmp_path, content=False,
                                   hex_ids=False)
    events, _, verified = _events(target, imported)
    assert verified
    started = events[0][2]
    assert started["snapshot"] is None  # the snapshot itself is not exported
    assert started["imported"]["original_ids"]["sealbox_snapshot"] == fingerprint


@pytest.mark.parametrize("outcome", [{"stringValue": "bogus"}, {"intValue": "3"},
                                     {"arrayValue": {"values": [{"stringValue": "denied"}]}}])
def test_a_tool_outcome_sealbox_never_writes_is_no_result(tmp_path, outcome):
    """A Sealbox tool span whose ``sealbox.tool.outcome`` is none of the values an export writes (a file
    crafted or changed) came back with a successful tool.result: ``sealbox calls`` said ``ok`` for a call
    the source never said ran. Now, unless the span carries a result or an error, the import does not say
    the tool ran: no tool.result, and the outcome is ``unknown``, held for approval or allowed."""
    store = sealbox.init_store(tmp_path / "store")
    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend")
    with pytest.raises(ApprovalPending):
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "rows", call_id="call_R")
            run.call_tool("db", "write_query", {"sql": "DROP TABLE t"}, lambda sql: pytest.fail("ran"),
                          call_id="call_H")
    store.close()
    collector = Collector()
    try:
        out = _sb("export", run.run_id, "-s", tmp_path / "store", "--otlp", collector.url)  # no result content
        assert out.returncode == 0, out.stderr
    finally:
        collector.close()
    doc = collector.otlp_json(False)
    changed = 0
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for a in span.get("attributes", []):
                    if a["key"] == "sealbox.tool.outcome":
                        a["value"], changed = outcome, changed + 1
    assert changed == 2
    (tmp_path / "in.json").write_text(json.dumps(doc), encoding="utf-8")
    assert _sb("init", tmp_path / "target").returncode == 0
    out = _sb("import", "-s", tmp_path / "target", "--json", tmp_path / "in.json")
    assert out.returncode == 0, out.stderr
    imported = json.loads(out.stdout)["runs"][0]
    events, calls, verified = _events(tmp_path / "target", imported)
    assert verified and "tool.result" not in [k for k, _, _ in events]
    assert [(c["call_id"], c["decision"], c["outcome"]) for c in calls] == [
        ("call_R", "allow", "unknown"), ("call_H", "require_approval", "unknown")]
