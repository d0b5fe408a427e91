"""`sealbox gateway replay RUN`: a recorded gateway session served to the official MCP client over stdio.

Each test records a session through the real gateway (toy upstream, a real stdio process),
then replays it with the `sealbox` command: the upstream is never started (the replay is
given a config whose upstream command does not exist, and the toy's call log does not grow).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.policy import Policy

from .conftest import MALFORMED_PARAMS_WARNING, connect, gateway_runs, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

SEALBOX = str(Path(sys.executable).parent / "sealbox")
DENY_ECHO = """
version: 1
name: no-echo
rules:
  - id: no-echo-secrets
    match: {server: toy, tool: echo}
    when: 'call.arguments.text.contains("secret")'
    effect: deny
  - id: rest-ok
    effect: allow
"""
CALLS = [("toy__add", {"a": 2, "b": 40}), ("toy__echo", {"text": "hello"})]


async def _record(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], policy: str | None = None,
                  **client_kwargs: Any):
    store = sealbox.init_store(tmp_path / "store")
    try:
        gw = Gateway(toy_config(tmp_path), store=store, policy=Policy.from_text(policy) if policy else None)
        async with running(gw) as tg:
            async with connect(gw, tg, **client_kwargs) as client:
                tools = (await client.list_tools()).tools
                results = [await client.call_tool(name, args) for name, args in calls]
        [run_id] = gateway_runs(store)
    finally:
        store.close()
    return run_id, tools, results


def _dead_upstream_config(tmp_path: Path) -> Path:
    """A gateway config for the same store whose upstream cannot start (replay must not need it)."""
    path = tmp_path / "replay-gateway.yaml"
    path.write_text(f"""version: 1
store: {json.dumps(str(tmp_path / 'store'))}
policy: ALLOW_ALL
upstreams:
  - id: toy
    command: {json.dumps(str(tmp_path / 'no-such-toy-server'))}
""")
    return path


async def _replay(tmp_path: Path, run_id: str, calls: list[tuple[str, dict[str, Any]]], *extra: str):
    """Replay over stdio with the official client; (tools, results, JSON verdict)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    out = tmp_path / "verdict.json"
    params = StdioServerParameters(command=SEALBOX, args=["gateway", "replay", run_id, "-c",
                                                          str(_dead_upstream_config(tmp_path)), "--json",
                                                          "--output", str(out), *extra],
                                   env={"PATH": os.environ.get("PATH", "")})
    with open(tmp_path / "replay.stderr", "w") as errlog, anyio.fail_after(60):
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as client:
            await client.initialize()
            tools = (await client.list_tools()).tools
            results = [await client.call_tool(name, args) for name, args in calls]
    return tools, results, json.loads(out.read_text())


def _replay_runs(tmp_path: Path, run_id: str) -> list[list[Any]]:
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        runs = [store.read_run(r) for r in gateway_runs(store)]
        assert sealbox.verify_store(store).ok
    finally:
        store.close()
    return [events for events in runs if events[0].payload.get("replay_of") == run_id]


async def test_the_same_calls_reproduce_from_the_record_without_any_upstream(tmp_path):
    run_id, recorded_tools, recorded = await _record(tmp_path, CALLS)
    seen_by_upstream = toy_log(tmp_path)
    tools, results, verdict = await _replay(tmp_path, run_id, CALLS)

    assert [(t.name, t.description, t.input_schema) for t in tools] == \
        [(t.name, t.description, t.input_schema) for t in recorded_tools]
    assert [(r.is_error, text_of(r), r.structured_content) for r in results] == \
        [(r.is_error, text_of(r), r.structured_content) for r in recorded] == \
        [(False, "42", {"sum": 42}), (False, "hello", None)]
    assert toy_log(tmp_path) == seen_by_upstream  # the upstream saw nothing more
    assert (verdict["reproduced"], verdict["divergence"], verdict["steps_compared"]) == (True, None, 2)
    assert (verdict["calls_made"], verdict["calls_recorded"], verdict["replay_of"]) == (2, 2, run_id)
    [replay] = _replay_runs(tmp_path, run_id)
    assert replay[0].run_id == verdict["new_run_id"]
    assert [e.kind for e in replay] == ["run.started"] + ["tool.call", "policy.decision", "tool.result"] * 2 + \
        ["run.ended"]
    ended = replay[-1].payload
    assert ended["status"] == "ok" and ended["verdict"]["reproduced"] is True
    assert ended["verdict"]["replay_of"] == run_id


