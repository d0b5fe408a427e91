"""A worker process for conditions marked ``expensive: true``, with a hard time limit.

``common-expression-language`` holds the GIL while it evaluates, so a slow
condition cannot be interrupted from a thread. Expensive conditions are sent to
one long-lived worker process instead, started lazily as a fresh interpreter
(``python -c``, never forked, so it never inherits locks from a threaded parent).
It runs only this module's :func:`_child_main`: unlike ``multiprocessing``'s
``spawn``, it does not import the caller's main module again, so a recording
script without an ``if __name__ == "__main__":`` guard works (with ``spawn`` the
worker ran the script's recording once more, failed, and the parent waited for
it 30 s, then denied the call ``guardrail_error``). Where ``pass_fds`` does not
exist (Windows), ``spawn`` is used, and needs that guard. If the answer does not come
within the time limit, the worker is killed and the condition is tried once more
in a fresh worker (its start-up is not timed): the wait includes the IPC round
trip and any time either process was descheduled, and a loaded host stalls a
process for tens of ms now and then. A condition is pure, so it is over the
limit only if the second try is over it too; then the fresh worker is killed as
well and the caller denies the call with ``guardrail_error`` (fail closed: a
runaway condition costs two time limits plus one worker start-up).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import subprocess
import sys
import threading
from typing import Any

__all__ = ["ConditionWorker", "default_worker", "shutdown_worker", "STARTUP_TIMEOUT_S"]

STARTUP_TIMEOUT_S = 30.0


def _serve(conn: Any) -> None:  # runs in the worker process
    from sealbox.policy._cel import cel

    programs: dict[str, Any] = {}
    conn.send(("ready", None))
    while True:
        try:
            source, variables = conn.recv()
        except (EOFError, OSError):
            return
        try:
            program = programs.get(source)
            if program is None:
                program = programs[source] = cel.compile(source)
            value = program.execute(variables)
            reply = ("ok", value) if isinstance(value, bool) else ("nonbool", type(value).__name__)
        except BaseException as exc:  # noqa: BLE001 - report every failure, including Rust panics
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(reply)


#: What the worker interpreter runs: the parent's ``sys.path`` (as ``spawn`` passes it), then
#: :func:`_child_main` on the inherited connection. Nothing else is imported: not the caller's
#: main module.
_CHILD_CODE = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
               "from sealbox.policy.worker import _child_main; _child_main(int(sys.argv[2]))")


def _child_main(fd: int) -> None:  # runs in the worker interpreter
    import signal
    from multiprocessing.connection import Connection

    # Ctrl-C in a terminal reaches the whole process group: the parent decides; the worker ends when
    # the parent closes the connection (or kills it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(Connection(fd))


class _Interpreter:
    """The worker as a :class:`subprocess.Popen`, with the part of ``multiprocessing.Process``'s
    interface :class:`ConditionWorker` uses."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        if self._popen.poll() is None:
            self._popen.kill()

    def join(self) -> None:
        self._popen.wait()


def _start_process() -> tuple[Any, Any]:
    """A worker process and the parent's end of its connection (the worker is starting)."""
    if os.name != "posix":  # no pass_fds: multiprocessing's spawn (imports the main module again)
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="sealbox-policy-worker")
        proc.start()
        child.close()
        return proc, parent
    parent, child = multiprocessing.Pipe()
    try:
        from multiprocessing import spawn

        popen = subprocess.Popen(
            [spawn.get_executable(), "-c", _CHILD_CODE, json.dumps(sys.path), str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, close_fds=True)
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
    return _Interpreter(popen), parent


class ConditionWorker:
    """One worker process evaluating CEL conditions; requests are serialized by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None
        self.restarts = 0

    def _start(self) -> None:
        try:
            proc, parent = _start_process()
        except OSError as exc:
            raise RuntimeError(f"policy worker did not start: {exc}") from exc
        try:
            ready = parent.poll(STARTUP_TIMEOUT_S) and parent.recv()
        except (EOFError, OSError):  # it ended at start-up (its error is on stderr)
            ready = None
        if not ready:
            proc.kill()
            proc.join()
            parent.close()
            raise RuntimeError("policy worker did not start")
        self._proc, self._conn = proc, parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
            self.restarts += 1
        self._proc = self._conn = None

    def start(self) -> None:
        """Start the worker now rather than on the first expensive condition."""
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()

    def evaluate(self, source: str, variables: dict[str, Any], timeout_s: float) -> tuple[str, Any]:
        """Evaluate ``source`` with ``variables`` in the worker.

        Each try waits ``timeout_s`` for the answer; a try with no answer kills the
        worker, and the condition is sent once more to a fresh worker (started
        before the second wait begins).

        Returns:
            ``("ok", bool)``, ``("nonbool", type name)``, ``("error", message)`` or
            ``("timeout", None)`` (no answer within ``timeout_s`` in either of two
            tries; both workers were killed). Never raises for a failing
            condition; raises ``RuntimeError`` only if no worker can start. An exception
            raised in the caller while it waits (``KeyboardInterrupt``, ``RecursionError``,
            ``MemoryError``) propagates after the worker is killed, so an answer still on its
            way never answers a later condition.
        """
        with self._lock:
            for _ in range(2):
                if self._proc is None or not self._proc.is_alive():
                    self._kill()
                    self._start()
                try:
                    self._conn.send((source, variables))
                    if self._conn.poll(timeout_s) or self._conn.poll(0):
                        return self._conn.recv()
                except (EOFError, OSError, BrokenPipeError) as exc:
                    self._kill()
                    return ("error", f"policy worker failed: {type(exc).__name__}: {exc}")
                except BaseException:
                    # interrupted after the request may have reached the worker (Ctrl-C, a RecursionError
                    # or MemoryError while waiting): its answer could still come and would be read as the
                    # next condition's. The worker goes; the next evaluation starts a fresh one.
                    self._kill()
                    raise
                self._kill()
            return ("timeout", None)

    def stop(self) -> None:
        """Stop the worker process, if any."""
        with self._lock:
            if self._proc is not None:
                self._kill()
                self.restarts -= 1


_DEFAULT = ConditionWorker()


def default_worker() -> ConditionWorker:
    """The process-wide worker used by :meth:`Policy.evaluate`."""
    return _DEFAULT


def shutdown_worker() -> None:
    """Stop the process-wide worker (it restarts lazily if needed again)."""
    _DEFAULT.stop()


atexit.register(shutdown_worker)
