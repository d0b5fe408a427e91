"""``verify_bundle`` of a FIFO, a device or a socket is refused at once, never read or waited on.

Regression (found by attacking the verifier with hostile inputs): ``verify_bundle("pipe")`` on a named
pipe with no writer blocked in ``open`` for ever, and one with a writer would be read as a bundle
(``fstat`` says size 0 there); ``sealbox verify`` itself does not reach it for such a path, but said
``… is not a Sealbox store (it is a file; give the store's folder)`` of a FIFO or ``/dev/zero``, which
is neither. Now the API opens without blocking and refuses anything but a regular file
(BundleFormatError), and the command names what the path is, in one line, exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sealbox.interop.bundle import BundleFormatError
from sealbox.interop.bundle_verify import verify_bundle


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "case.sbx"
    os.mkfifo(fifo)
    code = ("import sys\nfrom sealbox.interop.bundle_verify import verify_bundle\n"
            "try:\n    verify_bundle(sys.argv[1])\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n")
    p = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert p.stdout == (f"BundleFormatError {fifo} is not a regular file (a FIFO): give the bundle file "
                        "itself\n"), p.stderr


@pytest.mark.parametrize("dev, what", [("/dev/zero", "a character device"), ("/dev/null", "a character device")])
def test_a_device_is_refused_by_the_api_and_the_command(tmp_path, dev, what):
    with pytest.raises(BundleFormatError) as exc:
        verify_bundle(dev)
    assert str(exc.value) == f"{dev} is not a regular file ({what}): give the bundle file itself"
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
    p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", dev], capture_output=True, text=True,
                       timeout=60, env=env, cwd=tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (
        2, "", f"error: {dev} is {what}, not a bundle file nor a store's folder\n")


def test_the_command_names_a_fifo_for_what_it_is(tmp_path):
    fifo = tmp_path / "case.sbx"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
    p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", fifo, "--trust-bundle-key"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: {fifo} is a FIFO, not a bundle file nor a "
                                                         "store's folder\n")
