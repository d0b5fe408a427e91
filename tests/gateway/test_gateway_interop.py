"""Interop with real MCP servers from PyPI, each in its own cached venv (see upstream_venvs.py).

Marked ``pypi_servers``: they skip with the reason when a venv cannot be built,
and fail instead in CI (``CI=true``).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

import sealbox
from sealbox.gateway import Gateway, parse_config

from .conftest import connect, gateway_runs, kinds, running, text_of
from .upstream_venvs import server_command

pytestmark = [pytest.mark.anyio, pytest.mark.pypi_servers]


def config(tmp_path, server_id: str, command: str, args: list[str]):
    return parse_config(f"""
version: 1
store: {json.dumps(str(tmp_path / 'store'))}
policy: ALLOW_ALL
upstreams:
  - id: {server_id}
    command: {json.dumps(command)}
    args: {json.dumps(args)}
""", base=tmp_path)


def recorded_result(store):
    [run_id] = gateway_runs(store)
    assert [k for _, k in kinds(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                    "run.ended"]
    return [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"][0]


async def test_mcp_server_time_through_the_gateway(tmp_path, store):
    gw = Gateway(config(tmp_path, "time", server_command("time"), ["--local-timezone", "UTC"]), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
    assert "time__get_current_time" in names and "time__convert_time" in names
    assert result.is_error is False and json.loads(text_of(result))["timezone"] == "UTC"
    assert recorded_result(store)["ok"] is True
    assert sealbox.verify_store(store).ok


async def test_mcp_server_git_on_a_temporary_repository(tmp_path, store):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": "/usr/bin:/bin"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "."], ["git", "commit", "-q", "-m", "first"]):
        if cmd[1] == "add":
            (repo / "README").write_text("hello\n")
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    (repo / "new.txt").write_text("untracked\n")
    gw = Gateway(config(tmp_path, "git", server_command("git"), ["--repository", str(repo)]), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            result = await client.call_tool("git__git_status", {"repo_path": str(repo)})
    assert result.is_error is False and "new.txt" in text_of(result)
    assert recorded_result(store)["ok"] is True


async def test_mcp_server_sqlite_on_an_older_protocol_behind_a_current_client(tmp_path, store):
    gw = Gateway(config(tmp_path, "db", server_command("sqlite"), ["--db-path", str(tmp_path / "data.db")]),
                 store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            assert client.initialize_result.protocol_version == "2025-11-25"
            result = await client.call_tool("db__read_query", {"query": "select 6 * 7 as answer"})
    assert gw.upstreams["db"].protocol_version == "2025-11-25"  # mcp 1.30 (a 1.x SDK) also speaks 2025-11-25
    assert result.is_error is False and "42" in text_of(result)
    assert recorded_result(store)["ok"] is True
