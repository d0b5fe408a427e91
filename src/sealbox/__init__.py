"""Sealbox: a tamper-evident flight recorder and governance layer for AI agents.

The public API is what ``__all__`` lists; a test pins it.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    StoreUpgradeNeededError,
)

# Imported on first use, so that ``import sealbox.ledger`` (the offline verifier)
# loads neither the store nor anything else it does not need.
_LAZY = {
    "KINDS": "sealbox.events",
    "SYSTEM_RUN_ID": "sealbox.events",
    "Event": "sealbox.events",
    "EventDraft": "sealbox.events",
    "Store": "sealbox.store",
    "SqliteStore": "sealbox.store",
    "CheckpointPolicy": "sealbox.store",
    "open_store": "sealbox.store",
    "init_store": "sealbox.store",
    "verify_store": "sealbox.verify",
    "VerifyReport": "sealbox.verify",
    "Problem": "sealbox.verify",
    "Recorder": "sealbox.recorder",
    "ToolDenied": "sealbox.recorder",
    "Policy": "sealbox.policy",
    "Snapshot": "sealbox.snapshot",
    "ContentPolicy": "sealbox.redaction",
    "ApprovalPending": "sealbox.approvals",
    "ApprovalError": "sealbox.approvals",
    "RunSuspendedError": "sealbox.approvals",
    "IdentityError": "sealbox.identities",
    "AccessError": "sealbox.access",
}


#: Submodules reachable as attributes after a bare ``import sealbox`` (``sealbox.policies.ALLOW_ALL``).
_SUBMODULES = frozenset({"policies"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"sealbox.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sealbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
    # recording and governance
    "Recorder",
    "ToolDenied",
    "Policy",
    "Snapshot",
    "ContentPolicy",
    "ApprovalPending",
    "ApprovalError",
    "RunSuspendedError",
    "IdentityError",
    "AccessError",
    # errors
    "SealboxError",
    "CanonicalizationError",
    "InvalidEventError",
    "ProofError",
    "NoteError",
    "StoreError",
    "NotAStoreError",
    "SchemaVersionError",
    "StoreUpgradeNeededError",
    "StoreReadOnlyError",
    "StoreRolledBackError",
    "BlobNotFoundError",
    "RecordingError",
    "PolicyError",
    "PolicyLoadError",
    "ConfigError",
]
