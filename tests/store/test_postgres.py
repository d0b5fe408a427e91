"""The PostgreSQL store against the real server (SEALBOX_TEST_POSTGRES_URL): the same bytes as SQLite,
keys and secret outside the database, `sealbox init --postgres` / `verify` / listings from the CLI,
damage made below the triggers reported, the recorder's record-before-act, and one clear error line
for what is not supported on PostgreSQL yet (docs/storage.md, "PostgreSQL")."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: these tests need PostgreSQL")

SEALBOX = Path(sys.executable).parent / "sealbox"


@pytest.fixture
def schema():
    """A fresh schema name, dropped (with everything in it) after the test."""
    import psycopg

    name = f"sbt_{uuid.uuid4().hex[:20]}"
    yield name
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def sql(schema: str, text: str, *, below_triggers: bool = False) -> list:
    import psycopg

    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        if below_triggers:
            conn.execute("SET session_replication_role = replica")  # superuser only: triggers not fired
        cur = conn.execute(text)
        return cur.fetchall() if cur.description else []


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([str(SEALBOX), *args], capture_output=True, text=True, cwd=cwd,
                          env={**env, "COLUMNS": "250"})


def started(run_id: str):
    from sealbox import EventDraft

    return EventDraft("run.started", {"agent": "bot", "snapshot": None, "parent_run_id": None, "labels": {},
                                      "policy": {"fingerprint": "sha256:" + "ab" * 32, "name": "t"}},
                      run_id=run_id, principal="agent:bot")


def test_the_same_drafts_give_the_same_bytes_leaf_hashes_and_roots_on_both_backends(tmp_path, schema, monkeypatch):
    from sealbox import EventDraft
    from sealbox.ledger.checkpoint import verify_checkpoint
    from sealbox.store import base, init_store

    from sealbox.store import postgres

    monkeypatch.setattr(base, "utc_now", lambda: "2026-12-04T10:00:00.000000Z")
    monkeypatch.setattr(postgres._PgTxn, "stamp", lambda self: "2026-12-04T10:00:00.000000Z")  # the server's clock
    drafts = [started("r1"), EventDraft("note", {"text": "x" * 5000}, run_id="r1", principal="agent:bot"),
              *[EventDraft("note", {"text": f"n{i}"}, run_id="r1", principal="agent:bot") for i in range(20)]]
    stores = [init_store(tmp_path / "lite"), init_store(tmp_path / "pg", postgres_url=URL, schema=schema)]
    try:
        logs = []
        for store in stores:
            store.append(drafts[:2])
            for d in drafts[2:]:
                store.append(d)
            logs.append([(e.leaf_index, e.raw, e.leaf_hash) for e in store.read_range(0, store.size())])
        assert logs[0] == logs[1] and len(logs[0]) == 23
        assert stores[0].root() == stores[1].root()
        assert stores[0].inclusion_proof(5, 23) == stores[1].inclusion_proof(5, 23)
        assert stores[0].consistency_proof(7, 23) == stores[1].consistency_proof(7, 23)
        assert [type(s).__name__ for s in stores] == ["SqliteStore", "PostgresStore"]
        cp = stores[1].issue_checkpoint()
        assert verify_checkpoint(cp.note, stores[1].pinned_vkey()).root == stores[0].root()
    finally:
        for store in stores:
            store.close()


def test_the_signing_key_and_the_store_secret_are_in_the_folder_not_in_the_database(tmp_path, schema):
    from sealbox.store import init_store, open_store

    folder = tmp_path / "s"
    store = init_store(folder, postgres_url=URL, schema=schema)
    store.append(started("r1"))
    secret = store._secret
    store.close()
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint", "log.key", "log.vkey", "postgres.json",
                                                       "store.secret"]
    for name in ("log.key", "store.secret", "postgres.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert bytes.fromhex((folder / "store.secret").read_text().strip()) == secret
    assert json.loads((folder / "postgres.json").read_text()) == {"backend": "postgres", "url": URL, "schema": schema}
    key_text = (folder / "log.key").read_text().strip()
    dump = b""
    for table in ("store_meta", "events", "blobs", "checkpoints", "runs", "tree_nodes", "snapshots", "schema_migrations"):
        for row in sql(schema, f"SELECT * FROM {table}"):
            dump += repr(row).encode() + b"".join(v for v in row if isinstance(v, bytes))
    assert dump and secret not in dump and secret.hex().encode() not in dump
    # PRIVATE+KEY+<name>+<key id>+<base64 key>: the name holds no '+', the base64 may (even at its end)
    key_b64 = key_text.split("+", 4)[4]
    assert len(base64.b64decode(key_b64)) == 33  # algorithm byte + 32-byte Ed25519 seed
    assert key_text.encode() not in dump and key_b64.encode() not in dump
    # another store's secret beside this database: refused, never used to record
    other = tmp_path / "other"
    init_store(other).close()
    (folder / "store.secret").write_text(os.urandom(32).hex() + "\n")
    with pytest.raises(Exception, match=r"store\.secret is not this database's store secret"):
        open_store(folder)


def test_cli_init_verify_and_listings_on_postgresql_and_damage_reported(tmp_path, schema):
    folder = tmp_path / "s"
    res = cli("init", "--postgres", URL, "--schema", schema, str(folder))
    assert res.returncode == 0, res.stderr
    assert f"  database:     PostgreSQL postgresql://…@127.0.0.1:5432/test, schema {schema} " in res.stdout
    rec = subprocess.run([sys.executable, "-c", RECORD, str(folder)], capture_output=True, text=True)
    assert rec.returncode == 0, rec.stderr
    run_id, seen = rec.stdout.split("\n")[:2]
    assert seen == "['run.started', 'tool.call', 'policy.decision']"  # committed before the tool ran
    res = cli("verify", str(folder))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact. 6 events in 2 runs"), res
    res = cli("calls", "-s", str(folder), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["run_id"], r["server"], r["tool"], r["decision"], r["outcome"]) for r in rows] == \
        [(run_id, "db", "read_query", "allow", "ok")]
    res = cli("runs", "list", "-s", str(folder), "--json")
    assert res.returncode == 0, res.stderr
    assert [(r["run_id"], r["status"], r["ending"]) for r in json.loads(res.stdout)] == \
        [(run_id, "ended", "ok"), ("system", "running", None)]
    # a row changed below the triggers: verify names it (exit 1)
    sql(schema, "UPDATE events SET raw = convert_to(replace(convert_from(raw, 'UTF8'), 'select 1', 'select 2'),"
                " 'UTF8') WHERE kind = 'tool.call'", below_triggers=True)
    res = cli("verify", str(folder))
    assert res.returncode == 1, res
    assert "leaf 2" in res.stdout and "tool.call" in res.stdout
    # a trigger disabled: reported too
    sql(schema, "ALTER TABLE events DISABLE TRIGGER events_append_only")
    res = cli("verify", str(folder), "--json")
    problems = json.loads(res.stdout)["problems"]
    assert {"trigger_missing"} <= {p["code"] for p in problems}
    assert any("events_append_only" in p["message"] for p in problems if p["code"] == "trigger_missing")


RECORD = """
import sys
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import open_store

store = open_store(sys.argv[1])
rec = Recorder(store, policy=ALLOW_ALL)
seen = []

def read_query(query):
    other = open_store(sys.argv[1], readonly=True)  # another connection: sees only what was committed
    seen.append([e.kind for e in other.read_run(run.run_id)])
    other.close()
    return [{"n": 1}]

with rec.run(agent="bot", principal="agent:bot") as run:
    run.call_tool("db", "read_query", {"query": "select 1"}, read_query)
