"""A raw MCP server (stdio, one JSON-RPC message a line, no SDK) that stops reading its input.

Tools:
  deafen()   answers "deaf", then never reads stdin again (the process lives on): the gateway's writes to it
             fill the pipe and block
  ok(pad?)   returns "ok" (while it still reads)
  hangup()   closes its stdout without answering and lives on, ignoring SIGTERM (until killed)
"""

import json
import os
import signal
import sys
import time

out = sys.stdout.buffer


def send(obj: dict) -> None:
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()


for line in sys.stdin.buffer:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "deaf", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"}} for n in ("deafen", "ok", "hangup")]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "hangup":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            out.close()
            os.close(1)
            time.sleep(3600)
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
            {"type": "text", "text": "deaf" if name == "deafen" else "ok"}]}})
        if name == "deafen":
            time.sleep(3600)
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
