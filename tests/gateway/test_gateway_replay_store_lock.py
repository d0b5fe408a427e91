"""`sealbox gateway replay` over HTTP: the store's write lock held by another process does not stall
the replay server's other sessions (its writes go through the live gateway's StoreWriter)."""

from __future__ import annotations

import anyio
import httpx2
import pytest

import sealbox
from sealbox.gateway.replay import GatewayReplay
from sealbox.gateway.transports import bind

from .conftest import kinds, text_of, toy_config
from .test_gateway_replay import _record
from .test_gateway_store_lock import _hold_lock, _release

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-the-tests-0123456789"
HTTP = f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}\n"
CALLS = [("toy__add", {"a": 2, "b": 40}), ("toy__echo", {"text": "hello"}), ("toy__add", {"a": 1, "b": 2})]


async def test_a_write_lock_held_by_another_process_does_not_stall_the_replays_other_sessions(tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    run_id, _, recorded = await _record(tmp_path, CALLS)
    # the lock is held until tools/list was answered (was a fixed 2 s, with tools/list to be answered in
    # 0.5 s while still held: a loaded host could miss either); lock_timeout 20 s: a loop stalled by the
    # waiting write answers tools/list only once that write gave up, after the first call was answered
    store = sealbox.open_store(tmp_path / "store", lock_timeout=20.0)
    try:
        replay = GatewayReplay(store, run_id, config=toy_config(tmp_path, extra=HTTP), until_calls=len(CALLS))
        sock = bind(0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        results: list = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: replay.serve_http(0, sock=sock))
                a_http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
                b_http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"})
                async with a_http, streamable_http_client(url, http_client=a_http) as (r, w), \
                        b_http, streamable_http_client(url, http_client=b_http) as (r2, w2):
                    async with ClientSession(r, w) as a, ClientSession(r2, w2) as b:
                        await a.initialize()
                        await b.initialize()
                        proc = await _hold_lock(str(store.db_path))

                        async def first_call() -> None:  # its run.started waits for the lock
                            results.append(await a.call_tool(*CALLS[0]))

                        async with anyio.create_task_group() as calls:
                            calls.start_soon(first_call)
                            await anyio.sleep(0.3)
                            tools = (await b.list_tools()).tools
                            answered_first = not results  # the first call still waits for the lock
                            still_held = proc.poll() is None
                            await _release(proc)
                        for name, args in CALLS[1:]:
                            results.append(await a.call_tool(name, args))
                # until_calls: the server wrote the verdict and stopped by itself
        result = replay.result
        assert still_held and answered_first, "tools/list was answered only once the waiting write was done"
        assert [t.name for t in tools] == [t.name for t in replay.tools] and "toy__echo" in [t.name for t in tools]
        assert [text_of(x) for x in results] == [text_of(x) for x in recorded] == ["42", "hello", "3"]
        assert not any(x.is_error for x in results)
        assert result is not None and result.reproduced, result
        assert kinds(store, result.new_run_id) == [
            ("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"), ("2", "tool.result"),
            ("3", "tool.call"), ("3", "policy.decision"), ("3", "tool.result"),
            ("4", "tool.call"), ("4", "policy.decision"), ("4", "tool.result"), ("5", "run.ended")]
        assert [e.payload["arguments"] for e in store.read_run(result.new_run_id) if e.kind == "tool.call"] == [
            args for _, args in CALLS]
        [ended] = [e for e in store.read_run(result.new_run_id) if e.kind == "run.ended"]
        assert ended.payload["status"] == "ok"
        assert sealbox.verify_store(store).ok
    finally:
        store.close()
