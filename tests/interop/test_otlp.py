"""OpenTelemetry export: real runs sent with the SDK's OTLP/HTTP exporters to a real OTLP/HTTP
endpoint on 127.0.0.1, decoded from protobuf and checked name by name, attribute by attribute."""

from __future__ import annotations

import gzip
import json
import socket
import textwrap
import threading
import zlib
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

import sealbox
from sealbox import ConfigError
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.interop.otlp import OtlpExportError, build_otlp, export_otlp, signal_urls, span_id_for, trace_id_for
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

POLICY = textwrap.dedent("""
    version: 1
    name: otlp-tests
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

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Tidy up /tmp and show me notes.txt"}]}
RESPONSE = {
    "id": "chatcmpl-otlp-1", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_A", "type": "function", "function": {"name": "fs__read_file", "arguments": "{\"path\": \"/tmp/notes.txt\"}"}},
        {"id": "call_B", "type": "function", "function": {"name": "fs__delete_file", "arguments": "{\"path\": \"/etc/passwd\"}"}},
    ]}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
}


# ----------------------------------------------------------------- a real OTLP/HTTP endpoint

class Receiver:
    """An OTLP/HTTP (protobuf) endpoint: POST /v1/traces and /v1/logs, decoded and kept."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.logs: list[ExportLogsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(415)
                    return
                if self.path == "/v1/traces":
                    receiver.traces.append(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/logs":
                    receiver.logs.append(ExportLogsServiceRequest.FromString(body))
                    reply = ExportLogsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def clear(self) -> None:
        self.traces.clear()
        self.logs.clear()
        self.headers.clear()

    def spans(self) -> list[tuple[Span, dict, dict]]:
        """(span, its attributes, its resource's attributes) for every span received."""
        return [(span, attrs(span.attributes), attrs(rs.resource.attributes))
                for req in self.traces for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans]

    def log_records(self) -> list[tuple]:
        return [(rec, attrs(rec.attributes), ss.scope.name)
                for req in self.logs for rl in req.resource_logs for ss in rl.scope_logs for rec in ss.log_records]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def refused_port():
    """A 127.0.0.1 port bound for the whole test and never listening: connections to it are refused. (A
    port bound, closed and then used could meanwhile be taken by another socket of this busy host, and a
    client's own ephemeral port could even equal it, a TCP self-connect.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, kind)


def attrs(kvs) -> dict:
    return {kv.key: value(kv.value) for kv in kvs}


@pytest.fixture
def receiver(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                "OTEL_EXPORTER_OTLP_LOGS_HEADERS"):
        monkeypatch.delenv(var, raising=False)
    r = Receiver()
    yield r
    r.close()


# ----------------------------------------------------------------- recorded runs

def ns(ts: str) -> int:
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1) * 1000


def h(n: int, width: int) -> bytes:
    return n.to_bytes(width, "big")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Run A (a model call asking for two tools, one denied, and an erroring call), its child run B,
    and run C, which suspends for an approval, is approved, resumes and ends."""
    path = tmp_path_factory.mktemp("otlp") / "store"
    store = sealbox.init_store(path)
    key = add_identity(store, "alice", "approver", ["ops"], key_path=path.parent / "alice.key",
                       admin_key=admin_key(store, path.parent)).key_path
    policy = Policy.from_text(POLICY)
    rec = Recorder(store, policy=policy)
    with rec.run(agent="support-bot", principal="agent:support", labels={"env": "test"}) as a:
        a.model_call(REQUEST, RESPONSE, latency=2000)
        a.call_tool("fs", "read_file", {"path": "/tmp/notes.txt"}, lambda path: {"text": "buy milk"}, call_id="call_A")
        with pytest.raises(ToolDenied):
            a.call_tool("fs", "delete_file", {"path": "/etc/passwd"}, lambda path: pytest.fail("ran"), call_id="call_B")
        with pytest.raises(ValueError):
            a.call_tool("db", "read_query", {"sql": "SELECT * FROM locked"},
                        lambda sql: (_ for _ in ()).throw(ValueError("table locked: secret-detail")), call_id="call_C")
        with rec.run(agent="helper", principal="agent:helper", parent_run_id=a.run_id) as b:
            b.call_tool("fs", "read_file", {"path": "/tmp/b.txt"}, lambda path: "b", call_id="call_D")
    suspending = Recorder(store, policy=policy, approvals="suspend")
    with pytest.raises(ApprovalPending) as pending:
        with suspending.run(agent="cleanup-bot", principal="agent:cleanup") as c:
            c.call_tool("db", "write_query", {"sql": "DELETE FROM t WHERE old"}, lambda sql: pytest.fail("ran"),
                        call_id="call_W")
    answer(store, pending.value.approval_id, "approve", "old rows only", key)
    with suspending.resume(c.run_id, {("db", "write_query"): lambda sql: "deleted 3 rows"}):
        pass
    events = {run_id: store.read_run(run_id) for run_id in (a.run_id, b.run_id, c.run_id)}
    store.close()
    return {"path": path, "A": a.run_id, "B": b.run_id, "C": c.run_id, "events": events,
            "approval": pending.value.approval_id}


def event(recorded, run, kind, call_id=None):
    found = [e for e in recorded["events"][recorded[run]] if e.kind == kind
             and (call_id is None or e.payload.get("call_id") == call_id)]
    assert len(found) == 1, (run, kind, call_id)
    return found[0]


def send(recorded, receiver, runs=("A", "B", "C"), **kwargs):
    store = sealbox.open_store(recorded["path"], readonly=True)
    try:
        return export_otlp(store, [recorded[r] for r in runs], receiver.url, **kwargs)
    finally:
        store.close()


# ----------------------------------------------------------------- the tests

def test_the_summary_counts_what_was_sent_and_names_each_run_s_trace(recorded, receiver):
    summary = send(recorded, receiver)
    A, B, C = recorded["A"], recorded["B"], recorded["C"]
    assert (summary.runs, summary.spans, summary.logs, summary.content) == (3, 10, 7, False)
    assert (summary.traces_url, summary.logs_url) == (receiver.url + "/v1/traces", receiver.url + "/v1/logs")
    assert summary.traces == {A: f"{trace_id_for(A):032x}", B: f"{trace_id_for(A):032x}", C: f"{trace_id_for(C):032x}"}
    assert len(receiver.spans()) == 10 and len(receiver.log_records()) == 7
    assert sorted(s.name for s, _, _ in receiver.spans()) == sorted([
        "invoke_agent support-bot", "chat gpt-4o", "execute_tool read_file", "execute_tool delete_file",
        "execute_tool read_query", "invoke_agent helper", "execute_tool read_file", "invoke_agent cleanup-bot",
        "execute_tool write_query", "sealbox.suspended"])


def test_the_spans_of_a_run(recorded, receiver):
    send(recorded, receiver)
    A, B, C = recorded["A"], recorded["B"], recorded["C"]
    trace_a, trace_c = h(trace_id_for(A), 16), h(trace_id_for(C), 16)
    run_a, run_b, run_c = (h(span_id_for("run", r), 8) for r in (A, B, C))
    got = {}
    for span, a, res in receiver.spans():
        key = a.get("gen_ai.tool.call.id") or (span.name if span.name != "invoke_agent helper" else "B")
        got[key] = (span, a, res)
    assert sorted(got) == sorted(["invoke_agent support-bot", "chat gpt-4o", "call_A", "call_B", "call_C", "B",
                                  "call_D", "invoke_agent cleanup-bot", "call_W", "sealbox.suspended"])
    assert len(receiver.spans()) == 10
    for _, _, res in got.values():
        assert res["service.name"] == "sealbox" and res["sealbox.store.id"]

    # the run: invoke_agent, root of its trace, from run.started to run.ended
    span, a, _ = got["invoke_agent support-bot"]
    started, ended = event(recorded, "A", "run.started"), event(recorded, "A", "run.ended")
    assert (span.trace_id, span.span_id, span.parent_span_id) == (trace_a, run_a, b"")
    assert span.kind == Span.SPAN_KIND_INTERNAL
    assert (span.start_time_unix_nano, span.end_time_unix_nano) == (ns(started.ts), ns(ended.ts))
    assert a == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-bot", "gen_ai.agent.id": "agent:support",
        "gen_ai.conversation.id": A, "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 30,
        "sealbox.run_id": A, "sealbox.principal": "agent:support", "sealbox.run.status": "ok",
        "sealbox.policy.fingerprint": Policy.from_text(POLICY).fingerprint, "sealbox.policy.name": "otlp-tests",
        "sealbox.run.suspensions": 0, "sealbox.run.waited_us": 0, "sealbox.label.env": "test",
        "sealbox.event.leaf_index": started.leaf_index, "sealbox.event.leaf_hash": started.leaf_hash,
    }
    assert span.status.code == Status.STATUS_CODE_UNSET

    # the model call: chat {model}, a child of the run, ending when recorded, lasting latency_us
    span, a, _ = got["chat gpt-4o"]
    call = event(recorded, "A", "model.call")
    assert (span.trace_id, span.parent_span_id, span.kind) == (trace_a, run_a, Span.SPAN_KIND_CLIENT)
    assert span.span_id == h(span_id_for("model", A, str(call.run_seq)), 8)
    # it started latency_us before it was recorded, but never before its run (the span is clamped)
    assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
        max(ns(call.ts) - 2_000_000, ns(started.ts)), ns(call.ts))
    assert a == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.response.id": "chatcmpl-otlp-1",
        "gen_ai.response.finish_reasons": ("tool_calls",), "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30, "gen_ai.conversation.id": A, "sealbox.run_id": A, "sealbox.step": "2",
        "sealbox.model.format": "openai.chat", "sealbox.model.latency_us": 2000,
        "sealbox.model.tool_call_ids": ("call_A", "call_B"),
        "sealbox.event.leaf_index": call.leaf_index, "sealbox.event.leaf_hash": call.leaf_hash,
    }
    chat_id = span.span_id

    # an allowed tool call: execute_tool, a child of the run (a sibling of the chat span, linked to it)
    span, a, _ = got["call_A"]
    tc, result = event(recorded, "A", "tool.call", "call_A"), event(recorded, "A", "tool.result", "call_A")
    assert span.name == "execute_tool read_file"
    assert (span.trace_id, span.span_id, span.parent_span_id) == (trace_a, h(span_id_for("tool", A, "call_A"), 8), run_a)
    assert span.kind == Span.SPAN_KIND_INTERNAL
    assert span.start_time_unix_nano == ns(tc.ts)
    assert span.end_time_unix_nano == max(ns(result.ts), ns(tc.ts) + result.payload["duration_us"] * 1000)
    assert [(link.trace_id, link.span_id, attrs(link.attributes)) for link in span.links] == [
        (trace_a, chat_id, {"sealbox.link": "requested_by"})]
    assert a == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file", "gen_ai.tool.call.id": "call_A",
        "gen_ai.tool.type": "function", "sealbox.server": "fs", "sealbox.tool.exposed": "fs.read_file",
        "sealbox.grant": "implicit:agent:support", "sealbox.run_id": A, "sealbox.step": "2.1",
        "sealbox.decision.effect": "allow", "sealbox.decision.rule": "reads", "sealbox.decision.reason_code": "policy_allow",
        "sealbox.policy.fingerprint": Policy.from_text(POLICY).fingerprint, "sealbox.tool.outcome": "ok",
        "sealbox.tool.duration_us": result.payload["duration_us"],
        "sealbox.event.leaf_index": tc.leaf_index, "sealbox.event.leaf_hash": tc.leaf_hash,
    }
    assert span.status.code == Status.STATUS_CODE_UNSET

    # a denied call: the decision on the span, no result, no error (it never ran)
    span, a, _ = got["call_B"]
    assert (span.name, span.parent_span_id, len(span.links)) == ("execute_tool delete_file", run_a, 1)
    assert {k: a[k] for k in a if k.startswith("sealbox.decision") or k == "sealbox.tool.outcome"} == {
        "sealbox.decision.effect": "deny", "sealbox.decision.rule": "no-deletes",
        "sealbox.decision.reason_code": "policy_deny", "sealbox.tool.outcome": "denied"}
    assert "sealbox.tool.duration_us" not in a and span.status.code == Status.STATUS_CODE_UNSET
    assert span.start_time_unix_nano == span.end_time_unix_nano == ns(event(recorded, "A", "tool.call", "call_B").ts)

    # a call whose tool raised: error status; the message is content, so only the type is sent
    span, a, _ = got["call_C"]
    assert (span.name, span.parent_span_id, list(span.links)) == ("execute_tool read_query", run_a, [])
    assert (a["sealbox.tool.outcome"], a["error.type"], a["gen_ai.tool.call.id"]) == ("error", "ValueError", "call_C")
    assert (span.status.code, span.status.message) == (Status.STATUS_CODE_ERROR, "ValueError")

    # the child run nests under its parent's run span, in the parent's trace
    span, a, _ = got["B"]
    assert (span.trace_id, span.span_id, span.parent_span_id) == (trace_a, run_b, run_a)
    assert (a["gen_ai.conversation.id"], a["sealbox.parent_run_id"], a["gen_ai.agent.id"]) == (B, A, "agent:helper")
    span, a, _ = got["call_D"]
    assert (span.trace_id, span.parent_span_id, a["sealbox.run_id"]) == (trace_a, run_b, B)

    # no content unless asked
    for _, a, _ in receiver.spans():
        assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(a)
    for _, a, _ in receiver.log_records():
        assert "gen_ai.tool.call.arguments" not in a
    assert all("secret-detail" not in str(req) for req in receiver.traces + receiver.logs)
    assert all("/etc/passwd" not in str(req) for req in receiver.traces + receiver.logs)


