"""An upstream whose process cannot be started is said in words, naming the upstream, its command and what to check.

Regression (input: a gateway.yaml whose upstream ``db`` runs ``no-such-mcp-server``, a program not installed):
``sealbox gateway serve`` logged ``upstream db failed: FileNotFoundError: [Errno 2] No such file or directory:
'no-such-mcp-server'`` (Python's exception text), and the same for a command that is not executable
(``PermissionError: [Errno 13] Permission denied``) or a ``cwd`` that does not exist (the cwd named as if it were
the missing program). A call of one of its tools quoted that text.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import sealbox
from sealbox.gateway import parse_config
from sealbox.gateway.upstream import Upstream

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _gateway_yaml(upstream: str) -> str:
    return f"version: 1\nstore: ./store\npolicy: ALLOW_ALL\nupstreams:\n  - id: db\n{upstream}"


async def _first_failure(tmp_path: Path, upstream: str, source: str | None) -> str | None:
    config = parse_config(_gateway_yaml(upstream), source="gw.yaml", base=tmp_path)
    (spec,) = config.upstreams
    up = Upstream(spec, config.limits, errlog=io.StringIO(), config_source=source)
    async with anyio.create_task_group() as tg:
        tg.start_soon(up.run)
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.state == "down")
        up.stop()
    return up.last_error


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_why_an_upstream_process_could_not_start_is_said_in_words(tmp_path):
    (tmp_path / "script.sh").write_text("#!/bin/sh\n")
    (tmp_path / "script.sh").chmod(0o644)
    cases = {
        "    command: no-such-mcp-server\n    args: [--flag]\n":
            "cannot start its command 'no-such-mcp-server': no such program in PATH; check upstream db's command "
            "in gw.yaml (is the program installed? sealbox gateway check -c gw.yaml checks it)",
        f"    command: {tmp_path / 'gone' / 'server'}\n":
            f"cannot start its command '{tmp_path / 'gone' / 'server'}': no such file; check upstream db's command "
            "in gw.yaml (sealbox gateway check -c gw.yaml checks it)",
        "    command: ./script.sh\n":
            f"cannot start its command '{tmp_path / 'script.sh'}': permission denied (is it an executable file?); "
            "check upstream db's command in gw.yaml (sealbox gateway check -c gw.yaml checks it)",
        f"    command: {sys.executable}\n    cwd: {tmp_path / 'no-dir'}\n":
            f"cannot start its command '{sys.executable}': its cwd {tmp_path / 'no-dir'} does not exist; check "
            "upstream db's cwd in gw.yaml (sealbox gateway check -c gw.yaml checks it)",
    }
    for upstream, said in cases.items():
        assert await _first_failure(tmp_path, upstream, "gw.yaml") == said
    # an Upstream made without its config's name (the Python API) says "the gateway config"
    assert await _first_failure(tmp_path, "    command: no-such-mcp-server\n", None) == (
        "cannot start its command 'no-such-mcp-server': no such program in PATH; check upstream db's command in the "
        "gateway config (is the program installed? sealbox gateway check checks it)")


def test_gateway_serve_logs_a_missing_upstream_command_in_one_clear_line(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    (tmp_path / "gw.yaml").write_text(_gateway_yaml("    command: no-such-mcp-server\n"))
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    proc = subprocess.run([SEALBOX, "gateway", "serve", "-c", "gw.yaml"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "")
    lines = proc.stderr.splitlines()
    assert lines and set(lines) == {
        "sealbox-gateway: upstream db failed: cannot start its command 'no-such-mcp-server': no such program in PATH; "
        "check upstream db's command in gw.yaml (is the program installed? sealbox gateway check -c gw.yaml checks it)"}
    assert "Errno" not in proc.stderr and "FileNotFoundError" not in proc.stderr
