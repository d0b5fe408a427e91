"""Shared accounts are flagged on the answer, each flag with its evidence."""

from __future__ import annotations

import pytest
from approval_helpers import policy

from sealbox.approvals import ApprovalPending, answer, list_approvals
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.recorder import Recorder


def request(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    return info.value.approval_id


LAPTOP = {"hostname": "laptop", "os_user": "alice"}


def test_no_flags_for_a_personal_identity_on_one_client(store, keys):
    state = answer(store, request(store), "approve", "ok", keys["alice"], client=LAPTOP)
    assert state.answers[0].flags == ()
    assert list_approvals(store, flagged=True) == []


def test_an_identity_marked_shared_is_flagged(store, tmp_path):
    new = add_identity(store, "oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "oncall.key",
                       admin_key=admin_key(store, tmp_path))
    state = answer(store, request(store), "approve", "ok", new.key_path, client=LAPTOP)
    assert state.answers[0].flags == ({"code": "shared_identity", "evidence": {
        "identity": "oncall", "marked_shared": True, "identity_leaf": new.identity.since_leaf}},)
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [state.approval_id]


def test_answers_from_two_clients_within_the_window_are_flagged_with_both_clients(store, keys):
    first = answer(store, request(store), "approve", "ok", keys["alice"], client=LAPTOP)
    second = answer(store, request(store), "approve", "ok", keys["alice"], client={"hostname": "kiosk", "os_user": "ops"})
    assert first.answers[0].flags == ()
    (flag,) = second.answers[0].flags
    assert flag["code"] == "multiple_clients"
    ev = flag["evidence"]
    assert (ev["identity"], ev["window_s"]) == ("alice", 86400)
    assert [(a["approval_id"], a["hostname"]) for a in ev["answers"]] == [
        (second.approval_id, "kiosk"), (first.approval_id, "laptop")]
    assert ev["clients"] == [{"hostname": "kiosk", "os_user": "ops", "user_agent": None},
                             {"hostname": "laptop", "os_user": "alice", "user_agent": None}]


def test_distinct_user_agents_count_and_the_window_can_be_widened_never_narrowed(store, keys):
    """The answerer is the one the flag checks: `--window 0` used to switch it off (break test of
    2026-12-02); a window below 24 h, above a year or not finite is refused, nothing recorded."""
    from sealbox.approvals import ApprovalError

    answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "sealbox-cli/0.1.0"})
    aid = request(store)
    for window in (0, 3600, float("nan"), float("inf"), 1e300, True, "86400"):
        before = store.size()
        with pytest.raises(ApprovalError) as info:
            answer(store, aid, "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "curl/8"},
                   shared_window_s=window)
        assert info.value.code == "bad_window" and store.size() == before
    wide = answer(store, aid, "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "curl/8"},
                  shared_window_s=7 * 86400)
    (flag,) = wide.answers[0].flags
    assert (flag["code"], flag["evidence"]["window_s"]) == ("multiple_clients", 604800)
    flagged = answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "curl/8"})
    assert [f["code"] for f in flagged.answers[0].flags] == ["multiple_clients"]


@pytest.mark.parametrize("window", ["0", "nan", "inf", "1e300", "-5"])
def test_a_bad_window_on_the_command_line_is_one_usage_line(store, keys, window):
    import subprocess
    import sys

    aid = request(store)
    res = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "approvals", "approve", aid, "--reason", "ok",
                          "--key-file", str(keys["alice"]), "--window", window, "-s", str(store.path)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"error: Invalid value for --window: the shared-account window must be a number of seconds from 86400 (24 h; "
        f"it may be widened, never narrowed) to 31622400, not {float(window)!r}")


@pytest.mark.parametrize("principal", ["svc:bob", "agent:Bob", "BOB", "user:bob"])
def test_an_approver_acting_as_an_agent_under_any_scheme_or_case_is_flagged(store, keys, principal):
    """acts_as_agent looked only for `name`, `agent:name`, `user:name`, while the requester rule
    treats any one scheme and any case as the same actor (break test of 2026-12-02)."""
    with Recorder(store, policy=policy()).run(agent="helper", principal=principal) as run:
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    (flag,) = state.answers[0].flags
    assert flag["code"] == "acts_as_agent" and flag["evidence"]["principal"] == principal
    assert flag["evidence"]["run_id"] == run.run_id


