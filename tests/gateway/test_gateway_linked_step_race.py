"""Two gateways (two processes: here two Gateway objects, each with its own handle of one SQLite store)
joined to one run, each given the same ``sealbox/step`` (or ``sealbox/call_id``): the check that a step
is unused was in each gateway's memory, filled when it joined the run, so both recorded a ``tool.call``
at that step and both forwarded the call (docs/gateway.md, "Steps of a joined call"). The step is now
taken inside the write transaction that records the ``tool.call``: the loser is refused
``MALFORMED_REQUEST`` naming the conflict, nothing recorded, nothing forwarded."""

from __future__ import annotations

import anyio
import pytest
from mcp.shared.exceptions import MCPError

import sealbox
from sealbox.gateway import MALFORMED_REQUEST, Gateway
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

from .conftest import connect, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


def _agent_run(store):
    run = Recorder(store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
    run.start()
    run.model_call({"model": "m", "input": []}, {"object": "response", "id": "r1", "model": "m", "output": [
        {"type": "function_call", "call_id": "call_a", "name": "toy__echo", "arguments": "{}", "id": "fc_a"},
        {"type": "function_call", "call_id": "call_b", "name": "toy__echo", "arguments": "{}", "id": "fc_b"}]})
    return run


def _calls(store, run_id):
    return [(e.step, e.payload["call_id"], e.principal) for e in store.read_run(run_id) if e.kind == "tool.call"]


@pytest.mark.parametrize("second", [
    {"sealbox/call_id": "call_a", "sealbox/step": "2.1"},  # a retry sent to the other gateway
    {"sealbox/call_id": "call_b", "sealbox/step": "2.1"},  # another call naming the same step
    {"sealbox/call_id": "call_a", "sealbox/step": "2.2"},  # the same call id at another step
    {"sealbox/call_id": "call_a"},  # the same call id at a top-level step of the gateway's
], ids=["same-call", "same-step", "same-call-id", "same-call-id-no-step"])
async def test_a_step_or_call_id_another_gateway_recorded_after_this_one_joined_is_refused(tmp_path, store, second):
    agent_run = _agent_run(store)
    rid = agent_run.run_id
    other = sealbox.open_store(tmp_path / "store")
    try:
        gw_a = Gateway(toy_config(tmp_path), store=store)
        gw_b = Gateway(toy_config(tmp_path), store=other)
        async with running(gw_a) as tg_a, connect(gw_a, tg_a) as a, running(gw_b) as tg_b, connect(gw_b, tg_b) as b:
            # both join the run (each reads the calls it has so far)
            assert text_of(await a.call_tool("toy__echo", {"text": "join a"}, meta={"sealbox/run_id": rid})) == "join a"
            assert text_of(await b.call_tool("toy__echo", {"text": "join b"}, meta={"sealbox/run_id": rid})) == "join b"
            first = await a.call_tool("toy__echo", {"text": "first"},
                                      meta={"sealbox/run_id": rid, "sealbox/call_id": "call_a", "sealbox/step": "2.1"})
            assert text_of(first) == "first"
            for _ in range(2):  # refused again: the conflict is remembered, not forgotten with the failed write
                # (a call id the run has is named first, as a gateway that recorded both does)
                with pytest.raises(MCPError) as err:
                    await b.call_tool("toy__echo", {"text": "second"}, meta={"sealbox/run_id": rid, **second})
                if second["sealbox/call_id"] != "call_a":
                    assert (err.value.code, str(err.value)) == (
                        MALFORMED_REQUEST, f"_meta['sealbox/step'] = '2.1': a call of run {rid} was already "
                                           "recorded at that step")
                else:
                    assert (err.value.code, str(err.value)) == (
                        MALFORMED_REQUEST, f"_meta['sealbox/call_id'] = 'call_a': a call of run {rid} was already "
                                           "recorded with that id")
            # the refused gateway still records other calls of the run, and the step it was refused stays free
            # for nobody: a later call at a free step goes through
            later = await b.call_tool("toy__echo", {"text": "later"},
                                      meta={"sealbox/run_id": rid, "sealbox/call_id": "call_c", "sealbox/step": "2.3"})
            assert text_of(later) == "later"
        calls = _calls(store, rid)
        assert [(s, c) for s, c, _ in calls if "." in s] == [("2.1", "call_a"), ("2.3", "call_c")]
        assert [c["arguments"]["text"] for c in toy_log(tmp_path)] == ["join a", "join b", "first", "later"]
    finally:
        other.close()


async def test_two_gateways_racing_at_one_step_record_and_forward_it_once(tmp_path, store):
    """The two calls sent at once, each to its gateway: one wins the step, the other is refused."""
    agent_run = _agent_run(store)
    rid = agent_run.run_id
    other = sealbox.open_store(tmp_path / "store")
    try:
        gw_a = Gateway(toy_config(tmp_path), store=store)
        gw_b = Gateway(toy_config(tmp_path), store=other)
        async with running(gw_a) as tg_a, connect(gw_a, tg_a) as a, running(gw_b) as tg_b, connect(gw_b, tg_b) as b:
            await a.call_tool("toy__echo", {"text": "join a"}, meta={"sealbox/run_id": rid})
            await b.call_tool("toy__echo", {"text": "join b"}, meta={"sealbox/run_id": rid})
            outcomes: dict[str, object] = {}

            async def call(name, client, call_id):
                try:
                    outcomes[name] = text_of(await client.call_tool(
                        "toy__echo", {"text": name},
                        meta={"sealbox/run_id": rid, "sealbox/call_id": call_id, "sealbox/step": "2.1"}))
                except MCPError as exc:
                    outcomes[name] = exc.error.code

            async with anyio.create_task_group() as race:
                race.start_soon(call, "a", a, "call_a")
                race.start_soon(call, "b", b, "call_b")
        assert sorted(map(str, outcomes.values())) == sorted([str(MALFORMED_REQUEST), next(
            n for n, v in outcomes.items() if v == n)])
        [winner] = [n for n, v in outcomes.items() if v == n]
        linked = [(s, c) for s, c, _ in _calls(store, rid) if "." in s]
        assert linked == [("2.1", {"a": "call_a", "b": "call_b"}[winner])]
        assert [c["arguments"]["text"] for c in toy_log(tmp_path)][2:] == [winner]
    finally:
        other.close()


def test_the_driving_process_does_not_record_its_own_call_at_a_step_a_gateway_recorded(tmp_path, store):
    """The SDK links its own call ``call_a`` to step 2.1, which a gateway recorded a call at after the
    model call (the client sent it there too): refused before anything is recorded or run."""
    from sealbox.errors import StepTakenError

    agent_run = _agent_run(store)
    gw_store = sealbox.open_store(tmp_path / "store")
    try:
        gw_run = Recorder(gw_store, ALLOW_ALL).continue_run(agent_run.run_id)
        gw_run.link_call("call_x", "2.1")
        assert gw_run.call_tool("toy", "echo", {"text": "gw"}, lambda text: text, call_id="call_x") == "gw"
        ran = []
        with pytest.raises(StepTakenError) as err:
            agent_run.call_tool("local", "add", {"a": 1}, lambda a: ran.append(a), call_id="call_a")
        assert (err.value.run_id, err.value.step, err.value.call_id, err.value.conflict) == (
            agent_run.run_id, "2.1", "call_a", "step")
        assert str(err.value) == (f"run {agent_run.run_id} already has a tool call at step '2.1' (call 'call_x'); "
                                  "call 'call_a' was not recorded or run")
        assert ran == []
        assert _calls(store, agent_run.run_id) == [("2.1", "call_x", "agent:sdk")]
    finally:
        gw_store.close()
