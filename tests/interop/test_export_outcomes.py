"""The Parquet and OTLP exports give a call held for approval and without a result the outcome
``sealbox calls`` gives it (:func:`sealbox.approvals.call_outcome`): ``denied``, ``expired``,
``abandoned`` (its run ended without resuming it), ``held`` (it may still run). The Parquet export
reported an expired call as ``denied`` and an abandoned one as ``held``; the OTLP export wrote
``pending`` for an abandoned (and a still held) call."""

from __future__ import annotations

import time

import pytest
from identity_testkit import admin_key

import sealbox
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending, answer
from sealbox.identities import add_identity
from sealbox.interop.otlp import build_otlp
from sealbox.interop.parquet import call_rows
from sealbox.policy import Policy
from sealbox.recorder import Recorder

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], expires: EXPIRES}
"""


def _suspend(rec: Recorder, call_id: str) -> tuple[str, str]:
    with pytest.raises(ApprovalPending) as pending:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"query": f"DELETE FROM t -- {call_id}"}, lambda query: "ok",
                          call_id=call_id)
    return pending.value.run_id, pending.value.approval_id


def _resume(rec: Recorder, run_id: str) -> str:
    with rec.resume(run_id, tools={("db", "write_query"): lambda query: "ok"}) as run:
        [call] = run.resumed_calls
        return call.outcome


def _end(store, run_id: str) -> None:
    """The run ends (cancelled) while its call still waits for its approval."""
    top = max(int(e.step.split(".")[0]) for e in store.read_run(run_id))
    store.append(EventDraft("run.ended", {"status": "cancelled"}, run_id=run_id, principal="agent:bot",
                            step=str(top + 1)))


@pytest.fixture
def recorded(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    short = Recorder(store, policy=Policy.from_text(POLICY.replace("EXPIRES", "2s")), approvals="suspend")
    long = Recorder(store, policy=Policy.from_text(POLICY.replace("EXPIRES", "1h")), approvals="suspend")
    runs = {}
    runs["c-denied"], denied = _suspend(long, "c-denied")
    answer(store, denied, "deny", "not today", key)
    assert _resume(long, runs["c-denied"]) == "denied"
    runs["c-refused"], refused = _suspend(long, "c-refused")  # denied, its run not resumed
    answer(store, refused, "deny", "no", key)
    runs["c-expired"], _ = _suspend(short, "c-expired")
    runs["c-lapsed"], _ = _suspend(short, "c-lapsed")  # expired, its run not resumed
    time.sleep(2.2)
    assert _resume(short, runs["c-expired"]) == "expired"
    runs["c-abandoned"], _ = _suspend(long, "c-abandoned")
    _end(store, runs["c-abandoned"])
    runs["c-approved-unresumed"], approved = _suspend(long, "c-approved-unresumed")
    answer(store, approved, "approve", "fine", key)
    _end(store, runs["c-approved-unresumed"])
    runs["c-waiting"], _ = _suspend(long, "c-waiting")
    yield store, runs
    store.close()


EXPECTED = {
    "c-denied": "denied", "c-refused": "denied", "c-expired": "expired", "c-lapsed": "expired",
    "c-abandoned": "abandoned", "c-approved-unresumed": "abandoned", "c-waiting": "held",
}


def test_calls_gives_these_outcomes(recorded):
    store, _ = recorded
    assert {r["call_id"]: r["outcome"] for r in store.query_calls()} == EXPECTED


def test_parquet_rows_give_the_outcome_sealbox_calls_gives(recorded):
    store, runs = recorded
    rows = call_rows(store, list(runs.values()))
    assert {r["call_id"]: (r["outcome"], r["ok"]) for r in rows} == {k: (v, None) for k, v in EXPECTED.items()}
    assert {r["call_id"]: r["approval"] for r in rows} == {
        "c-denied": "denied", "c-refused": "denied", "c-expired": "expired", "c-lapsed": "expired",
        "c-abandoned": "closed", "c-approved-unresumed": "approved", "c-waiting": "pending"}
    assert all("outcome_unknown" not in r["flags"] for r in rows)


def test_otlp_tool_spans_give_the_outcome_sealbox_calls_gives(recorded):
    store, runs = recorded
    batch = build_otlp(store, list(runs.values()))
    got = {s.attributes["gen_ai.tool.call.id"]: s.attributes["sealbox.tool.outcome"] for s in batch.spans
           if s.attributes.get("gen_ai.operation.name") == "execute_tool"}
    assert got == EXPECTED


@pytest.mark.parametrize("outcome", ["denied", "expired", "held", "abandoned", "unknown", "pending"])
def test_the_otlp_importer_takes_every_not_run_outcome_as_not_run(outcome):
    """An exported ``held`` or ``abandoned`` call is imported without a result, as ``pending`` was."""
    from sealbox.interop.importers.sealbox_otlp import read_tool
    from sealbox.interop.importers.spans import Span

    s = Span(id="1", parent=None, name="execute_tool write_query", order=0, role="tool", tool_name="write_query",
             call_id="c-1")
    read_tool(s, {"sealbox.run_id": "r", "sealbox.tool.outcome": outcome}, [])
    assert (s.ran, s.extra["sealbox"]["outcome"]) == (False, outcome)


def test_parquet_reads_a_calls_request_in_its_own_run_when_another_run_holds_the_same_id(tmp_path):
    """A request id also written in another (earlier) run: the Parquet row of a call gives its own
    run's request, not the first the store holds under that id (it gave the other run's state)."""
    store = sealbox.init_store(tmp_path / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    rec = Recorder(store, policy=Policy.from_text(POLICY.replace("EXPIRES", "1h")), approvals="suspend")
    first, aid = _suspend(rec, "c-first")
    answer(store, aid, "approve", "fine", key)
    _end(store, first)
    # a second run writes the same events up to its request, under the same approval id
    second = "run-copy-of-first"
    for e in store.read_run(first):
        if e.kind in ("run.started", "tool.call", "policy.decision", "approval.requested"):
            store.append(EventDraft(e.kind, e.payload, run_id=second, principal=e.principal, step=e.step))
    [row] = call_rows(store, [second])
    assert (row["approval"], row["outcome"]) == ("pending", "held")
    [row] = call_rows(store, [first])
    assert (row["approval"], row["outcome"]) == ("approved", "abandoned")
    store.close()
