"""`sealbox gateway replay RUN` of a run the gateway *joined* (the driving process started the run and
passed its id, as the demo's agent does with `mcp_env(run)`): docs/gateway.md says such a run is
served its tool calls in logical-step order. Its snapshot is the driving process's, with no gateway
section, so the tool list comes from the gateway's pins (`tools.changed`) recorded before its first call,
and the separator from the calls' exposed names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import sealbox
from sealbox.gateway import Gateway
from sealbox.recorder import Recorder

from .conftest import connect, running, text_of, toy_config
from .test_gateway_replay import CALLS, SEALBOX, _replay, _replay_runs

pytestmark = pytest.mark.anyio


async def _record_joined(tmp_path: Path):
    store = sealbox.init_store(tmp_path / "store")
    try:
        run = Recorder(store, sealbox.policies.ALLOW_ALL).run(agent="driver", principal="agent:driver")
        run.__enter__()
        run.model_call({"model": "m", "messages": [{"role": "user", "content": "add and echo"}]},
                       {"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
        gw = Gateway(toy_config(tmp_path), store=store, run_id=run.run_id)
        async with running(gw) as tg:
            async with connect(gw, tg) as client:
                tools = (await client.list_tools()).tools
                results = [await client.call_tool(name, args) for name, args in CALLS]
        run.__exit__(None, None, None)
        run_id = run.run_id
        fp = store.read_run(run_id)[0].payload.get("snapshot")
        assert "gateway" not in ((store.get_snapshot(fp) if fp else None) or {}).get("extra", {})  # the driver's
    finally:
        store.close()
    return run_id, tools, results


async def test_a_joined_run_is_served_its_gateway_calls_and_reproduces(tmp_path):
    run_id, recorded_tools, recorded = await _record_joined(tmp_path)
    tools, results, verdict = await _replay(tmp_path, run_id, CALLS)

    assert [(t.name, t.description, t.input_schema) for t in tools] == \
        [(t.name, t.description, t.input_schema) for t in recorded_tools]
    assert [(r.is_error, text_of(r)) for r in results] == [(r.is_error, text_of(r)) for r in recorded] == \
        [(False, "42"), (False, "hello")]
    assert (verdict["reproduced"], verdict["divergence"], verdict["steps_compared"]) == (True, None, 2)
    assert (verdict["calls_made"], verdict["calls_recorded"], verdict["replay_of"]) == (2, 2, run_id)


async def test_a_joined_run_diverges_at_the_changed_call(tmp_path):
    run_id, _, _ = await _record_joined(tmp_path)
    _, results, verdict = await _replay(tmp_path, run_id, [CALLS[0], ("toy__echo", {"text": "bye"})])

    assert [r.is_error for r in results] == [False, True]
    assert text_of(results[1]).startswith("replay diverged: call 2: ")
    d = verdict["divergence"]
    assert (verdict["diverged_at_call"], d["kind"], d["recorded"]["name"]) == (2, "mismatch", "toy/echo")
    assert d["diff"] == [{"path": "text", "change": "changed", "a": "hello", "b": "bye"}]
    assert verdict["recorded_step"] == "4"  # its own step in the record: model call 2, then the calls 3 and 4


def test_a_run_with_no_gateway_call_is_still_refused_in_one_line(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, sealbox.policies.ALLOW_ALL).run(agent="driver", principal="agent:driver") as run:
        run.model_call({"model": "m", "messages": []}, {"choices": []})
    store.close()
    out = subprocess.run([SEALBOX, "gateway", "replay", run.run_id, "-s", str(tmp_path / "store")],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (f"error: run {run.run_id} was not recorded by the gateway: its snapshot has no gateway "
                          "section and it holds no call made through a gateway (no recorded tool list to serve)\n")
