"""The verifier's inputs kept off the machine — the log's key, a saved checkpoint, a consistency proof —
are often saved by an editor that writes a UTF-8 byte order mark (Windows Notepad). The mark is not
part of the key or the note: `sealbox verify` reads past it, as it ignores surrounding spaces, instead
of calling the log's own key malformed or the owner's genuine checkpoint forged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sealbox
from sealbox.recorder import Recorder

SEALBOX = str(Path(sys.executable).parent / "sealbox")
BOM = "\ufeff"


def _sb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)


def _store(tmp_path: Path) -> tuple[Path, str]:
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, sealbox.policies.ALLOW_ALL).run(agent="a", principal="agent:a") as run:
        run.save_state({"x": 1})
    store.close()
    return tmp_path / "store", run.run_id


def test_a_key_file_and_a_checkpoint_file_with_a_bom_are_read_as_without_it(tmp_path):
    store, run_id = _store(tmp_path)
    key = (store / "log.vkey").read_text().strip()
    (tmp_path / "key.txt").write_text(BOM + key + "\r\n", encoding="utf-8")
    (tmp_path / "cp.txt").write_text(BOM + _sb("log", "checkpoint", "-s", str(store)).stdout, encoding="utf-8")

    out = _sb("verify", "-s", str(store), "--key", str(tmp_path / "key.txt"), "--checkpoint", str(tmp_path / "cp.txt"))
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.startswith("Verified: the log is intact.")

    assert _sb("export", run_id, "-s", str(store), "-o", str(tmp_path / "case.sbx")).returncode == 0
    proof = _sb("log", "prove", "-s", str(store), "--from-size", "1").stdout  # any valid JSON shape will do here
    (tmp_path / "proof.json").write_text(BOM + proof, encoding="utf-8")
    out = _sb("verify", str(tmp_path / "case.sbx"), "--key", str(tmp_path / "key.txt"))
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.startswith("Verified: the bundle is intact.")
    out = _sb("verify", str(tmp_path / "case.sbx"), "--key", str(tmp_path / "key.txt"),
              "--consistency", str(tmp_path / "proof.json"))
    assert "cannot read the consistency proof" not in out.stderr  # read as JSON; its sizes are verify's to judge
    assert out.stdout.count("consistency_size") == 1 and out.returncode == 1
