"""Stores: the append-only Store protocol and its backends.

``open_store(path)`` opens the embedded SQLite store in a data folder;
``init_store(path)`` creates one.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sealbox.store.base import CheckpointPolicy, Store, StoreConfigError, StoredCheckpoint
from sealbox.store.sqlite import SqliteStore

__all__ = ["Store", "StoredCheckpoint", "CheckpointPolicy", "StoreConfigError", "SqliteStore", "open_store", "init_store"]


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _refuse_url(path: str | os.PathLike) -> None:
    """A store is a folder. ``postgresql://…`` was taken as a relative path: ``init`` created a
    SQLite store in a folder named ``postgresql:`` and said it had created one "in postgresql://…"."""
    text = os.fspath(path)
    if isinstance(text, str) and _URL.match(text):
        raise StoreConfigError(f"{text.split('://', 1)[0]}://… is a URL, not a folder: a Sealbox store is a SQLite "
                               "folder for now (there is no PostgreSQL or other server backend yet); give the "
                               "store's folder")


def open_store(path: str | os.PathLike, **kwargs: Any) -> SqliteStore:
    """Open the store in ``path`` (see :class:`SqliteStore` for options).

    Raises:
        StoreConfigError: ``path`` is a URL (``postgresql://…``): stores are folders.
    """
    _refuse_url(path)
    return SqliteStore.open(path, **kwargs)


def init_store(path: str | os.PathLike, **kwargs: Any) -> SqliteStore:
    """Create a new store in ``path`` (see :meth:`SqliteStore.init`).

    Raises:
        StoreConfigError: ``path`` is a URL (``postgresql://…``): nothing is created.
    """
    _refuse_url(path)
    return SqliteStore.init(path, **kwargs)
