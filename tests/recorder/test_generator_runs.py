"""A run entered inside a generator (``with recorder.run(...)`` around a ``yield``), sync and async.

While such a generator is suspended, its run is the current run of the code iterating it: the
generator runs in its caller's context (contextvars, PEP 567; ``contextlib.contextmanager`` and
pytest's yield fixtures rely on exactly that). Closing the generator (``close()``, ``aclose()``,
garbage collection, ``break``) ends the run ``cancelled``.

Found by closing such a generator inside another run of the caller: the generator's ``__exit__``
reset the context variable to what it held before the generator's run, so the caller's own run was
no longer current: the next decorated tool call raised "called outside a recorded run" and did not
run. Two generators closed in the order they were entered left the first (ended) run in the variable.
A run now restores the variable only when it is still the current run, and never to a run that has
ended meanwhile.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import _CURRENT, Recorder, current_run
from sealbox.store import init_store
from sealbox.verify import verify_store


@pytest.fixture
def store(tmp_path):
    s = init_store(tmp_path / "s")
    yield s
    assert verify_store(s).ok
    s.close()


def ending(store, run_id):
    last = store.read_run(run_id)[-1]
    return last.kind, last.payload.get("status")


def tool_calls(store, run_id):
    return [(e.step, e.payload["tool"]) for e in store.read_run(run_id) if e.kind == "tool.call"]


def test_closing_a_suspended_generator_inside_another_run_leaves_that_run_current(store):
    recorder = Recorder(store, policy=ALLOW_ALL)

    @recorder.tool(server="s")
    def lookup(x):
        return x

    def pages():
        with recorder.run(agent="pager") as run:
            yield run.run_id
            yield "unreached"

    g = pages()
    pager = next(g)
    assert current_run().run_id == pager  # suspended inside its run: the caller's context holds it
    with recorder.run(agent="main") as main:
        lookup(1)
        g.close()
        assert current_run() is main
        lookup(2)  # raised RecordingError "called outside a recorded run" before the fix
    assert ending(store, pager) == ("run.ended", "cancelled")
    assert ending(store, main.run_id) == ("run.ended", "ok")
    assert tool_calls(store, main.run_id) == [("2", "lookup"), ("3", "lookup")]
    assert tool_calls(store, pager) == []
    # started while the generator was suspended in its run: recorded as its sub-run (see the docstring)
    assert store.read_run(main.run_id)[0].payload["parent_run_id"] == pager
    assert current_run() is None and _CURRENT.get() is None  # no ended run left in the variable


def test_generators_closed_in_the_order_they_were_entered_leave_no_run_current(store):
    recorder = Recorder(store, policy=ALLOW_ALL)

    def gen(agent):
        with recorder.run(agent=agent) as run:
            yield run.run_id
            yield "unreached"

    g1, g2 = gen("one"), gen("two")
    first, second = next(g1), next(g2)
    g1.close()
    assert current_run().run_id == second  # still suspended in its run
    g2.close()
    assert current_run() is None and _CURRENT.get() is None  # held the ended first run before the fix
    assert ending(store, first) == ending(store, second) == ("run.ended", "cancelled")
    with recorder.run(agent="later") as later:
        pass
    assert store.read_run(later.run_id)[0].payload["parent_run_id"] is None


def test_a_generator_dropped_after_break_ends_its_run_cancelled(store):
    recorder = Recorder(store, policy=ALLOW_ALL)

    def gen():
        with recorder.run(agent="gen") as run:
            yield run.run_id
            yield "unreached"

    with recorder.run(agent="outer") as outer:
        for run_id in gen():
            break
        gc.collect()
        assert current_run() is outer
    assert ending(store, run_id) == ("run.ended", "cancelled")
    assert store.read_run(run_id)[0].payload["parent_run_id"] == outer.run_id
    assert _CURRENT.get() is None


def test_closing_an_async_generator_inside_another_async_run_leaves_that_run_current(store):
    recorder = Recorder(store, policy=ALLOW_ALL)

    @recorder.tool(server="s")
    async def lookup(x):
        return x

    async def pages():
        async with recorder.run(agent="pager") as run:
            yield run.run_id
            yield "unreached"

    async def main():
        ag = pages()
        pager = await ag.__anext__()
        async with recorder.run(agent="main") as run:
            await lookup(1)
            await ag.aclose()
            assert current_run() is run
            await lookup(2)
        assert current_run() is None and _CURRENT.get() is None
        # abandoned after a break: the event loop closes it (in a task of its own)
        async for dropped in pages():
            break
        gc.collect()
        for _ in range(100):
            if store.read_run(dropped)[-1].kind == "run.ended":
                break
            await asyncio.sleep(0.01)
        return pager, run, dropped

    pager, run, dropped = asyncio.run(main())
    assert ending(store, pager) == ending(store, dropped) == ("run.ended", "cancelled")
    assert tool_calls(store, run.run_id) == [("2", "lookup"), ("3", "lookup")]
