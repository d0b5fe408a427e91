"""Found by attacking the gateway as a hostile user: each test is a defect that was fixed."""

from __future__ import annotations

import anyio
import httpx2
import pytest

import sealbox
from sealbox.gateway import MALFORMED_REQUEST, UNAUTHORIZED, Gateway
from sealbox.gateway.transports import serve_http

from .conftest import gateway_runs, toy_config
from .test_gateway_hardening import HEADERS, HTTP2, INIT, TOKEN_A, TOKEN_B, _rpc

pytestmark = pytest.mark.anyio


async def test_a_second_session_id_header_does_not_let_another_identity_use_or_end_a_session(tmp_path, store):
    """The SDK routes a request by its first ``mcp-session-id`` header; the owner check read the last,
    so bob, naming alice's session first and his own (or any unknown id) last, ended alice's session."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP2), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        alice = {**HEADERS, "authorization": f"Bearer {TOKEN_A}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            sid = (await http.post(url, json=INIT, headers=alice)).headers["mcp-session-id"]
            alice = {**alice, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=alice)
            call = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                              "params": {"name": "toy__echo", "arguments": {"text": "hi"}}},
                                   headers=alice)
            bob = [(k, v) for k, v in alice.items() if k not in ("authorization", "mcp-session-id")]
            bob += [("authorization", f"Bearer {TOKEN_B}"), ("mcp-session-id", sid),
                    ("mcp-session-id", "not-a-session-of-anyone")]
            listed = await http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=bob)
            ended = await http.delete(url, headers=bob)
            # two bearer tokens: which identity acts is not guessed (the last one was taken)
            both = [(k, v) for k, v in alice.items() if k != "authorization"]
            both += [("authorization", f"Bearer {TOKEN_A}"), ("authorization", f"Bearer {TOKEN_B}")]
            tokens = await http.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=both)
            [run_id] = gateway_runs(store)
            kinds_after_bob = [e.kind for e in store.read_run(run_id)]
            still = await http.post(url, json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, headers=alice)
            await http.delete(url, headers=alice)
        tg.cancel_scope.cancel()
    assert _rpc(call)["result"]["content"][0]["text"] == "hi"
    refused = {"jsonrpc": "2.0", "id": None, "error": {
        "code": MALFORMED_REQUEST, "message": "a request names one mcp-session-id (this one names 2)"}}
    for response in (listed, ended):
        assert (response.status_code, response.json()) == (400, refused)
    two_tokens = {"jsonrpc": "2.0", "id": None, "error": {
        "code": MALFORMED_REQUEST, "message": "a request names one authorization (this one names 2)"}}
    assert (tokens.status_code, tokens.json()) == (400, two_tokens)
    assert kinds_after_bob == ["run.started", "tool.call", "policy.decision", "tool.result"]
    assert still.status_code == 200 and len(_rpc(still)["result"]["tools"]) == 11


def _agent_run_with_two_requested_calls(store):
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    run.start()
    run.model_call({"model": "m", "input": []}, {"object": "response", "id": "r1", "model": "m", "output": [
        {"type": "function_call", "call_id": "call_a", "name": "toy__echo", "arguments": "{}", "id": "fc_a"},
        {"type": "function_call", "call_id": "call_b", "name": "toy__echo", "arguments": "{}", "id": "fc_b"}]})
    return run


async def test_a_step_recorded_before_a_gateway_restart_is_not_recorded_again(tmp_path, store):
    """The steps a joined run's calls were recorded at were remembered in memory only: after a restart
    (or for a step the driving process recorded a call at), a call naming one was recorded there a
    second time - two tool.call at step 2.1, which replay's step keys cannot tell apart."""
    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import MALFORMED_REQUEST

    from .conftest import connect, running, text_of, toy_log

    agent_run = _agent_run_with_two_requested_calls(store)
    meta = {"sealbox/run_id": agent_run.run_id, "sealbox/call_id": "call_a", "sealbox/step": "2.1"}
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        first = await client.call_tool("toy__echo", {"text": "first"}, meta=meta)
    restarted = Gateway(toy_config(tmp_path), store=store)
    async with running(restarted) as tg, connect(restarted, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "again"}, meta={**meta, "sealbox/call_id": "call_b"})
        second = await client.call_tool("toy__echo", {"text": "second"},
                                        meta={**meta, "sealbox/call_id": "call_b", "sealbox/step": "2.2"})
    assert text_of(first) == "first" and text_of(second) == "second"
    assert (err.value.code, str(err.value)) == (
        MALFORMED_REQUEST, f"_meta['sealbox/step'] = '2.1': a call of run {agent_run.run_id} was already "
                           "recorded at that step")
    assert [(e.step, e.kind, e.payload.get("call_id")) for e in store.read_run(agent_run.run_id)
            if e.kind == "tool.call"] == [("2.1", "tool.call", "call_a"), ("2.2", "tool.call", "call_b")]
    assert [c["arguments"]["text"] for c in toy_log(tmp_path)] == ["first", "second"]


