"""Two gateways on one store (two processes: each its own store handle, upstream and memory) and a
client retrying one held call through each (same run, principal and binding hash).

The gateway that did not resume the request used to answer its retry ``approval apr_…: approval
apr_… was already resumed (by another process?)``: an error in place of the outcome the other
gateway settled. Now it answers the decided outcome read from the record — the denial, or the
approved call's recorded result once the other gateway has recorded it — with no second approval
request, no second ``run.resumed`` and the tool run once.
"""

from __future__ import annotations

import anyio
import pytest

from sealbox.approvals import answer, list_approvals
from sealbox.gateway import Gateway
from sealbox.gateway.holds import DELIVERED_ON_RETRY
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder

from .conftest import connect, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

POLICY = """
version: 1
rules:
  - id: echo-needs-ops
    match: {server: toy, tool: echo}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: slow-needs-ops
    match: {server: toy, tool: slow}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
"""


@pytest.fixture
def alice(store, tmp_path):
    return add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def gateway(tmp_path, hold: float) -> Gateway:
    """A gateway with its own store handle (store=None: it opens the config's store, as a process would)."""
    gw = Gateway(toy_config(tmp_path, extra=f"limits: {{approval_hold_s: {hold}}}\n"), policy=Policy.from_text(POLICY))
    gw.approval_poll = 0.05
    return gw


def counts(store, run_id) -> dict[str, int]:
    kinds = [e.kind for e in store.read_run(run_id)]
    return {k: kinds.count(k) for k in ("tool.call", "approval.requested", "run.resumed", "tool.result")}


async def until(predicate, timeout: float = 15.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


def agent_run(store) -> str:
    run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent")
    run.start()
    return run.run_id


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_retry_through_the_gateway_that_did_not_resume_the_request_gets_its_outcome(
        tmp_path, store, alice, decision):
    run_id = agent_run(store)
    meta = {"sealbox/run_id": run_id}
    gw_a, gw_b = gateway(tmp_path, hold=0.3), gateway(tmp_path, hold=5)
    try:
        async with running(gw_a) as tg_a, running(gw_b) as tg_b, connect(gw_a, tg_a) as via_a, \
                connect(gw_b, tg_b) as via_b:
            first = await via_a.call_tool("toy__echo", {"text": "hello"}, meta=meta)
            assert first.is_error is True and first.meta["sealbox/approval"]["status"] == "pending"
            aid = first.meta["sealbox/approval"]["approval_id"]
            call_id = first.meta["sealbox/approval"]["call_id"]
            await anyio.to_thread.run_sync(answer, store, aid, decision, "checked", alice)

            settled = await via_b.call_tool("toy__echo", {"text": "hello"}, meta=meta)  # B resumes it
            again = await via_a.call_tool("toy__echo", {"text": "hello"}, meta=meta)  # A holds it in memory
    finally:
        gw_a.store.close()
        gw_b.store.close()

    if decision == "approve":
        assert (settled.is_error, text_of(settled)) == (False, "hello")
        assert (again.is_error, text_of(again)) == (False, "hello")
    else:
        denial = (f"denied by rule echo-needs-ops (approval_denied): approval {aid} denied by alice: checked "
                  f"[call {call_id}]")
        assert (settled.is_error, text_of(settled)) == (True, denial)
        assert (again.is_error, text_of(again)) == (True, denial)
        assert again.meta["sealbox/decision"] == {"rule": "echo-needs-ops", "reason_code": "approval_denied",
                                                  "call_id": call_id}
    assert again.meta["sealbox/approval"] == {"approval_id": aid, "status": DELIVERED_ON_RETRY, "run_id": run_id,
                                              "call_id": call_id, "from_record": True}
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1,
                                     "tool.result": 1 if decision == "approve" else 0}
    assert len(toy_log(tmp_path)) == (1 if decision == "approve" else 0)
    assert list_approvals(store, pending=True) == []


