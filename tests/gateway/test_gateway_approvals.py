"""Approvals through the gateway (issue 6, point 3), with real signed answers from another thread or process.

The MCP client is never the approver: answers come from approver identities
(``sealbox.approvals.answer`` in a thread, or ``sealbox approvals approve`` in a
subprocess). The gateway holds a call up to ``limits.approval_hold_s`` (with
progress notifications), then answers "pending; call again", and a retry with the
same arguments gets the outcome of the same request.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.approvals import answer, get_approval, list_approvals
from sealbox.gateway import INVALID_REQUEST_STATE, Gateway
from sealbox.gateway.holds import StateError, open_state, seal_state, state_key
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policy import Policy

from .conftest import connect, gateway_runs, kinds, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

POLICY = """
version: 1
rules:
  - id: echo-needs-ops
    match: {server: toy, tool: echo}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: add-expires-fast
    match: {server: toy, tool: add}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1s}
  - id: rest-ok
    effect: allow
"""


@pytest.fixture
def keys(store, tmp_path):
    return {name: add_identity(store, name, "approver", ["ops"], key_path=tmp_path / f"{name}.key",
                                     admin_key=admin_key(store, tmp_path)).key_path
            for name in ("alice", "bob")}


def gateway(tmp_path, store, hold: float) -> Gateway:
    gw = Gateway(toy_config(tmp_path, extra=f"limits: {{approval_hold_s: {hold}}}"), store=store,
                 policy=Policy.from_text(POLICY))
    gw.approval_poll = 0.05
    return gw


def answer_later(store, decision: str, reason: str, key, delay: float = 0.3) -> threading.Thread:
    """Answer the (single) pending request from another thread, as an approver would."""
    def go() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pending = list_approvals(store, pending=True)
            if pending:
                time.sleep(delay)
                answer(store, pending[0].approval_id, decision, reason, key)
                return
            time.sleep(0.02)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def approval_of(result) -> str:
    return result.meta["sealbox/approval"]["approval_id"]


def run_kinds(store, run_id) -> list[str]:
    return [k for _, k in kinds(store, run_id)]


async def test_an_approval_within_the_hold_forwards_once_and_progress_is_sent(tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=8)
    gw.progress_interval = 0.1
    progress: list[tuple[float, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, message))

    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            t = answer_later(store, "approve", "looks fine", keys["alice"], delay=0.5)
            result = await client.call_tool("toy__echo", {"text": "hello"}, progress_callback=on_progress)
            t.join(5)
        [run_id] = gateway_runs(store)
    assert (result.is_error, text_of(result)) == (False, "hello")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "hello"}}]
    assert run_kinds(store, run_id) == ["run.started", "tool.call", "policy.decision", "approval.requested",
                                        "run.suspended", "approval.answered", "run.resumed", "tool.result",
                                        "run.ended"]
    [aid] = [e.payload["approval_id"] for e in store.read_run(run_id) if e.kind == "approval.requested"]
    assert progress and all(aid in (m or "") for _, m in progress)
    assert get_approval(store, aid).outcome == "approved"
    assert sealbox.verify_store(store).ok


async def test_a_call_needing_approval_whose_arguments_fail_the_schema_is_refused_without_an_approval(
        tmp_path, store, keys):
    """Its arguments can never be forwarded: no approver is asked (no approval.requested, no run.suspended); it is
    recorded as decided (require_approval) and answered as any invalid-arguments call."""
    gw = gateway(tmp_path, store, hold=8)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            with anyio.fail_after(4):  # not held for an approval
                result = await client.call_tool("toy__echo", {"text": 5})
        [run_id] = gateway_runs(store)
    message = "arguments do not match the input schema of toy__echo: text: 5 is not of type 'string'"
    assert (result.is_error, text_of(result), result.meta) == (
        True, message, {"sealbox/not_forwarded": "invalid_arguments"})
    assert toy_log(tmp_path) == []
    assert run_kinds(store, run_id) == ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
    events = store.read_run(run_id)
    [decision] = [e.payload for e in events if e.kind == "policy.decision"]
    assert (decision["effect"], decision["rule"]) == ("require_approval", "echo-needs-ops")
    [res] = [e.payload for e in events if e.kind == "tool.result"]
    assert (res["ok"], res["error"]["type"], res["error"]["message"], "result" in res) == (
        False, "InvalidArguments", message, False)
    assert list_approvals(store) == []
    assert sealbox.verify_store(store).ok


async def test_past_the_hold_pending_then_a_retry_gets_the_outcome_of_the_same_request(tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=0.3)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "hello"})
            assert first.is_error is True
            aid = approval_of(first)
            assert re.match(rf"approval {aid} pending; call again with the same arguments", text_of(first))
            # a stdio client that exits and calls again starts a new session, a new run and a new request:
            # the message says in which run a retry continues this request
            run_id = first.meta["sealbox/approval"]["run_id"]
            assert text_of(first).startswith(
                f"approval {aid} pending; call again with the same arguments in run {run_id} (this session, or a "
                f"client naming it in _meta[\"sealbox/run_id\"]: a new session is a new run and a new request) "
                f"(it is decided by ")
            # the hint is a command that works as written: approve needs --reason and --key-file
            assert f"with `sealbox approvals approve {aid} --reason TEXT --key-file KEY`;" in text_of(first)
            again = await client.call_tool("toy__echo", {"text": "hello"})  # still pending: the same request
            assert approval_of(again) == aid and again.is_error is True
            other = await client.call_tool("toy__echo", {"text": "other"})  # other arguments: a new request
            assert approval_of(other) != aid
            assert toy_log(tmp_path) == []
            # a real approver answers from another process: the CLI
            done = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [sys.executable, "-m", "sealbox.cli.main", "approvals", "approve", aid, "--reason", "ok by me",
                 "--key-file", str(keys["bob"]), "-s", str(tmp_path / "store")], capture_output=True, text=True))
            assert done.returncode == 0, done.stderr
            result = await client.call_tool("toy__echo", {"text": "hello"})
            assert (result.is_error, text_of(result)) == (False, "hello")
            after = await client.call_tool("toy__echo", {"text": "hello"})  # the outcome was delivered: a new call
            assert after.is_error is True and approval_of(after) not in (aid, approval_of(other))
        [run_id] = gateway_runs(store)
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "hello"}}]
    events = store.read_run(run_id)
    calls = [e for e in events if e.kind == "tool.call"]
    assert len(calls) == 3  # hello (approved), other (pending), hello again (a new request)
    resumed = [e.payload for e in events if e.kind == "run.resumed"]
    assert resumed == [{"approval_ids": [aid], "waited_us": resumed[0]["waited_us"],
                        "outcomes": {aid: "approved"}}]
    results = [e for e in events if e.kind == "tool.result"]
    assert [r.payload["call_id"] for r in results] == [calls[0].payload["call_id"]]
    # two requests still pend, so the session's run stays suspended (no run.ended)
    assert events[-1].kind != "run.ended"


async def test_an_approved_call_whose_tool_changed_while_it_was_held_is_not_forwarded(tmp_path, store, keys):
    """The approver approved the tool as it was: once it changes upstream (``tools.changed``) and
    until someone re-approves it, the held call's retry is refused like any call to it (it was
    forwarded to the changed tool)."""
    from sealbox.gateway import PIN_RULE

    gw = gateway(tmp_path, store, hold=0.2)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            held = await client.call_tool("toy__echo", {"text": "hello"})
            aid = approval_of(held)
            assert (await client.call_tool("toy__mutate", {})).is_error is False
            for _ in range(100):  # tools/list_changed is handled by the gateway's upstream task
                if gw.pins.blocked("toy", "echo"):
                    break
                await anyio.sleep(0.05)
            assert gw.pins.blocked("toy", "echo")
            await anyio.to_thread.run_sync(lambda: answer(store, aid, "approve", "fine", keys["alice"]))
            retry = await client.call_tool("toy__echo", {"text": "hello"})
        [run_id] = gateway_runs(store)
    assert retry.is_error is True
    assert text_of(retry).startswith(f"not forwarded: tool toy/echo changed upstream after this call was decided and "
                                     f"has not been re-approved (rule {PIN_RULE}; sealbox gateway reapprove toy echo --store ")
    assert retry.meta["sealbox/not_forwarded"] == "tool_changed"
    assert toy_log(tmp_path) == [{"tool": "mutate", "arguments": {}}]  # echo never went out
    events = store.read_run(run_id)
    [call] = [e.payload for e in events if e.kind == "tool.call" and e.payload["tool"] == "echo"]
    [result] = [e.payload for e in events if e.kind == "tool.result" and e.payload["call_id"] == call["call_id"]]
    assert (result["ok"], result["error"]["type"]) == (False, "ToolChangedSinceDecided")
    assert [e.payload["outcomes"] for e in events if e.kind == "run.resumed"] == [{aid: "approved"}]
    assert sealbox.verify_store(store).ok


async def test_two_calls_with_the_same_arguments_made_at_once_are_two_requests_each_settled_by_its_own_call(
        tmp_path, store, keys):
    """Both calls are recorded before either is remembered as pending, so each has its own request;
    each request, once approved, is settled by its own call: two resumes, two executions, two
    results (neither call is another's retry: each was a new call when it arrived)."""
    gw = gateway(tmp_path, store, hold=10)
    results: dict[int, types.CallToolResult] = {}

    def approve_both() -> None:
        deadline = time.monotonic() + 10
        while len(list_approvals(store, pending=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        for state in list_approvals(store, pending=True):
            answer(store, state.approval_id, "approve", "ok", keys["alice"])

    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            async def call(i: int) -> None:
                results[i] = await client.call_tool("toy__echo", {"text": "same"})

            with anyio.fail_after(20):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(call, 1)
                    calls.start_soon(call, 2)
                    await anyio.to_thread.run_sync(approve_both)
    assert [(results[i].is_error, text_of(results[i])) for i in (1, 2)] == [(False, "same"), (False, "same")]
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "same"}}] * 2
    [run_id] = gateway_runs(store)
    ks = run_kinds(store, run_id)
    assert (ks.count("approval.requested"), ks.count("run.resumed"), ks.count("tool.result")) == (2, 2, 2)
    assert ks[-1] == "run.ended"


