"""Grants on a PostgreSQL store: what only PostgreSQL has (its migration 0003 applied to an existing store,
its index) and several processes using one store through the server at once (the advisory write lock:
a grant's check and the call's decision are one transaction, whichever process writes).

Real PostgreSQL (``SEALBOX_TEST_POSTGRES_URL``) and real processes (``python -c``), no mocks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from access_db import PG_URL, _raw_sql
from identity_testkit import grant_key, signed_grant

import sealbox
from sealbox.access import STATUS_ACTIVE, STATUS_LOCAL, access_status, grant_status, list_grants
from sealbox.events import SYSTEM_RUN_ID
from sealbox.verify import verify_store

pytestmark = pytest.mark.skipif(not PG_URL, reason="needs SEALBOX_TEST_POSTGRES_URL")
AGENT = "agent:deploy-bot"


@pytest.fixture
def pg_store(tmp_path):
    schema = f"sbt_accpg_{uuid.uuid4().hex[:16]}"
    s = sealbox.init_store(tmp_path / "store", postgres_url=PG_URL, schema=schema)
    grant_key(s)
    yield s
    s.close()
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_an_existing_postgres_store_gets_the_credentials_table_on_open(pg_store):
    """A store made by a Sealbox before migration 0003 (schema 2): a read-only open says the migration is
    pending; the first open for writing applies it, and grants with credentials then work."""
    path = pg_store.path
    pg_store.close()
    _raw_sql(pg_store, "DROP TABLE credentials; DROP FUNCTION sealbox_credentials_written_once();"
                       " DROP INDEX events_access_grant; DROP FUNCTION sealbox_grant_id(bytea);"
                       " DELETE FROM schema_migrations WHERE version = 3")
    with pytest.raises(sealbox.SchemaVersionError, match=r"pending migrations \[3\]"):
        sealbox.open_store(path, readonly=True)
    s = sealbox.open_store(path)
    try:
        assert s.migrated == [3]
        gid = signed_grant(s, AGENT, "db", "*", None, credential={
            "revocation_endpoint": "https://auth.example/revoke", "client_id": "c", "access_token": "tok"})
        assert access_status(s, gid) == STATUS_ACTIVE
        assert [r["credential"] for r in list_grants(s)] == ["held"]
        assert verify_store(s).ok
    finally:
        s.close()


def test_a_store_missing_the_grant_id_function_is_refused_on_open(pg_store):
    """The index key function is called by name (sealbox.access): a schema without it was changed below
    Sealbox and is refused with one error line, not failed at the first grant."""
    path = pg_store.path
    pg_store.close()
    _raw_sql(pg_store, "DROP INDEX events_access_grant; DROP FUNCTION sealbox_grant_id(bytea)")
    with pytest.raises(sealbox.StoreError, match=r"function sealbox_grant_id\(bytea\) is missing"):
        sealbox.open_store(path)


# --------------------------------------------------------------------------- several processes

_CHILD = r"""
import json, os, sys, time
import sealbox
from sealbox.access import AccessError, revoke, grant_access
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, ToolDenied

path, key, what, arg, go = sys.argv[1:6]
store = sealbox.open_store(path)
while not os.path.exists(go):  # every process opened its store: start together
    time.sleep(0.001)
out = []
try:
    if what == "revoke":
        try:
            out.append(revoke(store, arg, "leak", key_file=key))
        except AccessError as exc:
            out.append("error: " + str(exc))
    elif what == "grant":
        try:
            out.append(grant_access(store, "agent:deploy-bot", "github", "*", key_file=key, grant_id=arg,
                                    credential={"revocation_endpoint": "https://auth.example/revoke",
                                                "client_id": "c", "access_token": "tok-" + str(os.getpid())}))
        except AccessError as exc:
            out.append("error: " + str(exc))
    else:  # calls under the grant until one is denied (for at most 300 s)
        rec = Recorder(store, ALLOW_ALL)
        end = time.monotonic() + 300
        with rec.run(agent="deploy-bot", principal="agent:deploy-bot") as run:
            i = 0
            while time.monotonic() < end:
                i += 1
                try:
                    run.call_tool("github", "create_issue", {"i": i}, lambda i: "ok", grant=arg)
                    out.append("ok")
                except ToolDenied as exc:
                    out.append(exc.decision.reason_code)
                    break
finally:
    store.close()
