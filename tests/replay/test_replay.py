"""Replay of real agents (plain chat-completions loop, OpenAI Agents SDK, LangGraph) from the record.

Every agent makes three parallel tool calls in one model turn; they complete in
the order 3, 1, 2 when recorded, and in another order on replay.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import replay_agents as ra  # noqa: E402

import sealbox  # noqa: E402
from sealbox.errors import ConfigError  # noqa: E402
from sealbox.policy import Policy  # noqa: E402
from sealbox.redaction import ContentPolicy  # noqa: E402
from sealbox.replay import Replayer, render_divergence  # noqa: E402
from sealbox.replay.fixtures import load_run, read_fixture, step_keys  # noqa: E402
from sealbox.snapshot import Snapshot  # noqa: E402

KINDS = ["plain", "sdk", "langgraph"]
FIXTURES = HERE / "fixtures"
PROMPT_FIELD = {"plain": "messages[0].content", "sdk": "instructions", "langgraph": "messages[0].content"}
NEW_PROMPT = ra.SYSTEM + " Answer in French."


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def record(store, kind, **kwargs):
    return asyncio.run(ra.record(store, kind, **kwargs))


def result_order(store, run_id):
    return [e.step for e in store.read_run(run_id) if e.kind == "tool.result"]


def ended(store, run_id):
    return store.read_run(run_id)[-1]


# ----------------------------------------------------------------------------- reproduce


@pytest.mark.parametrize("kind", KINDS)
def test_recorded_run_reproduces_with_parallel_calls_completing_in_another_order(store, kind):
    run_id = record(store, kind)
    assert result_order(store, run_id) == ["2.3", "2.1", "2.2"]  # Lima (no delay), Paris, Oslo

    tools = ra.Tools()
    result = Replayer(store).replay(run_id, ra.AGENTS[kind](tools=tools))

    assert result.reproduced and result.divergence is None
    assert result.steps_compared == (6 if kind == "langgraph" else 5)  # 2 model calls, 3 tools (+ final state)
    assert tools.invoked == []  # served from the record: no tool ran
    assert result_order(store, result.new_run_id) == ["2.1", "2.2", "2.3"]
    started, end = store.read_run(result.new_run_id)[0], ended(store, result.new_run_id)
    assert started.payload["replay_of"] == run_id
    assert end.kind == "run.ended" and end.payload["status"] == "ok"
    assert end.payload["verdict"] == {"reproduced": True, "replay_of": run_id, "steps_compared": result.steps_compared,
                                      "divergence": None, "config_drift": []}
    assert step_keys(store, result.new_run_id) == step_keys(store, run_id)
    assert sealbox.verify_store(store).ok


@pytest.mark.parametrize("kind", KINDS)
def test_changed_prompt_diverges_at_the_first_model_call_with_the_field_diff(store, kind):
    run_id = record(store, kind)

    result = Replayer(store).replay(run_id, ra.AGENTS[kind](change="prompt"))

    d = result.divergence
    assert not result.reproduced and result.steps_compared == 0
    assert (d.kind, d.step, d.mismatched) == ("mismatch", "2", ("hash",))
    assert (d.recorded.kind, d.attempted.kind) == ("model.call", "model.call")
    assert d.recorded.name == d.attempted.name and d.recorded.hash != d.attempted.hash
    assert [(x.path, x.change, x.a, x.b) for x in d.diff] == [(PROMPT_FIELD[kind], "changed", ra.SYSTEM, NEW_PROMPT)]
    verdict = ended(store, result.new_run_id).payload["verdict"]
    assert verdict["reproduced"] is False and verdict["divergence"]["step"] == "2"
    assert verdict["divergence"]["fields"] == [PROMPT_FIELD[kind]]
    assert ended(store, result.new_run_id).payload["status"] == "cancelled"
    assert [e.kind for e in store.read_run(result.new_run_id)] == ["run.started", "run.ended"]  # nothing after


def test_changed_tool_argument_diverges_at_that_call_before_it_is_recorded(store):
    run_id = record(store, "plain")
    tools = ra.Tools()

    result = Replayer(store).replay(run_id, ra.plain_agent(tools=tools, change="argument"))

    d = result.divergence
    assert (d.kind, d.step, d.mismatched) == ("mismatch", "2.2", ("hash",))
    assert d.recorded.name == d.attempted.name == "local/get_time"
    assert result.steps_compared == 2  # step 2 and 2.1; 2.3 is not compared once replay has stopped
    assert [(x.path, x.change, x.a, x.b) for x in d.diff] == [("utc_offset", "changed", 1, 2)]
    assert d.recorded_content == {"city": "Oslo", "utc_offset": 1}
    assert d.attempted_content == {"city": "Oslo", "utc_offset": 2}
    assert tools.invoked == []
    text = render_divergence(d)
    assert "diverged at step 2.2: mismatch" in text and "~ utc_offset: 1 -> 2" in text
    assert "2.2" not in [e.step for e in store.read_run(result.new_run_id) if e.kind == "tool.call"]


def test_extra_step_at_the_end_is_a_divergence(store):
    run_id = record(store, "plain")
    inner = ra.plain_agent()

    async def agent(run):
        await inner(run)
        run.note("one more thing")

    d = Replayer(store).replay(run_id, agent).divergence
    assert (d.kind, d.step, d.recorded, d.attempted.kind) == ("extra", "4", None, "note")


def test_missing_steps_at_the_end_are_a_divergence(store):
    run_id = record(store, "plain")
    chat = ra.ScriptedChat()

    def agent(run):  # stops after the first model call, without calling tools
        run.complete({"model": ra.MODEL, "messages": [{"role": "system", "content": ra.SYSTEM},
                                                      {"role": "user", "content": ra.QUESTION}],
                      "tools": ra.TOOL_SPECS}, chat)

    result = Replayer(store).replay(run_id, agent)
    d = result.divergence
    assert (d.kind, d.step, d.recorded.name, d.attempted) == ("missing", "2.1", "local/get_weather", None)
    assert result.steps_compared == 1 and chat.requests == []


def test_different_name_is_reported_as_a_name_mismatch(store):
    run_id = record(store, "plain")

    def agent(run):
        run.complete({"model": "gpt-5", "messages": []}, lambda r: {})

    d = Replayer(store).replay(run_id, agent).divergence
    # the response is served from the record, so the model name (read from it) matches; the request does not
    assert (d.kind, d.step, d.mismatched) == ("mismatch", "2", ("hash",))

    def tool_first(run):
        run.call_tool("local", "get_weather", {"city": "Paris"}, lambda city: "x")

    d = Replayer(store).replay(run_id, tool_first).divergence
    assert (d.kind, d.step, d.mismatched) == ("mismatch", "2", ("kind", "name", "hash"))
    assert (d.recorded.kind, d.attempted.kind) == ("model.call", "tool.call")


# ----------------------------------------------------------------------------- outcomes


def test_recorded_deny_is_served_as_a_deny_and_the_tool_never_runs(store):
    deny = Policy.from_text("version: 1\nrules:\n  - id: no-clock\n    match: {server: local, tool: get_time}\n"
                            "    effect: deny\n  - id: rest\n    effect: allow\n")
    run_id = record(store, "plain", policy=deny)
    tools = ra.Tools()

    result = Replayer(store).replay(run_id, ra.plain_agent(tools=tools))

    assert result.reproduced, result.divergence
    assert tools.invoked == []
    events = store.read_run(result.new_run_id)
    decisions = {e.step: (e.payload["effect"], e.payload["rule"]) for e in events if e.kind == "policy.decision"}
    assert decisions == {"2.1": ("allow", "rest"), "2.2": ("deny", "no-clock"), "2.3": ("allow", "rest")}
    assert "2.2" not in [e.step for e in events if e.kind == "tool.result"]


def test_outcome_unknown_ends_the_replay_and_says_so(store):
    run_id = ra.record_unknown_outcome(store)
    tools = ra.Tools()

    result = Replayer(store).replay(run_id, ra.plain_agent(tools=tools))

    d = result.divergence
    assert (d.kind, d.step) == ("outcome_unknown", "2.1")
    assert "outcome is unknown" in d.message and "does not run it again" in d.message
    assert tools.invoked == [] and not result.reproduced


def test_agent_error_is_compared_with_how_the_recorded_run_ended(store):
    run_id = record(store, "plain")
    inner = ra.plain_agent()

    async def agent(run):
        await inner(run)
        raise ValueError("boom after the last step")

    result = Replayer(store).replay(run_id, agent)
    assert (result.divergence.kind, result.steps_compared) == ("outcome", 5)
    assert "recorded run ended ok and the replay ended error: ValueError: boom" in result.divergence.message


# ----------------------------------------------------------------------------- modes


def test_live_tools_need_explicit_side_effects_and_a_policy(store):
    run_id = record(store, "plain")
    with pytest.raises(ConfigError, match="side_effects"):
        Replayer(store, policy=sealbox.policies.ALLOW_ALL).replay(run_id, ra.plain_agent(), tools="live")
    with pytest.raises(ConfigError, match="policy"):
        Replayer(store).replay(run_id, ra.plain_agent(), tools="live", side_effects=True)


def test_live_tools_run_for_real_in_another_order_and_still_reproduce(store):
    run_id = record(store, "plain")
    tools = ra.Tools(reverse=True)

    result = Replayer(store, policy=sealbox.policies.ALLOW_ALL).replay(
        run_id, ra.plain_agent(tools=tools), tools="live", side_effects=True)

    assert result.reproduced, result.divergence and render_divergence(result.divergence)
    assert sorted(tools.invoked) == [("get_time", "Oslo"), ("get_weather", "Lima"), ("get_weather", "Paris")]
    assert result_order(store, result.new_run_id) == ["2.2", "2.1", "2.3"]  # reversed delays


def test_live_model_calls_the_model_and_tools_still_come_from_the_record(store):
    run_id = record(store, "plain")
    chat, tools = ra.ScriptedChat(), ra.Tools()

    result = Replayer(store).replay(run_id, ra.plain_agent(tools=tools, chat=chat), model="live")

    assert result.reproduced and len(chat.requests) == 2 and tools.invoked == []


# ----------------------------------------------------------------------------- conditions


def snapshot(version: str) -> Snapshot:
    return Snapshot(model={"provider": "openai", "name": "gpt-4o", "version": version}, system_prompt=ra.SYSTEM)


def test_config_drift_stops_replay_before_it_starts(store):
    run_id = record(store, "plain", snapshot=snapshot("2024-08-06"))
    runs_before = len(store.runs())

    result = Replayer(store).replay(run_id, ra.plain_agent(), snapshot=snapshot("2024-05-13"))

    assert not result.reproduced and result.new_run_id is None and result.steps_compared == 0
    assert result.divergence.kind == "config_drift"
    assert [(d.path, d.a, d.b) for d in result.config_drift] == [("model.version", "2024-08-06", "2024-05-13")]
    assert len(store.runs()) == runs_before  # nothing recorded


def test_allowed_config_drift_proceeds_and_lists_the_fields(store):
    run_id = record(store, "plain", snapshot=snapshot("2024-08-06"))

    result = Replayer(store).replay(run_id, ra.plain_agent(), snapshot=snapshot("2024-05-13"),
                                    allow_config_drift=True)

    assert result.reproduced and [d.path for d in result.config_drift] == ["model.version"]
    assert ended(store, result.new_run_id).payload["verdict"]["config_drift"] == ["model.version"]
    assert store.read_run(result.new_run_id)[0].payload["snapshot"] == snapshot("2024-05-13").fingerprint


def test_same_snapshot_is_no_drift(store):
    run_id = record(store, "plain", snapshot=snapshot("2024-08-06"))
    result = Replayer(store).replay(run_id, ra.plain_agent(), snapshot=snapshot("2024-08-06"))
    assert result.reproduced and result.config_drift == ()


# ----------------------------------------------------------------------------- content modes


def test_hashes_only_run_says_which_steps_cannot_be_replayed_and_why(tmp_path):
    store = sealbox.init_store(tmp_path / "h", content=ContentPolicy(mode="hashes-only"))
    run_id = record(store, "plain")

    result = Replayer(store).replay(run_id, ra.plain_agent())

    assert [(u.step, u.kind) for u in result.unreplayable] == [
        ("2", "model.call"), ("2.1", "tool.call"), ("2.2", "tool.call"), ("2.3", "tool.call"), ("3", "model.call")]
    assert all("redacted content (store content mode: hashes-only)" in u.reason for u in result.unreplayable)
    d = result.divergence
    assert (d.kind, d.step) == ("unreplayable", "2")
    assert d.recorded == d.attempted  # the request itself still matched, by its HMAC marker
    store.close()


def test_redacted_result_makes_only_that_step_unreplayable(tmp_path):
    store = sealbox.init_store(tmp_path / "r")  # default mode: redacted
    key = "sk-" + "A" * 24

    def agent(run):
        run.call_tool("vault", "read", {"name": "openai"}, lambda name: {"api_key": key})
        run.call_tool("local", "echo", {"text": "hi"}, lambda text: text)

    with sealbox.recorder.Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="vault") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)

    assert [(u.step, u.name) for u in result.unreplayable] == [("2", "vault/read")]
    assert (result.divergence.kind, result.divergence.step) == ("unreplayable", "2")
    # with tools live, the redacted result is not needed: the tool runs and the run reproduces
    live = Replayer(store, policy=sealbox.policies.ALLOW_ALL).replay(run.run_id, agent, tools="live",
                                                                      side_effects=True)
    assert live.reproduced and live.unreplayable == ()
    store.close()


# ----------------------------------------------------------------------------- fixtures (CI)


@pytest.mark.parametrize("kind", KINDS)
def test_fixture_replays_and_fresh_recording_has_the_same_step_keys(store, kind):
    fixture = read_fixture(FIXTURES / f"{kind}.json")
    run_id = load_run(store, fixture)
    assert step_keys(store, run_id) == fixture["keys"]

    assert Replayer(store).replay(run_id, ra.AGENTS[kind]()).reproduced
    fresh = record(store, kind)
    assert step_keys(store, fresh) == fixture["keys"]  # a change in how runs are recorded shows up here


@pytest.mark.parametrize("kind", KINDS)
def test_fixture_must_diverge_when_the_prompt_changes(store, kind):
    run_id = load_run(store, read_fixture(FIXTURES / f"{kind}.json"))
    d = Replayer(store).replay(run_id, ra.AGENTS[kind](change="prompt")).divergence
    assert (d.kind, d.step, [x.path for x in d.diff]) == ("mismatch", "2", [PROMPT_FIELD[kind]])


def test_fixture_of_a_denied_call_reproduces_and_unknown_outcome_stops(store):
    denied = load_run(store, read_fixture(FIXTURES / "plain_denied.json"))
    assert Replayer(store).replay(denied, ra.plain_agent()).reproduced
    unknown = load_run(store, read_fixture(FIXTURES / "plain_unknown_outcome.json"))
    d = Replayer(store).replay(unknown, ra.plain_agent()).divergence
    assert (d.kind, d.step) == ("outcome_unknown", "2.1")


def test_fixture_diverges_at_the_changed_argument(store):
    run_id = load_run(store, read_fixture(FIXTURES / "plain.json"))
    d = Replayer(store).replay(run_id, ra.plain_changed).divergence
    assert (d.step, [(x.path, x.a, x.b) for x in d.diff]) == ("2.2", [("utc_offset", 1, 2)])


def test_areplay_inside_a_running_loop_and_replay_refuses_an_async_agent_there(store):
    run_id = record(store, "plain")
    agent = ra.plain_agent()

    async def main():
        with pytest.raises(ConfigError, match="areplay"):
            Replayer(store).replay(run_id, agent)
        return await Replayer(store).areplay(run_id, agent)

    assert asyncio.run(main()).reproduced


def _read_chat(chunks) -> tuple[str, list]:
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    calls: dict[int, dict] = {}
    for c in chunks:
        for tc in (c["choices"][0]["delta"].get("tool_calls") or []) if c["choices"] else []:
            call = calls.setdefault(tc["index"], {"id": None, "arguments": ""})
            call["id"] = tc.get("id") or call["id"]
            call["arguments"] += (tc.get("function") or {}).get("arguments") or ""
    return text, [calls[i] for i in sorted(calls)]


def _read_anthropic(events) -> str:
    return "".join(e["delta"].get("text") or e["delta"].get("partial_json") or ""
                   for e in events if e["type"] == "content_block_delta")


def test_a_model_response_given_as_stream_chunks_is_served_as_chunks_in_a_replay(store):
    """complete() returning a list of stream chunks is recorded assembled (stream: {chunks: N}); its
    replay served the assembled response, a dict, to an agent that reads a list of chunks (TypeError:
    string indices must be integers): no such run could be replayed. It is served as chunks of its
    format that add up to the recorded response."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764000000, "model": "gpt-4o"}
    chat = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Chec"}, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {"content": "king.", "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}]},
                "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]},
                                  "finish_reason": "tool_calls"}]},
            {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}}]
    anthropic = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                                              "content": [], "usage": {"input_tokens": 30, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Lo"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "oking. "}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"tz": "UTC"}'}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}},
        {"type": "message_stop"}]
    responses = [{"type": "response.created", "sequence_number": 0, "response": {"object": "response", "output": []}},
                 {"type": "response.completed", "sequence_number": 1, "response": {
                     "id": "resp_1", "object": "response", "model": "gpt-4.1", "status": "completed",
                     "output": [{"type": "message", "content": [{"type": "output_text", "text": "Done."}]}],
                     "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}}]

    def agent(run):
        text, calls = _read_chat(run.complete({"model": "gpt-4o", "messages": []}, lambda r: chat))
        run.note(text, about=calls)
        run.note(_read_anthropic(run.complete({"model": "claude-sonnet-4-5", "messages": []}, lambda r: anthropic)))
        done = [e for e in run.complete({"model": "gpt-4.1", "input": "x"}, lambda r: responses)
                if e["type"] == "response.completed"]
        run.note(done[0]["response"]["output"][0]["content"][0]["text"])

    with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert (result.reproduced, result.agent_error, result.divergence) == (True, None, None)
    notes = [store.resolve(e.payload) for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert [(n["text"], n.get("about")) for n in notes] == [
        ("Checking.", [{"id": "call_a", "arguments": '{"city": "Oslo"}'}]), ('Looking. {"tz": "UTC"}', None),
        ("Done.", None)]
    calls = [store.resolve(e.payload) for e in store.read_run(result.new_run_id) if e.kind == "model.call"]
    assert [(c["format"], c["usage"], c["tool_call_ids"]) for c in calls] == [
        ("openai.chat", {"input_tokens": 9, "output_tokens": 4}, ["call_a"]),
        ("anthropic.messages", {"input_tokens": 30, "output_tokens": 20}, ["toolu_1"]),
        ("openai.responses", {"input_tokens": 5, "output_tokens": 2}, [])]


def test_an_async_stream_is_served_as_an_async_iterator_of_chunks_in_a_replay(store):
    """acomplete() of a call that returned an async stream: in the replay the agent reads the
    served chunks with async for, as it read the recorded stream."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764000000, "model": "gpt-4o"}
    chat = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Chec"}, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {"content": "king."}, "finish_reason": "stop"}]}]

    async def live(_request):
        for chunk in chat:
            yield chunk

    async def agent(run):
        text = ""
        async for chunk in await run.acomplete({"model": "gpt-4o", "messages": []}, live):
            text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
        run.note(text)

    async def record():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
            await agent(run)
        return run

    run = asyncio.run(record())
    result = Replayer(store).replay(run.run_id, agent)
    assert (result.reproduced, result.agent_error, result.divergence) == (True, None, None)
    notes = [store.resolve(e.payload)["text"] for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert notes == ["Checking."]
    [call] = [store.resolve(e.payload) for e in store.read_run(result.new_run_id) if e.kind == "model.call"]
    assert (call["format"], call["response"]["choices"][0]["message"]["content"]) == ("openai.chat", "Checking.")


def test_an_async_stream_read_in_async_with_is_served_in_a_replay(store):
    """The OpenAI SDK's idiom is `async with await client...create(stream=True) as stream`; an
    AsyncRecordedStream supports it live, so the replayed chunks must too (an agent that works live
    must not fail in its replay with a TypeError about the context manager protocol)."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764000000, "model": "gpt-4o"}
    chat = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Chec"}, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {"content": "king."}, "finish_reason": "stop"}]}]

    async def live(_request):
        for chunk in chat:
            yield chunk

    async def agent(run):
        text = ""
        async with await run.acomplete({"model": "gpt-4o", "messages": []}, live) as stream:
            async for chunk in stream:
                text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
        run.note(text)

    async def record():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
            await agent(run)
        return run

    run = asyncio.run(record())
    result = Replayer(store).replay(run.run_id, agent)
    assert (result.reproduced, result.agent_error, result.divergence) == (True, None, None)
    notes = [store.resolve(e.payload)["text"] for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert notes == ["Checking."]


def test_a_stream_read_in_with_is_served_in_a_replay(store):
    """`with client.chat.completions.create(stream=True) as stream` is the SDK's idiom and a
    RecordedStream supports it live; the replayed chunks (a list) must support it too."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764000000, "model": "gpt-4o"}
    chat = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Chec"}, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {"content": "king."}, "finish_reason": "stop"}]}]

    def agent(run):
        with run.complete({"model": "gpt-4o", "messages": []}, lambda r: iter(chat)) as stream:
            text = "".join(c["delta"].get("content") or "" for chunk in stream for c in chunk["choices"])
        run.note(text)

    with Recorder(store, policy=ALLOW_ALL).run(agent="streamer") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert (result.reproduced, result.agent_error, result.divergence) == (True, None, None)
    notes = [store.resolve(e.payload)["text"] for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert notes == ["Checking."]


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_answer_served_from_the_record_has_no_latency_not_zero(store, kind):
    run_id = record(store, kind)
    result = Replayer(store).replay(run_id, ra.AGENTS[kind](tools=ra.Tools()))
    assert result.reproduced

    def latencies(rid):
        return [e.payload["latency_us"] for e in store.read_run(rid) if e.kind == "model.call"]

    assert len(latencies(run_id)) == 2 and all(type(us) is int for us in latencies(run_id))
    assert latencies(result.new_run_id) == [None, None]  # the model was not called: its latency is not known


def test_a_state_label_redacted_by_a_pattern_still_reproduces(tmp_path):
    """The store redacts a state label's pattern matches (sk-…); the replay compares the label as
    the store would keep it, so the same agent reproduces, and a changed label still diverges."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = sealbox.init_store(tmp_path / "r")  # default mode: redacted
    key = "sk-" + "B" * 24

    def agent(run, label=f"after {key}"):
        run.save_state({"n": 1}, label=label)
        run.call_tool("local", "echo", {"text": "hi"}, lambda text: text)

    with Recorder(store, policy=ALLOW_ALL).run(agent="labels") as run:
        agent(run)
    (saved,) = [e for e in store.read_run(run.run_id) if e.kind == "state.saved"]
    assert saved.payload["label"] == "after ⟦redacted:" + store.redactor.marker(key)["$redacted"] + "⟧"
    result = Replayer(store).replay(run.run_id, agent)
    assert result.reproduced and result.divergence is None and result.steps_compared == 2
    changed = Replayer(store).replay(run.run_id, lambda run: agent(run, label="after sk-" + "C" * 24))
    assert (changed.divergence.kind, changed.divergence.step) == ("mismatch", saved.step)
    store.close()
