"""Test helper: the store's first admin, whose key signs identity changes (sealbox.identities).

Every identity change but the first admin's own addition is signed with an enabled admin's
key, so tests that need approvers add one admin first. ``admin_key(store, folder)`` adds
``root`` (role admin) on first use and returns its key file, ``folder / "root.key"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sealbox.identities import add_identity, identity_book

ROOT = "root"


def admin_key(store: Any, folder: Path) -> Path:
    path = Path(folder) / f"{ROOT}.key"
    if identity_book(store).get(ROOT) is None:
        add_identity(store, ROOT, "admin", key_path=path)
    return path
