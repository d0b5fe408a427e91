"""Importing the same recording twice into one store: the second import writes nothing.

Found by running ``sealbox import -s ST FILE`` twice on a corpus file: both printed "imported 1 run(s),
22 events" and the store then held every run and event twice. The recording is now known by its
content's SHA-256, which every imported run's ``run.started`` records (``imported.source_sha256``):
the second import (another process, another file name, the same bytes) names the runs already
imported and writes nothing (exit 0). On SQLite, and on PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

import sealbox
from sealbox.interop.importers import import_file
from sealbox.verify import verify_store

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
SWE = CORPUS / "swe-agent-traj" / "function_calling_simple.traj.json"
TAU = CORPUS / "tau-bench-openai-messages" / "gpt-4o-airline.subset-0-1-3-6-11.json"


def _runs(path) -> list[str]:
    out = _sb("runs", "list", "-s", path, "--json")
    assert out.returncode == 0, out.stderr
    return sorted(r["run_id"] for r in json.loads(out.stdout) if r["run_id"] != "system")


def _state(path) -> tuple[int, list[str]]:
    store = sealbox.open_store(path)
    try:
        assert verify_store(store).ok
        return store.size(), sorted({e.run_id for e in store.read_range(0, store.size())} - {"system"})
    finally:
        store.close()


def test_importing_the_same_file_twice_writes_nothing_the_second_time(backend, tmp_path):  # noqa: F811
    path = tmp_path / "store"
    backend(path).close()
    sha = "sha256:" + hashlib.sha256(TAU.read_bytes()).hexdigest()

    first = _sb("import", "-s", path, TAU, "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    runs = summary["runs"]
    assert len(runs) == 5 and summary["source_sha256"] == sha and summary["already_imported"] is False
    size, stored = _state(path)
    assert stored == sorted(runs)

    # the same file again, in another process: nothing written, the existing runs named, exit 0
    again = _sb("import", "-s", path, TAU)
    assert again.returncode == 0, again.stderr
    assert again.stdout == (f"already imported: {TAU.name} ({sha}) is in the store as 5 run(s); nothing written\n"
                            + "".join(f"  {r}\n" for r in runs))
    assert again.stderr == ""
    assert _state(path) == (size, sorted(runs))

    # the same bytes under another name, as JSON
    copy = tmp_path / "renamed.json"
    shutil.copyfile(TAU, copy)
    again = _sb("import", "-s", path, copy, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"format": "tau-bench", "source_sha256": sha, "runs": runs, "events": 0,
                                        "anomalies": 0, "already_imported": True,
                                        "duplicates_skipped": 0, "skipped_runs": []}
    assert _state(path) == (size, sorted(runs))
    assert _runs(path) == sorted(runs)

    # another file still imports; then the Python API says the same as the CLI
    other = _sb("import", "-s", path, SWE, "--json")
    assert other.returncode == 0, other.stderr
    swe_run = json.loads(other.stdout)["runs"]
    assert len(swe_run) == 1
    store = sealbox.open_store(path)
    try:
        size = store.size()
        result = import_file(store, SWE)
        assert (result.runs, result.events, result.anomalies, result.already_imported) == (tuple(swe_run), 0, 0, True)
        assert store.size() == size
    finally:
        store.close()
    assert _runs(path) == sorted(runs + swe_run)


def test_the_import_doc_says_what_a_second_import_does_and_nothing_else():
    # docs/import.md said both "not imported again ... nothing written" (Guarantees) and, at its end,
    # "Importing the same file twice creates new runs": the line left from before the check.
    doc = (Path(__file__).resolve().parents[2] / "docs" / "import.md").read_text(encoding="utf-8")
    assert "twice creates new runs" not in doc
    assert "is not imported\n  again, whatever its name now" in doc
