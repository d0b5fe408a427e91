"""`sealbox approvals list --run RUN --since T --until T`: an investigator asks "who approved what in
this run / during the incident window". --run takes a run id or a unique prefix (as `calls --run`),
--since (inclusive) / --until (exclusive) bound the request's time (its approval.requested event's
ts, the `requested_at` column), in the forms `calls` and `runs list` take; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from approval_helpers import policy

import sealbox
from sealbox.approvals import ApprovalPending, list_approvals
from sealbox.recorder import Recorder

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
    schema = f"sbt_aprlist_{uuid.uuid4().hex[:12]}"
    sealbox.init_store(path, postgres_url=PG_URL, schema=schema).close()
    yield path
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _requests(path, n):
    """n runs, each with one pending request: [(run_id, approval_id)], oldest first."""
    store = sealbox.open_store(path)
    out = []
    try:
        rec = Recorder(store, policy=policy(), approvals="suspend")
        for i in range(n):
            with pytest.raises(ApprovalPending) as info:
                with rec.run(agent="bot", principal="agent:bot") as run:
                    run.call_tool("db", "write_query", {"sql": f"DELETE {i}"}, lambda sql: sql)
            out.append((info.value.run_id, info.value.approval_id))
    finally:
        store.close()
    return out


def _listed(path, *args):
    out = sb("approvals", "list", "--json", "-s", path, *args)
    assert out.returncode == 0, out.stderr
    return [(r["run_id"], r["approval_id"]) for r in json.loads(out.stdout)]


def test_approvals_list_by_run_and_time_window(store_path):
    reqs = _requests(store_path, 3)
    rows = json.loads(sb("approvals", "list", "--json", "-s", store_path).stdout)
    at = {r["approval_id"]: r["requested_at"] for r in rows}
    (r0, a0), (r1, a1), (r2, a2) = reqs
    assert _listed(store_path) == [(r2, a2), (r1, a1), (r0, a0)]  # newest first, as before
    assert _listed(store_path, "--run", r1) == [(r1, a1)]
    assert _listed(store_path, "--run", r1[:-3]) == [(r1, a1)]  # a unique prefix, as `calls --run` takes
    assert _listed(store_path, "--since", at[a1]) == [(r2, a2), (r1, a1)]  # inclusive
    assert _listed(store_path, "--until", at[a1]) == [(r0, a0)]  # exclusive
    assert _listed(store_path, "--since", at[a1], "--until", at[a2]) == [(r1, a1)]
    assert _listed(store_path, "--run", r0, "--since", at[a1]) == []
    assert _listed(store_path, "--since", "1h") == [(r2, a2), (r1, a1), (r0, a0)]  # a duration back from now
    assert _listed(store_path, "--until", "2000-01-01") == []  # a date
    # the library function takes the same filters
    store = sealbox.open_store(store_path, readonly=True)
    try:
        assert [s.approval_id for s in list_approvals(store, run_id=r2)] == [a2]
        assert [s.approval_id for s in list_approvals(store, since=at[a1], until=at[a2])] == [a1]
    finally:
        store.close()
    table = sb("approvals", "list", "--run", r0, "--since", at[a1], "-s", store_path)
    assert (table.returncode, table.stdout, table.stderr) == (0, "", "no approval requests match\n")


def test_approvals_list_filters_refuse_bad_input(store_path):
    _requests(store_path, 1)
    missing = sb("approvals", "list", "--run", "no-such-run", "-s", store_path)
    assert (missing.returncode, missing.stdout, missing.stderr) == (2, "", "error: no run 'no-such-run' in this store\n")
    bad_time = sb("approvals", "list", "--since", "yesterday", "-s", store_path)
    assert bad_time.returncode != 0 and bad_time.stdout == ""
    assert bad_time.stderr == ("error: --since: 'yesterday' is not a time; use RFC 3339 (2026-11-29T12:00:00Z), a date "
                               "(2026-11-29) or a duration back from now (90s, 15m, 2h, 30d, 1w)\n")
    empty = sb("approvals", "list", "--since", "2026-11-29", "--until", "2026-11-29", "-s", store_path)
    assert empty.returncode != 0 and empty.stderr.startswith("error: --until '2026-11-29' (2026-11-29T00:00:00.000000Z) "
                                                             "is not after --since")


def test_approvals_list_run_prefix_shared_by_two_runs_is_ambiguous(store_path):
    store = sealbox.open_store(store_path)
    try:
        rec = Recorder(store, policy=policy(), approvals="suspend")
        for rid in ("abcd1111-0000", "abcd2222-0000"):
            with pytest.raises(ApprovalPending):
                with rec.run(agent="bot", principal="agent:bot", run_id=rid) as run:
                    run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: sql)
    finally:
        store.close()
    out = sb("approvals", "list", "--run", "abcd", "-s", store_path)
    assert (out.returncode, out.stderr) == (
        2, "error: run id prefix 'abcd' is ambiguous: it starts abcd1111-0000, abcd2222-0000 (give more characters)\n")
    assert [run for run, _ in _listed(store_path, "--run", "abcd2")] == ["abcd2222-0000"]


@pytest.mark.parametrize("kwargs, message", [
    ({"run_id": 5}, "list_approvals(): run_id must be a run id (a non-empty string) or None, not 5"),
    ({"run_id": ""}, "list_approvals(): run_id must be a run id (a non-empty string) or None, not ''"),
    ({"run_id": b"r1"}, "list_approvals(): run_id must be a run id (a non-empty string) or None, not b'r1'"),
    ({"pending": "no"}, "list_approvals(): pending must be True or False, not 'no'"),
    ({"flagged": 1}, "list_approvals(): flagged must be True or False, not 1"),
])
def test_arguments_of_the_wrong_type_are_a_config_error(store_path, kwargs, message):
    # was: run_id=5 or "" listed nothing, as if the run had no requests; pending="no" listed only pending ones
    from sealbox.errors import ConfigError

    store = sealbox.open_store(store_path)
    try:
        rec = Recorder(store, policy=policy(), approvals="suspend")
        with pytest.raises(ApprovalPending):
            with rec.run(agent="bot") as run:
                run.call_tool("db", "write_query", {"sql": "DELETE"}, lambda sql: None)
        assert [s.run_id for s in list_approvals(store, run_id=run.run_id)] == [run.run_id]
        with pytest.raises(ConfigError) as refused:
            list_approvals(store, **kwargs)
        assert str(refused.value) == message
    finally:
        store.close()
