"""An SDK run and a gateway that joins it (docs/gateway.md, "Joining a run") write into one run, each
with its own step counter: neither may take a step the other has written (replay's step keys,
`runs show`), and run.ended comes last."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

from .conftest import connect, running, text_of, toy_config

pytestmark = pytest.mark.anyio


def _steps(store, run_id):
    return [(e.step, e.kind, e.principal) for e in store.read_run(run_id)]


def _check_unique(store, run_id):
    events = store.read_run(run_id)
    calls = [e.step for e in events if e.kind == "tool.call"]
    assert len(calls) == len(set(calls)), _steps(store, run_id)
    tops: dict[int, set[str]] = {}  # a top-level step belongs to one event group (sub-steps n.i excepted)
    for e in events:
        if e.kind in ("tool.call", "run.started", "run.ended", "note") and "." not in e.step:
            tops.setdefault(int(e.step.split(".")[0]), set()).add(e.kind + ":" + e.payload.get("call_id", ""))
    assert all(len(v) == 1 for v in tops.values()), _steps(store, run_id)
    assert events[-1].kind == "run.ended"
    assert int(events[-1].step) == max(int(e.step.split(".")[0]) for e in events), _steps(store, run_id)
    for e in events:  # a call's decision and result keep the call's step
        if e.kind in ("policy.decision", "tool.result"):
            [call] = [c for c in events if c.kind == "tool.call" and c.payload["call_id"] == e.payload["call_id"]]
            assert e.step == call.step, _steps(store, run_id)
    return events


@pytest.mark.parametrize("own_store", [True, False], ids=["own-connection", "same-store-object"])
async def test_sdk_call_after_gateway_calls_takes_a_step_past_them(tmp_path, store, own_store):
    # own_store: the agent's own store object (connection), as in its own process
    sdk_store = sealbox.open_store(tmp_path / "store") if own_store else store
    try:
        run = Recorder(sdk_store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
        run.start()
        gw = Gateway(toy_config(tmp_path), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            for i in range(4):
                r = await client.call_tool("toy__echo", {"text": f"gw{i}"}, meta={"sealbox/run_id": run.run_id})
                assert r.is_error is False, text_of(r)
        assert run.call_tool("local", "add", {"a": 1, "b": 2}, lambda a, b: a + b) == 3
        run.end()
        events = _check_unique(sdk_store, run.run_id)
        assert [(s, k) for s, k, _ in _steps(sdk_store, run.run_id) if k in ("tool.call", "run.ended")] == [
            ("2", "tool.call"), ("3", "tool.call"), ("4", "tool.call"), ("5", "tool.call"),
            ("6", "tool.call"), ("7", "run.ended")]
        assert [e.payload["tool"] for e in events if e.kind == "tool.call"] == ["echo"] * 4 + ["add"]
    finally:
        if own_store:
            sdk_store.close()


@pytest.mark.parametrize("own_store", [True, False], ids=["own-connection", "same-store-object"])
async def test_sdk_gateway_sdk_calls_alternate_without_reusing_steps(tmp_path, store, own_store):
    sdk_store = sealbox.open_store(tmp_path / "store") if own_store else store
    try:
        run = Recorder(sdk_store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
        run.start()
        assert run.call_tool("local", "add", {"a": 1, "b": 1}, lambda a, b: a + b) == 2
        gw = Gateway(toy_config(tmp_path), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            r = await client.call_tool("toy__echo", {"text": "gw"}, meta={"sealbox/run_id": run.run_id})
            assert r.is_error is False, text_of(r)
            assert run.call_tool("local", "add", {"a": 2, "b": 2}, lambda a, b: a + b) == 4
            r = await client.call_tool("toy__echo", {"text": "gw2"}, meta={"sealbox/run_id": run.run_id})
            assert r.is_error is False, text_of(r)
        run.note("done")
        run.end()
        events = _check_unique(sdk_store, run.run_id)
        assert [(s, k) for s, k, _ in _steps(sdk_store, run.run_id)
                if k in ("tool.call", "note", "run.ended")] == [
            ("2", "tool.call"), ("3", "tool.call"), ("4", "tool.call"), ("5", "tool.call"),
            ("6", "note"), ("7", "run.ended")]
        assert [e.payload["tool"] for e in events if e.kind == "tool.call"] == ["add", "echo", "add", "echo"]
    finally:
        if own_store:
            sdk_store.close()


@pytest.mark.parametrize("own_store", [True, False], ids=["own-connection", "same-store-object"])
async def test_a_model_call_after_gateway_calls_links_its_tool_calls_to_the_step_it_was_written_at(
        tmp_path, store, own_store):
    """The model call's step moves past the gateway's steps inside its write, and so do the sibling
    steps ``"<n>.<i>"`` of the tool calls it requested: the SDK's own and the one sent to the gateway."""
    sdk_store = sealbox.open_store(tmp_path / "store") if own_store else store
    try:
        run = Recorder(sdk_store, ALLOW_ALL).run(agent="sdk-agent", principal="agent:sdk")
        run.start()
        gw = Gateway(toy_config(tmp_path), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            for i in range(3):  # steps 2, 3, 4, written by the gateway
                r = await client.call_tool("toy__echo", {"text": f"gw{i}"}, meta={"sealbox/run_id": run.run_id})
                assert r.is_error is False, text_of(r)
            record = run.model_call({"model": "m", "input": []}, {
                "object": "response", "id": "r1", "model": "m", "output": [
                    {"type": "function_call", "call_id": "call_a", "name": "add", "arguments": "{}", "id": "fc_a"},
                    {"type": "function_call", "call_id": "call_b", "name": "toy__echo", "arguments": "{}",
                     "id": "fc_b"}]})
            assert (record.step, run.step_of_call("call_a"), run.step_of_call("call_b")) == ("5", "5.1", "5.2")
            meta = {"sealbox/run_id": run.run_id, "sealbox/call_id": "call_b", "sealbox/step": "5.2"}
            r = await client.call_tool("toy__echo", {"text": "linked"}, meta=meta)
            assert r.is_error is False, text_of(r)
            assert run.call_tool("local", "add", {"a": 1, "b": 2}, lambda a, b: a + b, call_id="call_a") == 3
        run.end()
        _check_unique(sdk_store, run.run_id)
        assert [(s, k) for s, k, _ in _steps(sdk_store, run.run_id) if k in ("tool.call", "model.call", "run.ended")] \
            == [("2", "tool.call"), ("3", "tool.call"), ("4", "tool.call"), ("5", "model.call"),
                ("5.2", "tool.call"), ("5.1", "tool.call"), ("6", "run.ended")]
    finally:
        if own_store:
            sdk_store.close()
