"""A deny reason the engine makes of a failure never carries a memory address (``<object object at
0x7f…>``): it differs on each run and means nothing to a reader (docs/recording.md, "Error messages")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

from policy_helpers import call, load


class Principal(Mapping):
    """A principal mapping whose every read fails with an exception holding a plain object."""

    def __getitem__(self, key: str) -> Any:
        raise ValueError(object())

    def get(self, key: str, default: Any = None) -> Any:
        raise ValueError(object())

    def __iter__(self) -> Iterator[str]:
        return iter(["id"])

    def __len__(self) -> int:
        return 1


def test_a_condition_failing_with_a_plain_object_names_no_address(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            when: 'principal.role == "agent"'
            effect: allow
        """)
    decision = policy.evaluate(call(principal=Principal()))
    assert (decision.effect, decision.reason_code, decision.rule) == ("deny", "guardrail_error", "r")
    assert decision.reason == "rule 'r': cannot prepare condition inputs: ValueError: <object object>"


def test_an_evaluation_failing_with_a_plain_object_names_no_address(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            match: {principal: {role: agent}}
            effect: allow
        """)
    decision = policy.evaluate(call(principal=Principal()))
    assert (decision.effect, decision.reason_code, decision.rule) == ("deny", "guardrail_error", None)
    assert decision.reason == "policy evaluation failed: ValueError: <object object>"
