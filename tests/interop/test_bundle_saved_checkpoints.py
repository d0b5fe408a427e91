"""`sealbox verify BUNDLE --checkpoint SAVED`: the bundle's log must extend a checkpoint saved earlier.

Real stores, real bundles, the CLI in a subprocess. A fork is built by copying a store and appending
different events to each copy after the checkpoint was saved."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil

import pytest
from bundle_helpers import cli, members, rezip

import sealbox
from sealbox.canonical import canonical_bytes
from sealbox.interop.bundle import MEMBERS, PROOFS
from sealbox.policies import ALLOW_ALL


def _append(store_path, text):
    store = sealbox.open_store(store_path)
    try:
        with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.note(text)
            return run.run_id
    finally:
        store.close()


def _checkpoint(store_path, target):
    code, out, err = cli("log", "checkpoint", "-s", store_path, cwd=target.parent)
    assert code == 0, err
    target.write_text(out)
    return target


def _export(store_path, run_id, target, *prove_from):
    args = [a for p in prove_from for a in ("--prove-from", p)]
    code, out, err = cli("export", "-s", store_path, run_id, "-o", target, *args, cwd=target.parent)
    assert code == 0, err
    return target


@pytest.fixture()
def forked(tmp_path):
    """(honest store, forked copy, saved checkpoint of the honest store, its size, vkey, honest run)."""
    honest = tmp_path / "honest"
    sealbox.init_store(honest).close()
    _append(honest, "before the checkpoint")
    fork = tmp_path / "fork"
    shutil.copytree(honest, fork)
    shutil.copytree(honest, tmp_path / "before")  # the log as it was before the checkpoint: a rollback
    run = _append(honest, "the genuine event")
    saved = _checkpoint(honest, tmp_path / "saved.txt")
    size = int(saved.read_text().splitlines()[1])
    _append(fork, "a different event in its place")
    vkey = (honest / "log.vkey").read_text().strip()
    return honest, fork, saved, size, vkey, run


def test_honest_growth_verifies_with_the_proof_the_export_carries(forked, tmp_path):
    honest, _, saved, size, vkey, run = forked
    # a bundle exported at the saved checkpoint's own size: no proof needed (an older-format bundle: no proofs)
    same = _export(honest, run, tmp_path / "same.sbx")
    assert list(members(same)) == list(MEMBERS)
    code, out, _ = cli("verify", same, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 0 and f"extends the checkpoint given in {saved} (size {size}," in out
    assert "it is the bundle's own tree" in out
    later = _append(honest, "the log grows after the checkpoint was saved")
    bundle = _export(honest, later, tmp_path / "b.sbx", saved)
    m = members(bundle)
    assert list(m) == [*MEMBERS, PROOFS]
    (line,) = m[PROOFS].splitlines()
    assert json.loads(line)["size1"] == size and json.loads(line)["proof"]
    code, out, err = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 0, out + err
    assert out.startswith("Verified: the bundle is intact.")
    assert (f"The bundle's log extends the checkpoint given in {saved} (size {size}, "
            f"root sha256:{sealbox.open_store(honest, readonly=True).root(size).hex()}): "
            "an RFC 9162 consistency proof.") in out
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--json", cwd=tmp_path)
    assert code == 0 and json.loads(out)["extends"][0]["by"] == "proof"
    # the same bundle verifies without --checkpoint too
    code, out, _ = cli("verify", bundle, "--key", vkey, cwd=tmp_path)
    assert code == 0 and "extends" not in out


def test_a_fork_of_the_same_size_fails_naming_the_saved_checkpoint(forked, tmp_path):
    _, fork, saved, size, vkey, _ = forked
    store = sealbox.open_store(fork, readonly=True)
    run = store.query_runs(agent="a")[-1]["run_id"]
    assert store.size() == size
    store.close()
    bundle = _export(fork, run, tmp_path / "f.sbx")
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    (line,) = [x for x in out.splitlines() if x.startswith("checkpoint_fork")]
    assert line.startswith(f"checkpoint_fork: the checkpoint given in {saved}: the bundle's log has another root "
                           f"at size {size} (the log was rewritten or forked after that checkpoint was saved)")


def test_a_grown_fork_has_no_proof_and_a_forged_one_fails(forked, tmp_path):
    honest, fork, saved, size, vkey, _ = forked
    later = _append(fork, "the fork grows")
    # the forked store cannot prove it extends the saved checkpoint: the exporter refuses
    code, out, err = cli("export", "-s", fork, later, "-o", tmp_path / "x.sbx", "--prove-from", saved, cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: --prove-from {saved}: this log's root at "
                                                                 f"size {size} is not the checkpoint's")
    assert not (tmp_path / "x.sbx").exists()
    # a bundle of the fork without a proof: not verified, it says what to ask for
    bundle = _export(fork, later, tmp_path / "f.sbx")
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    assert f"consistency_missing: the checkpoint given in {saved}: the bundle holds no consistency proof from size " \
           f"{size}" in out and "--prove-from" in out
    # an operator planting a proof made on the honest log (or any other) in the fork's bundle: the proof fails
    good = _export(honest, _append(honest, "honest growth"), tmp_path / "g.sbx", saved)
    m = members(bundle)
    m[PROOFS] = members(good)[PROOFS]
    manifest = json.loads(m["manifest.json"])
    manifest["members"].append({"name": PROOFS, "size": len(m[PROOFS]),
                                "sha256": "sha256:" + hashlib.sha256(m[PROOFS]).hexdigest()})
    m["manifest.json"] = canonical_bytes(manifest) + b"\n"
    rezip(bundle, m)
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    lines = [x for x in out.splitlines() if x.startswith("checkpoint_")]
    assert len(lines) == 1 and lines[0].startswith(
        f"checkpoint_fork: the checkpoint given in {saved}: the bundle's log does not extend it: its consistency "
        f"proof from size {size} does not verify against both roots")
    assert "bundle_manifest" not in out


def test_a_rollback_fails(forked, tmp_path):
    _, _, saved, size, vkey, _ = forked
    back = tmp_path / "before"  # the log rolled back to before the checkpoint was saved
    store = sealbox.open_store(back, readonly=True)
    first, smaller = store.query_runs(agent="a")[0]["run_id"], store.size()
    store.close()
    bundle = _export(back, first, tmp_path / "r.sbx")
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    assert (f"log_truncated: the checkpoint given in {saved} was signed for {size} events but the bundle's "
            f"checkpoint covers only {smaller}: either the bundle was exported before that checkpoint was saved "
            f"(then `sealbox log prove --from-size {smaller} --to-size {size}`, given with --consistency, shows "
            "that the log grew from the bundle's checkpoint to it) or the log was rolled back or cut after it was "
            "saved") in out
    code, out, err = cli("export", "-s", back, first, "-o", tmp_path / "y.sbx", "--prove-from", saved, cwd=tmp_path)
    assert code == 2 and err.startswith(f"error: --prove-from {saved}: signed for {size} events, but this log "
                                        f"holds {smaller}")


def test_a_checkpoint_of_another_log_is_refused(forked, tmp_path):
    honest, _, _, _, vkey, run = forked
    other = tmp_path / "other"
    sealbox.init_store(other).close()
    theirs = _checkpoint(other, tmp_path / "theirs.txt")
    bundle = _export(honest, run, tmp_path / "b.sbx")
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", theirs, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    (line,) = [x for x in out.splitlines() if x.startswith("checkpoint_")]
    assert line.startswith(f"checkpoint_signature: the checkpoint given in {theirs} is not validly signed by the "
                           "trusted key")
    code, _, err = cli("export", "-s", honest, run, "-o", tmp_path / "z.sbx", "--prove-from", theirs, cwd=tmp_path)
    assert code == 2 and err.startswith(f"error: --prove-from {theirs}: not a checkpoint of this log")


def test_the_proofs_member_is_checked_like_every_other(forked, tmp_path):
    honest, _, saved, size, vkey, _ = forked
    later = _append(honest, "growth")
    code, out, err = cli("export", "-s", honest, later, "-o", tmp_path / "b.sbx", "--prove-from", saved, "--prove-from",
                         saved, cwd=tmp_path)
    assert code == 0, err
    assert f", with a consistency proof from size {size}. Check it anywhere" in out
    bundle = tmp_path / "b.sbx"
    original = members(bundle)
    # the manifest lists the member (size and hash): dropping the member shows
    m = dict(original)
    del m[PROOFS]
    rezip(bundle, m)
    code, out, _ = cli("verify", bundle, "--key", vkey, cwd=tmp_path)
    assert code == 1 and "bundle_manifest [manifest.json]: manifest.json is not what the bundle's content says " \
                         "(fields members)" in out
    # a line that is not canonical is reported, even without --checkpoint
    m = dict(original)
    m[PROOFS] = m[PROOFS].replace(b'{"proof":', b'{ "proof":')
    rezip(bundle, m)
    code, out, _ = cli("verify", bundle, "--key", vkey, cwd=tmp_path)
    assert code == 1 and f"bundle_line_malformed [{PROOFS} line 1]: the line cannot be read" in out
    # a proof for another size than the one saved does not count as one for it
    m = dict(original)
    doc = json.loads(m[PROOFS])
    m[PROOFS] = canonical_bytes({"proof": doc["proof"], "size1": size - 1}) + b"\n"
    manifest = json.loads(m["manifest.json"])
    manifest["members"][-1].update(size=len(m[PROOFS]), sha256="sha256:" + hashlib.sha256(m[PROOFS]).hexdigest())
    m["manifest.json"] = canonical_bytes(manifest) + b"\n"
    rezip(bundle, m)
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 1 and "Verified" not in out and "consistency_missing" in out and "bundle_manifest" not in out


def test_prove_from_goes_with_a_bundle(forked, tmp_path):
    honest, _, saved, _, _, run = forked
    code, _, err = cli("export", "-s", honest, run, "--parquet", tmp_path / "x.parquet", "--prove-from", saved,
                       cwd=tmp_path)
    assert code == 2 and "--prove-from goes with -o" in err


# ---------------------------------------------------------------- --proof-from-saved: a proof given beside a bundle


def _bundle_size(bundle, vkey, cwd):
    code, out, err = cli("verify", bundle, "--key", vkey, "--json", cwd=cwd)
    assert code == 0, out + err
    return json.loads(out)["checkpoint_size"]


def _prove(store_path, size1, size2, target):
    code, out, err = cli("log", "prove", "-s", store_path, "--from-size", str(size1), "--to-size", str(size2),
                         cwd=target.parent)
    assert code == 0, err
    target.write_text(out)
    return target


def test_a_proof_given_beside_a_bundle_without_one_verifies(forked, tmp_path):
    honest, _, saved, size, vkey, _ = forked
    later = _append(honest, "the log grows after the checkpoint was saved")
    bundle = _export(honest, later, tmp_path / "b.sbx")  # without --prove-from
    assert PROOFS not in members(bundle)
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    assert "consistency_missing" in out and "--proof-from-saved" in out
    m = _bundle_size(bundle, vkey, tmp_path)
    assert m > size
    proof = _prove(honest, size, m, tmp_path / "proof.json")
    code, out, err = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", proof,
                         cwd=tmp_path)
    assert code == 0 and err == "", out + err
    assert out.startswith("Verified: the bundle is intact.")
    root = sealbox.open_store(honest, readonly=True).root(size).hex()
    assert (f"The bundle's log extends the checkpoint given in {saved} (size {size}, root sha256:{root}): an RFC "
            "9162 consistency proof given with --proof-from-saved." in out)
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", proof, "--json",
                       cwd=tmp_path)
    assert code == 0 and json.loads(out)["extends"] == [
        {"checkpoint": f"the checkpoint given in {saved}", "size": size, "root": f"sha256:{root}", "by": "given_proof"}]


def test_a_proof_given_for_a_fork_fails(forked, tmp_path):
    honest, fork, saved, size, vkey, _ = forked
    later = _append(fork, "the fork grows")
    bundle = _export(fork, later, tmp_path / "f.sbx")
    m = _bundle_size(bundle, vkey, tmp_path)
    # the fork's own proof (the fork's root at the saved size is not the saved one)
    own = _prove(fork, size, m, tmp_path / "own.json")
    # and a proof made on the honest log, grown to the same size
    while sealbox.open_store(honest, readonly=True).size() < m:
        _append(honest, "honest growth")
    other = _prove(honest, size, m, tmp_path / "other.json")
    for proof in (own, other):
        code, out, err = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", proof,
                             cwd=tmp_path)
        assert code == 1 and "Verified" not in out and err == "", out + err
        lines = [x for x in out.splitlines() if x.startswith(("checkpoint_", "consistency_"))]
        assert len(lines) == 1 and lines[0].startswith(
            f"checkpoint_fork: the checkpoint given in {saved}: the bundle's log does not extend it: its root at that "
            f"size is not proven by the proof given in {proof} ("), out


def test_a_proof_given_for_other_sizes_fails(forked, tmp_path):
    honest, _, saved, size, vkey, _ = forked
    later = _append(honest, "grows")
    bundle = _export(honest, later, tmp_path / "b.sbx")
    m = _bundle_size(bundle, vkey, tmp_path)
    # to another size than the bundle's checkpoint: one line naming both sizes
    short = _prove(honest, size, m - 1, tmp_path / "short.json")
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", short,
                       cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    lines = [x for x in out.splitlines() if x.startswith(("checkpoint_", "consistency_"))]
    assert lines == [f"consistency_size: the checkpoint given in {saved}: the proof given in {short} is a proof from "
                     f"size {size} to {m - 1}, but the bundle's checkpoint has size {m} (run `sealbox log prove "
                     f"--from-size {size} --to-size {m}`) (expected a proof from size {size} to {m}, found from "
                     f"size {size} to {m - 1})"], out
    # from another size than the saved checkpoint's: it proves nothing about it
    low = _prove(honest, size - 1, m, tmp_path / "low.json")
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", low,
                       cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    assert f"consistency_missing: the checkpoint given in {saved}" in out
    assert (f"consistency_size: the proof given in {low} is a proof from size {size - 1}, but no saved checkpoint "
            "given (--checkpoint) has that size" in out)
    # a proof whose sizes are right but whose hashes were altered
    doc = json.loads(_prove(honest, size, m, tmp_path / "p.json").read_text())
    doc["proof"][0] = base64.b64encode(bytes(32)).decode()
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved",
                       tmp_path / "bad.json", cwd=tmp_path)
    assert code == 1 and "Verified" not in out and "checkpoint_fork" in out


@pytest.mark.parametrize("text, message", [
    ("not json", "cannot read the consistency proof {p}: Expecting value"),
    ('{"size1": 1, "size2": 2}', "{p}: the consistency proof's `proof` must be a list of base64 hashes"),
    ('{"size1": 0, "size2": 2, "proof": []}', "{p}: the consistency proof needs integer size1 and size2 (1 or more)"),
    ('{"size1": 1, "size2": 2, "proof": ["!!"]}', "{p}: the consistency proof holds invalid base64"),
    ('[1, 2]', "{p}: the consistency proof is not a JSON object"),
])
def test_a_malformed_proof_given_is_bad_input(forked, tmp_path, text, message):
    honest, _, saved, _, vkey, run = forked
    bundle = _export(honest, run, tmp_path / "b.sbx")
    p = tmp_path / "p.json"
    p.write_text(text)
    code, out, err = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", p,
                         cwd=tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1, out + err
    assert err.startswith("error: " + message.format(p=p)), err


def test_proof_from_saved_needs_a_bundle_and_a_saved_checkpoint(forked, tmp_path):
    honest, _, saved, size, vkey, run = forked
    bundle = _export(honest, run, tmp_path / "b.sbx")
    proof = _prove(honest, size, size, tmp_path / "p.json")
    code, out, err = cli("verify", bundle, "--key", vkey, "--proof-from-saved", proof, cwd=tmp_path)
    assert (code, out) == (2, "") and err == ("error: --proof-from-saved proves a saved checkpoint: give that "
                                              "checkpoint with --checkpoint\n")
    code, out, err = cli("verify", honest, "--checkpoint", saved, "--proof-from-saved", proof, cwd=tmp_path)
    assert (code, out) == (2, "") and err.startswith("error: --proof-from-saved applies to a bundle (a file)")
    a = _prove(honest, size, size, tmp_path / "a.json")
    code, out, err = cli("verify", bundle, "--key", vkey, "--checkpoint", saved, "--proof-from-saved", proof,
                         "--proof-from-saved", a, cwd=tmp_path)
    assert (code, out) == (2, "") and err == (f"error: the proof given in {proof} and the proof given in {a} are both "
                                              f"consistency proofs from size {size}: give one\n")
    code, out, err = cli("verify", "--help", cwd=tmp_path)
    assert code == 0 and "--proof-from-saved" in out and "--to-size M" in out


def _unverifiable_saved(honest, saved, tmp_path):
    """Saved checkpoints that do not open with the honest log's key: (name, file, what the one line says)."""
    from sealbox.ledger.checkpoint import Signer, sign_note

    text = saved.read_text()
    body, sig = text.split("\n\n")
    name, b64 = sig.strip().rsplit(" ", 1)
    raw = bytearray(base64.b64decode(b64))
    raw[-1] ^= 1  # one bit of the signature flipped
    bad = tmp_path / "badsig.txt"
    bad.write_text(f"{body}\n\n{name} {base64.b64encode(bytes(raw)).decode()}\n")
    other = tmp_path / "another"
    sealbox.init_store(other).close()
    wrong = _checkpoint(other, tmp_path / "wrongkey.txt")  # another log's key
    signer = Signer.from_key((honest / "log.key").read_text().strip())  # the log's own key, another origin
    elsewhere = tmp_path / "origin.txt"
    elsewhere.write_text(sign_note("example.org/elsewhere\n" + body.split("\n", 1)[1] + "\n", signer))
    return [("bad signature", bad, "invalid signature for key"),
            ("wrong key", wrong, "it carries no signature by that key (key id "),
            ("wrong origin", elsewhere, "checkpoint origin 'example.org/elsewhere' is not the key name")]


