"""Stores: the append-only Store protocol and its backends.

``open_store(path)`` opens the embedded SQLite store in a data folder;
``init_store(path)`` creates one.
"""

from __future__ import annotations

import os
from typing import Any

from sealbox.store.base import CheckpointPolicy, Store, StoreConfigError, StoredCheckpoint
from sealbox.store.sqlite import SqliteStore

__all__ = ["Store", "StoredCheckpoint", "CheckpointPolicy", "StoreConfigError", "SqliteStore", "open_store", "init_store"]


def open_store(path: str | os.PathLike, **kwargs: Any) -> SqliteStore:
    """Open the store in ``path`` (see :class:`SqliteStore` for options)."""
    return SqliteStore.open(path, **kwargs)


def init_store(path: str | os.PathLike, **kwargs: Any) -> SqliteStore:
    """Create a new store in ``path`` (see :meth:`SqliteStore.init`)."""
    return SqliteStore.init(path, **kwargs)
