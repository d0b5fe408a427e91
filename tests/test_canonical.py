"""RFC 8785 canonical bytes, the type-tagged encoding, and hashing (sealbox.canonical)."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import fractions
import hashlib
import ipaddress
import json
import math
import pathlib
import uuid
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sealbox import canonical
from sealbox.canonical import (
    MAX_DEPTH,
    Tagged,
    canonical_bytes,
    decode,
    dumps,
    encode,
    fingerprint,
    is_lossy,
    sha256_hex,
)
from sealbox.errors import CanonicalizationError

JCS = pathlib.Path(__file__).parent / "data" / "jcs"
JCS_NAMES = sorted(p.stem for p in (JCS / "input").glob("*.json"))
HERE = __name__
INT_MAX = 2**53 - 1


def test_public_api_is_pinned():
    assert sorted(canonical.__all__) == sorted(
        ["DECODE_MAX_DEPTH", "MAX_DEPTH", "Tagged", "canonical_bytes", "canonical_bytes_encoded", "decode", "dumps", "encode", "fingerprint", "is_lossy",
         "pre_encoded", "sha256_hex"]
    )
    assert MAX_DEPTH == 128


# --------------------------------------------------------------------------- RFC 8785 vectors


def test_all_five_jcs_vectors_are_present():
    assert JCS_NAMES == ["arrays", "french", "structures", "unicode", "values"]


@pytest.mark.parametrize("name", JCS_NAMES)
def test_jcs_vector_matches_output_and_outhex(name):
    value = json.loads((JCS / "input" / f"{name}.json").read_text(encoding="utf-8"))
    expected = (JCS / "output" / f"{name}.json").read_bytes()
    assert expected == bytes.fromhex((JCS / "outhex" / f"{name}.txt").read_text())
    assert canonical_bytes(value) == expected


# --------------------------------------------------------------------------- numbers and strings


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (1e16, b"10000000000000000"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (1e-7, b"1e-7"),
        (0.000001, b"0.000001"),
        (-0.0, b"0"),
        (0.0, b"0"),
        (1.0, b"1"),
        (-1.5, b"-1.5"),
        (0.1, b"0.1"),
        (123456789012345680000.0, b"123456789012345680000"),
        (1.5e300, b"1.5e+300"),
        (-2.5e-8, b"-2.5e-8"),
        (5e-324, b"5e-324"),
        (1.7976931348623157e308, b"1.7976931348623157e+308"),
        (float(2**60), b"1152921504606847000"),
        (333333333.33333329, b"333333333.3333333"),
        (INT_MAX, b"9007199254740991"),
        (-INT_MAX, b"-9007199254740991"),
    ],
)
def test_numbers_are_written_as_ecmascript_does(number, expected):
    assert canonical_bytes(number) == expected


@pytest.mark.parametrize("bad", [2**53, -(2**53), 10**30, math.nan, math.inf, -math.inf])
def test_numbers_outside_i_json_raise(bad):
    with pytest.raises(CanonicalizationError):
        canonical_bytes(bad)


def test_strings_escape_only_what_jcs_escapes():
    text = "\x00\x1f\b\t\n\f\r\"\\/\x7f é\u2028\U0001f600"
    expected = b'"\\u0000\\u001f\\b\\t\\n\\f\\r\\"\\\\/\x7f \xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80"'
    assert canonical_bytes(text) == expected
    assert canonical_bytes(text) == rfc8785.dumps(text)


def test_keys_sort_by_utf16_code_units_not_code_points():
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3}
    # U+1F600 is D83D DE00 in UTF-16, which sorts before E000 (Python's order is the reverse).
    assert canonical_bytes(value) == b'{"a":3,"\xf0\x9f\x98\x80":2,"\xee\x80\x80":1}'


@pytest.mark.parametrize("bad", ["a\ud800b", {"\udc00": 1}, ["\ud83d\ude00"]])
def test_lone_surrogates_raise(bad):
    with pytest.raises(CanonicalizationError):
        canonical_bytes(bad)


@pytest.mark.parametrize("bad", [{1: "a"}, {("a",): 1}, {None: 1}, {"a": 1, 2: "b"}])
def test_non_string_keys_raise(bad):
    with pytest.raises(CanonicalizationError):
        canonical_bytes(bad)


@pytest.mark.parametrize("bad", [b"x", {1, 2}, object(), Decimal("1"), dt.date(2026, 1, 1), 1j])
def test_other_types_raise(bad):
    with pytest.raises(CanonicalizationError):
        canonical_bytes(bad)


def test_containers_and_literals():
    value = {"b": [True, False, None], "a": (), "c": {}, "d": [[]]}
    assert canonical_bytes(value) == b'{"a":[],"b":[true,false,null],"c":{},"d":[[]]}'


def test_subclasses_are_written_as_their_base_value():
    class Level(enum.IntEnum):
        HIGH = 3

    value = collections.OrderedDict([("z", Level.HIGH), ("a", (1, 2))])
    assert canonical_bytes(value) == b'{"a":[1,2],"z":3}'


def nested_lists(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_up_to_max_depth_is_accepted_and_one_more_raises():
    assert canonical_bytes(nested_lists(MAX_DEPTH)) == b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    with pytest.raises(CanonicalizationError, match="nested deeper than 128"):
        canonical_bytes(nested_lists(MAX_DEPTH + 1))


def test_cycles_raise_canonicalization_error():
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(CanonicalizationError, match="cycle"):
        canonical_bytes(loop)
    mapping: dict = {}
    mapping["self"] = mapping
    with pytest.raises(CanonicalizationError, match="cycle"):
        canonical_bytes(mapping)


def test_a_hostile_subclass_still_raises_only_canonicalization_error():
    class Exploding(dict):
        def __iter__(self):
            raise RuntimeError("boom")

    with pytest.raises(CanonicalizationError):
        canonical_bytes(Exploding(a=1))


# --------------------------------------------------------------------------- equal to rfc8785

finite_floats = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70).map(float)
json_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
json_scalars = st.none() | st.booleans() | st.integers(-INT_MAX, INT_MAX) | finite_floats | json_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(json_text, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=2000, deadline=None)
@given(finite_floats)
def test_floats_match_rfc8785(number):
    assert canonical_bytes(number) == rfc8785.dumps(number)


@settings(max_examples=500, deadline=None)
@given(json_values)
def test_json_values_match_rfc8785(value):
    assert canonical_bytes(value) == rfc8785.dumps(value)


# canonical_bytes_encoded: orjson, then the C json writer, where their text provably equals JCS, else the exact writer.
tricky_text = st.text(st.sampled_from(list("ab\"\\\n\x00\x1f\x7f.e9-+:,[]{}é\u2028\ud7ff\ue000\uffff") + ["\U0001f600", "\U00010000"]),
                      max_size=8) | st.sampled_from(["one-time", "e-mail", "x e+ y", "06:43:00.0Z", ":1.0,"])
tricky_ints = st.sampled_from([0, -1, 10**14, 10**15 - 1, 10**15, -(10**15), 2**53 - 1, -(2**53 - 1)]) | st.integers(-INT_MAX, INT_MAX)
tricky_floats = finite_floats | st.sampled_from([0.5, -0.5, 1e16, 1e21, 1e-7, -1e-7, 5e-324, 1.5e300, 123.456, -0.0, 1.0])
tricky_values = st.recursive(
    st.none() | st.booleans() | tricky_ints | tricky_floats | tricky_text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(tricky_text, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=1500, deadline=None)
@given(json_values | tricky_values)
def test_canonical_bytes_encoded_matches_rfc8785(value):
    assert canonical.canonical_bytes_encoded(value) == rfc8785.dumps(value) == canonical_bytes(value)


@settings(max_examples=500, deadline=None)
@given(json_values | tricky_values)
def test_canonical_bytes_encoded_of_encoded_values_matches_rfc8785(value):
    encoded = encode(value)
    assert canonical.canonical_bytes_encoded(encoded) == rfc8785.dumps(encoded)
    # encode() leaves no NaN nor infinity (they become $float tags): finite=True is exact on its output
    assert canonical.canonical_bytes_encoded(encoded, finite=True) == rfc8785.dumps(encoded)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.none() | st.floats(allow_nan=False, allow_infinity=False)
                       | st.integers(-(2**53 - 1), 2**53 - 1) | st.text(max_size=5), max_size=6))
def test_finite_keeps_orjson_bytes_beside_nulls_and_floats(value):
    """With a null beside floats, finite=True takes orjson's bytes (then its number checks), not json's."""
    value = {**value, "approval": None, "x": 0.5}
    assert canonical.canonical_bytes_encoded(value, finite=True) == rfc8785.dumps(value)


def test_finite_takes_orjson_where_nulls_would_send_the_value_to_json(monkeypatch):
    value = {"approval": None, "elapsed_s": 0.040243, "n": 3}
    calls = []
    real = canonical._fast_dumps
    monkeypatch.setattr(canonical, "_fast_dumps", lambda v: calls.append(v) or real(v))
    assert canonical.canonical_bytes_encoded(value, finite=True) == rfc8785.dumps(value)
    assert calls == []
    assert canonical.canonical_bytes_encoded(value) == rfc8785.dumps(value)
    assert calls == [value]  # without the promise, a null may be orjson's NaN: the json writer decides


def test_canonical_bytes_encoded_takes_the_c_writer_only_where_it_is_exact(monkeypatch):
    """Takes orjson's or json's text only where it is JCS; NaN (orjson: ``null``) still raises."""
    exact = []
    real = canonical.canonical_bytes
    monkeypatch.setattr(canonical, "canonical_bytes", lambda v: exact.append(v) or real(v))
    fast = {"b": [1, "x\ny", None, True, {"é": "\u2028"}], "a": -(10**15 - 1), "ts": "2026-12-01T06:43:00.123456Z", "v": "1.5", "n": [10**15 - 1, 0.0 == 0, 0.5, -123.456, 0.0001, 1e15 + 0.5, 0.000334]}
    assert canonical.canonical_bytes_encoded(fast) == rfc8785.dumps(fast) and exact == []
    for slow in ({"v": 1.0}, {"note": "one-time", "amount": 100.0}, ["e+", [2.0]], [1e16], [-2.5e-07], {"v": ":1.0,"}, -3e-7, [[-0.0]], {"a": [1, 1e21]}, {"\ue000": 1, "\U0001f600": 2}, [[[]]] * 64):
        exact.clear()
        assert canonical.canonical_bytes_encoded(slow) == rfc8785.dumps(slow) and exact == [slow]


@settings(max_examples=3000, deadline=None)
@given(tricky_floats | st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False) | st.floats(min_value=1e14, max_value=1e22))
def test_canonical_bytes_encoded_floats_match_rfc8785(number):
    """orjson's positional digits are ECMAScript's; its ``1.0``, ``-0.0`` and exponents go to the exact writer."""
    for value in ([number], {"k": number, "s": "x"}, [[number, 1, "a"], {"n": -number}]):
        assert canonical.canonical_bytes_encoded(value) == rfc8785.dumps(value)


def test_canonical_bytes_encoded_is_orjson_where_exact():
    """The common case, no float and no null: orjson's bytes, unchanged; orjson's native types
    (subclasses, dataclasses, datetimes) are refused by it and decided by the next writers."""
    import orjson

    value = {"b": [1, "x\ny\u2028", True], "a": {"é": "\x1f"}, "big": 2**53 - 1}
    assert canonical.canonical_bytes_encoded(value) == orjson.dumps(value, option=orjson.OPT_SORT_KEYS) == rfc8785.dumps(value)
    with pytest.raises(CanonicalizationError):
        canonical.canonical_bytes_encoded({"when": dt.datetime(2026, 1, 1)})


@pytest.mark.parametrize("bad, words", [
    (float("nan"), "not a JSON number"), (2**53, "integer outside"), ("\ud800", "lone surrogate"),
    ({"k": ["\udfff"]}, "lone surrogate"), ([{"a": [1]}] * 1 + [1e400 - 1e400], "not a JSON number"),
])
def test_canonical_bytes_encoded_raises_as_canonical_bytes_does(bad, words):
    with pytest.raises(CanonicalizationError, match=words):
        canonical.canonical_bytes_encoded(bad)


def test_canonical_bytes_encoded_refuses_cycles_and_depth_as_canonical_bytes_does():
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(CanonicalizationError, match="cycle"):
        canonical.canonical_bytes_encoded(cyclic)
    deep: list = []
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with pytest.raises(CanonicalizationError, match="nested deeper"):
        canonical.canonical_bytes_encoded(deep)
    assert canonical.canonical_bytes_encoded(deep[0]) == b"[" * MAX_DEPTH + b"]" * MAX_DEPTH


@settings(max_examples=500, deadline=None)
@given(json_values)
def test_json_values_survive_encode_bytes_decode(value):
    encoded = encode(value)
    restored = decode(json.loads(canonical_bytes(encoded)))
    # Whole-number floats come back as ints, which Python compares equal (1.0 == 1, -0.0 == 0);
    # beyond ±(2**53 - 1) they come back as floats again.
    assert restored == value
    assert canonical_bytes(encode(restored)) == canonical_bytes(encoded)
    assert not is_lossy(encoded)


def test_large_whole_number_float_decodes_as_the_same_float():
    raw = dumps(3.857476476504949e16)
    assert raw == b"38574764765049490"
    restored = decode(json.loads(raw))
    assert restored == 3.857476476504949e16 and type(restored) is float
    assert dumps(restored) == raw


# --------------------------------------------------------------------------- encode / decode tags


class Color(enum.Enum):
    RED = "red"
    BLUE = (0, 0, 255)


class Perm(enum.Flag):
    READ = 1
    WRITE = 2


@dataclasses.dataclass
class Point:
    x: int
    y: float
    label: bytes = b""


class Order(BaseModel):
    id: uuid.UUID
    items: list[str]
    at: dt.datetime


UTC = dt.timezone.utc
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
AN_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")

EXACT_ENCODINGS = [
    (b"\xff\x00", {"$bytes": "/wA="}),
    (bytearray(b"abc"), {"$bytes": "YWJj"}),
    (memoryview(b"ab"), {"$bytes": "YWI="}),
    (dt.datetime(2026, 11, 29, 16, 52, 0, 123456, tzinfo=UTC), {"$datetime": "2026-11-29T16:52:00.123456+00:00"}),
    (dt.datetime(2026, 11, 29, 16, 52, tzinfo=IST), {"$datetime": "2026-11-29T16:52:00.000000+05:30"}),
    (dt.datetime(2026, 11, 29, 16, 52, 0, 123456), {"$datetime_naive": "2026-11-29T16:52:00.123456"}),
    (dt.date(2026, 11, 29), {"$date": "2026-11-29"}),
    (dt.time(16, 52, 0, 5), {"$time": "16:52:00.000005"}),
    (dt.timedelta(days=1, microseconds=7), {"$timedelta": 86_400_000_007}),
    (dt.timedelta(days=999_999_999), {"$timedelta": {"$bigint": "86399999913600000000"}}),
    (Decimal("1.10"), {"$decimal": "1.10"}),
    (Decimal("-0"), {"$decimal": "-0"}),
    (AN_ID, {"$uuid": "12345678-1234-5678-1234-567812345678"}),
    (Color.RED, {"$enum": {"type": f"{HERE}.Color", "name": "RED", "value": "red"}}),
    (Color.BLUE, {"$enum": {"type": f"{HERE}.Color", "name": "BLUE", "value": [0, 0, 255]}}),
    ({3, 1, "a", 2}, {"$set": ["a", 1, 2, 3]}),  # sorted by canonical bytes: '"a"' < '1'
    (frozenset({b"x"}), {"$set": [{"$bytes": "eA=="}]}),
    (math.nan, {"$float": "NaN"}),
    (math.inf, {"$float": "Infinity"}),
    (-math.inf, {"$float": "-Infinity"}),
    (2**53, {"$bigint": "9007199254740992"}),
    (-(10**30), {"$bigint": "-1000000000000000000000000000000"}),
    ("a\ud800", {"$badstr": "Ye2ggA=="}),
    ({1: "one", "two": 2}, {"$map": [[1, "one"], ["two", 2]]}),
    ({"\udc00": 1}, {"$map": [[{"$badstr": "7bCA"}, 1]]}),
    ({"$bytes": "x", "n": 1}, {"$esc": {"$bytes": "x", "n": 1}}),
    ({"$blob": "sha256:" + "0" * 64}, {"$esc": {"$blob": "sha256:" + "0" * 64}}),
    ((1, (2, "x")), [1, [2, "x"]]),
    (1.0, 1.0),
    ({"plain": [None, True, 1.5]}, {"plain": [None, True, 1.5]}),
]


@pytest.mark.parametrize(("value", "expected"), EXACT_ENCODINGS, ids=[repr(v)[:40] for v, _ in EXACT_ENCODINGS])
def test_encode_gives_the_documented_tag(value, expected):
    encoded = encode(value)
    assert encoded == expected
    assert canonical_bytes(encoded)  # always strict JSON


ROUND_TRIPS = [
    b"\xff\x00",
    dt.datetime(2026, 11, 29, 16, 52, 0, 123456, tzinfo=UTC),
    dt.datetime(2026, 11, 29, 16, 52, tzinfo=IST),
    dt.datetime(1, 1, 1),
    dt.date(2026, 11, 29),
    dt.time(16, 52, 0, 5),
    dt.time(1, 2, tzinfo=IST),
    dt.timedelta(days=-3, seconds=5),
    dt.timedelta(days=999_999_999),
    Decimal("1.10"),
    Decimal("-1E+5"),
    AN_ID,
    Color.RED,
    Color.BLUE,
    Perm.READ | Perm.WRITE,
    {1, "a", (2, 3)},
    math.inf,
    2**64,
    "a\ud800\udfff",
    {1: "one", (1, 2): [b"x"], None: {"$esc": 2}},
    {"$bytes": "x"},
    {"$esc": {"$lossy": 1}},
    {"k": [{"$blob": "not-a-blob"}]},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=[repr(v)[:40] for v in ROUND_TRIPS])
def test_lossless_tags_round_trip_through_canonical_bytes(value):
    restored = decode(json.loads(canonical_bytes(encode(value))))
    assert restored == value
    assert type(restored) is type(value)


def test_frozenset_bytearray_and_tuple_decode_as_set_bytes_and_list():
    assert decode(encode(frozenset({1}))) == {1} and type(decode(encode(frozenset({1})))) is set
    assert decode(encode(bytearray(b"ab"))) == b"ab"
    assert decode(encode((1, (2,)))) == [1, [2]]


def test_nan_and_nan_decimal_round_trip():
    assert math.isnan(decode(encode(math.nan)))
    assert encode(Decimal("NaN")) == {"$decimal": "NaN"}
    assert decode(encode(Decimal("sNaN"))).is_snan()


def test_user_dict_with_a_dollar_key_is_escaped_and_comes_back_as_a_dict():
    assert encode({"$bytes": "x"}) == {"$esc": {"$bytes": "x"}}
    assert decode(encode({"$bytes": "x"})) == {"$bytes": "x"}
    assert decode({"$bytes": "eA=="}) == b"x"  # the tag itself is not a user dict


def test_whole_number_float_is_written_as_an_integer_and_decodes_as_int():
    raw = dumps({"n": 2.0, "z": -0.0})
    assert raw == b'{"n":2,"z":0}'
    restored = decode(json.loads(raw))
    assert restored == {"n": 2, "z": 0} and type(restored["n"]) is int


def test_dataclass_encodes_its_fields_and_decodes_as_tagged():
    encoded = encode(Point(1, 2.5, b"\x01"))
    assert encoded == {"$dataclass": {"type": f"{HERE}.Point", "fields": {"x": 1, "y": 2.5, "label": {"$bytes": "AQ=="}}}}
    assert decode(encoded) == Tagged("$dataclass", encoded["$dataclass"])


def test_pydantic_model_encodes_model_dump_and_decodes_as_tagged():
    order = Order(id=AN_ID, items=["a"], at=dt.datetime(2026, 1, 2, tzinfo=UTC))
    encoded = encode(order)
    assert encoded == {
        "$pydantic": {
            "type": f"{HERE}.Order",
            "fields": {
                "id": {"$uuid": "12345678-1234-5678-1234-567812345678"},
                "items": ["a"],
                "at": {"$datetime": "2026-01-02T00:00:00.000000+00:00"},
            },
        }
    }
    assert decode(encoded) == Tagged("$pydantic", encoded["$pydantic"])


def test_enum_whose_class_is_not_importable_decodes_as_tagged():
    payload = {"type": "no_such_module.Color", "name": "RED", "value": "red"}
    assert decode({"$enum": payload}) == Tagged("$enum", payload)


def test_enum_decoding_does_not_import_modules():
    payload = {"type": "antigravity.Thing", "name": "X", "value": 1}
    assert decode({"$enum": payload}) == Tagged("$enum", payload)
    import sys

    assert "antigravity" not in sys.modules


def test_blob_reference_decodes_as_tagged_and_encodes_back_unchanged():
    ref = {"$blob": "sha256:" + "ab" * 32}
    decoded = decode(ref)
    assert decoded == Tagged("$blob", "sha256:" + "ab" * 32)
    assert encode({"args": decoded}) == {"args": ref}


def test_unknown_and_malformed_tags_decode_as_tagged():
    assert decode({"$future": [1, {"$bytes": "AA=="}]}) == Tagged("$future", [1, {"$bytes": "AA=="}])
    assert decode({"$bytes": "not base64!"}) == Tagged("$bytes", "not base64!")
    assert decode({"$bigint": "12a"}) == Tagged("$bigint", "12a")
    assert decode({"$timedelta": "1"}) == Tagged("$timedelta", "1")
    assert decode({"$set": [{"$dataclass": {}}]}) == Tagged("$set", [{"$dataclass": {}}])  # unhashable


def test_encode_of_decode_is_identity_for_any_tagged_payload():
    encoded = [encode(Point(1, 2.0)), {"$lossy": {"reason": "cycle", "type": "builtins.list"}}, {"$new": {"a": [1]}}]
    assert encode(decode(encoded)) == encoded


# --------------------------------------------------------------------------- lossy cases


def test_list_containing_itself_is_a_cycle():
    loop: list = [1]
    loop.append(loop)
    encoded = encode(loop)
    assert encoded == [1, {"$lossy": {"reason": "cycle", "type": "builtins.list"}}]
    assert is_lossy(encoded)


def test_dict_containing_itself_is_a_cycle():
    mapping: dict = {"a": 1}
    mapping["me"] = mapping
    encoded = encode(mapping)
    assert encoded == {"a": 1, "me": {"$lossy": {"reason": "cycle", "type": "builtins.dict"}}}
    assert is_lossy(encoded)


def test_shared_reference_is_encoded_twice_and_is_not_lossy():
    shared = {"k": [1, 2]}
    encoded = encode([shared, shared, {"again": shared}])
    assert encoded == [{"k": [1, 2]}, {"k": [1, 2]}, {"again": {"k": [1, 2]}}]
    assert not is_lossy(encoded)


def test_depth_200_gives_lossy_at_the_limit_and_stays_canonicalizable():
    encoded = encode(nested_lists(200))
    lists = 0
    node: Any = encoded
    while isinstance(node, list):
        lists, node = lists + 1, node[0]
    assert lists == MAX_DEPTH - 2  # the $lossy tag takes the last two levels
    assert node["$lossy"]["reason"] == "depth" and node["$lossy"]["type"] == "builtins.list"
    assert is_lossy(encoded)
    assert canonical_bytes(encoded).startswith(b"[" * lists + b'{"$lossy":')


def test_small_max_depth_cuts_with_a_short_repr():
    assert encode([[[[[1]]]]], max_depth=5) == [
        [[{"$lossy": {"reason": "depth", "type": "builtins.list", "repr": "[[1]]"}}]]
    ]


class BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")


class Plain:
    pass


def test_object_whose_repr_raises_is_lossy_unsupported():
    assert encode(BadRepr()) == {
        "$lossy": {"reason": "unsupported", "type": f"{HERE}.BadRepr", "repr": f"<{HERE}.BadRepr: repr failed with RuntimeError>"}
    }


def test_default_repr_drops_the_memory_address():
    assert encode(Plain()) == {"$lossy": {"reason": "unsupported", "type": f"{HERE}.Plain", "repr": f"<{HERE}.Plain object>"}}


def test_exception_while_encoding_becomes_lossy_error():
    class BrokenZone(dt.tzinfo):
        def utcoffset(self, when):
            raise ValueError("broken zone")

    encoded = encode({"at": dt.datetime(2026, 1, 1, tzinfo=BrokenZone())})
    assert encoded["at"]["$lossy"]["reason"] == "error"
    assert encoded["at"]["$lossy"]["error"] == "ValueError: broken zone"
    assert is_lossy(encoded)


def test_int_too_long_for_str_is_lossy_not_an_exception():
    encoded = encode(10**5000)
    assert encoded["$lossy"]["reason"] == "error"
    assert canonical_bytes(encoded)


def test_lossy_inside_an_escaped_dict_is_found_but_a_user_lossy_key_is_not():
    assert not is_lossy(encode({"$lossy": "user data"}))
    assert is_lossy(encode({"$x": object()}))


# --------------------------------------------------------------------------- never raises

weird_types = st.sampled_from(
    [int, float, str, bytes, complex, Decimal, fractions.Fraction, ipaddress.IPv4Address,
     dt.datetime, dt.timedelta, uuid.UUID, range, slice, bool, type(None), bytearray, Color, Perm]
)
weird_leaves = (
    weird_types.flatmap(st.from_type)
    | st.builds(BadRepr)
    | st.builds(Plain)
    | st.builds(pathlib.PurePosixPath, st.text(max_size=5))
    | st.sampled_from([object, Plain, len, ..., NotImplemented])
)
hashable_leaves = st.integers() | st.text() | st.binary() | st.floats() | st.tuples(st.integers(), st.text())
weird_values = st.recursive(
    weird_leaves | hashable_leaves,
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.dictionaries(hashable_leaves, inner, max_size=4)
    | st.frozensets(hashable_leaves, max_size=4)
    | st.builds(Point, st.integers(), st.floats(), st.binary()),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(weird_values)
def test_encode_never_raises_and_its_output_is_always_canonicalizable(value):
    encoded = encode(value)
    assert canonical_bytes(encoded) == canonical_bytes(encode(value))  # deterministic
    encode(decode(json.loads(canonical_bytes(encoded))))  # decode never crashes either


hashable_plain = st.integers() | st.text() | st.binary() | st.tuples(st.integers(), st.text())
python_values = st.recursive(
    hashable_plain | st.none() | st.booleans() | st.floats(allow_nan=False) | st.decimals(allow_nan=False),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(hashable_plain | st.text(alphabet="$ab", max_size=3), inner, max_size=4)
    | st.sets(hashable_plain, max_size=4),
    max_leaves=20,
)


def as_decoded(value: Any) -> Any:
    """What decode gives back: tuples as lists, except inside sets and as map keys."""
    if isinstance(value, tuple):
        return [as_decoded(v) for v in value]
    if isinstance(value, list):
        return [as_decoded(v) for v in value]
    if isinstance(value, dict):
        return {k: as_decoded(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(python_values)
def test_python_values_round_trip_through_bytes(value):
    assert decode(json.loads(dumps(value))) == as_decoded(value)


@settings(max_examples=300, deadline=None)
@given(python_values | weird_values)
def test_pre_encoded_values_encode_to_themselves(value):
    """encode(pre_encoded(encode(v))) == encode(v): tags, "$" keys ($esc) and non-str keys
    ($map) included, at any depth; the store re-encodes scrubbed results this way."""
    from sealbox.canonical import pre_encoded

    encoded = encode(value)
    assert encode(pre_encoded(encoded)) == encoded
    assert canonical_bytes(encode({"result": pre_encoded(encoded)})) == canonical_bytes({"result": encoded})


def test_a_tagged_value_holding_a_whole_double_beyond_2_53_stays_canonicalizable():
    """A Tagged's value is re-read from its canonical bytes, where JCS writes 1e17 as the
    integer token 100000000000000000: it was parsed as an int beyond I-JSON, and the encoded
    value could then not be canonicalized (a recorded decode()d value with such a float failed)."""
    out = encode(Tagged("$dataclass", {"fields": {"x": 1e17, "y": 2.0**53, "n": 3}}))
    assert out == {"$dataclass": {"fields": {"n": 3, "x": 1e17, "y": 2.0**53}}}
    assert canonical_bytes(out) == b'{"$dataclass":{"fields":{"n":3,"x":100000000000000000,"y":9007199254740992}}}'


def test_pre_encoded_wraps_only_the_outermost_tags():
    from sealbox.canonical import pre_encoded

    encoded = encode({"a": [b"\x00", {"$k": {1: "x"}}], "b": "t"})
    assert encoded == {"a": [{"$bytes": "AA=="}, {"$esc": {"$k": {"$map": [[1, "x"]]}}}], "b": "t"}
    assert pre_encoded(encoded) == {"a": [Tagged("$bytes", "AA=="), Tagged("$esc", {"$k": {"$map": [[1, "x"]]}})],
                                    "b": "t"}


# --------------------------------------------------------------------------- hashing


def test_sha256_hex_and_fingerprint():
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert fingerprint({}) == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    assert fingerprint({"b": b"\x00", "a": 1.0}) == "sha256:" + hashlib.sha256(b'{"a":1,"b":{"$bytes":"AA=="}}').hexdigest()


# --------------------------------------------------------------------------- enum members inside containers


class _EqualsItsValue(enum.Enum):
    """An Enum whose own __eq__ says it equals its plain value."""
    A = "a"

    def __eq__(self, other: object) -> bool:
        return other == self.value if not isinstance(other, enum.Enum) else other is self

    __hash__ = enum.Enum.__hash__


class _Level(enum.IntEnum):
    HIGH = 3


class _Colour(enum.StrEnum):
    RED = "red"


class _Bits(enum.IntFlag):
    X = 1


class _Half(float, enum.Enum):
    A = 0.5


@pytest.mark.parametrize("member", [_Level.HIGH, _Colour.RED, _Bits.X, _Half.A, _EqualsItsValue.A, Color.RED])
def test_enum_members_inside_containers_are_tagged_as_at_the_top(member):
    """An Enum member of any kind (IntEnum, StrEnum, IntFlag, a float mixin, one whose own __eq__ says it
    equals its value) is a $enum inside a dict or list exactly as at the top: these compare equal to
    their plain value and orjson writes them as it, so no shortcut may take equality for identity
    (an earlier fast path did; a fresh-clone break test found it)."""
    top = encode(member)
    assert top["$enum"]["name"] == member.name
    assert encode({"m": member}) == {"m": top} and encode([member, 1]) == [top, 1]
    assert canonical._encode_noting_floats({"m": [member]})[0] == {"m": [top]}


# --------------------------------------------------------------------------- the plain-JSON fast path of encode


class _Color(enum.IntEnum):
    RED = 1


class _Name(str, enum.Enum):
    A = "a"


class _MyStr(str):
    pass


def _strictly_equal(a: Any, b: Any) -> bool:
    """Equal values of the same exact types, dict keys in the same order (True != 1 here)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_strictly_equal(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_strictly_equal(x, y) for x, y in zip(a, b))
    if type(a) is float and math.isnan(a):
        return math.isnan(b)
    return a == b