async def test_a_retry_while_the_other_gateway_still_runs_the_approved_tool_waits_for_its_result(
        tmp_path, store, alice):
    from dataclasses import replace

    run_id = agent_run(store)
    meta = {"sealbox/run_id": run_id}
    args = {"seconds": 1.0}
    gw_a, gw_b = gateway(tmp_path, hold=0.3), gateway(tmp_path, hold=5)
    results: dict[str, object] = {}
    try:
        async with running(gw_a) as tg_a, running(gw_b) as tg_b, connect(gw_a, tg_a) as via_a, \
                connect(gw_b, tg_b) as via_b:
            first = await via_a.call_tool("toy__slow", args, meta=meta)  # A records it; pending in its memory
            aid = first.meta["sealbox/approval"]["approval_id"]
            gw_a.config = replace(gw_a.config, limits=replace(gw_a.config.limits, approval_hold_s=5))

            async def call(name, client) -> None:
                results[name] = await client.call_tool("toy__slow", args, meta=meta)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "b", via_b)  # B joins the run, finds the request and holds it
                await anyio.sleep(0.3)
                await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
                await until(lambda: toy_log(tmp_path))  # B resumed it and the tool runs upstream now
                tg.start_soon(call, "a", via_a)  # A: resumed elsewhere, its result not recorded yet
    finally:
        gw_a.store.close()
        gw_b.store.close()

    assert (results["b"].is_error, text_of(results["b"])) == (False, "slow done")
    assert (results["a"].is_error, text_of(results["a"])) == (False, "slow done")
    assert results["a"].meta["sealbox/approval"]["from_record"] is True
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}
    assert len(toy_log(tmp_path)) == 1


async def test_a_result_the_record_keeps_redacted_is_not_served_as_if_it_were_the_tools_answer(
        tmp_path, store, alice):
    """In a ``redacted`` store (the default) a result holding a secret is recorded with a marker in its
    place: served from the record, the client would get the marker as the tool's answer. It gets an
    ``isError`` result saying the call ran and where its result is; the tool is not run again."""
    run_id = agent_run(store)
    meta = {"sealbox/run_id": run_id}
    args = {"text": "key sk-abcdefghijklmnopqrstuvwx"}
    gw_a, gw_b = gateway(tmp_path, hold=0.3), gateway(tmp_path, hold=5)
    try:
        async with running(gw_a) as tg_a, running(gw_b) as tg_b, connect(gw_a, tg_a) as via_a, \
                connect(gw_b, tg_b) as via_b:
            first = await via_a.call_tool("toy__echo", args, meta=meta)
            aid, call_id = first.meta["sealbox/approval"]["approval_id"], first.meta["sealbox/approval"]["call_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            settled = await via_b.call_tool("toy__echo", args, meta=meta)
            again = await via_a.call_tool("toy__echo", args, meta=meta)
    finally:
        gw_a.store.close()
        gw_b.store.close()

    assert (settled.is_error, text_of(settled)) == (False, "key sk-abcdefghijklmnopqrstuvwx")
    assert (again.is_error, text_of(again)) == (True, (
        f"approval {aid} was resumed by another process, which ran the call (ok: true); its result cannot be "
        f"served from the record: the record holds redaction markers in its place (content mode redacted) "
        f"(`sealbox runs show {run_id}`); the call is not run again [call {call_id}]"))
    assert again.meta["sealbox/approval"]["from_record"] is True
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}
    assert len(toy_log(tmp_path)) == 1


class _Counted:
    """Counts, on one gateway's own store handle, its write transactions (``append_with``: a claim is
    one, refused or not) and the events of one run its reads return (``read_run``, and a reader's
    ``events`` / ``call_events``)."""

    def __init__(self, store, run_id: str) -> None:
        self.writes = self.run_rows = self.whole_run_reads = 0
        self.run_id = run_id
        append_with, read_run, reader = store.append_with, store.read_run, store.reader

        def counted_append_with(*args, **kwargs):
            self.writes += 1
            return append_with(*args, **kwargs)

        def counted_read_run(run_id, *args, **kwargs):
            out = read_run(run_id, *args, **kwargs)
            self.whole_run_reads += run_id == self.run_id
            self.rows(out)
            return out

        def counted_reader():
            inner = reader()
            for name in ("events", "call_events"):
                if hasattr(inner, name):
                    method = getattr(inner, name)
                    setattr(inner, name, lambda *a, _m=method, **k: self.rows(_m(*a, **k)))
            return inner

        store.append_with, store.read_run, store.reader = counted_append_with, counted_read_run, counted_reader

    def rows(self, events):
        self.run_rows += sum(e.run_id == self.run_id for e in events)
        return events

    def reset(self) -> None:
        self.writes = self.run_rows = self.whole_run_reads = 0


