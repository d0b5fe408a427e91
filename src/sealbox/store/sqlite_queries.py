"""Queries over the SQLite store: runs, tool calls, and reads inside a write transaction.

Kept apart from :mod:`sealbox.store.sqlite` (opening, appending, proofs) so that
each module stays readable; :class:`SqliteQueries` is mixed into
:class:`~sealbox.store.sqlite.SqliteStore`.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Callable, Sequence, TypeVar

import orjson

from sealbox.errors import BlobNotFoundError, ConfigError
from sealbox.events import KINDS, Event
from sealbox.store.base import DamagedEventError, hash_tag

#: The columns :func:`event_from_row` takes. The hashed bytes and the leaf hash are read as
#: BLOBs whatever their storage class: SQLite's affinity lets a TEXT value into these columns
#: when a row is changed below Sealbox (verify reports it, ``column_type``); its bytes are read
#: as they are (an undecodable TEXT must not stop a read with a UTF-8 error).
_EVENT_COLS = "leaf_index, CAST(raw AS BLOB), CAST(leaf_hash AS BLOB)"

#: The kinds of the ``events_call`` partial index (:meth:`Reader.call_events`).
_CALL_KINDS = ("policy.decision", "tool.result")
#: The key of the ``events_approval`` index (migration 0007): an approval.requested event's payload
#: ``approval_id`` read from its hashed bytes (NULL when they are not JSON). Queries write it exactly
#: so, with ``kind = 'approval.requested'`` as a literal, for the planner to use that index.
_APPROVAL_KEY = ("(CASE WHEN json_valid(CAST(raw AS TEXT)) THEN CAST(raw AS TEXT) ->> '$.payload.approval_id' END)")


def event_from_row(leaf_index: int, raw: bytes, leaf_hash: bytes) -> Event:
    """Build an :class:`Event` from stored columns (the envelope is parsed from ``raw``).

    Raises:
        DamagedEventError: the bytes are not a Sealbox event, or the leaf hash is not 32 bytes
            (the row was changed below Sealbox).
    """
    try:
        env = json.loads(raw)
        payload, kind, run_id, run_seq = env["payload"], env["kind"], env["run_id"], env["run_seq"]
        if (type(payload) is dict and type(kind) is str and kind in KINDS and type(run_id) is str and type(run_seq) is int
                and type(leaf_hash) is bytes and len(leaf_hash) == 32):
            return Event(
                leaf_index=leaf_index, leaf_hash=hash_tag(leaf_hash), raw=bytes(raw), v=env["v"],
                run_id=run_id, run_seq=run_seq, step=env["step"], kind=kind, ts=env["ts"],
                principal=env["principal"], payload=payload, prev=env["prev"],
            )
        exc: Exception | None = None
    except (ValueError, KeyError, TypeError) as caught:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        exc = caught
    raise damaged_event(leaf_index, raw, leaf_hash, exc)


_JSON_TYPES = {dict: "a JSON object", list: "a JSON array", str: "a JSON string", int: "a JSON number",
               float: "a JSON number", bool: "a JSON boolean", type(None): "JSON null"}
_STORAGE = {type(None): "NULL", int: "an INTEGER", float: "a REAL", str: "a TEXT"}


def damaged_event(leaf_index: int | None, raw: Any, leaf_hash: Any = None,
                  exc: Exception | None = None) -> DamagedEventError:
    """The :class:`DamagedEventError` naming what is wrong with a stored event row
    (``leaf_index`` None: a row SQL could not read, not located)."""
    where = "an event in the log" if leaf_index is None else f"the event at leaf {leaf_index}"
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        why = f"its raw column holds {_STORAGE.get(type(raw), type(raw).__name__)}, not the event's bytes"
    else:
        try:
            fault = _envelope_fault(json.loads(raw))
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
            fault = f"they are not JSON ({err})"
        if fault:
            why = f"its bytes are not a Sealbox event: {fault}"
        elif type(leaf_hash) is not bytes or len(leaf_hash) != 32:
            found = f"{len(leaf_hash)} bytes" if type(leaf_hash) is bytes else _STORAGE.get(type(leaf_hash), "no bytes")
            why = f"its stored leaf hash is not a 32-byte hash ({found})"
        else:  # pragma: no cover - event_from_row raises only for the faults above
            why = f"it cannot be read: {type(exc).__name__}: {exc}"
    return DamagedEventError(f"{where} is damaged ({why}): the store was changed below Sealbox; run `sealbox verify`",
                             leaf_index)


def _envelope_fault(env: Any) -> str:
    """What keeps a decoded value from being an envelope :func:`event_from_row` reads ('' when nothing does)."""
    if type(env) is not dict:
        return f"they are {_JSON_TYPES.get(type(env), 'a JSON value')}, not an object"
    missing = [k for k in ("v", "run_id", "run_seq", "step", "kind", "ts", "principal", "payload", "prev") if k not in env]
    if missing:
        return f"they lack the field{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}"
    if type(env["payload"]) is not dict:
        return f"the payload is {_JSON_TYPES.get(type(env['payload']), 'a JSON value')}, not an object"
    if type(env["kind"]) is not str or env["kind"] not in KINDS:
        return f"the kind {env['kind']!r} is not an event kind"
    for key, want in (("run_id", str), ("run_seq", int)):
        if type(env[key]) is not want:
            return f"the {key} is {_JSON_TYPES.get(type(env[key]), 'a JSON value')}"
    return ""


_F = TypeVar("_F", bound=Callable[..., Any])

#: What SQLite (and the sqlite3 module) say when a query's JSON functions meet a row whose bytes
#: are not JSON, or a text that is not UTF-8: rows changed below Sealbox.
_JSON_FAILURES = ("malformed JSON", "JSON cannot hold", "Could not decode to UTF-8")


def locate_damaged(conn: sqlite3.Connection, exc: sqlite3.Error) -> DamagedEventError:
    """The :class:`DamagedEventError` for an SQL query that failed on a damaged event (``exc``):
    the first event SQLite's JSON functions cannot read (found with ``json_valid``), else the
    first one :func:`event_from_row` refuses; a message without a leaf if neither finds one.
    Only on that error path: it reads the whole log."""
    row = conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE NOT json_valid(CAST(raw AS TEXT))"
                       " ORDER BY leaf_index LIMIT 1").fetchone()
    if row is not None:
        return damaged_event(*row)
    for row in conn.execute(f"SELECT {_EVENT_COLS} FROM events ORDER BY leaf_index"):
        try:
            event_from_row(*row)
        except DamagedEventError as err:
            return err
    return DamagedEventError(f"an event in the log is damaged (SQLite cannot read it: {exc}): the store was changed "
                             "below Sealbox; run `sealbox verify`")


def _json_guarded(method: _F) -> _F:
    """``method`` (of an object with ``_conn()`` or ``conn``), its queries' JSON failures on a row
    changed below Sealbox raised as :class:`DamagedEventError` instead of ``sqlite3.OperationalError``."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.OperationalError, sqlite3.DataError) as exc:
            if not any(words in str(exc) for words in _JSON_FAILURES):
                raise
            conn = self._conn() if hasattr(self, "_conn") else self.conn
            raise locate_damaged(conn, exc) from exc

    return guarded  # type: ignore[return-value]


#: The largest count ``sqlite3.Cursor.fetchmany`` takes (a C int), and the largest LIMIT SQLite takes.
_FETCHMANY_MAX = 2**31 - 1
_SQL_LIMIT_MAX = 2**63 - 1