async def test_a_session_whose_upstream_asked_the_client_replays_without_asking_anyone(tmp_path):
    """The records of an elicitation made during a call (notes of principal sealbox at the call's step)
    are not steps of the agent's: the replay serves the call from the record and compares the rest."""
    import mcp_types as types

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    calls = [("toy__ask", {"question": "colour?"}), ("toy__echo", {"text": "hello"})]
    run_id, _, recorded = await _record(tmp_path, calls, elicitation_callback=elicit)
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        assert [e.kind for e in store.read_run(run_id)].count("note") == 2
    finally:
        store.close()
    _, results, verdict = await _replay(tmp_path, run_id, calls)  # this client declares no elicitation
    assert [(r.is_error, text_of(r)) for r in results] == [(r.is_error, text_of(r)) for r in recorded] == \
        [(False, "accept:blue"), (False, "hello")]
    assert (verdict["reproduced"], verdict["divergence"], verdict["steps_compared"]) == (True, None, 2)
    [replay] = _replay_runs(tmp_path, run_id)
    assert [e.kind for e in replay] == ["run.started"] + ["tool.call", "policy.decision", "tool.result"] * 2 + \
        ["run.ended"]


async def test_a_changed_argument_diverges_at_that_call_with_the_field_diff(tmp_path):
    run_id, _, _ = await _record(tmp_path, CALLS)
    _, results, verdict = await _replay(tmp_path, run_id, [("toy__add", {"a": 2, "b": 41}), CALLS[1]])

    assert results[0].is_error and text_of(results[0]).startswith("replay diverged: call 1: ")
    assert results[0].meta["sealbox/replay"]["kind"] == "mismatch"
    assert results[1].is_error and text_of(results[1]).startswith("replay diverged: ")  # stopped: no more serving
    assert verdict["reproduced"] is False and verdict["diverged_at_call"] == 1
    d = verdict["divergence"]
    assert (d["kind"], d["mismatched"]) == ("mismatch", ["hash"])
    assert d["recorded"]["name"] == d["attempted"]["name"] == "toy/add"
    assert d["diff"] == [{"path": "b", "change": "changed", "a": 40, "b": 41}]
    assert (d["recorded_content"], d["attempted_content"]) == ({"a": 2, "b": 40}, {"a": 2, "b": 41})
    [replay] = _replay_runs(tmp_path, run_id)
    ended = replay[-1].payload
    assert ended["status"] == "cancelled" and ended["verdict"]["divergence"]["fields"] == ["b"]
    assert ended["verdict"]["diverged_at_call"] == 1


async def test_another_tool_at_a_call_is_a_name_mismatch(tmp_path):
    run_id, _, _ = await _record(tmp_path, CALLS)
    _, results, verdict = await _replay(tmp_path, run_id, [CALLS[0], ("toy__echo", {"text": "hello"}),
                                                           ("toy__add", {"a": 2, "b": 40})])
    assert [r.is_error for r in results] == [False, False, True]
    assert verdict["diverged_at_call"] == 3 and verdict["divergence"]["kind"] == "extra"


async def test_an_extra_call_past_the_end_diverges(tmp_path):
    run_id, _, _ = await _record(tmp_path, CALLS)
    _, results, verdict = await _replay(tmp_path, run_id, [*CALLS, ("toy__echo", {"text": "again"})])
    assert [r.is_error for r in results] == [False, False, True]
    assert "does not have" in text_of(results[2])
    assert (verdict["divergence"]["kind"], verdict["diverged_at_call"]) == ("extra", 3)
    assert verdict["divergence"]["attempted"]["name"] == "toy/echo" and verdict["divergence"]["recorded"] is None


async def test_a_missing_call_at_the_end_diverges(tmp_path):
    run_id, _, _ = await _record(tmp_path, CALLS)
    _, results, verdict = await _replay(tmp_path, run_id, CALLS[:1])
    assert [r.is_error for r in results] == [False]
    assert (verdict["reproduced"], verdict["divergence"]["kind"], verdict["diverged_at_call"]) == \
        (False, "missing", 2)
    assert verdict["divergence"]["recorded"]["name"] == "toy/echo"
    [replay] = _replay_runs(tmp_path, run_id)
    assert replay[-1].payload["status"] == "ok" and replay[-1].payload["verdict"]["reproduced"] is False