async def test_a_denied_request_answers_iserror_naming_who_and_why(tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=0.2)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "rm -rf"})
            await anyio.to_thread.run_sync(answer, store, approval_of(first), "deny", "too risky", keys["alice"])
            result = await client.call_tool("toy__echo", {"text": "rm -rf"})
    assert result.is_error is True
    assert "approval_denied" in text_of(result) and "alice" in text_of(result) and "too risky" in text_of(result)
    assert result.meta["sealbox/decision"]["reason_code"] == "approval_denied"
    assert toy_log(tmp_path) == []
    [run_id] = gateway_runs(store)
    assert run_kinds(store, run_id)[-2:] == ["run.resumed", "run.ended"]


async def test_an_expired_request_answers_iserror_and_is_never_forwarded(tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=0.1)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__add", {"a": 1, "b": 2})
            assert "pending" in text_of(first)
            await anyio.sleep(1.2)
            result = await client.call_tool("toy__add", {"a": 1, "b": 2})
    assert result.is_error is True and "expired" in text_of(result)
    assert result.meta["sealbox/decision"]["reason_code"] == "approval_expired"
    assert toy_log(tmp_path) == []
    [run_id] = gateway_runs(store)
    assert "approval.expired" in run_kinds(store, run_id)


NOT_AN_APPROVAL = ("the client's answer is not a Sealbox approval: approvals come only from approver identities, "
                   "signed with their keys")


