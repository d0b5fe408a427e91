"""Hardening: schema $refs never fetched, sessions bound to their identity, the system run not joinable,
an upstream's -32000 error response, refused arguments recorded as failed, quiet SDK parse errors,
big results, long tool names, the re-approval hint, and SIGTERM with a call in flight."""

from __future__ import annotations

import http.server
import json
import logging
import os
import sys
import threading
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import TOO_MANY_CALLS, UNAUTHORIZED, UNKNOWN_RUN, UNKNOWN_TOOL, Gateway
from sealbox.gateway.transports import serve_http

from .conftest import TOY, connect, gateway_runs, running, set_call_timeout, text_of, toy_args, toy_config, toy_log

pytestmark = pytest.mark.anyio

ODD = str(Path(__file__).parent / "servers" / "odd_server.py")
SECRET = "SECRET-MARKER-7f3a9c"


@pytest.fixture
def refused_port():
    """A 127.0.0.1 port bound for the whole test and never listening: connections to it are refused. (A
    port bound, closed and then used could meanwhile be taken by another socket of this busy host, and a
    client's own ephemeral port could even equal it, a TCP self-connect.)"""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def odd_config(tmp_path: Path, *, env: dict[str, str] | None = None, extra: str = "") -> object:
    env = {"ODD_LOG": str(tmp_path / "odd.log"), **(env or {})}
    env_yaml = "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in env.items()) + "}"
    ups = f"""
  - id: odd
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(ODD)}]
    env: {env_yaml}
"""
    return toy_config(tmp_path, upstreams=ups, extra=extra)


def odd_log(tmp_path: Path) -> list[dict]:
    p = tmp_path / "odd.log"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def all_events(store) -> list:
    return store.read_range(0, store.size())


def results(store) -> list[dict]:
    return [e.payload for e in all_events(store) if e.kind == "tool.result"]


class _Recording(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"type": "string"}')

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def schema_host():
    """A local HTTP server (127.0.0.1) that records every request it gets; (url, hits)."""
    _Recording.hits = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recording)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/schema.json", _Recording.hits
    server.shutdown()
    server.server_close()


# ---------------------------------------------------------------------------- 1. $ref never fetched