store.close()
print(run.run_id)
print(seen[0])
"""


@pytest.mark.parametrize("args, expected", [
    (["access", "list"], (0, "", "no grants\n")),  # (the note on stderr, as on SQLite)
    (["access", "show", "g-1"], (2, "", "error: no grant 'g-1' in this store (see `sealbox access list`)\n")),
])
def test_cli_access_on_postgresql_answers_as_on_sqlite(tmp_path, schema, args, expected):
    """`sealbox access` ran into BackendUnsupportedError on PostgreSQL (one error line, exit 2); grants are
    supported there now: the same answers as on a SQLite store."""
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    res = cli(*args, "-s", str(folder))
    assert (res.returncode, res.stdout, res.stderr) == expected


def test_init_refuses_a_schema_that_already_holds_a_store_and_bad_names(tmp_path, schema):
    from sealbox.errors import StoreError
    from sealbox.store import StoreConfigError, init_store

    init_store(tmp_path / "a", postgres_url=URL, schema=schema).close()
    with pytest.raises(StoreError, match=f"^schema '{schema}' of that database already holds a Sealbox store"):
        init_store(tmp_path / "b", postgres_url=URL, schema=schema)
    assert not (tmp_path / "b").exists()
    with pytest.raises(StoreConfigError, match="schema must be a plain lower-case PostgreSQL name"):
        init_store(tmp_path / "c", postgres_url=URL, schema="Robert'); DROP TABLE x;--")
    res = cli("init", "--schema", "x", str(tmp_path / "d"))
    assert (res.returncode, res.stderr) == (2, "error: --schema applies to a PostgreSQL store: give --postgres URL too\n")


def test_init_in_a_schema_holding_another_applications_schema_migrations_says_so(tmp_path, schema):
    """A schema holding Rails' (or Flyway's...) schema_migrations table: init said it "already holds a
    Sealbox store", which sent the user looking for a store that is not there."""
    sql("public", f"CREATE SCHEMA {schema}")
    sql(schema, "CREATE TABLE schema_migrations (version character varying NOT NULL PRIMARY KEY)")
    sql(schema, "INSERT INTO schema_migrations VALUES ('20240101000000')")
    res = cli("init", "--postgres", URL, "--schema", schema, str(tmp_path / "s"))
    assert (res.returncode, res.stdout, res.stderr) == (2, "", (
        f"error: schema '{schema}' of that database holds another application's schema_migrations table (no "
        "Sealbox store): give the store a schema of its own (--schema)\n"))
    assert not (tmp_path / "s").exists()
    assert sql(schema, "SELECT version FROM schema_migrations") == [("20240101000000",)]  # left as it was


def test_a_migration_edited_after_it_was_applied_is_refused(tmp_path, schema):
    from sealbox.errors import SchemaVersionError
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    rows = sql(schema, "SELECT version, name, checksum FROM schema_migrations ORDER BY version")
    assert [(v, n) for v, n, _ in rows] == [(1, "ledger"), (2, "approval_index"), (3, "credentials"),
                                       (4, "credential_rotations")]
    assert rows[0][2].startswith("sha256:")
    sql(schema, "UPDATE schema_migrations SET checksum = 'sha256:00' WHERE version = 1")
    with pytest.raises(SchemaVersionError, match=r": migration 0001_ledger differs from the one applied \(recorded sha256:00, shipped sha256:"):
        open_store(tmp_path / "s")


@pytest.mark.parametrize("name, what", [("store.secret", "store secret"), ("postgres.json", "PostgreSQL settings"),
                                        ("log.key", "signing key")])
def test_export_never_overwrites_the_postgresql_stores_own_files(tmp_path, schema, name, what):
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    before = (folder / name).read_bytes()
    res = cli("export", "-s", str(folder), "-o", str(folder / name))
    assert (res.returncode, res.stdout) == (2, ""), res
    assert res.stderr == (f"error: cannot write {folder / name}: it is the store's own {what} ({folder / name}), "
                          "which is never replaced (nothing was written)\n")
    assert (folder / name).read_bytes() == before


def test_a_listing_over_an_event_damaged_below_sealbox_names_it_in_one_error_line(tmp_path, schema):
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    rec = subprocess.run([sys.executable, "-c", RECORD, str(folder)], capture_output=True, text=True)
    assert rec.returncode == 0, rec.stderr
    for leaf, args in ((2, ["calls"]), (1, ["runs", "list"])):  # the call; the run's run.started
        sql(schema, f"UPDATE events SET raw = '\\xff7b'::bytea WHERE leaf_index = {leaf}", below_triggers=True)
        res = cli(*args, "-s", str(folder))
        assert (res.returncode, res.stdout) == (2, ""), res
        assert res.stderr.startswith(f"error: the event at leaf {min(leaf, 2)} is damaged (its bytes are not a "
                                     "Sealbox event: they are not JSON ("), res.stderr
        assert res.stderr.endswith("): the store was changed below Sealbox; run `sealbox verify`\n")


def test_no_wait_and_lock_timeout_while_another_connection_holds_the_write_lock(tmp_path, schema):
    import psycopg

    from sealbox import EventDraft
    from sealbox.errors import StoreBusyError, StoreError
    from sealbox.store import init_store, open_store
    from sealbox.store.postgres import _lock_key

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    store = open_store(tmp_path / "s", lock_timeout=0.3)
    store.append(started("r1"))
    size = store.size()
    with psycopg.connect(URL) as holder:  # another writer's transaction, holding the lock
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
        with store.no_wait(), pytest.raises(StoreBusyError, match="is locked by another writer"):
            store.append(EventDraft("note", {"text": "x"}, run_id="r1", principal="agent:bot"))
        with pytest.raises(StoreError, match="the write lock was held by another writer for more than lock_timeout"):
            store.append(EventDraft("note", {"text": "x"}, run_id="r1", principal="agent:bot"))
        holder.rollback()
    assert store.size() == size
    store.append(EventDraft("note", {"text": "now"}, run_id="r1", principal="agent:bot"))
    assert store.size() == size + 1
    store.close()


def test_verify_reports_a_trigger_that_is_not_sealboxs(tmp_path, schema):
    from sealbox import verify_store
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, "CREATE FUNCTION quietly() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$")
    sql(schema, "CREATE TRIGGER drop_notes BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION quietly()")
    store = open_store(tmp_path / "s", readonly=True)
    try:
        report = verify_store(store)
    finally:
        store.close()
    assert [(p.code, p.message) for p in report.problems if p.code.startswith("trigger")] == [
        ("trigger_foreign", "the trigger drop_notes is not Sealbox's: it can silently change or drop what Sealbox "
                            "writes (someone changed the store below Sealbox)")]


