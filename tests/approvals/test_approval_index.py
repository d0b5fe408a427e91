"""Lookups by approval id alone (`sealbox approvals show / approve / deny ID`, get_approval without
a run, the id prefixes those commands resolve) read through the events_approval index (SQLite
migration 0007, PostgreSQL migration 0002): the requests of that id, not every approval.requested
event of the store. A store written before the migration gets the index from its first writer and
answers every approvals command as before; nothing derived enters the hashed bytes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest
from approval_helpers import policy, request_of

import sealbox
from sealbox import EventDraft, verify_store
from sealbox.approvals import ApprovalPending, get_approval
from sealbox.identities import add_identity
from sealbox.recorder import Recorder
from sealbox.store import migrate
from sealbox.store import sqlite as sqlite_mod
from identity_testkit import admin_key

PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
NEWEST = {"sqlite": len(migrate.load_migrations("sqlite")), "postgres": len(migrate.load_migrations("postgres"))}
#: The migration creating events_approval (SQLite 0007, PostgreSQL 0002), and the migrations a store made before it
#: lacks (SQLite's 0008, the renamed calls' tool index; PostgreSQL's 0003, the credentials of access grants, came
#: after it): what an upgrade applies.
INDEX_VERSION = {"sqlite": 7, "postgres": 2}
PENDING = {name: ", ".join(map(str, range(INDEX_VERSION[name], NEWEST[name] + 1))) for name in NEWEST}


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


_POSTGRES = pytest.param("postgres", marks=pytest.mark.skipif(not PG_URL, reason="needs SEALBOX_TEST_POSTGRES_URL"))


@pytest.fixture(params=["sqlite", _POSTGRES])
def backend(request):
    """(name, init(path) -> store, sql(statement) -> rows on the store's database)."""
    yield from _backend(request.param)


@pytest.fixture(params=[_POSTGRES])
def pg_backend(request):
    """:func:`backend`, PostgreSQL only (what only PostgreSQL has: its plans, the index's key function)."""
    yield from _backend(request.param)


def _backend(param):
    if param == "sqlite":
        paths = []

        def init(path):
            paths.append(path)
            return sealbox.init_store(path)

        def sql(statement):
            db = sqlite3.connect(paths[0] / "sealbox.db", isolation_level=None)
            try:
                return db.execute(statement).fetchall()
            finally:
                db.close()

        yield "sqlite", init, sql
        return
    psycopg = pytest.importorskip("psycopg")
    schema = f"sbt_apridx_{uuid.uuid4().hex[:12]}"

    def init(path):
        return sealbox.init_store(path, postgres_url=PG_URL, schema=schema)

    def sql(statement, params=None, seqscan=True):
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            if not seqscan:
                conn.execute("SET enable_seqscan = off")
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    yield "postgres", init, sql
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _requests(store, n, tool="write_query"):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    out = []
    for i in range(n):
        try:
            with rec.run(agent="bot", principal="agent:bot") as run:
                run.call_tool("db", tool, {"sql": f"DELETE {i}"}, lambda sql: sql)
        except ApprovalPending as p:
            out.append((p.run_id, p.approval_id))
    return out


def _as_before_the_index(name, sql):
    """The store's schema as the previous Sealbox left it: no events_approval, no row of its migration (nor of
    those after it: on SQLite, 0008's events_other_kinds_tool and 0009's credential_rotations; on PostgreSQL,
    0003's credentials table and events_access_grant, and 0004's credential_rotations)."""
    sql("DROP INDEX events_approval")
    if name == "sqlite":  # 0008's index of the tool of the events of other kinds than a call's (renamed calls)
        sql("DROP INDEX events_other_kinds_tool")
        sql("DROP TABLE credential_rotations")
    if name == "postgres":
        sql("DROP FUNCTION sealbox_approval_id(bytea)")
        for statement in ("DROP TABLE credential_rotations", "DROP FUNCTION sealbox_credential_rotations_appended()",
                          "DROP TABLE credentials", "DROP FUNCTION sealbox_credentials_written_once()",
                          "DROP INDEX events_access_grant", "DROP FUNCTION sealbox_grant_id(bytea)"):
            sql(statement)
    sql(f"DELETE FROM schema_migrations WHERE version >= {INDEX_VERSION[name]}")


def _has_index(name, sql):
    if name == "sqlite":
        return sql("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'events_approval'") == [(1,)]
    return sql("SELECT count(*) FROM pg_indexes WHERE indexname = 'events_approval'"
               " AND schemaname = current_schema()") == [(1,)]


# ------------------------------------------------------------------------------------------- plans


@pytest.fixture
def traced(monkeypatch):
    seen: list[str] = []
    real = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite_mod.sqlite3, "connect", connect)
    return seen


