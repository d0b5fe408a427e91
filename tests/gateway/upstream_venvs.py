"""Real MCP servers from PyPI, each in its own virtualenv, cached outside the work tree.

The cache folder is ``$SEALBOX_TEST_UPSTREAMS_CACHE`` or ``~/.cache/sealbox-test-upstreams``;
each venv lives in ``<cache>/<sha>/`` where ``sha`` is the SHA-256 of the pinned
requirements and the Python version, so a changed pin builds a new venv. A
venv that cannot be built (no network, no PyPI) skips the test with the reason,
except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Pinned requirements of each real upstream (mcp-server-sqlite needs mcp<2: it fails to start with mcp 2.x).
SERVERS: dict[str, tuple[str, ...]] = {
    "time": ("mcp-server-time==2026.10.19",),
    "git": ("mcp-server-git==2026.10.19",),
    "sqlite": ("mcp-server-sqlite==2025.4.25", "mcp==1.30.0"),
}


def cache_root() -> Path:
    return Path(os.environ.get("SEALBOX_TEST_UPSTREAMS_CACHE") or Path.home() / ".cache" / "sealbox-test-upstreams")


def venv_for(requirements: tuple[str, ...]) -> Path:
    """The venv holding ``requirements`` (built once, under a file lock)."""
    key = "\n".join(sorted(requirements)) + f"\npython {sys.version_info.major}.{sys.version_info.minor}"
    root = cache_root() / hashlib.sha256(key.encode()).hexdigest()[:24]
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
                            *requirements], check=True, capture_output=True, text=True, timeout=900)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            reason = f"cannot build a venv with {' '.join(requirements)}: {str(detail).strip()[-300:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        done.write_text(key)
    return root


def server_command(name: str) -> str:
    """The console script of a real upstream (``mcp-server-time`` …) in its venv."""
    return str(venv_for(SERVERS[name]) / "bin" / f"mcp-server-{name}")
