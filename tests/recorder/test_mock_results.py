"""A ``unittest.mock`` object (a ``MagicMock``'s class has ``__next__``, ``__anext__`` and ``__iter__``)
returned by a tool or a model call is a value, not an iterator or a stream: it is given back as it
is and recorded as its repr in a ``$lossy`` placeholder (the agent got a ConfigError, and a model
call's mock response was taken for a stream, recorded at the run's end as an unread one)."""

from __future__ import annotations

import asyncio
from unittest.mock import AsyncMock, MagicMock, Mock

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.verify import verify_store


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _lossy(value):
    return {"$lossy": {"reason": "unsupported", "repr": repr(value),
                       "type": f"unittest.mock.{type(value).__mro__[1].__name__}"}}


def test_a_tool_returning_a_mock_gets_it_back_and_the_result_is_its_repr(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    sync_mock, async_mock, plain, amock = MagicMock(), MagicMock(), Mock(), AsyncMock()

    @rec.tool("svc")
    def fetch():
        return sync_mock

    @rec.tool("svc")
    async def afetch():
        return async_mock

    async def main():
        with rec.run(agent="a") as run:
            assert fetch() is sync_mock
            assert await afetch() is async_mock
            assert run.call_tool("svc", "plain", None, lambda: plain) is plain
            assert await run.acall_tool("svc", "amock", None, lambda: amock) is amock
            return run

    run = asyncio.run(main())
    results = [(e.step, e.payload["ok"], store.resolve(e.payload).get("result"))
               for e in store.read_run(run.run_id) if e.kind == "tool.result"]
    assert results == [("2", True, _lossy(sync_mock)), ("3", True, _lossy(async_mock)),
                       ("4", True, _lossy(plain)), ("5", True, _lossy(amock))]
    assert verify_store(store).ok


def test_a_model_call_returning_a_mock_is_recorded_at_its_step_not_as_a_stream(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    response = MagicMock()
    with rec.run(agent="a") as run:
        assert run.complete({"model": "m"}, lambda request: response) is response
        run.note("after")
    events = [(e.step, e.kind, e.payload.get("response")) for e in store.read_run(run.run_id)
              if e.kind in ("model.call", "note")]
    assert events == [("2", "model.call", _lossy(response)), ("3", "note", None)]
    assert verify_store(store).ok
