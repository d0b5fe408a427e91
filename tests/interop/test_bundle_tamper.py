"""Changing any byte of a bundle is detected and named: sampled offsets over every member and
the container, trailing bytes, an added member, a removed event, a swapped blob, a re-signed checkpoint."""

from __future__ import annotations

import base64
import json
import random

import pytest
from bundle_helpers import cli, members, python_zip, rebuild_manifest, record_runs, rezip

from sealbox.interop.bundle import DIGESTED, MEMBERS, export_digest, export_extension, zip_regions
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, parse_note, sign_checkpoint


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tamper")
    store_path, runs, _ = record_runs(folder)
    path = folder / "case.sbx"
    assert cli("export", "-s", store_path, runs[0], "-o", path, cwd=folder)[0] == 0
    return path, (store_path / "log.vkey").read_text().strip()


def _offsets(path, n=300):
    """n offsets: the first and last byte of every container field and member, the rest at random."""
    m = members(path)
    regions = zip_regions(list(m.items()))
    picked = {s for s, e, _ in regions if e > s} | {e - 1 for s, e, _ in regions if e > s}
    rng = random.Random(8)
    size = path.stat().st_size
    while len(picked) < n:
        picked.add(rng.randrange(size))
    return sorted(picked), regions


def test_every_sampled_byte_flip_is_detected_and_named(case, tmp_path):
    path, _ = case
    data = path.read_bytes()
    offsets, regions = _offsets(path)
    assert len(offsets) >= 300
    missed = []
    for off in offsets:
        bad = bytearray(data)
        bad[off] ^= 0x01
        target = tmp_path / "m.sbx"
        target.write_bytes(bad)
        report = verify_bundle(target)
        region = next(w for s, e, w in regions if s <= off < e)
        if report.ok or not all(p.member for p in report.problems):
            missed.append((off, region))
            continue
        # the problem names the member the byte belongs to, or the container field
        name = region.split("'")[1] if "'" in region else None
        named = " ".join(p.member for p in report.problems)
        if name is not None and name not in named and region not in named:
            missed.append((off, region, named))
    assert missed == []


def test_a_flip_in_an_event_names_its_line_run_and_leaf(case, tmp_path):
    path, _ = case
    m = members(path)
    first = m["events.jsonl"].splitlines()[1]
    data = path.read_bytes()
    at = data.index(first) + first.index(b'"kind":"') + 9
    bad = bytearray(data)
    bad[at] ^= 0x01
    (tmp_path / "e.sbx").write_bytes(bad)
    report = verify_bundle(tmp_path / "e.sbx")
    proofs = [p for p in report.problems if p.code == "inclusion_proof"]
    assert proofs and proofs[0].member == "events.jsonl line 2" and proofs[0].leaf_index == json.loads(first)["leaf_index"]


def test_trailing_bytes_are_detected(case, tmp_path):
    path, _ = case
    (tmp_path / "t.sbx").write_bytes(path.read_bytes() + b"\n")
    report = verify_bundle(tmp_path / "t.sbx")
    assert [p.code for p in report.problems] == ["bundle_container"]
    assert report.problems[0].member == "1 byte(s) after the end of the ZIP archive"


def test_an_added_member_is_detected_even_in_a_canonical_container(case, tmp_path):
    m = members(case[0])
    m["notes.txt"] = b"trust me\n"
    rezip(tmp_path / "a.sbx", m)
    report = verify_bundle(tmp_path / "a.sbx")
    assert [(p.code, p.member) for p in report.problems] == [("bundle_member_unknown", "notes.txt")]


def test_a_zip_written_by_another_tool_is_not_canonical(case, tmp_path):
    (tmp_path / "z.sbx").write_bytes(python_zip(members(case[0])))
    report = verify_bundle(tmp_path / "z.sbx")
    assert [p.code for p in report.problems] == ["bundle_container"]
    assert "ZIP local header of 'format'" in report.problems[0].member


