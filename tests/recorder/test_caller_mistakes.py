"""Tester's findings on the Recorder (lost records, a leak, and callers' mistakes), each through the
real Recorder and a real SQLite store: the record says what happened, a caller's mistake is a typed
error raised before anything is recorded, and a tool's own exception comes back unchanged."""

from __future__ import annotations

import asyncio
import functools
import re
import warnings
from pathlib import Path

import pytest

import sealbox
from sealbox import ConfigError
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy

PATH = b"/tmp/report-\xff.txt".decode("utf-8", "surrogateescape")  # "/tmp/report-\udcff.txt"
SHOWN = "/tmp/report-\\udcff.txt"  # how the record shows it: valid Unicode, the surrogate as visible text
SECRET = "s3cr3t-K3y-0a9f8e7d6c5b"
IN_STRING = re.compile(r"⟦redacted:hmac-sha256:[0-9a-f]{64}⟧")


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")  # the default content mode: redacted
    yield s
    s.close()


def kinds(store, run_id):
    return [e.kind for e in store.read_run(run_id)]


def payload(store, run_id, kind, i=0):
    return [e.payload for e in store.read_run(run_id) if e.kind == kind][i]


def assert_verified(store):
    report = sealbox.verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


# --------------------------------------------------------------------------- 1. lone surrogates in errors


def test_a_tool_error_with_a_lone_surrogate_is_recorded_and_reraised_unchanged(store):
    boom = RuntimeError(f"cannot read {PATH}")

    def tool():
        raise boom

    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(RuntimeError) as caught:
        with rec.run(agent="bot") as run:
            run.call_tool("fs", "read", None, tool)
    assert caught.value is boom and str(caught.value) == f"cannot read {PATH}"
    assert kinds(store, run.run_id) == ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
    result = payload(store, run.run_id, "tool.result")
    assert result["ok"] is False
    assert result["error"]["type"] == "RuntimeError"
    assert result["error"]["message"] == f"cannot read {SHOWN}"
    assert f"RuntimeError: cannot read {SHOWN}" in result["error"]["traceback"]
    ended = payload(store, run.run_id, "run.ended")
    assert ended["status"] == "error"
    assert ended["error"] == {"type": "RuntimeError", "message": f"cannot read {SHOWN}"}
    assert_verified(store)


def test_a_run_ending_with_a_lone_surrogate_error_is_ended(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(RuntimeError, match="cannot read"):
        with rec.run(agent="bot") as run:
            raise RuntimeError(f"cannot read {PATH}")
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]
    assert payload(store, run.run_id, "run.ended") == {
        "status": "error", "usage": {"input_tokens": 0, "output_tokens": 0, "cost": 0},
        "error": {"type": "RuntimeError", "message": f"cannot read {SHOWN}"}}


