"""Run liveness leases: tell a run whose process died from one still running.

While a run is open (from ``run.started``, or from ``Recorder.continue_run`` / ``resume`` in a process
carrying on a run, until ``run.ended``, or until its ``with`` block is left suspended; with or without a
``with`` block), the process recording it holds a lease that the operating system (SQLite store) or the
server (PostgreSQL store) drops when the process dies, however it dies (SIGKILL, a crash):

* SQLite store: a POSIX ``lockf`` lock on one byte of the store folder's ``runs.lock``, chosen by the
  run id (as :mod:`sealbox.pause` does for resume leases, in its own file). One descriptor per store
  folder and process while the process holds a lease there (closing any descriptor of the file drops
  all of the process's locks on it, so it is closed with the last one): thousands of open runs cost
  one descriptor, and a process that recorded into many stores keeps none of theirs.
* PostgreSQL store: a session-level advisory lock keyed on the run, taken on one connection of the
  process's own per database, whatever the number of schemas (``application_name`` ``sealbox-live``);
  the key hashes the schema and the run id; the server drops the locks
  with the connection. A daemon thread waits on that connection's socket: when the server ends the
  session while the process lives (``pg_terminate_backend``, a restart), it reconnects and takes the
  open runs' locks again at once (not at the next run start), nothing added to the recording path.

A run whose lease was taken says so in its ``run.started`` (``"lease": true``). Reading, such a run
that is neither ended nor suspended and whose lease nobody holds is ``interrupted``: derived when the
run is read, nothing is written. Runs without the marker (recorded before, imported, the ``system``
run, or a lease that could not be taken) keep the status of their events.
"""

from __future__ import annotations

import atexit
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
_fds: dict[str, int] = {}  # one descriptor per lock file, while this process holds leases on it
_per_file: dict[str, int] = {}  # lock file -> runs this process holds a lease on there
_held: dict[tuple[str, str], int] = {}  # (lock file, run id) -> leases of this process on it (refcount)
_pg: dict[str, tuple[int, Any]] = {}  # database url -> (pid, the lease connection): one per database, not per schema
_pg_held: dict[tuple[str, int], int] = {}  # (url, key) -> refcount (the key hashes the schema and the run id)
_inherited: list[Any] = []


def _is_pg(store: Any) -> bool:
    return getattr(store, "url", None) is not None and getattr(store, "schema", None) is not None


def _offset(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()[:6], "big")


def _pg_key(schema: str, run_id: str) -> int:
    digest = hashlib.sha256(f"sealbox-live:{schema}:{run_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_path(store: Any) -> str | None:
    folder = getattr(store, "path", None)
    # the folder's real path: POSIX locks are the process's on the file, and closing any descriptor of
    # it drops them all, so two spellings of one folder ('store', its absolute path, a symlink) must
    # share the one descriptor (and a question asked through one must see the leases of the other)
    return None if folder is None else os.path.join(os.path.realpath(os.fspath(folder)), LIVE_FILE)


def _open(path: str) -> int | None:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o600)
    except OSError:
        return None


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
    path = _lock_path(store)
    if path is None:
        return None
    offset, ident = _offset(run_id), (path, run_id)
    with _mutex:  # descriptors are opened and closed only under it, with the locks they carry
        if _held.get(ident):
            _held[ident] += 1
        else:
            fd = _fds.get(path)
            opened = fd is None
            if opened:
                fd = _open(path)
                if fd is None:
                    return None
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            except OSError:
                if opened:
                    os.close(fd)
                return None
            _fds[path] = fd
            _held[ident] = 1
            _per_file[path] = _per_file.get(path, 0) + 1

    def release() -> None:
        with _mutex:
            n = _held.get(ident, 0) - 1
            if n > 0:
                _held[ident] = n
                return
            if _held.pop(ident, None) is None:
                return
            fd = _fds.get(path)
            if fd is None:  # pragma: no cover - forgotten after a fork
                return
            left = _per_file.get(path, 1) - 1
            try:
                if left:
                    fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
                else:  # this process's last lease on the file: closing drops the lock with the descriptor
                    del _fds[path]
                    os.close(fd)
            except OSError:  # pragma: no cover - dropped at process exit anyway
                pass
            if left:
                _per_file[path] = left
            else:
                _per_file.pop(path, None)

    return LiveLease(release)


def _pg_conn(store: Any) -> Any:
    """This process's lease connection to the store's database (under ``_mutex``): one per database
    whatever the number of schemas (stores) used, so a process using many stores holds one connection."""
    ident = store.url
    held = _pg.get(ident)
    if held is not None and held[0] == os.getpid() and not _lost(held[1]):
        return held[1]
    import psycopg

    conn = psycopg.connect(store.url, autocommit=True, connect_timeout=10, application_name="sealbox-live")
    if held is not None and held[0] != os.getpid():
        _inherited.append(held[1])  # a forked parent's: kept, never closed here (its session is the parent's)
    _pg[ident] = (os.getpid(), conn)
    _watch(ident, conn)
    if held is not None and held[0] == os.getpid():
        # its session was ended by the server (pg_terminate_backend, a restart) and its locks with it, while
        # this process still records those runs: take them again, or they would read 'interrupted'
        for lease in [k for k in _pg_held if k[0] == ident]:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (lease[1],)).fetchone()[0]:
                _pg_held.pop(lease, None)  # another process holds it now: not ours to release
        try:
            held[1].close()
        except Exception:  # noqa: BLE001 - already broken
            pass
    return conn


class _Url:
    """What :func:`_pg_conn` needs of a store: its database url."""

    def __init__(self, url: str) -> None:
        self.url = url