class SqliteQueries:
    """Query methods of :class:`~sealbox.store.sqlite.SqliteStore` (runs, calls). A backend whose SQL
    differs sets the class attributes below to its own queries (:mod:`sealbox.store.postgres`)."""

    #: (the calls listing query, the expression of a call's result) — see :data:`_CALLS_SQL`
    _calls_sql: "tuple[str, str] | None" = None
    #: the runs listing query — see :data:`_RUNS_SQL` (set below, once it is defined)
    _runs_sql: str = ""
    #: the Reader class over a connection of this backend
    _reader_class: Any = None
    #: SQL true when the run's ``run.started`` (``s`` in the runs listing) is an imported run's (``sealbox import``)
    _imported_start_sql: str = "CAST(s.raw AS TEXT) ->> '$.payload.imported' IS NOT NULL"
    #: SQL true when the bytes ``{column}`` hold the bytes of the parameter (a byte search, no JSON parse)
    _contains_sql: str = "instr({column}, ?) > 0"
    #: SQL true when event ``e``'s bytes hold ``"call_id":`` then call ``c``'s id as a JSON string (a byte search)
    _names_call_sql: str = ""  # set below (_NAMES_CALL_SQL)

    #: the leaf indexes of events whose hashed bytes start as a ``tool.call``'s while their ``kind`` column names
    #: a kind other than the call's own events' (rewritten below Sealbox: ``UPDATE events SET kind = 'note'``), among
    #: those holding a ``tool`` column: ``(index clause, SQL true when c.raw starts as a tool.call's)``, the index
    #: clause a format of an index name (SQLite's ``INDEXED BY {}``; PostgreSQL's planner chooses: empty)
    _renamed_calls_sql: tuple[str, str] = ("", "")  # set below (_renamed_calls_sql)

    def _renamed_call_leaves(self, *, tool: str | None = None, server: str | None = None, run_id: str | None = None,
                             since: str | None = None, until: str | None = None) -> list[int]:
        """:attr:`_renamed_calls_sql`'s leaf indexes, oldest first (none in an intact store), narrowed by the
        listing's own filters on the columns a renamed call still holds (``since``/``until`` parsed times):

        * ``run_id``: the run's events of other kinds (``events_run_kind``);
        * ``since``/``until`` without ``tool``/``server``: per kind other than the three (the store's kinds, read
          by a skip scan of ``events_kind_ts``: a seek each), that kind's events in the window (``events_kind_ts``);
        * else the store's events of other kinds that hold a tool (SQLite: ``events_other_kinds_tool``, migration
          0008, a range of it for ``tool``'s literal prefix; PostgreSQL's planner: ``events_tool`` /
          ``events_server_tool``), ``server`` and the window tested on each row.

        The listing confirms every leaf against all its filters (``query_calls(_leaves=...)``)."""
        indexed, starts = self._renamed_calls_sql
        globs: list[str] = []
        params: list[Any] = []
        for col, pattern in (("tool", tool), ("server", server)):
            if pattern is not None:
                _glob_terms(col, pattern, globs, params)
        # (events `o`, not `c`: no calls listing's query)
        terms = [f"o.tool IS NOT NULL AND {starts}", *(t.replace("c.", "o.", 1) for t in globs)]
        for sql, value in (("o.ts >= ?", since), ("o.ts < ?", until)):
            if value is not None:
                terms.append(sql)
                params.append(value)
        where = " AND ".join(terms)
        conn = self._conn()
        if run_id is not None:
            sql = (f"SELECT o.leaf_index FROM events o {indexed.format('events_run_kind')} WHERE o.run_id = ? AND "
                   f"o.kind NOT IN ('tool.call', 'policy.decision', 'tool.result') AND {where}")
            return sorted(r[0] for r in conn.execute(sql, [run_id, *params]))
        if tool is None and server is None and (since is not None or until is not None):
            by_kind = indexed.format("events_kind_ts")
            kinds, kind = [], ""
            while True:  # the store's kinds, a seek each (a skip scan: SQLite's planner does none here)
                row = conn.execute(f"SELECT min(kind) FROM events {by_kind} WHERE kind > ?", [kind]).fetchone()
                if row is None or row[0] is None:
                    break
                kind = row[0]
                if kind not in ("tool.call", "policy.decision", "tool.result"):
                    kinds.append(kind)
            if not kinds:
                return []
            sql = " UNION ALL ".join(f"SELECT o.leaf_index FROM events o {by_kind} WHERE o.kind = ? AND {where}"
                                     for _ in kinds)
            return sorted(r[0] for r in conn.execute(sql, [v for k in kinds for v in (k, *params)]))
        # the condition of events_other_kinds_tool (SQLite migration 0008) term by term as it is written there
        # (`where` starts with o.tool IS NOT NULL): the index of the events of other kinds that hold a tool
        # (few), a range of it for --tool
        sql = (f"SELECT o.leaf_index FROM events o {indexed.format('events_other_kinds_tool')} WHERE "
               f"o.kind <> 'tool.call' AND o.kind <> 'policy.decision' AND o.kind <> 'tool.result' AND {where}")
        return sorted(r[0] for r in conn.execute(sql, params))

    @staticmethod
    def _starts_sql(column: str, text: str) -> str:
        """SQL true when the bytes ``column`` start with the UTF-8 of ``text`` (a literal: no quote in it)."""
        return f"substr({column}, 1, {len(text.encode())}) = CAST('{text}' AS BLOB)"

    @staticmethod
    def _raw_field_sql(path: str, t: str = "s") -> str:
        """SQL of the text at ``path`` (``payload.agent``, ``ts``) in event ``t``'s hashed bytes, parsed as
        JSON (NULL where absent): what the query columns copied from it should say."""
        return f"(CAST({t}.raw AS TEXT) ->> '$.{path}')"

    def runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs, newest first: run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at, last_kind, events."""
        sql = (
            "SELECT r.run_id, r.agent, r.principal, r.parent_run_id, r.replay_of, r.snapshot, r.started_at,"
            " (SELECT kind FROM events e WHERE e.run_id = r.run_id ORDER BY run_seq DESC LIMIT 1),"
            " (SELECT max(run_seq) FROM events e WHERE e.run_id = r.run_id)"
            " FROM runs r ORDER BY r.started_at DESC, r.leaf_index DESC"
        )
        if limit:
            sql += f" LIMIT {min(int(limit), _SQL_LIMIT_MAX)}"
        keys = ("run_id", "agent", "principal", "parent_run_id", "replay_of", "snapshot", "started_at", "last_kind", "events")
        return [dict(zip(keys, row)) for row in self._conn().execute(sql)]

    def has_replays(self) -> bool:
        """Whether any run of the store is a replay (has ``replay_of``)."""
        return self._conn().execute("SELECT 1 FROM runs WHERE replay_of IS NOT NULL LIMIT 1").fetchone() is not None

    # ----------------------------------------------------------------- queries

    @_json_guarded
    def query_calls(self, *, tool: str | None = None, server: str | None = None, run_id: str | None = None,
                    agent: str | None = None, principal: str | None = None, since: Any = None, until: Any = None,
                    decision: str | None = None, error: bool | None = None, match: Any = None,
                    limit: int | None = None, replays: bool = True,
                    check_altered: bool = False, _leaves: Any = None) -> list[dict[str, Any]]:
        """Every tool call across runs that passes all the filters given, one row per call, oldest
        first (log order: ``ts`` is taken inside the write transaction, so it ascends with it).

        Indexed filters run in SQL ("every call to tool X" uses ``events_tool``);
        glob confirmation and ``match`` run in Python on the candidates
        (:mod:`sealbox.query`), so their semantics are the same on every backend.

        Args:
            tool, server: glob (:func:`fnmatch.fnmatchcase`) on the upstream tool / server name; a ``tool``
                holding a ``/`` also matches ``server/tool`` as listings print it.
            run_id: a run id, or a prefix of exactly one of at least 4 characters, as ``sealbox calls --run``
                takes it (:func:`sealbox.query.resolve_run_id`; upper case and blanks around it read as
                the command reads them); ConfigError when it names no run of the store.
            agent, principal: exact values (principal of the ``tool.call`` event).
            since, until: RFC 3339, a date, or a duration back from now (``2h``, ``30d``);
                ``since`` inclusive, ``until`` exclusive.
            decision: ``allow``, ``deny`` or ``require_approval`` (the call's policy decision).
            error: True: only calls whose ``tool.result`` has ok false; False: only calls
                that ran and succeeded (calls without a result pass neither).
            match: ``field.path~regex`` strings or ``(field_path, regex)`` pairs (or one of them), all of which
                must match (Python :mod:`re`, searched in the resolved value; see :func:`sealbox.query.parse_match`).
            limit: at most this many rows (a whole number, 1 or more, of any size): the newest ones (still returned oldest first).
            replays: False leaves out the calls of replay runs (runs with ``replay_of``: served from the
                record, or run again for real by a replay with live tools).
            check_altered: True also reads each call's three events' stored bytes and leaf hash
                (``tool.call``, ``policy.decision``, ``tool.result``) and gives a call one of whose events
                no longer hashes to its stored leaf hash (changed below Sealbox;
                :func:`sealbox.query.event_altered`) the flag :data:`sealbox.query.ALTERED_FLAG`
                (``"altered"``) in its ``flags``, as ``sealbox calls`` does. Off by default: it costs a
                fetch of those columns, one SHA-256 and one JSON parse per event (on SQLite about 1.5x to
                1.8x the listing's time for one tool's calls, about 2x for every call: docs/recording.md,
                measured 2026-12-05), and without it the query reads none of those columns and
                no row is flagged ``altered``. With it, ``decision`` and ``error`` also keep a call whose
                decision / result no longer joins it, or whose result's ``ok`` column disagrees with its bytes,
                when the hashed bytes pass the filter (flagged ``altered``; :meth:`_altered_filter`), and
                ``agent``, ``principal`` and ``replays=False`` keep a call whose run's ``run.started`` (its
                tool.call, for ``principal``) says by its hashed bytes what is asked, its column rewritten
                (flagged ``altered``). It also lists, flagged ``altered``, an event whose hashed bytes say it
                is a ``tool.call`` while its ``kind`` column was rewritten to a kind that is not a call's, a
                decision's or a result's (:meth:`_renamed_call_leaves`).
                It is not verification either way: ``sealbox verify``
                (:func:`sealbox.verify.verify_store`) is the full check, and also finds a change
                that rewrote the stored hash too.

        Returns:
            Dicts with the keys of :data:`sealbox.query.CALL_COLUMNS` (arguments resolved from blobs);
            ``flags`` holds ``"altered"`` only with ``check_altered``.

        Raises:
            ConfigError: a bad time, decision, match expression or limit; a filter of the wrong type
                (``tool=5``, ``error="yes"``).
        """
        from sealbox.query import check_limit, glob_match, resolve_run_id

        limit = check_limit(limit)
        if run_id is not None and _leaves is None:
            run_id = resolve_run_id(self, run_id)
        if check_altered and _leaves is None:
            # a tool.call whose kind column was rewritten below Sealbox: no 'tool.call' row to the query; listed
            # (flagged altered) from its hashed bytes' leaf, merged into the listing in log order
            # (looked up after the listing's own query: its scattered reads do not evict the pages that one reads)
            from sealbox.query import parse_time

            # the times parsed once (a duration back from now is one window for the listing and the look-up)
            since, until = (None if value is None else parse_time(value, name=name)
                            for value, name in ((since, "since"), (until, "until")))
            args = dict(tool=tool, server=server, run_id=run_id, agent=agent, principal=principal, since=since,
                        until=until, decision=decision, error=error, match=match, limit=limit, replays=replays,
                        check_altered=True)
            listed = self.query_calls(**args, _leaves=())
            # the look-up takes the listing's filters on the columns a renamed call still holds (its other columns
            # rewritten too: see docs/recording.md); a listing cut at its limit bounds it in time too: a call older
            # than the oldest listed is not among the newest `limit`
            after = since
            if limit is not None and len(listed) >= limit and listed:
                oldest = str(listed[0]["ts"])
                after = oldest if after is None or oldest > after else after
            leaves = self._renamed_call_leaves(tool=tool, server=server, run_id=run_id, since=after, until=until)
            if not leaves:
                return listed
            from sealbox.query import ALTERED_FLAG

            extra = self.query_calls(**args, _leaves=leaves)
            for row in extra:
                if ALTERED_FLAG not in row["flags"]:
                    row["flags"].append(ALTERED_FLAG)
            merged = sorted(listed + extra, key=lambda r: str(r["ts"]))
            if limit is not None:
                del merged[:-limit]
            return merged
        sql, params, globs, matches = _calls_query(tool=tool, server=server, run_id=run_id, agent=agent,
                                                   principal=principal, since=since, until=until, decision=decision,
                                                   error=error, match=match, replays=replays,
                                                   template=self._calls_sql, check_altered=check_altered,
                                                   contains=self._contains_sql, names_call=self._names_call_sql,
                                                   field=self._raw_field_sql, leaves=_leaves or None,
                                                   starts=self._starts_sql)
        call_rows = _checked_call_rows if check_altered else _call_rows
        # with check_altered, a --decision / --error filter also lets through calls listed without a decision /
        # without a result (the SQL's "OR d.leaf_index IS NULL" ...): kept when a decision / result of their run
        # names them by its hashed bytes with that effect / ok (its call_id / kind column rewritten below
        # Sealbox), flagged altered (_altered_filter)
        confirm = (self._altered_filter(decision, error)
                   if check_altered and (decision is not None or error is not None) else None)
        _refuse_hidden_matches(matches, getattr(getattr(self, "content", None), "mode", None))
        with_result = any(m.root == "result" for m in matches)
        # approvers and flags are only known once the run's approval events were evaluated
        late = [m for m in matches if m.root in _APPROVAL_ROOTS]
        matches = [m for m in matches if m.root not in _APPROVAL_ROOTS]
        check = bool(globs or matches or late)
        rows: list[dict[str, Any]] = []
        cursor = self._conn().execute(sql, params)
        if not check and confirm is None:  # every candidate is a row: build them without a call per field
            try:  # fetchmany takes a C int: a larger limit reads every row (fewer than the limit), then cuts
                rows = call_rows(cursor if limit is None or limit > _FETCHMANY_MAX else cursor.fetchmany(limit),
                                 self._resolve_quietly)
            finally:
                cursor.close()
            if limit is not None:
                del rows[limit:]
            rows.reverse()
            self._attach_approvals(rows)
            if check_altered:
                self._flag_detached(rows, agent=agent, replays=replays)
            return rows
        if not check:  # only widened candidates to confirm: rows built in batches, those confirmed before the limit
            try:
                while limit is None or len(rows) < limit:
                    # no more than the limit still wants: a candidate that fails confirmation is rare, so
                    # the first batch is nearly always the last (a larger one read rows cut afterwards)
                    batch = [tuple(rec) for rec in cursor.fetchmany(
                        _UNDECIDED_BATCH if limit is None else min(limit - len(rows), _UNDECIDED_BATCH))]
                    if not batch:
                        break
                    rows += [row for row, rec in zip(call_rows(batch, self._resolve_quietly), batch)
                             if confirm(row, rec)]
            finally:
                cursor.close()
            if limit is not None:
                del rows[limit:]
            rows.reverse()
            self._attach_approvals(rows)
            self._flag_detached(rows, agent=agent, replays=replays)
            return rows
        pending: list[dict[str, Any]] = []  # candidates waiting for their approvers (late matches)
        try:
            for rec in cursor:
                row = call_rows((rec,), self._resolve_quietly)[0]
                if with_result:
                    row["result"] = self._content(rec[-1])
                if not (all(_glob_ok(row, c, p) for c, p in globs) and all(m.test(row) for m in matches)):
                    continue
                if confirm is not None and not confirm(row, rec):
                    continue
                row.pop("result", None)
                if late:
                    pending.append(row)
                    if len(pending) < _LATE_BATCH:
                        continue
                    rows += self._late_matches(pending, late)
                    pending = []
                else:
                    rows.append(row)
                if limit is not None and len(rows) >= limit:
                    break
            else:
                rows += self._late_matches(pending, late)
        finally:
            cursor.close()
        if limit is not None:
            del rows[limit:]
        rows.reverse()
        if not late:
            self._attach_approvals(rows)
        if check_altered:
            self._flag_detached(rows, agent=agent, replays=replays)
        return rows

    def _altered_filter(self, decision: str | None, error: bool | None) -> Any:
        """For ``query_calls(decision=..., error=..., check_altered=True)``: a test ``(row, record)`` of a
        candidate the widened SQL let through (:func:`_calls_query`), true when it passes the filters by
        the events' hashed bytes:

        * ``decision``: the row's decision is the effect asked for; or it has none and a
          ``policy.decision`` of its run names it by its hashed bytes with that effect (that event's
          ``call_id`` or ``kind`` column rewritten below Sealbox: the call is listed as the unfiltered
          listing shows it, no decision); or its decision's own bytes say that effect (its ``effect``
          column rewritten).
        * ``error``: the row's ``ok`` is what the filter asks for (False for ``error=True``); or it has no
          result, was not denied, and a ``tool.result`` of its run names it by its hashed bytes with
          that ``ok`` (the result's ``call_id`` / ``kind`` column rewritten); or its result's own bytes
          say that ``ok`` (its ``ok`` column rewritten).

        A row kept by its bytes against its columns is flagged :data:`sealbox.query.ALTERED_FLAG`. A run
        holding a damaged event of the kind looked up (what it said cannot be known) passes the filter,
        flagged. Such candidates are few (a call still running or whose process died: the recorder and
        the gateway commit a call with its decision), one indexed lookup each."""
        from sealbox.query import ALTERED_FLAG

        want_ok = None if error is None else not error

        def named(row: dict[str, Any], rec: tuple, kind: str, key: str, value: Any) -> bool:
            found = self._detached_payloads(row, kind, _recorded_ids(rec[_ALTERED_START]))
            if found is None:  # a damaged event naming the call: what it said cannot be known
                return True
            return any((bool(p.get(key)) if key == "ok" else p.get(key)) == value for p in found)

        def passes(row: dict[str, Any], rec: tuple) -> bool:
            altered = False
            if decision is not None and row["decision"] != decision:
                if row["decision"] is None:
                    if not named(row, rec, "policy.decision", "effect", decision):
                        return False
                elif not _payload_says(rec[_ALTERED_START + 2], "effect", decision):
                    return False
                altered = True
            if want_ok is not None and row["ok"] is not want_ok:
                if row["ok"] is None:
                    if row["decision"] == "deny" or not named(row, rec, "tool.result", "ok", want_ok):
                        return False
                elif not _payload_says(rec[_ALTERED_START + 4], "ok", want_ok):
                    return False
                altered = True
            if altered and ALTERED_FLAG not in row["flags"]:
                row["flags"].append(ALTERED_FLAG)
            return True

        return passes

    def _flag_detached(self, rows: list[dict[str, Any]], agent: str | None = None, replays: bool = True) -> None:
        """Flag :data:`sealbox.query.ALTERED_FLAG` on a call listed without a decision, or allowed without a
        result, when a ``policy.decision`` / ``tool.result`` of its run names it by its hashed bytes: that
        event's ``call_id`` (or ``kind``) column was rewritten below Sealbox, so it dropped out of its call.
        Such rows are few (a call still running or whose process died; none at all in an intact store);
        each costs one lookup of its run's events of that kind whose payload names it.
        Also on a call kept by ``agent`` / ``replays=False`` through its run's run.started's bytes while its
        ``runs`` row says otherwise (the row's agent / replay_of rewritten below Sealbox: :func:`_calls_query`)."""
        from sealbox.query import ALTERED_FLAG

        if agent is not None:
            for row in rows:
                if row["agent"] != agent and ALTERED_FLAG not in row["flags"]:
                    row["flags"].append(ALTERED_FLAG)
        if not replays and rows:
            replayed = {r[0] for r in self._conn().execute("SELECT run_id FROM runs WHERE replay_of IS NOT NULL")}
            for row in rows:
                if row["run_id"] in replayed and ALTERED_FLAG not in row["flags"]:
                    row["flags"].append(ALTERED_FLAG)
        detached = [(row, "policy.decision") for row in rows if row["decision"] is None]
        detached += [(row, "tool.result") for row in rows if row["decision"] == "allow" and row["ok"] is None]
        if not detached:
            return
        for row, kind in detached:
            if ALTERED_FLAG in row["flags"]:
                continue
            if self._detached_payloads(row, kind) != []:  # found, or a damaged event naming the call
                row["flags"].append(ALTERED_FLAG)

    def _detached_payloads(self, row: dict[str, Any], kind: str,
                           recorded: tuple[Any, Any] | None = None) -> list[dict[str, Any]] | None:
        """The payloads of the events whose hashed bytes say they are a ``kind`` (``policy.decision`` /
        ``tool.result``) of ``row``'s call in its run, found whatever their ``kind``, ``run_id`` and ``call_id``
        columns now say: the run's events holding ``"call_id":<the call's id>`` in their bytes (a byte search
        over the run's events, ``events_run``; catches a rewritten kind or call_id column), and the events of
        ``kind`` naming the call by their call_id column in another run (``events_call``; catches a rewritten
        run_id column), each confirmed by parsing its bytes. None when one of them does not parse (a damaged
        event naming the call: what it said cannot be known). For a call listed without a decision, or allowed
        without a result: few (none in an intact store but calls running or whose process died).
        ``recorded``: the call's ``(call_id, run_id)`` as its ``tool.call``'s hashed bytes say them, looked up
        as well when they differ from the row's (the tool call's own columns rewritten)."""
        if recorded is not None and recorded != (row["call_id"], row["run_id"]) and all(
                isinstance(v, str) for v in recorded):
            first = self._detached_payloads(row, kind)
            second = self._detached_payloads({"call_id": recorded[0], "run_id": recorded[1]}, kind)
            return None if first is None or second is None else first + second
        from sealbox.canonical import canonical_bytes

        call_id, run_id = row["call_id"], row["run_id"]
        if not isinstance(call_id, str) or not isinstance(run_id, str):
            return []
        conn = self._conn()
        raws = [r[0] for r in conn.execute("SELECT raw FROM events WHERE run_id = ? AND "
                                           + self._contains_sql.format(column="raw"),
                                           (run_id, b'"call_id":' + canonical_bytes(call_id)))]
        raws += [r[0] for r in conn.execute(f"SELECT raw FROM events WHERE call_id = ? AND kind = '{kind}'"
                                            " AND run_id <> ?", (call_id, run_id))]
        found = []
        for raw in raws:
            try:
                env = orjson.loads(bytes(raw) if not isinstance(raw, (bytes, str)) else raw)
                payload = env["payload"]
                if env["kind"] == kind and env["run_id"] == run_id and payload.get("call_id") == call_id:
                    found.append(payload)
            except (ValueError, TypeError, KeyError, AttributeError):
                return None
        return found

    def _late_matches(self, rows: list[dict[str, Any]], late: list[Any]) -> list[dict[str, Any]]:
        """``rows`` with their approvals attached, those passing every match on approvers / flags."""
        self._attach_approvals(rows)
        return [row for row in rows if all(m.test(row) for m in late)]

    def _attach_approvals(self, rows: list[dict[str, Any]]) -> None:
        """Fill ``approvers`` ({identity, decision, answered_at}: the answers that count) and ``flags``
        (their shared-account flag codes) of calls that went to approval, set the ``outcome`` of those
        without a result from what their approval came to (:func:`sealbox.approvals.call_outcome`; a malformed
        request, also one naming no call at the call's step, gives ``unknown`` and the flag ``malformed_request``;
        an imported call, :func:`sealbox.approvals.imported_call_outcome`), and give those rows
        ``uncounted``: the answers that do not count, each with its ``problem`` (``unknown_identity``,
        ``bad_signature``, ``late``, ``malformed``…), never among the approvers. The verdict is
        :func:`sealbox.approvals.evaluate`'s, with the store's identities read once per listing and
        each run's approval events once."""
        held = [row for row in rows if row["decision"] == "require_approval"]
        for row in held:
            row["uncounted"] = []
        if not held:
            return
        from sealbox.approvals import _RELATED, call_outcome, evaluate, imported_call_outcome
        from sealbox.identities import identity_book

        reader = self._reader_class(self._conn())
        book = identity_book(reader)
        runs: dict[str, tuple[dict[str, list[Event]], list[Event]]] = {}  # run -> (call -> requests, related)
        imported: dict[str, dict[Any, str | None]] = {}  # run -> call -> imported_call_outcome (read when needed)
        for row in held:
            run_id = row["run_id"]
            if run_id not in runs:
                by_call: dict[Any, list[Event]] = {}
                for e in reader.events(["approval.requested"], run_id=run_id):
                    # a malformed request naming no call (its call_id no string) holds the call at its step
                    cid = e.payload.get("call_id")
                    by_call.setdefault(cid if isinstance(cid, str) else ("step", e.step), []).append(e)
                runs[run_id] = (by_call, reader.events(list(_RELATED), run_id=run_id) if by_call else [])
            by_call, related = runs[run_id]
            requests = by_call.get(row["call_id"]) or by_call.get(("step", row["step"]), ())
            states = [evaluate(request, related, book) for request in requests]
            if states and row["outcome"] == "held":  # no result: what its latest request came to
                row["outcome"] = call_outcome(states[-1])
                if states[-1].malformed:
                    row["flags"].append("malformed_request")
            elif row["outcome"] == "held":  # no request: imported, the outcome its exporting store gave it
                if run_id not in imported:
                    # a call_id that is no string (a malformed tool.call) names no row: passed over
                    imported[run_id] = {e.payload.get("call_id"): imported_call_outcome(e.payload)
                                        for e in reader.events(["tool.call"], run_id=run_id)
                                        if isinstance(e.payload.get("call_id"), str)}
                row["outcome"] = imported[run_id].get(row["call_id"]) or "held"
            for state in states:
                for answer in state.answers:
                    entry = {"identity": answer.identity, "decision": answer.decision,
                             "answered_at": answer.answered_at}
                    if answer.problem is None:
                        row["approvers"].append(entry)
                        row["flags"] += [f.get("code") or f.get("flag") for f in answer.flags]
                    else:
                        row["uncounted"].append({**entry, "problem": answer.problem})

    def explain_query_calls(self, **filters: Any) -> list[str]:
        """SQLite's ``EXPLAIN QUERY PLAN`` lines for :meth:`query_calls` with these filters
        (e.g. ``["SEARCH c USING INDEX events_tool (tool=?)", ...]``)."""
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

    @_json_guarded
    def query_runs(self, *, agent: str | None = None, principal: str | None = None, status: str | None = None,
                   since: Any = None, until: Any = None, snapshot: str | None = None,
                   labels: Any = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs passing every filter given, newest first.

        Args:
            agent, principal: exact values.
            status: ``running``, ``interrupted`` (not ended nor suspended, and the process recording it
                has died: :mod:`sealbox.liveness`), ``suspended``, ``ended``, or how it ended: ``ok``,
                ``error``, ``cancelled``. A run whose status is read from an event changed below Sealbox
                (``altered``) passes every status filter: its recorded status is not known here.
            since, until: bounds on ``started_at`` (as in :meth:`query_calls`). These filters and ``agent``,
                ``principal``, ``snapshot`` also pass a run whose ``run.started``'s hashed bytes pass them, its
                ``runs`` row rewritten below Sealbox (listed as the row says, ``altered``).
            snapshot: a snapshot fingerprint or a prefix of it of at least 8 hex digits (``sha256:`` optional),
                as ``runs list --snapshot`` takes it (:func:`sealbox.query.snapshot_prefix`).
            labels: ``{"k": "v"}`` (strings: ``{"k": 1}`` is a ConfigError), ``["k=v", ...]`` or one ``"k=v"``; every label must be present with that value (a
                label recorded as a number or a boolean compares as its JSON text: ``n=1``, ``ok=true``).
            limit: at most this many runs (a whole number, 1 or more, of any size): the newest.

        Returns:
            Dicts: run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at,
            labels, status, ending (ok / error / cancelled, or None), ended_at, last_kind, events,
            imported (bool: a run of ``sealbox import``). An imported run's status and ending are
            the source's: a run exported while ``running`` or ``suspended`` (or a RunState
            interrupted for approvals: ``suspended``) is that, not ``ended``, though its events end
            with the ``run.ended`` of the import; ``status`` filters on that status. ``altered`` (bool):
            the run's status is read from an event changed below Sealbox, or its ``runs`` row (or its
            ``run.started``'s kind / run_id / run_seq column) disagrees with its ``run.started``'s hashed
            bytes; the values shown are what the database holds now.

        Raises:
            ConfigError: a bad status, time, label or limit; a filter of the wrong type (``agent=5``).
        """
        from sealbox import query as q

        q.check_choice("status", status, q.RUN_STATUSES)
        for name, value in (("agent", agent), ("principal", principal)):
            q.check_text(name, value)
        if snapshot is not None:
            snapshot = q.snapshot_prefix(snapshot)
        limit = q.check_limit(limit)
        wanted = q.parse_labels(labels)
        # Each filter on a runs-table column also passes a run whose run.started's hashed bytes say the value
        # asked for: the column is a copy of them, and one rewritten below Sealbox must not hide the run from
        # the filter its recorded value passes (listed as the database holds it, marked altered by
        # _mark_altered, which compares the row with those bytes). One JSON read of each run.started whose
        # column does not pass (runs are few: one row each).
        where, params = ["1 = 1"], []
        field = self._raw_field_sql
        for col, path, value in (("agent", "payload.agent", agent), ("principal", "principal", principal)):
            if value is not None:
                where.append(f"(r.{col} = ? OR {field(path)} = ?)")
                params += [value, value]
        if since is not None:
            where.append(f"(r.started_at >= ? OR {field('ts')} >= ?)")
            params += [q.parse_time(since, name="since")] * 2
        if until is not None:
            where.append(f"(r.started_at < ? OR {field('ts')} < ?)")
            params += [q.parse_time(until, name="until")] * 2
        if snapshot is not None:
            fp = snapshot if snapshot.startswith("sha256:") else "sha256:" + snapshot
            snap = field("payload.snapshot")
            # fp has a successor: it starts sha256:
            where.append(f"((r.snapshot >= ? AND r.snapshot < ?) OR ({snap} >= ? AND {snap} < ?))")
            params += [fp, q.prefix_upper_bound(fp)] * 2
        # The status filter is not SQL on the kind column: a run whose status is read from an event changed
        # below Sealbox (its kind column or bytes rewritten) would drop out of the filter its recorded status
        # passes. Every run of the other filters is read; one whose status does not match is kept when it
        # is altered (_mark_altered), shown with what the database holds now and marked so.
        out: list[dict[str, Any]] = []
        from sealbox.liveness import checker

        held = checker(self)
        conn = self._conn()
        cursor = conn.execute(self._runs_sql.format(where=" AND ".join(where), lifecycle=_LIFECYCLE), params)
        try:
            while limit is None or len(out) < limit:
                recs = cursor.fetchmany(100 if limit is None else min(max(limit - len(out), 20), 1000))
                if not recs:
                    break
                rows = [row for row in (_interrupted(_run_row(rec), held) for rec in recs)
                        if q.labels_match(row["labels"], wanted)]
                if status is not None:  # another status: kept only when read from an altered event
                    matching = [q.status_matches(status, r["status"], r["ending"]) for r in rows]
                    _mark_altered(conn, rows)
                    rows = [r for r, ok in zip(rows, matching) if ok or r["altered"]]
                out += rows
        finally:
            cursor.close()
        if limit is not None:
            del out[limit:]
        return out if status is not None else _mark_altered(conn, out)

    @_json_guarded
    def ids_with_prefix(self, what: str, prefix: str, limit: int = 6) -> list[str]:
        """Run ids (``what="run"``) or approval request ids (``what="approval"``) that start with
        ``prefix``, in code-point order (``prefix`` itself first when it is one), at most ``limit``.

        Raises:
            ValueError: ``what`` is neither.
        """
        from sealbox.query import prefix_upper_bound

        # BINARY collation compares UTF-8 bytes, i.e. code points: the ids starting with prefix are those
        # >= prefix and below its successor (prefix + U+10FFFF was no bound: an id holding U+10FFFF right
        # after the prefix sorts at or above it); a prefix of U+10FFFF only has no successor, no bound
        upper = prefix_upper_bound(prefix)
        if what == "run":
            key, source = "run_id", "runs WHERE"
        elif what == "approval":
            # through the events_approval index (migration 0007): the ids in the range only
            key, source = _APPROVAL_KEY, "events INDEXED BY events_approval WHERE kind = 'approval.requested' AND"
        else:
            raise ValueError(f"ids_with_prefix: what is 'run' or 'approval', not {what!r}")
        below = "" if upper is None else f" AND {key} < ?"
        sql = f"SELECT DISTINCT {key} AS a FROM {source} {key} >= ?{below} ORDER BY a LIMIT ?"
        params = (prefix, int(limit)) if upper is None else (prefix, upper, int(limit))
        return [r[0] for r in self._conn().execute(sql, params)]

    @_json_guarded
    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """One run as a :meth:`query_runs` row, plus ``children`` (rows of the runs naming it as parent), or None.

        Raises:
            ConfigError: ``run_id`` is not a string (``get_run(5)``).
        """
        from sealbox.query import check_text

        if run_id is None:
            raise ConfigError("run_id: None is not a string")
        check_text("run_id", run_id)
        recs = self._conn().execute(self._runs_sql.format(where="r.run_id = ?", lifecycle=_LIFECYCLE), (run_id,)).fetchall()
        if not recs:  # its runs row's run_id rewritten below Sealbox: found through its run.started (marked altered)
            recs = self._conn().execute(self._runs_sql.format(
                where="r.leaf_index IN (SELECT leaf_index FROM events WHERE run_id = ? AND kind = 'run.started')",
                lifecycle=_LIFECYCLE), (run_id,)).fetchall()
        if not recs:
            return None
        from sealbox.liveness import checker

        held = checker(self)
        run = _interrupted(_run_row(recs[0]), held)
        kids = self._conn().execute(self._runs_sql.format(where="r.parent_run_id = ?", lifecycle=_LIFECYCLE), (run_id,)).fetchall()
        children = [_interrupted(_run_row(k), held) for k in reversed(kids)]
        _mark_altered(self._conn(), [run, *children])
        run["children"] = children
        return run


class Reader:
    """Read-only queries inside a write transaction (see :meth:`SqliteStore.append_with`)."""

    #: inside :meth:`SqliteStore.append_with`: the store's clock read when the transaction began
    #: (RFC 3339 UTC), the ``ts`` every event it appends gets; None elsewhere
    stamp: str | None = None

    def __init__(self, conn: sqlite3.Connection, txn: Any = None) -> None:
        self.conn = conn
        self._txn = txn  # the write transaction's run-head cache (sqlite._Txn), or None

    def run_head_seq(self, run_id: str) -> int | None:
        """The ``run_seq`` of run ``run_id``'s newest event, or None when it has none.

        Inside a write transaction this is read from the transaction's cache of run heads
        when it holds the run (no query: the common case of a run written by one connection).
        """
        if self._txn is not None:
            head = self._txn.run_head(run_id)
            return None if head is None else head[0]
        row = self.conn.execute("SELECT max(run_seq) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def top_step(self, run_id: str) -> int:
        """The highest top-level step (the ``n`` of ``"n"`` and ``"n.i"``) of run ``run_id``'s events; 0 when none."""
        row = self.conn.execute("SELECT max(CAST(step AS INTEGER)) FROM events WHERE run_id = ?", (run_id,)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def step_used(self, run_id: str, step: int) -> bool:
        """Whether an event of run ``run_id`` has top-level step ``step`` (``"<step>"`` or ``"<step>.<i>"``)."""
        return self.conn.execute("SELECT 1 FROM events WHERE run_id = ? AND CAST(step AS INTEGER) = ? LIMIT 1",
                                 (run_id, step)).fetchone() is not None

    def calls_after(self, run_id: str, run_seq: int) -> list[tuple[str, Any]]:
        """``(step, call_id)`` of run ``run_id``'s ``tool.call`` events after its event ``run_seq``, in order.

        Read through the ``events_run`` index (run_id, run_seq): as many rows as the run has events after
        ``run_seq``, not as many as it has calls (``events_run_kind`` would read every call of the run)."""
        return self.conn.execute("SELECT step, call_id FROM events INDEXED BY events_run WHERE run_id = ? "
                                 "AND run_seq > ? AND kind = 'tool.call' ORDER BY run_seq",
                                 (run_id, run_seq)).fetchall()

    def call_events(self, run_id: str, call_id: str, kind: str) -> list[Event]:
        """The events of ``kind`` (``policy.decision`` or ``tool.result``) of call ``call_id`` of run
        ``run_id``, in log order.

        Read through ``events_call`` (call_id, kind), the partial index of those two kinds (migration
        0004; the kind is a literal in the SQL so that the planner may use it): the rows of that call
        only, however long the run (``field=("call_id", …)`` of :meth:`events` reads every event of
        the kind in the run)."""
        if kind not in _CALL_KINDS:
            raise ValueError(f"not a kind events_call holds: {kind!r}")
        sql = (f"SELECT {_EVENT_COLS} FROM events INDEXED BY events_call WHERE call_id = ? AND kind = '{kind}'"
               " AND run_id = ? ORDER BY leaf_index")
        return [event_from_row(*r) for r in self.conn.execute(sql, (call_id, run_id)).fetchall()]

    def approval_requests(self, approval_id: str) -> list[Event]:
        """The ``approval.requested`` events whose payload ``approval_id`` is ``approval_id``, in log
        order (several when runs share the id); empty when none.

        Read through ``events_approval`` (migration 0007: the approval id from the hashed bytes, then
        the leaf index): the requests of that id only, not every request of the store. When none is
        found there and a request's entry is NULL (its bytes are not JSON, or it lacks an
        ``approval_id``: changed below Sealbox), every request is read as :meth:`events` does, so
        that a damaged one is named as before.

        Raises:
            DamagedEventError: as :meth:`events`, in that last case."""
        sql = (f"SELECT {_EVENT_COLS} FROM events INDEXED BY events_approval WHERE kind = 'approval.requested'"
               f" AND {_APPROVAL_KEY} = ? ORDER BY leaf_index")
        rows = self.conn.execute(sql, (approval_id,)).fetchall()
        if not rows and self.conn.execute(
                f"SELECT 1 FROM events INDEXED BY events_approval WHERE kind = 'approval.requested'"
                f" AND {_APPROVAL_KEY} IS NULL LIMIT 1").fetchone() is not None:
            return self.events(["approval.requested"], field=("approval_id", approval_id))
        return [event_from_row(*r) for r in rows]

    @_json_guarded
    def imported_runs(self, source_sha256: str) -> list[tuple[str, Any]]:
        """``(run id, format)`` of the runs ``sealbox import`` brought in from a file whose bytes have
        this SHA-256 (``sha256:<hex>``, their ``run.started`` payload's ``imported.source_sha256``), in
        log order; empty when none. Reads the ``run.started`` events whose principal is
        ``imported:…`` (the ``events_kind_ts`` index): what an import checks before it writes."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT run_id, CAST(raw AS TEXT) ->> '$.payload.imported.format' FROM events WHERE kind = 'run.started'"
            " AND substr(principal, 1, 9) = 'imported:'"
            " AND CAST(raw AS TEXT) ->> '$.payload.imported.source_sha256' = ? ORDER BY leaf_index",
            (source_sha256,)).fetchall()]

    def imported_content(self, content_sha256s: Sequence[str],
                         trace_ids: Sequence[str] = ()) -> list[tuple[str, Any, Any]]:
        """``(run id, content sha256, trace id)`` of the imported runs whose ``run.started`` records
        one of these content digests (``imported.content_sha256``: the run as converted, whatever file
        it came from) or one of these source trace ids (``imported.original_ids.trace_id``), in log
        order; empty when none. What an import checks so that identical runs are not imported again
        (``sealbox.interop.importers.import_file``)."""
        out: list[Any] = []
        for column, values in (("content_sha256", list(content_sha256s)), ("original_ids.trace_id", list(trace_ids))):
            for i in range(0, len(values), 500):
                chunk = values[i:i + 500]
                out.extend(self.conn.execute(
                    "SELECT run_id, CAST(raw AS TEXT) ->> '$.payload.imported.content_sha256',"
                    " CAST(raw AS TEXT) ->> '$.payload.imported.original_ids.trace_id', leaf_index FROM events"
                    " WHERE kind = 'run.started' AND substr(principal, 1, 9) = 'imported:'"
                    f" AND CAST(raw AS TEXT) ->> '$.payload.imported.{column}'"
                    f" IN ({', '.join('?' * len(chunk))}) ORDER BY leaf_index", tuple(chunk)).fetchall())
        seen: set[str] = set()
        return [(r[0], r[1], r[2]) for r in sorted(out, key=lambda r: r[3]) if not (r[0] in seen or seen.add(r[0]))]

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a ``SELECT count(...)``-style query returning one number."""
        row = self.conn.execute(sql, tuple(params)).fetchone()
        return 0 if row is None or row[0] is None else row[0]

    @_json_guarded
    def events(self, kinds: Sequence[str], *, run_id: str | None = None, principal: str | None = None,
               field: tuple[str, str] | None = None, limit: int | None = None,
               principal_actor: str | None = None, ts_from: str | None = None,
               ts_before: str | None = None, from_leaf: int | None = None, before_leaf: int | None = None,
               principal_ascii: bool = False, non_ascii_principal: bool = False) -> list[Event]:
        """Events of the given kinds, in log order, optionally of one run, one principal, a
        principal that is ``principal_actor`` or ends with ``:`` + ``principal_actor`` (ASCII
        case-insensitive) or holds a non-ASCII character (the candidates for
        :func:`sealbox.approvals.same_actor`, which folds Unicode forms; with ``principal_ascii``,
        without the non-ASCII ones), only principals holding a non-ASCII character
        (``non_ascii_principal``: read once, their keys computed once, by a reader of many names), or
        whose payload field ``field[0]`` equals the string ``field[1]``; with ``ts_from`` (RFC
        3339 text in the store's own form, ``2026-12-03T10:00:00.000000Z``), only events whose
        ``ts`` column is that text or later (compared as text: the store writes every ``ts`` in
        that form), read through the ``events_kind_ts`` index so that older events of the kinds
        are never read; with ``ts_before`` (same form), only events whose ``ts`` is before it; with ``from_leaf`` / ``before_leaf``, only events whose leaf index is at
        least / below it (checked on the index's entries before their rows are read).

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
        if principal_actor is not None:
            # or any principal holding a non-ASCII character (more bytes than characters): actor_key folds
            # NFKC forms and drops format characters (user:ｃａｒｏｌ, carol\u200b), which no ASCII fold
            # finds; same_actor decides
            where.append("(principal = ? COLLATE NOCASE OR principal LIKE ? ESCAPE '\\'"
                         + (")" if principal_ascii else " OR length(CAST(principal AS BLOB)) <> length(principal))"))
            params += [principal_actor, "%:" + principal_actor.replace("\\", "\\\\").replace("%", "\\%")
                       .replace("_", "\\_")]
        if non_ascii_principal:
            where.append("length(CAST(principal AS BLOB)) <> length(principal)")
        if field is not None:
            if not field[0].isidentifier():
                raise ValueError(f"not a payload field name: {field[0]!r}")
            where.append(f"CAST(raw AS TEXT) ->> '$.payload.{field[0]}' = ?")
            params.append(field[1])
        if ts_from is not None:
            where.append("ts >= ?")
            params.append(ts_from)
        if ts_before is not None:
            where.append("ts < ?")
            params.append(ts_before)
        if from_leaf is not None:
            where.append("+leaf_index >= ?")  # a filter, not a range of the rowid: the ts range is the one to search
            params.append(int(from_leaf))
        if before_leaf is not None:
            where.append("+leaf_index < ?")
            params.append(int(before_leaf))
        sql = f"SELECT {_EVENT_COLS} FROM events WHERE {' AND '.join(where)} ORDER BY leaf_index"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [event_from_row(*r) for r in self.conn.execute(sql, params).fetchall()]

    def non_ascii_principals(self, kinds: Sequence[str]) -> list[tuple[Any, int]]:
        """``(principal, leaf index of its first event)`` of each distinct principal holding a non-ASCII
        character among the events of ``kinds``: one row per principal, however many events it has
        (what :func:`sealbox.approvals.actor_key` must fold to find look-alikes of an identity; SQL
        cannot). No event is parsed; :meth:`event_at` reads the one wanted."""
        return [(r[0], r[1]) for r in self.conn.execute(
            f"SELECT principal, min(leaf_index) FROM events WHERE kind IN ({', '.join('?' * len(kinds))})"
            " AND length(CAST(principal AS BLOB)) <> length(principal) GROUP BY principal",
            list(kinds)).fetchall()]

    def first_principals(self, kinds: Sequence[str]) -> list[tuple[Any, int]]:
        """``(principal, leaf index of its first event)`` of each distinct principal among the events of
        ``kinds``: one row per principal, no event parsed (a reader asking about many identities folds
        each once: :func:`sealbox.approvals.actor_key`)."""
        return [(r[0], r[1]) for r in self.conn.execute(
            f"SELECT principal, min(leaf_index) FROM events WHERE kind IN ({', '.join('?' * len(kinds))})"
            " GROUP BY principal", list(kinds)).fetchall()]

    @_json_guarded
    def event_at(self, leaf_index: int) -> Event | None:
        """The event at ``leaf_index``, or None when there is none."""
        row = self.conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE leaf_index = ?", (int(leaf_index),)).fetchone()
        return None if row is None else event_from_row(*row)

    def size(self) -> int:
        """Number of events in the log (the leaf index the next event will get)."""
        row = self.conn.execute("SELECT max(leaf_index) FROM events").fetchone()
        return 0 if row[0] is None else row[0] + 1

    def _imported_payload_sql(self) -> str:
        """SQL true when event ``s`` (a ``run.started``) carries the ``imported`` object of ``sealbox import``."""
        return "CAST(s.raw AS TEXT) ->> '$.payload.imported' IS NOT NULL"

    def _live_sql(self) -> str:
        """SQL true when event ``e`` is not of an imported run (``sealbox import``): its principal is not
        ``imported:…`` (tested on the row: false for nearly every live event, so the run is read only for
        the others), or its run's ``run.started`` (run_seq 1, the ``events_run`` index) has no ``imported``
        object, as a live run whose principal happens to start so. A scalar subquery, not ``EXISTS``:
        PostgreSQL may run an ``EXISTS`` as a hashed subplan, reading every run's ``run.started`` of the
        store on each limited call once the day's window holds many imported events."""
        return (f"NOT (substr(e.principal, 1, 9) = 'imported:' AND coalesce((SELECT {self._imported_payload_sql()}"
                " FROM events s WHERE s.run_id = e.run_id AND s.run_seq = 1), false))")

    def _calls_minute_agent_sql(self) -> str:
        """SQL counting one agent's tool calls not denied since a time (parameters: the window's start, the
        agent). The window's decisions are read by ``events_kind_ts`` and each one's run by the ``runs``
        primary key (a correlated lookup, not a join): PostgreSQL planned a join as a hash join over a
        sequential scan of every run of the store (or of ``runs`` filtered by agent) once the window held
        many rows, inside the write transaction of every limited call."""
        return ("SELECT count(*) FROM events e WHERE e.kind = 'policy.decision' AND e.ts >= ? AND e.effect != 'deny'"
                f" AND (SELECT r.agent FROM runs r WHERE r.run_id = e.run_id) = ? AND {self._live_sql()}")

    def usage(self, *, run_id: str, agent: str, server: str, tool: str, since_minute: str, day_start: str,
              needed: set[str]) -> dict[str, int | float]:
        """Counters for limits, read inside the write transaction (indexed queries).

        Calls counted are tool calls whose decision was not a deny (they ran, or
        went to approval). Tokens and cost come from ``model.call`` events.
        Events of imported runs (``sealbox import``) never count: they happened
        elsewhere and are accounted there, though stamped with the import time
        and naming an agent, server and tool that may be the live ones.

        Args:
            since_minute: RFC 3339 time 60 s before now (sliding window start).
            day_start: RFC 3339 start of the current UTC day.
            needed: which counters to compute (names as in ``CallContext.usage``).

        Returns: counter name -> value: an ``int`` (calls, tokens) or a ``float`` (cost), on every
        backend (PostgreSQL's ``sum`` of a ``bigint`` is a ``numeric``, which psycopg reads as a Decimal).
        """
        out: dict[str, int | float] = {}
        q = self.conn.execute
        if "tool_calls_run" in needed:
            out["tool_calls_run"] = q("SELECT count(*) FROM events WHERE run_id = ? AND kind = 'policy.decision'"
                                      " AND effect != 'deny'", (run_id,)).fetchone()[0]
        live = self._live_sql()
        if "calls_minute_agent" in needed:
            out["calls_minute_agent"] = q(self._calls_minute_agent_sql(), (since_minute, agent)).fetchone()[0]
        if "calls_minute_tool" in needed:
            out["calls_minute_tool"] = q(
                "SELECT count(*) FROM events e WHERE e.kind = 'policy.decision' AND e.ts >= ? AND e.effect != 'deny'"
                f" AND e.server = ? AND e.tool = ? AND {live}", (since_minute, server, tool)).fetchone()[0]
        if needed & {"tokens_run", "cost_run"}:
            tokens, cost = q("SELECT sum(tokens), sum(cost) FROM events WHERE run_id = ? AND kind = 'model.call'",
                             (run_id,)).fetchone()
            out["tokens_run"], out["cost_run"] = int(tokens or 0), float(cost or 0.0)  # PostgreSQL: sum is numeric
        if needed & {"tokens_day", "cost_day"}:
            tokens, cost = q("SELECT sum(e.tokens), sum(e.cost) FROM events e WHERE e.kind = 'model.call'"
                             f" AND e.ts >= ? AND {live}", (day_start,)).fetchone()
            out["tokens_day"], out["cost_day"] = int(tokens or 0), float(cost or 0.0)
        return out


# One row per tool call, newest first in log order (the order the store
# committed them: ts is taken inside the write transaction, so it ascends with
# leaf_index). The call's decision and result are the first event of each kind
# after it with the same (run_id, call_id). Fast path: the recorder and the
# gateway commit a call and its decision in one transaction, so the decision
# is nearly always the very next leaf, and with one writer the result the one
# after; COALESCE evaluates the general lookup only when the fast path finds
# nothing: events_call (call_id, kind), a partial index of policy.decision and
# tool.result rows (migration 0004), so it reads the row it returns and no
# other. Every partial index is used only where the WHERE implies its own, so
# the kinds are literals here (c.kind = 'tool.call' for events_tool and
# events_server_tool). ORDER BY leaf_index is the order events_tool and
# events_run_kind already deliver for one tool / one run (no sort, and a LIMIT
# stops early); checked by tests/query/test_query_plan.py. The call's exposed
# name, grant and arguments come as one JSON array (one json_extract: SQLite
# parses the event once, Python decodes one text), the error only when the
# result failed; _call_rows turns a record into a row. A decision's rule and
# reason_code and a result's duration_us are columns from schema 6 on (NULL in
# older rows, and where the payload's value is not a string / an integer: the
# payload is read then, as it is for a value of another type written below
# Sealbox; a wrong value of the right type is verify's index_mismatch, as for
# every query column). With query_calls(check_altered=True) only ({altered}: _ALTERED_COLUMNS), the
# three events' bytes and stored leaf hash come too: a call one of whose events no longer hashes to
# its leaf hash (changed below Sealbox) is flagged ``altered`` by _checked_call_rows
# (sealbox.query.event_altered: one SHA-256 per event read); without it the query and the per-row
# work are the listing's alone.
_NEXT = """COALESCE(
    (SELECT e.leaf_index FROM events e WHERE e.leaf_index = c.leaf_index + {offset} AND e.call_id = c.call_id
     AND e.run_id = c.run_id AND e.kind = '{kind}'),
    (SELECT e.leaf_index FROM events e WHERE e.call_id = c.call_id AND e.kind = '{kind}'
     AND e.leaf_index > c.leaf_index AND e.run_id = c.run_id ORDER BY e.leaf_index LIMIT 1))"""
_CALLS_SQL = """
SELECT c.ts, c.run_id, r.agent, c.principal, c.step, c.call_id, c.server, c.tool,
       json_extract(CAST(c.raw AS TEXT), '$.payload.exposed', '$.payload.grant', '$.payload.arguments'),
       d.effect, IIF(typeof(d.rule) = 'text', d.rule, CAST(d.raw AS TEXT) ->> '$.payload.rule'),
       IIF(typeof(d.reason_code) = 'text', d.reason_code, CAST(d.raw AS TEXT) ->> '$.payload.reason_code'),
       x.ok, CASE WHEN x.ok = 0 THEN CAST(x.raw AS TEXT) -> '$.payload.error' END,
       IIF(typeof(x.duration_us) = 'integer', x.duration_us, CAST(x.raw AS TEXT) ->> '$.payload.duration_us'), {altered}{result}
FROM events c
LEFT JOIN runs r ON r.run_id = c.run_id
LEFT JOIN events d ON d.leaf_index = %s
LEFT JOIN events x ON x.leaf_index = %s
WHERE {where}
ORDER BY c.leaf_index DESC
""" % (_NEXT.format(offset=1, kind="policy.decision").replace("{", "{{").replace("}", "}}"),
       _NEXT.format(offset=2, kind="tool.result").replace("{", "{{").replace("}", "}}"))

#: SQL true when event ``e``'s bytes hold ``"call_id":`` followed by call ``c``'s id as a JSON string, as
#: canonical bytes write it (a byte search: the candidates a query_calls filter then confirms by parsing)
_NAMES_CALL_SQL = "instr(e.raw, CAST('\"call_id\":' || json_quote(c.call_id) AS BLOB)) > 0"
SqliteQueries._names_call_sql = _NAMES_CALL_SQL


SqliteQueries._renamed_calls_sql = (
    "INDEXED BY {}", "substr(o.raw, 1, 20) = CAST('{\"kind\":\"tool.call\",' AS BLOB)")

#: The kinds that move a run between running, suspended and ended: its status is the newest of them
#: (approval.answered / approval.expired come after run.suspended and leave the run suspended).
_LIFECYCLE = "'run.started', 'run.suspended', 'run.resumed', 'run.ended'"

_RUNS_SQL = """
SELECT r.run_id, r.agent, r.principal, r.parent_run_id, r.replay_of, r.snapshot, r.started_at,
       CAST(s.raw AS TEXT) -> '$.payload.labels', l.kind, l.ts, l.run_seq,
       CASE WHEN l.kind = 'run.ended' THEN CAST(l.raw AS TEXT) ->> '$.payload.status' END, p.kind,
       CAST(s.raw AS TEXT) ->> '$.payload.imported' IS NOT NULL,
       CASE WHEN l.kind = 'run.ended' THEN CAST(l.raw AS TEXT) -> '$.payload.imported' END,
       (CAST(s.raw AS TEXT) -> '$.payload.lease') = 'true',
       l.leaf_index, p.leaf_index, r.leaf_index, s.kind, s.run_id, s.run_seq
FROM runs r
JOIN events s ON s.leaf_index = r.leaf_index
JOIN events l ON l.run_id = s.run_id AND l.run_seq = (SELECT max(run_seq) FROM events WHERE run_id = s.run_id)
JOIN events p ON p.run_id = s.run_id AND p.run_seq = (
    SELECT max(run_seq) FROM events WHERE run_id = s.run_id AND kind IN ({lifecycle}))
WHERE {where}
ORDER BY r.started_at DESC, r.leaf_index DESC
"""


def _calls_query(*, tool: str | None = None, server: str | None = None, run_id: str | None = None,
                 agent: str | None = None, principal: str | None = None, since: Any = None, until: Any = None,
                 decision: str | None = None, error: bool | None = None, match: Any = None,
                 replays: bool = True, template: tuple[str, str] | None = None,
                 check_altered: bool = False, contains: str = "instr({column}, ?) > 0",
                 names_call: str = _NAMES_CALL_SQL, field: Any = None, leaves: Any = None,
                 starts: Any = None) -> tuple:
    """(sql, params, globs left to confirm, compiled matches) for :meth:`SqliteStore.query_calls`;
    ``template``: (the calls query, the result expression) in another backend's SQL (default SQLite's);
    ``check_altered``: the query also selects :data:`_ALTERED_COLUMNS` (for :func:`_checked_call_rows`) and
    widens the decision and error filters (confirmed by :meth:`SqliteQueries._altered_filter`);
    ``contains``: SQL true when the bytes ``{column}`` hold the bytes of a parameter (the backend's);
    ``names_call``: SQL true when event ``e``'s bytes hold ``"call_id":`` and call ``c``'s call id as JSON;
    ``field``: the backend's :meth:`SqliteQueries._raw_field_sql`; ``leaves``: the calls are the events at
    these leaf indexes (:meth:`SqliteQueries._renamed_call_leaves`), not the ``tool.call`` rows."""
    from sealbox import query as q

    field = field or SqliteQueries._raw_field_sql
    starts = starts or SqliteQueries._starts_sql

    q.check_choice("decision", decision, q.DECISIONS)
    for name, value in (("tool", tool), ("server", server), ("run_id", run_id), ("agent", agent), ("principal", principal)):
        q.check_text(name, value)
    q.check_flag("error", error, optional=True)
    q.check_flag("replays", replays)
    matches = q.compile_matches(match)
    where, params, globs = ["c.kind = 'tool.call'"], [], []
    if leaves:
        where, params = [f"c.leaf_index IN ({', '.join('?' * len(leaves))})"], [int(leaf) for leaf in leaves]
    for col, pattern in (("tool", tool), ("server", server)):
        if pattern is not None:
            globs += _glob_terms(col, pattern, where, params)
    # with check_altered, a call without a decision is a candidate too (query_calls confirms it by the bytes of
    # its run's decisions): a decision whose call_id column was rewritten no longer joins
    # its bytes, and one whose decision's bytes say the effect asked for though its effect column does not
    # (a byte search, no JSON parsed; confirmed by parsing the bytes)
    effect = ("(d.effect = ? OR d.leaf_index IS NULL OR " + contains.format(column="d.raw") + ")"
              if check_altered else "d.effect = ?")
    # with check_altered, --agent and --principal also pass a call whose run's run.started (the agent) / whose
    # tool.call (the principal) says the value in its hashed bytes, the column copied from them rewritten below
    # Sealbox (flagged altered: query_calls, _columns_disagree). The runs are read once (an uncorrelated
    # subquery: one JSON read per run.started whose agent column does not pass), the tool.call's bytes only
    # where its principal column does not
    started = ("SELECT s.run_id FROM runs r2 JOIN events s ON s.leaf_index = r2.leaf_index WHERE "
               if check_altered else "")
    agent_sql = (f"(r.agent = ? OR c.run_id IN ({started}{field('payload.agent')} = ?))" if check_altered
                 else "r.agent = ?")
    principal_sql = (f"(c.principal = ? OR {field('principal', 'c')} = ?)" if check_altered else "c.principal = ?")
    for sql, value in (("c.run_id = ?", run_id), (agent_sql, agent), (principal_sql, principal),
                       (effect, decision)):
        if value is not None:
            where.append(sql)
            params += [value] * sql.count("?")
    if check_altered and decision is not None:
        params[-1] = b'"effect":' + json.dumps(decision).encode()
    for sql, value, name in (("c.ts >= ?", since, "since"), ("c.ts < ?", until, "until")):
        if value is not None:
            where.append(sql)
            params.append(q.parse_time(value, name=name))
    if not replays and check_altered:  # also a run whose run.started says it is no replay (replay_of rewritten)
        where.append(f"(r.replay_of IS NULL OR c.run_id IN ({started}r2.replay_of IS NOT NULL AND "
                     f"{field('payload.replay_of')} IS NULL))")
    elif not replays:
        where.append("r.replay_of IS NULL")
    if error is not None and check_altered:
        # also a call without a result that was not denied (its result's call_id / kind column rewritten:
        # query_calls confirms it by the bytes of its run's results) and one whose result's bytes say
        # what is asked (its ok column rewritten; a substring test, confirmed by parsing the bytes)
        # (a byte search of that run's results, through events_run_kind: no JSON parsed, so a damaged event
        # does not fail the listing; held calls are many in a large store, each confirmed here and not by a
        # lookup from Python)
        # The run's events are read whatever their kind column says but a call's or a decision's (a result whose
        # kind column was rewritten, e.g. to 'note': the kind is tested in the events_run_kind index, so only
        # the run's results and its events of the rarer kinds are read), and the results naming the call by
        # their call_id column in another run (a result whose run_id column was rewritten; events_call); one of
        # another kind only when its bytes start as a result's (an approval's bytes name the call too)
        where.append("(x.ok = ? OR (x.leaf_index IS NULL AND (d.effect IS NULL OR d.effect <> 'deny') AND (EXISTS"
                     " (SELECT 1 FROM events e WHERE e.run_id = c.run_id AND e.kind <> 'tool.call'"
                     " AND e.kind <> 'policy.decision' AND (e.kind = 'tool.result' OR "
                     + starts("e.raw", '{"kind":"tool.result",') + ") AND " + names_call + ") OR EXISTS"
                     " (SELECT 1 FROM events e WHERE e.call_id = c.call_id AND e.kind = 'tool.result'"
                     " AND e.run_id <> c.run_id AND " + names_call + "))) OR " + contains.format(column="x.raw") + ")")
        params += [0 if error else 1, b'"ok":false' if error else b'"ok":true']
    elif error is not None:
        where.append("x.ok = ?")
        params.append(0 if error else 1)
    with_result = any(m.root == "result" for m in matches)
    calls_sql, result_sql = template or (_CALLS_SQL, _RESULT_SQL)
    sql = calls_sql.format(result=result_sql if with_result else "NULL", where=" AND ".join(where),
                           altered=_ALTERED_COLUMNS if check_altered else "")
    return sql, params, globs, matches


#: ``--match`` roots filled (or, for ``outcome``, settled) by :meth:`SqliteQueries._attach_approvals`, tested after it.
_APPROVAL_ROOTS = ("approvers", "flags", "outcome")



def _refuse_hidden_matches(matches: list, mode: str | None) -> None:
    """A ``hashes-only`` store keeps only a marker of every argument, result and error message
    (docs/content-modes.md): a match on them could only search the markers' hex, and "no tool
    calls match" would read as "no call did that". ConfigError instead."""
    if mode != "hashes-only":
        return
    for m in matches:
        if m.root in ("arguments", "result") or (m.root == "error" and m.path[1:2] in (("message",), ("traceback",))):
            what = {"arguments": "arguments", "result": "results"}.get(m.root) or f"error {m.path[1]}s"
            raise ConfigError(f"match: {m.text!r} cannot be searched in this store: its content mode is hashes-only, "
                              f"which keeps the calls' {what} only as markers (docs/content-modes.md); match on "
                              "the tool, server, decision or error.type instead")
#: Candidates read at a time by a decision filter that confirms calls listed without a decision.
_UNDECIDED_BATCH = 512
#: Candidates whose approvals are evaluated together when a match reads them.
_LATE_BATCH = 256

_scan_json = json.JSONDecoder().scan_once  # json.loads without its wrapper (the text is SQLite's own JSON)
_UNRUN = {"allow": "unknown", "require_approval": "held"}


def _call_rows(recs: Any, resolve: Any) -> list[dict[str, Any]]:
    """:func:`sealbox.query.call_row` of each ``_CALLS_SQL`` record, arguments resolved with
    ``resolve`` where they hold blob references: the same dicts, built inline (on a large
    listing, a few function calls per row cost as much as the SQL)."""
    out: list[dict[str, Any]] = []
    append = out.append
    for ts, run_id, agent, principal, step, call_id, server, tool, call, effect, rule, code, ok, error, duration, _ in recs:
        exposed, grant, value = _scan_json(call, 0)[0]  # [exposed, grant, arguments]
        if value is not None and '"$blob"' in call:
            value = resolve(value)
        if ok is None:
            outcome = "undecided" if effect is None else _UNRUN.get(effect, "not_run")
            error = None
        elif ok:
            ok, outcome, error = True, "ok", None
        else:
            ok, outcome, error = False, "error", _call_error(error)
        append({"ts": ts, "run_id": run_id, "agent": agent, "principal": principal, "step": step, "call_id": call_id,
                "server": server, "tool": tool, "exposed": exposed, "grant": grant, "arguments": value,
                "decision": effect, "rule": rule, "reason_code": code, "outcome": outcome, "ok": ok, "error": error,
                "duration_us": duration, "approvers": [], "flags": []})
    return out


#: The columns ``query_calls(check_altered=True)`` adds before the result (``{altered}`` in the calls
#: queries of both backends): the call's, its decision's and its result's bytes and stored leaf hash.
_ALTERED_COLUMNS = "c.raw, c.leaf_hash, d.raw, d.leaf_hash, x.raw, x.leaf_hash, "
_ALTERED_START, _ALTERED_END = 15, 21  # where _ALTERED_COLUMNS sit in a record


def _checked_call_rows(recs: Any, resolve: Any) -> list[dict[str, Any]]:
    """:func:`_call_rows` of records that also hold :data:`_ALTERED_COLUMNS`, a row one of whose
    events no longer hashes to its stored leaf hash (changed below Sealbox) flagged
    :data:`sealbox.query.ALTERED_FLAG`: the check of ``query_calls(check_altered=True)``."""
    from hashlib import sha256

    from sealbox.query import ALTERED_FLAG, event_altered

    def intact(raw: Any, stored: Any) -> bool:  # the usual case inline (bytes, bytes): event_altered for the rest
        if type(raw) is bytes and type(stored) is bytes:
            return sha256(b"\x00" + raw).digest() == stored
        return not event_altered(raw, stored)

    recs = [tuple(rec) for rec in recs]
    rows = _call_rows([rec[:_ALTERED_START] + rec[_ALTERED_END:] for rec in recs], resolve)
    for row, rec in zip(rows, recs):
        craw, chash, draw, dhash, xraw, xhash = rec[_ALTERED_START:_ALTERED_END]
        # an event of the call changed below Sealbox: flagged, never shown as if it were what was recorded
        if not (intact(craw, chash) and (draw is None or intact(draw, dhash))
                and (xraw is None or intact(xraw, xhash))) or _columns_disagree(row, craw, draw, xraw):
            row["flags"].append(ALTERED_FLAG)
    return rows


def _columns_disagree(row: dict[str, Any], craw: Any, draw: Any, xraw: Any) -> bool:
    """Whether a value of ``row`` that the listing took from a query column (the call's run, time,
    principal, step, server, tool and call id; its decision's effect, rule and reason code; its result's
    ok and duration) differs from what the events' hashed bytes say: the column was changed below
    Sealbox (``verify``'s ``index_mismatch``), so the row shows what was not recorded. Bytes that do not
    parse count as a disagreement (what they say cannot be shown)."""
    try:
        env = orjson.loads(bytes(craw) if not isinstance(craw, (bytes, str)) else craw)
        p = env["payload"]
        if (row["run_id"], row["ts"], row["principal"], row["step"], row["server"], row["tool"], row["call_id"]) != (
                env["run_id"], env["ts"], env["principal"], env["step"], p.get("server"), p.get("tool"),
                p.get("call_id")):
            return True
        if draw is not None:
            p = orjson.loads(bytes(draw) if not isinstance(draw, (bytes, str)) else draw)["payload"]
            if (row["decision"], row["rule"], row["reason_code"], row["call_id"]) != (
                    p.get("effect"), p.get("rule"), p.get("reason_code"), p.get("call_id")):
                return True
        if xraw is not None:
            p = orjson.loads(bytes(xraw) if not isinstance(xraw, (bytes, str)) else xraw)["payload"]
            if (row["ok"], row["duration_us"], row["call_id"]) != (bool(p.get("ok")), p.get("duration_us"),
                                                                   p.get("call_id")):
                return True
    except (ValueError, TypeError, KeyError, AttributeError):
        return True
    return False


def _recorded_ids(raw: Any) -> tuple[Any, Any] | None:
    """``(call_id, run_id)`` as a ``tool.call``'s bytes ``raw`` say them; None when they do not parse."""
    try:
        env = orjson.loads(bytes(raw) if not isinstance(raw, (bytes, str)) else raw)
        return env["payload"].get("call_id"), env["run_id"]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _payload_says(raw: Any, key: str, value: Any) -> bool:
    """Whether the event bytes ``raw`` parse and their payload's ``key`` is ``value`` (``ok`` read as a
    boolean, as the listing shows it); False for bytes that do not parse, or None."""
    if raw is None:
        return False
    try:
        found = orjson.loads(bytes(raw) if not isinstance(raw, (bytes, str)) else raw)["payload"].get(key)
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    return (bool(found) if key == "ok" else found) == value


def _call_error(error: Any) -> dict[str, Any]:
    """A failed result's ``error`` as :func:`sealbox.query.call_row` gives it: ``{"type", "message"}``."""
    err = json.loads(error) if isinstance(error, str) else error
    if isinstance(err, dict):
        return {"type": err.get("type"), "message": err.get("message")}
    return {"type": None, "message": None if err is None else str(err)}


def _glob_ok(row: dict[str, Any], col: str, pattern: str) -> bool:
    """Whether ``row`` passes the glob ``pattern`` on ``col``; ``server/tool``: a ``--tool`` holding a
    ``/`` matches the tool's own name (MCP tool names may hold one) or ``server/tool`` as listings print it."""
    from sealbox.query import glob_match

    if col == "server/tool":
        return glob_match(pattern, row["tool"]) or glob_match(pattern, f"{row['server']}/{row['tool']}")
    return glob_match(pattern, row[col])


def _glob_terms(col: str, pattern: str, where: list[str], params: list[Any]) -> list[tuple[str, str]]:
    """SQL terms narrowing ``col`` to ``pattern`` (an index range on its literal prefix);
    returns the (column, glob) pairs left to confirm in Python."""
    from sealbox.query import glob_literal_prefix, prefix_upper_bound

    if col == "tool" and "/" in pattern:  # also SERVER/TOOL, as listings print it: confirmed in Python
        return [("server/tool", pattern)]
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
     ending, phase, imported, end_info, lease) = rec[:16]
    status = run_status(phase)
    source = _source_status(end_info) if imported else None
    if source is not None:  # imported while running or suspended at its source: not a run that ended ok
        status, ending = source, None
    return {"run_id": run_id, "agent": agent, "principal": principal, "parent_run_id": parent,
            "replay_of": replay_of, "snapshot": snapshot, "started_at": started_at,
            "labels": json.loads(labels) if labels else {}, "status": status, "ending": ending,
            "ended_at": last_ts if status == "ended" else None, "last_kind": last_kind, "events": events,
            "imported": bool(imported), "altered": False,
            "_lease": bool(lease) and status == "running" and not imported,
            "_status_events": ((last_kind, rec[16]), (phase, rec[17])) if len(rec) >= 18 else (),
            "_started": tuple(rec[18:22]) if len(rec) >= 22 else None}


def _mark_altered(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (of :func:`_run_row`), ``altered`` set on a run whose status was read from an event changed
    below Sealbox (:func:`_status_event_altered`), or whose ``runs`` row (or its ``run.started``'s kind,
    run_id, run_seq columns) disagrees with its ``run.started``'s hashed bytes (:func:`_run_row_altered`).
    The events' bytes are fetched for the rows shown only (not carried through the listing's sort): at most
    three per run, by leaf index; one JSON parse per run (its run.started)."""
    wanted = sorted({leaf for row in rows for _, leaf in row["_status_events"] if leaf is not None}
                    | {row["_started"][0] for row in rows if row.get("_started")})
    got: dict[int, tuple] = {}
    for i in range(0, len(wanted), 500):
        chunk = wanted[i:i + 500]
        for leaf, raw, stored in conn.execute("SELECT leaf_index, raw, leaf_hash FROM events WHERE leaf_index IN ("
                                              + ", ".join("?" * len(chunk)) + ")", chunk):
            got[leaf] = (raw, stored)
    for row in rows:
        events, started = row.pop("_status_events"), row.pop("_started", None)
        row["altered"] = any(_status_event_altered(kind, *got.get(leaf, (None, None)))
                             for kind, leaf in events if leaf is not None)
        if not row["altered"] and started:
            row["altered"] = _run_row_altered(row, started[1:], *got.get(started[0], (None, None)))
        if not row["altered"] and len(events) == 2 and events[1][1] is not None:
            row["altered"] = _lifecycle_renamed(conn, row["run_id"], events[1][1])
    return rows


def _run_row_altered(row: dict[str, Any], columns: tuple, raw: Any, stored: Any) -> bool:
    """Whether run ``row``'s values from the ``runs`` table (run_id, agent, principal, parent_run_id,
    replay_of, snapshot, started_at: not hashed, derived from the run's ``run.started`` when it was written)
    or its ``run.started``'s query ``columns`` (kind, run_id, run_seq) disagree with that event's hashed bytes
    ``raw`` (or those no longer hash to ``stored``): changed below Sealbox (``UPDATE runs SET agent = 'x'``).
    What ``sealbox verify``'s ``run_row_mismatch`` compares. One SHA-256 and one JSON parse."""
    if raw is None:  # the row went away meanwhile: nothing to compare
        return False
    if _status_event_altered("run.started", raw, stored):
        return True
    try:
        env = orjson.loads(raw if isinstance(raw, (bytes, str)) else bytes(raw))
        payload = env["payload"]
        recorded = (env["run_id"], payload.get("agent"), env.get("principal"), payload.get("parent_run_id"),
                    payload.get("replay_of"), payload.get("snapshot"), env.get("ts"))
        seq = env.get("run_seq")
    except (ValueError, TypeError, KeyError, AttributeError):
        return True
    shown = (row["run_id"], row["agent"], row["principal"], row["parent_run_id"], row["replay_of"],
             row["snapshot"], row["started_at"])
    return shown != recorded or tuple(columns) != ("run.started", recorded[0], seq)


#: how the hashed bytes of an event of a lifecycle kind start (canonical JSON: ``kind`` is its first key)
_LIFECYCLE_PREFIXES = tuple(b'{"kind":"' + k.encode() + b'",'
                            for k in ("run.started", "run.suspended", "run.resumed", "run.ended"))


def _lifecycle_renamed(conn: Any, run_id: str, phase_leaf: int) -> bool:
    """Whether an event of run ``run_id`` after its newest event of a lifecycle kind by the ``kind`` column
    (at ``phase_leaf``) says by its hashed bytes that it is of a lifecycle kind: its kind column was
    rewritten below Sealbox (``UPDATE events SET kind = 'note'`` on a ``run.suspended`` followed by other
    events made a suspended run look running), so the status read from the column is not the recorded one.
    Reads the first 24 bytes of each such event (``events_run``: the run's events after that one only: none
    for a run that ended, the approval events of a suspended one, every event since a running one started)."""
    for (head,) in conn.execute(
            "SELECT substr(raw, 1, 24) FROM events WHERE run_id = ? AND run_seq > "
            "(SELECT run_seq FROM events WHERE leaf_index = ?)", (run_id, phase_leaf)):
        if head is None:
            continue
        head = head.encode("utf-8", "surrogateescape") if isinstance(head, str) else bytes(head)
        if head.startswith(_LIFECYCLE_PREFIXES):
            return True
    return False


def _status_event_altered(kind: Any, raw: Any, stored: Any) -> bool:
    """Whether an event a run's status is read from (its newest event, and its newest of the lifecycle
    kinds, found by the ``kind`` column; here one of them, ``kind`` its column) was changed below Sealbox:
    its bytes no longer hash to its leaf hash, or its ``kind`` column is not the kind its hashed bytes say
    (``UPDATE events SET kind = 'note'`` on a ``run.ended`` made an ended run look running). One SHA-256,
    no JSON parse: intact bytes are canonical JSON, whose first key is ``kind``."""
    from hashlib import sha256

    from sealbox.query import event_altered

    if raw is None:  # the row went away meanwhile: nothing to compare
        return False
    if type(raw) is not bytes or type(stored) is not bytes:
        if event_altered(raw, stored):
            return True
        raw = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)
    elif sha256(b"\x00" + raw).digest() != stored:
        return True
    return type(kind) is not str or not raw.startswith(b'{"kind":"' + kind.encode() + b'",')


def _interrupted(row: dict[str, Any], held: Any) -> dict[str, Any]:
    """``row`` (of :func:`_run_row`), made ``interrupted`` when its run is ``running`` by its events,
    its process took a liveness lease (:mod:`sealbox.liveness`) and no live process holds it any more;
    ``held``: a :func:`sealbox.liveness.checker`."""
    if row.pop("_lease", False) and held(row["run_id"]) is False:
        row["status"] = "interrupted"
    return row


def _source_status(end_info: Any) -> str | None:
    """:func:`sealbox.query.imported_run_status` of a ``run.ended``'s ``imported`` facts read as JSON text."""
    from sealbox.query import imported_run_status

    try:
        return imported_run_status(json.loads(end_info) if isinstance(end_info, str) else None)
    except ValueError:
        return None


_RESULT_SQL = "CAST(x.raw AS TEXT) -> '$.payload.result'"
SqliteQueries._runs_sql = _RUNS_SQL
SqliteQueries._reader_class = Reader