async def test_a_call_id_already_used_in_the_joined_run_is_malformed_not_an_internal_error(tmp_path, store, caplog):
    """A joined call naming a ``sealbox/call_id`` the run already has was refused by the recorder with a
    ConfigError the gateway re-raised: JSON-RPC error code 0 (outside -32003...-32019), the SDK's traceback
    in the log, and the step it named was taken all the same, so the call could not be made at that step."""
    import logging

    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import MALFORMED_REQUEST

    from .conftest import connect, running, text_of, toy_log

    agent_run = _agent_run_with_two_requested_calls(store)
    meta = {"sealbox/run_id": agent_run.run_id, "sealbox/call_id": "call_a", "sealbox/step": "2.1"}
    gw = Gateway(toy_config(tmp_path), store=store)
    refused = []
    with caplog.at_level(logging.DEBUG):
        async with running(gw) as tg, connect(gw, tg) as client:
            await client.call_tool("toy__echo", {"text": "first"}, meta=meta)
            for again in ({**meta, "sealbox/step": "2.2"}, {"sealbox/run_id": agent_run.run_id, "sealbox/call_id": "call_a"}):
                with pytest.raises(MCPError) as err:
                    await client.call_tool("toy__echo", {"text": "reused id"}, meta=again)
                refused.append((err.value.code, str(err.value)))
            second = await client.call_tool("toy__echo", {"text": "second"},
                                            meta={**meta, "sealbox/call_id": "call_b", "sealbox/step": "2.2"})
    message = (f"_meta['sealbox/call_id'] = 'call_a': a call of run {agent_run.run_id} was already recorded "
               "with that id")
    assert refused == [(MALFORMED_REQUEST, message)] * 2
    assert text_of(second) == "second"
    assert [(e.step, e.payload.get("call_id")) for e in store.read_run(agent_run.run_id) if e.kind == "tool.call"] == [
        ("2.1", "call_a"), ("2.2", "call_b")]
    assert [c["arguments"]["text"] for c in toy_log(tmp_path)] == ["first", "second"]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


