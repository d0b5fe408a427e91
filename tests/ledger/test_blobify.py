"""``sealbox.blobs.blobify`` against a plain reference that serializes every part.

blobify skips serializing a dict's parts when a bound on their size (from the whole's bytes and
its keys) shows none can exceed the limit. The result and the blobs put must be exactly the
reference's, where every part is tried.
"""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from sealbox.blobs import BLOB_TAG, CONS_TAG, ESC_TAG, blobify
from sealbox.canonical import canonical_bytes_encoded, encode


def _reference(value: Any, put: Callable[[bytes], str], limit: int) -> Any:
    """blobify as written before the bound: every part of a large dict is tried."""
    data = canonical_bytes_encoded(value)
    if len(data) <= limit:
        return value
    if type(value) is list:
        prev: Any = None
        for item in value:
            node = {CONS_TAG: [prev, _reference(item, put, limit)]}
            prev = {BLOB_TAG: put(canonical_bytes_encoded(node))}
        return prev
    if type(value) is dict:
        if len(value) == 1 and ESC_TAG in value and type(value[ESC_TAG]) is dict:
            reduced = {ESC_TAG: {k: _reference(v, put, limit) for k, v in value[ESC_TAG].items()}}
        else:
            reduced = {k: _reference(v, put, limit) for k, v in value.items()}
        data = canonical_bytes_encoded(reduced)
        if len(data) <= limit:
            return reduced
    return {BLOB_TAG: put(data)}


def _store() -> tuple[dict[str, bytes], Callable[[bytes], str]]:
    blobs: dict[str, bytes] = {}

    def put(content: bytes) -> str:
        ref = "sha256:%064x" % (hash(content) & (2**256 - 1))
        blobs[ref] = content
        return ref

    return blobs, put


_keys = st.text(max_size=6) | st.sampled_from(["$esc", "$blob", "é", "a\"b", "\u2028"])
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda c: st.lists(c, max_size=5) | st.dictionaries(_keys, c, max_size=6),
    max_leaves=30,
)


@settings(max_examples=600, deadline=None)
@given(_values, st.integers(min_value=8, max_value=120))
def test_blobify_is_the_reference_exactly(raw: Any, limit: int) -> None:
    value = encode(raw)
    mine, theirs = _store(), _store()
    out = blobify(value, mine[1], limit)
    ref = _reference(value, theirs[1], limit)
    assert out == ref
    assert mine[0] == theirs[0]


def test_a_dict_just_over_the_limit_with_small_parts_is_one_blob_and_its_parts_are_not_serialized(monkeypatch):
    import sealbox.blobs as blobs_module

    value = {f"key{i:02d}": "x" * 40 for i in range(12)}  # 12 parts of 40-odd bytes: about 600 bytes
    data = canonical_bytes_encoded(value)
    calls: list[Any] = []
    real = blobs_module.canonical_bytes_encoded
    monkeypatch.setattr(blobs_module, "canonical_bytes_encoded", lambda v, **k: calls.append(v) or real(v, **k))
    blobs, put = _store()
    out = blobify(value, put, 512, data)
    assert out == {BLOB_TAG: put(data)} and list(blobs.values()) == [data]
    assert calls == []  # the bound (600 - 12*5 - 60 = 480 <= 512) showed no part can reach the limit
    big = {"small": "x", "large": "y" * 600}  # here a part can, and does: it becomes its own blob
    out = blobify(big, put, 512)
    assert out == {"large": {BLOB_TAG: put(canonical_bytes_encoded("y" * 600))}, "small": "x"}
