"""A client's ``tools/call`` requests in flight at once are capped (``limits.max_calls_in_flight``).

Before, one client could start any number of concurrent calls: measured with the toy upstream, each in-flight
call held ~30-50 KiB of Python objects (~100 KiB RSS) and two tasks, and 200 calls held for an approval kept 40
worker threads busy polling the store and used 75 % of a core (docs/gateway.md, *Calls in flight*). A call above
the cap is refused ``TOO_MANY_CALLS`` (-32017) before anything is recorded or forwarded, like the other
protocol checks; another client is not affected. SQLite and (with SEALBOX_TEST_POSTGRES_URL) PostgreSQL."""

from __future__ import annotations

import importlib.util
import os
import uuid

import anyio
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.errors import ConfigError
from sealbox.gateway import TOO_MANY_CALLS, Gateway, parse_config

from .conftest import connect, gateway_runs, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_inflight_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


async def test_a_call_above_the_clients_cap_is_refused_and_not_recorded(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="limits: {max_calls_in_flight: 2}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        slow: list = []

        async def call_slow() -> None:
            slow.append(await client.call_tool("toy__slow", {"seconds": 1.5}))

        async with anyio.create_task_group() as calls:
            calls.start_soon(call_slow)
            calls.start_soon(call_slow)
            with anyio.fail_after(10):
                while len(toy_log(tmp_path)) < 2:  # both forwarded: in flight
                    await anyio.sleep(0.02)
            with pytest.raises(MCPError) as refused:
                await client.call_tool("toy__add", {"a": 1, "b": 2})
            async with connect(gw, tg) as other:  # another client: its own cap
                others = await other.call_tool("toy__add", {"a": 2, "b": 2})
        after = await client.call_tool("toy__add", {"a": 3, "b": 4})  # the two ended: served again
        first_run = gateway_runs(store)[0]
    assert (refused.value.error.code, refused.value.error.message) == (
        TOO_MANY_CALLS, "too many calls in flight: this client already has 2 tools/call requests in flight "
                        "(limits.max_calls_in_flight: 2); call again once one has been answered")
    assert refused.value.error.data == {"limit": 2}
    assert [text_of(r) for r in slow] == ["slow done", "slow done"]
    assert (text_of(others), text_of(after)) == ("4", "7")
    assert [e["tool"] for e in toy_log(tmp_path)] == ["slow", "slow", "add", "add"]
    recorded = [(e.payload["tool"], e.payload["arguments"]) for e in store.read_run(first_run) if e.kind == "tool.call"]
    assert recorded == [("slow", {"seconds": 1.5}), ("slow", {"seconds": 1.5}), ("add", {"a": 3, "b": 4})]


def test_the_cap_defaults_to_64_and_must_be_at_least_1(tmp_path):
    assert toy_config(tmp_path).limits.max_calls_in_flight == 64
    with pytest.raises(ConfigError, match="max_calls_in_flight: 0 is less than the minimum of 1"):
        toy_config(tmp_path, extra="limits: {max_calls_in_flight: 0}")


async def test_stateless_requests_are_capped_per_identity(tmp_path, store):
    """A stateless (2026-07-28) request is its own connection: its calls in flight are counted with every other
    stateless call of the same identity."""
    from mcp.client import Client

    gw = Gateway(toy_config(tmp_path, extra="limits: {max_calls_in_flight: 1}"), store=store)
    async with running(gw):
        async with Client(gw.server, mode="2026-07-28") as client:
            slow: list = []

            async def call_slow() -> None:
                slow.append(await client.session.call_tool("toy__slow", {"seconds": 1}))

            async with anyio.create_task_group() as calls:
                calls.start_soon(call_slow)
                with anyio.fail_after(10):
                    while len(toy_log(tmp_path)) < 1:
                        await anyio.sleep(0.02)
                with pytest.raises(MCPError) as refused:
                    await client.session.call_tool("toy__add", {"a": 1, "b": 2})
            after = await client.session.call_tool("toy__add", {"a": 3, "b": 4})
    assert refused.value.error.code == TOO_MANY_CALLS
    assert (text_of(slow[0]), text_of(after)) == ("slow done", "7")
    assert [e["tool"] for e in toy_log(tmp_path)] == ["slow", "add"]


async def test_the_refusals_log_line_shows_the_clients_tool_name_quoted(tmp_path, store, caplog):
    """The tool name in a refused call's log line is the client's text: written quoted (a newline as \\n), as the
    gateway's other log lines write names it did not choose, so a client cannot add a line of its choosing to
    the operator's log."""
    import logging

    gw = Gateway(toy_config(tmp_path, extra="limits: {max_calls_in_flight: 1}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        async with anyio.create_task_group() as calls:
            calls.start_soon(client.call_tool, "toy__slow", {"seconds": 1})
            with anyio.fail_after(10):
                while len(toy_log(tmp_path)) < 1:
                    await anyio.sleep(0.02)
            with caplog.at_level(logging.WARNING, logger="sealbox.gateway"):
                with pytest.raises(MCPError):
                    await client.call_tool("toy__add\nWARNING sealbox.gateway: upstream toy is down", {"a": 1})
    lines = [r.getMessage() for r in caplog.records if "calls in flight" in r.getMessage()]
    assert lines == ["tools/call 'toy__add\\nWARNING sealbox.gateway: upstream toy is down' refused: its client "
                     "already has 1 calls in flight"]
