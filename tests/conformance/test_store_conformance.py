"""Behaviour every Store backend must have (run once per backend)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from sealbox import EventDraft, InvalidEventError, SYSTEM_RUN_ID, verify_store
from sealbox.blobs import INLINE_LIMIT, check_blob
from sealbox.canonical import canonical_bytes
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import verify_checkpoint
from sealbox.store import Store

FP = "sha256:" + "ab" * 32


def started(run_id: str, agent: str = "bot", **extra) -> EventDraft:
    payload = {"agent": agent, "snapshot": None, "parent_run_id": None, "labels": {}, "policy": {"fingerprint": FP, "name": "t"}}
    payload.update(extra)
    return EventDraft("run.started", payload, run_id=run_id, principal=f"agent:{agent}")


def call(run_id: str, call_id: str, arguments, step: str | None = None) -> list[EventDraft]:
    return [
        EventDraft("tool.call", {"call_id": call_id, "server": "db", "tool": "read_query", "exposed": "db__read_query",
                                 "arguments": arguments, "grant": "implicit:agent:bot"}, run_id=run_id, principal="agent:bot", step=step),
        EventDraft("policy.decision", {"call_id": call_id, "effect": "allow", "reason_code": "policy_allow", "rule": "r1",
                                       "reason": "allowed", "policy_fingerprint": FP, "eval_us": 3},
                   run_id=run_id, principal="agent:bot", step=step),
    ]


def note(run_id: str, text: str) -> EventDraft:
    return EventDraft("note", {"text": text}, run_id=run_id, principal="agent:bot")


def test_store_satisfies_the_protocol_and_has_no_update_or_delete(store):
    assert isinstance(store, Store)
    names = {n for n in dir(store) if not n.startswith("_")}
    assert not {n for n in names if any(w in n for w in ("update", "delete", "remove", "truncate"))}


def test_a_new_store_has_a_started_system_run_and_a_signed_checkpoint(store):
    events = store.read_run(SYSTEM_RUN_ID)
    assert [e.kind for e in events] == ["run.started"]
    assert events[0].leaf_index == 0 and events[0].run_seq == 1 and events[0].prev is None
    cp = verify_checkpoint(store.latest_checkpoint().note, store.pinned_vkey())
    assert (cp.origin, cp.size, cp.root) == (store.origin, 1, store.root(1))


def test_hashed_bytes_are_the_canonical_envelope_and_the_leaf_hash_is_rfc9162(store):
    [ev] = store.append(started("r1"))
    env = ev.envelope()
    assert ev.raw == canonical_bytes(env)
    assert set(json.loads(ev.raw)) == {"v", "run_id", "run_seq", "step", "kind", "ts", "principal", "payload", "prev"}
    assert ev.leaf_hash == "sha256:" + hashlib.sha256(b"\x00" + ev.raw).hexdigest()
    assert ev.v == 1 and ev.step == "1" and ev.ts.endswith("Z") and len(ev.ts) == 27


def test_each_run_is_a_hash_chain_with_contiguous_run_seq(store):
    store.append(started("r1"))
    store.append(started("r2"))
    store.append(call("r1", "c1", {"q": 1}, step="2"))
    store.append(note("r2", "hello"))
    r1 = store.read_run("r1")
    assert [e.run_seq for e in r1] == [1, 2, 3]
    assert [e.kind for e in r1] == ["run.started", "tool.call", "policy.decision"]
    assert r1[1].prev == r1[0].leaf_hash and r1[2].prev == r1[1].leaf_hash
    assert [e.step for e in r1] == ["1", "2", "2"]
    assert [e.leaf_index for e in store.read_run("r2")] == [2, 5]


def test_append_of_a_list_is_atomic(store):
    store.append(started("r1"))
    before = store.size()
    bad = call("r1", "c1", {"q": 1}) + [EventDraft("tool.result", {"call_id": "c1"}, run_id="r1")]
    with pytest.raises(InvalidEventError, match="tool.result"):
        store.append(bad)
    assert store.size() == before
    assert [e.kind for e in store.read_run("r1")] == ["run.started"]


@pytest.mark.parametrize("draft, message", [
    (EventDraft("tool.teleport", {}, run_id="r1"), "unknown event kind"),
    (EventDraft("note", {"text": 5}, run_id="r1"), "note"),
    (EventDraft("note", {}, run_id="r1"), "text"),
    (EventDraft("note", {"text": "x"}, run_id="r1", step="a.b"), "step"),
    (EventDraft("note", {"text": "x"}, run_id="r1", principal=""), "principal"),
    (EventDraft("note", {"text": "x"}, run_id="never-started"), "has not started"),
    (EventDraft("run.started", {"agent": "x"}, run_id="r1"), "run.started"),
])
def test_invalid_events_raise_and_write_nothing(store, draft, message):
    store.append(started("r1"))
    before = store.size()
    with pytest.raises(InvalidEventError, match=message):
        store.append(draft)
    assert store.size() == before


def test_nothing_follows_run_ended_and_a_run_starts_once(store):
    store.append(started("r1"))
    with pytest.raises(InvalidEventError, match="already started"):
        store.append(started("r1"))
    store.append(EventDraft("run.ended", {"status": "ok"}, run_id="r1"))
    with pytest.raises(InvalidEventError, match="ended"):
        store.append(note("r1", "late"))


def test_read_range_and_get_event_follow_leaf_order(store):
    store.append(started("r1"))
    store.append([note("r1", f"n{i}") for i in range(5)])
    events = store.read_range(2, 5)
    assert [e.leaf_index for e in events] == [2, 3, 4]
    assert [e.payload["text"] for e in events] == ["n0", "n1", "n2"]
    assert store.get_event(6).payload["text"] == "n4"


def test_roots_and_proofs_verify_against_recomputed_leaves(store):
    store.append(started("r1"))
    store.append([note("r1", str(i)) for i in range(40)])
    leaves = [bytes.fromhex(e.leaf_hash[7:]) for e in store.read_range(0, store.size())]
    n = len(leaves)
    assert n == 42
    for size in (1, 2, 7, 8, 33, n):
        assert store.root(size) == merkle.root_from_leaves(leaves[:size])
    for index in (0, 1, 17, n - 1):
        merkle.verify_inclusion(leaves[index], index, n, store.inclusion_proof(index, n), store.root())
    for size1 in (1, 5, 16, 41):
        merkle.verify_consistency(size1, n, store.consistency_proof(size1, n), store.root(size1), store.root(n))


def test_checkpoints_are_issued_every_n_events_and_on_close(make_store):
    store = make_store()
    store.append(started("r1"))
    store.append([note("r1", str(i)) for i in range(9)])  # 11 events: one checkpoint due
    sizes = [c.tree_size for c in store.checkpoints()]
    assert sizes == [1, 11]
    store.append(note("r1", "tail"))
    store.close()
    reopened = type(store).open(store.path, readonly=True)
    assert [c.tree_size for c in reopened.checkpoints()] == [1, 11, 12]
    for cp in reopened.checkpoints():
        assert verify_checkpoint(cp.note, reopened.pinned_vkey()).root == reopened.root(cp.tree_size)
    reopened.close()


def test_large_content_goes_to_a_blob_stored_once(store):
    store.append(started("r1"))
    big = {"query": "SELECT " + "x" * 2000}
    store.append(call("r1", "c1", big))
    store.append(call("r1", "c2", big))
    evs = store.read_run("r1")
    refs = [evs[i].payload["arguments"]["query"] for i in (1, 3)]
    assert refs[0] == refs[1] and set(refs[0]) == {"$blob"}
    assert store.resolve(evs[1].payload["arguments"]) == big
    blobs = list(store.iter_blobs())
    assert len(blobs) == 1
    ref, salt, content = blobs[0]
    assert content == canonical_bytes(big["query"])
    assert salt == hmac.new(store._secret, content, hashlib.sha256).digest()
    assert ref == "sha256:" + hashlib.sha256(salt + content).hexdigest() and check_blob(ref, salt, content)


def test_small_content_stays_inline(store):
    store.append(started("r1"))
    store.append(call("r1", "c1", {"q": "a" * (INLINE_LIMIT - 20)}))
    assert store.read_run("r1")[1].payload["arguments"] == {"q": "a" * (INLINE_LIMIT - 20)}
    assert list(store.iter_blobs()) == []


def test_a_conversation_resent_every_turn_grows_blob_storage_linearly(store):
    store.append(started("r1"))
    messages, sizes = [], []
    for turn in range(60):
        messages.append({"role": "user" if turn % 2 else "assistant", "content": f"turn {turn}: " + "lorem ipsum " * 30})
        store.append(EventDraft("state.saved", {"state": {"messages": list(messages)}}, run_id="r1"))
        sizes.append(sum(len(c or b"") for _, _, c in store.iter_blobs()))
    per_turn = [b - a for a, b in zip(sizes, sizes[1:])]
    assert max(per_turn[-10:]) <= 2 * max(per_turn[:10])  # constant cost per turn, not growing with history
    assert store.resolve(store.read_run("r1")[-1].payload["state"]) == {"messages": messages}


def test_non_json_content_is_encoded_not_lost(store):
    import datetime

    store.append(started("r1"))
    cyclic: list = []
    cyclic.append(cyclic)
    args = {"when": datetime.datetime(2026, 1, 2, 3, 4, 5), "raw": b"\xff\x00", "nan": float("nan"), "loop": cyclic}
    store.append(call("r1", "c1", args))
    stored = store.read_run("r1")[1].payload["arguments"]
    assert stored["when"] == {"$datetime_naive": "2026-01-02T03:04:05.000000"} or "$datetime_naive" in stored["when"]
    assert stored["raw"] == {"$bytes": "/wA="}
    assert stored["nan"] == {"$float": "NaN"}
    assert stored["loop"][0]["$lossy"]["reason"] == "cycle"


def test_verify_is_clean_on_a_busy_store(store):
    for r in range(5):
        store.append(started(f"r{r}"))
        for i in range(7):
            store.append(call(f"r{r}", f"c{i}", {"q": "y" * (300 * i)}))
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
    assert report.events == store.size() and report.runs == 6


def test_the_events_append_returns_are_the_events_read_back(store):
    """append builds its Event without the dataclass __init__ (store/base._new_event): the result must
    be the same frozen dataclass, field for field, as the one read back."""
    import dataclasses

    placed = store.append([started("r-same"), note("r-same", "one"), *call("r-same", "c1", {"q": "x" * 600})])
    read = store.read_range(placed[0].leaf_index, placed[-1].leaf_index + 1)
    assert placed == read
    for a, b in zip(placed, read):
        assert type(a) is type(b)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert set(vars(a)) == {f.name for f in dataclasses.fields(a)}
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.kind = "note"


@pytest.mark.parametrize("sql", [
    "UPDATE events SET kind = 'note' WHERE leaf_index = 1",
    "DELETE FROM events WHERE leaf_index = 1",
    "UPDATE tree_nodes SET level = level",
    "DELETE FROM tree_nodes",
    "UPDATE checkpoints SET note = 'x'",
    "DELETE FROM checkpoints",
    "DELETE FROM runs",
])
def test_the_database_itself_refuses_to_change_or_delete_evidence(store, sql, raw_sql):
    store.append(started("r1"))
    store.append([note("r1", str(i)) for i in range(20)])  # 22 leaves: a stored tree node (level 4)
    store.issue_checkpoint()
    before = (store.read_range(0, store.size()), store.checkpoints(), [tuple(n) for n in store.iter_nodes()])
    assert before[2], "no stored tree node to protect"
    with pytest.raises(Exception, match="append-only|is append-only"):
        raw_sql(store, sql)
    assert (store.read_range(0, store.size()), store.checkpoints(), [tuple(n) for n in store.iter_nodes()]) == before


def test_emptying_a_table_at_once_is_refused(store, raw_sql):
    """PostgreSQL: TRUNCATE (which fires no DELETE trigger) has its own triggers. SQLite has no
    TRUNCATE; its equivalent, an unqualified DELETE (the "truncate optimization"), is refused by
    the DELETE triggers, which disable that optimization."""
    store.append(started("r1"))
    store.append([note("r1", str(i)) for i in range(20)])  # 21 leaves: stored tree nodes
    store.issue_checkpoint()
    size, checkpoints = store.size(), len(store.checkpoints())
    # on SQLite an unqualified DELETE of an empty table fires no trigger: only tables holding rows are tried
    tables = ("events", "tree_nodes", "checkpoints", "runs") + (("snapshots", "blobs") if store.backend == "postgres" else ())
    for table in tables:
        if store.backend == "postgres":
            with pytest.raises(Exception, match=f"sealbox: {table} is append-only \\(TRUNCATE refused\\)"):
                raw_sql(store, f"TRUNCATE {table} CASCADE")
        else:
            with pytest.raises(Exception, match="append-only"):
                raw_sql(store, f"DELETE FROM {table}")
    assert (store.size(), len(store.checkpoints())) == (size, checkpoints) == (22, checkpoints) and checkpoints >= 2


def _append_in_process(path: str, name: str, count: int, queue) -> None:
    from sealbox.store import open_store

    try:
        store = open_store(path)
        store.append(started(name))
        for i in range(count):
            store.append(note(name, f"{name}-{i}"))
        store.close()
        queue.put(("ok", name))
    except BaseException as exc:  # reported to the test, which fails on it
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def test_two_processes_appending_at_once_lose_nothing_and_keep_each_runs_order(store):
    import multiprocessing

    path = str(store.path)
    store.close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_append_in_process, args=(path, f"p{i}", 40, queue)) for i in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert sorted(results) == [("ok", "p0"), ("ok", "p1")]
    reopened = type(store).open(path, readonly=True)
    try:
        assert reopened.size() == 1 + 2 * 41
        for name in ("p0", "p1"):
            events = reopened.read_run(name)
            assert [e.run_seq for e in events] == list(range(1, 42))
            assert [e.payload["text"] for e in events[1:]] == [f"{name}-{i}" for i in range(40)]
            assert all(b.prev == a.leaf_hash for a, b in zip(events, events[1:]))
        assert [e.leaf_index for e in reopened.read_range(0, reopened.size())] == list(range(83))
        report = verify_store(reopened)
        assert report.ok, [p.line() for p in report.problems]
    finally:
        reopened.close()


def test_a_store_that_lost_signed_writes_refuses_to_append(store, raw_sql):
    from sealbox.errors import StoreRolledBackError
    store.append(started("r1"))
    store.append([note("r1", str(i)) for i in range(5)])
    signed = store.issue_checkpoint()
    assert signed.tree_size == 7
    path = store.path
    store.close()
    raw_sql(store, "DELETE FROM events WHERE leaf_index >= 5", below_triggers=True)  # a restore from an older backup
    again = type(store).open(path)
    try:
        assert again.size() == 5
        with pytest.raises(StoreRolledBackError, match=r"^the store holds 5 events but its newest signed checkpoint "
                                                       r"covers 7: .*refusing to append"):
            again.append(note("r1", "after the loss"))
        assert again.size() == 5
    finally:
        again.close()


def test_many_threads_appending_to_one_store_lose_nothing(store):
    import threading

    errors: list[str] = []

    def work(name: str) -> None:
        try:
            store.append(started(name))
            for i in range(25):
                store.append(note(name, f"{name}-{i}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert store.size() == 1 + 8 * 26
    for i in range(8):
        assert [e.payload["text"] for e in store.read_run(f"t{i}")[1:]] == [f"t{i}-{n}" for n in range(25)]
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


def test_verify_finds_the_calls_made_under_a_grant_on_every_backend(store):
    """verify's look-up of the calls naming a compromised grant (verify._store_calls) runs SQLite's SQL
    on SQLite and the store's reader elsewhere: the same calls, each marked "deny" when not let through."""
    from sealbox.verify import _store_calls

    store.append(started("r1"))
    for call_id, grant, effect in (("c1", "g-1", "allow"), ("c2", "g-2", "allow"), ("c3", "g-1", "deny")):
        store.append([
            EventDraft("tool.call", {"call_id": call_id, "server": "db", "tool": "q", "exposed": "db__q",
                                     "arguments": {}, "grant": grant}, run_id="r1", principal="agent:bot"),
            EventDraft("policy.decision", {"call_id": call_id, "effect": effect, "reason_code": f"policy_{effect}",
                                           "rule": "r", "reason": "r", "policy_fingerprint": FP, "eval_us": 1},
                       run_id="r1", principal="agent:bot")])
    assert _store_calls(store, {"g-1": {}}) == [(2, "r1", "c1", "g-1", None), (6, "r1", "c3", "g-1", "deny")]