async def test_waiting_for_the_other_gateways_result_takes_no_write_lock_and_reads_only_the_calls_result(
        tmp_path, store, alice):
    """While the other gateway still runs the approved tool, the waiting one used to claim the request
    again on every poll (a write transaction, refused ``already_resumed``) and read the whole run each
    time: about 2 s / 0.05 s polls of both, each slower the longer the run. Now it sees the request
    resumed in the state it read, claims nothing, and each poll reads only the call's ``tool.result``
    (by call id): no write, and the run's 400 notes are never read."""
    from dataclasses import replace

    sdk = Recorder(store, ALLOW_ALL).run(agent="sdk-agent")
    sdk.start()
    for i in range(400):  # a long run
        sdk.note(f"note {i}")
    run_id = sdk.run_id
    meta = {"sealbox/run_id": run_id}
    args = {"seconds": 2.0}
    gw_a, gw_b = gateway(tmp_path, hold=0.3), gateway(tmp_path, hold=10)
    counted = _Counted(gw_a.store, run_id)
    results: dict[str, object] = {}
    try:
        async with running(gw_a) as tg_a, running(gw_b) as tg_b, connect(gw_a, tg_a) as via_a, \
                connect(gw_b, tg_b) as via_b:
            first = await via_a.call_tool("toy__slow", args, meta=meta)  # A records it; pending in its memory
            aid = first.meta["sealbox/approval"]["approval_id"]
            gw_a.config = replace(gw_a.config, limits=replace(gw_a.config.limits, approval_hold_s=10))

            async def call(name, client) -> None:
                results[name] = await client.call_tool("toy__slow", args, meta=meta)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "b", via_b)  # B joins the run, finds the request and holds it
                await anyio.sleep(0.3)
                await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
                await until(lambda: toy_log(tmp_path))  # B resumed it and the tool runs upstream now
                counted.reset()
                tg.start_soon(call, "a", via_a)  # A: resumed elsewhere, its result not recorded for ~2 s
    finally:
        gw_a.store.close()
        gw_b.store.close()

    assert (results["a"].is_error, text_of(results["a"])) == (False, "slow done")
    assert results["a"].meta["sealbox/approval"]["from_record"] is True
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}
    assert len(toy_log(tmp_path)) == 1
    # A's retry: no write transaction at all, the run never read whole; its rows read are the request's
    # state once (approval.requested, approval.answered, run.resumed) and the call's tool.result once
    assert (counted.writes, counted.whole_run_reads, counted.run_rows) == (0, 0, 4)


#: A genuine tool output that quotes how a record shows redaction markers (as sealbox.redaction's
#: docstring does): no marker the store wrote, nothing redacted from it.
QUOTING = ('a record shows a redacted value as {"$redacted": "hmac-sha256:<hex>"}, or inside a string as '
           '⟦redacted:hmac-sha256:<hex>⟧; "$redacted" is the tag')