def test_a_removed_event_breaks_the_chain_and_the_manifest(case, tmp_path):
    m = members(case[0])
    lines = m["events.jsonl"].splitlines(keepends=True)
    removed = json.loads(lines[3])["event"]
    m["events.jsonl"] = b"".join(lines[:3] + lines[4:])
    rezip(tmp_path / "r.sbx", m)
    report = verify_bundle(tmp_path / "r.sbx")
    codes = {(p.code, p.member) for p in report.problems}
    assert ("chain_broken", "events.jsonl line 4") in codes
    assert ("bundle_manifest", "manifest.json") in codes
    broken = [p for p in report.problems if p.code == "chain_broken"][0]
    assert broken.run_id == removed["run_id"] and broken.expected == str(removed["run_seq"])


def test_a_swapped_blob_is_named(case, tmp_path):
    m = members(case[0])
    lines = m["blobs.jsonl"].splitlines(keepends=True)
    doc = json.loads(lines[0])
    swapped = b'{"content":"swapped","ref":"' + doc["ref"].encode() + b'","salt":"' + doc["salt"].encode() + b'"}\n'
    m["blobs.jsonl"] = b"".join([swapped] + lines[1:])
    rezip(tmp_path / "b.sbx", m)
    report = verify_bundle(tmp_path / "b.sbx")
    assert ("blob_mismatch", "blobs.jsonl line 1") in {(p.code, p.member) for p in report.problems}


def test_a_checkpoint_re_signed_with_another_key_fails_against_the_real_key(case, tmp_path):
    path, real_vkey = case
    m = members(path)
    note = m["checkpoint"].decode()
    cp = Checkpoint.parse(parse_note(note).text)
    skey, vkey = generate_key(cp.origin)
    m["log.vkey"] = (vkey + "\n").encode()
    digest = export_digest([(n, m[n]) for n in DIGESTED])  # log.vkey is digested: the attacker re-issues it too
    cp = Checkpoint(cp.origin, cp.size, cp.root, (export_extension(digest),))
    m["checkpoint"] = sign_checkpoint(cp, Signer.from_key(skey)).encode()
    rebuild_manifest(m)
    rezip(tmp_path / "k.sbx", m)
    report = verify_bundle(tmp_path / "k.sbx")  # self-consistent: that is all a bundle's own key proves
    assert report.consistent and not report.ok and report.status == "untrusted_key"
    code, out, _ = cli("verify", tmp_path / "k.sbx", "--key", real_vkey, cwd=tmp_path)
    assert code == 1
    assert "bundle_key_mismatch [log.vkey]" in out and "checkpoint_signature [checkpoint]" in out
    assert "key you gave (--key)" in out
    # a checkpoint that did not verify proves nothing, and the summary must not say otherwise
    assert "no checkpoint verified, so no event is proven to be in the log" in out and "proven against" not in out


@pytest.mark.parametrize("added", ["witness", "log_name", "repeat"])
def test_a_signature_line_added_to_the_checkpoint_is_detected(case, tmp_path, added):
    # An export's checkpoint carries exactly one signature line, the log's. Anyone could append another
    # (a "cosignature" by a witness of their own, a line under the log's name with another key id, or the
    # log's own line twice): the signed text and the log's signature stay valid, so the bundle was
    # reported "intact" though its checkpoint member was changed, and the added signer travelled with it.
    from sealbox.ledger.checkpoint import KEY_TYPE_COSIGNATURE_V1, sign_note

    path, real_vkey = case
    m = members(path)
    note = m["checkpoint"].decode()
    parsed = parse_note(note)
    origin = Checkpoint.parse(parsed.text).origin
    if added == "witness":
        wkey, _ = generate_key("witness.example/w1", KEY_TYPE_COSIGNATURE_V1)
        line = sign_note(parsed.text, Signer.from_key(wkey)).split("\n\n", 1)[1]
    elif added == "log_name":
        line = f"\u2014 {origin} " + base64.b64encode(b"\x00" * 68).decode() + "\n"
    else:
        line = note.split("\n\n", 1)[1]
    m["checkpoint"] = (note + line).encode()
    rebuild_manifest(m)
    rezip(tmp_path / "s.sbx", m)
    report = verify_bundle(tmp_path / "s.sbx", trusted_vkey=real_vkey)
    assert not report.ok
    assert [(p.code, p.member) for p in report.problems] == [("checkpoint_signature", "checkpoint")]
    assert "2 signature lines" in report.problems[0].message


def test_members_are_in_the_fixed_order(case):
    assert list(members(case[0])) == list(MEMBERS)
