"""Sealbox: a tamper-evident flight recorder and governance layer for AI agents.

The public API is what ``__all__`` lists; a test pins it.
"""

from __future__ import annotations

from sealbox.errors import (
    BlobNotFoundError,
    CanonicalizationError,
    ConfigError,
    InvalidEventError,
    NotAStoreError,
    NoteError,
    PolicyError,
    PolicyLoadError,
    ProofError,
    RecordingError,
    SchemaVersionError,
    SealboxError,
    StoreError,
    StoreReadOnlyError,
    StoreRolledBackError,
)
from sealbox.events import KINDS, SYSTEM_RUN_ID, Event, EventDraft
from sealbox.store import CheckpointPolicy, SqliteStore, Store, init_store, open_store
from sealbox.verify import Problem, VerifyReport, verify_store

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # events
    "KINDS",
    "SYSTEM_RUN_ID",
    "Event",
    "EventDraft",
    # stores
    "Store",
    "SqliteStore",
    "CheckpointPolicy",
    "open_store",
    "init_store",
    # verification
    "verify_store",
    "VerifyReport",
    "Problem",
    # errors
    "SealboxError",
    "CanonicalizationError",
    "InvalidEventError",
    "ProofError",
    "NoteError",
    "StoreError",
    "NotAStoreError",
    "SchemaVersionError",
    "StoreReadOnlyError",
    "StoreRolledBackError",
    "BlobNotFoundError",
    "RecordingError",
    "PolicyError",
    "PolicyLoadError",
    "ConfigError",
]