def test_a_failed_model_call_with_a_lone_surrogate_is_recorded(store):
    def call(request):
        raise OSError(f"no such file {PATH}")

    with pytest.raises(OSError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            run.complete({"model": "m"}, call, provider="local", model="m")
    model = payload(store, run.run_id, "model.call")
    assert store.resolve(model["response"]) == {"error": {"type": "OSError", "message": f"no such file {SHOWN}"}}


# --------------------------------------------------------------------------- 2. redacted values in error text


def file_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


def test_a_redacted_argument_is_scrubbed_from_the_calls_error_and_the_runs(tmp_path):
    store = sealbox.init_store(tmp_path / "store")

    def raiser(api_key, user):
        raise RuntimeError(f"auth failed for key {api_key} of {user}")

    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(RuntimeError) as caught:
        with rec.run(agent="bot") as run:
            run.call_tool("s", "t", {"api_key": SECRET, "user": "ann"}, raiser)
    assert str(caught.value) == f"auth failed for key {SECRET} of ann"  # the caller's exception is untouched
    call = payload(store, run.run_id, "tool.call")
    marker = store.redactor.marker(SECRET)["$redacted"]
    assert call["arguments"] == {"api_key": {"$redacted": marker}, "user": "ann"}
    result = payload(store, run.run_id, "tool.result")
    assert result["error"]["message"] == f"auth failed for key ⟦redacted:{marker}⟧ of ann"
    assert SECRET not in result["error"]["traceback"]
    assert f"RuntimeError: auth failed for key ⟦redacted:{marker}⟧ of ann" in result["error"]["traceback"]
    assert payload(store, run.run_id, "run.ended")["error"] == {
        "type": "RuntimeError", "message": f"auth failed for key ⟦redacted:{marker}⟧ of ann"}
    assert_verified(store)
    store.close()
    assert SECRET.encode() not in file_bytes(tmp_path / "store")


def test_configured_paths_nested_values_and_short_values(tmp_path):
    store = sealbox.init_store(tmp_path / "store", content=ContentPolicy(paths=("arguments.user.ssn",)))

    def raiser(user, auth):
        raise ValueError(f"{user['ssn']} / {auth['password']} / {auth['pin']} / {auth['who']}")

    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(ValueError):
        with rec.run(agent="bot") as run:
            run.call_tool("s", "t", {"user": {"ssn": "078-05-1120"},
                                     "auth": {"password": ["hunter22", "abc"], "pin": "123", "who": "hunter22x"}},
                          raiser)
    message = payload(store, run.run_id, "tool.result")["error"]["message"]
    m = store.redactor.marker
    # the ssn (a path) and the password (a key) are scrubbed; a value under 4 characters is not,
    # and "hunter22x" (not redacted in the arguments) keeps its text around the scrubbed "hunter22"
    assert message == (f"⟦redacted:{m('078-05-1120')['$redacted']}⟧ / ['⟦redacted:{m('hunter22')['$redacted']}⟧', "
                       f"'abc'] / 123 / ⟦redacted:{m('hunter22')['$redacted']}⟧x")
    store.close()


def test_full_mode_keeps_error_text_and_hashes_only_keeps_only_the_type(tmp_path):
    for mode in ("full", "hashes-only"):
        store = sealbox.init_store(tmp_path / mode, content=ContentPolicy(mode=mode))

        def raiser(api_key):
            raise RuntimeError(f"bad key {api_key}")

        with pytest.raises(RuntimeError):
            with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
                run.call_tool("s", "t", {"api_key": SECRET}, raiser)
        error = payload(store, run.run_id, "tool.result")["error"]
        if mode == "full":
            assert error["message"] == f"bad key {SECRET}"
        else:
            assert error["type"] == "RuntimeError" and re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", error["message"])
        store.close()


# --------------------------------------------------------------------------- 3, 4. coroutines and generators


async def async_tool():
    return 1


class AsyncCallable:
    async def __call__(self):
        return 1


def gen_tool():
    yield 1
    raise RuntimeError("late")


class GenCallable:
    def __call__(self):
        yield 1


@pytest.mark.parametrize("fn", [async_tool, functools.partial(async_tool), AsyncCallable(),
                                functools.partial(functools.partial(AsyncCallable()))],
                         ids=["function", "partial", "callable-object", "partial-of-object"])
def test_sync_call_tool_refuses_a_coroutine_function_before_recording(store, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            with pytest.raises(ConfigError, match="is a coroutine function: use acall_tool"):
                run.call_tool("s", "t", None, fn)
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


def test_a_returned_coroutine_is_closed_and_recorded_as_an_error(store):
    ran = []

    async def body():
        ran.append(1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            with pytest.raises(ConfigError, match="returned a coroutine, which was closed without running"):
                run.call_tool("s", "t", None, lambda: body())
    assert ran == []
    assert kinds(store, run.run_id) == ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
    result = payload(store, run.run_id, "tool.result")
    assert result["ok"] is False and "result" not in result
    assert result["error"]["type"] == "ConfigError"
    assert result["error"]["message"] == ("s/t: the tool returned a coroutine, which was closed without running: "
                                          "use acall_tool; the call is recorded as this error")


@pytest.mark.parametrize("fn", [gen_tool, functools.partial(gen_tool), GenCallable()],
                         ids=["function", "partial", "callable-object"])
def test_generator_functions_are_refused_before_recording(store, fn):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match="is a generator function.*return a list"):
            run.call_tool("s", "t", None, fn)

        async def go():
            await run.acall_tool("s", "t", None, fn)

        with pytest.raises(ConfigError, match="is a generator function"):
            asyncio.run(go())
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


def test_a_returned_generator_is_closed_and_recorded_as_an_error(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match="returned a generator"):
            run.call_tool("s", "t", None, lambda: gen_tool())
    result = payload(store, run.run_id, "tool.result")
    assert result["ok"] is False and result["error"]["type"] == "ConfigError"
    assert result["error"]["message"] == ("s/t: the tool returned a generator, which was closed without running: "
                                          "return a list or another value; the call is recorded as this error")


def test_the_decorator_refuses_generators_and_runs_async_callables_async(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with pytest.raises(ConfigError, match="is a generator function"):
        rec.tool("s")(gen_tool)
    wrapped = rec.tool("s", "obj")(functools.partial(async_tool))
    assert asyncio.iscoroutinefunction(wrapped)


# --------------------------------------------------------------------------- 5. usage and grant


@pytest.mark.parametrize(("usage", "field"), [
    ({"input_tokens": "abc"}, "input_tokens"), ({"output_tokens": -1}, "output_tokens"),
    ({"output_tokens": 2**53}, "output_tokens"), ({"input_tokens": 1.5}, "input_tokens"),
    ({"input_tokens": True}, "input_tokens"), ({"output_tokens": float("nan")}, "output_tokens"),
])
def test_a_bad_usage_is_a_config_error_before_anything_is_recorded(store, usage, field):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match=rf"usage\['{field}'\] must be a whole number of tokens"):
            run.model_call({}, {}, usage=usage)
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


@pytest.mark.parametrize("usage", [{"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
                                   {"tokens": 5}])
def test_a_usage_with_no_key_the_recorder_reads_is_a_config_error(store, usage):
    """OpenAI chat's own names were ignored: a model call given usage={"prompt_tokens": 900, ...}
    with a response of no known format counted 0 tokens, and a token budget failed open."""
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match=r"usage names no token count this recorder reads \(it has '"
                                              r".*give input_tokens and output_tokens \(OpenAI chat's prompt_tokens"):
            run.model_call({}, "plain text answer", usage=usage)
        run.model_call({}, "plain text answer", usage={"input_tokens": 900, "total_tokens": 940})  # others ignored
    assert kinds(store, run.run_id) == ["run.started", "model.call", "run.ended"]
    assert payload(store, run.run_id, "model.call")["usage"] == {"input_tokens": 900, "output_tokens": 0}


@pytest.mark.parametrize("provider", [5, b"openai", ["openai"]])
def test_a_provider_that_is_not_a_string_is_a_config_error_before_anything_is_recorded(store, provider):
    """It was RecordingError 'could not record: model.call: data.provider must be string', which reads
    as a failing store; complete() passes provider on to model_call."""
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match=r"provider must be a string or None, got \w+; nothing was recorded"):
            run.model_call({}, {}, provider=provider)
        called = []
        with pytest.raises(ConfigError, match="provider must be a string or None"):
            run.complete({}, called.append, provider=provider)
    assert called == []  # the model is not called when its call could not be recorded
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


def test_a_float_usage_with_an_integral_value_is_recorded_as_an_int(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.model_call({}, {}, usage={"input_tokens": 12.0, "output_tokens": 3})
    usage = payload(store, run.run_id, "model.call")["usage"]
    assert usage == {"input_tokens": 12, "output_tokens": 3} and type(usage["input_tokens"]) is int


def test_an_unreadable_provider_usage_is_left_out_and_the_model_call_kept(store):
    response = {"object": "chat.completion", "model": "gpt-4o", "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": 1e30}}
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.model_call({"model": "gpt-4o"}, response)
    assert kinds(store, run.run_id) == ["run.started", "model.call", "anomaly", "run.ended"]
    model = payload(store, run.run_id, "model.call")
    assert model["usage"] == {"input_tokens": 7}
    anomaly = [e for e in store.read_run(run.run_id) if e.kind == "anomaly"][0]
    assert anomaly.step == store.read_run(run.run_id)[1].step
    assert anomaly.payload["what"] == "model.call usage unreadable"
    assert store.resolve(anomaly.payload["detail"]) == {
        "fields": ["output_tokens"], "values": {"output_tokens": "1e+30"},
        "why": "not a whole number of tokens from 0 to 9007199254740991; left out of the usage"}
    assert run.usage == {"input_tokens": 7, "output_tokens": 0, "cost": 0.0}
    assert_verified(store)


def test_an_unreadable_usage_under_a_token_budget_fails_closed(store):
    policy = sealbox.Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                                      "limits:\n  tokens: {per_run: 1000}\n")
    response = {"object": "chat.completion", "model": "gpt-4o", "choices": [], "usage": {"completion_tokens": "9"}}
    with Recorder(store, policy=policy).run(agent="bot") as run:
        run.model_call({"model": "gpt-4o"}, response)
        with pytest.raises(sealbox.recorder.ToolDenied, match="could not be read"):
            run.call_tool("s", "t", None, lambda: 1)


