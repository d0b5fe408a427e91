"""Event kinds, their payload schemas, and the event envelope.

An event is one immutable record in a run. Its *hashed bytes* are the RFC 8785
canonical form of the envelope ``{v, run_id, run_seq, step, kind, ts, principal,
payload, prev}``; its leaf index in the global log and its leaf hash
(SHA-256(0x00 ‖ hashed bytes), RFC 9162 §2.1.1) are derived by the store and are
not part of the hashed bytes.

The kinds are a closed set (:data:`KINDS`). Each kind has a JSON Schema (draft
2020-12) for its payload, published in ``docs/event-format.md`` and enforced by
:func:`validate_payload` before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import fastjsonschema

from sealbox.errors import InvalidEventError

__all__ = [
    "RECORD_VERSION",
    "SYSTEM_RUN_ID",
    "KINDS",
    "CONTENT_FIELDS",
    "content_fields",
    "client_request_text",
    "PAYLOAD_SCHEMAS",
    "ENVELOPE_SCHEMA",
    "EventDraft",
    "Event",
    "validate_payload",
    "validate_envelope",
    "derived_columns",
    "rfc3339_utc",
]

def rfc3339_utc(moment: datetime) -> str:
    """``moment`` as Sealbox writes times: RFC 3339 in UTC with microseconds,
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the ``ts`` format), the year always four digits.

    ``strftime("%Y")`` writes ``999`` and ``1`` for the years 999 and 1 (glibc): not RFC 3339 (§5.6:
    ``date-fullyear = 4DIGIT``), refused by the ``ts`` pattern, and sorted after ``2026`` as text.

    Raises:
        OverflowError: ``moment`` in UTC is before year 1 or after year 9999.
    """
    dt = moment.astimezone(timezone.utc)
    return (f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}."
            f"{dt.microsecond:06d}Z")


#: Version of the record format (the ``v`` field of every event).
RECORD_VERSION = 1

#: The run that holds events belonging to no agent run (identities, access, breakers, erasures).
SYSTEM_RUN_ID = "system"

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_INT = {"type": "integer", "minimum": 0}
_NINT = {"anyOf": [_INT, {"type": "null"}]}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_OBJ = {"type": "object"}
_ANY: dict[str, Any] = {}
_STRS = {"type": "array", "items": _STR}
_FP = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
_NFP = {"anyOf": [_FP, {"type": "null"}]}
_TS = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"}
_NTS = {"anyOf": [_TS, {"type": "null"}]}
_ERROR = {
    "type": "object",
    "required": ["type", "message"],
    "properties": {"type": _STR, "message": _STR, "traceback": _STR},
}
_USAGE = {
    "type": "object",
    "properties": {"input_tokens": _INT, "output_tokens": _INT, "total_tokens": _INT, "cost": _NUM},
}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    props = dict(required)
    props.update(optional or {})
    return {"type": "object", "required": sorted(required), "properties": props}


#: JSON Schema of each kind's payload. Additional fields are allowed (forward
#: compatible); the listed ones must be present and of the given type.
PAYLOAD_SCHEMAS: dict[str, dict[str, Any]] = {
    "run.started": _obj(
        {"agent": _STR, "snapshot": _NFP, "parent_run_id": _NSTR, "labels": _OBJ, "policy": _obj({"fingerprint": _FP, "name": _NSTR})},
        {"replay_of": _NSTR, "imported": _OBJ, "client": _OBJ},
    ),
    "run.suspended": _obj({"approval_ids": _STRS, "reason": _STR}),
    "run.resumed": _obj({"approval_ids": _STRS, "waited_us": _INT}, {"outcomes": _OBJ}),
    "run.ended": _obj(
        {"status": {"enum": ["ok", "error", "cancelled"]}},
        {"error": _ERROR, "usage": _USAGE, "verdict": _OBJ},
    ),
    "model.call": _obj(
        {"provider": _STR, "model": _STR, "request": _ANY, "response": _ANY, "usage": _USAGE, "latency_us": _NINT},
        {"call_id": _STR, "format": _STR, "tool_call_ids": {"type": "array", "items": _NSTR},
         "stream": _obj({"chunks": _INT})},
    ),
    "tool.call": _obj(
        {"call_id": _STR, "server": _STR, "tool": _STR, "exposed": _STR, "arguments": _ANY, "grant": _STR},
        {"model_call_step": _NSTR},
    ),
    "policy.decision": _obj(
        {
            "call_id": _STR,
            "effect": {"enum": ["allow", "deny", "require_approval"]},
            "reason_code": _STR,
            "rule": _NSTR,
            "reason": _STR,
            "policy_fingerprint": _FP,
            "eval_us": _INT,
        },
        {"inputs": _ANY, "re_evaluable": _BOOL, "limit": {"type": ["object", "null"]}, "approval": {"type": ["object", "null"]},
         "server": _STR, "tool": _STR, "reevaluated": _BOOL, "judged_as": _STR},
    ),
    "tool.result": _obj(
        {"call_id": _STR, "ok": _BOOL, "duration_us": _INT},
        {"result": _ANY, "error": _ERROR},
    ),
    "approval.requested": _obj(
        {
            "approval_id": _STR,
            "call_id": _STR,
            "server": _STR,
            "tool": _STR,
            "arguments": _ANY,
            "binding": _FP,
            "rule": _NSTR,
            "ask": _obj({"groups": _STRS, "identities": _STRS}),
            "quorum": {"type": "integer", "minimum": 1},
            "expires_at": _NTS,
        },
        {"requested_by": _STR, "policy_fingerprint": _FP},
    ),
    "approval.answered": _obj(
        {
            "approval_id": _STR,
            "binding": _FP,
            "decision": {"enum": ["approve", "deny"]},
            "identity": _STR,
            "signature": _STR,
            "reason": _STR,
            "answered_at": _TS,
            "client": _OBJ,
        },
        {"flags": {"type": "array", "items": _OBJ}, "key_id": _STR, "run_id": _STR},
    ),
    "approval.expired": _obj({"approval_id": _STR, "expired_at": _TS}),
    "state.saved": _obj({"state": _ANY}, {"label": _STR}),
    "guardrail.tripped": _obj({"limit": _STR, "current": _NUM, "bound": _NUM}, {"call_id": _STR}),
    "breaker.changed": _obj(
        {"server": _STR, "tool": _NSTR, "from": _STR, "to": _STR, "reason": _STR},
        {"failures": _INT},
    ),
    "tools.changed": _obj({"server": _STR, "added": _ANY, "removed": _ANY, "changed": _ANY},
                          {"first_seen": _BOOL, "pin_version": _INT, "upgraded": _ANY}),
    "tool.reapproved": _obj(
        {"server": _STR, "tool": _STR, "identity": _STR},
        {"schema_hash": _FP, "change_leaf": {"type": "integer", "minimum": 0}, "origin": _STR, "reason": _STR,
         "reapproved_at": _TS, "signature": _STR, "key_id": _STR},
    ),
    "tool.revoked": _obj(
        {"server": _STR, "tool": _STR, "identity": _STR, "schema_hash": _FP},
        {"change_leaf": {"type": "integer", "minimum": 0}, "origin": _STR, "reason": _STR, "revoked_at": _TS,
         "signature": _STR, "key_id": _STR},
    ),
    "access.granted": _obj(
        {"grant_id": _STR, "principal": _STR, "server": _STR, "tool": _STR, "scope": _ANY},
        {"expires_at": _NTS, "provider": _NSTR, "credential": _BOOL, "origin": _STR, "identity": _STR,
         "granted_at": _TS, "signature": _STR, "key_id": _STR},
    ),
    "access.revoked": _obj(
        {"grant_id": _STR, "step": {"enum": ["requested", "sent", "confirmed", "failed"]}},
        {"reason": _STR, "detail": _ANY, "origin": _STR, "identity": _STR, "at": _TS,
         "after": {"type": "integer", "minimum": 0}, "signature": _STR, "key_id": _STR},
    ),
    "access.credential_rotated": _obj(
        {"grant_id": _STR, "seq": {"type": "integer", "minimum": 1},
         "fingerprints": {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": {
             "access_token": {"type": "string", "pattern": "^hmac-sha256:[0-9a-f]{64}$"},
             "refresh_token": {"type": "string", "pattern": "^hmac-sha256:[0-9a-f]{64}$"}}}},
        {"origin": _STR, "identity": _STR, "at": _TS, "after": {"type": "integer", "minimum": 0},
         "signature": _STR, "key_id": _STR},
    ),
    "identity.changed": _obj(
        {"name": _STR, "change": {"enum": ["added", "disabled", "enabled", "key_changed"]}},
        {"role": _STR, "groups": _STRS, "public_key": _STR, "shared": _BOOL, "reason": _STR,
         "after": {"type": ["integer", "null"], "minimum": 0},
         "compromised_since": _STR, "compromised_from_leaf": {"type": "integer", "minimum": 0},
         "authorization": _obj({"by": _STR, "key_id": _STR, "signature": _STR}, {})},
    ),
    "content.erased": _obj({"blob": _FP, "reason": _STR}, {"rule": _NSTR}),
    "anomaly": _obj({"what": _STR}, {"detail": _ANY}),
    "note": _obj({"text": _STR}, {"about": _ANY, "next_step": _INT, "client_request": _OBJ}),
}

#: The closed set of event kinds.
KINDS: frozenset[str] = frozenset(PAYLOAD_SCHEMAS)

#: Payload fields holding content (arguments, results, messages, state): these
#: are type-tag encoded and moved to blobs above the inline threshold.
CONTENT_FIELDS: dict[str, tuple[str, ...]] = {
    "model.call": ("request", "response"),
    "tool.call": ("arguments",),
    "tool.result": ("result",),
    "policy.decision": ("inputs",),
    "approval.requested": ("arguments",),
    "state.saved": ("state",),
    "anomaly": ("detail",),
}



def content_fields(kind: str, payload: Any) -> tuple[str, ...]:
    """The content fields of one event: :data:`CONTENT_FIELDS` of its kind and, for a ``note`` whose
    payload has a ``client_request`` object (the gateway's record of a request an upstream made of the
    client: docs/gateway.md, "What is recorded"), its ``about``. A ``sampling/createMessage`` resends the
    whole conversation every time: stored as content, each message is stored once (a chain of blobs,
    sealbox.blobs) and the store grows O(turns), not O(turns²) (issue 3 §4). Every other note keeps its
    ``about`` inline, as its readers (approvals, replay, importers) read it. Decided from the payload
    itself, so that the store, ``sealbox verify`` and bundles agree on it."""
    names = CONTENT_FIELDS.get(kind, ())
    if kind == "note" and type(payload) is dict and type(payload.get("client_request")) is dict:
        return names + ("about",)
    return names


_STEP = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)*$"}

#: JSON Schema of the hashed envelope.
ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["v", "run_id", "run_seq", "step", "kind", "ts", "principal", "payload", "prev"],
    "properties": {
        "v": {"const": RECORD_VERSION},
        "run_id": {"type": "string", "minLength": 1, "maxLength": 128},
        "run_seq": {"type": "integer", "minimum": 1},
        "step": _STEP,
        "kind": {"enum": sorted(KINDS)},
        "ts": _TS,
        "principal": {"type": "string", "minLength": 1},
        "payload": {"type": "object"},
        "prev": {"anyOf": [_FP, {"type": "null"}]},
    },
}

_VALIDATORS = {kind: fastjsonschema.compile(schema) for kind, schema in PAYLOAD_SCHEMAS.items()}
_ENVELOPE_VALIDATOR = fastjsonschema.compile(ENVELOPE_SCHEMA)


def _schema_regex(pattern: str) -> re.Pattern[str]:
    """A JSON Schema ``pattern`` (ECMA-262) compiled for Python ``re`` with the same meaning: an
    unescaped ``$`` is the end of the string (``\\Z``; Python's ``$`` also matches before a final
    newline, so ``"1\\n"`` passed a ``^[0-9]+$`` step check), and classes are ASCII (``re.ASCII``:
    Python's ``\\d`` also matches other scripts' digits, e.g. fullwidth ``２``). The schemas
    themselves spell digits ``[0-9]``, so fastjsonschema (which makes the same ``$`` rewrite)
    and any ECMA-262 validator agree with these."""
    from fastjsonschema.draft04 import DOLLAR_FINDER

    return re.compile(DOLLAR_FINDER.sub(r"\\Z", pattern), re.ASCII)


_STEP_RE = _schema_regex(_STEP["pattern"])


# A quick "surely valid" test per kind, from its schema (as strict as the validator or stricter;
# anything it is unsure of goes to the validator): most payloads skip fastjsonschema's generated code.

class _Unsupported(Exception):
    """A schema construct the fast payload checks do not handle (the validator is used)."""


_SIMPLE_TYPES = {
    "string": "type({v}) is str",
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
    "boolean": "type({v}) is bool",
    "null": "{v} is None",
    # exact int excludes bool; fastjsonschema also accepts integral floats (we fall back then)
    "integer": "type({v}) is int",
    "number": "(type({v}) is int or type({v}) is float)",
}


def _fast_expr(schema: Any, v: str, env: dict[str, Any], depth: int) -> str:
    """A Python expression over variable ``v`` that is true only if ``schema`` accepts it.

    It may be false for values the schema accepts (the validator then decides), never
    true for one it rejects. Raises :class:`_Unsupported` for constructs it does not know.
    """
    if not isinstance(schema, dict):
        raise _Unsupported(schema)
    known = {"type", "required", "properties", "minimum", "pattern", "enum", "anyOf", "items", "minLength", "maxLength",
             "minProperties", "additionalProperties"}
    if set(schema) - known:
        raise _Unsupported(schema)
    parts: list[str] = []
    if "anyOf" in schema:
        subs = [_fast_expr(sub, v, env, depth) for sub in schema["anyOf"]]
        parts.append("(" + " or ".join(f"({e})" for e in subs) + ")")
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else list(types)
        if not types or any(t not in _SIMPLE_TYPES for t in types):
            raise _Unsupported(schema)
        parts.append("(" + " or ".join(_SIMPLE_TYPES[t].format(v=v) for t in types) + ")")
    if "enum" in schema:
        values = schema["enum"]
        if not values or any(type(x) is not str for x in values):
            raise _Unsupported(schema)
        name = f"_enum{len(env)}"
        env[name] = frozenset(values)
        parts.append(f"(type({v}) is str and {v} in {name})")
    if "minimum" in schema:
        bound = schema["minimum"]
        if type(bound) not in (int, float):
            raise _Unsupported(schema)
        parts.append(f"((type({v}) is int or type({v}) is float) and {v} >= {bound!r})")
    for key in ("minLength", "maxLength"):
        if key in schema:
            bound = schema[key]
            if type(bound) is not int:
                raise _Unsupported(schema)
            op = ">=" if key == "minLength" else "<="
            parts.append(f"(type({v}) is str and len({v}) {op} {bound})")
    if "pattern" in schema:
        name = f"_re{len(env)}"
        env[name] = _schema_regex(schema["pattern"]).search  # the validator's $ rewrite, and ASCII classes
        parts.append(f"(type({v}) is str and {name}({v}) is not None)")
    if "required" in schema or "properties" in schema:
        required = schema.get("required", [])
        if not all(type(k) is str for k in required):
            raise _Unsupported(schema)
        sub_parts = [f"type({v}) is dict"]
        if required:
            name = f"_req{len(env)}"
            env[name] = frozenset(required)
            sub_parts.append(f"{name} <= {v}.keys()")
        for key, sub in schema.get("properties", {}).items():
            if not isinstance(key, str):
                raise _Unsupported(schema)
            if sub == {}:
                continue
            x = f"_x{depth}"
            get = f"{v}[{key!r}]" if key in required else f"{v}.get({key!r}, _MISSING)"  # required: tested above
            sub_parts.append(f"(({x} := {get}) is _MISSING or {_fast_expr(sub, x, env, depth + 1)})")
        parts.append("(" + " and ".join(sub_parts) + ")")
    if "minProperties" in schema:  # constrains objects only (JSON Schema 2020-12, 6.5.2)
        bound = schema["minProperties"]
        if type(bound) is not int:
            raise _Unsupported(schema)
        parts.append(f"(type({v}) is not dict or len({v}) >= {bound})")
    if "additionalProperties" in schema:  # only `false`: no key beyond `properties` (10.3.2.3)
        if schema["additionalProperties"] is not False:
            raise _Unsupported(schema)
        name = f"_keys{len(env)}"
        env[name] = frozenset(schema.get("properties", {}))
        parts.append(f"(type({v}) is not dict or {v}.keys() <= {name})")
    if "items" in schema:
        y = f"_y{depth}"
        parts.append(f"(type({v}) is not list or all({_fast_expr(schema['items'], y, env, depth + 1)} for {y} in {v}))")
    return " and ".join(parts) if parts else "True"


def fast_payload_check(schema: Any) -> Callable[[Any], bool] | None:
    """A quick test that implies the kind's payload validator passes, or None.

    Used by :func:`validate_payload` before the validator, and by ``verify``'s fast path: it
    answers True only where the JSON Schema validator would pass; False means "not decided
    here" (the validator decides, and names the problem)."""
    env: dict[str, Any] = {"_MISSING": object()}
    try:
        expr = _fast_expr(schema, "p", env, 0)
    except _Unsupported:
        return None
    code = f"def check(p):\n    return bool({expr})\n"
    exec(compile(code, "<sealbox.events fast payload check>", "exec"), env)
    return env["check"]



