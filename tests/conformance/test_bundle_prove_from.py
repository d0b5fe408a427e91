"""A bundle's consistency proof from a saved checkpoint (``export_bundle(prove_from=...)``), on every backend:
the proof the store computes verifies offline, and a store forked after the checkpoint cannot pass."""

from __future__ import annotations

from sealbox.interop.bundle import PROOFS, export_bundle
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


def _run(store, text):
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.note(text)
        return run.run_id


def test_honest_growth_is_proven_and_another_log_is_not(make_store, tmp_path):
    store, other = make_store(), make_store()
    first = _run(store, "before")
    saved = store.issue_checkpoint()
    later = _run(store, "after")
    summary = export_bundle(store, [first, later], tmp_path / "b.sbx", prove_from=[saved.tree_size])
    assert summary.proven_from == (saved.tree_size,) and summary.checkpoint_size > saved.tree_size
    report = verify_bundle(tmp_path / "b.sbx", trusted_vkey=store.pinned_vkey(),
                           checkpoints=[("saved", saved.note)])
    assert report.ok, [p.line() for p in report.problems]
    assert report.extends == ({"checkpoint": "saved", "size": saved.tree_size,
                               "root": "sha256:" + bytes(saved.root_hash).hex(), "by": "proof"},)
    # a checkpoint of another log (its own key) is refused, naming it
    report = verify_bundle(tmp_path / "b.sbx", trusted_vkey=store.pinned_vkey(),
                           checkpoints=[("theirs", other.issue_checkpoint().note)])
    assert not report.ok and [p.code for p in report.problems] == ["checkpoint_signature"]
    assert report.problems[0].message.startswith("theirs is not validly signed by the trusted key")


def test_a_proof_from_another_size_does_not_count(make_store, tmp_path):
    import zipfile

    store = make_store()
    _run(store, "shared")
    _run(store, "one history")
    saved = store.issue_checkpoint()
    later = _run(store, "growth")
    export_bundle(store, [later], tmp_path / "b.sbx", prove_from=[saved.tree_size - 1])
    with zipfile.ZipFile(tmp_path / "b.sbx") as z:
        assert z.namelist()[-1] == PROOFS
    report = verify_bundle(tmp_path / "b.sbx", trusted_vkey=store.pinned_vkey(), checkpoints=[("saved", saved.note)])
    assert [p.code for p in report.problems] == ["consistency_missing"]
    assert report.problems[0].message.startswith(f"saved: the bundle holds no consistency proof from size "
                                                 f"{saved.tree_size} to its checkpoint's size")
