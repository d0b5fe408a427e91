"""A NUL character (\\x00) in an identifier a client gives the gateway (a joined call's
``_meta["sealbox/call_id"]``, the session's ``clientInfo.name``, which is its run's agent) is a
JSON-RPC error ``MALFORMED_REQUEST`` naming it: nothing recorded or forwarded, no traceback in the
log (was: the recorder's ConfigError escaped the handler, logged with a traceback and answered with
JSON-RPC error code 0)."""

from __future__ import annotations

import logging

import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import MALFORMED_REQUEST, Gateway
from sealbox.policy import ALLOW_ALL
from sealbox.recorder import Recorder

from .conftest import connect, gateway_runs, kinds, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


async def test_a_joined_call_id_holding_a_nul_is_a_malformed_request(tmp_path, store, caplog):
    run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    run.start()
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with caplog.at_level(logging.WARNING):
            with pytest.raises(MCPError) as err:
                await client.call_tool("toy__add", {"a": 1, "b": 2},
                                       meta={"sealbox/run_id": run.run_id, "sealbox/call_id": "c\x00"})
        ok = await client.call_tool("toy__add", {"a": 1, "b": 2}, meta={"sealbox/run_id": run.run_id})
    assert (err.value.error.code, str(err.value)) == (
        MALFORMED_REQUEST, "_meta['sealbox/call_id'] must be a non-empty string of at most 256 characters "
                           "without a NUL character (\\x00)")
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (ok.is_error, text_of(ok)) == (False, "3")
    assert kinds(store, run.run_id) == [("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"),
                                        ("2", "tool.result")]
    assert toy_log(tmp_path) == [{"tool": "add", "arguments": {"a": 1, "b": 2}}]


async def test_a_client_name_holding_a_nul_is_a_malformed_request(tmp_path, store, caplog):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, client_info=types.Implementation(name="cli\x00ent", version="1")) as client:
            with caplog.at_level(logging.WARNING):
                with pytest.raises(MCPError) as err:
                    await client.call_tool("toy__add", {"a": 1, "b": 2})
    assert (err.value.error.code, str(err.value)) == (
        MALFORMED_REQUEST, "clientInfo.name 'cli\\x00ent' holds a NUL character (\\x00), which the agent name of "
                           "a run cannot hold: nothing was recorded or forwarded")
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert gateway_runs(store) == [] and toy_log(tmp_path) == []
    assert sealbox.verify_store(store).ok
