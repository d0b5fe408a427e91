"""A client's tools/call or prompts/get naming an exposed name thousands of characters long: the error does not
echo it whole (it is shown as its start and its length, as a long run id is)."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from sealbox.gateway import UNKNOWN_TOOL, Gateway
from sealbox.gateway.codes import UNKNOWN_PROMPT

from .conftest import connect, running, toy_config, toy_log

pytestmark = pytest.mark.anyio


async def test_a_long_unknown_tool_or_prompt_name_is_not_echoed_whole_in_its_error(tmp_path, store):
    """A tools/call of "toy__" + 900 000 characters (under limits.max_request_bytes: params are 1 MiB) was
    answered UNKNOWN_TOOL with the name in full in the message and again as ``data``: an answer of 1.8 MB to a
    request of 0.9 MB, each such call. The message now shows the first 64 characters and the length, ``data``
    the first 256 characters; a name of up to 128 characters (MCP's) is still shown whole. prompts/get alike."""
    gw = Gateway(toy_config(tmp_path, env={"TOY_CATALOG": "1"}), store=store)
    long_tool, long_prompt = "toy__" + "e" * 5000, "toy__" + "p" * 5000
    async with running(gw) as tg, connect(gw, tg) as client:
        errors = []
        for name in (long_tool, "toy__" + "n" * 123):
            with pytest.raises(MCPError) as err:
                await client.call_tool(name, {"text": "x"})
            errors.append((err.value.code, str(err.value), err.value.error.data))
        with pytest.raises(MCPError) as err:
            await client.get_prompt(long_prompt, {"name": "x"})
        errors.append((err.value.code, str(err.value), err.value.error.data))
    assert errors == [
        (UNKNOWN_TOOL, "unknown tool 'toy__" + "e" * 59 + "…' (5005 characters)", long_tool[:256]),
        (UNKNOWN_TOOL, "unknown tool 'toy__" + "n" * 123 + "'", "toy__" + "n" * 123),
        (UNKNOWN_PROMPT, "unknown prompt 'toy__" + "p" * 59 + "…' (5005 characters)", long_prompt[:256]),
    ]
    assert toy_log(tmp_path) == []