_anything = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text() | st.sampled_from(
        [_Color.RED, _Name.A, _MyStr("x"), b"\x00", "\ud800", -0.0, 2**53 - 1, -(2**53 - 1), 2**53, "é", "\U0001F600"]),
    lambda children: st.lists(children, max_size=4) | st.lists(children, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=4) | st.sampled_from(["$blob", "a$", "é", "$"]), children, max_size=4)
    | st.dictionaries(st.integers(0, 3), children, max_size=2),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None)
@given(_anything, st.integers(min_value=2, max_value=8))
def test_the_plain_fast_path_gives_what_the_encoder_gives(value: Any, depth: int) -> None:
    """Wherever _copy_plain answers, its result and float flag are the encoder's exactly."""
    encoder = canonical._Encoder(depth)
    slow = encoder.enc(value, 0)
    seen = [False]
    try:
        fast = canonical._copy_plain(value, 0, depth, seen)
    except canonical._NotPlain:
        return
    assert _strictly_equal(fast, slow), (value, fast, slow)
    assert seen[0] == encoder.floats
    assert _strictly_equal(canonical.encode(value, max_depth=depth), slow)


def test_the_plain_fast_path_answers_for_plain_payloads_and_copies_them() -> None:
    payload = {"call_id": "c1", "arguments": {"query": "SELECT 1", "params": [1, "open", None, True, 2.5]},
               "tags": ("a", "b"), "note": "café"}
    seen = [False]
    out = canonical._copy_plain(payload, 0, canonical.MAX_DEPTH, seen)
    assert out == {"call_id": "c1", "arguments": {"query": "SELECT 1", "params": [1, "open", None, True, 2.5]},
                   "tags": ["a", "b"], "note": "café"}
    assert seen == [True]
    assert out is not payload and out["arguments"] is not payload["arguments"]  # a copy: later changes stay out
    assert canonical._encode_noting_floats({"n": 1, "s": ["x"]}) == ({"n": 1, "s": ["x"]}, False)