def test_a_response_without_usage_under_a_token_budget_fails_closed(store):
    """A response that carries no usage at all (a stream read without include_usage) counted as 0
    tokens, so a token budget failed open; now the budget fails closed as for unreadable usage, with
    an anomaly saying why. Usage given by the caller, an error response, or a policy without token or
    cost budgets are unaffected."""
    budget = sealbox.Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                                      "limits:\n  tokens: {per_run: 1000}\n")
    no_usage = {"object": "chat.completion", "model": "gpt-4o", "choices": []}
    with Recorder(store, policy=budget).run(agent="bot") as run:
        run.model_call({"model": "gpt-4o"}, no_usage)
        with pytest.raises(sealbox.recorder.ToolDenied, match="carries no usage"):
            run.call_tool("s", "t", None, lambda: 1)
    anomalies = [e for e in store.read_run(run.run_id) if e.kind == "anomaly"]
    assert [(a.payload["what"], store.resolve(a.payload["detail"])["format"]) for a in anomalies] == [
        ("model.call usage missing", "openai.chat")]
    with Recorder(store, policy=budget).run(agent="bot") as given:
        given.model_call({"model": "gpt-4o"}, no_usage, usage={"input_tokens": 5, "output_tokens": 2})
        given.model_call({"model": "gpt-4o"}, {"object": "chat.completion", "model": "gpt-4o",
                                               "error": {"message": "overloaded"}})
        assert given.call_tool("s", "t", None, lambda: 1) == 1
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as free:
        free.model_call({"model": "gpt-4o"}, no_usage)
        assert free.call_tool("s", "t", None, lambda: 1) == 1
    assert [k for k in kinds(store, free.run_id) if k == "anomaly"] == []
    assert_verified(store)


