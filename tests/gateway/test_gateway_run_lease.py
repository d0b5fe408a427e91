"""A gateway session's run holds the run liveness lease (sealbox.liveness) while the session is open,
on both backends: it is listed ``running`` then, ``ended`` after, and would be ``interrupted`` had the
gateway process died (tests/query/test_runs_interrupted.py)."""

from __future__ import annotations

import os
import uuid

import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.liveness import checker

from .conftest import connect, gateway_runs, running, toy_config

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request, tmp_path):
    if request.param == "sqlite":
        store = sealbox.init_store(tmp_path / "store")
        yield store
        store.close()
        return
    if not URL:
        pytest.skip("SEALBOX_TEST_POSTGRES_URL is not set: needs PostgreSQL")
    import psycopg

    schema = f"sbt_{uuid.uuid4().hex[:20]}"
    store = sealbox.init_store(tmp_path / "store", postgres_url=URL, schema=schema)
    yield store
    store.close()
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def test_a_gateway_sessions_run_holds_the_liveness_lease_until_it_ends(tmp_path, any_store):
    gw = Gateway(toy_config(tmp_path), store=any_store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            await client.call_tool("toy__add", {"a": 2, "b": 40})
            [run_id] = gateway_runs(any_store)
            assert any_store.read_run(run_id)[0].payload["lease"] is True
            assert checker(any_store)(run_id) is True
            assert any_store.get_run(run_id)["status"] == "running"
            assert [r["run_id"] for r in any_store.query_runs(status="interrupted")] == []
    assert checker(any_store)(run_id) is False
    assert (any_store.get_run(run_id)["status"], any_store.get_run(run_id)["ending"]) == ("ended", "ok")