async def test_schema_refs_are_never_fetched_and_unresolvable_ones_leave_validation_to_the_upstream(
        tmp_path, store, schema_host):
    url, hits = schema_host
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"type": "string", "const": SECRET, "description": SECRET}))
    gw = Gateway(odd_config(tmp_path, env={"ODD_REF_URL": url, "ODD_REF_FILE": str(secret)}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        remote = await client.call_tool("odd__ref_http", {"x": 1})
        local_file = await client.call_tool("odd__ref_file", {"x": 1})
        good = await client.call_tool("odd__ref_local", {"x": 3})
        bad = await client.call_tool("odd__ref_local", {"x": 30})
    assert hits == []  # the schema host was never contacted
    assert (remote.is_error, text_of(remote)) == (False, "ref_http:1")  # forwarded: the upstream validates
    assert (local_file.is_error, text_of(local_file)) == (False, "ref_file:1")
    assert (good.is_error, text_of(good)) == (False, "ref_local:3")  # an internal #/$defs ref still works
    assert (bad.is_error, text_of(bad), bad.meta) == (
        True, "arguments do not match the input schema of odd__ref_local: x: 30 is greater than the maximum of 9",
        {"sealbox/not_forwarded": "invalid_arguments"})
    assert odd_log(tmp_path) == [{"tool": "ref_http", "arguments": {"x": 1}},
                                 {"tool": "ref_file", "arguments": {"x": 1}},
                                 {"tool": "ref_local", "arguments": {"x": 3}}]
    assert [r["ok"] for r in results(store)] == [True, True, True, False]
    everything = json.dumps([e.payload for e in all_events(store)], default=str)
    assert SECRET not in everything
    assert all(SECRET not in text_of(r) for r in (remote, local_file, good, bad))


async def test_a_ref_to_a_port_nobody_listens_on_is_forwarded_without_an_error(refused_port, tmp_path, store):
    port = refused_port
    gw = Gateway(odd_config(tmp_path, env={"ODD_REF_URL": f"http://127.0.0.1:{port}/s.json"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        first = await client.call_tool("odd__ref_http", {"x": "a"})
        second = await client.call_tool("odd__ref_http", {"x": 2})
    assert [(r.is_error, text_of(r)) for r in (first, second)] == [(False, 'ref_http:"a"'), (False, "ref_http:2")]
    assert [(r["ok"], r["result"]["content"][0]["text"]) for r in results(store)] == [
        (True, 'ref_http:"a"'), (True, "ref_http:2")]


# ---------------------------------------------------------------------------- 2. sessions and identities

TOKEN_A = "token-of-alice-0123456789abcdef"
TOKEN_B = "token-of-bob-0123456789abcdef00"
HTTP2 = (f"http:\n  tokens:\n    - {{token: {TOKEN_A}, identity: alice}}\n"
         f"    - {{token: {TOKEN_B}, identity: bob}}\n")
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}


def _rpc(response) -> dict:
    """The JSON-RPC message of a response (plain JSON or one SSE event)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads([d for d in data if d][-1])
    return response.json()


async def test_an_http_session_is_used_only_by_the_identity_that_created_it(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra=HTTP2), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        alice = {**HEADERS, "authorization": f"Bearer {TOKEN_A}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            init = await http.post(url, json=INIT, headers=alice)
            sid = init.headers["mcp-session-id"]
            alice = {**alice, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=alice)
            call = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                              "params": {"name": "toy__echo", "arguments": {"text": "hi"}}},
                                   headers=alice)
            bob = {**alice, "authorization": f"Bearer {TOKEN_B}"}
            listed = await http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=bob)
            async with http.stream("GET", url, headers={**bob, "accept": "text/event-stream"}) as stream:
                # without the check this is A's standalone SSE stream, open until the session ends
                stream_status = stream.status_code
                stream_body = json.loads(await stream.aread()) if stream_status != 200 else None
            ended = await http.delete(url, headers=bob)
            [run_id] = gateway_runs(store)
            kinds_after_bob = [e.kind for e in store.read_run(run_id)]
            still = await http.post(url, json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, headers=alice)
            own_delete = await http.delete(url, headers=alice)
            with anyio.fail_after(10):
                while store.read_run(run_id)[-1].kind != "run.ended":
                    await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert _rpc(call)["result"]["content"][0]["text"] == "hi"
    refused = {"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED,
                                                         "message": "this session belongs to another identity"}}
    assert (stream_status, stream_body) == (403, refused)
    for response in (listed, ended):
        assert (response.status_code, response.json()) == (403, refused)
    assert kinds_after_bob == ["run.started", "tool.call", "policy.decision", "tool.result"]  # A's run untouched
    assert still.status_code == 200 and len(_rpc(still)["result"]["tools"]) == 11
    assert own_delete.status_code == 200
    assert [e.kind for e in store.read_run(run_id)][-1] == "run.ended"


async def test_one_identity_cannot_take_every_http_session(tmp_path, store):
    """The SDK caps a gateway's open HTTP sessions at 10 000, for all clients together, and an idle one stays
    open for http.session_idle_s (30 minutes): one token opening sessions in a loop (measured: 9 499 in 66 s,
    the gateway then at 508 MB) made every other identity's initialize get HTTP 503 "Too many open sessions"
    for half an hour. Each identity now has at most http.max_sessions_per_identity sessions open (default
    100): one more is refused HTTP 429 with TOO_MANY_CALLS, nothing else changes; the others still open
    theirs, and a session that ends (DELETE) makes room again."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP2 + "  max_sessions_per_identity: 3\n"), store=store)
    assert gw.config.max_sessions_per_identity == 3
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        alice = {**HEADERS, "authorization": f"Bearer {TOKEN_A}"}
        bob = {**HEADERS, "authorization": f"Bearer {TOKEN_B}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = [await http.post(url, json=INIT, headers=alice) for _ in range(3)]
            refused = await http.post(url, json=INIT, headers=alice)
            other = await http.post(url, json=INIT, headers=bob)
            ended = await http.delete(url, headers={**alice, "mcp-session-id": opened[0].headers["mcp-session-id"],
                                                    "mcp-protocol-version": "2025-11-25"})
            again = await http.post(url, json=INIT, headers=alice)
        tg.cancel_scope.cancel()
    assert [r.status_code for r in opened] == [200, 200, 200]
    assert (refused.status_code, refused.json(), "mcp-session-id" in refused.headers) == (429, {
        "jsonrpc": "2.0", "id": None, "error": {
            "code": TOO_MANY_CALLS, "message": "identity alice already has 3 HTTP sessions open "
            "(http.max_sessions_per_identity); end one (DELETE) or wait until an idle one is closed",
            "data": {"limit": 3}}}, False)
    assert other.status_code == 200 and "mcp-session-id" in other.headers
    assert ended.status_code == 200
    assert again.status_code == 200 and "mcp-session-id" in again.headers


# ---------------------------------------------------------------------------- 3. the system run


async def test_a_call_cannot_join_the_system_run(tmp_path, store):
    from sealbox.events import SYSTEM_RUN_ID

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        before = [e.kind for e in store.read_run(SYSTEM_RUN_ID)]
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "in system"}, meta={"sealbox/run_id": "system"})
    assert err.value.code == UNKNOWN_RUN
    assert err.value.message == ("run 'system' is the store's own record (tool changes, breakers, approvals); "
                                 "calls cannot join it")
    assert [e.kind for e in store.read_run(SYSTEM_RUN_ID)] == before == ["run.started", "tools.changed"]
    assert not any(e.kind == "tool.call" for e in all_events(store))
    assert not (tmp_path / "toy.log").exists()


def test_sealbox_run_id_system_at_startup_is_one_error(tmp_path):
    import subprocess

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_LOG: {json.dumps(str(tmp_path / "toy.log"))}}}
""")
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}, "SEALBOX_RUN_ID": "system"}
    out = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (
        2, "", "error: SEALBOX_RUN_ID=system: 'system' is the store's own record, not a run calls can join; "
               "unset it, or name a run the agent started\n")


def test_run_id_system_given_to_the_gateway_names_the_argument_not_the_environment(tmp_path, monkeypatch):
    """The refusal used to say ``SEALBOX_RUN_ID=system`` … ``unset it`` also when the id came from
    ``Gateway(run_id=...)`` and the variable was not set at all."""
    from sealbox.errors import ConfigError

    monkeypatch.delenv("SEALBOX_RUN_ID", raising=False)
    with pytest.raises(ConfigError) as err:
        Gateway(toy_config(tmp_path), run_id="system")
    assert str(err.value) == ("Gateway(run_id='system'): 'system' is the store's own record, not a run calls can "
                              "join; pass the id of a run the agent started")
    monkeypatch.setenv("SEALBOX_RUN_ID", "system")  # the environment's, as `sealbox gateway serve` is given it
    with pytest.raises(ConfigError) as err:
        Gateway(toy_config(tmp_path))
    assert str(err.value) == ("SEALBOX_RUN_ID=system: 'system' is the store's own record, not a run calls can join; "
                              "unset it, or name a run the agent started")
    assert not (tmp_path / "store").exists()  # refused before the store is opened


# ---------------------------------------------------------------------------- 4. -32000 from a live upstream


async def test_an_upstream_error_response_with_code_32000_is_not_a_closed_connection(tmp_path, store):
    gw = Gateway(odd_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        failed = await client.call_tool("odd__fail", {"code": -32000})
        after = await client.call_tool("odd__ping", {})
        generation = gw.upstreams["odd"].generation
    assert (failed.is_error, text_of(failed), failed.meta) == (
        True, "upstream error: upstream odd answered with JSON-RPC error -32000: the odd server failed on purpose",
        {"sealbox/upstream_error": "UpstreamProtocolError"})
    assert (after.is_error, text_of(after)) == (False, "pong")
    assert generation == 1  # never restarted: it was alive all along
    first, second = results(store)
    assert (first["ok"], first["error"]["type"], first["error"]["message"]) == (
        False, "UpstreamProtocolError", "upstream odd answered with JSON-RPC error -32000: the odd server failed on purpose")
    assert second["ok"] is True
    assert [e.payload for e in all_events(store) if e.kind == "breaker.changed"] == []  # no server_down


async def test_a_real_closed_connection_is_still_upstream_unavailable(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        crashed = await client.call_tool("toy__crash", {})
    assert (crashed.is_error, crashed.meta) == (True, {"sealbox/upstream_error": "UpstreamUnavailable"})
    [res] = results(store)
    assert (res["error"]["type"], res["error"]["message"]) == (
        "UpstreamUnavailable", "upstream toy closed the connection during the call (the process exited with status 3)")


# ---------------------------------------------------------------------------- 5. refused arguments recorded


async def test_arguments_refused_by_the_schema_are_recorded_as_a_failed_call(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 1, cooldown_s: 30}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        refused = await client.call_tool("toy__add", {"a": "x", "b": 2})
        fine = await client.call_tool("toy__add", {"a": 1, "b": 2})  # the breaker (threshold 1) did not open
    text = "arguments do not match the input schema of toy__add: a: 'x' is not of type 'integer'"
    assert (refused.is_error, text_of(refused), refused.meta) == (
        True, text, {"sealbox/not_forwarded": "invalid_arguments"})
    assert (fine.is_error, text_of(fine)) == (False, "3")
    first, second = results(store)
    assert (first["ok"], first["error"]["type"], first["error"]["message"], "result" in first) == (
        False, "InvalidArguments", text, False)
    assert second["ok"] is True
    assert [e.payload for e in all_events(store) if e.kind == "breaker.changed"] == []
    assert toy_log(tmp_path) == [{"tool": "add", "arguments": {"a": 1, "b": 2}}]  # the refused call never went out


async def test_threshold_refused_calls_leave_the_breaker_closed_and_real_failures_still_open_it(tmp_path, store):
    """A model repeating arguments the schema refuses must not open the breaker of the tool (and so deny
    other clients' valid calls); a half-open probe taken by such a call is given back. Timeouts still count."""
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 3, cooldown_s: 0}\nlimits: {call_timeout_s: 60}"),
                 store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        refused = [await client.call_tool("toy__add", {"a": "x", "b": 2}) for _ in range(3)]
        fine = await client.call_tool("toy__add", {"a": 1, "b": 2})
        state_after_refusals = gw.recorder.breaker.state("toy", "add")
        set_call_timeout(gw, 0.3)  # for the hung calls only: the others are answered whatever the host's load
        for _ in range(3):  # real failures of another tool: they open its breaker
            await client.call_tool("toy__hang", {})
        set_call_timeout(gw, 60)
        opened = gw.recorder.breaker.state("toy", "hang")
        gw.recorder.breaker.record_failure("toy", "add")  # as many real failures as the threshold, by hand
        gw.recorder.breaker.record_failure("toy", "add")
        gw.recorder.breaker.record_failure("toy", "add")
        probe = await client.call_tool("toy__add", {"a": "x", "b": 2})  # cool-down 0: takes the probe, never sent
        after_probe = gw.recorder.breaker.state("toy", "add")
        closing = await client.call_tool("toy__add", {"a": 2, "b": 2})  # the probe, given back: this one probes
    assert [r.meta for r in refused] == [{"sealbox/not_forwarded": "invalid_arguments"}] * 3
    assert (fine.is_error, text_of(fine), state_after_refusals) == (False, "3", "closed")
    assert opened == "open"
    assert (probe.meta, after_probe) == ({"sealbox/not_forwarded": "invalid_arguments"}, "half_open")
    assert (closing.is_error, text_of(closing)) == (False, "4")
    assert [(b["tool"], b["from"], b["to"], b["reason"], b["failures"])
            for b in all_events(store) if b.kind == "breaker.changed" for b in [b.payload]] == [
        ("hang", "closed", "open", "failures", 3),
        ("add", "closed", "open", "failures", 3),
        ("add", "open", "half_open", "cooldown_elapsed", 3),
        ("add", "half_open", "closed", "probe_succeeded", 3)]
    assert [e["arguments"] for e in toy_log(tmp_path) if e["tool"] == "add"] == [{"a": 1, "b": 2}, {"a": 2, "b": 2}]


async def test_an_upstreams_catastrophic_pattern_does_not_hold_the_gateway(tmp_path, store):
    """An upstream's input schema is not trusted: its ``pattern`` and ``patternProperties`` regexes are
    run by a linear-time engine. Regression: Python's ``re`` took ~2 s over ``"a" * 24 + "!"`` against
    ``^(a+)+$`` and minutes past 30 characters, on the event loop, holding every session; here 5,000
    characters are refused at once. A pattern only a backtracking engine runs (a look-ahead) leaves
    the schema to the upstream, as a schema jsonschema cannot read does."""
    gw = Gateway(odd_config(tmp_path, env={"ODD_REDOS": "1"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with anyio.fail_after(10):  # with re: 2**5000 steps
            refused = await client.call_tool("odd__redos", {"word": "a" * 5000 + "!"})
            by_name = await client.call_tool("odd__redos", {"word": "aaa", "b" * 5000 + "!": 1})
            typed = await client.call_tool("odd__redos", {"word": "aaa", "bbb": "x"})
            fine = await client.call_tool("odd__redos", {"word": "aaa", "bbb": 3})
            around = await client.call_tool("odd__lookaround", {"word": "x"})
    # jsonschema's messages (holding the 5000-character values) are above 512 characters: summarized, not repeated
    assert (refused.is_error, text_of(refused)) == (True, (
        "arguments do not match the input schema of odd__redos: word: the string given does not match the "
        "schema's pattern: '^(a+)+$' (its message, 5028 characters long, is not shown)"))
    assert (by_name.is_error, text_of(by_name)) == (True, (
        "arguments do not match the input schema of odd__redos: (root): the object given does not match the "
        "schema's additionalProperties: False (its message, 5048 characters long, is not shown)"))
    assert (typed.is_error, text_of(typed)) == (
        True, "arguments do not match the input schema of odd__redos: bbb: 'x' is not of type 'integer'")
    assert [(r.is_error, text_of(r)) for r in (fine, around)] == [(False, "redos"), (False, "lookaround")]
    assert odd_log(tmp_path) == [{"tool": "redos", "arguments": {"word": "aaa", "bbb": 3}},
                                 {"tool": "lookaround", "arguments": {"word": "x"}}]
    assert [r["ok"] for r in results(store)] == [False, False, False, True, True]


# ---------------------------------------------------------------------------- 6. SDK parse error traceback


async def test_a_malformed_upstream_line_is_one_sealbox_line_and_no_sdk_traceback(tmp_path, store, caplog):
    gw = Gateway(toy_config(tmp_path), store=store)
    with caplog.at_level(logging.DEBUG):
        async with running(gw) as tg, connect(gw, tg) as client:
            answer = await client.call_tool("toy__garbage", {})
    assert text_of(answer) == "after garbage"
    mine = [(r.name, r.levelname, r.getMessage()) for r in caplog.records
            if "malformed" in r.getMessage() or "JSONRPC" in r.getMessage()]
    assert mine == [("sealbox.gateway", "WARNING", "upstream toy sent a malformed message: Invalid JSON: expected "
                     "ident at line 1 column 2 (input 'this is not json')")]
    other = logging.getLogger("mcp.client.stdio").makeRecord("mcp.client.stdio", logging.WARNING, __file__, 1,
                                                             "Reading from the MCP server's stdout failed", (), None)
    assert all(f.filter(other) for f in logging.getLogger("mcp.client.stdio").filters)  # others still pass


async def test_malformed_upstream_lines_are_logged_first_then_at_most_one_summary_per_interval(tmp_path, store, caplog):
    """An upstream printing garbage made one stderr line per malformed line (39 in 2 s). Now: the first is logged,
    later ones are counted and summed up in one line at most every ``malformed_log_interval`` (10 s); every one
    is still counted (``malformed``) and the calls' records are unchanged."""
    gw = Gateway(toy_config(tmp_path), store=store)
    up = gw.upstreams["toy"]
    assert up.malformed_log_interval == 10.0
    bad = "Invalid JSON: expected ident at line 1 column 2 (input 'this is not json')"
    with caplog.at_level(logging.DEBUG):
        async with running(gw) as tg, connect(gw, tg) as client:
            answers = [await client.call_tool("toy__garbage", {}) for _ in range(5)]
            up.malformed_log_interval = 0.2
            await anyio.sleep(0.3)
            answers.append(await client.call_tool("toy__garbage", {}))
            answers.append(await client.call_tool("toy__garbage", {}))
    assert [text_of(a) for a in answers] == ["after garbage"] * 7
    assert up.malformed == 7
    mine = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if "malformed" in r.getMessage()]
    assert mine == [
        ("sealbox.gateway", "WARNING", f"upstream toy sent a malformed message: {bad}"),
        ("sealbox.gateway", "WARNING", f"upstream toy sent 5 more malformed messages (logged at most once every "
                                       f"0.2 s); the latest: {bad}"),
        # the one left uncounted in a line when the upstream's output ends (the gateway stops)
        ("sealbox.gateway", "WARNING", f"upstream toy sent 1 more malformed message (logged at most once every "
                                       f"0.2 s); the latest: {bad}"),
    ]
    assert [r["ok"] for r in results(store)] == [True] * 7


async def test_sealbox_gateway_serve_stderr_has_no_sdk_traceback_for_a_malformed_line(tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""")
    params = StdioServerParameters(command=str(Path(sys.executable).parent / "sealbox"),
                                   args=["gateway", "serve", "--config", str(config)],
                                   env={"PATH": os.environ.get("PATH", "")})

    with open(tmp_path / "stderr.txt", "w") as err, anyio.fail_after(60):
        async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as client:
            await client.initialize()
            answer = text_of(await client.call_tool("toy__garbage", {}))
    assert answer == "after garbage"
    assert (tmp_path / "stderr.txt").read_text() == (
        "sealbox-gateway: upstream toy sent a malformed message: Invalid JSON: expected ident at line 1 column 2 "
        "(input 'this is not json')\n")


# ---------------------------------------------------------------------------- 7. a big result


async def test_a_30_mb_result_arrives_within_the_timeout_and_the_next_call_too(tmp_path, store):
    gw = Gateway(odd_config(tmp_path, extra="limits: {call_timeout_s: 6}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with anyio.fail_after(30):
            big = await client.call_tool("odd__big", {"mb": 30})
            after = await client.call_tool("odd__ping", {})
    assert (big.is_error, len(text_of(big)), text_of(big)[:3]) == (False, 30 * 1024 * 1024, "xxx")
    assert (after.is_error, text_of(after)) == (False, "pong")
    assert [r["ok"] for r in results(store)] == [True, True]



async def test_a_line_longer_than_the_limit_is_not_kept_whole_and_its_call_fails_at_once(tmp_path, store, monkeypatch,
                                                                                        caplog):
    """A stdio upstream's line was kept whole however long it grew: one writing without end (or a message of
    gigabytes) grew the gateway's memory until the process was killed, every client and upstream with it.
    A line above ``MAX_LINE_BYTES`` (64 MiB; 2 MiB here) is now dropped as it arrives, past its first bytes:
    it is one malformed message, the call it answers fails at once (its id read from its start), and the
    upstream reads on."""
    from sealbox.gateway import upstream as upstream_module

    monkeypatch.setattr(upstream_module, "MAX_LINE_BYTES", 2 * 1024 * 1024, raising=False)
    gw = Gateway(odd_config(tmp_path, extra="limits: {call_timeout_s: 20}"), store=store)
    with caplog.at_level(logging.WARNING):
        async with running(gw) as tg, connect(gw, tg) as client:
            with anyio.fail_after(10):
                big = await client.call_tool("odd__big", {"mb": 3})
                fits = await client.call_tool("odd__big", {"mb": 1})
                after = await client.call_tool("odd__ping", {})
    assert (big.is_error, text_of(big)) == (True, "upstream error: upstream odd sent a malformed response: a line "
                                               "longer than 2097152 bytes (dropped)")
    assert (fits.is_error, len(text_of(fits))) == (False, 1024 * 1024)
    assert (after.is_error, text_of(after)) == (False, "pong")
    assert gw.upstreams["odd"].malformed == 1
    assert [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()] == [
        "upstream odd sent a malformed message: a line longer than 2097152 bytes (dropped)"]
    assert [r["ok"] for r in results(store)] == [False, True, True]


async def test_a_line_longer_than_the_limit_with_its_id_last_fails_its_call_at_once(tmp_path, store, monkeypatch):
    """Its id was looked for only in the line's first KiB: an upstream writing each response's id after its
    result (``{"jsonrpc":"2.0","result":{…3 MB…},"id":1}``) left the call waiting for call_timeout_s and
    recorded as a timeout. The id is now read from the line's end too: the call fails at once, saying why."""
    from sealbox.gateway import upstream as upstream_module

    monkeypatch.setattr(upstream_module, "MAX_LINE_BYTES", 2 * 1024 * 1024)
    gw = Gateway(odd_config(tmp_path, env={"ODD_ID_LAST": "1"}, extra="limits: {call_timeout_s: 10}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        big = await client.call_tool("odd__big", {"mb": 3})
        after = await client.call_tool("odd__ping", {})
    assert (big.is_error, text_of(big)) == (True, "upstream error: upstream odd sent a malformed response: a line "
                                               "longer than 2097152 bytes (dropped)")
    assert (after.is_error, text_of(after)) == (False, "pong")
    assert gw.upstreams["odd"].malformed == 1
    assert [r["ok"] for r in results(store)] == [False, True]


@pytest.mark.parametrize("chunks, lines", [
    # the long line within one chunk, with the lines after it
    ([b'{"id":1,"result":' + b"x" * 30 + b"\nok\nnext"], ['{"id":1,"result":' + "x" * 30 + "{mark}\nok\n", "next"]),
    # over several chunks, ending in one that holds other lines (its end, past the kept start, kept after a NUL)
    ([b"abc", b"x" * 20, b"yy\nA\nB\n", b"C"], ["abc" + "x" * 20 + "{mark}\x00yy\nA\nB\n", "C"]),
    ([b"x" * 5, b"\nz" * 3 + b"\n"], ["xxxxx\nz\nz\nz\n"]),  # within the limit: as it was
    # no newline before the end: its start as the limit was passed, and its end
    ([b"y" * 8, b"y" * 8, b"y" * 8], ["y" * 16 + "{mark}\x00" + "y" * 8]),
])
async def test_the_line_reader_keeps_the_start_of_a_line_above_the_limit_and_reads_on(chunks, lines, monkeypatch):
    from sealbox.gateway import upstream as upstream_module

    monkeypatch.setattr(upstream_module, "MAX_LINE_BYTES", 10, raising=False)
    monkeypatch.setattr(upstream_module, "_LONG_HEAD", 1024, raising=False)
    assert await _read_lines(upstream_module, chunks) == [
        line.replace("{mark}", getattr(upstream_module, "TOO_LONG_MARK", "?")) for line in lines]


async def _read_lines(upstream_module, chunks: list[bytes]) -> list[str]:
    """What the stdio line reader passes on for ``chunks`` read from an upstream's stdout."""
    send, receive = anyio.create_memory_object_stream(len(chunks))
    for chunk in chunks:
        await send.send(chunk)
    await send.aclose()
    reader = upstream_module._LineReceiveStream(receive)
    out = []
    with pytest.raises(anyio.EndOfStream):
        while True:
            out.append(await reader.receive())
    return out


_NESTED = '{"content":[{"type":"text","text":"' + "x" * 200 + '"}],"structuredContent":{"id":99}}'


@pytest.mark.parametrize("line, head, tail, answered", [
    # the id first: read from the kept start, as before
    ('{"jsonrpc":"2.0","id":7,"result":' + _NESTED + "}", '{"jsonrpc":"2.0","id":7,"result":{"con',
     'ructuredContent":{"id":99}}}', 7),
    # the id last (some SDKs write it after the result): read from the kept end, not the nested "id":99
    ('{"result":' + _NESTED + ',"jsonrpc":"2.0","id":7}', '{"result":{"content":[{"type":',
     '{"id":99}},"jsonrpc":"2.0","id":7}', 7),
    ('{"jsonrpc":"2.0","result":' + _NESTED + ',"id":"call-8"}', '{"jsonrpc":"2.0","result":{"cont',
     '":{"id":99}},"id":"call-8"}', "call-8"),
    ('{"result":' + _NESTED + ',"id":7,"jsonrpc":"2.0"}', '{"result":{"content":[{"type":',
     '}},"id":7,"jsonrpc":"2.0"}', 7),
    # no top-level id: the nested one (followed by two braces) is not taken for it
    ('{"jsonrpc":"2.0","result":' + _NESTED + "}", '{"jsonrpc":"2.0","result":{"cont',
     'tent":{"id":99}}}', None),
    # the upstream's own request with its id last: not an answer (its id is in the upstream's numbering)
    ('{"method":"sampling/createMessage","params":' + _NESTED + ',"jsonrpc":"2.0","id":3}',
     '{"method":"sampling/createMe', '{"id":99}},"jsonrpc":"2.0","id":3}', None),
])
async def test_a_line_above_the_limit_keeps_its_start_and_end_and_its_answer_id_is_read_first_or_last(
        line, head, tail, answered, monkeypatch):
    """The id of a line above the limit was looked for only in its first KiB: an upstream writing the id after
    the result (``{"result": {…huge…}, "jsonrpc": "2.0", "id": 7}``) left the call waiting for call_timeout_s.
    The line's last bytes are now kept too, and the id read there when it is the outermost object's last member."""
    from mcp_types import jsonrpc_message_adapter
    from pydantic import ValidationError

    from sealbox.gateway import upstream as upstream_module

    monkeypatch.setattr(upstream_module, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(upstream_module, "_LONG_HEAD", len(head))
    monkeypatch.setattr(upstream_module, "_LONG_TAIL", len(tail), raising=False)
    data = line.encode() + b"\nnext\n"
    out = await _read_lines(upstream_module, [data[i:i + 7] for i in range(0, len(data), 7)])
    assert "".join(out) == head + upstream_module.TOO_LONG_MARK + "\x00" + tail + "\nnext\n"
    passed_on = "".join(out).split("\n")[0]
    with pytest.raises(ValidationError) as exc:  # what the SDK's stdio client does with it
        jsonrpc_message_adapter.validate_json(passed_on, by_name=False)
    assert upstream_module._answered_id(exc.value) == answered
    assert upstream_module._malformed(exc.value) == "a line longer than 100 bytes (dropped)"


# ---------------------------------------------------------------------------- 8. hint, long names, SIGTERM


async def test_the_tool_changed_denial_names_the_store_in_its_reapprove_hint(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        denied = await client.call_tool("toy__echo", {"text": "after"})
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
    command = f"sealbox gateway reapprove toy echo --store {tmp_path / 'store'} --reason TEXT --key-file KEY"
    assert text_of(denied).startswith(
        f"denied by rule sealbox.gateway/tool-changed (policy_deny): tool toy/echo changed upstream and has not "
        f"been re-approved ({command}) [call ")
    assert listed["toy__echo"] == f"[blocked: this tool changed upstream; calls are denied until `{command}`]"


async def test_a_long_upstream_tool_name_is_exposed_within_64_characters_and_callable(tmp_path, store):
    import hashlib

    long_name = "n" * 200
    gw = Gateway(odd_config(tmp_path, env={"ODD_LONG_NAME": long_name}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        exposed = "odd__" + "n" * 50 + "-" + hashlib.sha256(long_name.encode()).hexdigest()[:8]
        result = await client.call_tool(exposed, {})
    assert exposed in names and len(exposed) == 64 and max(len(n) for n in names) == 64
    assert (result.is_error, text_of(result)) == (False, "long")
    [call] = [e.payload for e in all_events(store) if e.kind == "tool.call"]
    assert (call["server"], call["tool"], call["exposed"]) == ("odd", long_name, exposed)


async def test_a_tool_named_as_another_tools_shortened_name_makes_both_unlisted_and_uncallable(tmp_path, store):
    """An upstream can name a tool exactly as the shortened form of another's long name: one
    exposed name for two tools, so a call could reach either. Neither is listed or called."""
    import hashlib

    long_name = "n" * 200
    shortened = "n" * 50 + "-" + hashlib.sha256(long_name.encode()).hexdigest()[:8]
    gw = Gateway(odd_config(tmp_path, env={"ODD_LONG_NAME": long_name, "ODD_SECOND_NAME": shortened}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        with pytest.raises(MCPError) as err:
            await client.call_tool("odd__" + shortened, {})
        pong = await client.call_tool("odd__ping", {})
    assert "odd__ping" in names and not any(n.startswith("odd__nnn") for n in names)
    assert err.value.code == UNKNOWN_TOOL
    assert text_of(pong) == "pong"
    assert [e.payload["tool"] for e in all_events(store) if e.kind == "tool.call"] == ["ping"]


async def test_a_tool_with_an_empty_name_is_not_listed(tmp_path, store):
    """An upstream tool named "" was listed as 'odd__', which no call could reach (UNKNOWN_TOOL):
    a client saw a tool it could never use. It is left out; a call by that name is unknown."""
    gw = Gateway(odd_config(tmp_path, env={"ODD_EMPTY_NAME": "1"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        with pytest.raises(MCPError) as err:
            await client.call_tool("odd__", {})
        pong = await client.call_tool("odd__ping", {})
    assert sorted(names) == ["odd__big", "odd__fail", "odd__ping", "odd__ref_file", "odd__ref_http", "odd__ref_local"]
    assert err.value.code == UNKNOWN_TOOL and text_of(pong) == "pong"
    assert [e.payload["tool"] for e in all_events(store) if e.kind == "tool.call"] == ["ping"]


def test_sigterm_while_requests_are_still_being_read_is_a_clean_stop(tmp_path):
    """SIGTERM right after a client wrote its requests: the relay between stdin and the server was passing
    one on when the server stopped reading, and its BrokenResourceError ended the gateway with 'error:
    internal error: ExceptionGroup: unhandled errors in a TaskGroup' (exit 70). It is a clean stop (exit 0);
    requests the server had not read yet are not answered."""
    import signal
    import subprocess

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        lines = [{"jsonrpc": "2.0", "method": "notifications/initialized"}] + [
            {"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call", "params": {"name": "toy__echo", "arguments": {"text": str(i)}}}
            for i in range(20)]
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines))
        proc.stdin.flush()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    # what was answered was answered right: the echo, or (a call read once the stop began) the documented
    # GatewayStopping answer -- never breaker_open (it was, under load: GatewayStopping opened the breaker)
    stopping = ("not forwarded: the gateway is stopping (the call was never written to upstream toy); "
                "call again once it is back")
    for line in stdout.splitlines():
        answer = json.loads(line)
        assert answer["result"]["content"] in ([{"type": "text", "text": str(answer["id"] - 2)}],
                                               [{"type": "text", "text": stopping}]), line


def test_sigterm_with_a_call_in_flight_answers_it_before_closing(tmp_path):
    import signal
    import subprocess
    import time

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_LOG: {json.dumps(str(tmp_path / "toy.log"))}}}
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        def send(msg: dict) -> None:
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()

        def read_id(want: int) -> dict:
            while True:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                msg = json.loads(line)
                if msg.get("id") == want:
                    return msg

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        read_id(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "toy__slow",
                                                                           "arguments": {"seconds": 2.0}}})
        # the call is in flight upstream (a fixed 0.7 s was not always enough on a loaded machine: then the
        # SIGTERM came before the gateway had read it)
        deadline = time.monotonic() + 30
        log = tmp_path / "toy.log"
        while not (log.exists() and log.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [json.loads(line)["tool"] for line in log.read_text().splitlines()] == ["slow"]
        proc.send_signal(signal.SIGTERM)
        reply = read_id(2)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
    assert reply["result"]["content"] == [{"type": "text", "text": "slow done"}]
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [e.kind for e in store.read_run(run_id)] == ["run.started", "tool.call", "policy.decision",
                                                            "tool.result", "run.ended"]
    finally:
        store.close()


async def test_sigterm_over_http_with_a_call_in_flight_answers_it_before_closing(tmp_path):
    import signal

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from .test_gateway_transports import TOKEN, _http_serve_process

    log = tmp_path / "toy.log"
    proc, port = _http_serve_process(tmp_path, toy_log=log)
    try:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
        async with http, streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w):
            async with ClientSession(r, w) as client, anyio.create_task_group() as tg:
                with anyio.fail_after(30):
                    await client.initialize()

                    async def stop_soon() -> None:
                        # once the call is in flight upstream (a fixed 0.7 s was not always enough on a loaded
                        # machine: the SIGTERM then came before the call had reached the gateway)
                        while not (log.exists() and log.read_text().endswith("\n")):
                            await anyio.sleep(0.01)
                        assert [json.loads(line)["tool"] for line in log.read_text().splitlines()] == ["slow"]
                        proc.send_signal(signal.SIGTERM)

                    tg.start_soon(stop_soon)
                    result = await client.call_tool("toy__slow", {"seconds": 2.0})
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    assert (result.is_error, text_of(result)) == (False, "slow done")
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [e.kind for e in store.read_run(run_id)] == ["run.started", "tool.call", "policy.decision",
                                                            "tool.result", "run.ended"]
    finally:
        store.close()


def test_sigterm_while_stopping_a_slow_upstream_after_eof_is_still_a_clean_stop(tmp_path):
    """MCP's stdio shutdown: the client closes the server's stdin, waits (the official SDK: 2 s), then
    sends SIGTERM. After the EOF the gateway stops its upstreams, which gives one that does not exit
    on its own 2 s before it is terminated; the SIGTERM that came meanwhile found its default action
    restored (the signal handling had been cancelled with the session) and killed the gateway:
    exit status -15, the store not closed (its last events left without a signed checkpoint), and
    the upstream left running, orphaned. It now finishes stopping the upstreams and exits 0."""
    import signal
    import subprocess
    import time

    sealbox.init_store(tmp_path / "store").close()
    pid_file = tmp_path / "upstream.pid"
    # an upstream that does not exit when its stdin closes (it keeps running for 60 s after)
    script = f"echo $$ > {pid_file}; {sys.executable} {TOY}; sleep 60"
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: /bin/sh
    args: ["-c", {json.dumps(script)}]
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    upstream_pid = None
    try:
        def send(msg: dict) -> None:
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()

        def read_id(want: int) -> dict:
            while True:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                msg = json.loads(line)
                if msg.get("id") == want:
                    return msg

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        read_id(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "toy__echo",
                                                                           "arguments": {"text": "hi"}}})
        assert read_id(2)["result"]["content"] == [{"type": "text", "text": "hi"}]
        upstream_pid = int(pid_file.read_text())
        proc.stdin.close()  # EOF: the gateway ends the session and stops its upstreams
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)  # the client's grace period is over
        assert proc.wait(timeout=30) == 0
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for f in (proc.stdout, proc.stderr):
            f.close()
    alive = True
    for _ in range(300):  # 30 s (was 5 s, which a loaded host could use up reaping the upstream)
        try:
            os.kill(upstream_pid, 0)
        except ProcessLookupError:
            alive = False
            break
        time.sleep(0.1)
    if alive:
        os.kill(upstream_pid, signal.SIGKILL)
    assert not alive, "the upstream was left running"
    assert "Traceback" not in stderr
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        assert [e.kind for e in store.read_run(run_id)] == ["run.started", "tool.call", "policy.decision",
                                                            "tool.result", "run.ended"]
    finally:
        store.close()
    verified = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "verify", str(tmp_path / "store")],
                              capture_output=True, text=True, env=env)
    assert verified.returncode == 0 and "not covered by a signed checkpoint" not in verified.stdout, verified.stdout


async def test_a_tool_whose_name_holds_a_nul_is_not_listed(tmp_path, store, caplog):
    """An upstream tool named "nul\\x00name" was listed as 'odd__nul\\x00name'; a call to it reached the
    recorder's refusal of a NUL in a tool name (a ConfigError, no store keeps one), which escaped the
    handler: a traceback in the log and JSON-RPC error code 0. Like a tool with an empty name, it is
    left out (never forwarded, nothing recorded); a call by that name is unknown."""
    import logging

    gw = Gateway(odd_config(tmp_path, env={"ODD_NUL_NAME": "1"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        with caplog.at_level(logging.WARNING):
            with pytest.raises(MCPError) as err:
                await client.call_tool("odd__nul\x00name", {})
        pong = await client.call_tool("odd__ping", {})
    assert sorted(names) == ["odd__big", "odd__fail", "odd__ping", "odd__ref_file", "odd__ref_http", "odd__ref_local"]
    assert (err.value.code, str(err.value)) == (UNKNOWN_TOOL, "unknown tool 'odd__nul\\x00name'")
    assert "Traceback" not in caplog.text and text_of(pong) == "pong"
    assert [e.payload["tool"] for e in all_events(store) if e.kind == "tool.call"] == ["ping"]
    assert not (tmp_path / "odd.log").exists() or "nul" not in (tmp_path / "odd.log").read_text()


async def test_a_call_not_forwarded_because_the_gateway_is_stopping_opens_no_breaker(tmp_path, store):
    """A call made once the stop began is answered GatewayStopping, documented "not counted by the circuit
    breaker". GatewayStopping is an UpstreamUnavailable (a ConnectionError), which the recorder took for the
    upstream being down: every breaker of the upstream opened (breaker.changed server_down recorded), and the
    client's later requests, still read while the stop went on, were denied breaker_open instead of
    GatewayStopping (seen under load in test_sigterm_while_requests_are_still_being_read_is_a_clean_stop)."""
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        first = await client.call_tool("toy__echo", {"text": "before"})
        gw.upstreams["toy"].begin_shutdown()
        late = [await client.call_tool("toy__echo", {"text": str(i)}) for i in range(3)]
    stopping = ("not forwarded: the gateway is stopping (the call was never written to upstream toy); "
                "call again once it is back")
    assert text_of(first) == "before"
    assert [(r.is_error, text_of(r), r.meta) for r in late] == [
        (True, stopping, {"sealbox/not_forwarded": "gateway_stopping"})] * 3
    assert [e.payload for e in all_events(store) if e.kind == "breaker.changed"] == []
    assert [(r["ok"], (r.get("error") or {}).get("type")) for r in results(store)] == [
        (True, None)] + [(False, "GatewayStopping")] * 3


@pytest.mark.parametrize("which", ["unknown", "ended", "malformed"])
def test_sealbox_run_id_of_no_joinable_run_stops_serve_at_start(tmp_path, which):
    """SEALBOX_RUN_ID is fixed for the gateway's life: a stdio gateway started with the id of no run, of an
    ended run, or an id no run can have, started anyway and then answered every call UNKNOWN_RUN. It stops
    at start: one error line, exit 2, no upstream started, nothing recorded."""
    import subprocess

    store = sealbox.init_store(tmp_path / "store")
    try:
        if which == "ended":
            from sealbox.policy import ALLOW_ALL

            run = sealbox.Recorder(store, ALLOW_ALL).run(agent="a")
            run.start()
            run.end()
            run_id = run.run_id
        else:
            run_id = {"unknown": "run_never_started", "malformed": "r" * 300}[which]
        size = store.size()
    finally:
        store.close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {{TOY_LOG: {json.dumps(str(tmp_path / "toy.log"))}}}
""")
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}, "SEALBOX_RUN_ID": run_id}
    out = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
    shown = run_id if which != "malformed" else "r" * 40 + "… (300 characters)"
    expected = {
        "unknown": f"SEALBOX_RUN_ID={shown}: no run {shown} in this store",
        "ended": f"SEALBOX_RUN_ID={shown}: run {shown} has ended; it cannot be continued",
        "malformed": f"SEALBOX_RUN_ID={shown}: a run id is at most 128 characters",
    }[which]
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    assert out.stderr == (f"error: {expected}; set it to the id of a running run (the agent's: mcp_env(run)) "
                          "or unset it\n")
    assert "r" * 41 not in out.stderr
    assert not (tmp_path / "toy.log").exists()
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        assert store.size() == size
    finally:
        store.close()


async def test_a_tool_of_an_upstream_that_never_started_is_upstream_error_not_unknown_tool(tmp_path, store):
    """An upstream that never started lists no tools, so a call of one of them was "unknown tool
    'dead__echo'": the client was told the tool does not exist, not that its upstream is down. It is
    UPSTREAM_ERROR naming the upstream, its state and why (the gateway cannot tell whether the tool exists:
    nothing is recorded or forwarded, as for an unknown tool); a name no configured upstream has is still
    UNKNOWN_TOOL."""
    from sealbox.gateway.codes import UPSTREAM_ERROR

    ups = f"""
  - id: dead
    command: {json.dumps(sys.executable)}
    args: ["-c", "import sys; sys.exit(3)"]
"""
    gw = Gateway(toy_config(tmp_path, upstreams=ups), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as down:
            await client.call_tool("dead__echo", {"text": "x"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("nobody__echo", {})
    assert down.value.code == UPSTREAM_ERROR, down.value
    assert str(down.value).startswith("tools/call dead__echo: upstream dead is "), str(down.value)
    assert "exited with status 3" in str(down.value) and "unknown tool" not in str(down.value)
    assert unknown.value.code == UNKNOWN_TOOL
    assert [e.kind for e in all_events(store) if e.kind.startswith("tool.")] == []


async def test_a_long_run_id_in_meta_is_not_echoed_whole_in_its_error(tmp_path, store):
    """A client's _meta['sealbox/run_id'] of 300 characters was echoed in full in the UNKNOWN_RUN message
    (twice the id's size back to the client, and into logs). It is shown as its first 40 characters and its
    length; a short unknown id is still shown whole."""
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        errors = []
        for run_id in ("r" * 300, "run_" + "u" * 90, "run_nope"):
            with pytest.raises(MCPError) as err:
                await client.call_tool("toy__echo", {"text": "x"}, meta={"sealbox/run_id": run_id})
            errors.append((err.value.code, str(err.value)))
    assert errors == [
        (UNKNOWN_RUN, "no run " + "r" * 40 + "… (300 characters) can be joined: a run id is at most 128 characters"),
        (UNKNOWN_RUN, "no run 'run_" + "u" * 36 + "… (94 characters)' in this store"),
        (UNKNOWN_RUN, "no run 'run_nope' in this store")]
    assert toy_log(tmp_path) == []


async def test_a_tool_name_listed_twice_by_one_upstream_is_warned_once(tmp_path, store, caplog):
    """An upstream listing two tools of one name had the last one used, silently: the operator never learnt
    that its upstream's listing is ambiguous. It is still the last one (pinned and listed as before), and
    one warning names the upstream and the tool, not repeated on each re-list."""
    caplog.set_level(logging.WARNING, logger="sealbox.gateway")
    gw = Gateway(odd_config(tmp_path, env={"ODD_DUP": "1"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
        up = gw.upstreams["odd"]
        before = up._listed
        up.request_relist()
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u._listed > before)
        pong = await client.call_tool("odd__ping", {})
    assert listed["odd__ping"] == "pong again" and text_of(pong) == "pong"
    warned = [r.getMessage() for r in caplog.records if "listed" in r.getMessage() and "twice" in r.getMessage()
              or "more than once" in r.getMessage()]
    assert warned == ["upstream odd listed more than once the tool(s) 'ping'; the last one listed is used "
                      "(a problem of the upstream: fix its tool names)"]