_FAST_PAYLOAD: dict[str, Callable[[Any], bool] | None] = {
    kind: fast_payload_check(schema) for kind, schema in PAYLOAD_SCHEMAS.items()
}


def validate_payload(kind: str, payload: Any) -> None:
    """Check that ``kind`` is known and ``payload`` matches its schema.

    Args:
        kind: an event kind, e.g. ``"tool.call"``.
        payload: the payload after type-tag encoding (strict JSON values).

    Raises:
        InvalidEventError: unknown kind, or a payload of the wrong shape (the
            message names the kind and the failing field).
    """
    fast = _FAST_PAYLOAD.get(kind)
    if fast is not None and fast(payload):
        return
    validator = _VALIDATORS.get(kind)
    if validator is None:
        raise InvalidEventError(f"unknown event kind {kind!r}")
    try:
        validator(payload)
    except fastjsonschema.JsonSchemaException as exc:
        raise InvalidEventError(f"{kind}: {exc.message}") from exc


def validate_envelope(envelope: Any) -> None:
    """Check a decoded envelope against :data:`ENVELOPE_SCHEMA` and its kind's schema.

    Raises:
        InvalidEventError: the envelope or its payload has the wrong shape.
    """
    if not _envelope_ok(envelope):  # fast path; the schema validator names the problem
        try:
            _ENVELOPE_VALIDATOR(envelope)
        except fastjsonschema.JsonSchemaException as exc:
            raise InvalidEventError(f"envelope: {exc.message}") from exc
    validate_payload(envelope["kind"], envelope["payload"])


