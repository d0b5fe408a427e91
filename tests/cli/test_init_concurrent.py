"""Two ``sealbox init DIR`` at once: the one that came second said "DIR holds a file sealbox.db that is
not a Sealbox store (an empty database)" (it looked at the first one's database before its schema was
written), "DIR/sealbox.db is a file created meanwhile" or "DIR holds a log.key but no sealbox.db", though
the store the first one made is fine. Inits of a folder now take a lock (``flock`` on its parent folder):
the second waits for the first, then says the folder already holds a Sealbox store that another init
created meanwhile. The first init is held part-way (after its empty database is created) by a real
process whose ``_write_private`` (writing log.key, just after the database file is created) waits for a
file the test writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import sealbox

SEALBOX = Path(sys.executable).parent / "sealbox"
HELD_INIT = textwrap.dedent("""
    import os, sys, time
    from sealbox.store import sqlite
    write, go = sqlite._write_private, sys.argv[2]
    def held(*args, **kwargs):  # the signing key's file: written just after the (empty) database is created
        while not os.path.exists(go):
            time.sleep(0.01)
        return write(*args, **kwargs)
    sqlite._write_private = held
    sys.argv = ["sealbox", "init", sys.argv[1]]
    from _sealbox_cli import main
    main()
""")


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)


def _waiting_or_done(proc: subprocess.Popen, parent: Path) -> None:
    """Until ``proc`` holds the folder's parent open (the lock it waits on: a link in /proc/PID/fd) or has
    ended."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if any(os.readlink(fd) == str(parent) for fd in Path(f"/proc/{proc.pid}/fd").iterdir()):
                return
        except OSError:  # an fd closed while looked at
            pass
        time.sleep(0.01)


def test_a_second_init_of_a_folder_being_created_says_another_init_made_it(tmp_path):
    folder, go = tmp_path / "st", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", HELD_INIT, str(folder), str(go)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    _wait_for(folder / "sealbox.db", first)  # the first init is part-way: its empty database made, no schema
    second = subprocess.Popen([str(SEALBOX), "init", str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    _waiting_or_done(second, tmp_path.resolve())  # before: it answered at once; now it waits for the first's lock
    go.write_text("")
    out1, err1 = first.communicate(timeout=120)
    out2, err2 = second.communicate(timeout=120)
    assert (first.returncode, err1) == (0, ""), err1
    assert out1.startswith(f"Created a Sealbox store in {folder}\n")
    assert (second.returncode, out2, err2) == (
        2, "", f"error: {folder} already holds a Sealbox store (another init created it meanwhile)\n")
    with sealbox.open_store(folder) as store:
        assert sealbox.verify_store(store).ok


def test_an_init_of_a_folder_holding_a_store_says_so_as_before(tmp_path):
    folder = tmp_path / "st"
    subprocess.run([str(SEALBOX), "init", str(folder)], check=True, capture_output=True)
    done = subprocess.run([str(SEALBOX), "init", str(folder)], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {folder} already holds a Sealbox store\n")
