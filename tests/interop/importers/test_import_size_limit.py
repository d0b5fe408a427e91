"""A file larger than import holds in memory is refused in one line, before it is read whole.

Regression (found by attacking ``sealbox import`` with hostile files): ``truncate -s 3G sparse.json;
sealbox import sparse.json`` (a sparse file: no disk) read all 3 GiB into memory and then decoded it,
``error: internal error: MemoryError`` (exit 70) under ``ulimit -v 2000000``, and without a limit ate
the machine's memory; so did a pipe that never ends (``<(cat /dev/zero)``). Import holds the file, its
text and its parsed JSON in memory, so it now refuses a file larger than ``MAX_IMPORT_BYTES`` (256 MiB
unless ``max_bytes`` / ``--max-file-bytes`` says otherwise): by its size before reading, or once a
pipe has given more.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from import_helpers import corpus

from sealbox.interop.importers import MAX_IMPORT_BYTES, ImportFormatError, parse_file

TAU = "tau-bench-openai-messages/gpt-4o-airline.subset-0-1-3-6-11.json"


def _sb(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300, **kw)


def _bytes_read() -> int:
    return int(next(line.split()[1] for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc/self/io (Linux)")
def test_a_file_of_gigabytes_is_refused_by_its_size_before_it_is_read(tmp_path):
    big = tmp_path / "sparse.json"
    with big.open("wb") as f:
        f.truncate(3 << 30)  # 3 GiB hole
    before = _bytes_read()
    with pytest.raises(ImportFormatError) as exc:
        parse_file(big)
    assert _bytes_read() - before < 1 << 20
    assert str(exc.value) == (f"{big} is {3 << 30} bytes, more than the {MAX_IMPORT_BYTES} bytes import reads (it "
                              "holds the file and its parsed JSON in memory; give --max-file-bytes to allow more); "
                              "nothing was imported")


def test_a_pipe_that_never_ends_is_read_no_further_than_the_limit(tmp_path):
    r, w = os.pipe()
    writer = subprocess.Popen(["cat", "/dev/zero"], stdout=w)
    os.close(w)
    try:
        with pytest.raises(ImportFormatError) as exc:
            parse_file(f"/dev/fd/{r}", max_bytes=4 << 20)
    finally:
        writer.kill()
        writer.wait()
        os.close(r)
    assert str(exc.value) == (f"/dev/fd/{r} is more than the {4 << 20} bytes import reads (it holds the file and "
                              "its parsed JSON in memory; give --max-file-bytes to allow more); nothing was imported")


def test_the_command_refuses_in_one_line_and_a_larger_limit_imports(tmp_path):
    st = tmp_path / "s"
    assert _sb("init", st).returncode == 0
    data = corpus(TAU).read_bytes()
    f = tmp_path / "tau.json"
    f.write_bytes(data)
    bad = _sb("import", "-s", st, f, "--max-file-bytes", len(data) - 1)
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        2, "", f"error: {f} is {len(data)} bytes, more than the {len(data) - 1} bytes import reads (it holds the "
               "file and its parsed JSON in memory; give --max-file-bytes to allow more); nothing was imported\n")
    ok = _sb("import", "-s", st, f, "--max-file-bytes", len(data))
    assert ok.returncode == 0 and ok.stdout.startswith("imported 5 run(s), ")
