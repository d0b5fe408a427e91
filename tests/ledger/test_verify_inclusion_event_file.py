"""``log verify-inclusion --event FILE``: an empty FILE (a redirect that failed, ``--event <(cmd)`` whose
command printed nothing) is a mistake, exit 2 with one line, not the verdict "not included" (exit 1) of a
check that was never possible; and FILE may be a named pipe (``--event <(jq ...)``), as the README says of
every input file, where it was refused as "not a regular file"."""

from __future__ import annotations

import os
import threading

from test_log_verify_inclusion import _verify, saved  # noqa: F401  (a fixture)


def test_an_empty_event_file_is_a_usage_error_not_a_verdict(saved, capsys):  # noqa: F811
    d, size, doc = saved
    (d / "empty.json").write_bytes(b"")
    code, out, err = _verify(capsys, d, "--event", d / "empty.json")
    assert (code, out) == (2, "")
    assert err == f"error: {d / 'empty.json'} is empty (give a file holding the event's hashed bytes)\n"


def test_the_event_may_come_through_a_named_pipe(saved, capsys):  # noqa: F811
    d, size, doc = saved
    fifo = d / "event.fifo"
    os.mkfifo(fifo)
    data = (d / "event.json").read_bytes()

    def write() -> None:
        with open(fifo, "wb") as fh:  # blocks until the command opens it for reading
            fh.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert _verify(capsys, d, "--event", fifo) == (0, f"included: leaf 3 in size {size}\n", "")
    finally:
        writer.join(10)