_ENVELOPE_KEYS = frozenset(ENVELOPE_SCHEMA["required"])
_TS_RE = _schema_regex(_TS["pattern"])
_FP_RE = _schema_regex(_FP["pattern"])


def _envelope_ok(env: Any) -> bool:
    """The same checks as :data:`ENVELOPE_SCHEMA`, written out (verification's hot path)."""
    if type(env) is not dict or env.keys() != _ENVELOPE_KEYS:
        return False
    run_id, run_seq, step, ts, principal, prev = (env["run_id"], env["run_seq"], env["step"], env["ts"],
                                                  env["principal"], env["prev"])
    return (
        env["v"] == RECORD_VERSION and type(env["v"]) is int
        and type(run_id) is str and 1 <= len(run_id) <= 128
        and type(run_seq) is int and run_seq >= 1
        and type(step) is str and _STEP_RE.match(step) is not None
        and type(env["kind"]) is str and env["kind"] in KINDS
        and type(ts) is str and _TS_RE.match(ts) is not None
        and type(principal) is str and len(principal) >= 1
        and type(env["payload"]) is dict
        and (prev is None or (type(prev) is str and _FP_RE.match(prev) is not None))
    )


def derived_columns(kind: str, payload: dict[str, Any]) -> tuple:
    """Query columns derived from a payload: (server, tool, call_id, effect, ok, tokens, cost,
    rule, reason_code, duration_us).

    The store keeps them beside the hashed bytes for queries and limits; verify
    recomputes them and reports any stored column that disagrees. The last three
    (schema 6) are None where the payload's value is not a ``str`` (``int`` for
    ``duration_us``): a listing then reads the payload itself.
    """
    # (the text test written out, not _str: a function call each, twelve a recorded tool call)
    get = payload.get
    effect = rule = code = duration = None
    ok = tokens = cost = None
    if kind == "policy.decision":
        effect, rule, code = get("effect"), get("rule"), get("reason_code")
        effect = effect if isinstance(effect, str) else None
        rule = rule if isinstance(rule, str) else None
        code = code if isinstance(code, str) else None
    elif kind == "tool.result":
        ok = 1 if get("ok") else 0
        duration = get("duration_us")
        if type(duration) is not int:
            duration = None
    elif kind == "model.call":
        usage = get("usage") or {}
        tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        cost = usage.get("cost") if isinstance(usage.get("cost"), (int, float)) else None
    server, tool, call_id = get("server"), get("tool"), get("call_id")
    return (server if isinstance(server, str) else None, tool if isinstance(tool, str) else None,
            call_id if isinstance(call_id, str) else None, effect, ok, tokens, cost, rule, code, duration)


