"""Rows changed below Sealbox into something that is not a Sealbox event, and schema_migrations
rows removed below it: ``verify`` names them, and the read commands stop with one error line
saying what is damaged (a StoreError: exit 2), never a traceback or an internal error (exit 70).

The sample log (see test_tamper.py): leaf 0 the system run's run.started; run A is leaves
1..6 (run.started, tool.call, policy.decision, tool.result, note, run.ended); runs B and C follow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from store_testkit import Sample, build_sample, closing_db, note, snapshot_dir, tamper
from sealbox import SYSTEM_RUN_ID, SchemaVersionError, StoreError, StoreUpgradeNeededError, open_store, verify_store
from sealbox.store import migrate
from sealbox.store.base import DamagedEventError

VERIFY_HINT = "the store was changed below Sealbox; run `sealbox verify`"
MIGRATION_HINT = "it was changed below Sealbox; run `sealbox verify`"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    return build_sample(tmp_path_factory.mktemp("template") / "s")


@pytest.fixture
def s(template: Sample, tmp_path: Path) -> Sample:
    dst = tmp_path / "s"
    shutil.copytree(template.path, dst)
    return Sample(dst, template.runs, template.vkey, template.origin, template.size, template.rows)


def verify(path: Path):
    store = open_store(path, readonly=True)
    try:
        return verify_store(store)
    finally:
        store.close()


def where(p) -> tuple:
    return (p.code, p.run_id, p.run_seq, p.kind, p.leaf_index)


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if cwd is not None:  # the replay agent's module lives there
        env = dict(os.environ, PYTHONPATH=str(cwd) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, env=env)


def assert_one_error_line(res: subprocess.CompletedProcess, message: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert res.stderr.splitlines() == [f"error: {message}"], res.stderr


# --------------------------------------------------------------------------- bug 1: a TEXT where a BLOB belongs


def test_hashed_bytes_stored_as_text_are_reported_and_still_read(s: Sample) -> None:
    """Same bytes, TEXT storage class: nothing Sealbox writes stores TEXT there, so verify reports
    it (column_type); the readers read its bytes as they are (they used to stop with a TypeError)."""
    run_a = s.runs[0]
    store = open_store(s.path, readonly=True)
    before = store.read_run(run_a)
    store.close()
    tamper(s.path, "UPDATE events SET raw = CAST(raw AS TEXT) WHERE leaf_index = 5")
    with closing_db(s.path) as db:
        assert db.execute("SELECT typeof(raw) FROM events WHERE leaf_index = 5").fetchone() == ("text",)
    report = verify(s.path)
    assert [where(p) for p in report.problems] == [("column_type", run_a, 5, "note", 5)]
    p = report.problems[0]
    assert p.message == ("the events table's raw column holds a TEXT value where Sealbox writes a BLOB "
                         "(the row was changed below Sealbox)")
    assert (p.expected, p.found) == ("BLOB", "TEXT")
    store = open_store(s.path, readonly=True)
    try:
        assert store.read_run(run_a) == before
        assert store.get_event(5).raw == before[4].raw
    finally:
        store.close()
    res = cli("runs", "show", "-s", str(s.path), run_a)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == f"column_type [run {run_a}, run_seq 5, note, leaf 5]: {p.message} (expected BLOB, found TEXT)"


def test_a_leaf_hash_stored_as_text_is_reported_even_when_not_utf8(s: Sample) -> None:
    """A hash's bytes are almost never UTF-8: read as TEXT they used to stop verify with
    sqlite3's 'Could not decode to UTF-8'; their bytes are kept exactly, so only the type is wrong."""
    tamper(s.path, "UPDATE events SET leaf_hash = CAST(leaf_hash AS TEXT) WHERE leaf_index = 9")
    report = verify(s.path)
    assert [where(p) for p in report.problems] == [("column_type", s.runs[1], 3, "policy.decision", 9)]
    assert "leaf_hash column holds a TEXT value" in report.problems[0].message


