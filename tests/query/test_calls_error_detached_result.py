"""`sealbox calls --error` (and --no-error) and a failed call's ``tool.result`` whose ``kind`` column (e.g. to
``note``) or ``run_id`` column was rewritten below Sealbox, its bytes intact: the unfiltered listing showed the
call flagged altered (its result looked up by its bytes), but the filter's SQL candidate test read the call's
run's results by their kind and run_id columns, so the call was dropped (no flag, no warning, exit 0). The
candidate test now also reads the run's events of the kinds that are none of a call's, decision's or
result's (the kind index: a renamed result is one of them) and the results naming the call by their call_id
column in another run; the call is listed, flagged altered, when that result's hashed bytes say it failed.
SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json
import subprocess

import pytest
from query_helpers import SEALBOX
from test_calls_altered_events import _failing_call_store, _set_column_below_sealbox
from test_runs_altered_status import store  # noqa: F401  (the fixture)


@pytest.mark.parametrize("column, value", [("kind", "note"), ("run_id", "another-run")])
def test_an_error_filter_keeps_a_call_whose_result_kind_or_run_column_was_changed(store, column, value):
    leaf = _failing_call_store(store)
    _set_column_below_sealbox(store, leaf["tool.result", "x"], column, value)

    def listed(**filters):
        return [(r["call_id"], r["ok"], r["flags"]) for r in store.query_calls(check_altered=True, **filters)]

    assert listed() == [("kept", True, []), ("x", None, ["altered"]), ("y", False, [])]
    assert listed(error=True) == [("x", None, ["altered"]), ("y", False, [])]
    assert listed(error=True, limit=1) == [("y", False, [])]
    assert listed(error=False) == [("kept", True, [])]  # x's result says it failed
    assert [r["call_id"] for r in store.query_calls(error=True)] == ["y"]  # the API's default: the columns
    path = store.path
    store.close()

    res = subprocess.run([SEALBOX, "calls", "--json", "--error", "-s", path], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert [(r["call_id"], r["outcome"], r["flags"]) for r in json.loads(res.stdout)] == [
        ("x", "unknown", ["altered"]), ("y", "error", [])]
    assert res.stderr.startswith("warning: 1 call(s) listed hold an event changed below Sealbox")
