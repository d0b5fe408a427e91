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
    "guardrail.tripped", "breaker.changed", "tools.changed", "tool.reapproved", "tool.revoked", "access.granted",
    "access.revoked", "access.credential_rotated", "identity.changed", "content.erased", "anomaly", "note",
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


# ----------------------------------------------------------------- ECMA-262 pattern semantics

FULLWIDTH_TS = "２０２６-０１-０１T００:００:００Z"


@pytest.mark.parametrize("label, kind, payload, step", [
    ("step with a final newline", "note", {"text": "x"}, "1\n"),
    ("dotted step with a final newline", "note", {"text": "x"}, "1.2\n"),
    ("step of Arabic-Indic digits", "note", {"text": "x"}, "\u0661"),
    ("fingerprint with a final newline", "content.erased", {"blob": "sha256:" + "a" * 64 + "\n", "reason": "r"}, None),
    ("fullwidth-digit timestamp", "approval.expired", {"approval_id": "a", "expired_at": FULLWIDTH_TS}, None),
    ("timestamp with a final newline", "approval.expired", {"approval_id": "a", "expired_at": "2026-01-01T00:00:00Z\n"}, None),
    ("nullable timestamp, fullwidth", "access.granted", {"grant_id": "g", "principal": "p", "server": "s", "tool": "t",
                                                        "scope": {}, "expires_at": "2026-01-01T00:00:00\uff0e5Z"}, None),
])
def test_the_store_refuses_what_the_published_schemas_refuse(tmp_path, label, kind, payload, step):
    import sqlite3

    import sealbox
    from sealbox import EventDraft

    store = sealbox.init_store(tmp_path / "s")
    try:
        with pytest.raises(InvalidEventError):
            store.append(EventDraft(kind=kind, payload=payload, step=step))
    finally:
        store.close()
    db = sqlite3.connect(tmp_path / "s" / "sealbox.db")
    try:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 1  # only init's run.started
    finally:
        db.close()


def test_ascii_steps_and_timestamps_still_pass(tmp_path):
    import sqlite3

    import sealbox
    from sealbox import EventDraft

    store = sealbox.init_store(tmp_path / "s")
    store.append(EventDraft(kind="note", payload={"text": "x"}, step="12.3"))
    store.append(EventDraft(kind="approval.expired", payload={"approval_id": "a",
                                                              "expired_at": "2026-01-01T00:00:00.123+02:00"}))
    store.close()
    db = sqlite3.connect(tmp_path / "s" / "sealbox.db")
    try:
        assert [r[0] for r in db.execute("SELECT step FROM events ORDER BY leaf_index")] == ["1", "12.3", "3"]
    finally:
        db.close()


def test_the_envelope_check_and_step_check_use_ecma_semantics():
    from sealbox.events import _envelope_ok, _STEP_RE, _TS_RE, check_step

    with pytest.raises(InvalidEventError):
        check_step("1\n")
    env = {"v": 1, "run_id": "r", "run_seq": 1, "step": "1", "kind": "note", "ts": "2026-01-01T00:00:00Z",
           "principal": "p", "payload": {}, "prev": None}
    assert _envelope_ok(env)
    assert not _envelope_ok({**env, "step": "1\n"})
    assert not _envelope_ok({**env, "ts": FULLWIDTH_TS})
    assert not _envelope_ok({**env, "prev": "sha256:" + "0" * 64 + "\n"})
    assert _STEP_RE.pattern.endswith("\\Z") and _TS_RE.flags & __import__("re").ASCII
    for schema_text in [str(ENVELOPE_SCHEMA), *map(str, PAYLOAD_SCHEMAS.values())]:
        assert "\\d" not in schema_text  # digits are spelt [0-9] in the published schemas
