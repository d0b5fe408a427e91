"""Stores: the append-only Store protocol and its backends.

``open_store(path)`` opens the store in a data folder: the embedded SQLite store, or a
PostgreSQL store when the folder holds a ``postgres.json`` (its database URL and schema;
the keys and the store secret stay in the folder). ``init_store(path)`` creates a SQLite
store, ``init_store(path, postgres_url=URL)`` a PostgreSQL one.
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
    SQLite store in a folder named ``postgresql:`` and said it had created one "in postgresql://…".
    A path that is not one (``None``, a number, bytes) is a :class:`StoreConfigError`, not a TypeError."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise StoreConfigError(f"store path: {path!r} is not a folder path: give a str or a pathlib.Path "
                               "(the store's folder)")
    if isinstance(text, str) and _URL.match(text):
        raise StoreConfigError(f"{text.split('://', 1)[0]}://… is a URL, not a folder: a Sealbox store is a folder "
                               "(for PostgreSQL too: its keys stay there); create one with "
                               "`sealbox init --postgres URL DIR` and give DIR")


def _is_postgres(path: str | os.PathLike) -> bool:
    return os.path.isfile(os.path.join(os.fspath(path), "postgres.json"))


def open_store(path: str | os.PathLike, **kwargs: Any) -> Any:
    """Open the store in ``path``: a :class:`SqliteStore`, or a
    :class:`~sealbox.store.postgres.PostgresStore` when the folder holds ``postgres.json``
    (options as the class takes them; ``durability="fast"`` is SQLite's only).

    Raises:
        StoreConfigError: ``path`` is a URL (``postgresql://…``): stores are folders; or not a path (``None``).
    """
    _refuse_url(path)
    if _is_postgres(path):
        from sealbox.store.postgres import PostgresStore

        return PostgresStore.open(path, **kwargs)
    return SqliteStore.open(path, **kwargs)


def init_store(path: str | os.PathLike, *, postgres_url: str | None = None, schema: str = "sealbox",
               **kwargs: Any) -> Any:
    """Create a new store in ``path``: SQLite (see :meth:`SqliteStore.init`), or with ``postgres_url``
    a PostgreSQL store whose tables live in ``schema`` of that database (see
    :meth:`~sealbox.store.postgres.PostgresStore.init`).

    Raises:
        StoreConfigError: ``path`` is a URL (``postgresql://…``) or not a path (``None``): nothing is created.
    """
    _refuse_url(path)
    if postgres_url is not None and not isinstance(postgres_url, str):
        raise StoreConfigError(f"postgres_url: {postgres_url!r:.80} is not a string (postgresql://USER@HOST/DATABASE)")
    if postgres_url is not None:
        from sealbox.store.postgres import PostgresStore

        return PostgresStore.init(path, url=postgres_url, schema=schema, **kwargs)
    return SqliteStore.init(path, **kwargs)
