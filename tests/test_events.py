"""Event kinds, schemas and their published documentation."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from sealbox.errors import InvalidEventError
from sealbox.events import CONTENT_FIELDS, ENVELOPE_SCHEMA, KINDS, PAYLOAD_SCHEMAS, schema_markdown, validate_payload

DOC = Path(__file__).resolve().parents[1] / "docs" / "event-format.md"

DESIGN_KINDS = {
    "run.started", "run.suspended", "run.resumed", "run.ended", "model.call", "tool.call", "policy.decision",
    "tool.result", "approval.requested", "approval.answered", "approval.expired", "state.saved",
    "guardrail.tripped", "breaker.changed", "tools.changed", "tool.reapproved", "access.granted",
    "access.revoked", "identity.changed", "content.erased", "anomaly", "note",
}


def test_the_kinds_are_exactly_the_closed_set_of_the_design():
    assert KINDS == DESIGN_KINDS


def test_every_schema_is_a_valid_json_schema():
    for schema in [ENVELOPE_SCHEMA, *PAYLOAD_SCHEMAS.values()]:
        jsonschema.Draft202012Validator.check_schema(schema)
    assert set(CONTENT_FIELDS) <= KINDS


def test_the_published_schemas_match_the_code():
    text = DOC.read_text(encoding="utf-8")
    assert schema_markdown() in text, "docs/event-format.md is stale: regenerate it with sealbox.events.schema_markdown()"


@pytest.mark.parametrize("kind, payload", [
    ("tool.result", {"call_id": "c", "ok": True, "duration_us": 12, "result": {"rows": []}}),
    ("run.ended", {"status": "cancelled", "error": {"type": "CancelledError", "message": ""}}),
    ("policy.decision", {"call_id": "c", "effect": "deny", "reason_code": "guardrail_error", "rule": None,
                         "reason": "condition raised", "policy_fingerprint": "sha256:" + "0" * 64, "eval_us": 0}),
])
def test_valid_payloads_pass(kind, payload):
    validate_payload(kind, payload)


@pytest.mark.parametrize("kind, payload, fragment", [
    ("run.ended", {"status": "fine"}, "status"),
    ("tool.result", {"call_id": "c", "ok": "yes", "duration_us": 1}, "ok"),
    ("tool.result", {"call_id": "c", "ok": True, "duration_us": -1}, "duration_us"),
    ("policy.decision", {"call_id": "c", "effect": "maybe", "reason_code": "x", "rule": None, "reason": "",
                         "policy_fingerprint": "sha256:0", "eval_us": 0}, "effect"),
    ("bogus.kind", {}, "unknown event kind"),
])
def test_wrong_shapes_raise_invalid_event_error_naming_the_field(kind, payload, fragment):
    with pytest.raises(InvalidEventError, match=fragment):
        validate_payload(kind, payload)


GOOD_ENVELOPE = {"v": 1, "run_id": "r", "run_seq": 1, "step": "1", "kind": "note", "ts": "2026-11-29T17:00:06.982722Z",
                 "principal": "p", "payload": {"text": "x"}, "prev": None}


@pytest.mark.parametrize("change", [
    {"v": 2}, {"v": True}, {"run_seq": 0}, {"run_seq": 1.5}, {"step": "a"}, {"step": "4."}, {"kind": "x"},
    {"ts": "yesterday"}, {"principal": ""}, {"payload": []}, {"prev": "sha256:12"}, {"extra": 1}, {"run_id": ""},
    {"run_id": "r" * 129},
])
def test_the_fast_envelope_check_rejects_what_the_published_schema_rejects(change):
    from sealbox.events import _ENVELOPE_VALIDATOR, _envelope_ok, validate_envelope

    bad = {**GOOD_ENVELOPE, **change}
    assert _envelope_ok(GOOD_ENVELOPE) and not _envelope_ok(bad)
    with pytest.raises(Exception):
        _ENVELOPE_VALIDATOR(bad)
    with pytest.raises(InvalidEventError, match="envelope"):
        validate_envelope(bad)
