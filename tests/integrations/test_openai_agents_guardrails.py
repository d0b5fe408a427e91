"""The OpenAI Agents SDK's guardrails in a Sealbox run: recorded (a ``note`` per guardrail run, a
``guardrail.tripped`` beside it when it trips) and served from the record in a replay, with the real
``agents`` package and scripted models (no model service is contacted)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from agents import (  # noqa: E402
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    Runner,
    function_tool,
    input_guardrail,
    output_guardrail,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.tool_guardrails import ToolGuardrailFunctionOutput, tool_input_guardrail  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import sealbox  # noqa: E402
from sealbox.integrations.openai_agents import instrument, recorded_guardrails  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402
from sealbox.replay import Replayer  # noqa: E402

set_tracing_disabled(True)


class Verdict(BaseModel):
    """What the guardrail agent answers (its output type)."""

    is_math: bool
    reasoning: str


def verdict(is_math: bool) -> list:
    text = Verdict(is_math=is_math, reasoning="asks for a sum" if is_math else "a greeting").model_dump_json()
    return [assistant_message(text)]


class Guarded:
    """An agent with an input guardrail that asks a guardrail agent (its own scripted model, counted)."""

    def __init__(self, guardrail_says_math: bool, answer: str = "Hello!", parallel: bool = True) -> None:
        self.guardrail_model = ScriptedModel([verdict(guardrail_says_math)])
        self.model = ScriptedModel([[assistant_message(answer)]])
        checker = Agent(name="math-check", instructions="Is this a math question?", model=self.guardrail_model,
                        output_type=Verdict)

        @input_guardrail(run_in_parallel=parallel)
        async def no_math(ctx, agent, input):
            result = await Runner.run(checker, input, context=ctx.context)
            return GuardrailFunctionOutput(output_info=result.final_output,
                                           tripwire_triggered=result.final_output.is_math)

        self.agent = Agent(name="tutor", instructions="Help.", model=self.model, input_guardrails=[no_math])

    async def __call__(self, run, question: str = "Hi there"):
        return await Runner.run(instrument(run, self.agent, provider="scripted"), question)


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def record(store, agent, *args):
    box: list = []

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="tutor") as run:
            box.append(run.run_id)
            await agent(run, *args)

    try:
        asyncio.run(go())
    except (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered):
        pass  # the run ended with it (run.ended, status error)
    return box[0]


def events(store, run_id):
    """(kind, step, payload) of each event, without a note's next_step (asserted on its own)."""
    out = []
    for e in store.read_run(run_id):
        payload = store.resolve(e.payload)
        if e.kind == "note":
            payload.pop("next_step")
        out.append((e.kind, e.step, payload))
    return out


def test_a_passing_input_guardrail_is_a_note_with_its_output_info(store):
    agent = Guarded(guardrail_says_math=False)
    run_id = record(store, agent)
    evs = events(store, run_id)
    # the guardrail runs beside the model call (run_in_parallel): it takes its step when it starts, before
    # the model call's, and is written when it ends, after it
    assert [(k, s) for k, s, _ in evs] == [("run.started", "1"), ("model.call", "3"), ("note", "2"),
                                           ("run.ended", "4")]
    assert [e.payload.get("next_step") for e in store.read_run(run_id)] == [None, None, 4, None]
    assert evs[2][2] == {
        "text": "input guardrail 'no_math' of agent 'tutor': passed",
        "about": {"guardrail": {"name": "no_math", "kind": "input", "agent": "tutor", "tripped": False,
                                "output_info": {"$pydantic": {
                                    "type": f"{Verdict.__module__}.Verdict",
                                    "fields": {"is_math": False, "reasoning": "a greeting"}}}}}}
    assert evs[-1][2]["status"] == "ok"
    assert not [k for k, _, _ in evs if k == "guardrail.tripped"]
    assert sealbox.verify_store(store).ok


