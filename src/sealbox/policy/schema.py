"""The JSON Schema (draft 2020-12) of a policy file, before defaults are filled in.

Every object sets ``additionalProperties: false``: an unknown field is an error
at load, named with its line, never silently ignored.

One keyword is Sealbox's own: ``"finite": true`` refuses NaN and ±Infinity (YAML
``.nan``, ``.inf``, ``-.inf``), which plain JSON Schema lets through ``minimum``
(``nan < 0`` is false). It is on every number field: a NaN bound would never trip
(``x > nan`` is false), so a limit written as ``.nan`` would fail open. Validators
that do not know the keyword ignore it; :mod:`sealbox.policy.loader` enforces it.

Another, ``"maxSeconds": N``, is on every duration: a duration (whole seconds or
``30s``/``15m``/``1h``/``2d``) longer than ``N`` seconds is refused. An approval that
expires in ``3000000d`` passes the pattern but cannot be added to a date (year
10000): every call reaching the rule failed to record.
"""

from __future__ import annotations

from typing import Any

__all__ = ["POLICY_SCHEMA", "DURATION_PATTERN", "RULE_ID_PATTERN", "MAX_APPROVAL_EXPIRES_S"]

DURATION_PATTERN = r"^0*[1-9][0-9]*(s|m|h|d)$"  # "0s" is refused like 0: a positive duration
#: The longest ``approval.expires``: 366 days (``366d``, ``31622400``).
MAX_APPROVAL_EXPIRES_S = 366 * 86400
RULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"

_STR = {"type": "string", "minLength": 1}
_GLOBS = {"oneOf": [_STR, {"type": "array", "items": _STR, "minItems": 1}]}
_SCALAR = {"type": ["string", "integer", "number", "boolean"], "finite": True}
_VALUES = {"oneOf": [_SCALAR, {"type": "array", "items": _SCALAR, "minItems": 1}]}
_ATTRS = {"type": "object", "additionalProperties": _VALUES}
_BOUND_INT = {"type": ["integer", "null"], "minimum": 0}
_BOUND_NUM = {"type": ["number", "null"], "finite": True, "minimum": 0}  # 0: nothing allowed, like the integers
_DURATION = {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": DURATION_PATTERN}],
             "maxSeconds": MAX_APPROVAL_EXPIRES_S}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


_MATCH = _obj(
    {
        "server": _GLOBS,
        "tool": _GLOBS,
        "principal": _obj({"id": _GLOBS, "role": _GLOBS, "groups": {"type": "array", "items": _STR, "minItems": 1},
                           "attributes": _ATTRS}),
        "agent": _obj({"name": _GLOBS, "attributes": _ATTRS}),
        "labels": _ATTRS,
    }
)  # fmt: skip

_APPROVAL = _obj(
    {
        "groups": {"type": "array", "items": _STR},
        "identities": {"type": "array", "items": _STR},
        "quorum": {"type": "integer", "minimum": 1},
        "expires": _DURATION,
    }
)

_RULE = _obj(
    {
        "id": {"type": "string", "pattern": RULE_ID_PATTERN},
        "description": {"type": "string"},
        "match": _MATCH,
        "when": {"type": ["string", "null"]},
        "expensive": {"type": "boolean"},
        "effect": {"enum": ["allow", "deny", "require_approval"]},
        "approval": {**_APPROVAL, "type": ["object", "null"]},
        "require_grant": {"type": "boolean"},
    },
    required=("id", "effect"),
)

_LIMITS = _obj(
    {
        "max_tool_calls_per_run": _BOUND_INT,
        "calls_per_minute": _obj({"per_agent": _BOUND_INT, "per_tool": _BOUND_INT}),
        "tokens": _obj({"per_run": _BOUND_INT, "per_day": _BOUND_INT}),
        "cost": _obj({"per_run": _BOUND_NUM, "per_day": _BOUND_NUM, "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}),
        "max_run_seconds": _BOUND_NUM,
    }
)

_PRICE_NUM = {"type": "number", "finite": True, "minimum": 0}
_PRICE = _obj({"input": _PRICE_NUM, "output": _PRICE_NUM}, ("input", "output"))

POLICY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **_obj(
        {
            "version": {"const": 1},
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": "string"},
            "default": {"const": "deny"},
            "rules": {"type": "array", "items": _RULE},
            "limits": _LIMITS,
            "prices": {"type": "object", "additionalProperties": _PRICE},
            "evaluation": _obj(
                {
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 60000},
                    "max_input_bytes": {"type": "integer", "minimum": 1, "maximum": 16 * 1024 * 1024},
                }
            ),
        },
        required=("version", "rules"),
    ),
}
