"""`sealbox runs show` of a run held for an approval says, on its rows, who was asked and what
(the quorum and the binding), which request suspended the run and which request its resumption
acted on with what outcome, on SQLite and PostgreSQL. The run.suspended and run.resumed rows used to
be blank and the request's row named only the request and its status."""

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
    schema = f"sbt_rsdet_{uuid.uuid4().hex[:12]}"
    sealbox.init_store(path, postgres_url=PG_URL, schema=schema).close()
    yield path
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_runs_show_names_who_was_asked_and_what_the_resumption_did(store_path, tmp_path):
    store = sealbox.open_store(store_path)
    try:
        alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                             admin_key=admin_key(store, tmp_path)).key_path
        rec = Recorder(store, policy=policy(), approvals="suspend")
        with pytest.raises(ApprovalPending) as info:
            with rec.run(agent="bot", principal="agent:bot") as run:
                run.call_tool("db", "deploy", {"sql": "x"}, lambda sql: sql)
        run_id, aid = info.value.run_id, info.value.approval_id
        [request] = [e.payload for e in store.read_run(run_id) if e.kind == "approval.requested"]
        answer(store, aid, "deny", "not today", alice)
        with rec.resume(run_id, tools={("db", "deploy"): lambda sql: "done"}):
            pass
    finally:
        store.close()
    shown = sb("runs", "show", run_id, "--json", "-s", store_path)
    assert shown.returncode == 0, shown.stderr
    detail = {e["kind"]: e["detail"] for e in json.loads(shown.stdout)["events"]}
    assert detail["approval.requested"] == (f"approval {aid}: denied; asks groups ops, identities carol; quorum 2; "
                                            f"binding {request['binding']}")
    assert detail["run.suspended"] == f"rule deploys-need-two requires approval; awaiting {aid}"
    assert detail["run.resumed"] == f"{aid} denied"
    assert detail["approval.answered"] == "deny by alice (counts)"
