"""A held call whose client gave up (cancelled, timed out, disconnected) before its outcome (issue 6, point 3).

The gateway still settles the request when an approver answers; the outcome (the approved call's
result, or the denial) is kept until it reaches a live request, and a retry with the same run,
principal and binding hash is answered that outcome (``_meta["sealbox/approval"].status =
"delivered_on_retry"``): no second approval request, the tool never runs twice. Once delivered, an
identical later call is a new call (a new request). Real stores, the toy upstream (its log counts
executions), real MCP client sessions, signed answers from approver identities.
"""

from __future__ import annotations

import dataclasses

import json

import anyio
import httpx2
import pytest

from sealbox.approvals import answer, list_approvals
from sealbox.gateway import Gateway
from sealbox.gateway.holds import DELIVERED_ON_RETRY, MAX_KEPT_BYTES, Pending, Undelivered
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policy import Policy

from .conftest import connect, gateway_runs, running, text_of, toy_config, toy_log

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
  - id: rest-ok
    effect: allow
"""
TOKEN = "t0ken-for-the-tests-0123456789"


@pytest.fixture
def alice(store, tmp_path):
    return add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def gateway(tmp_path, store, hold: float, extra: str = "", limits: str = "") -> Gateway:
    gw = Gateway(toy_config(tmp_path, extra=f"limits: {{approval_hold_s: {hold}{limits}}}\n{extra}"), store=store,
                 policy=Policy.from_text(POLICY))
    gw.approval_poll = 0.05
    return gw


def short_hold(gw: Gateway, seconds: float) -> None:
    """Hold the gateway's next calls ``seconds`` only: a test holds its first call long (60 s, ended by the
    approval) so that a loaded host cannot make it give up before it is answered, then a short hold for a
    later call only expected to come back "pending"."""
    limits = dataclasses.replace(gw.config.limits, approval_hold_s=seconds)
    gw.config = dataclasses.replace(gw.config, limits=limits)


def counts(store, run_id) -> dict[str, int]:
    kinds = [e.kind for e in store.read_run(run_id)]
    return {k: kinds.count(k) for k in ("tool.call", "approval.requested", "run.resumed", "tool.result")}


async def until(predicate, timeout: float = 15.0, what: str = "") -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


def pending_ids(store) -> list[str]:
    return [s.approval_id for s in list_approvals(store, pending=True)]


def has_result(store, run_id) -> bool:
    return any(e.kind == "tool.result" for e in store.read_run(run_id))


def served(result) -> dict:
    return result.meta["sealbox/approval"]


async def test_a_call_cancelled_while_its_approved_tool_runs_gets_nothing_and_its_retry_gets_the_result(
        tmp_path, store, alice):
    """The client cancels (what the SDK does on its read timeout) while the approved tool runs upstream:
    the forwarding is shielded, the result is recorded, nothing reaches the cancelled request, so the
    result is kept. Another principal joining the run is not given it; the same client's retry is,
    without a second request or execution; after that, the same call is a new call."""
    gw = gateway(tmp_path, store, hold=2)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            scope = anyio.CancelScope()
            first: list = []

            async def call() -> None:
                with scope:
                    first.append(await client.call_tool("toy__slow", {"seconds": 1.0}))

            tg.start_soon(call)
            await until(lambda: pending_ids(store))
            [aid] = pending_ids(store)
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            await until(lambda: toy_log(tmp_path))  # the tool runs upstream now
            scope.cancel()  # the client gives up (a courtesy notifications/cancelled is sent)
            [run_id] = gateway_runs(store)
            await until(lambda: has_result(store, run_id))
            assert first == []

            gw._principal = lambda ctx: "agent:someone-else"  # another identity, same run: not its outcome
            other = await client.call_tool("toy__slow", {"seconds": 1.0}, meta={"sealbox/run_id": run_id})
            assert other.is_error is True and served(other)["status"] == "pending"
            assert served(other)["approval_id"] != aid
            del gw._principal

            retry = await client.call_tool("toy__slow", {"seconds": 1.0})
            assert (retry.is_error, text_of(retry)) == (False, "slow done")
            [ran] = [e.payload["call_id"] for e in store.read_run(run_id) if e.kind == "tool.result"]
            assert served(retry) == {"approval_id": aid, "status": DELIVERED_ON_RETRY, "run_id": run_id,
                                     "call_id": ran}
            assert counts(store, run_id) == {"tool.call": 2, "approval.requested": 2, "run.resumed": 1,
                                             "tool.result": 1}  # the second: the other principal's request

            again = await client.call_tool("toy__slow", {"seconds": 1.0})  # delivered once: a new call
            assert again.is_error is True and served(again)["status"] == "pending"
            assert served(again)["approval_id"] not in (aid, served(other)["approval_id"])
    assert toy_log(tmp_path) == [{"tool": "slow", "arguments": {"seconds": 1.0}}]
    assert counts(store, run_id) == {"tool.call": 3, "approval.requested": 3, "run.resumed": 1, "tool.result": 1}


async def test_a_client_that_timed_out_mid_hold_retries_after_the_approval_and_the_tool_runs_once(
        tmp_path, store, alice):
    gw = gateway(tmp_path, store, hold=60)  # the call is still held when it is approved, however slow the host
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with pytest.raises(Exception) as timed_out:
                await client.call_tool("toy__echo", {"text": "once"}, read_timeout_seconds=0.4)
            assert "timed out" in str(timed_out.value).lower()
            await until(lambda: pending_ids(store))  # the request may be recorded after the client gave up
            [aid] = pending_ids(store)
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            retry = await client.call_tool("toy__echo", {"text": "once"})
            assert (retry.is_error, text_of(retry)) == (False, "once")
            short_hold(gw, 0.3)  # the next call is only held to see it pending
            after = await client.call_tool("toy__echo", {"text": "once"}, read_timeout_seconds=30)
        [run_id] = gateway_runs(store)
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "once"}}]
    assert after.is_error is True and served(after)["status"] == "pending" and served(after)["approval_id"] != aid
    assert counts(store, run_id) == {"tool.call": 2, "approval.requested": 2, "run.resumed": 1, "tool.result": 1}


async def test_a_retry_while_the_earlier_call_is_still_held_shares_its_single_execution(tmp_path, store, alice):
    """The earlier call is still held (its client stopped waiting without cancelling it, as mcp 1.x
    clients do on a timeout) when the retry arrives: the retry joins the same request; one
    execution, one tool.result, both calls answered the same result."""
    gw = gateway(tmp_path, store, hold=3)
    results: dict[str, object] = {}
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            async def call(name: str) -> None:
                results[name] = await client.call_tool("toy__slow", {"seconds": 0.5})

            with anyio.fail_after(30):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(call, "first")
                    # held (the gateway knows the request), not only requested: a retry arriving in between
                    # is a second request (two identical calls made at once), as it was on a loaded machine
                    await until(lambda: pending_ids(store) and gw._holding == 1)
                    [aid] = pending_ids(store)
                    calls.start_soon(call, "retry")
                    await until(lambda: gw._holding == 2)  # both held, on the same request
                    await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            later = await client.call_tool("toy__slow", {"seconds": 0.5})  # both got it: a new call
        [run_id] = gateway_runs(store)
    assert [(results[n].is_error, text_of(results[n])) for n in ("first", "retry")] == [(False, "slow done")] * 2
    statuses = sorted((r.meta or {}).get("sealbox/approval", {}).get("status", "-") for r in results.values())
    assert statuses == ["-", DELIVERED_ON_RETRY]  # one call settled it, the other was given its outcome
    assert toy_log(tmp_path) == [{"tool": "slow", "arguments": {"seconds": 0.5}}]
    assert later.is_error is True and served(later)["status"] == "pending" and served(later)["approval_id"] != aid
    assert counts(store, run_id) == {"tool.call": 2, "approval.requested": 2, "run.resumed": 1, "tool.result": 1}


# ----------------------------------------------------------------------------- streamable HTTP


def _sse_answer(text: str, request_id: int) -> dict:
    for line in text.splitlines():
        if line.startswith("data: "):
            msg = json.loads(line[6:])
            if msg.get("id") == request_id and ("result" in msg or "error" in msg):
                return msg
    raise AssertionError(f"no answer to request {request_id} in {text!r}")


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_over_http_a_client_that_disconnected_mid_hold_gets_the_decided_outcome_on_retry(
        tmp_path, store, alice, decision):
    """The client's HTTP request times out and its connection closes (no notifications/cancelled): the
    gateway still holds the call, the approver answers, the call is settled into the void. The retry
    on the same session is answered that outcome (the result, or the denial) from what was kept."""
    from sealbox.gateway.transports import serve_http

    gw = gateway(tmp_path, store, hold=60, extra=f"http:\n  tokens:\n    - {{token: {TOKEN}, identity: ci-bot}}")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "toy__echo", "arguments": {"text": "just once"}}}
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {"authorization": f"Bearer {TOKEN}", "accept": "application/json, text/event-stream",
                   "content-type": "application/json"}
        async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
            init = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
            session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            with pytest.raises(httpx2.ReadTimeout):
                await http.post(url, json=call, headers=session, timeout=0.5)
            # still held for a client that is gone (on a loaded host, possibly recorded only after it left)
            await until(lambda: pending_ids(store) and gw._holding == 1)
            [aid] = pending_ids(store)
            await anyio.to_thread.run_sync(answer, store, aid, decision, "decided", alice)
            [run_id] = gateway_runs(store)
            await until(lambda: counts(store, run_id)["run.resumed"] == 1 and gw._holding == 0)
            retry = _sse_answer((await http.post(url, json={**call, "id": 3}, headers=session)).text, 3)["result"]
            short_hold(gw, 0.3)  # the next call is only held to see it pending
            again = _sse_answer((await http.post(url, json={**call, "id": 4}, headers=session)).text, 4)["result"]
        tg.cancel_scope.cancel()
    delivered = retry["_meta"]["sealbox/approval"]
    assert delivered == {"approval_id": aid, "status": DELIVERED_ON_RETRY, "run_id": run_id,
                         "call_id": delivered["call_id"]}
    if decision == "approve":
        assert (retry["isError"], retry["content"]) == (False, [{"type": "text", "text": "just once"}])
        assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "just once"}}]
    else:
        assert retry["isError"] is True and "denied by alice: decided" in retry["content"][0]["text"]
        assert retry["_meta"]["sealbox/decision"]["reason_code"] == "approval_denied"
        assert toy_log(tmp_path) == []
    # delivered to the retry: the next identical call asks anew
    assert again["isError"] is True and again["_meta"]["sealbox/approval"]["status"] == "pending"
    assert again["_meta"]["sealbox/approval"]["approval_id"] != aid
    assert counts(store, run_id) == {"tool.call": 2, "approval.requested": 2, "run.resumed": 1,
                                     "tool.result": 1 if decision == "approve" else 0}


# ----------------------------------------------------------------------------- the bounds


def _settled(run: str, binding: str, principal: str = "agent:a") -> Pending:
    return Pending(f"apr_{run}_{binding}", run, "call_1", "1", binding, "toy", "echo", requested_by=principal,
                   settled=True, outcome=object())


def test_undelivered_outcomes_are_bounded_in_time_count_and_bytes():
    now = [100.0]
    kept = Undelivered(60, max_entries=3, max_bytes=1000, clock=lambda: now[0])
    a, b, c, d = (_settled("r1", x) for x in "abcd")
    assert kept.keep(a, 100) and kept.keep(b, 100) and kept.keep(c, 100)
    assert kept.find("r1", "a", "agent:a") is a and kept.find("r1", "a", "agent:other") is None
    assert kept.keep(d, 100)  # a fourth: the oldest is dropped
    assert kept.find("r1", "a", "agent:a") is None and len(kept) == 3
    big = _settled("r2", "big")
    assert kept.keep(big, 900)  # within the bytes once the oldest are dropped (b, c: 100 + 900 ≤ 1000)
    assert len(kept) == 2 and kept.find("r2", "big", "agent:a") is big and kept.find("r1", "d", "agent:a") is d
    assert kept.find("r1", "b", "agent:a") is None and kept.find("r1", "c", "agent:a") is None
    assert not kept.keep(_settled("r2", "huge"), 1001)  # larger than the whole budget: not kept
    now[0] += 61  # past keep_s: dropped
    assert kept.find("r2", "big", "agent:a") is None and len(kept) == 0 and not kept.has_run("r2")
    kept.keep(a, 10)
    kept.keep(b, 10)
    kept.discard(a)  # delivered
    assert kept.find("r1", "a", "agent:a") is None and kept.find("r1", "b", "agent:a") is b
    kept.discard_run("r1")
    assert len(kept) == 0 and not kept.has_run("r1")
    assert not Undelivered(0).keep(_settled("r3", "x"), 1)  # undelivered_keep_s: 0 keeps nothing
    assert MAX_KEPT_BYTES == 64 * 1024 * 1024


async def test_undelivered_keep_s_zero_keeps_nothing_and_a_retry_asks_anew(tmp_path, store, alice):
    gw = gateway(tmp_path, store, hold=2, limits=", undelivered_keep_s: 0")
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            scope = anyio.CancelScope()

            async def call() -> None:
                with scope:
                    await client.call_tool("toy__slow", {"seconds": 0.5})

            tg.start_soon(call)
            await until(lambda: pending_ids(store))
            await anyio.to_thread.run_sync(answer, store, pending_ids(store)[0], "approve", "fine", alice)
            await until(lambda: toy_log(tmp_path))
            scope.cancel()
            [run_id] = gateway_runs(store)
            await until(lambda: has_result(store, run_id))
            retry = await client.call_tool("toy__slow", {"seconds": 0.5}, read_timeout_seconds=20)
    assert retry.is_error is True and served(retry)["status"] == "pending"
    assert len(toy_log(tmp_path)) == 1


def test_undelivered_keep_s_is_a_validated_limit(tmp_path):
    from sealbox.errors import ConfigError

    assert toy_config(tmp_path).limits.undelivered_keep_s == 900
    assert toy_config(tmp_path, extra="limits: {undelivered_keep_s: 30}").limits.undelivered_keep_s == 30
    with pytest.raises(ConfigError):
        toy_config(tmp_path, extra="limits: {undelivered_keep_s: -1}")



async def test_an_outcome_delivered_on_retry_keeps_its_own_approval_meta(tmp_path, store):
    """An outcome that is an approval error (claim raised ``already_resumed`` / ``run_ended``) carries
    ``_meta["sealbox/approval"].error``; the retry it is delivered to must still carry that code beside
    the ``delivered_on_retry`` fields (docs/gateway.md: they are *added* to the result's own ``_meta``)."""
    from types import SimpleNamespace

    from sealbox.gateway.server import _error_result

    gw = gateway(tmp_path, store, hold=2)
    pending = Pending("apr_x", "run_x", "call_1", "1", "binding", "toy", "echo", requested_by="agent:a")
    pending.settled = True
    gw._settled(pending, _error_result("approval apr_x: run run_x has ended",
                                       {"sealbox/approval": {"approval_id": "apr_x", "error": "run_ended"}}))
    assert gw._undelivered.find("run_x", "binding", "agent:a") is pending
    out = await gw._hand_over(SimpleNamespace(), pending, served=True)
    assert out.meta["sealbox/approval"] == {"approval_id": "apr_x", "error": "run_ended", "status": DELIVERED_ON_RETRY,
                                            "run_id": "run_x", "call_id": "call_1"}
    assert gw._undelivered.find("run_x", "binding", "agent:a") is None  # delivered


async def test_a_stateless_client_cancelled_while_its_approved_tool_runs_gets_the_result_on_its_request_state_retry(
        tmp_path, store, alice):
    """The same for a client on the stateless 2026-07-28 protocol: its retry carries the
    ``requestState`` it was given; the approved tool ran once for the cancelled call, and the retry
    with the same state is answered that result (``delivered_on_retry``) without running it again."""
    import mcp_types as types
    from mcp.client import Client

    gw = gateway(tmp_path, store, hold=0.3)
    async with running(gw) as tg:
        async with Client(gw.server, mode="2026-07-28") as client:
            first = await client.session.call_tool("toy__slow", {"seconds": 1.0}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            aid = first.meta["sealbox/approval"]["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            scope = anyio.CancelScope()
            got: list = []

            async def call() -> None:
                with scope:
                    got.append(await client.session.call_tool("toy__slow", {"seconds": 1.0},
                                                              request_state=first.request_state,
                                                              allow_input_required=True))

            tg.start_soon(call)
            await until(lambda: toy_log(tmp_path))  # the approved tool runs upstream for this call
            scope.cancel()  # the client gives up while it runs
            run_id = first.meta["sealbox/approval"].get("run_id") or gateway_runs(store)[0]
            await until(lambda: has_result(store, run_id))
            assert got == []
            retry = await client.session.call_tool("toy__slow", {"seconds": 1.0}, request_state=first.request_state,
                                                   allow_input_required=True)
    assert isinstance(retry, types.CallToolResult) and (retry.is_error, text_of(retry)) == (False, "slow done")
    [ran] = [e.payload["call_id"] for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert served(retry) == {"approval_id": aid, "status": DELIVERED_ON_RETRY, "run_id": run_id, "call_id": ran}
    assert toy_log(tmp_path) == [{"tool": "slow", "arguments": {"seconds": 1.0}}]
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}


async def test_a_stateless_retry_after_its_outcome_was_delivered_is_told_so_not_an_unknown_run(tmp_path, store, alice):
    """A stateless call's own run ends once its outcome is settled; a further retry with the same
    requestState (after the outcome was delivered) got the JSON-RPC error UNKNOWN_RUN "run … has ended;
    it cannot be continued", an exception in the client, instead of the isError result saying the approval
    is no longer pending and to call again without requestState."""
    import mcp_types as types
    from mcp.client import Client

    gw = gateway(tmp_path, store, hold=0.3)
    async with running(gw):
        async with Client(gw.server, mode="2026-07-28") as client:
            first = await client.session.call_tool("toy__echo", {"text": "x"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            aid = first.meta["sealbox/approval"]["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            done = await client.session.call_tool("toy__echo", {"text": "x"}, request_state=first.request_state,
                                                  allow_input_required=True)
            again = await client.session.call_tool("toy__echo", {"text": "x"}, request_state=first.request_state,
                                                   allow_input_required=True)
    assert (done.is_error, text_of(done)) == (False, "x")
    assert again.is_error is True
    assert text_of(again) == (f"approval {aid} is no longer pending here (its outcome was delivered to an earlier "
                              "call); call again without requestState to ask anew")
    assert again.meta["sealbox/approval"] == {"approval_id": aid, "status": "delivered"}
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "x"}}]


async def test_a_retry_after_the_approver_was_disabled_is_still_pending_and_the_tool_never_runs(
        tmp_path, store, alice):
    """alice approves a held call whose client gave up, then an admin disables her before the client
    retries: her approval no longer counts (docs/approvals.md), the retry is held on the same request,
    answered "pending", the toy tool never runs, and the log notes which answer stopped counting."""
    from sealbox.identities import add_identity as add, disable_identity

    bob = add(store, "bob", "approver", ["ops"], key_path=tmp_path / "bob.key",
              admin_key=admin_key(store, tmp_path)).key_path
    gw = gateway(tmp_path, store, hold=0.3)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "once"})
            assert first.is_error is True and served(first)["status"] == "pending"
            aid = served(first)["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            disabled = await anyio.to_thread.run_sync(
                lambda: disable_identity(store, "alice", "key leaked", admin_key=admin_key(store, tmp_path)))
            retry = await client.call_tool("toy__echo", {"text": "once"})
            assert retry.is_error is True and served(retry)["status"] == "pending"
            assert served(retry)["approval_id"] == aid
            assert toy_log(tmp_path) == []
            [run_id] = gateway_runs(store)
            notes = [e.payload["about"] for e in store.read_run(run_id) if e.kind == "note"]
            assert [(n["withdrawn"]["change"], n["withdrawn"]["change_leaf"]) for n in notes] == [
                ("disabled", disabled.since_leaf)]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "checked", bob)
            done = await client.call_tool("toy__echo", {"text": "once"})
            assert (done.is_error, text_of(done)) == (False, "once")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "once"}}]
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}