async def test_a_recorded_deny_is_answered_with_the_same_text_naming_the_rule(tmp_path):
    calls = [("toy__echo", {"text": "the secret"}), ("toy__echo", {"text": "hello"})]
    run_id, _, recorded = await _record(tmp_path, calls, policy=DENY_ECHO)
    _, results, verdict = await _replay(tmp_path, run_id, calls)
    assert results[0].is_error and "no-echo-secrets" in text_of(results[0])
    assert [(r.is_error, text_of(r)) for r in results] == [(r.is_error, text_of(r)) for r in recorded]
    assert results[0].meta["sealbox/decision"]["rule"] == "no-echo-secrets"
    assert verdict["reproduced"] is True


async def test_a_call_refused_by_the_input_schema_is_answered_as_the_live_gateway_answered_it(tmp_path):
    """The live gateway answers arguments that do not match the schema with an isError result (never
    forwarded); the replay re-raised the recorded InvalidArguments, a JSON-RPC error with code 0."""
    calls = [("toy__add", {"a": "x", "b": 1}), ("toy__echo", {"text": "hello"})]
    run_id, _, recorded = await _record(tmp_path, calls)
    assert recorded[0].meta == {"sealbox/not_forwarded": "invalid_arguments"}
    _, results, verdict = await _replay(tmp_path, run_id, calls)
    assert [(r.is_error, text_of(r), r.meta) for r in results] == [(r.is_error, text_of(r), r.meta) for r in recorded]
    assert text_of(results[0]) == "arguments do not match the input schema of toy__add: a: 'x' is not of type 'integer'"
    assert verdict["reproduced"] is True and verdict["calls_made"] == 2


async def test_a_call_whose_approval_was_denied_or_expired_is_answered_with_the_live_text(tmp_path):
    """The replay answered "denied by rule R (approval_denied): rule 'R' requires approval for the call"
    where the live gateway had said who denied it and why, or when it expired."""
    import threading
    import time

    from identity_testkit import admin_key
    from sealbox.approvals import answer, list_approvals
    from sealbox.identities import add_identity

    from .test_gateway_approvals import POLICY

    store = sealbox.init_store(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    calls = [("toy__echo", {"text": "b"}), ("toy__add", {"a": 1, "b": 1})]  # denied by alice; expires (1 s)

    def deny_when_asked() -> None:
        deadline = time.monotonic() + 10
        while not list_approvals(store, pending=True) and time.monotonic() < deadline:
            time.sleep(0.02)
        answer(store, list_approvals(store, pending=True)[0].approval_id, "deny", "not now", key)

    try:
        gw = Gateway(toy_config(tmp_path, extra="limits: {approval_hold_s: 5}"), store=store,
                     policy=Policy.from_text(POLICY))
        gw.approval_poll = 0.05
        async with running(gw) as tg:
            async with connect(gw, tg) as client:
                t = threading.Thread(target=deny_when_asked)
                t.start()
                recorded = [await client.call_tool(*calls[0])]
                t.join()
                recorded.append(await client.call_tool(*calls[1]))
        [run_id] = gateway_runs(store)
        denied, expired = sorted(list_approvals(store), key=lambda a: a.status)
    finally:
        store.close()
    assert text_of(recorded[0]).startswith(f"denied by rule echo-needs-ops (approval_denied): approval "
                                           f"{denied.approval_id} denied by alice: not now [call ")
    assert f"approval {expired.approval_id} expired unanswered at " in text_of(recorded[1])
    _, results, verdict = await _replay(tmp_path, run_id, calls)
    assert [(r.is_error, text_of(r), r.meta) for r in results] == [(r.is_error, text_of(r), r.meta) for r in recorded]
    assert verdict["reproduced"] is True


async def test_until_calls_ends_the_session_and_the_exit_status_says_the_verdict(tmp_path):
    """Raw JSON-RPC over the command's stdio, to see its exit status: 0 reproduced, 1 diverged."""
    run_id, _, _ = await _record(tmp_path, CALLS)
    config = str(_dead_upstream_config(tmp_path))

    async def session(calls: list[tuple[str, dict[str, Any]]], *extra: str, close: bool = True) -> tuple[int, str]:
        async with await anyio.open_process([SEALBOX, "gateway", "replay", run_id, "-c", config, *extra],
                                            env={"PATH": os.environ.get("PATH", "")}) as proc:
            lines = proc.stdout.__aiter__()
            buf = b""

            async def send(msg: dict[str, Any]) -> None:
                await proc.stdin.send((json.dumps(msg) + "\n").encode())

            async def answer(id_: int) -> dict[str, Any]:
                nonlocal buf
                while True:
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        msg = json.loads(line)
                        if msg.get("id") == id_:
                            return msg
                    buf += await lines.__anext__()

            with anyio.fail_after(60):
                await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
                await answer(1)
                await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                for i, (name, args) in enumerate(calls, start=2):
                    await send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                "params": {"name": name, "arguments": args}})
                    assert "result" in await answer(i)
                if close:
                    await proc.stdin.aclose()
                code = await proc.wait()
            err = b""
            async for chunk in proc.stderr:
                err += chunk
            return code, err.decode()

    code, err = await session(CALLS)
    assert code == 0 and err.strip().splitlines()[-1].startswith("reproduced: 2 call(s) matched")
    code, err = await session(CALLS[:1])
    assert code == 1 and "diverged at call 2 (missing)" in err
    code, err = await session(CALLS[:1], "--until-calls", "1", close=False)  # ends by itself after one call
    assert code == 1 and "missing" in err


