"""``import_file(store, path, format=...)`` with a format that names no importer: it raised
ImportFormatError ("unknown import format 'bogus' …") only when the file was new; a file imported before
got the already-imported summary back, so a typo in ``format`` passed or failed depending on the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sealbox
from sealbox.interop.importers import ImportFormatError, import_file

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"
TRAJ = CORPUS / "swe-agent-traj" / "function_calling_simple.traj.json"


@pytest.mark.parametrize("fmt, shown", [("bogus", "'bogus'"), ("SWE-AGENT", "'SWE-AGENT'"), (5, "5")])
def test_an_unknown_format_is_refused_whether_or_not_the_file_was_imported(tmp_path, fmt, shown):
    store = sealbox.init_store(tmp_path / "s")
    try:
        path = tmp_path / "traj.json"
        path.write_bytes(TRAJ.read_bytes())
        message = (f"unknown import format {shown} (choose from auto, openai-agents-runstate, otlp-json, jaeger, "
                   "langfuse, swe-agent, tau-bench)")
        with pytest.raises(ImportFormatError) as new:
            import_file(store, path, format=fmt)
        assert str(new.value) == message
        first = import_file(store, path, format="swe-agent")
        assert (first.format, first.already_imported, len(first.runs)) == ("swe-agent", False, 1)
        size = store.size()
        with pytest.raises(ImportFormatError) as again:
            import_file(store, path, format=fmt)
        assert str(again.value) == message and store.size() == size
        assert json.loads(path.read_bytes()) == json.loads(TRAJ.read_bytes())
    finally:
        store.close()
