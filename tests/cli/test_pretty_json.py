"""The CLI's --json writer (sealbox.cli.common.pretty_json): json.dumps(indent=2)'s layout, faster."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid

from sealbox.canonical import Tagged
from sealbox.cli.common import pretty_json


def reference(value):
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def test_rows_are_written_byte_for_byte_as_json_dumps_indent_2_writes_them():
    rows = [{"ts": "2026-12-01T10:00:00.000001Z", "arguments": {"query": "DELETE FROM t WHERE x = 'é\u2028'", "n": [1, 2.5]},
             "ok": True, "error": None, "approvers": [], "flags": [{}], "nested": [[[]]], "big": 2**63 - 1},
            {"value": Tagged("$blob", "sha256:00"), "at": dt.datetime(2026, 1, 1), "id": uuid.UUID(int=5)}]
    assert pretty_json(rows) == reference(rows)
    assert pretty_json({}) == reference({}) and pretty_json([]) == reference([]) and pretty_json("s") == reference("s")


def test_what_orjson_refuses_is_written_by_json_and_nan_is_null():
    for value in ({1: "int key"}, [2**70], {"s": "lone \ud800"}):
        assert pretty_json(value) == reference(value)
    assert json.loads(pretty_json({"x": math.nan, "y": [math.inf]})) == {"x": None, "y": [None]}
    assert json.loads(pretty_json({"f": 1e-7})) == {"f": 1e-7}  # written 1e-7 (json: 1e-07)