#: How many of :func:`derived_columns`' values come last and may be stored as NULL (rows written
#: before schema 6, which are never updated); verify accepts NULL or the derived value there.
OPTIONAL_DERIVED = 3


def check_step(step: str) -> None:
    """Raise :class:`InvalidEventError` unless ``step`` looks like ``"4"`` or ``"4.2"``."""
    if not isinstance(step, str) or not _STEP_RE.match(step):
        raise InvalidEventError(f"step must look like '4' or '4.2', got {step!r}")


@dataclass(frozen=True)
class EventDraft:
    """An event before the store has placed it.

    Attributes:
        kind: one of :data:`KINDS`.
        payload: the kind's fields; content fields may hold any Python value.
        run_id: the run; :data:`SYSTEM_RUN_ID` for events outside agent runs.
        principal: who acts (an identity, an agent, a service).
        step: logical position for replay (``"4"``, ``"4.2"``); default: the run_seq.
    """

    kind: str
    payload: Mapping[str, Any]
    run_id: str = SYSTEM_RUN_ID
    principal: str = "sealbox"
    step: str | None = None


@dataclass(frozen=True)
class Event:
    """An event as stored: its envelope fields plus what the store derived.

    Attributes:
        leaf_index: 0-based position in the global log (RFC 9162).
        leaf_hash: ``sha256:<hex>`` of 0x00 ‖ :attr:`raw`.
        raw: the hashed bytes (RFC 8785 canonical JSON of the envelope).
        payload: the stored payload (content may be ``{"$blob": ...}`` references).
    """

    leaf_index: int
    leaf_hash: str
    raw: bytes
    v: int
    run_id: str
    run_seq: int
    step: str
    kind: str
    ts: str
    principal: str
    payload: dict[str, Any] = field(repr=False)
    prev: str | None

    def envelope(self) -> dict[str, Any]:
        """The hashed envelope as a dict."""
        return {
            "v": self.v, "run_id": self.run_id, "run_seq": self.run_seq, "step": self.step,
            "kind": self.kind, "ts": self.ts, "principal": self.principal,
            "payload": self.payload, "prev": self.prev,
        }