async def test_a_held_call_whose_approver_was_re_keyed_is_not_forwarded_until_another_approves(
        tmp_path, store, alice):
    """alice approves a held call, then her key is rotated (no disable) before the gateway's retry
    claims it: her approval is withdrawn (docs/approvals.md), the retry is held on the same request and
    answered "pending", the toy tool never runs, the log notes the rotation; bob's approval lets it run."""
    from sealbox.identities import add_identity as add, rotate_key

    bob = add(store, "bob", "approver", ["ops"], key_path=tmp_path / "bob.key",
              admin_key=admin_key(store, tmp_path)).key_path
    gw = gateway(tmp_path, store, hold=0.3)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "once"})
            assert first.is_error is True and served(first)["status"] == "pending"
            aid = served(first)["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            rotated = await anyio.to_thread.run_sync(
                lambda: rotate_key(store, "alice", tmp_path / "alice-2.key", "key leaked", admin_key=alice))
            retry = await client.call_tool("toy__echo", {"text": "once"})
            assert retry.is_error is True and served(retry)["status"] == "pending"
            assert served(retry)["approval_id"] == aid
            assert toy_log(tmp_path) == []
            [run_id] = gateway_runs(store)
            [answered] = [e.leaf_index for e in store.read_run(run_id) if e.kind == "approval.answered"]
            notes = [e.payload["about"] for e in store.read_run(run_id) if e.kind == "note"]
            assert notes == [{"approval_id": aid, "withdrawn": {"identity": "alice", "answer_leaf": answered,
                                                                "change": "rotated",
                                                                "change_leaf": rotated.identity.since_leaf}}]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "checked", bob)
            done = await client.call_tool("toy__echo", {"text": "once"})
            assert (done.is_error, text_of(done)) == (False, "once")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "once"}}]
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}


