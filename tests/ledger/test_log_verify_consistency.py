"""``sealbox log verify-consistency --key VKEY OLD NEW PROOF``: an auditor who does not trust Sealbox
checks, offline, with only the log's key and files they saved, that a newer checkpoint extends an
older one (RFC 9162 §2.1.4.2). No store, no bundle: every test removes the store before verifying."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

import sealbox
from sealbox.cli.main import main
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, sign_checkpoint
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "vectors" / "rfc6962_merkle_vectors.json").read_text())
CONSISTENCY = VECTORS["consistency_probes"]["probes"]


def _run(capsys, *args):
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _record(store, agent: str, calls: int) -> None:
    with Recorder(store, policy=ALLOW_ALL).run(agent=agent) as run:
        for i in range(calls):
            run.call_tool("db", "read_query", {"query": f"SELECT {i}", "agent": agent}, lambda **_: [[1]])


def _save_checkpoint(capsys, store_path: Path, out: Path) -> int:
    """What an auditor keeps: `sealbox log checkpoint`, after the store signed one at its current size."""
    store = sealbox.open_store(store_path)
    try:
        size = store.issue_checkpoint().tree_size
    finally:
        store.close()
    _, text, _ = _run_ok(capsys, "log", "checkpoint", "-s", store_path)
    out.write_text(text)
    return size


def _run_ok(capsys, *args):
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, None), err
    return 0, out, err


def _prove(capsys, store_path: Path, size1: int, size2: int, out: Path) -> None:
    _, text, _ = _run_ok(capsys, "log", "prove", "-s", store_path, "--from-size", size1, "--to-size", size2)
    out.write_text(text)


@pytest.fixture
def saved(tmp_path, capsys):
    """A store, a checkpoint saved, more events, a second checkpoint saved, the proof between them; then
    the store's key kept and the store itself deleted."""
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    _record(store, "bot", 2)
    store.close()
    size1 = _save_checkpoint(capsys, path, tmp_path / "old.txt")
    store = sealbox.open_store(path)
    _record(store, "bot", 3)
    store.close()
    size2 = _save_checkpoint(capsys, path, tmp_path / "new.txt")
    _prove(capsys, path, size1, size2, tmp_path / "proof.json")
    shutil.copy(path / "log.vkey", tmp_path / "log.vkey")
    shutil.rmtree(path)
    return tmp_path, size1, size2


def _verify(capsys, d: Path, old="old.txt", new="new.txt", proof="proof.json", key="log.vkey"):
    return _run(capsys, "log", "verify-consistency", "--key", d / key, d / old, d / new, d / proof)


def test_two_saved_checkpoints_and_the_proof_are_consistent(saved, capsys):
    d, size1, size2 = saved
    assert size1 < size2
    assert _verify(capsys, d) == (0, f"consistent: size {size1} -> size {size2}\n", "")


def test_the_key_string_works_as_well_as_the_key_file(saved, capsys):
    d, size1, size2 = saved
    key = (d / "log.vkey").read_text().strip()
    assert _run(capsys, "log", "verify-consistency", "--key", key, d / "old.txt", d / "new.txt", d / "proof.json") == (
        0, f"consistent: size {size1} -> size {size2}\n", "")


def test_checkpoint_json_output_is_accepted(tmp_path, capsys):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    _record(store, "bot", 1)
    size1 = store.issue_checkpoint().tree_size
    store.close()
    (tmp_path / "old.json").write_text(_run_ok(capsys, "log", "checkpoint", "--json", "-s", path)[1])
    store = sealbox.open_store(path)
    _record(store, "bot", 1)
    size2 = store.issue_checkpoint().tree_size
    store.close()
    (tmp_path / "new.json").write_text(_run_ok(capsys, "log", "checkpoint", "--json", "-s", path)[1])
    _prove(capsys, path, size1, size2, tmp_path / "proof.json")
    assert _run(capsys, "log", "verify-consistency", "--key", path / "log.vkey", tmp_path / "old.json",
                tmp_path / "new.json", tmp_path / "proof.json") == (0, f"consistent: size {size1} -> size {size2}\n", "")


