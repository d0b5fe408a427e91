"""The PostgreSQL store: the same ledger as the SQLite store, in a schema of a PostgreSQL database.

Layout: a PostgreSQL store is still a folder, holding what must not live in the database::

    DIR/postgres.json  {"backend": "postgres", "url": ..., "schema": ...} (mode 0600: the URL may hold a password)
    DIR/log.key        the log's Ed25519 signing key (C2SP signer key, mode 0600)
    DIR/log.vkey       the verifier key pinned at ``init``
    DIR/store.secret   the store secret (hex, mode 0600): the HMAC key of redaction markers and blob salts
    DIR/checkpoint     the newest signed checkpoint, written after each is issued

The events, tree nodes, checkpoints, runs, blobs and snapshots live in the schema named by
``postgres.json`` (tables created by ``store/migrations/postgres``, recorded with their checksums
in ``schema_migrations``). A dump of the database therefore lets nobody sign a checkpoint or test
guesses of a redacted value: the signing key and the secret are only in the folder.

The bytes hashed, the leaf hashes, the tree and the signed checkpoints are made by the code the
SQLite store uses (:class:`~sealbox.store.base.EventBuilder`, :mod:`sealbox.ledger`), so the
same drafts give the same events whichever backend holds them.

Durability: every connection runs with ``synchronous_commit = on``: a returned append is in the
server's fsync'd WAL (an append made with ``sync=False``, a tool's result, uses ``off`` for its
own commit, as the SQLite store skips that fsync). Concurrency: every thread has its own
connection; every write transaction first takes a transaction-scoped advisory lock
(``pg_advisory_xact_lock``) keyed by the schema, so writers of every process serialise there
and then read the newest committed state (READ COMMITTED); a serialization failure or deadlock
is retried. Appends to a store whose log holds fewer events than its newest signed checkpoint
(the ``checkpoint`` file or a stored one) are refused, as on SQLite.

Approvals and identities keep no tables of their own (their events are in the log, read through
the store's queries: migration 0002's ``events_approval`` index), and the gateway and policy worker
use the store's API: all run on PostgreSQL as on SQLite. Access grants (:mod:`sealbox.access`) run
on both: their credentials table and index are migration 0003, rotated credentials migration 0004. Not offered yet on PostgreSQL (raises
:class:`~sealbox.errors.BackendUnsupportedError` naming the operation): ``explain_query_calls``
(SQLite's query plans). See docs/storage.md, "PostgreSQL".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import select
import threading
import time
import uuid
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sealbox import blobs as _blobs
from sealbox.errors import (
    BackendUnsupportedError,
    ConfigError,
    NotAStoreError,
    SchemaVersionError,
    SealboxError,
    StoreBusyError,
    StoreError,
    StoreReadOnlyError,
)
from sealbox.events import SYSTEM_RUN_ID, Event, EventDraft
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, generate_key
from sealbox.store import migrate
from sealbox.store import sqlite as _sq
from sealbox.store.base import CheckpointPolicy, EventBuilder, StoreConfigError, StoredCheckpoint, fsync_write, utc_now
from sealbox.store.sqlite_queries import (_CALL_KINDS, _LIFECYCLE, DamagedEventError, Reader, SqliteQueries,
                                          event_from_row)

__all__ = ["PostgresStore", "CONFIG_NAME", "SECRET_NAME", "is_postgres_folder", "test_factory"]

CONFIG_NAME = "postgres.json"
SECRET_NAME = "store.secret"
KEY_NAME, VKEY_NAME, CHECKPOINT_NAME = _sq.KEY_NAME, _sq.VKEY_NAME, _sq.CHECKPOINT_NAME
STORED_NODE_LEVEL = _sq.STORED_NODE_LEVEL
#: Times a write transaction is tried again after a serialization failure or a deadlock.
WRITE_RETRIES = 8

_log = logging.getLogger("sealbox.store")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_EVENT_COLS = "leaf_index, raw, leaf_hash"
_ROWS_SQL = ("SELECT leaf_index, raw, leaf_hash, run_id, run_seq, kind, ts, principal, step, server, tool,"
             " call_id, effect, ok, tokens, cost, rule, reason_code, duration_us FROM events"
             " WHERE leaf_index > %s ORDER BY leaf_index LIMIT %s")
_LATEST_SQL = "SELECT tree_size, root_hash, note, created_at FROM checkpoints ORDER BY tree_size DESC, id DESC LIMIT 1"
#: The append-only triggers migration 0001 creates (verify reports one that is missing).
EXPECTED_TRIGGERS = frozenset({
    "events_append_only", "events_no_truncate", "tree_append_only", "tree_no_truncate",
    "checkpoints_append_only", "checkpoints_no_truncate", "runs_append_only", "runs_no_truncate",
    "snapshots_append_only", "snapshots_no_truncate", "blobs_erase_only", "blobs_no_delete", "blobs_no_truncate",
    "credentials_no_update",  # migration 0003: a credential is written once, then only deleted
    "credential_rotations_no_update",  # migration 0004: a rotated credential is appended, then only deleted
})


#: Functions the store's queries call by name (with their argument types): ``sealbox_approval_id`` is the
#: ``events_approval`` index key (migration 0002), ``sealbox_grant_id`` the ``events_access_grant`` one (migration
#: 0003, read by :mod:`sealbox.access`). A schema without one was changed below Sealbox.
_QUERY_FUNCTIONS = ("sealbox_approval_id(bytea)", "sealbox_grant_id(bytea)")


#: How far (seconds) the last event's ``ts`` may be ahead of the server's clock and still be followed
#: (:meth:`_PgTxn.stamp`): further ahead, following it would stamp every later event with that time.
MAX_TS_AHEAD_S = 60.0
_TS_FORMAT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _trigger_functions() -> dict[str, str]:
    """name -> body (whitespace squashed) of the trigger functions the migrations create."""
    out: dict[str, str] = {}
    for mig in migrate.load_migrations("postgres"):
        for name, body in re.findall(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\(\).*?\$\$(.*?)\$\$", mig.sql, flags=re.S):
            out[name] = " ".join(body.split())
    return out


#: pg_trigger.tgtype bits (PostgreSQL's catalog/pg_trigger.h): how a trigger fires
_TG_BITS = {"ROW": 1, "BEFORE": 2, "INSERT": 4, "DELETE": 8, "UPDATE": 16, "TRUNCATE": 32}


def _trigger_shapes() -> dict[str, tuple[str, int, str, str]]:
    """name -> (table, pg_trigger.tgtype, function, how the migration wrote it) of every trigger the
    migrations create: a trigger of Sealbox's name that fires otherwise (a ``WHEN`` clause, an operation
    left out, ``UPDATE OF`` some columns, statement level, another table) no longer guards the table."""
    out: dict[str, tuple[str, int, str, str]] = {}
    for mig in migrate.load_migrations("postgres"):
        for name, timing, ops, table, level, function in re.findall(
                r"CREATE TRIGGER (\w+) (BEFORE|AFTER) ([A-Z ]+?) ON (\w+) FOR EACH (ROW|STATEMENT) "
                r"EXECUTE (?:FUNCTION|PROCEDURE) (\w+)\(\)", mig.sql):
            bits = _TG_BITS.get(timing, 0) | (_TG_BITS["ROW"] if level == "ROW" else 0)
            for op in ops.split(" OR "):
                bits |= _TG_BITS[op.strip()]
            out[name] = (table, bits, function, f"{timing} {ops} ON {table} FOR EACH {level}")
    return out


def _required_tables() -> frozenset[str]:
    """The tables the PostgreSQL migrations create: a schema missing one was changed below Sealbox."""
    created: set[str] = set()
    for mig in migrate.load_migrations("postgres"):
        created |= set(re.findall(r"(?i)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)", mig.sql))
        created -= set(re.findall(r"(?i)\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?\"?(\w+)", mig.sql))
    return frozenset(created)


def _required_columns() -> dict[str, frozenset[str]]:
    """Each table's columns as the PostgreSQL migrations create them (read from their ``CREATE TABLE``
    statements; they add no column later): a schema missing one (dropped or renamed below Sealbox)
    is refused on open."""
    out: dict[str, frozenset[str]] = {}
    for mig in migrate.load_migrations("postgres"):
        for table, body in re.findall(r"(?is)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)\"?\s*\((.*?)\n\);", mig.sql):
            names = set()
            for line in body.splitlines():
                word = line.split("--", 1)[0].strip().split(" ", 1)[0].strip('"')
                if word and word.upper() not in ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT", "EXCLUDE"):
                    names.add(word)
            out[table] = frozenset(names)
    return {t: cols for t, cols in out.items() if t in _required_tables()}


def _nul_param(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg refusing to send a parameter holding a NUL (PostgreSQL text cannot hold one,
    so no stored id or name has one: a lookup by such a value finds nothing; the log is not damaged)."""
    return getattr(exc, "sqlstate", "") is None and "cannot contain NUL" in str(exc)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - an install without the extra
        raise ConfigError("the PostgreSQL store needs psycopg 3: pip install 'sealbox[postgres]'") from exc
    if not _PIPELINE_NOISE.installed:
        _PIPELINE_NOISE.installed = True
        logging.getLogger("psycopg").addFilter(_PIPELINE_NOISE)
    return psycopg


#: The connections this process's stores opened (:meth:`PostgresStore._connect`), weakly held.
_OWN_CONNS: "weakref.WeakSet[Any]" = weakref.WeakSet()


class _OwnPipelineNoise(logging.Filter):
    """Drops psycopg's "error ignored terminating <Pipeline>: ..." about a pipeline of one of Sealbox's own
    connections. ``executemany`` runs in a pipeline; when the server has ended the connection, the pipeline's
    exit fails too and psycopg logs that second failure (printed on stderr by Python's last-resort handler, or
    by the gateway's log) while it raises the first, which Sealbox handles (the write made again on a new
    connection, or one StoreError). Other connections' records are left alone."""

    installed = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "error ignored terminating %r: %s" and isinstance(record.args, tuple) and record.args:
            with contextlib.suppress(TypeError):
                return getattr(record.args[0], "_conn", None) not in _OWN_CONNS
        return True


_PIPELINE_NOISE = _OwnPipelineNoise()


def is_postgres_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder holding a PostgreSQL store's ``postgres.json``."""
    return (Path(path) / CONFIG_NAME).is_file()


def _lock_key(schema: str) -> int:
    """The advisory lock key of a store's writers: 64 bits of SHA-256 of its schema name."""
    return int.from_bytes(hashlib.sha256(b"sealbox-writer:" + schema.encode()).digest()[:8], "big", signed=True)


def _secret_check(secret: bytes) -> str:
    """What ``store_meta`` keeps to tell that a folder's secret is the database's (a hash of 32 random bytes:
    it reveals nothing that helps test a redacted value)."""
    return "sha256:" + hashlib.sha256(b"sealbox store secret check\x00" + secret).hexdigest()


_QMARK: dict[str, str] = {}


def _q(sql: str) -> str:
    """SQLite-style ``?`` parameters as psycopg's ``%s`` (a literal ``%`` doubled)."""
    found = _QMARK.get(sql)
    if found is None:
        found = _QMARK[sql] = sql.replace("%", "%%").replace("?", "%s")
    return found


class _Conn:
    """A psycopg connection seen through the few calls the shared SQLite code makes
    (``execute`` with ``?`` parameters, ``executemany``): lets :class:`_PgTxn` reuse the
    SQLite transaction's tree and run-head logic unchanged."""

    def __init__(self, pg: Any) -> None:
        self.pg = pg

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.pg.execute(_q(sql), tuple(params)) if params else self.pg.execute(sql)

    def executemany(self, sql: str, rows: list[tuple]) -> Any:
        cur = self.pg.cursor()
        cur.executemany(_q(sql), rows)
        return cur