def test_a_principal_that_only_ends_like_the_name_is_not_flagged(store, keys):
    with Recorder(store, policy=policy()).run(agent="helper", principal="agent:jacob") as run:  # ends in "b", "ob"
        pass
    with Recorder(store, policy=policy()).run(agent="helper", principal="svc:x_bob") as run:  # LIKE's _ escaped
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    assert state.answers[0].flags == ()


def test_an_approver_that_also_acts_as_an_agent_principal_is_flagged(store, keys):
    with Recorder(store, policy=policy()).run(agent="helper", principal="bob") as run:
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    (flag,) = state.answers[0].flags
    assert flag == {"code": "acts_as_agent", "evidence": {
        "identity": "bob", "principal": "bob", "run_id": run.run_id, "kind": "run.started",
        "leaf_index": store.read_run(run.run_id)[0].leaf_index}}


def test_an_approver_running_agents_as_user_name_is_flagged_too(store, keys):
    with Recorder(store, policy=policy()).run(agent="helper", principal="user:bob") as run:
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    (flag,) = state.answers[0].flags
    assert flag["code"] == "acts_as_agent" and flag["evidence"]["principal"] == "user:bob"
    assert flag["evidence"]["run_id"] == run.run_id


def test_a_real_match_after_many_look_alikes_is_still_flagged(store, keys):
    """Principals such as `a:b:bob` end like the name but are not bob (two schemes): the query's
    first candidates may all be such, and the flag still finds the real one after them."""
    for i in range(20):
        with Recorder(store, policy=policy()).run(agent="helper", principal=f"team{i}:x:bob"):
            pass
    with Recorder(store, policy=policy()).run(agent="helper", principal="svc:bob") as run:
        pass
    state = answer(store, request(store), "approve", "ok", keys["bob"], client=LAPTOP)
    (flag,) = state.answers[0].flags
    assert (flag["code"], flag["evidence"]["principal"], flag["evidence"]["run_id"]) == (
        "acts_as_agent", "svc:bob", run.run_id)


def test_a_shared_accounts_answer_written_without_its_flag_is_still_flagged_and_verify_says_so(store, tmp_path):
    """The flags are the answerer's words, not signed: whoever holds a shared account's key and can
    write the store signed a valid answer with no flags, and the account disappeared from
    `approvals list --flagged` while verify passed."""
    from sealbox import EventDraft, verify_store
    from sealbox.approvals import get_approval, signed_fields
    from sealbox.identities import load_key, sign_fields

    new = add_identity(store, "oncall", "approver", ["ops"], shared=True, key_path=tmp_path / "oncall.key",
                       admin_key=admin_key(store, tmp_path))
    aid = request(store)
    req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == aid)
    payload = {"approval_id": aid, "binding": req.payload["binding"], "decision": "approve", "identity": "oncall",
               "reason": "quietly", "answered_at": "2026-12-03T00:00:00.000000Z", "client": LAPTOP, "run_id": req.run_id}
    payload["signature"] = sign_fields(load_key(new.key_path), signed_fields(payload))
    event = store.append(EventDraft("approval.answered", payload, run_id=req.run_id, principal="oncall",
                                    step=req.step))[0]
    state = get_approval(store, aid)
    assert state.status == "approved" and state.answers[0].problem is None
    assert state.flags == [{"identity": "oncall", "code": "shared_identity", "evidence": {
        "identity": "oncall", "marked_shared": True, "identity_leaf": new.identity.since_leaf}}]
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [aid]
    assert [(p.code, p.leaf_index) for p in verify_store(store).problems] == [("approval_flag_missing", event.leaf_index)]
    from sealbox.interop.otlp import build_otlp

    [log] = [r.log_record for r in build_otlp(store, [req.run_id]).logs
             if r.log_record.attributes["event.name"] == "sealbox.approval.answered"]
    assert (log.attributes["sealbox.approval.flags"], log.severity_number.name) == (("shared_identity",), "WARN")


