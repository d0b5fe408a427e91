"""The gateway's quick "surely valid" check of tool arguments against jsonschema itself.

``quick_schema_check`` may only say True where jsonschema (every draft the gateway accepts)
says valid; where it says False, jsonschema decides. So: quick True implies jsonschema valid,
on hand-picked edge cases and on generated schemas and arguments.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbox.gateway.server import quick_schema_check

DRAFTS = [jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator,
          jsonschema.Draft201909Validator, jsonschema.Draft202012Validator]

ECHO = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "description": "first"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}
LOOSE = {"type": "object", "title": "t", "properties": {"n": {"type": "number"}, "any": {}, "flag": {"type": "boolean"},
                                                         "none": {"type": "null"}, "o": {"type": "object"},
                                                         "l": {"type": "array", "default": []}}}


@pytest.mark.parametrize("schema, arguments, quick", [
    (ECHO, {"text": "hi"}, True),
    (ECHO, {"text": "hi", "other": 1}, True),
    (ECHO, {}, False),  # required missing
    (ECHO, {"text": 3}, False),
    (ADD, {"a": 1, "b": 2}, True),
    (ADD, {"a": 1, "b": 2, "c": 3}, False),  # additionalProperties: false
    (ADD, {"a": True, "b": 2}, False),  # a bool is not an integer
    (ADD, {"a": 1.0, "b": 2}, False),  # 1.0: an integer from draft 6 on, not in draft 4 -> jsonschema decides
    (LOOSE, {"n": 1, "any": object, "flag": False, "none": None, "o": {}, "l": []}, True),
    (LOOSE, {"n": 1.5}, True),
    (LOOSE, {"n": True}, False),
    (LOOSE, {"l": ()}, False),
])
def test_quick_check_cases(schema: dict, arguments: dict, quick: bool) -> None:
    check = quick_schema_check(schema)
    assert check is not None
    assert check(arguments) is quick
    if quick:
        for draft in DRAFTS:
            if "any" not in arguments:  # (a Python object is no JSON value: only the quick check sees it)
                assert draft(schema).is_valid(arguments), draft


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 2}}},  # a constraint keyword
    {"type": "object", "properties": {"s": {"type": ["string", "null"]}}},  # a list of types
    {"type": "object", "properties": {"s": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
    {"type": "object", "patternProperties": {"^a": {}}},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "array"},
    {"properties": {}},  # no type: object
    {"type": "object", "required": "x"},
    {"type": "object", "properties": {"s": {"type": "text"}}},
    [],
])
def test_schemas_outside_the_quick_form_get_no_quick_check(schema: Any) -> None:
    assert quick_schema_check(schema) is None


_types = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array", None])
_names = st.sampled_from(["a", "b", "c", "d"])
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
                     lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=2), c, max_size=2),
                     max_leaves=4)


@st.composite
def _schemas(draw: Any) -> dict:
    props = draw(st.dictionaries(_names, _types, max_size=4))
    schema: dict[str, Any] = {"type": "object",
                              "properties": {k: ({"type": t} if t else {"description": "x"}) for k, t in props.items()}}
    if draw(st.booleans()):
        schema["required"] = draw(st.lists(_names, max_size=3, unique=True))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    return schema


@settings(max_examples=800, deadline=None)
@given(_schemas(), st.dictionaries(_names, _json, max_size=4))
def test_quick_true_implies_valid_in_every_draft(schema: dict, arguments: dict) -> None:
    check = quick_schema_check(schema)
    assert check is not None
    if check(arguments):
        for draft in DRAFTS:
            assert draft(schema).is_valid(arguments), (draft, schema, arguments)
    elif all(draft(schema).is_valid(arguments) for draft in DRAFTS):
        # where every draft agrees it is valid, the quick check may only have declined for a type it leaves
        # to jsonschema (a whole float for "integer")
        assert any(type(v) is float and schema["properties"].get(k, {}).get("type") == "integer"
                   for k, v in arguments.items()), (schema, arguments)
