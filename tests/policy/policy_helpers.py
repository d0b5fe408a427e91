"""Helpers for policy tests: real files in tmp_path, fixed clock, a guarded tool."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path
from typing import Any, Callable

from sealbox.policy import CallContext, Decision, Policy

NOW = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.timezone.utc)


def write(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load(tmp_path: Path, text: str) -> Policy:
    return Policy.load(write(tmp_path, text))


def call(tool: str = "read_rows", server: str = "db", arguments: Any = None, **kw: Any) -> CallContext:
    kw.setdefault("principal", {"id": "agent-1", "role": "agent", "groups": ["bots"], "attributes": {}})
    kw.setdefault("agent", {"name": "support-bot", "attributes": {}})
    kw.setdefault("run", {"id": "run-1", "labels": {"env": "prod"}, "started_at": "2026-11-29T11:59:00Z", "elapsed_s": 60.0})
    kw.setdefault("now", NOW)
    return CallContext(server=server, tool=tool, arguments={} if arguments is None else arguments, **kw)


class GuardedTool:
    """A tool function that counts its invocations."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return "ran"


def run_if_allowed(decision: Decision, fn: Callable[[], Any]) -> Any:
    """What the recorder does: run the tool only when the decision is allow."""
    return fn() if decision.effect == "allow" else None