def test_a_forked_store_is_refused(tmp_path, capsys):
    """The store folder copied after the first saved checkpoint, different events appended to each copy:
    the fork's checkpoint is validly signed by the same key, and no proof joins it to the original."""
    a = tmp_path / "a"
    store = sealbox.init_store(a)
    _record(store, "bot", 2)
    store.close()
    size1 = _save_checkpoint(capsys, a, tmp_path / "old.txt")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    for path, agent in ((a, "honest"), (b, "forged")):
        store = sealbox.open_store(path)
        _record(store, agent, 3)
        store.close()
    size_a = _save_checkpoint(capsys, a, tmp_path / "new-a.txt")
    size_b = _save_checkpoint(capsys, b, tmp_path / "new-b.txt")
    assert size_a == size_b  # same size, different roots
    _prove(capsys, a, size1, size_a, tmp_path / "proof-a.json")
    _prove(capsys, b, size1, size_b, tmp_path / "proof-b.json")
    assert (a / "log.vkey").read_text() == (b / "log.vkey").read_text()
    assert _verify(capsys, tmp_path, new="new-a.txt", proof="proof-a.json", key="a/log.vkey")[0] == 0
    assert _verify(capsys, tmp_path, new="new-b.txt", proof="proof-b.json", key="a/log.vkey")[0] == 0  # each alone

    # the fork's checkpoint with the original's proof, and the reverse: refused
    for new, proof in (("new-b.txt", "proof-a.json"), ("new-a.txt", "proof-b.json")):
        code, out, err = _verify(capsys, tmp_path, new=new, proof=proof, key="a/log.vkey")
        assert (code, out) == (1, "")
        assert err.startswith(f"error: not consistent: the log of {tmp_path / new} (size {size_a}) does not extend "
                              f"the log of {tmp_path / 'old.txt'} (size {size1}): consistency proof does not lead to")
        assert err.count("\n") == 1
    # the two newer checkpoints, same size, different roots: neither extends the other
    code, out, err = _verify(capsys, tmp_path, old="new-a.txt", new="new-b.txt", proof="proof-a.json",
                             key="a/log.vkey")
    assert code == 2 and f"is a proof from size {size1} to {size_a}" in err
    (tmp_path / "empty.json").write_text(json.dumps({"size1": size_a, "size2": size_a, "proof": []}))
    assert _verify(capsys, tmp_path, old="new-a.txt", new="new-b.txt", proof="empty.json", key="a/log.vkey") == (
        1, "", f"error: not consistent: the log of {tmp_path / 'new-b.txt'} (size {size_a}) does not extend the log "
               f"of {tmp_path / 'new-a.txt'} (size {size_a}): equal sizes but different roots; a forked or rewritten "
               "log, or a proof of another log\n")


def test_a_changed_signature_is_refused(saved, capsys):
    d, _, _ = saved
    text = (d / "new.txt").read_text()
    body, sig = text.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(sig))
    raw[10] ^= 1
    (d / "bad.txt").write_text(body + " " + base64.b64encode(bytes(raw)).decode() + "\n")
    code, out, err = _verify(capsys, d, new="bad.txt")
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {d / 'bad.txt'}: the signature by ")
    assert "does not verify (invalid signature for key" in err and err.count("\n") == 1


def test_a_changed_size_under_the_signature_is_refused(saved, capsys):
    d, _, size2 = saved
    lines = (d / "new.txt").read_text().split("\n")
    lines[1] = str(size2 + 1)
    (d / "bad.txt").write_text("\n".join(lines))
    code, _, err = _verify(capsys, d, new="bad.txt")
    assert code == 1 and "does not verify (invalid signature for key" in err


def test_the_wrong_key_is_refused(saved, capsys):
    d, _, _ = saved
    _, vkey = generate_key("other.example/log")
    (d / "other.vkey").write_text(vkey + "\n")
    code, out, err = _verify(capsys, d, key="other.vkey")
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {d / 'old.txt'} is not signed by the given key other.example/log+")
    assert err.endswith(": the wrong key, or a checkpoint of another log\n")


def test_a_key_with_the_logs_name_but_another_secret_is_refused(saved, capsys):
    d, _, _ = saved
    origin = (d / "old.txt").read_text().split("\n")[0]
    _, vkey = generate_key(origin)
    code, _, err = _run(
        capsys, "log", "verify-consistency", "--key", vkey, d / "old.txt", d / "new.txt", d / "proof.json")
    assert code == 1 and f"is not signed by the given key {origin}+" in err


def test_checkpoints_of_two_logs_are_refused(saved, tmp_path, capsys):
    d, _, _ = saved
    other = tmp_path / "other"
    store = sealbox.init_store(other, origin="other.example/log")
    _record(store, "bot", 3)
    store.close()
    _save_checkpoint(capsys, other, d / "other.txt")
    assert _verify(capsys, d, new="other.txt") == (
        1, "", f"error: {d / 'old.txt'} and {d / 'other.txt'} are checkpoints of two logs: origin "
               f"{(d / 'old.txt').read_text().split(chr(10))[0]!r} and origin 'other.example/log'\n")


def test_new_smaller_than_old_is_refused(saved, capsys):
    d, size1, size2 = saved
    assert _verify(capsys, d, old="new.txt", new="old.txt") == (
        1, "", f"error: {d / 'old.txt'} (size {size1}) is smaller than {d / 'new.txt'} (size {size2}): give the "
               "older checkpoint first; a log that shrank was rolled back\n")


