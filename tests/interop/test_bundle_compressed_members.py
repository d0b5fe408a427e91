"""A bundle whose members are compressed (re-zipped with deflate after export) is one ``bundle_container``
problem naming the compressed members; no member is then checked, so none is reported as wrong.

Regression (an auditor's report): the first problem was right (``ZIP local header of 'format': method …
found 0x08``), but ~40 more followed from reading the compressed bytes as stored (``bundle_format``,
``bundle_key … not ASCII``, ``checkpoint … not UTF-8 text``, a ``bundle_line_malformed`` per line,
``bundle_manifest``): noise, none of it about the bundle's content. A bundle's members are stored
(docs/bundle-format.md, Container), so their bytes in such a file are not their content."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from bundle_helpers import cli, members, record_runs

from sealbox.interop.bundle_verify import verify_bundle

NOT_CHECKED = ("so no member was checked (a bundle re-zipped after export, e.g. by an archive or mail tool: verify "
               "the file `sealbox export` wrote)")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deflated")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return folder, path, store_path


def _zip(m: dict[str, bytes], deflated: set[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in m.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # the canonical header's time and date
            info.compress_type = zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED
            z.writestr(info, data)
    return buf.getvalue()


def test_a_bundle_rezipped_with_deflate_is_one_problem(case, tmp_path):
    folder, path, store_path = case
    m = members(path)
    bad = tmp_path / "deflated.sbx"
    bad.write_bytes(_zip(m, set(m)))
    code, out, err = cli("verify", bad, "--key", store_path / "log.vkey", cwd=folder)
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "bundle_container [ZIP local header of 'format': method]: the file differs from the canonical bundle "
        "container at byte 8: its members 'format', 'manifest.json', 'checkpoint', 'log.vkey', 'events.jsonl', "
        "'blobs.jsonl', 'snapshots.jsonl' are compressed (method 8: deflate), but a bundle's members are stored "
        f"(method 0), {NOT_CHECKED} (expected 0x00, found 0x08)",
        out.splitlines()[1],
        "The key you gave (--key) was not used: no member of the bundle was checked (they are compressed), its "
        "checkpoint included.",
    ]
    assert out.splitlines()[1].startswith("NOT VERIFIED: 1 problem(s) found. 0 events in 0 runs")
    doc = json.loads(cli("verify", bad, "--key", store_path / "log.vkey", "--json", cwd=folder)[1])
    assert [p["code"] for p in doc["problems"]] == ["bundle_container"] and doc["status"] == "problems"


def test_one_deflated_member_is_named_and_nothing_else_is_reported(case, tmp_path):
    folder, path, _ = case
    m = members(path)
    bad = tmp_path / "one.sbx"
    bad.write_bytes(_zip(m, {"events.jsonl"}))
    report = verify_bundle(bad)
    [problem] = report.problems
    assert problem.code == "bundle_container" and problem.member == "ZIP local header of 'events.jsonl': method"
    assert problem.message.endswith(": its member 'events.jsonl' is compressed (method 8: deflate), but a bundle's "
                                    f"members are stored (method 0), {NOT_CHECKED}")
    assert report.unreadable and report.events == 0


def test_the_same_members_stored_by_zipfile_are_checked_as_before(case, tmp_path):
    """Not every non-canonical container stops the checks: a stored one is read and its members checked."""
    folder, path, store_path = case
    m = members(path)
    other = tmp_path / "stored.sbx"
    other.write_bytes(_zip(m, set()))
    report = verify_bundle(other, trusted_vkey=(store_path / "log.vkey").read_text().strip())
    assert [p.code for p in report.problems] == ["bundle_container"]
    assert "compressed" not in report.problems[0].message and report.events == 14 and not report.unreadable
