"""Interop with real MCP servers from PyPI, each in its own cached venv (see upstream_venvs.py).

Marked ``pypi_servers``: they skip with the reason when a venv cannot be built,
and fail instead in CI (``CI=true``).
"""

from __future__ import annotations

import dataclasses
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


async def test_mcp_server_time_refusing_a_models_timezone_many_times_leaves_the_tool_served(tmp_path, store):
    """mcp-server-time refuses an invalid timezone (a string its schema allows) with an ``isError`` result: the
    model's mistake, not the upstream's health. More such calls than the breaker's threshold leave the
    breaker closed, and a valid call of another client is still forwarded. (Other servers answer such
    arguments with JSON-RPC error -32602: test_gateway_breaker_outcomes.py, with the toy upstream.)"""
    cfg = config(tmp_path, "time", server_command("time"), ["--local-timezone", "UTC"])
    gw = Gateway(dataclasses.replace(cfg, breaker_threshold=2, breaker_cooldown_s=600.0), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as model:
            bad = [await model.call_tool("time__get_current_time", {"timezone": "Mars/Olympus_Mons"})
                   for _ in range(3)]
        async with connect(gw, tg) as other:
            good = await other.call_tool("time__get_current_time", {"timezone": "UTC"})
        state = gw.recorder.breaker.state("time", "get_current_time")
    message = "Error executing tool get_current_time: Invalid timezone: 'No time zone found with key Mars/Olympus_Mons'"
    assert [(r.is_error, text_of(r)) for r in bad] == [(True, message)] * 3
    first_run, second_run = gateway_runs(store)
    assert [(e.payload["ok"], e.payload["error"]) for e in store.read_run(first_run) if e.kind == "tool.result"] == [
        (False, {"type": "ToolError", "message": message})] * 3
    assert [e.payload["ok"] for e in store.read_run(second_run) if e.kind == "tool.result"] == [True]
    assert [e.payload for e in store.read_range(0, store.size()) if e.kind == "breaker.changed"] == []
    assert (good.is_error, json.loads(text_of(good))["timezone"], state) == (False, "UTC", "closed")
