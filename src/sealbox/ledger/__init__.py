"""The ledger: the RFC 9162 Merkle log over all events, and its signed checkpoints.

Importable without the store (only ``hashlib``, ``base64`` and ``cryptography``),
so that an offline verifier can check proofs and checkpoints on its own.

* :mod:`sealbox.ledger.merkle` — hashing, full-subtree node layout, inclusion and
  consistency proofs and their verification (RFC 9162 §2.1).
* :mod:`sealbox.ledger.checkpoint` — C2SP signed notes, Ed25519 keys, checkpoints
  and cosignature parsing.

The on-disk and wire formats are described in ``docs/log-format.md``.
"""

from __future__ import annotations

from sealbox.ledger.checkpoint import (
    Checkpoint,
    OpenedNote,
    Signer,
    Verifier,
    generate_key,
    open_note,
    parse_cosignature,
    parse_note,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)
from sealbox.ledger.merkle import (
    EMPTY_ROOT,
    MemoryTree,
    StreamingTree,
    NodeReader,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    new_nodes_for_append,
    node_hash,
    root_at,
    root_from_inclusion_proof,
    root_from_leaves,
    subtree_hash,
    verify_consistency,
    verify_inclusion,
)

__all__ = [
    # merkle
    "EMPTY_ROOT",
    "NodeReader",
    "leaf_hash",
    "node_hash",
    "root_from_leaves",
    "subtree_hash",
    "root_at",
    "inclusion_proof",
    "consistency_proof",
    "new_nodes_for_append",
    "MemoryTree",
    "StreamingTree",
    "root_from_inclusion_proof",
    "verify_inclusion",
    "verify_consistency",
    # checkpoint
    "generate_key",
    "Signer",
    "Verifier",
    "OpenedNote",
    "parse_note",
    "sign_note",
    "open_note",
    "parse_cosignature",
    "Checkpoint",
    "sign_checkpoint",
    "verify_checkpoint",
]
