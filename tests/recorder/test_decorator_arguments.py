"""What ``Recorder.tool`` records as a call's arguments: ``**kwargs`` flattened beside the named
parameters (so ``arguments.query`` matches in queries and policies), and no ``self``/``cls``."""

from __future__ import annotations

import asyncio

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

DENY_DELETE = """
version: 1
name: no-deletes
rules:
  - id: no-delete
    match: {tool: "*query"}
    when: 'call.arguments.query.matches("(?i)delete")'
    effect: deny
  - id: rest
    effect: allow
"""


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _recorded(store, run_id):
    return [(e.payload["tool"], store.resolve(e.payload)["arguments"])
            for e in store.read_run(run_id) if e.kind == "tool.call"]


def test_kwargs_are_recorded_beside_the_named_arguments_and_self_is_left_out(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    @rec.tool("db")
    def write_query(**kw):
        return "ok"

    @rec.tool("db")
    def search(query, limit=10, **options):
        return [query, limit, options]

    @rec.tool("db")
    def varargs(*queries):
        return len(queries)

    @rec.tool("db")
    def posonly(a, /, **kw):
        return (a, kw)

    class Client:
        def __init__(self):
            self.api_token = "tok_SECRETSELF_123"

        @rec.tool("db")
        def method_query(self, query):
            return query

        @rec.tool("db")
        async def amethod(self, query):
            return query

        @classmethod
        @rec.tool("db")
        def cmethod(cls, query):
            return query

    with rec.run(agent="deco") as run:
        assert write_query(query="DELETE FROM users") == "ok"
        assert search("x", fuzzy=True) == ["x", 10, {"fuzzy": True}]
        assert varargs("DELETE 1", "DELETE 2") == 2
        assert posonly(1, a=2, b=3) == (1, {"a": 2, "b": 3})
        assert Client().method_query("DELETE x") == "DELETE x"
        assert asyncio.run(Client().amethod("DELETE y")) == "DELETE y"
        assert Client.cmethod("q") == "q"
        assert write_query() == "ok"
    assert _recorded(store, run.run_id) == [
        ("write_query", {"query": "DELETE FROM users"}),
        ("search", {"query": "x", "limit": 10, "fuzzy": True}),
        ("varargs", {"queries": ["DELETE 1", "DELETE 2"]}),
        ("posonly", {"a": 1, "b": 3, "kw": {"a": 2}}),  # a keyword named like a positional-only parameter
        ("method_query", {"query": "DELETE x"}),
        ("amethod", {"query": "DELETE y"}),
        ("cmethod", {"query": "q"}),
        ("write_query", {}),
    ]
    assert not any("SECRETSELF" in repr(e.payload) for e in store.read_run(run.run_id))


def test_a_policy_and_a_query_see_a_kwargs_argument(store):
    rec = Recorder(store, policy=Policy.from_text(DENY_DELETE))
    ran = []

    @rec.tool("db")
    def write_query(**kw):
        ran.append(kw)
        return "ok"

    with rec.run(agent="deco") as run:
        with pytest.raises(ToolDenied, match="no-delete"):
            write_query(query="DELETE FROM users")
        assert write_query(query="SELECT 1") == "ok"
    assert ran == [{"query": "SELECT 1"}]
    denied = [e.payload["call_id"] for e in store.read_run(run.run_id) if e.kind == "tool.call"][0]
    assert [h["call_id"] for h in store.query_calls(match=["arguments.query~(?i)delete"])] == [denied]


def test_a_decorated_callable_without_a_name_or_a_signature_is_a_config_error_naming_the_fix(tmp_path):
    """recorder.tool(server)(functools.partial(f, 1)) raised AttributeError '__name__', and a
    builtin class without a signature ValueError; with a name, a partial is recorded as usual."""
    import functools

    from sealbox import ConfigError
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "s")
    recorder = Recorder(store, policy=ALLOW_ALL)

    def add(a, b):
        return a + b

    class Echo:
        def __call__(self, x):
            return x

    for fn in (functools.partial(add, 1), Echo()):
        with pytest.raises(ConfigError, match=r"has no __name__ to name the tool by: give its name, "
                                              r"recorder.tool\('db', 'name'\)"):
            recorder.tool("db")(fn)
    with pytest.raises(ConfigError, match=r"db/dict: the arguments of <class 'dict'> cannot be read"):
        recorder.tool("db")(dict)
    add_one = recorder.tool("db", "add_one")(functools.partial(add, 1))
    with recorder.run(agent="a") as run:
        assert add_one(b=2) == 3
    calls = [store.resolve(e.payload) for e in store.read_run(run.run_id) if e.kind == "tool.call"]
    assert [(c["tool"], c["arguments"]) for c in calls] == [("add_one", {"b": 2})]
    store.close()


def test_every_keyword_a_call_passed_is_recorded_once_and_under_an_unambiguous_name(store):
    """A keyword named like the ``**`` parameter itself was flattened (``kw=7`` recorded as ``"kw": 7``), and
    the keywords that cannot be flattened (named like a parameter) were recorded under that same name, so
    ``f(1, a=2, kw=7)`` lost ``kw=7`` and ``f(1, a=2)`` was recorded as ``f(1, kw={"a": 2})``. A keyword named
    like the ``**`` parameter now goes with those, under the ``**`` parameter's name."""
    rec = Recorder(store, policy=ALLOW_ALL)

    @rec.tool("t")
    def one(a, **kw):
        return (a, kw)

    @rec.tool("t")
    def star(*args, **kwargs):
        return (args, kwargs)

    @rec.tool("t")
    def mixed(a, /, b=2, *, c, d=4, **kw):
        return (a, b, c, d, kw)

    with rec.run(agent="deco") as run:
        assert one(1, kw=5) == (1, {"kw": 5})
        assert one(1, b=2) == (1, {"b": 2})
        assert star(1, 2, x=3) == ((1, 2), {"x": 3})
        assert star(1, args=1, kwargs=2) == ((1,), {"args": 1, "kwargs": 2})
        assert star(args=1) == ((), {"args": 1})
        assert star(kwargs={"args": 1}) == ((), {"kwargs": {"args": 1}})
        assert mixed(1, c=3) == (1, 2, 3, 4, {})
        assert mixed(1, 5, c=3, a=9, kw=8, e=0) == (1, 5, 3, 4, {"a": 9, "kw": 8, "e": 0})
    assert [args for _, args in _recorded(store, run.run_id)] == [
        {"a": 1, "kw": {"kw": 5}},
        {"a": 1, "b": 2},
        {"args": [1, 2], "x": 3},
        {"args": [1], "kwargs": {"args": 1, "kwargs": 2}},
        {"args": [], "kwargs": {"args": 1}},
        {"args": [], "kwargs": {"kwargs": {"args": 1}}},
        {"a": 1, "b": 2, "c": 3, "d": 4},
        {"a": 1, "b": 5, "c": 3, "d": 4, "e": 0, "kw": {"a": 9, "kw": 8}},
    ]
