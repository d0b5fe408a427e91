"""A bundle padded with a large tail of junk (here sparse zeros) is reported as such, and verify
reads the archive the bundle's own headers describe, not the junk after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bundle_helpers import cli, members, record_runs, rezip

from sealbox.interop.bundle_verify import verify_bundle

TAIL = 256 * 1024 * 1024  # sparse: no disk, but reading it all would pull 256 MiB through read(2)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tail")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip()


def _bytes_read() -> int:
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


def _padded(path: Path, target: Path, tail: int) -> int:
    data = path.read_bytes()
    target.write_bytes(data)
    os.truncate(target, len(data) + tail)
    return len(data)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc/self/io (Linux)")
def test_a_large_sparse_tail_is_reported_without_being_read(case, tmp_path):
    path, vkey = case
    size = _padded(path, tmp_path / "big.sbx", TAIL)
    before = _bytes_read()
    report = verify_bundle(tmp_path / "big.sbx", trusted_vkey=vkey)
    read = _bytes_read() - before
    assert [(p.code, p.member, p.message, p.expected, p.found) for p in report.problems] == [
        ("bundle_container", f"{TAIL} byte(s) after the end of the ZIP archive",
         f"the file differs from the canonical bundle container at byte {size}", "end of file", "0x00")]
    assert report.checkpoint_size is not None and report.events > 0  # the archive itself was checked
    assert read < 16 * 1024 * 1024, f"verify read {read} bytes of a {size}-byte bundle with a {TAIL}-byte tail"


def test_a_damaged_local_header_and_a_large_tail_find_the_end_record_without_holding_the_tail(case, tmp_path):
    path, vkey = case
    data = bytearray(path.read_bytes())
    data[data.index(b"PK\x03\x04", 4) + 3] ^= 0x01  # the second member's local header signature
    (tmp_path / "d.sbx").write_bytes(bytes(data))
    expected = [(p.code, p.member, p.expected, p.found) for p in verify_bundle(tmp_path / "d.sbx", trusted_vkey=vkey).problems]
    os.truncate(tmp_path / "d.sbx", len(data) + TAIL)
    report = verify_bundle(tmp_path / "d.sbx", trusted_vkey=vkey)
    got = [(p.code, p.member, p.expected, p.found) for p in report.problems]
    assert got == expected and got[0][1] == "ZIP local header of 'manifest.json': signature"


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc/self/io (Linux)")
def test_a_member_size_running_into_a_large_tail_is_not_read_through(case, tmp_path):
    path, vkey = case
    data = bytearray(path.read_bytes())
    at = data.index(b"events.jsonl") - 30  # its local header
    data[at + 18: at + 26] = (0x7FFFFFFF).to_bytes(4, "little") * 2  # compressed and uncompressed size: 2 GiB
    (tmp_path / "s.sbx").write_bytes(bytes(data))
    os.truncate(tmp_path / "s.sbx", len(data) + 1024)
    expected = [(p.code, p.member, p.expected, p.found) for p in verify_bundle(tmp_path / "s.sbx", trusted_vkey=vkey).problems]
    os.truncate(tmp_path / "s.sbx", len(data) + TAIL)
    before = _bytes_read()
    report = verify_bundle(tmp_path / "s.sbx", trusted_vkey=vkey)
    read = _bytes_read() - before
    got = [(p.code, p.member, p.expected, p.found) for p in report.problems]
    assert got == expected and got[0][0] == "bundle_container"
    assert read < 16 * 1024 * 1024, f"verify read {read} bytes"
