"""PostgreSQL: a rule or a foreign trigger that silently drops Sealbox's inserts (``DO INSTEAD NOTHING``, a
BEFORE INSERT trigger returning NULL) makes the append fail and roll back, so the call it records does not
run, as SQLite does for a trigger doing RAISE(IGNORE) (it compares the rows stored with the rows written)."""

from __future__ import annotations

import pytest
from test_postgres import URL, schema, sql  # noqa: F401  (schema is a fixture)

pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: these tests need PostgreSQL")

DROPS = {
    "rule": "CREATE RULE hide_calls AS ON INSERT TO {table} WHERE {cond} DO INSTEAD NOTHING",
    "trigger": "CREATE FUNCTION hide_calls() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; "
               "CREATE TRIGGER hide_calls BEFORE INSERT ON {table} FOR EACH ROW WHEN ({cond}) "
               "EXECUTE FUNCTION hide_calls()",
}


@pytest.mark.parametrize("how", sorted(DROPS))
def test_a_tool_call_dropped_below_sealbox_is_not_run(tmp_path, schema, how):  # noqa: F811
    from sealbox.errors import RecordingError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, DROPS[how].format(table="events", cond="NEW.kind = 'tool.call'"))
    store = open_store(tmp_path / "s")
    ran = []
    try:
        size = sql(schema, "SELECT count(*) FROM events")[0][0]
        with pytest.raises(RecordingError) as caught:
            with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
                run.call_tool("db", "drop_table", {"t": "x"}, lambda t: ran.append(t))
        assert "events: 2 rows were written but 1 were stored (a trigger that is not Sealbox's? run `sealbox " \
               "verify`); nothing was appended" in str(caught.value)
        assert ran == []
        kinds = sql(schema, f"SELECT kind FROM events WHERE leaf_index >= {size} ORDER BY leaf_index")
        assert [k for (k,) in kinds] == ["run.started", "run.ended"]  # neither the call nor its decision
    finally:
        store.close()


def test_tree_nodes_dropped_below_sealbox_fail_the_append(tmp_path, schema):  # noqa: F811
    from sealbox.canonical import fingerprint
    from sealbox.errors import StoreError
    from sealbox.events import EventDraft
    from sealbox.store import init_store, open_store

    init_store(tmp_path / "s", postgres_url=URL, schema=schema).close()
    sql(schema, DROPS["rule"].format(table="tree_nodes", cond="true"))
    store = open_store(tmp_path / "s")
    try:
        size = sql(schema, "SELECT count(*) FROM events")[0][0]
        drafts = [EventDraft("run.started", {"agent": "a", "snapshot": None, "parent_run_id": None, "labels": {},
                                             "policy": {"fingerprint": fingerprint({}), "name": "p"}},
                             run_id=f"r{i}", principal="agent:a") for i in range(16)]
        with pytest.raises(StoreError, match=r"tree_nodes: \d+ rows were written but 0 were stored"):
            store.append(drafts)
        assert sql(schema, "SELECT count(*) FROM events")[0][0] == size
    finally:
        store.close()
