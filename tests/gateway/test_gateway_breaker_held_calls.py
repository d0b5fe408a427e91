"""Only a half-open breaker's probe moves it (docs/gateway.md, *What the circuit breaker counts*).

A call held for an approval took no probe (it was not allowed when it was gated): once approved it runs,
and its outcome, arriving while the breaker is half-open and another call is its probe, used to close the
breaker (a success) or open it again (a failure), whatever the probe then showed. Real toy upstream, official
``mcp`` client, SQLite and (with SEALBOX_TEST_POSTGRES_URL) PostgreSQL stores."""

from __future__ import annotations

import importlib.util
import os
import uuid

import anyio
import mcp_types as types
import pytest

import sealbox
from sealbox.approvals import answer
from sealbox.gateway import Gateway
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policy import Policy

from .conftest import connect, gateway_runs, running, system_events, text_of, toy_config

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")

POLICY = """
version: 1
rules:
  - id: instant-needs-ops
    match: {server: toy, tool: slow}
    when: 'call.arguments.seconds == 0'
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: rest-ok
    effect: allow
"""


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_held_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


@pytest.fixture
def key(store, tmp_path):
    return add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def changes(store):
    return [(b["tool"], b["from"], b["to"], b["reason"]) for b in system_events(store, "breaker.changed")]


async def wait_for_probe(gw, server: str, tool: str) -> None:
    with anyio.fail_after(10):
        while not (gw.recorder.breaker.state(server, tool) == "half_open"
                   and gw.recorder.breaker._slots[(server, tool)].probing):
            await anyio.sleep(0.01)


async def test_an_approved_held_call_finishing_while_the_probe_is_in_flight_does_not_move_the_breaker(
        tmp_path, store, key):
    """The held call (``slow`` 0 s, approved) succeeds while the probe (``slow`` 3 s) is still running: the
    breaker stays half-open (before: closed by the held call, ``probe_succeeded``). The probe then times out:
    the breaker opens again (``probe_failed``; before: the probe's timeout, counted on the closed breaker, opened
    it with reason ``failures``)."""
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 1, cooldown_s: 0}\n"
                                            "limits: {call_timeout_s: 1.5, approval_hold_s: 0.1}"),
                 store=store, policy=Policy.from_text(POLICY))
    gw.approval_poll = 0.02
    async with running(gw) as tg, connect(gw, tg) as client:
        held = await client.call_tool("toy__slow", {"seconds": 0})  # held: pending after 0.1 s
        aid = held.meta["sealbox/approval"]["approval_id"]
        failed = await client.call_tool("toy__slow", {"seconds": 3})  # times out: the breaker opens
        await anyio.to_thread.run_sync(lambda: answer(store, aid, "approve", "fine", key))
        probe: list = []

        async def run_probe() -> None:
            probe.append(await client.call_tool("toy__slow", {"seconds": 3}))

        async with anyio.create_task_group() as calls:
            calls.start_soon(run_probe)
            await wait_for_probe(gw, "toy", "slow")
            approved = await client.call_tool("toy__slow", {"seconds": 0})  # the retry: settled, forwarded
            during = gw.recorder.breaker.state("toy", "slow")
        after = gw.recorder.breaker.state("toy", "slow")
        [run_id] = gateway_runs(store)
    assert held.is_error is True
    assert failed.is_error is True and "did not answer within 1.5 s" in text_of(failed)
    assert (approved.is_error, text_of(approved)) == (False, "slow done")
    assert probe[0].is_error is True and "did not answer within 1.5 s" in text_of(probe[0])
    assert (during, after) == ("half_open", "open")
    assert changes(store) == [("slow", "closed", "open", "failures"),
                              ("slow", "open", "half_open", "cooldown_elapsed"),
                              ("slow", "half_open", "open", "probe_failed")]
    results = [(e.payload["ok"], (e.payload.get("error") or {}).get("type"))
               for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert results == [(False, "UpstreamTimeout"), (True, None), (False, "UpstreamTimeout")]
    assert sealbox.verify_store(store).ok


# ------------------------------------------------ a half-open probe waiting for the client's answer


async def test_a_probe_whose_upstream_waits_for_the_clients_elicitation_hands_the_probe_back(tmp_path, store):
    """The probe (``ask``) is blocked on an elicitation the person has not answered: the time spent waiting for
    the client says nothing of the upstream's health, so the probe is handed back when the upstream asks, and
    the next call of the tool probes (before: it was refused ``breaker_open`` until the first one ended, up to
    ``limits.call_timeout_s``). That next call's success closes the breaker; the first call, answered later,
    is recorded as usual."""
    release = anyio.Event()
    asked_first = anyio.Event()

    async def on_elicit(context, params):
        if params.message == "first?":
            asked_first.set()
            await release.wait()
            return types.ElicitResult(action="accept", content={"answer": "late"})
        return types.ElicitResult(action="accept", content={"answer": "now"})

    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 1, cooldown_s: 0}\n"
                                            "limits: {call_timeout_s: 30}"), store=store)
    async with running(gw) as tg, connect(gw, tg, elicitation_callback=on_elicit) as client:
        first: list = []

        async def ask_first() -> None:
            first.append(await client.call_tool("toy__ask", {"question": "first?"}))

        async with anyio.create_task_group() as calls:
            gw.recorder.breaker.record_failure("toy", "ask")  # a real failure, by hand: the breaker opens
            calls.start_soon(ask_first)  # cool-down 0: the probe
            with anyio.fail_after(10):
                await asked_first.wait()
            waiting = gw.recorder.breaker.state("toy", "ask")
            second = await client.call_tool("toy__ask", {"question": "second?"})
            closed = gw.recorder.breaker.state("toy", "ask")
            release.set()
        [run_id] = gateway_runs(store)
    assert waiting == "half_open"
    assert (second.is_error, text_of(second)) == (False, "accept:now")
    assert (first[0].is_error, text_of(first[0])) == (False, "accept:late")
    assert closed == "closed"
    assert changes(store) == [("ask", "closed", "open", "failures"),
                              ("ask", "open", "half_open", "cooldown_elapsed"),
                              ("ask", "half_open", "closed", "probe_succeeded")]
    results = [e.payload["ok"] for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert results == [True, True]
    assert sealbox.verify_store(store).ok


async def test_a_probe_that_waited_for_the_client_still_closes_the_breaker_when_no_other_call_probed(
        tmp_path, store):
    """Handed back while the upstream waited for the client, the probe's outcome still counts when no other
    call took the probe meanwhile: its success closes the breaker."""
    async def on_elicit(context, params):
        await anyio.sleep(0.2)
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 1, cooldown_s: 0}"), store=store)
    async with running(gw) as tg, connect(gw, tg, elicitation_callback=on_elicit) as client:
        gw.recorder.breaker.record_failure("toy", "ask")
        probe = await client.call_tool("toy__ask", {"question": "go?"})
        state = gw.recorder.breaker.state("toy", "ask")
    assert (probe.is_error, text_of(probe), state) == (False, "accept:yes", "closed")
    assert changes(store) == [("ask", "closed", "open", "failures"),
                              ("ask", "open", "half_open", "cooldown_elapsed"),
                              ("ask", "half_open", "closed", "probe_succeeded")]
