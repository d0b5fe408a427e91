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


ASYNC_GEN_REFUSAL = ("s/t: the tool returned an async generator, which was closed without running: return a list "
                     "or another value; the call is recorded as this error")


@pytest.mark.parametrize("via", ["call_tool", "acall_tool"])
def test_a_returned_async_generator_is_closed_unrun_as_a_generator_is(store, via):
    """A returned sync generator was closed; an async one was left open (its message said 'not
    run'), so whoever held it could still run its body after the record said it failed."""
    ran, returned = [], []

    async def rows():
        ran.append("body")
        yield 1

    def tool():
        returned.append(rows())
        return returned[0]

    async def drain(agen):
        return [x async for x in agen]

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError) as raised:
            if via == "call_tool":
                run.call_tool("s", "t", None, tool)
            else:
                asyncio.run(run.acall_tool("s", "t", None, tool))
    assert str(raised.value) == ASYNC_GEN_REFUSAL
    assert returned[0].ag_frame is None  # closed: iterating it now yields nothing and runs nothing
    assert asyncio.run(drain(returned[0])) == [] and ran == []
    [result] = results(store, run.run_id)
    assert (result["ok"], result["error"]["type"], result["error"]["message"]) == (False, "ConfigError",
                                                                                    ASYNC_GEN_REFUSAL)


def test_a_returned_file_object_is_refused_with_a_message_about_files(store, tmp_path):
    """A file or StringIO is an iterator of lines, and was refused as 'an iterator ... e.g. list(...)
    of it': the advice for a file is to return its content."""
    path = tmp_path / "report.txt"
    path.write_text("line 1\nline 2\n")
    handle = open(path)
    buffer = __import__("io").StringIO("a,b\n1,2\n")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError) as from_file:
            run.call_tool("fs", "read", None, lambda: handle)
        with pytest.raises(ConfigError) as from_buffer:
            run.call_tool("fs", "csv", None, lambda: buffer)
    tail = ("not its content: the record would hold a placeholder, and what is read from it after the record said "
            "ok would be lost to it; return its content instead, e.g. {}; it was left as it is (not read, not "
            "closed); the call is recorded as this error")
    assert str(from_file.value) == "fs/read: the tool returned a file object (TextIOWrapper), " + tail.format("f.read()")
    assert str(from_buffer.value) == "fs/csv: the tool returned a file object (StringIO), " + tail.format("its getvalue()")
    assert [r["error"]["message"] for r in results(store, run.run_id)] == [str(from_file.value), str(from_buffer.value)]
    assert handle.read() == "line 1\nline 2\n" and buffer.getvalue() == "a,b\n1,2\n"  # left as they were
    handle.close()


def test_an_async_generator_the_tool_had_started_is_refused_and_left_to_its_loop(store):
    closed = []

    async def rows():
        try:
            yield 1
            yield 2
        finally:
            closed.append("finally")

    async def tool():
        agen = rows()
        await agen.__anext__()
        return agen

    async def go(run):
        with pytest.raises(ConfigError) as raised:
            await run.acall_tool("s", "t", None, tool)
        return str(raised.value)

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        message = asyncio.run(go(run))
    assert message == ("s/t: the tool returned an async generator it had started, which was not run further (its "
                       "event loop closes it): return a list or another value; the call is recorded as this error")
    assert closed == ["finally"]  # asyncio.run closed it at the loop's end, in the loop
    [result] = results(store, run.run_id)
    assert result["error"]["message"] == message