class _PgTxn(_sq._Txn):
    """:class:`~sealbox.store.base.WriteTxn` over one PostgreSQL transaction: the SQLite one's run-head,
    tree-size and node logic (portable SQL), with PostgreSQL's inserts."""

    #: the database server's clock (``clock_timestamp()``) when this transaction took the write lock
    server_clock: datetime | None = None
    #: the last event's ts, read with the tree size
    last_ts: str | None = None

    def tree_size(self) -> int:
        if self._size is None:  # the last event's ts read with the size (the same index probe)
            row = self.conn.pg.execute("SELECT leaf_index, ts FROM events ORDER BY leaf_index DESC LIMIT 1").fetchone()
            self._size, self.last_ts = (0, None) if row is None else (row[0] + 1, row[1])
        return self._size

    def stamp(self) -> str:
        """The ``ts`` of the events this transaction writes: the server's clock when it took the write lock
        (every machine writing the store gets the one clock), as :func:`~sealbox.store.base.utc_now` formats
        it; never before the last event's ``ts`` (a server clock stepped back, or an event written by an older
        Sealbox on a machine whose clock ran ahead), unless that one is more than :data:`MAX_TS_AHEAD_S`
        ahead of the server or not in that format (altered below Sealbox: it is not followed)."""
        clock = self.server_clock
        if clock is None:
            return utc_now()
        stamp = clock.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.tree_size()
        last = self.last_ts
        if isinstance(last, str) and last > stamp and _TS_FORMAT.fullmatch(last):
            try:
                ahead = (datetime.fromisoformat(last[:-1] + "+00:00") - clock).total_seconds()
            except ValueError:
                return stamp
            if ahead <= MAX_TS_AHEAD_S:
                return last
        return stamp

    def flush(self) -> None:
        if self._events:
            cur = self.conn.pg.cursor()
            cur.executemany(
                "INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, server, tool, call_id,"
                " effect, ok, tokens, cost, rule, reason_code, duration_us, raw, leaf_hash)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                self._events)
            # a rule (DO INSTEAD NOTHING) or a foreign trigger returning NULL drops rows silently: the write
            # fails and rolls back, so the call it records does not run (as SQLite's _check_inserted)
            _sq._check_inserted(cur.rowcount, len(self._events), "events")
            self._events = []
        if self._node_rows:
            cur = self.conn.pg.cursor()
            cur.executemany("INSERT INTO tree_nodes (level, idx, hash) VALUES (%s, %s, %s)", self._node_rows)
            _sq._check_inserted(cur.rowcount, len(self._node_rows), "tree_nodes")
            self._node_rows = []

    def put_blob(self, ref: str, salt: bytes, content: bytes) -> None:
        if ref in self._blobs:  # inserted already in this transaction (never adopted across them here)
            return
        self._blobs.add(ref)
        self.conn.pg.execute("INSERT INTO blobs (ref, salt, content, size) VALUES (%s, %s, %s, %s)"
                             " ON CONFLICT (ref) DO NOTHING", (ref, salt, content, len(content)))

    #: (the path, the schema, the store id) of the store writing, when it has one (not while init claims the
    #: schema): the schema holding another store (dropped and created again under a live store) is refused
    owner: tuple[Path, str, str] | None = None

    def latest_checkpoint_size(self) -> int:
        if self._ckpt_size is None:
            # (the store's id in the same statement: no round trip more)
            row = self.conn.pg.execute("SELECT max(tree_size), (SELECT value FROM store_meta WHERE key = 'store_id')"
                                       " FROM checkpoints").fetchone()
            if self.owner is not None and row[1] != self.owner[2]:
                path, schema, store_id = self.owner
                raise StoreError(f"{path}: schema {schema} now holds another store (store id {row[1]}, not "
                                 f"{store_id}: the schema was dropped and a store created in it again): refusing "
                                 "to record into it")
            self._ckpt_size = row[0] or 0
        return self._ckpt_size


class PgReader(Reader):
    """:class:`~sealbox.store.sqlite_queries.Reader` inside a PostgreSQL write transaction: what the
    recorder, pause/resume and the gateway read before they append (run heads, steps, usage counters,
    events of some kinds). ``count(sql)`` takes PostgreSQL SQL with ``?`` parameters."""

    backend = "postgres"

    def __init__(self, conn: _Conn, txn: Any = None) -> None:
        super().__init__(conn, txn)  # type: ignore[arg-type]

    def _imported_payload_sql(self) -> str:
        return f"({_SAFE.format(t='s')} -> 'payload' ->> 'imported') IS NOT NULL"

    def top_step(self, run_id: str) -> int:
        row = self.conn.execute("SELECT max(split_part(step, '.', 1)::bigint) FROM events WHERE run_id = ?",
                                (run_id,)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def step_used(self, run_id: str, step: int) -> bool:
        return self.conn.execute("SELECT 1 FROM events WHERE run_id = ? AND split_part(step, '.', 1) = ? LIMIT 1",
                                 (run_id, str(int(step)))).fetchone() is not None

    def calls_after(self, run_id: str, run_seq: int) -> list[tuple[str, Any]]:
        return self.conn.execute("SELECT step, call_id FROM events WHERE run_id = ? AND run_seq > ?"
                                 " AND kind = 'tool.call' ORDER BY run_seq", (run_id, run_seq)).fetchall()

    def call_events(self, run_id: str, call_id: str, kind: str) -> list[Event]:
        """As :meth:`Reader.call_events <sealbox.store.sqlite_queries.Reader.call_events>` (the
        ``events_call`` index, (call_id, kind))."""
        if kind not in _CALL_KINDS:
            raise ValueError(f"not a kind events_call holds: {kind!r}")
        rows = self.conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE call_id = ? AND kind = ? AND run_id = ?"
                                 " ORDER BY leaf_index", (call_id, kind, run_id)).fetchall()
        return [event_from_row(*r) for r in rows]

    def approval_requests(self, approval_id: str) -> list[Event]:
        """As :meth:`Reader.approval_requests <sealbox.store.sqlite_queries.Reader.approval_requests>`
        (the ``events_approval`` index of migration 0002)."""
        if "\x00" in approval_id:
            return []  # PostgreSQL text holds no NUL: no stored id has one
        rows = self.conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE kind = 'approval.requested'"
                                 f" AND {_APPROVAL_KEY} = ? ORDER BY leaf_index", (approval_id,)).fetchall()
        if not rows and self.conn.execute(f"SELECT 1 FROM events WHERE kind = 'approval.requested'"
                                          f" AND {_APPROVAL_KEY} IS NULL LIMIT 1").fetchone() is not None:
            return self.events(["approval.requested"], field=("approval_id", approval_id))
        return [event_from_row(*r) for r in rows]

    def imported_runs(self, source_sha256: str) -> list[tuple[str, Any]]:
        """As :meth:`Reader.imported_runs <sealbox.store.sqlite_queries.Reader.imported_runs>`."""
        if "\x00" in source_sha256:
            return []  # PostgreSQL text holds no NUL: no stored hash has one
        psycopg = _psycopg()
        try:
            rows = self.conn.execute(
                f"SELECT run_id, {_J.format(t='events')} -> 'imported' ->> 'format' FROM events"
                " WHERE kind = 'run.started' AND left(principal, 9) = 'imported:'"
                f" AND ({_J.format(t='events')} -> 'imported' ->> 'source_sha256') = ? ORDER BY leaf_index",
                (source_sha256,)).fetchall()
        except psycopg.errors.DataError as exc:  # a payload that is not UTF-8 JSON: changed below Sealbox
            raise _first_damaged(self.conn.pg, exc) from None
        return [(r[0], r[1]) for r in rows]

    def imported_content(self, content_sha256s: Sequence[str],
                         trace_ids: Sequence[str] = ()) -> list[tuple[str, Any, Any]]:
        """As :meth:`Reader.imported_content <sealbox.store.sqlite_queries.Reader.imported_content>`."""
        psycopg = _psycopg()
        j = _J.format(t='events')
        rows: list[Any] = []
        for path, values in (("-> 'imported' ->> 'content_sha256'", content_sha256s),
                             ("-> 'imported' -> 'original_ids' ->> 'trace_id'", trace_ids)):
            values = [v for v in values if "\x00" not in v]  # PostgreSQL text holds no NUL: nothing stored has one
            if not values:
                continue
            try:
                rows.extend(self.conn.execute(
                    f"SELECT run_id, {j} -> 'imported' ->> 'content_sha256',"
                    f" {j} -> 'imported' -> 'original_ids' ->> 'trace_id', leaf_index FROM events"
                    " WHERE kind = 'run.started' AND left(principal, 9) = 'imported:'"
                    f" AND ({j} {path}) = ANY(?) ORDER BY leaf_index", (list(values),)).fetchall())
            except psycopg.errors.DataError as exc:  # a payload that is not UTF-8 JSON: changed below Sealbox
                raise _first_damaged(self.conn.pg, exc) from None
        seen: set[str] = set()
        return [(r[0], r[1], r[2]) for r in sorted(rows, key=lambda r: r[3]) if not (r[0] in seen or seen.add(r[0]))]

    def events(self, kinds: Sequence[str], *, run_id: str | None = None, principal: str | None = None,
               field: tuple[str, str] | None = None, limit: int | None = None,
               principal_actor: str | None = None, ts_from: str | None = None,
               ts_before: str | None = None, from_leaf: int | None = None, before_leaf: int | None = None,
               principal_ascii: bool = False, non_ascii_principal: bool = False) -> list[Event]:
        """As :meth:`Reader.events <sealbox.store.sqlite_queries.Reader.events>`, in PostgreSQL's SQL."""
        where = ["kind = ANY(?)"]
        params: list[Any] = [list(kinds)]
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        if principal_actor is not None:
            # ILIKE: SQLite's LIKE folds ASCII case, PostgreSQL's does not (the column's "C" collation
            # folds ASCII only, as NOCASE does)
            # or any principal holding a non-ASCII character (more bytes than characters), as SQLite's
            # reader: same_actor folds NFKC forms and drops format characters, which no ASCII fold finds
            where.append("(lower(principal) = lower(?) OR principal ILIKE ? ESCAPE '\\'"
                         + (")" if principal_ascii else " OR octet_length(principal) <> char_length(principal))"))
            params += [principal_actor, "%:" + principal_actor.replace("\\", "\\\\").replace("%", "\\%")
                       .replace("_", "\\_")]
        if non_ascii_principal:
            where.append("octet_length(principal) <> char_length(principal)")
        if field is not None:
            if not field[0].isidentifier():
                raise ValueError(f"not a payload field name: {field[0]!r}")
            where.append(f"({_SAFE.format(t='events')} -> 'payload' ->> '{field[0]}') = ?")
            params.append(field[1])
        if ts_from is not None:
            where.append("ts >= ?")
            params.append(ts_from)
        if ts_before is not None:
            where.append("ts < ?")
            params.append(ts_before)
        if from_leaf is not None:
            where.append("leaf_index >= ?")
            params.append(int(from_leaf))
        if before_leaf is not None:
            where.append("leaf_index < ?")
            params.append(int(before_leaf))
        sql = f"SELECT {_EVENT_COLS} FROM events WHERE {' AND '.join(where)} ORDER BY leaf_index"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        psycopg = _psycopg()
        try:
            rows = self.conn.execute(sql, params).fetchall()
        except psycopg.errors.DataError as exc:  # a payload that is not UTF-8 JSON: changed below Sealbox
            if _nul_param(exc):
                return []
            raise _first_damaged(self.conn.pg, exc) from None
        return [event_from_row(*r) for r in rows]


    def non_ascii_principals(self, kinds: Sequence[str]) -> list[tuple[Any, int]]:
        """As :meth:`Reader.non_ascii_principals <sealbox.store.sqlite_queries.Reader.non_ascii_principals>`."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT principal, min(leaf_index) FROM events WHERE kind = ANY(?)"
            " AND octet_length(principal) <> char_length(principal) GROUP BY principal", [list(kinds)]).fetchall()]

    def server_clock(self) -> datetime:
        """The database server's clock now (``clock_timestamp()``), an aware UTC datetime: the clock a
        process writing to a shared PostgreSQL store is checked against (:func:`sealbox.approvals.answer`)."""
        return self.conn.execute("SELECT clock_timestamp()").fetchone()[0].astimezone(timezone.utc)

    def first_principals(self, kinds: Sequence[str]) -> list[tuple[Any, int]]:
        """As :meth:`Reader.first_principals <sealbox.store.sqlite_queries.Reader.first_principals>`."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT principal, min(leaf_index) FROM events WHERE kind = ANY(?) GROUP BY principal",
            [list(kinds)]).fetchall()]

    def event_at(self, leaf_index: int) -> Event | None:
        """As :meth:`Reader.event_at <sealbox.store.sqlite_queries.Reader.event_at>`."""
        row = self.conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE leaf_index = ?", (int(leaf_index),)).fetchone()
        return None if row is None else event_from_row(*row)