def client_notes(store, run_id):
    """The notes of a run's client requests, their ids and timing checked and left out."""
    out = []
    for e in store.read_run(run_id):
        if e.kind == "note":
            cr = dict(e.payload["client_request"])
            assert cr.pop("id").startswith("creq_")
            waited = cr.pop("waited_us", 0)
            assert type(waited) is int and 0 <= waited < 30_000_000
            out.append((e.step, e.principal, e.payload["text"], cr, e.payload.get("about")))
    return out


async def test_the_gateways_informational_elicitation_is_recorded_and_its_answer_approves_nothing(
        tmp_path, store, keys):
    """The gateway tells the person a call is held: recorded before it is sent (what was sent) and with the
    client's answer (accept), in the held call's run at its step; the approval stays pending, unanswered."""
    gw = gateway(tmp_path, store, hold=0.5)
    seen: list[int] = []

    async def on_elicit(ctx, params):
        seen.append(len([e for e in store.read_run(gateway_runs(store)[0]) if e.kind == "note"]))
        return types.ElicitResult(action="accept", content={})

    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=on_elicit) as client:
            result = await client.call_tool("toy__echo", {"text": "hello"})
    aid = approval_of(result)
    [run_id] = gateway_runs(store)
    [call] = [e for e in store.read_run(run_id) if e.kind == "tool.call"]
    cid = call.payload["call_id"]
    assert seen == [1]  # recorded before it was sent
    message = (f"Sealbox: the call toy/echo needs approval {aid} (rule echo-needs-ops). It is decided by an approver "
               f"(group ops), with `sealbox approvals approve {aid} --reason TEXT --key-file KEY` or `deny` - not "
               "here: nothing answered in this dialog approves or denies it. The call is held for up to 0.5 s; after "
               "that, call again with the same arguments.")
    cr = {"asked_by": "gateway", "upstream": None, "method": "elicitation/create", "call_id": cid, "approval_id": aid}
    assert client_notes(store, run_id) == [
        ("2", "sealbox", f"the gateway tells the client that call toy/echo is held for approval {aid} (recorded before "
                         "it is sent; informational: nothing answered to it approves or denies the call; "
                         f"{NOT_AN_APPROVAL})",
         {**cr, "state": "asked"},
         {"params": {"mode": "form", "message": message, "requestedSchema": {"type": "object", "properties": {}}}}),
        ("2", "sealbox", f"the client accepted: the gateway's elicitation/create about approval {aid} (informational: "
                         f"it approves and denies nothing; {NOT_AN_APPROVAL})",
         {**cr, "state": "answered", "outcome": "accept"}, {"result": {"action": "accept", "content": {}}})]
    assert [k for k in run_kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision",
                                                     "approval.requested", "run.suspended", "note", "note"]
    assert get_approval(store, aid).status == "pending" and get_approval(store, aid).answers == ()
    assert toy_log(tmp_path) == []
    from sealbox.events import client_request_text

    [told, heard] = [e for e in store.read_run(run_id) if e.kind == "note"]
    assert client_request_text(told.payload) == (
        f"asked: elicitation/create from the gateway (informational: approval {aid} pending) during call {cid} "
        f"[{told.payload['client_request']['id']}] message={json_short(message)}")
    assert client_request_text(heard.payload).startswith(
        f"answered accept: elicitation/create from the gateway (informational: approval {aid} pending) during call "
        f"{cid} [{told.payload['client_request']['id']}] after ")
    assert sealbox.verify_store(store).ok