def test_sqlite_a_lookup_by_id_alone_searches_the_approval_index(tmp_path, traced):
    store = sealbox.init_store(tmp_path / "store")
    try:
        reqs = _requests(store, 8)
        run_id, aid = reqs[5]
        traced.clear()
        state = get_approval(store, aid)  # no run: `approvals show / approve / deny`
        assert (state.approval_id, state.run_id, state.status) == (aid, run_id, "pending")
        lookups = [s for s in traced if "approval.requested" in s and s.lstrip().upper().startswith("SELECT")]
        assert len(lookups) == 1 and "events_approval" in lookups[0], lookups
        traced.clear()
        assert store.ids_with_prefix("approval", aid[:12]) == [aid]
        [prefix_sql] = [s for s in traced if "approval.requested" in s]
        conn = sqlite3.connect(tmp_path / "store" / "sealbox.db")
        try:
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + lookups[0])]
            prefix_plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + prefix_sql)]
        finally:
            conn.close()
        assert plan == ["SEARCH events USING INDEX events_approval (<expr>=?)"], plan
        assert prefix_plan == ["SEARCH events USING INDEX events_approval (<expr>>? AND <expr><?)"], prefix_plan
    finally:
        store.close()


def test_postgres_a_lookup_by_id_alone_searches_the_approval_index(tmp_path, monkeypatch, pg_backend):
    """With sequential scans off (a test store is too small for the planner to prefer an index),
    the lookup's condition is an index condition on events_approval."""
    name, init, sql = pg_backend
    from sealbox.store import postgres

    store = init(tmp_path / "store")
    try:
        reqs = _requests(store, 6)
        run_id, aid = reqs[4]
        seen: list[tuple[str, tuple]] = []
        real = postgres._Conn.execute

        def execute(self, statement, params=()):
            if "sealbox_approval_id" in statement:
                seen.append((statement, tuple(params)))
            return real(self, statement, params)

        monkeypatch.setattr(postgres._Conn, "execute", execute)
        state = get_approval(store, aid)
        monkeypatch.setattr(postgres._Conn, "execute", real)
        assert (state.approval_id, state.run_id, state.status) == (aid, run_id, "pending")
        [(statement, params)] = seen
        plan = "\n".join(r[0] for r in sql("EXPLAIN " + postgres._q(statement), params, seqscan=False))
        assert "Index Scan using events_approval on events" in plan, plan
        assert "Index Cond: ((sealbox_approval_id(raw))::text = " in plan, plan
        prefixes: list[tuple[str, tuple]] = []
        real_rows = postgres.PostgresStore._rows

        def rows(self, statement, params=()):
            prefixes.append((statement, tuple(params)))
            return real_rows(self, statement, params)

        monkeypatch.setattr(postgres.PostgresStore, "_rows", rows)
        assert store.ids_with_prefix("approval", aid[:12]) == [aid]
        monkeypatch.setattr(postgres.PostgresStore, "_rows", real_rows)
        [(statement, params)] = prefixes
        prefix_plan = "\n".join(r[0] for r in sql("EXPLAIN " + statement, params, seqscan=False))
        assert "Index Scan using events_approval on events" in prefix_plan, prefix_plan
        assert "Index Cond: (((sealbox_approval_id(raw))::text >= " in prefix_plan, prefix_plan
    finally:
        store.close()


# ------------------------------------------------------------------------------- same answers


def _answers_of(path, ids):
    """What the approvals commands print for these ids (and a prefix, and an unknown id)."""
    out = {"list": sb("approvals", "list", "--json", "-s", path)}
    for aid in ids:
        out[aid] = sb("approvals", "show", aid, "-s", path)
        out[aid[:14]] = sb("approvals", "show", aid[:14], "-s", path)
    out["unknown"] = sb("approvals", "show", "apr_" + "0" * 32, "-s", path)
    return {k: (r.returncode, r.stdout, r.stderr) for k, r in out.items()}


