"""Runs imported before from other bytes are not imported again; the same trace with other content is flagged.

Found by re-importing corpus recordings (tests/data/corpus) re-indented, or with another trace beside
them: an import was only known by its file's bytes (``imported.source_sha256``), so the same trace
from a file whose bytes differed came in again as new runs, with every call twice in the store.
Each imported run now records its content's digest (``imported.content_sha256``: the run as
converted, without the file's name and hash): a run whose digest is in the store is not written
again (``ImportSummary.skipped_runs``, "skipped N run(s) already in the store with the same
content"; a file whose every run is there is ``already_imported``); a run whose trace id is in the
store with other content is written beside it and flagged (``trace_imported_before``). For every
format; ``sealbox verify`` is clean after each import. On SQLite, and on PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import copy
import json

import pytest
from test_import_duplicates import CORPUS, JAEGER, LANGFUSE, OTLP, _load, _verified, _write
from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

import sealbox
from sealbox.interop.importers import import_file

FILES = {
    "otlp-json": OTLP,
    "jaeger": JAEGER,
    "langfuse": LANGFUSE,
    "tau-bench": CORPUS / "tau-bench-openai-messages" / "gpt-4o-airline.subset-0-1-3-6-11.json",
    "swe-agent": CORPUS / "swe-agent-traj" / "function_calling_simple.traj.json",
    "openai-agents-runstate": CORPUS / "openai-agents-runstate" / "resume" / "v1_13_pending_tool_approval.json",
}


def _size(path) -> int:
    store = sealbox.open_store(path)
    try:
        return store.size()
    finally:
        store.close()


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_a_recording_imported_again_from_other_bytes_writes_nothing(backend, tmp_path, fmt):  # noqa: F811
    source = FILES[fmt]
    store_path = tmp_path / "s"
    backend(store_path).close()
    first = _sb("import", "-s", store_path, source, "--json")
    assert first.returncode == 0, first.stderr
    runs = json.loads(first.stdout)["runs"]
    _verified(store_path)
    size = _size(store_path)

    reindented = tmp_path / f"again-{source.name}"
    reindented.write_text(json.dumps(_load(source), indent=3, sort_keys=True), encoding="utf-8")
    again = _sb("import", "-s", store_path, reindented, "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["already_imported"], summary["runs"], summary["skipped_runs"], summary["events"]) == \
        (True, runs, runs, 0)
    assert _size(store_path) == size
    _verified(store_path)


def test_a_file_with_a_trace_imported_before_beside_a_new_one_writes_only_the_new_one(backend, tmp_path):  # noqa: F811
    other = CORPUS / "langfuse-framework-traces" / "vercel-aisdk-2025-11-17.trace.json"
    store_path = tmp_path / "s"
    store = backend(store_path)
    try:
        first = import_file(store, LANGFUSE)
    finally:
        store.close()
    both = _write(tmp_path / "both.json", [_load(other), _load(LANGFUSE)])
    out = _sb("import", "-s", store_path, both)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("imported 1 run(s), ")
    assert lines[-2:] == ["skipped 1 run(s) already in the store with the same content:", f"  {first.runs[0]}"]
    _verified(store_path)
    store = sealbox.open_store(store_path)
    try:
        starts = [store.resolve(e.payload)["imported"] for e in store.read_range(0, store.size())
                  if e.kind == "run.started" and e.principal.startswith("imported:")]
        assert sorted(s["original_ids"]["trace_id"] for s in starts) == sorted(
            [_load(other)["trace"]["id"], _load(LANGFUSE)["trace"]["id"]])
        assert all(s["content_sha256"].startswith("sha256:") for s in starts)
    finally:
        store.close()


def test_the_same_trace_with_other_content_is_imported_beside_it_and_flagged(backend, tmp_path):  # noqa: F811
    doc = _load(JAEGER)
    changed = copy.deepcopy(doc)
    changed["data"][0]["spans"][0]["operationName"] += " (renamed)"
    store_path = tmp_path / "s"
    store = backend(store_path)
    try:
        first = import_file(store, JAEGER)
        second = import_file(store, _write(tmp_path / "changed.json", changed))
        assert second.skipped_runs == () and len(second.runs) == 1 and second.runs != first.runs
        flagged = [store.resolve(e.payload)["detail"] for e in store.read_run(second.runs[0])
                   if e.kind == "anomaly" and store.resolve(e.payload)["what"] == "trace_imported_before"]
        assert [(f["trace_id"], f["runs"], f["count"]) for f in flagged] == \
            [(doc["data"][0]["traceID"], list(first.runs), 1)]
        assert not [e for e in store.read_run(first.runs[0]) if e.kind == "anomaly"
                    and store.resolve(e.payload)["what"] == "trace_imported_before"]
    finally:
        store.close()
    _verified(store_path)