def schema_markdown() -> str:
    """The per-kind JSON Schemas as Markdown (the generated part of ``docs/event-format.md``)."""
    import json

    out = ["<!-- generated by sealbox.events.schema_markdown(); a test keeps it in sync -->", ""]
    out += ["### Envelope", "", "```json", json.dumps(ENVELOPE_SCHEMA, indent=2, sort_keys=True), "```", ""]
    for kind in sorted(PAYLOAD_SCHEMAS):
        content = CONTENT_FIELDS.get(kind)
        out.append(f"### `{kind}`")
        out.append("")
        if content:
            out.append("Content fields (type-tag encoded; moved to a blob above the inline limit): "
                       + ", ".join(f"`{c}`" for c in content) + ".")
            out.append("")
        if kind == "note":
            out.append("Content field (type-tag encoded; moved to a blob above the inline limit) of a note with "
                       "`client_request` only: `about`. Every other note keeps `about` inline.")
            out.append("")
        out += ["```json", json.dumps(PAYLOAD_SCHEMAS[kind], indent=2, sort_keys=True), "```", ""]
    out.append("<!-- end of generated schemas -->")
    return "\n".join(out) + "\n"


def client_request_text(payload: dict[str, Any]) -> str:
    """One line for the gateway's record of a request an upstream made of the client during a call
    (a ``note`` with ``client_request``; docs/gateway.md, "Requests an upstream makes of the client"),
    or the gateway's own informational elicitation about a held call (``asked_by: "gateway"``),
    as ``sealbox runs show`` and incident reports show it: from ``client_request`` (never redacted),
    plus an elicitation's message and answer content, or an error's message, where the content mode
    kept them (``about``)."""
    cr = payload.get("client_request") if isinstance(payload.get("client_request"), dict) else {}
    about = payload.get("about") if isinstance(payload.get("about"), dict) else {}
    calls = cr.get("calls") if isinstance(cr.get("calls"), list) else []
    call = (f" during call {cr.get('call_id')}" if cr.get("call_id")
            else f" during one of calls {', '.join(map(str, calls))}" if calls else " (call not known)")
    if cr.get("asked_by") == "gateway":  # the gateway's own elicitation telling the person a call is held
        head = (f"{cr.get('method')} from the gateway (informational: approval {cr.get('approval_id')} pending)"
                f"{call} [{cr.get('id')}]")
    else:
        head = f"{cr.get('method')} from upstream {cr.get('upstream')}{call} [{cr.get('id')}]"
    if cr.get("state") == "asked":
        params = about.get("params") if isinstance(about.get("params"), dict) else {}
        message = params.get("message")
        return f"asked: {head}" + (f" message={_short_json(message)}" if isinstance(message, str) else "")
    waited = cr.get("waited_us")
    line = f"answered {cr.get('outcome')}: {head}"
    if type(waited) is int:
        line += f" after {waited / 1000:.1f} ms" if waited < 1_000_000 else f" after {waited / 1_000_000:.2f} s"
    result = about.get("result") if isinstance(about.get("result"), dict) else {}
    if "content" in result and cr.get("method") == "elicitation/create":
        line += f" content={_short_json(result['content'])}"
    elif isinstance(about.get("error"), dict):
        line += f" error={_short_json(about['error'].get('message'))}"
    return line + " (not a Sealbox approval)"


def _short_json(value: Any, limit: int = 60) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"