#: seconds between two looks at a watched lease connection's socket when nothing happens on it (it is
#: looked at as soon as something arrives: these wake-ups only notice a connection replaced meanwhile)
WATCH_IDLE_S = 5.0
#: seconds between two reconnection attempts while the server cannot be reached (doubling up to 30)
WATCH_RETRY_S = 0.5


def _watch(url: str, conn: Any) -> None:
    """Watch this process's lease connection to ``url`` from a daemon thread: when the server ends its
    session (``pg_terminate_backend``, a restart: it sends an error and closes the socket), reconnect and
    take its open runs' leases again at once, rather than at the next run start (the runs would read
    ``interrupted`` meanwhile). Nothing is added to the recording path: the thread waits on the socket."""
    try:
        fd = conn.fileno()
    except Exception:  # noqa: BLE001 - no socket to watch
        return
    threading.Thread(target=_watcher, args=(url, conn, fd, os.getpid()), name="sealbox-live-watch",
                     daemon=True).start()


def _readable(fd: int, timeout: float) -> bool:
    """Something to read on ``fd`` (or it was closed, or in error) within ``timeout`` seconds (poll: no
    FD_SETSIZE limit)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    try:
        return bool(poller.poll(int(timeout * 1000)))
    except OSError:  # pragma: no cover - EINTR is retried by Python; anything else: look at the connection
        return True


def _watcher(url: str, conn: Any, fd: int, pid: int) -> None:
    retry = WATCH_RETRY_S
    while True:
        with _mutex:
            held = _pg.get(url)
            if held is None or held[1] is not conn or os.getpid() != pid:
                return  # replaced (by a reconnection elsewhere), or a forked child's copy: not ours to watch
            lost = _lost(conn)
        if not lost:
            if not _readable(fd, WATCH_IDLE_S):
                continue
        with _mutex:
            held = _pg.get(url)
            if held is None or held[1] is not conn or os.getpid() != pid:
                return
            if not _lost(conn):
                try:  # under _mutex nobody else uses it: something unasked for arrived (or a query's answer,
                    # already read by the thread that asked: then nothing is left to read)
                    if not _readable(fd, 0):
                        continue
                    conn.execute("SELECT 1")  # an error and end of session fail it (a notice does not)
                    continue
                except Exception:  # noqa: BLE001 - lost, or not: told by the connection's state
                    if not _lost(conn):
                        continue
            try:
                _pg_conn(_Url(url))  # reconnects and takes the open runs' leases again; watched anew
                return
            except Exception:  # noqa: BLE001 - the server cannot be reached yet: try again a moment later
                pass
        threading.Event().wait(retry)
        retry = min(retry * 2, 30.0)


def _lost(conn: Any) -> bool:
    return bool(conn.closed or getattr(conn, "broken", False))


def _try_lock(store: Any, key: int) -> bool:
    """``pg_try_advisory_lock`` on this process's lease connection (under ``_mutex``); a connection the
    server ended meanwhile (found dead by this very query) is reopened once, with its leases."""
    conn = _pg_conn(store)
    try:
        return bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
    except Exception:
        if not _lost(conn):
            raise
    return bool(_pg_conn(store).execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])


def _take_pg(store: Any, run_id: str) -> LiveLease | None:
    return take_pg_lock(store, _pg_key(store.schema, run_id))


def take_pg_lock(store: Any, key: int) -> LiveLease | None:
    """A session advisory lock on ``key`` held on this process's watched lease connection to the store's
    database (None while another process holds it): taken again by the watcher when the server ends the
    session, released by the lease (refcounted: this process's holds do not exclude each other). Used
    for liveness leases and for :mod:`sealbox.pause`'s resume leases. Raises what connecting raises."""
    ident = (store.url, key)
    with _mutex:
        _pg_conn(store)  # reopened, with the leases it held, if the server ended its session
        if _pg_held.get(ident):
            _pg_held[ident] += 1
        else:
            if not _try_lock(store, key):
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
            held = _pg.get(ident[0])
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
    path = _lock_path(store)
    if path is None:
        return None
    # F_GETLK: is a lock of another process in the way of a write lock on the run's byte?
    # (never lock/unlock here: that would drop this process's own locks on the range)
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _offset(run_id), 1, 0)
    with _mutex:  # a descriptor opened for the question is closed under it: no lease of ours rides on it
        if _held.get((path, run_id)):
            return True
        fd = _fds.get(path)
        temporary = fd is None
        if temporary:
            # read-only: F_GETLK needs no write access, and a reader may have none (the folder mounted
            # read-only for an investigator, runs.lock not writable by the reading account)
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:  # no runs.lock: no lease was ever taken in this folder, so none is held
                return False if os.path.isdir(os.path.dirname(path)) else None
            except OSError:  # cannot be read here: cannot be told
                return None
        try:
            answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        except OSError:
            return None
        finally:
            if temporary:
                os.close(fd)
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
    _per_file.clear()
    _fds.clear()  # the parent's leases ride on them: never closed here (their descriptors stay, unused)
    _pg_held.clear()
    _inherited.extend(conn for _, conn in _pg.values())
    _pg.clear()


def _close_at_exit() -> None:
    """Close this process's lease connections as the interpreter exits (the server drops their locks then
    anyway): left to the interpreter's teardown, each was collected still open, and psycopg warned
    "ResourceWarning: Connection deleted while still open" (seen at the end of gateway tests on PostgreSQL).
    A forked parent's (``_inherited``) are not this process's to close."""
    with _mutex:
        held = [conn for pid, conn in _pg.values() if pid == os.getpid()]
        _pg.clear()
        _pg_held.clear()
    for conn in held:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - already broken: nothing to close
            pass


atexit.register(_close_at_exit)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
