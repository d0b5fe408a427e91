"""The embedded store: one SQLite file in WAL mode, in a data folder.

Layout of a data folder::

    DIR/sealbox.db     events, tree nodes, checkpoints, runs, blobs (SQLite, WAL)
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
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sealbox import blobs as _blobs
from sealbox.errors import (
    BlobNotFoundError,
    NotAStoreError,
    SchemaVersionError,
    StoreError,
    StoreReadOnlyError,
)
from sealbox.events import SYSTEM_RUN_ID, Event, EventDraft
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, sign_checkpoint
from sealbox.store import migrate
from sealbox.store.base import (
    CheckpointPolicy,
    EventBuilder,
    StoredCheckpoint,
    fsync_write,
    hash_tag,
    utc_now,
)

__all__ = ["SqliteStore", "DB_NAME", "APPLICATION_ID"]

DB_NAME = "sealbox.db"
KEY_NAME = "log.key"
VKEY_NAME = "log.vkey"
CHECKPOINT_NAME = "checkpoint"
#: ``PRAGMA application_id`` of a Sealbox store: "SBOX".
APPLICATION_ID = 0x53424F58

_EVENT_COLS = "leaf_index, raw, leaf_hash"


class _Txn:
    """:class:`~sealbox.store.base.WriteTxn` over one SQLite connection.

    Run heads, the tree size and the tree nodes written in this transaction are
    cached, and event and node rows are buffered and inserted with one
    ``executemany`` each by :meth:`flush`, just before COMMIT.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._size: int | None = None
        self._heads: dict[str, tuple[int, bytes, str]] = {}
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._events: list[tuple] = []
        self._node_rows: list[tuple[int, int, bytes]] = []

    def run_head(self, run_id: str) -> tuple[int, bytes, str] | None:
        head = self._heads.get(run_id)
        if head is not None:
            return head
        row = self.conn.execute(
            "SELECT run_seq, leaf_hash, kind FROM events WHERE run_id = ? ORDER BY run_seq DESC LIMIT 1", (run_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def tree_size(self) -> int:
        if self._size is None:
            row = self.conn.execute("SELECT max(leaf_index) FROM events").fetchone()
            self._size = 0 if row[0] is None else row[0] + 1
        return self._size

    def get_node(self, level: int, index: int) -> bytes:
        cached = self._nodes.get((level, index))
        if cached is not None:
            return cached
        row = self.conn.execute("SELECT hash FROM tree_nodes WHERE level = ? AND idx = ?", (level, index)).fetchone()
        if row is None:
            raise StoreError(f"tree node ({level}, {index}) is missing: the store is damaged (run `sealbox verify`)")
        return row[0]

    def insert_event(self, row: tuple) -> None:
        self._events.append(row)
        self._heads[row[1]] = (row[2], row[-1], row[3])
        self._size = row[0] + 1

    def insert_nodes(self, rows: list[tuple[int, int, bytes]]) -> None:
        self._node_rows.extend(rows)
        for level, idx, h in rows:
            self._nodes[(level, idx)] = h

    def flush(self) -> None:
        """Insert the buffered event and node rows."""
        if self._events:
            self.conn.executemany(
                "INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, server, tool, call_id,"
                " effect, ok, tokens, cost, raw, leaf_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self._events,
            )
            self._events = []
        if self._node_rows:
            self.conn.executemany("INSERT INTO tree_nodes (level, idx, hash) VALUES (?, ?, ?)", self._node_rows)
            self._node_rows = []

    def put_blob(self, ref: str, salt: bytes, content: bytes) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO blobs (ref, salt, content, size) VALUES (?, ?, ?, ?)", (ref, salt, content, len(content))
        )

    def insert_run(self, row: tuple) -> None:
        self.conn.execute(
            "INSERT INTO runs (run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at, leaf_index)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )

    def latest_checkpoint_size(self) -> int:
        row = self.conn.execute("SELECT max(tree_size) FROM checkpoints").fetchone()
        return row[0] or 0


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def event_from_row(leaf_index: int, raw: bytes, leaf_hash: bytes) -> Event:
    """Build an :class:`Event` from stored columns (the envelope is parsed from ``raw``)."""
    env = json.loads(raw)
    return Event(
        leaf_index=leaf_index, leaf_hash=hash_tag(leaf_hash), raw=bytes(raw), v=env["v"],
        run_id=env["run_id"], run_seq=env["run_seq"], step=env["step"], kind=env["kind"], ts=env["ts"],
        principal=env["principal"], payload=env["payload"], prev=env["prev"],
    )


class SqliteStore:
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
        self.checkpoint_policy = checkpoint_policy or CheckpointPolicy()
        self.lock_timeout = lock_timeout
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._closed = False
        self._check_location(_create)
        try:
            self._open_checked()
        except BaseException:
            self._close_connections()  # never leave a half-open store (or its -wal/-shm) behind
            raise

    def _open_checked(self) -> None:
        self._migrate_and_check()
        meta = dict(self._conn().execute("SELECT key, value FROM store_meta").fetchall())
        self.origin: str = meta.get("origin", "")
        self.store_id: str = meta.get("store_id", "")
        self._secret: bytes = self._conn().execute("SELECT secret FROM store_secret WHERE id = 1").fetchone()[0]
        from sealbox.redaction import ContentPolicy

        self.content = ContentPolicy.from_dict(json.loads(meta["content"])) if "content" in meta else ContentPolicy()
        self._builder = EventBuilder(self._secret, content=self.content)
        self.redactor = self._builder.redactor
        self._signer: Signer | None = None
        if not self.readonly:
            self._signer = self._load_signer()
        self._floor = self.checkpoint_file_size()
        latest = self.latest_checkpoint()
        self._last_ckpt_size = latest.tree_size if latest else 0
        self._last_ckpt_time = time.monotonic()
        if not self.readonly:
            _remove_stale_temp_files(self.path)

    # ----------------------------------------------------------------- opening

    @classmethod
    def init(cls, path: str | os.PathLike, *, origin: str | None = None, content: Any = None,
             **kwargs: Any) -> "SqliteStore":
        """Create a new store in ``path`` (created if missing) and sign its first checkpoint.

        Writes the signing key to ``path/log.key`` (mode 0600) and the verifier
        key to ``path/log.vkey``; the system run is started.

        Args:
            origin: the log's origin (its checkpoint key's name).
            content: a :class:`~sealbox.redaction.ContentPolicy` (default: mode
                ``redacted`` with the default keys and patterns).

        Raises:
            StoreError: a store already exists there.
            StoreReadOnlyError: the folder cannot be written.
        """
        folder = Path(path)
        if (folder / DB_NAME).exists():
            raise StoreError(f"{folder} already holds a Sealbox store")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreReadOnlyError(f"cannot create {folder}: {exc.strerror}") from exc
        _require_writable(folder)
        store_id = os.urandom(8).hex()
        origin = origin or f"sealbox.local/{store_id}"
        skey, vkey = generate_key(origin)
        _write_private(folder / KEY_NAME, skey + "\n")
        fsync_write(folder / VKEY_NAME, (vkey + "\n").encode())
        store = cls(folder, _create=True, **kwargs)
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
            "agent": "sealbox", "snapshot": None, "parent_run_id": None, "labels": {"system": "true"},
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
        if not self.path.is_dir():
            if self.path.exists():
                raise NotAStoreError(f"{self.path} is not a Sealbox store (it is a file; give the store's folder)")
            raise NotAStoreError(f"{self.path} does not exist (create a store with `sealbox init {self.path}`)")
        if not create and not self.db_path.is_file():
            raise NotAStoreError(f"{self.path} is not a Sealbox store (no {DB_NAME}; create one with `sealbox init`)")
        if not self.readonly:
            _require_writable(self.path)

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.readonly:
                conn = self._connect_readonly()
            else:
                conn = sqlite3.connect(self.db_path, isolation_level=None, timeout=5.0, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 5000")
            if not self.readonly:
                conn.execute(f"PRAGMA synchronous = {'FULL' if self.durability == 'full' else 'NORMAL'}")
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
        wal = self.db_path.with_name(self.db_path.name + "-wal")
        if os.access(self.path, os.W_OK) and os.access(self.db_path, os.W_OK):
            conn = sqlite3.connect(self.db_path, isolation_level=None, timeout=5.0, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            return conn
        mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
        uri = self.db_path.resolve().as_uri() + "?" + mode
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0, check_same_thread=False)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError("the store is closed")
            conn = self._connect()
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _migrate_and_check(self) -> None:
        conn = self._conn()
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise _translate_open_error(self.path, exc) from exc
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise NotAStoreError(f"{self.db_path} is not a Sealbox store (it is some other SQLite database)")
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
            raise SchemaVersionError(f"{self.path} needs migrations {[m.version for m in pending]}; open it for writing once")
        for mig in pending:
            self._apply(conn, mig)

    def _apply(self, conn: sqlite3.Connection, mig: migrate.Migration) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                " checksum TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            for statement in _split_sql(mig.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
                (mig.version, mig.name, mig.checksum, utc_now()),
            )
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            if mig.version == 1:
                conn.execute("INSERT INTO store_secret (id, secret) VALUES (1, ?)", (os.urandom(32),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

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
        return Signer.from_key(text)

    # ----------------------------------------------------------------- writing

    def _write(self, fn: Callable[[_Txn], Any], sync: bool = True) -> Any:
        if self.readonly:
            raise StoreReadOnlyError(f"{self.path} was opened read-only")
        conn = self._conn()
        if not sync and self.durability == "full":
            conn.execute("PRAGMA synchronous = NORMAL")
            try:
                return self._write_txn(conn, fn)
            finally:
                conn.execute("PRAGMA synchronous = FULL")
        return self._write_txn(conn, fn)

    def _write_txn(self, conn: sqlite3.Connection, fn: Callable[[_Txn], Any]) -> Any:
        self._begin(conn)
        try:
            txn = _Txn(conn)
            result = fn(txn)
            txn.flush()
            self._commit(conn)
            return result
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise _translate_write_error(self.path, exc) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _retrying(self, conn: sqlite3.Connection, sql: str) -> None:
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        while True:
            try:
                conn.execute(sql)
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise _translate_write_error(self.path, exc) from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.05)

    def _begin(self, conn: sqlite3.Connection) -> None:
        self._retrying(conn, "BEGIN IMMEDIATE")

    def _commit(self, conn: sqlite3.Connection) -> None:
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
        processes are doing.
        """
        def work(txn: _Txn) -> list[Event]:
            drafts = list(build(Reader(txn.conn)))
            return self._builder.build(drafts, txn, self._floor)

        events = self._write(work, sync=sync)
        if events:
            self._maybe_checkpoint(events[-1].leaf_index + 1)
        return events

    def _maybe_checkpoint(self, size: int) -> None:
        pol = self.checkpoint_policy
        due = size - self._last_ckpt_size >= pol.every_events or (
            size > self._last_ckpt_size and time.monotonic() - self._last_ckpt_time >= pol.every_seconds
        )
        if due:
            self.issue_checkpoint()

    def issue_checkpoint(self) -> StoredCheckpoint:
        """Sign a checkpoint of the whole log, store it, and write ``DIR/checkpoint``.

        The commit that stores it is fsync'd even in fast mode, making every
        earlier commit durable first. Before signing, the new root is checked to
        be consistent with the previous checkpoint (C2SP tlog-checkpoint: a log
        must never sign two inconsistent checkpoints).

        Returns:
            The new checkpoint, or the newest one if no event arrived since.
        """
        if self._signer is None:
            raise StoreReadOnlyError("this store was opened without its signing key")
        with self._ckpt_lock:
            conn = self._conn()
            if self.durability == "fast":
                conn.execute("PRAGMA synchronous = FULL")
            try:
                cp = self._write(self._sign_in_txn)
            finally:
                if self.durability == "fast":
                    conn.execute("PRAGMA synchronous = NORMAL")
            if cp.tree_size > self.checkpoint_file_size():
                fsync_write(self.path / CHECKPOINT_NAME, cp.note.encode("utf-8"))
            self._floor = max(self._floor, cp.tree_size)
            self._last_ckpt_size, self._last_ckpt_time = cp.tree_size, time.monotonic()
            return cp

    def _sign_in_txn(self, txn: _Txn) -> StoredCheckpoint:
        size = txn.tree_size()
        row = txn.conn.execute(
            "SELECT tree_size, root_hash, note, created_at FROM checkpoints ORDER BY tree_size DESC, id DESC LIMIT 1"
        ).fetchone()
        if row is not None and row[0] == size:
            return StoredCheckpoint(row[0], row[1], row[2], row[3])
        root = merkle.root_at(size, txn.get_node)
        if row is not None and row[0] > 0:
            proof = merkle.consistency_proof(row[0], size, txn.get_node)
            merkle.verify_consistency(row[0], size, proof, row[1], root)
        note = sign_checkpoint(Checkpoint(self.origin, size, root), self._signer)
        now = utc_now()
        txn.conn.execute(
            "INSERT INTO checkpoints (tree_size, root_hash, note, created_at) VALUES (?, ?, ?, ?)", (size, root, note, now)
        )
        return StoredCheckpoint(size, root, note, now)

    # ----------------------------------------------------------------- reading

    @contextlib.contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Every read in this thread inside the block sees one consistent snapshot
        (one SQLite read transaction), whatever writers do meanwhile."""
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
        """A :class:`Reader` outside any write transaction (for listings)."""
        return Reader(self._conn())

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
        columns = (run_id, run_seq, kind, ts, principal, step, server, tool, call_id, effect, ok, tokens, cost)."""
        last = -1
        conn = self._conn()
        while True:
            rows = conn.execute(
                "SELECT leaf_index, raw, leaf_hash, run_id, run_seq, kind, ts, principal, step, server, tool, call_id,"
                " effect, ok, tokens, cost FROM events WHERE leaf_index > ? ORDER BY leaf_index LIMIT ?",
                (last, batch),
            ).fetchall()
            rows = [(r[0], r[1], r[2], r[3:]) for r in rows]
            if not rows:
                return
            yield from rows
            last = rows[-1][0]

    def iter_nodes(self) -> Iterator[tuple[int, int, bytes]]:
        """Every stored tree node (level, idx, hash)."""
        yield from self._conn().execute("SELECT level, idx, hash FROM tree_nodes ORDER BY level, idx")

    def iter_level(self, level: int) -> Iterator[tuple[int, bytes]]:
        """The stored nodes (idx, hash) of one tree level, in index order."""
        yield from self._conn().execute("SELECT idx, hash FROM tree_nodes WHERE level = ? ORDER BY idx", (level,))

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
        return [StoredCheckpoint(r[0], bytes(r[1]), r[2], r[3]) for r in rows]

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        """The checkpoint with the largest tree size, or None."""
        row = self._conn().execute(
            "SELECT tree_size, root_hash, note, created_at FROM checkpoints ORDER BY tree_size DESC, id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else StoredCheckpoint(row[0], bytes(row[1]), row[2], row[3])

    def checkpoint_file_note(self) -> str | None:
        """Text of ``DIR/checkpoint`` (the newest checkpoint signed by any writer), or None."""
        try:
            return (self.path / CHECKPOINT_NAME).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def checkpoint_file_size(self) -> int:
        """Tree size in ``DIR/checkpoint``, 0 when absent or unreadable (verify reports the latter)."""
        note = self.checkpoint_file_note()
        if not note:
            return 0
        try:
            return Checkpoint.parse(note.split("\n\n", 1)[0] + "\n").size
        except Exception:  # noqa: BLE001 - a damaged file is reported by verify, not here
            return 0

    def pinned_vkey(self) -> str | None:
        """The verifier key pinned at ``init`` (``DIR/log.vkey``), or None."""
        try:
            return (self.path / VKEY_NAME).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None

    def get_blob(self, ref: str) -> bytes:
        """The canonical content bytes of blob ``ref``.

        Raises:
            BlobNotFoundError: no such blob, or its content was erased.
        """
        row = self._conn().execute("SELECT content FROM blobs WHERE ref = ?", (ref,)).fetchone()
        if row is None or row[0] is None:
            raise BlobNotFoundError(f"blob {ref} is not in the store" if row is None else f"blob {ref} was erased")
        return bytes(row[0])

    def iter_blobs(self) -> Iterator[tuple[str, bytes | None, bytes | None]]:
        """Every blob row (ref, salt, content); salt and content are None once erased."""
        for ref, salt, content in self._conn().execute("SELECT ref, salt, content FROM blobs ORDER BY ref"):
            yield ref, None if salt is None else bytes(salt), None if content is None else bytes(content)

    def resolve(self, value: Any) -> Any:
        """Replace every ``{"$blob": ...}`` in ``value`` by the content it commits to."""
        return _blobs.resolve(value, self.get_blob)

    def runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs, newest first: run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at, last_kind, events."""
        sql = (
            "SELECT r.run_id, r.agent, r.principal, r.parent_run_id, r.replay_of, r.snapshot, r.started_at,"
            " (SELECT kind FROM events e WHERE e.run_id = r.run_id ORDER BY run_seq DESC LIMIT 1),"
            " (SELECT max(run_seq) FROM events e WHERE e.run_id = r.run_id)"
            " FROM runs r ORDER BY r.started_at DESC, r.leaf_index DESC"
        )
        if limit:
            sql += f" LIMIT {int(limit)}"
        keys = ("run_id", "agent", "principal", "parent_run_id", "replay_of", "snapshot", "started_at", "last_kind", "events")
        return [dict(zip(keys, row)) for row in self._conn().execute(sql)]

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
        """
        fp = fingerprint if fingerprint.startswith("sha256:") else "sha256:" + fingerprint
        rows = self._conn().execute(
            "SELECT fingerprint, content FROM snapshots WHERE fingerprint >= ? AND fingerprint < ? LIMIT 2",
            (fp, fp + "g")).fetchall() if len(fp) >= 15 else []
        if len(rows) != 1:
            raise StoreError(f"no snapshot {fingerprint!r} in this store" if not rows else f"snapshot prefix {fingerprint!r} is ambiguous")
        return json.loads(rows[0][1])

    def iter_snapshots(self) -> Iterator[tuple[str, bytes]]:
        """Every stored snapshot (fingerprint, canonical bytes)."""
        for fp, content in self._conn().execute("SELECT fingerprint, content FROM snapshots ORDER BY fingerprint"):
            yield fp, bytes(content)

    # ----------------------------------------------------------------- queries

    def query_calls(self, *, tool: str | None = None, server: str | None = None, run_id: str | None = None,
                    agent: str | None = None, principal: str | None = None, since: Any = None, until: Any = None,
                    decision: str | None = None, error: bool | None = None, match: Any = None,
                    limit: int | None = None) -> list[dict[str, Any]]:
        """Every tool call across runs that passes all the filters given, one row per call, oldest
        first (log order: ``ts`` is taken inside the write transaction, so it ascends with it).

        Indexed filters run in SQL ("every call to tool X" uses ``events_tool``);
        glob confirmation and ``match`` run in Python on the candidates
        (:mod:`sealbox.query`), so their semantics are the same on every backend.

        Args:
            tool, server: glob (:func:`fnmatch.fnmatchcase`) on the upstream tool / server name.
            run_id, agent, principal: exact values (principal of the ``tool.call`` event).
            since, until: RFC 3339, a date, or a duration back from now (``2h``, ``30d``);
                ``since`` inclusive, ``until`` exclusive.
            decision: ``allow``, ``deny`` or ``require_approval`` (the call's policy decision).
            error: True: only calls whose ``tool.result`` has ok false; False: only calls
                that ran and succeeded (calls without a result pass neither).
            match: ``field.path~regex`` strings or ``(field_path, regex)`` pairs, all of which
                must match (Python :mod:`re`, searched in the resolved value; see :func:`sealbox.query.parse_match`).
            limit: at most this many rows: the newest ones (still returned oldest first).

        Returns:
            Dicts with the keys of :data:`sealbox.query.CALL_COLUMNS` (arguments resolved from blobs).

        Raises:
            ConfigError: a bad time, decision or match expression.
        """
        from sealbox.query import call_row, glob_match

        sql, params, globs, matches = _calls_query(tool=tool, server=server, run_id=run_id, agent=agent,
                                                   principal=principal, since=since, until=until, decision=decision,
                                                   error=error, match=match)
        with_result = any(m.root == "result" for m in matches)
        check = bool(globs or matches)
        rows: list[dict[str, Any]] = []
        cursor = self._conn().execute(sql, params)
        try:
            for rec in cursor:
                row = call_row(rec, self._content)
                if check:
                    if with_result:
                        row["result"] = self._content(rec[-1])
                    if not (all(glob_match(p, row[c]) for c, p in globs) and all(m.test(row) for m in matches)):
                        continue
                    row.pop("result", None)
                rows.append(row)
                if limit is not None and len(rows) >= limit:
                    break
        finally:
            cursor.close()
        rows.reverse()
        return rows

    def explain_query_calls(self, **filters: Any) -> list[str]:
        """SQLite's ``EXPLAIN QUERY PLAN`` lines for :meth:`query_calls` with these filters
        (e.g. ``["SEARCH c USING INDEX events_tool (tool=? AND kind=?)", ...]``)."""
        filters.pop("limit", None)
        sql, params, _, _ = _calls_query(**filters)
        return [row[3] for row in self._conn().execute("EXPLAIN QUERY PLAN " + sql, params)]

    def _content(self, text: str | None) -> Any:
        """A JSON text from the payload, parsed, its blob references resolved (only parsed when it has none)."""
        if text is None:
            return None
        value = json.loads(text)
        return self._resolve_quietly(value) if '"$blob"' in text else value

    def _resolve_quietly(self, value: Any) -> Any:
        """:meth:`resolve`, keeping the references where a blob was erased."""
        try:
            return self.resolve(value)
        except BlobNotFoundError:
            return value

    def query_runs(self, *, agent: str | None = None, principal: str | None = None, status: str | None = None,
                   since: Any = None, until: Any = None, snapshot: str | None = None,
                   labels: Any = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs passing every filter given, newest first.

        Args:
            agent, principal: exact values.
            status: ``running``, ``suspended``, ``ended``, or how it ended: ``ok``, ``error``, ``cancelled``.
            since, until: bounds on ``started_at`` (as in :meth:`query_calls`).
            snapshot: a snapshot fingerprint or a prefix of it (``sha256:`` optional).
            labels: ``{"k": "v"}`` or ``["k=v", ...]``; every label must be present with that value.
            limit: at most this many runs (the newest).

        Returns:
            Dicts: run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at,
            labels, status, ending (ok / error / cancelled, or None), ended_at, last_kind, events.

        Raises:
            ConfigError: a bad status, time or label.
        """
        from sealbox import query as q

        q.check_choice("status", status, q.RUN_STATUSES)
        wanted = q.parse_labels(labels)
        where, params = ["1"], []
        for sql, value in (("r.agent = ?", agent), ("r.principal = ?", principal)):
            if value is not None:
                where.append(sql)
                params.append(value)
        if since is not None:
            where.append("r.started_at >= ?")
            params.append(q.parse_time(since, name="since"))
        if until is not None:
            where.append("r.started_at < ?")
            params.append(q.parse_time(until, name="until"))
        if snapshot is not None:
            fp = snapshot if snapshot.startswith("sha256:") else "sha256:" + snapshot
            where.append("r.snapshot >= ? AND r.snapshot < ?")
            params += [fp, fp + "\U0010ffff"]
        if status in ("running", "suspended", "ended", "ok", "error", "cancelled"):
            where.append({"running": "l.kind NOT IN ('run.ended', 'run.suspended')",
                          "suspended": "l.kind = 'run.suspended'"}.get(status, "l.kind = 'run.ended'"))
        out: list[dict[str, Any]] = []
        cursor = self._conn().execute(_RUNS_SQL.format(where=" AND ".join(where)), params)
        try:
            for rec in cursor:
                row = _run_row(rec)
                if (status is None or q.status_matches(status, row["status"], row["ending"])) and all(
                        row["labels"].get(k) == v for k, v in wanted.items()):
                    out.append(row)
                    if limit is not None and len(out) >= limit:
                        break
        finally:
            cursor.close()
        return out

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """One run as a :meth:`query_runs` row, plus ``children`` (rows of the runs naming it as parent), or None."""
        recs = self._conn().execute(_RUNS_SQL.format(where="r.run_id = ?"), (run_id,)).fetchall()
        if not recs:
            return None
        run = _run_row(recs[0])
        kids = self._conn().execute(_RUNS_SQL.format(where="r.parent_run_id = ?"), (run_id,)).fetchall()
        run["children"] = [_run_row(k) for k in reversed(kids)]
        return run

    def optimize(self) -> None:
        """Keep the query planner's statistics current (``PRAGMA optimize``, or a
        first ``ANALYZE`` when there are none yet), bounded by ``analysis_limit``.

        Called by :meth:`close` on a writable store (LESSONS: a store that never
        gathers statistics lets SQLite pick the wrong index). It takes the write
        lock like any write, retrying while another writer holds it; statistics
        are an optimisation, so a failure here never fails :meth:`close`.
        """
        if self.readonly:
            return

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
        """Sign a final checkpoint if events arrived since the last one, then close every connection."""
        if self._closed:
            return
        try:
            if self._signer is not None and self.size() > self._last_ckpt_size:
                self.issue_checkpoint()
            self.optimize()
        finally:
            self._closed = True
            self._close_connections()

    def _close_connections(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._conns.clear()

    def __enter__(self) -> "SqliteStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Reader:
    """Read-only queries inside a write transaction (see :meth:`SqliteStore.append_with`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a ``SELECT count(...)``-style query returning one number."""
        row = self.conn.execute(sql, tuple(params)).fetchone()
        return 0 if row is None or row[0] is None else row[0]

    def events(self, kinds: Sequence[str], *, run_id: str | None = None, principal: str | None = None,
               field: tuple[str, str] | None = None, limit: int | None = None) -> list[Event]:
        """Events of the given kinds, in log order, optionally of one run, one principal, or
        whose payload field ``field[0]`` equals the string ``field[1]``.

        Used by approvals and identities to read what they check inside the write
        transaction that records their answer (indexed by kind or by run and kind).
        """
        where = [f"kind IN ({', '.join('?' * len(kinds))})"]
        params: list[Any] = list(kinds)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        if field is not None:
            if not field[0].isidentifier():
                raise ValueError(f"not a payload field name: {field[0]!r}")
            where.append(f"CAST(raw AS TEXT) ->> '$.payload.{field[0]}' = ?")
            params.append(field[1])
        sql = f"SELECT {_EVENT_COLS} FROM events WHERE {' AND '.join(where)} ORDER BY leaf_index"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [event_from_row(*r) for r in self.conn.execute(sql, params).fetchall()]

    def size(self) -> int:
        """Number of events in the log (the leaf index the next event will get)."""
        return _Txn(self.conn).tree_size()

    def usage(self, *, run_id: str, agent: str, server: str, tool: str, since_minute: str, day_start: str,
              needed: set[str]) -> dict[str, int | float]:
        """Counters for limits, read inside the write transaction (indexed queries).

        Calls counted are tool calls whose decision was not a deny (they ran, or
        went to approval). Tokens and cost come from ``model.call`` events.

        Args:
            since_minute: RFC 3339 time 60 s before now (sliding window start).
            day_start: RFC 3339 start of the current UTC day.
            needed: which counters to compute (names as in ``CallContext.usage``).
        """
        out: dict[str, int | float] = {}
        q = self.conn.execute
        if "tool_calls_run" in needed:
            out["tool_calls_run"] = q("SELECT count(*) FROM events WHERE run_id = ? AND kind = 'policy.decision'"
                                      " AND effect != 'deny'", (run_id,)).fetchone()[0]
        if "calls_minute_agent" in needed:
            out["calls_minute_agent"] = q(
                "SELECT count(*) FROM events e JOIN runs r ON r.run_id = e.run_id WHERE e.kind = 'policy.decision'"
                " AND e.ts >= ? AND e.effect != 'deny' AND r.agent = ?", (since_minute, agent)).fetchone()[0]
        if "calls_minute_tool" in needed:
            out["calls_minute_tool"] = q(
                "SELECT count(*) FROM events WHERE kind = 'policy.decision' AND ts >= ? AND effect != 'deny'"
                " AND server = ? AND tool = ?", (since_minute, server, tool)).fetchone()[0]
        if needed & {"tokens_run", "cost_run"}:
            tokens, cost = q("SELECT sum(tokens), sum(cost) FROM events WHERE run_id = ? AND kind = 'model.call'",
                             (run_id,)).fetchone()
            out["tokens_run"], out["cost_run"] = tokens or 0, cost or 0.0
        if needed & {"tokens_day", "cost_day"}:
            tokens, cost = q("SELECT sum(tokens), sum(cost) FROM events WHERE kind = 'model.call' AND ts >= ?",
                             (day_start,)).fetchone()
            out["tokens_day"], out["cost_day"] = tokens or 0, cost or 0.0
        return out


# One row per tool call, newest first in log order (the order the store
# committed them: ts is taken inside the write transaction, so it ascends with
# leaf_index). The call's decision and result are the first event of each kind
# after it with the same (run_id, call_id). Fast path: the recorder and the
# gateway commit a call and its decision in one transaction, so the decision
# is nearly always the very next leaf, and with one writer the result the one
# after; COALESCE evaluates the general lookup (events_call) only when the
# fast path finds nothing. ORDER BY leaf_index is the order events_tool,
# events_server_tool and events_run_kind already deliver (no sort, and a
# LIMIT stops early); checked by tests/query/test_query_plan.py.
_NEXT = """COALESCE(
    (SELECT e.leaf_index FROM events e WHERE e.leaf_index = c.leaf_index + {offset} AND e.call_id = c.call_id
     AND e.run_id = c.run_id AND e.kind = '{kind}'),
    (SELECT min(e.leaf_index) FROM events e WHERE e.call_id = c.call_id AND e.run_id = c.run_id
     AND e.kind = '{kind}' AND e.leaf_index > c.leaf_index))"""
_CALLS_SQL = """
SELECT c.ts, c.run_id, r.agent, c.principal, c.step, c.call_id, c.server, c.tool,
       CAST(c.raw AS TEXT) ->> '$.payload.exposed', CAST(c.raw AS TEXT) ->> '$.payload.grant',
       CAST(c.raw AS TEXT) -> '$.payload.arguments',
       d.effect, CAST(d.raw AS TEXT) ->> '$.payload.rule', CAST(d.raw AS TEXT) ->> '$.payload.reason_code', NULL,
       x.ok, CAST(x.raw AS TEXT) -> '$.payload.error', CAST(x.raw AS TEXT) ->> '$.payload.duration_us', {result}
FROM events c
LEFT JOIN runs r ON r.run_id = c.run_id
LEFT JOIN events d ON d.leaf_index = %s
LEFT JOIN events x ON x.leaf_index = %s
WHERE {where}
ORDER BY c.leaf_index DESC
""" % (_NEXT.format(offset=1, kind="policy.decision").replace("{", "{{").replace("}", "}}"),
       _NEXT.format(offset=2, kind="tool.result").replace("{", "{{").replace("}", "}}"))

_RUNS_SQL = """
SELECT r.run_id, r.agent, r.principal, r.parent_run_id, r.replay_of, r.snapshot, r.started_at,
       CAST(s.raw AS TEXT) -> '$.payload.labels', l.kind, l.ts, l.run_seq,
       CASE WHEN l.kind = 'run.ended' THEN CAST(l.raw AS TEXT) ->> '$.payload.status' END
FROM runs r
JOIN events s ON s.leaf_index = r.leaf_index
JOIN events l ON l.run_id = r.run_id AND l.run_seq = (SELECT max(run_seq) FROM events WHERE run_id = r.run_id)
WHERE {where}
ORDER BY r.started_at DESC, r.leaf_index DESC
"""


def _calls_query(*, tool: str | None = None, server: str | None = None, run_id: str | None = None,
                 agent: str | None = None, principal: str | None = None, since: Any = None, until: Any = None,
                 decision: str | None = None, error: bool | None = None, match: Any = None) -> tuple:
    """(sql, params, globs left to confirm, compiled matches) for :meth:`SqliteStore.query_calls`."""
    from sealbox import query as q

    q.check_choice("decision", decision, q.DECISIONS)
    matches = q.compile_matches(match)
    where, params, globs = ["c.kind = 'tool.call'"], [], []
    for col, pattern in (("tool", tool), ("server", server)):
        if pattern is not None:
            globs += _glob_terms(col, pattern, where, params)
    for sql, value in (("c.run_id = ?", run_id), ("r.agent = ?", agent), ("c.principal = ?", principal),
                       ("d.effect = ?", decision)):
        if value is not None:
            where.append(sql)
            params.append(value)
    for sql, value, name in (("c.ts >= ?", since, "since"), ("c.ts < ?", until, "until")):
        if value is not None:
            where.append(sql)
            params.append(q.parse_time(value, name=name))
    if error is not None:
        where.append("x.ok = ?")
        params.append(0 if error else 1)
    with_result = any(m.root == "result" for m in matches)
    sql = _CALLS_SQL.format(result="CAST(x.raw AS TEXT) -> '$.payload.result'" if with_result else "NULL",
                            where=" AND ".join(where))
    return sql, params, globs, matches


def _glob_terms(col: str, pattern: str, where: list[str], params: list[Any]) -> list[tuple[str, str]]:
    """SQL terms narrowing ``col`` to ``pattern`` (an index range on its literal prefix);
    returns the (column, glob) pairs left to confirm in Python."""
    from sealbox.query import glob_literal_prefix, prefix_upper_bound

    prefix, exact = glob_literal_prefix(pattern)
    if exact:
        where.append(f"c.{col} = ?")
        params.append(pattern)
        return []
    where.append(f"c.{col} >= ?")
    params.append(prefix)
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        where.append(f"c.{col} < ?")
        params.append(upper)
    return [(col, pattern)]


def _run_row(rec: tuple) -> dict[str, Any]:
    from sealbox.query import run_status

    (run_id, agent, principal, parent, replay_of, snapshot, started_at, labels, last_kind, last_ts, events,
     ending) = rec
    status = run_status(last_kind)
    return {"run_id": run_id, "agent": agent, "principal": principal, "parent_run_id": parent,
            "replay_of": replay_of, "snapshot": snapshot, "started_at": started_at,
            "labels": json.loads(labels) if labels else {}, "status": status, "ending": ending,
            "ended_at": last_ts if status == "ended" else None, "last_kind": last_kind, "events": events}


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
    """Remove ``checkpoint.tmp.<pid>`` files left by a writer that was killed mid-write."""
    for tmp in folder.glob(f"{CHECKPOINT_NAME}.tmp.*"):
        try:
            pid = int(tmp.name.rsplit(".", 1)[1])
            os.kill(pid, 0)  # still alive: leave it
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, PermissionError, OSError):
            continue


def _require_writable(folder: Path) -> None:
    probe = folder / f".sealbox-write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StoreReadOnlyError(f"cannot write to {folder}: {exc.strerror or exc}") from exc


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _translate_open_error(path: Path, exc: sqlite3.DatabaseError) -> Exception:
    msg = str(exc).lower()
    if "not a database" in msg or "malformed" in msg or "file is encrypted" in msg:
        return NotAStoreError(f"{path / DB_NAME} is not a Sealbox store (not an SQLite database)")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return StoreReadOnlyError(f"cannot open {path / DB_NAME} for writing: {exc}")
    return StoreError(f"cannot open {path / DB_NAME}: {exc}")


def _translate_write_error(path: Path, exc: sqlite3.Error) -> Exception:
    msg = str(exc).lower()
    if "readonly" in msg or "read-only" in msg:
        return StoreReadOnlyError(f"cannot write to {path / DB_NAME}: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
        return StoreError(f"{path / DB_NAME} stayed busy for too long: another writer holds it")
    return StoreError(f"cannot write to {path / DB_NAME}: {exc}")
