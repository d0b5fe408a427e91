"""Tampering below the triggers is detected by ``verify`` and named precisely.

Every case builds a real store (three agent runs plus the system run: 19 events,
checkpoints at sizes 1, 11 and 19, three blobs), closes it, then changes the
SQLite file with plain ``sqlite3`` after dropping the append-only triggers, and
asserts the exact list of problems ``verify_store`` reports.

Layout of the sample log (leaf index: run, run_seq, kind)::

    0            system 1 run.started
    1..6         run A  1..6  run.started, tool.call, policy.decision, tool.result, note, run.ended
    7..12        run B  1..6  (same)
    13..18       run C  1..6  (same)
"""

from __future__ import annotations

import ast
import base64
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from store_testkit import (
    SEALBOX,
    Sample,
    build_sample,
    closing_db,
    leaf_hash,
    note,
    record_run,
    snapshot_dir,
    started,
    tag,
    tamper,
)
import sealbox
from sealbox import CheckpointPolicy, EventDraft, StoreRolledBackError, open_store, verify_store
from sealbox import blobs as _blobs
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, Signer, generate_key, sign_checkpoint
from sealbox.store.sqlite import STORED_NODE_LEVEL

SIZE = 19
CP1, CP2, CP3, CPFILE = "checkpoint 1 (size 1)", "checkpoint 2 (size 11)", "checkpoint 3 (size 19)", "the newest checkpoint file"


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    sample = build_sample(tmp_path_factory.mktemp("template") / "s")
    assert sample.size == SIZE
    return sample


@pytest.fixture
def s(template: Sample, tmp_path: Path) -> Sample:
    """A private copy of the closed template store."""
    dst = tmp_path / "s"
    shutil.copytree(template.path, dst)
    return Sample(dst, template.runs, template.vkey, template.origin, template.size, template.rows)


def verify(path: Path, **kwargs):
    store = open_store(path, readonly=True)
    try:
        return verify_store(store, **kwargs)
    finally:
        store.close()


def where(p) -> tuple:
    return (p.code, p.run_id, p.run_seq, p.kind, p.leaf_index)


def raw_of(path: Path, leaf: int) -> tuple[bytes, bytes]:
    with closing_db(path) as db:
        raw, lh = db.execute("SELECT raw, leaf_hash FROM events WHERE leaf_index = ?", (leaf,)).fetchone()
    return bytes(raw), bytes(lh)


def flip(data: bytes, old: bytes, xor: int = 0x01) -> bytes:
    """Flip one bit of the first byte of the first occurrence of ``old`` in ``data``."""
    at = data.index(old)
    out = bytearray(data)
    out[at] ^= xor
    return bytes(out)


def covering_nodes(leaves: set[int], size: int) -> list[tuple[int, int]]:
    """Stored full-subtree nodes (level, idx) whose leaves include any of ``leaves``, sorted
    (level STORED_NODE_LEVEL and up: smaller subtrees are computed from the leaves' hashes)."""
    out = set()
    for leaf in leaves:
        level = STORED_NODE_LEVEL
        while (1 << level) <= size:
            idx = leaf >> level
            if (idx + 1) << level <= size:
                out.add((level, idx))
            level += 1
    return sorted(out)


def node_problems(report) -> list[tuple[int, int]]:
    out = []
    for p in report.problems:
        if p.code == "tree_node_mismatch":
            pos = p.message.split("(", 1)[1].split(")", 1)[0]
            level, idx = (int(x) for x in pos.split(", "))
            out.append((level, idx))
    return sorted(out)


def signed_root(s: Sample, size: int) -> str:
    with closing_db(s.path) as db:
        (root,) = db.execute("SELECT root_hash FROM checkpoints WHERE tree_size = ?", (size,)).fetchone()
    return tag(bytes(root))


def recomputed_tree(path: Path) -> merkle.MemoryTree:
    with closing_db(path) as db:
        raws = [bytes(r[0]) for r in db.execute("SELECT raw FROM events ORDER BY leaf_index")]
    return merkle.MemoryTree([leaf_hash(r) for r in raws])


def rewrite_all_hashes(path: Path) -> None:
    """What a careful attacker does after editing events: recompute every stored leaf hash and tree node."""
    tree = recomputed_tree(path)
    with closing_db(path) as db:
        leaves = [(i, bytes(raw)) for i, raw in db.execute("SELECT leaf_index, raw FROM events ORDER BY leaf_index")]
        nodes = [(lv, ix) for lv, ix in db.execute("SELECT level, idx FROM tree_nodes")]
    tamper(path, *[("UPDATE events SET leaf_hash = ? WHERE leaf_index = ?", (leaf_hash(raw), i)) for i, raw in leaves],
           *[("UPDATE tree_nodes SET hash = ? WHERE level = ? AND idx = ?", (tree.get_node(lv, ix), lv, ix)) for lv, ix in nodes])


def checkpoint_rows(path: Path) -> list[tuple[int, int, str]]:
    with closing_db(path) as db:
        return db.execute("SELECT id, tree_size, note FROM checkpoints ORDER BY id").fetchall()


def flip_signature(note_text: str, at: int = 20) -> str:
    """Flip one bit of the Ed25519 signature (after the 4-byte key id) in the note's signature line."""
    body, sigs = note_text.split("\n\n", 1)
    prefix, b64 = sigs.rstrip("\n").rsplit(" ", 1)
    raw = bytearray(base64.b64decode(b64))
    raw[at] ^= 0x01
    return f"{body}\n\n{prefix} {base64.b64encode(bytes(raw)).decode()}\n"


def resign(note_text: str, signer: Signer) -> str:
    return sign_checkpoint(Checkpoint.parse(note_text.split("\n\n", 1)[0] + "\n"), signer)


def ckpt_problem(code: str, where_: str):
    return (code, where_)


def ckpt_problems(report) -> list[tuple[str, str]]:
    """(code, which checkpoint) for every checkpoint-level problem."""
    out = []
    for p in report.problems:
        if p.code.startswith("checkpoint_") or p.code == "log_truncated":
            for name in (CP1, CP2, CP3, CPFILE):
                if p.message.startswith(name):
                    out.append((p.code, name))
                    break
            else:  # pragma: no cover - a message that names no checkpoint is itself a failure
                out.append((p.code, p.message))
    return out


# --------------------------------------------------------------------------- the clean baseline


def test_sample_store_is_clean(s: Sample) -> None:
    report = verify(s.path)
    assert report.ok, report.problems
    assert (report.events, report.runs, report.checkpoints, report.blobs) == (SIZE, 4, 3, 3)
    assert report.tree_size_signed == SIZE
    assert report.trusted_key == s.vkey
    assert [r[1:] for r in s.rows[7:13]] == [
        (s.runs[1], 1, "run.started"), (s.runs[1], 2, "tool.call"), (s.runs[1], 3, "policy.decision"),
        (s.runs[1], 4, "tool.result"), (s.runs[1], 5, "note"), (s.runs[1], 6, "run.ended"),
    ]


# --------------------------------------------------------------------------- events


def test_flip_one_payload_byte(s: Sample) -> None:
    raw, stored = raw_of(s.path, 11)  # run B, run_seq 5, note {"text": "note 1"}
    bad = flip(raw, b'1"}')  # "note 1" -> "note 0"
    assert b'"text":"note 0"' in bad and len(bad) == len(raw)
    tamper(s.path, ("UPDATE events SET raw = ? WHERE leaf_index = 11", (bad,)))
    report = verify(s.path)
    run = s.runs[1]
    changed = tag(leaf_hash(bad))
    assert [where(p) for p in report.problems if p.code != "tree_node_mismatch"] == [
        ("leaf_hash_mismatch", run, 5, "note", 11),
        ("chain_broken", run, 6, "run.ended", 12),
        ("checkpoint_root_mismatch", None, None, None, None),
        ("checkpoint_root_mismatch", None, None, None, None),
    ]
    lh, chain = report.problems[0], report.problems[1]
    assert (lh.expected, lh.found) == (changed, tag(stored))
    assert (chain.expected, chain.found) == (changed, tag(stored))
    assert "prev" in chain.message
    assert node_problems(report) == covering_nodes({11}, SIZE)
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]
    for p in report.problems:
        if p.code == "checkpoint_root_mismatch":
            assert p.expected == signed_root(s, SIZE)
            assert p.found == tag(recomputed_tree(s.path).root(SIZE))
    assert report.tree_size_signed == 11  # checkpoint 2 still verifies: it does not cover leaf 11


def test_flip_one_byte_making_the_event_unreadable(s: Sample) -> None:
    raw, _ = raw_of(s.path, 11)
    bad = b"[" + raw[1:]  # '{' -> '[': not JSON any more
    tamper(s.path, ("UPDATE events SET raw = ? WHERE leaf_index = 11", (bad,)))
    report = verify(s.path)
    run = s.runs[1]
    codes = [where(p) for p in report.problems if p.code not in ("tree_node_mismatch", "checkpoint_root_mismatch")]
    assert codes[0] == ("event_malformed", run, 5, "note", 11)  # named from the index columns
    assert ("leaf_hash_mismatch", None, None, None, 11) in codes
    # the next event of the run no longer follows a known event
    assert ("chain_broken", run, 6, "run.ended", 12) in codes
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]


