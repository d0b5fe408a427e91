"""Real MCP servers from PyPI for the tests, from the cache shared with ``sealbox demo``
(:mod:`sealbox.demo.upstreams`: ``$SEALBOX_UPSTREAMS_CACHE`` or ``~/.cache/sealbox/upstreams``).

A venv that cannot be built (no network, no PyPI) skips the test with the reason,
except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import os

import pytest

from sealbox.demo.upstreams import SERVERS, UpstreamBuildError
from sealbox.demo.upstreams import server_command as _server_command

__all__ = ["SERVERS", "server_command"]


def server_command(name: str) -> str:
    """The console script of a real upstream (``mcp-server-time`` …) in its cached venv."""
    try:
        return _server_command(name)
    except UpstreamBuildError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