class _PgStoreReader(PgReader):
    """:meth:`PostgresStore.reader`: each query runs on the connection of the thread making it (the
    one of the thread that made the reader is closed once that thread has ended)."""

    def __init__(self, store: "PostgresStore") -> None:
        store._pg()  # a closed store is refused here, as before
        self._store, self._txn = store, None

    @property
    def conn(self) -> _Conn:  # type: ignore[override]
        return _Conn(self._store._pg())


def _store_read(name: str) -> Callable[..., Any]:
    """PgReader's ``name`` for :class:`_PgStoreReader`: under the store's read guard
    (:meth:`PostgresStore._operation`), as the store's own reads: a connection the server ended while idle
    (a restart, ``pg_terminate_backend``) is replaced before the query, and one ended under the query is a
    StoreError, not psycopg's exception (an internal error in the CLI)."""
    base = getattr(PgReader, name)

    def read(self: _PgStoreReader, *args: Any, **kwargs: Any) -> Any:
        with self._store._operation():
            return base(self, *args, **kwargs)

    read.__name__, read.__qualname__, read.__doc__ = name, f"_PgStoreReader.{name}", base.__doc__
    return read


# every query method of a reader outside a write (PgReader inside one is the write's: its errors reach the
# write's retry); not _Conn.execute itself, which writes use too
for _name in [n for n in dir(PgReader) if not n.startswith("_") and callable(getattr(PgReader, n))]:
    setattr(_PgStoreReader, _name, _store_read(_name))


class _Alive:
    """One per thread using a store (its :class:`_ThreadState`'s ``alive``): released with the thread's
    thread-local data when the thread ends, whoever started it (a ``threading.Thread``, ``_thread`` or a C
    library: the latter are ``_DummyThread`` objects whose ``is_alive()`` says nothing of it)."""

    __slots__ = ("__weakref__",)


class _ThreadState(threading.local):
    conn: Any = None
    alive: "_Alive | None" = None
    ops = 0
    lock_timeout: float | None = None
    no_wait = False


def _unsupported(name: str, what: str) -> Callable[..., Any]:
    def method(self: "PostgresStore", *args: Any, **kwargs: Any) -> Any:
        raise BackendUnsupportedError(f"{what} is not supported on a PostgreSQL store yet ({self.path}); "
                                      "see docs/storage.md, \"PostgreSQL\"")
    method.__name__ = name
    method.__doc__ = f"Not offered on PostgreSQL yet: raises BackendUnsupportedError ({what})."
    return method


