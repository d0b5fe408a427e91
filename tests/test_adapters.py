"""Model-call adapters: formats detected, tool calls and usage extracted exactly.

Covers plain dicts and the real SDK objects (``openai`` ChatCompletion and
Response, ``anthropic`` Message), three parallel tool calls in one response,
arguments as a JSON string / object / "" / null / invalid JSON, and both usage
vocabularies (prompt/completion vs input/output tokens).
"""

from __future__ import annotations

import copy
import json

import pytest

from sealbox.adapters import ToolCallRequest, normalize_model_call, parse_arguments, to_plain

# ---------------------------------------------------------------- fixtures (wire format)

CHAT_REQUEST = {
    "model": "gpt-4o-2024-08-06",
    "messages": [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris, Oslo and Lima?"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
}


def chat_response(arguments: list) -> dict:
    return {
        "id": "chatcmpl-A1", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{i}", "type": "function",
                            "function": {"name": "get_weather", "arguments": a}} for i, a in enumerate(arguments, 1)],
        }}],
        "usage": {"prompt_tokens": 82, "completion_tokens": 51, "total_tokens": 133},
    }


RESPONSES_REQUEST = {
    "model": "gpt-4.1", "instructions": "You are a weather bot.",
    "input": [{"role": "user", "content": "Weather in Paris, Oslo and Lima?"}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}],
}


def responses_response(arguments: list) -> dict:
    return {
        "id": "resp_1", "object": "response", "created_at": 1730000000, "model": "gpt-4.1-2025-04-14",
        "status": "completed", "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "output": [{"type": "function_call", "id": f"fc_{i}", "call_id": f"call_r{i}", "name": "get_weather",
                    "arguments": a, "status": "completed"} for i, a in enumerate(arguments, 1)],
        "usage": {"input_tokens": 120, "output_tokens": 45, "total_tokens": 165,
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }


ANTHROPIC_REQUEST = {
    "model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You are a weather bot.",
    "messages": [{"role": "user", "content": "Weather in Paris, Oslo and Lima?"}],
    "tools": [{"name": "get_weather", "description": "Weather for a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
}


def anthropic_response(inputs: list) -> dict:
    return {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Checking all three."}]
        + [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": a}
           for i, a in enumerate(inputs, 1)],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 410, "output_tokens": 97},
    }


THREE = ['{"city": "Paris"}', '{"city": "Oslo"}', '{"city": "Lima"}']
THREE_DECODED = [{"city": "Paris"}, {"city": "Oslo"}, {"city": "Lima"}]


# ---------------------------------------------------------------- OpenAI chat-completions


def test_chat_dict_three_parallel_calls_and_usage():
    info = normalize_model_call(CHAT_REQUEST, chat_response(THREE))
    assert (info.format, info.provider, info.model) == ("openai.chat", "openai", "gpt-4o-2024-08-06")
    assert info.tool_calls == tuple(ToolCallRequest(f"call_{i}", "get_weather", a)
                                    for i, a in enumerate(THREE_DECODED, 1))
    assert info.usage == {"input_tokens": 82, "output_tokens": 51, "total_tokens": 133}
    assert info.request == CHAT_REQUEST


def test_chat_sdk_object_gives_the_same_extraction_as_the_dict():
    from openai.types.chat import ChatCompletion

    obj = ChatCompletion.model_validate(chat_response(THREE))
    info = normalize_model_call(CHAT_REQUEST, obj)
    assert info.format == "openai.chat" and info.model == "gpt-4o-2024-08-06"
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"}),
        ("call_3", "get_weather", {"city": "Lima"})]
    assert info.usage == {"input_tokens": 82, "output_tokens": 51, "total_tokens": 133}
    assert isinstance(info.response, dict)
    json.dumps(info.response)  # plain JSON data, no SDK objects left
    assert info.response["choices"][0]["message"]["tool_calls"][2]["function"]["arguments"] == '{"city": "Lima"}'


