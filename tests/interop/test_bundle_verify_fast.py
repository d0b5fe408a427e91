"""The fast paths of ``verify_bundle`` decide exactly what the reference checks decide.

``_Inclusion`` proves a leaf from the previous proven leaf's proof (no fold to the root): it must accept
exactly the proofs :func:`merkle.verify_inclusion` accepts, for every tree shape, in order with gaps,
and with any hash of a proof, the leaf or its index changed. ``_event_fields_fast`` reads the lines an
export writes; it must give what :func:`_event_fields` gives, and leave to it every line it does not.
"""

from __future__ import annotations

import base64
import random

import pytest

from sealbox.errors import ProofError
from sealbox.interop.bundle import event_line
from sealbox.interop.bundle_verify import _event_fields, _event_fields_fast, _hashes, _Inclusion
from sealbox.ledger import merkle


def _text(proof: list[bytes]) -> bytes:
    """A proof as the text between the brackets of its line (what _Inclusion.check reads)."""
    return b",".join(b'"' + base64.b64encode(h) + b'"' for h in proof)


def _reference(leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes) -> bool:
    try:
        merkle.verify_inclusion(leaf, index, size, proof, root)
    except ProofError:
        return False
    return True


def _tree(size: int) -> tuple[list[bytes], merkle.MemoryTree, bytes]:
    leaves = [merkle.leaf_hash(b"leaf %d" % i) for i in range(size)]
    tree = merkle.MemoryTree(leaves)
    return leaves, tree, merkle.root_from_leaves(leaves)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 9, 16, 17, 31, 33, 64, 100])
def test_inclusion_accepts_every_valid_proof_in_order_with_gaps(size):
    leaves, tree, root = _tree(size)
    rng = random.Random(size)
    for step in (1, 2, 3):
        check = _Inclusion(size, root)
        for i in range(rng.randrange(step), size, step):
            proof = merkle.inclusion_proof(i, size, tree.get_node)
            assert check.check(leaves[i], i, _text(proof)) is True, (size, step, i)


@pytest.mark.parametrize("size", [2, 3, 5, 6, 9, 13, 16, 21, 37, 64, 100])
def test_inclusion_never_accepts_what_the_reference_rejects(size):
    leaves, tree, root = _tree(size)
    rng = random.Random(1000 + size)
    check = _Inclusion(size, root)
    cases = 0
    for i in range(size):
        proof = merkle.inclusion_proof(i, size, tree.get_node)
        variants = [(leaves[i], i, proof)]
        for k in range(len(proof)):  # each hash of the proof replaced: by junk, and by another node's hash
            variants.append((leaves[i], i, proof[:k] + [bytes(32)] + proof[k + 1:]))
            variants.append((leaves[i], i, proof[:k] + [leaves[rng.randrange(size)]] + proof[k + 1:]))
        variants.append((leaves[(i + 1) % size], i, proof))  # another leaf's bytes
        if i + 1 < size:
            variants.append((leaves[i], i + 1, proof))  # the proof of another index
        variants.append((leaves[i], i, proof[:-1]))  # too short
        variants.append((leaves[i], i, proof + [bytes(32)]))  # too long
        rng.shuffle(variants)
        for leaf, index, p in variants[:-1] + [(leaves[i], i, proof)]:  # the valid one last: the next anchors on it
            want = _reference(leaf, index, size, p, root)
            got = check.check(leaf, index, _text(p))
            assert got == want, (size, i, index, p == proof)
            cases += 1
    assert cases > size


def test_inclusion_against_another_root_accepts_nothing():
    leaves, tree, root = _tree(37)
    check = _Inclusion(37, merkle.node_hash(root, root))
    assert [check.check(leaves[i], i, _text(merkle.inclusion_proof(i, 37, tree.get_node))) for i in range(37)] == [
        False] * 37


def test_inclusion_index_outside_the_tree():
    leaves, tree, root = _tree(5)
    assert _Inclusion(5, root).check(leaves[4], 5, _text(merkle.inclusion_proof(4, 5, tree.get_node))) is False


RAW = b'{"kind":"run.started","payload":{}}'
H1, H2 = bytes(range(32)), bytes(range(32, 64))


@pytest.mark.parametrize("line", [
    event_line(RAW, 0, []).rstrip(b"\n"),
    event_line(RAW, 7, [H1]).rstrip(b"\n"),
    event_line(RAW, 123456, [H1, H2, H1]).rstrip(b"\n"),
])
def test_event_fields_fast_reads_what_an_export_writes(line):
    raw, leaf_index, text = _event_fields_fast(line)
    assert (raw, leaf_index, _hashes(text)) == _event_fields(line)


def _b64(h: bytes) -> bytes:
    return base64.b64encode(h)


@pytest.mark.parametrize("line", [
    b'{"event":' + RAW + b',"leaf_index":07,"proof":[]}',  # a leading zero
    b'{"event":' + RAW + b',"leaf_index":-1,"proof":[]}',
    b'{"event":' + RAW + b',"leaf_index":9007199254740992,"proof":[]}',  # 2**53
    b'{"event":' + RAW + b',"leaf_index":1,"proof":["' + _b64(H1)[:-2] + b'B="]}',  # non-canonical base64 bits
    b'{"event":' + RAW + b',"leaf_index":1,"proof":["' + _b64(H1) + b'" ]}',
    b'{"event":' + RAW + b',"leaf_index":1,"proof":["' + _b64(H1 + b"x") + b'"]}',  # 33 bytes
    b'{"event":' + RAW + b',"leaf_index":1,"proof":[],"x":1}',
    b'{"event" :' + RAW + b',"leaf_index":1,"proof":[]}',
    b'{"event":' + RAW + b',"leaf_index":1,"proof":["' + _b64(H1) + b'",]}',
])
def test_event_fields_fast_leaves_every_other_line_to_the_full_reader(line):
    assert _event_fields_fast(line) is None


REF = "sha256:" + "1" * 64


@pytest.mark.parametrize("content", [
    ('{"a":{"$blob":"' + REF + '"}}').encode(),
    ('{"a":{"\\u0024blob":"' + REF + '"}}').encode(),  # the key escaped
    ('{"a":{"$blob":"' + REF + '"}}').encode("utf-16-le"),  # JSON in UTF-16: no "$blob" in its bytes
    ('{"a":{"$blob":"' + REF + '"}}').encode("utf-8-sig"),
])
def test_check_blobs_finds_each_reference_however_encoded(content):
    from sealbox import blobs
    from sealbox.verify import check_blobs

    salt = b"s" * 16
    ref = blobs.commitment(salt, content)
    refs_of: dict = {}
    problems, count = check_blobs([(ref, salt, content)], set(), set(), refs_of)
    assert [(p.code, p.message) for p in problems] == [("blob_missing", f"blob {REF} is referenced but not stored")]
    assert (count, refs_of) == (1, {ref: [REF]})


def test_blob_lines_as_written_and_not():
    from sealbox.interop.bundle import blob_line
    from sealbox.interop.bundle_verify import _blob_fields

    ref = "sha256:" + "ab" * 32
    assert _blob_fields(blob_line(ref, b"\x01\xfe", b'{"x":[1,",\\"ref\\":"]}').rstrip(b"\n")) == (
        ref, b"\x01\xfe", b'{"x":[1,",\\"ref\\":"]}')
    assert _blob_fields(blob_line(ref, None, None).rstrip(b"\n")) == (ref, None, None)
    with pytest.raises(ValueError, match="canonical form"):
        _blob_fields(b'{"content":1,"ref":"' + ref.encode() + b'","salt":"01FE"}')  # uppercase salt