def test_a_tripped_input_guardrail_is_a_guardrail_tripped_beside_its_note(store):
    agent = Guarded(guardrail_says_math=True, parallel=False)  # before the model: the model is never called
    run_id = record(store, agent, "What is 2+2?")
    evs = events(store, run_id)
    assert [(k, s) for k, s, _ in evs] == [("run.started", "1"), ("note", "2"), ("guardrail.tripped", "2"),
                                           ("run.ended", "3")]
    note, tripped, ended = evs[1][2], evs[2][2], evs[3][2]
    assert note["text"] == "input guardrail 'no_math' of agent 'tutor': tripped"
    assert note["about"]["guardrail"]["tripped"] is True
    assert note["about"]["guardrail"]["output_info"]["$pydantic"]["fields"] == {"is_math": True,
                                                                               "reasoning": "asks for a sum"}
    assert tripped == {"limit": "input_guardrail:no_math", "current": 1, "bound": 0,
                       "guardrail": {"name": "no_math", "kind": "input", "agent": "tutor"}}
    assert (ended["status"], ended["error"]["type"]) == ("error", "InputGuardrailTripwireTriggered")
    assert agent.model.calls == () and len(agent.guardrail_model.calls) == 1  # the tutor's model never ran


def test_a_tripped_output_guardrail_is_recorded_after_the_model_call(store):
    @output_guardrail
    async def no_secrets(ctx, agent, output):
        leaked = "password" in output
        return GuardrailFunctionOutput(output_info={"leaked": leaked, "api_key": "sk-live-123"},
                                       tripwire_triggered=leaked)

    model = ScriptedModel([[assistant_message("the password is hunter2")]])
    tutor = Agent(name="tutor", model=model, output_guardrails=[no_secrets])

    async def agent(run):
        return await Runner.run(instrument(run, tutor, provider="scripted"), "Tell me")

    run_id = record(store, agent)
    evs = events(store, run_id)
    assert [(k, s) for k, s, _ in evs] == [("run.started", "1"), ("model.call", "2"), ("note", "3"),
                                           ("guardrail.tripped", "3"), ("run.ended", "4")]
    note = evs[2][2]
    assert note["text"] == "output guardrail 'no_secrets' of agent 'tutor': tripped"
    info = note["about"]["guardrail"]["output_info"]
    assert info["leaked"] is True and set(info["api_key"]) == {"$redacted"}  # redacted as content
    assert evs[3][2] == {"limit": "output_guardrail:no_secrets", "current": 1, "bound": 0,
                         "guardrail": {"name": "no_secrets", "kind": "output", "agent": "tutor"}}
    assert evs[4][2]["error"]["type"] == "OutputGuardrailTripwireTriggered"
    assert sealbox.verify_store(store).ok


def test_a_tool_input_guardrail_that_rejects_a_call_is_recorded_with_the_call_id(store):
    ran: list = []

    @tool_input_guardrail
    def no_paris(data):
        if "Paris" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.reject_content("not Paris", output_info={"city": "Paris"})
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[no_paris])
    def get_weather(city: str) -> str:
        """Weather."""
        ran.append(city)
        return "Sunny"

    model = ScriptedModel([[function_call("get_weather", {"city": "Paris"}, call_id="call_p")],
                           [assistant_message("Cannot.")]])
    bot = Agent(name="tutor", model=model, tools=[get_weather])

    async def agent(run):
        return await Runner.run(instrument(run, bot, provider="scripted"), "Weather in Paris?")

    run_id = record(store, agent)
    evs = events(store, run_id)
    assert ran == []
    assert [(k, s) for k, s, _ in evs] == [("run.started", "1"), ("model.call", "2"), ("note", "3"),
                                           ("guardrail.tripped", "3"), ("model.call", "4"), ("run.ended", "5")]
    assert evs[2][2] == {
        "text": "tool_input guardrail 'no_paris' of agent 'tutor' on tool call call_p (get_weather): tripped "
                "(reject_content)",
        "about": {"guardrail": {"name": "no_paris", "kind": "tool_input", "agent": "tutor", "call_id": "call_p",
                                "tool": "get_weather", "tripped": True,
                                "behavior": {"type": "reject_content", "message": "not Paris"},
                                "output_info": {"city": "Paris"}}}}
    assert evs[3][2] == {"limit": "tool_input_guardrail:no_paris", "current": 1, "bound": 0, "call_id": "call_p",
                         "guardrail": {"name": "no_paris", "kind": "tool_input", "agent": "tutor"}}

    checked: list = []
    again = ScriptedModel([[function_call("get_weather", {"city": "Paris"}, call_id="call_p")],
                           [assistant_message("Cannot.")]])

    @tool_input_guardrail(name="no_paris")
    def spy(data):  # pragma: no cover - served from the record, never called
        checked.append(data)
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[spy])
    def get_weather(city: str) -> str:  # noqa: F811 - the same tool, its guardrail now a spy
        """Weather."""
        ran.append(city)
        return "Sunny"

    result = Replayer(store).replay(run_id, lambda run: Runner.run(
        instrument(run, Agent(name="tutor", model=again, tools=[get_weather]), provider="scripted"),
        "Weather in Paris?"))
    assert result.reproduced, result.divergence  # the recorded rejection is served: the tool does not run
    assert checked == [] and ran == [] and again.calls == ()