@pytest.mark.parametrize("value", [
    {"$blob": "x"}, {1: "a"}, {"k": _Color.RED}, [_MyStr("x")], {"k": 2**53}, [float("nan")], [float("inf")],
    ["\ud800"], {"é": 1}, {"k": b"x"},
])
def test_the_plain_fast_path_leaves_the_rest_to_the_encoder(value: Any) -> None:
    with pytest.raises(canonical._NotPlain):
        canonical._copy_plain(value, 0, canonical.MAX_DEPTH, [False])


def test_cycles_and_depth_still_become_lossy_through_encode() -> None:
    loop: list = []
    loop.append(loop)
    assert canonical.encode(loop) == [{"$lossy": {"reason": "cycle", "type": "builtins.list"}}]
    deep: Any = "x"
    for _ in range(10):
        deep = [deep]
    assert canonical.encode(deep, max_depth=4) == [[{"$lossy": {"reason": "depth", "type": "builtins.list",
                                                                "repr": "[[[[...]]]]"}}]]
    assert not canonical.is_lossy(canonical.encode(deep, max_depth=12))


def test_encode_never_raises_when_its_fast_path_fails(monkeypatch):
    """Whatever goes wrong in the plain-JSON fast path, the encoder decides (encode never raises)."""
    def broken(*_args):
        raise RuntimeError("dictionary changed size during iteration")

    monkeypatch.setattr(canonical, "_copy_plain", broken)
    assert encode({"a": [1, "x"]}) == {"a": [1, "x"]}
    assert canonical._encode_noting_floats({"f": 1.5}) == ({"f": 1.5}, True)


