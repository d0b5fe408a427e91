"""The ``runs`` table's columns (agent, principal, started_at, snapshot, replay_of, parent_run_id, run_id) are
not hashed: they are derived from the run's ``run.started`` event when it is written. ``UPDATE runs SET
agent = 'x'`` below Sealbox made `sealbox runs list` show agent x with ``altered: false``; a ``run.started``
whose ``kind`` or ``run_seq`` column was rewritten was not marked either. The listing now compares each run's
row (and its run.started's kind, run_id and run_seq columns) with the run.started's hashed bytes and marks a
run that disagrees ``altered``, with the warning line. SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json

import pytest
from test_calls_altered_events import _set_column_below_sealbox
from test_runs_altered_status import _run, store  # noqa: F401  (the fixture)

import sealbox
from sealbox.policies import ALLOW_ALL

WARNING = ("warning: {n} run(s) shown hold values changed below Sealbox after they were written (an event their "
           "status is read from no longer hashes to its recorded leaf hash or its kind column is not the kind its "
           "bytes say, or their runs-table row disagrees with their run.started event; marked altered): what is "
           "shown is what the database holds now, not what was recorded; `sealbox verify` names the events and rows\n")


def _set_run_column_below_sealbox(store, run_id: str, column: str, value) -> None:
    """The ``runs`` table's ``column`` of run ``run_id`` set to ``value`` in the database itself."""
    if store.backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(store.db_path, isolation_level=None)
        try:
            saved = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
            conn.execute("BEGIN IMMEDIATE")
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                conn.execute(f'DROP TRIGGER "{name}"')
            conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, run_id))
            for sql in saved:
                conn.execute(sql)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {store.schema}")
        conn.execute("SET session_replication_role = replica")
        conn.execute(f"UPDATE runs SET {column} = %s WHERE run_id = %s", (value, run_id))


def _two_runs(store):
    rec = sealbox.Recorder(store, policy=ALLOW_ALL)
    ids = []
    for name in ("kept", "edited"):
        with rec.run(agent=name, principal="alice") as run:
            run.call_tool("db", "read_query", {"sql": "SELECT 1"}, lambda sql: "row-1")
            ids.append(run.run_id)
    return ids


@pytest.mark.parametrize("column, value", [
    ("agent", "mallory-bot"), ("principal", "mallory"), ("started_at", "2020-01-01T00:00:00.000000Z"),
    ("snapshot", "sha256:" + "ab" * 32), ("replay_of", "some-other-run"), ("parent_run_id", "some-other-run")])
def test_a_run_whose_runs_row_column_was_changed_is_marked_altered(store, column, value):
    kept, edited = _two_runs(store)
    _set_run_column_below_sealbox(store, edited, column, value)
    path = store.path
    store.close()

    res = _run("runs", "list", "-s", path, "--json")
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
    rows = {r["run_id"]: (r[column], r["status"], r["ending"], r["altered"]) for r in json.loads(res.stdout)}
    assert rows[edited] == (value, "ended", "ok", True)  # shown as the database holds it, marked
    assert rows[kept][1:] == ("ended", "ok", False)
    res = _run("runs", "show", "-s", path, edited)
    assert res.returncode == 0 and res.stderr == WARNING.format(n=1)


@pytest.mark.parametrize("column, value", [("kind", "note"), ("run_seq", 99)])
def test_a_run_whose_run_started_kind_or_run_seq_column_was_changed_is_marked_altered(store, column, value):
    kept, edited = _two_runs(store)
    started = next(e.leaf_index for e in store.read_run(edited) if e.kind == "run.started")
    _set_column_below_sealbox(store, started, column, value)
    path = store.path
    store.close()

    res = _run("runs", "list", "-s", path, "--json")
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
    rows = {r["run_id"]: r["altered"] for r in json.loads(res.stdout)}
    assert (rows[edited], rows[kept]) == (True, False)


def test_a_run_whose_runs_row_run_id_was_changed_is_still_listed_marked_altered(store):
    """``UPDATE runs SET run_id = 'zz'`` hid the run from every listing (its events no longer joined its row)
    and ``get_run`` of its id returned None: it is now listed under the id the row holds, marked, and
    ``get_run`` of its recorded id finds it through its run.started event."""
    kept, edited = _two_runs(store)
    _set_run_column_below_sealbox(store, edited, "run_id", "zz")
    got = store.get_run(edited)
    assert (got["run_id"], got["agent"], got["status"], got["altered"]) == ("zz", "edited", "ended", True)
    path = store.path
    store.close()

    res = _run("runs", "list", "-s", path, "--json")
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
    rows = {r["run_id"]: (r["agent"], r["status"], r["ending"], r["events"], r["altered"]) for r in json.loads(res.stdout)}
    assert rows["zz"] == ("edited", "ended", "ok", 5, True)
    assert rows[kept] == ("kept", "ended", "ok", 5, False)
    res = _run("runs", "show", "-s", path, edited, "--json")
    assert (res.returncode, res.stderr) == (0, WARNING.format(n=1))
    shown = json.loads(res.stdout)
    assert (shown["run"]["run_id"], shown["run"]["altered"], len(shown["events"])) == ("zz", True, 5)