def test_chat_arguments_string_object_empty_null_invalid():
    resp = chat_response(['{"city": "Paris"}', "", "null", "{not json", '["a", 1]'])
    # an object is not valid on the wire for chat, but SDK-less callers pass decoded arguments
    resp["choices"][0]["message"]["tool_calls"].append(
        {"id": "call_6", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}})
    resp["choices"][0]["message"]["tool_calls"].append(
        {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": None}})
    info = normalize_model_call(CHAT_REQUEST, resp)
    assert [(c.id, c.arguments) for c in info.tool_calls] == [
        ("call_1", {"city": "Paris"}), ("call_2", {}), ("call_3", None), ("call_4", "{not json"),
        ("call_5", ["a", 1]), ("call_6", {"city": "Rome"}), ("call_7", None)]


def test_chat_sdk_object_with_empty_and_invalid_arguments():
    from openai.types.chat import ChatCompletion

    obj = ChatCompletion.model_validate(chat_response(["", "{oops"]))
    info = normalize_model_call(CHAT_REQUEST, obj)
    assert [(c.id, c.arguments) for c in info.tool_calls] == [("call_1", {}), ("call_2", "{oops")]


def test_chat_custom_tool_call_and_call_without_id():
    resp = chat_response(['{"city": "Paris"}'])
    calls = resp["choices"][0]["message"]["tool_calls"]
    calls.append({"id": "call_c", "type": "custom", "custom": {"name": "sql", "input": "SELECT 1"}})
    calls.append({"type": "function", "function": {"name": "get_weather", "arguments": "{}"}})  # no id
    info = normalize_model_call(CHAT_REQUEST, resp)
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [  # the call without an id kept, id None
        ("call_1", "get_weather", {"city": "Paris"}), ("call_c", "sql", "SELECT 1"), (None, "get_weather", {})]


def test_chat_text_answer_has_no_tool_calls_and_missing_usage_is_zero():
    resp = {"id": "c", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Sunny."}, "finish_reason": "stop"}]}
    info = normalize_model_call({"model": "m", "messages": []}, resp)
    assert info.tool_calls == ()
    assert info.usage == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


# ---------------------------------------------------------------- OpenAI Responses


def test_responses_dict_three_parallel_calls_and_usage():
    info = normalize_model_call(RESPONSES_REQUEST, responses_response(THREE))
    assert (info.format, info.provider, info.model) == ("openai.responses", "openai", "gpt-4.1-2025-04-14")
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [
        ("call_r1", "get_weather", {"city": "Paris"}), ("call_r2", "get_weather", {"city": "Oslo"}),
        ("call_r3", "get_weather", {"city": "Lima"})]
    assert info.usage == {"input_tokens": 120, "output_tokens": 45, "total_tokens": 165}


def test_responses_sdk_object():
    from openai.types.responses import Response

    resp = responses_response(THREE)
    resp["output"].insert(0, {"type": "reasoning", "id": "rs_1", "summary": []})
    resp["output"].append({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": "Working on it", "annotations": []}]})
    obj = Response.model_validate(resp)
    info = normalize_model_call(RESPONSES_REQUEST, obj)
    assert info.format == "openai.responses"
    assert [c.id for c in info.tool_calls] == ["call_r1", "call_r2", "call_r3"]
    assert [c.arguments for c in info.tool_calls] == THREE_DECODED
    assert info.usage == {"input_tokens": 120, "output_tokens": 45, "total_tokens": 165}
    assert [item["type"] for item in info.response["output"]] == [
        "reasoning", "function_call", "function_call", "function_call", "message"]


def test_responses_arguments_variants_and_hosted_calls_are_not_linked():
    resp = responses_response(['', 'null', '{bad', '{"city": "Oslo"}'])
    resp["output"].append({"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "x", "arguments": "{}"})
    resp["output"].append({"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_cu", "name": "grammar",
                           "input": "raw text"})
    info = normalize_model_call(RESPONSES_REQUEST, resp)
    assert [(c.id, c.arguments) for c in info.tool_calls] == [
        ("call_r1", {}), ("call_r2", None), ("call_r3", "{bad"), ("call_r4", {"city": "Oslo"}),
        ("call_cu", "raw text")]


def _client_tool_items() -> list[dict]:
    """Output items of the Responses API's built-in tools that the client carries out."""
    return [
        {"type": "computer_call", "id": "cu_1", "call_id": "call_cu1", "status": "completed",
         "pending_safety_checks": [], "action": {"type": "click", "button": "left", "x": 10, "y": 20}},
        {"type": "computer_call", "id": "cu_2", "call_id": "call_cu2", "status": "completed",
         "pending_safety_checks": [], "actions": [{"type": "keypress", "keys": ["CTRL", "S"]}]},
        {"type": "local_shell_call", "id": "ls_1", "call_id": "call_ls", "status": "completed",
         "action": {"type": "exec", "command": ["ls", "-l"], "env": {}}},
        {"type": "shell_call", "id": "sh_1", "call_id": "call_sh", "status": "completed",
         "action": {"commands": ["pwd"], "timeout_ms": 1000, "max_output_length": None}},
        {"type": "apply_patch_call", "id": "ap_1", "call_id": "call_ap", "status": "completed",
         "operation": {"type": "delete_file", "path": "old.txt"}},
        {"type": "tool_search_call", "id": "ts_1", "call_id": "call_ts", "status": "completed",
         "execution": "client", "arguments": {"query": "weather"}},
        {"type": "tool_search_call", "id": "ts_2", "call_id": "call_ts_server", "status": "completed",
         "execution": "server", "arguments": {"query": "maps"}},
    ]


CLIENT_TOOL_CALLS = [
    ("call_cu1", "computer", {"type": "click", "button": "left", "x": 10, "y": 20}),
    ("call_cu2", "computer", [{"type": "keypress", "keys": ["CTRL", "S"]}]),
    ("call_ls", "local_shell", {"type": "exec", "command": ["ls", "-l"], "env": {}}),
    ("call_sh", "shell", {"commands": ["pwd"], "timeout_ms": 1000, "max_output_length": None}),
    ("call_ap", "apply_patch", {"type": "delete_file", "path": "old.txt"}),
    ("call_ts", "tool_search", {"query": "weather"}),
]


@pytest.mark.parametrize("as_sdk_object", [False, True])
def test_responses_built_in_tools_the_client_runs_are_linked(as_sdk_object):
    """computer_call, local_shell_call, shell_call, apply_patch_call and a client-executed
    tool_search_call carry a call_id the client's own tool run answers: they were not
    returned, so the client's tool.call records were not linked to the model call. A
    tool_search_call the provider executed is not."""
    from openai.types.responses import Response

    resp = responses_response(['{"city": "Paris"}'])
    resp["output"] += _client_tool_items()
    given = Response.model_validate(resp) if as_sdk_object else resp
    info = normalize_model_call(RESPONSES_REQUEST, given)
    assert [(c.id, c.name) for c in info.tool_calls] == [
        ("call_r1", "get_weather"), *[(i, n) for i, n, _ in CLIENT_TOOL_CALLS]]
    if as_sdk_object:  # the SDK's dump fills the action models' optional fields with None
        items = given.output[1:7]
        what = [i.action if i.type != "apply_patch_call" and (i.type != "computer_call" or i.action)
                else (i.operation if i.type == "apply_patch_call" else i.actions) for i in items[:5]]
        expected = [to_plain(w) for w in what] + [{"query": "weather"}]
        assert expected[0] == {"type": "click", "button": "left", "x": 10, "y": 20, "keys": None}
    else:
        expected = [a for _, _, a in CLIENT_TOOL_CALLS]
    assert [c.arguments for c in info.tool_calls[1:]] == expected


def test_a_computer_call_links_the_clients_tool_call_to_its_model_call(tmp_path):
    import sealbox
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    resp = responses_response([])
    resp["output"] += _client_tool_items()[:1] + _client_tool_items()[2:3]
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="operator") as run:
        rec = run.model_call(RESPONSES_REQUEST, resp)
        for call in rec.tool_calls:
            run.call_tool("desktop", call.name, call.arguments, lambda **action: action["type"], call_id=call.id)
    events = store.read_run(run.run_id)
    [model] = [e for e in events if e.kind == "model.call"]
    assert (model.step, model.payload["tool_call_ids"]) == ("2", ["call_cu1", "call_ls"])  # step 1: run.started
    calls = [(store.resolve(e.payload)["call_id"], store.resolve(e.payload)["tool"], e.step)
             for e in events if e.kind == "tool.call"]
    assert calls == [("call_cu1", "computer", "2.1"), ("call_ls", "local_shell", "2.2")]
    assert sealbox.verify_store(store).ok


def test_responses_detected_without_object_field_and_model_from_request():
    resp = {"output": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}}],
            "usage": {"input_tokens": 3, "output_tokens": 2}}
    info = normalize_model_call(RESPONSES_REQUEST, resp)
    assert (info.format, info.model) == ("openai.responses", "gpt-4.1")
    assert info.tool_calls == (ToolCallRequest("c1", "f", {"a": 1}),)
    assert info.usage == {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}


# ---------------------------------------------------------------- Anthropic Messages


def test_anthropic_dict_three_parallel_calls():
    info = normalize_model_call(ANTHROPIC_REQUEST, anthropic_response(THREE_DECODED))
    assert (info.format, info.provider, info.model) == (
        "anthropic.messages", "anthropic", "claude-sonnet-4-5-20250929")
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}), ("toolu_2", "get_weather", {"city": "Oslo"}),
        ("toolu_3", "get_weather", {"city": "Lima"})]
    assert info.usage == {"input_tokens": 410, "output_tokens": 97, "total_tokens": 507}