def test_a_saved_checkpoint_that_does_not_verify_is_one_line_with_or_without_a_proof(forked, tmp_path):
    """A saved checkpoint whose signature does not verify (bit flipped, another log's key, another origin
    signed with the log's key): one problem, checkpoint_signature naming it, exit 1; whether the bundle
    carries a proof (--prove-from), none, or one is given beside it (--proof-from-saved), which then
    proves nothing and is not also reported as starting at a size no saved checkpoint has."""
    honest, _, saved, size, vkey, _ = forked
    later = _append(honest, "the log grows after the checkpoint was saved")
    plain = _export(honest, later, tmp_path / "plain.sbx")
    proved = _export(honest, later, tmp_path / "proved.sbx", saved)
    proof = _prove(honest, size, _bundle_size(plain, vkey, tmp_path), tmp_path / "proof.json")
    for what, file, why in _unverifiable_saved(honest, saved, tmp_path):
        for bundle, extra in ((plain, ()), (proved, ()), (plain, ("--proof-from-saved", proof)),
                              (proved, ("--proof-from-saved", proof))):
            code, out, err = cli("verify", bundle, "--key", vkey, "--checkpoint", file, *extra, cwd=tmp_path)
            assert code == 1 and err == "", (what, out, err)
            problems = out.splitlines()[:-2]
            assert len(problems) == 1 and problems[0].startswith(
                f"checkpoint_signature: the checkpoint given in {file} is not validly signed by the trusted key "), \
                (what, extra, out)
            assert why in problems[0], (what, out)
            assert out.splitlines()[-2].startswith("NOT VERIFIED: 1 problem(s) found."), (what, out)
            code, out, _ = cli("verify", bundle, "--key", vkey, "--checkpoint", file, *extra, "--json", cwd=tmp_path)
            assert code == 1 and [p["code"] for p in json.loads(out)["problems"]] == ["checkpoint_signature"]


