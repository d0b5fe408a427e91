"""`runs show`, `calls --run`, `report` and the `access` commands echoed an unknown id in full in their
"no run …" / "no grant …" error (a pasted file: one line as long as the file), where `approvals` cut it
(30d2b80). They now echo it as `approvals` does (sealbox.approvals.shown_id): its first 40 characters and
`…`; a short id is echoed whole, as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox
from sealbox.access import AccessError, grant_status, show_grant
from sealbox.errors import StoreError
from sealbox.report import build_report

LONG = "run_" + "x" * 100_000
CUT = f"'{LONG[:40]}…'"


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("ids") / "store"
    sealbox.init_store(p).close()
    return p


@pytest.mark.parametrize("args, what", [
    (("runs", "show", LONG), "no run"),
    (("calls", "--run", LONG), "no run"),
    (("report", LONG), "no run"),
    (("access", "show", LONG), "no grant"),
])
def test_a_long_unknown_id_is_cut_in_the_error_line(path, args, what):
    out = sb(*args, "-s", path)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith(f"error: {what} {CUT} in this store") and out.stderr.count("\n") == 1, out.stderr[:300]
    assert len(out.stderr) < 200


def test_a_short_unknown_id_is_echoed_whole(path):
    out = sb("runs", "show", "run_nope", "-s", path)
    assert (out.returncode, out.stderr) == (2, "error: no run 'run_nope' in this store\n")


def test_the_api_errors_cut_the_id_too(path):
    store = sealbox.open_store(path)
    try:
        with pytest.raises(AccessError) as access:
            show_grant(store, LONG)
        assert str(access.value) == f"no grant {CUT} in this store (see `sealbox access list`)"
        assert grant_status(store, LONG, "agent:bot", "db", "q") == (False, f"no grant {CUT} in this store")
        with pytest.raises(StoreError) as report:
            build_report(store, LONG, verify=False)
        assert str(report.value) == f"no run {CUT} in this store"
    finally:
        store.close()
