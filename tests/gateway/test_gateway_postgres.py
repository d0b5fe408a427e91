"""The gateway recording into a PostgreSQL store (SEALBOX_TEST_POSTGRES_URL): the same events as on
SQLite, the call and its decision committed before the upstream sees the call, a deny never forwarded."""

from __future__ import annotations

import os
import uuid

import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.policy import Policy

from .conftest import connect, gateway_runs, kinds, running, text_of, toy_config, toy_log
from .test_gateway_calls import DENY_ECHO

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: needs PostgreSQL")]


@pytest.fixture
def pg_store(tmp_path):
    import psycopg

    schema = f"sbt_{uuid.uuid4().hex[:20]}"
    store = sealbox.init_store(tmp_path / "store", postgres_url=URL, schema=schema)
    yield store
    store.close()
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def test_an_allowed_call_and_a_denied_one_are_recorded_in_postgresql(tmp_path, pg_store):
    gw = Gateway(toy_config(tmp_path), store=pg_store, policy=Policy.from_text(DENY_ECHO))
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            result = await client.call_tool("toy__add", {"a": 2, "b": 40})
            denied = await client.call_tool("toy__echo", {"text": "my secret"})
        [run_id] = gateway_runs(pg_store)
    assert (result.is_error, text_of(result)) == (False, "42")
    assert denied.is_error and "no-echo-secrets" in text_of(denied)
    assert kinds(pg_store, run_id) == [("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"),
                                       ("2", "tool.result"), ("3", "tool.call"), ("3", "policy.decision"),
                                       ("4", "run.ended")]
    assert toy_log(tmp_path) == [{"tool": "add", "arguments": {"a": 2, "b": 40}}]  # the denied echo never forwarded
    assert type(pg_store).__name__ == "PostgresStore"
    report = sealbox.verify_store(pg_store)
    assert report.ok, [p.line() for p in report.problems]


async def test_joining_a_run_id_holding_a_nul_is_an_unknown_run_as_on_sqlite(tmp_path, pg_store):
    # was: the handler raised psycopg.DataError ("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
    # logged with a traceback and sent to the client as an internal error; SQLite: UNKNOWN_RUN
    from mcp.shared.exceptions import MCPError

    from sealbox.gateway import UNKNOWN_RUN

    gw = Gateway(toy_config(tmp_path), store=pg_store, policy=Policy.from_text(DENY_ECHO))
    async with running(gw) as tg, connect(gw, tg) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("toy__add", {"a": 1, "b": 2}, meta={"sealbox/run_id": "no\x00such"})
    assert (err.value.code, str(err.value)) == (UNKNOWN_RUN, "no run 'no\\x00such' in this store")
    assert gateway_runs(pg_store) == [] and toy_log(tmp_path) == []


def test_a_calls_events_are_read_by_call_id_as_on_sqlite(tmp_path, pg_store):
    """Reader.call_events (what a gateway waiting for another process's result polls) on PostgreSQL."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    with Recorder(pg_store, ALLOW_ALL).run(agent="a") as run:
        for i in range(3):
            run.call_tool("srv", "t", {"i": i}, lambda i: i * 10, call_id=f"c{i}")
    reader = pg_store.reader()
    [result] = reader.call_events(run.run_id, "c1", "tool.result")
    [decision] = reader.call_events(run.run_id, "c1", "policy.decision")
    assert (result.payload["call_id"], result.payload["ok"], decision.payload["effect"]) == ("c1", True, "allow")
    assert reader.call_events("run_other", "c1", "tool.result") == []
    with pytest.raises(ValueError):
        reader.call_events(run.run_id, "c1", "tool.call")
