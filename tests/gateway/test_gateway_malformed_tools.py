"""An upstream whose tools/list holds one malformed tool among valid ones (a raw stdio server,
tests/gateway/servers/raw_server.py): the SDK refused the whole listing, so the upstream was down, none of its
tools listed, and it was restarted again and again. Now the malformed tool is left out (logged, and recorded as
an ``anomaly`` of the system run naming the tool and why), the valid ones are served."""

from __future__ import annotations

import json
import logging

import anyio
import pytest

import sealbox
from sealbox.gateway import Gateway

from .conftest import connect, running, system_events, text_of, toy_config
from .test_gateway_upstream_writes import raw_upstreams

pytestmark = pytest.mark.anyio

BAD = [{"name": "noschema"}, {"name": "badreq", "inputSchema": {"type": "object", "required": 5}}]


async def test_a_malformed_tool_is_left_out_and_the_others_served(tmp_path, store, caplog):
    caplog.set_level(logging.WARNING, logger="sealbox")
    log = tmp_path / "raw.log"
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({"RAW_EXTRA_TOOLS": json.dumps(BAD),
                                                                "RAW_LOG": str(log)})), store=store)
    up = gw.upstreams["raw"]
    async with running(gw) as tg, connect(gw, tg) as client:
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.state != "starting")
        assert up.state == "ready", up.last_error
        listed = sorted(t.name for t in (await client.list_tools()).tools if t.name.startswith("raw__"))
        ok = await client.call_tool("raw__ok", {})
        up.request_relist()  # listed again: the same malformed tools are not recorded (nor logged) twice
        with anyio.fail_after(30):
            while log.read_text().splitlines().count("tools/list") < 2:
                await anyio.sleep(0.05)
            await up.current()
    assert listed == ["raw__crash", "raw__deafen", "raw__killself", "raw__ok"]
    assert text_of(ok) == "ok"
    assert up.generation == 1  # never restarted
    why = {"noschema": "inputSchema: Field required",
           "badreq": "inputSchema.required: Input should be a valid list"}
    assert up.rejected_tools == why
    assert system_events(store, "anomaly") == [{"what": "malformed_tool", "detail": {"server": "raw", "tools": [
        {"tool": "badreq", "why": why["badreq"]}, {"tool": "noschema", "why": why["noschema"]}]}}]
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert warned == [
        "upstream raw listed a malformed tool, left out (not served): 'badreq': inputSchema.required: Input should be "
        "a valid list (a problem of the upstream: fix its definition)",
        "upstream raw listed a malformed tool, left out (not served): 'noschema': inputSchema: Field required (a "
        "problem of the upstream: fix its definition)"]
    assert sealbox.verify_store(store).ok