@pytest.mark.parametrize("content, why", [
    ("not json", " is not a `sealbox log prove` proof: not JSON ("),
    ("[1, 2]", " is not a `sealbox log prove` proof: not a JSON object"),
    ('{"size1": 1, "size2": 2}', ": \"proof\" must be a list of base64 hashes"),
    ('{"size1": "1", "size2": 2, "proof": []}', ": \"size1\" must be an integer of 1 or more"),
    ('{"size1": 1, "size2": 2, "proof": ["%%%"]}', ": proof[0] is not base64"),
    ('{"size1": 1, "size2": 2, "proof": ["AAAA"]}', ": proof[0] is 3 bytes, not a 32-byte SHA-256 hash"),
])
def test_a_malformed_proof_file_is_one_error_line(saved, capsys, content, why):
    d, _, _ = saved
    (d / "bad.json").write_text(content)
    code, out, err = _verify(capsys, d, proof="bad.json")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {d / 'bad.json'}{why}") and err.count("\n") == 1


def test_a_proof_between_other_sizes_names_the_prove_command(saved, capsys):
    d, size1, size2 = saved
    doc = json.loads((d / "proof.json").read_text())
    doc["size1"] = size1 + 1
    (d / "other.json").write_text(json.dumps(doc))
    assert _verify(capsys, d, proof="other.json") == (
        2, "", f"error: {d / 'other.json'} is a proof from size {size1 + 1} to {size2}, but {d / 'old.txt'} has "
               f"size {size1} and {d / 'new.txt'} size {size2}: run `sealbox log prove --from-size {size1} "
               f"--to-size {size2}`\n")


@pytest.mark.parametrize("which", ["old", "new", "proof", "key"])
def test_a_missing_file_is_one_error_line(saved, capsys, which):
    d, _, _ = saved
    names = {"old": "old.txt", "new": "new.txt", "proof": "proof.json", "key": "log.vkey"}
    names[which] = "missing.vkey" if which == "key" else "missing"
    code, out, err = _verify(capsys, d, **names)
    assert (code, out) == (2, "")
    assert str(d / names[which]) in err and err.startswith("error: ") and err.count("\n") == 1


def test_a_file_that_is_not_a_checkpoint_is_one_error_line(saved, capsys):
    d, _, _ = saved
    (d / "junk.txt").write_text("hello\n")
    code, out, err = _verify(capsys, d, old="junk.txt")
    assert (code, out) == (2, "") and err.startswith(f"error: {d / 'junk.txt'} is not a signed checkpoint")


def test_the_command_needs_no_store(saved, capsys, monkeypatch):
    d, size1, size2 = saved
    monkeypatch.chdir(d)
    monkeypatch.setenv("SEALBOX_STORE", str(d / "no-such-store"))
    assert _verify(capsys, d)[0] == 0


# --- the RFC 9162 vectors (transparency-dev/merkle) through the command ------------------------


_VECTOR_SIGNER, _VECTOR_VKEY = generate_key("vectors.example/log")


def _usable(probe: dict) -> bool:
    """A probe whose two roots can be signed as checkpoints (32 bytes, size1 >= 1, sizes in order):
    the others test arguments a checkpoint cannot carry."""
    return (len(probe["root1"]) == len(probe["root2"]) == 64 and 1 <= probe["size1"] <= probe["size2"])


@pytest.mark.parametrize("probe", [p for p in CONSISTENCY if _usable(p)],
                         ids=lambda p: p["source_file"].removeprefix("testdata/"))
def test_consistency_vector_through_the_command(tmp_path, capsys, probe):
    signer = Signer.from_key(_VECTOR_SIGNER)
    for name, size, root in (("old", probe["size1"], probe["root1"]), ("new", probe["size2"], probe["root2"])):
        cp = Checkpoint("vectors.example/log", size, bytes.fromhex(root))
        (tmp_path / f"{name}.txt").write_text(sign_checkpoint(cp, signer))
    (tmp_path / "proof.json").write_text(json.dumps({
        "size1": probe["size1"], "size2": probe["size2"], "checkpoint": None,
        "proof": [base64.b64encode(bytes.fromhex(h)).decode() for h in probe["proof"]]}))
    code, out, err = _run(capsys, "log", "verify-consistency", "--key", _VECTOR_VKEY, tmp_path / "old.txt",
                          tmp_path / "new.txt", tmp_path / "proof.json")
    if probe["want_error"]:
        assert code != 0 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    else:
        assert (code, out, err) == (0, f"consistent: size {probe['size1']} -> size {probe['size2']}\n", "")


def test_the_vectors_used_hold_passing_and_failing_probes():
    used = [p for p in CONSISTENCY if _usable(p)]
    assert sum(not p["want_error"] for p in used) >= 5 and sum(p["want_error"] for p in used) >= 60
