"""``sealbox log verify-inclusion --key VKEY CHECKPOINT PROOF --event FILE|--leaf-hash H``: an auditor
checks offline, with only the log's key, a checkpoint they saved and the event they hold, that the event
is in the log (RFC 9162 §2.1.3.2). The proof comes from ``sealbox log prove-inclusion``; no store is
left when it is checked."""

from __future__ import annotations

import base64
import importlib.util
import os
import uuid
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
INCLUSION = VECTORS["inclusion_probes"]["probes"]


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


def _checkpoint(capsys, path: Path, out: Path) -> int:
    store = sealbox.open_store(path)
    try:
        size = store.issue_checkpoint().tree_size
    finally:
        store.close()
    code, text, err = _run(capsys, "log", "checkpoint", "-s", path)
    assert code == 0, err
    out.write_text(text)
    return size


def _prove(capsys, path: Path, index: int, size: int, out: Path) -> dict:
    code, text, err = _run(capsys, "log", "prove-inclusion", "-s", path, "--index", index, "--to-size", size)
    assert code == 0, err
    out.write_text(text)
    return json.loads(text)


@pytest.fixture
def saved(tmp_path, capsys):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    _record(store, "bot", 3)
    store.close()
    size = _checkpoint(capsys, path, tmp_path / "cp.txt")
    doc = _prove(capsys, path, 3, size, tmp_path / "proof.json")
    (tmp_path / "event.json").write_bytes(base64.b64decode(doc["event"]))
    store = sealbox.open_store(path)
    other, = store.read_range(4, 5)
    store.close()
    (tmp_path / "other-event.json").write_bytes(other.raw)
    shutil.copy(path / "log.vkey", tmp_path / "log.vkey")
    shutil.rmtree(path)
    return tmp_path, size, doc


def _verify(capsys, d: Path, *extra, cp="cp.txt", proof="proof.json", key="log.vkey"):
    return _run(capsys, "log", "verify-inclusion", "--key", d / key, d / cp, d / proof, *extra)


def test_an_event_and_its_proof_are_included(saved, capsys):
    d, size, doc = saved
    assert doc["leaf_index"] == 3 and doc["tree_size"] == size
    assert _verify(capsys, d, "--event", d / "event.json") == (0, f"included: leaf 3 in size {size}\n", "")
    assert _verify(capsys, d, "--leaf-hash", doc["leaf_hash"]) == (0, f"included: leaf 3 in size {size}\n", "")


def test_a_changed_event_is_not_included(saved, capsys):
    d, size, _ = saved
    raw = (d / "event.json").read_bytes()
    (d / "changed.json").write_bytes(raw.replace(b"\"v\":1", b"\"v\":2", 1))
    assert raw != (d / "changed.json").read_bytes()
    for event in ("changed.json", "other-event.json"):
        assert _verify(capsys, d, "--event", d / event) == (
            1, "", f"error: not included: the event is not leaf 3 of the log of {d / 'cp.txt'} (size {size}): "
                   "inclusion proof does not lead to the root hash; another event, a changed event, or a proof "
                   "of another log\n")


def test_an_event_of_a_forked_store_is_not_in_the_original(tmp_path, capsys):
    a = tmp_path / "a"
    store = sealbox.init_store(a)
    _record(store, "bot", 1)
    store.close()
    b = tmp_path / "b"
    shutil.copytree(a, b)
    for path, agent in ((a, "honest"), (b, "forged")):
        store = sealbox.open_store(path)
        _record(store, agent, 2)
        store.close()
    size = _checkpoint(capsys, a, tmp_path / "cp.txt")
    index = size - 2
    forged = _prove(capsys, b, index, size, tmp_path / "proof.json")  # the fork proves its own event
    (tmp_path / "event.json").write_bytes(base64.b64decode(forged["event"]))
    code, out, err = _verify(capsys, tmp_path, "--event", tmp_path / "event.json", key="a/log.vkey")
    assert (code, out) == (1, "") and err.startswith("error: not included: ")
    honest = _prove(capsys, a, index, size, tmp_path / "proof.json")
    (tmp_path / "event.json").write_bytes(base64.b64decode(honest["event"]))
    assert _verify(capsys, tmp_path, "--event", tmp_path / "event.json", key="a/log.vkey")[0] == 0


