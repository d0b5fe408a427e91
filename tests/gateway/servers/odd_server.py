"""An MCP server (stdio) with odd tools, for the gateway's hardening tests (official SDK, low-level Server).

Tools:
  ref_http(x)        input schema: x is a ``$ref`` to ``$ODD_REF_URL`` (an http:// URL)
  ref_file(x)        input schema: x is a ``$ref`` to ``file://$ODD_REF_FILE``
  ref_local(x)       input schema: x is a ``$ref`` to ``#/$defs/small`` (an integer 0..9)
  fail(code)         answers with a JSON-RPC error response (code ``code``, default -32000)
  big(mb)            returns a text of ``mb`` megabytes
  ping()             returns "pong"
  <long name>        a tool whose name is ``$ODD_LONG_NAME`` (when set), returns "long"
  <second name>      a tool whose name is ``$ODD_SECOND_NAME`` (when set), returns "second"
  ping (again)       with ``$ODD_DUP`` set, ping is listed twice (the second described "pong again")
  ""                 a tool whose name is empty (when ``$ODD_EMPTY_NAME`` is set), returns "empty"
  "nul\\x00name"      a tool whose name holds a NUL (when ``$ODD_NUL_NAME`` is set), returns "nul"
  redos(word, ...)   (when ``$ODD_REDOS`` is set) input schema: ``word`` matches ``^(a+)+$`` (a pattern a
                     backtracking engine takes exponential time over), other names match ``^(b+)+$``
                     (patternProperties, additionalProperties false); returns "redos"
  lookaround(word)   (when ``$ODD_REDOS`` is set) ``word`` matches ``^(?!x)(a|aa)+$`` (a look-ahead,
                     which a linear-time engine cannot run); returns "lookaround"

Environment:
  ODD_LOG=path       every tools/call received is appended as one JSON line
  ODD_ID_LAST=1      every response is written with its "id" as its last member (after the result)
"""

from __future__ import annotations

import io
import json
import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError


def _tools() -> list[types.Tool]:
    obj = {"type": "object"}
    tools = [
        types.Tool(name="ref_http", description="A remote $ref.",
                   input_schema={**obj, "properties": {"x": {"$ref": os.environ.get("ODD_REF_URL", "http://127.0.0.1:9/s.json")}}}),
        types.Tool(name="ref_file", description="A file $ref.",
                   input_schema={**obj, "properties": {"x": {"$ref": "file://" + os.environ.get("ODD_REF_FILE", "/nonexistent.json")}}}),
        types.Tool(name="ref_local", description="A local $ref.",
                   input_schema={**obj, "$defs": {"small": {"type": "integer", "minimum": 0, "maximum": 9}},
                                 "properties": {"x": {"$ref": "#/$defs/small"}}, "required": ["x"]}),
        types.Tool(name="fail", description="Answer with a JSON-RPC error.",
                   input_schema={**obj, "properties": {"code": {"type": "integer"}}}),
        types.Tool(name="big", description="A big result.", input_schema={**obj, "properties": {"mb": {"type": "number"}}}),
        types.Tool(name="ping", description="pong", input_schema=obj),
    ]
    if os.environ.get("ODD_LONG_NAME"):
        tools.append(types.Tool(name=os.environ["ODD_LONG_NAME"], description="A long name.", input_schema=obj))
    if os.environ.get("ODD_SECOND_NAME"):
        tools.append(types.Tool(name=os.environ["ODD_SECOND_NAME"], description="Another name.", input_schema=obj))
    if os.environ.get("ODD_DUP"):  # a second tool named ping (a listing with a name twice)
        tools.append(types.Tool(name="ping", description="pong again", input_schema=obj))
    if os.environ.get("ODD_EMPTY_NAME"):
        tools.append(types.Tool(name="", description="No name.", input_schema=obj))
    if os.environ.get("ODD_NUL_NAME"):
        tools.append(types.Tool(name="nul\x00name", description="A NUL in its name.", input_schema=obj))
    if os.environ.get("ODD_REDOS"):
        tools.append(types.Tool(name="redos", description="A catastrophic pattern.", input_schema={
            **obj, "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}},
            "patternProperties": {"^(b+)+$": {"type": "integer"}}, "additionalProperties": False}))
        tools.append(types.Tool(name="lookaround", description="A look-ahead.", input_schema={
            **obj, "properties": {"word": {"type": "string", "pattern": "^(?!x)(a|aa)+$"}}}))
    return tools


def _text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=value)])


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_tools())


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    log = os.environ.get("ODD_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": params.name, "arguments": args}) + "\n")
    if params.name == "fail":
        raise MCPError(int(args.get("code", -32000)), "the odd server failed on purpose")
    if params.name == "big":
        return _text("x" * int(float(args.get("mb", 1)) * 1024 * 1024))
    if params.name == "ping":
        return _text("pong")
    if params.name.startswith("ref_"):
        return _text(f"{params.name}:{json.dumps(args.get('x'))}")
    if params.name == os.environ.get("ODD_SECOND_NAME"):
        return _text("second")
    if params.name == "":
        return _text("empty")
    if params.name == "nul\x00name":
        return _text("nul")
    if params.name in ("redos", "lookaround"):
        return _text(params.name)
    return _text("long")


class _IdLast:
    """The server's stdout, writing each response as ``{"jsonrpc": "2.0", "result": …, "id": …}``: key order is
    a server's choice, and some SDKs write the id last."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def write(self, text: str) -> None:
        doc = json.loads(text)
        if isinstance(doc, dict) and "id" in doc and ("result" in doc or "error" in doc):
            doc["id"] = doc.pop("id")
            text = json.dumps(doc, separators=(",", ":")) + "\n"
        await self.inner.write(text)

    async def flush(self) -> None:
        await self.inner.flush()


async def main() -> None:
    server = Server("odd", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    stdin = anyio.wrap_file(io.TextIOWrapper(os.fdopen(0, "rb", buffering=0), encoding="utf-8"))
    stdout = anyio.wrap_file(io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), encoding="utf-8", write_through=True))
    if os.environ.get("ODD_ID_LAST"):
        stdout = _IdLast(stdout)
    sys.stdout = sys.stderr
    async with stdio_server(stdin, stdout) as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
