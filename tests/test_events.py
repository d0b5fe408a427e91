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