def test_a_note_at_a_step_that_is_not_a_reserved_top_level_step_is_refused(store):
    from sealbox.errors import ConfigError

    with Recorder(store, policy=ALLOW_ALL).run(agent="tutor") as run:
        with pytest.raises(ConfigError, match="a note's step must be a top-level step from reserve_step"):
            run.note("x", step="2.1")
        step = run.reserve_step()
        assert run.note("y", step=step) == step == "2"
    assert [(e.kind, e.step, e.payload) for e in store.read_run(run.run_id)][1:] == [
        ("note", "2", {"text": "y", "next_step": 3}), ("run.ended", "3", {"status": "ok", "usage": {
            "input_tokens": 0, "output_tokens": 0, "cost": 0}})]


def test_run_config_guardrails_are_recorded_with_recorded_guardrails(store):
    from agents import RunConfig

    @input_guardrail
    def polite(ctx, agent, input):
        return GuardrailFunctionOutput(output_info="ok", tripwire_triggered=False)

    model = ScriptedModel([[assistant_message("Hi")]])

    async def agent(run):
        config = RunConfig(input_guardrails=recorded_guardrails(run, [polite]))
        return await Runner.run(instrument(run, Agent(name="tutor", model=model), provider="scripted"), "Hi",
                                run_config=config)

    run_id = record(store, agent)
    notes = [p for k, _, p in events(store, run_id) if k == "note"]
    assert notes == [{"text": "input guardrail 'polite' of agent 'tutor': passed",
                      "about": {"guardrail": {"name": "polite", "kind": "input", "agent": "tutor",
                                              "tripped": False, "output_info": "ok"}}}]


# --------------------------------------------------------------------------- replay


@pytest.mark.parametrize("tripped", [False, True])
def test_a_replay_serves_the_guardrail_outcome_without_calling_its_model(store, tripped):
    question = "What is 2+2?" if tripped else "Hi there"
    run_id = record(store, Guarded(guardrail_says_math=tripped), question)
    again = Guarded(guardrail_says_math=tripped)
    outputs: list = []

    async def agent(run):
        try:
            outputs.append((await again(run, question)).final_output)
        except InputGuardrailTripwireTriggered as trip:
            outputs.append(trip.guardrail_result.output.output_info)
            raise

    result = Replayer(store).replay(run_id, agent)
    assert result.reproduced, result.divergence
    assert again.guardrail_model.calls == () and again.model.calls == ()  # no model was called
    assert outputs == [Verdict(is_math=True, reasoning="asks for a sum")] if tripped else ["Hello!"]
    recorded = [(k, s) for k, s, _ in events(store, run_id)]
    assert [(k, s) for k, s, _ in events(store, result.new_run_id)] == recorded  # in the same order too


