"""LangChain chat-model calls in a replay are answered from the record of the run that makes them.

The replay's LLM cache used to answer every chat-model call of the process from the replayed (top-level)
run's record: a LangChain call inside a sub-agent run got the parent's next model step (the replay stopped
as ``unreplayable``); with two replays at once the second's cache answered the first's calls, and the
first to end put the process's cache back while the other still ran, and the last left a stale replay cache
installed; a live run in another thread got the replay's recorded answer instead of its model's.
"""

from __future__ import annotations

import threading

import pytest

import sealbox
from sealbox.integrations.langgraph import SealboxCallbackHandler
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

pytest.importorskip("langchain_core")

from langchain_core.globals import get_llm_cache  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402


def _model(*texts):
    return GenericFakeChatModel(messages=iter([AIMessage(content=t) for t in texts]))


def _ask(model, run, text):
    return model.invoke([HumanMessage(content=text)], config={"callbacks": [SealboxCallbackHandler(run)]}).content


def _boss(boss_model, worker_model):
    def agent(run):
        plan = _ask(boss_model, run, "plan")
        with run.recorder.run(agent="worker", principal="agent:worker") as sub:
            sub.note(_ask(worker_model, sub, "work"))
        run.note(plan + "|" + _ask(boss_model, run, "sum"))
    return agent


def test_a_langchain_call_in_a_sub_agent_run_is_answered_from_the_sub_agent_runs_record(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="boss", principal="agent:boss") as run:
        _boss(_model("boss-plan", "boss-sum"), _model("worker-out"))(run)

    result = Replayer(store).replay(run.run_id, _boss(_model("X", "Y"), _model("Z")))

    assert result.divergence is None, result.divergence.message
    assert result.head() == "reproduced: 3 step(s) matched, and 2 in 1 sub-agent run(s)"
    (sub,) = result.sub_runs
    notes = [e.payload["text"] for e in store.read_run(sub["new_run_id"]) if e.kind == "note"]
    assert notes == ["worker-out"]
    notes = [e.payload["text"] for e in store.read_run(result.new_run_id) if e.kind == "note"]
    assert notes == ["boss-plan|boss-sum"]
    assert get_llm_cache() is None
    store.close()


def _single(text):
    def agent(run):
        run.note(_ask(_model(text), run, "hi"))
    return agent


def test_two_replays_at_once_are_each_answered_from_their_own_record_and_the_cache_is_restored(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    recorded = {}
    for text in ("alpha", "beta"):
        with Recorder(store, policy=ALLOW_ALL).run(agent=text) as run:
            _single(text)(run)
        recorded[text] = run.run_id

    a_started, b_started, a_ended = threading.Event(), threading.Event(), threading.Event()
    results = {}

    def agent_a(run):
        a_started.set()
        b_started.wait(10)  # B's replay is running: its cache was installed last
        run.note(_ask(_model("live-a"), run, "hi"))

    def agent_b(run):
        b_started.set()
        a_ended.wait(10)  # A's replay has ended: B's model call comes after it
        run.note(_ask(_model("live-b"), run, "hi"))

    def replay(name, agent, after=None):
        if after is not None:
            after.wait(10)
        results[name] = Replayer(store).replay(recorded[name], agent)
        if name == "alpha":
            a_ended.set()

    threads = [threading.Thread(target=replay, args=("alpha", agent_a)),
               threading.Thread(target=replay, args=("beta", agent_b, a_started))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    for name in ("alpha", "beta"):
        r = results[name]
        assert r.divergence is None, (name, r.divergence.message)
        assert [e.payload["text"] for e in store.read_run(r.new_run_id) if e.kind == "note"] == [name]
    assert get_llm_cache() is None  # no replay's cache is left behind
    store.close()


def test_a_live_run_in_another_thread_during_a_replay_gets_its_models_answer(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="recorded") as run:
        _single("recorded-answer")(run)

    inside, done = threading.Event(), threading.Event()
    live_notes = []

    def live():
        inside.wait(10)
        with Recorder(store, policy=ALLOW_ALL).run(agent="live") as other:
            live_notes.append(_ask(_model("live-answer"), other, "hi"))
        done.set()

    def agent(run):
        inside.set()
        done.wait(10)
        _single("ignored")(run)

    t = threading.Thread(target=live)
    t.start()
    result = Replayer(store).replay(run.run_id, agent)
    t.join(30)
    assert live_notes == ["live-answer"]
    assert result.divergence is None, result.divergence.message
    store.close()
