"""A key, checkpoint, proof or snapshot file that is not UTF-8 text (a binary file given by mistake, a
UTF-16 export) was refused with Python's codec message: "cannot read the key file F: 'utf-8' codec can't
decode byte 0xff in position 0: invalid start byte"; a gateway config the same ("F: cannot read: 'utf-8' codec
..."). It now says what is wrong in the terms the policy and
identity-key files use: "F is not UTF-8 text (byte N)", one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("nonutf8")
    store = sealbox.init_store(root / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.note("one")
    store.close()
    (root / "bin").write_bytes(b"\xff\xfe\x00binary")
    (root / "late").write_bytes(b'{"a": "\xff"}')
    checkpoint = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "log", "checkpoint", "-s", str(root / "store")],
                                capture_output=True, text=True, check=True).stdout
    (root / "cp").write_text(checkpoint)
    return root, run.run_id


CASES = [
    (["verify", "-s", "STORE", "--key", "BIN"], "BIN is not UTF-8 text (byte 0)"),
    (["verify", "-s", "STORE", "--checkpoint", "BIN"], "BIN is not UTF-8 text (byte 0)"),
    (["log", "verify-consistency", "--key", "STORE/log.vkey", "CP", "CP", "BIN"], "BIN is not UTF-8 text (byte 0)"),
    (["log", "verify-consistency", "--key", "STORE/log.vkey", "BIN", "CP", "CP"], "BIN is not UTF-8 text (byte 0)"),
    (["replay", "RUN", "--agent", "os:getcwd", "--snapshot", "LATE", "-s", "STORE"], "LATE is not UTF-8 text (byte 7)"),
    # a gateway config (sealbox.gateway.load_config, so every gateway command): "F: cannot read: 'utf-8' codec ..."
    (["gateway", "check", "-c", "BIN"], "error: BIN is not UTF-8 text (byte 0)\n"),
    (["gateway", "serve", "-c", "LATE"], "error: LATE is not UTF-8 text (byte 7)\n"),
]


@pytest.mark.parametrize("args, expected", CASES, ids=[" ".join(c[0][:2]) + f" {i}" for i, c in enumerate(CASES)])
def test_a_file_that_is_not_utf8_is_one_plain_error_line(setup, args, expected):
    root, run_id = setup
    names = {"STORE": str(root / "store"), "BIN": str(root / "bin"), "CP": str(root / "cp"), "LATE": str(root / "late"),
             "RUN": run_id}

    def fill(text):
        for k, v in names.items():
            text = text.replace(k, v)
        return text

    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(fill, args)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr
    assert fill(expected) in out.stderr, out.stderr
    assert "codec" not in out.stderr