def test_encode_of_a_dict_changed_by_another_thread_does_not_raise():
    """A regression: a plain dict mutated by another thread while it was copied raised RuntimeError."""
    import threading

    shared = {f"k{i}": [i, "v", {"a": 1.5}] for i in range(50_000)}
    stop = threading.Event()

    def mutate() -> None:
        i = 0
        while not stop.is_set():
            shared[f"n{i % 500}"] = i
            shared.pop(f"n{(i + 250) % 500}", None)
            i += 1

    worker = threading.Thread(target=mutate)
    worker.start()
    try:
        for _ in range(5):
            out = encode({"arguments": shared})  # must not raise; may be $lossy where the walk saw the change
            assert isinstance(out, dict) and set(out) == {"arguments"}
    finally:
        stop.set()
        worker.join()


_EXP_PIECES = st.sampled_from([b"e", b"+", b"-", b"1", b"0", b".", b":", b",", b"[", b"]", b"}", b"a", b'"', b"E"])


@settings(max_examples=3000, deadline=None)
@given(data=st.lists(_EXP_PIECES, max_size=16).map(b"".join))
def test_the_exponent_token_test_is_the_regex(data: bytes) -> None:
    """canonical._has_exp_token decides around each e+/e- what _EXP_TOKEN_B's scan decides."""
    assert canonical._has_exp_token(data) is (canonical._EXP_TOKEN_B.search(data) is not None)


