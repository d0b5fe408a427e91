"""The store folder's ``checkpoint`` and ``log.vkey`` holding bytes that are not UTF-8, or replaced by
a directory: every command says so in one line (or verify reports it), never "internal error:
UnicodeDecodeError / IsADirectoryError" (exit 70); a writer refuses to record, and the tool does not run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.errors import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SEALBOX = Path(sys.executable).parent / "sealbox"
GARBAGE = bytes.fromhex("fa87b6d3") * 40  # not UTF-8 from its first byte


def store_with_one_call(folder: Path) -> Path:
    store = sealbox.init_store(folder)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("srv", "t", {"n": 1}, lambda n: n)
    store.close()
    return folder


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SEALBOX), *args], capture_output=True, text=True)


def replace_with_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


def test_a_checkpoint_file_of_garbage_bytes(tmp_path):
    folder = store_with_one_call(tmp_path / "s")
    (folder / "checkpoint").write_bytes(GARBAGE)
    for args in (["runs", "list", "--store", str(folder)], ["calls", "--store", str(folder)]):
        res = run_cli(*args)
        assert (res.returncode, res.stderr) == (0, ""), res.stderr
    res = run_cli("verify", str(folder))
    assert res.returncode == 1 and res.stderr == "", res.stdout + res.stderr
    assert "checkpoint_signature: the newest checkpoint file is not validly signed" in res.stdout
    store = sealbox.open_store(folder)
    ran = []
    with pytest.raises(RecordingError, match="checkpoint does not hold a checkpoint"):
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("srv", "t", {"n": 2}, lambda n: ran.append(n))
    assert ran == []
    store.close()


def test_a_checkpoint_file_replaced_by_a_directory(tmp_path):
    folder = store_with_one_call(tmp_path / "s")
    replace_with_dir(folder / "checkpoint")
    res = run_cli("calls", "--store", str(folder))
    assert (res.returncode, res.stderr) == (0, ""), res.stderr
    res = run_cli("verify", str(folder))
    assert (res.returncode, res.stderr.splitlines()) == (2, [f"error: cannot read {folder / 'checkpoint'}: "
                                                             f"{os.strerror(21)}"]), res.stderr


def test_a_pinned_key_of_garbage_bytes_or_a_directory(tmp_path):
    folder = store_with_one_call(tmp_path / "s")
    (folder / "log.vkey").write_bytes(GARBAGE)
    res = run_cli("verify", str(folder))
    assert (res.returncode, res.stderr.splitlines()) == (2, [
        f"error: {folder / 'log.vkey'}: malformed verifier key (a verifier key is NAME+KEYID+BASE64, as "
        "`sealbox init` printed it)"]), res.stderr
    replace_with_dir(folder / "log.vkey")
    res = run_cli("verify", str(folder))
    assert (res.returncode, res.stderr.splitlines()) == (2, [f"error: cannot read {folder / 'log.vkey'}: "
                                                             f"{os.strerror(21)}"]), res.stderr