def test_a_run_that_paused_and_resumed_is_one_span_and_one_conversation(recorded, receiver):
    send(recorded, receiver, runs=("C",))
    C = recorded["C"]
    trace_c, run_c = h(trace_id_for(C), 16), h(span_id_for("run", C), 8)
    spans = {s.name: (s, a) for s, a, _ in receiver.spans()}
    assert sorted(spans) == ["execute_tool write_query", "invoke_agent cleanup-bot", "sealbox.suspended"]
    assert {s.trace_id for s, _ in spans.values()} == {trace_c}
    run, a = spans["invoke_agent cleanup-bot"]
    started, ended = event(recorded, "C", "run.started"), event(recorded, "C", "run.ended")
    suspended, resumed = event(recorded, "C", "run.suspended"), event(recorded, "C", "run.resumed")
    assert (run.span_id, run.parent_span_id) == (run_c, b"")
    assert (run.start_time_unix_nano, run.end_time_unix_nano) == (ns(started.ts), ns(ended.ts))
    assert (a["gen_ai.conversation.id"], a["sealbox.run.status"], a["sealbox.run.suspensions"]) == (C, "ok", 1)
    assert a["sealbox.run.waited_us"] == resumed.payload["waited_us"]
    pause, p = spans["sealbox.suspended"]
    assert (pause.parent_span_id, pause.start_time_unix_nano, pause.end_time_unix_nano) == (
        run_c, ns(suspended.ts), ns(resumed.ts))
    aid = recorded["approval"]
    assert p == {"sealbox.run_id": C, "sealbox.approval.ids": (aid,), "sealbox.suspend.reason": "rule writes-need-ops requires approval",
                 "sealbox.suspension.open": False, "sealbox.resumed.waited_us": resumed.payload["waited_us"],
                 "sealbox.resumed.outcomes": (f"{aid}=approved",),
                 "sealbox.event.leaf_index": suspended.leaf_index, "sealbox.event.leaf_hash": suspended.leaf_hash}
    tool, t = spans["execute_tool write_query"]
    result = event(recorded, "C", "tool.result", "call_W")
    assert (tool.parent_span_id, tool.start_time_unix_nano) == (run_c, ns(event(recorded, "C", "tool.call", "call_W").ts))
    assert tool.end_time_unix_nano >= ns(result.ts) > ns(resumed.ts)
    assert (t["sealbox.decision.effect"], t["sealbox.decision.rule"], t["sealbox.decision.reason_code"]) == (
        "require_approval", "writes-need-ops", "policy_require_approval")
    assert (t["sealbox.tool.outcome"], t["sealbox.approval.ids"]) == ("ok", (aid,))

    # decisions and approvals are log records tied to the tool span
    logs = receiver.log_records()
    assert [(r.event_name, a["event.name"]) for r, a, _ in logs] == [
        ("sealbox.policy.decision", "sealbox.policy.decision"), ("sealbox.approval.requested", "sealbox.approval.requested"),
        ("sealbox.approval.answered", "sealbox.approval.answered")]
    for rec, a, scope in logs:
        assert (rec.trace_id, rec.span_id, scope) == (trace_c, tool.span_id, "sealbox")
        assert (a["gen_ai.tool.call.id"], a["gen_ai.tool.name"], a["sealbox.server"], a["sealbox.run_id"]) == (
            "call_W", "write_query", "db", C)
    decision, requested, answered = (a for _, a, _ in logs)
    dec = event(recorded, "C", "policy.decision", "call_W")
    assert (decision["sealbox.decision.effect"], decision["sealbox.decision.rule"],
            decision["sealbox.decision.reason_code"], decision["sealbox.event.leaf_hash"]) == (
        "require_approval", "writes-need-ops", "policy_require_approval", dec.leaf_hash)
    assert logs[0][0].time_unix_nano == ns(dec.ts)
    assert (requested["sealbox.approval.id"], requested["sealbox.approval.ask.groups"], requested["sealbox.approval.quorum"],
            requested["sealbox.approval.rule"]) == (aid, ("ops",), 1, "writes-need-ops")
    ans = event(recorded, "C", "approval.answered")
    assert (answered["sealbox.approval.id"], answered["sealbox.approval.decision"], answered["sealbox.approval.identity"],
            answered["sealbox.approval.reason"], answered["sealbox.approval.answered_at"]) == (
        aid, "approve", "alice", "old rows only", ans.payload["answered_at"])
    assert logs[2][0].severity_number == 9 and logs[2][0].body.string_value == f"alice answered approve to approval {aid}"


