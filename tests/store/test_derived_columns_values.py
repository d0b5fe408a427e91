"""derived_columns keeps a payload's text identifiers (a ``str`` or a subclass of it) and gives None
for any other value, as verify recomputes them (the text test is written out inline since it was
a helper call per column)."""

from sealbox.events import derived_columns


class _Text(str):
    pass


def test_text_kept_other_values_none():
    decision = {"server": "srv", "tool": _Text("echo"), "call_id": 7, "effect": "allow", "rule": None,
                "reason_code": ["policy_allow"]}
    assert derived_columns("policy.decision", decision) == (
        "srv", "echo", None, "allow", None, None, None, None, None, None)
    assert derived_columns("tool.call", {"server": b"srv", "tool": "echo", "call_id": "c1", "effect": "allow"}) == (
        None, "echo", "c1", None, None, None, None, None, None, None)
    assert derived_columns("tool.result", {"call_id": "c1", "ok": True, "duration_us": 3.0}) == (
        None, None, "c1", None, 1, None, None, None, None, None)