def test_a_langchain_result_without_usage_under_a_token_budget_fails_closed(store):
    """A LangChain LLMResult (what the LangGraph integration records) whose AIMessage has no
    usage_metadata and whose llm_output has no token usage (a chat model streamed without
    stream_usage) counted as 0 tokens: the token budget failed open."""
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    budget = sealbox.Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                                      "limits:\n  tokens: {per_run: 1000}\n")
    bare = LLMResult(generations=[[ChatGeneration(message=AIMessage(content="hi"))]], llm_output={})
    counted = LLMResult(generations=[[ChatGeneration(message=AIMessage(
        content="hi", usage_metadata={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}))]])
    with Recorder(store, policy=budget).run(agent="bot") as run:
        run.model_call({"model": "gpt-4o"}, counted)
        assert run.call_tool("s", "t", None, lambda: 1) == 1
        run.model_call({"model": "gpt-4o"}, bare)
        with pytest.raises(sealbox.recorder.ToolDenied, match="carries no usage"):
            run.call_tool("s", "t", None, lambda: 1)
    anomalies = [e for e in store.read_run(run.run_id) if e.kind == "anomaly"]
    assert [(a.payload["what"], store.resolve(a.payload["detail"])["format"]) for a in anomalies] == [
        ("model.call usage missing", "langchain")]
    assert_verified(store)


