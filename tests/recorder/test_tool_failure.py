"""A tool that reports its own failure in what it returns (an MCP result with isError) is recorded
``ok: false`` with the result and a ToolError, through ``call_tool(..., failure=...)``."""

from __future__ import annotations

import asyncio

import pytest

from sealbox.errors import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store
from sealbox.verify import verify_store


def is_error(result):
    return result["text"] if result.get("isError") else None


def results(store, run_id):
    return [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]


def test_a_reported_failure_is_recorded_with_its_result_and_returned_unchanged(tmp_path):
    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        bad = run.call_tool("db", "q", {"sql": "SELEC 1"}, lambda sql: {"isError": True, "text": "syntax error"},
                            failure=is_error)
        good = run.call_tool("db", "q", {"sql": "SELECT 1"}, lambda sql: {"isError": False, "text": "1"},
                             failure=is_error)
    assert (bad, good) == ({"isError": True, "text": "syntax error"}, {"isError": False, "text": "1"})
    first, second = results(store, run.run_id)
    assert {k: first[k] for k in ("ok", "result", "error")} == {
        "ok": False, "result": {"isError": True, "text": "syntax error"},
        "error": {"type": "ToolError", "message": "syntax error"}}
    assert (second["ok"], second["result"], "error" in second) == (True, {"isError": False, "text": "1"}, False)
    assert [c["outcome"] for c in store.query_calls(error=True)] == ["error"]
    assert run.recorder.breaker.before_call("db", "q").allowed  # the tool answered: not a breaker failure
    assert verify_store(store).ok


def test_a_failure_check_that_raises_or_answers_garbage_is_recorded_as_a_failure(tmp_path):
    store = init_store(tmp_path / "s")

    def broken(result):
        raise KeyError("isError")

    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        assert run.call_tool("db", "q", {}, lambda: "fine", failure=broken) == "fine"
        assert asyncio.run(run.acall_tool("db", "q", {}, lambda: "fine", failure=lambda r: 42)) == "fine"
    first, second = results(store, run.run_id)
    assert (first["ok"], first["error"]) == (False, {
        "type": "ToolError", "message": "the result could not be checked for a failure: KeyError: 'isError'"})
    assert (second["ok"], second["error"]["message"]) == (False, "the result's failure check answered int, not a message")


def test_a_failure_message_is_scrubbed_of_the_calls_redacted_secrets(tmp_path):
    store = init_store(tmp_path / "s")
    secret = "hunter2-very-secret"
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "login", {"password": secret},
                      lambda password: {"isError": True, "text": f"bad password {password}"}, failure=is_error)
    [res] = results(store, run.run_id)
    assert res["error"]["message"].startswith("bad password ⟦redacted:hmac-sha256:")
    assert secret not in str(store.resolve(res))


def test_failure_must_be_callable(tmp_path):
    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        with pytest.raises(ConfigError, match="failure must be a callable or None"):
            run.call_tool("db", "q", {}, lambda: 1, failure="isError")
    assert results(store, run.run_id) == []


class _Suspend(Exception):
    """A framework's control-flow exception (LangGraph's GraphInterrupt is an Exception)."""


def test_control_flow_exceptions_are_recorded_but_never_open_the_breaker(tmp_path):
    store = init_store(tmp_path / "s")

    def waits():
        raise _Suspend("waiting for a human")

    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        for _ in range(6):
            with pytest.raises(_Suspend):
                run.call_tool("bank", "transfer", None, waits, control_flow=(_Suspend,))
        assert run.call_tool("bank", "transfer", None, lambda: "ok", control_flow=(_Suspend,)) == "ok"

        async def awaits():
            raise _Suspend("waiting")

        for _ in range(6):
            with pytest.raises(_Suspend):
                asyncio.run(run.acall_tool("bank", "transfer", None, awaits, control_flow=(_Suspend,)))
        assert run.call_tool("bank", "transfer", None, lambda: "ok") == "ok"
        with pytest.raises(ConfigError, match="control_flow must be a tuple of exception types"):
            run.call_tool("bank", "transfer", None, lambda: "ok", control_flow=_Suspend)
    recorded = results(store, run.run_id)
    assert [r["ok"] for r in recorded] == [False] * 6 + [True] + [False] * 6 + [True]
    assert {r["error"]["type"] for r in recorded if not r["ok"]} == {"_Suspend"}
    assert verify_store(store).ok
    store.close()


class _Thing:
    pass


def test_an_exception_whose_argument_is_a_plain_object_is_recorded_without_its_address(tmp_path):
    """An exception raised with a plain object (``ValueError(obj)``, a cancellation with a sentinel)
    was recorded with the object's default repr, memory address included (``<… object at 0x7f…>``):
    a message that changed on every run. The address is dropped, in the message and the traceback."""
    store = init_store(tmp_path / "s")
    thing = _Thing()

    def fails():
        raise ValueError(thing, [object()])

    async def cancelled():
        raise asyncio.CancelledError(thing)

    async def go(run):
        with pytest.raises(asyncio.CancelledError):
            await run.acall_tool("s", "c", {}, cancelled)

    with pytest.raises(asyncio.CancelledError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            with pytest.raises(ValueError):
                run.call_tool("s", "v", {}, fails)
            asyncio.run(go(run))
            raise asyncio.CancelledError
    first, second = results(store, run.run_id)
    assert first["error"]["message"] == f"(<{__name__}._Thing object>, [<object object>])"
    assert " at 0x" not in first["error"]["traceback"]
    assert second["error"]["type"] == "CancelledError"
    assert second["error"]["message"] == "cancelled (its message was an object of type _Thing, not text)"
    assert verify_store(store).ok
