"""`sealbox export -o FILE` replaced whatever FILE was (a report, notes, someone's evidence) without a
word. It now replaces only a previous Sealbox bundle (re-exporting to the same name) or an empty file;
any other existing file is refused with one error line, before the store is opened (no checkpoint is
signed), unless --force is given."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import zipfile

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
        run.call_tool("fs", "read", {"path": "/tmp/x"}, lambda path: "ok")
    store.close()
    return path


def _checkpoints(path):
    db = sqlite3.connect(path / "sealbox.db")
    try:
        return db.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    finally:
        db.close()


def test_export_refuses_to_replace_a_file_that_is_not_a_bundle(store_path, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my incident notes\n")
    size = _checkpoints(store_path)
    out = sb("export", "-o", notes, "-s", store_path)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", (
        f"error: cannot write {notes}: it exists and is not a Sealbox bundle (give --force to replace it; "
        "nothing was written)\n"))
    assert notes.read_bytes() == b"my incident notes\n"
    assert _checkpoints(store_path) == size  # refused before the store was opened: nothing signed
    forced = sb("export", "-o", notes, "--force", "-s", store_path)
    assert forced.returncode == 0, forced.stderr
    assert _checkpoints(store_path) == size + 1  # (an export signs one)
    assert zipfile.ZipFile(notes).read("format") == b"sealbox-bundle/2\n"


def test_export_replaces_a_previous_bundle_and_an_empty_file(store_path, tmp_path):
    bundle = tmp_path / "case.sbx"
    assert sb("export", "-o", bundle, "-s", store_path).returncode == 0
    again = sb("export", "-o", bundle, "-s", store_path)  # re-exporting to the same name, as before
    assert again.returncode == 0 and again.stdout.startswith(f"Wrote {bundle}: "), again.stderr
    empty = tmp_path / "empty.sbx"
    empty.write_bytes(b"")  # e.g. made by mktemp: nothing to lose
    assert sb("export", "-o", empty, "-s", store_path).returncode == 0
    assert zipfile.ZipFile(empty).read("format") == b"sealbox-bundle/2\n"


def test_export_force_goes_with_a_file(store_path, tmp_path):
    out = sb("export", "--otlp", "http://127.0.0.1:9/", "--force", "-s", store_path)
    assert (out.returncode, out.stderr) == (2, "error: --force goes with -o or --parquet (a file)\n")