async def test_a_blocked_tool_is_listed_without_any_of_its_unapproved_text(tmp_path, store):
    """A changed tool was listed with only its description replaced: the new input schema (a parameter's
    description is where tool poisoning hides instructions), title, annotations and _meta reached the model
    before any approver had seen them."""
    import json

    from .conftest import connect, running

    gw = Gateway(toy_config(tmp_path, env={"TOY_POISON": "1"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        before = {t.name: t for t in (await client.list_tools()).tools}
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        after = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("toy__echo", "toy__extra"):
        listed = after[name].model_dump(by_alias=True, mode="json", exclude_none=True)
        assert "ssh" not in json.dumps(listed)
        assert listed == {"name": name, "description": listed["description"], "inputSchema": {"type": "object"}}
        assert listed["description"].startswith("[blocked: this tool changed upstream")
    assert after["toy__add"] == before["toy__add"]  # an unchanged tool is listed as it is


@pytest.mark.parametrize("own_store", [True, False], ids=["own-connection", "same-store-object"])
async def test_a_step_another_writer_took_while_a_call_ran_is_not_taken_again(tmp_path, store, own_store):
    """A writer of a shared run checked for the other writers' steps only when the run's newest event
    was not its own. The gateway's call at step 2 was in flight while the agent recorded a model call
    (step 3); the call's tool.result then made the newest event the gateway's own again, and its next
    call took step 3 too: a model call and a tool call at one step (two gateways on one run did the same)."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    from .conftest import connect, running, text_of

    sdk_store = sealbox.open_store(tmp_path / "store") if own_store else store
    try:
        run = Recorder(sdk_store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
        run.start()
        gw = Gateway(toy_config(tmp_path), store=store)
        meta = {"sealbox/run_id": run.run_id}
        async with running(gw) as tg, connect(gw, tg) as client:
            async with anyio.create_task_group() as calls:
                async def slow() -> None:
                    assert text_of(await client.call_tool("toy__slow", {"seconds": 1.0}, meta=meta)) == "slow done"

                calls.start_soon(slow)
                with anyio.fail_after(10):
                    while not [e for e in sdk_store.read_run(run.run_id) if e.kind == "policy.decision"]:
                        await anyio.sleep(0.02)
                run.model_call({"model": "m", "input": []},
                               {"object": "response", "id": "r1", "model": "m", "output": []})
            assert text_of(await client.call_tool("toy__echo", {"text": "next"}, meta=meta)) == "next"
        run.end()
        got = [(e.step, e.kind) for e in sdk_store.read_run(run.run_id)]
    finally:
        if own_store:
            sdk_store.close()
    assert got == [("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"), ("3", "model.call"),
                   ("2", "tool.result"), ("4", "tool.call"), ("4", "policy.decision"), ("4", "tool.result"),
                   ("5", "run.ended")]
    assert sealbox.verify_store(store).ok


async def test_a_linked_call_that_could_not_be_recorded_can_be_made_again_at_its_step(tmp_path):
    """A joined call at ``sealbox/step`` 2.1 whose record could not be written (the store's write lock held
    past its lock_timeout by another process) was not forwarded, but its step was noted as used: the
    client's retry was refused "already recorded at that step" though nothing was ever recorded there."""
    from .conftest import connect, running, text_of, toy_log
    from .test_gateway_store_lock import _hold_lock, _release

    sealbox.init_store(tmp_path / "store").close()
    store = sealbox.open_store(tmp_path / "store", lock_timeout=0.5)
    try:
        agent_run = _agent_run_with_two_requested_calls(store)
        meta = {"sealbox/run_id": agent_run.run_id, "sealbox/call_id": "call_a", "sealbox/step": "2.1"}
        gw = Gateway(toy_config(tmp_path), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            proc = await _hold_lock(str(store.db_path))  # until the call gave up (was a fixed 1.5 s)
            unrecorded = await client.call_tool("toy__echo", {"text": "locked out"}, meta=meta)
            await _release(proc)
            again = await client.call_tool("toy__echo", {"text": "again"}, meta=meta)
        assert unrecorded.meta == {"sealbox/not_forwarded": "recording_failed"}
        assert (again.is_error, text_of(again)) == (False, "again")
        assert [(e.step, e.kind, e.payload.get("call_id")) for e in store.read_run(agent_run.run_id)
                if e.kind in ("tool.call", "tool.result")] == [("2.1", "tool.call", "call_a"),
                                                               ("2.1", "tool.result", "call_a")]
        assert [c["arguments"]["text"] for c in toy_log(tmp_path)] == ["again"]
    finally:
        store.close()


async def test_a_call_whose_result_could_not_be_recorded_is_not_said_to_be_not_forwarded(tmp_path):
    """The upstream ran the call, then its tool.result could not be written (the store's write lock held
    past lock_timeout by another process): the client was told "not forwarded: the call could not be
    recorded", so an agent would make the call again - a second payment, a second deploy."""
    from .conftest import connect, running, text_of, toy_log
    from .test_gateway_store_lock import _hold_lock, _release

    sealbox.init_store(tmp_path / "store").close()
    store = sealbox.open_store(tmp_path / "store", lock_timeout=0.5)
    try:
        gw = Gateway(toy_config(tmp_path), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            box = []
            async with anyio.create_task_group() as calls:
                async def call() -> None:
                    box.append(await client.call_tool("toy__slow", {"seconds": 3.0}))

                calls.start_soon(call)
                with anyio.fail_after(10):
                    while not toy_log(tmp_path):  # forwarded: its gate is written
                        await anyio.sleep(0.02)
                # taken while the 3 s tool runs (was 1 s: a loaded host could be slower to get here), held
                # until the call's result write gave up (was a fixed 2.5 s)
                proc = await _hold_lock(str(store.db_path))
            await _release(proc)
        [run_id] = gateway_runs(store)
        [result] = box
        assert result.is_error is True
        assert text_of(result).startswith("forwarded, but its result could not be recorded: the call ran "
                                          "(the record shows its outcome as unknown); do not assume it did not")
        assert result.meta == {"sealbox/not_recorded": "result"}
        assert [e.kind for e in store.read_run(run_id)] == ["run.started", "tool.call", "policy.decision",
                                                            "run.ended"]
        assert toy_log(tmp_path) == [{"tool": "slow", "arguments": {"seconds": 3.0}}]
    finally:
        store.close()


async def test_clients_are_told_when_an_upstream_that_failed_to_start_comes_up(tmp_path, store):
    """An upstream whose first start failed was listed with none of its tools; when its restart listed
    them, clients were sent no notifications/tools/list_changed (only a recorded change was announced),
    so a client that had listed the tools never saw them."""
    from .conftest import connect, running, text_of

    got: list[str] = []

    async def note(message):
        got.append(getattr(getattr(message, "root", message), "method", ""))

    gw = Gateway(toy_config(tmp_path, env={"TOY_FAIL_FIRST": str(tmp_path / "failed-once")}), store=store)
    gw.upstreams["toy"].restart_initial_s = 1.0  # the client lists the tools before the restart
    async with running(gw) as tg, connect(gw, tg, message_handler=note) as client:
        before = [t.name for t in (await client.list_tools()).tools]
        with anyio.fail_after(20):
            while "notifications/tools/list_changed" not in got:
                await anyio.sleep(0.05)
        after = [t.name for t in (await client.list_tools()).tools]
        echoed = await client.call_tool("toy__echo", {"text": "up"})
    assert before == [] and len(after) == 11 and text_of(echoed) == "up"


async def test_a_replay_lists_a_tool_blocked_in_the_live_run_as_the_live_gateway_did(tmp_path, store):
    """A run started while a tool was blocked (changed, not re-approved) pinned the tool's unapproved
    definition in its snapshot, and ``gateway replay`` listed that definition: a replayed agent saw a
    description (a poisoned one) the live agent never saw, and the replay was no replay of that run."""
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    from sealbox.gateway.replay import GatewayReplay

    from .conftest import connect, running, text_of

    gw = Gateway(toy_config(tmp_path, env={"TOY_POISON": "1"}), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as first:
            await first.call_tool("toy__mutate", {})
            with anyio.fail_after(10):
                await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        async with connect(gw, tg) as client:
            live = (await client.list_tools()).tools
            denied = await client.call_tool("toy__echo", {"text": "x"})
    run_id = gateway_runs(store)[-1]
    replay = GatewayReplay(store, run_id)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg, create_client_server_memory_streams() as (client, srv):
            tg.start_soon(replay.serve_streams, srv[0], srv[1])
            async with ClientSession(client[0], client[1]) as session:
                await session.initialize()
                replayed = (await session.list_tools()).tools
                again = await session.call_tool("toy__echo", {"text": "x"})
            tg.cancel_scope.cancel()
    def shown(tools):
        return [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools]

    blocked = [t for t in shown(live) if t["name"] in ("toy__echo", "toy__extra")]
    assert [t["inputSchema"] for t in blocked] == [{"type": "object"}] * 2
    assert [t["name"] for t in shown(replayed)] == [t["name"] for t in shown(live)]
    assert [t for t in shown(replayed) if t["name"] in ("toy__echo", "toy__extra")] == blocked
    assert (again.is_error, text_of(again)) == (True, text_of(denied))


async def test_an_empty_run_id_in_meta_is_an_unknown_run_not_the_sessions_own(tmp_path, store):
    """``_meta["sealbox/run_id"]: ""`` (a client whose run id was never set) was read as no run id: the
    call was recorded, and forwarded, in the session's own run instead of the run the client meant."""
    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import UNKNOWN_RUN

    from .conftest import connect, running, toy_log

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "where"}, meta={"sealbox/run_id": ""})
    assert (err.value.code, str(err.value)) == (UNKNOWN_RUN, "_meta['sealbox/run_id'] must be a non-empty string")
    assert gateway_runs(store) == [] and toy_log(tmp_path) == []


async def test_a_run_id_in_meta_no_run_can_have_is_an_unknown_run(tmp_path, store):
    """A run id longer than any run id (129 characters) is an unknown run, as it was before joining
    refused such ids with ConfigError (recorder.continue_run), not an error of the gateway."""
    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import UNKNOWN_RUN

    from .conftest import connect, running, toy_log

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__echo", {"text": "where"}, meta={"sealbox/run_id": "r" * 129})
    assert err.value.code == UNKNOWN_RUN
    assert str(err.value) == ("no run " + "r" * 40 + "… (129 characters) can be joined: a run id is at most 128 "
                              "characters")  # not echoed whole
    assert gateway_runs(store) == [] and toy_log(tmp_path) == []


async def test_a_second_protocol_version_header_does_not_open_sessions_past_the_identitys_cap(tmp_path, store):
    """The SDK routes a request by its first ``mcp-protocol-version`` header (2025-11-25: a session is
    opened), the per-identity session cap read the last (2026-07-28: stateless, nothing counted), so one
    token sending both opened sessions past http.max_sessions_per_identity, up to the SDK's 10 000 for
    every client together (then HTTP 503 for everyone). A second value is now refused as a second
    ``mcp-session-id`` is: HTTP 400, MALFORMED_REQUEST, no session opened."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP2 + "  max_sessions_per_identity: 2\n"), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        alice = [*HEADERS.items(), ("authorization", f"Bearer {TOKEN_A}")]
        two_versions = [*alice, ("mcp-protocol-version", "2025-11-25"), ("mcp-protocol-version", "2026-07-28")]
        async with httpx2.AsyncClient(timeout=30) as http:
            tried = [await http.post(url, json=INIT, headers=two_versions) for _ in range(3)]
            opened = [await http.post(url, json=INIT, headers=alice) for _ in range(3)]
        tg.cancel_scope.cancel()
    refused = {"jsonrpc": "2.0", "id": None, "error": {
        "code": MALFORMED_REQUEST, "message": "a request names one mcp-protocol-version (this one names 2)"}}
    assert [(r.status_code, r.json(), "mcp-session-id" in r.headers) for r in tried] == [(400, refused, False)] * 3
    assert [r.status_code for r in opened] == [200, 200, 429]


async def test_a_404_on_an_open_session_does_not_let_another_identity_use_it(tmp_path, store):
    """BearerAuth forgot a session's owner on any HTTP 404 answering a request that named it, taking it for
    "unknown to the SDK"; a session without a known owner was let through for every identity. A stateless
    (2026-07-28) request is routed without reading its mcp-session-id and answers an unknown method with 404:
    alice sending one on her session (her session id in it) made the session bob's too, he listed its tools
    and ended it (DELETE, 200; her run ended). The owner of a session the SDK still has open is now kept, and an
    open session whose owner is unknown is refused to every identity."""
    gw = Gateway(toy_config(tmp_path, extra=HTTP2), store=store)
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        alice = {**HEADERS, "authorization": f"Bearer {TOKEN_A}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            sid = (await http.post(url, json=INIT, headers=alice)).headers["mcp-session-id"]
            alice = {**alice, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=alice)
            envelope = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                  "io.modelcontextprotocol/clientCapabilities": {}}}
            unknown = await http.post(url, json={"jsonrpc": "2.0", "id": 7, "method": "no/such", "params": envelope},
                                      headers={**alice, "mcp-protocol-version": "2026-07-28", "mcp-method": "no/such"})
            bob = {**alice, "authorization": f"Bearer {TOKEN_B}"}
            listed = await http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=bob)
            ended = await http.delete(url, headers=bob)
            still = await http.post(url, json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, headers=alice)
            own_delete = await http.delete(url, headers=alice)
        tg.cancel_scope.cancel()
    assert unknown.status_code == 404
    refused = {"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED,
                                                         "message": "this session belongs to another identity"}}
    for response in (listed, ended):
        assert (response.status_code, response.json()) == (403, refused)
    assert still.status_code == 200 and len(_rpc(still)["result"]["tools"]) == 11
    assert own_delete.status_code == 200
