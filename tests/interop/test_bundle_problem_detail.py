"""A problem line shows only what verification has: ``(found X)`` when there is no single expected
value, never ``(expected None, found X)``; blobs out of order name the hash the line had to be above.

Regression (found auditing ``sealbox verify`` with tampered bundles): two blob lines swapped printed
``bundle_order [blobs.jsonl line 2]: lines are not in strictly increasing order of their hash
(expected None, found sha256:…)``, and a second ``sealbox-export/v1`` line in the checkpoint
``export_digest_malformed [checkpoint]: … (expected None, found …)``: Python's spelling of nothing."""

from __future__ import annotations

import pytest
from bundle_helpers import cli, members, record_runs, rezip

from sealbox.interop.bundle_verify import verify_bundle
from sealbox.verify import Problem


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("detail")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path


def test_a_problem_line_shows_only_the_side_it_has():
    assert Problem("c", "m", found="x").line() == "c: m (found x)"
    assert Problem("c", "m", expected="y").line() == "c: m (expected y)"
    assert Problem("c", "m", expected="y", found="x").line() == "c: m (expected y, found x)"
    assert Problem("c", "m").line() == "c: m"


def test_blob_lines_out_of_order_name_the_hash_to_be_above(case, tmp_path):
    m = members(case)
    lines = m["blobs.jsonl"].splitlines(keepends=True)
    assert len(lines) >= 2
    refs = [line.rsplit(b'"ref":"', 1)[1][:71].decode() for line in lines]
    lines[0], lines[1] = lines[1], lines[0]
    m["blobs.jsonl"] = b"".join(lines)
    rezip(tmp_path / "b.sbx", m)
    [order] = [p for p in verify_bundle(tmp_path / "b.sbx").problems if p.code == "bundle_order"]
    assert order.line() == ("bundle_order [blobs.jsonl line 2]: lines are not in strictly increasing order of "
                            f"their hash (expected a hash above {refs[1]}, found {refs[0]})")
