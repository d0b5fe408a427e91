"""A trace (or tau-bench record) given twice in one file is one run, not two.

Found by building inputs from tests/data/corpus: a Langfuse file listing the same ``{trace, observations}``
export twice, or a Jaeger file listing the same trace twice under ``data``, became two runs (the same
calls imported twice), while the same OTLP trace twice in a JSON Lines file was already one run (OTLP
groups spans by trace id). Every span format now makes one run per trace id (docs/import.md,
"Duplicates"): repeated spans and observations are skipped and counted; a Langfuse trace given again
with other trace fields is kept and flagged (``conflicting_trace``). A tau-bench record repeating an
earlier one's ``task_id``/``trial`` with the same content is skipped; with other content both are
imported and the later flagged (``duplicate_record_id``). ``sealbox verify`` is clean after every
import. On SQLite, and on PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import copy
import json

from test_import_duplicates import JAEGER, LANGFUSE, CORPUS, _import_both, _load, _shape, _verified, _write
from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

import sealbox
from sealbox.interop.importers import import_file

TAU = CORPUS / "tau-bench-openai-messages" / "gpt-4o-airline.subset-0-1-3-6-11.json"


def _payloads(store, run_id: str, kind: str) -> list[dict]:
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == kind]


def test_a_langfuse_trace_listed_twice_is_one_run(backend, tmp_path):  # noqa: F811
    doc = _load(LANGFUSE)
    twice = _write(tmp_path / "twice.json", [doc, copy.deepcopy(doc)])
    (one, one_shape), (two, two_shape) = _import_both(backend, tmp_path, LANGFUSE, twice)
    assert len(two.runs) == 1
    assert two_shape == one_shape
    assert two.duplicates_skipped == len(doc["observations"])


def test_a_jaeger_trace_listed_twice_is_one_run(backend, tmp_path):  # noqa: F811
    doc = _load(JAEGER)
    doc["data"] = doc["data"] + copy.deepcopy(doc["data"])
    (one, one_shape), (two, two_shape) = _import_both(backend, tmp_path, JAEGER, _write(tmp_path / "j.json", doc))
    assert len(two.runs) == 1
    assert two_shape == one_shape
    assert two.duplicates_skipped == len(doc["data"][0]["spans"])


def test_a_langfuse_trace_given_again_with_other_trace_fields_is_kept_and_flagged(backend, tmp_path):  # noqa: F811
    doc = _load(LANGFUSE)
    other = copy.deepcopy(doc)
    other["trace"]["output"] = "a different final answer"
    path = _write(tmp_path / "conflict.json", [doc, other])
    store_path = tmp_path / "s"
    store = backend(store_path)
    try:
        summary = import_file(store, path)
        assert len(summary.runs) == 1
        assert summary.duplicates_skipped == len(doc["observations"])
        run = summary.runs[0]
        flagged = [a for a in _payloads(store, run, "anomaly") if a["what"] == "conflicting_trace"]
        assert [(a["detail"]["trace_id"], a["detail"]["fields"]) for a in flagged] == [(doc["trace"]["id"], ["output"])]
        traces = [s for s in _payloads(store, run, "state.saved") if s.get("label") == "imported:trace"]
        # the export's output is JSON text (decoded on import); the other one a plain string
        assert [t["state"]["output"] for t in traces] == [json.loads(doc["trace"]["output"]),
                                                          "a different final answer"]
    finally:
        store.close()
    _verified(store_path)


def test_a_tau_bench_record_given_twice_is_one_run_and_a_conflicting_one_is_flagged(backend, tmp_path):  # noqa: F811
    records = _load(TAU)
    again = records + [copy.deepcopy(records[0])]
    (one, one_shape), (two, two_shape) = _import_both(backend, tmp_path, TAU, _write(tmp_path / "t.json", again))
    assert len(two.runs) == 5 and two.duplicates_skipped == 1
    assert two_shape == one_shape

    changed = copy.deepcopy(records[0])
    changed["reward"] = 1.0 - records[0]["reward"]
    store_path = tmp_path / "c"
    backend(store_path).close()
    out = _sb("import", "-s", store_path, _write(tmp_path / "c.json", records + [changed]), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert len(summary["runs"]) == 6 and summary["duplicates_skipped"] == 0
    _verified(store_path)
    store = sealbox.open_store(store_path)
    try:
        flagged = [a for a in _payloads(store, summary["runs"][5], "anomaly") if a["what"] == "duplicate_record_id"]
        assert [a["detail"]["ids"] for a in flagged] == [{"task_id": records[0]["task_id"], "trial": records[0]["trial"]}]
        assert flagged[0]["detail"]["first_record_index"] == 0
        assert not [a for r in summary["runs"][:5] for a in _payloads(store, r, "anomaly")
                    if a["what"] == "duplicate_record_id"]
    finally:
        store.close()