def json_short(value, limit=60):
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def test_an_informational_elicitation_left_unanswered_is_recorded_as_ended_by_the_hold(tmp_path, store, keys):
    """The person never answers the dialog; the hold ends (0.5 s): the record says the client did not answer,
    the hold ended first; and the call's "pending" answer comes as usual."""
    gw = gateway(tmp_path, store, hold=0.5)

    async def on_elicit(ctx, params):
        await anyio.sleep(30)
        return types.ElicitResult(action="accept", content={})

    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=on_elicit) as client:
            with anyio.fail_after(10):
                result = await client.call_tool("toy__echo", {"text": "hello"})
    aid = approval_of(result)
    assert result.is_error is True and result.meta["sealbox/approval"]["status"] == "pending"
    [run_id] = gateway_runs(store)
    [(_, _, _, asked, _), (step, who, text, answered, about)] = client_notes(store, run_id)
    assert (asked["state"], answered["state"], answered["outcome"], about, step, who) == (
        "asked", "answered", "cancelled", None, "2", "sealbox")
    assert text == (f"the client did not answer (the hold ended first): the gateway's elicitation/create about approval "
                    f"{aid} (informational: it approves and denies nothing; {NOT_AN_APPROVAL})")
    assert get_approval(store, aid).status == "pending"
    assert sealbox.verify_store(store).ok