def test_a_store_written_before_the_index_is_migrated_and_answers_as_before(tmp_path, backend):
    name, init, sql = backend
    path = tmp_path / "store"
    store = init(path)
    try:
        alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                             admin_key=admin_key(store, tmp_path)).key_path
        reqs = _requests(store, 4)
    finally:
        store.close()
    (_, pending), (_, approved), (_, denied), (_, later) = reqs
    for aid, verb in ((approved, "approve"), (denied, "deny")):
        res = sb("approvals", verb, aid, "--reason", "checked", "--key-file", alice, "-s", path)
        assert res.returncode == 0, res.stderr
    before = _answers_of(path, [pending, approved, denied, later])
    assert before["unknown"] == (2, "", f"error: no approval request {'apr_' + '0' * 32!r} in this store\n")
    assert before[pending][0] == before[pending[:14]][0] == 0 and before[pending][1] == before[pending[:14]][1]
    assert json.loads(before["list"][1])[0]["approval_id"] == later

    _as_before_the_index(name, sql)
    assert not _has_index(name, sql)
    with pytest.raises(sealbox.SchemaVersionError, match=rf"pending migrations \[{PENDING[name]}\]"):
        sealbox.open_store(path, readonly=True)  # readers never upgrade; the first writer does
    res = sb("approvals", "approve", pending, "--reason", "after the upgrade", "--key-file", alice, "-s", path)
    assert (res.returncode, res.stdout) == (0, f"alice approved {pending}; request is now approved\n"), res.stderr
    assert _has_index(name, sql)
    assert sql(f"SELECT version FROM schema_migrations WHERE version = {INDEX_VERSION[name]}") == [(INDEX_VERSION[name],)]

    after = _answers_of(path, [pending, approved, denied, later])
    for key in (approved, approved[:14], denied, denied[:14], later, later[:14], "unknown"):
        assert after[key] == before[key], key
    assert after[pending][0] == 0 and "approved" in after[pending][1].splitlines()[1]
    rows_before = {r["approval_id"]: r for r in json.loads(before["list"][1])}
    rows_after = {r["approval_id"]: r for r in json.loads(after["list"][1])}
    assert list(rows_after) == list(rows_before)
    assert all(rows_after[a] == rows_before[a] for a in (approved, denied, later))
    assert rows_after[pending]["status"] == "approved"
    res = sb("approvals", "deny", later, "--reason", "no", "--key-file", alice, "-s", path)
    assert (res.returncode, res.stdout) == (0, f"alice denied {later}; request is now denied\n"), res.stderr

    store = sealbox.open_store(path)  # opened again: the migration is not applied twice
    try:
        assert list(verify_store(store).problems) == []
        assert get_approval(store, later).status == "denied"
    finally:
        store.close()
    assert _has_index(name, sql)
    assert sql("SELECT count(*) FROM schema_migrations") == [(NEWEST[name],)]
    res = sb("verify", "-s", path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_an_id_requested_in_two_runs_names_the_earlier_request_as_before(tmp_path, backend):
    """A second request with an id already requested (written below Sealbox: ids are random) is
    reported by verify; a lookup by the id alone names the first in log order, a poll by its run
    its own, before and after the migration."""
    name, init, sql = backend
    store = init(tmp_path / "store")
    try:
        (run_a, aid), (run_b, _) = _requests(store, 2)
        req_b = [e for e in store.read_run(run_b) if e.kind == "approval.requested"][0]
        dup = store.append(EventDraft("approval.requested", dict(request_of(store, run_a)), run_id=run_b,
                                      principal=req_b.principal, step=req_b.step))[0]
        scan = store.reader().events(["approval.requested"], field=("approval_id", aid))
        assert [(e.run_id, e.leaf_index) for e in scan][1] == (run_b, dup.leaf_index)
        assert store.reader().approval_requests(aid) == scan
        assert get_approval(store, aid).run_id == run_a
        assert get_approval(store, aid, run_id=run_b).run_id == run_b
        assert store.ids_with_prefix("approval", aid[:12]) == [aid]
        assert [p.code for p in verify_store(store).problems] == ["approval_duplicate"]
    finally:
        store.close()
    _as_before_the_index(name, sql)
    store = sealbox.open_store(tmp_path / "store")
    try:
        assert store.reader().approval_requests(aid) == scan
        assert get_approval(store, aid).run_id == run_a
        assert [p.code for p in verify_store(store).problems] == ["approval_duplicate"]
    finally:
        store.close()


def test_the_index_holds_no_hashed_bytes_and_follows_the_events(tmp_path, backend):
    """The index is derived from each event's own bytes by the database: the events' bytes, leaf
    hashes and the signed root are those of a store without it, and a request appended after the
    migration is found through it."""
    name, init, sql = backend
    store = init(tmp_path / "store")
    try:
        _requests(store, 2)
    finally:
        store.close()
    rows = sql("SELECT leaf_index, raw, leaf_hash FROM events ORDER BY leaf_index")
    _as_before_the_index(name, sql)
    store = sealbox.open_store(tmp_path / "store")
    try:
        assert sql("SELECT leaf_index, raw, leaf_hash FROM events ORDER BY leaf_index") == rows
        (run_id, aid), = _requests(store, 1)
        assert [e.run_id for e in store.reader().approval_requests(aid)] == [run_id]
        assert store.reader().approval_requests("apr_" + "f" * 32) == []
        assert list(verify_store(store).problems) == []
    finally:
        store.close()


def test_a_damaged_request_is_still_named_and_the_others_still_found(tmp_path, backend):
    """A request whose bytes are no longer JSON (changed below Sealbox) has no entry the lookup can
    match: a lookup that finds nothing then reads every request as before, so the damaged one is
    named (one error line in the CLI), while the intact requests are still found by the index."""
    from sealbox.store.base import DamagedEventError

    name, init, sql = backend
    path = tmp_path / "store"
    store = init(path)
    try:
        (_, intact), (run_id, damaged) = _requests(store, 2)
        leaf = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].leaf_index
    finally:
        store.close()
    if name == "sqlite":
        triggers = [r[0] for r in sql("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'")]
        names = [r[0] for r in sql("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'")]
        for trigger in names:
            sql(f"DROP TRIGGER {trigger}")
        sql(f"UPDATE events SET raw = CAST(x'ff7b' AS BLOB) WHERE leaf_index = {leaf}")
        for trigger in triggers:
            sql(trigger)
    else:
        sql("ALTER TABLE events DISABLE TRIGGER events_append_only")
        sql(f"UPDATE events SET raw = '\\xff7b'::bytea WHERE leaf_index = {leaf}")
        sql("ALTER TABLE events ENABLE TRIGGER events_append_only")
    store = sealbox.open_store(path, readonly=True)
    try:
        assert get_approval(store, intact).approval_id == intact
        with pytest.raises(DamagedEventError, match=rf"^the event at leaf {leaf} is damaged"):
            get_approval(store, damaged)
    finally:
        store.close()
    res = sb("approvals", "show", damaged, "-s", path)
    assert res.returncode != 0 and len(res.stderr.splitlines()) == 1 and res.stderr.startswith("error: "), res.stderr
    assert f"leaf {leaf}" in res.stderr


