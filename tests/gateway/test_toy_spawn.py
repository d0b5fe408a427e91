"""The toy's fork server (servers/zygote.py, servers/spawn.py) runs a script as a fresh interpreter would: the
same argv, environment, working directory, stdin/stdout/stderr, exit status and death by signal; and the script's
process does not outlive spawn.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import SPAWN

SCRIPT = """\
import os, sys
data = sys.stdin.read()
print(repr((sys.argv[1:], os.getcwd(), os.environ.get("SPAWN_VAR"), "PYTHONPATH" in os.environ, sys.path[0],
            data.upper())))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def spawned(sock: str | None, script: Path, *args: str) -> list[str]:
    return [sys.executable, "-I", "-S", SPAWN, sock or "/nonexistent/zygote.sock", str(script), *args]


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("through_zygote", [True, False], ids=["zygote", "fallback"])
def test_a_spawned_script_sees_and_returns_what_a_fresh_interpreter_does(tmp_path, toy_zygote, through_zygote):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = {"PATH": os.environ["PATH"], "SPAWN_VAR": "v1"}
    fresh = subprocess.run([sys.executable, str(script), "7", "x y"], input=b"hello", capture_output=True, env=env,
                           cwd=tmp_path, timeout=60)
    got = subprocess.run(spawned(toy_zygote if through_zygote else None, script, "7", "x y"), input=b"hello",
                         capture_output=True, env=env, cwd=tmp_path, timeout=60)
    assert (got.returncode, got.stdout, got.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == 7
    assert fresh.stdout == repr((["7", "x y"], str(tmp_path), "v1", False, str(tmp_path), "HELLO")).encode() + b"\n"
    assert fresh.stderr == b"to stderr\n"


def test_an_uncaught_exception_gives_the_fresh_interpreters_traceback_and_status(tmp_path, toy_zygote):
    script = tmp_path / "boom.py"
    script.write_text("def f():\n    raise ValueError('boom')\nf()\n")
    fresh = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60)
    got = subprocess.run(spawned(toy_zygote, script), capture_output=True, timeout=60)
    assert (got.returncode, got.stderr) == (fresh.returncode, fresh.stderr) == (1, fresh.stderr)
    assert fresh.stderr.endswith(b"ValueError: boom\n")


@pytest.mark.parametrize("how", ["sigterm-to-spawn", "sigkill-to-script"])
def test_death_by_signal_is_passed_on(tmp_path, toy_zygote, how):
    script = tmp_path / "sleep.py"
    pid_file = tmp_path / "pid"
    script.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    proc = subprocess.Popen(spawned(toy_zygote, script), stdin=subprocess.DEVNULL)
    wait_for(lambda: pid_file.exists() and pid_file.read_text() != "")
    child = int(pid_file.read_text())
    assert child != proc.pid
    if how == "sigterm-to-spawn":
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    else:
        os.kill(child, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    wait_for(lambda: not alive(child))


def test_the_script_does_not_outlive_a_killed_spawn(tmp_path, toy_zygote):
    script = tmp_path / "sleep.py"
    pid_file = tmp_path / "pid"
    script.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    proc = subprocess.Popen(spawned(toy_zygote, script), stdin=subprocess.DEVNULL)
    wait_for(lambda: pid_file.exists() and pid_file.read_text() != "")
    child = int(pid_file.read_text())
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    wait_for(lambda: not alive(child))