async def test_an_upstream_tool_error_is_recorded_as_a_failure_and_replayed_as_the_same_result(tmp_path):
    """A result with isError (the tool's own failure, e.g. bad SQL) was recorded ok: true; it is
    ok: false with the result and a ToolError, found by `calls --error`, and replayed unchanged."""
    calls = [("toy__echo", {"text": "!error no such table: custmers"}), ("toy__echo", {"text": "hello"})]
    run_id, _, recorded = await _record(tmp_path, calls)
    assert [(r.is_error, text_of(r)) for r in recorded] == [(True, "no such table: custmers"), (False, "hello")]
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        failed, fine = (e.payload for e in store.read_run(run_id) if e.kind == "tool.result")
        assert (failed["ok"], failed["error"]) == (False, {"type": "ToolError", "message": "no such table: custmers"})
        assert store.resolve(failed["result"])["isError"] is True
        assert (fine["ok"], "error" in fine) == (True, False)
        assert [(c["outcome"], c["tool"]) for c in store.query_calls(error=True)] == [("error", "echo")]
    finally:
        store.close()
    _, results, verdict = await _replay(tmp_path, run_id, calls)
    assert [(r.is_error, text_of(r)) for r in results] == [(True, "no such table: custmers"), (False, "hello")]
    assert (verdict["reproduced"], verdict["divergence"]) == (True, None)