CRASH_DURING_MIGRATION = """
import os, sqlite3, sys
import sealbox

real = sqlite3.connect


class Conn(sqlite3.Connection):
    def execute(self, sql, *args):
        cursor = super().execute(sql, *args)
        if "CREATE INDEX events_approval" in sql:
            os._exit(9)  # the writer dies with the index built, before its migration commits
        return cursor


def connect(*args, **kwargs):
    return real(*args, factory=Conn, **kwargs)


sqlite3.connect = connect
sealbox.open_store(sys.argv[1])
"""


def test_a_writer_killed_while_it_builds_the_index_leaves_the_store_as_it_was(tmp_path):
    """The migration is one transaction: a writer that dies in it leaves the previous schema (no
    index, no row), which the next writer upgrades; the store then verifies and finds its requests."""
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    try:
        (run_id, aid), = _requests(store, 1)
    finally:
        store.close()
    db = path / "sealbox.db"

    def sql(statement):
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            return conn.execute(statement).fetchall()
        finally:
            conn.close()

    _as_before_the_index("sqlite", sql)
    res = subprocess.run([sys.executable, "-c", CRASH_DURING_MIGRATION, str(path)], capture_output=True, text=True)
    assert res.returncode == 9, res.stderr
    assert not _has_index("sqlite", sql)
    assert sql("SELECT max(version) FROM schema_migrations") == [(INDEX_VERSION["sqlite"] - 1,)]
    store = sealbox.open_store(path)
    try:
        assert _has_index("sqlite", sql)
        assert get_approval(store, aid).run_id == run_id
        assert list(verify_store(store).problems) == []
    finally:
        store.close()