def test_decision_logs_of_a_plain_run_point_at_their_tool_spans(recorded, receiver):
    send(recorded, receiver, runs=("A",))
    A = recorded["A"]
    logs = receiver.log_records()
    assert [(a["event.name"], a["gen_ai.tool.call.id"], a["sealbox.decision.effect"]) for _, a, _ in logs] == [
        ("sealbox.policy.decision", "call_A", "allow"), ("sealbox.policy.decision", "call_B", "deny"),
        ("sealbox.policy.decision", "call_C", "allow")]
    for rec, a, _ in logs:
        assert rec.trace_id == h(trace_id_for(A), 16)
        assert rec.span_id == h(span_id_for("tool", A, a["gen_ai.tool.call.id"]), 8)
    deny = logs[1]
    assert (deny[0].severity_number, deny[0].severity_text) == (13, "WARN")
    assert deny[0].body.string_value == "deny by rule no-deletes (policy_deny): rule 'no-deletes' denies the call"
    assert (deny[1]["sealbox.decision.rule"], deny[1]["sealbox.decision.reason_code"]) == ("no-deletes", "policy_deny")
    # sent alone, the child run is the root of its own trace
    receiver.clear()
    send(recorded, receiver, runs=("B",))
    [(run, a, _)] = [s for s in receiver.spans() if s[0].name == "invoke_agent helper"]
    assert (run.trace_id, run.parent_span_id, a["sealbox.parent_run_id"]) == (h(trace_id_for(recorded["B"]), 16), b"", A)


