"""Every ``--csv`` listing writes a dict or list cell (``runs list``' labels, ``calls``' error and
flags) as canonical JSON, compact as ``--json`` holds it, and a boolean as JSON's ``true`` / ``false``
(they printed as Python's ``{'a': 1}``-like spaced JSON and ``True`` / ``False``). Both backends."""

from __future__ import annotations

import csv
import io
import json

from query_helpers import sealbox


def _rows(*args):
    out = sealbox(*args)
    assert out.returncode == 0, out.stderr
    return list(csv.DictReader(io.StringIO(out.stdout)))


def _canonical(value):
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def test_runs_list_csv_labels_compact_json_and_booleans_lower_case(recorded):
    rows = {r["run_id"]: r for r in _rows("runs", "list", "-s", str(recorded.path), "--csv")}
    as_json = {r["run_id"]: r for r in json.loads(sealbox("runs", "list", "-s", str(recorded.path), "--json").stdout)}
    c = rows[recorded.runs["C"]]
    assert c["labels"] == '{"env":"prod","team":"red"}'
    assert (c["imported"], c["altered"]) == ("false", "false")
    for run_id, row in rows.items():
        assert json.loads(row["labels"]) == as_json[run_id]["labels"]
        assert row["labels"] == _canonical(as_json[run_id]["labels"])
        assert row["imported"] in ("true", "false") and row["altered"] in ("true", "false")


def test_calls_csv_error_flags_and_ok_as_json(recorded):
    rows = _rows("calls", "-s", str(recorded.path), "--csv")
    listed = json.loads(sealbox("calls", "-s", str(recorded.path), "--json").stdout)
    assert len(rows) == len(listed)
    errors = [r for r in rows if r["error"]]
    assert errors, "the recorded store has failed calls"
    for row, want in zip(rows, listed):
        assert row["ok"] == ("" if want["ok"] is None else "true" if want["ok"] else "false")
        assert row["error"] == ("" if want["error"] is None else _canonical(want["error"]))
        assert row["flags"] == _canonical(want["flags"])
        if want["error"] is not None:
            assert ", " not in row["error"] and ": " not in row["error"][:12]