def test_a_responses_object_without_usage_under_a_token_budget_fails_closed(store):
    """The OpenAI SDK's Response always holds "error": null, which was read as an error response:
    one without usage (here a Responses stream closed before response.completed) counted as 0
    tokens and the token budget failed open."""
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    budget = sealbox.Policy.from_text("version: 1\nname: budget\nrules:\n  - id: all\n    effect: allow\n"
                                      "limits:\n  tokens: {per_run: 1000}\n")
    started = {"id": "resp_1", "object": "response", "created_at": 1764000000, "model": "gpt-4.1",
               "status": "in_progress", "output": [], "usage": None, "parallel_tool_calls": True,
               "tool_choice": "auto", "tools": []}
    adapter = TypeAdapter(ResponseStreamEvent)
    events = [adapter.validate_python({"type": "response.created", "sequence_number": 0, "response": started}),
              adapter.validate_python({"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1",
                                       "output_index": 0, "content_index": 0, "delta": "Hel", "logprobs": []})]
    with Recorder(store, policy=budget).run(agent="bot") as run:
        run.model_call({"model": "gpt-4.1"}, events)
        with pytest.raises(sealbox.recorder.ToolDenied, match="carries no usage"):
            run.call_tool("s", "t", None, lambda: 1)
    anomalies = [e for e in store.read_run(run.run_id) if e.kind == "anomaly"]
    assert [(a.payload["what"], store.resolve(a.payload["detail"])["format"]) for a in anomalies] == [
        ("model.call usage missing", "openai.responses")]
    assert_verified(store)


@pytest.mark.parametrize("grant", [123, "", b"g"])
def test_a_grant_that_is_not_a_non_empty_string_is_a_config_error(store, grant):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match=r"s/t: grant must be a non-empty string or None"):
            run.call_tool("s", "t", None, lambda: 1, grant=grant)
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


SPOOF = ("db/drop: grant 'implicit:user:cfo' is not this run's implicit grant: a run of principal 'agent:x' may "
         "name only 'implicit:agent:x' (or leave grant out), or an access grant id; nothing was recorded")


@pytest.mark.parametrize("grant", ["implicit:user:cfo", "implicit:", "implicit:agent:x ", "implicit:Agent:x",
                                   "implicit:implicit:agent:x"])
def test_another_principals_implicit_grant_is_a_config_error_and_nothing_runs(store, grant):
    """grant="implicit:user:cfo" skipped the grant check and was recorded as that grant."""
    ran = []
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="a", principal="agent:x") as run:
        with pytest.raises(ConfigError) as refused:
            run.call_tool("db", "drop", {}, lambda: ran.append(1), grant=grant)
        with pytest.raises(ConfigError) as refused_async:
            asyncio.run(run.acall_tool("db", "drop", {}, lambda: ran.append(1), grant=grant))
        with pytest.raises(ConfigError) as refused_wrap:
            run.check_grant_id(grant)
    assert str(refused.value) == str(refused_async.value) == SPOOF.replace("'implicit:user:cfo'", repr(grant))
    assert str(refused_wrap.value) == SPOOF.replace("'implicit:user:cfo'", repr(grant)).replace(
        "db/drop", f"run {run.run_id}")
    assert ran == [] and kinds(store, run.run_id) == ["run.started", "run.ended"]