def test_a_bundle_exported_before_the_checkpoint_was_saved_is_not_called_a_rollback(forked, tmp_path):
    """The auditor saved a checkpoint after the bundle was exported (the usual order when a case is
    reopened): verify said `log_truncated: ... the log was rolled back or cut after it was saved`, exit 1,
    even with a --consistency proof from the bundle's size to exactly that checkpoint, which it printed as
    verified in the same output. Such a proof now shows the saved checkpoint extends the bundle's log
    (exit 0); without it the problem says both possibilities and how to tell them apart."""
    honest, _, _, _, vkey, run = forked
    early = _export(honest, run, tmp_path / "early.sbx")
    bundle_size = json.loads(cli("verify", early, "--key", vkey, "--json", cwd=tmp_path)[1])["checkpoint_size"]
    _append(honest, "the log grows after the export")
    later = _checkpoint(honest, tmp_path / "later.txt")
    later_size = int(later.read_text().splitlines()[1])
    code, out, _ = cli("verify", early, "--key", vkey, "--checkpoint", later, cwd=tmp_path)
    assert code == 1 and "Verified" not in out
    assert (f"log_truncated: the checkpoint given in {later} was signed for {later_size} events but the bundle's "
            f"checkpoint covers only {bundle_size}: either the bundle was exported before that checkpoint was "
            f"saved (then `sealbox log prove --from-size {bundle_size} --to-size {later_size}`, given with "
            "--consistency, shows that the log grew from the bundle's checkpoint to it) or the log was rolled "
            "back or cut after it was saved") in out
    code, proof, err = cli("log", "prove", "-s", honest, "--from-size", str(bundle_size), "--to-size",
                           str(later_size), cwd=tmp_path)
    assert code == 0, err
    (tmp_path / "proof.json").write_text(proof)
    code, out, err = cli("verify", early, "--key", vkey, "--checkpoint", later, "--consistency",
                         tmp_path / "proof.json", cwd=tmp_path)
    assert code == 0, out + err
    assert out.startswith("Verified: the bundle is intact.")
    later_root = "sha256:" + base64.b64decode(later.read_text().splitlines()[2]).hex()
    assert (f"The checkpoint given in {later} (size {later_size}, root {later_root}) extends the bundle's log: "
            "it was saved after the export, and the --consistency proof shows the log grew from the bundle's "
            "checkpoint to it.") in out
    code, out, _ = cli("verify", early, "--key", vkey, "--checkpoint", later, "--consistency",
                       tmp_path / "proof.json", "--json", cwd=tmp_path)
    assert code == 0 and json.loads(out)["extends"] == [
        {"checkpoint": f"the checkpoint given in {later}", "size": later_size, "root": later_root, "by": "newer"}]


@pytest.mark.parametrize("text, message", [
    ('{"size1": 1e999, "size2": 2, "proof": []}', "{p}: the consistency proof needs integer size1 and size2"),
    ('{"size1": 1, "size2": 2, "proof": []}', "{p}: the consistency proof carries no signed checkpoint of size2"),
    ('[1, 2]', "{p}: the consistency proof is not a JSON object"),
])
def test_a_malformed_consistency_proof_is_bad_input_naming_its_file(forked, tmp_path, text, message):
    """--consistency FILE named the file only when it could not be read, not when its shape was wrong
    (``error: the consistency proof needs integer size1 and size2``), unlike --proof-from-saved."""
    honest, _, _, _, vkey, run = forked
    bundle = _export(honest, run, tmp_path / "b.sbx")
    p = tmp_path / "c.json"
    p.write_text(text)
    code, out, err = cli("verify", bundle, "--key", vkey, "--consistency", p, cwd=tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1, out + err
    assert err.startswith("error: " + message.format(p=p)), err
