"""The quick per-kind payload checks (``sealbox.events.fast_payload_check``) against the validator.

``validate_payload`` and ``verify``'s fast path skip the JSON Schema validator where the quick
check answers True, so True must imply the validator passes, for every kind; and it should answer
True for the payloads Sealbox itself writes (else it saves nothing).
"""

from __future__ import annotations

from typing import Any

import fastjsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbox import events
from sealbox.events import PAYLOAD_SCHEMAS, validate_payload
from sealbox.errors import InvalidEventError

_VALIDATORS = {kind: fastjsonschema.compile(schema) for kind, schema in PAYLOAD_SCHEMAS.items()}

_CANDIDATES = ["sha256:" + "ab" * 32, "sha256:" + "AB" * 32, "sha256:" + "a" * 63, "sha256:" + "0" * 64 + "\n",
               "allow", "deny", "require_approval", "ok", "error", "cancelled", "approve", "", "x", "1", "1.2",
               0, 1, 5, -1, 2**40, 1.5, -0.5, 0.0, 1.0, True, False, None, {}, [], ["a"], [1], {"a": 1},
               {"$blob": "sha256:" + "cd" * 32}, "2026-12-02T10:00:00.000000Z", "agent:x", "run-1"]
_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=4),
                     lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=3), c, max_size=2),
                     max_leaves=5)
_value = st.sampled_from(_CANDIDATES) | _json


def _names(schema: dict) -> list[str]:
    return sorted(set(schema.get("properties", {})) | set(schema.get("required", [])))


@st.composite
def _payloads(draw: Any, kind: str) -> Any:
    schema = PAYLOAD_SCHEMAS[kind]
    names = _names(schema)
    out: dict[str, Any] = {}
    for name in names:
        if draw(st.integers(0, 9)) < 8:  # mostly present
            sub = schema.get("properties", {}).get(name, {})
            enum = sub.get("enum")
            out[name] = draw(st.sampled_from(enum) if enum and draw(st.booleans()) else _value)
    if draw(st.integers(0, 4)) == 0:
        out[draw(st.text(max_size=5))] = draw(_value)
    return out if draw(st.integers(0, 20)) else draw(_json)


@pytest.mark.parametrize("kind", sorted(PAYLOAD_SCHEMAS))
def test_every_kind_has_a_quick_check(kind: str) -> None:
    assert events._FAST_PAYLOAD[kind] is not None, f"{kind}: its schema uses a construct the quick check lacks"


def _from_schema(schema: dict, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values meant to satisfy ``schema`` for the constructs Sealbox's payload schemas use (type,
    enum, anyOf, properties, required, items, minimum, pattern, minLength, maxLength); other
    keywords are ignored, so a value may still fail (the test only relies on the implication)."""
    if "anyOf" in schema:
        return st.one_of([_from_schema(sub, depth + 1) for sub in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or ["string", "integer", "object", "null"])
    options = []
    for t in types:
        if t == "string":
            if "pattern" in schema:
                options.append(st.from_regex(schema["pattern"], fullmatch=True))
            else:
                options.append(st.text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 12)))
        elif t in ("integer", "number"):
            low = schema.get("minimum")
            ints = st.integers(min_value=int(low) if low is not None else -5, max_value=10**6)
            options.append(ints if t == "integer" else ints | st.floats(min_value=low or -5.0, max_value=1e6))
        elif t == "boolean":
            options.append(st.booleans())
        elif t == "null":
            options.append(st.none())
        elif t == "array":
            item = _from_schema(schema.get("items", {}), depth + 1) if depth < 4 else st.none()
            options.append(st.lists(item, max_size=3))
        elif t == "object":
            props = schema.get("properties", {})
            required = set(schema.get("required", []))
            if depth >= 4:
                options.append(st.just({}))
                continue
            fixed = {k: _from_schema(props.get(k, {}), depth + 1) for k in required}
            optional = {k: _from_schema(v, depth + 1) for k, v in props.items() if k not in required}
            options.append(st.fixed_dictionaries(fixed, optional=optional))
    return st.one_of(options)


@st.composite
def _near_valid(draw: Any, kind: str) -> Any:
    """A payload generated from the kind's schema, often with one field broken or dropped."""
    payload = draw(_from_schema(PAYLOAD_SCHEMAS[kind]))
    if type(payload) is dict and payload and draw(st.booleans()):
        name = draw(st.sampled_from(sorted(payload)))
        if draw(st.booleans()):
            del payload[name]
        else:
            payload[name] = draw(_value)
    return payload


@pytest.mark.parametrize("kind", sorted(PAYLOAD_SCHEMAS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_quick_true_implies_the_validator_passes(kind: str, data: Any) -> None:
    payload = data.draw(_near_valid(kind) if data.draw(st.integers(0, 3)) else _payloads(kind))
    if events._FAST_PAYLOAD[kind](payload):
        _VALIDATORS[kind](payload)  # raises JsonSchemaException if the quick check was wrong


def test_validate_payload_still_names_the_problem_where_the_quick_check_declines() -> None:
    with pytest.raises(InvalidEventError, match=r"tool\.call: data must contain \['arguments'"):
        validate_payload("tool.call", {"call_id": "c", "server": "s", "tool": "t", "exposed": "e", "grant": "g"})
    with pytest.raises(InvalidEventError, match="policy_fingerprint must match pattern"):
        validate_payload("policy.decision", {"call_id": "c", "effect": "allow", "eval_us": 1, "policy_fingerprint": "x",
                                             "reason": "r", "reason_code": "c", "rule": None})
    with pytest.raises(InvalidEventError, match="unknown event kind 'tool.nope'"):
        validate_payload("tool.nope", {})


def test_the_payloads_sealbox_writes_take_the_quick_path(tmp_path) -> None:
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.store import init_store

    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "q", {"sql": "select 1", "n": 1.5}, lambda sql, n: {"rows": [[1]]})
        run.model_call({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                       {"choices": [{"message": {"role": "assistant", "content": "yo"}}]},
                       usage={"input_tokens": 3, "output_tokens": 1}, latency=0.01)
        run.save_state({"step": 2})
    kinds = []
    for event in store.read_run(run.run_id):
        kinds.append(event.kind)
        assert events._FAST_PAYLOAD[event.kind](event.payload), (event.kind, event.payload)
    assert {"run.started", "tool.call", "policy.decision", "tool.result", "model.call", "state.saved",
            "run.ended"} <= set(kinds)
    store.close()
