"""A raw MCP server (stdio, one JSON-RPC message a line, no SDK) with odd behaviours chosen by environment.

Tools:
  ok()        returns "ok"
  crash()     exits with status ``$RAW_EXIT_STATUS`` (default 1) without answering
  killself()  kills itself with SIGKILL without answering
  deafen()    answers "deaf", then stops reading stdin for good (the process lives on); when ``RAW_PING_AFTER``
              is set, it then sends a ``ping`` request every 0.2 s (its answers can no longer be read, nor written
              once the pipe is full); with ``RAW_LIST_CHANGED`` set it announces notifications/tools/list_changed
              every 0.2 s once 16 KiB or more lie unread in its stdin pipe (a large call being written to it)

Environment:
  RAW_CURSOR=loop     every tools/list page (one tool) names the same nextCursor ("again"): a listing without end
  RAW_CURSOR=N        (a number) tools/list has N pages, each with a cursor of its own
  RAW_LOG=path        every request's method is appended as one line
  RAW_EXTRA_TOOLS=json  a JSON list of tool definitions listed (as they are) after the tools above
"""

import json
import os
import signal
import sys
import threading
import time

out = sys.stdout.buffer
lock = threading.Lock()


def send(obj: dict) -> None:
    with lock:
        out.write(json.dumps(obj).encode() + b"\n")
        out.flush()


def unread_bytes() -> int:
    """How many bytes wait unread in stdin's pipe (Linux FIONREAD)."""
    import fcntl
    import struct
    import termios

    return struct.unpack("i", fcntl.ioctl(0, termios.FIONREAD, b"\0\0\0\0"))[0]


def pinger() -> None:
    if os.environ.get("RAW_LIST_CHANGED"):
        # announce the change only once a large message lies unread in the pipe (the gateway's writer blocked on
        # it): the re-list's tools/list is then a write that cannot be made, never one written and left unanswered
        while unread_bytes() < 16384:
            time.sleep(0.05)
    n = 0
    while True:
        n += 1
        if os.environ.get("RAW_LIST_CHANGED"):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        if os.environ.get("RAW_PING_AFTER"):
            send({"jsonrpc": "2.0", "id": f"p{n}", "method": "ping"})
        time.sleep(0.2)


TOOLS = ("ok", "crash", "killself", "deafen")
cursor_mode = os.environ.get("RAW_CURSOR", "")

for line in sys.stdin.buffer:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if os.environ.get("RAW_LOG") and method:
        with open(os.environ["RAW_LOG"], "a") as f:
            f.write(method + "\n")
    if rid is None or method is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        cursor = (msg.get("params") or {}).get("cursor")
        result: dict = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]
                        + json.loads(os.environ.get("RAW_EXTRA_TOOLS", "[]"))}
        if cursor_mode == "loop":
            result = {"tools": [{"name": f"t{cursor or 0}", "inputSchema": {"type": "object"}}], "nextCursor": "again"}
        elif cursor_mode:
            page = int(cursor or 0) + 1
            result = {"tools": [{"name": f"t{page}", "inputSchema": {"type": "object"}}]}
            if page < int(cursor_mode):
                result["nextCursor"] = str(page)
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "crash":
            os._exit(int(os.environ.get("RAW_EXIT_STATUS", "1")))
        if name == "killself":
            os.kill(os.getpid(), signal.SIGKILL)
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
            {"type": "text", "text": "deaf" if name == "deafen" else "ok"}]}})
        if name == "deafen":
            threading.Thread(target=pinger, daemon=True).start()
            time.sleep(3600)
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