def test_flip_payload_and_recompute_leaf_hash(s: Sample) -> None:
    """The attacker also rewrites the leaf_hash column: the next event's prev and the signed root still catch it."""
    raw, stored = raw_of(s.path, 11)
    bad = flip(raw, b'1"}')
    tamper(s.path, ("UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = 11", (bad, leaf_hash(bad))))
    report = verify(s.path)
    run = s.runs[1]
    assert [where(p) for p in report.problems if p.code != "tree_node_mismatch"] == [
        ("chain_broken", run, 6, "run.ended", 12),
        ("checkpoint_root_mismatch", None, None, None, None),
        ("checkpoint_root_mismatch", None, None, None, None),
    ]
    assert (report.problems[0].expected, report.problems[0].found) == (tag(leaf_hash(bad)), tag(stored))
    assert node_problems(report) == covering_nodes({11}, SIZE)
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]


def test_flip_payload_and_recompute_every_stored_hash(s: Sample) -> None:
    """Leaf hashes and tree nodes rewritten too: the run chain and the signed root remain."""
    raw, _ = raw_of(s.path, 11)
    tamper(s.path, ("UPDATE events SET raw = ? WHERE leaf_index = 11", (flip(raw, b'1"}'),)))
    rewrite_all_hashes(s.path)
    report = verify(s.path)
    assert [where(p) for p in report.problems] == [
        ("chain_broken", s.runs[1], 6, "run.ended", 12),
        ("checkpoint_root_mismatch", None, None, None, None),
        ("checkpoint_root_mismatch", None, None, None, None),
    ]


def test_change_last_event_of_a_run_and_recompute_every_stored_hash(s: Sample) -> None:
    """No later event chains to it: only the signed checkpoints covering it can tell."""
    raw, _ = raw_of(s.path, 18)  # run C's run.ended
    ts_digit = raw.index(b'Z","v"') - 1
    bad = bytearray(raw)
    bad[ts_digit] = ord("0") if raw[ts_digit] != ord("0") else ord("1")
    new_ts = __import__("json").loads(bytes(bad))["ts"]
    tamper(s.path, ("UPDATE events SET raw = ?, ts = ? WHERE leaf_index = 18", (bytes(bad), new_ts)))  # index column too
    rewrite_all_hashes(s.path)
    report = verify(s.path)
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]
    assert [p.code for p in report.problems] == ["checkpoint_root_mismatch"] * 2
    assert report.problems[0].expected == signed_root(s, SIZE)


def test_delete_one_event(s: Sample) -> None:
    _, h10 = raw_of(s.path, 10)
    _, h11 = raw_of(s.path, 11)
    tamper(s.path, "DELETE FROM events WHERE leaf_index = 11")
    report = verify(s.path)
    run = s.runs[1]
    gaps = [p for p in report.problems if p.code == "leaf_gap"]
    assert [where(p) for p in gaps] == [("leaf_gap", run, 6, "run.ended", 12)]
    assert (gaps[0].expected, gaps[0].found) == ("leaf 11", "leaf 12")
    chain = [p for p in report.problems if p.code == "chain_broken"]
    assert [where(p) for p in chain] == [("chain_broken", run, 6, "run.ended", 12)] * 2
    assert (chain[0].expected, chain[0].found) == ("5", "6")  # run_seq 5 is missing
    assert (chain[1].expected, chain[1].found) == (tag(h10), tag(h11))  # prev names the deleted event
    # 18 events remain where checkpoint 3 and the checkpoint file signed 19
    assert ckpt_problems(report) == [("log_truncated", CP3), ("log_truncated", CPFILE)]
    truncated = [p for p in report.problems if p.code == "log_truncated"]
    assert {(p.expected, p.found) for p in truncated} == {("at least 19 events", "18 events")}
    assert report.tree_size_signed == 11
    others = {p.code for p in report.problems} - {"leaf_gap", "chain_broken", "log_truncated"}
    # the stored node above leaf 11, (4, 0), no longer matches; none is extra: 18 leaves
    # still fill it
    assert others == {"tree_node_mismatch"}


def test_one_deleted_event_is_reported_as_one_leaf_gap(s: Sample) -> None:
    """Regression: the gap is measured against the previous stored index, not the recomputed tree size,
    so one missing event is one leaf_gap (not one per later event), naming the event found there."""
    tamper(s.path, "DELETE FROM events WHERE leaf_index = 11")
    gaps = [p for p in verify(s.path).problems if p.code == "leaf_gap"]
    assert [(p.leaf_index, p.expected, p.found) for p in gaps] == [(12, "leaf 11", "leaf 12")]
    assert (gaps[0].run_id, gaps[0].run_seq, gaps[0].kind) == (s.runs[1], 6, "run.ended")


def test_swap_two_events_raw_bytes(s: Sample) -> None:
    """Swap the hashed bytes (and their stored leaf hashes) of leaves 11 and 12; the index columns stay."""
    r11, h11 = raw_of(s.path, 11)
    r12, h12 = raw_of(s.path, 12)
    tamper(s.path, ("UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = 11", (r12, h12)),
           ("UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = 12", (r11, h11)))
    report = verify(s.path)
    run = s.runs[1]
    assert [where(p) for p in report.problems if p.code != "tree_node_mismatch"] == [
        ("index_mismatch", run, 6, "run.ended", 11),
        ("chain_broken", run, 6, "run.ended", 11),   # run_seq 6 where 5 is due
        ("chain_broken", run, 6, "run.ended", 11),   # its prev is the (moved) note, not the tool.result
        ("index_mismatch", run, 5, "note", 12),
        ("chain_broken", run, 5, "note", 12),        # run_seq 5 where 7 is due
        ("chain_broken", run, 5, "note", 12),        # prev
        ("chain_broken", run, 5, "note", 12),        # an event after run.ended
        ("checkpoint_root_mismatch", None, None, None, None),
        ("checkpoint_root_mismatch", None, None, None, None),
    ]
    p = report.problems
    # expected: what the hashed bytes say; found: the row's index columns (run_id, run_seq, kind first)
    assert ast.literal_eval(p[0].expected)[:3] == (run, 6, "run.ended")
    assert ast.literal_eval(p[0].found)[:3] == (run, 5, "note")
    assert (p[1].expected, p[1].found) == ("5", "6")
    assert (p[4].expected, p[4].found) == ("7", "5")
    assert (p[6].expected, p[6].found) == ("no event", "note")
    assert node_problems(report) == covering_nodes({11, 12}, SIZE)
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]


def test_swap_two_events_raw_bytes_without_their_hashes(s: Sample) -> None:
    r11, h11 = raw_of(s.path, 11)
    r12, h12 = raw_of(s.path, 12)
    tamper(s.path, ("UPDATE events SET raw = ? WHERE leaf_index = 11", (r12,)),
           ("UPDATE events SET raw = ? WHERE leaf_index = 12", (r11,)))
    report = verify(s.path)
    run = s.runs[1]
    mism = [p for p in report.problems if p.code == "leaf_hash_mismatch"]
    assert [where(p) for p in mism] == [("leaf_hash_mismatch", run, 6, "run.ended", 11),
                                        ("leaf_hash_mismatch", run, 5, "note", 12)]
    assert (mism[0].expected, mism[0].found) == (tag(h12), tag(h11))
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]


def test_swap_two_whole_rows_by_leaf_index(s: Sample) -> None:
    """Swap the leaf_index of two rows: the rows (raw, hash, index columns) move together."""
    tamper(s.path, "UPDATE events SET leaf_index = -1 WHERE leaf_index = 11",
           "UPDATE events SET leaf_index = 11 WHERE leaf_index = 12",
           "UPDATE events SET leaf_index = 12 WHERE leaf_index = -1")
    report = verify(s.path)
    run = s.runs[1]
    assert [where(p) for p in report.problems if p.code != "tree_node_mismatch"] == [
        ("chain_broken", run, 6, "run.ended", 11),
        ("chain_broken", run, 6, "run.ended", 11),
        ("chain_broken", run, 5, "note", 12),
        ("chain_broken", run, 5, "note", 12),
        ("chain_broken", run, 5, "note", 12),
        ("checkpoint_root_mismatch", None, None, None, None),
        ("checkpoint_root_mismatch", None, None, None, None),
    ]
    assert node_problems(report) == covering_nodes({11, 12}, SIZE)
    assert ckpt_problems(report) == [("checkpoint_root_mismatch", CP3), ("checkpoint_root_mismatch", CPFILE)]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_cut_the_tail(s: Sample, k: int) -> None:
    tamper(s.path, ("DELETE FROM events WHERE leaf_index >= ?", (SIZE - k,)))
    report = verify(s.path)
    # checkpoint 2 (size 11) survives every cut here; checkpoint 3 and the file (size 19) do not
    assert ckpt_problems(report) == [("log_truncated", CP3), ("log_truncated", CPFILE)]
    truncated = [p for p in report.problems if p.code == "log_truncated"]
    assert {(p.expected, p.found) for p in truncated} == {("at least 19 events", f"{SIZE - k} events")}
    assert all("19 events" in p.message and f"only {SIZE - k} are present" in p.message for p in truncated)
    # the stored tree still has nodes for the cut leaves
    extra = sorted(p.message for p in report.problems if p.code == "tree_node_extra")
    assert len(extra) == len([n for n in covering_nodes(set(range(SIZE - k, SIZE)), SIZE)])
    # cutting 8 events also cuts a run.started: its row in the runs table is left without an event
    extra_runs = {"run_row_extra"} if k == 8 else set()
    extra_nodes = {"tree_node_extra"} if extra else set()  # only cutting 8 reaches into the stored (4, 0)
    assert {p.code for p in report.problems} == {"log_truncated"} | extra_nodes | extra_runs
    assert report.tree_size_signed == 11