async def test_a_client_that_declared_only_url_elicitation_is_not_sent_the_form_that_informs(tmp_path, store, keys):
    from mcp.client.session import ClientSession

    class UrlOnly(ClientSession):
        def _build_capabilities(self, version):
            return super()._build_capabilities(version).model_copy(update={
                "elicitation": types.ElicitationCapability(url=types.UrlElicitationCapability())})

    gw = gateway(tmp_path, store, hold=0.3)
    asked: list[str] = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with running(gw) as tg:
        async with connect(gw, tg, session_class=UrlOnly, elicitation_callback=on_elicit) as client:
            result = await client.call_tool("toy__echo", {"text": "hello"})
    assert result.meta["sealbox/approval"]["status"] == "pending" and asked == []
    [run_id] = gateway_runs(store)
    assert run_kinds(store, run_id) == ["run.started", "tool.call", "policy.decision", "approval.requested",
                                        "run.suspended"]


async def test_elicitation_only_informs_the_person_and_its_answer_is_not_an_approval(tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=0.5)
    asked: list[str] = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=on_elicit) as client:
            first = await client.call_tool("toy__echo", {"text": "hello"})
            second = await client.call_tool("toy__echo", {"text": "hello"})
    aid = approval_of(first)
    assert first.is_error is True and second.is_error is True and approval_of(second) == aid
    assert len(asked) == 1  # told once per request
    assert f"`sealbox approvals approve {aid} --reason TEXT --key-file KEY` or `deny`" in asked[0] and "not here" in asked[0]
    assert get_approval(store, aid).status == "pending" and get_approval(store, aid).answers == ()
    assert toy_log(tmp_path) == []


async def test_a_client_that_disconnects_while_pending_can_join_the_run_and_retry_after_a_restart(
        tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=0.1)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "later"})
    run_id = first.meta["sealbox/approval"]["run_id"]
    assert run_kinds(store, run_id)[-1] == "run.suspended"  # not ended: the request can still be answered
    answer(store, approval_of(first), "approve", "fine", keys["alice"])
    gw2 = gateway(tmp_path, store, hold=0.1)  # a new gateway process, as after a restart
    async with running(gw2) as tg:
        async with connect(gw2, tg) as client:
            result = await client.call_tool("toy__echo", {"text": "later"}, meta={"sealbox/run_id": run_id})
    assert (result.is_error, text_of(result)) == (False, "later")
    assert run_kinds(store, run_id)[-3:] == ["approval.answered", "run.resumed", "tool.result"]
    assert len([k for k in run_kinds(store, run_id) if k == "tool.call"]) == 1


# ----------------------------------------------------------------------------- stateless clients (2026-07-28)


