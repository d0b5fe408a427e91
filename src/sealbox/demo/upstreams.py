"""Real MCP servers from PyPI, each in its own virtual environment, built on first use and cached.

Used by ``sealbox demo`` (the drill) and by the gateway's interoperability tests.
The cache folder is ``$SEALBOX_UPSTREAMS_CACHE`` or ``~/.cache/sealbox/upstreams``
(outside any workspace); each venv lives in ``<cache>/<key>/`` where ``key`` is the
first 24 hex digits of the SHA-256 of the sorted pinned requirements and the
Python version, so a changed pin builds a new venv and an unchanged one is reused.
Building takes a file lock, so concurrent callers build once. A venv is complete
only once its ``.complete`` marker is written.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from sealbox.errors import SealboxError

__all__ = ["SERVERS", "UpstreamBuildError", "cache_root", "venv_for", "server_command", "venv_key", "is_built"]

#: Pinned requirements of each real upstream (mcp-server-sqlite needs mcp<2: it fails to start with mcp 2.x).
SERVERS: dict[str, tuple[str, ...]] = {
    "time": ("mcp-server-time==2026.10.19",),
    "git": ("mcp-server-git==2026.10.19",),
    "sqlite": ("mcp-server-sqlite==2025.4.25", "mcp==1.30.0"),
}


class UpstreamBuildError(SealboxError):
    """A venv for an upstream could not be built (no network, no PyPI, a pip failure); the message says why."""


def cache_root() -> Path:
    """``$SEALBOX_UPSTREAMS_CACHE`` or ``~/.cache/sealbox/upstreams``."""
    env = os.environ.get("SEALBOX_UPSTREAMS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sealbox" / "upstreams"


def venv_key(requirements: tuple[str, ...]) -> str:
    """The text hashed to name a venv: sorted requirements and the Python major.minor version."""
    return "\n".join(sorted(requirements)) + f"\npython {sys.version_info.major}.{sys.version_info.minor}"


def _folder(requirements: tuple[str, ...]) -> Path:
    return cache_root() / hashlib.sha256(venv_key(requirements).encode()).hexdigest()[:24]


def is_built(name: str) -> bool:
    """Whether the venv of upstream ``name`` (a key of :data:`SERVERS`) is already in the cache."""
    return (_folder(SERVERS[name]) / ".complete").exists()


def venv_for(requirements: tuple[str, ...], *, timeout_s: float = 900) -> Path:
    """The venv holding ``requirements``, built once under a file lock.

    Raises:
        UpstreamBuildError: the venv could not be created or pip failed (the tail of its output is in the message).
    """
    root = _folder(requirements)
    done = root / ".complete"
    if done.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(str(root) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return root
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True, capture_output=True,
                           timeout=300)
            subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            *requirements], check=True, capture_output=True, text=True, timeout=timeout_s)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            if isinstance(detail, bytes):
                detail = detail.decode(errors="replace")
            raise UpstreamBuildError(f"cannot build a venv with {' '.join(requirements)}: "
                                     f"{str(detail).strip()[-300:]}") from exc
        done.write_text(venv_key(requirements))
    return root


def server_command(name: str) -> str:
    """The console script of a real upstream (``mcp-server-time`` …) in its venv, building it if needed.

    Raises:
        KeyError: ``name`` is not in :data:`SERVERS`.
        UpstreamBuildError: the venv could not be built.
    """
    return str(venv_for(SERVERS[name]) / "bin" / f"mcp-server-{name}")
