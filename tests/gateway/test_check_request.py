"""check_request's NaN / Infinity test on its own: it walks the arguments only when the params' orjson
bytes (made for the size limit) hold a ``null`` (orjson writes NaN and ±Infinity as null), or when
there are no such bytes (no size limit, as in ``gateway replay`` without a config; params orjson
cannot write). The answer must be the same as walking every time."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from mcp.shared.exceptions import MCPError

from sealbox.gateway import codes
from sealbox.gateway.server import check_request


def _ctx(arguments: object) -> SimpleNamespace:
    return SimpleNamespace(request_id=1, method="tools/call", params={"name": "toy__echo", "arguments": arguments})


CASES = [
    ({"text": "x", "n": math.nan}, ".n"),
    ({"text": "x", "deep": [{"n": -math.inf}]}, ".deep[0].n"),
    ({"n": math.inf, "big": 2**70}, ".n"),  # orjson cannot write 2**70: the json fallback, then the walk
    ({"text": "null", "n": None}, None),  # a null that is no NaN
    ({"text": "plain", "n": 1.5, "k": [1, 2, {"a": True}]}, None),
    ({"big": 2**70, "x": 1.0}, None),
]


@pytest.mark.parametrize("limit", [1 << 20, None])
@pytest.mark.parametrize("arguments, where", CASES)
def test_non_finite_arguments_are_refused_whatever_the_path(arguments, where, limit):
    if where is None:
        check_request(_ctx(arguments), limit)
        return
    with pytest.raises(MCPError) as got:
        check_request(_ctx(arguments), limit)
    assert got.value.error.code == codes.MALFORMED_REQUEST
    assert got.value.error.message == f"tools/call params.arguments{where}: NaN and Infinity are not JSON numbers"


def test_size_and_shape_checks_unchanged():
    with pytest.raises(MCPError) as got:
        check_request(_ctx({"text": "x" * 2000}), 1024)
    assert got.value.error.code == codes.REQUEST_TOO_LARGE
    with pytest.raises(MCPError) as got:
        check_request(_ctx([1, 2]), 1024)
    assert got.value.error.code == codes.MALFORMED_REQUEST
    with pytest.raises(MCPError) as got:
        check_request(SimpleNamespace(request_id=1, method="tools/call", params={"arguments": {}}), 1024)
    assert got.value.error.code == codes.MALFORMED_REQUEST
    check_request(SimpleNamespace(request_id=None, method="tools/call", params={"arguments": {"n": math.nan}}), 1024)
