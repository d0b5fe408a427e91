"""A JSON Schema's ``properties`` names parameters, not values. In the default ``redacted`` mode a model
request carrying a tool whose schema has a ``password`` (``api_key``, ``token``…) parameter -- sent
again with every request of the run -- had that parameter's schema taken for a secret: the request
recorded ``"password": {"$redacted": …}`` and the run then "remembered" the schema's strings (``string``,
its description) as redacted values, so every later ``string`` in the run's tool arguments, results
and model calls was recorded as a marker (``{"type": "⟦redacted:…⟧"}``), unreplayable. A parameter's
schema (an object under ``properties`` of a ``"type": "object"`` schema) is now walked as content, not
redacted whole; a value under such a name that is no schema is redacted as before."""

from __future__ import annotations

import json

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

LOGIN = {"type": "object", "properties": {
    "username": {"type": "string", "description": "the user name"},
    "password": {"type": "string", "description": "the user password", "minLength": 8}},
    "required": ["username", "password"]}


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")  # the default content mode: redacted
    yield s
    s.close()


def _events(store, run):
    return {e.kind + ":" + e.step: e.payload for e in store.read_run(run.run_id)}


def test_a_tool_schema_with_a_password_parameter_is_kept_and_taints_nothing(store):
    openai_tools = [{"type": "function", "function": {"name": "login", "description": "Log in", "parameters": LOGIN}}]
    anthropic_tools = [{"name": "login", "description": "Log in", "input_schema": LOGIN}]
    response = {"object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {
        "role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "login", "arguments": json.dumps({"username": "bob", "password": "hunter22"})}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": openai_tools},
                       response)
        run.model_call({"model": "claude", "max_tokens": 9, "messages": [], "tools": anthropic_tools},
                       {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "a string"}]})
        run.call_tool("auth", "lookup", {"field": "string"}, lambda field: {"type": "string"}, call_id="c9")
        run.call_tool("auth", "login", {"username": "bob", "password": "hunter22"}, lambda **k: "ok", call_id="c1")
        run.call_tool("auth", "echo", {"note": "pw was hunter22"}, lambda note: note, call_id="c10")
    ev = _events(store, run)
    assert ev["model.call:2"]["request"]["tools"][0]["function"]["parameters"] == LOGIN
    assert ev["model.call:3"]["request"]["tools"][0]["input_schema"] == LOGIN
    assert ev["model.call:3"]["response"]["content"][0]["text"] == "a string"
    assert ev["tool.call:4"]["arguments"] == {"field": "string"}
    assert ev["tool.result:4"]["result"] == {"type": "string"}
    # a real password is still redacted, and remembered: the value the model sent, and the call's argument
    assert "hunter22" not in json.dumps(ev["model.call:2"]["response"])
    assert set(ev["tool.call:2.1"]["arguments"]["password"]) == {"$redacted"}
    assert "hunter22" not in json.dumps(ev["tool.call:5"]["arguments"])


def test_a_value_under_properties_that_is_no_schema_is_still_redacted(store):
    not_schemas = {"type": "object", "properties": {"password": "hunter22", "api_key": ["k-1234567"]}}
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("cfg", "set", {"settings": not_schemas}, lambda settings: None, call_id="c1")
    args = _events(store, run)["tool.call:2"]["arguments"]["settings"]["properties"]
    assert set(args["password"]) == {"$redacted"} and set(args["api_key"]) == {"$redacted"}
