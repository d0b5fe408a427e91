"""Listing the answers of many identities reads the log once for all of them, not once per identity.

A counted answer lacking its ``multiple_clients`` / ``acts_as_agent`` flags (flags are not signed, so a
reader computes them again from the log) made ``list_approvals`` read, for each answering identity,
every answer of the window (identities x answers) and scan every agent event for its principal
(identities x principals). Measured before the fix (bench/bench_approvals_list.py, SQLite): 125
identities / 250 requests 370 ms, 250 / 500 ~1.5 s, 500 / 1,000 ~6 s. The flags listed are the same."""

from __future__ import annotations

from collections import Counter

from approval_helpers import policy, request_of
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

import sealbox.approvals as approvals
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending, list_approvals, signed_fields
from sealbox.identities import add_identity, identity_book, load_key, sign_fields
from sealbox.recorder import Recorder

N = 20  # identities, well past approvals._BULK_AFTER


class Counting:
    """The store's reader, counting the queries by the kinds they read."""

    def __init__(self, reader):
        self._reader = reader
        self.kinds: Counter[tuple[str, ...]] = Counter()

    def events(self, kinds, **kw):
        self.kinds[tuple(kinds)] += 1
        return self._reader.events(kinds, **kw)

    def __getattr__(self, name):
        return getattr(self._reader, name)


def _unflagged_answer(store, key, name, run_id, aid, host):
    """An approve answer signed by ``name`` with no flags (a reader adds what the log shows)."""
    req = request_of(store, run_id)
    payload = {"approval_id": aid, "binding": req["binding"], "decision": "approve", "identity": name,
               "reason": "ok", "answered_at": approvals._utc(approvals._now()), "client": {"hostname": host},
               "run_id": run_id}
    payload["signature"] = sign_fields(load_key(key), signed_fields(payload))
    payload["key_id"] = identity_book(store).get(name).key_id
    payload["flags"] = []
    step = [e for e in store.read_run(run_id) if e.kind == "approval.requested"][0].step
    store.append(EventDraft("approval.answered", payload, run_id=run_id, principal=name, step=step))


def test_flags_of_many_identities_are_read_once_per_listing(backend, tmp_path):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    adm = admin_key(store, tmp_path)
    keys = {f"appr{i}": add_identity(store, f"appr{i}", "approver", ["ops"], key_path=tmp_path / f"a{i}.key",
                                     admin_key=adm).key_path for i in range(N)}
    rec = Recorder(store, policy=policy())
    agents = {}
    for i in range(N):
        if i % 4 == 0 or i == 5:  # acting as an agent: as its own name in capitals, or a Cyrillic look-alike
            with rec.run(agent="a", principal=f"agent:APPR{i}" if i != 5 else "user:\u0430ppr5") as run:
                pass
            agents[f"appr{i}"] = run.run_id
    asking = Recorder(store, policy=policy(), approvals="suspend")
    for i in range(N):
        for host in ("h", "h2") if i % 3 == 0 else ("h",):
            try:
                with asking.run(agent="bot", principal="bot") as run:
                    run.call_tool("db", "write_query", {"sql": f"{i} {host}"}, lambda **_: "ran")
            except ApprovalPending as pending:
                _unflagged_answer(store, keys[f"appr{i}"], f"appr{i}", run.run_id, pending.approval_id, host)
    reader = Counting(store.reader())
    states = list_approvals(reader, record_expiries=False)
    got = sorted((s.answers[0].identity, s.answers[0].client["hostname"],
                  tuple(sorted(f["code"] for f in s.answers[0].flags))) for s in states)
    want = sorted((f"appr{i}", host, tuple(sorted(
        (("acts_as_agent",) if f"appr{i}" in agents else ()) + (("multiple_clients",) if host == "h2" else ()))))
        for i in range(N) for host in (("h", "h2") if i % 3 == 0 else ("h",)))
    assert got == want
    runs = {s.answers[0].identity: f["evidence"]["run_id"] for s in states for f in s.answers[0].flags
            if f["code"] == "acts_as_agent"}
    assert runs == agents
    # queries by identity for the first _BULK_AFTER identities (two for one that answered twice), then
    # one for all the others; before, every identity had its own: 27 answer reads, 20 agent scans
    bulk_after = getattr(approvals, "_BULK_AFTER", 8)
    assert reader.kinds[("approval.answered",)] <= 2 * bulk_after + 1, reader.kinds
    assert reader.kinds[("run.started", "tool.call")] <= 2 * bulk_after, reader.kinds
    store.close()
