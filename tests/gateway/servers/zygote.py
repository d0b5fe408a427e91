"""A fork server for the toy upstreams: ``python zygote.py SOCKET`` imports the MCP SDK once, then forks a
ready interpreter for every upstream start that ``spawn.py`` asks for on the Unix socket SOCKET.

Why: a fresh interpreter spends ~0.6 s of CPU importing the SDK (its pydantic models), and the gateway tests
start several hundred upstreams; a fork starts one in a few milliseconds. The script run is the same file,
with the same argv, environment, working directory and stdin/stdout/stderr as a fresh interpreter gets.

It runs until its stdin closes (the test session ended, or was killed).

Protocol (one connection per start): ``spawn.py`` sends one JSON line ``{"argv", "env", "cwd"}`` with its
fds 0, 1, 2 attached (SCM_RIGHTS). The zygote forks a monitor, which forks the script's process and sends
back ``pid N`` then ``status S`` (``os.waitpid`` status) when it ends. The connection is also the script's
lifeline: when ``spawn.py`` is gone (even SIGKILLed), the script's process exits at once.
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import sys
import threading

# What toy_server.py imports (the slow part of its start).
import anyio  # noqa: F401
import mcp_types  # noqa: F401
from mcp.server.lowlevel.server import NotificationOptions, Server  # noqa: F401
from mcp.server.stdio import stdio_server  # noqa: F401
from mcp.shared.exceptions import MCPError  # noqa: F401
from mcp.shared.message import ServerMessageMetadata  # noqa: F401


def _recv(conn: socket.socket) -> tuple[dict, list[int]]:
    data = b""
    fds: list[int] = []
    while not data.endswith(b"\n"):
        msg, ancdata, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(16 * array.array("i").itemsize))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[:len(payload) - (len(payload) % a.itemsize)])
                fds.extend(a)
        if not msg:
            raise EOFError("spawn.py closed the connection")
        data += msg
    return json.loads(data), fds


def _run_script(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the script's process: take the stdio fds, argv, env and cwd, run the script; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def lifeline() -> None:  # spawn.py gone: so is this process (as a fresh child of it would be killed)
            try:
                while conn.recv(1):
                    pass
            except OSError:
                pass
            os._exit(137)

        threading.Thread(target=lifeline, daemon=True, name="zygote-lifeline").start()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        import runpy

        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException as exc:  # the traceback a fresh interpreter prints: from the script's frames on
            import traceback

            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != script:
                tb = tb.tb_next
            traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
            code = 1
        try:
            threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit
            import atexit

            atexit._run_exitfuncs()
        except BaseException:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(code & 0xFF)


def _monitor(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the monitor: fork the script's process, report its pid and exit status; never returns."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            _run_script(conn, request, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"pid {pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(f"status {status}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(0)


def main(path: str) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        readable, _, _ = select.select([listener, 0], [], [])
        if 0 in readable and not os.read(0, 4096):  # stdin closed: the test session is gone, so is the zygote
            return
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _recv(conn)
        except (OSError, ValueError, EOFError):
            conn.close()
            continue
        if os.fork() == 0:
            listener.close()
            _monitor(conn, request, fds)
        conn.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1])
