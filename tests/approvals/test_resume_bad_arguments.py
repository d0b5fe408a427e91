"""``Recorder.resume`` given arguments it cannot use: a ``ConfigError`` before anything is written or run.

A tool function that is not callable (``tools={("db", "write_query"): 1}``, or ``recorder.tools`` holding
one) used to pass the checks made "before anything is written": the approval was claimed (``run.resumed``),
the call was recorded as run (``ResumedCall.ran`` True) with the error ``'int' object is not callable`` as
its result, and leaving the block ended the run: the approver's approval was spent on a programming
mistake and the record said the approved tool had run and failed. ``wait="x"`` and ``arguments=[…]``
ended in a bare ``TypeError`` from inside the resumption."""

from __future__ import annotations

import pytest
from approval_helpers import kinds, policy

from sealbox.approvals import ApprovalPending, answer
from sealbox.errors import ConfigError
from sealbox.recorder import Recorder


def suspended(store, keys):
    try:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: "ran")
    except ApprovalPending as pending:
        answer(store, pending.approval_id, "approve", "ok", keys["alice"])
        return pending.run_id
    raise AssertionError("not suspended")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tools": {("db", "write_query"): 1}}, "the function for tool db/write_query is not callable: 1"),
    ({"tools": [("db", "write_query")]}, "tools must be a dict {(server, tool): fn}, not [('db', 'write_query')]"),
    ({"wait": "x"}, "wait must be a number of seconds, 0 or more, not 'x'"),
    ({"wait": float("nan")}, "wait must be a number of seconds, 0 or more, not nan"),
    ({"wait": -1}, "wait must be a number of seconds, 0 or more, not -1"),
    ({"arguments": [1]}, "arguments must be a dict {call_id: arguments}, not [1]"),
    ({"rerun_unknown": "no"}, "rerun_unknown must be True or False, not 'no'"),
])
def test_bad_resume_arguments_are_refused_before_anything_is_written(store, keys, kwargs, message):
    run_id = suspended(store, keys)
    before = kinds(store, run_id)
    rec = Recorder(store, policy=policy())
    with pytest.raises(ConfigError) as info:
        rec.resume(run_id, **kwargs)
    assert str(info.value) == message
    assert kinds(store, run_id) == before  # nothing written: the approval is not spent
    with rec.resume(run_id, tools={("db", "write_query"): lambda sql: "ran"}) as run:  # resumable as it was
        assert [(c.outcome, c.ran, c.result) for c in run.resumed_calls] == [("approved", True, "ran")]
    assert kinds(store, run_id)[-3:] == ["run.resumed", "tool.result", "run.ended"]


def test_a_registered_function_that_is_not_callable_is_refused_before_anything_is_written(store, keys):
    run_id = suspended(store, keys)
    before = kinds(store, run_id)
    rec = Recorder(store, policy=policy())
    rec.tools[("db", "write_query")] = "not a function"
    with pytest.raises(ConfigError) as info:
        rec.resume(run_id)
    assert str(info.value) == "the function for tool db/write_query is not callable: 'not a function'"
    assert kinds(store, run_id) == before