def _changed_below_paths(store):
    """Remove the checkpoint file under an open writer holding unsigned events: what signs next finds
    the store changed below Sealbox."""
    store.append(started("r1"))
    (store.path / "checkpoint").unlink()
    return (f"{store.path / 'checkpoint'} is missing though the store holds signed checkpoints: it keeps the newest "
            "one, and without it a database restored from an older backup cannot be told from the log, so "
            "appending could fork it; refusing to append or sign (run `sealbox verify`; if the database is known to be "
            "current, put the file back from a copy; see docs/storage.md, \"The checkpoint file\")")


def test_a_store_changed_below_sealbox_raises_store_error_from_issue_checkpoint(store):
    """The signer's private error never reaches a caller: issue_checkpoint raises the documented
    StoreError itself (not a subclass), and later appends are refused before they write."""
    from sealbox.errors import StoreError
    message = _changed_below_paths(store)
    with pytest.raises(StoreError) as caught:
        store.issue_checkpoint()
    assert type(caught.value) is StoreError
    assert str(caught.value) == message
    before = store.size()
    with pytest.raises(StoreError) as again:
        store.append(note("r1", "after"))
    assert type(again.value) is StoreError and str(again.value) == message
    assert store.size() == before


def test_a_store_changed_below_sealbox_raises_store_error_from_close(store):
    from sealbox.errors import StoreError
    message = _changed_below_paths(store)
    with pytest.raises(StoreError) as caught:
        store.close()
    assert type(caught.value) is StoreError
    assert str(caught.value) == message
    store.close()  # closed already: nothing more


