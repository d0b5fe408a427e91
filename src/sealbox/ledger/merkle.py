"""The RFC 9162 Merkle tree: hashing, proofs, and their verification.

This module implements the Merkle Tree Hash of RFC 9162 §2.1 (identical to
RFC 6962 §2.1 for SHA-256), with SHA-256 as the hash:

* a leaf is ``SHA-256(0x00 ‖ data)``, an interior node ``SHA-256(0x01 ‖ left ‖ right)``,
  and the root of the empty tree is ``SHA-256("")`` (§2.1.1);
* inclusion proofs (§2.1.3) and consistency proofs (§2.1.4) are generated from
  *full subtrees only*, read through a :data:`NodeReader`, so that a store can
  keep one row per full subtree and answer any proof with O(log n) reads;
* verification (:func:`verify_inclusion`, :func:`verify_consistency`) needs no
  store at all: an offline verifier imports only this module.

Every hash in this API is raw ``bytes`` (32 bytes for SHA-256). Leaf indices are
0-based, as in RFC 9162. Verification checks every step of the RFC algorithm
and the exact proof length, and raises :class:`~sealbox.errors.ProofError` on
any failure.

Cases the RFC leaves open (see ``docs/log-format.md``):

* an inclusion proof in a tree of size 0 always fails (there is no leaf);
* a consistency proof from ``size1 == 0`` always fails: the empty tree is
  trivially a prefix of every tree, so there is nothing to prove and a caller
  must handle "no previous checkpoint" itself;
* a consistency proof with ``size1 == size2`` passes only if the proof is empty
  and both roots are 32 bytes long and byte-equal (transparency-dev/merkle does
  not check the length; we do).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from sealbox.errors import ProofError

__all__ = [
    "HASH_SIZE",
    "EMPTY_ROOT",
    "NodeReader",
    "leaf_hash",
    "node_hash",
    "root_from_leaves",
    "subtree_hash",
    "root_at",
    "inclusion_proof",
    "consistency_proof",
    "new_nodes_for_append",
    "MemoryTree",
    "StreamingTree",
    "root_from_inclusion_proof",
    "verify_inclusion",
    "verify_consistency",
]

HASH_SIZE = 32
"""Length in bytes of every hash in the tree (SHA-256)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH({}) = SHA-256 of the empty string (RFC 9162 §2.1.1)."""

NodeReader = Callable[[int, int], bytes]
"""``get_node(level, index)``: the hash of the full subtree of ``2**level`` leaves
that starts at leaf ``index * 2**level`` (level 0 holds the leaf hashes)."""


# --- hashing (RFC 9162 §2.1.1) ---------------------------------------------------------


def leaf_hash(data: bytes) -> bytes:
    """Hash one leaf: ``SHA-256(0x00 ‖ data)`` (RFC 9162 §2.1.1).

    Args:
        data: the leaf's bytes (for Sealbox, an event's canonical bytes).

    Returns:
        The 32-byte leaf hash.
    """
    return hashlib.sha256(b"\x00" + bytes(data)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Hash two children: ``SHA-256(0x01 ‖ left ‖ right)`` (RFC 9162 §2.1.1).

    Args:
        left: the left child's hash.
        right: the right child's hash.

    Returns:
        The 32-byte interior node hash.
    """
    return hashlib.sha256(b"\x01" + bytes(left) + bytes(right)).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``): RFC 9162's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def root_from_leaves(leaf_hashes: Sequence[bytes]) -> bytes:
    """Compute MTH(D[n]) straight from the definition (RFC 9162 §2.1.1).

    This is the reference implementation, independent of the node-store code.

    Args:
        leaf_hashes: the leaf hashes (already hashed with :func:`leaf_hash`), in order.

    Returns:
        The 32-byte root hash; :data:`EMPTY_ROOT` for no leaves.
    """
    n = len(leaf_hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return bytes(leaf_hashes[0])
    k = _split(n)
    return node_hash(root_from_leaves(leaf_hashes[:k]), root_from_leaves(leaf_hashes[k:]))


# --- proofs from full-subtree nodes ----------------------------------------------------


def _check_range(start: int, end: int) -> None:
    if not 0 <= start <= end:
        raise ValueError(f"invalid leaf range [{start}, {end})")


def subtree_hash(start: int, end: int, get_node: NodeReader) -> bytes:
    """MTH of the leaves ``[start, end)``, read from full-subtree nodes only.

    The range is split as RFC 9162 §2.1.1 splits a list (at the largest power of
    two smaller than its length) until each part is an aligned full subtree,
    which is read with one ``get_node`` call. When ``start`` is a multiple of
    the largest power of two not above ``end - start`` (true for every range
    used by proofs and by :func:`root_at`), this takes at most
    ``popcount(end - start)`` reads.

    Args:
        start: first leaf index (0-based, inclusive).
        end: one past the last leaf index.
        get_node: reader of full-subtree hashes (see :data:`NodeReader`).

    Returns:
        The 32-byte hash; :data:`EMPTY_ROOT` for an empty range.

    Raises:
        ValueError: if the range is invalid.
    """
    _check_range(start, end)
    n = end - start
    if n == 0:
        return EMPTY_ROOT
    if n & (n - 1) == 0 and start % n == 0:
        return get_node(n.bit_length() - 1, start // n)
    k = _split(n)
    return node_hash(subtree_hash(start, start + k, get_node), subtree_hash(start + k, end, get_node))


def root_at(size: int, get_node: NodeReader) -> bytes:
    """The root hash of the tree of the first ``size`` leaves (RFC 9162 §2.1.1).

    Args:
        size: the tree size (number of leaves), ``>= 0``.
        get_node: reader of full-subtree hashes.

    Returns:
        The 32-byte root; :data:`EMPTY_ROOT` when ``size`` is 0. Uses
        ``popcount(size)`` reads.

    Raises:
        ValueError: if ``size`` is negative.
    """
    return subtree_hash(0, size, get_node)


def inclusion_proof(index: int, size: int, get_node: NodeReader) -> list[bytes]:
    """The audit path PATH(index, D[size]) (RFC 9162 §2.1.3.1).

    Args:
        index: the leaf's 0-based index, ``0 <= index < size``.
        size: the tree size.
        get_node: reader of full-subtree hashes.

    Returns:
        The proof hashes, from the leaf's sibling up to the root's child.
        Uses at most ``2 * ceil(log2(size))`` reads.

    Raises:
        ValueError: if ``index`` is not in ``[0, size)``.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is not in a tree of size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(subtree_hash(lo + k, hi, get_node))
            hi = lo + k
        else:
            path.append(subtree_hash(lo, lo + k, get_node))
            lo += k
    path.reverse()
    return path


def consistency_proof(size1: int, size2: int, get_node: NodeReader) -> list[bytes]:
    """The consistency proof PROOF(size1, D[size2]) (RFC 9162 §2.1.4.1, SUBPROOF).

    Args:
        size1: the earlier tree size, ``0 < size1 <= size2``.
        size2: the later tree size.
        get_node: reader of full-subtree hashes.

    Returns:
        The proof hashes; an empty list when ``size1 == size2`` (our policy, see
        :func:`verify_consistency`). Uses O(log size2) reads.

    Raises:
        ValueError: if ``size1`` is 0 (there is nothing to prove; see the module
            docstring) or the sizes are out of order.
    """
    if not 0 < size1 <= size2:
        raise ValueError(f"no consistency proof from size {size1} to size {size2}")
    proof: list[bytes] = []
    lo, hi, whole = 0, size2, True  # ``whole``: RFC's b, "still the original tree's left edge"
    while True:
        m = size1 - lo
        if m == hi - lo:
            if not whole:
                proof.append(subtree_hash(lo, hi, get_node))
            break
        k = _split(hi - lo)
        if m <= k:
            proof.append(subtree_hash(lo + k, hi, get_node))
            hi = lo + k
        else:
            proof.append(subtree_hash(lo, lo + k, get_node))
            lo, whole = lo + k, False
    proof.reverse()
    return proof


def new_nodes_for_append(index: int, leaf: bytes, get_node: NodeReader) -> list[tuple[int, int, bytes]]:
    """The full-subtree rows to store when leaf number ``index`` is appended.

    The leaf itself is the node ``(0, index)``. While the node's index is odd it
    is a right child, so its parent subtree is now full: combine it with its left
    sibling (read with ``get_node``) and go up one level.

    Args:
        index: the new leaf's 0-based index (the tree size before the append).
        leaf: the new leaf's 32-byte hash.
        get_node: reader of the nodes stored so far.

    Returns:
        ``(level, index, hash)`` rows, the leaf first. O(log n) hashes in the
        worst case, amortised O(1) per append.

    Raises:
        ValueError: if ``index`` is negative or ``leaf`` is not 32 bytes.
    """
    if index < 0:
        raise ValueError(f"negative leaf index {index}")
    if len(leaf) != HASH_SIZE:
        raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
    rows = [(0, index, bytes(leaf))]
    level, i, h = 0, index, bytes(leaf)
    while i & 1:
        h = node_hash(get_node(level, i - 1), h)
        level, i = level + 1, i >> 1
        rows.append((level, i, h))
    return rows


class MemoryTree:
    """An in-memory append-only Merkle tree storing full subtrees only.

    It uses the same functions as the stores (:func:`new_nodes_for_append`,
    :func:`root_at`, :func:`inclusion_proof`, :func:`consistency_proof`), so it
    doubles as a reference for them and as the verifier's scratch tree.
    """

    def __init__(self, leaf_hashes: Sequence[bytes] = ()) -> None:
        """Create a tree, optionally with initial leaf hashes (32 bytes each)."""
        self._nodes: dict[tuple[int, int], bytes] = {}
        self._size = 0
        for leaf in leaf_hashes:
            self.append(leaf)

    @property
    def size(self) -> int:
        """The number of leaves."""
        return self._size

    def get_node(self, level: int, index: int) -> bytes:
        """The stored full-subtree hash (a :data:`NodeReader`).

        Raises:
            KeyError: if that subtree is not full (or does not exist) yet.
        """
        return self._nodes[(level, index)]

    def append(self, leaf: bytes) -> int:
        """Append one 32-byte leaf hash; return its 0-based index."""
        index = self._size
        for level, i, h in new_nodes_for_append(index, leaf, self.get_node):
            self._nodes[(level, i)] = h
        self._size += 1
        return index

    def _size_or_current(self, size: int | None) -> int:
        if size is None:
            return self._size
        if not 0 <= size <= self._size:
            raise ValueError(f"tree size {size} is not in [0, {self._size}]")
        return size

    def root(self, size: int | None = None) -> bytes:
        """The root at ``size`` leaves (default: the current size)."""
        return root_at(self._size_or_current(size), self.get_node)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[size]) (RFC 9162 §2.1.3.1); ``size`` defaults to the current size."""
        return inclusion_proof(index, self._size_or_current(size), self.get_node)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """PROOF(size1, D[size2]) (RFC 9162 §2.1.4.1); ``size2`` defaults to the current size."""
        return consistency_proof(size1, self._size_or_current(size2), self.get_node)


class StreamingTree:
    """An append-only tree that keeps only its right frontier (a compact range).

    Memory is O(log n) whatever the size, so a verifier can stream a log of any
    length: :meth:`append` returns the full subtrees each leaf completes (to
    compare with stored nodes), and :meth:`root` gives the RFC 9162 §2.1.1 root
    at the current size.
    """

    def __init__(self) -> None:
        self._frontier: list[tuple[int, bytes]] = []  # (level, hash), largest subtree first
        self.size = 0

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Append a 32-byte leaf hash; return the (level, index, hash) of every full subtree it completes."""
        index = self.size
        completed = [(0, index, leaf)]
        h, level = leaf, 0
        while self._frontier and self._frontier[-1][0] == level:
            _, left = self._frontier.pop()
            h = node_hash(left, h)
            level += 1
            index >>= 1
            completed.append((level, index, h))
        self._frontier.append((level, h))
        self.size += 1
        return completed

    def root(self) -> bytes:
        """MTH of the leaves appended so far (:data:`EMPTY_ROOT` when none)."""
        if not self._frontier:
            return EMPTY_ROOT
        h = self._frontier[-1][1]
        for _, left in reversed(self._frontier[:-1]):
            h = node_hash(left, h)
        return h


# --- verification (no store needed) ----------------------------------------------------


def _check_hash(what: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != HASH_SIZE:
        length = len(value) if isinstance(value, (bytes, bytearray)) else type(value).__name__
        raise ProofError(f"{what} must be {HASH_SIZE} bytes, got {length}")
    return bytes(value)


def _check_int(what: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ProofError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _inclusion_proof_length(index: int, size: int) -> int:
    """Expected length of PATH(index, D[size]): the inner path plus the border."""
    inner = (index ^ (size - 1)).bit_length()
    border = bin(index >> inner).count("1")
    return inner + border


def root_from_inclusion_proof(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """Recompute the root from an audit path (RFC 9162 §2.1.3.2, steps 1-5).

    Args:
        leaf_hash: the leaf's 32-byte hash.
        index: the leaf's 0-based index.
        size: the tree size the proof is for.
        proof: the audit path, leaf level first.

    Returns:
        The 32-byte root this proof leads to (compare it with a trusted root).

    Raises:
        ProofError: if ``index >= size`` (so always for ``size == 0``), any hash
            is not 32 bytes, the proof has the wrong length, or the algorithm
            fails a step.
    """
    r = _check_hash("leaf hash", leaf_hash)
    index, size = _check_int("leaf index", index), _check_int("tree size", size)
    if index >= size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    path = [_check_hash(f"proof[{i}]", p) for i, p in enumerate(proof)]
    want = _inclusion_proof_length(index, size)
    if len(path) != want:
        raise ProofError(f"inclusion proof has {len(path)} hashes, want {want}")
    fn, sn = index, size - 1
    for p in path:
        if sn == 0:
            raise ProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("inclusion proof is too short")
    return r


def verify_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree ``(size, root)`` (RFC 9162 §2.1.3.2).

    Args:
        leaf_hash: the leaf's 32-byte hash.
        index: the leaf's 0-based index.
        size: the tree size.
        proof: the audit path, leaf level first.
        root: the trusted 32-byte root hash at ``size``.

    Raises:
        ProofError: if the proof does not verify. A tree of size 0 holds no
            leaf, so every inclusion proof in it fails.
    """
    root = _check_hash("root hash", root)
    if root_from_inclusion_proof(leaf_hash, index, size, proof) != root:
        raise ProofError("inclusion proof does not lead to the root hash")


def _consistency_proof_length(size1: int, size2: int) -> int:
    """Expected length of PROOF(size1, D[size2]) for ``0 < size1 < size2``."""
    index = size1 - 1
    inner = (index ^ (size2 - 1)).bit_length()
    border = bin(index >> inner).count("1")
    shift = (size1 & -size1).bit_length() - 1  # trailing zeros of size1
    seed_in_proof = 0 if size1 == 1 << shift else 1
    return seed_in_proof + (inner - shift) + border


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Check that the tree ``(size2, root2)`` extends ``(size1, root1)`` (RFC 9162 §2.1.4.2).

    Args:
        size1: the earlier tree size.
        size2: the later tree size.
        proof: the consistency proof (RFC 9162 §2.1.4.1).
        root1: the trusted 32-byte root at ``size1``.
        root2: the 32-byte root at ``size2``.

    Raises:
        ProofError: if the proof does not verify. Beyond the RFC: ``size1 == 0``
            always fails (nothing to prove; the caller handles "no earlier
            checkpoint"), ``size1 > size2`` fails, and ``size1 == size2`` passes
            only with an empty proof and byte-equal 32-byte roots.
    """
    size1, size2 = _check_int("size1", size1), _check_int("size2", size2)
    root1, root2 = _check_hash("root1", root1), _check_hash("root2", root2)
    path = [_check_hash(f"proof[{i}]", p) for i, p in enumerate(proof)]
    if size1 == 0:
        raise ProofError("no consistency proof from an empty tree (size1 == 0)")
    if size1 > size2:
        raise ProofError(f"size1 {size1} is greater than size2 {size2}")
    if size1 == size2:
        if path:
            raise ProofError("equal sizes need an empty consistency proof")
        if root1 != root2:
            raise ProofError("equal sizes but different roots")
        return
    # Step 1.
    if not path:
        raise ProofError("empty consistency proof for different sizes")
    want = _consistency_proof_length(size1, size2)
    if len(path) != want:
        raise ProofError(f"consistency proof has {len(path)} hashes, want {want}")
    # Step 2.
    if size1 & (size1 - 1) == 0:
        path = [root1, *path]
    # Steps 3-4.
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    # Step 5.
    fr = sr = path[0]
    # Step 6.
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    # Step 7.
    if sn != 0:
        raise ProofError("consistency proof is too short")
    if fr != root1:
        raise ProofError("consistency proof does not lead to root1")
    if sr != root2:
        raise ProofError("consistency proof does not lead to root2")
