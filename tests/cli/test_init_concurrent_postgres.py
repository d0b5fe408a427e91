"""Two ``sealbox init --postgres URL DIR`` of one folder at once: the one that came second said "DIR already
holds a log.key" (or a postgres.json), as if the user had picked a folder holding someone's key, and it could
even remove the first one's files on its way out (its clean-up removed every name it meant to write). Inits of
a folder now take the lock the SQLite inits take (``flock`` on its parent folder): the second waits for the first,
then says the folder already holds a Sealbox store that another init created meanwhile; a folder that held a
store before says so. The first init is held part-way (between its key and its secret) by a real process whose
``_write_private`` waits for a file the test writes. Needs SEALBOX_TEST_POSTGRES_URL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import sealbox
from test_init_concurrent import SEALBOX, _wait_for, _waiting_or_done

URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="SEALBOX_TEST_POSTGRES_URL is not set")

HELD_INIT = textwrap.dedent("""
    import os, sys, time
    from sealbox.store import sqlite
    write, go = sqlite._write_private, sys.argv[2]
    def held(path, *args, **kwargs):  # the store's secret: written just after its signing key
        if os.path.basename(path) == "store.secret":
            while not os.path.exists(go):
                time.sleep(0.01)
        return write(path, *args, **kwargs)
    sqlite._write_private = held
    sys.argv = ["sealbox", "init", "--postgres", sys.argv[3], "--schema", sys.argv[4], sys.argv[1]]
    from _sealbox_cli import main
    main()
""")


@pytest.fixture
def schema():
    import psycopg

    name = f"sbt_{uuid.uuid4().hex[:20]}"
    yield name
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def test_a_second_postgres_init_of_a_folder_being_created_says_another_init_made_it(tmp_path, schema):
    folder, go = tmp_path / "st", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", HELD_INIT, str(folder), str(go), URL, schema],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(folder / "log.key", first)  # the first init is part-way: its key written, no secret or settings
    second = subprocess.Popen([str(SEALBOX), "init", "--postgres", URL, "--schema", schema, str(folder)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _waiting_or_done(second, tmp_path.resolve())  # before: it answered at once; now it waits for the first's lock
    go.write_text("")
    out1, err1 = first.communicate(timeout=120)
    out2, err2 = second.communicate(timeout=120)
    assert (first.returncode, err1) == (0, ""), err1
    assert out1.startswith(f"Created a Sealbox store in {folder}\n")
    assert (second.returncode, out2, err2) == (
        2, "", f"error: {folder} already holds a Sealbox store (another init created it meanwhile)\n")
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint", "log.key", "log.vkey", "postgres.json",
                                                        "store.secret"]
    with sealbox.open_store(folder) as store:
        assert sealbox.verify_store(store).ok


def test_a_postgres_init_of_a_folder_holding_a_store_says_it_holds_a_store(tmp_path, schema):
    folder = tmp_path / "st"
    subprocess.run([str(SEALBOX), "init", "--postgres", URL, "--schema", schema, str(folder)], check=True,
                   capture_output=True)
    done = subprocess.run([str(SEALBOX), "init", "--postgres", URL, "--schema", schema + "_b", str(folder)],
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {folder} already holds a Sealbox store\n")
    sqlite_store = tmp_path / "sq"
    subprocess.run([str(SEALBOX), "init", str(sqlite_store)], check=True, capture_output=True)
    done = subprocess.run([str(SEALBOX), "init", "--postgres", URL, "--schema", schema + "_c", str(sqlite_store)],
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (2, f"error: {sqlite_store} already holds a Sealbox store\n")