def test_cut_the_tail_and_its_tree_nodes(s: Sample) -> None:
    tamper(s.path, "DELETE FROM events WHERE leaf_index >= 16",
           "DELETE FROM tree_nodes WHERE ((idx + 1) << level) > 16")
    report = verify(s.path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("log_truncated", "at least 19 events", "16 events")] * 2
    assert ckpt_problems(report) == [("log_truncated", CP3), ("log_truncated", CPFILE)]


def test_derived_query_columns_are_checked(s: Sample) -> None:
    """server, tool, call_id, effect, ok, tokens and cost are derived from the payload and drive queries
    and limits (Reader.usage counts effect != 'deny'): rewriting them below the triggers is an index_mismatch."""
    tamper(s.path, "UPDATE events SET tool = 'delete_everything', server = 'prod' WHERE leaf_index = 8",
           "UPDATE events SET effect = 'deny' WHERE leaf_index = 9")
    report = verify(s.path)
    assert [where(p) for p in report.problems] == [
        ("index_mismatch", s.runs[1], 2, "tool.call", 8),
        ("index_mismatch", s.runs[1], 3, "policy.decision", 9),
    ]
    assert "delete_everything" in report.problems[0].found and "delete_everything" not in report.problems[0].expected
    assert report.problems[0].message.endswith("(columns server, tool)")
    assert report.problems[1].message.endswith("(column effect)")


@pytest.mark.parametrize("column, value", [("ts", "2020-01-01T00:00:00.000000Z"), ("principal", "someone"), ("step", "9")])
def test_envelope_index_columns_are_checked(s: Sample, column: str, value: str) -> None:
    tamper(s.path, (f"UPDATE events SET {column} = ? WHERE leaf_index = 10", (value,)))
    assert [where(p) for p in verify(s.path).problems] == [("index_mismatch", s.runs[1], 4, "tool.result", 10)]


def test_snapshot_content_is_verified(s: Sample) -> None:
    """A stored snapshot (the configuration a run is pinned to) must hash to its fingerprint."""
    from sealbox.canonical import canonical_bytes

    store = open_store(s.path)
    fp = store.put_snapshot({"model": {"provider": "p", "name": "safe-model"}, "tools": []})
    store.close()
    forged = canonical_bytes({"model": {"provider": "p", "name": "unsafe-model"}, "tools": []})
    tamper(s.path, ("UPDATE snapshots SET content = ? WHERE fingerprint = ?", (forged, fp)))
    report = verify(s.path)
    assert [(p.code, p.expected) for p in report.problems] == [("snapshot_mismatch", fp)]
    assert report.problems[0].found == tag(__import__("hashlib").sha256(forged).digest())


# --------------------------------------------------------------------------- blobs


def blob_rows(path: Path) -> list[tuple[str, bytes, bytes]]:
    with closing_db(path) as db:
        return [(r, bytes(sa), bytes(c)) for r, sa, c in db.execute("SELECT ref, salt, content FROM blobs ORDER BY ref")]


def test_replace_blob_content(s: Sample) -> None:
    ref, salt, content = blob_rows(s.path)[0]
    bad = content.replace(b"result-", b"RESULT-")
    assert bad != content
    tamper(s.path, ("UPDATE blobs SET content = ? WHERE ref = ?", (bad, ref)))
    report = verify(s.path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("blob_mismatch", ref, _blobs.commitment(salt, bad))]
    assert ref in report.problems[0].message


def test_replace_blob_salt(s: Sample) -> None:
    ref, salt, content = blob_rows(s.path)[1]
    tamper(s.path, ("UPDATE blobs SET salt = ? WHERE ref = ?", (bytes(32), ref)))
    report = verify(s.path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("blob_mismatch", ref, _blobs.commitment(bytes(32), content))]


def test_replace_blob_with_a_new_consistent_commitment(s: Sample) -> None:
    """Content and salt replaced consistently under a NEW ref: the event still points to the old one."""
    ref, _, content = blob_rows(s.path)[0]
    with closing_db(s.path) as db:
        (secret,) = db.execute("SELECT secret FROM store_secret").fetchone()
    bad = content.replace(b"result-", b"RESULT-")
    salt = _blobs.salt_for(bytes(secret), bad)
    new_ref = _blobs.commitment(salt, bad)
    tamper(s.path, ("DELETE FROM blobs WHERE ref = ?", (ref,)),
           ("INSERT INTO blobs (ref, salt, content, size) VALUES (?, ?, ?, ?)", (new_ref, salt, bad, len(bad))))
    report = verify(s.path)
    assert [p.code for p in report.problems] == ["blob_missing"]
    assert ref in report.problems[0].message and new_ref not in report.problems[0].message


def test_blob_erased_without_content_erased_event(s: Sample) -> None:
    """Erasure is allowed by the triggers (no trigger dropped here), but must come with a content.erased event."""
    ref = blob_rows(s.path)[0][0]
    with closing_db(s.path) as db:
        db.execute("UPDATE blobs SET salt = NULL, content = NULL WHERE ref = ?", (ref,))
    report = verify(s.path)
    assert [p.code for p in report.problems] == ["blob_erased_silently"]
    assert ref in report.problems[0].message


def test_blob_erased_with_content_erased_event_is_clean(s: Sample) -> None:
    ref = blob_rows(s.path)[0][0]
    store = open_store(s.path)
    store.append(__import__("sealbox").EventDraft("content.erased", {"blob": ref, "reason": "retention"}))
    store.close()
    with closing_db(s.path) as db:
        db.execute("UPDATE blobs SET salt = NULL, content = NULL WHERE ref = ?", (ref,))
    report = verify(s.path)
    assert report.ok, report.problems


# --------------------------------------------------------------------------- checkpoints and trust


def test_forge_a_checkpoint_signature(s: Sample) -> None:
    cid, size, text = checkpoint_rows(s.path)[1]
    assert size == 11
    tamper(s.path, ("UPDATE checkpoints SET note = ? WHERE id = ?", (flip_signature(text), cid)))
    report = verify(s.path)
    assert ckpt_problems(report) == [("checkpoint_signature", CP2)]
    (p,) = report.problems
    key_id = s.vkey.split("+")[1]  # the flipped signature keeps the real key's id
    assert (p.expected, p.found) == (f"a signature by {s.vkey}", f"signatures by {s.origin}+{key_id}")
    assert "invalid signature" in p.message
    assert report.tree_size_signed == SIZE  # the others still verify


def test_forge_the_newest_checkpoint_file_signature(s: Sample) -> None:
    path = s.path / "checkpoint"
    path.write_text(flip_signature(path.read_text()))
    report = verify(s.path)
    assert ckpt_problems(report) == [("checkpoint_signature", CPFILE)]
    assert len(report.problems) == 1


def test_resign_a_checkpoint_with_another_key_of_the_same_name(s: Sample) -> None:
    skey, other_vkey = generate_key(s.origin)
    assert other_vkey.split("+")[0] == s.vkey.split("+")[0] and other_vkey != s.vkey
    cid, _, text = checkpoint_rows(s.path)[1]
    tamper(s.path, ("UPDATE checkpoints SET note = ? WHERE id = ?", (resign(text, Signer.from_key(skey)), cid)))
    report = verify(s.path)
    assert ckpt_problems(report) == [("checkpoint_signature", CP2)]
    assert report.problems[0].expected == f"a signature by {s.vkey}"
    # the found side names the other key's id, not only the (shared) name
    other_id = other_vkey.split("+")[1]
    assert other_id != s.vkey.split("+")[1]
    assert report.problems[0].found == f"signatures by {s.origin}+{other_id}"
    line = report.problems[0].line()
    assert f"found signatures by {s.origin}+{other_id}" in line


