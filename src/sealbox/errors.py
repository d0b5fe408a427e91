"""Sealbox's exceptions: one root, translated at the boundary.

Every error Sealbox raises on purpose derives from :class:`SealboxError`. Errors
of lower layers (``sqlite3``, ``psycopg``, ``cryptography``, the ``mcp`` SDK) are
translated where they cross into Sealbox, with ``raise OurError(...) from exc``,
so that callers never have to catch another library's exceptions.

Tampering is *not* an exception: :func:`sealbox.verify` returns a report listing
every problem it found; it never raises because the data was changed.

The hierarchy::

    SealboxError
    ├── CanonicalizationError     a value is outside I-JSON (RFC 7493) for strict canonical bytes
    ├── InvalidEventError         unknown event kind or a payload of the wrong shape; nothing written
    ├── ProofError                an RFC 9162 inclusion or consistency proof does not verify
    ├── NoteError                 a C2SP signed note, key or checkpoint is malformed or unverifiable
    ├── StoreError                the store cannot do what was asked
    │   ├── NotAStoreError        the path is not a Sealbox store
    │   ├── SchemaVersionError    the store was written by a newer Sealbox (or a migration was altered)
    │   │   └── StoreUpgradeNeededError  read-only open of a store an older Sealbox wrote (a writer upgrades it)
    │   ├── StoreReadOnlyError    the store or its folder cannot be written
    │   ├── StoreRolledBackError  the store holds fewer events than its newest signed checkpoint
    │   └── BlobNotFoundError     no blob with that commitment (never stored, or erased)
    ├── RecordingError            an event could not be recorded, so the action did not happen
    ├── PolicyError               a policy cannot be loaded or evaluated
    │   └── PolicyLoadError       the policy file is missing or invalid (names file, line, problem)
    ├── ConfigError               a configuration file or option is invalid
    │   └── StepTakenError        another writer of the run recorded a call at that step / with that id (not in ``sealbox``)
    │
    │   defined beside the code that raises them (all exported by ``sealbox``):
    ├── ToolDenied                sealbox.recorder: the call was not allowed; it did not run
    ├── ApprovalPending           sealbox.approvals: the call waits for a human; the run is suspended
    ├── ApprovalError             sealbox.approvals: an answer breaks an approval rule (``.code``)
    ├── RunSuspendedError         sealbox.approvals: a call, model call or state save on a suspended run; nothing done
    ├── IdentityError             sealbox.identities: an identity or key file problem
    └── AccessError               sealbox.access: a grant or revocation problem
"""

from __future__ import annotations

__all__ = [
    "SealboxError",
    "CanonicalizationError",
    "InvalidEventError",
    "ProofError",
    "BackendUnsupportedError",
    "NoteError",
    "StoreError",
    "NotAStoreError",
    "SchemaVersionError",
    "StoreUpgradeNeededError",
    "StoreReadOnlyError",
    "StoreRolledBackError",
    "StoreBusyError",
    "BlobNotFoundError",
    "RecordingError",
    "PolicyError",
    "PolicyLoadError",
    "ConfigError",
    "StepTakenError",
    "SnapshotDamagedError",
]


class SealboxError(Exception):
    """Root of every error Sealbox raises on purpose."""


class CanonicalizationError(SealboxError, ValueError):
    """A value cannot be written as RFC 8785 canonical JSON.

    Raised only by the strict encoder (:func:`sealbox.canonical.canonical_bytes`);
    :func:`sealbox.canonical.encode` turns any Python value into an encodable one.
    """


class InvalidEventError(SealboxError, ValueError):
    """An event's kind is unknown or its payload does not match the kind's schema."""


class ProofError(SealboxError, ValueError):
    """An RFC 9162 §2.1.3 / §2.1.4 proof failed to verify, or is malformed."""


class NoteError(SealboxError, ValueError):
    """A C2SP signed note, verifier key or checkpoint is malformed or does not verify."""


class StoreError(SealboxError):
    """The store cannot carry out the request."""


class SnapshotDamagedError(StoreError):
    """A stored snapshot's bytes no longer hash to its fingerprint: changed below Sealbox or damaged."""


class NotAStoreError(StoreError):
    """The path exists but is not a Sealbox store."""


class SchemaVersionError(StoreError):
    """The store's schema is newer than this version of Sealbox, or a migration changed."""


class StoreUpgradeNeededError(SchemaVersionError):
    """A read-only open of a store written by an older Sealbox, whose pending migrations only a
    writer applies. ``pending`` lists their version numbers. ``sealbox verify`` checks such a
    store without writing it (:func:`sealbox.store.sqlite.upgraded_copy`)."""

    def __init__(self, message: str, pending: list[int] | None = None) -> None:
        super().__init__(message)
        self.pending = list(pending or [])


class StoreReadOnlyError(StoreError):
    """The store, or the folder it lives in, cannot be written."""


class StoreRolledBackError(StoreError):
    """The store holds fewer events than its newest signed checkpoint; appending would fork the log."""


class StoreBusyError(StoreError):
    """A write made under :meth:`SqliteStore.no_wait() <sealbox.store.sqlite.SqliteStore.no_wait>` found
    the store's write lock held by another connection (another process, or another thread of this
    one): nothing was written, and it did not wait. Only raised inside ``no_wait()``; elsewhere a
    writer waits for the lock (up to the store's ``lock_timeout``)."""


class BackendUnsupportedError(StoreError):
    """The store's backend (PostgreSQL) does not offer this operation yet; the message names the
    operation and says what does (docs/storage.md, "PostgreSQL"). Nothing was read or written."""


class BlobNotFoundError(StoreError, KeyError):
    """No blob is stored under this commitment (never stored, or erased under retention)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "blob not found"


class RecordingError(SealboxError):
    """An event could not be recorded durably; the action it guarded did not run."""


class PolicyError(SealboxError):
    """A policy cannot be loaded or evaluated."""


class PolicyLoadError(PolicyError):
    """A policy file is missing or invalid.

    Attributes:
        path: the file.
        line: 1-based line of the problem, or ``None`` when it is not tied to a line.
        problem: what is wrong, in one sentence.
    """

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {problem}")


class ConfigError(SealboxError):
    """A configuration file or command-line option is invalid."""


class StepTakenError(ConfigError):
    """A tool call cannot be recorded: its run already has a tool call at the step it was to be
    recorded at, or with its call id, written by another writer of the run (another process: a
    gateway joined to the run, the agent that drives it). Found inside the write transaction that
    would have recorded the call's ``tool.call`` (docs/gateway.md, *Steps of a joined call*):
    nothing was recorded and the tool did not run.

    Attributes:
        run_id: the run.
        step: the step the call was to be recorded at.
        call_id: the call's id.
        conflict: ``"step"`` (another call has ``step``) or ``"call_id"`` (another call has ``call_id``).
        other: the other call's call id (``conflict == "step"``) or step (``"call_id"``).
    """

    def __init__(self, run_id: str, step: str, call_id: str, conflict: str, other: str | None) -> None:
        self.run_id, self.step, self.call_id, self.conflict, self.other = run_id, step, call_id, conflict, other
        if conflict == "step":
            what = f"a tool call at step {step!r} (call {other!r})"
        else:
            what = f"a tool call with call id {call_id!r} (at step {other!r})"
        super().__init__(f"run {run_id} already has {what}; call {call_id!r} was not recorded or run")