async def test_an_output_file_that_cannot_be_written_is_refused_before_serving_and_never_replaces_the_store(tmp_path):
    """`--output` named the store's own database (or a missing folder): the verdict was written there
    after the session, replacing sealbox.db with JSON (the store destroyed), or failed with exit 70."""
    import subprocess

    run_id, _, _ = await _record(tmp_path, CALLS)
    config = str(_dead_upstream_config(tmp_path))
    db = tmp_path / "store" / "sealbox.db"
    before = db.read_bytes()
    for target, problem in [
        (db, f"error: cannot write {db}: it is the store's own database ({db}), which is never replaced "
             "(nothing was written)"),
        (tmp_path / "no-such-folder" / "v.json",
         f"error: cannot write {tmp_path / 'no-such-folder' / 'v.json'}: the folder {tmp_path / 'no-such-folder'} "
         "does not exist"),
    ]:
        res = subprocess.run([SEALBOX, "gateway", "replay", run_id, "-c", config, "--output", str(target)],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", "")})
        assert (res.returncode, res.stdout, res.stderr.strip().splitlines()) == (2, "", [problem])
    assert db.read_bytes() == before
    assert _replay_runs(tmp_path, run_id) == []  # refused before anything was served or recorded


async def test_replay_over_http_without_a_config_is_one_usage_error_line(tmp_path):
    """--http without --config (so without tokens) was exit 70: AttributeError 'NoneType' object has
    no attribute 'tokens'."""
    import subprocess

    run_id, _, _ = await _record(tmp_path, CALLS)
    res = subprocess.run([SEALBOX, "gateway", "replay", run_id, "--store", str(tmp_path / "store"), "--http", "0"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                         env={"PATH": os.environ.get("PATH", "")})
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == "error: --http needs --config: the bearer tokens of its `http.tokens` admit the clients\n"
    assert _replay_runs(tmp_path, run_id) == []


async def test_a_malformed_tools_call_gets_the_live_gateways_error_code_in_a_replay(tmp_path):
    """The replay server runs the live gateway's protocol checks: a tools/call without a name was
    answered -32602 by the SDK in a replay, MALFORMED_REQUEST by the live gateway."""
    import mcp_types as types
    from mcp.client.session import ClientSession
    from mcp.shared.exceptions import MCPError
    from mcp.shared.memory import create_client_server_memory_streams

    from sealbox.gateway import MALFORMED_REQUEST
    from sealbox.gateway.replay import GatewayReplay

    run_id, _, _ = await _record(tmp_path, CALLS)
    store = sealbox.open_store(tmp_path / "store")
    try:
        replay = GatewayReplay(store, run_id)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg, create_client_server_memory_streams() as (client, srv):
                tg.start_soon(replay.serve_streams, srv[0], srv[1])
                async with ClientSession(client[0], client[1]) as session:
                    await session.initialize()
                    # sent as a dict on purpose (no name): pydantic warns as it serializes it
                    with pytest.warns(UserWarning, match=MALFORMED_PARAMS_WARNING), pytest.raises(MCPError) as err:
                        await session.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
                            name="toy__add", arguments=None)).model_copy(update={"params": {"arguments": {"a": 1}}}),
                            types.CallToolResult)
                    answered = [await session.call_tool(name, args) for name, args in CALLS]
                tg.cancel_scope.cancel()
        assert err.value.code == MALFORMED_REQUEST
        assert [text_of(r) for r in answered] == ["42", "hello"]
    finally:
        store.close()


async def _replay_in_memory(store: Any, run_id: str, calls: list[tuple[str, dict[str, Any]]]):
    """Replay with the official client over in-memory streams; (results, the GatewayReplay)."""
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    from sealbox.gateway.replay import GatewayReplay

    replay = GatewayReplay(store, run_id)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, create_client_server_memory_streams() as (client, srv):
            tg.start_soon(replay.serve_streams, srv[0], srv[1])
            async with ClientSession(client[0], client[1]) as session:
                await session.initialize()
                results = [await session.call_tool(name, args) for name, args in calls]
            tg.cancel_scope.cancel()
    return results, replay


@pytest.mark.parametrize("how", ["pending_approval", "mismatch"])
async def test_the_summary_counts_the_calls_matched_before_the_divergent_one(tmp_path, how):
    """Diverged at call 3: 2 calls matched before it. The summary said "3 call(s) matched" for a call
    still waiting for its approval (its key matched the record; its answer cannot be served)."""
    from .test_gateway_approvals import POLICY

    calls = [("toy__add", {"a": 1, "b": 2}), ("toy__add", {"a": 3, "b": 4}), ("toy__echo", {"text": "hi"})]
    store = sealbox.init_store(tmp_path / "store")
    try:
        policy = POLICY.replace("add-expires-fast", "add-ok").replace(
            "    effect: require_approval\n    approval: {groups: [ops], quorum: 1, expires: 1s}", "    effect: allow")
        if how == "mismatch":
            policy = policy.replace("match: {server: toy, tool: echo}", "match: {server: toy, tool: nothing}")
        gw = Gateway(toy_config(tmp_path, extra="limits: {approval_hold_s: 0.2}"), store=store,
                     policy=Policy.from_text(policy))
        gw.approval_poll = 0.05
        async with running(gw) as tg:
            async with connect(gw, tg) as client:
                recorded = [await client.call_tool(name, args) for name, args in calls]
        [run_id] = gateway_runs(store)
        assert [r.is_error for r in recorded] == [False, False, how == "pending_approval"]

        replayed = calls if how == "pending_approval" else [*calls[:2], ("toy__echo", {"text": "changed"})]
        results, replay = await _replay_in_memory(store, run_id, replayed)
        assert [r.is_error for r in results] == [False, False, True]
        report = replay.report()
        assert (report["divergence"]["kind"], report["diverged_at_call"]) == (how, 3)
        # steps_compared counts the keys that matched the record: a pending call's key did
        assert report["steps_compared"] == (3 if how == "pending_approval" else 2)
        assert replay.render().splitlines()[0] == (
            f"NOT reproduced: diverged at call 3 ({how}); 2 call(s) matched before it; "
            f"replay run {report['new_run_id']} (replay of {run_id})")
        assert replay.result.head() == f"NOT reproduced: diverged at step 4 ({how}); 2 step(s) matched before it"
    finally:
        store.close()