def test_resign_with_another_key_under_the_trusted_key_id(s: Sample) -> None:
    """The forged signature line even carries the real key's 4-byte id: the Ed25519 check still fails."""
    skey, _ = generate_key(s.origin)
    cid, _, text = checkpoint_rows(s.path)[2]
    forged = resign(text, Signer.from_key(skey))
    real_id = base64.b64decode(text.rstrip("\n").rsplit(" ", 1)[1])[:4]
    body, sig = forged.split("\n\n", 1)
    prefix, b64 = sig.rstrip("\n").rsplit(" ", 1)
    forged = f"{body}\n\n{prefix} {base64.b64encode(real_id + base64.b64decode(b64)[4:]).decode()}\n"
    tamper(s.path, ("UPDATE checkpoints SET note = ? WHERE id = ?", (forged, cid)))
    report = verify(s.path)
    assert ckpt_problems(report) == [("checkpoint_signature", CP3)]
    assert "invalid signature" in report.problems[0].message


def test_verify_with_another_trusted_key_reports_every_checkpoint(s: Sample) -> None:
    _, other_vkey = generate_key(s.origin)
    report = verify(s.path, trusted_vkey=other_vkey)
    assert ckpt_problems(report) == [("checkpoint_signature", n) for n in (CP1, CP2, CP3, CPFILE)]
    name, key_id = other_vkey.split("+")[:2]
    assert report.problems[0].code == "key_mismatch"  # said first: every checkpoint fails for that reason
    assert report.problems[0].expected == f"signatures by {name}+{key_id}"
    assert {p.expected for p in report.problems[1:]} == {f"a signature by {other_vkey}"}
    assert (report.tree_size_signed, report.root, report.trusted_key) == (0, None, other_vkey)
    assert verify(s.path, trusted_vkey=s.vkey).ok


def test_full_rewrite_passes_the_pinned_key_but_not_a_key_kept_elsewhere(s: Sample) -> None:
    """An attacker who owns the folder edits an event, recomputes every hash, re-signs every checkpoint
    with a new key of the same name and replaces log.vkey and DIR/checkpoint. Only a key kept elsewhere catches it."""
    raw, _ = raw_of(s.path, 18)
    tamper(s.path, ("UPDATE events SET raw = ? WHERE leaf_index = 18", (raw.replace(b'"ok"', b'"error"'),)))
    rewrite_all_hashes(s.path)
    tree = recomputed_tree(s.path)
    skey, fake_vkey = generate_key(s.origin)
    signer = Signer.from_key(skey)
    updates = []
    for cid, size, _ in checkpoint_rows(s.path):
        new = sign_checkpoint(Checkpoint(s.origin, size, tree.root(size)), signer)
        updates.append(("UPDATE checkpoints SET note = ?, root_hash = ? WHERE id = ?", (new, tree.root(size), cid)))
    tamper(s.path, *updates)
    (s.path / "checkpoint").write_text(sign_checkpoint(Checkpoint(s.origin, SIZE, tree.root(SIZE)), signer))
    (s.path / "log.vkey").write_text(fake_vkey + "\n")

    assert verify(s.path).ok  # the pinned key lives in the folder the attacker controls
    report = verify(s.path, trusted_vkey=s.vkey)
    assert ckpt_problems(report) == [("checkpoint_signature", n) for n in (CP1, CP2, CP3, CPFILE)]
    assert report.tree_size_signed == 0


# --------------------------------------------------------------------------- rollback behind the newest checkpoint


