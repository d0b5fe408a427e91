"""Arguments refused by a tool's input schema: the refusal does not repeat a large argument value."""

from __future__ import annotations

import pytest

from sealbox.gateway import Gateway

from .conftest import connect, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


async def test_a_large_value_refused_by_the_schema_is_not_repeated_in_the_refusal(tmp_path, store):
    """jsonschema's message holds the refused value's repr: a list of 150 000 numbers given as echo's ``text``
    was answered with a 1 MB isError text (the model's context filled with its own arguments) and recorded a
    second time, whole, as the tool.result's error message (the tool.call holds it already). A message above
    512 characters is now replaced by one naming the kind of value and the schema keyword it failed; a short
    one is kept as it was."""
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        big = await client.call_tool("toy__echo", {"text": list(range(150_000))})
        small = await client.call_tool("toy__echo", {"text": 5})
    prefix = "arguments do not match the input schema of toy__echo: text: "
    assert (big.is_error, text_of(big)) == (True, prefix + "the array given does not match the schema's type: "
                                            "'string' (its message, 1088914 characters long, is not shown)")
    assert (small.is_error, text_of(small)) == (True, prefix + "5 is not of type 'string'")
    results = [e.payload["error"]["message"] for e in store.read_range(0, store.size()) if e.kind == "tool.result"]
    assert results == [text_of(big), text_of(small)]
    assert toy_log(tmp_path) == []
