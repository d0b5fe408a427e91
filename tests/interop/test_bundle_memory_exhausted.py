"""A bundle whose content parses into more memory than the process has is one error line, not an
internal error.

Regression (found by attacking ``sealbox verify`` with hostile files): a 60 MB bundle (well within
the archive limit) whose first event's payload is ``[{},{},...]`` (20 million empty objects, 3 bytes
each, 64 bytes each once parsed) made the check run out of memory under ``ulimit -v 1200000``:
``error: internal error: MemoryError`` (exit 70). ``verify_bundle`` now turns running out of memory
into a BundleFormatError saying so (the command: one ``error:`` line, exit 2); never "verified".
"""

from __future__ import annotations

import resource
import subprocess
import sys
import zipfile

import pytest
from bundle_helpers import cli, record_runs

from sealbox.interop.bundle import zip_bytes


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("oom")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip(), folder


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1200 << 20, 1200 << 20))


def test_running_out_of_memory_is_one_error_line(case, tmp_path):
    path, vkey, folder = case
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    n = 20_000_000
    first = b'{"event":{"kind":"x","payload":[' + b"{}," * (n - 1) + b'{}]},"leaf_index":0,"proof":[]}'
    members["events.jsonl"] = b"\n".join([first] + members["events.jsonl"].split(b"\n")[1:])
    target = tmp_path / "oom.sbx"
    target.write_bytes(zip_bytes(list(members.items())))
    size = target.stat().st_size
    p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", str(target), "--key", vkey],
                       capture_output=True, text=True, timeout=300, cwd=folder, preexec_fn=_limited)
    assert (p.returncode, p.stdout, p.stderr) == (
        2, "", f"error: {target}: the memory available ran out while checking its {size} bytes (a line may parse "
               "into far more memory than its size; give the check more memory to verify it): not verified\n")