async def test_a_result_that_only_quotes_the_marker_text_is_served_from_the_record(tmp_path, store, alice):
    """A result holding the text ``$redacted`` / ``⟦redacted:`` but no marker the store wrote is the
    tool's own answer: served. It used to be refused as if the record held redaction markers."""
    run_id = agent_run(store)
    meta = {"sealbox/run_id": run_id}
    args = {"text": QUOTING}
    gw_a, gw_b = gateway(tmp_path, hold=0.3), gateway(tmp_path, hold=5)
    try:
        async with running(gw_a) as tg_a, running(gw_b) as tg_b, connect(gw_a, tg_a) as via_a, \
                connect(gw_b, tg_b) as via_b:
            first = await via_a.call_tool("toy__echo", args, meta=meta)
            aid = first.meta["sealbox/approval"]["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            settled = await via_b.call_tool("toy__echo", args, meta=meta)
            again = await via_a.call_tool("toy__echo", args, meta=meta)
    finally:
        gw_a.store.close()
        gw_b.store.close()

    assert (settled.is_error, text_of(settled)) == (False, QUOTING)
    assert (again.is_error, text_of(again)) == (False, QUOTING)
    assert again.meta["sealbox/approval"]["from_record"] is True
    assert len(toy_log(tmp_path)) == 1


def test_holds_marker_finds_only_the_markers_the_store_writes():
    import base64

    from sealbox.canonical import encode
    from sealbox.gateway.server import _holds_marker

    digest = "hmac-sha256:" + "0123456789abcdef" * 4
    real = [
        {"content": [{"type": "text", "text": {"$redacted": digest}}]},  # a whole value redacted
        {"content": [{"type": "text", "text": f"key ⟦redacted:{digest}⟧ used"}]},  # inside a string
        {"structuredContent": {"$esc": {"$ref": f"⟦redacted:{digest}⟧"}}},  # inside a user's $-keyed dict
        {"_meta": {f"k⟦redacted:{digest}⟧": 1}},  # in a key
        {"raw": {"$bytes": base64.b64encode(f"b ⟦redacted:{digest}⟧".encode()).decode()}},  # inside bytes
        {"$redacted": digest},  # hashes-only: the whole result
    ]
    genuine = [
        encode({"content": [{"type": "text", "text": QUOTING}]}),
        encode({"structuredContent": {"$redacted": digest}}),  # a tool's own dict: stored as {"$esc": {...}}
        encode({"structuredContent": {"$redacted": "x", "note": "⟦redacted:hmac-sha256:12⟧"}}),
        encode({"raw": "⟦redacted:hmac-sha256:<hex>⟧".encode()}),
        {"content": [{"type": "text", "text": {"$redacted": "not a digest"}}]},
    ]
    assert [_holds_marker(v) for v in real] == [True] * len(real)
    assert [_holds_marker(v) for v in genuine] == [False] * len(genuine)


@pytest.mark.parametrize("size", ["inline", "blob"])
async def test_a_result_served_from_the_record_is_what_the_tool_returned_not_its_stored_form(
        tmp_path, store, alice, size):
    """structuredContent holding a "$"-keyed dict is stored escaped ({"$esc": {...}}), and a large one
    in a blob ({"$blob": ...}): the retry through the other gateway gets the dict the tool returned,
    as the gateway that ran it answered. It used to get {"$esc": {"$schema": ..., "text": ...}}."""
    run_id = agent_run(store)
    meta = {"sealbox/run_id": run_id}
    text = "hello" if size == "inline" else "x" * 20_000
    args = {"text": text}

    def structured_gateway(hold: float) -> Gateway:
        gw = Gateway(toy_config(tmp_path, extra=f"limits: {{approval_hold_s: {hold}}}\n",
                                env={"TOY_STRUCTURED": "1"}), policy=Policy.from_text(POLICY))
        gw.approval_poll = 0.05
        return gw

    gw_a, gw_b = structured_gateway(0.3), structured_gateway(5)
    try:
        async with running(gw_a) as tg_a, running(gw_b) as tg_b, connect(gw_a, tg_a) as via_a, \
                connect(gw_b, tg_b) as via_b:
            first = await via_a.call_tool("toy__echo", args, meta=meta)
            aid = first.meta["sealbox/approval"]["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            settled = await via_b.call_tool("toy__echo", args, meta=meta)
            again = await via_a.call_tool("toy__echo", args, meta=meta)
    finally:
        gw_a.store.close()
        gw_b.store.close()

    [stored] = [e.payload["result"] for e in store.read_run(run_id) if e.kind == "tool.result"]
    stored_sc = stored["structuredContent"]
    if size == "inline":
        assert stored_sc == {"$esc": {"$schema": "urn:toy:echo", "text": text}}  # the stored form
    else:
        assert "$blob" in str(stored)
    assert (settled.is_error, text_of(settled), settled.structured_content) == (
        False, text, {"$schema": "urn:toy:echo", "text": text})
    assert again.meta["sealbox/approval"]["from_record"] is True
    assert (again.is_error, text_of(again), again.structured_content) == (
        False, text, {"$schema": "urn:toy:echo", "text": text})
    assert len(toy_log(tmp_path)) == 1
