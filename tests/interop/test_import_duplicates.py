"""Identical data given twice is imported once; the same id with other content is flagged, not merged.

Found by building inputs from the public recordings in tests/data/corpus: an OTLP JSON Lines file holding
the same export twice became one run whose every span was recorded twice (the later copy renamed
``<id>#dup2`` with a ``duplicate_span_id`` anomaly, so every model and tool call was in the run twice), a
Jaeger trace or Langfuse observations listed twice likewise. The rule (docs/import.md, "Duplicates"): a
span, observation or log record given again with the same id and the same content is skipped and counted
(``ImportSummary.duplicates_skipped``, the CLI's "skipped N duplicate(s)" line, ``--json``
``duplicates_skipped``); the same id with other content is kept as ``<id>#dup<n>`` and flagged with a
``duplicate_span_id`` anomaly. ``sealbox verify`` is clean after every import. On SQLite, and on
PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

import sealbox
from sealbox.interop.importers import import_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
OTLP = CORPUS / "agentevals-otel" / "adk_py_v2_default_S2.otlp.json"
JAEGER = CORPUS / "agentevals-otel" / "jaeger_export_helm.json"
LANGFUSE = CORPUS / "langfuse-framework-traces" / "pydantic-ai-tools-2025-12-04.trace.json"


def _load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


def _shape(store, run_id: str) -> list[tuple]:
    """A run's events with what depends on the file (its name, its hash) left out."""
    out = []
    for e in store.read_run(run_id):
        p = store.resolve(e.payload)
        if e.kind == "run.started":
            p = {k: v for k, v in p.items() if k != "imported"}
            p["imported"] = {k: v for k, v in store.resolve(e.payload)["imported"].items()
                             if k not in ("source_file", "source_sha256")}
        out.append((e.kind, e.step, json.dumps(p, sort_keys=True)))
    return out


def _verified(path):
    out = _sb("verify", "-s", path)
    assert out.returncode == 0, out.stdout + out.stderr


def _import_both(backend, tmp_path, original: Path, doubled: Path):  # noqa: F811
    """Import ``original`` and ``doubled`` into two new stores; (summary, shapes) of each."""
    results = []
    for name, path in (("a", original), ("b", doubled)):
        store_path = tmp_path / name
        store = backend(store_path)
        try:
            summary = import_file(store, path)
            results.append((summary, [_shape(store, r) for r in summary.runs]))
        finally:
            store.close()
        _verified(store_path)
    return results


def _spans(doc) -> list:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_an_otlp_json_lines_file_holding_an_export_twice_is_one_run_with_each_span_once(backend, tmp_path):  # noqa: F811
    doc = _load(OTLP)
    line = json.dumps(doc, separators=(",", ":"))
    doubled = tmp_path / "twice.jsonl"
    doubled.write_text(line + "\n" + line + "\n", encoding="utf-8")
    (one, one_shape), (two, two_shape) = _import_both(backend, tmp_path, OTLP, doubled)
    assert len(two.runs) == len(one.runs) == 1
    assert two_shape == one_shape  # the same events: no span recorded twice, no duplicate_span_id anomaly
    assert (two.events, two.anomalies) == (one.events, one.anomalies)
    assert one.duplicates_skipped == 0
    assert two.duplicates_skipped == len(_spans(doc)) + sum(
        len(sl.get("logRecords", [])) for rl in doc.get("resourceLogs", []) for sl in rl.get("scopeLogs", []))


def test_a_jaeger_trace_listing_its_spans_twice_records_each_once(backend, tmp_path):  # noqa: F811
    doc = _load(JAEGER)
    spans = doc["data"][0]["spans"]
    doc["data"][0]["spans"] = spans + list(reversed(copy.deepcopy(spans)))
    (one, one_shape), (two, two_shape) = _import_both(backend, tmp_path, JAEGER, _write(tmp_path / "j.json", doc))
    assert two_shape == one_shape
    assert (two.duplicates_skipped, one.duplicates_skipped) == (len(spans), 0)


def test_langfuse_observations_listed_twice_are_recorded_once(backend, tmp_path):  # noqa: F811
    doc = _load(LANGFUSE)
    observations = doc["observations"]
    doc["observations"] = observations + copy.deepcopy(observations)
    (one, one_shape), (two, two_shape) = _import_both(backend, tmp_path, LANGFUSE, _write(tmp_path / "l.json", doc))
    assert two_shape == one_shape
    assert (two.duplicates_skipped, one.duplicates_skipped) == (len(observations), 0)


def test_the_same_span_id_with_other_content_is_kept_and_flagged_not_merged(backend, tmp_path):  # noqa: F811
    doc = _load(OTLP)
    spans = _spans(doc)
    tool = next(s for s in spans if s["name"].startswith("execute_tool"))
    changed = copy.deepcopy(tool)
    changed["name"] = tool["name"] + " (again)"
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append(changed)
    path = _write(tmp_path / "conflict.json", doc)
    store_path = tmp_path / "c"
    backend(store_path).close()
    out = _sb("import", "-s", store_path, path, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["duplicates_skipped"] == 0
    _verified(store_path)
    store = sealbox.open_store(store_path)
    try:
        anomalies = [store.resolve(e.payload) for e in store.read_run(summary["runs"][0]) if e.kind == "anomaly"]
        span_id = tool["spanId"].lower()
        flagged = [a for a in anomalies if a["what"] == "duplicate_span_id"]
        assert [(a["detail"]["span_id"], a["detail"]["kept_as"]) for a in flagged] == [(span_id, span_id + "#dup2")]
        tool_spans = [store.resolve(e.payload)["imported"]["span_id"] for e in store.read_run(summary["runs"][0])
                      if e.kind == "tool.call"]
        assert tool_spans.count(span_id + "#dup2") == 1 and tool_spans.count(span_id) == 1
    finally:
        store.close()


def test_the_cli_says_how_many_duplicates_it_skipped(backend, tmp_path):  # noqa: F811
    doc = _load(LANGFUSE)
    doc["observations"] = doc["observations"] + doc["observations"][:2]
    path = _write(tmp_path / "two-repeated.json", doc)
    store_path = tmp_path / "s"
    backend(store_path).close()
    out = _sb("import", "-s", store_path, path)
    assert out.returncode == 0, out.stderr
    assert "skipped 2 duplicate(s): repeated in the file with the same id and content\n" in out.stdout
    _verified(store_path)
