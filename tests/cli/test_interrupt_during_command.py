"""Ctrl-C (SIGINT) while a command runs is one line, ``error: interrupted``, and exit 130: the same as
an interrupt while the CLI loads (``_sealbox_cli``). Click turned it into a blank line (for the
terminal's ``^C`` echo) and ``Abort``, which the CLI printed as ``error: aborted``. Real processes
of the console script, sent a real SIGINT while they block."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

SCRIPT = Path(sys.executable).parent / "sealbox"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    env.update(extra)
    return env


def _interrupt(proc: subprocess.Popen, ready) -> tuple[int, str, str]:
    deadline = time.monotonic() + 60
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never blocked"
        time.sleep(0.05)
    time.sleep(0.2)  # blocked in its read / sleep, not on the way to it
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_sigint_while_import_waits_for_its_input_is_one_line_exit_130(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    proc = subprocess.Popen([str(SCRIPT), "import", str(fifo), "-s", str(tmp_path / "store")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    writer: list[int] = []

    def reading() -> bool:  # a writer can open the FIFO only once the command has it open for reading
        try:
            writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return True
        except OSError as exc:
            assert exc.errno == errno.ENXIO
            return False

    try:
        assert _interrupt(proc, reading) == (130, "", "error: interrupted\n")
    finally:
        for fd in writer:
            os.close(fd)


def test_sigint_while_a_replayed_agent_runs_is_one_line_exit_130_and_the_replay_is_cancelled(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="sleeper") as run:
        run.note("recorded")
    store.close()
    started = tmp_path / "started"
    (tmp_path / "slow_agent.py").write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path

        def agent(run):
            Path({str(started)!r}).write_text("yes")
            time.sleep(120)
    """))
    proc = subprocess.Popen([str(SCRIPT), "replay", run.run_id, "-s", str(tmp_path / "store"),
                             "--agent", "slow_agent:agent"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(PYTHONPATH=str(tmp_path)), cwd=tmp_path)
    assert _interrupt(proc, started.exists) == (130, "", "error: interrupted\n")
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        (replay,) = [r for r in store.runs() if r["run_id"] != run.run_id and r["run_id"] != "system"]
        assert store.read_run(replay["run_id"])[-1].payload["status"] == "cancelled"
    finally:
        store.close()


def test_an_abort_that_is_no_interrupt_still_says_aborted(tmp_path):
    """click.Abort raised by a command itself (a confirmation answered no) keeps its own line."""
    code = ("import sys, click, sealbox.cli.main as m\n"
            "@m.cli.command('nope')\n"
            "def nope():\n"
            "    raise click.Abort()\n"
            "m.COMMANDS['nope'] = None\n"
            "m.LazyGroup.get_command = lambda self, ctx, name: nope\n"
            "m.main(['nope'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env())
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "error: aborted\n")


def test_an_internal_error_spanning_lines_is_still_one_error_line(tmp_path):
    """A driver's message on several lines (psycopg: the error, then LINE 1: ..., a caret, HINT: ...)
    was printed as is: an internal error is one line like every other error, whitespace collapsed."""
    code = ("import sys, click, sealbox.cli.main as m\n"
            "@m.cli.command('nope')\n"
            "def nope():\n"
            "    raise RuntimeError('function f(bytea) does not exist\\nLINE 1: SELECT f(raw)\\n'\n"
            "                       '               ^\\nHINT:  No function matches.')\n"
            "m.COMMANDS['nope'] = None\n"
            "m.LazyGroup.get_command = lambda self, ctx, name: nope\n"
            "m.main(['nope'])\n")
    env = {k: v for k, v in _env().items() if k != "SEALBOX_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert (proc.returncode, proc.stdout) == (70, "")
    assert proc.stderr == ("error: internal error: RuntimeError: function f(bytea) does not exist LINE 1: SELECT f(raw) "
                           "^ HINT: No function matches. (set SEALBOX_DEBUG=1 for a traceback)\n")


def _terminate(proc: subprocess.Popen, ready) -> tuple[int, str, str]:
    deadline = time.monotonic() + 60
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never blocked"
        time.sleep(0.05)
    time.sleep(0.2)  # blocked in its sleep, not on the way to it
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_sigterm_while_a_replayed_agent_runs_cancels_the_replay_and_exits_143(tmp_path):
    """SIGTERM (`kill PID`, a CI timeout, systemd stopping a job) killed the process outright: the replay
    run was left open for ever (listed interrupted, its process gone) and an export's temporary file
    stayed beside its target. It now runs the same cleanup as Ctrl-C: one line, exit 143."""
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="sleeper") as run:
        run.note("recorded")
    store.close()
    started = tmp_path / "started"
    (tmp_path / "slow_agent.py").write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path

        def agent(run):
            Path({str(started)!r}).write_text("yes")
            time.sleep(120)
    """))
    proc = subprocess.Popen([str(SCRIPT), "replay", run.run_id, "-s", str(tmp_path / "store"),
                             "--agent", "slow_agent:agent"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(PYTHONPATH=str(tmp_path)), cwd=tmp_path)
    assert _terminate(proc, started.exists) == (143, "", "error: terminated\n")
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        (replay,) = [r for r in store.runs() if r["run_id"] != run.run_id and r["run_id"] != "system"]
        assert store.read_run(replay["run_id"])[-1].payload["status"] == "cancelled"
    finally:
        store.close()


def test_sigterm_while_an_export_writes_leaves_no_temporary_file(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.note("recorded")
    store.close()
    out = tmp_path / "out"
    out.mkdir()
    started = tmp_path / "started"
    # the real CLI in its own process, held (as a slow disk would hold it) just before the bundle is written
    code = ("import time, pathlib, sealbox.cli.main as m, sealbox.interop.bundle as b\n"
            "def commit(self, data):\n"
            f"    pathlib.Path({str(started)!r}).write_text('yes')\n"
            "    time.sleep(120)\n"
            "b.AtomicTarget.commit = commit\n"
            f"m.main(['export', {run.run_id!r}, '-s', {str(tmp_path / 'store')!r}, '-o', {str(out / 'case.sbx')!r}])\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())
    assert _terminate(proc, started.exists) == (143, "", "error: terminated\n")
    assert sorted(p.name for p in out.iterdir()) == []
