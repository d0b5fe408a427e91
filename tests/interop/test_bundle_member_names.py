"""A member whose name is not ASCII (UTF-8 ``café.txt``, or bytes that are no text at all) is one
``bundle_member_unknown`` naming its bytes, and everything else of the bundle is still checked.

Regression (found auditing ``sealbox verify`` with hostile files): both ZIP readers decoded names as
strict ASCII, so a bundle with one such extra member, a well-formed ZIP, was reported as ``the ZIP
structure cannot be read: no ZIP local header at byte N and no readable ZIP end of central directory
record``, wrong about the file, and no member (events, checkpoint) was checked at all."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from bundle_helpers import cli, members, python_zip, record_runs

from sealbox.interop.bundle_verify import verify_bundle


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("names")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, store_path / "log.vkey"


def _canonical_zip(entries: list[tuple[bytes, bytes]]) -> bytes:
    """The canonical container (docs/bundle-format.md) of members given by their raw name bytes."""
    out, central = bytearray(), bytearray()
    for name, data in entries:
        crc, offset = zlib.crc32(data), len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, len(data), len(data), len(name), 0)
        out += name + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, len(data), len(data),
                               len(name), 0, 0, 0, 0, 0, offset) + name
    start = len(out)
    return bytes(out + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
                                              len(central), start, 0))


@pytest.mark.parametrize("raw", ["café.txt".encode(), b"\xff\xfe"])
def test_a_member_with_a_non_ascii_name_is_named_and_the_rest_is_checked(case, tmp_path, raw):
    path, vkey = case
    m = members(path)
    events = len(m["events.jsonl"].splitlines())
    bad = tmp_path / "bad.sbx"
    bad.write_bytes(_canonical_zip([(n.encode(), d) for n, d in m.items()] + [(raw, b"trust me\n")]))
    report = verify_bundle(bad, trusted_vkey=vkey.read_text().strip())
    shown = repr(raw)
    assert [(p.code, p.member, p.message) for p in report.problems] == [
        ("bundle_member_unknown", shown, f"member {shown} (a name that is not ASCII) is not part of the format")]
    assert report.events + report.system_events == events
    code, out, err = cli("verify", bad, "--key", vkey, "--json", cwd=tmp_path)
    assert (code, err) == (1, "")
    assert [(p["code"], p["member"]) for p in json.loads(out)["problems"]] == [("bundle_member_unknown", shown)]


def test_a_utf8_name_written_by_another_zip_tool_is_named_too(case, tmp_path):
    m = members(case[0])
    m["café.txt"] = b"trust me\n"  # Python's zipfile sets the UTF-8 flag (bit 11) for it
    bad = tmp_path / "bad.sbx"
    bad.write_bytes(python_zip(m))
    report = verify_bundle(bad, trusted_vkey=case[1].read_text().strip())
    codes = [(p.code, p.member) for p in report.problems]
    assert codes[0][0] == "bundle_container" and "ZIP local header of 'format'" in codes[0][1]
    assert codes[1:] == [("bundle_member_unknown", repr("café.txt".encode()))]