def test_a_call_naming_an_unknown_grant_is_a_recorded_grant_invalid_deny_saying_why(tmp_path, schema):
    """The grant check runs on PostgreSQL (it was a guardrail_error deny naming BackendUnsupportedError):
    a grant the store does not hold denies the call as on SQLite (grant_invalid, recorded before anything
    runs)."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder, ToolDenied
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    ran = []
    try:
        rec = Recorder(store, policy=ALLOW_ALL)
        with rec.run(agent="bot", principal="agent:bot") as run:
            with pytest.raises(ToolDenied) as caught:
                run.call_tool("db", "q", {}, lambda: ran.append(1), grant="g-123")
        assert str(caught.value) == "db/q denied (grant_invalid): no grant 'g-123' in this store"
        assert ran == []
        decision = [e.payload for e in store.read_run(run.run_id) if e.kind == "policy.decision"]
        assert [(d["effect"], d["reason_code"]) for d in decision] == [("deny", "grant_invalid")]
    finally:
        store.close()


def test_a_child_process_after_fork_uses_its_own_connections_and_the_parents_keep_working(tmp_path, schema):
    from sealbox import EventDraft
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    store.append(started("r1"))
    pid = os.fork()
    if pid == 0:  # the child: the inherited object opens fresh connections; the parent's are left alone
        code = 1
        try:
            store.append(EventDraft("note", {"text": "from the child"}, run_id="r1", principal="agent:bot"))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.append(EventDraft("note", {"text": "from the parent"}, run_id="r1", principal="agent:bot"))
    assert [e.payload.get("text") for e in store.read_run("r1")[1:]] == ["from the child", "from the parent"]
    store.close()


def test_approvals_over_a_damaged_request_name_it(tmp_path, schema):
    from sealbox.approvals import ApprovalPending, get_approval
    from sealbox.policy import Policy
    from sealbox.recorder import Recorder
    from sealbox.store import init_store, open_store
    from sealbox.store.base import DamagedEventError

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    rec = Recorder(store, policy=Policy.from_text(
        "version: 1\nrules:\n  - id: w\n    match: {tool: write_query}\n    effect: require_approval\n"
        "    approval: {groups: [ops], quorum: 1, expires: 1h}\n"), approvals="suspend")
    with pytest.raises(ApprovalPending):
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"query": "delete"}, lambda query: 1)
    [request] = [e for e in store.read_run(run.run_id) if e.kind == "approval.requested"]
    store.close()
    sql(schema, f"UPDATE events SET raw = '\\xff7b'::bytea WHERE leaf_index = {request.leaf_index}",
        below_triggers=True)
    store = open_store(tmp_path / "s", readonly=True)
    try:
        with pytest.raises(DamagedEventError, match=rf"^the event at leaf {request.leaf_index} is damaged \(its "
                                                    "bytes are not a Sealbox event: they are not JSON"):
            get_approval(store, request.payload["approval_id"])
    finally:
        store.close()


def test_verify_reports_a_trigger_function_redefined_to_let_changes_through(tmp_path, schema):
    from sealbox import verify_store
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, "CREATE OR REPLACE FUNCTION sealbox_append_only() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RETURN NEW; END $$")
    sql(schema, "UPDATE runs SET agent = 'someone-else'")  # now let through by the neutered trigger
    store = open_store(tmp_path / "s", readonly=True)
    try:
        report = verify_store(store)
    finally:
        store.close()
    assert sorted((p.code, p.message) for p in report.problems) == [
        ("run_row_mismatch", "the runs table's row for system disagrees with its run.started event"),
        ("trigger_foreign", "the trigger sealbox_append_only() (redefined) is not Sealbox's: it can silently "
                            "change or drop what Sealbox writes (someone changed the store below Sealbox)")]


def test_cli_init_against_a_server_that_is_not_there_is_one_error_line_and_creates_nothing(tmp_path):
    res = cli("init", "--postgres", "postgresql://postgres@127.0.0.1:1/test", str(tmp_path / "s"))
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr.startswith("error: cannot create the store's schema 'sealbox' in PostgreSQL (connection failed: ")
    assert res.stderr.count("\n") == 1 and not (tmp_path / "s").exists()
    res = cli("init", "--postgres", "mysql://x", str(tmp_path / "s"))
    assert (res.returncode, res.stderr) == (2, "error: --postgres takes a postgresql:// URL, not 'mysql://x'\n")


def test_a_server_refusing_the_connection_is_one_line_whose_sentences_stay_apart(tmp_path, schema):
    """libpq says "Connection refused" and, on its next line, "Is the server running on that host and accepting
    TCP/IP connections?": the error line joined the two with a space ("Connection refused Is the server
    running ..."), one run-on sentence, for `init` and for every command on a store whose server refuses. A line
    ending without punctuation before one starting a new sentence (upper case) now ends with a full stop; a
    sentence libpq wraps over lines is joined with a space as before."""
    res = cli("init", "--postgres", "postgresql://postgres@127.0.0.1:1/test", str(tmp_path / "s"))
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == ("error: cannot create the store's schema 'sealbox' in PostgreSQL (connection failed: "
                          "connection to server at \"127.0.0.1\", port 1 failed: Connection refused. Is the server "
                          "running on that host and accepting TCP/IP connections?)\n")
    folder = tmp_path / "pg"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    settings = json.loads((folder / "postgres.json").read_text())
    (folder / "postgres.json").write_text(json.dumps({**settings, "url": "postgresql://postgres@127.0.0.1:1/test"}))
    for args in (["runs", "list", "-s", str(folder)], ["verify", str(folder)]):
        res = cli(*args)
        assert (res.returncode, res.stdout) == (2, ""), args
        assert res.stderr == (f"error: {folder}: cannot connect to PostgreSQL (connection failed: connection to "
                              "server at \"127.0.0.1\", port 1 failed: Connection refused. Is the server running on "
                              "that host and accepting TCP/IP connections?)\n"), args

    from sealbox.store.postgres import _one_line

    wrapped = Exception("consuming input failed: server closed the connection unexpectedly\n\tThis probably means "
                        "the server terminated abnormally\n\tbefore or while processing the request.")
    assert _one_line(wrapped) == ("consuming input failed: server closed the connection unexpectedly. This probably "
                                  "means the server terminated abnormally before or while processing the request.")
    assert _one_line(Exception('syntax error at or near "x":\nLINE 1: x')) == 'syntax error at or near "x": LINE 1: x'


def test_two_inits_racing_into_one_schema_leave_one_intact_store_and_no_second_folder(tmp_path, schema):
    """Two `init`s into the same empty schema both passed the "holds no store" check, then the second's
    store_meta overwrote the first's (ON CONFLICT DO UPDATE): the init that succeeded had another store's
    origin and secret check, so its own `verify` failed; the other left its keys and postgres.json behind."""
    import threading
    import time

    import psycopg

    from sealbox.store import init_store
    from sealbox.store.postgres import _lock_key

    holder = psycopg.connect(URL, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (_lock_key(schema),))  # both pass the check, then wait here
    outcome: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            init_store(tmp_path / name, postgres_url=URL, schema=schema).close()
            outcome[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - the loser's error is what is checked
            outcome[name] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sql("public", (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))[0][0] < 2:
        time.sleep(0.02)
    holder.execute("SELECT pg_advisory_unlock(%s)", (_lock_key(schema),))
    holder.close()
    for t in threads:
        t.join(60)
    winners = [n for n, v in outcome.items() if v == "ok"]
    assert len(winners) == 1, outcome
    loser = "b" if winners == ["a"] else "a"
    assert "already holds a Sealbox store" in str(outcome[loser])
    assert not [p.name for p in (tmp_path / loser).glob("*")]  # no key, secret or postgres.json left behind
    res = cli("verify", str(tmp_path / winners[0]))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("Verified: the log is intact. 1 event in 1 run")


def test_a_folder_pointed_at_another_stores_schema_whose_secret_check_was_deleted_appends_nothing(tmp_path, schema):
    """store_meta has no triggers: with its secret_check row deleted, another store's folder pointed at this
    schema opened for writing and appended its events (under the wrong secret) into this log."""
    import psycopg

    from sealbox.errors import StoreError
    from sealbox.store import init_store, open_store

    other = schema + "_o"
    try:
        init_store(tmp_path / "a", postgres_url=URL, schema=schema).close()
        init_store(tmp_path / "b", postgres_url=URL, schema=other).close()
        sql(other, "DELETE FROM store_meta WHERE key = 'secret_check'")
        cfg = json.loads((tmp_path / "a" / "postgres.json").read_text())
        (tmp_path / "a" / "postgres.json").write_text(json.dumps({**cfg, "schema": other}))
        with pytest.raises(StoreError, match="the store secret check in store_meta is missing"):
            open_store(tmp_path / "a")
        assert sql(other, "SELECT count(*) FROM events") == [(1,)]
        res = cli("verify", str(tmp_path / "b"))
        assert res.returncode == 1
        assert ("store_settings_damaged: the store secret check in store_meta is missing (the folder's store.secret "
                "cannot be matched to this database)") in res.stdout
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {other} CASCADE")


@pytest.mark.parametrize("table", ["events", "tree_nodes", "runs", "store_meta", "blobs"])
@pytest.mark.parametrize("args", [["verify"], ["runs", "list", "-s"], ["calls", "-s"]], ids=" ".join)
def test_a_schema_missing_a_table_is_one_error_line_for_every_command(tmp_path, schema, table, args):
    # was: "error: internal error: UndefinedTable: relation "tree_nodes" does not exist ..." (exit 70),
    # where the SQLite store says "... is damaged: table tree_nodes is missing" (exit 2)
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    sql(schema, f"DROP TABLE {table} CASCADE")
    res = cli(*args, str(folder))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"error: {folder} (schema {schema}) is damaged: table {table} is missing (changed below Sealbox; "
               "restore the store from a backup)\n")


@pytest.mark.parametrize("alter, missing", [
    ("ALTER TABLE events DROP COLUMN cost", "events.cost"),
    ("ALTER TABLE runs RENAME COLUMN replay_of TO replayed", "runs.replay_of"),
], ids=["drop", "rename"])
@pytest.mark.parametrize("args", [["verify"], ["runs", "list", "-s"], ["calls", "-s"]], ids=" ".join)
def test_a_schema_missing_a_column_is_one_error_line_for_every_command(tmp_path, schema, alter, missing, args):
    # was: "error: internal error: UndefinedColumn: column "cost" does not exist ..." (exit 70)
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    sql(schema, alter)
    res = cli(*args, str(folder))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"error: {folder} (schema {schema}) is damaged: column {missing} is missing (changed below Sealbox; "
               "restore the store from a backup)\n")


def test_a_role_that_cannot_read_one_table_is_not_told_the_store_is_damaged(tmp_path, schema):
    """information_schema.columns lists only the columns the role has a privilege on: a reader role
    granted SELECT on every table but blobs was refused on open with 'is damaged: columns blobs.content,
    blobs.ref, blobs.salt, blobs.size are missing (changed below Sealbox; restore the store from a
    backup)'. The columns are read from the catalog (pg_attribute), as the tables are (pg_tables):
    the store opens, and what the role may read reads."""
    import shutil

    import psycopg

    from sealbox import init_store, open_store

    role = f"sbt_ro_{uuid.uuid4().hex[:12]}"
    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        for table in ("events", "runs", "checkpoints", "tree_nodes", "store_meta", "snapshots", "schema_migrations"):
            conn.execute(f"GRANT SELECT ON {schema}.{table} TO {role}")
    try:
        shutil.copytree(tmp_path / "s", tmp_path / "reader")
        (tmp_path / "reader" / "log.key").unlink()
        config = json.loads((tmp_path / "reader" / "postgres.json").read_text())
        url = psycopg.conninfo.make_conninfo(config["url"], user=role)
        (tmp_path / "reader" / "postgres.json").write_text(json.dumps({**config, "url": url}))
        store = open_store(tmp_path / "reader", readonly=True)
        try:
            assert store.size() == 1 and [e.kind for e in store.read_range(0, 1)] == ["run.started"]
        finally:
            store.close()
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_verifiers_folder_without_the_writers_secret_verifies_the_intact_log(tmp_path, schema):
    # docs/storage.md: readers and verifiers need no log.key nor store.secret. Without store.secret,
    # verify said "store_settings_damaged: the store secret ... is missing ...: the store was changed
    # below Sealbox" (exit 1) of an intact log.
    folder, reader = tmp_path / "s", tmp_path / "reader"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    reader.mkdir()
    for name in ("postgres.json", "log.vkey", "checkpoint"):
        (reader / name).write_bytes((folder / name).read_bytes())
    res = cli("verify", str(reader))
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout.startswith("Verified: the log is intact. 1 event in 1 run, 0 blobs, 1 signed checkpoint ")
    from sealbox.errors import StoreError
    from sealbox.store import open_store

    with pytest.raises(StoreError, match=r"the store secret \(store.secret, the HMAC key of redaction markers\) is "
                                         "missing or not 32 bytes of hex: refusing to record into it"):
        open_store(reader)  # a writer still needs it


def test_init_refuses_information_schema_which_pg_dump_leaves_out(tmp_path):
    # was: a store created in information_schema (exit 0), whose tables a plain `pg_dump` of the
    # database silently leaves out (it skips that system schema): a backup without the log
    import psycopg

    res = cli("init", "--postgres", URL, "--schema", "information_schema", str(tmp_path / "s"))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", "error: schema 'information_schema' is PostgreSQL's own (pg_dump leaves its tables out): "
               "give another schema\n")
    assert not (tmp_path / "s").exists()
    with psycopg.connect(URL, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('information_schema.events')").fetchone() == (None,)


def test_cli_init_refuses_an_empty_schema_instead_of_using_the_default(tmp_path, schema):
    # was: `--schema ""` (an unset variable in `--schema "$SCHEMA"`) created the store in schema
    # "sealbox" (exit 0), or failed saying that "sealbox" already holds a store
    res = cli("init", "--postgres", URL, "--schema", "", str(tmp_path / "s"))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", "error: schema must be a plain lower-case PostgreSQL name ([a-z_][a-z0-9_]*, at most 63 characters), "
               "not ''\n")
    assert not (tmp_path / "s").exists()


def test_a_lookup_holding_a_nul_finds_nothing_and_never_says_the_log_is_damaged(tmp_path, schema):
    # PostgreSQL text cannot hold a NUL, so no stored id or name has one. Was: psycopg.DataError from
    # read_run / ids_with_prefix, and from the listings "DamagedEventError: an event in the log is
    # damaged ...: the store was changed below Sealbox" of an intact log; SQLite finds nothing.
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            run.call_tool("db", "read_query", {"q": 1}, lambda q: q)
        assert store.read_run("r\x00") == []
        assert store.get_run("r\x00") is None
        assert store.ids_with_prefix("run", "0\x00") == []
        assert store.query_calls(agent="b\x00t") == []
        assert store.query_calls(tool="read\x00*") == []
        assert store.query_runs(principal="agent:\x00") == []
        assert store.reader().events(["run.started"], run_id="r\x00") == []
        assert [c["tool"] for c in store.query_calls(agent="bot")] == ["read_query"]
    finally:
        store.close()


def test_a_read_on_a_connection_the_server_ended_is_a_store_error_then_the_next_one_reconnects(tmp_path, schema):
    # was: psycopg.errors.AdminShutdown ("terminating connection due to administrator command") out of
    # read_run, size(), the listings and close() (the CLI: "internal error", exit 70), not a StoreError.
    # The connection is ended while the read waits (for a table lock another session holds): an idle one
    # ended before a read is replaced (test_a_read_after_the_server_ended_the_idle_connection_...)
    import threading
    import time

    import psycopg

    from sealbox.errors import StoreError
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    try:
        message = (f"^{re.escape(str(tmp_path / 's'))}: PostgreSQL could not answer a read \\(terminating connection "
                   "due to administrator command[.)]")
        for read in (lambda: store.read_run("system"), store.size, lambda: store.query_calls(agent="bot"),
                     store.runs, lambda: store.get_run("system")):
            outcome: list = []
            pids: list = []

            def reading(read=read, outcome=outcome, pids=pids) -> None:  # (a thread: its own connection)
                try:
                    pids.append(store._pg().info.backend_pid)
                    outcome.append(read())
                except Exception as exc:  # noqa: BLE001 - checked below
                    outcome.append(exc)

            with psycopg.connect(URL) as holder, psycopg.connect(URL, autocommit=True) as killer:
                holder.execute(f"LOCK TABLE {schema}.events, {schema}.runs, {schema}.tree_nodes IN ACCESS EXCLUSIVE MODE")
                worker = threading.Thread(target=reading)
                worker.start()
                for _ in range(500):  # until the read waits for the lock
                    if pids and killer.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                               (pids[0],)).fetchone() == ("Lock",):
                        break
                    time.sleep(0.01)
                killer.execute("SELECT pg_terminate_backend(%s, 10000)", (pids[0],))
                worker.join(10)
                holder.rollback()
            [exc] = outcome
            assert isinstance(exc, StoreError) and re.match(message, str(exc)), exc
            assert [e.kind for e in store.read_run("system")] == ["run.started"]  # a new connection
    finally:
        store.close()


def test_an_init_that_fails_after_claiming_the_schema_leaves_no_store_there(tmp_path, schema, monkeypatch):
    # was: the connection lost at init's first checkpoint removed the folder's key, secret and settings but
    # left the schema holding the half-made store (its events, store_meta, a checkpoint signed on close by
    # the deleted key): every later init into it said "already holds a Sealbox store ... open the existing
    # store's folder", a folder that no longer existed
    from sealbox.errors import StoreError
    from sealbox.store import init_store
    from sealbox.store.postgres import PostgresStore

    def connection_lost(self, *args, **kwargs):
        raise StoreError(f"{self.path}: PostgreSQL refused the write (the server went away)")

    monkeypatch.setattr(PostgresStore, "issue_checkpoint", connection_lost)
    with pytest.raises(StoreError, match="PostgreSQL refused the write \\(the server went away\\)"):
        init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    assert [p.name for p in (tmp_path / "s").iterdir()] == []
    assert sql(schema, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()") == []
    res = cli("init", "--postgres", URL, "--schema", schema, str(tmp_path / "s"))
    assert res.returncode == 0, res.stderr
    res = cli("verify", str(tmp_path / "s"))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact. 1 event in 1 run"), res


def test_a_lock_timeout_beyond_postgresqls_integer_range_still_writes(tmp_path, schema):
    # was: open_store(DIR, lock_timeout=3e6) (about 35 days, accepted as on SQLite) made every write fail:
    # "PostgreSQL refused the write (invalid value for parameter "lock_timeout": "3000000000" ...)"
    from sealbox import EventDraft
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    store = open_store(tmp_path / "s", lock_timeout=3e6)
    try:
        [event] = store.append(EventDraft("note", {"text": "x"}, run_id="system", principal="sealbox"))
        assert (event.leaf_index, store.size()) == (1, 2)
    finally:
        store.close()


def test_init_in_a_database_that_is_not_utf8_is_one_error_line_and_creates_nothing(tmp_path):
    # was: "error: internal error: UnicodeEncodeError: 'latin-1' codec can't encode character '\u2014' ..."
    # (exit 70), the schema left created
    import psycopg

    db = f"sbt_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        url = URL.rsplit("/", 1)[0] + "/" + db
        res = cli("init", "--postgres", url, str(tmp_path / "s"))
        assert (res.returncode, res.stdout, res.stderr) == (
            2, "", f"error: the database {db} is encoded LATIN1: a Sealbox store needs a UTF8 database "
                   "(CREATE DATABASE ... ENCODING 'UTF8')\n")
        assert not (tmp_path / "s").exists()
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'sealbox'").fetchone() == (0,)
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db}")


NUL_ARGS = {"nul": "a\x00b", "two": "\x00\x00", "slash_u0000": "\\u0000", "slash_ufffe": "\\ufffe", "fffe": "\ufffe",
            "slashes": "\\\\\x00\\"}


def test_payloads_holding_a_nul_are_listed_as_on_sqlite_not_called_damaged(tmp_path, schema):
    # PostgreSQL's json operators refuse to read a document holding the escape \u0000 ("unsupported Unicode
    # escape sequence"), so a call whose arguments, error or result held a NUL (recorded fine: the bytes are
    # bytea) made `sealbox calls`, `runs list` and export stop with "an event in the log is damaged ...: the
    # store was changed below Sealbox" for the whole store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    def fail(**kwargs):
        raise ValueError("bad \x00 value")

    listings = []
    for name, where in (("lite", {}), ("pg", {"postgres_url": URL, "schema": schema})):
        store = init_store(tmp_path / name, **where)
        rec = Recorder(store, policy=ALLOW_ALL)
        with pytest.raises(ValueError):
            with rec.run(agent="bot", run_id="r1", labels={"k": "v\x00"}) as run:
                run.call_tool("db", "echo", NUL_ARGS, lambda **kw: kw)
                run.call_tool("db", "fail", {"x": "\x00"}, fail)
        calls = store.query_calls()
        runs = store.query_runs()
        events = store.reader().events(["tool.call"], field=("call_id", calls[0]["call_id"]))
        listings.append(([(c["tool"], c["arguments"], c["error"], c["outcome"]) for c in calls],
                         [(r["run_id"], r["labels"], r["status"], r["ending"]) for r in runs],
                         [e.payload["arguments"] for e in events],
                         [c["tool"] for c in store.query_calls(match="result.nul~^a\x00b$")]))
        store.close()
    assert listings[1] == listings[0]
    assert listings[1][0][0] == ("echo", NUL_ARGS, None, "ok")
    assert listings[1][0][1][2] == {"type": "ValueError", "message": "bad \x00 value"}
    assert listings[1][1][0] == ("r1", {"k": "v\x00"}, "ended", "error")
    assert listings[1][3] == ["echo"]


@pytest.mark.parametrize("args", [["verify"], ["runs", "list", "-s"]], ids=" ".join)
def test_a_schema_migrations_table_emptied_below_sealbox_is_called_damaged_not_no_store(tmp_path, schema, args):
    # was: "error: ... holds no Sealbox store (no schema_migrations table)" of a schema holding the whole store
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    sql(schema, "DELETE FROM schema_migrations")
    res = cli(*args, str(folder))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"error: {folder} (schema {schema}) is damaged: its schema_migrations table is empty though the "
               "store's tables are there (changed below Sealbox; restore the store from a backup)\n")


def test_a_connection_the_server_ended_while_idle_is_replaced_and_the_write_goes_through(tmp_path, schema):
    # was: the first write after the server ended the idle connection (a restart, pg_terminate_backend,
    # an idle timeout) failed: a tool that had run lost its tool.result (RecordingError), and the next
    # call was denied unrun ("could not record"). Nothing of that transaction had been committed.
    import psycopg

    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)

    def kill() -> None:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (store._pg().info.backend_pid,))

    def long_tool(q):
        kill()  # the server ends the store's connection while the tool runs
        return q * 2

    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", run_id="r1") as run:
            assert run.call_tool("db", "q", {"q": 21}, long_tool) == 42
            kill()  # and again between two calls
            assert run.call_tool("db", "q", {"q": 1}, lambda q: q) == 1
        assert [e.kind for e in store.read_run("r1")] == [
            "run.started", "tool.call", "policy.decision", "tool.result", "tool.call", "policy.decision",
            "tool.result", "run.ended"]
        assert [e.payload["result"] for e in store.read_run("r1") if e.kind == "tool.result"] == [42, 1]
    finally:
        store.close()
    res = cli("verify", str(tmp_path / "s"))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact. 9 events in 2 runs"), res


def test_a_connection_left_inside_a_transaction_by_a_failure_is_replaced_not_reused_forever(tmp_path, schema):
    # was: the server ending the connection in the middle of a write's pipeline (executemany) left it
    # mid-transaction (psycopg: "error ignored in rollback ... cannot exit pipeline mode while busy"), and
    # every later write of that thread failed: "a write was started inside another write or read snapshot
    # of this store" (34183 times in 8 s of a recorder's loop). A connection left in a transaction stands
    # in for it here.
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    try:
        import psycopg

        store._pg().execute("BEGIN")
        with pytest.raises(psycopg.errors.DivisionByZero):
            store._pg().execute("SELECT 1/0")  # and failed in it: nothing can be read in it any more
        assert store.size() == 1
        store._pg().execute("BEGIN")
        [event] = store.append(started("r1"))
        assert (event.leaf_index, store.size(), [e.kind for e in store.read_run("r1")]) == (1, 2, ["run.started"])
    finally:
        store.close()


@pytest.mark.parametrize("table", ["events", "blobs", "checkpoints", "events-no_wait"])
def test_a_table_locked_by_another_session_fails_the_write_after_lock_timeout_instead_of_hanging(tmp_path, schema,
                                                                                                 table):
    # was: the write took the advisory lock within lock_timeout, then set lock_timeout to 0 (no limit) for
    # the rest of its transaction (a no_wait() write never set it): a LOCK TABLE (or ALTER TABLE, VACUUM
    # FULL, ...) held by another session on events, blobs or checkpoints made every append, and a recorder's
    # tool call, wait for as long as it was held (observed: still waiting after 8 s with lock_timeout=2; the
    # gateway's no_wait() write on its event loop too), not fail after lock_timeout
    import threading

    import psycopg

    from sealbox.errors import RecordingError, StoreError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema, checkpoint_policy=None).close()
    store = open_store(tmp_path / "s", lock_timeout=0.5)
    holder = psycopg.connect(URL)
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", run_id="r1") as run:
            assert run.call_tool("db", "q", {"q": 1}, lambda q: q) == 1
            size = store.size()
            holder.execute(f"LOCK TABLE {schema}.{table.split('-')[0]} IN ACCESS EXCLUSIVE MODE")
            ran, outcome = [], []

            def call() -> None:
                try:
                    if table == "checkpoints":
                        store.issue_checkpoint()
                    elif table == "events-no_wait":
                        with store.no_wait():
                            run.call_tool("db", "q", {"q": "x" * 2000}, lambda q: ran.append(q))
                    else:
                        run.call_tool("db", "q", {"q": "x" * 2000}, lambda q: ran.append(q))
                except Exception as exc:  # noqa: BLE001 - what it raised is checked below
                    outcome.append(exc)

            worker = threading.Thread(target=call, daemon=True)
            worker.start()
            worker.join(10)
            hung = worker.is_alive()
            holder.rollback()  # lets a hung write go on (and the test end)
            worker.join(10)
            assert not hung, "the write still waited for the table lock after 10 s (lock_timeout 0.5 s)"
            [exc] = outcome
            assert isinstance(exc, RecordingError if table != "checkpoints" else StoreError), exc
            assert str(exc).endswith(f"{tmp_path / 's'}: a table of the store ({schema}) was locked by another "
                                     "PostgreSQL session (not a Sealbox writer: LOCK TABLE, ALTER TABLE, VACUUM "
                                     "FULL, ...) for more than lock_timeout (0.5 s; SEALBOX_LOCK_TIMEOUT=SECONDS for "
                                     "`sealbox` commands)"), str(exc)
            assert (ran, store.size()) == ([], size)  # not run, nothing of it written
            assert run.call_tool("db", "q", {"q": 2}, lambda q: q) == 2  # the lock released: recording goes on
    finally:
        holder.close()
        store.close()
    res = cli("verify", str(tmp_path / "s"))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact."), res


def test_a_url_the_driver_cannot_parse_is_one_error_line_that_does_not_print_its_password(tmp_path, schema):
    # was: "error: cannot create the store's schema ... (end of string reached when looking for matching "]" in
    # IPv6 host address in URI: "postgresql://postgres:s3cr3t@[::1")": the password in clear on stderr (CI logs),
    # though init prints the URL without it and keeps postgres.json mode 0600 for it; the same from every
    # command opening a folder whose postgres.json holds such a URL
    bad = "postgresql://postgres:s3cr3t@[::1"
    res = cli("init", "--postgres", bad, "--schema", schema, str(tmp_path / "new"))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"error: cannot create the store's schema '{schema}' in PostgreSQL (end of string reached when looking "
               'for matching "]" in IPv6 host address in URI: "postgresql://…@[::1")\n')
    assert not (tmp_path / "new").exists()
    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    config = json.loads((folder / "postgres.json").read_text())
    (folder / "postgres.json").write_text(json.dumps({**config, "url": bad}))
    for args in (["verify", str(folder)], ["calls", "-s", str(folder)], ["runs", "list", "-s", str(folder)]):
        res = cli(*args)
        assert (res.returncode, res.stdout, res.stderr) == (
            2, "", f"error: {folder}: cannot connect to PostgreSQL (end of string reached when looking for matching "
                   '"]" in IPv6 host address in URI: "postgresql://…@[::1")\n'), args


def test_a_password_holding_a_raw_at_sign_is_not_printed_in_part(tmp_path, schema):
    # was (8096d12 masked the user information up to its first '@' only): a password typed with a raw '@'
    # (not %40), the likeliest reason a URL fails, printed what follows its first '@' as the host name:
    # "failed to resolve host 'secret@127.0.0.1'", or "postgresql://…@secret@[::1" as libpq quoted the URL
    for bad, host in (("postgresql://postgres:my@secret@127.0.0.1:1/test", "'…@127.0.0.1'"),
                      ("postgresql://postgres:my@secret@[::1", None)):
        res = cli("init", "--postgres", bad, "--schema", schema, str(tmp_path / "new"))
        assert (res.returncode, res.stdout) == (2, ""), res.stderr
        assert "secret" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
        assert res.stderr.startswith(f"error: cannot create the store's schema '{schema}' in PostgreSQL ("), res.stderr
        if host is not None:
            assert f"failed to resolve host {host}" in res.stderr, res.stderr


def test_a_read_after_the_server_ended_the_idle_connection_is_answered_on_a_new_one(tmp_path, schema):
    # was: the first read of each thread after the server ended its idle connection (a restart, a failover,
    # pg_terminate_backend, idle_session_timeout) failed with "PostgreSQL could not answer a read (terminating
    # connection due to administrator command)", though nothing was under way on it (writes reconnect):
    # Recorder.continue_run()/resume() of a run, `calls`/`runs` listings of a long-lived process, size()
    import psycopg

    from sealbox.errors import RecordingError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)

    def kill() -> None:
        with psycopg.connect(URL, autocommit=True) as conn:  # (with a timeout: returns once the backend is gone)
            assert conn.execute("SELECT pg_terminate_backend(%s, 10000)",
                                (store._pg().info.backend_pid,)).fetchone() == (True,)

    try:
        rec = Recorder(store, policy=ALLOW_ALL)
        with rec.run(agent="bot", run_id="r1") as run:
            run.call_tool("db", "q", {"q": 1}, lambda q: q)
        kinds = ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
        for read, expected in ((lambda: [e.kind for e in store.read_run("r1")], kinds), (store.size, 6),
                               (lambda: [c["call_id"] for c in store.query_calls(agent="bot")],
                                [e.payload["call_id"] for e in store.read_run("r1") if e.kind == "tool.call"]),
                               (lambda: [r["run_id"] for r in store.query_runs()], ["r1", "system"]),
                               (lambda: store.get_run("r1")["run_id"], "r1")):
            kill()
            assert read() == expected
        kill()
        with pytest.raises(RecordingError, match="^run r1 has ended; it cannot be continued$"):
            rec.continue_run("r1")
    finally:
        store.close()


def test_a_live_store_whose_schema_was_dropped_and_given_to_a_new_store_records_nothing_into_it(tmp_path, schema):
    # was: a long-lived recorder (a gateway) kept its connections while the schema was dropped and `sealbox
    # init` made a new store in it: its next run.started was appended to the new store's log (built with the
    # old store's secret and content policy), and the new store's `sealbox verify` said "the log is intact.
    # 2 events in 2 runs": a run of another store in its log, nothing saying so
    import psycopg

    from sealbox.errors import RecordingError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    old = init_store(tmp_path / "old", postgres_url=URL, schema=schema)
    try:
        rec = Recorder(old, policy=ALLOW_ALL)
        with rec.run(agent="bot", run_id="r1") as run:
            run.call_tool("db", "q", {"q": 1}, lambda q: q)
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        new = init_store(tmp_path / "new", postgres_url=URL, schema=schema)
        new_id = new.store_id
        new.close()
        with pytest.raises(RecordingError, match=(
                f"^could not record: {re.escape(str(tmp_path / 'old'))}: schema {schema} now holds another store "
                f"\\(store id {new_id}, not {old.store_id}: the schema was dropped and a store created in it again\\): "
                "refusing to record into it$")):
            with rec.run(agent="bot", run_id="r2"):
                pass
    finally:
        old.close()
    assert [r[0] for r in sql(schema, "SELECT run_id FROM events ORDER BY leaf_index")] == ["system"]
    res = cli("verify", str(tmp_path / "new"))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact. 1 event in 1 run"), res


def test_connections_of_threads_that_ended_are_closed_not_kept_until_the_store_closes(tmp_path, schema):
    # was: each thread's connection stayed open until store.close(), after the thread had ended: a process
    # recording from a thread per request (socketserver's ThreadingMixIn, a thread per task) held one server
    # connection per thread it ever ran (observed: 21 open after 20 one-append threads), until PostgreSQL's
    # max_connections (100 by default) refused every new one, this store's and every other client's
    import threading
    import time

    import psycopg

    from sealbox import EventDraft
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    pids: list[int] = []

    def one_append(i: int) -> None:
        store.append(EventDraft("note", {"text": f"t{i}"}, run_id="system", principal="sealbox"))
        pids.append(store._pg().info.backend_pid)

    def alive() -> list[int]:
        with psycopg.connect(URL, autocommit=True) as conn:
            for _ in range(100):  # a closed connection's server process ends a moment later
                found = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))]
                if len(found) <= 1:
                    return found
                time.sleep(0.05)
            return found

    try:
        for i in range(20):
            worker = threading.Thread(target=one_append, args=(i,))
            worker.start()
            worker.join()
        assert len(set(pids)) == 20
        assert alive() == pids[-1:]  # the last thread's: closed when the next connection is opened
        sizes: list[int] = []
        worker = threading.Thread(target=lambda: sizes.append(store.size()))  # a new thread: a new connection
        worker.start()
        worker.join()
        assert sizes == [21] and alive() == []
        assert [e.payload["text"] for e in store.read_range(1, 21)] == [f"t{i}" for i in range(20)]
    finally:
        store.close()


def test_a_write_whose_commit_the_server_ended_is_made_again_when_it_was_not_committed(tmp_path, schema):
    # was: the server ending the connection during a write's COMMIT (observed killing backends while they ran
    # COMMIT: a tool.result lost) failed the write, though nothing of it was committed: a tool that had run
    # lost its tool.result (RecordingError). A deferred trigger added for the test holds the commit while
    # the connection is ended; the write is then made again on a new connection, once, after checking (under
    # the write lock) that its first event is not in the log
    import threading
    import time

    import psycopg

    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    sql(schema, "CREATE TABLE hold (x int); INSERT INTO hold VALUES (1);"
                "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.kind = 'tool.result' AND EXISTS (SELECT 1 FROM hold) THEN PERFORM pg_sleep(30); END IF;"
                " RETURN NULL; END $$;"
                "CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED"
                " FOR EACH ROW EXECUTE FUNCTION hold_commit()")
    ended: list[int] = []

    def end_the_held_commit() -> None:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            for _ in range(1000):
                pids = [c.info.backend_pid for c in list(store._conns) if not c.closed]
                held = conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event = 'PgSleep'",
                                    (pids,)).fetchall()
                if held:
                    conn.execute("DELETE FROM hold")  # the write made again commits at once
                    conn.execute("SELECT pg_terminate_backend(%s, 10000)", (held[0][0],))
                    ended.append(held[0][0])
                    return
                time.sleep(0.01)

    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot", run_id="r1") as run:
            killer = threading.Thread(target=end_the_held_commit)
            killer.start()
            assert run.call_tool("db", "q", {"q": 21}, lambda q: q * 2) == 42
            killer.join()
        assert len(ended) == 1
        assert [(e.kind, e.payload.get("result")) for e in store.read_run("r1")] == [
            ("run.started", None), ("tool.call", None), ("policy.decision", None), ("tool.result", 42),
            ("run.ended", None)]
    finally:
        store.close()
        sql(schema, "DROP TRIGGER hold_commit ON events; DROP FUNCTION hold_commit(); DROP TABLE hold")
    res = cli("verify", str(tmp_path / "s"))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact. 6 events in 2 runs"), res


def test_a_call_is_made_while_the_folder_cannot_take_the_checkpoint_file(tmp_path, schema, caplog):
    """As tests/store/test_checkpoint_file_unwritable.py on SQLite: a checkpoint signed and stored in the
    database whose ``DIR/checkpoint`` cannot be written (a folder made immutable) never turns the
    committed tool.call into a RecordingError (the tool would never run: "outcome unknown")."""
    import shutil

    from sealbox import CheckpointPolicy
    from sealbox.errors import StoreError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store, open_store

    folder = tmp_path / "s"
    init_store(folder, postgres_url=URL, schema=schema).close()
    if os.geteuid() != 0:
        lock, unlock = (lambda: os.chmod(folder, 0o555)), (lambda: os.chmod(folder, 0o755))
    elif shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)]).returncode == 0:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
        lock = lambda: subprocess.run(["chattr", "+i", str(folder)], check=True)  # noqa: E731
        unlock = lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)  # noqa: E731
    else:
        pytest.skip("running as root without a working chattr: cannot make a folder unwritable")
    store = open_store(folder, checkpoint_policy=CheckpointPolicy(every_events=2, every_seconds=None))
    ran = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        lock()
        try:
            for n in range(3):
                assert run.call_tool("srv", "t", {"n": n}, lambda n: ran.append(n) or n * 10) == n * 10
            with pytest.raises(StoreError, match=r"checkpoint could not be written \("):
                store.issue_checkpoint()
        finally:
            unlock()
    assert ran == [0, 1, 2]
    assert "checkpoint not signed now" in caplog.text
    store.close()
    assert [(c["arguments"], c["outcome"]) for c in open_store(folder).query_calls()] == [
        ({"n": 0}, "ok"), ({"n": 1}, "ok"), ({"n": 2}, "ok")]
    done = cli("verify", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_reader_made_by_a_thread_that_ended_reads_on_the_connection_of_the_thread_using_it(tmp_path, schema):
    # the connection of a thread that ended is closed when another thread opens one: a store.reader() made
    # by that thread (it held the thread's connection) then failed every query with psycopg's
    # OperationalError 'the connection is closed'; its queries now run on the connection of the thread
    # making them
    import threading

    from sealbox import EventDraft
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    readers: list = []
    try:
        store.append(EventDraft("note", {"text": "n1"}, run_id="system", principal="sealbox"))
        for target in (lambda: readers.append(store.reader()), store.size):  # the second closes the first's
            worker = threading.Thread(target=target)
            worker.start()
            worker.join()
        assert len(store._conns) == 2
        assert [(e.leaf_index, e.payload.get("text")) for e in readers[0].events(["note"], run_id="system")] \
            == [(1, "n1")]
    finally:
        store.close()


def test_connections_of_threads_not_started_by_threading_that_ended_are_closed(tmp_path, schema):
    # was (302d17f): a thread was taken as ended when its threading.Thread said so, and a thread not
    # started by the threading module (a C library's worker calling into Python, _thread.start_new_thread)
    # is a _DummyThread, alive for good on Python 3.11/3.12 (3.13 raises RuntimeError from is_alive once
    # it ended): each such thread's connection stayed open until store.close(), as before that commit
    import _thread
    import threading
    import time
    from typing import Any

    import psycopg

    from sealbox import EventDraft
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    pids: list[int] = []

    def one_append(i: int, done: Any) -> None:
        store.append(EventDraft("note", {"text": f"t{i}"}, run_id="system", principal="sealbox"))
        pids.append(store._pg().info.backend_pid)
        done.release()

    def alive() -> list[int]:
        with psycopg.connect(URL, autocommit=True) as conn:
            for _ in range(100):  # a closed connection's server process ends a moment later
                found = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))]
                if not found:
                    return found
                time.sleep(0.05)
            return found

    try:
        for i in range(5):
            done = _thread.allocate_lock()
            done.acquire()
            _thread.start_new_thread(one_append, (i, done))
            done.acquire()
            for _ in range(100):  # the thread's state (and its thread-local data) is gone a moment after
                if _thread._count() == 0:
                    break
                time.sleep(0.01)
            time.sleep(0.05)
        assert len(set(pids)) == 5
        sizes: list[int] = []
        worker = threading.Thread(target=lambda: sizes.append(store.size()))  # a new connection: those of the
        worker.start()  # ended threads are closed
        worker.join()
        assert sizes == [6]
        assert alive() == []
    finally:
        store.close()


def test_a_write_whose_commit_was_lost_on_its_last_attempt_is_an_error_not_a_silent_success(tmp_path, schema,
                                                                                             monkeypatch):
    # was: a write whose COMMIT's answer was lost (the server ended the connection) on its last attempt
    # (attempt WRITE_RETRIES: after serialization failures), and which the check on a new connection found
    # not committed, left the retry loop without making it again and returned None: the append reported
    # success with nothing written (a tool.result, a run.ended lost without a word). It is now a StoreError.
    # WRITE_RETRIES is 0 here, so the one attempt is the last.
    import threading
    import time

    import psycopg

    import sealbox.store.postgres as pg
    from sealbox.errors import StoreError
    from sealbox.store import init_store

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    store.append(started("r0"))
    sql(schema, "CREATE TABLE hold (x int); INSERT INTO hold VALUES (1);"
                "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.run_id = 'r1' AND EXISTS (SELECT 1 FROM hold) THEN PERFORM pg_sleep(30); END IF;"
                " RETURN NULL; END $$;"
                "CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED"
                " FOR EACH ROW EXECUTE FUNCTION hold_commit()")
    ended: list[int] = []

    def end_the_held_commit() -> None:
        with psycopg.connect(URL, autocommit=True) as conn:
            for _ in range(1000):
                pids = [c.info.backend_pid for c in list(store._conns) if not c.closed]
                held = conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event = 'PgSleep'",
                                    (pids,)).fetchall()
                if held:
                    conn.execute(f"DELETE FROM {schema}.hold")
                    conn.execute("SELECT pg_terminate_backend(%s, 10000)", (held[0][0],))
                    ended.append(held[0][0])
                    return
                time.sleep(0.01)

    monkeypatch.setattr(pg, "WRITE_RETRIES", 0)
    try:
        killer = threading.Thread(target=end_the_held_commit)
        killer.start()
        with pytest.raises(StoreError, match=r"the write was not made"):
            store.append(started("r1"))
        killer.join()
        assert len(ended) == 1
        assert store.size() == 2 and store.read_run("r1") == []
        monkeypatch.setattr(pg, "WRITE_RETRIES", 8)
        [event] = store.append(started("r2"))
        assert (event.leaf_index, store.size()) == (2, 3)
    finally:
        store.close()
        sql(schema, "DROP TRIGGER hold_commit ON events; DROP FUNCTION hold_commit(); DROP TABLE hold")
    res = cli("verify", str(tmp_path / "s"))
    assert res.returncode == 0 and res.stdout.startswith("Verified: the log is intact. 3 events in 3 runs"), res


@pytest.fixture
def scratch_db():
    """The URL of a new, empty database (its public schema is this test's alone), dropped after the test."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"sbt_db_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0")
    yield make_conninfo(**{**conninfo_to_dict(URL), "dbname": name}), URL.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _schemas(conninfo: str) -> list[str]:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
                                           "AND nspname <> 'information_schema' ORDER BY nspname")]