def test_anthropic_sdk_object_and_cache_tokens_count_as_input():
    import anthropic.types as at

    resp = anthropic_response(THREE_DECODED)
    resp["usage"] = {"input_tokens": 10, "output_tokens": 97, "cache_read_input_tokens": 300,
                     "cache_creation_input_tokens": 100}
    info = normalize_model_call(ANTHROPIC_REQUEST, at.Message.model_validate(resp))
    assert info.format == "anthropic.messages"
    assert [c.id for c in info.tool_calls] == ["toolu_1", "toolu_2", "toolu_3"]
    assert [c.arguments for c in info.tool_calls] == THREE_DECODED
    assert info.usage == {"input_tokens": 410, "output_tokens": 97, "total_tokens": 507,
                          "cache_read_input_tokens": 300, "cache_creation_input_tokens": 100}


def test_anthropic_input_as_string_empty_and_null_and_server_tools_skipped():
    resp = anthropic_response(['{"city": "Paris"}', "", None, {}])
    resp["content"].append({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                            "input": {"query": "x"}})
    info = normalize_model_call(ANTHROPIC_REQUEST, resp)
    assert [(c.id, c.arguments) for c in info.tool_calls] == [
        ("toolu_1", {"city": "Paris"}), ("toolu_2", {}), ("toolu_3", None), ("toolu_4", {})]


