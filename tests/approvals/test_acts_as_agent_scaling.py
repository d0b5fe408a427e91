"""Reading the ``acts_as_agent`` flag of many answers in a store of many non-ASCII principals.

Every principal holding a non-ASCII character is a candidate for any identity (only actor_key can
tell whether it names one), and each listing read all of them again, and folded each, for every
identity that answered: identities x principals. Measured before the fix on SQLite: 100 answers by
100 identities over 500 such principals took 6.4 s to list, 200 over 1,000 took 20 s. They are now
read and folded once per listing."""

from __future__ import annotations

from collections import Counter

from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

import sealbox.approvals as approvals
from sealbox.approvals import ApprovalPending, answer, list_approvals
from sealbox.identities import add_identity
from sealbox.recorder import Recorder

PRINCIPALS = 40
IDENTITIES = 6


def test_each_non_ascii_principal_is_folded_once_per_listing(backend, tmp_path, monkeypatch):  # noqa: F811
    name, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, policy=policy())
    for i in range(PRINCIPALS):
        with rec.run(agent="a", principal=f"user:z\u00e9ta-{i}"):  # nobody's look-alike
            pass
    with rec.run(agent="a", principal="user:\u0430ppr3") as helper:  # a Cyrillic а: appr3 acting as an agent
        pass
    adm = admin_key(store, tmp_path)
    keys = [add_identity(store, f"appr{i}", "approver", ["ops"], key_path=tmp_path / f"a{i}.key", admin_key=adm).key_path
            for i in range(IDENTITIES)]
    asking = Recorder(store, policy=policy(), approvals="suspend")
    for key in keys:
        try:
            with asking.run(agent="bot", principal="bot") as run:
                run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
        except ApprovalPending as pending:
            answer(store, pending.approval_id, "approve", "ok", key, client={"hostname": "h"})
    folded: Counter[str] = Counter()
    real = approvals.actor_key

    def counting(text: str) -> str:
        folded[text] += 1
        return real(text)

    monkeypatch.setattr(approvals, "actor_key", counting)
    states = list_approvals(store, record_expiries=False)
    assert len(states) == IDENTITIES
    flagged = {s.answers[0].identity: [(f["code"], f["evidence"]["run_id"]) for f in s.answers[0].flags] for s in states}
    assert flagged == {f"appr{i}": ([("acts_as_agent", helper.run_id)] if i == 3 else []) for i in range(IDENTITIES)}
    non_ascii = {t: n for t, n in folded.items() if not t.isascii()}
    # each non-ASCII principal once for the whole listing (it was once per identity, twice per look)
    assert non_ascii == {**{f"user:z\u00e9ta-{i}": 1 for i in range(PRINCIPALS)}, "user:\u0430ppr3": 1}
    store.close()


def test_an_answer_reads_each_non_ascii_principal_once_not_each_of_its_calls(backend, tmp_path, monkeypatch):  # noqa: F811
    """answer() read every run.started and tool.call whose principal holds a non-ASCII character (as events,
    parsed), twice (its acts_as_agent flag, then get_approval's): ~113 ms at 300 such principals, ~380 ms at
    1,000, growing with their calls. It now asks the store for each distinct such principal once (with its
    first event's leaf index) and reads one event, the first of the look-alike found: the events an answer
    reads no longer grow with those principals' calls, and the flag and its evidence are the same."""
    from sealbox.store import sqlite_queries

    name, init, _ = backend
    store = init(tmp_path / "store")
    rec = Recorder(store, policy=policy())

    def calls(principal: str, n: int) -> str:
        with rec.run(agent="a", principal=principal) as run:
            for i in range(n):
                run.call_tool("db", "read_query", {"sql": f"SELECT {i}"}, lambda **_: "row")
        return run.run_id

    for i in range(PRINCIPALS):
        calls(f"user:z\u00e9ta-{i}", 3)  # nobody's look-alike
    helper = calls("user:\u0430ppr1", 2)  # a Cyrillic а: appr1 acting as an agent
    adm = admin_key(store, tmp_path)
    keys = [add_identity(store, f"appr{i}", "approver", ["ops"], key_path=tmp_path / f"a{i}.key", admin_key=adm).key_path
            for i in range(3)]
    asking = Recorder(store, policy=policy(), approvals="suspend")
    pending = []
    for _ in keys:
        try:
            with asking.run(agent="bot", principal="bot") as run:
                run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
        except ApprovalPending as p:
            pending.append(p.approval_id)

    made = [0]
    real = sqlite_queries.event_from_row

    def counting(*args):
        made[0] += 1
        return real(*args)

    monkeypatch.setattr(sqlite_queries, "event_from_row", counting)
    if name != "sqlite":
        from sealbox.store import postgres

        monkeypatch.setattr(postgres, "event_from_row", counting)

    def answered(i: int):
        made[0] = 0
        state = answer(store, pending[i], "approve", "ok", keys[i], client={"hostname": "h"})
        return made[0], [(f["code"], f["evidence"]) for f in state.answers[0].flags]

    read0, flags0 = answered(0)
    for i in range(PRINCIPALS):  # more calls by the same non-ASCII principals
        calls(f"user:z\u00e9ta-{i}", 3)
    read2, flags2 = answered(2)
    assert flags0 == flags2 == []
    assert read2 == read0 == 11  # it grew by twice their calls and runs: 2 x 40 x 4 more events read (337 -> 657)
    read1, flags1 = answered(1)
    first = next(e for e in store.read_run(helper) if e.kind == "run.started")
    assert flags1 == [("acts_as_agent", {"identity": "appr1", "principal": "user:\u0430ppr1", "run_id": helper,
                                         "kind": "run.started", "leaf_index": first.leaf_index})]
    assert read1 == read0 + 1  # the look-alike's first event (get_approval then finds the flag carried)
    store.close()