def test_a_replay_whose_live_guardrail_answers_otherwise_diverges_at_its_step(store):
    run_id = record(store, Guarded(guardrail_says_math=False))
    changed = Guarded(guardrail_says_math=True)  # the guardrail's model now says "math": the tripwire trips

    result = Replayer(store).replay(run_id, changed, model="live")
    d = result.divergence
    assert (result.reproduced, d.kind, d.step) == (False, "mismatch", "2")
    assert d.recorded.kind == d.attempted.kind == "note"
    assert d.message == "step 2: the replay made note  with different content (4 field(s) differ)"
    assert [(f.path, f.a, f.b) for f in d.diff] == [
        ("about.guardrail.output_info.$pydantic.fields.is_math", False, True),
        ("about.guardrail.output_info.$pydantic.fields.reasoning", "a greeting", "asks for a sum"),
        ("about.guardrail.tripped", False, True),
        ("text", "input guardrail 'no_math' of agent 'tutor': passed",
         "input guardrail 'no_math' of agent 'tutor': tripped")]
    assert len(changed.guardrail_model.calls) == 1  # model="live": the guardrail ran for real


def test_a_guardrail_the_record_does_not_have_stops_the_replay_without_running(store):
    plain = Guarded(guardrail_says_math=False)
    plain.agent = plain.agent.clone(input_guardrails=[])
    run_id = record(store, plain)  # recorded without the guardrail: model.call at step 2
    guarded = Guarded(guardrail_says_math=False)

    result = Replayer(store).replay(run_id, guarded)
    d = result.divergence
    assert (result.reproduced, d.kind, d.step) == (False, "mismatch", "2")
    assert d.message == "step 2: the replay made a note where the record has a model.call"
    assert guarded.guardrail_model.calls == ()  # never run for real


class SlowModel(ScriptedModel):
    """Answers after a long wait: a parallel input guardrail that trips cancels it."""

    async def get_response(self, *args, **kwargs):
        await asyncio.sleep(30)
        return await super().get_response(*args, **kwargs)  # pragma: no cover - always cancelled


def test_a_model_call_a_tripped_guardrail_cut_short_is_cut_short_again_in_the_replay(store):
    def slow_agent():
        agent = Guarded(guardrail_says_math=True)
        agent.model = SlowModel([[assistant_message("never")]])
        agent.agent = agent.agent.clone(model=agent.model)
        return agent

    run_id = record(store, slow_agent(), "What is 2+2?")
    evs = events(store, run_id)
    assert [(k, s) for k, s, _ in evs] == [("run.started", "1"), ("note", "2"), ("guardrail.tripped", "2"),
                                           ("model.call", "3"), ("run.ended", "4")]
    assert evs[3][2]["response"] == {"error": {"type": "CancelledError", "message": ""}}

    again = slow_agent()
    result = Replayer(store).replay(run_id, lambda run: again(run, "What is 2+2?"))
    assert result.reproduced, result.divergence
    assert again.guardrail_model.calls == () and again.model.calls == ()
    replayed = events(store, result.new_run_id)
    assert [(k, s) for k, s, _ in replayed] == [(k, s) for k, s, _ in evs]
    assert replayed[3][2]["response"] == evs[3][2]["response"]