async def test_a_stateless_client_gets_input_required_with_a_request_state_bound_to_the_arguments(
        tmp_path, store, keys):
    from mcp.client import Client

    gw = gateway(tmp_path, store, hold=0.1)
    async with running(gw):
        async with Client(gw.server, mode="2026-07-28") as client:
            first = await client.session.call_tool("toy__echo", {"text": "hi"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult) and first.request_state.startswith("sbx1.")
            aid = first.meta["sealbox/approval"]["approval_id"]
            # the state is bound to the arguments, and cannot be forged
            with pytest.raises(MCPError) as err:
                await client.session.call_tool("toy__echo", {"text": "other"}, request_state=first.request_state,
                                               allow_input_required=True)
            assert err.value.code == INVALID_REQUEST_STATE and "other arguments" in str(err.value)
            body, _, tag = first.request_state.rpartition(".")
            with pytest.raises(MCPError) as err:
                await client.session.call_tool("toy__echo", {"text": "hi"}, request_state=body + ".AAAA" + tag[4:],
                                               allow_input_required=True)
            assert err.value.code == INVALID_REQUEST_STATE
            again = await client.session.call_tool("toy__echo", {"text": "hi"}, request_state=first.request_state,
                                                   allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult)
            await anyio.to_thread.run_sync(answer, store, aid, "approve", "ok", keys["bob"])
            done = await client.session.call_tool("toy__echo", {"text": "hi"}, request_state=again.request_state,
                                                  allow_input_required=True)
    assert isinstance(done, types.CallToolResult) and (done.is_error, text_of(done)) == (False, "hi")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "hi"}}]
    run_id = get_approval(store, aid).run_id
    ks = run_kinds(store, run_id)
    assert ks.count("tool.call") == 1 and ks[-3:] == ["run.resumed", "tool.result", "run.ended"]


async def test_the_sdk_client_drives_input_required_until_an_approver_answers(tmp_path, store, keys):
    from mcp.client import Client

    gw = gateway(tmp_path, store, hold=0.2)
    async with running(gw):
        async with Client(gw.server, mode="2026-07-28", input_required_max_rounds=200) as client:
            t = answer_later(store, "approve", "ok", keys["alice"], delay=0.6)
            result = await client.call_tool("toy__echo", {"text": "auto"})
            t.join(5)
    assert (result.is_error, text_of(result)) == (False, "auto")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "auto"}}]


def test_request_state_tokens_verify_only_unaltered_for_the_same_binding_principal_and_key():
    key, other = state_key(b"s" * 32), state_key(b"t" * 32)
    tok = seal_state(key, approval_id="apr_1", run_id="r1", binding="sha256:aa", principal="agent:x", own_run=True,
                     ttl_s=60, now=1000)
    assert open_state(key, tok, binding="sha256:aa", principal="agent:x", now=1001)["aid"] == "apr_1"
    for bad_key, binding, principal, now, token in (
            (other, "sha256:aa", "agent:x", 1001, tok),          # another store's key
            (key, "sha256:bb", "agent:x", 1001, tok),            # other arguments
            (key, "sha256:aa", "agent:y", 1001, tok),            # another principal
            (key, "sha256:aa", "agent:x", 2000, tok),            # expired
            (key, "sha256:aa", "agent:x", 1001, tok[:-2] + "AA"),  # altered tag
            (key, "sha256:aa", "agent:x", 1001, "v1.abc"),       # not ours
            (key, "sha256:aa", "agent:x", 1001, None)):
        with pytest.raises(StateError):
            open_state(bad_key, token, binding=binding, principal=principal, now=now)


async def test_a_retry_by_another_principal_is_its_own_request(tmp_path, store, keys):
    gw = gateway(tmp_path, store, hold=0.1)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            first = await client.call_tool("toy__echo", {"text": "x"})
            run_id = first.meta["sealbox/approval"]["run_id"]
            gw._principal = lambda ctx: "agent:someone-else"  # e.g. another bearer token's identity, same run
            other = await client.call_tool("toy__echo", {"text": "x"}, meta={"sealbox/run_id": run_id})
    assert approval_of(other) != approval_of(first)
    requests = [e for e in store.read_run(run_id) if e.kind == "approval.requested"]
    assert [r.payload["requested_by"] for r in requests] == ["agent:test-client", "agent:someone-else"]