def test_content_is_sent_only_when_switched_on_and_re_exporting_sends_the_same_ids(recorded, receiver):
    send(recorded, receiver)
    first = {(s.trace_id, s.span_id, s.parent_span_id, s.start_time_unix_nano, s.end_time_unix_nano)
             for s, _, _ in receiver.spans()}
    receiver.clear()
    summary = send(recorded, receiver, content=True, headers={"Authorization": "Bearer t0k"})
    assert summary.content is True
    second = {(s.trace_id, s.span_id, s.parent_span_id, s.start_time_unix_nano, s.end_time_unix_nano)
              for s, _, _ in receiver.spans()}
    assert first == second  # idempotent: the same trace and span ids, the same times
    assert {hd.get("authorization") for hd in receiver.headers} == {"Bearer t0k"}
    tools = {a["gen_ai.tool.call.id"]: (s, a) for s, a, _ in receiver.spans() if "gen_ai.tool.call.id" in a}
    assert json.loads(tools["call_A"][1]["gen_ai.tool.call.arguments"]) == {"path": "/tmp/notes.txt"}
    assert json.loads(tools["call_A"][1]["gen_ai.tool.call.result"]) == {"text": "buy milk"}
    assert json.loads(tools["call_B"][1]["gen_ai.tool.call.arguments"]) == {"path": "/etc/passwd"}
    assert "gen_ai.tool.call.result" not in tools["call_B"][1]
    assert json.loads(tools["call_W"][1]["gen_ai.tool.call.result"]) == "deleted 3 rows"
    err = tools["call_C"][0].status
    assert (err.code, err.message) == (Status.STATUS_CODE_ERROR, "ValueError: table locked: secret-detail")
    requested = [a for _, a, _ in receiver.log_records() if a["event.name"] == "sealbox.approval.requested"]
    assert [json.loads(a["gen_ai.tool.call.arguments"]) for a in requested] == [{"sql": "DELETE FROM t WHERE old"}]


