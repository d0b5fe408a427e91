"""A named pipe (FIFO) given as an input file that no program writes to: `sealbox import PIPE`,
`verify --checkpoint PIPE`, `policy check PIPE`, `gateway check -c PIPE` and `export --prove-from PIPE`
blocked in open() until killed. They now wait at most $SEALBOX_PIPE_WAIT seconds (10 by default) for
a writer and end with one error line; a pipe that is written to is read as any file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

import sealbox

POLICY = "version: 1\nrules:\n  - id: all\n    match: {tool: '*'}\n    effect: allow\n"


def sb(*args, timeout=60):
    env = {**os.environ, "SEALBOX_PIPE_WAIT": "0.3"}
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture()
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    sealbox.init_store(tmp_path / "s").close()
    return path


@pytest.mark.parametrize("args, message", [
    (("import", "{p}"), "error: {p} cannot be read (it is a named pipe (FIFO) that nothing wrote to within 0.3 s)\n"),
    (("verify", "--checkpoint", "{p}"),
     "error: cannot read the checkpoint file {p}: it is a named pipe (FIFO) that nothing wrote to within 0.3 s\n"),
    (("export", "--prove-from", "{p}", "-o", "{d}/x.sbx"),
     "error: cannot read the checkpoint file {p}: it is a named pipe (FIFO) that nothing wrote to within 0.3 s\n"),
    (("policy", "check", "{p}"),
     "error: {p}: cannot read file: it is a named pipe (FIFO) that nothing wrote to within 0.3 s\n"),
    (("gateway", "check", "-c", "{p}"),
     "error: {p}: cannot read: it is a named pipe (FIFO) that nothing wrote to within 0.3 s\n"),
    (("replay", "nope", "--agent", "sealbox.demo.drill:replay_agent", "--snapshot", "{p}"),
     "error: cannot read the snapshot {p}: it is a named pipe (FIFO) that nothing wrote to within 0.3 s\n"),
])
def test_a_named_pipe_nothing_writes_to_is_one_error_line(fifo, args, message) -> None:
    fill = {"p": fifo, "d": fifo.parent}
    store = () if args[0] in ("policy", "gateway") else ("-s", fifo.parent / "s")
    res = sb(*(a.format(**fill) for a in args), *store)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", message.format(**fill))
    assert sorted(p.name for p in fifo.parent.iterdir()) == ["pipe", "s"]


def test_a_named_pipe_that_is_written_to_is_read(fifo) -> None:
    def write() -> None:
        with open(fifo, "w") as fh:
            fh.write(POLICY)

    writer = threading.Thread(target=write)
    writer.start()
    res = sb("policy", "check", fifo)
    writer.join(timeout=30)
    assert (res.returncode, res.stderr) == (0, ""), res.stdout
