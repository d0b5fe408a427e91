"""A ``--key`` file of gigabytes is refused in one line, without reading it.

Regression (found by attacking ``sealbox verify`` with hostile inputs): ``truncate -s 3G k.vkey;
sealbox verify case.sbx --key k.vkey`` read the whole file as text: ``error: internal error:
MemoryError`` (exit 70) under ``ulimit -v 2000000``, gigabytes of memory without one. A verifier key
is one short line; the key file is now read as the other small inputs (``--checkpoint``,
``--consistency``): no further than 1 MiB, and a larger one is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from bundle_helpers import record_runs


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keysize")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "export", "-s", str(store_path), runs[0], "-o",
                        str(path)], capture_output=True, text=True, timeout=120, cwd=folder)
    assert p.returncode == 0, p.stderr
    return folder, store_path, path


def _limited() -> None:  # the verifier's address space: 1.5 GiB, far below the key file's size
    resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))


def _verify(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=_limited)


@pytest.mark.parametrize("size", [3 << 30, (1 << 20) + 1])
def test_a_key_file_larger_than_1_mib_is_one_error_line(case, tmp_path, size):
    folder, store_path, path = case
    key = tmp_path / "k.vkey"
    with key.open("wb") as f:
        f.write((store_path / "log.vkey").read_bytes())
        f.truncate(size)  # the rest a hole of zeros: no disk
    p = _verify(path, "--key", key, cwd=folder)
    assert (p.returncode, p.stdout, p.stderr) == (
        2, "", f"error: the key file {key} is larger than 1 MiB: a verifier key is one line "
               "(NAME+KEYID+BASE64, as `sealbox log key` prints it)\n")


def test_the_store_s_key_file_still_verifies_under_the_memory_limit(case):
    folder, store_path, path = case
    p = _verify(path, "--key", store_path / "log.vkey", cwd=folder)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("Verified: the bundle is intact.")
