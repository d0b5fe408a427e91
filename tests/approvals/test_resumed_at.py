"""The record of an approved call says when the run resumed, not only that it did: `approvals show`
(text and --json), `approvals list --json` and the report give the `run.resumed` event's time
(`resumed_at`), on SQLite and PostgreSQL. It used to give `resumed: true` and how long the run waited,
so "when did the agent go on?" needed `runs show` and the event's leaf."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from approval_helpers import policy

import sealbox
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.recorder import Recorder
from identity_testkit import admin_key

PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
_POSTGRES = pytest.param("postgres", marks=pytest.mark.skipif(not PG_URL, reason="needs SEALBOX_TEST_POSTGRES_URL"))


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(params=["sqlite", _POSTGRES])
def store_path(request, tmp_path):
    path = tmp_path / "store"
    if request.param == "sqlite":
        sealbox.init_store(path).close()
        yield path
        return
    psycopg = pytest.importorskip("psycopg")
    schema = f"sbt_resat_{uuid.uuid4().hex[:12]}"
    sealbox.init_store(path, postgres_url=PG_URL, schema=schema).close()
    yield path
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_approvals_show_list_and_report_say_when_the_run_resumed(store_path, tmp_path):
    store = sealbox.open_store(store_path)
    try:
        alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                             admin_key=admin_key(store, tmp_path)).key_path
        rec = Recorder(store, policy=policy(), approvals="suspend")
        with pytest.raises(ApprovalPending) as info:
            with rec.run(agent="bot", principal="agent:bot") as run:
                run.call_tool("db", "write_query", {"sql": "DELETE 1"}, lambda sql: sql)
        run_id, aid = info.value.run_id, info.value.approval_id
        answer(store, aid, "approve", "ticket 7", alice)
        with rec.resume(run_id, tools={("db", "write_query"): lambda sql: "done"}) as run:
            [call] = run.resumed_calls
            assert call.value() == "done"
        [resumed] = [e for e in store.read_run(run_id) if e.kind == "run.resumed"]
    finally:
        store.close()

    shown = sb("approvals", "show", aid, "--json", "-s", store_path)
    assert shown.returncode == 0, shown.stderr
    row = json.loads(shown.stdout)
    assert (row["resumed"], row["resumed_at"], row["outcome"]) == (True, resumed.ts, "approved")
    text = sb("approvals", "show", aid, "-s", store_path)
    assert text.returncode == 0, text.stderr
    assert f"resumed    {resumed.ts} (outcome approved)\n" in text.stdout
    listed = sb("approvals", "list", "--json", "-s", store_path)
    assert [r["resumed_at"] for r in json.loads(listed.stdout)] == [resumed.ts]
    report = sb("report", run_id, "--no-verify", "-s", store_path)
    assert report.returncode == 0, report.stderr
    assert f"| **resumed** | {resumed.ts} (outcome approved) |" in report.stdout.replace("\\_", "_")


def test_a_request_not_yet_resumed_says_so(store_path):
    store = sealbox.open_store(store_path)
    try:
        rec = Recorder(store, policy=policy(), approvals="suspend")
        with pytest.raises(ApprovalPending) as info:
            with rec.run(agent="bot", principal="agent:bot") as run:
                run.call_tool("db", "write_query", {"sql": "DELETE 1"}, lambda sql: sql)
    finally:
        store.close()
    row = json.loads(sb("approvals", "show", info.value.approval_id, "--json", "-s", store_path).stdout)
    assert (row["resumed"], row["resumed_at"]) == (False, None)
    text = sb("approvals", "show", info.value.approval_id, "-s", store_path).stdout
    assert "resumed    -\n" in text