# ---------------------------------------------------------------- robustness


@pytest.mark.parametrize("response", [
    None, "text", 42, [], {}, {"choices": "nope"}, {"choices": [None, {"message": None}]},
    {"object": "response", "output": [None, 1, {"type": "function_call"}]},
    {"type": "message", "content": [{"type": "tool_use"}], "usage": {"input_tokens": "x", "output_tokens": -4}},
    {"choices": [], "usage": {"prompt_tokens": None, "completion_tokens": True}},
])
def test_malformed_responses_never_raise(response):
    info = normalize_model_call({"messages": "x"}, response)
    assert info.tool_calls == ()
    assert all(isinstance(v, int) and v >= 0 for v in info.usage.values())


def test_unknown_format_is_recorded_as_given():
    info = normalize_model_call({"prompt": "hi"}, {"text": "hello"}, provider="local", model="llama")
    assert (info.format, info.provider, info.model, info.usage) == ("unknown", "local", "llama", {})
    assert info.response == {"text": "hello"}


def test_overrides_win_over_detection():
    info = normalize_model_call(CHAT_REQUEST, chat_response(THREE), provider="azure", model="my-deploy")
    assert (info.provider, info.model) == ("azure", "my-deploy")


def test_normalize_does_not_mutate_inputs():
    req, resp = copy.deepcopy(CHAT_REQUEST), chat_response(THREE)
    before = copy.deepcopy(resp)
    normalize_model_call(req, resp)
    assert req == CHAT_REQUEST and resp == before