def test_the_cli_helper_sends_with_headers_and_prints_a_summary(recorded, receiver, capsys):
    from sealbox.cli.otlp_cmd import run_otlp_export

    summary = run_otlp_export(str(recorded["path"]), [recorded["C"]], receiver.url + "/", False, ["X-Api-Key=k=1"])
    out = capsys.readouterr().out
    assert out == (f"sent 1 run to {receiver.url}/v1/traces and {receiver.url}/v1/logs: 3 spans, 3 log records "
                   "(content off)\n")
    assert (summary.spans, summary.logs) == (3, 3)
    assert {hd.get("x-api-key") for hd in receiver.headers} == {"k=1"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        run_otlp_export(str(recorded["path"]), [recorded["C"]], receiver.url, False, ["no-equals"])


def test_mistakes_and_an_unreachable_endpoint_are_clear_errors(refused_port, recorded, receiver):
    assert signal_urls("http://c:4318") == ("http://c:4318/v1/traces", "http://c:4318/v1/logs")
    assert signal_urls("https://c/otlp/v1/traces") == ("https://c/otlp/v1/traces", "https://c/otlp/v1/logs")
    for bad in ("", "localhost:4318", "ftp://c/", "http:///x", "http://c/?a=1"):
        with pytest.raises(ConfigError):
            signal_urls(bad)
    store = sealbox.open_store(recorded["path"], readonly=True)
    try:
        with pytest.raises(OtlpExportError, match="no run 'nope'"):
            export_otlp(store, ["nope"], receiver.url)
        with pytest.raises(OtlpExportError, match="system run"):
            build_otlp(store, ["system"])
        with pytest.raises(OtlpExportError, match="no runs"):
            build_otlp(store, [])
        port = refused_port
        with pytest.raises(OtlpExportError, match="did not accept the spans"):
            export_otlp(store, [recorded["A"]], f"http://127.0.0.1:{port}", timeout=1)
    finally:
        store.close()
    assert receiver.traces == [] and receiver.logs == []  # nothing was sent anywhere else


def test_an_unreachable_endpoint_is_one_line_without_the_sdks_retry_logs(refused_port, recorded, monkeypatch, caplog):
    """The OpenTelemetry SDK logged each failed attempt ("Transient error ...", "Failed to export
    ... batch") before the command's own error line; they are quiet while sealbox exports."""
    import logging

    import sealbox.interop.otlp as otlp_mod
    from sealbox.cli.otlp_cmd import run_otlp_export

    real = otlp_mod.export_otlp
    # 3 s, not less: the exporter's first retry waits 0.8-1.2 s (2**0 with 20% jitter) and it logs the
    # cause ("Transient error ... retrying") only when that wait fits before its deadline; with a 1 s
    # timeout it often gave up at once with "due to timeout, max retries or shutdown", which names no cause
    monkeypatch.setattr(otlp_mod, "export_otlp", lambda *a, **k: real(*a, **{**k, "timeout": 3}))
    port = refused_port
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OtlpExportError, match="did not accept the spans"):
        run_otlp_export(str(recorded["path"]), [recorded["A"]], f"http://127.0.0.1:{port}", quiet=True)
    assert [r.getMessage() for r in caplog.records if r.name.startswith(("opentelemetry", "urllib3"))
            and r.levelno >= logging.WARNING] == []
    assert logging.getLogger("opentelemetry").level == logging.NOTSET  # restored afterwards


