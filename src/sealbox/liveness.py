"""Run liveness leases: tell a run whose process died from one still running.

While a run is open (from ``run.started`` until ``run.ended``, or until its ``with`` block is left
suspended), the process recording it holds a lease that the operating system (SQLite store) or the
server (PostgreSQL store) drops when the process dies, however it dies (SIGKILL, a crash):

* SQLite store: a POSIX ``lockf`` lock on one byte of the store folder's ``runs.lock``, chosen by the
  run id (as :mod:`sealbox.pause` does for resume leases, in its own file). One descriptor per store
  folder and process, kept for the process's life (closing any descriptor of the file would drop all
  of the process's locks on it): thousands of open runs cost no descriptors.
* PostgreSQL store: a session-level advisory lock keyed on the run, taken on one connection of the
  process's own per database (``application_name`` ``sealbox-live``); the server drops the locks
  with the connection.

A run whose lease was taken says so in its ``run.started`` (``"lease": true``). Reading, such a run
that is neither ended nor suspended and whose lease nobody holds is ``interrupted``: derived when the
run is read, nothing is written. Runs without the marker (recorded before, imported, the ``system``
run, or a lease that could not be taken) keep the status of their events.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import threading
from typing import Any, Iterable

__all__ = ["LIVE_FILE", "LiveLease", "checker", "take"]

#: The file in a store's folder whose byte ranges mark the runs live processes are recording.
LIVE_FILE = "runs.lock"

_mutex = threading.Lock()
_fds: dict[str, int] = {}  # one descriptor per lock file and process, never closed
_held: dict[tuple[str, str], int] = {}  # (lock file, run id) -> leases of this process on it (refcount)
_pg: dict[tuple[str, str], tuple[int, Any]] = {}  # (url, schema) -> (pid, the lease connection)
_pg_held: dict[tuple[str, str, int], int] = {}  # (url, schema, key) -> refcount
_inherited: list[Any] = []


def _is_pg(store: Any) -> bool:
    return getattr(store, "url", None) is not None and getattr(store, "schema", None) is not None


def _offset(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()[:6], "big")


def _pg_key(schema: str, run_id: str) -> int:
    digest = hashlib.sha256(f"sealbox-live:{schema}:{run_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_fd(store: Any, create: bool) -> tuple[str, int] | None:
    folder = getattr(store, "path", None)
    if folder is None:
        return None
    path = os.path.join(os.fspath(folder), LIVE_FILE)
    with _mutex:
        fd = _fds.get(path)
        if fd is None:
            flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            try:
                fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
            except OSError:
                return None
            _fds[path] = fd
    return path, fd


class LiveLease:
    """This process's liveness lease on one run; :meth:`release` when the run ends (idempotent)."""

    def __init__(self, release: Any) -> None:
        self._release, self.held = release, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self._release()


def take(store: Any, run_id: str) -> LiveLease | None:
    """Take ``run_id``'s liveness lease in ``store``; None when it cannot be had (no folder, no
    ``fcntl``, a read-only folder, the server refused, or another live process holds it): the run is
    then recorded without the ``lease`` marker and keeps the status of its events."""
    try:
        if _is_pg(store):
            return _take_pg(store, run_id)
        return _take_file(store, run_id)
    except Exception:  # noqa: BLE001 - a lease is a hint for readers; never a reason not to record
        return None


def _take_file(store: Any, run_id: str) -> LiveLease | None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    got = _lock_fd(store, create=True)
    if got is None:
        return None
    path, fd = got
    offset, ident = _offset(run_id), (path, run_id)
    with _mutex:
        if _held.get(ident):
            _held[ident] += 1
        else:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            except OSError:
                return None
            _held[ident] = 1

    def release() -> None:
        with _mutex:
            n = _held.get(ident, 0) - 1
            if n > 0:
                _held[ident] = n
                return
            _held.pop(ident, None)
            try:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
            except OSError:  # pragma: no cover - dropped at process exit anyway
                pass

    return LiveLease(release)


def _pg_conn(store: Any) -> Any:
    """This process's lease connection to the store's database (under ``_mutex``)."""
    ident = (store.url, store.schema)
    held = _pg.get(ident)
    if held is not None and held[0] == os.getpid() and not held[1].closed:
        return held[1]
    import psycopg

    conn = psycopg.connect(store.url, autocommit=True, connect_timeout=10, application_name="sealbox-live")
    if held is not None and held[0] != os.getpid():
        _inherited.append(held[1])  # a forked parent's: kept, never closed here (its session is the parent's)
    _pg[ident] = (os.getpid(), conn)
    if held is not None and held[0] == os.getpid():  # its connection was lost: so were its locks
        for key in [k for k in _pg_held if k[:2] == ident]:
            _pg_held.pop(key, None)
    return conn


def _take_pg(store: Any, run_id: str) -> LiveLease | None:
    key = _pg_key(store.schema, run_id)
    ident = (store.url, store.schema, key)
    with _mutex:
        conn = _pg_conn(store)
        if _pg_held.get(ident):
            _pg_held[ident] += 1
        else:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                return None
            _pg_held[ident] = 1

    def release() -> None:
        with _mutex:
            n = _pg_held.get(ident, 0) - 1
            if n > 0:
                _pg_held[ident] = n
                return
            if _pg_held.pop(ident, None) is None:
                return
            held = _pg.get(ident[:2])
            if held is None or held[0] != os.getpid():
                return
            try:
                held[1].execute("SELECT pg_advisory_unlock(%s)", (key,))
            except Exception:  # noqa: BLE001 - the server drops it with the connection
                pass

    return LiveLease(release)


def checker(store: Any) -> Any:
    """A function telling, for a run id, whether some live process holds its liveness lease (True /
    False), or None when this cannot be told here (then no run is said ``interrupted``). Made for one
    listing: on PostgreSQL the server's advisory locks are read once, at its first question."""
    if _is_pg(store):
        keys: list[set[int]] = []

        def held_pg(run_id: str) -> bool | None:
            if not keys:
                keys.append(_pg_keys_held(store))
            return _pg_key(store.schema, run_id) in keys[0]

        return held_pg
    return lambda run_id: _held_file(store, run_id)


def _held_file(store: Any, run_id: str) -> bool | None:
    if not sys.platform.startswith("linux"):  # the struct flock layout below is Linux's
        return None
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return None
    got = _lock_fd(store, create=False)
    if got is None:  # no runs.lock: no lease was ever taken in this folder, so none is held
        folder = getattr(store, "path", None)
        return False if folder is not None and os.path.isdir(os.fspath(folder)) else None
    path, fd = got
    with _mutex:
        if _held.get((path, run_id)):
            return True
    # F_GETLK: is a lock of another process in the way of a write lock on the run's byte?
    # (never lock/unlock here: that would drop this process's own locks on the range)
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _offset(run_id), 1, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    return struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK


def _pg_keys_held(store: Any) -> set[int]:
    rows = store._conn().execute(
        "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
        "AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").fetchall()
    out = set()
    for hi, lo in rows:
        key = (int(hi) << 32) | int(lo)
        out.add(key - (1 << 64) if key >= 1 << 63 else key)
    return out


def _after_fork_in_child() -> None:
    """A forked child holds none of its parent's leases (``lockf`` locks are not inherited; the
    parent's PostgreSQL session is not the child's): forget them, keeping the parent's connections
    referenced and unclosed. The file descriptors stay (the same open file, usable for new locks)."""
    global _mutex
    _mutex = threading.Lock()
    _held.clear()
    _pg_held.clear()
    _inherited.extend(conn for _, conn in _pg.values())
    _pg.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