# A NUL character (\x00) in an identifier: PostgreSQL text cannot hold one, so the SQLite store recorded
# what the PostgreSQL store refused (as "PostgreSQL refused the write"). Both refuse it up front now.
def _started_with(run_id="r2", agent="bot", principal="agent:bot", **payload):
    draft = started(run_id, agent, **payload)
    return EventDraft(draft.kind, draft.payload, run_id=run_id, principal=principal)


def _call_with(**fields):
    [tc, dec] = call("r1", "c9", {"q": 1})
    return [EventDraft(tc.kind, {**tc.payload, **fields}, run_id="r1", principal="agent:bot"), dec]


@pytest.mark.parametrize("drafts, message", [
    (lambda: _started_with(agent="b\x00t"), "run.started: agent 'b\\x00t' holds a NUL character"),
    (lambda: _started_with(principal="agent:b\x00t"), "principal 'agent:b\\x00t' holds a NUL character"),
    (lambda: _started_with(run_id="r\x002"), "run_id 'r\\x002' holds a NUL character"),
    (lambda: _started_with(parent_run_id="r\x001"), "run.started: parent_run_id 'r\\x001' holds a NUL character"),
    (lambda: _call_with(server="d\x00b"), "tool.call: server 'd\\x00b' holds a NUL character"),
    (lambda: _call_with(tool="read\x00"), "tool.call: tool 'read\\x00' holds a NUL character"),
    (lambda: _call_with(call_id="c\x009"), "tool.call: call_id 'c\\x009' holds a NUL character"),
    (lambda: [note("r1", "first"), EventDraft("note", {"text": "x"}, run_id="r1", principal="\x00")],
     "principal '\\x00' holds a NUL character"),
], ids=["agent", "principal", "run_id", "parent", "server", "tool", "call_id", "batch"])
def test_an_identifier_holding_a_nul_is_refused_on_every_backend_and_nothing_is_written(store, drafts, message):
    store.append(started("r1"))
    before = (store.size(), [e.raw for e in store.read_run("r1")])
    with pytest.raises(InvalidEventError) as caught:
        store.append(drafts())
    assert str(caught.value) == (f"{message} (\\x00), which an identifier in the record cannot hold (PostgreSQL "
                                 "text cannot): nothing was written")
    assert (store.size(), [e.raw for e in store.read_run("r1")]) == before
    assert verify_store(store).ok


