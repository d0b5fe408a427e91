"""The embedded store: one SQLite file in WAL mode, in a data folder.

Layout of a data folder::

    DIR/sealbox.db     events, tree nodes, checkpoints, runs, blobs (SQLite, WAL), and the store
                       secret behind redaction markers: created mode 0600 (its -wal/-shm too)
    DIR/log.key        the log's Ed25519 signing key (C2SP signer key, mode 0600)
    DIR/log.vkey       the verifier key pinned at ``init`` (keep a copy elsewhere)
    DIR/checkpoint     the newest signed checkpoint, written after each is issued

Durability: in the default ``full`` mode every commit is fsync'd
(``synchronous=FULL``), so an event that :meth:`SqliteStore.append` returned
survives a power cut. The opt-in ``fast`` mode uses ``synchronous=NORMAL``: a
commit survives a crash of the process but the last commits may be lost on a
power cut or kernel crash. Even in fast mode, the commit that stores a
checkpoint is fsync'd, and in WAL mode that makes every earlier commit durable
too, so a signed checkpoint never covers an event that could be lost.

Concurrency: every thread gets its own connection; writers serialise on
``BEGIN IMMEDIATE`` and retry while the database is busy (up to
``lock_timeout`` seconds), so "database is locked" never reaches a caller.

WAL checkpoints: a writable store copies its WAL back into the database from a
background thread (:class:`_WalCheckpointer`, started on the first write, one
per store and process, stopped by :meth:`SqliteStore.close`) with
``PRAGMA wal_checkpoint(PASSIVE)`` once :data:`WAL_CHECKPOINT_PAGES` frames are
waiting, then starts the WAL over with a short ``RESTART`` (this process's
writers wait for it before ``BEGIN``: about one fsync), so the COMMIT that gates
a tool call no longer copies the WAL itself. Writer connections keep SQLite's
automatic checkpoint only as a backstop, at :data:`WAL_AUTOCHECKPOINT_BACKSTOP`
pages, should the thread fall far behind. Durability is unchanged: commits are
fsync'd by their writer as before, and a checkpoint fsyncs what it copies.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import json
import logging
import operator
import os
import random
import re
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sealbox import blobs as _blobs
from sealbox.errors import (
    BlobNotFoundError,
    ConfigError,
    NoteError,
    NotAStoreError,
    ProofError,
    SchemaVersionError,
    SealboxError,
    StoreBusyError,
    StoreError,
    StoreReadOnlyError,
    StoreRolledBackError,
    StoreUpgradeNeededError,
)
from sealbox.events import SYSTEM_RUN_ID, Event, EventDraft
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, sign_checkpoint, verify_checkpoint
from sealbox.store import migrate
from sealbox.store.sqlite_queries import _EVENT_COLS, Reader, SqliteQueries, event_from_row
from sealbox.store.base import (
    CheckpointPolicy,
    EventBuilder,
    StoreConfigError,
    StoredCheckpoint,
    fsync_write,
    intact_snapshot as _intact_snapshot,
    utc_now,
)

__all__ = ["SqliteStore", "DB_NAME", "APPLICATION_ID"]

DB_NAME = "sealbox.db"
#: SQLite's wait for a lock inside one statement (ms); a writer's whole wait is bounded by lock_timeout
BUSY_TIMEOUT_MS = 5000
KEY_NAME = "log.key"
VKEY_NAME = "log.vkey"
CHECKPOINT_NAME = "checkpoint"
#: Seconds :meth:`SqliteStore.optimize` (at close) waits for the write lock before it leaves the
#: planner statistics to a later close.
OPTIMIZE_LOCK_WAIT = 0.25

#: ``PRAGMA application_id`` of a Sealbox store: "SBOX".
APPLICATION_ID = 0x53424F58
#: WAL frames (pages, 4 KiB each by default: about 4 MB) waiting to be copied into the
#: database after which the background checkpointer runs ``wal_checkpoint(PASSIVE)``.
WAL_CHECKPOINT_PAGES = 1000
#: ``wal_autocheckpoint`` of writer connections: a writer checkpoints on its own COMMIT only when
#: the WAL holds this many frames, i.e. when the background checkpointer has fallen far behind.
WAL_AUTOCHECKPOINT_BACKSTOP = 16 * WAL_CHECKPOINT_PAGES
#: ``mmap_size`` of read-only connections (bytes, an upper bound on the address space mapped):
#: queries and ``verify`` read the database file through a memory map instead of one ``pread``
#: and copy per page (about 10 % of "every call to tool X" on a 1M-event store). SQLite maps
#: the database file only, read-only; the WAL is still read with ``pread``.
READ_MMAP_SIZE = 1 << 30
#: ``journal_size_limit`` of writer connections (bytes): a WAL file that grew past it (readers kept
#: the checkpoint from finishing, or the backstop ran) is truncated back to it when it restarts.
WAL_SIZE_LIMIT = 16 * 1024 * 1024
#: ``tree_nodes`` holds the full subtrees of ``2**STORED_NODE_LEVEL`` leaves or more; a smaller
#: one (a leaf included) is computed when needed from its leaves' hashes, read from ``events``
#: in one range (at most 16 rows and 15 hashes), as C2SP tlog-tiles stores only full tiles. So
#: 15 appends in 16 write no tree page: one B-tree page less in their commit.
STORED_NODE_LEVEL = 4

_log = logging.getLogger("sealbox.store")



#: The events table's columns in the order of an event row (:meth:`EventBuilder.place`); the
#: ten derived query columns (``events.derived_columns``) are positions 7 to 16.
_EVENT_COLUMNS = ("leaf_index", "run_id", "run_seq", "kind", "ts", "principal", "step", "server", "tool",
                  "call_id", "effect", "ok", "tokens", "cost", "rule", "reason_code", "duration_us", "raw",
                  "leaf_hash")
_DERIVED = slice(7, 17)
_NO_NULLS = (None,) * 10
_insert_sql_cache: dict[bytes, tuple[str, tuple[bool, ...]]] = {}
_is_not = operator.is_not
_compress = itertools.compress


def _insert_sql(present: bytes) -> tuple[str, tuple[bool, ...]]:
    """(the INSERT naming the always-set columns and the derived ones flagged in ``present``,
    the selector of those values in a row without its last two: see :func:`_event_groups`)."""
    found = _insert_sql_cache.get(present)
    if found is None:
        keep = (True,) * 7 + tuple(bool(b) for b in present)
        names = [c for c, k in zip(_EVENT_COLUMNS, keep) if k] + ["raw", "leaf_hash"]
        sql = f"INSERT INTO events ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
        found = _insert_sql_cache[present] = (sql, keep)
    return found


def _event_groups(rows: Sequence[tuple]) -> list[tuple[str, list[tuple]]]:
    """Event rows as (INSERT statement, parameter rows) groups, each group one run of consecutive
    rows whose NULL derived columns are the same, in the rows' order.

    Why: Python's ``sqlite3`` binds ``int``, ``float``, ``str`` and ``bytearray`` directly, but
    passes ``None`` and ``bytes`` through its adapter lookup (PEP 246 ``__adapt__``), which raises
    and clears an ``AttributeError`` for each (CPython 3.11 ``Modules/_sqlite/microprotocols.c``):
    about 0.4 µs a parameter, 4 µs for a ``tool.call`` row with its seven NULL columns and two
    BLOBs. A column left out of the INSERT is NULL (no column of ``events`` has a default), and
    a ``bytearray`` is stored as the same BLOB, read back as ``bytes``."""
    groups: list[tuple[str, list[tuple]]] = []
    last = b""
    batch: list[tuple] = []
    for row in rows:
        present = bytes(map(_is_not, row[_DERIVED], _NO_NULLS))
        if present != last or not groups:
            sql, keep = _insert_sql(present)
            batch = []
            groups.append((sql, batch))
            last = present
        batch.append((*_compress(row[:-2], keep), bytearray(row[-2]), bytearray(row[-1])))
    return groups



def _has_header(path: Path, header: bytes) -> bool:
    """Whether the regular file ``path`` starts with ``header`` (False when it cannot be read)."""
    try:
        if not path.is_file():  # a FIFO is not opened: that would wait for a writer
            return False
        with open(path, "rb") as fh:
            return fh.read(len(header)) == header
    except OSError:
        return False

class _Txn:
    """:class:`~sealbox.store.base.WriteTxn` over one SQLite connection.

    Run heads, the tree size and the tree nodes written in this transaction are
    cached, and event and node rows are buffered and inserted with one
    ``executemany`` each by :meth:`flush`, just before COMMIT.
    """

    def __init__(self, conn: sqlite3.Connection, cur: sqlite3.Cursor | None = None) -> None:
        self.conn = conn
        #: what the transaction's writes (:meth:`flush`, :meth:`put_blob`) run on: the writer's cursor
        self._cur = conn if cur is None else cur
        self._size: int | None = None
        self._heads: dict[str, tuple[int, bytes, str]] = {}
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._events: list[tuple] = []
        self._node_rows: list[tuple[int, int, bytes]] = []
        self._ckpt_size: int | None = None
        #: blob refs this connection inserted (or found stored) in this transaction, or in earlier ones
        #: adopted: a ref is inserted once (the context blob of a call, named by its tool.call and its
        #: policy.decision). Blobs are never deleted (erased ones keep their row), so a ref once stored stays.
        self._blobs: set[str] = set()

    def adopt(self, cache: "_Txn") -> None:
        """Start from what an earlier transaction of this connection read and wrote.

        Only valid when no other connection committed since (``PRAGMA data_version``
        unchanged): the tree size, run heads, tree nodes and newest checkpoint size
        are then exactly what the database holds, and four lookups per append are saved. The blob
        refs committed are kept too: no other connection can have changed the blobs table, and no
        write of Sealbox deletes a blob row (triggers refuse it), so each is still stored.
        """
        self._size, self._ckpt_size = cache._size, cache._ckpt_size
        self._heads, self._nodes = cache._heads, cache._nodes
        self._blobs = cache._blobs if len(cache._blobs) <= 4096 else set()
        if len(self._heads) > 4096:
            self._heads = {}
        if len(self._nodes) > 4096:  # keep the right edge of the tree: the nodes an append reads
            size = self._size or 0
            self._nodes = {k: h for k, h in self._nodes.items() if (k[1] + 1) << k[0] > size - (1 << k[0]) * 2}

    def run_head(self, run_id: str) -> tuple[int, bytes, str] | None:
        head = self._heads.get(run_id)
        if head is not None:
            return head
        row = self.conn.execute(
            "SELECT run_seq, leaf_hash, kind FROM events WHERE run_id = ? ORDER BY run_seq DESC LIMIT 1", (run_id,)
        ).fetchone()
        if row is None:
            return None
        head = row[0], _hash_value(row[1], f"the leaf hash of run {run_id}'s event {row[0]}"), row[2]
        self._heads[run_id] = head  # read once per transaction (Reader.run_head_seq, then place)
        return head

    def tree_size(self) -> int:
        if self._size is None:
            row = self.conn.execute("SELECT max(leaf_index) FROM events").fetchone()
            self._size = 0 if row[0] is None else row[0] + 1
        return self._size

    def get_node(self, level: int, index: int) -> bytes:
        cached = self._nodes.get((level, index))
        if cached is not None:
            return cached
        if level < STORED_NODE_LEVEL:  # not stored: from its leaves (see insert_nodes)
            return self._small_node(level, index)
        row = self.conn.execute("SELECT hash FROM tree_nodes WHERE level = ? AND idx = ?", (level, index)).fetchone()
        if row is None:
            raise StoreError(f"tree node ({level}, {index}) is missing: the store is damaged (run `sealbox verify`)")
        h = _hash_value(row[0], f"tree node ({level}, {index})")
        self._nodes[(level, index)] = h
        return h

    def _small_node(self, level: int, index: int) -> bytes:
        """The hash of full subtree ``(level, index)`` below :data:`STORED_NODE_LEVEL`, from its
        leaves' ``leaf_hash`` (RFC 9162 §2.1.1). Leaves not cached yet are read in one range,
        that of the subtree's whole aligned block of ``2**STORED_NODE_LEVEL`` leaves (a proof's
        other small siblings lie in the same block), and cached with the nodes computed.

        Raises:
            StoreError: a leaf of the subtree is not in the events table (a damaged store).
        """
        first, count, cache = index << level, 1 << level, self._nodes
        nodes = [cache.get((0, i)) for i in range(first, first + count)]
        if None in nodes:
            block = first >> STORED_NODE_LEVEL << STORED_NODE_LEVEL
            for i, h in self.conn.execute(
                    "SELECT leaf_index, leaf_hash FROM events WHERE leaf_index >= ? AND leaf_index < ?",
                    (block, block + (1 << STORED_NODE_LEVEL))):
                cache.setdefault((0, i), _hash_value(h, f"the leaf hash of event {i}"))
            nodes = [cache.get((0, i)) for i in range(first, first + count)]
            if None in nodes:
                raise StoreError(f"tree node ({level}, {index}) cannot be computed: leaf {first + nodes.index(None)} "
                                 "is not stored: the store is damaged (run `sealbox verify`)")
        for lv in range(1, level + 1):
            nodes = [merkle.node_hash(a, b) for a, b in zip(nodes[::2], nodes[1::2])]
            for i, h in enumerate(nodes):
                cache[(lv, (first >> lv) + i)] = h
        return nodes[0]

    def insert_event(self, row: tuple) -> None:
        self._events.append(row)
        self._heads[row[1]] = (row[2], row[-1], row[3])
        self._size = row[0] + 1

    def insert_nodes(self, rows: list[tuple[int, int, bytes]]) -> None:
        """Buffer the full subtrees of level :data:`STORED_NODE_LEVEL` and up; smaller ones
        (the leaf included: its hash is the event row's ``leaf_hash``) are only cached.
        Stores written before 2026-12 also hold rows of levels 0 to 3: verify still checks
        them, nothing reads them."""
        for level, idx, h in rows:
            self._nodes[(level, idx)] = h
            if level >= STORED_NODE_LEVEL:
                self._node_rows.append((level, idx, h))

    def flush(self) -> None:
        """Insert the buffered event and node rows.

        Rows are bound the way the ``sqlite3`` module binds fastest (see :func:`_event_groups`):
        a NULL derived column is left out of the INSERT instead of bound as ``None``, and the
        hashed bytes and hashes are bound as ``bytearray`` (stored as the same BLOB)."""
        if self._events:
            stored = 0
            for sql, rows in _event_groups(self._events):
                stored += self._cur.executemany(sql, rows).rowcount
            _check_inserted(stored, len(self._events), "events")
            self._events = []
        if self._node_rows:
            cur = self._cur.executemany("INSERT INTO tree_nodes (level, idx, hash) VALUES (?, ?, ?)",
                                        [(lv, i, bytearray(h)) for lv, i, h in self._node_rows])
            _check_inserted(cur.rowcount, len(self._node_rows), "tree_nodes")
            self._node_rows = []

    def put_blob(self, ref: str, salt: bytes, content: bytes) -> None:
        if ref in self._blobs:  # inserted already (the same ref is the same content: its commitment)
            return
        self._blobs.add(ref)
        self._cur.execute(
            "INSERT OR IGNORE INTO blobs (ref, salt, content, size) VALUES (?, ?, ?, ?)",
            (ref, bytearray(salt), bytearray(content), len(content)),
        )

    def insert_run(self, row: tuple) -> None:
        self.conn.execute(
            "INSERT INTO runs (run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at, leaf_index)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )

    def latest_checkpoint_size(self) -> int:
        if self._ckpt_size is None:
            row = self.conn.execute("SELECT max(tree_size) FROM checkpoints WHERE typeof(tree_size) = 'integer'").fetchone()
            self._ckpt_size = row[0] or 0
        return self._ckpt_size

    def checkpoint_inserted(self, size: int) -> None:
        self._ckpt_size = max(self.latest_checkpoint_size(), size)


#: The folder descriptors open for the checkpoint file's flock (:meth:`SqliteStore._publish_checkpoint`).
#: A flock belongs to the open file description, which a child forked meanwhile shares: it would hold
#: the lock for its whole life, and every later signer of the store would block. The child closes them.
_LOCK_FDS: set[int] = set()
_LOCK_FDS_GUARD = threading.Lock()


def _close_lock_fds_in_child() -> None:
    for fd in _LOCK_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCK_FDS.clear()
    _LOCK_FDS_GUARD.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_LOCK_FDS_GUARD.acquire, after_in_parent=_LOCK_FDS_GUARD.release,
                        after_in_child=_close_lock_fds_in_child)


class _ChangedBelowError(StoreError):
    """The signer found the store changed below Sealbox. Private: only ``_sign_checkpoint`` raises it,
    and :meth:`SqliteStore.issue_checkpoint` records the damage (``_damage``: later appends are
    refused) and raises a plain ``StoreError`` in its place, so no caller ever sees this class."""


def _stored_bytes(value: Any) -> bytes:
    """A BLOB column's value as bytes, whatever SQLite's affinity let in below Sealbox (a TEXT
    becomes its bytes again, a number its repr): verify reports the storage class
    (``column_type``, :meth:`SqliteStore.storage_class_problems`) and the value then fails
    its check."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:  # a TEXT read by verify_reads() decodes with surrogateescape: its exact bytes again
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return repr(value).encode("utf-8")


#: A blobs column read as its bytes when it holds a TEXT (only a change below Sealbox writes one; a
#: TEXT that is not UTF-8 would otherwise fail the read with "Could not decode to UTF-8 column"):
#: the value then fails its commitment check, which verify reports.
_BLOB_BYTES = "CASE WHEN typeof({0}) = 'text' THEN CAST({0} AS BLOB) ELSE {0} END"


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate from a surrogateescape decoding)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _row_key(table: str, key: str, quoted: str) -> str:
    """How :meth:`SqliteStore.storage_class_problems` names a row: ``level, idx = 4, 0`` for the
    integer keys; the text keys (read as a BLOB literal, whatever their storage class or bytes)
    as their text, escaped where not printable UTF-8."""
    if table in ("blobs", "snapshots", "runs"):
        raw = bytes.fromhex(quoted[2:-1]) if quoted.startswith("X'") else quoted.encode()
        return f"{key} {raw.decode('utf-8', 'backslashreplace')!r}"
    return f"({key}) = ({quoted})" if "," in key else f"{key} = {quoted}"