print(json.dumps(out))
"""


def _start(tmp_path, store, key, what, arg):
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(store.path), str(key), what, arg,
                             str(tmp_path / "go")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _results(procs):
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_two_processes_revoking_one_grant_record_one_revocation(pg_store, tmp_path):
    gid = signed_grant(pg_store, AGENT, "github", "create_*", None)
    key = grant_key(pg_store)
    procs = [_start(tmp_path, pg_store, key, "revoke", gid) for _ in range(2)]
    time.sleep(1.0)
    (tmp_path / "go").touch()
    got = sorted(r[0] for r in _results(procs))
    assert got == [f"error: grant {gid} is already {STATUS_LOCAL}", STATUS_LOCAL]
    revoked = [e for e in pg_store.read_run(SYSTEM_RUN_ID) if e.kind == "access.revoked"]
    assert [e.payload["step"] for e in revoked] == ["requested"]
    assert access_status(pg_store, gid) == STATUS_LOCAL
    assert grant_status(pg_store, gid, AGENT, "github", "create_issue")[0] is False
    assert verify_store(pg_store).ok


def test_two_processes_granting_one_grant_id_record_one_grant_and_one_credential(pg_store, tmp_path):
    key = grant_key(pg_store)
    procs = [_start(tmp_path, pg_store, key, "grant", "g-shared") for _ in range(2)]
    time.sleep(1.0)
    (tmp_path / "go").touch()
    got = sorted(r[0] for r in _results(procs))
    assert got == ["error: grant 'g-shared' already exists", "g-shared"]
    assert [e.payload["grant_id"] for e in pg_store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted"] == [
        "g-shared"]
    assert _raw_sql(pg_store, "SELECT grant_id FROM credentials") == [("g-shared",)]


def test_a_revocation_in_one_process_denies_every_later_call_of_another(pg_store, tmp_path):
    """One process calls under the grant while another revokes it: every call decided before the
    ``requested`` step (in log order) was allowed, every one after it denied (``grant_invalid``): the
    check and the decision are one transaction under the store's write lock, in whichever process."""
    gid = signed_grant(pg_store, AGENT, "github", "create_*", None)
    key = grant_key(pg_store)
    caller = _start(tmp_path, pg_store, key, "call", gid)
    revoker = [sys.executable, "-c", _CHILD, str(pg_store.path), str(key), "revoke", gid, str(tmp_path / "go")]
    time.sleep(1.0)
    (tmp_path / "go").touch()
    time.sleep(0.5)  # some calls are allowed first
    done = subprocess.run(revoker, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [STATUS_LOCAL]
    (calls,) = _results([caller])
    assert calls[-1] == "grant_invalid" and "ok" in calls
    requested = next(e.leaf_index for e in pg_store.read_run(SYSTEM_RUN_ID) if e.kind == "access.revoked")
    decisions = [(e.leaf_index, e.payload["effect"]) for e in pg_store.read_range(0, pg_store.size())
                 if e.kind == "policy.decision"]
    assert len(decisions) == len(calls)
    assert all(effect == ("allow" if leaf < requested else "deny") for leaf, effect in decisions)
    assert verify_store(pg_store).ok


def test_an_access_event_that_is_not_json_denies_calls_naming_a_grant_not_lets_them_through(pg_store):
    """An ``access.revoked`` row whose bytes are not JSON (inserted below Sealbox: PostgreSQL's index key
    is NULL for it, where SQLite's JSON index refuses the insert) might be this grant's revocation: a
    check does not skip it. ``grant_status`` raises DamagedEventError naming its leaf, and a call naming
    the grant is denied (``guardrail_error``), recorded."""
    from sealbox.store.sqlite_queries import DamagedEventError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder, ToolDenied

    gid = signed_grant(pg_store, AGENT, "github", "create_*", None)
    assert grant_status(pg_store, gid, AGENT, "github", "create_issue")[0] is True
    leaf = pg_store.size()
    _raw_sql(pg_store, "INSERT INTO events (leaf_index, run_id, run_seq, kind, ts, principal, step, raw, leaf_hash)"
                       " SELECT ?, 'system', max(run_seq) + 1, 'access.revoked', '2026-12-05T00:00:00.000000Z', 'x',"
                       " '0', ?, ? FROM events WHERE run_id = 'system'", (leaf, b"{not json", b"\x00" * 32))
    with pytest.raises(DamagedEventError, match=f"the event at leaf {leaf} is damaged"):
        grant_status(pg_store, gid, AGENT, "github", "create_issue")
    with Recorder(pg_store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
        with pytest.raises(ToolDenied) as denied:
            run.call_tool("github", "create_issue", {"title": "x"}, lambda title: "ran", grant=gid)
    assert denied.value.decision.reason_code == "guardrail_error"
    assert "DamagedEventError" in denied.value.decision.reason