def test_the_runs_own_implicit_grant_may_be_named(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:x") as run:
        run.check_grant_id(None)
        run.check_grant_id("implicit:agent:x")
        assert run.call_tool("db", "read", {}, lambda: "ok", grant="implicit:agent:x", call_id="c1") == "ok"
        assert run.call_tool("db", "read", {}, lambda: "ok", call_id="c2") == "ok"
    assert [(p["call_id"], p["grant"]) for p in (e.payload for e in store.read_run(run.run_id))
            if "grant" in p] == [("c1", "implicit:agent:x"), ("c2", "implicit:agent:x")]


def test_the_integrations_refuse_another_principals_implicit_grant_when_wrapping(store):
    langgraph = pytest.importorskip("sealbox.integrations.langgraph")
    openai_agents = pytest.importorskip("sealbox.integrations.openai_agents")
    from agents import Agent, function_tool
    from langchain_core.tools import tool as lc_tool

    @lc_tool
    def lookup(q: str) -> str:
        """Look up."""
        return q

    @function_tool
    def fetch(q: str) -> str:
        """Fetch."""
        return q

    expected = SPOOF.replace("db/drop", "run RUN")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:x") as run:
        for wrap in (lambda: langgraph.governed_tool(run, lookup, grant="implicit:user:cfo"),
                     lambda: langgraph.governed_tools(run, [], grant="implicit:user:cfo"),
                     lambda: openai_agents.governed_tool(run, fetch, grant="implicit:user:cfo"),
                     lambda: openai_agents.governed_tools(run, [], grant="implicit:user:cfo"),
                     lambda: openai_agents.instrument(run, Agent(name="a"), grant="implicit:user:cfo")):
            with pytest.raises(ConfigError) as refused:
                wrap()
            assert str(refused.value) == expected.replace("RUN", run.run_id)
        # its own implicit grant is accepted
        assert langgraph.governed_tool(run, lookup, grant="implicit:agent:x").grant == "implicit:agent:x"
        assert openai_agents.governed_tool(run, fetch, grant="implicit:agent:x").name == "fetch"
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


# --------------------------------------------------------------------------- 6. call ids, names, system run


def test_a_call_id_used_twice_in_a_run_is_refused(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        assert run.call_tool("s", "t", None, lambda: 1, call_id="tc1") == 1
        with pytest.raises(ConfigError, match=f"call_id 'tc1' was already used by a tool call of run {run.run_id}"):
            run.call_tool("s", "t", None, lambda: 2, call_id="tc1")
    assert [(e.kind, e.payload.get("call_id")) for e in store.read_run(run.run_id)] == [
        ("run.started", None), ("tool.call", "tc1"), ("policy.decision", "tc1"), ("tool.result", "tc1"),
        ("run.ended", None)]


def test_a_call_id_is_refused_again_in_a_continued_run(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    run = rec.run(agent="bot").start()
    run.call_tool("s", "t", None, lambda: 1, call_id="tc1")
    again = rec.continue_run(run.run_id)
    with pytest.raises(ConfigError, match="call_id 'tc1' was already used"):
        again.call_tool("s", "t", None, lambda: 2, call_id="tc1")
    assert kinds(store, run.run_id).count("tool.call") == 1


def test_repeated_tool_call_ids_in_a_model_response_link_the_first_and_are_noted(store):
    calls = [{"id": "tc1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
             {"id": "tc1", "type": "function", "function": {"name": "b", "arguments": "{}"}}]
    response = {"object": "chat.completion", "model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": calls}}]}
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        record = run.model_call({"model": "m"}, response)
        run.call_tool("s", "a", None, lambda: 1, call_id="tc1")
    assert record.step == "2"
    events = store.read_run(run.run_id)
    assert [(e.step, e.kind) for e in events] == [
        ("1", "run.started"), ("2", "model.call"), ("2", "anomaly"), ("2.1", "tool.call"),
        ("2.1", "policy.decision"), ("2.1", "tool.result"), ("3", "run.ended")]
    assert store.resolve(events[2].payload["detail"])["repeated"] == ["tc1"]


@pytest.mark.parametrize(("server", "tool", "what"), [("", "t", "server"), ("s", "", "tool"), (None, "t", "server"),
                                                      ("s", 7, "tool")])
def test_empty_server_or_tool_names_are_refused(store, server, tool, what):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match=f"the {what} name must be a non-empty string"):
            run.call_tool(server, tool, None, lambda: 1)
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]