def test_text_that_is_not_utf8_is_reported_not_raised(s: Sample) -> None:
    tamper(s.path, "UPDATE events SET raw = CAST(x'7b22ff' AS TEXT) WHERE leaf_index = 5")
    report = verify(s.path)
    assert [p.code for p in report.problems][:3] == ["column_type", "event_malformed", "leaf_hash_mismatch"]
    res = cli("runs", "show", "-s", str(s.path), s.runs[0])
    assert_one_error_line(res, "the event at leaf 5 is damaged (its bytes are not a Sealbox event: they are not "
                               "JSON ('utf-8' codec can't decode byte 0xff in position 2: invalid start byte)): "
                               + VERIFY_HINT)


def test_an_integer_where_the_bytes_belong_is_a_column_type_problem(s: Sample) -> None:
    tamper(s.path, "UPDATE events SET raw = 12 WHERE leaf_index = 5")
    report = verify(s.path)
    assert report.problems[0].message.startswith("the events table's raw column holds an INTEGER where")
    assert (report.problems[0].code, report.problems[0].found) == ("column_type", "INTEGER")


@pytest.mark.parametrize("column", ["run_id", "kind", "ts", "principal", "step", "tool"])
def test_a_derived_column_that_is_not_utf8_is_reported_not_raised(s: Sample, column: str) -> None:
    """A TEXT that is not UTF-8 in any column of an event row (not only raw and leaf_hash) used to
    stop verify with sqlite3's 'Could not decode to UTF-8 column' (an internal error, exit 70)."""
    tamper(s.path, f"UPDATE events SET {column} = CAST(x'ff41' AS TEXT) WHERE leaf_index = 2")
    report = verify(s.path)
    assert report.problems and report.problems[0].code == "index_mismatch", report.problems
    assert f"(column {column})" in report.problems[0].message
    assert report.problems[0].leaf_index == 2 and "'\\udcffA'" in report.problems[0].found
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1 and "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert res.stdout.startswith("index_mismatch [run "), res.stdout
    res = cli("verify", "-s", str(s.path), "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["problems"][0]["code"] == "index_mismatch"


STORAGE_CLASS = {
    "tree-node-hash": ("UPDATE tree_nodes SET hash = CAST(hash AS TEXT) WHERE level = 4 AND idx = 0",
                       "tree_nodes", "hash", "the row (level, idx) = (4, 0)", "BLOB", "TEXT"),
    "checkpoint-root": ("UPDATE checkpoints SET root_hash = CAST(root_hash AS TEXT) WHERE id = 1",
                        "checkpoints", "root_hash", "the row id = 1", "BLOB", "TEXT"),
    "checkpoint-size": ("UPDATE checkpoints SET tree_size = tree_size || 'x' WHERE id = 1",
                        "checkpoints", "tree_size", "the row id = 1", "INTEGER", "TEXT"),
    "blob-content": ("UPDATE blobs SET content = CAST(content AS TEXT) WHERE ref = (SELECT min(ref) FROM blobs)",
                     "blobs", "content", "the row ref '{ref}'", "BLOB or NULL", "TEXT"),
    "blob-salt": ("UPDATE blobs SET salt = CAST(salt AS TEXT) WHERE ref = (SELECT min(ref) FROM blobs)",
                  "blobs", "salt", "the row ref '{ref}'", "BLOB or NULL", "TEXT"),
    "snapshot-content": ("UPDATE snapshots SET content = CAST(content AS TEXT)",
                         "snapshots", "content", "the row fingerprint '{fp}'", "BLOB", "TEXT"),
    "run-agent": ("UPDATE runs SET agent = CAST(agent AS BLOB) WHERE leaf_index = 0", "runs", "agent",
                  "the row run_id 'system'", "TEXT", "BLOB"),
}


@pytest.mark.parametrize("case", sorted(STORAGE_CLASS))
def test_a_value_of_another_storage_class_outside_the_events_table_is_reported(s: Sample, case: str) -> None:
    """A TEXT holding the very bytes of a hash, a blob or a snapshot changes nothing a check
    recomputes, so it used to pass as "Verified" (or stop verify when the bytes were not UTF-8).
    Nothing Sealbox writes stores another class there: it is reported (column_type), as in events."""
    store = open_store(s.path)
    fp = store.put_snapshot({"model": {"name": "m"}})
    store.close()
    with closing_db(s.path) as db:
        ref = db.execute("SELECT min(ref) FROM blobs").fetchone()[0]
    sql, table, column, row, expected, found = STORAGE_CLASS[case]
    tamper(s.path, sql)
    report = verify(s.path)
    typed = [p for p in report.problems if p.code == "column_type"]
    article = {"TEXT": "a TEXT value", "BLOB": "a BLOB"}[found]
    assert [(p.message, p.expected, p.found) for p in typed] == [(
        f"the {table} table's {column} column holds {article} in {row.format(ref=ref, fp=fp)}, where Sealbox writes "
        f"{expected} (the row was changed below Sealbox)", expected, found)]
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1 and "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


@pytest.mark.parametrize("sql", [
    "UPDATE checkpoints SET note = CAST(x'ff' AS TEXT) WHERE id = 1",
    "UPDATE checkpoints SET root_hash = CAST(x'ff' AS TEXT) WHERE id = 1",
    "UPDATE tree_nodes SET hash = CAST(x'ffff' AS TEXT) WHERE level = 4 AND idx = 0",
    "UPDATE blobs SET salt = CAST(x'ff' AS TEXT) WHERE ref = (SELECT min(ref) FROM blobs)",
    "UPDATE blobs SET ref = CAST(x'ff' AS TEXT) WHERE ref = (SELECT min(ref) FROM blobs)",
    "UPDATE runs SET agent = CAST(x'ff' AS TEXT)",
    "UPDATE runs SET run_id = CAST(x'ff' AS TEXT) WHERE leaf_index = 1",
])
def test_text_that_is_not_utf8_in_the_other_tables_is_reported_not_raised(s: Sample, sql: str) -> None:
    tamper(s.path, sql)
    report = verify(s.path)
    assert not report.ok and report.problems
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert res.stdout.splitlines()[-1].startswith("NOT VERIFIED: ")


@pytest.mark.parametrize("kind", ["[1]", '{"a":1}', "7"])
def test_an_event_kind_that_is_not_a_string_is_reported_not_raised(s: Sample, kind: str) -> None:
    """verify's fast path tested `kind in KINDS` before the type: a list or object kind (hashed
    bytes rewritten below Sealbox) stopped it with TypeError: unhashable type (break test)."""
    tamper(s.path, f"UPDATE events SET raw = CAST(replace(CAST(raw AS TEXT), '\"kind\":\"note\"', '\"kind\":{kind}')"
                   " AS BLOB) WHERE leaf_index = 5")
    with closing_db(s.path) as db:
        assert f'"kind":{kind}'.encode() in db.execute("SELECT raw FROM events WHERE leaf_index = 5").fetchone()[0]
    report = verify(s.path)
    assert [p.code for p in report.problems][:2] == ["event_malformed", "leaf_hash_mismatch"]
    assert report.problems[0].message.startswith("the event's bytes are not a valid event: envelope: data.kind must be")
    res = cli("runs", "show", "-s", str(s.path), s.runs[0])
    assert_one_error_line(res, f"the event at leaf 5 is damaged (its bytes are not a Sealbox event: the kind "
                               f"{json.loads(kind)!r} is not an event kind): " + VERIFY_HINT)


def test_the_checkpoint_file_is_never_written_through_a_planted_link(s: Sample, tmp_path: Path) -> None:
    """DIR/checkpoint was rewritten through PATH.tmp.<pid>.<thread>, opened with O_TRUNC: a
    symbolic link planted at that name made the store overwrite the file it points to."""
    import threading

    from sealbox.store.base import fsync_write

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    old_name = f"checkpoint.tmp.{os.getpid()}.{threading.get_ident()}"  # the name the store used to write
    for folder in (s.path, tmp_path):
        for name in (old_name, "checkpoint.tmp"):
            (folder / name).symlink_to(victim)
    fsync_write(tmp_path / "checkpoint", b"a note\n")
    assert (tmp_path / "checkpoint").read_bytes() == b"a note\n" and not (tmp_path / "checkpoint").is_symlink()
    store = open_store(s.path)
    before = (s.path / "checkpoint").read_bytes()
    store.append(note(SYSTEM_RUN_ID, "after the plant"))
    store.close()  # signs a checkpoint: DIR/checkpoint rewritten
    assert (s.path / "checkpoint").read_bytes() != before and not (s.path / "checkpoint").is_symlink()
    assert victim.read_bytes() == b"precious"
    assert sorted(p.name for p in s.path.iterdir() if ".tmp" in p.name) == sorted([old_name, "checkpoint.tmp"])
    assert verify(s.path).ok


# --------------------------------------------------------------------------- bug 2: bytes that are no event


DAMAGE = {
    "not-json": ("UPDATE events SET raw = x'00ff' WHERE leaf_index = 5",
                 "the event at leaf 5 is damaged (its bytes are not a Sealbox event: they are not JSON "
                 "(Expecting value: line 1 column 1 (char 0))): " + VERIFY_HINT),
    "empty-object": ("UPDATE events SET raw = '{}' WHERE leaf_index = 5",
                     "the event at leaf 5 is damaged (its bytes are not a Sealbox event: they lack the fields 'v', "
                     "'run_id', 'run_seq', 'step', 'kind', 'ts', 'principal', 'payload', 'prev'): " + VERIFY_HINT),
    "array": ("UPDATE events SET raw = '[1]' WHERE leaf_index = 5",
              "the event at leaf 5 is damaged (its bytes are not a Sealbox event: they are a JSON array, not an "
              "object): " + VERIFY_HINT),
    "short-hash": ("UPDATE events SET leaf_hash = 'abc' WHERE leaf_index = 5",
                   "the event at leaf 5 is damaged (its stored leaf hash is not a 32-byte hash (3 bytes)): "
                   + VERIFY_HINT),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_runs_show_names_the_damaged_event(s: Sample, case: str) -> None:
    sql, message = DAMAGE[case]
    tamper(s.path, sql)
    assert not verify(s.path).ok
    assert_one_error_line(cli("runs", "show", "-s", str(s.path), s.runs[0]), message)
    store = open_store(s.path, readonly=True)
    try:
        with pytest.raises(DamagedEventError) as info:
            store.read_run(s.runs[0])
        assert str(info.value) == message and info.value.leaf_index == 5 and isinstance(info.value, StoreError)
        assert len(store.read_run(s.runs[1])) == 6  # the other runs read as ever
    finally:
        store.close()


def test_every_read_command_gives_one_line(s: Sample, tmp_path: Path) -> None:
    sql, message = DAMAGE["not-json"]
    tamper(s.path, sql)
    run_a = s.runs[0]
    (tmp_path / "damaged_agent.py").write_text("def agent(run):\n    return 'done'\n")
    (tmp_path / "policy.yaml").write_text("version: 1\nrules: []\n")
    store = str(s.path)
    for args in (("runs", "show", "-s", store, run_a), ("report", "-s", store, run_a, "-o", str(tmp_path / "r.md")),
                 ("export", "-s", store, run_a, "-o", str(tmp_path / "x.sbx")),
                 ("replay", "-s", store, "--agent", "damaged_agent:agent", run_a),
                 ("whatif", "-s", store, "--policy", str(tmp_path / "policy.yaml"), run_a)):
        assert_one_error_line(cli(*args, cwd=tmp_path), message)


@pytest.mark.parametrize("sql, args, message", [
    ("UPDATE events SET raw = x'00ff' WHERE leaf_index = 2", (),
     "the event at leaf 2 is damaged (its bytes are not a Sealbox event: they are not JSON "
     "(Expecting value: line 1 column 1 (char 0))): " + VERIFY_HINT),
    ("UPDATE events SET raw = x'00ff' WHERE leaf_index = 10", ("--match", "result.tag~result"),  # run B's result
     "the event at leaf 10 is damaged (its bytes are not a Sealbox event: they are not JSON "
     "(Expecting value: line 1 column 1 (char 0))): " + VERIFY_HINT),
    ("UPDATE events SET raw = CAST(x'7b22ff' AS TEXT) WHERE leaf_index = 2", (),
     "the event at leaf 2 is damaged (its bytes are not a Sealbox event: they are not JSON ('utf-8' codec can't "
     "decode byte 0xff in position 2: invalid start byte)): " + VERIFY_HINT),
])
def test_the_call_listing_names_the_damaged_event(s: Sample, sql: str, args: tuple, message: str) -> None:
    """`sealbox calls` reads payload fields with SQLite's JSON functions, which stop the whole
    query on one malformed row ('malformed JSON'): the row is found and named."""
    tamper(s.path, sql)
    assert_one_error_line(cli("calls", "-s", str(s.path), *args), message)
    store = open_store(s.path, readonly=True)
    try:
        with pytest.raises(DamagedEventError, match="run `sealbox verify`"):
            store.query_calls(match=list(args[1:]))
        assert len(store.query_calls(run_id=s.runs[2])) == 1  # a listing that does not meet it
    finally:
        store.close()


def test_a_busy_error_is_not_taken_for_damage(s: Sample) -> None:
    from sealbox.store.sqlite_queries import _json_guarded

    class Fake:
        conn = None

        @_json_guarded
        def query(self) -> None:
            raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        Fake().query()


# --------------------------------------------------------------------------- bug 3: schema_migrations rows removed


NEWEST = len(migrate.load_migrations("sqlite"))


def test_a_removed_migration_row_is_named_not_a_duplicate_column_error(s: Sample) -> None:
    tamper(s.path, "DELETE FROM schema_migrations WHERE version >= 6")
    message = (f"{s.path}: the store's schema_migrations table lacks migration 6 (0006_call_columns) but the store "
               "already has its changes (column events.rule): " + MIGRATION_HINT)
    with pytest.raises(StoreUpgradeNeededError) as info:  # so that `sealbox verify` checks it through a copy
        open_store(s.path, readonly=True)
    assert str(info.value) == message and info.value.pending == list(range(6, NEWEST + 1))
    with pytest.raises(SchemaVersionError) as info:  # a writer refuses it too (it used to fail on ALTER TABLE)
        open_store(s.path)
    assert str(info.value) == message and not isinstance(info.value, StoreUpgradeNeededError)
    with closing_db(s.path) as db:
        assert db.execute("SELECT max(version) FROM schema_migrations").fetchone() == (5,)  # nothing written
    assert_one_error_line(cli("runs", "show", "-s", str(s.path), s.runs[0]), message)
    assert_one_error_line(cli("log", "checkpoint", "-s", str(s.path)), message)


def test_verify_reports_the_removed_row_without_writing_the_store(s: Sample) -> None:
    tamper(s.path, "DELETE FROM schema_migrations WHERE version = 6")
    before = snapshot_dir(s.path)
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == ("schema_migration_missing: the store's schema_migrations table lacks migration 6 "
                        "(0006_call_columns) but the store already has its changes (column events.rule): its row was "
                        "removed below Sealbox")
    assert lines[1] == (f"note: {s.path} lacks schema_migrations rows for changes it already has "
                        "(schema_migration_missing above), so it was verified through an upgraded private copy, "
                        "removed afterwards; the store itself was not changed")
    assert lines[2].startswith("NOT VERIFIED: 1 problem(s) found. 19 events in 4 runs")
    assert snapshot_dir(s.path) == before


def test_a_removed_row_of_a_migration_that_only_drops_is_found_by_applying_it(s: Sample) -> None:
    """Migration 3 only drops triggers, so nothing it creates shows it applied (and a row missing
    below recorded ones alone proves nothing: tests/access brings a store back to schema 1 by
    hand). Applying it fails on the schema: a writer refuses the store with one clear line, and
    verify (which applies it to its copy) reports the row missing."""
    tamper(s.path, "DELETE FROM schema_migrations WHERE version = 3")
    with pytest.raises(StoreUpgradeNeededError, match=re.escape("pending migrations [3]")):
        open_store(s.path, readonly=True)
    message = (f"{s.path}: migration 3 (0003_insert_guards) cannot be applied (no such trigger: events_no_replace): "
               "the store's schema is not the one its schema_migrations table records; " + MIGRATION_HINT)
    with pytest.raises(SchemaVersionError, match="^" + re.escape(message) + "$"):
        open_store(s.path)
    with closing_db(s.path) as db:  # rolled back
        assert db.execute("SELECT count(*) FROM schema_migrations").fetchone() == (NEWEST - 1,)
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines()[0] == (
        "schema_migration_missing: the store's schema_migrations table lacks migration 3 (0003_insert_guards) but its "
        "SQL fails on the store's schema (no such trigger: events_no_replace), which already has its changes: its row "
        "was removed below Sealbox")


@pytest.mark.parametrize("version, evidence", [
    (4, "the new definition of events_tool"),  # drops indexes and creates them again, differently
    (5, "store_meta key tree_stored_node_level"),  # only writes a store_meta key
])
def test_a_removed_row_is_found_by_what_its_migration_left(s: Sample, version: int, evidence: str) -> None:
    """Rows 4 and 5 removed alone used to pass: verify took the store for one an older Sealbox
    wrote (a note, then "Verified") and a writer applied the migration again, hiding the change."""
    tamper(s.path, f"DELETE FROM schema_migrations WHERE version = {version}")
    name = {m.version: m.name for m in migrate.load_migrations("sqlite")}[version]
    message = (f"{s.path}: the store's schema_migrations table lacks migration {version} ({version:04d}_{name}) but the "
               f"store already has its changes ({evidence}): " + MIGRATION_HINT)
    with pytest.raises(SchemaVersionError) as info:
        open_store(s.path)
    assert str(info.value) == message
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines()[0] == (
        f"schema_migration_missing: the store's schema_migrations table lacks migration {version} ({version:04d}_{name}) "
        f"but the store already has its changes ({evidence}): its row was removed below Sealbox")


def test_every_migration_row_removed(s: Sample) -> None:
    tamper(s.path, "DELETE FROM schema_migrations")
    with pytest.raises(StoreUpgradeNeededError, match=r"lacks migration 1 \(0001_ledger\) but the store already has "
                                                      r"its changes \(table store_meta\)"):
        open_store(s.path, readonly=True)
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert [line.split(":", 1)[0] for line in lines[:6]] == ["schema_migration_missing"] * 6
    assert lines[2].endswith("lacks migration 3 (0003_insert_guards) but the store already has those of migration 4 "
                             "(the new definition of events_tool): its row was removed below Sealbox")


def test_an_altered_migration_row_is_reported(s: Sample) -> None:
    tamper(s.path, "UPDATE schema_migrations SET name = 'renamed' WHERE version = 2")
    report = verify(s.path)
    assert [(p.code, p.message) for p in report.problems] == [(
        "schema_migration_altered", "the store's schema_migrations row of migration 2 names 'renamed', not "
        "'credentials': it was changed below Sealbox")]


def test_a_migration_another_writer_applied_meanwhile_is_not_applied_again(tmp_path: Path) -> None:
    """Two writers opening a store an older Sealbox wrote: the second finds the migration recorded
    inside its transaction and skips it (it used to fail with 'duplicate column name')."""
    from sealbox.store.sqlite import _apply_migration

    path = tmp_path / "s"
    build_sample(path, nruns=1)
    with closing_db(path) as db:  # back to schema 5, as a store written before migration 6
        db.execute("DELETE FROM schema_migrations WHERE version = 6")
        for column in ("rule", "reason_code", "duration_us"):
            db.execute(f"ALTER TABLE events DROP COLUMN {column}")
    mig6 = migrate.load_migrations("sqlite")[5]
    with closing_db(path) as first, closing_db(path) as second:
        assert _apply_migration(first, mig6, str(path)) is None
        assert _apply_migration(second, mig6, str(path)) is None  # read before the first committed: skipped
    assert verify(path).ok


@pytest.mark.parametrize("sql, damage", [
    ("DELETE FROM store_secret",
     "the store secret (store_secret, the HMAC key of redaction markers) is missing"),
    ("UPDATE store_secret SET secret = x'00'",
     "the store secret (store_secret, the HMAC key of redaction markers) is not 32 bytes (bytes)"),
    ("UPDATE store_meta SET value = CAST(x'ff' AS TEXT) WHERE key = 'origin'",
     "the log's origin in store_meta is not printable UTF-8 text ('\\udcff')"),
    # verify said "Verified" and a writer recorded, then failed to sign at close (NoteError: invalid
    # checkpoint origin ''), leaving its events unsigned
    ("DELETE FROM store_meta WHERE key = 'origin'", "the log's origin in store_meta is missing"),
    ("DELETE FROM store_meta", "the log's origin in store_meta is missing"),
    ("UPDATE store_meta SET value = '' WHERE key = 'origin'", "the log's origin in store_meta is missing"),
])
def test_damaged_store_settings_are_reported_and_refuse_writers(s: Sample, sql: str, damage: str) -> None:
    """Every command, verify included, used to stop at open with an internal error (TypeError:
    'NoneType' object is not subscriptable; sqlite3's Could not decode to UTF-8) (fresh-clone break test)."""
    tamper(s.path, sql)
    report = verify(s.path)
    assert ("store_settings_damaged", f"{damage}: the store was changed below Sealbox") in [
        (p.code, p.message) for p in report.problems]
    res = cli("verify", "-s", str(s.path))
    assert res.returncode == 1 and "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    with pytest.raises(StoreError) as info:
        open_store(s.path)
    assert str(info.value) == (f"{s.path}: {damage}: the store was changed below Sealbox; refusing to record into it "
                               "(run `sealbox verify`)")
    assert cli("runs", "list", "-s", str(s.path)).returncode == 0  # reading still works
    from sealbox.identities import add_identity
    from sealbox.store import init_store

    key = s.path.parent / "other-alice.key"  # a readable key: the key file is read before the store is opened
    with init_store(s.path.parent / "other") as other:
        add_identity(other, "alice", "admin", [], False, str(key))
    assert_one_error_line(cli("approvals", "approve", "apr_" + "0" * 32, "--reason", "x", "--key-file",
                              str(key), "-s", str(s.path)), str(info.value))  # a writer


@pytest.mark.parametrize("sql", [
    "UPDATE checkpoints SET note = CAST(note AS BLOB) WHERE id = (SELECT max(id) FROM checkpoints)",
    "UPDATE checkpoints SET tree_size = 'abc' WHERE id = (SELECT max(id) FROM checkpoints)",
])
def test_a_newest_checkpoint_row_of_another_type_is_reported_not_crashed_on(s: Sample, sql: str) -> None:
    """A note held as a BLOB stopped every command (AttributeError: 'bytes' object has no
    attribute 'encode'); a TEXT size sorted above every number and was taken for the newest."""
    tamper(s.path, sql)
    report = verify(s.path)
    assert "column_type" in [p.code for p in report.problems]
    store = open_store(s.path, readonly=True)
    try:
        assert isinstance(store.latest_checkpoint().tree_size, int)
        assert all(isinstance(c.note, str) for c in store.checkpoints())
    finally:
        store.close()
    for args in (("verify", "-s", str(s.path)), ("runs", "show", "-s", str(s.path), s.runs[0]),
                 ("log", "checkpoint", "-s", str(s.path))):
        res = cli(*args)
        assert "Traceback" not in res.stderr and "internal error" not in res.stderr, (args, res.stderr)


def test_a_dead_writers_temp_checkpoint_file_is_removed_at_open_a_live_ones_kept(s: Sample, tmp_path: Path) -> None:
    """fsync_write names its temp file PATH.tmp.<pid>.<random>: an opener removes one whose
    process is gone (a writer killed mid-write) and keeps a live process's (it may be renaming it)."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = s.path / f"checkpoint.tmp.{dead_pid}.{'ab' * 8}"
    live = s.path / f"checkpoint.tmp.{os.getpid()}.{'cd' * 8}"
    odd = s.path / "checkpoint.tmp.123456789012345678901234567890.x"  # not a pid: not ours to judge
    for f in (stale, live, odd):
        f.write_bytes(b"half a note")
    open_store(s.path).close()
    assert (stale.exists(), live.exists(), odd.exists()) == (False, True, True)
