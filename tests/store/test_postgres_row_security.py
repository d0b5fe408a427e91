"""PostgreSQL row-level security on a store table (ALTER TABLE … ENABLE ROW LEVEL SECURITY and a policy,
by a superuser or the tables' owner; FORCE ROW LEVEL SECURITY makes the owner subject to it too): its
policies can hide rows from Sealbox's reads or refuse its writes. Sealbox enables it on no table, so
verify reports it, as a foreign trigger or rule; a write it refuses is a RecordingError and the tool
does not run. The store here is owned by a role that is not a superuser (a superuser bypasses every
policy), as a deployment's would be."""

from __future__ import annotations

import uuid

import pytest
from test_postgres import URL, schema, sql  # noqa: F401  (schema is a fixture)

pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: these tests need PostgreSQL")


@pytest.fixture
def owned(tmp_path, schema):  # noqa: F811
    """A store in ``schema`` created by (so owned by) a LOGIN role without superuser, one run recorded."""
    import psycopg

    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    role = f"sbt_own_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(URL, autocommit=True) as conn:
        dbname = conn.info.dbname
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'GRANT CREATE ON DATABASE "{dbname}" TO {role}')
    try:
        store = init_store(tmp_path / "s", postgres_url=psycopg.conninfo.make_conninfo(URL, user=role), schema=schema)
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda **_: [[1]])
        store.close()
        yield tmp_path / "s"
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def _verify(path):
    from sealbox import verify_store
    from sealbox.store import open_store

    store = open_store(path, readonly=True)
    try:
        report = verify_store(store)
    finally:
        store.close()
    return report


def _row_security(report):
    return [(p.code, p.message) for p in report.problems if p.code == "row_security"]


def test_an_untouched_store_has_no_row_security_problem(owned):
    report = _verify(owned)
    assert report.ok and _row_security(report) == []


def test_forced_row_security_with_a_policy_is_reported(owned, schema):  # noqa: F811
    """A policy that lets every row through today was passed as intact; it can be replaced tomorrow
    (ALTER POLICY) to hide the calls an investigator looks for."""
    sql(schema, "ALTER TABLE events ENABLE ROW LEVEL SECURITY")
    sql(schema, "ALTER TABLE events FORCE ROW LEVEL SECURITY")
    sql(schema, "CREATE POLICY see_all ON events USING (true) WITH CHECK (kind <> 'tool.call')")
    report = _verify(owned)
    assert not report.ok
    assert _row_security(report) == [
        ("row_security", "the events table has row-level security enabled and forced on its owner (ALTER TABLE … "
                         "ENABLE|FORCE ROW LEVEL SECURITY; policy see_all): Sealbox enables it on no table, and a "
                         "policy can hide rows from whoever reads the store or refuse Sealbox's writes (someone "
                         "changed the store below Sealbox)")]


def test_row_security_without_a_policy_is_reported(owned, schema):  # noqa: F811
    """Enabled with no policy: every non-owner (a verifier's read-only role) sees no row at all."""
    sql(schema, "ALTER TABLE checkpoints ENABLE ROW LEVEL SECURITY")
    assert _row_security(_verify(owned)) == [
        ("row_security", "the checkpoints table has row-level security enabled (ALTER TABLE … ENABLE ROW LEVEL "
                         "SECURITY; no policy: it hides every row from roles other than the owner): Sealbox "
                         "enables it on no table, and a policy can hide rows from whoever reads the store or "
                         "refuse Sealbox's writes (someone changed the store below Sealbox)")]


def test_rows_hidden_from_the_owner_are_not_intact(owned, schema):  # noqa: F811
    sql(schema, "ALTER TABLE events ENABLE ROW LEVEL SECURITY")
    sql(schema, "ALTER TABLE events FORCE ROW LEVEL SECURITY")
    sql(schema, "CREATE POLICY hide_calls ON events USING (kind <> 'tool.call')")
    report = _verify(owned)
    assert not report.ok
    assert [code for code, _ in _row_security(report)] == ["row_security"]


def test_an_insert_a_policy_refuses_fails_the_call_before_the_tool_runs(owned, schema):  # noqa: F811
    from sealbox.errors import RecordingError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import open_store

    sql(schema, "ALTER TABLE events ENABLE ROW LEVEL SECURITY")
    sql(schema, "ALTER TABLE events FORCE ROW LEVEL SECURITY")
    sql(schema, "CREATE POLICY no_calls ON events USING (true) WITH CHECK (kind <> 'tool.call')")
    before = sql(schema, "SELECT count(*) FROM events")[0][0]
    ran = []
    store = open_store(owned)
    try:
        with pytest.raises(RecordingError, match="row-level security policy"):
            with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
                run.call_tool("db", "read_query", {"query": "SELECT 2"}, lambda **_: ran.append(1))
    finally:
        store.close()
    assert ran == []
    kinds = [k for (k,) in sql(schema, f"SELECT kind FROM events WHERE leaf_index >= {before} ORDER BY leaf_index")]
    assert "tool.call" not in kinds
