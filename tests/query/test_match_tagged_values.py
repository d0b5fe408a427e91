"""``--match`` on values the canonical encoder stores as a tag (docs/canonical.md): an integer beyond
2**53 (a Discord or X/Twitter id, ``{"$bigint": "…"}``), a ``Decimal`` and a ``date`` / ``datetime``
(what psycopg returns for NUMERIC and DATE / TIMESTAMPTZ columns), a ``UUID``, a ``set``. Each was
searched as the JSON text of its tag, so an anchored regex (``arguments.user_id~^1152921504606846976$``,
``result.*.amount~^12\\.50$``, ``result.*.created~^2024-01``) never matched the value the tool took or
returned, while the same regex matched an ordinary int or string; a set was not searched item by item
as a list is. They are now searched as the value's text (a set as its items), on every backend."""

from __future__ import annotations

import datetime
import decimal
import os
import uuid

import pytest
from query_helpers import ids

from conftest import BACKENDS


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    from sealbox import init_store

    if request.param == "sqlite":
        s = init_store(tmp_path / "s")
        yield s
        s.close()
        return
    import psycopg

    url = os.environ["SEALBOX_TEST_POSTGRES_URL"]
    schema = f"sbt_match_tags_{uuid.uuid4().hex[:12]}"
    s = init_store(tmp_path / "s", postgres_url=url, schema=schema)
    try:
        yield s
    finally:
        s.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _record(store):
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    rows = [{"id": 2**60, "amount": decimal.Decimal("12.50"), "created": datetime.date(2024, 1, 2),
             "at": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
             "key": uuid.UUID("12345678-1234-5678-1234-567812345678")}]
    with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as run:
        run.call_tool("chat", "ban", {"user_id": 1152921504606846976}, lambda user_id: True, call_id="c1")
        run.call_tool("db", "query", {"sql": "select"}, lambda sql: rows, call_id="c2")
        run.call_tool("db", "tags", {"of": 7}, lambda of: {"alpha", "beta"}, call_id="c3")
        run.call_tool("chat", "ban", {"user_id": 5}, lambda user_id: True, call_id="c4")
        run.call_tool("db", "tags", {"of": 8}, lambda of: ["alpha", "beta"], call_id="c5")


def test_tagged_scalars_and_sets_are_searched_as_their_values(store):
    _record(store)
    assert ids(store.query_calls(match=["arguments.user_id~^1152921504606846976$"])) == ["c1"]
    assert ids(store.query_calls(match=["arguments.user_id~^5$"])) == ["c4"]  # an ordinary int, as before
    assert ids(store.query_calls(match=["result.id~^1152921504606846976$"])) == ["c2"]
    assert ids(store.query_calls(match=[r"result.*.amount~^12\.50$"])) == ["c2"]
    assert ids(store.query_calls(match=["result.created~^2024-01-02$"])) == ["c2"]
    assert ids(store.query_calls(match=["result.at~^2024-01-02T03:04:05"])) == ["c2"]
    assert ids(store.query_calls(match=["result.key~^12345678-"])) == ["c2"]
    assert ids(store.query_calls(match=["result~^alpha$"])) == ["c3", "c5"]  # a set item by item, as a list
    assert ids(store.query_calls(match=['result~"amount": "12.50"'])) == ["c2"]  # inside a dict's JSON text
    assert ids(store.query_calls(match=['result~"id": 1152921504606846976,'])) == ["c2"]  # an int there too
    # the spelled-out tag still reaches the stored form
    assert ids(store.query_calls(match=["arguments.user_id.$bigint~^1152921504606846976$"])) == ["c1"]
    assert ids(store.query_calls(match=["result.$set~^beta$"])) == ["c3"]
    assert ids(store.query_calls(match=["result~\\$decimal"])) == []