class PostgresStore(SqliteQueries):
    """The PostgreSQL store. Open with :meth:`init` (new) or :meth:`open` (existing), or through
    :func:`sealbox.store.open_store` / :func:`~sealbox.store.init_store` on its folder.

    Args:
        path: the store's folder (``postgres.json``, keys, secret, checkpoint file).
        readonly: open for reading only (no key needed, nothing written).
        checkpoint_policy: when to sign checkpoints.
        lock_timeout: seconds a writer waits for the write lock (the advisory lock) before failing.
        durability: ``"full"`` only (``synchronous_commit = on``).

    Raises:
        NotAStoreError: no ``postgres.json`` in ``path``, or the schema holds no Sealbox store.
        StoreError: the server cannot be reached, or the folder's secret is not the database's.
        SchemaVersionError: the schema was written by a newer Sealbox, or a migration was edited.
    """

    backend = "postgres"
    stored_node_level = STORED_NODE_LEVEL

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False,
                 checkpoint_policy: CheckpointPolicy | None = None, lock_timeout: float = 300.0,
                 durability: str = "full", _create: bool = False) -> None:
        if durability != "full":
            raise StoreConfigError("a PostgreSQL store has one durability, 'full' (synchronous_commit = on)")
        if checkpoint_policy is not None and not isinstance(checkpoint_policy, CheckpointPolicy):
            raise StoreConfigError(f"checkpoint_policy must be a CheckpointPolicy, not {type(checkpoint_policy).__name__}")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) \
                or not lock_timeout >= 0 or lock_timeout == float("inf"):
            raise StoreConfigError(f"lock_timeout must be a finite number of seconds >= 0, not {lock_timeout!r}")
        self.path = Path(path)
        self.durability = durability
        self.readonly = readonly
        self.checkpoint_policy = checkpoint_policy or CheckpointPolicy()
        self.lock_timeout = lock_timeout
        self._create = _create
        self._local = _ThreadState()
        self._conns: list[Any] = []
        #: id(connection) -> the (weakly held) _Alive of the thread it was opened for: dead once that thread ended
        self._conn_threads: dict[int, Any] = {}
        self._conns_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._wal_lock = threading.Lock()  # guards the checkpoint timer (the name SqliteStore's timer code uses)
        self._ckpt_timer: Any = None
        self._closing = self._closed = False
        self._closer: int | None = None
        self._closed_event = threading.Event()
        self._ops = 0
        self._ops_lock = threading.Lock()
        self._ops_idle = threading.Condition(self._ops_lock)
        self._pid = os.getpid()
        self._inherited: list[Any] = []  # connections opened before an os.fork (see _pg)
        self._damage: str | None = None
        self._content_error: str | None = None
        self.url, self.schema = self._read_config()
        self._key = _lock_key(self.schema)
        #: versions of the migrations this open applied (committed itself), oldest first; empty when none
        #: was pending or another writer applied them meanwhile. Also set as ``migrated`` on a StoreError
        #: raised by the open after it applied some (e.g. log.key missing): ``sealbox upgrade`` says them.
        self.migrated: list[int] = []
        try:
            try:
                self._open_checked()
            except _psycopg().OperationalError as exc:
                # the server ended the connection while the open read or upgraded the schema (a restart,
                # pg_terminate_backend): one StoreError (the CLI's one line), not the driver's exception
                raise StoreError(f"{self.path}: PostgreSQL could not open the store ({_one_line(exc)})") from None
        except BaseException as exc:
            self._close_connections()
            if self.migrated and isinstance(exc, StoreError):
                exc.migrated = list(self.migrated)  # type: ignore[attr-defined]
            raise

    # ----------------------------------------------------------------- opening

    def _read_config(self) -> tuple[str, str]:
        cfg_path = self.path / CONFIG_NAME
        if not self.path.is_dir():
            raise NotAStoreError(f"{self.path} does not exist (create a store with `sealbox init --postgres URL "
                                 f"{self.path}`)")
        try:
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            url, schema = cfg["url"], cfg["schema"]
            if cfg.get("backend") != "postgres" or not isinstance(url, str) or not isinstance(schema, str):
                raise ValueError("not a PostgreSQL store's settings")
        except FileNotFoundError:
            raise NotAStoreError(f"{self.path} is not a PostgreSQL Sealbox store (no {CONFIG_NAME})") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{cfg_path} cannot be read as a PostgreSQL store's settings ({exc})") from None
        if not _SCHEMA.match(schema):
            raise StoreError(f"{cfg_path}: schema {schema!r} is not a plain lower-case PostgreSQL name")
        return url, schema

    def _connect(self) -> Any:
        psycopg = _psycopg()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10,
                                   application_name="sealbox")
            _OWN_CONNS.add(conn)
            conn.execute(f'SET search_path TO "{self.schema}"')  # a checked lower-case name
            conn.execute("SET synchronous_commit TO on")
            if self.readonly:
                conn.execute("SET default_transaction_read_only TO on")
        except psycopg.Error as exc:
            raise StoreError(f"{self.path}: cannot connect to PostgreSQL ({_one_line(exc)})") from None
        return conn

    def _conn(self) -> _Conn:
        """This thread's connection seen with SQLite-style ``?`` parameters (the shared query code uses it)."""
        return _Conn(self._pg())

    def _pg(self) -> Any:
        """This thread's psycopg connection (opened on first use; a new one after a fork)."""
        if self._closed:
            raise StoreError("the store is closed")
        if self._pid != os.getpid():  # connections must not cross a fork: the child opens its own
            # the parent's stay referenced, never closed or collected here: libpq would send them its
            # Terminate message and end the parent's sessions
            self._inherited.extend(self._conns)
            self._pid, self._local, self._conns, self._conn_threads = os.getpid(), _ThreadState(), [], {}
            self._conns_lock, self._ckpt_lock, self._wal_lock = threading.Lock(), threading.Lock(), threading.Lock()
            self._ops_lock = threading.Lock()
            self._ops_idle = threading.Condition(self._ops_lock)
            self._ops, self._ckpt_timer = 0, None
        conn = self._local.conn
        if conn is None or conn.closed:
            conn = self._local.conn = self._connect()
            with self._conns_lock:
                self._close_ended_threads_connections()
                self._conns.append(conn)
                alive = self._local.alive
                if alive is None:
                    alive = self._local.alive = _Alive()
                self._conn_threads[id(conn)] = weakref.ref(alive)
        return conn

    def _close_ended_threads_connections(self) -> None:
        """Close the connections of threads that have ended (under ``_conns_lock``, when a connection is
        opened): nothing can use them any more, and kept until close() a process running a thread per
        request would hold one server connection per thread it ever ran, up to ``max_connections``."""
        kept = []
        for conn in self._conns:
            thread = self._conn_threads.get(id(conn))
            if thread is not None and thread() is None:
                del self._conn_threads[id(conn)]
                with contextlib.suppress(Exception):
                    conn.close()
            elif not conn.closed:
                kept.append(conn)
            else:
                self._conn_threads.pop(id(conn), None)
        self._conns[:] = kept

    def _migrate(self) -> None:
        psycopg = _psycopg()
        conn = self._pg()
        known = migrate.load_migrations("postgres")
        where = f"{self.path} (schema {self.schema})"
        try:
            exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
            applied = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall()) if exists else {}
            pending = migrate.check_applied(applied, known, where)
            if not applied and not self._create:
                if exists and conn.execute("SELECT to_regclass('events') IS NOT NULL").fetchone()[0]:
                    raise StoreError(f"{where} is damaged: its schema_migrations table is empty though the store's "
                                     "tables are there (changed below Sealbox; restore the store from a backup)")
                raise NotAStoreError(f"{where} holds no Sealbox store (no schema_migrations table)")
            if pending and self.readonly:
                older = SchemaVersionError(f"{where} was written by an older Sealbox (pending migrations "
                                           f"{[m.version for m in pending]}): its owner upgrades it once with "
                                           f"`sealbox upgrade --store {self.path}` (or by opening it for writing "
                                           "through the API)")
                older.pending = [m.version for m in pending]  # type: ignore[attr-defined]  # (sealbox upgrade says them)
                raise older
            # a migration waits for the write lock (and for the table locks its DDL takes) as a write does, at
            # most lock_timeout (it waited without end: `sealbox upgrade` hung whatever SEALBOX_LOCK_TIMEOUT was)
            timeout = self.lock_timeout if self._local.lock_timeout is None else self._local.lock_timeout
            # one lock across all of them (each still its own transaction): a second upgrader (or writer's
            # open) that came between two of them applied the rest, and each said only part ([2] and [3])
            with self._migration_lock(conn, where, timeout, pending[0]) if pending else contextlib.nullcontext():
                for mig in pending:
                    if self._apply_migration(conn, mig, known, where, timeout):
                        self.migrated.append(mig.version)  # committed by this open (the block left without an error)
            tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                                                 (self.schema,)).fetchall()}
            have: dict[str, set[str]] = {}
            # from the catalog, as the tables (pg_tables): information_schema.columns lists only the columns
            # the role has a privilege on, and a reader not granted one table would be told it is damaged
            for table, column in conn.execute(
                    "SELECT c.relname, a.attname FROM pg_catalog.pg_attribute a"
                    " JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
                    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped",
                    (self.schema,)).fetchall():
                have.setdefault(table, set()).add(column)
            # the functions queries call by name (migration 0002's index key): every migration is applied here
            functions = sorted(f for f in _QUERY_FUNCTIONS if conn.execute(
                "SELECT to_regprocedure(%s) IS NULL", (f'"{self.schema}".{f}',)).fetchone()[0])
        except psycopg.Error as exc:
            raise StoreError(f"{where}: cannot read or upgrade the schema ({_one_line(exc)})") from None
        missing = sorted(_required_tables() - tables)
        if missing:  # dropped below Sealbox: one error line before any command reads or writes it (as on SQLite)
            raise StoreError(f"{where} is damaged: table {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} missing (changed below Sealbox; "
                             "restore the store from a backup)")
        columns = sorted(f"{table}.{column}" for table, wanted in _required_columns().items()
                         for column in wanted - have.get(table, set()))
        if columns:  # dropped or renamed below Sealbox (ALTER TABLE ... DROP / RENAME COLUMN), as on SQLite
            raise StoreError(f"{where} is damaged: column{'s' if len(columns) > 1 else ''} {', '.join(columns)} "
                             f"{'is' if len(columns) == 1 else 'are'} missing (changed below Sealbox; "
                             "restore the store from a backup)")
        if functions:  # dropped below Sealbox: the queries calling it failed with "function ... does not exist"
            raise StoreError(f"{where} is damaged: function {', '.join(functions)} "
                             f"{'is' if len(functions) == 1 else 'are'} missing (changed below Sealbox; "
                             "restore the store from a backup)")

    @contextlib.contextmanager
    def _migration_lock(self, conn: Any, where: str, timeout: float, first: migrate.Migration) -> Iterator[None]:
        """Hold the store's write lock (its advisory lock) at session level while this open applies its
        pending migrations, so that concurrent upgraders serialise: the first applies them all, a later
        one finds them recorded. Each migration still takes the lock in its own transaction too (the
        same session: it is granted at once); writers of other sessions wait as they do for a migration.
        Released when the block is left (or by the server, with the session, if the process dies).

        Raises:
            StoreError: the lock was not had within ``timeout`` seconds (said as the wait of ``first``,
                the first pending migration, as before this lock).
        """
        psycopg = _psycopg()
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout TO {min(max(1, int(timeout * 1000)), 2**31 - 1)}")
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (self._key,))  # kept past this transaction
            except psycopg.errors.LockNotAvailable:
                raise StoreError(f"{where}: migration {first.version} waited {timeout:g} s for the store's "
                                 "write lock, held by another writer: lock_timeout, "
                                 "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands") from None
        try:
            yield
        finally:
            with contextlib.suppress(psycopg.Error):  # a lost session dropped it with itself
                conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))

    def _apply_migration(self, conn: Any, mig: migrate.Migration, known: list[migrate.Migration], where: str,
                         timeout: float) -> bool:
        """Apply ``mig`` in one transaction holding the store's write lock and record it with its checksum;
        True when this call committed it, False when another writer had recorded it meanwhile.

        Raises:
            StoreError: the write lock, or a lock on a table the migration changes, was not had within
                ``timeout`` seconds.
            SchemaVersionError: the store's recorded migrations are not this version's (checked again).
        """
        psycopg = _psycopg()
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout TO {min(max(1, int(timeout * 1000)), 2**31 - 1)}")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
            except psycopg.errors.LockNotAvailable:
                raise StoreError(f"{where}: migration {mig.version} waited {timeout:g} s for the store's "
                                 "write lock, held by another writer: lock_timeout, "
                                 "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands") from None
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
                         " name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TEXT NOT NULL)")
            now = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())
            if mig.version in now:  # another writer upgraded it meanwhile
                migrate.check_applied(now, known, where)
                return False
            try:
                conn.execute(mig.sql)
            except psycopg.errors.LockNotAvailable:
                raise StoreError(f"{where}: migration {mig.version} waited {timeout:g} s for a lock on a "
                                 "table of the store, held by another PostgreSQL session: lock_timeout, "
                                 "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands") from None
            conn.execute("INSERT INTO schema_migrations (version, name, checksum, applied_at)"
                         " VALUES (%s, %s, %s, %s)", (mig.version, mig.name, mig.checksum, utc_now()))
        return True

    def _open_checked(self) -> None:
        self._migrate()  # read-only: only checks (a pending migration is refused, never applied)
        conn = self._pg()
        meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
        if self._create and meta:  # another init claimed the schema since init's check
            raise StoreError(f"schema {self.schema!r} of that database already holds a Sealbox store (another init "
                             "created it meanwhile): give another schema (--schema) or open the existing store's folder")
        self.open_damage: list[str] = []
        origin, store_id = meta.get("origin", ""), meta.get("store_id", "")
        if origin == "" and not self._create:
            self.open_damage.append("the log's origin in store_meta is missing")
        elif not origin.isprintable():
            self.open_damage.append(f"the log's origin in store_meta is not printable text ({origin!r})")
        self.origin: str = origin
        self.store_id: str = store_id
        secret = self._read_secret()
        check = meta.get("secret_check")
        if secret is None and self.readonly and not os.path.lexists(self.path / SECRET_NAME):
            pass  # a reader's or verifier's folder: the secret stays with the writers (docs/storage.md)
        elif secret is None:
            self.open_damage.append(f"the store secret ({SECRET_NAME}, the HMAC key of redaction markers) is missing "
                                    "or not 32 bytes of hex")
        elif check is None and not self._create:  # store_meta has no triggers: a deleted row must not pass
            self.open_damage.append(f"the store secret check in store_meta is missing (the folder's {SECRET_NAME} "
                                    "cannot be matched to this database)")
        elif check is not None and check != _secret_check(secret):
            self.open_damage.append(f"the folder's {SECRET_NAME} is not this database's store secret (another "
                                    "store's folder, or the schema in postgres.json names another store)")
        self._secret: bytes = secret or bytes(32)
        if self.open_damage and not self.readonly:
            raise StoreError(f"{self.path}: {self.open_damage[0]}: refusing to record into it (run `sealbox verify`)")
        from sealbox.redaction import ContentPolicy

        try:
            self.content = ContentPolicy.from_dict(json.loads(meta["content"])) if "content" in meta else ContentPolicy()
        except (ValueError, TypeError, AttributeError, KeyError, SealboxError) as exc:
            self._content_error = (f"the content settings in the database cannot be read ({type(exc).__name__}: "
                                   f"{exc}): they were changed below Sealbox")
            self.content = ContentPolicy()
        self._builder = EventBuilder(self._secret, content=self.content)
        self.redactor = self._builder.redactor
        self._signer = None
        if not self.readonly:
            changed = None if self._create else self.content_policy_change()
            if changed:
                raise StoreError(f"{self.path}: {changed}; refusing to record under them (run `sealbox verify`)")
            self._signer = self._load_signer()
        latest = None if self._create else self.latest_checkpoint()  # a racing init's is claimed-checked later
        self._floor = self.checkpoint_file_size()
        self._last_ckpt_size = latest.tree_size if latest else 0
        self._last_ckpt_time = time.monotonic()
        self._appended_size = 0
        if not self.readonly and not self._create:
            count, last = conn.execute("SELECT count(*), max(leaf_index) FROM events").fetchone()
            if count != (0 if last is None else last + 1):
                self._damage = (f"the log in {self.path} is not contiguous ({count} events, last leaf index {last}): "
                                "an event was removed; refusing to append (run `sealbox verify`)")
            elif latest is not None:
                self._damage = self._checkpoint_file_problem()

    def _read_secret(self) -> bytes | None:
        try:
            secret = bytes.fromhex((self.path / SECRET_NAME).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None
        return secret if len(secret) == 32 else None

    @classmethod
    def init(cls, path: str | os.PathLike, *, url: str, schema: str = "sealbox", origin: str | None = None,
             content: Any = None, allow_public_schema: bool = False, **kwargs: Any) -> "PostgresStore":
        """Create a new PostgreSQL store: the folder ``path`` (keys, secret, settings) and the tables in
        ``schema`` of the database at ``url`` (created if missing; it must hold no Sealbox store yet).
        ``public``, the database's default schema, shared with whatever else uses the database, is
        refused unless ``allow_public_schema`` (docs/storage.md, "PostgreSQL").

        Writes ``log.key``, ``store.secret`` and ``postgres.json`` mode 0600, ``log.vkey`` public, then
        applies the migrations, starts the system run and signs the first checkpoint.

        Raises:
            StoreConfigError: ``schema`` is not a plain lower-case name (``[a-z_][a-z0-9_]*``), is
                ``information_schema``, or is ``public`` without ``allow_public_schema``.
            StoreError: the folder already holds a store or a key, the schema already holds a Sealbox
                store, or the server cannot be reached (nothing is left in the folder then).
            NoteError: ``origin`` is not a valid key name.
        """
        psycopg = _psycopg()
        if not isinstance(schema, str) or not _SCHEMA.match(schema):
            raise StoreConfigError(f"schema must be a plain lower-case PostgreSQL name ([a-z_][a-z0-9_]*, at most "
                                   f"63 characters), not {schema!r}")
        if schema == "information_schema":  # a plain pg_dump of the database leaves it out: a backup without the log
            raise StoreConfigError(f"schema {schema!r} is PostgreSQL's own (pg_dump leaves its tables out): "
                                   "give another schema")
        if schema == "public" and allow_public_schema is not True:
            # its tables beside the application's: their append-only triggers fail the application's TRUNCATE of
            # every table, and the application's reset (DROP SCHEMA public CASCADE) drops the log with its own
            raise StoreConfigError("schema 'public' is the database's default schema, shared with whatever else uses "
                                   "the database: give the store a schema of its own (the default is sealbox), or "
                                   "allow_public_schema=True to put its tables there anyway")
        folder = Path(path)
        timeout = kwargs.get("lock_timeout", 300.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not timeout >= 0 or timeout == float("inf"):
            raise StoreConfigError(f"lock_timeout must be a finite number of seconds >= 0, not {timeout!r}")
        if _folder_taken(folder):  # once another init of it in progress is done: what is there
            with _sq._init_lock(folder, timeout) as waited:
                raise StoreError(_folder_taken(folder, waited))
        # the inits of one folder take turns, as SQLite's do (the lock on its parent folder): the second finds
        # the first one's store, rather than its key alone, and never writes beside it
        with _sq._init_lock(folder, timeout) as waited:
            if _folder_taken(folder):  # made by another init, meanwhile
                raise StoreError(_folder_taken(folder, True))
            return cls._init_in(folder, url, schema, origin, content, timeout, kwargs)

    @classmethod
    def _init_in(cls, folder: Path, url: str, schema: str, origin: str | None, content: Any, timeout: float,
                 kwargs: dict[str, Any]) -> "PostgresStore":
        """:meth:`init` once no other init of ``folder`` is under way and the folder holds no store."""
        psycopg = _psycopg()
        store_id = os.urandom(8).hex()
        origin = origin or f"sealbox.local/{store_id}"
        skey, vkey = generate_key(origin)
        try:  # the schema must hold no store: checked before anything is written to the folder
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn, conn.transaction():
                db, encoding = conn.execute("SELECT current_database(), current_setting('server_encoding')").fetchone()
                if encoding != "UTF8":  # the log's text (ids, names, payload fields read as JSON) is UTF-8
                    raise StoreError(f"the database {db} is encoded {encoding}: a Sealbox store needs a UTF8 database "
                                     "(CREATE DATABASE ... ENCODING 'UTF8')")
                # waited without end for a session holding it (another init, a writer): at most lock_timeout,
                # as a migration does
                conn.execute(f"SET LOCAL lock_timeout TO {min(max(1, int(timeout * 1000)), 2**31 - 1)}")
                try:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))  # two inits: one creates it
                    # this init's to drop again if it fails before the store is made (a folder it cannot create)
                    created = conn.execute("SELECT to_regnamespace(%s) IS NULL", (schema,)).fetchone()[0]
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
                except psycopg.errors.LockNotAvailable:
                    raise StoreError(f"cannot create the store's schema {schema!r} in PostgreSQL: waited {timeout:g} s "
                                     "for the schema's write lock, held by another session (another init of this "
                                     "schema, or a writer of a store in it): lock_timeout, SEALBOX_LOCK_TIMEOUT=SECONDS "
                                     "for `sealbox` commands") from None
                taken, ours = conn.execute("SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
                                           (f"{schema}.schema_migrations", f"{schema}.store_meta")).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot create the store's schema {schema!r} in PostgreSQL ({_one_line(exc)})") from None
        if taken and not ours:  # e.g. Rails' or Flyway's: every Sealbox store has store_meta beside it
            raise StoreError(f"schema {schema!r} of that database holds another application's schema_migrations "
                             "table (no Sealbox store): give the store a schema of its own (--schema)")
        if taken:
            raise StoreError(f"schema {schema!r} of that database already holds a Sealbox store: give another "
                             "schema (--schema) or open the existing store's folder")
        try:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreReadOnlyError(f"cannot create {folder}: {exc.strerror}") from exc
            _sq._require_writable(folder)
        except BaseException:
            if created:  # the empty schema this init created was left in the database
                _drop_created_schema(url, schema)
            raise
        secret = os.urandom(32)
        # what this init writes, removed if it does not finish: only the files it created (a checkpoint or a
        # log.vkey that was there is kept, as is anything another process wrote)
        written = [folder / n for n in (VKEY_NAME, CHECKPOINT_NAME) if not os.path.lexists(folder / n)]
        store, claimed = None, False
        try:
            for name, text in ((KEY_NAME, skey + "\n"), (SECRET_NAME, secret.hex() + "\n"),
                               (CONFIG_NAME, json.dumps({"backend": "postgres", "url": url, "schema": schema},
                                                        indent=2) + "\n")):
                _sq._write_private(folder / name, text)  # O_EXCL: never another's file
                written.append(folder / name)
            fsync_write(folder / VKEY_NAME, (vkey + "\n").encode())
            store = cls(folder, _create=True, **kwargs)
            from sealbox.redaction import ContentPolicy

            content = content or ContentPolicy()
            values = {"origin": origin, "store_id": store_id, "created_at": utc_now(),
                      "content": json.dumps(content.to_dict()), "secret_check": _secret_check(secret)}
            store._write(lambda txn: _claim_schema(txn, schema, values))
            claimed = True
            store.origin, store.store_id, store.content = origin, store_id, content
            store._builder = EventBuilder(store._secret, content=content)
            store.redactor = store._builder.redactor
            store._signer = store._load_signer()
            store.append(EventDraft("run.started", {
                "agent": "sealbox", "snapshot": None, "parent_run_id": None,
                "labels": {"system": "true", "content_policy": content.fingerprint()},
                "policy": {"fingerprint": "sha256:" + "0" * 64, "name": None},
            }, run_id=SYSTEM_RUN_ID, principal="sealbox"))
            store.issue_checkpoint()
            store._create = False
        except BaseException:  # e.g. another init claimed the schema meanwhile: leave no key or settings behind
            if store is not None:
                store._signer = None  # no final checkpoint of a store being removed
                with contextlib.suppress(Exception):
                    store.close()
            if claimed:  # nor the half-made store in the schema this init claimed (its key is being removed)
                with contextlib.suppress(Exception):
                    _drop_claimed(url, schema, values["secret_check"])
            if created:  # nor the schema, if this init created it and it is empty again
                _drop_created_schema(url, schema)
            for name in written:
                with contextlib.suppress(OSError):
                    name.unlink()
            raise
        return store

    @classmethod
    def open(cls, path: str | os.PathLike, **kwargs: Any) -> "PostgresStore":
        """Open an existing PostgreSQL store from its folder (see the class for the errors)."""
        return cls(path, **kwargs)

    # ----------------------------------------------------------------- writing

    def _write(self, fn: Callable[[_PgTxn], Any], sync: bool = True) -> Any:
        """Run ``fn`` in one write transaction holding the store's advisory lock; commit (durably
        unless ``sync`` is False). Serialization failures and deadlocks are retried."""
        if self.readonly:
            raise StoreReadOnlyError(f"{self.path} was opened read-only")
        psycopg = _psycopg()
        depth = self._op_enter()
        try:
            conn = self._pg()
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                if depth:
                    raise StoreError("a write was started inside another write or read snapshot of this store")
                # no write or read of this thread is under way: a connection a lost server left mid-transaction
                # (its rollback failed, e.g. in the middle of a pipeline): replaced, or every write would fail here
                conn.close()
                conn = self._pg()
            reconnected = False
            for attempt in range(WRITE_RETRIES + 1):
                body_done = locked = False
                result = None
                try:
                    with conn.transaction():
                        if not sync:
                            conn.execute("SET LOCAL synchronous_commit TO off")
                        # lock_timeout is left set for the whole transaction: a table lock another session holds
                        # (LOCK TABLE, ALTER TABLE, VACUUM FULL) fails the write after it too, never a wait without end
                        timeout = self.lock_timeout if self._local.lock_timeout is None else self._local.lock_timeout
                        timeout_ms = min(max(1, int(timeout * 1000)), 2**31 - 1)
                        # the server's clock is read in the statement that takes the lock, once it holds it (the
                        # FROM item is evaluated first): the time the events get, no round trip more
                        if self._local.no_wait:  # (lock_timeout set in the same statement too)
                            got, clock, _ = conn.execute(
                                "SELECT l, clock_timestamp(), set_config('lock_timeout', %s, true)"
                                " FROM pg_try_advisory_xact_lock(%s) AS l", (str(timeout_ms), self._key)).fetchone()
                            if not got:
                                raise StoreBusyError(f"{self.path} is locked by another writer")
                        else:
                            conn.execute(f"SET LOCAL lock_timeout TO {timeout_ms}")
                            clock = conn.execute("SELECT clock_timestamp() FROM pg_advisory_xact_lock(%s)",
                                                 (self._key,)).fetchone()[0]
                        locked = True
                        txn = _PgTxn(_Conn(conn))
                        txn.server_clock = clock
                        if self.store_id:
                            txn.owner = (self.path, self.schema, self.store_id)
                        result = fn(txn)
                        txn.flush()
                        body_done = True  # what fails from here on may have committed: never retried
                    return result
                except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
                    if attempt == WRITE_RETRIES:
                        raise StoreError(f"{self.path}: the write failed {WRITE_RETRIES + 1} times on "
                                         "serialization conflicts") from None
                    time.sleep(0.005 * (attempt + 1))
                except psycopg.errors.LockNotAvailable:
                    if locked:  # the advisory lock was taken: a lock on a table, held by a session that is no writer
                        raise StoreError(f"{self.path}: a table of the store ({self.schema}) was locked by another "
                                         "PostgreSQL session (not a Sealbox writer: LOCK TABLE, ALTER TABLE, VACUUM "
                                         f"FULL, ...) for more than lock_timeout ({timeout:g} s; "
                                         "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands)") from None
                    raise StoreError(f"{self.path}: the write lock was held by another writer for more than "
                                     f"lock_timeout ({timeout:g} s; SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` "
                                     "commands)") from None
                except psycopg.OperationalError as exc:
                    # the server ended the connection (a restart, pg_terminate_backend, an idle timeout) before
                    # this transaction's COMMIT was sent: nothing of it was committed; once, on a new connection
                    # (during the COMMIT of an append: made again only when its first event is not in the log)
                    lost = conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
                    if lost and not conn.closed:
                        conn.close()  # left mid-transaction by the failure (e.g. inside a pipeline): never reused
                    placed = body_done and isinstance(result, list) and bool(result) and isinstance(result[0], Event)
                    if reconnected or not lost or (body_done and not placed):
                        raise StoreError(f"{self.path}: PostgreSQL refused the write ({_one_line(exc)})") from None
                    reconnected, conn = True, self._pg()
                    # ended during its COMMIT: committed or not, which a new connection tells once the ended one's
                    # transaction is over (its advisory lock free): its first event is in the log, or it is made again
                    if placed and self._committed(conn, result[0], exc):
                        return result
                except psycopg.Error as exc:
                    raise StoreError(f"{self.path}: PostgreSQL refused the write ({_one_line(exc)})") from None
            # only after a lost COMMIT on the last attempt, found not committed: never a silent success
            raise StoreError(f"{self.path}: the write was not made: the server ended its connection during the "
                             f"COMMIT of its last attempt ({WRITE_RETRIES + 1}), and it was not committed")
        finally:
            self._op_leave(depth)

    def _committed(self, conn: Any, first: Event, exc: BaseException) -> bool:
        """Whether ``first`` (the first event of a write whose COMMIT's answer was lost) is in the log, read on
        ``conn`` (a new connection) under the write lock: the lost connection's transaction has ended by then."""
        psycopg = _psycopg()
        timeout = self.lock_timeout if self._local.lock_timeout is None else self._local.lock_timeout
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout TO {min(max(1, int(timeout * 1000)), 2**31 - 1)}")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
                row = conn.execute("SELECT leaf_hash FROM events WHERE leaf_index = %s", (first.leaf_index,)).fetchone()
        except psycopg.Error as again:
            raise StoreError(f"{self.path}: PostgreSQL refused the write ({_one_line(exc)}), and whether it was "
                             f"committed could not be read ({_one_line(again)})") from None
        return row is not None and bytes(row[0]) == first.leaf_hash

    def no_wait(self) -> Any:
        """As :meth:`SqliteStore.no_wait`: a write finding the lock taken raises StoreBusyError at once."""
        return _sq._NoWait(self._local)

    def waiting_until(self, deadline: float) -> Any:
        """As :meth:`SqliteStore.waiting_until`."""
        return _sq._WaitingUntil(self._local, deadline)

    def append_with(self, build: Callable[[Any], Sequence[EventDraft]], *, sync: bool = True) -> list[Event]:
        """Call ``build(reader)`` inside the write transaction (a :class:`PgReader`) and append what it
        returns, atomically; see :meth:`SqliteStore.append_with`."""
        def work(txn: _PgTxn) -> list[Event]:
            if self._damage:
                raise StoreError(self._damage)
            reader = PgReader(txn.conn, txn)
            reader.stamp = stamp = txn.stamp()  # the server's clock, read when the transaction took the lock
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
                pass
            except StoreError as exc:
                if self._damage:  # changed below Sealbox (recorded by issue_checkpoint): later appends are refused
                    _log.error("%s", exc)
                    return events
                if not (self._closing or self._closed):
                    _log.warning("%s: checkpoint not signed now: %s", self.path, exc)
        return events

    def issue_checkpoint(self, extensions: Sequence[str] = ()) -> StoredCheckpoint:
        """Sign a checkpoint of the whole log, store it and write ``DIR/checkpoint``; see
        :meth:`SqliteStore.issue_checkpoint` (the same checks, the same signed note, the same errors:
        a store changed below Sealbox is a plain ``StoreError``)."""
        try:
            return self._sign_checkpoint(extensions)
        except _sq._ChangedBelowError as exc:
            self._damage = str(exc)
            raise StoreError(str(exc)) from exc.__cause__

    def _sign_checkpoint(self, extensions: Sequence[str] = ()) -> StoredCheckpoint:
        """As :meth:`SqliteStore._sign_checkpoint`: raises the private ``_ChangedBelowError``."""
        if self._signer is None:
            raise StoreReadOnlyError("this store was opened without its signing key")
        with self._ckpt_lock:
            plain, cp = self._write(lambda txn: self._sign_in_txn(txn, tuple(extensions)))
            self._publish_checkpoint(plain)
            self._floor = max(self._floor, cp.tree_size)
            self._last_ckpt_size, self._last_ckpt_time = cp.tree_size, time.monotonic()
            return cp

    def _sign_in_txn(self, txn: _PgTxn, extensions: tuple[str, ...] = ()) -> tuple[StoredCheckpoint, StoredCheckpoint]:
        body = Checkpoint(self.origin, 0, bytes(32), extensions)
        size = txn.tree_size()
        row = txn.conn.execute(_LATEST_SQL).fetchone()
        now = utc_now()
        self._check_before_signing(txn, size, row)
        root = merkle.root_at(size, txn.get_node)
        if row is not None:
            signed = self._signed_row(row)
            if signed.size > size:
                raise _sq.StoreRolledBackError(f"the store holds {size} events but its newest signed checkpoint covers "
                                               f"{signed.size}: refusing to sign (run `sealbox verify`)")
            if signed.size > 0:
                proof = merkle.consistency_proof(signed.size, size, txn.get_node)
                try:
                    merkle.verify_consistency(signed.size, size, proof, signed.root, root)
                except _sq.ProofError as exc:
                    raise _sq._ChangedBelowError(
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

    def _insert_checkpoint(self, txn: _PgTxn, checkpoint: Checkpoint, now: str) -> StoredCheckpoint:
        note = _sq.sign_checkpoint(checkpoint, self._signer)
        txn.conn.pg.execute(
            "INSERT INTO checkpoints (id, tree_size, root_hash, note, created_at)"
            " VALUES ((SELECT coalesce(max(id), 0) + 1 FROM checkpoints), %s, %s, %s, %s)",
            (checkpoint.size, checkpoint.root, note, now))
        txn.checkpoint_inserted(checkpoint.size)
        return StoredCheckpoint(checkpoint.size, checkpoint.root, note, now)

    def put_snapshot(self, content: dict[str, Any]) -> str:
        """Store a snapshot's strict JSON form once; return its fingerprint (``sha256:<hex>``)."""
        from sealbox.canonical import canonical_bytes
        from sealbox.snapshot import snapshot_fingerprint

        fp = snapshot_fingerprint(content)
        data = canonical_bytes(content)
        self._write(lambda txn: txn.conn.pg.execute(
            "INSERT INTO snapshots (fingerprint, content, created_at) VALUES (%s, %s, %s)"
            " ON CONFLICT (fingerprint) DO NOTHING", (fp, data, utc_now())))
        return fp

    # ----------------------------------------------------------------- reading

    def _drop_ended_connection(self) -> None:
        """Close this thread's idle connection if the server has ended it (a restart, a failover,
        ``pg_terminate_backend``, ``idle_session_timeout``), so that the read about to start opens a new
        one instead of failing: the server's last message (FATAL) or the closed socket is then waiting to
        be read, and an idle connection of the store has nothing else to receive (it listens to no
        channel). One ``select`` of the socket, no round trip."""
        conn = self._local.conn
        if conn is None or conn.closed or self._pid != os.getpid():
            return
        try:
            ended = bool(select.select([conn.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            ended = True
        if ended and conn.info.transaction_status == _psycopg().pq.TransactionStatus.IDLE:
            conn.close()

    @contextlib.contextmanager
    def _operation(self) -> Iterator[None]:
        """A read under way (counted, as SqliteStore's): the server ending the connection under it (a restart,
        ``pg_terminate_backend``) is a StoreError; the thread's next read opens a new connection."""
        psycopg = _psycopg()
        depth = self._op_enter()
        try:
            if not depth:
                self._drop_ended_connection()
            yield
        except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
            raise  # inside a write: its retry or its own error
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.path}: PostgreSQL could not answer a read ({_one_line(exc)})") from None
        finally:
            self._op_leave(depth)

    @contextlib.contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Every read in this thread inside the block sees one snapshot (a REPEATABLE READ transaction)."""
        psycopg = _psycopg()
        with self._operation():
            conn = self._pg()
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE and self._local.ops == 1:
                conn.close()  # not this thread's write or read: left mid-transaction by a failure (see _write)
                conn = self._pg()
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                yield
                return
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        with self.read_snapshot():
            return fn(self._pg())

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        psycopg = _psycopg()
        with self._operation():
            try:
                return self._pg().execute(sql, tuple(params) or None).fetchall()
            except psycopg.DataError as exc:
                if _nul_param(exc):  # a lookup by an id or name holding a NUL: none is stored
                    return []
                raise

    def _paged(self, sql: str, params: tuple, first: Any, batch: int) -> Iterator[tuple]:
        """The rows of ``sql`` (``params``, then the last key seen, then ``batch``), fetched ``batch`` at a
        time by their first column (a key, starting above ``first``): never the whole table in memory."""
        last = first
        while True:
            rows = self._rows(sql, (*params, last, batch))
            yield from rows
            if len(rows) < batch:
                return
            last = rows[-1][0]

    def size(self) -> int:
        """Number of events in the log."""
        return self._read(lambda c: _PgTxn(_Conn(c)).tree_size())

    def reader(self) -> PgReader:
        """A :class:`PgReader` outside any write transaction."""
        return _PgStoreReader(self)

    def read_run(self, run_id: str) -> list[Event]:
        """Every event of ``run_id``, ordered by run_seq (empty if unknown)."""
        return [event_from_row(*r) for r in self._rows(
            f"SELECT {_EVENT_COLS} FROM events WHERE run_id = %s ORDER BY run_seq", (run_id,))]

    def read_range(self, start: int, end: int) -> list[Event]:
        """Events with leaf index in [start, end), in log order."""
        return [event_from_row(*r) for r in self._rows(
            f"SELECT {_EVENT_COLS} FROM events WHERE leaf_index >= %s AND leaf_index < %s ORDER BY leaf_index",
            (start, end))]

    def get_event(self, leaf_index: int) -> Event:
        """The event at ``leaf_index``; raises :class:`StoreError` if there is none."""
        events = self.read_range(leaf_index, leaf_index + 1)
        if not events:
            raise StoreError(f"no event at leaf index {leaf_index}")
        return events[0]

    def iter_rows(self, batch: int = 5000) -> Iterator[tuple]:
        """Raw rows in log order for verification: (leaf_index, raw, leaf_hash, columns), as
        :meth:`SqliteStore.iter_rows`."""
        last = -1
        while True:
            rows = self._rows(_ROWS_SQL, (last, batch))
            if not rows:
                return
            yield from ((r[0], r[1], r[2], r[3:]) for r in rows)
            last = rows[-1][0]

    def iter_nodes(self) -> Iterator[tuple[int, int, bytes]]:
        """Every stored tree node (level, idx, hash)."""
        for level in sorted(self.node_levels()):
            yield from ((level, idx, h) for idx, h in self.iter_level(level))

    def iter_level(self, level: int) -> Iterator[tuple[int, bytes]]:
        """The stored nodes (idx, hash) of one tree level, in index order."""
        yield from self._paged("SELECT idx, hash FROM tree_nodes WHERE level = %s AND idx > %s ORDER BY idx LIMIT %s",
                               (level,), -1, 5000)

    def node_levels(self) -> list[int]:
        """Levels that hold at least one stored node."""
        return [r[0] for r in self._rows("SELECT DISTINCT level FROM tree_nodes")]

    def root(self, size: int | None = None) -> bytes:
        """RFC 9162 §2.1.1 root of the first ``size`` leaves (default: the whole log)."""
        def work(conn: Any) -> bytes:
            txn = _PgTxn(_Conn(conn))
            n = txn.tree_size() if size is None else _sq.SqliteStore._check_size(size, txn)
            return merkle.root_at(n, txn.get_node)
        return self._read(work)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
        def work(conn: Any) -> list[bytes]:
            txn = _PgTxn(_Conn(conn))
            n = txn.tree_size() if size is None else _sq.SqliteStore._check_size(size, txn)
            return merkle.inclusion_proof(index, n, txn.get_node)
        return self._read(work)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 consistency proof from ``size1`` to ``size2`` leaves (default: now)."""
        def work(conn: Any) -> list[bytes]:
            txn = _PgTxn(_Conn(conn))
            n = txn.tree_size() if size2 is None else _sq.SqliteStore._check_size(size2, txn)
            return merkle.consistency_proof(size1, n, txn.get_node)
        return self._read(work)

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every checkpoint in the store, oldest first."""
        return [_sq._stored_checkpoint(r) for r in self._rows(
            "SELECT tree_size, root_hash, note, created_at FROM checkpoints ORDER BY id")]

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        """The checkpoint with the largest tree size, or None."""
        rows = self._rows(_LATEST_SQL)
        return _sq._stored_checkpoint(rows[0]) if rows else None

    def iter_checkpoint_rows(self) -> list[tuple[Any, Any, Any, Any]]:
        """Every checkpoints row as stored, (id, tree_size, root_hash, note), by id."""
        return self._rows("SELECT id, tree_size, root_hash, note FROM checkpoints ORDER BY id")

    def get_blob(self, ref: str) -> bytes:
        """The canonical content bytes of blob ``ref``; BlobNotFoundError when absent or erased."""
        rows = self._rows("SELECT content FROM blobs WHERE ref = %s", (ref,))
        if not rows or rows[0][0] is None:
            raise _sq.BlobNotFoundError(f"blob {ref} is not in the store" if not rows else f"blob {ref} was erased")
        return bytes(rows[0][0])

    def get_blob_row(self, ref: str) -> tuple[bytes | None, bytes | None] | None:
        """(salt, content) of blob ``ref`` (both None once erased), or None when not stored."""
        rows = self._rows("SELECT salt, content FROM blobs WHERE ref = %s", (ref,))
        return (rows[0][0], rows[0][1]) if rows else None

    def iter_blobs(self) -> Iterator[tuple[str, bytes | None, bytes | None]]:
        """Every blob row (ref, salt, content); salt and content are None once erased."""
        yield from self._paged("SELECT ref, salt, content FROM blobs WHERE ref > %s ORDER BY ref LIMIT %s", (), "", 200)

    def blob_size_mismatches(self) -> list[tuple[str, Any, int]]:
        """(ref, stored size, content length) of every blob whose size column is not its content's length."""
        return self._rows("SELECT ref, size, length(content) FROM blobs WHERE content IS NOT NULL"
                          " AND size <> length(content) ORDER BY ref COLLATE \"C\"")

    def resolve(self, value: Any) -> Any:
        """Replace every ``{"$blob": ...}`` in ``value`` by the content it commits to."""
        return _blobs.resolve(value, self.get_blob)

    def get_snapshot(self, fingerprint: str) -> dict[str, Any]:
        """A stored snapshot's strict JSON form (a unique prefix of at least 8 hex digits is accepted).

        Raises:
            StoreError: no such snapshot, or the prefix is ambiguous. ConfigError: not a string.
        """
        if not isinstance(fingerprint, str):
            raise ConfigError(f"fingerprint: {fingerprint!r} is not a string")
        fp = fingerprint if fingerprint.startswith("sha256:") else "sha256:" + fingerprint
        rows = self._rows("SELECT fingerprint, content FROM snapshots WHERE starts_with(fingerprint, %s) LIMIT 2",
                          (fp,)) if len(fp) >= 15 else []
        if len(rows) != 1:
            raise StoreError(f"no snapshot {fingerprint!r} in this store" if not rows
                             else f"snapshot prefix {fingerprint!r} is ambiguous")
        from sealbox.store.base import intact_snapshot

        return json.loads(intact_snapshot(rows[0][0], bytes(rows[0][1])))

    def iter_snapshots(self) -> Iterator[tuple[str, bytes]]:
        """Every stored snapshot (fingerprint, canonical bytes)."""
        yield from self._paged("SELECT fingerprint, content FROM snapshots WHERE fingerprint > %s ORDER BY fingerprint"
                               " LIMIT %s", (), "", 200)

    def iter_run_rows(self) -> Iterator[tuple]:
        """Every row of the runs table, as :meth:`SqliteStore.iter_run_rows`."""
        for row in self._paged("SELECT leaf_index, run_id, agent, principal, parent_run_id, replay_of, snapshot,"
                               " started_at, leaf_index FROM runs WHERE leaf_index > %s ORDER BY leaf_index LIMIT %s",
                               (), -1, 5000):
            yield row[1:]

    def content_policy_change(self) -> str | None:
        """Why the content settings in ``store_meta`` are not those recorded at creation, or None."""
        if self._content_error:
            return self._content_error
        rows = self._rows("SELECT convert_from(raw, 'UTF8')::jsonb #>> '{payload,labels,content_policy}' FROM events"
                          " WHERE run_id = %s AND run_seq = 1", (SYSTEM_RUN_ID,))
        recorded = rows[0][0] if rows else None
        if recorded is None or recorded == self.content.fingerprint():
            return None
        return (f"the content settings in the database (mode {self.content.mode}, {self.content.fingerprint()}) "
                f"are not those recorded when the store was created ({recorded}): they were changed below Sealbox")

    def schema_problems(self) -> list[tuple[str, str]]:
        """(code, message) of schema_migrations rows naming another migration than the one of their version."""
        shipped = {m.version: m.name for m in migrate.load_migrations("postgres")}
        return [("schema_migration_altered", f"the store's schema_migrations row of migration {version!r} names "
                 f"{name!r}, not {shipped.get(version)!r}: it was changed below Sealbox")
                for version, name in self._rows("SELECT version, name FROM schema_migrations ORDER BY version")
                if shipped.get(version) != name]

    def _triggers(self) -> dict[str, str]:
        """name -> 'O' (enabled), 'D' (disabled) … of the triggers on this schema's tables."""
        return dict(self._rows("SELECT t.tgname, t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                               " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s"
                               " AND NOT t.tgisinternal", (self.schema,)))

    def missing_triggers(self) -> list[str]:
        """Append-only triggers the migrations created that are gone."""
        present = self._triggers()
        return sorted(name for name in EXPECTED_TRIGGERS if name not in present)

    def disabled_triggers(self) -> list[str]:
        """Append-only triggers the migrations created that are there but do not fire: disabled (``D``) or
        enabled for replication sessions only (``R``)."""
        present = self._triggers()
        return sorted(name for name in EXPECTED_TRIGGERS if present.get(name, "O") not in ("O", "A"))

    def triggers_bypassed(self) -> str | None:
        """The ``session_replication_role`` of Sealbox's sessions when it keeps Sealbox's triggers from firing
        (``replica``: a trigger enabled the default way, ``O``, fires only in ``origin`` and ``local``), or None.
        A superuser sets it for every later session with ``ALTER DATABASE|ROLE … SET``: the triggers are
        then all present and enabled, and none guards anything."""
        (role,), = self._rows("SELECT current_setting('session_replication_role')")
        if role != "replica" or not any(state == "O" for name, state in self._triggers().items()
                                        if name in EXPECTED_TRIGGERS):
            return None
        return role

    def foreign_rules(self) -> list[tuple[str, str]]:
        """(rule, table) of the rules on the store's tables (``CREATE RULE``): no migration creates one, and a
        rule rewrites what Sealbox writes or reads (``DO INSTEAD NOTHING`` drops a row silently)."""
        return [(name, table) for name, table in self._rows(
            "SELECT rulename, tablename FROM pg_rules WHERE schemaname = %s ORDER BY tablename, rulename",
            (self.schema,))]

    def row_security(self) -> list[tuple[str, bool, list[str]]]:
        """(table, forced, policies) of the store's tables with row-level security enabled (``ALTER TABLE …
        ENABLE ROW LEVEL SECURITY``; forced: ``FORCE``, which subjects the owner too). No migration enables it:
        a policy hides rows from whoever reads (an empty log, or one missing the rows an investigator looks
        for) or refuses Sealbox's inserts. pg_class and pg_policy are readable by every role."""
        return [(table, forced, list(policies)) for table, forced, policies in self._rows(
            "SELECT c.relname, c.relforcerowsecurity, ARRAY(SELECT p.polname::text FROM pg_policy p"
            " WHERE p.polrelid = c.oid ORDER BY p.polname) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p')"
            " AND c.relrowsecurity ORDER BY c.relname", (self.schema,))]

    def foreign_triggers(self) -> list[str]:
        """Triggers on the store's tables that no migration created, and Sealbox's trigger functions
        redefined (``CREATE OR REPLACE FUNCTION``: a trigger of Sealbox's name that lets every change through)."""
        found = sorted(set(self._triggers()) - EXPECTED_TRIGGERS)
        shapes = _trigger_shapes()
        for name, table, tgtype, unqualified, no_columns, no_args, function, function_schema in self._rows(
                "SELECT t.tgname, c.relname, t.tgtype, t.tgqual IS NULL, t.tgattr = ''::int2vector, t.tgnargs = 0,"
                " p.proname, pn.nspname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid"
                " JOIN pg_namespace pn ON pn.oid = p.pronamespace WHERE n.nspname = %s AND NOT t.tgisinternal"
                " ORDER BY t.tgname", (self.schema,)):
            shape = shapes.get(name)
            if shape is not None and ((table, tgtype, function) != shape[:3] or not unqualified or not no_columns
                                      or not no_args or function_schema != self.schema):
                found.append(f"{name} (redefined: not {shape[3]} as Sealbox creates it)")
        for name, body in self._rows("SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                                     " WHERE n.nspname = %s AND p.proname = ANY(%s)",
                                     (self.schema, list(_trigger_functions()))):
            if " ".join(body.split()) != _trigger_functions()[name]:
                found.append(f"{name}() (redefined)")
        return found

    # ----------------------------------------------------------------- not offered yet

    _calls_sql = None  # set below the class (PostgreSQL's calls query and result expression)
    _runs_sql = ""
    _reader_class = PgReader
    explain_query_calls = _unsupported("explain_query_calls", "explaining a call query's plan (SQLite's EXPLAIN)")

    def _locate_damaged(self, exc: BaseException) -> DamagedEventError:
        """The :class:`DamagedEventError` of the first event that cannot be read (a query failed with ``exc``)."""
        with self._operation():
            return _first_damaged(self._pg(), exc)

    def ids_with_prefix(self, what: str, prefix: str, limit: int = 6) -> list[str]:
        """Run ids (``what="run"``) or approval request ids (``what="approval"``) starting with ``prefix``,
        in code-point order, at most ``limit`` (as :meth:`SqliteStore.ids_with_prefix`)."""
        if what == "run":
            sql = "SELECT run_id FROM runs WHERE starts_with(run_id, %s) ORDER BY run_id LIMIT %s"
        elif what == "approval":
            from sealbox.query import prefix_upper_bound

            # through the events_approval index (migration 0002): the ids in the range only. COLLATE "C"
            # compares UTF-8 bytes, i.e. code points: the range is [prefix, its successor) (prefix + U+10FFFF
            # was no bound: an id holding U+10FFFF right after the prefix sorts at or above it), unbounded for
            # a prefix of U+10FFFF only; starts_with keeps the result exact whatever the range
            upper = prefix_upper_bound(prefix)
            below = "" if upper is None else f" AND {_APPROVAL_KEY} < %s"
            sql = (f"SELECT DISTINCT {_APPROVAL_KEY} AS a FROM events WHERE kind = 'approval.requested'"
                   f" AND {_APPROVAL_KEY} >= %s{below} AND starts_with({_APPROVAL_KEY}, %s)"
                   " ORDER BY a LIMIT %s")
            bounds = (prefix,) if upper is None else (prefix, upper)
            return [r[0] for r in self._rows(sql, (*bounds, prefix, int(limit)))]
        else:
            raise ValueError(f"ids_with_prefix: what is 'run' or 'approval', not {what!r}")
        return [r[0] for r in self._rows(sql, (prefix, int(limit)))]

    optimize = lambda self: None  # noqa: E731 - PostgreSQL's autovacuum keeps its statistics

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Sign a final checkpoint if events arrived since the last one, then close every connection.
        Calling it again does nothing."""
        me = threading.get_ident()
        if self._local.ops and not self._closing and not self._closed:
            raise StoreError("close() was called inside a write or a read of this store; close it once that has returned")
        with self._ops_idle:
            if self._closed or self._closing:
                wait = self._closing and not self._closed and self._closer != me
            else:
                wait = None
        if wait is not None:
            if wait:
                self._closed_event.wait(self.lock_timeout + 30)
            return
        with self._ops_idle:
            self._closing, self._closer = True, me
        self._stop_checkpoint_timer(wait=False)
        with self._ops_idle:
            deadline = time.monotonic() + self.lock_timeout + 5
            while self._ops - self._local.ops > 0 and deadline > time.monotonic():
                self._ops_idle.wait(deadline - time.monotonic())
        try:
            if self._damage:
                _log.error("%s: no final checkpoint signed: %s", self.path, self._damage)
            elif self._signer is not None and self.size() > self._last_ckpt_size:
                self.issue_checkpoint()
        finally:
            try:
                self._stop_checkpoint_timer(wait=True)
            finally:
                self._closed = True
                self._close_connections()
                self._closed_event.set()

    def _close_connections(self) -> None:
        with self._conns_lock:
            for conn in self._conns:
                with contextlib.suppress(Exception):
                    conn.close()
            self._conns.clear()

    def __enter__(self) -> "PostgresStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: PostgreSQL's json operators refuse a document holding the escape \u0000 (a NUL, which the canonical form
#: escapes so): an event whose raw holds one is read with each such escape as \ufffe (an escape the canonical
#: form never writes: it writes U+FFFE as it is), and the JSON text a listing returns of it is mapped back.
#: Twice: one pass misses every other escape of a run of adjacent ones (no "?" in this SQL: see _q).
_HAS_NUL = r"position('\x5c7530303030'::bytea IN {t}.raw) > 0"
_NUL_MAP = r"regexp_replace(regexp_replace({x}, '(^|[^\\])((\\\\)*)\\{a}', '\1\2\\{b}', 'g'), '(^|[^\\])((\\\\)*)\\{a}', '\1\2\\{b}', 'g')"
_TEXT = "convert_from({t}.raw, 'UTF8')"
_SAFE = ("(CASE WHEN " + _HAS_NUL + " THEN " + _NUL_MAP.format(x=_TEXT, a="u0000", b="ufffe") + " ELSE " + _TEXT
         + " END)::json")
_J = _SAFE + " -> 'payload'"
#: The key of the ``events_approval`` index (migration 0002): an approval.requested event's payload
#: ``approval_id`` read from its hashed bytes by ``sealbox_approval_id``, in the "C" collation. Queries
#: write it exactly so, with ``kind = 'approval.requested'`` as a literal, for the planner to use that index.
_APPROVAL_KEY = '(sealbox_approval_id(raw) COLLATE "C")'


def _json_text(expr: str, t: str) -> str:
    """``(expr)::text`` of a JSON value read from event ``t`` through :data:`_SAFE`, its NUL escapes restored."""
    return (f"CASE WHEN {_HAS_NUL.format(t=t)} THEN {_NUL_MAP.format(x=f'({expr})::text', a='ufffe', b='u0000')}"
            f" ELSE ({expr})::text END")


#: The calls listing (sqlite_queries._CALLS_SQL) in PostgreSQL's SQL: the same rows, the same order.
_PG_NEXT = """COALESCE(
    (SELECT e.leaf_index FROM events e WHERE e.leaf_index = c.leaf_index + {offset} AND e.call_id = c.call_id
     AND e.run_id = c.run_id AND e.kind = '{kind}'),
    (SELECT e.leaf_index FROM events e WHERE e.call_id = c.call_id AND e.kind = '{kind}'
     AND e.leaf_index > c.leaf_index AND e.run_id = c.run_id ORDER BY e.leaf_index LIMIT 1))"""
_PG_CALLS_SQL = ("""
SELECT c.ts, c.run_id, r.agent, c.principal, c.step, c.call_id, c.server, c.tool,
       """ + _json_text("json_build_array(cp.p -> 'exposed', cp.p -> 'grant', cp.p -> 'arguments')", "c") + """,
       d.effect, COALESCE(d.rule, """ + _J.format(t="d") + """ ->> 'rule'),
       COALESCE(d.reason_code, """ + _J.format(t="d") + """ ->> 'reason_code'),
       x.ok, CASE WHEN x.ok = 0 THEN """ + _json_text(_J.format(t="x") + " -> 'error'", "x") + """ END,
       x.duration_us, {altered}{result}
FROM events c
CROSS JOIN LATERAL (SELECT """ + _J.format(t="c") + """ AS p) cp
LEFT JOIN runs r ON r.run_id = c.run_id
LEFT JOIN events d ON d.leaf_index = """ + _PG_NEXT.format(offset=1, kind="policy.decision") + """
LEFT JOIN events x ON x.leaf_index = """ + _PG_NEXT.format(offset=2, kind="tool.result") + """
WHERE {where}
ORDER BY c.leaf_index DESC
""").replace("{offset}", "").replace("{kind}", "")
_PG_RESULT_SQL = "(" + _json_text(_J.format(t="x") + " -> 'result'", "x") + ")"
#: The runs listing (sqlite_queries._RUNS_SQL) in PostgreSQL's SQL.
_PG_RUNS_SQL = """
SELECT r.run_id, r.agent, r.principal, r.parent_run_id, r.replay_of, r.snapshot, r.started_at,
       """ + _json_text(_J.format(t="s") + " -> 'labels'", "s") + """, l.kind, l.ts, l.run_seq,
       CASE WHEN l.kind = 'run.ended' THEN """ + _J.format(t="l") + """ ->> 'status' END, p.kind,
       (""" + _J.format(t="s") + """ ->> 'imported') IS NOT NULL,
       CASE WHEN l.kind = 'run.ended' THEN """ + _json_text(_J.format(t="l") + " -> 'imported'", "l") + """ END,
       (""" + _J.format(t="s") + """ -> 'lease')::text = 'true',
       l.leaf_index, p.leaf_index, r.leaf_index, s.kind, s.run_id, s.run_seq
FROM runs r
JOIN events s ON s.leaf_index = r.leaf_index
JOIN events l ON l.run_id = s.run_id AND l.run_seq = (SELECT max(run_seq) FROM events WHERE run_id = s.run_id)
JOIN events p ON p.run_id = s.run_id AND p.run_seq = (
    SELECT max(run_seq) FROM events WHERE run_id = s.run_id AND kind IN ({lifecycle}))
WHERE {where}
ORDER BY r.started_at DESC, r.leaf_index DESC
"""
PostgresStore._calls_sql = (_PG_CALLS_SQL, _PG_RESULT_SQL)
PostgresStore._runs_sql = _PG_RUNS_SQL
PostgresStore._contains_sql = "position(?::bytea in {column}) > 0"
PostgresStore._names_call_sql = ("position(convert_to('\"call_id\":' || to_json(c.call_id)::text, 'UTF8')"
                                " in e.raw) > 0")


def _pg_raw_field_sql(path: str, t: str = "s") -> str:
    """SqliteQueries._raw_field_sql in PostgreSQL's SQL: the text at ``path`` in event ``t``'s hashed bytes."""
    *keys, last = path.split(".")
    return "(" + _SAFE.format(t=t) + "".join(f" -> '{k}'" for k in keys) + f" ->> '{last}')"


PostgresStore._raw_field_sql = staticmethod(_pg_raw_field_sql)
PostgresStore._starts_sql = staticmethod(
    lambda column, text: f"substring({column} from 1 for {len(text.encode())}) = convert_to('{text}', 'UTF8')")
PostgresStore._renamed_calls_sql = (
    "", "substring(o.raw from 1 for 20) = convert_to('{\"kind\":\"tool.call\",', 'UTF8')")
PostgresStore._imported_start_sql = "(" + _J.format(t="s") + " ->> 'imported') IS NOT NULL"


def _pg_guarded(name: str) -> Callable[..., Any]:
    """SqliteQueries' ``name`` on PostgreSQL, a query failing on a row changed below Sealbox (bytes that
    are not UTF-8 or not JSON, which PostgreSQL's JSON casts refuse) raised as the
    :class:`DamagedEventError` naming the first damaged event, as on SQLite."""
    base = getattr(SqliteQueries, name)

    def guarded(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        psycopg = _psycopg()
        try:
            if not self._local.ops:
                self._drop_ended_connection()
            return base(self, *args, **kwargs)
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.path}: PostgreSQL could not answer a read ({_one_line(exc)})") from None
        except psycopg.errors.DataError as exc:
            if _nul_param(exc):  # a filter holding a NUL matches nothing stored; the log is not damaged
                return None if name == "get_run" else []
            raise self._locate_damaged(exc) from None

    guarded.__name__, guarded.__doc__ = name, base.__doc__
    return guarded


for _name in ("runs", "query_calls", "query_runs", "get_run", "has_replays"):
    setattr(PostgresStore, _name, _pg_guarded(_name))


# The backend-independent parts of the SQLite store, shared as they are (they use only the
# folder, the signer, the checkpoint policy and the write/read methods above).
for _name in ("append", "_maybe_checkpoint", "_checkpoint_timer", "_stop_checkpoint_timer", "_timer_checkpoint",
              "_check_before_signing", "_signed_row", "checkpoint_file_note", "_checkpoint_file_problem",
              "checkpoint_file_size", "_publish_checkpoint", "_replace_checkpoint_file", "pinned_vkey", "_load_signer", "_op_enter", "_op_leave"):
    setattr(PostgresStore, _name, _sq.SqliteStore.__dict__[_name])
del _name


def _first_damaged(conn: Any, exc: BaseException) -> DamagedEventError:
    """The :class:`DamagedEventError` of the first event that cannot be read as a Sealbox event, found by
    reading the log in order (only after a query failed with ``exc`` on such a row)."""
    psycopg = _psycopg()
    generic = DamagedEventError(f"an event in the log is damaged (PostgreSQL cannot read it: {_one_line(exc)}): "
                                "the store was changed below Sealbox; run `sealbox verify`")
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
        return generic  # inside a transaction the failed query ended: nothing more can be read in it
    last = -1
    while True:
        rows = conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE leaf_index > %s ORDER BY leaf_index LIMIT 2000",
                            (last,)).fetchall()
        if not rows:
            return generic
        for row in rows:
            try:
                event_from_row(*row)
            except DamagedEventError as err:
                return err
        last = rows[-1][0]


def _folder_taken(folder: Path, waited: bool = False) -> str:
    """Why a PostgreSQL init refuses ``folder`` ('' when it does not): it holds a store (its ``postgres.json``,
    or a SQLite store's ``sealbox.db``: said as :func:`sealbox.store.sqlite._taken_message` says it; ``waited``:
    another init created it while this one waited), or a key or secret without one."""
    if os.path.lexists(folder / CONFIG_NAME):
        return f"{folder} already holds a Sealbox store" + (" (another init created it meanwhile)" if waited else "")
    if os.path.lexists(folder / _sq.DB_NAME):
        return _sq._taken_message(folder, waited)
    for name in (KEY_NAME, SECRET_NAME):
        if os.path.lexists(folder / name):
            return (f"{folder} already holds a {name}: init does not overwrite a store or a key; "
                    "create the store in another folder")
    return ""


def _claim_schema(txn: _PgTxn, schema: str, values: dict[str, str]) -> None:
    """Write a new store's ``store_meta`` under the write lock, refusing a schema another ``init`` claimed
    since the "holds no store" check (two inits racing: the second used to overwrite the first's origin
    and secret check, leaving the first a store its own ``verify`` failed)."""
    if txn.conn.pg.execute("SELECT 1 FROM store_meta LIMIT 1").fetchone() is not None:
        raise StoreError(f"schema {schema!r} of that database already holds a Sealbox store (another init "
                         "created it meanwhile): give another schema (--schema) or open the existing store's folder")
    txn.conn.pg.cursor().executemany("INSERT INTO store_meta (key, value) VALUES (%s, %s)", list(values.items()))


def _drop_claimed(url: str, schema: str, secret_check: str) -> None:
    """Drop the tables and functions of the store a failed ``init`` claimed in ``schema`` (only if its
    ``store_meta`` still names that init's secret); the schema itself stays (it may hold other things)."""
    psycopg = _psycopg()
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
        row = conn.execute(f'SELECT value FROM "{schema}".store_meta WHERE key = %s', ("secret_check",)).fetchone()
        if row is None or row[0] != secret_check:
            return
        tables = sorted(_required_tables() | {"schema_migrations"})
        conn.execute("DROP TABLE " + ", ".join(f'"{schema}".{t}' for t in tables) + " CASCADE")
        conn.execute("DROP FUNCTION " + ", ".join(f'"{schema}".{f}()' for f in sorted(_trigger_functions())))
        conn.execute(f'DROP FUNCTION IF EXISTS "{schema}".sealbox_approval_id(bytea)')  # migration 0002's index key
        conn.execute(f'DROP FUNCTION IF EXISTS "{schema}".sealbox_grant_id(bytea)')  # migration 0003's index key


def _drop_created_schema(url: str, schema: str) -> None:
    """Drop ``schema``, which a failed ``init`` created, if it is empty (``RESTRICT``: never with anything
    another session put there meanwhile); a failure to is ignored (the init's own error is the one to report)."""
    psycopg = _psycopg()
    with contextlib.suppress(psycopg.Error):
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" RESTRICT')


#: a connection URL's user information (``scheme://user:password@``) or a conninfo ``password=...``, as libpq
#: quotes them back in some errors (a URL it cannot parse): never printed (the URL is kept mode 0600 for it)
#: Up to the last '@' of the quoted text: a password typed with a raw '@' (not %40), the likeliest reason a URL fails
#: to parse, has its part after the first '@' read as the host name (psycopg: "failed to resolve host 'secret@h'").
_CREDENTIALS = re.compile(r"(?i)(\bpostgres(?:ql)?://|\bhost ')[^\s\"']*@|(\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s\"']+)")


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, a URL's credentials left out. libpq puts a hint on a line of its own
    ("Connection refused" then "Is the server running on that host ..."): a line ending without punctuation
    before one starting upper case ends with a full stop; a sentence wrapped over lines is joined by a space."""
    lines = [" ".join(line.split()) for line in str(exc).splitlines()]
    text = ""
    for line in filter(None, lines):
        if text and text[-1].isalnum() and line[0].isupper():
            text += "."
        text += (" " if text else "") + line
    text = text or type(exc).__name__
    return _CREDENTIALS.sub(lambda m: m.group(1) + "…@" if m.group(1) else m.group(2) + "…", text)


def test_factory(url: str, request: Any) -> Callable[..., PostgresStore]:
    """For the conformance suite: a factory of fresh PostgreSQL stores, each in its own schema of the
    database at ``url`` and its own folder under the test's ``tmp_path``; at the test's end every
    store is closed and its schema dropped."""
    psycopg = _psycopg()
    tmp = request.getfixturevalue("tmp_path")
    made: list[tuple[PostgresStore, str]] = []

    def make(**kwargs: Any) -> PostgresStore:
        kwargs.setdefault("checkpoint_policy", CheckpointPolicy(every_events=10, every_seconds=3600))
        schema = f"sbt_{uuid.uuid4().hex[:20]}"
        store = PostgresStore.init(tmp / f"pg-store-{len(made)}", url=url, schema=schema, **kwargs)
        made.append((store, schema))
        return store

    def drop() -> None:
        for store, schema in made:
            with contextlib.suppress(Exception):
                store.close()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    request.addfinalizer(drop)
    return make