@pytest.mark.parametrize("data, found", [
    (b"[1e+5]", True), (b'{"a":-1.5e-7}', True), (b'{"a":"01a23a09-bfec-7089-910e-df302dab63ad"}', False),
    (b"[1.e+5]", False), (b"[.5e+5]", False), (b":1e-1", False), (b"[-e-1]", False), (b'{"a":"x,1e-5]"}', True),
])
def test_the_exponent_token_test_cases(data: bytes, found: bool) -> None:
    assert canonical._has_exp_token(data) is found


# --------------------------------------------------------------------------- decode: depth-bounded


@pytest.mark.parametrize("text", [
    "[" * 600 + "]" * 600,
    '{"a":' * 600 + "1" + "}" * 600,
    '{"$esc":' * 400 + "{}" + "}" * 400,
    '{"$map":[[1,' * 300 + "1" + "]]}" * 300,
    '{"$esc":{"k":[' * 300 + "1" + "]}}" * 300,
])
def test_decode_never_raises_on_deep_json(text: str) -> None:
    value = json.loads(text)
    out = canonical.decode(value)  # no RecursionError
    # walk down to the cut: every level above it is decoded, the rest is held as given
    node, levels = out, 0
    while not isinstance(node, canonical.Tagged):
        node = next(iter(node.values())) if isinstance(node, dict) else (
            next(iter(node)) if isinstance(node, (list, set)) else node)
        levels += 1
        assert levels < 1000
    assert node.tag == "$deep"