async def test_a_line_the_replay_cannot_read_is_answered_over_stdio(tmp_path):
    """`gateway replay` over stdio answers an unreadable line as `gateway serve` does (it was dropped
    without a word: the client waited until its timeout), and the replay goes on to reproduce."""
    import subprocess

    run_id, _, _ = await _record(tmp_path, CALLS[:1])
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{nope',
        '{"jsonrpc":"2.0","id":"s","method":5}',
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": CALLS[0][0], "arguments": CALLS[0][1]}}),
    ]
    proc = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [SEALBOX, "gateway", "replay", run_id, "-c", str(_dead_upstream_config(tmp_path))],
        input="\n".join(lines) + "\n", capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "")},
        timeout=60))
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
        (1, None), (None, -32700), ("s", -32600), (2, None)], proc.stderr
    assert answers[-1]["result"]["content"] == [{"type": "text", "text": "42"}]
    assert proc.returncode == 0 and proc.stderr.strip().splitlines()[-1].startswith("reproduced: 1 call(s) matched")


async def test_replay_over_http_with_a_config_serves(tmp_path):
    """`gateway replay --http` with a config holding tokens served nothing: http_app's refusal of a
    default run (SEALBOX_RUN_ID) read gateway.default_run_id, which a GatewayReplay has not:
    'internal error: AttributeError' (exit 70). A replay serves its one replay run; it has no
    default run to refuse."""
    import subprocess

    from sealbox.gateway import parse_config
    from sealbox.gateway.replay import GatewayReplay
    from sealbox.gateway.transports import http_app

    run_id, _, _ = await _record(tmp_path, CALLS)
    config = _dead_upstream_config(tmp_path)
    config.write_text(config.read_text() + "http:\n  tokens:\n    - {token: replay-t0ken-0123456789, identity: ci-bot}\n")
    store = sealbox.open_store(tmp_path / "store")
    try:
        replay = GatewayReplay(store, run_id, config=parse_config(config.read_text(), source=str(config)))
        assert callable(http_app(replay, 8123))  # type: ignore[arg-type]
    finally:
        store.close()
    proc = subprocess.Popen([SEALBOX, "gateway", "replay", run_id, "-c", str(config), "--http", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": os.environ.get("PATH", "")})
    try:
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert line.startswith(f"sealbox gateway: replaying {run_id} at http://127.0.0.1:"), line


async def test_a_replay_no_client_sent_anything_to_says_so_and_records_no_verdict(tmp_path):
    # was: `sealbox gateway replay RUN < /dev/null` printed "NOT reproduced: diverged at call 1
    # (missing)", exit 1, and recorded a replay run with that verdict, as if a client had made other calls
    import subprocess

    run_id, _, _ = await _record(tmp_path, CALLS)
    out = tmp_path / "verdict.json"
    with open(os.devnull) as devnull:
        res = subprocess.run([SEALBOX, "gateway", "replay", run_id, "-c", str(_dead_upstream_config(tmp_path)),
                              "--json", "--output", str(out)], stdin=devnull, capture_output=True, text=True,
                             env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"error: no MCP client sent a request: nothing was replayed and no replay run of {run_id} was "
               "recorded (connect an MCP client to the replay: its standard input and output, or --http)\n")
    assert _replay_runs(tmp_path, run_id) == [] and not out.exists()
    # a client that connected and made no call is judged: the recorded calls are missing
    tools, results, verdict = await _replay(tmp_path, run_id, [])
    assert (verdict["reproduced"], verdict["calls_made"], verdict["divergence"]["kind"]) == (False, 0, "missing")
    [replay] = _replay_runs(tmp_path, run_id)
    assert replay[-1].payload["status"] == "ok" and replay[-1].payload["verdict"]["reproduced"] is False
