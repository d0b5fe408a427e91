"""A JSON Lines file (an OTLP collector's file exporter: one export request per line) whose last line was cut
short (the collector killed mid-write, the file copied while it was written) said
``is not valid JSON (line 2, column 1: Extra data)``: the error of parsing the whole file as one JSON value,
which reads as if the file had something extra at the start of line 2. The line that is broken is named with
its own error (where in it the text ends), with the file's line numbers (blank lines counted), and nothing is
written."""

from __future__ import annotations

import json

import pytest
from import_helpers import load, store  # noqa: F401

from sealbox.interop.importers import ImportFormatError, import_file

ADK = "agentevals-otel/adk_py_v2_default_S2.otlp.json"


def test_a_truncated_last_line_of_json_lines_is_named_with_its_own_error(store, tmp_path):
    line = json.dumps(load(ADK))
    path = tmp_path / "collector.jsonl"
    path.write_text(line + "\n\n" + line + "\n" + line[:100], encoding="utf-8")
    before = store.size()
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, path)
    message = str(exc.value)
    column, msg = _error(line[:100])
    assert message == f"collector.jsonl is not valid JSON Lines (line 4, column {column}: {msg})", message
    assert "Extra data" not in message and store.size() == before


def test_a_broken_middle_line_of_json_lines_is_named(store, tmp_path):
    line = json.dumps(load(ADK))
    path = tmp_path / "collector.jsonl"
    path.write_text(line + "\n" + '{"resourceSpans": [}' + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, path)
    assert str(exc.value) == "collector.jsonl is not valid JSON Lines (line 2, column 20: Expecting value)"


def test_one_json_document_with_a_syntax_error_is_still_reported_as_json(store, tmp_path):
    path = tmp_path / "doc.json"
    path.write_text('{"resourceSpans": [\n  {"a": 1}\n  {"b": 2}\n]}', encoding="utf-8")
    with pytest.raises(ImportFormatError) as exc:
        import_file(store, path)
    assert str(exc.value) == "doc.json is not valid JSON (line 3, column 3: Expecting ',' delimiter)"


def _error(text: str) -> tuple[int, str]:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.colno, exc.msg
    raise AssertionError("the cut line parsed")