def _forged_answer(store, aid, key_path, identity, client):
    """A validly signed answer appended below `answer()`, with no `flags` at all (what whoever
    holds the key and can write the store may do)."""
    from sealbox import EventDraft
    from sealbox.approvals import signed_fields
    from sealbox.identities import load_key, sign_fields

    req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == aid)
    payload = {"approval_id": aid, "binding": req.payload["binding"], "decision": "approve", "identity": identity,
               "reason": "quietly", "answered_at": "2026-12-03T00:00:00.000000Z", "client": client,
               "run_id": req.run_id}
    payload["signature"] = sign_fields(load_key(key_path), signed_fields(payload))
    return store.append(EventDraft("approval.answered", payload, run_id=req.run_id, principal=identity,
                                   step=req.step))[0]


def test_an_answer_written_without_flags_by_an_approver_acting_as_an_agent_is_still_flagged(store, keys):
    """acts_as_agent is a fact of the log (bob is a run's principal), not the answerer's word: an
    answer appended without `flags` used to hide it from `approvals list --flagged`."""
    from sealbox.approvals import get_approval

    with Recorder(store, policy=policy()).run(agent="helper", principal="svc:bob") as run:
        pass
    started = store.read_run(run.run_id)[0].leaf_index
    aid = request(store)
    forged = _forged_answer(store, aid, keys["bob"], "bob", LAPTOP)
    state = get_approval(store, aid)
    assert state.status == "approved" and state.answers[0].problem is None
    assert state.flags == [{"identity": "bob", "code": "acts_as_agent", "evidence": {
        "identity": "bob", "principal": "svc:bob", "run_id": run.run_id, "kind": "run.started",
        "leaf_index": started}}]
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [aid]


def test_an_answer_written_without_flags_from_a_second_client_is_still_flagged(store, keys):
    """multiple_clients: bob answered from the laptop, then an answer from another host was
    appended with no flags; readers find the two clients in the log."""
    from sealbox.approvals import get_approval

    first = request(store)
    answer(store, first, "approve", "ok", keys["bob"], client=LAPTOP)
    second = request(store)
    forged = _forged_answer(store, second, keys["bob"], "bob", {"hostname": "desk-2", "os_user": "bob"})
    state = get_approval(store, second)
    assert state.status == "approved"
    [flag] = state.flags
    assert flag["code"] == "multiple_clients" and flag["identity"] == "bob"
    assert flag["evidence"]["clients"] == [{"hostname": "desk-2", "os_user": "bob", "user_agent": None},
                                           {"hostname": "laptop", "os_user": "alice", "user_agent": None}]
    assert [a["leaf_index"] for a in flag["evidence"]["answers"]] == [
        forged.leaf_index, next(e.leaf_index for e in store.reader().events(["approval.answered"])
                                if e.payload["approval_id"] == first)]
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [second]
    # the first answer (from one client, before the second) is not flagged
    assert get_approval(store, first).flags == []


def test_an_unsigned_answer_from_another_client_does_not_flag_a_real_one(store, keys):
    """Only answers whose signature verifies are evidence: a forged, unsigned answer naming bob
    from another host does not put a multiple_clients flag on bob's real answer."""
    from sealbox import EventDraft
    from sealbox.approvals import get_approval

    other = request(store)
    req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == other)
    store.append(EventDraft("approval.answered", {
        "approval_id": other, "binding": req.payload["binding"], "decision": "approve", "identity": "bob",
        "reason": "x", "answered_at": "2026-12-03T00:00:00.000000Z", "client": {"hostname": "evil", "os_user": "x"},
        "run_id": req.run_id, "signature": "AAAA", "key_id": "00000000"}, run_id=req.run_id, principal="bob",
        step=req.step))
    aid = request(store)
    answer(store, aid, "approve", "ok", keys["bob"], client=LAPTOP)
    assert get_approval(store, aid).flags == []