@pytest.mark.parametrize(("raw", "expected"), [
    ('{"a": 1}', {"a": 1}), ({"a": 1}, {"a": 1}), ("", {}), ("  ", {}), (None, None), ("null", None),
    ("{bad", "{bad"), ("[1, 2]", [1, 2]), ('"s"', "s"), (b'{"a": 2}', {"a": 2}), (b"\xff", b"\xff"),
])
def test_parse_arguments(raw, expected):
    assert parse_arguments(raw) == expected


def test_to_plain_of_nested_sdk_objects():
    from openai.types.chat import ChatCompletion

    obj = ChatCompletion.model_validate(chat_response(THREE))
    plain = to_plain({"wrapped": [obj, (1, 2)]})
    assert plain["wrapped"][0]["id"] == "chatcmpl-A1" and plain["wrapped"][1] == [1, 2]


# ---------------------------------------------------------------- through the recorder


def test_model_call_links_three_parallel_calls_and_sums_usage(tmp_path):
    import sealbox
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="weather") as run:
        rec = run.model_call(ANTHROPIC_REQUEST, anthropic_response(THREE_DECODED))
        for call in reversed(rec.tool_calls):  # completion order does not decide the step
            run.call_tool("weather", call.name, call.arguments, lambda city: city.upper(), call_id=call.id)
        run.model_call(CHAT_REQUEST, chat_response(['{"city": "Rome"}']))
    events = store.read_run(run.run_id)
    calls = {store.resolve(e.payload)["call_id"]: e.step for e in events if e.kind == "tool.call"}
    assert calls == {"toolu_1": "2.1", "toolu_2": "2.2", "toolu_3": "2.3"}
    model_calls = [e for e in events if e.kind == "model.call"]
    assert [e.payload["tool_call_ids"] for e in model_calls] == [["toolu_1", "toolu_2", "toolu_3"], ["call_1"]]
    assert [e.payload["usage"] for e in model_calls] == [
        {"input_tokens": 410, "output_tokens": 97}, {"input_tokens": 82, "output_tokens": 51}]
    assert events[-1].payload["usage"]["input_tokens"] == 492
    assert events[-1].payload["usage"]["output_tokens"] == 148
    assert sealbox.verify_store(store).ok


def test_to_plain_survives_cycles_and_deep_nesting():
    from sealbox.adapters import TO_PLAIN_MAX_DEPTH

    request: dict = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    request["messages"].append(request)
    plain = to_plain(request)
    assert plain["messages"][0] == {"role": "user", "content": "hi"}
    assert plain["messages"][1] is request  # left as is where the cycle closes (the encoder tags it)

    shared = {"a": 1}
    assert to_plain([shared, shared]) == [{"a": 1}, {"a": 1}]  # the same object twice is not a cycle

    deep: list = []
    node = deep
    for _ in range(5000):
        node.append([])
        node = node[0]
    out = to_plain(deep)  # no RecursionError
    for _ in range(TO_PLAIN_MAX_DEPTH):
        out = out[0]
    assert out is not None
    info = normalize_model_call({"model": "m", "metadata": deep}, chat_response(THREE))
    assert [c.id for c in info.tool_calls] == ["call_1", "call_2", "call_3"]


@pytest.mark.parametrize(("usage", "want", "unread"), [
    ({"prompt_tokens": 5, "completion_tokens": 1e30}, {"input_tokens": 5}, {"output_tokens": "1e+30",
                                                                           "total_tokens": "1e+30"}),
    ({"prompt_tokens": "12", "completion_tokens": 3.0}, {"output_tokens": 3}, {"input_tokens": "'12'",
                                                                               "total_tokens": "'12'"}),
    ({"prompt_tokens": -1, "completion_tokens": True, "total_tokens": 9},
     {"total_tokens": 9}, {"input_tokens": "-1", "output_tokens": "True"}),
    ({"prompt_tokens": None, "completion_tokens": 2**53 - 1},
     {"input_tokens": 0, "output_tokens": 2**53 - 1, "total_tokens": 2**53 - 1}, {}),
    ({"prompt_tokens": 1, "completion_tokens": 2**53 - 1}, {"input_tokens": 1, "output_tokens": 2**53 - 1},
     {"total_tokens": str(2**53)}),
])
def test_usage_that_is_not_a_token_count_is_left_out_and_named(usage, want, unread):
    info = normalize_model_call({}, {"object": "chat.completion", "choices": [], "usage": usage})
    assert info.usage == want
    assert info.unreadable_usage == unread