async def test_a_stateless_retry_after_the_approver_was_disabled_and_re_enabled_is_still_pending(
        tmp_path, store, alice):
    """The stateless (2026-07-28) path: the retry carries its ``requestState``; alice approved, was
    disabled and re-enabled meanwhile. Re-enabling does not restore her approval: the retry is answered
    ``input_required`` again for the same request, the tool never runs."""
    import mcp_types as types
    from mcp.client import Client

    from sealbox.identities import disable_identity, enable_identity

    gw = gateway(tmp_path, store, hold=0.3)
    async with running(gw):
        async with Client(gw.server, mode="2026-07-28") as client:
            first = await client.session.call_tool("toy__echo", {"text": "x"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            aid = first.meta["sealbox/approval"]["approval_id"]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)

            def disable_and_enable():
                root = admin_key(store, tmp_path)
                disable_identity(store, "alice", "key leaked", admin_key=root)
                enable_identity(store, "alice", "false alarm", admin_key=root)

            await anyio.to_thread.run_sync(disable_and_enable)
            retry = await client.session.call_tool("toy__echo", {"text": "x"}, request_state=first.request_state,
                                                   allow_input_required=True)
    assert isinstance(retry, types.InputRequiredResult)
    assert (retry.meta["sealbox/approval"]["approval_id"], retry.meta["sealbox/approval"]["status"]) == (aid, "pending")
    assert toy_log(tmp_path) == []
    [state] = [s for s in list_approvals(store) if s.approval_id == aid]
    assert (state.status, [(a.identity, a.problem, a.withdrawn_by) for a in state.answers]) == (
        "pending", [("alice", "identity_disabled", "disabled")])


async def test_a_decided_request_no_client_retries_is_forgotten_and_a_later_retry_still_gets_its_outcome(
        tmp_path, store, alice):
    gw = gateway(tmp_path, store, hold=0.3, limits=", undelivered_keep_s: 1")
    gw.pending_prune_s = 0.05
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "deploy"})
            assert first.is_error is True and served(first)["status"] == "pending"
            [run_id] = gateway_runs(store)
            [aid] = pending_ids(store)
            assert list(gw._pending) == [run_id]
            await anyio.sleep(1.3)  # longer than undelivered_keep_s: undecided, so it stays
            assert [p.approval_id for p in gw._pending[run_id].values()] == [aid]
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "fine", alice)
            await anyio.sleep(0.5)
            assert [p.approval_id for p in gw._pending[run_id].values()] == [aid]  # decided < keep_s ago: kept
            await until(lambda: not gw._pending)  # then forgotten: nothing of it left in memory
            assert gw._hold_locks == {} and toy_log(tmp_path) == []
            retry = await client.call_tool("toy__echo", {"text": "deploy"})
            assert not gw._pending
        ended = [e.kind for e in store.read_run(run_id)][-1]
    assert retry.is_error is False and text_of(retry) == "deploy"
    assert [c["arguments"] for c in toy_log(tmp_path)] == [{"text": "deploy"}]  # ran once, for that request
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 1}
    assert [e.payload["approval_ids"] for e in store.read_run(run_id) if e.kind == "run.resumed"] == [[aid]]
    assert ended == "run.ended"


async def test_a_forgotten_request_keeps_the_closed_sessions_run_suspended_and_a_joined_retry_gets_the_denial(
        tmp_path, store, alice):
    gw = gateway(tmp_path, store, hold=0.3, limits=", undelivered_keep_s: 0")
    gw.pending_prune_s = 0.05
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "deploy"})
            [run_id] = gateway_runs(store)
            [aid] = pending_ids(store)
            await anyio.to_thread.run_sync(answer, store, aid, "deny", "not today", alice)
            await until(lambda: not gw._pending)
        assert store.get_run(run_id)["status"] != "ended"  # left suspended: the request is still to be delivered
        async with connect(gw, tg) as other:
            retry = await other.call_tool("toy__echo", {"text": "deploy"}, meta={"sealbox/run_id": run_id})
    assert served(first)["status"] == "pending"
    assert retry.is_error is True and "approval_denied" in text_of(retry) and "not today" in text_of(retry)
    assert toy_log(tmp_path) == []
    assert counts(store, run_id) == {"tool.call": 1, "approval.requested": 1, "run.resumed": 1, "tool.result": 0}