def test_a_clock_running_ahead_in_the_first_answerers_process_does_not_hide_the_second_client(store, keys,
                                                                                                monkeypatch):
    """Events get their ts from the appending process's clock: bob's first answer, from a host
    whose clock runs 10 minutes ahead, has a later ts than his forged second one. Readers
    looked only at answers whose ts was at or before this one's, and missed it."""
    from datetime import datetime, timedelta, timezone

    import sealbox.store.base as base
    from sealbox.approvals import get_approval

    first = request(store)
    ahead = lambda: (datetime.now(timezone.utc) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    monkeypatch.setattr(base, "utc_now", ahead)
    answer(store, first, "approve", "ok", keys["bob"], client=LAPTOP)
    monkeypatch.undo()
    second = request(store)
    _forged_answer(store, second, keys["bob"], "bob", {"hostname": "desk-2", "os_user": "bob"})
    assert [f["code"] for f in get_approval(store, second).flags] == ["multiple_clients"]


def test_reading_an_answer_checks_no_earlier_signatures_when_the_identity_used_one_client(store, keys, monkeypatch):
    """Every read of an answer (get_approval, polled every 0.1 s by a held gateway call; each row of
    a listing) computes its multiple_clients flag from the log, and verified the signature of every
    earlier answer of the identity within 24 h: with 200 answers from one laptop, get_approval took
    30 ms instead of 2. Signatures are checked only when an earlier answer names another client."""
    import sealbox.approvals as approvals

    for _ in range(30):
        last = answer(store, request(store), "approve", "ok", keys["alice"], client=LAPTOP)
    checked = []
    real = approvals.verify_fields
    monkeypatch.setattr(approvals, "verify_fields", lambda *a: checked.append(1) or real(*a))
    state = approvals.get_approval(store, last.approval_id)
    assert state.status == "approved" and state.answers[0].flags == ()
    assert len(checked) <= 1, len(checked)  # the answer's own signature, none of the 29 before it
    # another client: the flag is raised as before, with every earlier answer of the window
    other = answer(store, request(store), "approve", "ok", keys["alice"], client={"hostname": "kiosk", "os_user": "ops"})
    (flag,) = approvals.get_approval(store, other.approval_id).answers[0].flags
    assert flag["code"] == "multiple_clients" and len(flag["evidence"]["answers"]) == 31


@pytest.mark.sqlite_only("it traces SQLite statements (set_trace_callback) and reads SQLite's EXPLAIN QUERY PLAN")
def test_reading_an_answer_does_not_read_the_identitys_answers_outside_the_window(store, keys, monkeypatch):
    """log_flags read every answer the identity ever gave (no time bound) on each read of an
    approval (get_approval, polled every 0.1 s by a held gateway call; listings; resume): the
    work grew with the identity's answer count. Only answers within the window are read now:
    500 answers bob gave 30 days ago, from another client, are neither built into events nor
    searched by the query (it searches events_kind_ts by ts), and raise no flag."""
    from datetime import datetime, timedelta, timezone

    import sealbox.store.base as base
    import sealbox.store.sqlite_queries as queries
    from sealbox import EventDraft
    from sealbox.approvals import get_approval, signed_fields
    from sealbox.identities import load_key, sign_fields

    key = load_key(keys["bob"])

    def answers_from_old_desk(n):  # validly signed answers by bob, from another client than LAPTOP
        aid = request(store)
        req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == aid)
        out = []
        for i in range(n):
            payload = {"approval_id": aid, "binding": req.payload["binding"], "decision": "approve", "identity": "bob",
                       "reason": f"old {i}", "answered_at": "2026-11-03T00:00:00.000000Z",
                       "client": {"hostname": "old-desk", "os_user": "bob"}, "run_id": req.run_id}
            payload["signature"] = sign_fields(key, signed_fields(payload))
            out.append(EventDraft("approval.answered", payload, run_id=req.run_id, principal="bob", step=req.step))
        return out

    drafts = answers_from_old_desk(500)
    month_ago = (datetime.now(timezone.utc) - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    monkeypatch.setattr(base, "utc_now", lambda: month_ago)
    old_leaves = {e.leaf_index for e in store.append(drafts)}
    monkeypatch.undo()
    assert len(old_leaves) == 500
    aid = request(store)
    answer(store, aid, "approve", "ok", keys["bob"], client=LAPTOP)

    built, statements = [], []
    real = queries.event_from_row
    monkeypatch.setattr(queries, "event_from_row", lambda leaf, *a: built.append(leaf) or real(leaf, *a))
    conn = store.reader().conn
    conn.set_trace_callback(statements.append)
    try:
        state = get_approval(store, aid)
    finally:
        conn.set_trace_callback(None)
    assert state.status == "approved" and state.answers[0].flags == ()  # the old desk is outside the window
    assert built and not old_leaves & set(built), sorted(old_leaves & set(built))[:5]
    [query] = [s for s in statements if "approval.answered" in s and "ts >=" in s]
    for stats in ("none", "ANALYZE"):  # with and without planner statistics (close() runs PRAGMA optimize)
        if stats == "ANALYZE":
            conn.execute("ANALYZE")
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query)]
        assert plan == ["SEARCH events USING INDEX events_kind_ts (kind=? AND ts>?)", "USE TEMP B-TREE FOR ORDER BY"], \
            (stats, plan)
    # three such answers within the window are read, and flag the next answer (written without
    # flags, so that the reader computes it): the evidence is the window's answers, none older
    recent = [e.leaf_index for e in store.append(answers_from_old_desk(3))]
    again = request(store)
    forged = _forged_answer(store, again, keys["bob"], "bob", LAPTOP)
    (flag,) = get_approval(store, again).answers[0].flags
    assert flag["code"] == "multiple_clients"
    assert [(a["leaf_index"], a["hostname"]) for a in flag["evidence"]["answers"]] == [
        (forged.leaf_index, "laptop"), (state.answers[0].leaf_index, "laptop"), *((n, "old-desk") for n in recent)]
    # a listing (one book for every row, the answers read kept from row to row) gives the same flags
    listed = {s.approval_id: s for s in list_approvals(store)}
    assert listed[again].answers[0].flags == (flag,) and listed[aid].answers[0].flags == ()
    # (the first of the three answers from the old desk is flagged too: bob's laptop answered before it)
    [recent_aid] = {e.payload["approval_id"] for e in store.read_range(recent[0], recent[-1] + 1)}
    assert sorted(s.approval_id for s in list_approvals(store, flagged=True)) == sorted([recent_aid, again])
    assert [f["evidence"]["answers"][1]["leaf_index"] for f in listed[recent_aid].flags] == [state.answers[0].leaf_index]