def test_tool_arguments_nested_too_deep_for_json_keep_the_calls_links_and_the_usage(tmp_path):
    """json.loads raises RecursionError (not ValueError) on "[" * 5000: normalize_model_call then
    dropped every tool call of the response (no links: steps 3, 4 instead of 2.1, 2.2) and its
    usage (0 tokens, no anomaly)."""
    import sealbox
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    deep = "[" * 5000 + "]" * 5000
    assert parse_arguments(deep) == deep
    assert parse_arguments("[" * 100_000) == "[" * 100_000
    response = {"object": "chat.completion", "model": "gpt-4o", "choices": [{"message": {"tool_calls": [
        {"id": "call_deep", "type": "function", "function": {"name": "f", "arguments": deep}},
        {"id": "call_ok", "type": "function", "function": {"name": "g", "arguments": '{"a": 1}'}}]}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="deep") as run:
        rec = run.model_call({"model": "gpt-4o", "messages": []}, response)
        assert [(c.id, c.name, c.arguments) for c in rec.tool_calls] == [("call_deep", "f", deep),
                                                                         ("call_ok", "g", {"a": 1})]
        for call in rec.tool_calls:
            run.call_tool("s", call.name, {"raw": call.arguments}, lambda raw: len(str(raw)), call_id=call.id)
    events = store.read_run(run.run_id)
    assert {store.resolve(e.payload)["call_id"]: e.step for e in events if e.kind == "tool.call"} == {
        "call_deep": "2.1", "call_ok": "2.2"}
    model_call = next(e for e in events if e.kind == "model.call")
    assert model_call.payload["usage"] == {"input_tokens": 7, "output_tokens": 3}
    assert events[-1].payload["usage"]["input_tokens"] == 7
    assert sealbox.verify_store(store).ok
    store.close()


# ---------------------------------------------------------------- streams

def _chat_chunks() -> list[dict]:
    base = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1764000000, "model": "gpt-4o-2024-08-06"}

    def chunk(delta, finish=None, usage=None, choices=True):
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
                "usage": usage}

    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Checking "}),
        chunk({"content": "both."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, finish="tool_calls"),
        chunk(None, usage={"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}, choices=False),
    ]


def test_openai_chat_stream_chunks_are_assembled_into_the_completion():
    """A response given as its stream chunks (the SDK's ChatCompletionChunk objects) was recorded as
    format 'unknown' with no usage and no tool calls: the calls it requested were never linked."""
    from openai.types.chat import ChatCompletionChunk

    raw = _chat_chunks()
    raw[-1]["choices"] = []
    chunks = [ChatCompletionChunk.model_validate(c) for c in raw]
    info = normalize_model_call(CHAT_REQUEST, chunks)
    assert (info.format, info.provider, info.model, info.stream_chunks) == ("openai.chat", "openai",
                                                                            "gpt-4o-2024-08-06", 9)
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris"}), ("call_b", "get_weather", {"city": "Oslo"})]
    assert info.usage == {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}
    [choice] = info.response["choices"]
    assert choice["message"]["content"] == "Checking both." and choice["finish_reason"] == "tool_calls"
    assert [tc["function"]["arguments"] for tc in choice["message"]["tool_calls"]] == ['{"city": "Paris"}',
                                                                                     '{"city": "Oslo"}']
    assert info.response["object"] == "chat.completion" and info.response["id"] == "chatcmpl-9"
    # the same chunks as plain dicts, as a tuple, give the same message (the SDK's dump adds null fields)
    plain = normalize_model_call(CHAT_REQUEST, tuple(raw))
    assert plain.response["choices"] == info.response["choices"] and plain.tool_calls == info.tool_calls


def test_a_chat_stream_without_include_usage_has_no_usage():
    info = normalize_model_call(CHAT_REQUEST, _chat_chunks()[:-1])
    assert info.usage_missing is True and info.usage == {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    assert len(info.tool_calls) == 2


def test_a_long_chat_stream_is_assembled_whole():
    """2,000 chunks of 10,000 characters (20 MB, a long answer streamed with its tool call's
    arguments) assemble to the whole texts. (Each fragment used to be added to the text so far,
    quadratic: about 25 s; timing is measured in bench/, not asserted here.)"""
    piece = "x" * 10_000
    chunks = [{"object": "chat.completion.chunk", "model": "gpt-4o", "choices": [{"index": 0, "delta": {
        "content": piece, "tool_calls": [{"index": 0, "id": "call_1" if i == 0 else None,
                                          "function": {"name": "write" if i == 0 else None, "arguments": piece}}]}}]}
              for i in range(2000)]
    info = normalize_model_call(CHAT_REQUEST, chunks)
    message = info.response["choices"][0]["message"]
    assert (len(message["content"]), len(message["tool_calls"][0]["function"]["arguments"])) == (20_000_000, 20_000_000)
    assert [(c.id, c.name) for c in info.tool_calls] == [("call_1", "write")] and info.stream_chunks == 2000


def _anthropic_events() -> list[dict]:
    return [
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 300, "output_tokens": 1, "cache_read_input_tokens": 20}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"ci'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'ty": "Lima"}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_10", "name": "now", "input": {}}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 57}},
        {"type": "message_stop"},
    ]


def test_anthropic_stream_events_are_assembled_into_the_message():
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    adapter = TypeAdapter(RawMessageStreamEvent)
    events = [adapter.validate_python(e) for e in _anthropic_events()]
    info = normalize_model_call(ANTHROPIC_REQUEST, events)
    assert (info.format, info.provider, info.model, info.stream_chunks) == ("anthropic.messages", "anthropic",
                                                                            "claude-sonnet-4-5", 13)
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [("toolu_9", "get_weather", {"city": "Lima"}),
                                                                      ("toolu_10", "now", {})]
    assert info.usage["input_tokens"] == 320 and info.usage["output_tokens"] == 57  # cache reads count as input
    assert [(b["type"], b.get("text"), b.get("input")) for b in info.response["content"]] == [
        ("text", "Let me look.", None), ("tool_use", None, {"city": "Lima"}), ("tool_use", None, {})]
    assert info.response["stop_reason"] == "tool_use" and info.usage_missing is False


def test_anthropic_stream_citations_thinking_and_server_tools_are_kept():
    """A text block's citations_delta events were dropped (the block was recorded "citations": null);
    thinking and signature deltas are joined, a server_tool_use block gets its input but is no
    client-side tool call."""
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    cite = {"type": "web_search_result_location", "cited_text": "Lima: 19 C", "url": "https://w.example/lima",
            "title": "Lima", "encrypted_index": "ix1"}
    raw = [
        {"type": "message_start", "message": {
            "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Search "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "first."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCk"}},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"query": "lima"}'}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": "", "citations": None}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "citations_delta", "citation": cite}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "It is 19 C."}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ]
    adapter = TypeAdapter(RawMessageStreamEvent)
    info = normalize_model_call(ANTHROPIC_REQUEST, [adapter.validate_python(e) for e in raw])
    thinking, server, text = info.response["content"]
    assert (thinking["thinking"], thinking["signature"]) == ("Search first.", "EqQBCk")
    assert (server["type"], server["input"]) == ("server_tool_use", {"query": "lima"})
    assert (text["text"], text["citations"]) == ("It is 19 C.", [cite])
    assert (info.tool_calls, info.usage) == ((), {"input_tokens": 10, "output_tokens": 40, "total_tokens": 50})


