"""A tool that returns an iterator (not only a generator) is refused like a returned generator:
recorded ``ok: false`` with a ConfigError, never ``ok: true`` with a placeholder such as
"<map object>" (the result lost, its lazy work run after the record said ok). Through the real
Recorder and a real SQLite store."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

import sealbox
from sealbox import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

KINDS = ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def results(store, run_id):
    return [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]


class Countdown:
    """An iterator by protocol only (``__next__``, no generator behind it)."""

    def __init__(self):
        self.n = 2

    def __iter__(self):
        return self

    def __next__(self):
        if not self.n:
            raise StopIteration
        self.n -= 1
        return self.n


class AsyncCountdown:
    def __aiter__(self):
        return self

    async def __anext__(self):
        raise StopAsyncIteration


def _cursor():
    db = sqlite3.connect(":memory:")
    return db.execute("select 1 union all select 2")


ITERATORS = {
    "map": (lambda: map(str, [1, 2]), "map"),
    "filter": (lambda: filter(None, [0, 1]), "filter"),
    "zip": (lambda: zip([1], [2]), "zip"),
    "iter-list": (lambda: iter([1, 2]), "list_iterator"),
    "sqlite3.Cursor": (_cursor, "Cursor"),
    "__next__": (Countdown, "Countdown"),
}


def expected(name, *, kind="an iterator", collect="list(...)"):
    return (f"s/t: the tool returned {kind} ({name}), which was not consumed: its items would be produced "
            f"only after the record said ok, and lost to it; return a list or another value instead, e.g. "
            f"{collect} of it; the call is recorded as this error")


@pytest.mark.parametrize("case", list(ITERATORS), ids=list(ITERATORS))
def test_call_tool_records_a_returned_iterator_as_an_error(store, case):
    fn, name = ITERATORS[case]
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError) as raised:
            run.call_tool("s", "t", None, fn)
    assert str(raised.value) == expected(name)
    assert [e.kind for e in store.read_run(run.run_id)] == KINDS
    [result] = results(store, run.run_id)
    assert result["ok"] is False and "result" not in result
    assert result["error"]["type"] == "ConfigError"
    assert result["error"]["message"] == expected(name)


@pytest.mark.parametrize("case", list(ITERATORS), ids=list(ITERATORS))
def test_acall_tool_records_an_iterator_returned_by_an_async_tool_as_an_error(store, case):
    fn, name = ITERATORS[case]

    async def tool():
        return fn()

    async def go(run):
        with pytest.raises(ConfigError, match=r"returned an iterator"):
            await run.acall_tool("s", "t", None, tool)

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        asyncio.run(go(run))
    [result] = results(store, run.run_id)
    assert result["ok"] is False and result["error"]["type"] == "ConfigError"
    assert result["error"]["message"] == expected(name)


def test_a_decorated_tool_returning_a_lazy_map_does_not_run_its_function_after_the_record(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    seen = []

    def fetch(x):
        seen.append(x)
        return x * 10

    @rec.tool("db")
    def lookup(ids: list):
        return map(fetch, ids)

    with rec.run(agent="bot") as run:
        with pytest.raises(ConfigError, match=r"^db/lookup: the tool returned an iterator \(map\)"):
            lookup([1, 2])
    assert seen == []  # the lazy map never ran after the record said anything
    [result] = results(store, run.run_id)
    assert result["ok"] is False and result["error"]["message"] == expected("map").replace("s/t", "db/lookup")


@pytest.mark.parametrize("via", ["acall_tool", "decorator"])
def test_an_async_tool_returning_an_async_iterator_is_recorded_as_an_error(store, via):
    rec = Recorder(store, policy=ALLOW_ALL)

    async def stream():
        return AsyncCountdown()

    async def go(run):
        if via == "acall_tool":
            return await run.acall_tool("s", "t", None, stream)
        return await rec.tool("s", "t")(stream)()

    with rec.run(agent="bot") as run:
        with pytest.raises(ConfigError, match=r"returned an async iterator \(AsyncCountdown\)"):
            asyncio.run(go(run))
    [result] = results(store, run.run_id)
    assert result["ok"] is False and result["error"]["type"] == "ConfigError"
    assert result["error"]["message"] == expected("AsyncCountdown", kind="an async iterator",
                                                  collect="[x async for x in ...]")


def test_sync_call_tool_refuses_an_async_iterator_too(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError, match=r"returned an async iterator"):
            run.call_tool("s", "t", None, AsyncCountdown)
    [result] = results(store, run.run_id)
    assert result["ok"] is False and result["error"]["type"] == "ConfigError"


def test_iterables_that_are_not_iterators_are_still_recorded_ok(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        assert run.call_tool("s", "t", None, lambda: [1, 2]) == [1, 2]
        assert run.call_tool("s", "t", None, lambda: {"a": (1, 2)}) == {"a": (1, 2)}
    assert [(r["ok"], r["result"]) for r in results(store, run.run_id)] == [(True, [1, 2]), (True, {"a": [1, 2]})]
