"""A JSON Lines file (an OTLP collector's file exporter: one export request per line) holding U+2028 (or
U+0085, U+001E...) unescaped inside a string, as JSON allows and writers that do not escape them produce, was
cut there by str.splitlines and refused as not JSON. JSON Lines lines end at "\\n" only."""

from __future__ import annotations

import json

from import_helpers import load, store  # noqa: F401

from sealbox.interop.importers import import_file

ADK = "agentevals-otel/adk_py_v2_default_S2.otlp.json"


def test_a_line_separator_inside_a_json_lines_string_does_not_split_its_line(store, tmp_path):
    # JSON allows U+2028 / U+2029 (and U+0085, U+001C-U+001E) unescaped inside strings, and writers that do not
    # escape them (serde_json, ...) put them there; str.splitlines cut such a line in two, so the file did not
    # import. JSON Lines lines end at "\n" only.
    doc = load(ADK)
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] = [*span.get("attributes", []),
                          {"key": "note", "value": {"stringValue": "a\u2028b\u0085c\u001ed"}}]
    line = json.dumps(doc, ensure_ascii=False)
    assert "\u2028" in line
    path = tmp_path / "collector.jsonl"
    path.write_text(line + "\n" + line + "\n", encoding="utf-8")
    summary = import_file(store, path)
    assert summary.format == "otlp-json" and len(summary.runs) == 1