def test_sealbox_export_otlp_on_the_command_line(recorded, receiver):
    import os
    import subprocess
    import sys

    def sb(*args):
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("OTEL_")}
        return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True,
                              text=True, env=env)

    path, C = recorded["path"], recorded["C"]
    out = sb("export", C, "--otlp", receiver.url, "-s", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (f"Sent 1 run to {receiver.url}/v1/traces and {receiver.url}/v1/logs: 3 spans, "
                          "3 log records (content off).\n")
    assert len(receiver.spans()) == 3 and not any("gen_ai.tool.call.arguments" in a for _, a, _ in receiver.spans())
    receiver.clear()
    out = sb("export", C, "--otlp", receiver.url, "--otlp-content", "--otlp-header", "Authorization=Bearer t", "--json",
             "-s", path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] is True
    assert {hd.get("authorization") for hd in receiver.headers} == {"Bearer t"}
    [tool] = [a for _, a, _ in receiver.spans() if a.get("gen_ai.tool.call.id") == "call_W"]
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"sql": "DELETE FROM t WHERE old"}
    receiver.clear()
    bad = sb("export", C, "-o", path.parent / "x.sbx", "--otlp-content", "-s", path)
    assert bad.returncode == 2 and "--otlp-content and --otlp-header go with --otlp" in bad.stderr
    assert receiver.traces == [] and receiver.logs == []


