"""A small MCP server (stdio) whose tools change on every listing, and that floods
``notifications/tools/list_changed`` (for the gateway's re-list coalescing tests).

Listing N (1, 2, ...) lists ``echo`` described "Echo the text back (listing N)." (so every listing after
the first changes it from its pinned definition), ``extra`` on even listings only, ``flood`` and ``storm``.

Tools:
  echo(text)        returns the text
  flood(count)      sends COUNT notifications/tools/list_changed at once, then answers "flooded COUNT"
  storm(seconds)    sends one notifications/tools/list_changed every 10 ms for SECONDS, then answers with how many

Environment:
  FLIP_NOTIFY_ON_LIST=1  every tools/list is also followed by a notifications/tools/list_changed (the
                         upstream never stops announcing a change)
  FLIP_LIST_DELAY=S      every tools/list takes S seconds to answer (an upstream slower than the re-list gap)
"""

from __future__ import annotations

import os

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

STATE = {"listings": 0}


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_tools(ctx, params) -> types.ListToolsResult:
    STATE["listings"] += 1
    n = STATE["listings"]
    obj = {"type": "object"}
    tools = [
        types.Tool(name="echo", description=f"Echo the text back (listing {n}).",
                   input_schema={**obj, "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        types.Tool(name="flood", description="Send list_changed COUNT times.",
                   input_schema={**obj, "properties": {"count": {"type": "integer"}}, "required": ["count"]}),
        types.Tool(name="storm", description="Send list_changed every 10 ms for SECONDS.",
                   input_schema={**obj, "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}),
    ]
    if n % 2 == 0:
        tools.append(types.Tool(name="extra", description="Appears on even listings.", input_schema=obj))
    if os.environ.get("FLIP_NOTIFY_ON_LIST") == "1":
        await ctx.session.send_tool_list_changed()
    await anyio.sleep(float(os.environ.get("FLIP_LIST_DELAY", "0")))
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "echo":
        return _text(str(args.get("text", "")))
    if params.name == "flood":
        for _ in range(int(args["count"])):
            await ctx.session.send_tool_list_changed()
        return _text(f"flooded {int(args['count'])}")
    if params.name == "storm":
        sent, end = 0, anyio.current_time() + float(args["seconds"])
        while anyio.current_time() < end:
            await ctx.session.send_tool_list_changed()
            sent += 1
            await anyio.sleep(0.01)
        return _text(f"stormed {sent}")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"no tool {params.name}")], is_error=True)


async def main() -> None:
    server = Server("flip", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))


if __name__ == "__main__":
    anyio.run(main)