def test_sealbox_upgrade_applies_the_pending_migration_once_and_readers_then_open(tmp_path, backend):
    """`sealbox upgrade`: what read-only commands tell the owner of an older store to run."""
    name, init, sql = backend
    path = tmp_path / "store"
    init(path).close()
    _as_before_the_index(name, sql)
    res = sb("runs", "list", "--json", "-s", path)  # a reader refuses, naming the command
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert f"pending migrations [{PENDING[name]}]" in res.stderr and f"`sealbox upgrade --store {path}`" in res.stderr
    res = sb("upgrade", "--store", path)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Upgraded {path}: applied migrations [{PENDING[name]}]\n", "")
    assert _has_index(name, sql)
    assert sql("SELECT count(*) FROM schema_migrations") == [(NEWEST[name],)]
    res = sb("upgrade", "--store", path)
    assert (res.returncode, res.stdout) == (0, f"{path} is up to date: no migration to apply\n"), res.stderr
    res = sb("runs", "list", "--json", "-s", path)
    assert res.returncode == 0 and [r["run_id"] for r in json.loads(res.stdout)] == ["system"], res.stderr
    res = sb("upgrade", "--store", tmp_path / "nowhere")
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1


@pytest.mark.parametrize("index", ["events_approval", "events_call"])
def test_an_index_dropped_below_sealbox_is_one_error_line_on_open(tmp_path, index):
    """SQLite: a store whose events_approval (or another index a query names with INDEXED BY) was dropped
    below Sealbox, its migration still recorded, made `sealbox approvals show ID` fail with
    ``internal error: OperationalError: no such index``; verify said nothing. Now every open refuses it,
    naming the index, as a missing table or column."""
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    [(_, approval_id)] = _requests(store, 1)
    store.close()
    db = sqlite3.connect(path / "sealbox.db", isolation_level=None)
    db.execute(f"DROP INDEX {index}")
    db.close()
    want = (f"error: {path / 'sealbox.db'} is damaged: index {index} is missing (changed below Sealbox; "
            "restore the store from a backup)\n")
    for args in (["approvals", "show", approval_id], ["approvals", "show", approval_id[:8]], ["calls"], ["verify"],
                 ["upgrade"]):
        res = sb(*args, "-s", path)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", want), args
    with pytest.raises(sealbox.StoreError, match=f"index {index} is missing"):
        sealbox.open_store(path, readonly=True)


def test_a_postgres_schema_without_the_index_function_is_one_error_line_on_open(tmp_path, pg_backend):
    """PostgreSQL: sealbox_approval_id(bytea) (migration 0002) and its index dropped below Sealbox, the
    migration still recorded, made `sealbox approvals show ID` fail with a three-line ``internal error:
    UndefinedFunction``; verify said Verified. Now every open refuses the schema, naming the function."""
    name, init, sql = pg_backend
    path = tmp_path / "store"
    store = init(path)
    [(_, approval_id)] = _requests(store, 1)
    store.close()
    sql("DROP INDEX events_approval")
    sql("DROP FUNCTION sealbox_approval_id(bytea)")
    schema = sql("SELECT current_schema()")[0][0]
    want = (f"error: {path} (schema {schema}) is damaged: function sealbox_approval_id(bytea) is missing (changed "
            "below Sealbox; restore the store from a backup)\n")
    for args in (["approvals", "show", approval_id], ["approvals", "show", approval_id[:8]], ["verify"],
                 ["upgrade"]):
        res = sb(*args, "-s", path)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", want), args


