"""Helpers for the gateway tests: a store, a config for the toy upstream, an in-memory client."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import sealbox
from sealbox.gateway import Gateway, parse_config

TOY = str(Path(__file__).parent / "servers" / "toy_server.py")
SPAWN = str(Path(__file__).parent / "servers" / "spawn.py")
ZYGOTE = str(Path(__file__).parent / "servers" / "zygote.py")

#: The Unix socket of the toy's fork server (servers/zygote.py) while the gateway tests run, else None.
_ZYGOTE_SOCKET: str | None = None


@pytest.fixture(scope="session", autouse=True)
def toy_zygote():
    """A fork server the toy upstream of :func:`toy_config` starts from: a fork of an interpreter that has
    imported the MCP SDK already (a few ms) instead of a fresh one importing it (~0.6 s of CPU each). The
    toy runs the same script with the same argv, env, cwd, stdio, exit status and signals (servers/spawn.py);
    without the fork server, spawn.py execs a fresh interpreter."""
    global _ZYGOTE_SOCKET
    tmp = tempfile.mkdtemp(prefix="sbzyg-")
    sock = os.path.join(tmp, "z.sock")
    proc = subprocess.Popen([sys.executable, ZYGOTE, sock], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", "the toy's fork server did not start"
        _ZYGOTE_SOCKET = sock
        yield sock
    finally:
        _ZYGOTE_SOCKET = None
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def toy_args() -> list[str]:
    """The args (after ``sys.executable``) that run toy_server.py: through the fork server when it runs."""
    if _ZYGOTE_SOCKET is None:
        return [TOY]
    return ["-I", "-S", SPAWN, _ZYGOTE_SOCKET, TOY]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def toy_config(tmp_path: Path, *, extra: str = "", env: dict[str, str] | None = None, policy: str = "ALLOW_ALL",
               upstreams: str | None = None) -> Any:
    env = {"TOY_LOG": str(tmp_path / "toy.log"), **(env or {})}
    env_yaml = "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in env.items()) + "}"
    ups = upstreams or f"""
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
    env: {env_yaml}
"""
    text = f"""
version: 1
store: {json.dumps(str(tmp_path / 'store'))}
policy: {json.dumps(policy)}
principal: agent:test-client
restart: {{initial_s: 0.05, max_s: 0.2}}
{extra}
upstreams:{ups}"""
    return parse_config(text, source="gateway.yaml", base=tmp_path)


def toy_log(tmp_path: Path) -> list[dict[str, Any]]:
    p = tmp_path / "toy.log"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


@asynccontextmanager
async def running(gateway: Gateway):
    """Run the gateway's upstreams; yield; stop them."""
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            await tg.start(gateway.run_upstreams)
        yield tg
        tg.cancel_scope.cancel()


#: The warning pydantic gives when a test sends params that are no CallToolRequestParams on purpose
#: (a malformed tools/call): expected there, with pytest.warns, and nowhere else.
MALFORMED_PARAMS_WARNING = (r"Expected `CallToolRequestParams` - serialized value may not be as expected "
                            r"\[field_name='params'")


@asynccontextmanager
async def connect(gateway: Gateway, tg: Any, *, session_class: Any = None, **client_kwargs: Any):
    """An MCP client session (official SDK; or ``session_class``, a subclass of its ``ClientSession``) to
    the gateway over in-memory streams.

    On exit the client disconnects and the helper waits until the gateway has
    finished the session (its run ended)."""
    from mcp.client.session import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    done = anyio.Event()
    async with create_client_server_memory_streams() as (client, server):
        async def serve() -> None:
            try:
                await gateway.server.run(server[0], server[1], gateway.initialization_options())
            finally:
                done.set()

        tg.start_soon(serve)
        async with (session_class or ClientSession)(client[0], client[1], **client_kwargs) as session:
            with anyio.fail_after(10):
                await session.initialize()
            yield session
    with anyio.fail_after(30):
        await done.wait()


def kinds(store: Any, run_id: str) -> list[tuple[str, str]]:
    return [(e.step, e.kind) for e in store.read_run(run_id)]


def gateway_runs(store: Any) -> list[str]:
    from sealbox.events import SYSTEM_RUN_ID

    seen: list[str] = []
    for e in store.read_range(0, store.size()):
        if e.run_id != SYSTEM_RUN_ID and e.kind == "run.started" and e.run_id not in seen:
            seen.append(e.run_id)
    return seen


def system_events(store: Any, kind: str) -> list[dict[str, Any]]:
    from sealbox.events import SYSTEM_RUN_ID

    return [e.payload for e in store.read_run(SYSTEM_RUN_ID) if e.kind == kind]


def set_call_timeout(gateway: Gateway, seconds: float) -> None:
    """Change ``limits.call_timeout_s`` of a running gateway and its upstreams. A test timing out a hung call
    uses a short one for that call only: the calls meant to succeed get a long one, which a trivial call
    answered in milliseconds cannot miss on a loaded host (0.3-0.5 s could be)."""
    limits = dataclasses.replace(gateway.config.limits, call_timeout_s=seconds)
    gateway.config = dataclasses.replace(gateway.config, limits=limits)
    for upstream in gateway.upstreams.values():
        upstream.limits = limits


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def pytest_configure(config):
    config.addinivalue_line("markers", "pypi_servers: needs real MCP servers from PyPI in cached venvs "
                                       "(skips without PyPI, fails in CI)")
    config.addinivalue_line("markers", "npm_servers: needs real MCP servers from the npm registry and Node.js "
                                       "(skips with the reason without them)")
