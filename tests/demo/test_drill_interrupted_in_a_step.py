"""Ctrl-C while the drill runs one of its ``sealbox`` steps in its own process (``init``, ``identities
add``, the investigation's commands) is the drill's interrupt: one line, ``error: interrupted``, exit
130. The step's own CLI caught it first (its cleanup ran, exit 130) and the drill turned that exit
status into ``RuntimeError: sealbox init … exited with 130``: ``error: internal error: …`` under the
step's ``error: interrupted``, exit 70. A real SIGINT, sent while the step blocks reading a named pipe."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import pytest

import sealbox
from sealbox.demo.drill import _cli


def _sigint_once_reading(fifo, stop: threading.Event) -> None:
    deadline = time.monotonic() + 60
    while not stop.is_set() and time.monotonic() < deadline:
        try:  # a writer can open the FIFO only once the command has it open for reading
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            assert exc.errno == errno.ENXIO
            time.sleep(0.05)
            continue
        time.sleep(0.2)  # blocked in its read, not on the way to it
        os.kill(os.getpid(), signal.SIGINT)
        stop.wait(10)
        os.close(fd)
        return


def test_sigint_during_a_drill_step_is_the_drills_interrupt_not_an_internal_error(tmp_path, capsys):
    sealbox.init_store(tmp_path / "store").close()
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    stop = threading.Event()
    sender = threading.Thread(target=_sigint_once_reading, args=(fifo, stop), daemon=True)
    sender.start()
    echoed: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt):
            _cli(["import", str(fifo), "-s", str(tmp_path / "store")], echoed.append)
    finally:
        stop.set()
        sender.join(15)
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert err == ""  # the drill's own CLI prints the one "error: interrupted" line
    assert echoed == []


def test_a_drill_step_that_fails_still_says_why(tmp_path, capsys):
    with pytest.raises(RuntimeError, match=r"sealbox runs list -s .* exited with 2"):
        _cli(["runs", "list", "-s", str(tmp_path / "nowhere")], lambda _t: None)
    assert "does not exist" in capsys.readouterr().err