def test_the_wrong_key_and_a_changed_signature_are_refused(saved, capsys):
    d, _, doc = saved
    _, vkey = generate_key("other.example/log")
    code, out, err = _run(capsys, "log", "verify-inclusion", "--key", vkey, d / "cp.txt", d / "proof.json",
                          "--leaf-hash", doc["leaf_hash"])
    assert (code, out) == (1, "") and err.startswith(f"error: {d / 'cp.txt'} is not signed by the given key ")
    text = (d / "cp.txt").read_text()
    body, sig = text.rsplit(" ", 1)
    raw = bytearray(base64.b64decode(sig))
    raw[20] ^= 1
    (d / "bad.txt").write_text(body + " " + base64.b64encode(bytes(raw)).decode() + "\n")
    code, out, err = _verify(capsys, d, "--leaf-hash", doc["leaf_hash"], cp="bad.txt")
    assert code == 1 and "does not verify (invalid signature for key" in err


def test_the_event_must_be_given_once(saved, capsys):
    d, _, doc = saved
    for extra in ((), ("--event", d / "event.json", "--leaf-hash", doc["leaf_hash"])):
        assert _verify(capsys, d, *extra) == (
            2, "", "error: give the event to look for: --event FILE (its hashed bytes) or --leaf-hash sha256:HEX, "
                   "one of them (the proof's own copy is not trusted)\n")
    code, _, err = _verify(capsys, d, "--leaf-hash", "sha256:abcd")
    assert code == 2 and err == "error: --leaf-hash 'sha256:abcd' is not a SHA-256 leaf hash (sha256: and 64 hex digits)\n"


def test_a_proof_in_another_tree_names_the_command(saved, capsys):
    d, size, doc = saved
    (d / "other.json").write_text(json.dumps({**doc, "tree_size": size - 1}))
    assert _verify(capsys, d, "--leaf-hash", doc["leaf_hash"], proof="other.json") == (
        2, "", f"error: {d / 'other.json'} is a proof in the tree of size {size - 1}, but {d / 'cp.txt'} has size "
               f"{size}: run `sealbox log prove-inclusion --index 3 --to-size {size}`\n")


def test_an_event_newer_than_the_checkpoint_names_no_impossible_command(tmp_path, capsys):
    # the auditor's checkpoint was saved before the event was appended: no proof of a tree that small can hold
    # it (`prove-inclusion --index I --to-size N` with I >= N is refused), so the error says so instead of
    # naming that command
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    _record(store, "bot", 1)
    store.close()
    old = _checkpoint(capsys, path, tmp_path / "old.txt")
    store = sealbox.open_store(path)
    _record(store, "bot", 2)
    store.close()
    size = _checkpoint(capsys, path, tmp_path / "cp.txt")
    index = size - 1
    assert index >= old
    doc = _prove(capsys, path, index, size, tmp_path / "proof.json")
    shutil.copy(path / "log.vkey", tmp_path / "log.vkey")
    assert _verify(capsys, tmp_path, "--leaf-hash", doc["leaf_hash"], cp="old.txt") == (
        2, "", f"error: {tmp_path / 'proof.json'} proves leaf {index}, which the log of {tmp_path / 'old.txt'} "
               f"(size {old}) does not hold yet: check it against a checkpoint saved after the event was appended "
               f"(size {index + 1} or more)\n")
    assert _prove(capsys, path, index, size, tmp_path / "again.json") == doc


@pytest.mark.parametrize("which", ["cp", "proof", "key", "event"])
def test_a_missing_file_is_one_error_line(saved, capsys, which):
    d, _, _ = saved
    names = {"cp": "cp.txt", "proof": "proof.json", "key": "log.vkey"}
    event = d / "event.json"
    if which == "event":
        event = d / "missing"
    else:
        names[which] = "missing.vkey" if which == "key" else "missing"
    code, out, err = _verify(capsys, d, "--event", event, **names)
    assert (code, out) == (2, "") and err.startswith("error: ") and err.count("\n") == 1 and "missing" in err


def test_a_malformed_proof_is_one_error_line(saved, capsys):
    d, _, doc = saved
    (d / "bad.json").write_text(json.dumps({**doc, "proof": ["AAAA"]}))
    assert _verify(capsys, d, "--leaf-hash", doc["leaf_hash"], proof="bad.json") == (
        2, "", f"error: {d / 'bad.json'}: proof[0] is 3 bytes, not a 32-byte SHA-256 hash\n")


def test_prove_inclusion_blames_the_index(tmp_path, capsys):
    store = sealbox.init_store(tmp_path / "s")
    _record(store, "bot", 1)
    size = store.size()
    store.close()
    assert _run(capsys, "log", "prove-inclusion", "-s", tmp_path / "s", "--index", size, "--to-size", size) == (
        2, "", f"error: --index must be between 0 and {size - 1} (below --to-size, {size})\n")


# --- the RFC 9162 inclusion vectors (transparency-dev/merkle) through the command ---------------


_SIGNER, _VKEY = generate_key("vectors.example/log")


