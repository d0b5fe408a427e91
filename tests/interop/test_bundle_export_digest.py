"""The export's checkpoint commits to the bundle's content (a ``sealbox-export/v1`` extension line),
so consistently removing events or runs (lines, proofs, manifest, container all rebuilt) is detected."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from bundle_helpers import cli, members, rebuild_manifest, record_runs, rezip

import sealbox
from sealbox.interop.bundle import DIGESTED, EXPORT_EXTENSION, export_digest, zip_bytes
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, parse_note, sign_checkpoint
from sealbox.verify import verify_store


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digest")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], runs[1], "-o", path, cwd=folder)[0] == 0
    return path, store_path, runs, (store_path / "log.vkey").read_text().strip()


def _checkpoint(m):
    return Checkpoint.parse(parse_note(m["checkpoint"].decode()).text)


def _consistently(m, tmp_path, name):
    """Rebuild the manifest and container; drop blobs and snapshots nothing references any more."""
    path = tmp_path / name
    for _ in range(3):
        rebuild_manifest(m)
        path.write_bytes(zip_bytes(list(m.items())))
        report = verify_bundle(path)
        drop = {p.member for p in report.problems if p.code in ("blob_unreferenced", "snapshot_unreferenced")}
        if not drop:
            return report
        for member in ("blobs.jsonl", "snapshots.jsonl"):
            lines = m[member].splitlines(keepends=True)
            m[member] = b"".join(line for n, line in enumerate(lines, 1) if f"{member} line {n}" not in drop)
    return report


def test_the_checkpoint_carries_the_digest_of_the_content_members(case):
    path, _, _, vkey = case
    m = members(path)
    cp = _checkpoint(m)
    assert cp.extensions == (f"{EXPORT_EXTENSION} sha256:{export_digest([(n, m[n]) for n in DIGESTED]).hex()}",)
    # the definition a verifier writer can reproduce with sha256sum
    text = "".join(f"{hashlib.sha256(m[n]).hexdigest()}  {n}\n" for n in ("format", "log.vkey", "events.jsonl",
                                                                          "blobs.jsonl", "snapshots.jsonl"))
    assert cp.extensions[0].endswith(hashlib.sha256(text.encode()).hexdigest())
    assert json.loads(m["manifest.json"])["export_digest"] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert verify_bundle(path, trusted_vkey=vkey).ok


def test_sha256sum_computes_the_same_digest(case, tmp_path):
    m = members(case[0])
    for n in DIGESTED:
        (tmp_path / n).write_bytes(m[n])
    try:
        out = subprocess.run("sha256sum format log.vkey events.jsonl blobs.jsonl snapshots.jsonl | sha256sum",
                             shell=True, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no sha256sum")
    assert _checkpoint(m).extensions[0] == f"{EXPORT_EXTENSION} sha256:{out.split()[0]}"


def test_the_store_still_verifies_and_every_checkpoint_agrees(case):
    _, store_path, _, vkey = case
    store = sealbox.open_store(store_path, readonly=True)
    try:
        report = verify_store(store, trusted_vkey=vkey)
        assert report.ok, report.problems
        cps = store.checkpoints()
        plain = {c.tree_size: c.root_hash for c in cps if c.note.count("\n") == 5}
        with_ext = [c for c in cps if EXPORT_EXTENSION in c.note]
        assert with_ext and all(plain[c.tree_size] == c.root_hash for c in with_ext)
        assert EXPORT_EXTENSION not in (store_path / "checkpoint").read_text()
    finally:
        store.close()
    code, out, err = cli("verify", "-s", store_path, cwd=store_path.parent)
    assert code == 0, out + err


def test_consistently_removing_the_last_events_of_a_run_is_detected(case, tmp_path):
    path, _, runs, vkey = case
    m = members(path)
    lines = m["events.jsonl"].splitlines(keepends=True)
    seqs = [json.loads(line)["event"]["run_seq"] for line in lines if json.loads(line)["event"]["run_id"] == runs[0]]
    cut = max(seqs) - 2  # its last two events, run.ended among them
    m["events.jsonl"] = b"".join(line for line in lines if not (json.loads(line)["event"]["run_id"] == runs[0]
                                                                and json.loads(line)["event"]["run_seq"] > cut))
    report = _consistently(m, tmp_path, "tail.sbx")
    assert [(p.code, p.member) for p in report.problems] == [("export_digest_mismatch", "log.vkey, events.jsonl, "
                                                               "blobs.jsonl, snapshots.jsonl")]
    assert "do not match the export digest signed in the checkpoint" in report.problems[0].message
    code, out, _ = cli("verify", tmp_path / "tail.sbx", "--key", vkey, cwd=tmp_path)
    assert code == 1 and "export_digest_mismatch" in out


def test_removing_a_whole_run_is_detected(case, tmp_path):
    path, _, runs, _ = case
    m = members(path)
    lines = m["events.jsonl"].splitlines(keepends=True)
    m["events.jsonl"] = b"".join(line for line in lines if json.loads(line)["event"]["run_id"] != runs[1])
    report = _consistently(m, tmp_path, "run.sbx")
    assert [p.code for p in report.problems] == ["export_digest_mismatch"]
    assert [r["run_id"] for r in report.runs] == [runs[0]]


def test_a_changed_member_is_named_exactly_when_the_manifest_still_holds_its_hash(case, tmp_path):
    m = members(case[0])
    lines = m["events.jsonl"].splitlines(keepends=True)
    m["events.jsonl"] = b"".join(lines[:-1])
    rezip(tmp_path / "e.sbx", m)
    report = verify_bundle(tmp_path / "e.sbx")
    digest = [p for p in report.problems if p.code == "export_digest_mismatch"]
    assert [(p.member, p.message.split(" (")[0]) for p in digest] == [
        ("events.jsonl", "events.jsonl does not match the export digest signed in the checkpoint")]


@pytest.mark.parametrize("rebuilt", [False, True])
def test_a_format_downgraded_to_sealbox_bundle_1_is_named_as_the_changed_member(case, tmp_path, rebuilt):
    """Turning a /2 bundle into /1 (whose missing grants are notes, not problems) breaks the digest: the
    problem names ``format``, the member that changed, not the four intact ones."""
    path, _, _, vkey = case
    m = members(path)
    m["format"] = b"sealbox-bundle/1\n"
    if rebuilt:
        rebuild_manifest(m)
    rezip(tmp_path / "f.sbx", m)
    report = verify_bundle(tmp_path / "f.sbx", trusted_vkey=vkey)
    digest = [p for p in report.problems if p.code == "export_digest_mismatch"]
    assert not report.ok
    assert [(p.member, p.message.split(" (")[0]) for p in digest] == [
        ("format", "format does not match the export digest signed in the checkpoint")]


def _resigned(m, extensions):
    cp = _checkpoint(m)
    skey, vkey = generate_key(cp.origin)
    m["log.vkey"] = (vkey + "\n").encode()
    if extensions is None:
        extensions = (f"{EXPORT_EXTENSION} sha256:{export_digest([(n, m[n]) for n in DIGESTED]).hex()}",)
    m["checkpoint"] = sign_checkpoint(Checkpoint(cp.origin, cp.size, cp.root, extensions), Signer.from_key(skey)).encode()
    rebuild_manifest(m)


def test_a_checkpoint_without_the_extension_fails(case, tmp_path):
    path, _, _, vkey = case
    m = members(path)
    _resigned(m, ())  # an attacker's key, and no export digest
    rezip(tmp_path / "n.sbx", m)
    report = verify_bundle(tmp_path / "n.sbx")
    assert [(p.code, p.member) for p in report.problems] == [("export_digest_missing", "checkpoint")]
    code, out, _ = cli("verify", tmp_path / "n.sbx", "--key", vkey, cwd=tmp_path)
    assert code == 1
    assert "bundle_key_mismatch [log.vkey]" in out and "checkpoint_signature [checkpoint]" in out


def test_a_malformed_or_repeated_extension_fails(case, tmp_path):
    m = members(case[0])
    good = _checkpoint(m).extensions[0]
    for i, ext in enumerate([(good.upper().replace("SEALBOX-EXPORT/V1", EXPORT_EXTENSION),), (good, good),
                             (EXPORT_EXTENSION + " sha256:00",)]):
        bad = dict(m)
        _resigned(bad, ext)
        rezip(tmp_path / f"x{i}.sbx", bad)
        assert "export_digest_malformed" in [p.code for p in verify_bundle(tmp_path / f"x{i}.sbx").problems]


def test_a_read_only_store_cannot_export(case, tmp_path):
    from sealbox.interop.bundle import CheckpointNeeded, export_bundle

    _, store_path, runs, _ = case
    store = sealbox.open_store(store_path, readonly=True)
    try:
        with pytest.raises(CheckpointNeeded):
            export_bundle(store, [runs[0]], tmp_path / "ro.sbx")
    finally:
        store.close()
    assert not (tmp_path / "ro.sbx").exists()
