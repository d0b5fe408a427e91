"""``python -I -S spawn.py SOCKET SCRIPT [ARGS...]``: run ``python SCRIPT ARGS...`` as a fork of the zygote
listening on SOCKET (``zygote.py``), or, without one, by exec'ing a fresh interpreter (the same thing, slower).

Stdlib only, no site: it starts in ~20 ms. To the gateway it is the upstream's process: it passes on its
stdin/stdout/stderr, argv, environment and working directory, forwards the signals it gets (SIGTERM from the
gateway's shutdown…) to the script's process, and ends as that process ended (its exit status, or killed by
the same signal). If it is itself killed, the script's process exits too (the zygote's lifeline).
"""

import array
import json
import os
import signal
import socket
import sys


def _fresh(argv: list) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def main() -> None:
    path, argv = sys.argv[1], sys.argv[2:]
    if not argv or argv[0].startswith("-"):  # interpreter options: only a fresh interpreter takes them
        _fresh(argv)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        _fresh(argv)
    request = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode() + b"\n"
    conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    # The script's process holds stdin and stdout now: their EOFs are its alone.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)

    child = [0]
    pending: list = []

    def forward(signum: int, _frame: object) -> None:
        if child[0]:
            try:
                os.kill(child[0], signum)
            except OSError:
                pass
        else:
            pending.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)

    buf = b""
    status = None
    while status is None:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            word, value = line.decode().split()
            if word == "pid":
                child[0] = int(value)
                for signum in pending:
                    forward(signum, None)
            elif word == "status":
                status = int(value)
    if status is None:
        sys.stderr.write("spawn.py: the zygote ended without the script's exit status\n")
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL and sig != signal.SIGSTOP:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