@pytest.mark.parametrize("url, message", [
    ("http://[::1", "error: the OTLP endpoint 'http://[::1' is not a valid URL (Invalid IPv6 URL)"),
    ("http://[zz]/", "error: the OTLP endpoint 'http://[zz]/' is not a valid URL "
                     "('zz' does not appear to be an IPv4 or IPv6 address)"),
    ("http://h:99999", "error: the OTLP endpoint's port must be a number from 1 to 65535, got 'http://h:99999'"),
    ("http://h:abc", "error: the OTLP endpoint's port must be a number from 1 to 65535, got 'http://h:abc'"),
    ("http://h:0", "error: the OTLP endpoint needs a host and a port from 1 to 65535, got 'http://h:0'"),
    ("http://:4318", "error: the OTLP endpoint needs a host and a port from 1 to 65535, got 'http://:4318'"),
    ("http://a b", "error: the OTLP endpoint must not contain spaces or control characters, got 'http://a b'"),
])
def test_a_malformed_otlp_url_is_one_error_line_exit_2(recorded, url, message):
    """'http://[::1' was an internal error (urlsplit's ValueError, exit 70); the others were sent to
    the SDK, which failed each request."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("OTEL_")
           and k != "SEALBOX_DEBUG"}
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", recorded["C"], "--otlp", url,
                          "-s", str(recorded["path"])], capture_output=True, text=True, env=env, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", message + "\n")
    with pytest.raises(ConfigError):
        signal_urls(url)


def test_an_unreachable_endpoint_error_names_the_cause(refused_port, recorded, monkeypatch, caplog):
    """`sealbox export RUN --otlp http://localhost:4318` with no collector said "the OTLP endpoint …
    did not accept the spans", as if a collector had refused them: the cause (connection refused)
    was in the SDK's logs, which the command silences. The one error line now carries it."""
    import logging

    import sealbox.interop.otlp as otlp_mod
    from sealbox.cli.otlp_cmd import run_otlp_export

    real = otlp_mod.export_otlp
    # 3 s, not less: the exporter's first retry waits 0.8-1.2 s (2**0 with 20% jitter) and it logs the
    # cause ("Transient error ... retrying") only when that wait fits before its deadline; with a 1 s
    # timeout it often gave up at once with "due to timeout, max retries or shutdown", which names no cause
    monkeypatch.setattr(otlp_mod, "export_otlp", lambda *a, **k: real(*a, **{**k, "timeout": 3}))
    port = refused_port
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OtlpExportError) as info:
        run_otlp_export(str(recorded["path"]), [recorded["A"]], f"http://127.0.0.1:{port}", quiet=True)
    assert str(info.value) == (f"the OTLP endpoint http://127.0.0.1:{port}/v1/traces did not accept the spans "
                               "(0 of 5 sent, no logs sent): [Errno 111] Connection refused")
    assert [r.getMessage() for r in caplog.records if r.name.startswith(("opentelemetry", "urllib3"))
            and r.levelno >= logging.WARNING] == []
    otel = logging.getLogger("opentelemetry")
    assert (otel.level, otel.propagate, otel.handlers) == (logging.NOTSET, True, [])  # restored afterwards