def test_a_request_the_index_misnames_is_never_taken_for_another(tmp_path, pg_backend):
    """The events_approval key is the database's reading of the bytes; on PostgreSQL it is a function in the
    store's schema, which whoever owns the database can replace (and REINDEX). With the ids of two requests
    swapped that way, get_approval(A) returned request B, so an approver naming A was shown, and would
    answer, B. A lookup now takes only requests whose own bytes name the id, reading every request when the
    index disagrees with them."""
    name, init, sql = pg_backend
    path = tmp_path / "store"
    store = init(path)
    (_, a), (_, b) = _requests(store, 2)
    store.close()
    sql(f"""CREATE OR REPLACE FUNCTION sealbox_approval_id(raw bytea) RETURNS text
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
            DECLARE id text;
            BEGIN
                id := convert_from(raw, 'UTF8')::json -> 'payload' ->> 'approval_id';
                RETURN CASE id WHEN '{a}' THEN '{b}' WHEN '{b}' THEN '{a}' ELSE id END;
            EXCEPTION WHEN OTHERS THEN RETURN NULL;
            END $$""")
    sql("REINDEX INDEX events_approval")
    store = sealbox.open_store(path, readonly=True)
    try:
        assert (get_approval(store, a).approval_id, get_approval(store, b).approval_id) == (a, b)
    finally:
        store.close()
    res = sb("approvals", "show", a, "-s", path)
    assert res.returncode == 0 and f"approval   {a}\n" in res.stdout, res.stderr


def test_sealbox_upgrade_in_a_folder_without_the_signing_key_says_what_it_did(tmp_path, backend):
    """`sealbox upgrade` of an older store whose folder holds no log.key applied the migration, then
    failed with "log.key is missing ... (open it read-only to read)", exit 2: the store was upgraded but
    the command said it failed. The upgrade signs nothing: it now says what it applied, exit 0."""
    name, init, sql = backend
    path = tmp_path / "store"
    init(path).close()
    _as_before_the_index(name, sql)
    (path / "log.key").rename(tmp_path / "log.key")
    res = sb("upgrade", "--store", path)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Upgraded {path}: applied migrations [{PENDING[name]}]\n", ""), res.stderr
    assert _has_index(name, sql)
    res = sb("runs", "list", "--json", "-s", path)
    assert res.returncode == 0, res.stderr
    # a store that is not older still needs nothing, and one that cannot be upgraded still fails
    res = sb("upgrade", "--store", path)
    assert (res.returncode, res.stdout) == (0, f"{path} is up to date: no migration to apply\n"), res.stderr


TRACED_CLI = """
import pathlib, runpy, sys

from sealbox.store.sqlite import SqliteStore

marker = sys.argv.pop(1)
_lock = SqliteStore._migration_lock


def lock(self, *args, **kwargs):
    pathlib.Path(marker).touch()  # schema_migrations read (pending), the upgrade's lock not yet asked for
    return _lock(self, *args, **kwargs)


SqliteStore._migration_lock = lock
runpy.run_module("sealbox.cli.main", run_name="__main__", alter_sys=True)
"""


