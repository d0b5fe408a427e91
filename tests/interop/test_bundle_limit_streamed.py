"""``--max-bundle-bytes`` / ``max_bytes`` bounds what the check holds in memory, not a bundle's size.

Before: every archive whose headers described more than the limit (256 MiB by default) was refused,
saying the check holds the bundle in memory, though a bundle exactly as ``sealbox export`` writes it
is checked a chunk at a time from the file (33c2b78): an auditor with a multi-GB export was refused by
default. Now such a bundle is verified streamed whatever its size; a bundle whose container differs
(held in memory to name what differs) is refused above the limit, saying why and what to raise. The
cheap guards stay: headers that are not canonical are refused without reading member data, a hole of
a sparse file is refused at its first chunk (NULs, which no JSON line holds), and the members kept in
memory (all but the three line members) may total at most the limit.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from bundle_helpers import cli, members, python_zip, record_runs

from sealbox.interop.bundle import BundleFormatError
from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("limit")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, *runs, "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip(), folder


def _bytes_read() -> int:
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


def test_an_exported_bundle_above_the_limit_is_verified_streamed(case):
    path, key, folder = case
    size = path.stat().st_size
    limit = size // 4  # the line members are most of it; the rest fits the limit
    report = verify_bundle(path, trusted_vkey=key, max_bytes=limit)
    assert report.ok and report.events > 0
    code, out, err = cli("verify", path, "--key", key, "--max-bundle-bytes", limit, cwd=folder)
    assert (code, err) == (0, "") and out.startswith("Verified: the bundle is intact.")


def test_a_non_canonical_container_above_the_limit_is_refused_saying_why(case, tmp_path):
    path, key, folder = case
    other = tmp_path / "other.sbx"
    other.write_bytes(python_zip(members(path)))  # the same members in Python's ZIP container
    size = other.stat().st_size
    limit = size - 1
    with pytest.raises(BundleFormatError) as info:
        verify_bundle(other, trusted_vkey=key, max_bytes=limit)
    events = len(members(path)["events.jsonl"])
    largest = max(members(path).items(), key=lambda kv: len(kv[1]))
    assert largest[0] == "events.jsonl" and len(largest[1]) == events
    expected = (f"{other}: its ZIP container is not exactly the one `sealbox export` writes, so `sealbox verify` "
                f"would check it in memory (several times its size), and its ZIP headers describe an archive of "
                f"{size} bytes (member 'events.jsonl': {events} bytes), more than the {limit} bytes it holds "
                "(give --max-bundle-bytes to allow more): not checked")
    assert str(info.value) == expected
    code, out, err = cli("verify", other, "--key", key, "--max-bundle-bytes", limit, cwd=folder)
    assert (code, out, err) == (2, "", f"error: {expected}\n")
    # within the limit it is checked in memory: the container differs, reported as a problem
    code, out, err = cli("verify", other, "--key", key, "--max-bundle-bytes", size, cwd=folder)
    assert code == 1 and err == "" and out.splitlines()[0].startswith("bundle_container")


def test_members_held_in_memory_above_the_limit_are_refused(case):
    path, key, _ = case
    held = sum(len(v) for k, v in members(path).items()
               if k not in ("events.jsonl", "blobs.jsonl", "snapshots.jsonl"))
    with pytest.raises(BundleFormatError) as info:
        verify_bundle(path, trusted_vkey=key, max_bytes=held - 1)
    assert str(info.value).startswith(
        f"{path}: its members other than events.jsonl, blobs.jsonl, snapshots.jsonl (held in memory) total more "
        f"than {held - 1} bytes, so `sealbox verify` would check it in memory")
    assert verify_bundle(path, trusted_vkey=key, max_bytes=held).ok


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc/self/io (Linux)")
def test_a_sparse_file_of_gigabytes_with_other_headers_is_refused_unread(case, tmp_path):
    """A sparse 3.75 GiB file whose headers are not canonical (a DOS date 1980-01-02), over the default
    limit: refused at the header check, none of its member data read. (One whose headers are canonical
    is refused at the first chunk of its hole: test_bundle_huge_member.)"""
    path, key, _ = case
    target = tmp_path / "sparse.sbx"
    huge = 0xF0000000
    name = b"events.jsonl"
    with target.open("wb") as f:
        f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x22, 0, huge, huge, len(name), 0) + name)
        f.seek(huge, 1)
        central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x22, 0, huge, huge,
                              len(name), 0, 0, 0, 0, 0, 0) + name
        start = 30 + len(name) + huge
        f.write(central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), start, 0))
    size = target.stat().st_size
    before = _bytes_read()
    with pytest.raises(BundleFormatError) as info:
        verify_bundle(target, trusted_vkey=key)
    assert _bytes_read() - before < 1024 * 1024
    assert str(info.value).startswith(
        f"{target}: its ZIP container is not exactly the one `sealbox export` writes, so `sealbox verify` would "
        f"check it in memory (several times its size), and its ZIP headers describe an archive of {size} bytes "
        f"(member 'events.jsonl': {huge} bytes)")