def test_an_init_failing_on_its_folder_leaves_no_schema_behind(tmp_path, scratch_db):
    # was: `init --postgres URL afile/sub` (a folder under a file) said "cannot create afile/sub: Not a
    # directory", exit 2, but left the empty schema `sealbox` it had created in the database before trying the folder
    conninfo, url = scratch_db
    (tmp_path / "afile").write_text("")
    res = cli("init", "--postgres", url, str(tmp_path / "afile" / "sub"))
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"error: cannot create {tmp_path / 'afile' / 'sub'}: Not a directory\n")
    assert _schemas(conninfo) == ["public"]
    # a schema that was there before (made empty for the store by its DBA) is kept
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA sealbox")
    res = cli("init", "--postgres", url, str(tmp_path / "afile" / "sub"))
    assert res.returncode == 2 and _schemas(conninfo) == ["public", "sealbox"]
    res = cli("init", "--postgres", url, str(tmp_path / "s"))
    assert res.returncode == 0, res


def test_init_refuses_the_public_schema_unless_asked_to_share_it(tmp_path, scratch_db):
    # was: `init --schema public` (exit 0) put the store's tables (events, runs, blobs, checkpoints,
    # snapshots, store_meta, tree_nodes, schema_migrations) beside the application's in its public
    # schema; their append-only triggers then failed the application's own `TRUNCATE` of its tables
    # ("sealbox: events is append-only (TRUNCATE refused)"), and a `DROP SCHEMA public CASCADE` reset
    # of the application's database dropped the log with it
    import psycopg

    conninfo, url = scratch_db
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.app_users (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO public.app_users VALUES (1, 'ann')")
    res = cli("init", "--postgres", url, "--schema", "public", str(tmp_path / "s"))
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", "error: schema 'public' is the database's default schema, shared with whatever else uses the "
               "database: give the store a schema of its own (--schema NAME; the default is sealbox), or "
               "--allow-public-schema to put its tables there anyway\n")
    assert not (tmp_path / "s").exists()
    from sealbox.store import init_store
    from sealbox.store.base import StoreConfigError

    with pytest.raises(StoreConfigError, match=r"^schema 'public' is the database's default schema.*"
                                               r"allow_public_schema=True"):
        init_store(tmp_path / "api", postgres_url=url, schema="public")
    assert not (tmp_path / "api").exists()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
        assert tables == [("app_users",)]

    res = cli("init", "--postgres", url, "--schema", "public", "--allow-public-schema", str(tmp_path / "s"))
    assert res.returncode == 0, res.stderr
    assert "schema public" in res.stdout
    assert cli("verify", "-s", str(tmp_path / "s")).returncode == 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert conn.execute("SELECT * FROM public.app_users").fetchall() == [(1, "ann")]
        assert conn.execute("SELECT to_regclass('public.events') IS NOT NULL").fetchone() == (True,)
    res = cli("init", "--allow-public-schema", str(tmp_path / "sq"))
    assert (res.returncode, res.stderr) == (2, "error: --allow-public-schema applies to a PostgreSQL store: give "
                                               "--postgres URL too\n")


