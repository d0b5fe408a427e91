"""The MCP gateway: govern and record agents that already speak MCP, in front of real MCP servers.

See ``docs/gateway.md``. The pieces: :mod:`~sealbox.gateway.config` (``gateway.yaml``),
:mod:`~sealbox.gateway.upstream` (supervised upstream connections),
:mod:`~sealbox.gateway.pinning` (tool pinning), :mod:`~sealbox.gateway.server` (the
MCP server clients talk to), :mod:`~sealbox.gateway.transports` (stdio, streamable
HTTP), :mod:`~sealbox.gateway.holds` (approvals: holding a call, ``requestState``),
:mod:`~sealbox.gateway.replay` (``sealbox gateway replay``: a recorded session served to a
client) and :mod:`~sealbox.gateway.codes` (JSON-RPC error codes).
"""

from __future__ import annotations

from sealbox.gateway.codes import (
    INVALID_REQUEST_STATE,
    MALFORMED_REQUEST,
    REQUEST_TOO_LARGE,
    RUN_IN_USE,
    TOO_MANY_CALLS,
    UNAUTHORIZED,
    UNKNOWN_RUN,
    UNKNOWN_TOOL,
)
from sealbox.gateway.config import DEFAULT_SEPARATOR, GatewayConfig, load_config, parse_config
from sealbox.gateway.pinning import PIN_RULE

#: Names given by :mod:`sealbox.gateway.server`, imported when first asked for: the server pulls in the MCP
#: protocol types (about 0.6 s), which the pin state (``sealbox verify``, bundles included) does not need.
_FROM_SERVER = ("Gateway", "ENV_RUN_ID", "RUN_ID_META_KEY")


def __getattr__(name: str) -> object:
    if name in _FROM_SERVER:
        from sealbox.gateway import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM_SERVER))

__all__ = [
    "Gateway",
    "GatewayConfig",
    "load_config",
    "parse_config",
    "DEFAULT_SEPARATOR",
    "RUN_ID_META_KEY",
    "ENV_RUN_ID",
    "PIN_RULE",
    "UNKNOWN_TOOL",
    "REQUEST_TOO_LARGE",
    "MALFORMED_REQUEST",
    "UNKNOWN_RUN",
    "UNAUTHORIZED",
    "INVALID_REQUEST_STATE",
    "TOO_MANY_CALLS",
    "RUN_IN_USE",
]
