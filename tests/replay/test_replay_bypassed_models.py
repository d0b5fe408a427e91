"""A LangChain chat model that gets past the replay's LLM cache (``.stream()``, ``cache=False``) reached the
model for real, and the replay compared that live answer: "reproduced" when it happened to be the same."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.integrations.langgraph import SealboxCallbackHandler
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402

EXPECTED = ("step 2: the model was called for real, not answered from the record (a LangChain .stream() / "
            ".astream() call, or a chat model built with cache=False, bypasses the replay's LLM cache); replay stopped")


def _model(live: list, **kwargs):
    class Model(GenericFakeChatModel):
        def _stream(self, *args, **kw):
            live.append("_stream")
            yield from super()._stream(*args, **kw)

        def _generate(self, *args, **kw):
            live.append("_generate")
            return super()._generate(*args, **kw)

    return Model(messages=iter([AIMessage(content="hello world")]), **kwargs)


def _agent(model, how):
    def agent(run):
        config = {"callbacks": [SealboxCallbackHandler(run)]}
        if how == "stream":
            text = "".join(c.content for c in model.stream([HumanMessage(content="hi")], config=config))
        else:
            text = model.invoke([HumanMessage(content="hi")], config=config).content
        run.note(text)
    return agent


@pytest.mark.parametrize("how,kwargs", [("invoke", {"cache": False})])
def test_a_chat_model_call_past_the_replay_cache_stops_the_replay(tmp_path, how, kwargs):
    store = sealbox.init_store(tmp_path / "s")
    live: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="lc") as run:
        _agent(_model(live, **kwargs), how)(run)
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "model.call", "note", "run.ended"]

    result = Replayer(store).replay(run.run_id, _agent(_model([], **kwargs), how))

    assert result.head() == "NOT reproduced: diverged at step 2 (unreplayable); 0 step(s) matched before it"
    assert result.divergence.message == EXPECTED
    assert [e.kind for e in store.read_run(result.new_run_id)] == ["run.started", "run.ended"]
    store.close()


def test_an_invoke_through_the_cache_still_reproduces(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="lc") as run:
        _agent(_model([]), "invoke")(run)
    live: list = []
    result = Replayer(store).replay(run.run_id, _agent(_model(live), "invoke"))
    assert result.head() == "reproduced: 2 step(s) matched" and live == []
    store.close()


def test_a_model_call_the_agent_made_itself_stops_the_replay(tmp_path):
    """run.model_call(request, response) with a response the agent got from its model itself: in a replay
    that serves models from the record the model was called live and the replay said "reproduced"."""
    store = sealbox.init_store(tmp_path / "s")
    asked: list = []

    def agent(run):
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        asked.append("model")
        response = {"id": "r", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}
        run.model_call(request, response)
        run.note("answered")

    with Recorder(store, policy=ALLOW_ALL).run(agent="plain") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert result.head() == "NOT reproduced: diverged at step 2 (unreplayable); 0 step(s) matched before it"
    assert result.divergence.message == (
        "step 2: the model was called for real, not answered from the record (the agent called its model itself "
        "and recorded the answer with run.model_call; use run.complete / acomplete or an integration, which a "
        "replay answers from the record); replay stopped")
    live = Replayer(store).replay(run.run_id, agent, model="live")  # a live model is what --model live is for
    assert live.head() == "reproduced: 2 step(s) matched"
    store.close()


@pytest.mark.parametrize("how", ["stream", "astream"])
def test_a_streamed_chat_model_call_is_served_from_the_record_without_calling_the_model(tmp_path, how):
    """``.stream()`` / ``.astream()`` bypass LangChain's cache: a replay sent one live request before it could
    stop. While a replay runs they yield ``invoke``'s answer, which the record gives; nothing is called."""
    import asyncio

    def agent_for(model):
        def agent(run):
            config = {"callbacks": [SealboxCallbackHandler(run)]}
            if how == "stream":
                chunks = list(model.stream([HumanMessage(content="hi")], config=config))
            else:
                async def collect():
                    return [c async for c in model.astream([HumanMessage(content="hi")], config=config)]
                chunks = asyncio.run(collect())
            run.note("".join(c.content for c in chunks))
        return agent

    store = sealbox.init_store(tmp_path / "s")
    recorded: list = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="lc") as run:
        agent_for(_model(recorded))(run)
    assert recorded[0] == "_stream"  # it streamed when recorded (the fake model's _stream uses _generate)
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ["run.started", "model.call", "note", "run.ended"]
    assert events[2].payload["text"] == "hello world"

    live: list = []
    result = Replayer(store).replay(run.run_id, agent_for(_model(live)))

    assert live == []  # the model was not called
    assert result.head() == "reproduced: 2 step(s) matched", result.divergence
    replayed = store.read_run(result.new_run_id)
    assert replayed[2].kind == "note" and replayed[2].payload["text"] == "hello world"
    from langchain_core.language_models.chat_models import BaseChatModel
    assert BaseChatModel.stream.__name__ == "stream" and BaseChatModel.astream.__name__ == "astream"  # restored
    store.close()