def test_two_concurrent_upgrades_each_report_only_what_they_applied(tmp_path, backend):
    """Two `sealbox upgrade --store PATH` processes on the same older store, both past their check of
    what is pending before either applies it: both printed "Upgraded PATH: applied migrations [N]",
    though only one applied it (the other found it recorded inside its transaction). Now the one that
    committed it says so, the other that nothing was left to apply; the migration is recorded once.
    The store's write lock is held while both start, so both read the migration as pending first."""
    name, init, sql = backend
    path = tmp_path / "store"
    init(path).close()
    _as_before_the_index(name, sql)
    env = {**os.environ, "SEALBOX_LOCK_TIMEOUT": "60"}
    cmd = [sys.executable, "-m", "sealbox.cli.main", "upgrade", "--store", str(path)]
    if name == "sqlite":
        holder = sqlite3.connect(path / "sealbox.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # what every writer (and each migration) takes first
        # Each upgrade runs the CLI under a wrapper that notes when it, having read schema_migrations,
        # comes to take the upgrade's lock (the folder's flock, held across its migrations; one then waits
        # at the migration's BEGIN IMMEDIATE, the other at that flock): the write lock is released once both
        # are there, not after a fixed time (was 3.5 s, for a start-up that takes longer on a loaded host;
        # the migration waits SEALBOX_LOCK_TIMEOUT, 60 s here).
        markers = [tmp_path / f"waiting{i}" for i in range(2)]
        tracer = tmp_path / "traced_cli.py"
        tracer.write_text(TRACED_CLI)
        procs = [subprocess.Popen([sys.executable, str(tracer), str(m), *cmd[3:]], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for m in markers]
        deadline = time.monotonic() + 120
        while not all(m.exists() for m in markers):
            assert time.monotonic() < deadline, "an upgrade never came to wait for the write lock"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.01)
        holder.execute("ROLLBACK")
        holder.close()
    else:
        import psycopg

        from sealbox.store.postgres import _lock_key

        key = _lock_key(json.loads((path / "postgres.json").read_text())["schema"]) & (2**64 - 1)
        with psycopg.connect(PG_URL, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (key - 2**64 if key >= 2**63 else key,))
            procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(2)]
            deadline = time.monotonic() + 60
            while holder.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                                 " AND classid = %s AND objid = %s", (key >> 32, key & 0xFFFFFFFF)).fetchone()[0] < 2:
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
                time.sleep(0.05)
            holder.execute("SELECT pg_advisory_unlock_all()")
    outs = sorted((p.wait(60), *p.communicate()) for p in procs)
    assert outs == sorted([(0, f"Upgraded {path}: applied migrations [{PENDING[name]}]\n", ""),
                           (0, f"{path} is up to date: no migration to apply (another process applied the pending "
                               "migrations meanwhile)\n", "")]), outs
    assert _has_index(name, sql)
    assert sql(f"SELECT count(*) FROM schema_migrations WHERE version = {INDEX_VERSION[name]}") == [(1,)]


