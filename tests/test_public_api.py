"""The public API is what ``sealbox.__all__`` lists; this pins it."""

from __future__ import annotations

import subprocess
import sys

import sealbox

EXPECTED = {
    "__version__", "KINDS", "SYSTEM_RUN_ID", "Event", "EventDraft", "Store", "SqliteStore", "CheckpointPolicy",
    "open_store", "init_store", "verify_store", "VerifyReport", "Problem", "SealboxError", "CanonicalizationError",
    "InvalidEventError", "ProofError", "NoteError", "StoreError", "NotAStoreError", "SchemaVersionError", "StoreUpgradeNeededError",
    "StoreReadOnlyError", "StoreRolledBackError", "BlobNotFoundError", "RecordingError", "PolicyError",
    "PolicyLoadError", "ConfigError", "Recorder", "ToolDenied", "Policy", "Snapshot", "ContentPolicy",
    "ApprovalPending", "ApprovalError", "RunSuspendedError", "IdentityError", "AccessError",
}


def test_all_is_pinned_and_every_name_resolves():
    assert set(sealbox.__all__) == EXPECTED
    for name in sealbox.__all__:
        assert getattr(sealbox, name) is not None


def test_every_error_derives_from_the_root():
    for name in sealbox.__all__:
        obj = getattr(sealbox, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, sealbox.SealboxError)


def test_the_offline_verifier_modules_import_without_the_store():
    code = "import sys, sealbox.ledger.merkle, sealbox.ledger.checkpoint; print(sorted(m for m in sys.modules if m.startswith('sealbox')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "sealbox.store" not in out and "sealbox.events" not in out


def test_sealbox_policies_is_reachable_after_a_bare_import():
    """The README and the error for a missing policy name ``sealbox.policies.ALLOW_ALL``."""
    code = "import sealbox; p = sealbox.policies.ALLOW_ALL; print(type(p).__name__, p.name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "Policy ALLOW_ALL\n"


def test_run_suspended_error_is_exported_beside_approval_pending():
    """RunSuspendedError (what a suspended run's call_tool/model_call/save_state raise) was reachable only
    as sealbox.approvals.RunSuspendedError, though the other errors an agent catches are exported."""
    from sealbox.approvals import RunSuspendedError

    assert sealbox.RunSuspendedError is RunSuspendedError
    assert issubclass(sealbox.RunSuspendedError, sealbox.SealboxError)
    err = sealbox.RunSuspendedError("run_1", ["apr_1"])
    assert (err.run_id, err.approval_ids, err.suspends_run) == ("run_1", ("apr_1",), True)