def _usable(probe: dict) -> bool:
    """A probe a checkpoint can carry: a 32-byte root, a tree of 1 or more, a 32-byte leaf hash."""
    return len(probe["root"]) == 64 and probe["tree_size"] >= 1 and len(probe["leaf_hash"]) == 64


@pytest.mark.parametrize("probe", [p for p in INCLUSION if _usable(p)],
                         ids=lambda p: p["source_file"].removeprefix("testdata/"))
def test_inclusion_vector_through_the_command(tmp_path, capsys, probe):
    cp = Checkpoint("vectors.example/log", probe["tree_size"], bytes.fromhex(probe["root"]))
    (tmp_path / "cp.txt").write_text(sign_checkpoint(cp, Signer.from_key(_SIGNER)))
    (tmp_path / "proof.json").write_text(json.dumps({
        "leaf_index": probe["leaf_index"], "tree_size": probe["tree_size"], "checkpoint": None,
        "proof": [base64.b64encode(bytes.fromhex(h)).decode() for h in probe["proof"]]}))
    code, out, err = _run(capsys, "log", "verify-inclusion", "--key", _VKEY, tmp_path / "cp.txt",
                          tmp_path / "proof.json", "--leaf-hash", "sha256:" + probe["leaf_hash"])
    if probe["want_error"]:
        assert code != 0 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    else:
        assert (code, out, err) == (0, f"included: leaf {probe['leaf_index']} in size {probe['tree_size']}\n", "")


def test_the_vectors_used_hold_passing_and_failing_probes():
    used = [p for p in INCLUSION if _usable(p)]
    assert sum(not p["want_error"] for p in used) >= 5 and sum(p["want_error"] for p in used) >= 50


PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")


@pytest.mark.skipif(not PG_URL or importlib.util.find_spec("psycopg") is None,
                    reason="SEALBOX_TEST_POSTGRES_URL is not set (or psycopg is missing)")
def test_a_postgres_store_proves_inclusion_and_consistency_for_the_offline_checks(tmp_path, capsys):
    # docs/storage.md lists what works on PostgreSQL: `log prove-inclusion` and `log prove`, whose output the
    # offline `log verify-inclusion` / `verify-consistency` check with the key alone
    path = tmp_path / "pg"
    store = sealbox.init_store(path, postgres_url=PG_URL, schema=f"sbt_inclusion_{uuid.uuid4().hex[:16]}")
    _record(store, "bot", 1)
    store.close()
    old = _checkpoint(capsys, path, tmp_path / "old.txt")
    store = sealbox.open_store(path)
    _record(store, "bot", 2)
    store.close()
    size = _checkpoint(capsys, path, tmp_path / "cp.txt")
    doc = _prove(capsys, path, 3, size, tmp_path / "proof.json")
    code, text, err = _run(capsys, "log", "prove", "-s", path, "--from-size", old, "--to-size", size)
    assert code == 0, err
    (tmp_path / "consistency.json").write_text(text)
    (tmp_path / "event.json").write_bytes(base64.b64decode(doc["event"]))
    shutil.copy(path / "log.vkey", tmp_path / "log.vkey")
    assert _verify(capsys, tmp_path, "--event", tmp_path / "event.json") == (0, f"included: leaf 3 in size {size}\n", "")
    assert _run(capsys, "log", "verify-consistency", "--key", tmp_path / "log.vkey", tmp_path / "old.txt",
                tmp_path / "cp.txt", tmp_path / "consistency.json") == (0, f"consistent: size {old} -> size {size}\n", "")


def test_an_event_taken_from_a_bundle_as_log_format_md_says_is_included(tmp_path, capsys):
    # docs/log-format.md: the event's bytes are the text between `{"event":` and `,"leaf_index":` of its line
    # in a bundle's events.jsonl, and that line's leaf_index is the --index to prove
    import zipfile

    path = tmp_path / "store"
    store = sealbox.init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda **_: [[1]])
    store.close()
    code, _, err = _run(capsys, "export", "-s", path, run.run_id, "-o", tmp_path / "case.sbx")
    assert code == 0, err
    line = zipfile.ZipFile(tmp_path / "case.sbx").read("events.jsonl").splitlines()[2]
    (tmp_path / "event.json").write_bytes(line[len(b'{"event":'):line.index(b',"leaf_index":')])
    index = json.loads(line)["leaf_index"]
    size = _checkpoint(capsys, path, tmp_path / "cp.txt")
    _prove(capsys, path, index, size, tmp_path / "proof.json")
    shutil.copy(path / "log.vkey", tmp_path / "log.vkey")
    assert _verify(capsys, tmp_path, "--event", tmp_path / "event.json") == (
        0, f"included: leaf {index} in size {size}\n", "")