def test_roll_back_behind_the_newest_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "s"
    sample = build_sample(path, nruns=1)  # 7 events, closed: its WAL is checkpointed into sealbox.db
    assert sample.size == 7
    backup = tmp_path / "backup.db"
    src = sqlite3.connect(path / "sealbox.db")
    dst = sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()

    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=10))
    record_run(store, 7)
    record_run(store, 8)
    assert store.size() == 19
    store.close()  # signs the final checkpoint (size 19) into DIR/checkpoint
    assert (path / "checkpoint").read_text().split("\n")[1] == "19"

    for suffix in ("-wal", "-shm"):
        (path / f"sealbox.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, path / "sealbox.db")

    report = verify(path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("log_truncated", "at least 19 events", "7 events")]
    assert report.problems[0].message.startswith(CPFILE)
    assert report.tree_size_signed == 7  # what the restored table still proves

    with closing_db(path) as db:
        before_rows = db.execute("SELECT count(*), max(leaf_index) FROM events").fetchone()
        before_cps = db.execute("SELECT count(*) FROM checkpoints").fetchone()
    before_ckpt = (path / "checkpoint").read_bytes()

    store = open_store(path)
    with pytest.raises(StoreRolledBackError) as info:
        store.append(note("system", "after the restore"))
    msg = str(info.value)
    assert "7 events" in msg and "covers 19" in msg and "refusing to append" in msg
    with pytest.raises(StoreRolledBackError):
        store.append_with(lambda _r: [note("system", "again")])
    assert store.size() == 7
    store.close()  # must not sign a checkpoint of the rolled-back log either

    with closing_db(path) as db:
        assert db.execute("SELECT count(*), max(leaf_index) FROM events").fetchone() == before_rows
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone() == before_cps
    assert (path / "checkpoint").read_bytes() == before_ckpt
    assert [p.code for p in verify(path).problems] == ["log_truncated"]


def test_roll_back_with_the_checkpoint_file_deleted_is_reported_and_not_appended_to(tmp_path: Path) -> None:
    """The rollback above, and DIR/checkpoint deleted too: the restored rows are all consistent with
    the restored events, so only the missing file shows it. verify names it; a writer refuses to
    append (which would fork the log: a second history after size 7) and writes nothing."""
    path = tmp_path / "s"
    sample = build_sample(path, nruns=1)
    backup = tmp_path / "backup.db"
    src, dst = sqlite3.connect(path / "sealbox.db"), sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()
    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=10))
    record_run(store, 7)
    record_run(store, 8)
    store.close()
    for suffix in ("-wal", "-shm"):
        (path / f"sealbox.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, path / "sealbox.db")
    (path / "checkpoint").unlink()

    report = verify(path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("checkpoint_file_missing", "the newest checkpoint (size 7 or more)", "no file")]
    assert "2 signed checkpoints" in report.problems[0].message
    res = run_cli("verify", "-s", str(path))
    assert res.returncode == 1 and res.stdout.startswith("checkpoint_file_missing: the checkpoint file (DIR/checkpoint) ")

    with closing_db(path) as db:
        before = db.execute("SELECT count(*), max(leaf_index) FROM events").fetchone()
        before_cps = db.execute("SELECT count(*) FROM checkpoints").fetchone()
    assert before == (sample.size, sample.size - 1)
    store = open_store(path)
    for attempt in (lambda: store.append(note("system", "after the restore")),
                    lambda: store.append_with(lambda _r: [note("system", "again")])):
        with pytest.raises(sealbox.StoreError) as info:
            attempt()
        assert "checkpoint is missing though the store holds signed checkpoints" in str(info.value)
        assert "refusing to append" in str(info.value)
    with pytest.raises(sealbox.StoreError, match="checkpoint is missing"):
        store.issue_checkpoint()
    store.close()
    with closing_db(path) as db:
        assert db.execute("SELECT count(*), max(leaf_index) FROM events").fetchone() == before
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone() == before_cps
    assert not (path / "checkpoint").exists()

    # the owner puts the file back (here: the one the backup was taken with): appends go on, verify is clean
    (path / "checkpoint").write_text(checkpoint_rows(path)[-1][2])
    store = open_store(path)
    store.append(note("system", "after the file came back"))
    store.close()
    assert verify(path).ok


def test_only_the_checkpoint_file_deleted_is_reported(s: Sample) -> None:
    (s.path / "checkpoint").unlink()
    report = verify(s.path)
    assert [(p.code, p.expected) for p in report.problems] == [
        ("checkpoint_file_missing", "the newest checkpoint (size 19 or more)")]
    store = open_store(s.path, readonly=True)  # reading is not refused
    assert store.size() == SIZE
    store.close()


@pytest.mark.parametrize("text, why", [("", "it is empty"), ("\n", "it is empty"),
                                       ("not a note\n", "it is not a checkpoint note")])
def test_a_rolled_back_store_with_an_empty_or_damaged_checkpoint_file_refuses_to_append(
        tmp_path: Path, text: str, why: str) -> None:
    """An emptied file was taken as present: the rolled-back store appended, signed a checkpoint
    smaller than one already signed (a fork), rewrote the file, and verify turned clean."""
    path = tmp_path / "s"
    build_sample(path, nruns=1)
    backup = tmp_path / "backup.db"
    src, dst = sqlite3.connect(path / "sealbox.db"), sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()
    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=10))
    record_run(store, 7)
    record_run(store, 8)
    store.close()
    for suffix in ("-wal", "-shm"):
        (path / f"sealbox.db{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, path / "sealbox.db")
    (path / "checkpoint").write_text(text)
    with closing_db(path) as db:
        before = db.execute("SELECT count(*), (SELECT count(*) FROM checkpoints) FROM events").fetchone()
    store = open_store(path)
    with pytest.raises(sealbox.StoreError) as info:
        store.append(note("system", "after the restore"))
    assert f"checkpoint does not hold a checkpoint ({why}) though the store holds signed checkpoints" in str(info.value)
    with pytest.raises(sealbox.StoreError, match="does not hold a checkpoint"):
        store.issue_checkpoint()
    store.close()
    with closing_db(path) as db:
        assert db.execute("SELECT count(*), (SELECT count(*) FROM checkpoints) FROM events").fetchone() == before
    assert (path / "checkpoint").read_text() == text
    assert not verify(path).ok


def test_the_checkpoint_file_removed_under_an_open_writer_stops_later_appends_before_they_write(s: Sample) -> None:
    """The append whose checkpoint found the file gone was committed: it returns its events (it
    raised, so a recorded tool.call looked unrecorded and the tool did not run), and every later
    append is refused before anything is written."""
    store = open_store(s.path, checkpoint_policy=CheckpointPolicy(every_events=2, every_seconds=None))
    store.append(note("system", "one"))
    (s.path / "checkpoint").unlink()
    [placed] = store.append(note("system", "two"))  # committed; its checkpoint is refused
    assert placed.leaf_index == SIZE + 1
    with pytest.raises(sealbox.StoreError, match="checkpoint is missing though the store holds signed checkpoints"):
        store.append(note("system", "three"))
    store.close()
    with closing_db(s.path) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == SIZE + 2


# --------------------------------------------------------------------------- the triggers themselves


@pytest.mark.parametrize("sql, words", [
    ("UPDATE events SET kind = 'note' WHERE leaf_index = 1", "events are append-only"),
    ("UPDATE events SET raw = raw || ' ' WHERE leaf_index = 1", "events are append-only"),
    ("DELETE FROM events WHERE leaf_index = 18", "events are append-only"),
    ("UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = 4 AND idx = 0", "the tree is append-only"),
    ("DELETE FROM tree_nodes", "the tree is append-only"),
    ("UPDATE checkpoints SET note = 'x'", "checkpoints are append-only"),
    ("DELETE FROM checkpoints", "checkpoints are append-only"),
    ("UPDATE runs SET agent = 'someone else'", "runs are append-only"),
    ("DELETE FROM runs", "runs are append-only"),
    ("DELETE FROM blobs", "blobs are erased, never deleted"),
    ("UPDATE blobs SET content = X'00'", "blobs can only be erased"),
    ("UPDATE blobs SET salt = NULL", "blobs can only be erased"),  # content kept: not an erasure
    ("UPDATE blobs SET salt = zeroblob(32), content = NULL", "blobs can only be erased"),
    ("UPDATE blobs SET size = 1", "a blob commitment never changes"),
    ("UPDATE blobs SET ref = 'sha256:' || ref", "a blob commitment never changes"),
])
def test_triggers_abort_changes(s: Sample, sql: str, words: str) -> None:
    before = snapshot_dir(s.path)
    with closing_db(s.path) as db:
        with pytest.raises(sqlite3.DatabaseError, match=f"sealbox: {words}"):
            db.execute(sql)
        assert not db.in_transaction
    assert snapshot_dir(s.path)["sealbox.db"] == before["sealbox.db"]
    assert verify(s.path).ok


@pytest.mark.parametrize("sql", ["UPDATE snapshots SET content = X'00'", "DELETE FROM snapshots"])
def test_triggers_protect_snapshots(s: Sample, sql: str) -> None:
    store = open_store(s.path)
    store.put_snapshot({"model": {"name": "m"}, "tools": []})
    store.close()
    with closing_db(s.path) as db:
        with pytest.raises(sqlite3.DatabaseError, match="sealbox: snapshots are append-only"):
            db.execute(sql)


def test_triggers_allow_only_blob_erasure(s: Sample) -> None:
    with closing_db(s.path) as db:
        ref = db.execute("SELECT ref FROM blobs ORDER BY ref").fetchone()[0]
        db.execute("UPDATE blobs SET salt = NULL, content = NULL WHERE ref = ?", (ref,))
        assert db.execute("SELECT salt, content, size FROM blobs WHERE ref = ?", (ref,)).fetchone()[:2] == (None, None)


@pytest.mark.parametrize("table, sql, words", [
    ("checkpoints", "REPLACE INTO checkpoints (id, tree_size, root_hash, note, created_at)"
                    " SELECT id, tree_size, root_hash, 'forged', created_at FROM checkpoints WHERE id = 2",
     "checkpoints are append-only"),
    ("runs", "INSERT OR REPLACE INTO runs SELECT run_id, 'someone else', principal, parent_run_id, replay_of,"
             " snapshot, started_at, leaf_index FROM runs", "runs are append-only"),
], ids=["checkpoints", "runs"])
def test_insert_or_replace_is_refused(s: Sample, table: str, sql: str, words: str) -> None:
    """Regression: REPLACE deletes the old row WITHOUT firing the DELETE trigger (SQLite fires delete
    triggers on REPLACE only with PRAGMA recursive_triggers, which an attacker's connection does not set),
    so rows could be rewritten with the triggers in place. BEFORE INSERT triggers refuse an existing key
    on the tables written rarely (events and tree_nodes: see the next test)."""
    with closing_db(s.path) as db:
        with pytest.raises(sqlite3.DatabaseError, match=f"sealbox: {words}"):
            db.execute(sql)


def test_insert_or_replace_of_an_event_is_named_by_verify(s: Sample) -> None:
    """Migration 0003 dropped the per-row INSERT guards of events and tree_nodes (17 µs a row, more than
    the insert: bench/bench_ledger.py). A REPLACE that rewrites an event with the UPDATE/DELETE triggers in
    place is then what a forged INSERT already was: not refused, but named precisely by verify."""
    raw, stored = raw_of(s.path, 11)  # run B, run_seq 5, note {"text": "note 1"}
    bad = flip(raw, b'1"}')
    with closing_db(s.path) as db:
        db.execute("INSERT OR REPLACE INTO events SELECT leaf_index, run_id, run_seq, kind, ts, principal, step,"
                   " server, tool, call_id, effect, ok, tokens, cost, ?, leaf_hash, rule, reason_code, duration_us"
                   " FROM events WHERE leaf_index = 11",
                   (bad,))
        assert {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")} >= {
            "events_no_update", "events_no_delete", "tree_no_update", "tree_no_delete"}
    assert raw_of(s.path, 11) == (bad, stored)
    report = verify(s.path)
    run = s.runs[1]
    assert [where(p) for p in report.problems if p.code != "tree_node_mismatch"] == [
        ("leaf_hash_mismatch", run, 5, "note", 11),
        ("chain_broken", run, 6, "run.ended", 12),
        ("checkpoint_root_mismatch", None, None, None, None),
        ("checkpoint_root_mismatch", None, None, None, None),
    ]
    assert node_problems(report) == covering_nodes({11}, SIZE)


def test_insert_or_replace_of_a_tree_node_is_named_by_verify(s: Sample) -> None:
    with closing_db(s.path) as db:
        assert db.execute("SELECT count(*) FROM tree_nodes WHERE level = 4 AND idx = 0").fetchone() == (1,)
        db.execute("INSERT OR REPLACE INTO tree_nodes VALUES (4, 0, zeroblob(32))")
    report = verify(s.path)
    assert [p.code for p in report.problems] == ["tree_node_mismatch"]
    assert node_problems(report) == [(4, 0)]
    assert report.problems[0].found == tag(bytes(32))


def test_insert_or_replace_cannot_rewrite_a_blob(s: Sample) -> None:
    """Same bypass for blobs: REPLACE must not swap a blob's content (only erasure is allowed);
    REPLACE of an existing ref may raise or be ignored, the content must not change."""
    ref, salt, content = blob_rows(s.path)[0]
    with closing_db(s.path) as db:
        try:
            db.execute("INSERT OR REPLACE INTO blobs (ref, salt, content, size) VALUES (?, ?, ?, ?)",
                       (ref, salt, b'"forged"', len(content)))
        except sqlite3.DatabaseError:
            pass
    assert blob_rows(s.path)[0] == (ref, salt, content)


def test_bug_insert_or_replace_rewrites_a_snapshot(s: Sample) -> None:
    """BUG (store/migrations/sqlite/0001_ledger.sql): the BEFORE INSERT guards against REPLACE cover events,
    tree_nodes, checkpoints, runs and blobs but not snapshots, so REPLACE rewrites a snapshot with every
    trigger in place (verify now catches the content change; the trigger should refuse it). Fix: the same
    guard, e.g. CREATE TRIGGER snapshots_no_replace BEFORE INSERT ON snapshots WHEN EXISTS (SELECT 1 FROM
    snapshots WHERE fingerprint = NEW.fingerprint) BEGIN SELECT RAISE(ABORT, 'sealbox: snapshots are
    append-only'); END; (or RAISE(IGNORE) if put_snapshot's INSERT OR IGNORE must stay silent)."""
    store = open_store(s.path)
    fp = store.put_snapshot({"model": {"name": "m"}, "tools": []})
    store.close()
    with closing_db(s.path) as db:
        with pytest.raises(sqlite3.DatabaseError, match="sealbox: snapshots are append-only"):
            db.execute("INSERT OR REPLACE INTO snapshots (fingerprint, content, created_at) VALUES (?, X'00', 'x')", (fp,))


# --------------------------------------------------------------------------- the CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SEALBOX), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def test_cli_verify_clean_store(s: Sample) -> None:
    res = run_cli("verify", "-s", str(s.path))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Verified: the log is intact. 19 events in 4 runs, 3 blobs, 3 signed checkpoints")
    assert s.vkey in lines[0]


def test_cli_verify_tampered_store(s: Sample) -> None:
    raw, _ = raw_of(s.path, 11)
    tamper(s.path, ("UPDATE events SET raw = ? WHERE leaf_index = 11", (flip(raw, b'1"}'),)))
    report = verify(s.path)
    res = run_cli("verify", "-s", str(s.path))
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = res.stdout.strip().splitlines()
    assert len(lines) == len(report.problems) + 1
    for line, p in zip(lines, report.problems):
        assert line.startswith(p.code)
        if p.run_id:
            assert f"run {p.run_id}" in line and f"run_seq {p.run_seq}" in line and p.kind in line
        if p.expected:
            assert f"expected {p.expected}" in line and f"found {p.found}" in line
    assert lines[-1].startswith(f"NOT VERIFIED: {len(report.problems)} problem(s) found.")
    assert "Traceback" not in res.stderr


def test_cli_verify_with_another_key(s: Sample) -> None:
    _, other = generate_key(s.origin)
    res = run_cli("verify", "-s", str(s.path), "--key", other)
    assert res.returncode == 1
    lines = res.stdout.strip().splitlines()
    assert [ln.split(":", 1)[0] for ln in lines[:-1]] == ["key_mismatch", "note"]
    assert lines[1] == ("note: so the log's 3 signed checkpoints and its checkpoint file fail their signature check: "
                        "4 checkpoint_signature problems, listed with --json")
    assert lines[0].startswith("key_mismatch: the key given is not this log's key: it has this log's name but the "
                               f"key id {other.split('+')[1]}, signed by {s.origin}+")


def test_a_dropped_trigger_is_reported_and_a_store_with_a_hole_refuses_to_append(s: Sample) -> None:
    tamper(s.path, "DELETE FROM events WHERE leaf_index = 11", restore_triggers=False)
    report = verify(s.path)
    missing = sorted(p.message.split(" ")[3] for p in report.problems if p.code == "trigger_missing")
    assert "events_no_delete" in missing and "events_no_update" in missing
    store = open_store(s.path)
    with pytest.raises(sealbox.StoreError, match="not contiguous"):
        store.append(EventDraft("note", {"text": "on top of a hole"}))
    store.close()


def test_editing_the_runs_table_is_reported(s: Sample) -> None:
    tamper(s.path, ("UPDATE runs SET agent = 'innocent-bot' WHERE run_id = ?", (s.runs[1],)),
           ("DELETE FROM runs WHERE run_id = ?", (s.runs[2],)))
    codes = [(p.code, p.run_id) for p in verify(s.path).problems]
    assert codes == [("run_row_mismatch", s.runs[1]), ("run_row_missing", s.runs[2])]


def test_a_foreign_trigger_that_drops_inserts_stops_the_tool_and_is_named_by_verify(s: Sample) -> None:
    """No record, no action: a trigger that is not Sealbox's and silently drops tool.result rows
    (RAISE(IGNORE)) makes the append fail instead of the writer believing it stored them."""
    from sealbox.errors import StoreError
    from sealbox.policies import ALLOW_ALL

    with closing_db(s.path) as db:
        db.execute("CREATE TRIGGER sneaky BEFORE INSERT ON events WHEN NEW.kind = 'tool.call'"
                   " BEGIN SELECT RAISE(IGNORE); END")
    store = open_store(s.path)
    ran = []
    try:
        with pytest.raises(sealbox.RecordingError):
            with sealbox.Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
                run.call_tool("db", "q", {"x": 1}, lambda x: ran.append(x))
        assert ran == []
        size = store.size()
        with pytest.raises(StoreError, match="events: 2 rows were written but 1 were stored"):
            store.append([started("r-new"),
                          EventDraft("tool.call", {"call_id": "c1", "server": "db", "tool": "q", "exposed": "db.q",
                                                   "arguments": {}, "grant": "implicit:agent:a"},
                                     run_id="r-new", principal="agent:a")])
        assert store.size() == size  # the whole transaction rolled back
    finally:
        store.close()
    report = verify(s.path)
    assert [(p.code, p.message) for p in report.problems if p.code == "trigger_foreign"] == [
        ("trigger_foreign", "the trigger sneaky is not Sealbox's: it can silently change or drop what Sealbox writes "
                            "(someone changed the store below Sealbox)")]


def test_verify_warns_about_events_no_checkpoint_covers(tmp_path: Path) -> None:
    store = sealbox.init_store(tmp_path / "s", checkpoint_policy=CheckpointPolicy(every_events=10**9, every_seconds=10**9))
    store.issue_checkpoint()
    signed = store.size()
    store.append([EventDraft("run.started", {"agent": "a", "snapshot": None, "parent_run_id": None, "labels": {},
                                             "policy": {"fingerprint": "sha256:" + "0" * 64, "name": None}},
                             run_id="r1", principal="agent:a")])
    report = verify_store(store)  # before close() signs the tail
    store._closed = True  # like a writer killed before close(): nothing signs the new event
    assert report.ok and report.unsigned_events == 1 and report.tree_size_signed == signed
    assert report.summary().endswith(
        f"Warning: 1 event(s) (leaf index {signed}) are not covered by a signed checkpoint: nothing signed vouches "
        "for them yet (a writer still running, or one that stopped without closing the store; the next writer to "
        "close it signs them as they are now).")
    assert report.to_dict()["unsigned_events"] == 1


def test_content_settings_changed_below_sealbox_are_refused_and_named(tmp_path: Path) -> None:
    """The content mode lives in store_meta (a table that may be rewritten); its fingerprint is in the
    log from init on, so switching "redacted" to "full" with sqlite3 is refused and reported."""
    from sealbox.errors import StoreError

    store = sealbox.init_store(tmp_path / "s")
    store.close()
    with closing_db(tmp_path / "s") as db:
        db.execute("UPDATE store_meta SET value = replace(value, '\"redacted\"', '\"full\"') WHERE key = 'content'")
    with pytest.raises(StoreError, match="the content settings in the database \\(mode full, sha256:[0-9a-f]{64}\\) are "
                                         "not those recorded when the store was created"):
        open_store(tmp_path / "s")
    report = verify(tmp_path / "s")
    assert [p.code for p in report.problems] == ["content_policy_changed"]
    r = subprocess.run([SEALBOX, "verify", "-s", str(tmp_path / "s")], capture_output=True, text=True)
    assert r.returncode == 1 and "content_policy_changed" in r.stdout + r.stderr


def test_verify_canonical_names_bytes_that_are_not_jcs(s: Sample) -> None:
    """Hashes can be consistent over bytes that are not RFC 8785 (a writer bug, a foreign writer
    that recomputed every hash): --canonical re-writes each parse with the reference writer."""
    assert verify(s.path, canonical=True).ok
    raw, _ = raw_of(s.path, 11)
    assert b'"text":"note 1"' in raw
    bad = raw.replace(b'"text":"note 1"', b'"text":"note 1" ')  # valid JSON, same meaning, not canonical
    tamper(s.path, ("UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = 11", (bad, leaf_hash(bad))))
    rewrite_all_hashes(s.path)
    plain = verify(s.path)
    assert "not_canonical" not in [p.code for p in plain.problems]
    strict = verify(s.path, canonical=True)
    (problem,) = [p for p in strict.problems if p.code == "not_canonical"]
    assert where(problem) == ("not_canonical", s.runs[1], 5, "note", 11)
    assert problem.message.startswith("the hashed bytes are not RFC 8785 (JCS): they differ from their canonical form at byte")
    r = subprocess.run([SEALBOX, "verify", "--canonical", "-s", str(s.path)], capture_output=True, text=True)
    assert r.returncode == 1 and "not_canonical" in r.stdout


@pytest.mark.parametrize("token, reason", [
    (b"9007199254740993", "integer outside"),  # 2**53 + 1: valid JSON, not I-JSON
    (b"NaN", "nan is not a JSON number"),  # Python's json reads it; RFC 8785 has no such number
])
def test_verify_canonical_names_bytes_the_reference_writer_refuses(s: Sample, token: bytes, reason: str) -> None:
    """Bytes that parse but hold a value RFC 8785 cannot write are ``not_canonical`` (the
    CanonicalizationError is a ValueError: it must not be taken for unreadable bytes)."""
    raw, _ = raw_of(s.path, 11)
    bad = raw.replace(b'"text":"note 1"', b'"text":' + token)
    assert bad != raw
    tamper(s.path, ("UPDATE events SET raw = ?, leaf_hash = ? WHERE leaf_index = 11", (bad, leaf_hash(bad))))
    rewrite_all_hashes(s.path)
    strict = verify(s.path, canonical=True)
    (problem,) = [p for p in strict.problems if p.code == "not_canonical"]
    assert where(problem) == ("not_canonical", s.runs[1], 5, "note", 11)
    assert problem.message.startswith("the hashed bytes hold a value RFC 8785 cannot write: ")
    assert reason in problem.message


def test_a_sealbox_trigger_redefined_under_its_own_name_is_named(s: Sample) -> None:
    with closing_db(s.path) as db:
        db.execute("DROP TRIGGER events_no_update")
        db.execute("CREATE TRIGGER events_no_update BEFORE INSERT ON events WHEN NEW.kind = 'tool.result'"
                   " BEGIN SELECT RAISE(IGNORE); END")
        db.execute("UPDATE events SET kind = kind WHERE leaf_index = 1")  # the guard is gone
    report = verify(s.path)
    assert [(p.code, p.message.split(":")[0]) for p in report.problems] == [
        ("trigger_foreign", "the trigger events_no_update is not Sealbox's")]


@pytest.mark.parametrize("content", ["{not json", '{"mode": "redacted", "keys": null}', "[1, 2]",
                                     '{"mode": "bogus"}', '{"mode": "redacted", "patterns": ["("]}'])
def test_unreadable_content_settings_are_reported_not_crashed_on(tmp_path: Path, content: str) -> None:
    from sealbox.errors import StoreError

    sealbox.init_store(tmp_path / "s").close()
    with closing_db(tmp_path / "s") as db:
        db.execute("UPDATE store_meta SET value = ? WHERE key = 'content'", (content,))
    with pytest.raises(StoreError, match="the content settings in the database cannot be read"):
        open_store(tmp_path / "s")
    report = verify(tmp_path / "s")
    assert [p.code for p in report.problems] == ["content_policy_changed"]
    r = subprocess.run([SEALBOX, "verify", "-s", str(tmp_path / "s")], capture_output=True, text=True)
    assert r.returncode == 1 and "content_policy_changed" in r.stdout and "internal error" not in r.stderr


def test_content_settings_rewritten_without_a_change_of_meaning_still_open(tmp_path: Path) -> None:
    import json

    sealbox.init_store(tmp_path / "s").close()
    with closing_db(tmp_path / "s") as db:
        (text,) = db.execute("SELECT value FROM store_meta WHERE key = 'content'").fetchone()
        doc = json.loads(text)
        doc["keys"] = [k.upper() for k in reversed(doc["keys"])]
        db.execute("UPDATE store_meta SET value = ? WHERE key = 'content'", (json.dumps(doc, indent=3),))
    open_store(tmp_path / "s").close()
    assert verify(tmp_path / "s").ok


# --------------------------------------------------------------------------- the checkpoints table itself


def test_a_checkpoint_root_column_changed_is_named_and_never_signed_again(s: Sample) -> None:
    """The signer used to reuse the newest row's root_hash column when the log had not grown:
    a zeroed column became a signed false checkpoint (and an export proving nothing)."""
    cid, size, text = checkpoint_rows(s.path)[2]
    signed_root = Checkpoint.parse(text.split("\n\n", 1)[0] + "\n").root
    tamper(s.path, ("UPDATE checkpoints SET root_hash = zeroblob(32) WHERE id = ?", (cid,)))
    report = verify(s.path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [(
        "checkpoint_row_mismatch", f"size 19, root sha256:{signed_root.hex()}", f"size 19, root sha256:{'00' * 32}")]
    assert report.problems[0].message.startswith("checkpoint 3 (size 19): the table's tree_size and root_hash differ")
    store = open_store(s.path)
    with pytest.raises(sealbox.StoreError, match=r"differ from its signed note \(19, sha256:" + signed_root.hex()):
        store.issue_checkpoint(["sealbox-test/v1 x"])
    store.close()  # nothing new to sign: close signs nothing either
    assert [r[0] for r in checkpoint_rows(s.path)] == [1, 2, 3]


def test_a_checkpoint_size_column_changed_is_named_and_refused(s: Sample) -> None:
    """tree_size feeds the rollback guard: lowering it must not pass verify."""
    cid, _, _ = checkpoint_rows(s.path)[2]
    tamper(s.path, ("UPDATE checkpoints SET tree_size = 18 WHERE id = ?", (cid,)))
    report = verify(s.path)
    assert [(p.code, p.found.split(",")[0]) for p in report.problems] == [("checkpoint_row_mismatch", "size 18")]
    store = open_store(s.path)
    store.append(note("system", "one more"))  # the log grows; the consistency proof must start at what was signed
    with pytest.raises(sealbox.StoreError, match=r"tree_size and root_hash \(18, "):
        store.issue_checkpoint()
    store._signer = None  # the test's own close: do not try to sign again
    store.close()


def test_a_checkpoint_root_column_of_another_type_is_reported_not_crashed_on(s: Sample) -> None:
    tamper(s.path, "UPDATE checkpoints SET root_hash = 'abc' WHERE id = 1")
    store = open_store(s.path, readonly=True)
    assert store.checkpoints()[0].root_hash == b"abc"
    store.close()
    report = verify(s.path)
    assert [(p.code, p.found) for p in report.problems] == [("checkpoint_row_mismatch", "size 1, root 'abc'"),
                                                            ("column_type", "TEXT")]


def test_a_deleted_middle_checkpoint_is_named(s: Sample) -> None:
    tamper(s.path, "DELETE FROM checkpoints WHERE id = 2")
    report = verify(s.path)
    assert [(p.code, p.message, p.expected, p.found) for p in report.problems] == [(
        "checkpoint_missing", "signed checkpoints were deleted from the store (row id 2 is missing)",
        "rows 1 to 3", "2 rows")]


def test_a_deleted_newest_checkpoint_is_named_by_the_checkpoint_file(s: Sample) -> None:
    tamper(s.path, "DELETE FROM checkpoints WHERE id = 3")
    report = verify(s.path)
    assert [(p.code, p.expected) for p in report.problems] == [("checkpoint_missing", "a row of size 19")]
    assert report.problems[0].message.startswith("the checkpoint file holds a checkpoint the checkpoints table does not")


def test_every_checkpoint_deleted_with_the_file_is_not_intact(s: Sample) -> None:
    tamper(s.path, "DELETE FROM checkpoints")
    (s.path / "checkpoint").unlink()
    report = verify(s.path)
    assert [p.code for p in report.problems] == ["checkpoint_missing"]
    assert "verify against a checkpoint kept elsewhere" in report.problems[0].message
    res = run_cli("verify", "-s", str(s.path))
    assert res.returncode == 1 and res.stdout.splitlines()[-1].startswith("NOT VERIFIED: 1 problem(s)")


def test_a_checkpoint_kept_elsewhere_catches_a_cut_log_whose_checkpoints_went_with_it(s: Sample, tmp_path: Path) -> None:
    """The attacker cuts the log back to 11 events, deletes the checkpoint rows and the file that
    covered the rest (row ids stay contiguous): nothing inside the store shows it. A checkpoint saved
    earlier with `sealbox log checkpoint` does."""
    saved = tmp_path / "saved.txt"
    res = run_cli("log", "checkpoint", "-s", str(s.path))
    assert res.returncode == 0 and res.stdout.split("\n")[1] == "19"
    saved.write_text(res.stdout)
    saved_json = tmp_path / "saved.json"
    saved_json.write_text(run_cli("log", "checkpoint", "-s", str(s.path), "--json").stdout)
    tamper(s.path, "DELETE FROM events WHERE leaf_index >= 11", "DELETE FROM tree_nodes WHERE ((idx + 1) << level) > 11",
           "DELETE FROM checkpoints WHERE tree_size > 11", "DELETE FROM runs WHERE leaf_index >= 11")
    (s.path / "checkpoint").unlink()
    # what the folder alone can show: its checkpoint file is gone (the rows left are consistent)
    assert [p.code for p in verify(s.path).problems] == ["checkpoint_file_missing"]
    for kept in (saved, saved_json):
        res = run_cli("verify", "-s", str(s.path), "--checkpoint", str(kept), "--key", s.vkey)
        assert res.returncode == 1, res.stdout
        assert res.stdout.splitlines()[1] == (
            f"log_truncated: the checkpoint given in {kept} was signed for 19 events but only 11 are present "
            "(the tail of the log was cut, or the store was rolled back) (expected at least 19 events, found 11 events)")
    report = verify(s.path, checkpoints=[("kept", saved.read_text())])
    assert [(p.code, p.expected) for p in report.problems] == [
        ("checkpoint_file_missing", "the newest checkpoint (size 11 or more)"), ("log_truncated", "at least 19 events")]


def test_a_checkpoint_kept_elsewhere_must_verify_and_match(s: Sample, tmp_path: Path) -> None:
    text = (s.path / "checkpoint").read_text()
    assert verify(s.path, checkpoints=[("kept", text)]).ok
    forged = tmp_path / "forged.txt"
    forged.write_text(flip_signature(text))
    res = run_cli("verify", "-s", str(s.path), "--checkpoint", str(forged))
    assert res.returncode == 1 and res.stdout.startswith(f"checkpoint_signature: the checkpoint given in {forged} ")
    for content, words in (("not a note\n", "is not a signed checkpoint"), ("{}", 'JSON without a "note" string'),
                           ("{oops", "is neither a signed checkpoint")):
        bad = tmp_path / "bad.txt"
        bad.write_text(content)
        res = run_cli("verify", "-s", str(s.path), "--checkpoint", str(bad))
        assert res.returncode == 2 and words in res.stderr and res.stderr.count("\n") == 1, res.stderr
    res = run_cli("verify", "-s", str(s.path), "--checkpoint", str(tmp_path / "missing.txt"))
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_checkpoint_json_whose_fields_disagree_with_its_note_is_refused(s: Sample, tmp_path: Path) -> None:
    """`log checkpoint --json` output whose tree_size or root_hash was edited is refused (exit 2),
    not half believed: the fields must say what the note signs."""
    import json

    doc = json.loads(run_cli("log", "checkpoint", "-s", str(s.path), "--json").stdout)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    assert run_cli("verify", "-s", str(s.path), "--checkpoint", str(good)).returncode == 0
    size = doc["tree_size"]
    for field, value, words in (("tree_size", size + 5, f'"tree_size" is {size + 5} but its note signs size {size}'),
                                ("tree_size", str(size), f"\"tree_size\" is '{size}' but its note signs size {size}"),
                                ("root_hash", "sha256:" + "00" * 32, '"root_hash" is \'sha256:' + "00" * 32)):
        bad = tmp_path / f"bad-{field}.json"
        bad.write_text(json.dumps({**doc, field: value}))
        res = run_cli("verify", "-s", str(s.path), "--checkpoint", str(bad))
        assert res.returncode == 2 and words in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_blob_salt_removed_but_content_kept_is_named(s: Sample) -> None:
    ref = blob_rows(s.path)[0][0]
    tamper(s.path, ("UPDATE blobs SET salt = NULL WHERE ref = ?", (ref,)))  # the triggers allow only a whole erasure
    report = verify(s.path)
    assert [p.code for p in report.problems] == ["blob_salt_missing"]
    assert report.problems[0].message.startswith(f"blob {ref} has content but no salt")


def test_blob_size_column_is_checked(s: Sample) -> None:
    ref, _, content = blob_rows(s.path)[0]
    tamper(s.path, ("UPDATE blobs SET size = 1 WHERE ref = ?", (ref,)))
    report = verify(s.path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("blob_size_mismatch", f"{len(content)} bytes", "1")]


def test_a_blob_row_with_a_malformed_ref_or_text_salt_is_named(s: Sample) -> None:
    ref = blob_rows(s.path)[0][0]
    tamper(s.path, ("INSERT INTO blobs (ref, salt, content, size) VALUES ('sha256:00', X'00', X'7b7d', 2)", ()),
           ("UPDATE blobs SET salt = 'text' WHERE ref = ?", (ref,)))
    report = verify(s.path)
    assert sorted(p.code for p in report.problems) == ["blob_malformed", "blob_mismatch", "column_type"]
    assert next(p for p in report.problems if p.code == "column_type").message == (
        f"the blobs table's salt column holds a TEXT value in the row ref '{ref}', where Sealbox writes BLOB or NULL "
        "(the row was changed below Sealbox)")
    assert "'sha256:00' is not a commitment" in next(p.message for p in report.problems if p.code == "blob_malformed")


def test_a_rolled_back_log_whose_newest_row_was_deleted_is_never_signed_again(s: Sample) -> None:
    """The log is cut back to 11 events and the checkpoint rows past it deleted, the checkpoint file
    (size 19) kept: appends were refused, but close() and export used to sign a checkpoint of 11,
    which reused the deleted row's id and hid the rollback once the file went too."""
    tamper(s.path, "DELETE FROM events WHERE leaf_index >= 11", "DELETE FROM tree_nodes WHERE ((idx + 1) << level) > 11",
           "DELETE FROM checkpoints WHERE tree_size > 11", "DELETE FROM runs WHERE leaf_index >= 11")
    before = checkpoint_rows(s.path)
    res = run_cli("export", s.runs[0], "-s", str(s.path), "-o", str(s.path.parent / "x.sbx"))
    assert res.returncode == 2 and "holds 11 events but its newest signed checkpoint covers 19" in res.stderr, res
    assert not (s.path.parent / "x.sbx").exists()
    store = open_store(s.path)
    with pytest.raises(StoreRolledBackError):
        store.issue_checkpoint()
    store.close()  # nothing arrived since the newest row: close signs nothing
    assert checkpoint_rows(s.path) == before
    assert [p.code for p in verify(s.path).problems] == ["log_truncated"]


def test_a_deleted_checkpoint_row_is_not_papered_over_by_the_next_signature(s: Sample) -> None:
    """Row 2 deleted: the next checkpoint would take id 4 and leave the gap, but one signed after the
    newest row was deleted would reuse its id and close it. The signer refuses either way; the append
    that made the checkpoint due stays (it was committed) and later appends are refused unwritten."""
    tamper(s.path, "DELETE FROM checkpoints WHERE id = 2")
    store = open_store(s.path, checkpoint_policy=CheckpointPolicy(every_events=1))
    placed = store.append(note("system", "after the deletion"))  # committed; its checkpoint is refused
    assert placed[0].leaf_index == SIZE
    with pytest.raises(sealbox.StoreError, match=r"refusing to sign a checkpoint: checkpoint rows were deleted"):
        store.append(note("system", "refused"))
    with pytest.raises(sealbox.StoreError, match="checkpoint rows were deleted"):
        store.issue_checkpoint()
    store._signer = None  # close() would be refused the same way
    store.close()
    assert [r[0] for r in checkpoint_rows(s.path)] == [1, 3]
    report = verify(s.path)
    assert [p.code for p in report.problems] == ["checkpoint_missing"]
    assert report.events == SIZE + 1


def test_every_checkpoint_deleted_is_not_signed_over(s: Sample) -> None:
    tamper(s.path, "DELETE FROM checkpoints")
    (s.path / "checkpoint").unlink()
    store = open_store(s.path)
    with pytest.raises(sealbox.StoreError, match="holds events but no signed checkpoint"):
        store.issue_checkpoint()
    store._signer = None
    store.close()
    assert checkpoint_rows(s.path) == []


def test_log_checkpoint_prints_only_a_checkpoint_that_verifies(s: Sample) -> None:
    res = run_cli("log", "checkpoint", "-s", str(s.path))
    assert res.returncode == 0 and res.stdout.split("\n")[:2] == [s.origin, "19"]
    cid, _, text = checkpoint_rows(s.path)[2]
    skey, _ = generate_key(s.origin)
    for bad, words in (("garbage", "does not verify with the log's key"),
                       (resign(text, Signer.from_key(skey)), "does not verify with the log's key")):
        tamper(s.path, ("UPDATE checkpoints SET note = ? WHERE id = ?", (bad, cid)))
        res = run_cli("log", "checkpoint", "-s", str(s.path))
        assert res.returncode == 1 and res.stdout == "", res
        assert words in res.stderr and "run `sealbox verify`" in res.stderr and res.stderr.count("\n") == 1
    # signed with the real key, for a tree the events do not make
    forged = sign_checkpoint(Checkpoint(s.origin, 19, bytes(32)), Signer.from_key((s.path / "log.key").read_text().strip()))
    tamper(s.path, ("UPDATE checkpoints SET note = ?, root_hash = ? WHERE id = ?", (forged, bytes(32), cid)))
    res = run_cli("log", "checkpoint", "-s", str(s.path), "--json")
    assert res.returncode == 1 and "the events do not reproduce the newest checkpoint's root (size 19)" in res.stderr


def test_checkpoints_out_of_order_are_named(s: Sample) -> None:
    """The log only grows: a checkpoint row of a smaller size after a larger one was moved or added."""
    rows = checkpoint_rows(s.path)
    (id2, size2, note2), (id3, size3, note3) = rows[1], rows[2]
    tamper(s.path, ("UPDATE checkpoints SET id = 100 WHERE id = ?", (id2,)),
           ("UPDATE checkpoints SET id = ? WHERE id = ?", (id2, id3)), ("UPDATE checkpoints SET id = ? WHERE id = 100", (id3,)))
    report = verify(s.path)
    assert [(p.code, p.expected, p.found) for p in report.problems] == [
        ("checkpoint_order", f"size {size3} or more", f"size {size2}")]