async def test_a_stateless_client_over_streamable_http_is_held_then_gets_the_outcome(tmp_path, store, keys):
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from sealbox.gateway.transports import serve_http

    token = "t0ken-for-the-tests-0123456789"
    gw = Gateway(toy_config(tmp_path, extra=f"limits: {{approval_hold_s: 0.3}}\nhttp:\n  tokens:\n"
                                             f"    - {{token: {token}, identity: ci-bot}}\n"),
                 store=store, policy=Policy.from_text(POLICY))
    gw.approval_poll = 0.05
    async with anyio.create_task_group() as tg:
        port = await tg.start(lambda task_status: serve_http(gw, 0, task_status=task_status))
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),
                                mode="2026-07-28", input_required_max_rounds=200) as client:
            t = answer_later(store, "approve", "ok", keys["alice"], delay=0.8)
            result = await client.call_tool("toy__echo", {"text": "over http"})
            t.join(5)
        tg.cancel_scope.cancel()
    assert (result.is_error, text_of(result)) == (False, "over http")
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": "over http"}}]
    [state] = list_approvals(store)
    events = store.read_run(state.run_id)
    assert [e.kind for e in events].count("tool.call") == 1 and events[-1].kind == "run.ended"
    assert {e.principal for e in events if e.kind in ("tool.call", "run.resumed", "tool.result")} == {"ci-bot"}


async def test_a_call_held_when_the_gateway_shuts_down_is_answered_pending(tmp_path, store, keys):
    """begin_shutdown (what SIGTERM / SIGINT do) ends every hold within a poll: the client gets the
    "pending" answer instead of a closed connection; the request stays, and a retry continues it."""
    gw = gateway(tmp_path, store, hold=60)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            got = []

            async def call():
                got.append(await client.call_tool("toy__echo", {"text": "hello"}))

            tg.start_soon(call)
            with anyio.fail_after(10):
                while gw._holding == 0:
                    await anyio.sleep(0.01)
            started = anyio.current_time()
            await gw.drain_holds(timeout=5)
            with anyio.fail_after(20):
                while not got:
                    await anyio.sleep(0.01)
            assert anyio.current_time() - started < 25  # not the 60 s hold (was < 2: a loaded host's stall failed it)
    [result] = got
    aid = approval_of(result)
    assert result.is_error is True
    assert text_of(result).startswith(f"approval {aid} pending; the gateway is shutting down; call again with the "
                                      "same arguments once it is back (it is decided by ")
    assert result.meta["sealbox/approval"]["gateway"] == "shutting_down"
    assert get_approval(store, aid).status == "pending" and toy_log(tmp_path) == []


PASS_ON = """
version: 1
rules:
  - id: header-needs-ops
    match: {server: toy, tool: header}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: rest-ok
    effect: allow
"""


async def test_a_secret_passed_on_to_a_held_call_is_recorded_as_its_marker_and_its_retry_still_binds(tmp_path):
    """The store redacts echo's `text` (a configured path); the client then passes that value on to
    another tool under an ordinary key, a call held for approval. Its tool.call, decision inputs and
    approval.requested hold the value's in-string marker, never the value (raw sealbox.db and -wal
    bytes); the binding is the hash of the real arguments, so a retry with them gets the outcome of
    the same request, and the upstream gets the real value."""
    from sealbox.approvals import binding_hash
    from sealbox.canonical import encode
    from sealbox.redaction import ContentPolicy

    secret = "tok-3f9a-passed-on-7c21"
    folder = tmp_path / "redacting"
    store = sealbox.init_store(folder, content=ContentPolicy(paths=("arguments.text",)))
    add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice2.key",
                 admin_key=admin_key(store, tmp_path))
    policy = Policy.from_text(PASS_ON)
    gw = Gateway(toy_config(tmp_path, extra="limits: {approval_hold_s: 0.2}"), store=store, policy=policy)
    gw.approval_poll = 0.05
    held = {"name": f"X-{secret}"}
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            echoed = await client.call_tool("toy__echo", {"text": secret})
            first = await client.call_tool("toy__header", held)
            assert first.is_error is True
            aid = approval_of(first)
            again = await client.call_tool("toy__header", held)  # a retry: the same request
            assert approval_of(again) == aid
            await anyio.to_thread.run_sync(lambda: answer(store, aid, "approve", "ok", tmp_path / "alice2.key"))
            result = await client.call_tool("toy__header", held)
            assert (result.is_error, text_of(result)) == (False, "null")
        [run_id] = gateway_runs(store)
    assert text_of(echoed) == secret  # the client gets what the upstream said
    assert toy_log(tmp_path) == [{"tool": "echo", "arguments": {"text": secret}},
                                 {"tool": "header", "arguments": held}]  # the upstream got the real value
    events = store.read_run(run_id)
    call_echo, call_header = (store.resolve(e.payload) for e in events if e.kind == "tool.call")
    mark = f"⟦redacted:{call_echo['arguments']['text']['$redacted']}⟧"
    assert call_header["arguments"] == {"name": f"X-{mark}"}
    decision = store.resolve(next(e.payload for e in events if e.kind == "policy.decision"
                                  and e.payload["call_id"] == call_header["call_id"]))
    assert decision["inputs"]["arguments"] == {"name": f"X-{mark}"}
    [request] = [store.resolve(e.payload) for e in events if e.kind == "approval.requested"]
    assert request["arguments"] == {"name": f"X-{mark}"}
    assert request["binding"] == binding_hash("toy", "header", encode(held), policy.fingerprint)
    assert get_approval(store, aid).outcome == "approved"
    assert sealbox.verify_store(store).ok
    assert any(p.name == "sealbox.db-wal" for p in folder.iterdir())
    for stage in ("open", "closed"):
        if stage == "closed":
            store.close()
        data = b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("sealbox.db"))
        assert secret.encode() not in data, stage