def test_a_nul_inside_arguments_labels_and_text_is_recorded_on_every_backend(store):
    """Values only the hashed bytes hold (canonical JSON: NUL is \\u0000) are kept: content, a note's
    text, and a run's labels (which live in the run.started payload on both backends)."""
    store.append(started("r1", labels={"te\x00am": "r\x00ed"}))
    store.append(call("r1", "c1", {"q": "a\x00b", "k\x00": ["\x00"]}))
    store.append(EventDraft("tool.result", {"call_id": "c1", "ok": True, "result": "r\x00", "duration_us": 1},
                            run_id="r1", principal="agent:bot"))
    store.append(note("r1", "a note \x00"))
    events = store.read_run("r1")
    assert store.resolve(events[1].payload["arguments"]) == {"q": "a\x00b", "k\x00": ["\x00"]}
    assert store.resolve(events[3].payload["result"]) == "r\x00"
    assert events[4].payload["text"] == "a note \x00"
    assert b'"a \\u0000note"' not in events[4].raw and b'"text":"a note \\u0000"' in events[4].raw  # JSON's escape
    assert [r["labels"] for r in store.query_runs() if r["run_id"] == "r1"] == [{"te\x00am": "r\x00ed"}]
    (row,) = [r for r in store.query_calls(run_id="r1") if r["call_id"] == "c1"]
    assert row["arguments"] == {"q": "a\x00b", "k\x00": ["\x00"]}
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