def test_a_client_that_is_not_text_is_refused_and_one_already_recorded_does_not_break_answering(store, keys):
    """`answer(client=...)` took any dict: an answer whose client had a list for its hostname was written
    when it was the identity's first in the window, and from then on every answer by that identity from
    another client (the CLI's included) failed with `internal error: TypeError: unhashable type: 'list'`
    for a day, as did reading such answers. A client whose fields are not text is now refused
    (`bad_client`), and one already in the log is compared as recorded."""
    from sealbox.approvals import ApprovalError, _utc, _now, get_approval, signed_fields
    from sealbox import EventDraft
    from sealbox.identities import load_key, sign_fields

    aid = request(store)
    size = store.reader().size()
    for client in ({"hostname": ["laptop"], "os_user": "alice"}, {"hostname": "laptop", "user_agent": 5}, "laptop"):
        with pytest.raises(ApprovalError) as info:
            answer(store, aid, "approve", "ok", keys["alice"], client=client)
        assert info.value.code == "bad_client"
    assert store.reader().size() == size
    req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == aid)
    payload = {"approval_id": aid, "binding": req.payload["binding"], "decision": "approve", "identity": "alice",
               "reason": "ok", "answered_at": _utc(_now()), "client": {"hostname": ["laptop"], "os_user": "alice"},
               "run_id": req.run_id}
    payload["signature"] = sign_fields(load_key(keys["alice"]), signed_fields(payload))
    store.append(EventDraft("approval.answered", payload, run_id=req.run_id, principal="alice", step=req.step))
    second = answer(store, request(store), "approve", "ok", keys["alice"], client=LAPTOP)
    (flag,) = second.answers[0].flags
    assert (flag["code"], flag["evidence"]["clients"]) == ("multiple_clients", [
        {"hostname": "laptop", "os_user": "alice", "user_agent": None},
        {"hostname": ["laptop"], "os_user": "alice", "user_agent": None}])
    assert get_approval(store, aid).status == "approved"
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [second.approval_id]
