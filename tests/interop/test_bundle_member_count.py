"""A file of more local headers than a ZIP archive can count is a container problem, not a crash.

Regression (found by attacking ``sealbox verify`` with hostile files): a file of 70,000 stored
members, walked through their local headers, made the container check rebuild a ZIP whose end record
cannot count them: ``struct.error: ushort format requires 0 <= number <= 65535`` out of
``verify_bundle`` (which never raises on a file's content), ``internal error`` from the command. The
local-header reader now stops at 65,535 members, as a ZIP without ZIP64 (a bundle) holds no more.
"""

from __future__ import annotations

import struct

from sealbox.interop.bundle_verify import verify_bundle


def test_70000_members_are_one_container_problem(tmp_path):
    out = bytearray()
    for name, data in [("format", b"sealbox-bundle/2\n")] + [(f"m{i}", b"") for i in range(70_000)]:
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, 0, len(data), len(data), len(name), 0)
        out += name.encode() + data
    path = tmp_path / "many.sbx"
    path.write_bytes(bytes(out))
    report = verify_bundle(path)
    assert [(p.code, p.member, p.message) for p in report.problems] == [
        ("bundle_container", "the ZIP container", "the ZIP structure cannot be read: more than 65535 ZIP local "
         "headers (a ZIP archive without ZIP64, as a bundle is, holds at most 65535 members)")]
    assert not report.ok