def test_a_guardrail_whose_recorded_output_info_is_redacted_is_unreplayable_not_a_false_mismatch(store):
    """The store keeps ``{"api_key": …}`` of a guardrail's output_info as its marker (docs/integrations.md,
    "Guardrails"): the record cannot give the guardrail's outcome back as it was (as for a tool result
    holding redacted content), so the replay stops there ``unreplayable``, without calling the guardrail;
    it used to serve the marker, record it again under another HMAC and report a ``mismatch``."""
    calls: list = []

    def agent_with_secret_guardrail():
        @input_guardrail(run_in_parallel=False)
        async def key_check(ctx, agent, input):
            calls.append(input)
            return GuardrailFunctionOutput(output_info={"api_key": "sk-abcdefghijklmnop1234", "ok": True},
                                           tripwire_triggered=False)

        return Agent(name="tutor", model=ScriptedModel([[assistant_message("Hello!")]]), input_guardrails=[key_check])

    async def agent(run):
        await Runner.run(instrument(run, agent_with_secret_guardrail(), provider="scripted"), "Hi there")

    run_id = record(store, agent)
    [note] = [p for k, _, p in events(store, run_id) if k == "note"]
    assert list(note["about"]["guardrail"]["output_info"]["api_key"]) == ["$redacted"]
    assert calls == ["Hi there"]
    result = Replayer(store).replay(run_id, agent)
    d = result.divergence
    assert (result.reproduced, d.kind, d.step) == (False, "unreplayable", "2"), d
    assert d.message == ("step 2: the recorded input guardrail 'key_check' of agent 'tutor' holds a redacted value "
                         "in its output_info: it cannot be served from the record, and it is not run (it may ask a "
                         "model of its own)")
    assert calls == ["Hi there"]  # not run in the replay


def test_a_guardrail_error_whose_message_holds_a_redacted_token_still_replays_reproduced(store):
    """Text holding a marker (a token redacted inside an error message) is served and recorded again as it
    was: the replay reproduces (only a value redacted under its key name cannot be served)."""
    def agent_failing():
        @input_guardrail(run_in_parallel=False)
        async def key_check(ctx, agent, input):
            raise ValueError("token sk-abcdefghijklmnop1234 rejected")

        return Agent(name="tutor", model=ScriptedModel([[assistant_message("Hello!")]]), input_guardrails=[key_check])

    async def agent(run):
        await Runner.run(instrument(run, agent_failing(), provider="scripted"), "Hi there")

    box: list = []

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="tutor") as run:
            box.append(run.run_id)
            await agent(run)

    with pytest.raises(ValueError):
        asyncio.run(go())
    [note] = [p for k, _, p in events(store, box[0]) if k == "note"]
    assert note["about"]["guardrail"]["error"]["message"].startswith("token \u27e6redacted:hmac-sha256:")
    result = Replayer(store).replay(box[0], agent)
    assert (result.reproduced, result.divergence) == (True, None)


def test_a_tripped_tool_output_guardrail_flags_its_call_in_the_parquet_rows(store):
    """docs/integrations.md, "Guardrails": a tool *output* guardrail's call, recorded before it, is flagged
    ``guardrail_tripped`` in a Parquet export; the model is given the replacement text."""
    from agents.tool_guardrails import tool_output_guardrail

    from sealbox.interop.parquet import call_rows

    @tool_output_guardrail
    def no_secrets(data):
        if "secret" in str(data.output):
            return ToolGuardrailFunctionOutput.reject_content("withheld", output_info={"why": "secret"})
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_output_guardrails=[no_secrets])
    def read_note(name: str) -> str:
        """Read a note."""
        return "the secret plan"

    model = ScriptedModel([[function_call("read_note", {"name": "plan"}, call_id="call_n")],
                           [assistant_message("Withheld.")]])

    async def agent(run):
        return await Runner.run(instrument(run, Agent(name="tutor", model=model, tools=[read_note]),
                                           provider="scripted"), "Read the plan")

    run_id = record(store, agent)
    assert [(k, s) for k, s, _ in events(store, run_id)] == [
        ("run.started", "1"), ("model.call", "2"), ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("tool.result", "2.1"), ("note", "3"), ("guardrail.tripped", "3"), ("model.call", "4"), ("run.ended", "5")]
    [row] = call_rows(store, [run_id])
    assert (row["call_id"], row["flags"]) == ("call_n", ["guardrail_tripped"])
    request = [p for k, _, p in events(store, run_id) if k == "model.call"][1]["request"]
    assert [i["output"] for i in request["input"] if i.get("type") == "function_call_output"] == ["withheld"]
