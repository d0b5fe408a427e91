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


def test_the_proofs_member_holds_sizes_1_to_the_checkpoints_in_increasing_order(make_store, tmp_path):
    """docs/bundle-format.md: ``1 <= N <= the checkpoint's size``, strictly increasing ``N``. export_bundle
    refused nothing (a size above the log's became an empty proof line) and the verifier accepted lines
    in any order and sizes beyond its checkpoint."""
    import hashlib
    import json
    import zipfile

    import pytest

    from sealbox.canonical import canonical_bytes
    from sealbox.interop.bundle import MEMBERS, BundleError, zip_bytes

    store = make_store()
    _run(store, "one")
    first = store.issue_checkpoint()
    _run(store, "two")
    second = store.issue_checkpoint()
    later = _run(store, "three")
    size = store.size()
    for bad in (0, -1, size + 3):
        with pytest.raises(BundleError, match=f"prove_from: no consistency proof from size {bad}"):
            export_bundle(store, [later], tmp_path / "x.sbx", prove_from=[bad])
    assert not (tmp_path / "x.sbx").exists()
    export_bundle(store, [later], tmp_path / "b.sbx", prove_from=[first.tree_size, second.tree_size])
    with zipfile.ZipFile(tmp_path / "b.sbx") as z:
        m = {n: z.read(n) for n in z.namelist()}
    size = int(m["checkpoint"].decode().splitlines()[1])
    lines = m[PROOFS].splitlines(keepends=True)
    assert [json.loads(x)["size1"] for x in lines] == [first.tree_size, second.tree_size]

    def rewrite(proofs):
        members = dict(m, **{PROOFS: proofs})
        manifest = json.loads(members["manifest.json"])
        manifest["members"][-1].update(size=len(proofs), sha256="sha256:" + hashlib.sha256(proofs).hexdigest())
        members["manifest.json"] = canonical_bytes(manifest) + b"\n"
        (tmp_path / "t.sbx").write_bytes(zip_bytes([(n, members[n]) for n in (*MEMBERS, PROOFS)]))
        return verify_bundle(tmp_path / "t.sbx", trusted_vkey=store.pinned_vkey(),
                             checkpoints=[("saved", first.note)])

    report = rewrite(b"".join(lines))
    assert report.ok, [p.line() for p in report.problems]
    report = rewrite(lines[1] + lines[0])  # the line out of order is not read: the saved size has no proof
    assert [(p.code, p.member) for p in report.problems] == [("bundle_line_malformed", f"{PROOFS} line 2"),
                                                             ("consistency_missing", None)]
    assert "strictly increasing" in report.problems[0].message
    report = rewrite(b"".join(lines) + b'{"proof":[],"size1":%d}\n' % (size + 1))
    assert [(p.code, p.member) for p in report.problems] == [("bundle_line_malformed", f"{PROOFS} line 3")]
    assert f"above the checkpoint's size {size}" in report.problems[0].message
