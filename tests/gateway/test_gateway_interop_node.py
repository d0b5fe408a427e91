"""Interop with the reference TypeScript server ``@modelcontextprotocol/server-everything``
(pinned; see node_upstreams.py).

It runs under Node.js over stdio as an upstream of the gateway; an official Python
``mcp`` client calls it through the gateway. Skipped, with the reason, where Node.js
is missing or the package cannot be installed from the npm registry.
"""

from __future__ import annotations

import json

import mcp_types as types
import pytest

import sealbox
from sealbox.gateway import Gateway, parse_config

from .conftest import connect, gateway_runs, kinds, running, text_of
from .node_upstreams import node_server

pytestmark = [pytest.mark.anyio, pytest.mark.npm_servers]


@pytest.fixture(scope="module")
def everything() -> tuple[str, list[str]]:
    return node_server("everything")


def config(tmp_path, command: str, args: list[str]):
    return parse_config(f"""
version: 1
store: {json.dumps(str(tmp_path / 'store'))}
policy: ALLOW_ALL
upstreams:
  - id: ev
    command: {json.dumps(command)}
    args: {json.dumps(args)}
""", base=tmp_path)


def recorded(store) -> list[tuple[str, dict]]:
    [run_id] = gateway_runs(store)
    return [(e.kind, e.payload) for e in store.read_run(run_id)]


async def test_server_everything_tools_are_listed_and_called_through_the_gateway(tmp_path, store, everything):
    gw = Gateway(config(tmp_path, *everything), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            echoed = await client.call_tool("ev__echo", {"message": "hello from sealbox"})
            summed = await client.call_tool("ev__get-sum", {"a": 2, "b": 40})
            rejected = await client.call_tool("ev__get-sum", {"a": "two", "b": 40})
    assert {"ev__echo", "ev__get-sum", "ev__get-tiny-image", "ev__trigger-long-running-operation"} <= set(listed)
    assert all(name.startswith("ev__") for name in listed)
    assert listed["ev__echo"].input_schema["required"] == ["message"]
    assert (echoed.is_error, [c.text for c in echoed.content]) == (False, ["Echo: hello from sealbox"])
    assert (summed.is_error, [c.text for c in summed.content]) == (False, ["The sum of 2 and 40 is 42."])
    # checked against the tool's input schema at the gateway: recorded, never forwarded
    assert rejected.is_error is True and rejected.meta["sealbox/not_forwarded"] == "invalid_arguments"
    events = recorded(store)
    assert [k for k, _ in events] == (["run.started"] + ["tool.call", "policy.decision", "tool.result"] * 3
                                      + ["run.ended"])
    calls = [p for k, p in events if k == "tool.call"]
    results = [p for k, p in events if k == "tool.result"]
    assert [(c["server"], c["tool"], c["arguments"]) for c in calls] == [
        ("ev", "echo", {"message": "hello from sealbox"}), ("ev", "get-sum", {"a": 2, "b": 40}),
        ("ev", "get-sum", {"a": "two", "b": 40})]
    assert results[0]["ok"] is True and results[0]["result"]["content"] == [
        {"type": "text", "text": "Echo: hello from sealbox"}]
    assert results[1]["result"]["content"] == [{"type": "text", "text": "The sum of 2 and 40 is 42."}]
    started = events[0][1]
    snapshot = store.get_snapshot(started["snapshot"])
    assert snapshot["extra"]["gateway"]["upstreams"]["ev"]["transport"] == "stdio"
    assert {"echo", "get-sum"} <= {t["name"] for t in snapshot["tools"] if t["server"] == "ev"}
    assert sealbox.verify_store(store).ok


async def test_server_everything_sampling_reaches_the_client_and_the_answer_comes_back(tmp_path, store, everything):
    seen: list[types.CreateMessageRequestParams] = []

    async def sample(context, params):
        seen.append(params)
        return types.CreateMessageResult(role="assistant", model="sealbox-test-model", stop_reason="endTurn",
                                         content=types.TextContent(type="text", text="forty-two"))

    gw = Gateway(config(tmp_path, *everything), store=store)
    async with running(gw) as tg:
        assert "trigger-sampling-request" in gw.upstreams["ev"].tools  # offered: the gateway can sample
        async with connect(gw, tg, sampling_callback=sample) as client:
            result = await client.call_tool("ev__trigger-sampling-request", {"prompt": "6 * 7?", "maxTokens": 12})
    [params] = seen
    assert (params.max_tokens, params.system_prompt, params.temperature) == (12, "You are a helpful test server.", 0.7)
    assert [(m.role, m.content.text) for m in params.messages] == [
        ("user", "Resource trigger-sampling-request context: 6 * 7?")]
    [text] = [c.text for c in result.content]
    prefix = "LLM sampling result: \n"
    assert result.is_error is False and text.startswith(prefix)
    assert json.loads(text[len(prefix):]) == {"role": "assistant", "model": "sealbox-test-model",
                                              "stopReason": "endTurn",
                                              "content": {"type": "text", "text": "forty-two"}}
    [res] = [p for k, p in recorded(store) if k == "tool.result"]
    assert res["ok"] is True and res["result"]["content"] == [{"type": "text", "text": text}]


async def test_server_everything_elicitation_reaches_the_client_and_the_answer_comes_back(tmp_path, store,
                                                                                         everything):
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True, "integer": 7})

    gw = Gateway(config(tmp_path, *everything), store=store)
    async with running(gw) as tg:
        assert "trigger-elicitation-request" in gw.upstreams["ev"].tools
        async with connect(gw, tg, elicitation_callback=elicit) as client:
            result = await client.call_tool("ev__trigger-elicitation-request", {})
    [params] = asked
    assert params.message == "Please provide inputs for the following fields:"
    assert params.requested_schema["required"] == ["name"]
    texts = [c.text for c in result.content]
    assert result.is_error is False
    assert texts[:2] == ["✅ User provided the requested information!",
                         "User inputs:\n- Name: Ada Lovelace\n- Agreed to terms: true\n- Favorite Integer: 7"]
    raw = texts[2]
    assert raw.startswith("\nRaw result: ")
    assert json.loads(raw[len("\nRaw result: "):]) == {"action": "accept", "content": {
        "name": "Ada Lovelace", "check": True, "integer": 7}}
    [res] = [p for k, p in recorded(store) if k == "tool.result"]
    assert res["ok"] is True and [c["text"] for c in res["result"]["content"]] == texts
    # the request and the answer are recorded at the call, before the tool.result (docs/gateway.md)
    assert [k for k, _ in recorded(store)] == ["run.started", "tool.call", "policy.decision", "note", "note",
                                               "tool.result", "run.ended"]
    asked, answered = (p for k, p in recorded(store) if k == "note")
    assert [(n["client_request"]["state"], n["client_request"]["upstream"], n["client_request"]["method"])
            for n in (asked, answered)] == [("asked", "ev", "elicitation/create"),
                                            ("answered", "ev", "elicitation/create")]
    assert answered["client_request"]["outcome"] == "accept"
    assert asked["about"]["params"]["message"] == "Please provide inputs for the following fields:"
    assert answered["about"] == {"result": {"action": "accept", "content": {
        "name": "Ada Lovelace", "check": True, "integer": 7}}}
