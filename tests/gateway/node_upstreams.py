"""Real MCP servers from the npm registry for the tests, installed once into a cache folder.

The folder is ``<cache>/npm-<key>/`` beside the PyPI venvs of :mod:`sealbox.demo.upstreams`
(``$SEALBOX_UPSTREAMS_CACHE`` or ``~/.cache/sealbox/upstreams``), where ``key`` is the first
24 hex digits of the SHA-256 of the pinned package spec and Node's major version: a changed pin
installs anew, an unchanged one is reused. Installing takes a file lock (concurrent test processes
install once), has a timeout, and happens in a scratch folder that is renamed into place only once
``npm install`` succeeded, so a killed install never leaves a half-installed server behind.

A server that cannot be had (no ``node``/``npm``, the registry unreachable, npm failing) skips
the test with the reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sealbox.demo.upstreams import cache_root

__all__ = ["NPM_SERVERS", "node_server"]

#: Pinned npm packages of real upstreams: (package spec, the entry point inside node_modules, its arguments).
NPM_SERVERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "everything": ("@modelcontextprotocol/server-everything@2026.8.31",
                   "@modelcontextprotocol/server-everything/dist/index.js", ("stdio",)),
}

_INSTALL_TIMEOUT_S = 300


class NodeServerUnavailable(Exception):
    """The server cannot be installed or run here; the message says why."""


def _node_major(node: str) -> str:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    return out.lstrip("v").split(".")[0]


def install(spec: str, *, node: str, npm: str) -> Path:
    """The folder where ``spec`` is installed (``<folder>/node_modules/...``), installing it once under a lock.

    Raises:
        NodeServerUnavailable: npm failed, timed out, or could not reach the registry.
    """
    key = f"{spec}\nnode {_node_major(node)}"
    root = cache_root() / ("npm-" + hashlib.sha256(key.encode()).hexdigest()[:24])
    done = root / ".complete"
    if done.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(str(root) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():  # another process installed it while this one waited
            return root
        scratch = Path(str(root) + f".tmp-{os.getpid()}")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        try:
            subprocess.run([npm, "install", "--prefix", str(scratch), "--no-audit", "--no-fund", "--ignore-scripts",
                            "--no-update-notifier", "--loglevel=error", "--fetch-timeout=60000",
                            "--fetch-retries=2", "--fetch-retry-mintimeout=2000", "--fetch-retry-maxtimeout=10000",
                            spec],
                           check=True, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT_S,
                           stdin=subprocess.DEVNULL, cwd=scratch)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise NodeServerUnavailable(f"cannot install {spec} with npm: {_why(exc)}") from exc
        (scratch / ".complete").write_text(key)
        shutil.rmtree(root, ignore_errors=True)  # a leftover of an older, interrupted layout
        os.replace(scratch, root)
    return root


def _why(exc: BaseException) -> str:
    """npm's first error lines (its code and cause), not the advice that follows them."""
    out = getattr(exc, "stderr", None) or ""
    if isinstance(out, bytes):
        out = out.decode(errors="replace")
    lines = [ln.strip() for ln in str(out).splitlines() if ln.strip() not in ("", "npm error")]
    return " | ".join(lines[:3])[:400] or str(exc)


def node_server(name: str) -> tuple[str, list[str]]:
    """``(command, args)`` that run the pinned npm server ``name`` over stdio; skips the test when it cannot."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"the {name} MCP server needs Node.js: {'node' if node is None else 'npm'} is not on PATH")
    spec, entry, args = NPM_SERVERS[name]
    try:
        root = install(spec, node=node, npm=npm)
    except (NodeServerUnavailable, subprocess.SubprocessError, OSError) as exc:
        pytest.skip(str(exc))
    script = root / "node_modules" / entry
    if not script.exists():
        pytest.skip(f"{spec} installed without {entry}")
    return node, [str(script), *args]
