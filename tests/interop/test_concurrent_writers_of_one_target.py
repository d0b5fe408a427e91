"""Two writers of one output file (two `sealbox export -o same.sbx`, two `report -o`) at once: the
one to finish second used to rename its file over the first's silently, so the first printed
"Wrote same.sbx: …" about a file that was no longer there. Now the first to finish wins and the other
fails with one error line, nothing written; whatever is on disk is always one whole file."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sealbox
from sealbox.interop.bundle import BundleError, open_target
from sealbox.recorder import Recorder


def test_the_second_writer_to_finish_fails_and_the_first_file_stays(tmp_path) -> None:
    path = tmp_path / "same.sbx"
    first, second = open_target(path), open_target(path)
    first.commit(b"first whole file")
    with pytest.raises(BundleError) as info:
        second.commit(b"second whole file")
    assert str(info.value) == (f"cannot write {path}: another process wrote it while this one was writing "
                               "(nothing was written; run the command again to replace it)")
    assert path.read_bytes() == b"first whole file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.sbx"]  # no temporary file left


def test_a_target_replaced_by_another_writer_meanwhile_is_not_overwritten(tmp_path) -> None:
    path = tmp_path / "same.sbx"
    path.write_bytes(b"old export")
    mine, theirs = open_target(path), open_target(path)
    theirs.commit(b"their new export")
    with pytest.raises(BundleError):
        mine.commit(b"my new export")
    assert path.read_bytes() == b"their new export"


def test_writers_one_after_the_other_each_replace_the_file(tmp_path) -> None:
    path = tmp_path / "same.sbx"
    for data in (b"one", b"two", b"three"):
        with open_target(path) as target:
            target.commit(data)
        assert path.read_bytes() == data


def sb(*args):
    return subprocess.Popen([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_concurrent_cli_exports_leave_one_verifiable_bundle(tmp_path) -> None:
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        run.note("hello")
    store.close()
    vkey = (tmp_path / "s" / "log.vkey").read_text().strip()
    out = tmp_path / "same.sbx"
    procs = [sb("export", run.run_id, "-o", out, "-s", tmp_path / "s") for _ in range(3)]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
    for code, stdout, stderr in results:
        if code == 0:
            assert stdout.startswith(f"Wrote {out}: ") and stderr == ""
        else:
            assert (code, stdout) == (2, "") and stderr == (
                f"error: cannot write {out}: another process wrote it while this one was writing (nothing was "
                "written; run the command again to replace it)\n")
    assert any(code == 0 for code, _, _ in results)
    verified = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "verify", out, "--key", vkey],
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "same.sbx"]