def test_openai_responses_stream_events_give_the_completed_response():
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    done = {"id": "resp_1", "object": "response", "created_at": 1764000000, "model": "gpt-4.1", "status": "completed",
            "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "get_weather",
                        "arguments": '{"city": "Rome"}', "status": "completed"}],
            "usage": {"input_tokens": 33, "output_tokens": 9, "total_tokens": 42,
                      "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    raw = [{"type": "response.created", "sequence_number": 0, "response": started},
           {"type": "response.function_call_arguments.delta", "sequence_number": 1, "item_id": "fc_1",
            "output_index": 0, "delta": '{"city": "Rome"}'},
           {"type": "response.completed", "sequence_number": 2, "response": done}]
    adapter = TypeAdapter(ResponseStreamEvent)
    info = normalize_model_call({"model": "gpt-4.1"}, [adapter.validate_python(e) for e in raw])
    assert (info.format, info.stream_chunks, info.response["status"]) == ("openai.responses", 3, "completed")
    assert [(c.id, c.arguments) for c in info.tool_calls] == [("call_r1", {"city": "Rome"})]
    assert info.usage == {"input_tokens": 33, "output_tokens": 9, "total_tokens": 42}


def test_a_list_that_is_no_stream_is_recorded_as_given():
    for value in ([], [1, 2], [{"a": 1}], [{"object": "chat.completion"}]):
        info = normalize_model_call({}, value)
        assert (info.format, info.stream_chunks, info.response) == ("unknown", 0, value)


