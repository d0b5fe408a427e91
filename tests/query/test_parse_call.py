"""The listing's parse of SQLite's JSON text gives json.loads's values exactly (orjson where it can)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sealbox.store.sqlite_queries import _parse_call


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


_values = st.recursive(  # integers as Sealbox writes them: within ±(2^53 - 1)
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
    max_leaves=15,
)


@settings(max_examples=800, deadline=None)
@given(st.lists(_values, min_size=3, max_size=3))
def test_parse_call_equals_json_loads(value: list) -> None:
    text = json.dumps(value, ensure_ascii=False)
    assert _same(_parse_call(text), json.loads(text))


def test_where_orjson_refuses_the_text_json_decides() -> None:
    for text in ('["\\ud800", "b", null]', '["a", "b", 1e400]', '["a", "b", {"k": 18446744073709551615}]'):
        assert _same(_parse_call(text), json.loads(text)), text