def test_a_write_whose_connection_the_server_ends_before_its_insert_is_made_again_without_psycopgs_warning(
        tmp_path, schema, caplog, monkeypatch):
    """The server ending a write's connection between two of its statements (here: once it holds the write lock,
    while it builds its events in Python, before their INSERT) made psycopg log "error ignored terminating
    <psycopg.Pipeline [BAD] at 0x...>: the connection is lost" (executemany runs in a pipeline, whose exit
    fails too), printed on stderr by Python's last-resort handler though the write was made again on a new
    connection (seen killing backends under a recording agent; a `sealbox` command or the gateway printed it
    the same way). Sealbox raises and handles that error itself: psycopg's warning about the pipelines of
    Sealbox's own connections is dropped; the write is made once. Another connection's warning is kept."""
    import logging

    import psycopg

    from sealbox import EventDraft
    from sealbox.store import init_store, postgres

    store = init_store(tmp_path / "s", postgres_url=URL, schema=schema)
    flush, ended = postgres._PgTxn.flush, []

    def ended_first(txn) -> None:  # the server ends the connection, for real, once
        if not ended:
            ended.append(txn.conn.pg.info.backend_pid)
            with psycopg.connect(URL, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s, 10000)", (ended[0],))
        flush(txn)

    monkeypatch.setattr(postgres._PgTxn, "flush", ended_first)
    try:
        caplog.set_level(logging.WARNING)
        placed = store.append([EventDraft("note", {"text": f"n{i}"}, run_id="system", principal="investigator")
                               for i in range(2)])
        assert len(ended) == 1
        assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []
        assert [e.payload["text"] for e in store.read_range(placed[0].leaf_index, store.size())] == ["n0", "n1"]
    finally:
        store.close()

    conn = psycopg.connect(URL)  # not Sealbox's: its pipeline's warning is psycopg's as before
    try:
        pid = conn.info.backend_pid
        with psycopg.connect(URL, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            conn.cursor().executemany("SELECT %s", [(1,), (2,)])
    finally:
        conn.close()
    assert [r.getMessage().split(" at 0x")[0] for r in caplog.records if r.name.startswith("psycopg")] == [
        "error ignored terminating <psycopg.Pipeline [BAD]"]


def test_an_open_whose_connection_the_server_ends_is_one_error_line_not_an_internal_error(tmp_path, schema):
    """The server ending the connection of a store being opened (pg_terminate_backend, a restart) while the open
    read store_meta let psycopg's AdminShutdown out of open_store: every command said "error: internal error:
    AdminShutdown: terminating connection due to administrator command" and exited 70 (seen killing backends
    under `sealbox runs list`, `report`, `export`, `approvals list`). It is a StoreError now ("PostgreSQL could
    not open the store (...)"): one error line, exit 2. The open is held (store_meta locked by another session) and its connection ended, for real."""
    import threading
    import time

    import psycopg

    folder = tmp_path / "s"
    assert cli("init", "--postgres", URL, "--schema", schema, str(folder)).returncode == 0
    with psycopg.connect(URL) as holder, psycopg.connect(URL, autocommit=True) as killer:
        holder.execute(f"LOCK TABLE {schema}.store_meta IN ACCESS EXCLUSIVE MODE")
        holder_pid = holder.info.backend_pid
        ended: list[int] = []

        def end_the_waiting_open() -> None:
            for _ in range(3000):
                waiting = killer.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                         (holder_pid,)).fetchall()
                if waiting:
                    killer.execute("SELECT pg_terminate_backend(%s, 10000)", (waiting[0][0],))
                    ended.append(waiting[0][0])
                    return
                time.sleep(0.01)

        thread = threading.Thread(target=end_the_waiting_open)
        thread.start()
        res = cli("runs", "list", "-s", str(folder))
        thread.join()
        holder.rollback()
    assert len(ended) == 1
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (f"error: {folder}: PostgreSQL could not open the store (terminating connection due to "
                          "administrator command. LINE 1: SELECT key, value FROM store_meta ^)\n")
    assert cli("runs", "list", "-s", str(folder)).returncode == 0
