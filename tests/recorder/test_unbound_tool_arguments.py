"""A ``@recorder.tool`` function called with arguments that do not bind to its signature (a model's
hallucinated arguments) is recorded all the same: its tool.call with the arguments as given, its
policy.decision, and a tool.result with the TypeError, which the caller gets unchanged; the function
never runs."""

from __future__ import annotations

import asyncio

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _calls(store, run_id):
    events = list(store.read_run(run_id))
    out = []
    for e in events:
        if e.kind != "tool.call":
            continue
        same = [x for x in events if x.step == e.step and x.kind in ("policy.decision", "tool.result")]
        decision = next(x.payload["effect"] for x in same if x.kind == "policy.decision")
        result = next((x.payload for x in same if x.kind == "tool.result"), None)
        error = None if result is None or result["ok"] else (
            result["ok"], result["error"]["type"], result["error"]["message"])
        out.append((e.payload["tool"], store.resolve(e.payload)["arguments"], decision, error))
    return out


def test_unbound_calls_are_recorded_and_raise_the_typeerror_unchanged(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    ran = []

    @rec.tool("db")
    def search(query, limit=10):
        ran.append(query)
        return [query]

    @rec.tool("db")
    def opts(query, **options):
        ran.append(query)
        return options

    class Client:
        @rec.tool("db")
        def method(self, query):
            ran.append(query)
            return query

    raised = []
    with rec.run(agent="a") as run:
        for call in (lambda: search(),                     # a missing required argument
                     lambda: search("x", colour="red"),    # an unexpected keyword
                     lambda: search("x", 5, 6),            # too many positional arguments
                     lambda: search("x", query="y"),       # one given twice
                     lambda: opts(limit=3),                # missing, with **kwargs
                     lambda: Client().method("x", 1)):     # a method: self left out
            with pytest.raises(TypeError) as info:
                call()
            raised.append(str(info.value))
        assert search("ok") == ["ok"]
    assert ran == ["ok"]
    assert raised == ["missing a required argument: 'query'", "got an unexpected keyword argument 'colour'",
                      "too many positional arguments", "multiple values for argument 'query'",
                      "missing a required argument: 'query'", "too many positional arguments"]
    assert _calls(store, run.run_id) == [
        ("search", {}, "allow", (False, "TypeError", raised[0])),
        ("search", {"query": "x", "colour": "red"}, "allow", (False, "TypeError", raised[1])),
        ("search", {"query": "x", "limit": 5, "*args": [6]}, "allow", (False, "TypeError", raised[2])),
        ("search", {"query": "x", "**kwargs": {"query": "y"}}, "allow", (False, "TypeError", raised[3])),
        ("opts", {"limit": 3}, "allow", (False, "TypeError", raised[4])),
        ("method", {"query": "x", "*args": [1]}, "allow", (False, "TypeError", raised[5])),
        ("search", {"query": "ok", "limit": 10}, "allow", None),  # ok
    ]


def test_the_exception_is_the_one_binding_raised(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    @rec.tool("db")
    def search(query):
        return query

    with rec.run(agent="a"):
        with pytest.raises(TypeError) as info:
            search(q="x")
    # raised by inspect.Signature.bind, not by the wrapper calling the function
    assert any(frame.name == "_bind" for frame in __import__("traceback").extract_tb(info.value.__traceback__))


def test_an_async_tool_with_unbound_arguments_is_recorded_and_not_awaited(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    ran = []

    @rec.tool("db")
    async def fetch(url):
        ran.append(url)
        return url

    async def main():
        with rec.run(agent="a") as run:
            with pytest.raises(TypeError, match="unexpected keyword argument 'headers'"):
                await fetch("u", headers={})
            return run

    run = asyncio.run(main())
    assert ran == []
    assert _calls(store, run.run_id) == [
        ("fetch", {"url": "u", "headers": {}}, "allow",
         (False, "TypeError", "got an unexpected keyword argument 'headers'"))]


DENY_COLOUR = """
version: 1
name: no-colour
rules:
  - id: no-colour
    match: {tool: search}
    when: 'has(call.arguments.colour)'
    effect: deny
  - id: rest
    effect: allow
"""


def test_the_policy_sees_the_given_arguments_and_a_deny_wins(store, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(DENY_COLOUR)
    rec = Recorder(store, policy=Policy.load(path))

    @rec.tool("db")
    def search(query):
        return query

    with rec.run(agent="a") as run:
        with pytest.raises(ToolDenied):
            search("x", colour="red")
    assert _calls(store, run.run_id) == [("search", {"query": "x", "colour": "red"}, "deny", None)]


def test_call_tool_with_arguments_fn_does_not_take_records_the_typeerror(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    def search(query):
        return query

    with rec.run(agent="a") as run:
        with pytest.raises(TypeError, match="unexpected keyword argument 'q'"):
            run.call_tool("db", "search", {"q": "x"}, search)
    [(tool, arguments, decision, (ok, kind, message))] = _calls(store, run.run_id)
    assert (tool, arguments, decision, ok, kind) == ("search", {"q": "x"}, "allow", False, "TypeError")
    assert message.endswith("search() got an unexpected keyword argument 'q'")
