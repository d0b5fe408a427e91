"""A bundle whose own headers consistently describe a member of gigabytes is refused before it is read.

Regression (found by attacking ``sealbox verify`` with a hostile file): a sparse 3.75 GiB file whose
local header, central directory and end record all agree on a 3.75 GiB ``events.jsonl`` passed every
bound of the reader (the member fits in the file), so ``verify`` read the whole archive into memory:
``error: internal error: MemoryError`` under ``ulimit -v 2000000``, and without a limit gigabytes of
RAM (the check holds several copies) for a file that costs no disk. A verifier holds the archive in
memory, so it now refuses an archive larger than ``MAX_BUNDLE_BYTES`` (256 MiB unless ``max_bytes`` /
``--max-bundle-bytes`` says otherwise) from its headers alone, in one line, before reading it into memory.
A canonical container is since checked streamed whatever its size: this one's headers are canonical, and
the streamed pass refuses it at the first chunk of its hole (NULs, which no JSON line holds).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from bundle_helpers import cli, record_runs

from sealbox.interop.bundle import BundleFormatError
from sealbox.interop.bundle_verify import MAX_BUNDLE_BYTES, verify_bundle

HUGE = 0xF0000000  # the events member: 3.75 GiB of zeros, a hole in a sparse file


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("huge")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip(), folder


def _sparse_bundle(source: Path, target: Path, size: int) -> int:
    """``source``'s members in the canonical container, ``events.jsonl`` replaced by ``size`` zero bytes
    left as a hole: every header agrees with every other. Returns the file's size."""
    with zipfile.ZipFile(source) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    central, pos = [], 0
    with target.open("wb") as f:
        for name, data in members:
            n, crc = (size, 0) if name == "events.jsonl" else (len(data), zlib.crc32(data))
            head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, n, n, len(name), 0) + name.encode()
            f.write(head)
            central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, n, n,
                                       len(name), 0, 0, 0, 0, 0, pos) + name.encode())
            pos += len(head) + n
            if name == "events.jsonl":
                f.seek(pos)
            else:
                f.write(data)
        directory = b"".join(central)
        f.write(directory + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central),
                                        len(directory), pos, 0))
    return pos + len(directory) + 22


def _bytes_read() -> int:
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc/self/io (Linux)")
def test_an_archive_of_gigabytes_is_refused_from_its_headers(case, tmp_path):
    path, vkey, _ = case
    target = tmp_path / "huge.sbx"
    size = _sparse_bundle(path, target, HUGE)
    before = _bytes_read()
    with pytest.raises(BundleFormatError) as info:
        verify_bundle(target, trusted_vkey=vkey)
    assert _bytes_read() - before < 16 * 1024 * 1024
    assert str(info.value) == (
        f"{target}: its member 'events.jsonl' holds a NUL byte (no line of canonical JSON does), so `sealbox "
        f"verify` would check it in memory (several times its size), and its ZIP headers describe an archive of "
        f"{size} bytes (member 'events.jsonl': {HUGE} bytes), more than the {MAX_BUNDLE_BYTES} bytes it holds "
        "(give --max-bundle-bytes to allow more): not checked")


def test_the_command_says_so_in_one_line_and_a_larger_limit_reads_it(case, tmp_path):
    path, vkey, folder = case
    target = tmp_path / "huge.sbx"
    size = _sparse_bundle(path, target, 5 * 1024 * 1024)  # 5 MiB: cheap to read when allowed
    code, out, err = cli("verify", target, "--key", vkey, "--max-bundle-bytes", 4 * 1024 * 1024, cwd=folder)
    assert (code, out) == (2, "")
    assert err == (f"error: {target}: its member 'events.jsonl' holds a NUL byte (no line of canonical JSON does), "
                   f"so `sealbox verify` would check it in memory (several times its size), and its ZIP headers "
                   f"describe an archive of {size} bytes (member 'events.jsonl': {5 * 1024 * 1024} bytes), more "
                   f"than the {4 * 1024 * 1024} bytes it holds (give --max-bundle-bytes to allow more): not checked\n")
    # within the limit it is read and checked: the zeros are no events.jsonl (a problem, exit 1)
    code, out, err = cli("verify", target, "--key", vkey, cwd=folder)
    assert code == 1 and err == ""
    assert out.splitlines()[0].startswith("bundle_container [ZIP local header of 'events.jsonl': CRC-32]")


def test_a_genuine_bundle_still_verifies_under_a_limit_it_fits(case):
    path, vkey, _ = case
    assert verify_bundle(path, trusted_vkey=vkey, max_bytes=path.stat().st_size).ok
    with pytest.raises(BundleFormatError, match="more than the 100 bytes"):
        verify_bundle(path, trusted_vkey=vkey, max_bytes=100)
