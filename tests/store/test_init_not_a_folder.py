"""``sealbox.init_store`` / ``sealbox init`` given a path that exists but is no folder: a regular file, or a
symbolic link to a missing folder. Both were ``StoreReadOnlyError: cannot create PATH: File exists`` (the
folder's mkdir failing), which reads as a permissions problem and does not say what is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.errors import StoreError, StoreReadOnlyError

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def test_init_store_on_a_file_says_it_is_a_file(tmp_path):
    path = tmp_path / "afile"
    path.write_bytes(b"notes")
    with pytest.raises(StoreError) as caught:
        sealbox.init_store(path)
    assert not isinstance(caught.value, StoreReadOnlyError)
    assert str(caught.value) == f"{path} is a file: a store is created in a folder (give a new or empty folder's path)"
    assert path.read_bytes() == b"notes" and sorted(os.listdir(tmp_path)) == ["afile"]


def test_init_through_a_link_to_a_missing_folder_names_the_link(tmp_path):
    link = tmp_path / "store"
    link.symlink_to(tmp_path / "gone" / "store")
    with pytest.raises(StoreError) as caught:
        sealbox.init_store(link)
    message = (f"{link} is a symbolic link to a missing folder ({tmp_path / 'gone' / 'store'}): create that folder "
               f"first, or give another path")
    assert not isinstance(caught.value, StoreReadOnlyError) and str(caught.value) == message
    proc = subprocess.run([SEALBOX, "init", str(link)], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n")
    assert sorted(os.listdir(tmp_path)) == ["store"] and not (tmp_path / "gone").exists()