ASK_NEEDS_OPS = """
version: 1
rules:
  - id: ask-needs-ops
    match: {server: toy, tool: ask}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: rest-ok
    effect: allow
"""


async def test_an_upstreams_elicitation_during_an_approved_call_is_recorded_at_that_call_and_approves_nothing(
        tmp_path, store, keys):
    """The client is told of the approval (the gateway's own elicitation, answered "accept": ignored), the
    approver approves, the call is forwarded, the upstream asks the client: that request and its answer are
    recorded at the held call's step, after run.resumed, and are not approvals."""
    gw = Gateway(toy_config(tmp_path, extra="limits: {approval_hold_s: 8}"), store=store,
                 policy=Policy.from_text(ASK_NEEDS_OPS))
    gw.approval_poll = 0.05
    messages: list[str] = []

    async def on_elicit(ctx, params):
        messages.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=on_elicit) as client:
            t = answer_later(store, "approve", "fine", keys["alice"], delay=0.3)
            result = await client.call_tool("toy__ask", {"question": "favourite colour?"})
            t.join(5)
        [run_id] = gateway_runs(store)
    assert (result.is_error, text_of(result)) == (False, "accept:blue")
    assert len(messages) == 2 and messages[0].startswith("Sealbox: the call toy/ask needs approval")
    assert messages[1] == "favourite colour?"
    events = store.read_run(run_id)
    [call] = [e for e in events if e.kind == "tool.call"]
    assert [(e.step, e.kind) for e in events] == [
        ("1", "run.started"), ("2", "tool.call"), ("2", "policy.decision"), ("2", "approval.requested"),
        ("2", "run.suspended"), ("2", "note"), ("2", "note"), ("2", "approval.answered"), ("2", "run.resumed"),
        ("2", "note"), ("2", "note"), ("2", "tool.result"), ("3", "run.ended")]
    told, heard, asked, answered = (e for e in events if e.kind == "note")
    assert [(n.payload["client_request"]["asked_by"], n.payload["client_request"]["state"]) for n in (told, heard)] \
        == [("gateway", "asked"), ("gateway", "answered")]  # the gateway's own elicitation, answered "accept"
    assert heard.payload["client_request"]["outcome"] == "accept"
    assert "asked_by" not in asked.payload["client_request"]
    assert [(n.principal, n.payload["client_request"]["state"], n.payload["client_request"]["call_id"])
            for n in (asked, answered)] == [("sealbox", "asked", call.payload["call_id"]),
                                            ("sealbox", "answered", call.payload["call_id"])]
    assert "is not a Sealbox approval" in answered.payload["text"]
    [answer_event] = [e for e in events if e.kind == "approval.answered"]
    assert answer_event.payload["identity"] == "alice"  # the only answer the approval rules count
    assert sealbox.verify_store(store).ok