def test_a_list_of_dicts_whose_type_is_not_a_string_is_recorded_as_given():
    """A list of JSON schemas ({"type": ["string", "null"]}) raised TypeError: unhashable type: 'list'
    (normalize_model_call never raises on malformed content)."""
    for value in ([{"type": ["string", "null"]}, {"type": "object"}], [{"type": {"a": 1}}]):
        info = normalize_model_call({}, value)
        assert (info.format, info.stream_chunks, info.response, info.usage_missing) == ("unknown", 0, value, False)
    # a stream with such an item is still read as the stream it is
    info = normalize_model_call({}, [{"type": ["x"]}, {"type": "message_start", "message": {
        "model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, "output_tokens": 1}}}])
    assert (info.format, info.stream_chunks, info.usage) == ("anthropic.messages", 2, {
        "input_tokens": 3, "output_tokens": 1, "total_tokens": 4})


def test_a_streamed_model_call_is_recorded_assembled_and_its_tool_calls_linked(tmp_path):
    import sealbox
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="weather") as run:
        rec = run.model_call(CHAT_REQUEST, _chat_chunks())
        for call in rec.tool_calls:
            run.call_tool("weather", call.name, call.arguments, lambda city: city.upper(), call_id=call.id)
    events = store.read_run(run.run_id)
    [model] = [store.resolve(e.payload) for e in events if e.kind == "model.call"]
    assert (model["format"], model["stream"], model["tool_call_ids"]) == ("openai.chat", {"chunks": 9},
                                                                          ["call_a", "call_b"])
    assert model["usage"] == {"input_tokens": 40, "output_tokens": 12}
    assert model["response"]["choices"][0]["message"]["content"] == "Checking both."
    assert [e.step for e in events if e.kind == "tool.call"] == ["2.1", "2.2"]
    assert sealbox.verify_store(store).ok


def test_chat_stream_tool_call_fragments_without_index_are_assembled_by_id():
    """Some OpenAI-compatible servers leave ``index`` out of tool call fragments: each fragment
    became a call of its own (three calls for one, with an id of None and arguments cut in pieces).
    A fragment with an id starts a call (or continues the call with that id), one without continues
    the last call."""
    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1764000000, "model": "local-llm"}

    def chunk(tool_calls, finish=None):
        return {**base, "choices": [{"index": 0, "delta": {"tool_calls": tool_calls}, "finish_reason": finish}]}

    chunks = [
        chunk([{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}]),
        chunk([{"function": {"arguments": 'ty": "Paris"}'}}]),
        chunk([{"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]),
        chunk([{"function": {"arguments": '{"tz": '}}]),
        chunk([{"id": "call_2", "function": {"arguments": '"UTC"}'}}], finish="tool_calls"),  # the id repeated
    ]
    info = normalize_model_call(CHAT_REQUEST, chunks)
    assert [(c.id, c.name, c.arguments) for c in info.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_time", {"tz": "UTC"})]
    [choice] = info.response["choices"]
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}}]
    assert set(choice) == {"index", "message", "finish_reason"}  # nothing of the assembly left in the record