#: The newest checkpoint row whose tree size is an INTEGER (a TEXT sorts above every number).
_LATEST_CHECKPOINT_SQL = ("SELECT tree_size, root_hash, note, created_at FROM checkpoints"
                          " WHERE typeof(tree_size) = 'integer' ORDER BY tree_size DESC, id DESC LIMIT 1")


def _stored_checkpoint(row: tuple) -> StoredCheckpoint:
    """A checkpoints row as a StoredCheckpoint whatever its columns' storage classes (a note
    held as a BLOB comes back as its text, so that it fails its signature check instead of
    raising; verify reports the storage class)."""
    size, root, note, created = row
    if isinstance(note, (bytes, bytearray, memoryview)):
        note = bytes(note).decode("utf-8", "surrogateescape")
    elif not isinstance(note, str):
        note = repr(note)
    return StoredCheckpoint(size, _stored_bytes(root), note, created if isinstance(created, str) else repr(created))


def _lenient_text(data: bytes) -> str:
    """``text_factory`` of :meth:`SqliteStore.verify_reads`: a TEXT value as str, one that is not
    UTF-8 (only a change below Sealbox writes one) decoded with ``surrogateescape``, so that it
    keeps its exact bytes and is reported instead of failing the read."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "surrogateescape")


#: (table, key columns, {column: storage classes Sealbox writes}) checked by
#: :meth:`SqliteStore.storage_class_problems`. The events table is not here: its hashed bytes and
#: leaf hash are checked row by row (verify's ``column_type``) and its other columns are compared
#: with the values derived from the hashed payload, which a value of another class never equals.
_STORAGE_CLASSES: tuple[tuple[str, str, dict[str, tuple[str, ...]]], ...] = (
    ("tree_nodes", "level, idx", {"level": ("integer",), "idx": ("integer",), "hash": ("blob",)}),
    ("checkpoints", "id", {"tree_size": ("integer",), "root_hash": ("blob",), "note": ("text",),
                           "created_at": ("text",)}),
    ("blobs", "ref", {"ref": ("text",), "salt": ("blob", "null"), "content": ("blob", "null"),
                      "size": ("integer",)}),
    ("snapshots", "fingerprint", {"fingerprint": ("text",), "content": ("blob",), "created_at": ("text",)}),
    ("runs", "run_id", {"run_id": ("text",), "agent": ("text",), "principal": ("text",),
                        "parent_run_id": ("text", "null"), "replay_of": ("text", "null"),
                        "snapshot": ("text", "null"), "started_at": ("text",), "leaf_index": ("integer",)}),
)


_ROWS_SQL = (
    "SELECT leaf_index, raw, leaf_hash, run_id, run_seq, kind, ts, principal, step, server, tool,"
    " call_id, effect, ok, tokens, cost, rule, reason_code, duration_us FROM events"
    " WHERE leaf_index > ? ORDER BY leaf_index LIMIT ?")
def _hash_value(value: Any, what: str) -> bytes:
    """A stored 32-byte hash, or StoreError: SQLite's affinity lets TEXT or a number into a BLOB
    column changed below Sealbox, which must not surface as a TypeError or a wrong proof."""
    if type(value) is not bytes or len(value) != merkle.HASH_SIZE:
        raise StoreError(f"{what} is not a 32-byte hash ({type(value).__name__}): the store is damaged "
                         "(run `sealbox verify`)")
    return value


def _expected_triggers() -> dict[str, str]:
    """name -> squashed SQL of the triggers the migrations leave in a store (applied in order:
    a later migration may drop one)."""
    import re as _re

    expected: dict[str, str] = {}
    for mig in migrate.load_migrations("sqlite"):
        text = _re.sub(r"--[^\n]*", "", mig.sql)
        for create, name, dropped in _re.findall(
                r"(CREATE TRIGGER (\w+)\b.*?\bEND)\s*;|DROP TRIGGER (\w+)", text, flags=_re.S):
            if dropped:
                expected.pop(dropped, None)
            else:
                expected[name] = _squash(create)
    return expected


def _squash(sql: str | None) -> str:
    """SQL with runs of whitespace made one space, for comparing a trigger with its migration."""
    return " ".join((sql or "").split())


def _check_inserted(stored: int, expected: int, table: str) -> None:
    """Refuse to commit when SQLite inserted fewer rows (``stored``: the cursors' ``rowcount``)
    than asked (a foreign trigger doing ``RAISE(IGNORE)``): the transaction rolls back, so the
    call it records does not run."""
    if stored != expected:
        raise StoreError(f"{table}: {expected} rows were written but {stored} were stored "
                         "(a trigger that is not Sealbox's? run `sealbox verify`); nothing was appended")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


class _WalCheckpointer:
    """Copies a store's WAL back into its database from a daemon thread, off the writers' path.

    Writers set an event after each COMMIT. The thread sleeps on it; awake, it runs
    ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection (again while a pass still
    finds many new frames), then waits ``interval`` seconds before it looks again, so a
    busy store gets one round every ``interval`` and an idle one none. A passive
    checkpoint takes no lock a writer waits for: writers go on committing while it
    copies (SQLite releases the GIL meanwhile), and when another connection (another
    process) is checkpointing it returns at once. (The WAL's length is learnt from the
    checkpoint's own result, not by reading ``-shm``: opening and closing a file that
    SQLite locks would drop this process's POSIX locks on it.)

    Copying is not enough: a writer starts the WAL over only when it finds every frame
    already copied, which under steady writing a background checkpoint never quite
    achieves, so the WAL file would keep growing (and each commit that extends it costs
    more). So once the WAL holds ``threshold`` frames and passive passes have copied
    all but the last few, the thread
    closes this process's write gate (:meth:`enter_write`: writers wait for it before
    ``BEGIN``, never inside a transaction), waits for the writers inside to commit, and
    runs ``wal_checkpoint(RESTART)`` without waiting (``busy_timeout = 0``): it copies
    those few frames, fsyncs, and starts the WAL over. Writers of this process are held
    up for that long (about one fsync), once per ``threshold`` frames; a writer of
    another process holding the lock, or a reader still using the WAL, makes the restart
    give up at once, and it is tried again later (backing off up to 5 s).

    It never raises: an error is logged and a later wake-up tries again on a new
    connection, while the writers' backstop autocheckpoint
    (:data:`WAL_AUTOCHECKPOINT_BACKSTOP`) keeps the WAL bounded. It holds no reference
    to its store, so a store dropped without ``close()`` stops it too
    (``weakref.finalize``). One per store and process: a forked child starts its own.
    """

    def __init__(self, db_path: Path, *, threshold: int = WAL_CHECKPOINT_PAGES, interval: float = 0.1,
                 busy_ms: int = 5000) -> None:
        self.db_path = db_path
        self.threshold = threshold
        self.interval = interval
        self.busy_ms = busy_ms
        self.pid = os.getpid()
        #: passive passes per wake-up at most, and the frames left (at most) for the RESTART to copy
        self.passes = 6
        self.tail = max(16, threshold // 16)
        #: for tests and diagnostics: checkpoints run, WAL restarts, errors, the last (busy, frames, copied)
        self.checkpoints = 0
        self.restarts = 0
        self.errors = 0
        self.last_result: tuple[int, int, int] | None = None
        self._restart_backoff = 0.0
        self._next_restart = 0.0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._gate_lock = threading.Lock()  # the writers' path takes it directly (a Condition's __enter__ is Python)
        self._gate = threading.Condition(self._gate_lock)
        self._gate_closed = False
        self._writers = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sealbox-wal-checkpointer:{db_path.parent.name}")

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # ----------------------------------------------------------- writers' side

    def enter_write(self) -> None:
        """Before ``BEGIN``: wait while a WAL restart runs (rare, about one fsync)."""
        with self._gate_lock:
            while self._gate_closed:
                self._gate.wait()
            self._writers += 1

    def leave_write(self, committed: bool) -> None:
        """After COMMIT (or ROLLBACK)."""
        with self._gate_lock:
            self._writers -= 1
            if self._gate_closed and not self._writers:
                self._gate.notify_all()
        if committed and not self._wake.is_set():
            self._wake.set()

    def notify(self) -> None:
        """The WAL may have grown (a commit this store did not see, e.g. a test's)."""
        self._wake.set()

    # ----------------------------------------------------------- lifecycle

    def signal_stop(self) -> None:
        """Ask the thread to end (it finishes a checkpoint under way first)."""
        self._stopping.set()
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """End the thread and wait for it (in the process that started it)."""
        self.signal_stop()
        if self.pid != os.getpid() or self._thread is threading.current_thread():
            return
        self._thread.join(timeout)
        if self._thread.is_alive():  # pragma: no cover - a checkpoint stuck in I/O; it is a daemon thread
            _log.warning("the WAL checkpointer of %s did not stop within %.0f s", self.db_path, timeout)

    # ----------------------------------------------------------- the thread

    def _connect(self) -> sqlite3.Connection:
        uri = self.db_path.resolve().as_uri() + "?mode=rw"  # never creates a database that was removed
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=self.busy_ms / 1000,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_ms)}")
        conn.execute("PRAGMA synchronous = FULL")  # a checkpoint fsyncs the WAL, then the database
        return conn

    def check(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database (PASSIVE passes, until a pass finds at most ``tail``
        new frames), then start it over once it holds ``threshold`` frames (see the class
        docstring). A pass with nothing to copy only reads the wal-index: no fsync."""
        busy, frames, copied = self._checkpoint(conn, "PASSIVE")
        for _ in range(self.passes - 1):
            if busy or self._stopping.is_set():
                break
            before = copied
            busy, frames, copied = self._checkpoint(conn, "PASSIVE")
            if copied < before or copied - before <= self.tail:  # (copied < before: the WAL was started over)
                break
        if frames >= self.threshold and not self._stopping.is_set() and time.monotonic() >= self._next_restart:
            if self._restart(conn):
                self.restarts += 1
                self._restart_backoff = 0.0
            else:
                self._restart_backoff = min(max(2 * self._restart_backoff, 0.1), 5.0)
                self._next_restart = time.monotonic() + self._restart_backoff

    def _restart(self, conn: sqlite3.Connection) -> bool:
        """``wal_checkpoint(RESTART)`` with this process's writers held at the gate; True when
        the WAL was started over."""
        deadline = time.monotonic() + 0.05
        with self._gate:
            self._gate_closed = True
            try:
                while self._writers:  # let the transactions under way commit (they are short)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._gate.wait(left)
                conn.execute("PRAGMA busy_timeout = 0")
                try:
                    busy = self._checkpoint(conn, "RESTART")[0]
                finally:
                    conn.execute(f"PRAGMA busy_timeout = {int(self.busy_ms)}")
                return busy == 0
            finally:
                self._gate_closed = False
                self._gate.notify_all()

    def _checkpoint(self, conn: sqlite3.Connection, mode: str) -> tuple[int, int, int]:
        row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()[0]  # all rows: no statement left open
        self.checkpoints += 1
        self.last_result = (row[0], row[1], row[2])
        return self.last_result

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                if self._stopping.is_set():
                    return
                self._wake.clear()
                try:
                    with _FORK_GUARD:  # never inside SQLite while this process forks (see _FORK_GUARD)
                        if conn is None:
                            conn = self._connect()
                        self.check(conn)
                except Exception as exc:  # noqa: BLE001 - never crash; the backstop autocheckpoint keeps the WAL bounded
                    self.errors += 1
                    (_log.warning if self.errors == 1 else _log.debug)(
                        "WAL checkpoint of %s failed (%s: %s); retrying later", self.db_path, type(exc).__name__, exc)
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            conn.close()
                        conn = None
                if self._stopping.wait(self.interval):
                    return
        except BaseException as exc:  # pragma: no cover - e.g. interpreter shutdown
            with contextlib.suppress(Exception):
                _log.debug("WAL checkpointer of %s ended: %r", self.db_path, exc)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()



def _read_store_file(path: Path) -> str | None:
    """The text of one of the store folder's small files, None when it does not exist; bytes that
    are not UTF-8 kept as they are (``surrogateescape``). Raises StoreError when it cannot be read."""
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _checkpoint_file_missing(path: Path) -> str:
    return (f"{path / CHECKPOINT_NAME} is missing though the store holds signed checkpoints: it keeps the newest "
            "one, and without it a database restored from an older backup cannot be told from the log, so "
            "appending could fork it; refusing to append or sign (run `sealbox verify`; if the database is known to be "
            "current, put the file back from a copy; see docs/storage.md, \"The checkpoint file\")")


def _checkpoint_file_damaged(path: Path, why: str) -> str:
    return (f"{path / CHECKPOINT_NAME} does not hold a checkpoint ({why}) though the store holds signed "
            "checkpoints: it keeps the newest one, and without it a database restored from an older backup "
            "cannot be told from the log, so appending could fork it; refusing to append or sign (run `sealbox verify`; "
            "if the database is known to be current, put the file back from a copy; see docs/storage.md, "
            "\"The checkpoint file\")")


class _CheckpointTimer:
    """Signs the checkpoint that ``every_seconds`` makes due while the store is idle.

    :meth:`SqliteStore.append_with` signs a due checkpoint itself, but only when an append
    comes; without this thread, events written before an idle period stayed unsigned until
    the next append or close. After each commit that leaves events of this process unsigned,
    the writer calls :meth:`arm` (a flag test and, once per idle period, a notify); the thread
    then sleeps until ``every_seconds`` after the newest checkpoint this store signed and, if
    events are still unsigned, signs through :meth:`SqliteStore.issue_checkpoint` (the same
    path as an append's: one short write transaction, the store's ``_ckpt_lock``, the
    consistency check before signing; a checkpoint another process or thread signed at the
    same size meanwhile is not signed twice).

    It holds only a weak reference to its store (a store dropped without ``close()`` stops
    it, ``weakref.finalize``), stops when the store starts closing (close signs the final
    checkpoint itself), and never raises: a failure to sign is logged and tried again after
    another ``every_seconds``; evidence that the store was changed below Sealbox is recorded
    as the store's damage (later appends are refused) and ends the thread. One per store and
    process.
    """

    def __init__(self, store: "SqliteStore", every_seconds: float) -> None:
        self._store = weakref.ref(store)
        self.every_seconds = every_seconds
        self.pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._armed = False
        self._stopping = False
        #: for tests and diagnostics: checkpoints this thread signed, failures
        self.signed = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sealbox-checkpoint-timer:{store.path.name}")

    def start(self) -> None:
        self._thread.start()

    def arm(self) -> None:
        """After a commit that left events unsigned (the caller has recorded its size first)."""
        if self._armed:  # already armed: the thread reads the size after it clears the flag
            return
        with self._cond:
            self._armed = True
            self._cond.notify()

    def signal_stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def stop(self, timeout: float = 30.0) -> None:
        self.signal_stop()
        if self.pid != os.getpid() or self._thread is threading.current_thread():
            return
        self._thread.join(timeout)

    def _sleep(self, seconds: float | None) -> bool:
        """Wait ``seconds`` (None: until armed); False when asked to stop."""
        with self._cond:
            if seconds is None:
                while not self._armed and not self._stopping:
                    self._cond.wait()
                self._armed = False
            elif not self._stopping:
                self._cond.wait(seconds)
            return not self._stopping

    def _run(self) -> None:
        try:
            while self._sleep(None):
                while True:  # until nothing this process appended is unsigned
                    store = self._store()
                    if store is None or store._closing or store._closed:
                        return
                    if store._appended_size <= store._last_ckpt_size:
                        del store  # never hold the store while waiting: a dropped store must be collectable
                        break
                    left = store._last_ckpt_time + self.every_seconds - time.monotonic()
                    if left <= 0:
                        outcome = store._timer_checkpoint()
                        if outcome == "stop":
                            return
                        left = self.every_seconds if outcome == "retry" else 0.0
                    del store
                    if left > 0 and not self._sleep(left):
                        return
        except BaseException as exc:  # pragma: no cover - e.g. interpreter shutdown
            with contextlib.suppress(Exception):
                _log.debug("checkpoint timer ended: %r", exc)


class _ThreadState(threading.local):
    """Per-thread state of a store, with class defaults: reading an attribute a thread has not set
    finds the default instead of raising and clearing an AttributeError (as ``getattr(local, name,
    default)`` does on a plain ``threading.local``, twice per append)."""

    conn: sqlite3.Connection | None = None
    ops = 0  # this thread's nesting of store operations
    txn_cache: "tuple[int, _Txn] | None" = None
    lock_timeout: float | None = None  # overrides the store's lock_timeout while set
    no_wait = False  # within SqliteStore.no_wait(): a write finding the lock taken raises StoreBusyError
    #: this thread's connection was left at ``busy_timeout = 0`` by a no_wait() write (set again
    #: only when it must change: before the next read or waiting write, not before each no_wait() write)
    busy_zero = False


class _NoWait:
    """:meth:`SqliteStore.no_wait`'s context manager (a class: no generator on the gateway's per-call path)."""

    __slots__ = ("_local", "_before")

    def __init__(self, local: _ThreadState) -> None:
        self._local = local
        self._before = False

    def __enter__(self) -> None:
        self._before = self._local.no_wait
        self._local.no_wait = True

    def __exit__(self, *exc_info: Any) -> None:
        self._local.no_wait = self._before

class _WaitingUntil:
    """:meth:`SqliteStore.waiting_until`'s context manager."""

    __slots__ = ("_local", "_deadline", "_before")

    def __init__(self, local: _ThreadState, deadline: float) -> None:
        self._local, self._deadline, self._before = local, deadline, None

    def __enter__(self) -> None:
        self._before = self._local.lock_timeout
        left = max(0.0, self._deadline - time.monotonic())
        self._local.lock_timeout = left if self._before is None else min(left, self._before)

    def __exit__(self, *exc_info: Any) -> None:
        self._local.lock_timeout = self._before


