"""PostgreSQL: an append-only trigger that keeps its name but no longer guards (a WHEN clause that is
never true, one operation left out, statement level instead of row level), and a database set to skip
its triggers (session_replication_role = replica), are reported by verify, not passed as intact."""

from __future__ import annotations

import pytest
from test_postgres import URL, schema, sql  # noqa: F401  (schema is a fixture)

pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: these tests need PostgreSQL")


def _trigger_problems(tmp_path, schema):  # noqa: F811
    from sealbox import verify_store
    from sealbox.store import open_store

    store = open_store(tmp_path / "s", readonly=True)
    try:
        report = verify_store(store)
    finally:
        store.close()
    return [(p.code, p.message) for p in report.problems]


@pytest.mark.parametrize("redefined", [
    "BEFORE UPDATE OR DELETE ON events FOR EACH ROW WHEN (false)",
    "BEFORE DELETE ON events FOR EACH ROW",
    "BEFORE UPDATE OF kind OR DELETE ON events FOR EACH ROW",
    "BEFORE UPDATE OR DELETE ON events FOR EACH STATEMENT",
    "AFTER INSERT ON events FOR EACH ROW",
])
def test_a_sealbox_trigger_recreated_under_its_name_but_not_guarding_is_reported(tmp_path, schema, redefined):  # noqa: F811
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, "DROP TRIGGER events_append_only ON events")
    sql(schema, f"CREATE TRIGGER events_append_only {redefined} EXECUTE FUNCTION sealbox_append_only()")
    assert _trigger_problems(tmp_path, schema) == [
        ("trigger_foreign", "the trigger events_append_only (redefined: not BEFORE UPDATE OR DELETE ON events FOR "
                            "EACH ROW as Sealbox creates it) is not Sealbox's: it can silently change or drop what "
                            "Sealbox writes (someone changed the store below Sealbox)")]


def test_a_sealbox_trigger_moved_to_another_table_is_reported(tmp_path, schema):  # noqa: F811
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, "DROP TRIGGER blobs_no_delete ON blobs")
    sql(schema, "CREATE TRIGGER blobs_no_delete BEFORE DELETE ON snapshots FOR EACH ROW "
                "EXECUTE FUNCTION sealbox_append_only()")
    assert _trigger_problems(tmp_path, schema) == [
        ("trigger_foreign", "the trigger blobs_no_delete (redefined: not BEFORE DELETE ON blobs FOR EACH ROW as "
                            "Sealbox creates it) is not Sealbox's: it can silently change or drop what Sealbox "
                            "writes (someone changed the store below Sealbox)")]


def test_an_untouched_store_has_no_trigger_problem(tmp_path, schema):  # noqa: F811
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    assert _trigger_problems(tmp_path, schema) == []


def test_a_store_whose_sessions_skip_their_triggers_is_reported(tmp_path, schema, monkeypatch):  # noqa: F811
    """session_replication_role = replica for Sealbox's sessions (ALTER DATABASE|ROLE … SET by a superuser,
    here through libpq's PGOPTIONS): no append-only trigger fires, every row can be changed."""
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    monkeypatch.setenv("PGOPTIONS", "-c session_replication_role=replica")
    sql(schema, "UPDATE runs SET agent = 'someone-else'")  # let through: the triggers do not fire
    assert sorted(_trigger_problems(tmp_path, schema)) == [
        ("run_row_mismatch", "the runs table's row for system disagrees with its run.started event"),
        ("trigger_missing", "the append-only triggers do not fire in Sealbox's sessions: session_replication_role "
                            "is 'replica' (set with ALTER DATABASE or ALTER ROLE … SET, or PGOPTIONS), so every row "
                            "can be changed or deleted below Sealbox (someone changed the store's database settings)")]


@pytest.mark.parametrize("how", ["DISABLE TRIGGER", "ENABLE REPLICA TRIGGER"])
def test_a_disabled_trigger_is_said_to_be_disabled_not_dropped(tmp_path, schema, how):  # noqa: F811
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, f"ALTER TABLE events {how} events_append_only")
    assert _trigger_problems(tmp_path, schema) == [
        ("trigger_missing", "the append-only trigger events_append_only is in the database but disabled (ALTER "
                            "TABLE … DISABLE TRIGGER, or ENABLE REPLICA TRIGGER): it does not fire (someone changed "
                            "the store below Sealbox)")]


def test_a_dropped_trigger_is_said_to_be_dropped(tmp_path, schema):  # noqa: F811
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, "DROP TRIGGER events_append_only ON events")
    assert _trigger_problems(tmp_path, schema) == [
        ("trigger_missing", "the append-only trigger events_append_only was dropped from the database (someone "
                            "changed the store below Sealbox)")]


def test_a_rule_on_a_store_table_is_reported(tmp_path, schema):  # noqa: F811
    """A rule rewrites what Sealbox writes or reads (DO INSTEAD NOTHING drops an insert, an update or a delete
    silently) as a foreign trigger can; Sealbox creates none."""
    from sealbox.store import init_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, "CREATE RULE hide_calls AS ON INSERT TO events WHERE NEW.kind = 'tool.call' DO INSTEAD NOTHING")
    assert _trigger_problems(tmp_path, schema) == [
        ("trigger_foreign", "the rule hide_calls on events is not Sealbox's: it can silently change or drop what "
                            "Sealbox writes (someone changed the store below Sealbox)")]
