"""A condition reading a usage counter (``when: usage.tool_calls_run < 2``, docs/policy.md: ``usage`` is "the
counters below") under a policy with no limit on that counter was denied guardrail_error on every call: ``rule 'r':
condition raised KeyError: 'tool_calls_run'``. The Recorder asked the store only for the counters its limits
bound, so the condition always read an empty ``usage``. It now also asks for those the conditions read."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

POLICY = """
version: 1
rules:
  - id: first-two
    match: {server: db, tool: read_query}
    effect: allow
    when: usage.tool_calls_run < 2
"""


def test_a_condition_reading_a_counter_no_limit_bounds_sees_its_value(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    try:
        rec = Recorder(store, policy=Policy.from_text(POLICY))
        with rec.run(agent="a") as run:
            got = [run.call_tool("db", "read_query", {"q": n}, lambda q: q * 10) for n in (1, 2)]
            with pytest.raises(ToolDenied) as denied:
                run.call_tool("db", "read_query", {"q": 3}, lambda q: q * 10)
        assert got == [10, 20]
        assert (denied.value.decision.reason_code, denied.value.decision.rule) == ("no_match", None)
    finally:
        store.close()


def test_a_condition_reading_the_whole_usage_sees_every_counter(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    try:
        rec = Recorder(store, policy=Policy.from_text(POLICY.replace("usage.tool_calls_run < 2",
                                                                     "usage['tokens_day'] == 0 && size(usage) == 7")))
        with rec.run(agent="a") as run:
            assert run.call_tool("db", "read_query", {"q": 1}, lambda q: q * 10) == 10
    finally:
        store.close()