class SqliteStore(SqliteQueries):
    """The embedded SQLite store. Open with :meth:`init` (new) or :meth:`open` (existing).

    Args:
        path: the data folder.
        durability: ``"full"`` (fsync every commit, the default) or ``"fast"``.
        readonly: open for reading only (no key needed, nothing written).
        checkpoint_policy: when to sign checkpoints.
        lock_timeout: seconds a writer waits for the write lock before failing.

    Raises:
        NotAStoreError, SchemaVersionError, StoreReadOnlyError: see :meth:`open`.
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        durability: str = "full",
        readonly: bool = False,
        checkpoint_policy: CheckpointPolicy | None = None,
        lock_timeout: float = 300.0,
        _create: bool = False,
    ) -> None:
        if durability not in ("full", "fast"):
            raise ValueError("durability must be 'full' or 'fast'")
        self.path = Path(path)
        self.db_path = self.path / DB_NAME
        self.durability = durability
        self.readonly = readonly
        self._create = _create
        if checkpoint_policy is not None and not isinstance(checkpoint_policy, CheckpointPolicy):
            raise StoreConfigError(f"checkpoint_policy must be a CheckpointPolicy, not {type(checkpoint_policy).__name__}")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) \
                or not lock_timeout >= 0 or lock_timeout == float("inf"):
            raise StoreConfigError(f"lock_timeout must be a finite number of seconds >= 0, not {lock_timeout!r}")
        self.checkpoint_policy = checkpoint_policy or CheckpointPolicy()
        self.lock_timeout = lock_timeout
        #: SQLite's own wait for a lock on this store's connections (ms): 5 s, or lock_timeout if shorter
        self._busy_ms = min(BUSY_TIMEOUT_MS, int(lock_timeout * 1000))
        self._busy_pragma = f"PRAGMA busy_timeout = {self._busy_ms}"
        self._ckpt_timer: _CheckpointTimer | None = None
        self._local = _ThreadState()
        self._conns: list[sqlite3.Connection] = []
        self._conn_threads: dict[sqlite3.Connection, threading.Thread] = {}  # connection -> the thread it was opened for
        #: cursors of _stream generators not yet finished (their connection is kept while one may be resumed)
        self._streams: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()
        self._conns_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._wal_lock = threading.Lock()
        self._wal_ckpt: _WalCheckpointer | None = None
        self._closing = False
        self._closed = False
        self._pid = os.getpid()
        self._forked_from: int | None = None
        self._inherited: list[sqlite3.Connection] = []
        #: writes and read snapshots under way, for close() to wait for (see _operation)
        self._ops = 0
        self._ops_lock = threading.Lock()  # taken directly on every write (a Condition's __enter__ is Python)
        self._ops_idle = threading.Condition(self._ops_lock)
        self._closer: int | None = None
        self._closed_event = threading.Event()
        _after_fork_in_child(self)
        _refuse_if_open_at_fork(self.db_path)
        self._check_location(_create)
        #: versions of the migrations this open applied (committed itself), oldest first; empty when none
        #: was pending or another writer applied them meanwhile. Also set as ``migrated`` on a StoreError
        #: raised by the open after it applied some (e.g. log.key missing): ``sealbox upgrade`` says them.
        self.migrated: list[int] = []
        try:
            try:
                self._open_checked(creating=bool(_create))
            except sqlite3.DatabaseError as exc:  # a damaged page met by the open's reads
                raise _translate_open_error(self.path, exc) from exc
        except BaseException as exc:
            self._close_connections()  # never leave a half-open store (or its -wal/-shm) behind
            if self.migrated and isinstance(exc, StoreError):
                exc.migrated = list(self.migrated)  # type: ignore[attr-defined]
            raise

    def _open_checked(self, *, creating: bool = False) -> None:
        self._migrate_and_check()
        with self.verify_reads():  # a value changed below Sealbox is reported (verify), never a read error
            meta = dict(self._conn().execute("SELECT key, value FROM store_meta").fetchall())
            secret_row = self._conn().execute("SELECT secret FROM store_secret WHERE id = 1").fetchone()
            latest = self.latest_checkpoint()
        #: what is wrong with the store's own settings (a read-only open goes on, verify reports them)
        self.open_damage: list[str] = []
        origin, store_id = meta.get("origin", ""), meta.get("store_id", "")
        if origin == "" and not creating:  # deleted below Sealbox: nothing could be signed (a writer recorded, then failed)
            self.open_damage.append("the log's origin in store_meta is missing")
        elif not (isinstance(origin, str) and origin.isprintable() and _utf8(origin)):
            self.open_damage.append(f"the log's origin in store_meta is not printable UTF-8 text ({origin!r})")
            origin = origin if isinstance(origin, str) else repr(origin)
        self.origin: str = origin
        self.store_id: str = store_id if isinstance(store_id, str) else repr(store_id)
        secret = secret_row[0] if secret_row else None
        if type(secret) is not bytes or len(secret) != 32:
            self.open_damage.append("the store secret (store_secret, the HMAC key of redaction markers) is "
                                    + ("missing" if secret_row is None else f"not 32 bytes ({type(secret).__name__})"))
            secret = bytes(32)  # never used to record: a writer refuses the store below
        self._secret: bytes = secret
        if self.open_damage and not self.readonly:
            raise StoreError(f"{self.path}: {self.open_damage[0]}: the store was changed below Sealbox; refusing to "
                             "record into it (run `sealbox verify`)")
        from sealbox.redaction import ContentPolicy

        self._content_error: str | None = None
        try:
            self.content = ContentPolicy.from_dict(json.loads(meta["content"])) if "content" in meta else ContentPolicy()
        except (ValueError, TypeError, AttributeError, KeyError, SealboxError) as exc:
            # unreadable settings: nothing may be recorded under them; verify reports it (and checks the rest)
            self._content_error = (f"the content settings in the database cannot be read ({type(exc).__name__}: "
                                   f"{exc}): they were changed below Sealbox")
            self.content = ContentPolicy()
        self._builder = EventBuilder(self._secret, content=self.content)
        self.redactor = self._builder.redactor
        self._signer: Signer | None = None
        if not self.readonly:
            changed = self.content_policy_change()
            if changed:
                raise StoreError(f"{self.path}: {changed}; refusing to record under them (run `sealbox verify`)")
            self._signer = self._load_signer()
        self._floor = self.checkpoint_file_size()
        self._last_ckpt_size = latest.tree_size if latest else 0
        self._last_ckpt_time = time.monotonic()
        #: the log size after this process's newest append (what the checkpoint timer must see signed)
        self._appended_size = 0
        self._damage: str | None = None
        #: (st_dev, st_ino) of the database and -wal files the writers' connections opened (set by the first
        #: write transaction); each write compares the files at their paths before it commits
        #: (_check_files_in_place)
        self._file_ids: tuple[tuple[int, int], tuple[int, int]] | None = None
        self._wal_path = str(self.db_path) + "-wal"  # a str: os.stat of a Path converts it every time
        if not self.readonly:
            _remove_stale_temp_files(self.path)
            count, last = self._conn().execute("SELECT count(*), max(leaf_index) FROM events").fetchone()
            if count != (0 if last is None else last + 1):
                self._damage = (f"the log in {self.path} is not contiguous ({count} events, last leaf index {last}): "
                                "an event was removed; refusing to append (run `sealbox verify`)")
            elif latest is not None:
                self._damage = self._checkpoint_file_problem() or self._foreign_log_problem(count)

    def _foreign_log_problem(self, size: int) -> str | None:
        """At a writable open of a store holding signed checkpoints and ``size`` events: why its
        database, checkpoint file and ``log.key`` are not one log's (a ``sealbox.db`` or ``log.key``
        copied from another store), or None. Signing would refuse it (:meth:`_check_before_signing`,
        :meth:`_signed_row`), but only after appends had chained new events to a log this key can
        never sign. A checkpoint file ahead of the database (restored from an older backup) is left
        to the rollback check of every append (StoreRolledBackError)."""
        note = self._conn().execute(_LATEST_CHECKPOINT_SQL).fetchone()[2]
        try:  # only the signature: a row whose columns disagree with its note is _signed_row's, at signing
            if not isinstance(note, str):
                raise NoteError(f"its note is {type(note).__name__}, not text")
            verify_checkpoint(note, self._signer.verifier)
        except NoteError as exc:
            return (f"the newest stored checkpoint is not validly signed by this log's key ({exc}): the database "
                    "or log.key is another log's, or the store was changed below Sealbox; refusing to append "
                    "(run `sealbox verify`)")
        note = self.checkpoint_file_note()
        if note and self._floor <= size and self._conn().execute(
                "SELECT 1 FROM checkpoints WHERE note = ? LIMIT 1", (note,)).fetchone() is None:
            return (f"{self.path / CHECKPOINT_NAME} holds a checkpoint the database does not (the database or the file "
                    "is another log's, or checkpoint rows were deleted): the store was changed below Sealbox; "
                    "refusing to append (run `sealbox verify`)")
        return None

    # ----------------------------------------------------------------- opening

    @classmethod
    def init(cls, path: str | os.PathLike, *, origin: str | None = None, content: Any = None,
             **kwargs: Any) -> "SqliteStore":
        """Create a new store in ``path`` (created if missing) and sign its first checkpoint.

        Writes the signing key to ``path/log.key`` (mode 0600) and the verifier
        key to ``path/log.vkey``; the system run is started. ``sealbox.db`` is
        created mode 0600 before SQLite opens it (SQLite gives its ``-wal`` and
        ``-shm`` files the database's mode): it holds the store secret, the HMAC
        key of every redaction marker, which would let a reader test guesses of a
        redacted value. ``log.vkey`` and ``checkpoint`` are public (0644, less the umask).

        Args:
            origin: the log's origin (its checkpoint key's name).
            content: a :class:`~sealbox.redaction.ContentPolicy` (default: mode
                ``redacted`` with the default keys and patterns).

        Raises:
            StoreError: a store already exists there, or a signing key (``log.key``)
                does, or ``sealbox.db`` is a symbolic link to a missing file, or a
                ``sealbox.db-wal``/``-shm``/``-journal`` without its database is there.
            StoreReadOnlyError: the folder cannot be written.
            NoteError: ``origin`` is not a valid key name (empty, a ``+``, a space or a control
                character); nothing is created.
        """
        folder = Path(path)
        _lookable(folder)
        _must_be_a_folder(folder)
        timeout = kwargs.get("lock_timeout", 300.0)
        if (folder / DB_NAME).exists():  # once another init of it in progress is done: what is there
            with _init_lock(folder, timeout) as waited:
                raise StoreError(_taken_message(folder, waited))
        store_id = os.urandom(8).hex()
        origin = origin or f"sealbox.local/{store_id}"
        skey, vkey = generate_key(origin)  # NoteError for an origin that is no key name, before anything is written
        made = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]  # the folders init creates
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreReadOnlyError(f"cannot create {folder}: {exc.strerror}") from exc
        state: dict[str, Any] = {"files": []}  # what this init created, for _undo_init
        with _init_lock(folder, timeout) as waited:
            if (folder / DB_NAME).exists():  # made by another init, meanwhile (a dangling link: refused below)
                raise StoreError(_taken_message(folder, True))
            try:
                return cls._init_in(folder, origin, store_id, skey, vkey, content, kwargs, state)
            except BaseException:  # Ctrl-C, SIGTERM, a full disk: no half-made store stays behind
                _undo_init(folder, state, made)
                raise

    @classmethod
    def _init_in(cls, folder: Path, origin: str, store_id: str, skey: str, vkey: str, content: Any,
                 kwargs: dict, state: dict[str, Any]) -> "SqliteStore":
        _require_writable(folder)
        if os.path.lexists(folder / KEY_NAME):
            raise StoreError(f"{folder} holds a {KEY_NAME} (a signing key) but no {DB_NAME}: init does not "
                             f"overwrite a key; move it away, or create the store in another folder")
        for suffix in ("-wal", "-shm", "-journal"):  # SQLite would open (or follow) them with the new database
            if os.path.lexists(folder / (DB_NAME + suffix)):
                raise StoreError(f"{folder} holds a {DB_NAME}{suffix} (left from another database) but no {DB_NAME}: "
                                 "SQLite would take it for the new store's; move it away, or create the store in "
                                 "another folder")
        _create_private(folder / DB_NAME)
        # the database is this init's (O_EXCL), and so are its -wal/-shm (refused above) and the checkpoint
        state["files"] += [DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", DB_NAME + "-journal", CHECKPOINT_NAME]
        _write_private(folder / KEY_NAME, skey + "\n")
        state["files"].append(KEY_NAME)
        state["files"].append(VKEY_NAME)  # fsync_write replaces a file there: init's from its first byte
        fsync_write(folder / VKEY_NAME, (vkey + "\n").encode())
        store = state["store"] = cls(folder, _create=True, **kwargs)
        from sealbox.redaction import ContentPolicy

        content = content or ContentPolicy()
        store._write_meta({"origin": origin, "store_id": store_id, "created_at": utc_now(),
                           "content": json.dumps(content.to_dict())})
        store.origin, store.store_id = origin, store_id
        store.content = content
        store._builder = EventBuilder(store._secret, content=content)
        store.redactor = store._builder.redactor
        store._signer = store._load_signer()
        store.append(EventDraft("run.started", {
            "agent": "sealbox", "snapshot": None, "parent_run_id": None,
            "labels": {"system": "true", "content_policy": content.fingerprint()},
            "policy": {"fingerprint": "sha256:" + "0" * 64, "name": None},
        }, run_id=SYSTEM_RUN_ID, principal="sealbox"))
        store.issue_checkpoint()
        return store

    @classmethod
    def open(cls, path: str | os.PathLike, **kwargs: Any) -> "SqliteStore":
        """Open an existing store.

        Raises:
            NotAStoreError: ``path`` is not a Sealbox data folder.
            SchemaVersionError: written by a newer Sealbox.
            StoreReadOnlyError: opened for writing but the folder is read-only.
        """
        return cls(path, **kwargs)

    def _check_location(self, create: bool) -> None:
        _lookable(self.path)
        if not self.path.is_dir():
            if self.path.exists():
                if self.path.name == DB_NAME and _has_header(self.path, b"SQLite format 3\x00"):
                    raise NotAStoreError(f"{self.path} is not a Sealbox store (it is the store's database file; give "
                                         f"the store's folder, {self.path.parent})")
                raise NotAStoreError(f"{self.path} is not a Sealbox store (it is a file; give the store's folder)")
            raise NotAStoreError(f"{self.path} does not exist (create a store with `sealbox init {self.path}`)")
        if not create and not self.db_path.is_file():
            if self.db_path.is_dir():
                raise NotAStoreError(f"{self.path} is not a Sealbox store (its {DB_NAME} is a directory, not the "
                                     "database file; move it away and put the store's database file there)")
            if (self.path / ".sealbox" / DB_NAME).is_file():  # the project folder holding the store
                raise NotAStoreError(f"{self.path} is not a Sealbox store (no {DB_NAME}; the store is its .sealbox "
                                     f"folder: give {self.path / '.sealbox'})")
            raise NotAStoreError(f"{self.path} is not a Sealbox store (no {DB_NAME}; create one with `sealbox init`)")
        if not self.readonly:
            _require_writable(self.path)

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.readonly:
                conn = self._connect_readonly()
            else:
                conn = sqlite3.connect(self.db_path, isolation_level=None, timeout=self._busy_ms / 1000,
                                       check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS if self.readonly else self._busy_ms}")
            if self.readonly:
                conn.execute(f"PRAGMA mmap_size = {READ_MMAP_SIZE}")
            else:
                conn.execute(f"PRAGMA synchronous = {'FULL' if self.durability == 'full' else 'NORMAL'}")
                # checkpoints are the background thread's job; a writer's COMMIT runs one only as a backstop
                conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_BACKSTOP}")
                conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        except sqlite3.DatabaseError as exc:
            raise _translate_open_error(self.path, exc) from exc
        return conn

    def _connect_readonly(self) -> sqlite3.Connection:
        """A connection that never changes the store folder.

        Where the folder can be written, an ordinary connection with
        ``query_only``: SQLite's ``-wal``/``-shm`` files, if it creates them, are
        removed again when the last connection closes. Where it cannot (read-only
        media, another user's store) and no writer has the database open (no
        ``-wal`` file), the file is opened ``immutable``; otherwise ``mode=ro``.
        """
        return _readonly_connection(self.path, self.db_path)

    def _forked(self) -> None:
        """In a child process (``os.fork``), just after the fork. SQLite connections must not cross
        a fork (sqlite.org/howtocorrupt.html §2.6), and neither may the state around them: the
        ones inherited from the parent are set aside, never used or closed here (closing one
        could end the parent's locks or remove a WAL the parent still uses), and this store
        object refuses every further use in the child with StoreError, and so does opening the
        same database file again here (:func:`_refuse_if_open_at_fork`). Using the inherited
        connections, or fresh ones, lost the child's events in some runs (two break tests)."""
        if not self._closed and (self._conns or self._wal_ckpt is not None):
            with contextlib.suppress(OSError):  # open in the parent at the fork: SQLite's state for it came along
                st = os.stat(self.db_path)
                _OPEN_AT_FORK.add((st.st_dev, st.st_ino))
        self._inherited.extend(self._conns)
        conn = self._local.conn
        if conn is not None and conn not in self._inherited:
            self._inherited.append(conn)
        self._conns, self._conn_threads = [], {}
        self._local = _ThreadState()
        self._conns_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._wal_lock = threading.Lock()
        self._wal_ckpt = None
        self._ckpt_timer = None
        self._ops = 0
        self._ops_lock = threading.Lock()  # taken directly on every write (a Condition's __enter__ is Python)
        self._ops_idle = threading.Condition(self._ops_lock)
        self._closed_event = threading.Event()
        self._forked_from = self._pid
        self._pid = os.getpid()

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, with its usual ``busy_timeout`` (:attr:`_busy_ms`)."""
        conn = self._write_conn()
        if self._local.busy_zero:
            self._restore_busy(conn)
        return conn

    def _restore_busy(self, conn: "sqlite3.Connection | sqlite3.Cursor") -> None:
        """Put back the usual ``busy_timeout`` a no_wait() write left at 0."""
        conn.execute(self._busy_pragma)
        self._local.busy_zero = False

    def _write_conn(self) -> sqlite3.Connection:
        """This thread's connection, its ``busy_timeout`` possibly still 0 (see :meth:`_begin`)."""
        if self._closed:  # a thread's connection is closed with the store too
            raise StoreError("the store is closed")
        if self._pid != os.getpid():  # a fork the at-fork hook did not see (it always should)
            self._forked()
        if self._forked_from is not None:
            raise StoreError(f"this store was opened by process {self._forked_from} before os.fork(); SQLite "
                             "connections must not cross a fork: use the store from a process started with "
                             "multiprocessing's 'spawn', or fork before opening it")
        conn = self._local.conn
        if conn is None:
            with self._conns_lock:
                self._close_ended_threads_connections()
            conn = self._connect()
            self._local.conn = conn
            self._local.busy_zero = False
            with self._conns_lock:
                self._conns.append(conn)
                self._conn_threads[conn] = threading.current_thread()
        return conn

    def _close_ended_threads_connections(self) -> None:
        """Close the connections of threads that have ended (under ``_conns_lock``, before a connection is
        opened): nothing can use them any more, and kept until close() a process running a thread per
        request would hold one connection (its database and WAL descriptors) per thread it ever ran,
        until it ran out of file descriptors. Closed before the new one is opened, which takes over the
        database descriptor SQLite keeps for a while (while other connections hold locks on the file)."""
        kept = []
        streaming = {cursor.connection for cursor in self._streams}  # a generator may go on in another thread
        for conn in self._conns:
            thread = self._conn_threads.get(conn)
            if thread is not None and not thread.is_alive() and conn not in streaming:
                del self._conn_threads[conn]
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            else:
                kept.append(conn)
        self._conns[:] = kept

    def _migrate_and_check(self) -> None:
        conn = self._conn()
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise _translate_open_error(self.path, exc) from exc
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise NotAStoreError(f"{self.db_path} is not a Sealbox store (it is some other SQLite database)")
        if not tables and not self._create:
            # an empty (or zero-byte) sealbox.db beside a store's keys and checkpoint: a lost database,
            # never migrated into a fresh one here (that wrote a new, empty store in its place)
            raise NotAStoreError(f"{self.db_path} is not a Sealbox store (an empty database)")
        if not self.readonly:  # only once it is known to be ours: WAL is persistent in the file
            try:
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.DatabaseError as exc:
                raise _translate_open_error(self.path, exc) from exc
        applied = {}
        if "schema_migrations" in tables:
            applied = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())
        pending = migrate.check_applied(applied, migrate.load_migrations("sqlite"), str(self.path))
        if pending and self.readonly:
            # A pending migration the store shows applied lost its schema_migrations row below
            # Sealbox: said as such (a writer refuses it too). Still a StoreUpgradeNeededError,
            # so that `sealbox verify` checks the store through a copy and reports it.
            unrecorded = next(filter(None, (_unrecorded(conn, applied, mig) for mig in pending)), None)
            versions = [m.version for m in pending]
            if unrecorded is not None:
                raise StoreUpgradeNeededError(migrate.unrecorded_message(str(self.path), *unrecorded), versions)
            if not applied:
                raise NotAStoreError(f"{self.db_path} is not a Sealbox store (an empty database)")
            raise StoreUpgradeNeededError(
                f"{self.path} was written by an older Sealbox (pending migrations {versions}): "
                f"its owner upgrades it once with `sealbox upgrade --store {self.path}` (or by opening it for "
                f"writing through the API); `sealbox verify` checks it as it is, through an upgraded private copy",
                versions)
        # one lock across all of them (each still its own transaction): a second upgrader (or writer's
        # open) that came between two of them applied the rest, and each said only part ([7] and [8])
        with self._migration_lock(pending[0]) if pending else contextlib.nullcontext():
            for mig in pending:
                _apply_migration(conn, mig, str(self.path), committed=self.migrated, begin=self._begin_migration)
        if pending:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted(_required_tables() - tables)
        if missing:
            raise StoreError(f"{self.db_path} is damaged: table {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} missing (changed below Sealbox; "
                             "restore the store from a backup)")
        columns = sorted(f"{table}.{column}" for table, wanted in _required_columns().items()
                         for column in wanted - {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')})
        if columns:  # dropped or renamed below Sealbox (ALTER TABLE ... DROP / RENAME COLUMN)
            raise StoreError(f"{self.db_path} is damaged: column{'s' if len(columns) > 1 else ''} "
                             f"{', '.join(columns)} {'is' if len(columns) == 1 else 'are'} missing (changed below "
                             "Sealbox; restore the store from a backup)")
        indexes = sorted(_required_indexes() - {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index'")})
        if indexes:  # dropped below Sealbox: the queries naming it (INDEXED BY) failed with "no such index"
            raise StoreError(f"{self.db_path} is damaged: index{'es' if len(indexes) > 1 else ''} "
                             f"{', '.join(indexes)} {'is' if len(indexes) == 1 else 'are'} missing (changed below "
                             "Sealbox; restore the store from a backup)")

    def _write_meta(self, values: dict[str, str]) -> None:
        def put(txn: _Txn) -> None:
            txn.conn.executemany("INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)", list(values.items()))
        self._write(put)

    def _load_signer(self) -> Signer:
        key_path = self.path / KEY_NAME
        try:
            text = key_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError as exc:
            raise StoreError(f"{key_path} is missing: this store cannot sign checkpoints (open it read-only to read)") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"cannot read the signing key {key_path}: {exc}") from exc
        try:
            return Signer.from_key(text)
        except NoteError as exc:
            raise StoreError(f"{key_path}: {exc} (the log's signing key, as `sealbox init` wrote it; "
                             "the store can still be read and verified read-only)") from exc

    # ----------------------------------------------------------------- writing

    def _op_enter(self) -> int:
        """Count a write or a read snapshot under way (returns this thread's depth before it):
        :meth:`close` waits for these before it closes connections (closing one that another
        thread is using can crash the interpreter), and once it has begun, no other thread may
        start one. Raises StoreError (the store is closed)."""
        with self._ops_lock:
            if self._closed or (self._closing and self._closer != threading.get_ident()):
                raise StoreError("the store is closed")
            self._ops += 1
            depth = self._local.ops
            self._local.ops = depth + 1
            return depth

    def _op_leave(self, depth: int) -> None:
        with self._ops_lock:
            self._ops -= 1
            self._local.ops = depth
            if self._closing:
                self._ops_idle.notify_all()

    @contextlib.contextmanager
    def _operation(self) -> Iterator[None]:
        depth = self._op_enter()
        try:
            yield
        finally:
            self._op_leave(depth)

    def _write(self, fn: Callable[[_Txn], Any], sync: bool = True) -> Any:
        if self.readonly:
            raise StoreReadOnlyError(f"{self.path} was opened read-only")
        depth = self._op_enter()
        try:
            return self._write_gated(fn, sync)
        finally:
            self._op_leave(depth)

    def _write_gated(self, fn: Callable[[_Txn], Any], sync: bool) -> Any:
        conn = self._write_conn()  # _begin sets the busy_timeout the write needs
        checkpointer = self._wal_checkpointer()
        if checkpointer is None:  # closing
            return self._write_sync(conn, fn, sync)
        checkpointer.enter_write()
        committed = False
        try:
            result = self._write_sync(conn, fn, sync)
            committed = True
        finally:
            checkpointer.leave_write(committed)
        return result

    def _write_sync(self, conn: sqlite3.Connection, fn: Callable[[_Txn], Any], sync: bool) -> Any:
        if not sync and self.durability == "full":
            conn.execute("PRAGMA synchronous = NORMAL")
            try:
                return self._write_txn(conn, fn)
            finally:
                conn.execute("PRAGMA synchronous = FULL")
        return self._write_txn(conn, fn)

    def _wal_checkpointer(self) -> _WalCheckpointer | None:
        """This process's background WAL checkpointer, started on the first write (None while closing)."""
        ckpt = self._wal_ckpt
        if ckpt is not None and ckpt.pid == os.getpid():
            return ckpt
        if self._closing or self._closed:
            return None
        with self._wal_lock:
            ckpt = self._wal_ckpt
            if ckpt is None or ckpt.pid != os.getpid():  # none yet, or the parent's (this is a forked child)
                ckpt = _WalCheckpointer(self.db_path)
                ckpt.start()
                weakref.finalize(self, ckpt.signal_stop)  # a store dropped without close() stops it too
                self._wal_ckpt = ckpt
            return ckpt

    def _stop_wal_checkpointer(self) -> None:
        with self._wal_lock:
            ckpt, self._wal_ckpt = self._wal_ckpt, None
        if ckpt is not None:
            ckpt.stop()

    def _write_txn(self, conn: sqlite3.Connection, fn: Callable[[_Txn], Any]) -> Any:
        # one cursor runs the transaction's own statements (BEGIN, data_version, blob and row inserts,
        # COMMIT): a Connection.execute makes and frees a cursor per statement
        cur = conn.cursor()
        self._begin(cur)
        cache, self._local.txn_cache = self._local.txn_cache, None  # dropped unless committed
        try:
            txn = _Txn(conn, cur)
            version = cur.execute("PRAGMA data_version").fetchone()[0]
            if cache is not None and cache[0] == version:  # no other connection committed since
                txn.adopt(cache[1])
            result = fn(txn)
            txn.flush()
            self._check_files_in_place(conn)
            self._commit(cur)
            txn._cur = conn  # the kept txn holds no cursor: a cursor left holding its statement keeps a closed
            # connection's files open (sqlite3_close_v2 waits for every statement to be finalized)
            self._local.txn_cache = (version, txn)  # our own commits leave data_version unchanged
            return result
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise _translate_write_error(self.path, exc) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_files_in_place(self, conn: sqlite3.Connection) -> None:
        """Inside a write transaction on ``conn``, before its COMMIT: refuse it when the ``-wal`` file this
        store's connections have open is no longer at its path (the folder removed or renamed, the file
        removed or another put in its place). SQLite would commit through the descriptors it holds, into
        a file no one opens again (a tool would then run on a tool.call that is lost) or one at another
        path; the store is marked damaged, so every later append is refused before it writes anything.
        A removed ``-wal`` still holds, through SQLite's descriptor, commits not yet copied into the
        database: with the database still in place they are copied (``wal_checkpoint``) before raising.
        One ``stat`` a write (the ``-wal`` goes with its folder); the database file is looked at only
        when the ``-wal`` changed. A ``sealbox.db`` replaced alone, its ``-wal`` left, is not noticed."""
        try:
            st = os.stat(self._wal_path)
            wal: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            wal = None
        known = self._file_ids
        if known is not None and wal == known[1]:
            return
        try:
            st = os.stat(self.db_path)
            db: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            db = None
        if known is None:
            if db is not None:
                if wal is not None:  # (a WAL-mode database always has one while it is open)
                    self._file_ids = (db, wal)
                return
        if known is None or db != known[0]:
            self._damage = (f"{self.db_path} was {'removed' if db is None else 'replaced'} while this store had "
                            "it open (its folder deleted or renamed, or the file itself): nothing was written, "
                            "and nothing more is (open the store again where it is now)")
            raise StoreError(self._damage)
        conn.execute("ROLLBACK")
        # the commits still only in the removed -wal go into the database while SQLite can read them; BUSY
        # (1, …) while the WAL checkpointer thread is in a pass of its own: try again
        kept = "the events committed before it could not be copied into the database (it stayed busy)"
        deadline = time.monotonic() + 5.0
        try:
            while True:
                if conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0] == 0:
                    kept = "the events committed before it are copied into the database"
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        except sqlite3.Error as exc:
            kept = f"the events committed before it could not be copied into the database ({exc})"
        self._damage = (f"{self._wal_path} was {'removed' if wal is None else 'replaced'} while this store had it "
                        f"open: {kept}; nothing was written, and nothing more is (close the store and open it "
                        "again)")
        raise StoreError(self._damage)

    def _retrying(self, conn: "sqlite3.Connection | sqlite3.Cursor", sql: str) -> None:
        """Run ``sql`` (BEGIN IMMEDIATE, COMMIT), retrying while the database is busy, for at most
        the lock timeout in all. The first try waits up to the connection's ``busy_timeout``
        (:attr:`_busy_ms`, never more than ``lock_timeout``); each later one waits at most what
        is left, so a ``lock_timeout`` below 5 s is kept (SQLite's own wait used to be 5 s
        whatever it was)."""
        timeout = self._local.lock_timeout
        deadline = time.monotonic() + (self.lock_timeout if timeout is None else timeout)
        delay = 0.001
        capped = False
        if timeout is not None and timeout * 1000 < self._busy_ms:  # a shorter wait (waiting_until, optimize)
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            capped = True
        try:
            while True:
                try:
                    conn.execute(sql)
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or time.monotonic() > deadline:
                        # (a wait bounded by waiting_until: the gateway's, lock_timeout from when it was asked)
                        raise _translate_write_error(self.path, exc, lock_timeout=self.lock_timeout) from exc
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.05)
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms < self._busy_ms:  # SQLite's wait must not run past the deadline
                    conn.execute(f"PRAGMA busy_timeout = {max(left_ms, 0)}")
                    capped = True
        finally:
            if capped:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                    self._local.busy_zero = False

    @contextlib.contextmanager
    def _migration_lock(self, first: migrate.Migration) -> Iterator[None]:
        """Hold an exclusive ``flock`` on the store's folder while this open applies its pending migrations,
        so that concurrent upgraders serialise: the first applies them all, a later one finds them recorded.
        SQLite has no lock that outlives a transaction, and each migration is its own transaction; the
        folder's flock is the one the store's signers take to publish the checkpoint file (a publish waits
        for the migrations, a migration for a publish; neither holds it while waiting for the database).
        Waited for up to ``lock_timeout``; dropped by the OS if the process dies. Without ``fcntl``
        (Windows), on a folder that cannot be opened or a file system without flock, the migrations run
        without it (as before).

        Raises:
            StoreError: another process's upgrade held it for longer than ``lock_timeout`` (said as the
                wait of ``first``, the first pending migration).
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        with _LOCK_FDS_GUARD:  # a fork never falls between the open and the record (_close_lock_fds_in_child)
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                fd = -1
            else:
                _LOCK_FDS.add(fd)
        if fd < 0:
            yield
            return
        try:
            waited = self.lock_timeout if self._local.lock_timeout is None else self._local.lock_timeout
            deadline, delay = time.monotonic() + waited, 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by os.close below
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(f"{_busy_text(self.path)} (migration {first.version} waited {waited:g} s "
                                         f"for another process's upgrade of the store: {LOCK_WAIT_SETTINGS})") from None
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 0.05)
                except OSError:  # a file system without flock (ENOLCK, EOPNOTSUPP): without it, as before
                    break
            yield
        finally:
            with _LOCK_FDS_GUARD:
                _LOCK_FDS.discard(fd)
                os.close(fd)

    def _begin_migration(self, conn: sqlite3.Connection, mig: migrate.Migration) -> None:
        """``BEGIN IMMEDIATE`` for a migration, waiting for the write lock as a write does (up to
        ``lock_timeout``, not only SQLite's 5 s busy wait); past it, one StoreError naming the lock and
        the setting (was "cannot open ...: database is locked" after 5 s whatever lock_timeout was)."""
        try:
            self._retrying(conn, "BEGIN IMMEDIATE")
        except StoreError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, sqlite3.OperationalError) and _is_busy(cause)):
                raise
            waited = self.lock_timeout if self._local.lock_timeout is None else self._local.lock_timeout
            raise StoreError(f"{_busy_text(self.path)} (migration {mig.version} waited {waited:g} s for the store's "
                             f"write lock: {LOCK_WAIT_SETTINGS})") from None

    def _begin(self, conn: "sqlite3.Connection | sqlite3.Cursor") -> None:
        if self._local.no_wait:
            self._begin_no_wait(conn)
            return
        if self._local.busy_zero:  # left at 0 by a no_wait() write: this one waits
            self._restore_busy(conn)
        self._retrying(conn, "BEGIN IMMEDIATE")

    def _begin_no_wait(self, conn: "sqlite3.Connection | sqlite3.Cursor") -> None:
        """``BEGIN IMMEDIATE`` once, without SQLite's busy wait: StoreBusyError when the lock is taken.

        The connection is left at ``busy_timeout = 0``, so a run of no_wait() writes sets it once, not
        twice per write: the statements inside the write transaction never wait for a lock (it holds
        the write lock, and its read snapshot was taken at BEGIN), and the next read (:meth:`_conn`)
        or waiting write (:meth:`_begin`) of this thread puts the usual wait back first."""
        if not self._local.busy_zero:
            conn.execute("PRAGMA busy_timeout = 0")
            self._local.busy_zero = True
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise StoreBusyError(f"{self.db_path} is locked by another writer") from None
            raise _translate_write_error(self.path, exc) from exc

    def no_wait(self) -> Any:
        """A context manager: within it, in this thread, a write (:meth:`append`, :meth:`append_with`,
        :meth:`put_snapshot`…) that finds the write lock held by another connection — another
        process's long transaction, another thread's write — raises
        :class:`~sealbox.errors.StoreBusyError` at once, with nothing written (its ``build`` is not
        called), instead of waiting up to ``lock_timeout``. A write that gets the lock is made as
        usual. For an event loop that must not block: try the write here, and on StoreBusyError make
        it again from a worker thread (the gateway does). A checkpoint falling due after such a write
        is not signed while the lock is taken (a later append, the checkpoint timer or :meth:`close`
        signs it). Sets ``PRAGMA busy_timeout`` only when it must change (see :meth:`_begin_no_wait`)."""
        return _NoWait(self._local)

    def waiting_until(self, deadline: float) -> Any:
        """A context manager: within it, in this thread, a write waits for the write lock only until
        ``deadline`` (a :func:`time.monotonic` time, seconds), or ``lock_timeout`` if that comes
        first; past it the write fails as one past ``lock_timeout`` does (a StoreError, nothing
        written). For a write made later than it was asked for (the gateway's writes queued behind
        one another while another process holds the lock) whose whole wait must stay within
        ``lock_timeout`` of when it was asked for. A checkpoint falling due after such a write
        that cannot get the lock in the time left is not signed then (a later append, the
        checkpoint timer or :meth:`close` signs it): the write, committed, does not fail."""
        return _WaitingUntil(self._local, deadline)

    def _commit(self, conn: "sqlite3.Connection | sqlite3.Cursor") -> None:
        self._retrying(conn, "COMMIT")

    def append(self, drafts: EventDraft | Sequence[EventDraft], *, sync: bool = True) -> list[Event]:
        """Append events atomically and in order; durable (``full`` mode) when this returns.

        Args:
            drafts: one draft or a sequence; all are written in one transaction.
            sync: False to skip the fsync of this commit in ``full`` mode (used for
                a tool's result: it becomes durable with the next fsync'd commit;
                a power cut before that leaves the call "outcome unknown").

        Returns:
            The placed events (leaf index, run_seq, hashes).

        Raises:
            InvalidEventError: a draft is invalid; nothing is written.
            StoreRolledBackError: the store is behind its newest signed checkpoint.
            StoreError: the database could not be written.
        """
        items = [drafts] if isinstance(drafts, EventDraft) else list(drafts)
        return self.append_with(lambda _reader: items, sync=sync)

    def append_with(self, build: Callable[[Any], Sequence[EventDraft]], *, sync: bool = True) -> list[Event]:
        """Call ``build(reader)`` inside the write transaction and append what it returns.

        ``reader`` is a :class:`Reader` over the same transaction, so counts read
        there (e.g. limits) and the events written are consistent, whatever other
        processes are doing. ``reader.stamp`` is the store's clock read once the transaction
        holds the write lock: the ``ts`` of every event appended, so a time ``build`` compares
        (an approval's expiry) is the one recorded.
        """
        def work(txn: _Txn) -> list[Event]:
            if self._damage:
                raise StoreError(self._damage)
            reader = Reader(txn.conn, txn)
            reader.stamp = stamp = self._builder.clock()  # the store's clock, read inside the transaction
            drafts = list(build(reader))
            return self._builder.build(drafts, txn, self._floor, ts=stamp)

        events = self._write(work, sync=sync)
        if events:
            size = events[-1].leaf_index + 1
            if size > self._appended_size:
                self._appended_size = size
            try:
                self._maybe_checkpoint(size)
            except StoreBusyError:
                pass  # no_wait(): the events are committed; a later append, the timer or close() signs them
            except StoreError as exc:
                if self._damage:
                    # committed already, so this append succeeded; the signer found the store changed
                    # below Sealbox (issue_checkpoint recorded it): later appends are refused before
                    # they write anything
                    _log.error("%s", exc)
                    return events
                # a checkpoint that falls due while another thread closes the store is left to
                # close(), which signs the final one
                if not (self._closing or self._closed):
                    # the events are committed, so the append was made: raising would tell the caller
                    # it was not (a recorded tool.call whose tool then never runs reads "outcome
                    # unknown"). A checkpoint that could not be signed now (the lock held by another
                    # process past lock_timeout, a failed write of the checkpoint file) is signed by a
                    # later append, the timer or close()
                    _log.warning("%s: checkpoint not signed now: %s", self.path, exc)
        return events

    def _maybe_checkpoint(self, size: int) -> None:
        pol = self.checkpoint_policy
        if size <= self._last_ckpt_size:
            return
        if (pol.every_events is not None and size - self._last_ckpt_size >= pol.every_events) or (
                pol.every_seconds is not None and time.monotonic() - self._last_ckpt_time >= pol.every_seconds):
            self.issue_checkpoint()
        if pol.every_seconds is not None and self._appended_size > self._last_ckpt_size:
            timer = self._checkpoint_timer()
            if timer is not None:
                timer.arm()

    def _checkpoint_timer(self) -> _CheckpointTimer | None:
        """This process's checkpoint timer thread, started on the first append it is needed for
        (None while closing, or without a signing key)."""
        timer = self._ckpt_timer
        if timer is not None and timer.pid == os.getpid():
            return timer
        if self._closing or self._closed or self._signer is None or self.checkpoint_policy.every_seconds is None:
            return None
        with self._wal_lock:
            timer = self._ckpt_timer
            if timer is None or timer.pid != os.getpid():
                timer = _CheckpointTimer(self, self.checkpoint_policy.every_seconds)
                timer.start()
                weakref.finalize(self, timer.signal_stop)  # a store dropped without close() stops it too
                self._ckpt_timer = timer
            return timer

    def _stop_checkpoint_timer(self, wait: bool) -> None:
        with self._wal_lock:
            timer = self._ckpt_timer
            if wait:
                self._ckpt_timer = None
        if timer is not None:
            (timer.stop if wait else timer.signal_stop)()

    def _timer_checkpoint(self) -> str:
        """The checkpoint timer's signing (on its thread): "done", "retry" (failed; try again
        after another ``every_seconds``) or "stop" (the store is closing, or was changed below
        Sealbox: the damage is recorded and later appends are refused)."""
        timer = self._ckpt_timer
        if self._damage:
            return "stop"  # appends are refused already; verify says why
        try:
            self.issue_checkpoint()
        except StoreRolledBackError as exc:
            _log.error("%s: the checkpoint due after %s s was not signed: %s", self.path,
                       self.checkpoint_policy.every_seconds, exc)
            return "stop"
        except Exception as exc:  # noqa: BLE001 - a background thread never raises
            if self._damage:  # issue_checkpoint found the store changed below Sealbox and recorded it
                _log.error("%s", exc)
                return "stop"
            if self._closing or self._closed:
                return "stop"  # close() signs the final checkpoint
            if timer is not None:
                timer.errors += 1
            _log.warning("%s: the checkpoint due after %s s could not be signed (%s: %s); trying again later",
                         self.path, self.checkpoint_policy.every_seconds, type(exc).__name__, exc)
            return "retry"
        if timer is not None:
            timer.signed += 1
        return "done"

    def issue_checkpoint(self, extensions: Sequence[str] = ()) -> StoredCheckpoint:
        """Sign a checkpoint of the whole log, store it, and write ``DIR/checkpoint``.

        The commit that stores it is fsync'd even in fast mode, making every
        earlier commit durable first. Before signing, the new root is checked to
        be consistent with the previous checkpoint (C2SP tlog-checkpoint: a log
        must never sign two inconsistent checkpoints).

        Args:
            extensions: C2SP tlog-checkpoint extension lines (after the root line,
                covered by the signature), e.g. a bundle's ``sealbox-export/v1``
                digest. With extensions a new checkpoint is always signed, even at
                an already signed size (same tree, same root). If the log grew
                since the newest checkpoint, a plain one is signed first in the same
                transaction, so that every signed size has a checkpoint without
                extensions and ``DIR/checkpoint`` only ever holds plain ones.

        Returns:
            The new checkpoint, or the newest one if no event arrived since and no
            extension was asked for.

        Raises:
            NoteError: an extension line is empty or holds a control character.
            StoreRolledBackError: the store holds fewer events than its newest signed checkpoint.
            StoreError: the store was changed below Sealbox (the checkpoint file or checkpoint rows
                removed, a stored checkpoint that does not verify, a tree inconsistent with it):
                nothing is signed, and later appends of this store object are refused. Also when
                ``DIR/checkpoint`` could not be written (the checkpoint is signed and stored).
        """
        try:
            return self._sign_checkpoint(extensions)
        except _ChangedBelowError as exc:
            self._damage = str(exc)
            raise StoreError(str(exc)) from exc.__cause__

    def _sign_checkpoint(self, extensions: Sequence[str] = ()) -> StoredCheckpoint:
        """:meth:`issue_checkpoint`, raising the private :class:`_ChangedBelowError` for a store
        changed below Sealbox (issue_checkpoint records it and raises a plain StoreError)."""
        if self._signer is None:
            raise StoreReadOnlyError("this store was opened without its signing key")
        with self._ckpt_lock:
            conn = self._conn()
            if self.durability == "fast":
                conn.execute("PRAGMA synchronous = FULL")
            try:
                plain, cp = self._write(lambda txn: self._sign_in_txn(txn, tuple(extensions)))
            finally:
                if self.durability == "fast":
                    conn.execute("PRAGMA synchronous = NORMAL")
            # signed and stored: the next one is due from here even when the file cannot be written now
            # (else every later append signed another, each failing to write the file again)
            self._floor = max(self._floor, cp.tree_size)
            self._last_ckpt_size, self._last_ckpt_time = cp.tree_size, time.monotonic()
            self._publish_checkpoint(plain)
            return cp

    def _publish_checkpoint(self, plain: StoredCheckpoint) -> None:
        """Replace ``DIR/checkpoint`` with ``plain`` unless it holds a checkpoint of at least its size.

        Reading the file's size and replacing the file are one step under an exclusive ``flock`` on
        the folder, held by every signer of this store in any process: a signer whose row was
        committed before another's larger one, but which comes to write the file after it, leaves
        the larger one there. The file never moves backwards (a verifier pinning it would see
        truncation). Without ``fcntl`` (Windows) the comparison is made without the lock.

        Raises:
            StoreError: the file could not be written (a folder made read-only or immutable, a full
                disk): ``plain`` is signed and stored all the same; the next checkpoint writes the file.
        """
        try:
            self._replace_checkpoint_file(plain)
        except OSError as exc:
            raise StoreError(f"{self.path / CHECKPOINT_NAME} could not be written ({exc.strerror or exc}): "
                             f"the checkpoint of {plain.tree_size} events is signed and stored in the "
                             "database; the next checkpoint writes the file") from exc

    def _replace_checkpoint_file(self, plain: StoredCheckpoint) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            fcntl = None  # type: ignore[assignment]
        with _LOCK_FDS_GUARD:  # a fork never falls between the open and the record (_close_lock_fds_in_child)
            fd = os.open(self.path, os.O_RDONLY)
            _LOCK_FDS.add(fd)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # released by os.close below
            if plain.tree_size > self.checkpoint_file_size():
                fsync_write(self.path / CHECKPOINT_NAME, plain.note.encode("utf-8"))
        finally:
            with _LOCK_FDS_GUARD:
                _LOCK_FDS.discard(fd)
                os.close(fd)

    def _sign_in_txn(self, txn: _Txn, extensions: tuple[str, ...] = ()) -> tuple[StoredCheckpoint, StoredCheckpoint]:
        """(the plain checkpoint of the current size, the one asked for: the same unless ``extensions``)."""
        body = Checkpoint(self.origin, 0, bytes(32), extensions)  # validates the lines before anything is signed
        size = txn.tree_size()
        row = txn.conn.execute(
            _LATEST_CHECKPOINT_SQL
        ).fetchone()
        now = utc_now()
        self._check_before_signing(txn, size, row)
        root = merkle.root_at(size, txn.get_node)
        if row is not None:
            signed = self._signed_row(row)  # what was signed, not what the columns say now
            if signed.size > size:
                raise StoreRolledBackError(f"the store holds {size} events but its newest signed checkpoint covers "
                                           f"{signed.size}: refusing to sign (run `sealbox verify`)")
            if signed.size > 0:
                proof = merkle.consistency_proof(signed.size, size, txn.get_node)
                try:
                    merkle.verify_consistency(signed.size, size, proof, signed.root, root)
                except ProofError as exc:
                    raise _ChangedBelowError(
                        f"refusing to sign a checkpoint of {size} events: the tree is not consistent with the signed "
                        f"checkpoint of {signed.size} ({exc}): the store was changed below Sealbox (run `sealbox verify`)"
                    ) from exc
        if row is not None and row[0] == size:
            plain = StoredCheckpoint(size, root, row[2], row[3])
        else:
            plain = self._insert_checkpoint(txn, Checkpoint(self.origin, size, root), now)
        if not body.extensions:
            return plain, plain
        return plain, self._insert_checkpoint(txn, Checkpoint(self.origin, size, root, body.extensions), now)

    def _check_before_signing(self, txn: _Txn, size: int, newest: tuple | None) -> None:
        """Refuse to sign over evidence that signed checkpoints were removed: a new signature would
        hide what ``verify`` reports (a rolled-back log signed at its smaller size, a reused row id
        closing a gap, a fresh first row where init's was deleted).

        Raises:
            StoreRolledBackError: the log is smaller than the checkpoint file or a stored checkpoint.
            StoreError: rows are missing (ids with a gap, none at all in a store holding events, or
                the checkpoint file's checkpoint not among them).
        """
        floor = max(self._floor, self.checkpoint_file_size())
        if size < floor:
            raise StoreRolledBackError(
                f"the store holds {size} events but its newest signed checkpoint covers {floor}: it was restored "
                "from a backup or lost writes; refusing to sign (run `sealbox verify`)")
        count, top = txn.conn.execute("SELECT count(*), max(id) FROM checkpoints").fetchone()
        damaged = None
        if count != (top or 0):
            damaged = f"checkpoint rows were deleted ({count} rows, ids up to {top})"
        elif count == 0 and size > 1:
            damaged = "the store holds events but no signed checkpoint (init signs one)"
        elif count and (problem := self._checkpoint_file_problem()):
            # committed already when this runs after an append: that append stands, later ones are refused
            raise _ChangedBelowError(problem)
        else:
            note = self.checkpoint_file_note()
            if note and newest is not None and txn.conn.execute(
                    "SELECT 1 FROM checkpoints WHERE note = ? LIMIT 1", (note,)).fetchone() is None:
                damaged = "the checkpoint file's checkpoint is not among the stored ones"
        if damaged:
            raise _ChangedBelowError(f"refusing to sign a checkpoint: {damaged}; the store was changed below "
                                     "Sealbox (run `sealbox verify`)")

    def _signed_row(self, row: tuple) -> Checkpoint:
        """The checkpoint a stored row's note signs, checked against the row's columns and the log's key.

        Raises:
            StoreError: the note does not verify, or its size or root differs from the row's
                ``tree_size`` / ``root_hash`` (the table was changed below Sealbox).
        """
        try:
            if not isinstance(row[2], str):
                raise NoteError(f"its note is {type(row[2]).__name__}, not text")
            signed = verify_checkpoint(row[2], self._signer.verifier)
        except NoteError as exc:
            raise _ChangedBelowError(f"the newest stored checkpoint (size {row[0]!r}) is not validly signed by this log's key "
                             f"({exc}): the store was changed below Sealbox (run `sealbox verify`)") from None
        if row[0] != signed.size or row[1] != signed.root:
            found = "sha256:" + row[1].hex() if isinstance(row[1], bytes) else repr(row[1])
            raise _ChangedBelowError(f"the newest stored checkpoint's tree_size and root_hash ({row[0]!r}, {found}) differ from "
                             f"its signed note ({signed.size}, sha256:{signed.root.hex()}): the store was changed below "
                             "Sealbox (run `sealbox verify`)")
        return signed

    def _insert_checkpoint(self, txn: _Txn, checkpoint: Checkpoint, now: str) -> StoredCheckpoint:
        note = sign_checkpoint(checkpoint, self._signer)
        txn.conn.execute(
            "INSERT INTO checkpoints (tree_size, root_hash, note, created_at) VALUES (?, ?, ?, ?)",
            (checkpoint.size, checkpoint.root, note, now),
        )
        txn.checkpoint_inserted(checkpoint.size)
        return StoredCheckpoint(checkpoint.size, checkpoint.root, note, now)

    # ----------------------------------------------------------------- reading

    @contextlib.contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Every read in this thread inside the block sees one consistent snapshot
        (one SQLite read transaction), whatever writers do meanwhile."""
        with self._operation():
            conn = self._conn()
            if conn.in_transaction:
                yield
                return
            conn.execute("BEGIN")
            try:
                yield
            finally:
                conn.execute("COMMIT")

    def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` inside one read transaction (a consistent snapshot)."""
        with self.read_snapshot():
            return fn(self._conn())

    def size(self) -> int:
        """Number of events in the log."""
        return self._read(lambda c: _Txn(c).tree_size())

    def reader(self) -> "Reader":
        """A :class:`Reader` outside any write transaction (for listings); each of its queries
        counts as an operation under way, so :meth:`close` on another thread waits for it."""
        return _StoreReader(self)

    def _stream(self, sql: str, params: Sequence[Any] = (), batch: int = 2000) -> Iterator[Any]:
        """The rows of a query, fetched ``batch`` at a time, each fetch counted as an operation
        (so :meth:`close` on another thread waits for a fetch under way, and a generator
        resumed after close raises StoreError instead of touching a closed connection), while a
        paused generator holds nothing up."""
        cursor = None
        while True:
            depth = None if self._local.ops else self._op_enter()
            try:
                if cursor is None:
                    cursor = self._conn().execute(sql, params)
                    with self._conns_lock:  # _close_ended_threads_connections iterates the set
                        self._streams.add(cursor)
                rows = cursor.fetchmany(batch)
            finally:
                if depth is not None:
                    self._op_leave(depth)
            if not rows:
                with self._conns_lock:
                    self._streams.discard(cursor)
                return
            yield from rows

    def read_run(self, run_id: str) -> list[Event]:
        """Every event of ``run_id``, ordered by run_seq (empty if unknown)."""
        rows = self._conn().execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE run_id = ? ORDER BY run_seq", (run_id,)
        ).fetchall()
        return [event_from_row(*r) for r in rows]

    def read_range(self, start: int, end: int) -> list[Event]:
        """Events with leaf index in [start, end), in log order."""
        rows = self._conn().execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE leaf_index >= ? AND leaf_index < ? ORDER BY leaf_index", (start, end)
        ).fetchall()
        return [event_from_row(*r) for r in rows]

    def get_event(self, leaf_index: int) -> Event:
        """The event at ``leaf_index``; raises :class:`StoreError` if there is none."""
        events = self.read_range(leaf_index, leaf_index + 1)
        if not events:
            raise StoreError(f"no event at leaf index {leaf_index}")
        return events[0]

    def iter_rows(self, batch: int = 5000) -> Iterator[tuple]:
        """Raw rows in log order, for verification: (leaf_index, raw, leaf_hash, columns), where
        columns = (run_id, run_seq, kind, ts, principal, step, server, tool, call_id, effect, ok, tokens, cost,
        rule, reason_code, duration_us).

        ``raw`` and ``leaf_hash`` are bytes when SQLite holds BLOBs there (all Sealbox writes);
        a value of another storage class, which only a change below Sealbox puts there, comes
        as its Python type: a TEXT as ``str`` (one that is not UTF-8 decoded with
        ``surrogateescape``, so that it keeps its exact bytes), an INTEGER as ``int``, and so
        on. Verify reports those (``column_type``)."""
        last = -1
        while True:
            depth = None if self._local.ops else self._op_enter()  # see _stream
            try:
                conn = self._conn()
                factory = conn.text_factory
                try:
                    conn.text_factory = str  # the fast decoder (a Python one costs ~8% of verify)
                    rows = conn.execute(_ROWS_SQL, (last, batch)).fetchall()
                except sqlite3.OperationalError as exc:  # a TEXT that is not UTF-8: this batch byte-exact
                    if "Could not decode to UTF-8" not in str(exc):
                        raise
                    conn.text_factory = _lenient_text
                    rows = conn.execute(_ROWS_SQL, (last, batch)).fetchall()
                finally:
                    conn.text_factory = factory
                rows = [(r[0], r[1], r[2], r[3:]) for r in rows]
            finally:
                if depth is not None:
                    self._op_leave(depth)
            if not rows:
                return
            yield from rows
            last = rows[-1][0]

    def iter_nodes(self) -> Iterator[tuple[int, int, bytes]]:
        """Every stored tree node (level, idx, hash)."""
        yield from self._stream("SELECT level, idx, hash FROM tree_nodes ORDER BY level, idx")

    def iter_level(self, level: int) -> Iterator[tuple[int, bytes]]:
        """The stored nodes (idx, hash) of one tree level, in index order."""
        yield from self._stream("SELECT idx, hash FROM tree_nodes WHERE level = ? ORDER BY idx", (level,))

    #: Tree levels written to ``tree_nodes`` start here (:data:`STORED_NODE_LEVEL`); rows of lower
    #: levels are found only in stores written before 2026-12 (verify checks those it finds).
    stored_node_level = STORED_NODE_LEVEL

    def node_levels(self) -> list[int]:
        """Levels that hold at least one stored node."""
        return [r[0] for r in self._conn().execute("SELECT DISTINCT level FROM tree_nodes")]

    def root(self, size: int | None = None) -> bytes:
        """RFC 9162 §2.1.1 root of the first ``size`` leaves (default: the whole log); O(log n) reads."""
        def work(conn: sqlite3.Connection) -> bytes:
            txn = _Txn(conn)
            n = txn.tree_size() if size is None else self._check_size(size, txn)
            return merkle.root_at(n, txn.get_node)
        return self._read(work)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
        def work(conn: sqlite3.Connection) -> list[bytes]:
            txn = _Txn(conn)
            n = txn.tree_size() if size is None else self._check_size(size, txn)
            return merkle.inclusion_proof(index, n, txn.get_node)
        return self._read(work)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 consistency proof from ``size1`` to ``size2`` leaves (default: now)."""
        def work(conn: sqlite3.Connection) -> list[bytes]:
            txn = _Txn(conn)
            n = txn.tree_size() if size2 is None else self._check_size(size2, txn)
            return merkle.consistency_proof(size1, n, txn.get_node)
        return self._read(work)

    @staticmethod
    def _check_size(size: int, txn: _Txn) -> int:
        if not 0 <= size <= txn.tree_size():
            raise StoreError(f"tree size {size} is beyond the log ({txn.tree_size()} events)")
        return size

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every checkpoint in the store, oldest first."""
        rows = self._conn().execute(
            "SELECT tree_size, root_hash, note, created_at FROM checkpoints ORDER BY id"
        ).fetchall()
        return [_stored_checkpoint(r) for r in rows]

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        """The checkpoint with the largest tree size, or None (a row whose size is not an
        INTEGER, which only a change below Sealbox writes, is not taken: verify reports it)."""
        row = self._conn().execute(_LATEST_CHECKPOINT_SQL).fetchone()
        return None if row is None else _stored_checkpoint(row)

    def checkpoint_file_note(self) -> str | None:
        """Text of ``DIR/checkpoint`` (the newest checkpoint signed by any writer), or None.

        Bytes that are not UTF-8 are read as they are (``surrogateescape``): such a file holds no
        checkpoint note, which verify reports.

        Raises:
            StoreError: the file cannot be read (a directory, no permission).
        """
        return _read_store_file(self.path / CHECKPOINT_NAME)

    def _checkpoint_file_problem(self) -> str | None:
        """Why ``DIR/checkpoint`` cannot stand for the newest signed checkpoint (missing, unreadable,
        empty or not a checkpoint note), or None. A store holding signed checkpoints needs it: it is
        what tells a database restored from an older backup from the log."""
        try:
            note = (self.path / CHECKPOINT_NAME).read_text(encoding="utf-8")
        except FileNotFoundError:
            return _checkpoint_file_missing(self.path)
        except (OSError, UnicodeDecodeError) as exc:
            return _checkpoint_file_damaged(self.path, f"it cannot be read ({exc})")
        try:
            Checkpoint.parse(note.split("\n\n", 1)[0] + "\n")
        except Exception:  # noqa: BLE001 - any parse failure: not a checkpoint note
            return _checkpoint_file_damaged(self.path, "it is empty" if not note.strip() else "it is not a checkpoint note")
        return None

    def checkpoint_file_size(self) -> int:
        """Tree size in ``DIR/checkpoint``, 0 when absent or unreadable (verify reports the latter)."""
        try:
            note = self.checkpoint_file_note()
        except StoreError:
            return 0
        if not note:
            return 0
        try:
            return Checkpoint.parse(note.split("\n\n", 1)[0] + "\n").size
        except Exception:  # noqa: BLE001 - a damaged file is reported by verify, not here
            return 0

    def pinned_vkey(self) -> str | None:
        """The verifier key pinned at ``init`` (``DIR/log.vkey``), or None (bytes that are not UTF-8
        are read as they are: no verifier key parses from them).

        Raises:
            StoreError: the file cannot be read (a directory, no permission).
        """
        text = _read_store_file(self.path / VKEY_NAME)
        return None if text is None else text.strip()

    def get_blob(self, ref: str) -> bytes:
        """The canonical content bytes of blob ``ref``.

        Raises:
            BlobNotFoundError: no such blob, or its content was erased.
        """
        row = self._conn().execute(f"SELECT {_BLOB_BYTES.format('content')} FROM blobs WHERE ref = ?", (ref,)).fetchone()
        if row is None or row[0] is None:
            raise BlobNotFoundError(f"blob {ref} is not in the store" if row is None else f"blob {ref} was erased")
        return _stored_bytes(row[0])

    def iter_blobs(self) -> Iterator[tuple[str, bytes | None, bytes | None]]:
        """Every blob row (ref, salt, content); salt and content are None once erased."""
        for ref, salt, content in self._stream("SELECT ref, salt, content FROM blobs ORDER BY ref", batch=200):
            yield ref, None if salt is None else _stored_bytes(salt), None if content is None else _stored_bytes(content)

    def blob_size_mismatches(self) -> list[tuple[str, Any, int]]:
        """(ref, stored size, content length) of every blob whose ``size`` column is not its
        content's length in bytes (for verify: the column is derived, and checked like the others)."""
        return self._conn().execute(
            "SELECT ref, size, length(CAST(content AS BLOB)) FROM blobs"
            " WHERE content IS NOT NULL AND size IS NOT length(CAST(content AS BLOB)) ORDER BY ref"
        ).fetchall()

    def iter_checkpoint_rows(self) -> list[tuple[Any, Any, Any, Any]]:
        """Every checkpoints row exactly as stored, (id, tree_size, root_hash, note), by id
        (for verify, which checks the columns against the signed notes)."""
        return self._conn().execute("SELECT id, tree_size, root_hash, note FROM checkpoints ORDER BY id").fetchall()

    def get_blob_row(self, ref: str) -> tuple[bytes | None, bytes | None] | None:
        """(salt, content) of blob ``ref`` (both None once erased), or None when not stored.

        The salt is what an export bundle needs to let anyone check the commitment
        SHA-256(salt ‖ content); the store secret it was derived from never leaves.
        """
        row = self._conn().execute(f"SELECT {_BLOB_BYTES.format('salt')}, {_BLOB_BYTES.format('content')} FROM blobs "
                                   "WHERE ref = ?", (ref,)).fetchone()
        if row is None:
            return None
        return (None if row[0] is None else _stored_bytes(row[0]), None if row[1] is None else _stored_bytes(row[1]))

    def resolve(self, value: Any) -> Any:
        """Replace every ``{"$blob": ...}`` in ``value`` by the content it commits to."""
        return _blobs.resolve(value, self.get_blob)

    def put_snapshot(self, content: dict[str, Any]) -> str:
        """Store a snapshot's strict JSON form once; return its fingerprint (``sha256:<hex>``)."""
        from sealbox.canonical import canonical_bytes
        from sealbox.snapshot import snapshot_fingerprint

        fp = snapshot_fingerprint(content)
        data = canonical_bytes(content)
        def put(txn: _Txn) -> None:
            if txn.conn.execute("SELECT count(*) FROM snapshots WHERE fingerprint = ?", (fp,)).fetchone()[0] == 0:
                txn.conn.execute("INSERT INTO snapshots (fingerprint, content, created_at) VALUES (?, ?, ?)",
                                 (fp, data, utc_now()))

        self._write(put)
        return fp

    def get_snapshot(self, fingerprint: str) -> dict[str, Any]:
        """A stored snapshot's strict JSON form.

        Raises:
            StoreError: no snapshot with that fingerprint (a unique prefix of at least 8 hex digits is accepted).
            ConfigError: ``fingerprint`` is not a string.
        """
        if not isinstance(fingerprint, str):
            raise ConfigError(f"fingerprint: {fingerprint!r} is not a string")
        fp = fingerprint if fingerprint.startswith("sha256:") else "sha256:" + fingerprint
        rows = self._conn().execute(
            "SELECT fingerprint, content FROM snapshots WHERE fingerprint >= ? AND fingerprint < ? LIMIT 2",
            (fp, fp + "g")).fetchall() if len(fp) >= 15 else []
        if len(rows) != 1:
            raise StoreError(f"no snapshot {fingerprint!r} in this store" if not rows else f"snapshot prefix {fingerprint!r} is ambiguous")
        return json.loads(_intact_snapshot(rows[0][0], _stored_bytes(rows[0][1])))

    def iter_run_rows(self) -> Iterator[tuple]:
        """Every row of the runs table: (run_id, agent, principal, parent_run_id, replay_of, snapshot,
        started_at, leaf_index) — derived from ``run.started`` events; verify checks them."""
        yield from self._stream(
            "SELECT run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at, leaf_index FROM runs"
            " ORDER BY leaf_index")

    def content_policy_change(self) -> str | None:
        """Why the content settings in ``store_meta`` are not those recorded in the log when the
        store was created (the system run's ``content_policy`` label), or None when they are
        (or the store predates the label)."""
        if self._content_error:
            return self._content_error
        row = self._conn().execute(
            "SELECT CAST(raw AS TEXT) ->> '$.payload.labels.content_policy' FROM events WHERE run_id = ? AND run_seq = 1",
            (SYSTEM_RUN_ID,)).fetchone()
        recorded = row[0] if row else None
        if recorded is None or recorded == self.content.fingerprint():
            return None
        return (f"the content settings in the database (mode {self.content.mode}, {self.content.fingerprint()}) "
                f"are not those recorded when the store was created ({recorded}): they were changed below Sealbox")

    #: What :func:`upgraded_copy` found about the original's schema_migrations rows (see schema_problems).
    _schema_findings: tuple[str, ...] = ()

    def schema_problems(self) -> list[tuple[str, str]]:
        """(code, message) of what is wrong with the ``schema_migrations`` rows: a migration the
        store shows applied whose row was removed (``schema_migration_missing``; seen only by
        :func:`upgraded_copy`, since a store lacking one does not open), a row naming another
        migration than the one of its version (``schema_migration_altered``; the checksums a
        store is opened with are checked at open)."""
        out = [("schema_migration_missing", text) for text in self._schema_findings]
        shipped = {m.version: m.name for m in migrate.load_migrations("sqlite")}
        for version, name in self._conn().execute("SELECT version, name FROM schema_migrations ORDER BY version"):
            if shipped.get(version) != name:
                out.append(("schema_migration_altered", f"the store's schema_migrations row of migration {version!r} "
                            f"names {name!r}, not {shipped.get(version)!r}: it was changed below Sealbox"))
        return out

    def missing_triggers(self) -> list[str]:
        """Append-only triggers that the migrations created and that are no longer in the database."""
        return sorted(set(_expected_triggers()) - set(self._present_triggers()))

    def foreign_triggers(self) -> list[str]:
        """Triggers in the database that no migration created, or whose SQL is not the one a
        migration wrote (a trigger of Sealbox's name redefined): they could drop or change rows."""
        expected = _expected_triggers()
        return sorted(name for name, sql in self._present_triggers().items() if expected.get(name) not in (None, sql)
                      or name not in expected)

    def _present_triggers(self) -> dict[str, str]:
        return {name: _squash(sql) for name, sql in self._conn().execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")}

    def integrity_problems(self, limit: int = 8) -> list[str]:
        """What SQLite's ``PRAGMA integrity_check`` finds wrong in ``sealbox.db`` ([] when it says ``ok``).

        The log's own verification reads the events, tree, checkpoints and blobs by their primary
        keys; it never reads an index, and a query served by a damaged or inconsistent index
        (a page overwritten, rows missing from ``events_tool``) silently misses events. This check
        reads every page and compares every index with its table (sqlite.org/pragma.html
        #pragma_integrity_check). It runs in one read transaction of the calling thread's own
        connection, so :func:`sealbox.verify_store` runs it on a second thread beside its own pass
        (SQLite releases the GIL while it works).

        Args:
            limit: at most this many findings (SQLite's own argument to the pragma).

        Returns:
            Up to ``limit`` of SQLite's lines (e.g. ``row 302 missing from index events_tool``), or
            the one error SQLite raised (``database disk image is malformed``).

        Raises:
            StoreError: the store is closed.
        """
        with self._operation():
            conn = self._conn()
            try:
                rows = conn.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
            except sqlite3.DatabaseError as exc:
                return [str(exc)]
        lines = [str(row[0]) for row in rows]
        return [] if lines == ["ok"] else lines

    @contextlib.contextmanager
    def verify_reads(self) -> Iterator[None]:
        """Inside the block, this thread's reads give a TEXT value that is not UTF-8 as str
        decoded with ``surrogateescape`` (its exact bytes) instead of failing with
        ``OperationalError: Could not decode to UTF-8``: only a change below Sealbox writes
        one, and verify must report it, not stop at it (issue 2: verify never raises on
        tampering)."""
        conn = self._conn()
        factory = conn.text_factory
        conn.text_factory = _lenient_text
        try:
            yield
        finally:
            conn.text_factory = factory

    def storage_class_problems(self) -> list[tuple[str, str, str, str, str]]:
        """(table, row key, column, storage classes Sealbox writes there, the one found) of every
        value in the tree, checkpoint, blob, snapshot and run tables held as another SQLite
        storage class than Sealbox writes (a TEXT of the same bytes in a BLOB column included):
        column affinity lets such a value in, and only a change below Sealbox puts it there.
        Sorted by table, row and column."""
        out: list[tuple[str, str, str, str, str]] = []
        conn = self._conn()
        for table, key, columns in _STORAGE_CLASSES:
            bad = " OR ".join(f"typeof({col}) NOT IN ({', '.join(repr(c) for c in classes)})"
                              for col, classes in columns.items())
            types = ", ".join(f"typeof({col})" for col in columns)
            keys = " || ', ' || ".join(f"quote(CAST({k} AS BLOB))" if table in ("blobs", "snapshots", "runs")
                                       else f"quote({k})" for k in key.split(", "))
            for row in conn.execute(f"SELECT {keys}, {types} FROM {table} WHERE {bad} ORDER BY {key}"):
                for (col, classes), found in zip(columns.items(), row[1:]):
                    if found not in classes:
                        out.append((table, _row_key(table, key, row[0]), col, " or ".join(c.upper() for c in classes),
                                    found.upper()))
        return out

    def iter_snapshots(self) -> Iterator[tuple[str, bytes]]:
        """Every stored snapshot (fingerprint, canonical bytes)."""
        for fp, content in self._stream("SELECT fingerprint, content FROM snapshots ORDER BY fingerprint", batch=200):
            yield fp, _stored_bytes(content)

    def optimize(self) -> None:
        """Keep the query planner's statistics current (``PRAGMA optimize``, or a
        first ``ANALYZE`` when there are none yet), bounded by ``analysis_limit``.

        Called by :meth:`close` on a writable store (LESSONS: a store that never
        gathers statistics lets SQLite pick the wrong index). It takes the write
        lock like any write, but waits for it at most :data:`OPTIMIZE_LOCK_WAIT`
        seconds: while another process holds a long write transaction the
        statistics are left to a later close (they used to wait up to
        ``lock_timeout``, so a listing command could hang for minutes after it had
        printed). Statistics are an optimisation, so a failure here never fails
        :meth:`close`.
        """
        if self.readonly:
            return
        try:
            conn = self._conn()
            conn.execute(f"PRAGMA busy_timeout = {int(OPTIMIZE_LOCK_WAIT * 1000)}")
        except (sqlite3.Error, StoreError):  # pragma: no cover - closing anyway
            return
        self._local.lock_timeout = OPTIMIZE_LOCK_WAIT
        try:
            self._optimize()
        finally:
            self._local.lock_timeout = None
            with contextlib.suppress(sqlite3.Error):
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    def _optimize(self) -> None:
        """:meth:`optimize`'s transaction (the caller has bounded its wait for the lock)."""

        def work(txn: _Txn) -> None:
            c = txn.conn
            c.execute("PRAGMA analysis_limit = 1000")
            has_stats = c.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone()[0] and \
                c.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'events'").fetchone()[0]
            c.execute("PRAGMA optimize" if has_stats else "ANALYZE")

        try:
            self._write(work)
        except StoreError:  # pragma: no cover - statistics are an optimisation; the data is already safe
            pass

    def close(self) -> None:
        """Sign a final checkpoint if events arrived since the last one, stop the background WAL
        checkpointer, then close every connection (the last one to close checkpoints the WAL and
        removes it). Calling it again does nothing."""
        if self._forked_from is not None:  # a child's inherited object: never touch the parent's connections
            self._closed = True
            return
        me = threading.get_ident()
        if self._local.ops and not self._closing and not self._closed:
            raise StoreError("close() was called inside a write or a read of this store (e.g. from an append_with "
                             "callback); close it once that has returned")
        with self._ops_idle:
            if self._closed or self._closing:
                closing_elsewhere = self._closing and not self._closed and self._closer != me
            else:
                closing_elsewhere = None
        if closing_elsewhere is not None:
            if closing_elsewhere:  # another thread is closing: return once it has finished
                self._closed_event.wait(self.lock_timeout + 30)
            return
        with self._ops_idle:
            if self._closed or self._closing:
                return
            self._closing, self._closer = True, me  # the writes below start no checkpointer
        self._stop_checkpoint_timer(wait=False)  # it ends at its next look (close signs the final checkpoint)
        with self._ops_idle:
            # let the writes and read snapshots of other threads finish (a write is bounded by lock_timeout)
            deadline = time.monotonic() + self.lock_timeout + 5
            while self._ops - self._local.ops > 0:
                left = deadline - time.monotonic()
                if left <= 0:  # pragma: no cover - a write stuck past its own lock timeout
                    _log.warning("closing %s with %d operations still under way", self.path, self._ops)
                    break
                self._ops_idle.wait(left)
        try:
            if self._damage:  # appends are refused already and signing would be: verify says why
                _log.error("%s: no final checkpoint signed: %s", self.path, self._damage)
            elif self._signer is not None and self.size() > self._last_ckpt_size:
                self.issue_checkpoint()
            self.optimize()
        finally:
            try:
                self._stop_checkpoint_timer(wait=True)
                self._stop_wal_checkpointer()
            finally:
                self._closed = True
                self._close_connections()
                self._closed_event.set()

    def _close_connections(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._conns.clear()
            self._conn_threads.clear()

    def __enter__(self) -> "SqliteStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _tracked(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` counted as an operation under way (:meth:`SqliteStore._op_enter`), so that
    :meth:`SqliteStore.close` on another thread waits for it instead of closing its connection
    under it, and a call after close starts raises StoreError."""
    @functools.wraps(method)
    def tracked(self: "SqliteStore", *args: Any, **kwargs: Any) -> Any:
        depth = self._op_enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._op_leave(depth)

    return tracked


#: Reads that use a connection outside a read snapshot (read_snapshot and the writes count
#: themselves). The iter_* generators are not counted: one left paused would hold close() up.
_TRACKED_READS = (
    "read_run", "read_range", "get_event", "node_levels", "checkpoints", "latest_checkpoint", "get_blob",
    "get_blob_row", "get_snapshot", "content_policy_change", "missing_triggers", "foreign_triggers",
    "runs", "query_calls", "query_runs", "get_run", "explain_query_calls", "schema_problems",
)


class _StoreReader(Reader):
    """:meth:`SqliteStore.reader`: a :class:`Reader` whose every query counts as an operation of
    its store (StoreError once the store is closed) and runs on the connection of the thread
    making it (the one of the thread that made the reader is closed once that thread has ended)."""

    def __init__(self, store: "SqliteStore") -> None:
        super().__init__(store._conn())
        self._store = store


def _reader_method(name: str) -> Callable[..., Any]:
    base = getattr(Reader, name)

    @functools.wraps(base)
    def tracked(self: _StoreReader, *args: Any, **kwargs: Any) -> Any:
        depth = self._store._op_enter()
        try:
            self.conn = self._store._conn()
            return base(self, *args, **kwargs)
        finally:
            self._store._op_leave(depth)

    return tracked


for _name in [n for n, v in vars(Reader).items() if callable(v) and not n.startswith("_")]:
    setattr(_StoreReader, _name, _reader_method(_name))


#: (st_dev, st_ino) of the database files a parent process had open when it forked this one.
_OPEN_AT_FORK: set[tuple[int, int]] = set()


def _refuse_if_open_at_fork(db_path: Path) -> None:
    """Raise StoreError where ``db_path`` was open in the parent when this process was forked:
    SQLite keeps per-process state for every open database file (locks, the WAL index) and a
    fork copies it, so even a connection opened afresh here shares the parent's, and a child
    that wrote through one lost its events in some runs (a break test)."""
    if not _OPEN_AT_FORK:
        return
    try:
        st = os.stat(db_path)
    except OSError:
        return
    if (st.st_dev, st.st_ino) in _OPEN_AT_FORK:
        raise StoreError(f"{db_path.parent} was open in the parent process when it forked this one (os.fork): "
                         "SQLite's state for it was copied into this process, so it cannot be opened here safely; "
                         "open it in a process started with multiprocessing's 'spawn', or fork before opening it")


#: Held by the background WAL checkpointers while they are inside SQLite, and taken by this
#: process before it forks (released after, in parent and child): a fork while a checkpointer
#: thread held one of SQLite's global mutexes (the unix VFS's) left the child deadlocked in its
#: first ``sqlite3.connect`` (a CI run hung on it). Threads of the application that are inside
#: SQLite at a fork are the application's to stop (docs/storage.md, "Processes").
_FORK_GUARD = threading.Lock()
os.register_at_fork(before=_FORK_GUARD.acquire, after_in_parent=_FORK_GUARD.release,
                    after_in_child=_FORK_GUARD.release)


def _after_fork_in_child(store: "SqliteStore") -> None:
    """Have ``store`` call :meth:`SqliteStore._forked` in every child process forked from this one
    (before any other thread of the child can run), for as long as it exists."""
    ref = weakref.ref(store)

    def hook() -> None:
        live = ref()
        if live is not None:
            live._forked()

    os.register_at_fork(after_in_child=hook)


def _split_sql(script: str) -> list[str]:
    """Split a migration into complete statements (triggers keep their inner ``;``)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not buf.strip():
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def _remove_stale_temp_files(folder: Path) -> None:
    """Remove ``checkpoint.tmp.<pid>.<random>`` files left by a writer that was killed mid-write
    (:func:`sealbox.store.base.fsync_write`), never one whose process is alive."""
    for tmp in folder.glob(f"{CHECKPOINT_NAME}.tmp.*"):
        try:
            pid = int(tmp.name.split(".")[2])
            if not 0 < pid < 2**22 or tmp.is_symlink():  # not a pid (or a planted link): not ours to remove
                continue
            os.kill(pid, 0)  # still alive: leave it
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, OverflowError, OSError):
            continue


def _require_writable(folder: Path) -> None:
    probe = folder / f".sealbox-write-probe-{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StoreReadOnlyError(f"cannot write to {folder}: {exc.strerror or exc}") from exc


def _create_private(path: Path) -> None:
    """Create the empty database file, mode 0600, owner only (SQLite creates a missing one with
    0644 less the umask, and its ``-wal``/``-shm`` files with the database file's mode). Never
    through a symbolic link: ``O_EXCL`` and ``O_NOFOLLOW``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        what = "a symbolic link to a missing file" if os.path.islink(path) else "a file created meanwhile"
        raise StoreError(f"{path} is {what}: init does not create a store through it") from None
    except OSError as exc:
        raise StoreReadOnlyError(f"cannot create {path}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, 0o600)  # whatever the umask took away
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=None)
def _required_tables() -> frozenset[str]:
    """The tables the SQLite migrations create: a store missing one was changed below Sealbox."""
    created: set[str] = set()
    for mig in migrate.load_migrations("sqlite"):
        created |= set(re.findall(r"(?i)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)", mig.sql))
        created -= set(re.findall(r"(?i)\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?\"?(\w+)", mig.sql))
    return frozenset(created)


@functools.cache
def _required_columns() -> dict[str, frozenset[str]]:
    """Each table's columns as the SQLite migrations leave them (applied once to an in-memory
    database): a store missing one (dropped or renamed below Sealbox) is refused on open."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for mig in migrate.load_migrations("sqlite"):
            conn.executescript(mig.sql)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: frozenset(r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')) for t in tables
                if t in _required_tables()}
    finally:
        conn.close()


@functools.cache
def _required_indexes() -> frozenset[str]:
    """The named indexes the SQLite migrations leave (applied once to an in-memory database): a store
    missing one (dropped below Sealbox) is refused on open, as queries name some (``INDEXED BY``)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for mig in migrate.load_migrations("sqlite"):
            conn.executescript(mig.sql)
        return frozenset(r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex%'"))
    finally:
        conn.close()


def _unreadable(db: Path) -> bool:
    """Whether opening ``db`` for reading is refused by its file mode (PermissionError)."""
    try:
        with open(db, "rb"):
            return False
    except PermissionError:
        return True
    except OSError:
        return False


def damaged_database_message(db: Any, exc: BaseException) -> str:
    """The one line for an SQLite database whose pages SQLite cannot read ("database disk image is
    malformed"): changed or lost outside SQLite, e.g. its -wal file deleted or truncated while a writer
    had it open, or a disk fault. ``db`` is its path, or a description of it."""
    return (f"{db} is damaged ({exc}): SQLite cannot read some of its pages (a -wal file deleted or truncated "
            "while the store was open, a disk fault); restore the store from a backup")


def _translate_open_error(path: Path, exc: sqlite3.DatabaseError) -> Exception:
    msg = str(exc).lower()
    if "malformed" in msg:
        return StoreError(damaged_database_message(path / DB_NAME, exc))
    if "not a database" in msg or "file is encrypted" in msg:
        return NotAStoreError(f"{path / DB_NAME} is not a Sealbox store (not an SQLite database)")
    if "unable to open" in msg and _unreadable(path / DB_NAME):  # another user's store: no reader gets in either
        return StoreError(f"cannot read {path / DB_NAME}: permission denied (the store's database is not readable "
                          "by this user: ask its owner for access)")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return StoreReadOnlyError(f"cannot open {path / DB_NAME} for writing: {exc}")
    return StoreError(f"cannot open {path / DB_NAME}: {exc}")


def _apply_migration(conn: sqlite3.Connection, mig: migrate.Migration, where: str,
                     record_unrecorded: bool = False,
                     committed: list[int] | None = None,
                     begin: Callable[[sqlite3.Connection, migrate.Migration], None] | None = None,
                     ) -> tuple[migrate.Migration, str] | None:
    """Apply one numbered migration in its own transaction and record it with its checksum.

    Inside the transaction, a migration another writer recorded meanwhile is not applied again.
    ``committed``, when given, gets ``mig.version`` appended once this call committed the migration
    (not when another writer had: what ``sealbox upgrade`` reports).
    One the store shows applied though schema_migrations lacks it (:func:`_unrecorded`: its row
    was deleted below Sealbox) is refused with SchemaVersionError, or with ``record_unrecorded``
    (a private copy being verified) recorded without running it; ``(mig, why)`` is then returned.
    ``begin``, when given, starts the transaction (a store's :meth:`SqliteStore._begin_migration`: it
    waits for the write lock up to ``lock_timeout``); else a plain ``BEGIN IMMEDIATE`` (SQLite's busy wait).

    Raises:
        SchemaVersionError: see above, or the migration's SQL meets objects the store should
            not have, or lacks ones it should (its schema was changed below Sealbox).
    """
    if begin is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        begin(conn, mig)
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        applied = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())
        if mig.version in applied:  # another writer upgraded the store since it was read
            migrate.check_applied(applied, migrate.load_migrations("sqlite"), where)
            conn.execute("COMMIT")
            return None
        unrecorded = _unrecorded(conn, applied, mig)
        message = None if unrecorded is None else migrate.unrecorded_message(where, *unrecorded)
        if message is not None and not record_unrecorded:
            raise SchemaVersionError(message)
        if message is None:
            conn.execute("SAVEPOINT migration")
            try:
                for statement in _split_sql(mig.sql):
                    conn.execute(statement)
            except sqlite3.OperationalError as exc:
                if not any(words in str(exc) for words in ("already exists", "duplicate column", "no such")):
                    raise
                if not record_unrecorded:
                    raise SchemaVersionError(
                        f"{where}: migration {mig.version} ({mig.version:04d}_{mig.name}) cannot be applied ({exc}): "
                        "the store's schema is not the one its schema_migrations table records; it was changed "
                        "below Sealbox; run `sealbox verify`") from exc
                conn.execute("ROLLBACK TO migration")
                unrecorded = mig, f"its SQL fails on the store's schema ({exc}), which already has its changes"
                message = migrate.unrecorded_message(where, *unrecorded)
            conn.execute("RELEASE migration")
        conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
            (mig.version, mig.name, mig.checksum, utc_now()),
        )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        if mig.version == 1 and message is None:
            conn.execute("INSERT INTO store_secret (id, secret) VALUES (1, ?)", (os.urandom(32),))
        conn.execute("COMMIT")
        if committed is not None:
            committed.append(mig.version)
        return unrecorded
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _unrecorded(conn: sqlite3.Connection, applied: dict[int, str] | set[int],
                mig: migrate.Migration) -> tuple[migrate.Migration, str] | None:
    """``(mig, why)`` when the store shows ``mig`` applied though its schema_migrations rows
    (``applied``) lack it: something ``mig``, or a later migration also missing from
    ``applied`` (migrations apply in order), creates is in the schema
    (:func:`sealbox.store.migrate.created_by`); else None. A row missing below recorded ones
    alone proves nothing: a store may be brought back to an older schema by hand."""
    for other in migrate.load_migrations("sqlite")[mig.version - 1:]:
        if other.version in applied:
            continue
        whose = "its changes" if other.version == mig.version else f"those of migration {other.version}"
        for kind, name, column in migrate.created_by(other):
            if kind == "column":
                if column in {r[1] for r in conn.execute(f"PRAGMA table_info({name})")}:  # name: \w+ from our SQL
                    return mig, f"the store already has {whose} (column {name}.{column})"
            elif kind == "redefined":
                row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
                if row and row[0] and " ".join(row[0].split()) == column:
                    return mig, f"the store already has {whose} (the new definition of {name})"
            elif kind == "meta":
                has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'store_meta'")
                if has_meta.fetchone() and conn.execute("SELECT 1 FROM store_meta WHERE key = ?", (name,)).fetchone():
                    return mig, f"the store already has {whose} (store_meta key {name})"
            elif conn.execute("SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?", (kind, name)).fetchone():
                return mig, f"the store already has {whose} ({kind} {name})"
    return None


@contextlib.contextmanager
def _init_lock(folder: Path, timeout: float) -> Iterator[bool]:
    """Serialise the inits of one folder: an exclusive ``flock`` on its (real) parent folder, held for
    the whole init (not on the folder itself: the store's checkpoint file is written under a lock on
    that). Two ``sealbox init`` of one folder at once: the second waits for the first, then finds its
    store (before, it looked at the first one's half-made database and called it "not a Sealbox store
    (an empty database)"). Yields whether it waited. A parent that cannot be opened (no read permission)
    or a system without ``flock``: not serialised.

    Raises:
        StoreError: another init held the lock for more than ``timeout`` seconds."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield False
        return
    try:
        fd = os.open(os.path.dirname(os.path.realpath(folder)) or "/", os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        waited = False
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreError(f"another init has been creating a store next to {folder} for more than "
                                     f"{timeout:g} s ({LOCK_WAIT_SETTINGS}): try again once it is done") from None
                waited = True
                time.sleep(0.02)
        yield waited
    finally:
        os.close(fd)  # releases the lock


def _undo_init(folder: Path, state: dict[str, Any], made: list[Path]) -> None:
    """Remove what an init that did not finish created (``state``: the store it opened, the names of the
    files it created) and the folders it made, if nothing else was put in them meanwhile."""
    store = state.get("store")
    if store is not None:
        with contextlib.suppress(BaseException):
            store.close()
    for name in state["files"]:
        with contextlib.suppress(OSError):
            os.unlink(folder / name)
    for path in made:  # deepest first
        with contextlib.suppress(OSError):
            path.rmdir()


def _must_be_a_folder(folder: Path) -> None:
    """Raise :class:`StoreError` when ``folder`` exists but no folder can be made there: a file, or a symbolic
    link to a missing folder (its mkdir said only "File exists", as a StoreReadOnlyError)."""
    if not os.path.lexists(folder) or folder.is_dir():
        return
    if folder.is_symlink() and not folder.exists():
        raise StoreError(f"{folder} is a symbolic link to a missing folder ({os.readlink(folder)}): create that "
                         "folder first, or give another path")
    raise StoreError(f"{folder} is a file: a store is created in a folder (give a new or empty folder's path)")


def _lookable(folder: Path) -> None:
    """Raise :class:`NotAStoreError` where the OS refuses to look ``folder`` (or its database) up at all:
    a name too long (ENAMETOOLONG), a loop of links, a lookup the permissions stop; not where it is
    merely missing, which the caller words itself."""
    for target in (folder, folder / DB_NAME):
        try:
            os.stat(target)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            if exc.errno == errno.EACCES and target != folder:
                return  # the folder is there; a database this user may not read has its own message
            raise NotAStoreError(f"cannot use {folder} as a store folder: {exc.strerror}") from None
        except ValueError as exc:  # an embedded NUL
            raise NotAStoreError(f"cannot use {folder!r} as a store folder: {exc}") from None


def _readonly_connection(folder: Path, db_path: Path) -> sqlite3.Connection:
    """See :meth:`SqliteStore._connect_readonly`."""
    wal = db_path.with_name(db_path.name + "-wal")
    if os.access(folder, os.W_OK) and os.access(db_path, os.W_OK):
        conn = sqlite3.connect(db_path, isolation_level=None, timeout=5.0, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the -wal and -shm
        except sqlite3.Error as exc:
            # a full disk: SQLite cannot make the -shm index (SQLITE_IOERR_SHMSIZE) or a -wal. With no
            # commits in a -wal (none, or empty), the database file is the whole store: read it as an
            # immutable file. Any other error is the caller's, at its first query, as before.
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in (10, 13) or _wal_holds_frames(wal):
                return conn
            conn.close()
            return sqlite3.connect(db_path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True,
                                   isolation_level=None, timeout=5.0, check_same_thread=False)
        return conn
    mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
    uri = db_path.resolve().as_uri() + "?" + mode
    return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0, check_same_thread=False)


def _wal_holds_frames(wal: Path) -> bool:
    """Whether a ``-wal`` file may hold commits not in the database file (it exists and is not empty;
    when it cannot be looked at, assume it does)."""
    try:
        return wal.stat().st_size > 0
    except FileNotFoundError:
        return False
    except OSError:
        return True


def upgraded_copy(path: str | os.PathLike, into: str | os.PathLike, **kwargs: Any) -> "SqliteStore":
    """Open, read-only, an upgraded copy of the store at ``path`` (written by an older Sealbox)
    made in the empty folder ``into``; ``path`` itself is never written.

    The database is copied with SQLite's online backup (what a reader of ``path`` sees,
    committed WAL content included), with the verifier key (``log.vkey``) and the checkpoint
    file; never the signing key. The copy's pending migrations are then applied as a first
    writer would apply them to the original, so that the copy has the layout this Sealbox
    reads. Migrations add tables, indexes and columns derived from the events; they change
    no event, tree node, checkpoint or blob row, so what verify finds in the copy is what
    the original holds. The caller removes ``into`` when done.

    Raises:
        NotAStoreError, SchemaVersionError: as :meth:`SqliteStore.open` on ``path``.
        StoreError: the copy cannot be written.
    """
    import shutil

    src_folder, dst_folder = Path(path), Path(into)
    if not (src_folder / DB_NAME).is_file():
        raise NotAStoreError(f"{src_folder} is not a Sealbox store (no {DB_NAME})")
    _create_private(dst_folder / DB_NAME)  # the copy holds the store secret too
    try:
        source = _readonly_connection(src_folder, src_folder / DB_NAME)
        try:
            target = sqlite3.connect(dst_folder / DB_NAME)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        for name in (VKEY_NAME, CHECKPOINT_NAME):
            if (src_folder / name).is_file():
                shutil.copyfile(src_folder / name, dst_folder / name)
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"cannot copy {src_folder} to {dst_folder} to upgrade it: {exc}") from exc
    conn = sqlite3.connect(dst_folder / DB_NAME, isolation_level=None)
    findings = []
    try:
        # a table dropped below Sealbox: no migration recorded (each is then found applied, unrecorded)
        recorded = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        applied = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall()
                       if recorded.fetchone() else ())
        for mig in migrate.check_applied(applied, migrate.load_migrations("sqlite"), str(src_folder)):
            found = _apply_migration(conn, mig, str(src_folder), record_unrecorded=True)
            if found is not None:
                findings.append(f"the store's schema_migrations table lacks migration {mig.version} "
                                f"({mig.version:04d}_{mig.name}) but {found[1]}: its row was removed below Sealbox")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot upgrade the copy of {src_folder}: {exc}") from exc
    finally:
        conn.close()
    store = SqliteStore(dst_folder, readonly=True, **kwargs)
    store._schema_findings = tuple(findings)
    return store


def _existing_db_message(folder: Path) -> str:
    """Why ``init`` refuses a folder that holds a ``sealbox.db`` already: a Sealbox store, or a
    file that is not one (another file, another application's database), said as such."""
    import re

    if (folder / DB_NAME).is_dir():
        return (f"{folder} holds a directory named {DB_NAME} where the store's database file goes: init does not "
                "overwrite it (move it away, or create the store in another folder)")
    try:
        SqliteStore(folder, readonly=True).close()
    except NotAStoreError as exc:
        why = re.search(r"\(([^()]*)\)$", str(exc))
        return (f"{folder} already holds a file {DB_NAME} that is not a Sealbox store"
                f"{f' ({why.group(1)})' if why else ''}: init does not overwrite it "
                "(move it away, or create the store in another folder)")
    except Exception:  # noqa: BLE001 - a Sealbox store that cannot be opened now (newer, damaged, locked)
        pass
    return _existing_store_message(folder)


def _existing_store_message(folder: Path) -> str:
    return f"{folder} already holds a Sealbox store"


def _taken_message(folder: Path, waited: bool) -> str:
    """Why init refuses ``folder`` (:func:`_existing_db_message`), once no other init of it is under way;
    ``waited``: another init created its ``sealbox.db`` while this one ran (said when it is a store)."""
    message = _existing_db_message(folder)
    if waited and message == _existing_store_message(folder):
        message += " (another init created it meanwhile)"
    return message


#: What a write that waited its whole lock timeout says: the settings that change the wait (the open's ``lock_timeout``; ``SEALBOX_LOCK_TIMEOUT`` for the ``sealbox`` commands).
LOCK_WAIT_SETTINGS = "lock_timeout, SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands"


def _busy_text(path: Path) -> str:
    return f"{path / DB_NAME} stayed busy for too long: another writer holds it"


def _translate_write_error(path: Path, exc: sqlite3.Error, lock_timeout: float | None = None) -> Exception:
    msg = str(exc).lower()
    if "readonly" in msg or "read-only" in msg:
        return StoreReadOnlyError(f"cannot write to {path / DB_NAME}: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
        if lock_timeout is None:
            return StoreError(_busy_text(path))
        return StoreError(f"{_busy_text(path)} (the store's write lock stayed taken past the lock timeout, "
                          f"{lock_timeout:g} s: {LOCK_WAIT_SETTINGS})")
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == 10:  # SQLITE_IOERR: "disk I/O error" says too little
        return StoreError(f"cannot write to {path / DB_NAME}: {exc} ({getattr(exc, 'sqlite_errorname', 'SQLITE_IOERR')}: "
                          "the disk may be full, a file size limit reached, or the disk failing)")
    return StoreError(f"cannot write to {path / DB_NAME}: {exc}")


for _name in _TRACKED_READS:
    setattr(SqliteStore, _name, _tracked(getattr(SqliteStore, _name)))
del _name