def test_decode_of_deeply_nested_sets_does_not_raise() -> None:
    out = canonical.decode(json.loads('{"$set":[' * 300 + "1" + "]}" * 300))
    assert isinstance(out, canonical.Tagged)  # a set inside a set cannot be rebuilt: kept as data, as before


def test_decode_cuts_exactly_past_decode_max_depth() -> None:
    assert canonical.DECODE_MAX_DEPTH == canonical.MAX_DEPTH
    inner: Any = [1]
    deep = inner
    for _ in range(canonical.MAX_DEPTH - 1):
        deep = [deep]
    assert canonical.decode(deep) == deep  # exactly MAX_DEPTH levels: decoded completely
    too_deep = [deep]
    out = canonical.decode(too_deep)
    node = out
    for _ in range(canonical.MAX_DEPTH):
        node = node[0]
    assert node == canonical.Tagged("$deep", [1])  # level MAX_DEPTH + 1, exactly as given
    plain = {"a": {"b": 1}}
    for _ in range(canonical.MAX_DEPTH - 1):
        plain = {"a": plain}
    cut = canonical.decode(plain)
    for _ in range(canonical.MAX_DEPTH):
        cut = cut["a"]
    assert cut == canonical.Tagged("$deep", {"b": 1})


def test_decode_inverts_encode_at_the_depth_limit() -> None:
    value: Any = {"k": b"x"}
    for _ in range(60):
        value = {("t", 1): [value]}  # a $map each level: its tags' own levels count
    encoded = canonical.encode(value)
    assert canonical.decode(encoded) == canonical.decode(json.loads(json.dumps(encoded)))
    back = canonical.decode(encoded)
    # everything encode wrote is within MAX_DEPTH, so nothing comes back as $deep
    assert "$deep" not in repr(back)
    deep_list: Any = "x"
    for _ in range(canonical.MAX_DEPTH - 2):
        deep_list = [deep_list]
    assert canonical.decode(canonical.encode(deep_list)) == deep_list
