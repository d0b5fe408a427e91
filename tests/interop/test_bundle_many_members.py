"""A bundle of tens of thousands of members is checked in time linear in its size, and reported
in a bounded number of lines.

Regression (found by attacking ``sealbox verify`` with hostile files): the container check counted
each member's name in the list of all names (``names.count``, quadratic), so a 6 MB file of 60,000
``events.jsonl`` members took about 2 minutes (the most a ZIP can count, 65,535, longer still), and it printed one ``bundle_member_unknown`` line per copy (and every name in one
``bundle_member_order`` line). Each name is now counted once and reported once (``repeated N
times``), at most 20 names are listed, and the order problem names at most 20 members.
"""

from __future__ import annotations

import struct
import subprocess
import sys

from sealbox.interop.bundle_verify import verify_bundle


def _local_only(members: list[tuple[str, bytes]]) -> bytes:
    """Stored ZIP local headers and data, no central directory: the reader walks the local headers."""
    out = bytearray()
    for name, data in members:
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, 0, len(data), len(data), len(name), 0)
        out += name.encode() + data
    return bytes(out)


def test_65000_copies_of_one_member_are_one_problem_and_checked_in_linear_time(tmp_path):
    path = tmp_path / "many.sbx"
    path.write_bytes(_local_only([("format", b"sealbox-bundle/2\n")] + [("events.jsonl", b"")] * 65_000))
    code = ("import sys\nfrom sealbox.interop.bundle_verify import verify_bundle\n"
            "r = verify_bundle(sys.argv[1])\n"
            "print([(p.code, p.member, p.message) for p in r.problems if p.code == 'bundle_member_unknown'])\n")
    # a minute is far more than the linear check needs, and far less than the quadratic one took
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert p.stdout == str([("bundle_member_unknown", "events.jsonl",
                             "member 'events.jsonl' is repeated (65000 times)")]) + "\n", p.stderr


def test_many_unknown_members_are_listed_up_to_20(tmp_path):
    path = tmp_path / "many.sbx"
    names = [f"m{i}" for i in range(30)]  # and log.vkey twice: 31 names to report
    path.write_bytes(_local_only([("format", b"sealbox-bundle/2\n"), *[(n, b"") for n in names],
                                  ("log.vkey", b""), ("log.vkey", b"")]))
    report = verify_bundle(path)
    unknown = [(p.member, p.message) for p in report.problems if p.code == "bundle_member_unknown"]
    assert unknown == ([(n, f"member {n!r} is not part of the format") for n in names[:19]]
                       + [("the ZIP container", "12 more members are not part of the format or are repeated")])
    [order] = [p for p in report.problems if p.code == "bundle_member_order"]
    assert order.found == "format, " + ", ".join(names[:19]) + ", … (33 members)"