def test_the_system_run_cannot_be_joined_or_reused(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    before = store.size()
    for join in (lambda: rec.continue_run(SYSTEM_RUN_ID), lambda: rec.run(agent="bot", run_id=SYSTEM_RUN_ID),
                 lambda: rec.resume(SYSTEM_RUN_ID)):
        with pytest.raises(ConfigError, match="'system' is the store's system run"):
            join()
    assert store.size() == before


@pytest.mark.parametrize("given", ["STORE_PATH", "STORE_PATH_OBJECT", None], ids=["str", "path", "none"])
def test_a_recorder_given_a_path_or_none_for_its_store_is_refused_when_made(store, tmp_path, given):
    # was: Recorder("./.sealbox", policy=ALLOW_ALL) was made; its first run then failed with
    # "RecordingError: could not record: 'str' object has no attribute 'append_with'"
    value = {"STORE_PATH": str(tmp_path / "store"), "STORE_PATH_OBJECT": tmp_path / "store"}.get(given)
    with pytest.raises(ConfigError) as caught:
        Recorder(value, policy=ALLOW_ALL)
    assert str(caught.value) == (f"store must be an open Sealbox store (sealbox.open_store(path) or "
                                 f"sealbox.init_store(path)), got {value!r}")
    assert [r["run_id"] for r in store.query_runs()] == [SYSTEM_RUN_ID]


def _calls(store, run):
    return [(e.step, e.kind, e.payload.get("tool")) for e in store.read_run(run.run_id)
            if e.kind in ("tool.call", "tool.result")]


def test_a_decorated_tool_given_to_call_tool_is_recorded_once(store):
    # was: run.call_tool("db", "write_query", {...}, write_query) with write_query decorated by the
    # same recorder recorded two tool calls (steps 2 and 3, two decisions, counted twice by limits)
    recorder = Recorder(store, policy=ALLOW_ALL)
    seen = []

    @recorder.tool("db")
    def write_query(query: str) -> int:
        seen.append(query)
        return 7

    class Repo:
        @recorder.tool("db")
        def read(self, table: str) -> str:
            seen.append(table)
            return f"rows of {table}"

    @recorder.tool("db")
    async def aread(query: str) -> str:
        seen.append(query)
        return "a"

    with recorder.run(agent="a") as run:
        assert run.call_tool("db", "write_query", {"query": "DELETE"}, write_query, call_id="c1") == 7
        assert run.call_tool("db", "read", {"table": "t"}, Repo().read) == "rows of t"
        assert asyncio.run(run.acall_tool("db", "aread", {"query": "q"}, aread)) == "a"
        assert write_query("direct") == 7  # called directly, it records itself as before
    assert seen == ["DELETE", "t", "q", "direct"]
    assert _calls(store, run) == [("2", "tool.call", "write_query"), ("2", "tool.result", None),
                                  ("3", "tool.call", "read"), ("3", "tool.result", None),
                                  ("4", "tool.call", "aread"), ("4", "tool.result", None),
                                  ("5", "tool.call", "write_query"), ("5", "tool.result", None)]
    assert store.read_run(run.run_id)[1].payload["call_id"] == "c1"
    assert sealbox.verify_store(store).ok


def test_a_tool_decorated_by_another_recorder_given_to_call_tool_is_recorded_once(store, tmp_path):
    # a decorated tool records into the current run, whichever recorder decorated it: so once, here too
    other_store = sealbox.init_store(tmp_path / "other")
    try:
        other = Recorder(other_store, policy=ALLOW_ALL)

        @other.tool("db")
        def q(x: int) -> int:
            return x

        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            assert run.call_tool("db", "q", {"x": 1}, q) == 1
        assert _calls(store, run) == [("2", "tool.call", "q"), ("2", "tool.result", None)]
        assert [r["agent"] for r in other_store.query_runs()] == ["sealbox"]
    finally:
        other_store.close()


def test_a_function_wrapping_a_decorated_tool_given_to_call_tool_still_runs_its_wrapper(store):
    # functools.wraps copies the decorated tool's attributes onto a caller's own wrapper (a retry):
    # that wrapper is what call_tool runs, and the tool inside it records itself as it always did
    recorder = Recorder(store, policy=ALLOW_ALL)
    tries = []

    @recorder.tool("db")
    def q(x: int) -> int:
        return x

    @functools.wraps(q)
    def retrying(**kwargs):
        tries.append(kwargs)
        return q(**kwargs)

    with recorder.run(agent="a") as run:
        assert run.call_tool("db", "q", {"x": 1}, retrying) == 1
    assert tries == [{"x": 1}]
    assert _calls(store, run) == [("2", "tool.call", "q"), ("3", "tool.call", "q"), ("3", "tool.result", None),
                                  ("2", "tool.result", None)]


def test_a_partial_of_a_decorated_tool_given_to_call_tool_is_recorded_once(store):
    # was: run.call_tool("db", "q", {...}, functools.partial(q, conn=...)) with q decorated recorded two
    # tool calls, the second nested in the first (steps 2 and 3, two decisions: a policy denying db/q
    # under the decorated name made the outer call fail ToolDenied after it was allowed), as giving q
    # itself did before; a partial of a partial and of a decorated method the same
    recorder = Recorder(store, policy=ALLOW_ALL)
    seen = []

    @recorder.tool("db")
    def q(query: str, conn: str = "main") -> str:
        seen.append((query, conn))
        return f"{query}@{conn}"

    @recorder.tool("db")
    async def aq(query: str, conn: str = "main") -> str:
        seen.append((query, conn))
        return f"{query}@{conn}"

    class Repo:
        @recorder.tool("db")
        def read(self, table: str, limit: int = 1) -> str:
            seen.append((table, limit))
            return table

    with recorder.run(agent="a") as run:
        assert run.call_tool("db", "q", {"query": "SELECT"}, functools.partial(q, conn="replica")) == "SELECT@replica"
        assert run.call_tool("db", "q", {}, functools.partial(functools.partial(q, conn="r2"), "X")) == "X@r2"
        assert asyncio.run(run.acall_tool("db", "aq", {"query": "A"}, functools.partial(aq, conn="c"))) == "A@c"
        assert run.call_tool("db", "read", {"table": "t"}, functools.partial(Repo().read, limit=5)) == "t"
    assert seen == [("SELECT", "replica"), ("X", "r2"), ("A", "c"), ("t", 5)]
    assert _calls(store, run) == [("2", "tool.call", "q"), ("2", "tool.result", None),
                                  ("3", "tool.call", "q"), ("3", "tool.result", None),
                                  ("4", "tool.call", "aq"), ("4", "tool.result", None),
                                  ("5", "tool.call", "read"), ("5", "tool.result", None)]
    assert sealbox.verify_store(store).ok


# --------------------------------------------------------------------------- run.end and re-entry: a caller's mistake


@pytest.mark.parametrize("status", ["weird", "OK", "", None, 1])
def test_run_end_with_an_unknown_status_is_a_config_error_and_the_run_goes_on(store, status):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        with pytest.raises(ConfigError, match="status must be one of ok, error, cancelled"):
            run.end(status)
        assert not run.ended
        run.call_tool("fs", "read", None, lambda: "still recorded")
    assert kinds(store, run.run_id) == ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
    assert payload(store, run.run_id, "run.ended")["status"] == "ok"
    assert_verified(store)


def test_run_end_with_an_error_that_is_no_exception_is_a_config_error(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        with pytest.raises(ConfigError, match="error must be an exception"):
            run.end("error", "it broke")
    assert payload(store, run.run_id, "run.ended")["status"] == "ok"


def test_entering_a_used_run_context_again_is_a_config_error(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    run = rec.run(agent="bot")
    with run:
        pass
    for _ in range(2):
        with pytest.raises(ConfigError, match="entered once"):
            with run:
                pass
    started = rec.run(agent="bot2").start()
    with pytest.raises(ConfigError, match="already started"):
        started.start()
    with pytest.raises(ConfigError, match="already started"):
        with started:
            pass
    started.end()
    assert kinds(store, run.run_id) == ["run.started", "run.ended"]
    assert kinds(store, started.run_id) == ["run.started", "run.ended"]
    assert_verified(store)