PAUSED_UPGRADE = """
import json, os, pathlib, runpy, sys, time

role, marker, go, what = sys.argv[1:5]
del sys.argv[1:5]
from sealbox.store import postgres, sqlite

if role == "first":  # stops once its first migration is committed, until the test says go
    def paused(apply):
        def wrapper(*args, **kwargs):
            out = apply(*args, **kwargs)
            if not os.path.exists(marker):
                pathlib.Path(marker).touch()
                while not os.path.exists(go):
                    time.sleep(0.01)
            return out
        return wrapper

    sqlite._apply_migration = paused(sqlite._apply_migration)
    postgres.PostgresStore._apply_migration = paused(postgres.PostgresStore._apply_migration)
else:  # says when it comes to take the upgrade's lock (a Sealbox without that lock never does)
    for cls in (sqlite.SqliteStore, postgres.PostgresStore):
        lock = getattr(cls, "_migration_lock", None)
        if lock is not None:
            def taking(self, *args, _lock=lock, **kwargs):
                pathlib.Path(marker).touch()
                return _lock(self, *args, **kwargs)
            cls._migration_lock = taking
if what == "open":  # a writer's open upgrades the store too
    import sealbox
    store = sealbox.open_store(sys.argv[-1])
    print(json.dumps(store.migrated))
    store.close()
else:
    runpy.run_module("sealbox.cli.main", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("second", ["upgrade", "open"])
def test_an_upgrade_applies_all_its_pending_migrations_under_one_lock(tmp_path, backend, second):
    """Each migration took the store's write lock in its own transaction: a second upgrade (or a writer's
    open) starting between two migrations of the first took the lock between them and applied the rest,
    so one upgrade said "applied migrations [2]" and the other "[3]" (seen under load). An upgrade now
    holds one lock across all its pending migrations (PostgreSQL: the store's advisory lock at session
    level; SQLite: an flock on the store's folder, its transactions still one per migration): here the
    first is held after its first migration until the second is at that lock; the second then finds
    nothing left to apply."""
    name, init, sql = backend
    path = tmp_path / "store"
    init(path).close()
    _as_before_the_index(name, sql)
    env = {**os.environ, "SEALBOX_LOCK_TIMEOUT": "120"}
    script = tmp_path / "paused_upgrade.py"
    script.write_text(PAUSED_UPGRADE)
    paused, waiting, go = tmp_path / "paused", tmp_path / "waiting", tmp_path / "go"

    def start(role, marker, what):
        tail = ["upgrade", "--store", str(path)] if what == "upgrade" else [str(path)]
        return subprocess.Popen([sys.executable, str(script), role, str(marker), str(go), what, *tail], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for(marker, proc):
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None:
            assert time.monotonic() < deadline, f"{marker.name} never came"
            time.sleep(0.01)

    first = start("first", paused, "upgrade")
    wait_for(paused, first)
    assert first.poll() is None, first.communicate()
    other = start("second", waiting, second)
    wait_for(waiting, other)  # at the lock, or (without it) done
    go.touch()
    outs = [(p.wait(120), *p.communicate()) for p in (first, other)]
    assert outs[0] == (0, f"Upgraded {path}: applied migrations [{PENDING[name]}]\n", ""), outs
    if second == "upgrade":
        assert outs[1] == (0, f"{path} is up to date: no migration to apply (another process applied the pending "
                              "migrations meanwhile)\n", ""), outs
    else:
        assert outs[1] == (0, "[]\n", ""), outs
    assert _has_index(name, sql)
    assert sql("SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version") == [
        (v, 1) for v in range(1, NEWEST[name] + 1)]


def test_a_prefix_lookup_finds_ids_holding_the_last_code_point_after_the_prefix(tmp_path, backend):
    """ids_with_prefix searched [prefix, prefix + U+10FFFF): an id with U+10FFFF right after the prefix
    (``prefix + U+10FFFF`` itself, or followed by more) sorts at or above that bound and was missed, so
    `sealbox approvals show PREFIX` said no such approval. Ids are any string in an approval.requested
    payload (Sealbox makes apr_<hex>; an API caller or an import may write others). The bound is now the
    prefix's successor (its last code point below U+10FFFF plus one), none for a prefix of U+10FFFF only."""
    name, init, sql = backend
    store = init(tmp_path / "store")
    top = "\U0010ffff"
    ids = ["apr_x", "apr_x\U0010fffe", f"apr_x{top}", f"apr_x{top}z", f"apr_x{top}{top}", "apr_y", "apr_wxyz" + top,
           top, top + "a", top + top, "\ufffd", "\ud7ff", "\ue000"]
    try:
        (run_a, aid), = _requests(store, 1)
        for i, other in enumerate(ids):
            store.append(EventDraft("approval.requested", {**request_of(store, run_a), "approval_id": other},
                                    run_id=run_a, principal="agent:bot", step=str(100 + i)))
        expect = {
            "apr_x": ["apr_x", "apr_x\U0010fffe", f"apr_x{top}", f"apr_x{top}z", f"apr_x{top}{top}"],
            f"apr_x{top}": [f"apr_x{top}", f"apr_x{top}z", f"apr_x{top}{top}"],
            f"apr_x{top}{top}": [f"apr_x{top}{top}"],
            "apr_wxyz": ["apr_wxyz" + top],
            top: [top, top + "a", top + top],
            top + top: [top + top],
            "\ud7ff": ["\ud7ff"],
            "apr_": sorted([aid] + [i for i in ids if i.startswith("apr_")]),
        }
        for prefix, want in expect.items():
            assert store.ids_with_prefix("approval", prefix, limit=20) == want, prefix
        assert store.ids_with_prefix("approval", "", limit=30) == sorted([aid, *ids])
        runs = ["run-x", f"run-x{top}", f"run-x{top}z", "run-y"]  # run ids: the same lookup (run_id is any text)
        for run_id in runs:
            with Recorder(store, policy=policy()).run(agent="bot", run_id=run_id) as run:
                run.note("n")
        assert store.ids_with_prefix("run", "run-x", limit=20) == runs[:3]
        assert store.ids_with_prefix("run", f"run-x{top}", limit=20) == runs[1:3]
    finally:
        store.close()
    res = sb("approvals", "show", "apr_wxyz", "--json", "-s", tmp_path / "store")  # the one request it starts
    assert res.returncode == 0 and json.loads(res.stdout)["approval_id"] == "apr_wxyz" + top, res.stdout + res.stderr
