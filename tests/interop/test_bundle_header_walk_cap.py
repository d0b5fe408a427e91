"""The walks over a file's ZIP local headers stop where a bundle's member count does.

Found by timing ``sealbox verify`` on hostile files: ``archive_extent`` (how much of a file to read)
and ``_largest_member`` (naming the largest member of an archive over ``--max-bundle-bytes``)
walked every local header of the file, one seek and read each, with no count cap: a file of
millions of 31-byte headers took seconds per million before being refused (tens of seconds for a
few hundred MB), each walk. Both now stop after 65,535 members (``MAX_MEMBERS``: a ZIP archive
without ZIP64, as a bundle is, holds no more; the readers stop there too), and the refusal says so.
"""

from __future__ import annotations

import struct

import pytest

from sealbox.interop.bundle import MAX_MEMBERS, READ_MARGIN, BundleFormatError, archive_extent
from sealbox.interop.bundle_verify import verify_bundle

_HEADER = struct.Struct("<IHHHHHIIIHH")
FIRST = _HEADER.pack(0x04034B50, 20, 0, 0, 0, 0x21, 0, 17, 17, 6, 0) + b"format" + b"sealbox-bundle/2\n"
TINY = _HEADER.pack(0x04034B50, 20, 0, 0, 0, 0x21, 0, 0, 0, 1, 0) + b"m"  # a 31-byte member: name "m", no data
END = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0, 0, 0, 0, 0)


def _write(path, tiny: int, end: bool = False) -> bytes:
    data = FIRST + TINY * tiny + (END if end else b"")
    path.write_bytes(data)
    return data


def test_archive_extent_stops_after_the_member_limit(tmp_path):
    path = tmp_path / "many.sbx"
    data = _write(path, 200_000)
    with open(path, "rb") as f:
        n, exact = archive_extent(f, len(data))
    # the walk stops after MAX_MEMBERS + 1 members (the format member and 65,535 tiny ones), then reads a margin
    assert (n, exact) == (len(FIRST) + MAX_MEMBERS * len(TINY) + READ_MARGIN, False)
    assert n < len(data)
    report = verify_bundle(path)
    assert [(p.code, p.message) for p in report.problems] == [
        ("bundle_container", "the ZIP structure cannot be read: more than 65535 ZIP local headers (a ZIP archive "
         "without ZIP64, as a bundle is, holds at most 65535 members)")]


def test_too_large_archive_of_too_many_headers_is_refused_saying_so(tmp_path):
    path = tmp_path / "many.sbx"
    data = _write(path, 200_000, end=True)
    with pytest.raises(BundleFormatError) as e:
        verify_bundle(path, max_bytes=100_000)
    assert str(e.value) == (
        f"{path}: its ZIP container is not exactly the one `sealbox export` writes, so `sealbox verify` would "
        f"check it in memory (several times its size), and its ZIP headers describe an archive of {len(data)} "
        "bytes in more than 65535 members (a bundle, a ZIP archive without ZIP64, holds at most 65535), more than "
        "the 100000 bytes it holds (give --max-bundle-bytes to allow more): not checked")


def test_too_large_archive_within_the_member_limit_names_its_largest_member(tmp_path):
    path = tmp_path / "few.sbx"
    data = _write(path, MAX_MEMBERS - 1, end=True)  # 65,535 members: as many as a bundle may hold
    with pytest.raises(BundleFormatError) as e:
        verify_bundle(path, max_bytes=100_000)
    assert str(e.value) == (
        f"{path}: its ZIP container is not exactly the one `sealbox export` writes, so `sealbox verify` would "
        f"check it in memory (several times its size), and its ZIP headers describe an archive of {len(data)} "
        "bytes (member 'format': 17 bytes), more than the 100000 bytes it holds (give --max-bundle-bytes to allow "
        "more): not checked")
