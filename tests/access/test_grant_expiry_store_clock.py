"""A grant's expiry is decided by the store's clock (``reader.stamp``: the ``ts`` the call's events get),
not by a second reading of the machine's clock: at the expiry instant the decision and the event's ``ts``
agree. On SQLite the store's clock is this process's ``time.time_ns`` (sealbox.store.base.utc_now); on
PostgreSQL it is the server's, read when a write takes the lock (``_PgTxn.stamp``). The test holds it at
a chosen instant while ``datetime.now`` (which does not read ``time.time_ns``) keeps the machine's real
time, an hour before the expiry. Real stores (SQLite, and PostgreSQL when the URL is set)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, ToolDenied
from sealbox.store import postgres
from identity_testkit import signed_grant  # noqa: E402

AGENT = "agent:deploy-bot"


@pytest.mark.parametrize("before_us, outcome", [(1, "created"), (0, "grant_invalid")])
def test_a_grant_expires_at_the_ts_its_call_is_stamped_with(store, monkeypatch, before_us, outcome):
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    expires_at = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write", expires_at=expires_at)
    stamp_ns = int(expires.timestamp()) * 1_000_000_000 - before_us * 1000
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
        monkeypatch.setattr(time, "time_ns", lambda: stamp_ns)  # the store's clock, an hour ahead of the machine's
        monkeypatch.setattr(postgres._PgTxn, "stamp", lambda self: (expires - timedelta(microseconds=before_us))
                            .strftime("%Y-%m-%dT%H:%M:%S.%fZ"))  # (PostgreSQL's: the server's)
        try:
            got = run.call_tool("github", "create_issue", {"title": "x"}, lambda title: "created", grant=gid)
        except ToolDenied as exc:
            got = exc.decision.reason_code
        monkeypatch.undo()
    assert got == outcome
    decision = next(e for e in store.read_run(run.run_id) if e.kind == "policy.decision")
    assert decision.ts == (expires - timedelta(microseconds=before_us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if outcome == "grant_invalid":  # before: allowed, the machine's clock an hour before the expiry
        assert (decision.payload["effect"], decision.payload["reason"]) == (
            "deny", f"grant {gid} expired at {expires:%Y-%m-%dT%H:%M:%S.%fZ}")
    else:
        assert decision.payload["effect"] == "allow"
