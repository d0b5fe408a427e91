"""Break-test fixes: ``sealbox log prove`` blames the option that is wrong, and ``sealbox verify
STORE --checkpoint FILE`` with JSON nested 100,000 deep is one error line (it was RecursionError, exit 70)."""

from __future__ import annotations

import json

import pytest

import sealbox
from sealbox.cli.main import main
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture
def store_path(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda **_: [[1]])
    size = store.size()
    store.close()
    return tmp_path / "store", size


def _run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_a_bad_to_size_is_blamed_on_to_size(store_path, capsys):
    path, size = store_path
    for bad in ("-3", "0", str(size + 1)):
        assert _run(capsys, "log", "prove", "-s", path, "--from-size", "2", "--to-size", bad) == (
            2, "", f"error: --to-size must be between 1 and {size} (the log's size)\n")


def test_a_bad_from_size_names_its_bound(store_path, capsys):
    path, size = store_path
    assert _run(capsys, "log", "prove", "-s", path, "--from-size", "3", "--to-size", "2") == (
        2, "", "error: --from-size must be between 1 and 2 (--to-size)\n")
    assert _run(capsys, "log", "prove", "-s", path, "--from-size", "0") == (
        2, "", f"error: --from-size must be between 1 and {size} (the newest checkpoint's size)\n")


def test_a_good_proof_is_unchanged(store_path, capsys):
    path, size = store_path
    main(["log", "prove", "-s", str(path), "--from-size", "1", "--to-size", str(size)])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["size1"], doc["size2"]) == (1, size)


def test_a_deeply_nested_checkpoint_file_is_one_error_line(store_path, tmp_path, capsys):
    path, _ = store_path
    deep = tmp_path / "deep-cp.json"
    deep.write_text('{"note":' + "[" * 100_000 + "]" * 100_000 + "}")
    assert _run(capsys, "verify", path, "--checkpoint", deep) == (
        2, "", f"error: {deep} is neither a signed checkpoint nor `sealbox log checkpoint --json` output: its JSON "
               "is nested too deeply\n")


def test_an_endless_checkpoint_file_is_read_no_further_than_a_checkpoint_can_be(store_path, tmp_path, capsys):
    # `sealbox verify --checkpoint /dev/zero` read until memory ran out (MemoryError, "internal error",
    # exit 70). A pipe that delivers 1 MiB and more and stays open shows it safely: the answer must come
    # without waiting for the input's end.
    import os
    import threading

    path, _ = store_path
    fifo = tmp_path / "saved-checkpoint.txt"
    os.mkfifo(fifo)
    closed, answered = threading.Event(), threading.Event()

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(b"x" * (1024 * 1024 + 4096))
            fh.flush()
            answered.wait(60)  # an endless source: still open until the test has its answer (a load
            # that reads to the end waits the 60 s for EOF, then `closed` fails the test)
        closed.set()

    t = threading.Thread(target=writer)
    t.start()
    try:
        got = _run(capsys, "verify", path, "--checkpoint", fifo)
        assert not closed.is_set(), "the whole input was read"
        assert got == (2, "", f"error: {fifo} is larger than 1 MiB: neither a signed checkpoint nor "
                              "`sealbox log checkpoint --json` output\n")
    finally:
        answered.set()
        t.join()
