"""``verify --key <(cat log.vkey)``: the verifier key given through a named pipe (process substitution, a
secret manager writing it) was refused as "not a regular file", although the README says an input file
may be a named pipe. It is read (with the bounded wait of every piped input); a device is still refused.
Identity key files (--key-file, --admin-key) stay regular files only: their mode 0600 is checked."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import sealbox


def test_the_verifier_key_may_come_through_a_named_pipe(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    fifo = tmp_path / "vkey.fifo"
    os.mkfifo(fifo)
    key = (tmp_path / "store" / "log.vkey").read_bytes()

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(key)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", "-s", str(tmp_path / "store"), "--key",
                          str(fifo)], capture_output=True, text=True, timeout=60)
    writer.join(10)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Verified: the log is intact.")
    assert key.decode().strip() in out.stdout


def test_a_device_is_still_not_a_key_file(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", "-s", str(tmp_path / "store"), "--key",
                          "/dev/null"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("error: --key /dev/null is not a regular file")


def test_a_key_pipe_nothing_writes_to_is_one_plain_error_line(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    fifo = tmp_path / "vkey.fifo"
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", "-s", str(tmp_path / "store"), "--key",
                          str(fifo)], capture_output=True, text=True, timeout=60, env={**os.environ, "SEALBOX_PIPE_WAIT": "0.3"})
    assert out.returncode == 2
    assert out.stderr == (f"error: cannot read the key file {fifo}: it is a named pipe (FIFO) that nothing wrote to "
                          "within 0.3 s\n")
