"""Verify a store from its raw bytes, trusting no stored hash.

:func:`verify_store` recomputes every leaf hash from the stored event bytes
(RFC 9162 §2.1.1), every run's hash chain, the Merkle root at every checkpoint,
each checkpoint's signature against a trusted verifier key (C2SP signed note),
the consistency of successive checkpoints (RFC 9162 §2.1.4), the stored tree
nodes, every blob against its commitment, the signed authorization evidence
(approval answers, re-approvals, grants, revocation steps), and every call that
ran against the grant it names (:class:`CallGrantCheck`, streamed), and that no run has two tool
calls at one step (:class:`CallStepCheck`, streamed). It returns a
:class:`VerifyReport`; it never raises because data was changed.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from fnmatch import translate as _translate
from itertools import islice
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator, Sequence

from sealbox import blobs as _blobs
from sealbox import events as _events
from sealbox.errors import ConfigError, InvalidEventError, NoteError
from sealbox.events import CONTENT_FIELDS, SYSTEM_RUN_ID, content_fields, derived_columns, validate_envelope
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import Checkpoint, Verifier, verify_checkpoint

__all__ = ["Problem", "VerifyReport", "verify_store", "EventVerifier", "KEPT_KINDS", "check_approval_answers",
           "check_reapprovals", "check_grants", "check_revocations", "check_rotations", "check_rotated_credentials",
           "CallGrantCheck", "CALL_GRANT_KINDS",
           "CallStepCheck", "CALL_STEP_KINDS", "CALL_EXPIRY_TOLERANCE_S", "lets_through"]

#: Kinds whose envelopes verification keeps (few per run): what later checks need.
KEPT_KINDS = frozenset({
    "run.started", "content.erased", "identity.changed", "approval.requested", "approval.answered", "approval.expired",
    "tools.changed", "tool.reapproved", "tool.revoked", "access.granted", "access.revoked", "access.credential_rotated",
    "run.resumed",  # which approvals a call was acted on (check_approval_answers, compromised_answer_notes)
})


@dataclass(frozen=True)
class Problem:
    """One thing verification found wrong.

    Attributes:
        code: a stable identifier, e.g. ``leaf_hash_mismatch``, ``chain_broken``,
            ``checkpoint_root_mismatch``, ``checkpoint_signature``, ``log_truncated``,
            ``blob_mismatch``, ``blob_missing``, ``leaf_gap``, ``tree_node_mismatch``,
            ``approval_signature``, ``approval_binding``, ``approval_identity``,
            ``approval_unknown``, ``approval_rule``, ``column_type``, ``schema_migration_missing``,
            ``identity_unauthorized``, ``store_settings_damaged``, ``reapproval_signature``,
            ``reapproval_identity``, ``reapproval_binding``, ``reapproval_rule``, ``grant_signature``,
            ``grant_identity``, ``grant_binding``, ``grant_rule``, ``revocation_signature``,
            ``revocation_identity``, ``revocation_binding``, ``revocation_rule``, ``rotation_signature``,
            ``rotation_identity``, ``rotation_binding``, ``rotation_rule`` (:func:`check_rotations`),
            ``rotation_credential_missing``, ``rotation_credential_mismatch`` (:func:`check_rotated_credentials`),
            ``call_grant_invalid``
            (:class:`CallGrantCheck`), ``pin_upgrade_forged`` (:func:`check_reapprovals`), ``call_step_duplicate``
            (:class:`CallStepCheck`), ``key_mismatch`` (:func:`key_mismatch`), ``database_damaged`` (SQLite
            could not read some of the database's pages: verification stopped), ``database_integrity``
            (SQLite's ``PRAGMA integrity_check`` failed: an index lacks rows or a page is damaged, so
            queries may miss events although the log verifies); in an export bundle
            also ``bundle_*`` codes (``bundle_grant_missing``, ``bundle_tool_change_missing``, ...:
            docs/bundle-format.md).
        message: one readable sentence.
        run_id, run_seq, kind, leaf_index: where, when it is tied to an event.
        expected, found: what verification computed and what the store holds.
        member: where in an export bundle (e.g. ``events.jsonl line 7``, ``the ZIP central directory``).
    """

    code: str
    message: str
    run_id: str | None = None
    run_seq: int | None = None
    kind: str | None = None
    leaf_index: int | None = None
    expected: str | None = None
    found: str | None = None
    member: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def line(self) -> str:
        """One line for a terminal."""
        where = [] if self.member is None else [self.member]
        if self.run_id is not None:
            where.append(f"run {self.run_id}")
        if self.run_seq is not None:
            where.append(f"run_seq {self.run_seq}")
        if self.kind is not None:
            where.append(self.kind)
        if self.leaf_index is not None:
            where.append(f"leaf {self.leaf_index}")
        loc = f" [{', '.join(where)}]" if where else ""
        detail = ""
        if self.expected is not None and self.found is not None:
            detail = f" (expected {self.expected}, found {self.found})"
        elif self.expected is not None or self.found is not None:  # one side only: never "expected None"
            detail = f" (expected {self.expected})" if self.found is None else f" (found {self.found})"
        text = f"{self.code}{loc}: {self.message}{detail}"
        if text.isprintable():
            return text
        # a value read from a changed store may hold control characters or, decoded with
        # surrogateescape, lone surrogates: escaped, so the line stays one printable UTF-8 line
        return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                       if ord(c) < 0xD800 or ord(c) > 0xDFFF else f"\\u{ord(c):04x}" for c in text)


@dataclass(frozen=True)
class VerifyReport:
    """Result of verification: ``ok`` is True when ``problems`` is empty."""

    problems: tuple[Problem, ...]
    events: int
    runs: int
    checkpoints: int
    blobs: int
    seconds: float
    tree_size_signed: int = 0
    root: str | None = None
    trusted_key: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: per checkpoint given from outside the store (``checkpoints``) whose root the events reproduce:
    #: ``{checkpoint, size, root}`` (said, or a ``--checkpoint`` that held would look unchecked)
    extends: tuple[dict[str, Any], ...] = ()

    @property
    def ok(self) -> bool:
        """True when nothing was found wrong."""
        return not self.problems

    def summary(self) -> str:
        """A one-paragraph summary."""
        head = "Verified: the log is intact." if self.ok else f"NOT VERIFIED: {len(self.problems)} problem(s) found."
        def n(count: int, noun: str) -> str:
            return f"{count} {noun}{'' if count == 1 else 's'}"

        if any(p.code == "key_mismatch" for p in self.problems):  # none verifies: said why, not "covers 0 events"
            signed = "none verifies: the key is not this log's"
        else:
            signed = f"the newest that verifies covers {n(self.tree_size_signed, 'event')}, root {self.root or '-'}"
        return (
            f"{head} {n(self.events, 'event')} in {n(self.runs, 'run')}, {n(self.blobs, 'blob')}, "
            f"{n(self.checkpoints, 'signed checkpoint')} ({signed}), signatures checked against "
            f"{self.trusted_key or 'no key'}; "
            f"took {self.seconds:.2f} s.{self._unsigned_note()}"
        ) + "".join(f"\nThe log extends {e['checkpoint']} (size {e['size']}, root {e['root']}): the events "
                    "reproduce its signed root." for e in self.extends)

    @property
    def unsigned_events(self) -> int:
        """Events after the newest checkpoint that verifies: consistent, but vouched for by no signature."""
        return max(0, self.events - self.tree_size_signed)

    def _unsigned_note(self) -> str:
        n = self.unsigned_events
        if not n or any(p.code == "key_mismatch" for p in self.problems):  # signed, by another key: said first
            return ""
        first = self.tree_size_signed
        span = f"leaf index {first}" if n == 1 else f"leaf indices {first}..{first + n - 1}"
        return (f" Warning: {n} event(s) ({span}) are not covered by a signed checkpoint: nothing signed vouches "
                "for them yet (a writer still running, or one that stopped without closing the store; the next "
                "writer to close it signs them as they are now).")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok, "events": self.events, "runs": self.runs, "checkpoints": self.checkpoints,
            "blobs": self.blobs, "seconds": round(self.seconds, 4), "tree_size_signed": self.tree_size_signed,
            "unsigned_events": self.unsigned_events,
            "root": self.root, "trusted_key": self.trusted_key, "notes": list(self.notes),
            "extends": [dict(e) for e in self.extends],
            "problems": [p.to_dict() for p in self.problems],
        }


# --- the fast path ------------------------------------------------------------------------
#
# Verification's hot loop runs an *optimistic* check on each event: it decides only
# "this event is entirely fine" (every check the full path makes passes) and then makes
# the same state updates. Whenever it is not sure (malformed bytes, an unusual encoding,
# a schema it cannot prove satisfied, any disagreement), it changes nothing and the
# event goes through the full path, which finds and reports exactly what it did before.
# So each fast test must be at least as strict as the test it stands in for.


_MISSING = object()
_PAYLOAD_VALIDATORS = _events._VALIDATORS
_FAST_PAYLOAD: dict[str, Callable[[Any], bool] | None] = _events._FAST_PAYLOAD  # (events.fast_payload_check)
_ENVELOPE_KEYS = _events._ENVELOPE_KEYS
_KINDS = _events.KINDS
_RECORD_VERSION = _events.RECORD_VERSION
_STEP_MATCH = _events._STEP_RE.match
_TS_MATCH = _events._TS_RE.match
_FP_MATCH = _events._FP_RE.match
_SCAN = json.JSONDecoder().scan_once  # what json.loads runs, minus encoding detection and its wrappers
#: The envelope's keys in RFC 8785 order (the order of the hashed bytes); the fast path unpacks them in it.
_CANONICAL_KEYS = ("kind", "payload", "prev", "principal", "run_id", "run_seq", "step", "ts", "v")
if set(_CANONICAL_KEYS) != _ENVELOPE_KEYS or list(_CANONICAL_KEYS) != sorted(_ENVELOPE_KEYS):
    raise RuntimeError("sealbox.verify: the envelope's keys changed; update the fast path in _check_rows")
#: Kinds that may hold content fields (a note: its ``about`` when it records a client request; events.content_fields).
_CONTENT_KINDS = frozenset(kind for kind, names in CONTENT_FIELDS.items() if names) | {"note"}
#: The kinds for which events.derived_columns derives more than (server, tool, call_id); keep in step with it.
_DERIVING_KINDS = frozenset({"policy.decision", "tool.result", "model.call"})
_SHA256 = hashlib.sha256


class _BatchTree(merkle.StreamingTree):
    """A :class:`~sealbox.ledger.merkle.StreamingTree` that also appends many leaves at once."""

    def extend(self, leaves: list[bytes], root_sizes: set[int],
               roots: dict[int, bytes]) -> dict[int, tuple[int, list[bytes]]]:
        """Append ``leaves``; record in ``roots`` the root at each size in ``root_sizes``
        the tree passes through.

        Returns:
            level -> (index of its first node, hashes): the full subtrees the leaves
            completed, level by level, each in index order (the nodes
            :meth:`append` returns, leaf after leaf).
        """
        start, count = self.size, len(leaves)
        old = dict(self._frontier)  # level -> hash of the subtree completed last at that level
        levels: dict[int, tuple[int, list[bytes]]] = {}
        nodes, first, level = leaves, start, 0
        while nodes:
            levels[level] = (first, nodes)
            parents = []
            rest = nodes
            if first & 1:  # its left sibling completed earlier: it is on the frontier
                parents.append(_SHA256(b"\x01" + old[level] + nodes[0]).digest())
                rest = nodes[1:]
            parents += [_SHA256(b"\x01" + a + b).digest() for a, b in zip(rest[::2], rest[1::2])]
            nodes, first, level = parents, first >> 1, level + 1

        def frontier(size: int) -> list[tuple[int, bytes]]:
            out = []
            for lv in range(size.bit_length() - 1, -1, -1):
                if size >> lv & 1:
                    idx = (size >> lv) - 1
                    got = levels.get(lv)
                    if got is not None and got[0] <= idx:
                        out.append((lv, got[1][idx - got[0]]))
                    else:  # completed before these leaves
                        out.append((lv, old[lv]))
            return out

        end = start + count
        for size in root_sizes:
            if start < size <= end:
                roots[size] = _fold(frontier(size))
        self._frontier = frontier(end)
        self.size = end
        return levels


def _fold(frontier: list[tuple[int, bytes]]) -> bytes:
    """StreamingTree.root() of a frontier."""
    if not frontier:
        return merkle.EMPTY_ROOT
    h = frontier[-1][1]
    for _, left in reversed(frontier[:-1]):
        h = _SHA256(b"\x01" + left + h).digest()
    return h


def _completed(levels: dict[int, tuple[int, list[bytes]]], i: int) -> list[tuple[int, int, bytes]]:
    """The (level, index, hash) of the full subtrees leaf ``i`` completed, as
    :meth:`StreamingTree.append` returns them, from :meth:`_BatchTree.extend`'s levels."""
    out = []
    level = 0
    while True:
        first, hashes = levels[level]
        idx = i >> level
        out.append((level, idx, hashes[idx - first]))
        if not idx & 1:  # a left child: its parent is not full yet
            return out
        level += 1


#: The stored columns :meth:`EventVerifier._check_columns` compares, in order (iter_rows').
_COLUMN_NAMES = ("run_id", "run_seq", "kind", "ts", "principal", "step", "server", "tool", "call_id", "effect", "ok",
                 "tokens", "cost", "rule", "reason_code", "duration_us")
_OPTIONAL_COLUMNS = frozenset(_COLUMN_NAMES[-3:])


def _columns_match(columns: tuple, mine: tuple) -> bool:
    """Stored columns equal to the derived ones, but for NULL in the optional last ones
    (:data:`sealbox.events.OPTIONAL_DERIVED`: rows written before schema 6), where a listing
    reads the hashed payload instead, so a NULL there hides nothing."""
    n = _events.OPTIONAL_DERIVED
    return (len(columns) == len(mine) and len(columns) > n and columns[:-n] == mine[:-n]
            and all(c is None or c == m for c, m in zip(columns[-n:], mine[-n:])))


#: Rows :meth:`EventVerifier.add_rows` takes at a time.
_ROW_CHUNK = 1024
_RAW, _HASH, _COLUMNS = itemgetter(1), itemgetter(2), itemgetter(3)
_ONLY_BYTES, _ONLY_TUPLE = {bytes}, {tuple}


def _as_blob(value: Any) -> bytes:
    """A stored BLOB column's value as bytes. SQLite's column affinity lets other types in (a
    row changed below Sealbox can hold TEXT or a number there): those become bytes too (of the
    text, or of its repr), which then differ from what is expected and are reported, not raised."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:  # a store gives a TEXT's bytes decoded with surrogateescape (iter_rows): the same bytes again
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return repr(value).encode("utf-8")


#: SQLite's name of the storage class a stored value of each Python type comes from.
_STORAGE_CLASS = {str: "TEXT", int: "INTEGER", float: "REAL", type(None): "NULL", bool: "INTEGER"}
_WITH_ARTICLE = {"TEXT": "a TEXT value", "INTEGER": "an INTEGER", "REAL": "a REAL", "NULL": "NULL", "BLOB": "a BLOB"}


def _column_type_problems(leaf_index: int, raw: Any, stored_hash: Any, columns: Any) -> list[Problem]:
    """``column_type`` for the hashed bytes or the leaf hash of a store row held as another storage
    class than the BLOB Sealbox writes: only a change below Sealbox puts a TEXT (even of the same
    bytes) or a number there."""
    out = []
    run_id, run_seq, kind = tuple(columns)[:3] if columns else (None, None, None)
    for name, value in (("raw", raw), ("leaf_hash", stored_hash)):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            found = _STORAGE_CLASS.get(type(value), type(value).__name__)
            out.append(Problem(
                "column_type", f"the events table's {name} column holds {_WITH_ARTICLE.get(found, found)} where "
                "Sealbox writes a BLOB (the row was changed below Sealbox)", run_id=run_id, run_seq=run_seq, kind=kind,
                leaf_index=leaf_index, expected="BLOB", found=found))
    return out


class EventVerifier:
    """Checks events one by one in log order: leaf hashes, envelopes and run chains.

    Used on a store and on an export bundle alike. Feed rows with :meth:`add`;
    read :attr:`problems`, :attr:`roots` and :attr:`refs`. Memory stays
    O(runs + log n): the tree is streamed (only its frontier is kept) and only
    the envelopes of the kinds in :data:`KEPT_KINDS` are kept.

    Args:
        root_sizes: tree sizes at which to record the recomputed root (checkpoint sizes).
        on_nodes: called with the (level, index, hash) of each full subtree as it completes
            (:meth:`add_rows` calls its ``check_levels`` instead, when it has one).
        on_event: called with ``(leaf_index, envelope)`` of each readable event whose kind is in
            ``event_kinds``, in the order the events are checked (a streaming check such as
            :class:`CallGrantCheck`; it must not raise on any validated envelope).
    """

    def __init__(self, root_sizes: Iterable[int] = (), on_nodes: Any = None, on_event: Any = None,
                 event_kinds: frozenset[str] = frozenset()) -> None:
        self.problems: list[Problem] = []
        self.tree = _BatchTree()
        self.heads: dict[str, tuple[int, str, str]] = {}  # run_id -> (run_seq, leaf hash tag, kind)
        self.refs: set[str] = set()
        self.envelopes_by_kind: dict[str, list[tuple[int, dict]]] = {}
        self._root_sizes = set(root_sizes)
        self.roots: dict[int, bytes] = {0: merkle.EMPTY_ROOT}
        self._on_nodes = on_nodes
        self._on_event, self._event_kinds = on_event, (event_kinds if on_event is not None else frozenset())
        self._next_index = 0
        self._last_ts: str | None = None  # the last ts that matched the envelope's pattern

    def add(self, leaf_index: int, raw: bytes, stored_hash: bytes | None = None,
            columns: tuple[str, int, str] | None = None) -> dict | None:
        """Check one event; returns its envelope, or None when unreadable."""
        leaf = merkle.leaf_hash(raw)
        completed = self.tree.append(leaf)
        if self._on_nodes is not None:
            self._on_nodes(completed)
        if self.tree.size in self._root_sizes:
            self.roots[self.tree.size] = self.tree.root()
        return self.check_event(leaf_index, raw, leaf, stored_hash, columns)

    def add_rows(self, rows: Iterable[tuple]) -> None:
        """:meth:`add` for each ``(leaf_index, raw, stored_hash, columns)`` row, converting
        ``raw`` and ``stored_hash`` with ``bytes()`` and ``columns`` with ``tuple()``.

        The same checks and problems as :meth:`add`, in the same order; the tree is
        extended, roots recorded and ``on_nodes`` called a chunk of rows at a time,
        after the chunk's events are checked (so a row that makes a check raise
        leaves the tree behind the events).
        """
        tree, on_nodes = self.tree, self._on_nodes
        batch_nodes = getattr(on_nodes, "check_levels", None)
        rows = iter(rows)
        while True:
            chunk = list(islice(rows, _ROW_CHUNK))
            if not chunk:
                return
            typed = None  # leaf_index -> column_type problems, for rows holding another storage class
            if (set(map(type, map(_RAW, chunk))) != _ONLY_BYTES or set(map(type, map(_HASH, chunk))) != _ONLY_BYTES
                    or set(map(type, map(_COLUMNS, chunk))) != _ONLY_TUPLE):
                typed = {}
                for leaf_index, raw, stored_hash, columns in chunk:
                    found = _column_type_problems(leaf_index, raw, stored_hash, columns)
                    if found:
                        typed[leaf_index] = found
                chunk = [(leaf_index, _as_blob(raw), _as_blob(stored_hash), tuple(columns))
                         for leaf_index, raw, stored_hash, columns in chunk]
            leaves = [_SHA256(b"\x00" + row[1]).digest() for row in chunk]
            if not typed:
                self._check_rows(chunk, leaves, True, True)
            else:  # each row's column_type problems come before what else is wrong with it
                for row, leaf in zip(chunk, leaves):
                    self.problems.extend(typed.get(row[0], ()))
                    self._check_rows([row], [leaf], True, True)
            start = tree.size
            levels = tree.extend(leaves, self._root_sizes, self.roots)
            if batch_nodes is not None:
                batch_nodes(levels, start, len(leaves))
            elif on_nodes is not None:
                for i in range(start, start + len(leaves)):
                    on_nodes(_completed(levels, i))

    def check_event(self, leaf_index: int, raw: bytes, leaf: bytes, stored_hash: bytes | None = None,
                    columns: tuple | None = None, *, contiguous: bool = True, chain: bool = True) -> dict | None:
        """Check one event without adding it to the streamed tree (an export bundle holds
        a subset of the log, each event proven by its own inclusion proof).

        Args:
            leaf: its leaf hash (RFC 9162 §2.1.1), already computed from ``raw``.
            contiguous: report a ``leaf_gap`` when ``leaf_index`` does not follow the previous one.
            chain: check the run chain (False for a run only partly present).

        Returns:
            The envelope, or None when unreadable.
        """
        return self._check_rows([(leaf_index, raw, stored_hash, columns)], [leaf], contiguous, chain)

    def try_events(self, rows: list[tuple], leaves: list[bytes], *, contiguous: bool = False) -> list[dict]:
        """The fast path of :meth:`check_event` alone on ``(leaf_index, raw, None, None)`` rows and their leaf
        hashes, the run chain checked unless the event is the system run's (an export bundle's events): the
        envelopes of the rows, in order, up to the first one that does not pass every check (each with the
        same effects as :meth:`check_event`); that row and those after it are left unchecked and change
        nothing, for the caller to run its full checks on it."""
        out: list[dict] = []
        self._check_rows(rows, leaves, contiguous, None, full=False, out=out)
        return out

    def _check_rows(self, rows: list[tuple], leaves: list[bytes], contiguous: bool, chain: bool | None,
                    full: bool = True, out: list | None = None) -> dict | None:
        """:meth:`_check_event` for each ``(leaf_index, raw, stored_hash, columns)`` row and its
        leaf hash; returns the last row's envelope.

        Each row first takes the fast path: it accepts an event only when every check
        of :meth:`_check_event` passes, and then has the same effects. Otherwise the
        row goes through :meth:`_check_event`, which reports what is wrong (``full``; else
        None is returned, nothing changed). ``chain`` None: each row's run chain is checked
        unless it is the system run's. ``out``: each envelope that passed the fast path is appended.
        """
        heads, refs_out, kept = self.heads, self.refs, self.envelopes_by_kind
        next_index, last_ts = self._next_index, self._last_ts
        scan, keys, kinds, kept_kinds, content_kinds = _SCAN, _CANONICAL_KEYS, _KINDS, KEPT_KINDS, _CONTENT_KINDS
        step_match, ts_match, fast_payload, deriving = _STEP_MATCH, _TS_MATCH, _FAST_PAYLOAD, _DERIVING_KINDS
        watched, on_event = self._event_kinds, self._on_event
        env = None
        try:
            for (leaf_index, raw, stored_hash, columns), leaf in zip(rows, leaves):
                env = None
                while True:  # the fast path; "break" hands the row to the full checks
                    if contiguous and leaf_index != next_index:
                        break
                    if stored_hash is not None and (type(stored_hash) is not bytes or stored_hash != leaf):
                        break
                    # json.loads(raw) decodes with the encoding it detects, 'surrogatepass'. Bytes
                    # that start with "{" and a non-zero byte are detected as UTF-8 (no BOM, no
                    # UTF-16/32 zero bytes); it then parses from 0 and allows only whitespace after.
                    if type(raw) is not bytes or len(raw) < 4 or raw[0] != 0x7B or not raw[1]:
                        break
                    try:
                        text = raw.decode("utf-8", "surrogatepass")
                        found, end = scan(text, 0)
                    except (ValueError, StopIteration):
                        break
                    # the keys are exactly the envelope's (events._envelope_ok's first test)
                    if end != len(text) or type(found) is not dict or tuple(found) != keys:
                        break
                    kind, payload, prev, principal, run_id, run_seq, step, ts, v = found.values()
                    # the rest of events._envelope_ok, in its order (its prev test is below)
                    if not (
                        type(v) is int and v == _RECORD_VERSION
                        and type(run_id) is str and 1 <= len(run_id) <= 128
                        and type(run_seq) is int and run_seq >= 1
                        and type(step) is str and ((step.isdigit() and step.isascii()) or step_match(step) is not None)
                        and type(kind) is str and kind in kinds
                        and type(ts) is str and (ts == last_ts or ts_match(ts) is not None)
                        and type(principal) is str and principal
                        and type(payload) is dict
                    ):
                        break
                    last_ts = ts  # it matched the pattern (events appended together share their ts)
                    chained = chain if chain is not None else run_id != SYSTEM_RUN_ID
                    if chained:
                        head = heads.get(run_id)
                        if head is None:
                            if prev is not None or run_seq != 1 or kind != "run.started":
                                break
                        elif (run_seq != head[0] + 1 or type(prev) is not str or prev != head[1]
                              or head[2] == "run.ended"):
                            break
                        # prev equals None or a leaf tag "sha256:<64 hex>": it passes the prev test
                    elif not (prev is None or (type(prev) is str and _FP_MATCH(prev) is not None)):
                        break
                    check = fast_payload[kind]
                    if check is None or not check(payload):
                        try:
                            _PAYLOAD_VALIDATORS[kind](payload)
                        except Exception:  # the full checks report (or raise) it
                            break
                    if columns is not None:
                        if type(columns) is not tuple:
                            break
                        if len(columns) <= 3:
                            mine = (run_id, run_seq, kind)
                        elif kind in deriving:
                            try:
                                mine = (run_id, run_seq, kind, ts, principal, step, *derived_columns(kind, payload))
                            except Exception:  # the full checks raise it, after what they report first
                                break
                        else:  # events.derived_columns for the other kinds
                            get = payload.get
                            server, tool, call_id = get("server"), get("tool"), get("call_id")
                            mine = (run_id, run_seq, kind, ts, principal, step, server if type(server) is str else None,
                                    tool if type(tool) is str else None, call_id if type(call_id) is str else None,
                                    None, None, None, None, None, None, None)
                        if columns != mine and not _columns_match(columns, mine):
                            break
                    # a store-only tag outside content fields: the full checks report it
                    if ((0x24 in raw and (b'"$blob"' in raw or b'"$cons"' in raw or b'"$redacted"' in raw))
                            or (0x5C in raw and b"\\u" in raw)) and _misplaced_store_tags(kind, payload):
                        break
                    # a {"$blob": ...} key is in the bytes as "$blob", or escaped (with a \\u);
                    # (0x24 is the dollar sign, 0x5C the backslash: an int is looked for with memchr)
                    if kind in content_kinds and (
                            (0x24 in raw and b'"$blob"' in raw) or (0x5C in raw and b"\\u" in raw)):
                        for name in content_fields(kind, payload):
                            if name in payload:
                                refs_out.update(_blobs.blob_refs(payload[name]))
                    # every check passed: the full checks' effects
                    next_index = leaf_index + 1
                    if chained:
                        heads[run_id] = (run_seq, "sha256:" + leaf.hex(), kind)
                    if kind in kept_kinds:
                        kept.setdefault(kind, []).append((leaf_index, found))
                    if kind in watched:
                        on_event(leaf_index, found)
                    if out is not None:
                        out.append(found)
                    env = found
                    break
                if env is None:
                    if not full:
                        break
                    self._next_index, self._last_ts = next_index, last_ts
                    env = self._check_event(leaf_index, raw, leaf, stored_hash, columns, contiguous, chain)
                    next_index = self._next_index
        finally:
            self._next_index, self._last_ts = next_index, last_ts
        return env

    def _check_event(self, leaf_index: int, raw: bytes, leaf: bytes, stored_hash: bytes | None,
                     columns: tuple | None, contiguous: bool, chain: bool) -> dict | None:
        """The full checks of :meth:`check_event`, reporting every problem."""
        env = self._parse(leaf_index, raw, columns)
        if contiguous and leaf_index != self._next_index:
            self.problems.append(self._at(env, leaf_index, Problem(
                "leaf_gap", "the log is not contiguous: an event is missing or out of place",
                expected=f"leaf {self._next_index}", found=f"leaf {leaf_index}",
            )))
        self._next_index = leaf_index + 1
        if stored_hash is not None and _as_blob(stored_hash) != leaf:
            self.problems.append(self._at(env, leaf_index, Problem(
                "leaf_hash_mismatch", "the event's bytes do not hash to its stored leaf hash (the bytes or the stored hash were changed)",
                expected="sha256:" + leaf.hex(), found="sha256:" + _as_blob(stored_hash).hex(),
            )))
        if env is not None:
            self._check_columns(env, leaf_index, columns)
            if chain:
                self._chain(env, leaf_index, "sha256:" + leaf.hex())
            kind, payload = env["kind"], env["payload"]
            for name in content_fields(kind, payload):
                if name in payload:
                    self.refs.update(_blobs.blob_refs(payload[name]))
            for name, tag in _misplaced_store_tags(kind, payload):
                self.problems.append(self._at(env, leaf_index, Problem(
                    "store_tag_misplaced", f"the payload's {name!r} holds a bare {{\"{tag}\": …}}, a tag only the "
                    "store writes, and only in content fields: a caller's value stored unescaped (by a Sealbox "
                    "before 646379b) or a change below Sealbox; it is no reference to anything the store holds",
                    expected=f'{{"$esc": {{"{tag}": …}}}} (the caller\'s data)', found=f'{{"{tag}": …}}',
                )))
            if kind in KEPT_KINDS:
                self.envelopes_by_kind.setdefault(kind, []).append((leaf_index, env))
            if kind in self._event_kinds:
                self._on_event(leaf_index, env)
        return env

    def _parse(self, leaf_index: int, raw: bytes, columns: tuple | None) -> dict | None:
        try:
            env = json.loads(raw)
            validate_envelope(env)
            return env
        except (ValueError, InvalidEventError) as exc:
            run_id, run_seq, kind = tuple(columns)[:3] if columns else (None, None, None)
            self.problems.append(Problem(
                "event_malformed", f"the event's bytes are not a valid event: {exc}",
                run_id=run_id, run_seq=run_seq, kind=kind, leaf_index=leaf_index,
            ))
            return None

    @staticmethod
    def _at(env: dict | None, leaf_index: int, p: Problem) -> Problem:
        if env is None:
            return Problem(p.code, p.message, leaf_index=leaf_index, expected=p.expected, found=p.found)
        return Problem(p.code, p.message, env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf_index, p.expected, p.found)

    def _check_columns(self, env: dict, leaf_index: int, columns: tuple | None) -> None:
        """Every stored column must equal what the hashed bytes say: the envelope's
        fields and the query columns derived from the payload (which drive queries and limits)."""
        if columns is None:
            return
        mine = (env["run_id"], env["run_seq"], env["kind"])
        if len(columns) > 3:
            payload = env["payload"] if isinstance(env.get("payload"), dict) else {}
            mine += (env["ts"], env["principal"], env["step"], *derived_columns(env["kind"], payload))
        if tuple(columns) != mine and not _columns_match(tuple(columns), mine):
            names = [n for n, a, b in zip(_COLUMN_NAMES, tuple(columns), mine) if a != b and not (
                n in _OPTIONAL_COLUMNS and a is None)] or list(_COLUMN_NAMES[len(mine):len(columns)])
            self.problems.append(self._at(env, leaf_index, Problem(
                "index_mismatch", f"the store's index columns disagree with the event's hashed bytes "
                f"(column{'s' if len(names) != 1 else ''} {', '.join(names) or 'count'})",
                expected=repr(mine), found=repr(tuple(columns)),
            )))

    def _chain(self, env: dict, leaf_index: int, leaf_tag: str) -> None:
        run_id, run_seq = env["run_id"], env["run_seq"]
        head = self.heads.get(run_id)
        want_seq, want_prev = (1, None) if head is None else (head[0] + 1, head[1])
        if run_seq != want_seq:
            self.problems.append(self._at(env, leaf_index, Problem(
                "chain_broken", "run_seq does not follow the run's previous event (an event is missing, repeated or moved)",
                expected=str(want_seq), found=str(run_seq),
            )))
        if env["prev"] != want_prev:
            self.problems.append(self._at(env, leaf_index, Problem(
                "chain_broken", "prev is not the leaf hash of the run's previous event",
                expected=str(want_prev), found=str(env["prev"]),
            )))
        if head is None and env["kind"] != "run.started":
            self.problems.append(self._at(env, leaf_index, Problem(
                "chain_broken", "the run's first event is not run.started", expected="run.started", found=env["kind"],
            )))
        if head is not None and head[2] == "run.ended":
            self.problems.append(self._at(env, leaf_index, Problem(
                "chain_broken", "an event follows run.ended", expected="no event", found=env["kind"],
            )))
        self.heads[run_id] = (run_seq, leaf_tag, env["kind"])


def open_checkpoints(notes: Iterable[tuple[str, str]], verifier: Verifier | None,
                     origin: str | None) -> tuple[list[Problem], list[tuple[str, Checkpoint]]]:
    """Verify each signed checkpoint note with the trusted key (C2SP signed note).

    Returns:
        (problems, the (where, checkpoint) pairs that are validly signed).
    """
    problems: list[Problem] = []
    good = []
    for where, note in notes:
        cp = _open_checkpoint(where, note, verifier, origin, problems)
        if cp is not None:
            good.append((where, cp))
    return problems, good


def compare_checkpoints(checkpoints: list[tuple[str, Checkpoint]], roots: dict[int, bytes],
                        size: int) -> tuple[list[Problem], int, str | None]:
    """Compare signed roots with the roots recomputed from the events.

    Every checkpoint's root is recomputed from the same stream of leaves, so when
    each matches, each later checkpoint extends each earlier one: successive
    checkpoints are consistent (RFC 9162 §2.1.4) by construction.

    Args:
        checkpoints: validly signed checkpoints (:func:`open_checkpoints`).
        roots: tree size -> recomputed root.
        size: number of events present.

    Returns:
        (problems, largest verified size, its root as ``sha256:<hex>``).
    """
    problems: list[Problem] = []
    best: Checkpoint | None = None
    for where, cp in checkpoints:
        if cp.size > size:
            problems.append(Problem(
                "log_truncated", f"{where} was signed for {cp.size} events but only {size} are present "
                "(the tail of the log was cut, or the store was rolled back)",
                expected=f"at least {cp.size} events", found=f"{size} events",
            ))
            continue
        root = roots[cp.size]
        if root != cp.root:
            problems.append(Problem(
                "checkpoint_root_mismatch", f"{where}: the events' recomputed root differs from the signed root "
                f"at size {cp.size} (events covered by it were changed, removed, added or reordered)",
                expected="sha256:" + cp.root.hex(), found="sha256:" + root.hex(),
            ))
            continue
        if best is None or cp.size > best.size:
            best = cp
    return problems, (best.size if best else 0), ("sha256:" + best.root.hex() if best else None)


def _note_checkpoint(note: Any) -> Checkpoint | None:
    """The checkpoint a note's text states (its signatures not checked), or None when unreadable."""
    if not isinstance(note, str) or "\n\n" not in note:
        return None
    try:
        return Checkpoint.parse(note.split("\n\n", 1)[0] + "\n")
    except NoteError:
        return None


def check_checkpoint_rows(rows: Iterable[tuple[Any, Any, Any, Any]], file_note: str | None,
                          events: int) -> list[Problem]:
    """The checkpoints table against what its notes sign, and against deletion.

    Each row's ``tree_size`` and ``root_hash`` columns must be what its note states (the
    rollback guard and the signer read them); row ids must run 1, 2, ... without a gap (a
    deleted checkpoint leaves one); a store holding events has at least the checkpoint
    ``init`` signs; and the checkpoint in ``DIR/checkpoint`` (written after its row is
    committed) must be one of the rows. A store holding checkpoint rows but no
    ``DIR/checkpoint`` is ``checkpoint_file_missing``: the file is what catches a database
    rolled back to an older backup (its rows are then the backup's, all consistent), so
    a missing file is reported like a missing row (``checkpoint_missing``), and a writer
    refuses to append to such a store. A note that does not parse is reported by the
    signature checks, not here.

    Args:
        rows: (id, tree_size, root_hash, note) as stored, by id.
        file_note: the text of ``DIR/checkpoint``, or None.
        events: the number of events in the log.
    """
    problems: list[Problem] = []
    ids, stated, unreadable, previous = [], set(), False, None
    rows_seen = list(rows)
    for position, (row_id, size, root, note) in enumerate(rows_seen, 1):
        ids.append(row_id)
        cp = _note_checkpoint(note)
        if cp is None:
            unreadable = True
            continue
        stated.add((cp.size, cp.root))
        if previous is not None and cp.size < previous.size:
            problems.append(Problem(
                "checkpoint_order", f"checkpoint {position} (size {cp.size}) follows one of size {previous.size}: "
                "the log only grows, so the checkpoints table was reordered or a row added below Sealbox",
                expected=f"size {previous.size} or more", found=f"size {cp.size}",
            ))
        previous = cp
        if size != cp.size or type(size) is not int or _as_blob(root) != cp.root:
            found_root = "sha256:" + _as_blob(root).hex() if type(root) is bytes else repr(root)
            problems.append(Problem(
                "checkpoint_row_mismatch", f"checkpoint {position} (size {cp.size}): the table's tree_size and "
                "root_hash differ from what its note signs (the checkpoints table was changed below Sealbox)",
                expected=f"size {cp.size}, root sha256:{cp.root.hex()}", found=f"size {size!r}, root {found_root}",
            ))
    present = {i for i in ids if type(i) is int}
    gaps = sorted(set(range(1, max(present, default=0) + 1)) - present)
    if gaps:
        shown = ", ".join(map(str, gaps[:10])) + (f" and {len(gaps) - 10} more" if len(gaps) > 10 else "")
        problems.append(Problem(
            "checkpoint_missing", f"signed checkpoints were deleted from the store (row id{'s' if len(gaps) > 1 else ''} "
            f"{shown} {'are' if len(gaps) > 1 else 'is'} missing)",
            expected=f"rows 1 to {max(present)}", found=f"{len(present)} rows",
        ))
    if not ids and events > 1:
        problems.append(Problem(
            "checkpoint_missing", "the store holds no signed checkpoint, though init signs one: its checkpoints were "
            "deleted (verify against a checkpoint kept elsewhere: sealbox verify --checkpoint FILE)",
            expected="at least the checkpoint signed at init", found="none",
        ))
    if file_note is None and ids:
        newest = max((c for c in map(_note_checkpoint, (r[3] for r in rows_seen)) if c is not None),
                     key=lambda c: c.size, default=None)
        problems.append(Problem(
            "checkpoint_file_missing", f"the checkpoint file (DIR/checkpoint) is missing though the store holds "
            f"{len(ids)} signed checkpoint{'s' if len(ids) > 1 else ''}: init writes it and every signer keeps the "
            "newest checkpoint in it, so that a database restored from an older backup is caught; without it that "
            "cannot be told from this folder alone (verify against a checkpoint kept elsewhere: "
            "sealbox verify --checkpoint FILE)",
            expected="the newest checkpoint" + (f" (size {newest.size} or more)" if newest else ""), found="no file",
        ))
    in_file = _note_checkpoint(file_note) if file_note is not None else None
    if in_file is not None and not unreadable and in_file.size <= events and (in_file.size, in_file.root) not in stated:
        problems.append(Problem(
            "checkpoint_missing", "the checkpoint file holds a checkpoint the checkpoints table does not "
            "(it is written after its row: the row was deleted, or the file is another log's)",
            expected=f"a row of size {in_file.size}", found="no such row",
        ))
    return problems


def key_mismatch(notes: Sequence[tuple[str, str]], verifier: Verifier | None, origin: str | None,
                 source: str) -> Problem | None:
    """``key_mismatch`` when the trusted key signs none of ``notes`` (the log's own checkpoints): it is
    not this log's key (C2SP signed note: a key is its name and key id; a signature line by another name
    or key id is not one by it), so every checkpoint fails the same way; None otherwise (no key, no
    notes, or one note carries a signature line by that key, valid or not). ``found`` is the signers,
    as each note's ``checkpoint_signature`` problem states them when all notes agree.

    Args:
        notes: (where, note text) of the log's own checkpoints.
        verifier: the trusted key.
        origin: the log's origin (its name), or None.
        source: the trusted key, named by where it came from: ``"key given"``, ``"key pinned at init (log.vkey)"``.
    """
    if verifier is None or not notes:
        return None
    mine = f"{verifier.name}+{verifier.key_id.hex()}"
    signers = [_signers(note) if isinstance(note, str) else "signatures by nobody" for _, note in notes]
    if any(mine in _signer_names(s) for s in signers):
        return None
    found = signers[0] if len(set(signers)) == 1 else "signatures by " + ", ".join(
        sorted({n for s in signers for n in _signer_names(s)}))
    if origin is not None and origin != verifier.name:
        whose = f"it is a key of the log {verifier.name} (key id {verifier.key_id.hex()}), this log is {origin}"
    else:
        whose = f"it has this log's name but the key id {verifier.key_id.hex()}"
    return Problem(
        "key_mismatch", f"the {source} is not this log's key: {whose}, signed by {found[len('signatures by '):]}; "
        f"{checkpoints_phrase(notes, 'none of ')} verifies with it (check the key against the log's own: "
        "`sealbox log key` on its host)",
        expected=f"signatures by {mine}", found=found,
    )


#: where :func:`_verify_snapshot` names the store's checkpoint file among the notes it checks
CHECKPOINT_FILE = "the newest checkpoint file"


def checkpoints_phrase(wheres: Sequence[Any], lead: str = "") -> str:
    """The log's checkpoints among ``wheres`` (each a where, or a (where, ...) tuple), counted as the
    summary counts them (rows) with the checkpoint file, a copy of the newest, named apart: ``none of the
    log's 8 signed checkpoints (nor its checkpoint file)`` with ``lead='none of '``, else
    ``the log's 8 signed checkpoints and its checkpoint file``."""
    names = [w[0] if isinstance(w, tuple) else w for w in wheres]
    rows = sum(1 for w in names if w != CHECKPOINT_FILE)
    file = CHECKPOINT_FILE in names
    text = f"the log's {rows} signed checkpoint{'s' if rows != 1 else ''}" if rows else ""
    if lead:
        if not rows:
            return f"{lead}its checkpoint file" if file else f"{lead}its checkpoints"
        return f"{lead}{text}{' (nor its checkpoint file)' if file else ''}"
    return (f"{text} and its checkpoint file" if rows else "its checkpoint file") if file else text


def _signer_names(signers: str) -> list[str]:
    """The ``name+keyid`` list of a :func:`_signers` string."""
    rest = signers[len("signatures by "):]
    return [] if rest == "nobody" else rest.split(", ")


def _open_checkpoint(where: str, note: str, verifier: Verifier | None, origin: str | None,
                     problems: list[Problem]) -> Checkpoint | None:
    """One validly signed checkpoint, or None with the problem appended."""
    if verifier is None:
        problems.append(Problem("checkpoint_unverifiable", f"{where}: no trusted verifier key was given"))
        return None
    try:
        cp = verify_checkpoint(note, verifier)
    except NoteError as exc:
        signers = _signers(note) if isinstance(note, str) else "signatures by nobody"
        why = str(exc)
        if why.startswith("malformed note"):  # a broken note, not a signature by another key
            why = (f"it is not a well-formed signed note: {why} (C2SP signed-note: the text, a blank line, then "
                   "one signature line `\u2014 NAME BASE64` each, every line ending in a newline)")
        elif f"{verifier.name}+{verifier.key_id.hex()}" not in _signer_names(signers):  # C2SP: name and key id
            why = (f"it carries no signature by that key (key id {verifier.key_id.hex()}), only "
                   f"{signers}: it is another log's checkpoint, or the key is not this log's")
        problems.append(Problem(
            "checkpoint_signature", f"{where} is not validly signed by the trusted key {verifier.name}: {why}",
            expected=f"a signature by {verifier.vkey}", found=signers,
        ))
        return None
    if origin is not None and cp.origin != origin:
        problems.append(Problem("checkpoint_origin", f"{where} names another log", expected=origin, found=cp.origin))
        return None
    return cp


_STORE_ONLY_TAGS = frozenset({"$blob", "$cons", "$redacted"})


def _misplaced_store_tags(kind: str, payload: Any) -> list[tuple[str, str]]:
    """(field, tag) for each payload field other than a content field holding a bare store-only
    tag (``$blob``, ``$cons``, ``$redacted``; what ``$esc`` holds is data). The store writes them
    only in content fields (``note.about`` is one in a note with ``client_request``:
    sealbox.events.content_fields), and ``$redacted`` markers also in any ``note.about`` (redacted like
    content); anywhere else one came from a caller's ``Tagged`` stored unescaped, or was put there
    below Sealbox."""
    if type(payload) is not dict:
        return []
    content = content_fields(kind, payload)
    found = []
    for name, value in payload.items():
        if name in content or not (type(value) is dict or type(value) is list):
            continue
        allowed = ("$redacted",) if kind == "note" and name == "about" else ()
        stack = [value]
        while stack:
            v = stack.pop()
            if type(v) is dict:
                if len(v) == 1:
                    ((key, inner),) = v.items()
                    if key in _STORE_ONLY_TAGS and key not in allowed:
                        found.append((name, key))
                        break
                    if key == "$esc" and type(inner) is dict:
                        stack.extend(inner.values())
                        continue
                stack.extend(v.values())
            elif type(v) is list:
                stack.extend(v)
    return found


def _signers(note: str) -> str:
    """Who signed ``note``, as ``name+keyid`` (the key ID in 8 hex digits, as in a verifier key),
    so that a signature by another key of the same name is told apart from the trusted one. A
    signature line whose key ID cannot be read is shown by its name and ``(unreadable key id)``."""
    signers = []
    for line in note.split("\n"):
        if not line.startswith("\u2014 "):
            continue
        name, _, b64 = line[2:].partition(" ")
        try:
            raw = base64.b64decode(b64.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raw = b""
        signers.append(f"{name}+{raw[:4].hex()}" if len(raw) >= 5 else f"{name} (unreadable key id)")
    return "signatures by " + (", ".join(signers) if signers else "nobody")


_REF_MATCH = re.compile(r"sha256:[0-9a-f]{64}\Z").match


def check_blobs(rows: Iterable[tuple[str, bytes | None, bytes | None]], refs: set[str],
                erased: set[str], refs_of: dict[str, list[str]] | None = None) -> tuple[list[Problem], int]:
    """Check every blob against its commitment and that every referenced blob exists.

    Args:
        rows: (ref, salt, content); salt and content None when erased.
        refs: commitments referenced by events.
        erased: commitments named by ``content.erased`` events.
        refs_of: filled with the commitments each blob that matches its commitment and is JSON
            references (:func:`sealbox.blobs.blob_refs` of its content), by its ref.
    """
    problems: list[Problem] = []
    present: set[str] = set()
    pending = set(refs)
    count = 0
    for ref, salt, content in rows:
        count += 1
        present.add(ref)
        if type(ref) is not str or _REF_MATCH(ref) is None:
            problems.append(Problem("blob_malformed", f"a blob row's ref {ref!r} is not a commitment "
                                    "(sha256:<64 hex>): a row added below Sealbox"))
            continue
        if content is not None and salt is None:
            problems.append(Problem("blob_salt_missing", f"blob {ref} has content but no salt, so its commitment "
                                    "cannot be checked (an erasure removes both: the salt was removed below Sealbox)"))
            continue
        if content is None:
            if ref not in erased:
                problems.append(Problem("blob_erased_silently", f"blob {ref} has no content and no content.erased event"))
            continue
        if not _blobs.check_blob(ref, salt, content):
            problems.append(Problem(
                "blob_mismatch", f"blob {ref} does not match its commitment (its content or salt was replaced)",
                expected=ref, found=_blobs.commitment(salt, content),
            ))
            continue
        try:
            doc = json.loads(content)
            # in UTF-8, a {"$blob": ...} key is in the bytes as "$blob", or escaped (with a \\u): else there is none
            found = (_blobs.blob_refs(doc) if type(content) is not bytes or b'"$blob"' in content or b"\\u" in content
                     or json.detect_encoding(content) != "utf-8" else [])
            pending.update(found)
            if refs_of is not None:
                refs_of[ref] = found
        except ValueError:
            problems.append(Problem("blob_malformed", f"blob {ref} is not canonical JSON"))
    for ref in sorted(pending - present - erased):
        problems.append(Problem("blob_missing", f"blob {ref} is referenced but not stored"))
    return problems, count


def verify_store(store: Any, *, trusted_vkey: str | None = None, canonical: bool = False,
                 checkpoints: Sequence[tuple[str, str]] = ()) -> VerifyReport:
    """Verify everything in ``store`` from its raw bytes.

    Args:
        store: an open store (any backend offering ``iter_rows``, ``iter_nodes``,
            ``checkpoints``, ``iter_blobs``, ``checkpoint_file_note``, ``origin``).
        trusted_vkey: the verifier key to trust (C2SP vkey). Default: the key
            pinned at ``init``; pass one kept elsewhere to defeat a rewritten store.
        checkpoints: (name, signed note) of checkpoints kept outside the store (e.g. what
            ``sealbox log checkpoint`` printed earlier, saved elsewhere): each must verify with the
            trusted key and the events must reproduce its root, so a store whose checkpoints were
            deleted or rewritten, or whose log was cut back, is still caught (C2SP
            tlog-checkpoint: a client holds the newest checkpoint it has seen).
        canonical: also check that every event's hashed bytes are exactly the RFC 8785
            (JCS) form of what they parse to, with the reference writer
            (:func:`sealbox.canonical.canonical_bytes`): problem ``not_canonical``. Off by
            default (it roughly halves the speed); the hashes are checked either way.

    Returns:
        A :class:`VerifyReport`; tampering is reported, never raised.

    Raises:
        NoteError: ``trusted_vkey`` is not a valid verifier key (a user mistake).
        ConfigError: ``store`` is not an open store (a path, None).
    """
    if not hasattr(store, "iter_rows") or not hasattr(store, "pinned_vkey"):
        raise ConfigError("store must be an open Sealbox store (sealbox.open_store(path)), got "
                          f"{store!r:.80}")
    started = time.perf_counter()
    vkey = trusted_vkey or store.pinned_vkey()
    verifier = Verifier.from_vkey(vkey) if vkey else None
    file_note = store.checkpoint_file_note()  # read before the snapshot: it never runs ahead of it
    snapshot = store.read_snapshot() if hasattr(store, "read_snapshot") else contextlib.nullcontext()
    lenient = store.verify_reads() if hasattr(store, "verify_reads") else contextlib.nullcontext()
    integrity = _IntegrityCheck(store) if hasattr(store, "integrity_problems") else None
    try:
        with snapshot, lenient:
            report = _verify_snapshot(store, verifier, file_note, started, tuple(checkpoints),
                                      "key given" if trusted_vkey else "key pinned at init (log.vkey)")
            extra = tuple(_canonical_problems(store.iter_rows())) if canonical else ()
    except Exception as exc:
        if integrity is not None:
            integrity.wait()
        if type(exc).__module__ != "sqlite3" or "malformed" not in str(exc):
            raise
        return _damaged_database_report(exc, started, trusted_vkey or vkey)
    if integrity is not None:
        extra += integrity.result()
    return dataclasses.replace(report, problems=report.problems + extra, seconds=time.perf_counter() - started)


class _IntegrityCheck:
    """The store's ``integrity_problems()`` (SQLite's ``PRAGMA integrity_check``) on a thread of its
    own, started at once: it reads every page in C, without the GIL, while verification's Python
    pass runs, so on two cores it adds almost no wall time. :meth:`result` waits for it."""

    def __init__(self, store: Any) -> None:
        self._store, self._lines, self._error = store, [], None
        self._thread = threading.Thread(target=self._run, name="sealbox-integrity-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._lines = self._store.integrity_problems()
        except BaseException as exc:  # re-raised by result(), in the caller's thread
            self._error = exc

    def wait(self) -> None:
        """Wait for the check to end, whatever it found (verification failed on its own)."""
        self._thread.join()

    def result(self) -> tuple[Problem, ...]:
        """``database_integrity`` when SQLite found something, else (); the check's own error, re-raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if not self._lines:
            return ()
        return (Problem("database_integrity", "SQLite's integrity check of the store's database (sealbox.db) "
                        f"failed ({'; '.join(self._lines)}): queries (sealbox calls, runs, approvals) may miss or "
                        "misreport events although the log's hashes verify; restore the store from a backup "
                        "(or, where only indexes are named, rebuild them with: sqlite3 sealbox.db REINDEX)"),)


def _damaged_database_report(exc: BaseException, started: float, vkey: str | None) -> VerifyReport:
    """The report on an SQLite database whose pages SQLite could not read part-way through: the one
    problem ``database_damaged``; nothing after it could be checked."""
    return VerifyReport(problems=(Problem(
        "database_damaged", f"the store's database (sealbox.db) is damaged ({exc}): SQLite cannot read some of its "
        "pages (a -wal file deleted or truncated while the store was open, a disk fault), so verification "
        "stopped there; restore the store from a backup"),), events=0, runs=0, checkpoints=0, blobs=0,
        seconds=time.perf_counter() - started, trusted_key=vkey)


def _canonical_problems(rows: Iterable[tuple]) -> Iterator[Problem]:
    """``not_canonical`` for each event whose bytes are not the JCS form of their parse."""
    from sealbox.canonical import canonical_bytes
    from sealbox.errors import CanonicalizationError

    for leaf_index, raw, _stored_hash, columns in rows:
        raw = _as_blob(raw)
        where = {"run_id": columns[0], "run_seq": columns[1], "kind": columns[2], "leaf_index": leaf_index}
        try:
            parsed = json.loads(raw)
        except ValueError:  # unreadable: the main pass reports it
            continue
        try:
            again = canonical_bytes(parsed)
        except CanonicalizationError as exc:  # NaN, an integer beyond I-JSON, too deep
            yield Problem("not_canonical", f"the hashed bytes hold a value RFC 8785 cannot write: {exc}", **where)
            continue
        if again == raw:
            continue
        at = next((i for i, (a, b) in enumerate(zip(raw, again)) if a != b), min(len(raw), len(again)))
        yield Problem("not_canonical", f"the hashed bytes are not RFC 8785 (JCS): they differ from their canonical "
                                       f"form at byte {at}", expected=again[max(0, at - 20):at + 20].decode("utf-8", "replace"),
                      found=raw[max(0, at - 20):at + 20].decode("utf-8", "replace"), **where)


def _verify_snapshot(store: Any, verifier: Verifier | None, file_note: str | None, started: float,
                     external: tuple[tuple[str, str], ...] = (), key_source: str = "key given") -> VerifyReport:
    cps = store.checkpoints()
    notes = [(f"checkpoint {i + 1} (size {c.tree_size})", c.note) for i, c in enumerate(cps)]
    if file_note is not None:
        notes.append((CHECKPOINT_FILE, file_note))
    notes.extend(external)
    note_problems, signed_cps = open_checkpoints(notes, verifier, store.origin or None)
    wrong_key = key_mismatch(notes[:len(notes) - len(external)], verifier, store.origin or None, key_source)
    nodes = _NodeChecker(store)
    calls = CallGrantCheck(store.origin or "")  # streamed: the calls are not kept
    call_steps = CallStepCheck()  # streamed: the steps of the calls of runs not ended yet

    grant_kinds, steps_add, grants_add = CALL_GRANT_KINDS, call_steps.add, calls.add

    def on_event(leaf_index: int, env: dict) -> None:
        kind = env["kind"]
        if kind == "tool.call":  # the most frequent; most name their principal's own implicit grant, which
            steps_add(leaf_index, env)  # CallGrantCheck ignores: that test is made here, without the call
            gid = env["payload"].get("grant")
            if type(gid) is not str or gid[:9] != "implicit:" or gid[9:] != env["principal"]:
                grants_add(leaf_index, env)
            return
        if kind in grant_kinds:
            grants_add(leaf_index, env)
        else:
            steps_add(leaf_index, env)

    ev = EventVerifier(root_sizes={cp.size for _, cp in signed_cps}, on_nodes=nodes,  # nodes.check_levels per chunk
                       on_event=on_event, event_kinds=CALL_GRANT_KINDS | CALL_STEP_KINDS)
    ev.add_rows(store.iter_rows())
    problems = ([wrong_key] if wrong_key else []) + list(ev.problems)  # first: the rest follows from it
    if SYSTEM_RUN_ID not in ev.heads and ev.tree.size:
        problems.append(Problem("system_run_missing", "the store's system run has no events"))
    problems.extend(nodes.finish())
    problems.extend(note_problems)
    if hasattr(store, "iter_checkpoint_rows"):
        problems.extend(check_checkpoint_rows(store.iter_checkpoint_rows(), file_note, ev.tree.size))
    cp_problems, signed, root = compare_checkpoints(signed_cps, ev.roots, ev.tree.size)
    problems.extend(cp_problems)
    held = [(where, cp) for where, cp in signed_cps if where in dict(external) and cp.size <= ev.tree.size
            and ev.roots.get(cp.size) == cp.root]
    erased = {env["payload"]["blob"] for _, env in ev.envelopes_by_kind.get("content.erased", [])}
    blob_problems, nblobs = check_blobs(store.iter_blobs(), ev.refs, erased)
    problems.extend(blob_problems)
    for ref, size, length in store.blob_size_mismatches() if hasattr(store, "blob_size_mismatches") else ():
        problems.append(Problem("blob_size_mismatch", f"blob {ref}: the size column differs from its content's "
                                "length (the blobs table was changed below Sealbox)",
                                expected=f"{length} bytes", found=repr(size)))
    if hasattr(store, "iter_snapshots"):
        problems.extend(check_snapshots(store.iter_snapshots(), ev.envelopes_by_kind.get("run.started", [])))
    if hasattr(store, "iter_run_rows"):
        problems.extend(check_run_rows(store.iter_run_rows(), ev.envelopes_by_kind.get("run.started", [])))
    for damage in getattr(store, "open_damage", ()):
        problems.append(Problem("store_settings_damaged", f"{damage}: the store was changed below Sealbox"))
    for table, key, column, expected, found in (
            store.storage_class_problems() if hasattr(store, "storage_class_problems") else ()):
        problems.append(Problem("column_type", f"the {table} table's {column} column holds "
                                f"{_WITH_ARTICLE.get(found, found)} in the row {key}, where Sealbox writes "
                                f"{expected} (the row was changed below Sealbox)", expected=expected, found=found))
    for code, message in store.schema_problems() if hasattr(store, "schema_problems") else ():
        problems.append(Problem(code, message))
    for name in store.missing_triggers() if hasattr(store, "missing_triggers") else ():
        problems.append(Problem("trigger_missing", f"the append-only trigger {name} was dropped from the database "
                                "(someone changed the store below Sealbox)"))
    for name in store.disabled_triggers() if hasattr(store, "disabled_triggers") else ():
        problems.append(Problem("trigger_missing", f"the append-only trigger {name} is in the database but disabled "
                                "(ALTER TABLE … DISABLE TRIGGER, or ENABLE REPLICA TRIGGER): it does not fire "
                                "(someone changed the store below Sealbox)"))
    bypassed = store.triggers_bypassed() if hasattr(store, "triggers_bypassed") else None
    if bypassed:
        problems.append(Problem("trigger_missing", "the append-only triggers do not fire in Sealbox's sessions: "
                                f"session_replication_role is {bypassed!r} (set with ALTER DATABASE or ALTER ROLE … "
                                "SET, or PGOPTIONS), so every row can be changed or deleted below Sealbox (someone "
                                "changed the store's database settings)"))
    changed = store.content_policy_change() if hasattr(store, "content_policy_change") else None
    if changed:
        problems.append(Problem("content_policy_changed", changed))
    for name in store.foreign_triggers() if hasattr(store, "foreign_triggers") else ():
        problems.append(Problem("trigger_foreign", f"the trigger {name} is not Sealbox's: it can silently change or "
                                "drop what Sealbox writes (someone changed the store below Sealbox)"))
    for name, table in store.foreign_rules() if hasattr(store, "foreign_rules") else ():
        problems.append(Problem("trigger_foreign", f"the rule {name} on {table} is not Sealbox's: it can silently "
                                "change or drop what Sealbox writes (someone changed the store below Sealbox)"))
    for table, forced, policies in store.row_security() if hasattr(store, "row_security") else ():
        how = "enabled and forced on its owner (ALTER TABLE … ENABLE|FORCE" if forced else "enabled (ALTER TABLE … ENABLE"
        which = (f"polic{'y' if len(policies) == 1 else 'ies'} {', '.join(policies)}" if policies else
                 "no policy: it hides every row, from the owner too" if forced else
                 "no policy: it hides every row from roles other than the owner")
        problems.append(Problem("row_security", f"the {table} table has row-level security {how} ROW LEVEL SECURITY; "
                                f"{which}): Sealbox enables it on no table, and a policy can hide rows from whoever "
                                "reads the store or refuse Sealbox's writes (someone changed the store below Sealbox)"))
    problems.extend(check_approval_answers(ev.envelopes_by_kind))
    reapproval_problems, notes = check_reapprovals(ev.envelopes_by_kind, store.origin or "")
    problems.extend(reapproval_problems)
    grant_problems, grant_notes = check_grants(ev.envelopes_by_kind, store.origin or "")
    problems.extend(grant_problems)
    notes.extend(grant_notes)
    compromised = compromised_grants(ev.envelopes_by_kind, store.origin or "")
    if compromised:
        notes.extend(compromised_call_notes(_store_calls(store, compromised), compromised))
    notes.extend(compromised_answer_notes(ev.envelopes_by_kind))
    revocation_problems, revocation_notes = check_revocations(ev.envelopes_by_kind, store.origin or "")
    problems.extend(revocation_problems)
    notes.extend(revocation_notes)
    rotation_problems, rotation_notes = check_rotations(ev.envelopes_by_kind, store.origin or "")
    problems.extend(rotation_problems)
    notes.extend(rotation_notes)
    problems.extend(check_rotated_credentials(store, ev.envelopes_by_kind, store.origin or ""))
    problems.extend(calls.finish())
    problems.extend(call_steps.problems)
    return VerifyReport(
        problems=tuple(problems), events=ev.tree.size, runs=len(ev.heads), checkpoints=len(cps), blobs=nblobs,
        seconds=time.perf_counter() - started, tree_size_signed=signed, root=root,
        trusted_key=verifier.vkey if verifier else None, notes=tuple(notes),
        extends=tuple({"checkpoint": where, "size": cp.size, "root": "sha256:" + cp.root.hex()} for where, cp in held),
    )


_ANSWER_PROBLEMS = {
    "bad_signature": ("approval_signature", "the answer's signature does not verify with the identity's key as the "
                      "log held it then (the answer was forged or altered)"),
    "binding_mismatch": ("approval_binding", "the answer's binding differs from its request's (it approves another call)"),
    "wrong_run": ("approval_run", "the answer was signed for a request of another run: a signed answer copied "
                  "(replayed) into this run, which its approver never answered"),
    "unknown_identity": ("approval_identity", "the answer names an identity the log did not know at that moment"),
    "disabled": ("approval_identity", "the answer is by an identity that was disabled at that moment"),
    "late": ("approval_rule", "the answer came after its request was decided or expired (answer() refuses it; it "
             "was not written through answer() and does not count)"),
}


def check_approval_answers(by_kind: dict[str, list[tuple[int, dict]]]) -> list[Problem]:
    """Every ``approval.answered`` must be signed by its identity's key as the log held it then.

    Identities are replayed from the system run's ``identity.changed`` events up to
    each answer's leaf. An answer that does not verify, names an unknown or disabled
    identity, has another binding than its request, has no request, or breaks an
    approval rule (role, requester, not asked, duplicate, after the decision or the expiry) was not written through
    ``sealbox.approvals.answer``: it is reported, and it never counts.
    """
    from sealbox.approvals import Answer, check_answer, missing_shared_flag
    from sealbox.identities import IdentityBook

    changes = [(leaf, env) for leaf, env in by_kind.get("identity.changed", []) if env.get("run_id") == SYSTEM_RUN_ID]
    book = IdentityBook.from_events(changes)
    full = book  # every change of the log: withdrawals and compromise windows recorded after an answer
    envs = dict(changes)
    problems = [Problem(
        "identity_unauthorized", f"an identity change of {env['payload'].get('name')!r} recorded in run "
        f"{env.get('run_id')}, not in the store's system run, where sealbox.identities writes them: it is ignored",
        env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf)
        for leaf, env in by_kind.get("identity.changed", []) if env.get("run_id") != SYSTEM_RUN_ID]
    for leaf, name, change, why in book.unauthorized:
        env = envs[leaf]
        problems.append(Problem(
            "identity_unauthorized", f"the identity change {change!r} of {name!r} is not signed by an admin identity "
            f"of the log at that point ({why}): it was not written through sealbox.identities, and it is ignored "
            "(answers by an identity it added do not count)", env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf))
    requests: dict[tuple, tuple[int, dict]] = {}
    first_of: dict[Any, tuple[int, str]] = {}  # approval id -> (leaf, run) of its first request
    for leaf, env in by_kind.get("approval.requested", []):
        aid = env["payload"].get("approval_id")
        if isinstance(aid, str) and aid in first_of:
            # approval ids are random (apr_ + 128 bits): a second request with one is a copy, made so that
            # an answer to the first reads as an answer to it (answers written before 2026-12-03 sign the id
            # and the binding, not the run)
            problems.append(Problem(
                "approval_duplicate", f"a second request with approval id {aid!r}, first requested at leaf "
                f"{first_of[aid][0]} in run {first_of[aid][1]}: approval ids are unique, so it was not written by "
                "Sealbox (an answer to the first may have been copied to it)", env["run_id"], env.get("run_seq"),
                env.get("kind"), leaf))
            requests.setdefault((env["run_id"], aid), (leaf, env["payload"]))
            continue
        if isinstance(aid, str):
            first_of[aid] = (leaf, env["run_id"])
        requests[(env["run_id"], aid)] = (leaf, env["payload"])
    counted: dict[tuple, list[Answer]] = {}
    decided: set[tuple] = set()  # requests an earlier counted deny decided
    acted: dict[tuple, int] = {}  # request -> leaf of the first run.resumed naming it (its call was acted on)
    for leaf, env in by_kind.get("run.resumed", []):
        payload = env.get("payload")
        ids = payload.get("approval_ids") if isinstance(payload, dict) else None
        for aid in ids if isinstance(ids, list) else ():
            if isinstance(aid, str):
                acted.setdefault((env["run_id"], aid), leaf)

    def approved_before(key: tuple, leaf: int) -> bool:
        """Whether the counted approvals made the quorum just before ``leaf``, each counting unless its
        identity was disabled or re-keyed after it answered, before ``leaf`` (or the call's resumption
        once it was resumed): such a change withdraws it for good (sealbox.approvals)."""
        at = min(leaf, acted.get(key, leaf))
        valid = set()
        for a in counted.get(key, ()):
            if a.decision == "approve" and full.withdrawing(a.identity, a.leaf_index, at) is None:
                valid.add(a.identity)
        return bool(valid) and len(valid) >= _quorum(requests[key][1])
    expired: dict[tuple, int] = {}  # request -> leaf of its first approval.expired
    for leaf, env in by_kind.get("approval.expired", []):
        key = (env["run_id"], env["payload"].get("approval_id"))
        if key in requests and requests[key][0] < leaf:
            expired.setdefault(key, leaf)
    for leaf, env in by_kind.get("approval.answered", []):
        p, key = env["payload"], (env["run_id"], env["payload"].get("approval_id"))
        where = (env["run_id"], env["run_seq"], env["kind"], leaf)
        request = requests.get(key)
        if request is None or request[0] > leaf:
            problems.append(Problem("approval_unknown", f"an answer to {key[1]!r}, which this run never requested", *where))
            continue
        code = check_answer(request[1], p, leaf, book, counted.get(key, ()), run_id=env["run_id"])
        if code is None and env.get("principal") != p.get("identity"):
            code = "principal"
        if code is None and (key in decided or approved_before(key, leaf) or expired.get(key, leaf) < leaf
                             or _late_answer(request[1], p, env.get("ts"))):
            code = "late"  # after a decision or the expiry: answer() refuses it, evaluate() does not count it
        if code is None:
            counted.setdefault(key, []).append(Answer(p["identity"], p["decision"], "", "", leaf, {}, (), None))
            if p["decision"] == "deny":
                decided.add(key)
            if missing_shared_flag(p, leaf, book):
                problems.append(Problem(
                    "approval_flag_missing", f"the answer by {p['identity']!r} on {key[1]} carries no shared_identity "
                    "flag, though the log marked that identity shared when it answered: it was not written through "
                    "answer() (readers flag it from the log)", *where))
            continue
        pcode, text = _ANSWER_PROBLEMS.get(code, ("approval_rule", f"the answer breaks an approval rule ({code}); "
                                                   "it was not written through answer() and does not count"))
        problems.append(Problem(pcode, f"{text}: {p.get('identity')!r} on {key[1]}", *where,
                                expected=request[1].get("binding") if code == "binding_mismatch" else None,
                                found=p.get("binding") if code == "binding_mismatch" else None))
    return problems


_REAPPROVAL_CODES = {
    "bad_signature": "reapproval_signature", "unknown_identity": "reapproval_identity", "disabled": "reapproval_identity",
    "wrong_store": "reapproval_binding", "wrong_definition": "reapproval_binding", "role": "reapproval_rule",
    "principal": "reapproval_rule",
}


_TOOL_REVOCATION_CODES = {
    "bad_signature": "tool_revocation_signature", "unknown_identity": "tool_revocation_identity",
    "disabled": "tool_revocation_identity", "wrong_store": "tool_revocation_binding",
    "wrong_definition": "tool_revocation_binding", "role": "tool_revocation_rule", "principal": "tool_revocation_rule",
}


class _Kept:
    """A kept envelope as :meth:`sealbox.gateway.pinning.PinState.apply` reads an event."""

    __slots__ = ("leaf_index", "kind", "payload", "principal")

    def __init__(self, leaf_index: int, env: dict) -> None:
        self.leaf_index, self.kind, self.payload, self.principal = leaf_index, env["kind"], env["payload"], env.get("principal")


def check_reapprovals(by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> tuple[list[Problem], list[str]]:
    """Every ``tool.reapproved`` and ``tool.revoked`` of the system run must be signed as
    :mod:`sealbox.gateway.pinning` says (by an enabled approver or admin of the log at that moment, for this
    log's ``origin``, the tool and the definition its ``tools.changed`` recorded); the pin state counts no other. Every ``upgraded`` entry of
    a ``tools.changed`` (an older pin carried to a newer version: 1 to 2, 2 or 1 to 3) must upgrade an older
    definition recorded for the tool (its last recorded one, or the approved one of a tool absent or changed at the upgrade):
    the state counts no other (it blocks the tool as changed).

    Returns:
        Problems (``reapproval_signature``, ``reapproval_identity``, ``reapproval_binding``,
        ``reapproval_rule``) for signed re-approvals that do not count, the same ``tool_revocation_*`` ones
        (``tool_revocation_signature``, ``_identity``, ``_binding``, ``_rule``) for signed revocations that do
        not count (unsigned ones, which do not count, and those of a compromised key, which still withdraw
        the approval, are notes), ``pin_upgrade_forged`` for
        upgrades that do not count (:data:`sealbox.gateway.pinning.UPGRADE_PROBLEMS`), and notes for
        unsigned re-approvals (written by a Sealbox before 2026-12-03, or by hand): they do not count
        either, and their tools stay blocked until re-approved with a key. A malformed one is reported
        as ``event_malformed``.
    """
    if not by_kind.get("tool.reapproved") and not by_kind.get("tool.revoked") and not any(
            isinstance(env.get("payload"), dict) and "upgraded" in env["payload"]
            for _, env in by_kind.get("tools.changed", [])):
        return [], []
    from sealbox.gateway.pinning import PIN_KINDS, REAPPROVAL_PROBLEMS, REVOCATION_PROBLEMS, UPGRADE_PROBLEMS, PinState

    kept = sorted((leaf, env) for kind in PIN_KINDS
                  for leaf, env in by_kind.get(kind, []) if env.get("run_id") == SYSTEM_RUN_ID)
    envs = dict(kept)
    state = PinState(origin=origin)
    state.apply(_Kept(leaf, env) for leaf, env in kept)
    problems: list[Problem] = []
    notes: list[str] = []
    for leaf, server, tool, problem in state.upgrade_problems:
        env = envs[leaf]
        problems.append(Problem("pin_upgrade_forged", f"the pin upgrade of {server}/{tool} does not count: "
                                f"{UPGRADE_PROBLEMS[problem]} (the tool is blocked as changed until re-approved)",
                                env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf))
    for r in state.reapprovals:
        if r.problem is None or r.problem == "malformed":
            continue
        what = f"the re-approval of {r.server}/{r.tool} ({r.schema_hash}) by {r.identity!r}"
        if r.problem == "unsigned":
            notes.append(f"{what} at leaf {r.leaf_index} is unsigned: it does not count (the tool stays blocked as "
                         "changed until an approver re-approves it with `sealbox gateway reapprove SERVER TOOL "
                         "--reason TEXT --key-file KEY`)")
            continue
        if r.problem == "compromised_key":
            notes.append(f"{what} at leaf {r.leaf_index} was signed with a key declared compromised at that point: "
                         "it no longer counts (the tool is blocked again until re-approved with another key)")
            continue
        env = envs[r.leaf_index]
        problems.append(Problem(_REAPPROVAL_CODES.get(r.problem, "reapproval_rule"),
                                f"{what} does not count: {REAPPROVAL_PROBLEMS[r.problem]}", env.get("run_id"),
                                env.get("run_seq"), env.get("kind"), r.leaf_index))
    for v in state.revocations:
        if v.problem is None or v.problem == "malformed":
            continue
        what = f"the revocation of {v.server}/{v.tool}'s definition {v.schema_hash} by {v.identity!r}"
        if v.problem == "unsigned":
            notes.append(f"{what} at leaf {v.leaf_index} is unsigned: it does not count (the definition stays approved "
                         "until an approver revokes it with `sealbox gateway revoke SERVER TOOL --hash HASH --reason "
                         "TEXT --key-file KEY`)")
            continue
        if v.problem == "compromised_key":
            notes.append(f"{what} at leaf {v.leaf_index} was signed with a key declared compromised at that point: "
                         "it still withdraws the approval (a revocation can only block the tool; re-approve the "
                         "definition with another key if it is fine)")
            continue
        env = envs[v.leaf_index]
        problems.append(Problem(_TOOL_REVOCATION_CODES.get(v.problem, "tool_revocation_rule"),
                                f"{what} does not count: {REVOCATION_PROBLEMS[v.problem]}", env.get("run_id"),
                                env.get("run_seq"), env.get("kind"), v.leaf_index))
    return problems, notes


_GRANT_CODES = {
    "bad_signature": "grant_signature", "unknown_identity": "grant_identity", "disabled": "grant_identity",
    "wrong_store": "grant_binding", "duplicate": "grant_binding", "role": "grant_rule", "principal": "grant_rule",
}


def check_grants(by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> tuple[list[Problem], list[str]]:
    """Every ``access.granted`` of the system run must be signed as :mod:`sealbox.access` says (by an
    identity that was an enabled admin of the log at that moment, with its key then, over
    :func:`sealbox.access.grant_fields` for this log's ``origin``); calls naming any other are denied.

    Returns:
        Problems (``grant_signature``: forged, altered, or copied to another grant id or principal;
        ``grant_identity``: unknown or disabled signer; ``grant_binding``: signed for another store, or
        a second grant of an id; ``grant_rule``: a signer of another role, or another event principal)
        and notes for unsigned grants (written by a Sealbox before 2026-12-03, or by hand): they authorize
        no call until granted again with a key. A malformed one is reported as ``event_malformed``.
    """
    if not by_kind.get("access.granted"):
        return [], []
    from sealbox.access import GRANT_PROBLEMS, check_grant_payload
    from sealbox.identities import IdentityBook

    kept = sorted((leaf, env) for kind in ("identity.changed", "access.granted")
                  for leaf, env in by_kind.get(kind, []) if env.get("run_id") == SYSTEM_RUN_ID)
    full = IdentityBook.from_events((leaf, env) for leaf, env in kept if env.get("kind") == "identity.changed")
    book = IdentityBook()
    seen: set[Any] = set()
    problems: list[Problem] = []
    notes: list[str] = []
    for leaf, env in kept:
        p = env.get("payload")
        if env.get("kind") == "identity.changed":
            if isinstance(p, dict):
                book.apply(leaf, p)
            continue
        problem = check_grant_payload(p, leaf, env.get("principal"), book, origin)
        d = p if isinstance(p, dict) else {}
        gid = d.get("grant_id")
        if problem is None and isinstance(gid, str) and gid in seen:
            problem = "duplicate"
        if isinstance(gid, str):
            seen.add(gid)
        what = (f"the grant {gid} of {d.get('server')}/{d.get('tool')} to {d.get('principal')!r} "
                f"by {d.get('identity', env.get('principal'))!r}")
        hit = full.compromised_at(d.get("identity"), leaf) if problem is None else None
        if hit is not None:
            notes.append(f"{what} at leaf {leaf} was signed with a key declared compromised from leaf {hit[1]} "
                         f"(identity.changed at leaf {hit[0]}): it authorizes no call from then on (calls naming it "
                         "are denied grant_invalid)")
            continue
        if problem is None or problem == "malformed":
            continue
        if problem == "unsigned":
            notes.append(f"{what} at leaf {leaf} is unsigned: it authorizes no call (calls naming it are denied "
                         "grant_invalid until an admin grants again with `sealbox access grant ... --key-file KEY`)")
            continue
        problems.append(Problem(_GRANT_CODES.get(problem, "grant_rule"), f"{what} does not count: "
                                f"{GRANT_PROBLEMS[problem]}", env.get("run_id"), env.get("run_seq"), env.get("kind"),
                                leaf))
    return problems, notes


def compromised_grants(by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> dict[str, dict[str, Any]]:
    """The grants that were valid when recorded but were signed in a window where their identity's key
    was declared compromised (``sealbox identities disable|rotate --compromised-since``):
    ``grant_id -> {"leaf", "identity", "record_leaf", "from_leaf"}`` (the grant's leaf, its signer,
    the ``identity.changed`` that recorded the compromise and the window's first leaf)."""
    if not by_kind.get("access.granted"):
        return {}
    from sealbox.access import check_grant_payload
    from sealbox.identities import IdentityBook

    changes = sorted((leaf, env) for leaf, env in by_kind.get("identity.changed", []) if env.get("run_id") == SYSTEM_RUN_ID)
    full = IdentityBook.from_events(changes)
    if not full.compromise_records():
        return {}
    kept = sorted(changes + [(leaf, env) for leaf, env in by_kind.get("access.granted", [])
                             if env.get("run_id") == SYSTEM_RUN_ID])
    book, seen, out = IdentityBook(), set(), {}
    for leaf, env in kept:
        p = env.get("payload")
        if env.get("kind") == "identity.changed":
            if isinstance(p, dict):
                book.apply(leaf, p)
            continue
        gid = p.get("grant_id") if isinstance(p, dict) else None
        if not isinstance(gid, str) or gid in seen:
            continue
        seen.add(gid)
        if check_grant_payload(p, leaf, env.get("principal"), book, origin) is None:
            hit = full.compromised_at(p.get("identity"), leaf)
            if hit is not None:
                out[gid] = {"leaf": leaf, "identity": p.get("identity"), "record_leaf": hit[0], "from_leaf": hit[1]}
    return out


def compromised_call_notes(calls: Iterable[tuple[int, str, Any, str, Any]], compromised: dict[str, dict[str, Any]]) -> list[str]:
    """``relied_on_compromised_key`` notes: one for each call that ran (every decision of it lets it through: :func:`lets_through`)
    under a grant of :func:`compromised_grants`, before the compromise was recorded (from then on such
    calls are denied ``grant_invalid``). The log is intact - these calls are what it recorded - so they are
    notes for an investigator, not problems.

    Args:
        calls: ``(leaf, run_id, call_id, grant_id, "deny" when a decision of it does not let it through, else None)``.
    """
    notes = []
    for leaf, run_id, call_id, gid, effect in sorted(calls, key=lambda c: c[0]):
        g = compromised.get(gid)
        if g is None or leaf >= g["record_leaf"] or effect == "deny":
            continue
        notes.append(f"relied_on_compromised_key: call {call_id} in run {run_id} (leaf {leaf}) ran under grant {gid}, "
                     f"signed by {g['identity']!r} at leaf {g['leaf']} with a key declared compromised from leaf "
                     f"{g['from_leaf']} (identity.changed at leaf {g['record_leaf']})")
    return notes


def compromised_answer_notes(by_kind: dict[str, list[tuple[int, dict]]]) -> list[str]:
    """``relied_on_compromised_key`` notes for approvals acted on: each ``approve`` answer signed in a
    window where its identity's key was declared compromised, whose call was resumed (``run.resumed``
    naming its approval) before that declaration was recorded - a call that ran on an approval the
    leaked key may have given. Answers to calls not yet resumed then are withdrawn (sealbox.approvals)
    and need no note. Bounded: one pass over the kept answers and resumptions."""
    from sealbox.identities import IdentityBook

    changes = sorted((leaf, env) for leaf, env in by_kind.get("identity.changed", []) if env.get("run_id") == SYSTEM_RUN_ID)
    book = IdentityBook.from_events(changes)
    if not book.compromise_records() or not by_kind.get("approval.answered"):
        return []
    acted: dict[tuple, int] = {}
    for leaf, env in by_kind.get("run.resumed", []):
        ids = env["payload"].get("approval_ids") if isinstance(env.get("payload"), dict) else None
        for aid in ids if isinstance(ids, list) else ():
            if isinstance(aid, str):
                acted.setdefault((env["run_id"], aid), leaf)
    notes = []
    for leaf, env in by_kind.get("approval.answered", []):
        p = env.get("payload") if isinstance(env.get("payload"), dict) else {}
        if p.get("decision") != "approve":
            continue
        hit = book.compromised_at(p.get("identity"), leaf)
        resumed = acted.get((env.get("run_id"), p.get("approval_id")))
        if hit is None or resumed is None or resumed < leaf or resumed >= hit[0]:
            continue
        notes.append(f"relied_on_compromised_key: approval {p.get('approval_id')} in run {env.get('run_id')} was "
                     f"approved by {p.get('identity')!r} at leaf {leaf} with a key declared compromised from leaf "
                     f"{hit[1]} (identity.changed at leaf {hit[0]}); its call resumed at leaf {resumed}")
    return notes


def _store_calls_portable(store: Any, compromised: dict[str, dict[str, Any]]) -> list[tuple[int, str, Any, str, Any]]:
    """:func:`_store_calls` through the store's reader (``Reader.events``), for backends other than SQLite."""
    reader = store.reader()
    out = []
    for call in reader.events(["tool.call"]):
        gid = call.payload.get("grant")
        if gid not in compromised:
            continue
        call_id = call.payload.get("call_id")
        decisions = [e.payload for e in reader.events(["policy.decision"], run_id=call.run_id)
                     if e.payload.get("call_id") == call_id]
        ran = all(lets_through(d) for d in decisions)
        out.append((call.leaf_index, call.run_id, call_id, gid, None if ran else "deny"))
    return out


def _store_calls(store: Any, compromised: dict[str, dict[str, Any]]) -> list[tuple[int, str, Any, str, Any]]:
    """The ``tool.call`` events naming one of these grants, each with ``"deny"`` when a decision of it does
    not :func:`let it through <lets_through>` (denied, imported, or served by a replay: it did not run under
    the grant, as a bundle reads it), else None; read only when some grant was signed with a compromised
    key (rare), so verify pays nothing otherwise."""
    if getattr(store, "backend", "sqlite") != "sqlite":  # no SQLite SQL: read the events through the store's reader
        return _store_calls_portable(store, compromised)
    conn = store._conn()
    marks = ", ".join("?" * len(compromised))
    rows = conn.execute(
        "SELECT leaf_index, run_id, call_id, CAST(raw AS TEXT) ->> '$.payload.grant' FROM events WHERE kind = 'tool.call'"
        f" AND (CAST(raw AS TEXT) ->> '$.payload.grant') IN ({marks}) ORDER BY leaf_index", tuple(compromised)).fetchall()
    out = []
    for leaf, run_id, call_id, gid in rows:
        # as a bundle reads them (lets_through): a call a decision denies, or that was imported or served by
        # a replay, did not run under the grant
        decisions = conn.execute("SELECT CAST(raw AS TEXT) ->> '$.payload' FROM events WHERE kind = 'policy.decision'"
                                 " AND run_id = ? AND call_id = ?", (run_id, call_id)).fetchall()
        ran = all(lets_through(json.loads(d)) for (d,) in decisions if d is not None)
        out.append((leaf, run_id, call_id, gid, None if ran else "deny"))
    return out


_REVOCATION_CODES = {
    "bad_signature": "revocation_signature", "unknown_identity": "revocation_identity",
    "disabled": "revocation_identity", "wrong_store": "revocation_binding", "order": "revocation_binding",
    "role": "revocation_rule", "principal": "revocation_rule",
}


def check_revocations(by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> tuple[list[Problem], list[str]]:
    """Every ``access.revoked`` step of the system run must be signed as :mod:`sealbox.access` says
    (by an identity that was an enabled admin or approver then, with its key then, over
    :func:`sealbox.access.revocation_fields` for this log's ``origin``, chained after the grant's
    previous valid step). ``access show`` / ``list`` ignore any other step (a request still denies).

    Returns:
        Problems (``revocation_signature``: forged or altered; ``revocation_identity``: unknown or
        disabled signer; ``revocation_binding``: another store, a step replayed or out of order, or
        a step of no grant; ``revocation_rule``: a signer of another role, or another event
        principal) and notes for unsigned steps (written by a Sealbox before 2026-12-03, or by hand).
        A malformed one is reported as ``event_malformed``.
    """
    if not by_kind.get("access.revoked"):
        return [], []
    from sealbox.access import REVOCATION_PROBLEMS, revocation_marks
    from sealbox.identities import IdentityBook

    kept = sorted((leaf, env) for kind in ("identity.changed", "access.granted", "access.revoked")
                  for leaf, env in by_kind.get(kind, []) if env.get("run_id") == SYSTEM_RUN_ID)
    book = IdentityBook()
    for leaf, env in kept:
        if env.get("kind") == "identity.changed" and isinstance(env.get("payload"), dict):
            book.apply(leaf, env["payload"])
    granted: dict[str, int] = {}
    steps: dict[str, list[tuple[int, dict]]] = {}
    for leaf, env in kept:
        p = env.get("payload") if isinstance(env.get("payload"), dict) else {}
        gid = p.get("grant_id")
        if not isinstance(gid, str):
            continue
        if env.get("kind") == "access.granted":
            granted.setdefault(gid, leaf)
        elif env.get("kind") == "access.revoked":
            steps.setdefault(gid, []).append((leaf, env))
    problems: list[Problem] = []
    notes: list[str] = []
    for gid, items in steps.items():
        marks = revocation_marks(granted.get(gid), items, book, origin)
        for (leaf, env), mark in zip(items, marks):
            if mark in ("valid", "malformed"):
                continue
            p = env["payload"]
            what = f"the revocation step {p.get('step')!r} of grant {gid} at leaf {leaf} by {env.get('principal')!r}"
            if mark == "unsigned":
                notes.append(f"{what} is unsigned: access show/list ignore it (a requested step still denies "
                             "calls); revoke again with `sealbox access revoke ... --key-file KEY`")
                continue
            if mark == "compromised_key":
                notes.append(f"{what} was signed with a key declared compromised at that point: access show/list "
                             "do not count it (a requested step still denies calls)")
                continue
            why = REVOCATION_PROBLEMS[mark] if gid in granted else "its grant is not in this log"
            problems.append(Problem(_REVOCATION_CODES.get(mark, "revocation_rule"), f"{what} does not count: {why}",
                                    env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf))
    return problems, notes


_ROTATION_CODES = {
    "bad_signature": "rotation_signature", "unknown_identity": "rotation_identity",
    "disabled": "rotation_identity", "wrong_store": "rotation_binding", "order": "rotation_binding",
    "role": "rotation_rule", "principal": "rotation_rule",
}


def _rotations_by_grant(by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> tuple[
        dict[str, int], dict[str, list[tuple[int, dict, str]]]]:
    """The grants' leaves, and each grant's ``access.credential_rotated`` events of the system run with their
    :func:`sealbox.access.rotation_marks` (``valid`` or a problem code), in log order."""
    from sealbox.access import rotation_marks
    from sealbox.identities import IdentityBook

    kept = sorted((leaf, env) for kind in ("identity.changed", "access.granted", "access.credential_rotated")
                  for leaf, env in by_kind.get(kind, []) if env.get("run_id") == SYSTEM_RUN_ID)
    book = IdentityBook()
    for leaf, env in kept:
        if env.get("kind") == "identity.changed" and isinstance(env.get("payload"), dict):
            book.apply(leaf, env["payload"])
    granted: dict[str, int] = {}
    rotations: dict[str, list[tuple[int, dict]]] = {}
    for leaf, env in kept:
        p = env.get("payload") if isinstance(env.get("payload"), dict) else {}
        gid = p.get("grant_id")
        if not isinstance(gid, str):
            continue
        if env.get("kind") == "access.granted":
            granted.setdefault(gid, leaf)
        elif env.get("kind") == "access.credential_rotated":
            rotations.setdefault(gid, []).append((leaf, env))
    out = {gid: [(leaf, env, mark) for (leaf, env), mark in zip(items, rotation_marks(granted.get(gid), items, book,
                                                                                        origin))]
           for gid, items in rotations.items()}
    return granted, out


def check_rotations(by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> tuple[list[Problem], list[str]]:
    """Every ``access.credential_rotated`` of the system run must be signed as :mod:`sealbox.access` says
    (by an identity that was an enabled admin then, with its key then, over
    :func:`sealbox.access.rotation_fields` for this log's ``origin``, chained after the grant's previous
    valid rotation with the next ``seq``). Revocation ignores any other (docs/access.md, *Rotated refresh
    tokens*).

    Returns:
        Problems (``rotation_signature``: forged or altered; ``rotation_identity``: unknown or disabled
        signer; ``rotation_binding``: another store, replayed, out of order, a wrong ``seq``, or a rotation
        of no grant; ``rotation_rule``: a signer of another role, or another event principal) and notes for
        unsigned ones or ones signed with a key declared compromised. A malformed one is reported as
        ``event_malformed``.
    """
    if not by_kind.get("access.credential_rotated"):
        return [], []
    from sealbox.access import ROTATION_PROBLEMS

    granted, rotations = _rotations_by_grant(by_kind, origin)
    problems: list[Problem] = []
    notes: list[str] = []
    for gid, items in rotations.items():
        for leaf, env, mark in items:
            if mark in ("valid", "malformed"):
                continue
            p = env["payload"]
            what = f"the credential rotation {p.get('seq')!r} of grant {gid} at leaf {leaf} by {env.get('principal')!r}"
            if mark in ("unsigned", "compromised_key"):
                notes.append(f"{what} does not count: {ROTATION_PROBLEMS[mark]}; revocation ignores it (record the "
                             "rotation again with `sealbox access rotate ... --key-file KEY`)")
                continue
            why = ROTATION_PROBLEMS[mark] if gid in granted else "its grant is not in this log"
            problems.append(Problem(_ROTATION_CODES.get(mark, "rotation_rule"), f"{what} does not count: {why}",
                                    env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf))
    return problems, notes


def check_rotated_credentials(store: Any, by_kind: dict[str, list[tuple[int, dict]]], origin: str) -> list[Problem]:
    """For each grant whose credential the store still holds, each valid ``access.credential_rotated`` must
    have its stored credential (table ``credential_rotations``, that ``seq``), and the tokens stored must be
    those the event's ``fingerprints`` name (:func:`sealbox.access.token_fingerprint`): otherwise revocation
    would revoke and introspect another credential than the one recorded as live.

    Returns:
        ``rotation_credential_missing`` (the row of a valid rotation was deleted below Sealbox while the
        grant's other credentials remain) and ``rotation_credential_mismatch`` (the row does not decrypt,
        or holds other tokens).
    """
    if not by_kind.get("access.credential_rotated"):
        return []
    from sealbox.access import AccessError, _held_credentials, token_fingerprint

    _granted, rotations = _rotations_by_grant(by_kind, origin)
    problems: list[Problem] = []
    for gid, items in rotations.items():
        valid = [(leaf, env) for leaf, env, mark in items if mark == "valid"]
        if not valid:
            continue
        try:
            held = dict(_held_credentials(store, gid))
        except AccessError:  # a store without a secret holds no credential to check
            continue
        if not held:
            continue  # deleted with `access delete-credential`: nothing left to revoke with
        for leaf, env in valid:
            p = env["payload"]
            what = f"the credential rotation {p.get('seq')} of grant {gid} at leaf {leaf}"
            cred = held.get(p.get("seq"))
            if cred is None:
                problems.append(Problem("rotation_credential_missing", f"{what} has no stored credential (its row "
                                        "was deleted below Sealbox): a revocation would revoke an earlier one",
                                        env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf))
                continue
            if isinstance(cred, Exception):
                found = "a row that does not decrypt"
            else:
                wrong = [k for k, fp in p["fingerprints"].items() if getattr(cred, k, None) is None
                         or token_fingerprint(store, getattr(cred, k)) != fp]
                if not wrong:
                    continue
                found = "other tokens (" + ", ".join(wrong) + ")"
            problems.append(Problem("rotation_credential_mismatch", f"{what}: the stored credential holds {found} "
                                    "than the event's fingerprints name (changed below Sealbox)",
                                    env.get("run_id"), env.get("run_seq"), env.get("kind"), leaf))
    return problems


#: How many seconds a call's ``ts`` must lie past its grant's ``expires_at`` for verify to report the call
#: (:class:`CallGrantCheck`). The recorder compares the expiry with the store's clock (``reader.stamp``, the
#: ``ts`` the call's events get), so a call it lets through has a ``ts`` before the expiry; it used to read
#: ``datetime.now`` a little before the store took the ``ts``, so a call of a log written then, rightly let
#: through just before the expiry, can carry a ``ts`` just after it: this bounds that gap (and a forward step
#: of the clock within it) with a wide margin. A call that ran under a forged gate less than this long after
#: the expiry is not reported.
CALL_EXPIRY_TOLERANCE_S = 60

#: The kinds :class:`CallGrantCheck` reads.
CALL_GRANT_KINDS = frozenset({"identity.changed", "access.granted", "access.revoked", "tool.call", "policy.decision",
                              "approval.requested", "run.resumed"})

_CALL_GRANT_INVALID = ("the call was not denied, though its grant did not authorize it: {why} (the recorder denies "
                       "such a call grant_invalid: it was not recorded through Sealbox's grant check)")


def lets_through(decision: Any) -> bool:
    """Whether a ``policy.decision`` payload leaves its call among those that ran under a live Sealbox
    decision: not a deny, not an imported decision (reason code ``imported``: no Sealbox policy or grant
    check decided it) and not one served by a replay (``replayed``: it copies the recorded decision). A
    call ran when every decision recorded for it lets it through: its gate's (the ``policy.decision``
    written with its ``tool.call``) and any later re-evaluation's (on resumption, or before an
    outcome-unknown call is run again), which only ever deny."""
    return (type(decision) is dict and decision.get("effect") != "deny" and decision.get("reason_code") != "imported"
            and "replayed" not in decision)


#: The kinds :class:`CallStepCheck` reads.
CALL_STEP_KINDS = frozenset({"tool.call", "run.ended"})


class CallStepCheck:
    """``call_step_duplicate`` for each ``tool.call`` of a run that already has a ``tool.call`` at the same
    ``step``: replay keys each call by its step (docs/replay.md), so two calls at one step cannot be told
    apart, and the recorder and the gateway never write one (docs/gateway.md, *Steps of a joined call*:
    the step is taken in the write that records the call, by whichever writer of the run). A store
    that has one was written by a Sealbox before that check (two gateway processes, or a gateway
    and the driving process, given the same ``sealbox/step``), or changed below Sealbox. Shared by
    ``sealbox verify`` of a store and of an export bundle.

    Feed every envelope of :data:`CALL_STEP_KINDS` in leaf order (:meth:`add`), then read
    :attr:`problems`. Memory: the steps of the calls of each run until its ``run.ended`` (an event
    after it is ``chain_broken`` already).
    """

    def __init__(self) -> None:
        self._runs: dict[str, dict[str, tuple[int, Any, Any]]] = {}  # run -> step -> (leaf, run_seq, call_id)
        self.problems: list[Problem] = []

    def add(self, leaf_index: int, env: dict) -> None:
        """Read one validated envelope at ``leaf_index``; kinds other than :data:`CALL_STEP_KINDS` are ignored."""
        kind = env["kind"]
        if kind == "tool.call":
            steps = self._runs.get(env["run_id"])
            if steps is None:
                steps = self._runs[env["run_id"]] = {}
            step = env["step"]
            call_id = env["payload"].get("call_id")
            first = steps.get(step)
            if first is None:
                steps[step] = (leaf_index, env["run_seq"], call_id)
                return
            self.problems.append(Problem(
                "call_step_duplicate", f"a second tool call at step {step!r} of run {env['run_id']} (call "
                f"{call_id!r}; the first, call {first[2]!r}, is run_seq {first[1]} at leaf {first[0]}): replay "
                "cannot tell the two apart (two writers of the run took the same step: a Sealbox before "
                "2026-12-04, or a change below Sealbox)", env["run_id"], env["run_seq"], kind, leaf_index,
                expected=f"one tool.call at step {step!r}", found=f"tool.call at leaves {first[0]} and {leaf_index}"))
        elif kind == "run.ended":
            self._runs.pop(env["run_id"], None)


class CallGrantCheck:
    """``call_grant_invalid`` for each call that ran although the explicit grant it names did not
    authorize it at the call's leaf, as the recorder's grant check decides in the call's own write
    transaction (:func:`sealbox.access.grant_status`). Shared by ``sealbox verify`` of a store and of
    an export bundle (docs/access.md, *Verify: calls against their grants*).

    Feed every envelope of :data:`CALL_GRANT_KINDS` in leaf order (:meth:`add`), then read
    :meth:`finish`. A ``tool.call`` outside the system run naming a grant (not ``implicit:…``) is
    checked against what came before its leaf: the grant's first ``access.granted`` of the system run
    (recorded before the call; counting as :func:`sealbox.access.check_grant_payload` says, the
    identities as the log held them then: a call under an *unsigned* grant is left to that grant's
    note, as Sealbox wrote grants before 2026-12-03), no ``access.revoked`` step of the grant id in the
    system run at an earlier leaf (any step, signed or not: the recorder denies from the first, which
    is ``requested``), held by the call's principal, covering its ``server`` and ``tool``
    (``fnmatchcase`` globs), and not expired at the call's ``ts`` (RFC 3339; reported only
    :data:`CALL_EXPIRY_TOLERANCE_S` or more after ``expires_at``; an ``expires_at`` that is no time
    counts as passed). Such a call is reported unless a ``policy.decision`` of it (same run and
    ``call_id``, at a later leaf) does not :func:`let it through <lets_through>`.

    Memory: the grants (one tuple each), the first revocation step of each revoked grant id, the
    identities, and one entry per call it is going to report: a call is held from its ``tool.call``
    only when its grant did not authorize it, until a decision of it denies it (in a Sealbox log, the
    next event). Nothing is kept for a call its grant authorized, so a log of millions of calls costs
    no more than its grants.

    Args:
        origin: the log's origin (grants are signed for it).
        absent: report a call naming a grant that is nowhere in the events given (a store: ``there is
            no grant … in the log``); False for a bundle, which reports ``bundle_grant_missing`` instead.
    """

    def __init__(self, origin: str, *, absent: bool = True) -> None:
        from sealbox.identities import IdentityBook

        self.origin, self.absent = origin, absent
        self._book = IdentityBook()
        #: grant id -> (leaf, principal, server, tool, expires_at, expiry, problem, covers); expiry: None (no
        #: expiry), False (an expires_at that is no time), or (expires_at + the tolerance, as a datetime and
        #: as ``ts`` text): a call at or after it is reported; covers: the server and tool globs' matchers
        self._grants: dict[str, tuple] = {}
        self._revoked: dict[str, tuple[int, Any]] = {}  # grant id -> (leaf, step) of its first access.revoked
        #: (run_id, call_id) -> [(leaf, run_id, run_seq, grant id, why or None: no grant at the call's leaf)]
        self._held: dict[tuple[str, Any], list[tuple]] = {}
        self._tolerance = timedelta(seconds=CALL_EXPIRY_TOLERANCE_S)
        #: the last tool.call naming an explicit grant: (key, leaf, run_seq, grant id, principal, server, tool)
        self._last_call: tuple | None = None
        #: (run_id, call_id) -> that tuple, for each such call its gate left waiting for approval: the
        #: recorder checks its grant again when it resumes (sealbox.pause), and so does this
        self._waiting: dict[tuple[str, Any], tuple] = {}
        self._approval_of: dict[str, tuple[str, Any]] = {}  # approval id -> the waiting call's key

    @property
    def pending(self) -> int:
        """How many calls it holds (each one it will report unless a later decision denies it)."""
        return sum(map(len, self._held.values()))

    def add(self, leaf_index: int, env: dict) -> None:
        """Read one envelope (validated: :func:`sealbox.events.validate_envelope`) at ``leaf_index``;
        other kinds than :data:`CALL_GRANT_KINDS` are ignored."""
        kind = env["kind"]
        if kind == "tool.call":  # the most frequent: most name no grant (implicit:...), and cost one test
            gid = env["payload"].get("grant")
            if type(gid) is str and gid and env["run_id"] != SYSTEM_RUN_ID:
                if not gid.startswith("implicit:"):
                    self._call(leaf_index, env, gid)
                    p = env["payload"]
                    self._last_call = ((env["run_id"], p.get("call_id")), leaf_index, env.get("run_seq"), gid,
                                       env.get("principal"), p.get("server"), p.get("tool"))
                elif gid[9:] != env["principal"]:  # a principal holds only its own implicit grant
                    p = env["payload"]
                    self._held.setdefault((env["run_id"], p.get("call_id")), []).append(
                        (leaf_index, env["run_id"], env.get("run_seq"), gid,
                         f"{gid} is the implicit grant of {gid[9:]!r}, not of the call's principal "
                         f"{env['principal']!r}: a principal may name only its own"))
            return
        if kind == "policy.decision":
            if (self._held or self._last_call or self._waiting) and env["run_id"] != SYSTEM_RUN_ID:
                p = env["payload"]
                key = (env["run_id"], p.get("call_id"))
                if key in self._held and not lets_through(p):
                    del self._held[key]
                last, self._last_call = self._last_call, None
                if last is not None and last[0] == key and p.get("effect") == "require_approval":
                    self._waiting[key] = last  # its grant is checked again when it resumes
            return
        if kind == "approval.requested" or kind == "run.resumed":
            p = env["payload"]
            if not self._waiting or env["run_id"] == SYSTEM_RUN_ID or type(p) is not dict:
                return
            if kind == "approval.requested":
                key = (env["run_id"], p.get("call_id"))
                if key in self._waiting and type(p.get("approval_id")) is str:
                    self._approval_of[p["approval_id"]] = key
                return
            outcomes = p.get("outcomes")
            for aid, outcome in outcomes.items() if type(outcomes) is dict else ():
                key = self._approval_of.get(aid)
                if outcome == "approved" and key is not None and key[0] == env["run_id"]:
                    self._resumed(leaf_index, env, self._waiting[key])
            return
        p = env.get("payload")
        if env["run_id"] != SYSTEM_RUN_ID or type(p) is not dict:
            return
        if kind == "identity.changed":
            self._book.apply(leaf_index, p)
        elif kind == "access.granted":
            gid = p.get("grant_id")
            if type(gid) is str and gid not in self._grants:
                self._grants[gid] = self._grant(leaf_index, env, p)
        elif kind == "access.revoked":
            gid = p.get("grant_id")
            if type(gid) is str and gid not in self._revoked:
                self._revoked[gid] = (leaf_index, p.get("step"))

    def _grant(self, leaf_index: int, env: dict, p: dict) -> tuple:
        from sealbox.access import AccessError, _parse_time, check_grant_payload

        problem = check_grant_payload(p, leaf_index, env.get("principal"), self._book, self.origin)
        text = p.get("expires_at")
        expiry: Any = None  # see self._grants
        if text is not None:
            try:
                expires = _parse_time(text, "expires_at")
            except (AccessError, TypeError, AttributeError):
                expiry = False  # as Grant.expired: a time that is no time has passed
            else:
                try:
                    at = expires + self._tolerance
                except OverflowError:  # within the tolerance of the year 9999's end: no ts comes after it
                    at = None
                if at is not None:
                    expiry = (at, f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}:"
                                  f"{at.second:02d}.{at.microsecond:06d}Z")
        server, tool = p.get("server"), p.get("tool")
        covers = None  # matchers of the globs, compiled once (as fnmatchcase compiles them)
        if type(server) is str and type(tool) is str:
            covers = (re.compile(_translate(server)).match, re.compile(_translate(tool)).match)
        return (leaf_index, p.get("principal"), server, tool, text, expiry, problem, covers)

    def _call(self, leaf_index: int, env: dict, gid: str) -> None:
        p = env["payload"]
        grant = self._grants.get(gid)
        why = None if grant is None else self._why(gid, grant, env, p)
        if grant is not None and why is None:
            return
        self._held.setdefault((env["run_id"], p.get("call_id")), []).append(
            (leaf_index, env["run_id"], env.get("run_seq"), gid, why))

    def _resumed(self, leaf_index: int, env: dict, call: tuple) -> None:
        """The ``run.resumed`` at ``leaf_index`` let a call its gate left waiting run (outcome
        ``approved``): its grant must still authorize it there, as the recorder checks in the same
        transaction (``sealbox.pause``)."""
        key, call_leaf, run_seq, gid, principal, server, tool = call
        grant = self._grants.get(gid)
        if grant is None or key in self._held:  # absent, or already reported at its tool.call
            return
        why = self._why(gid, grant, {"principal": principal, "ts": env.get("ts")}, {"server": server, "tool": tool})
        if why is not None:
            self._held.setdefault(key, []).append(
                (call_leaf, key[0], run_seq, gid, f"{why}, checked again when the call resumed (run.resumed at leaf "
                                                  f"{leaf_index})"))

    def _why(self, gid: str, grant: tuple, env: dict, p: dict) -> str | None:
        """Why ``grant`` did not authorize this call at its leaf, or None (it did, or it is unsigned)."""
        _, principal, server, tool, text, expiry, problem, covers = grant
        if problem == "unsigned":
            return None  # noted with the grant: calls under unsigned grants were allowed before 2026-12-03
        if problem is not None:
            from sealbox.access import GRANT_PROBLEMS

            return f"grant {gid} does not count: {GRANT_PROBLEMS.get(problem, problem)}"
        revoked = self._revoked.get(gid)
        if revoked is not None:
            return f"grant {gid} was revoked before the call (access.revoked step {revoked[1]!r} at leaf {revoked[0]})"
        if env.get("principal") != principal:
            return f"grant {gid} is held by {principal}, not {env.get('principal')}"
        call_server, call_tool = p.get("server"), p.get("tool")
        if not (covers is not None and type(call_server) is str and type(call_tool) is str
                and covers[0](call_server) is not None and covers[1](call_tool) is not None):
            return f"grant {gid} covers {server}/{tool}, not {call_server}/{call_tool}"
        if expiry is False:
            return f"grant {gid} expires at {text}, which is no time: it counts as passed"
        if expiry is not None:
            ts = env.get("ts")
            # as Sealbox writes it (fixed width, UTC): compared as text with the expiry plus the tolerance
            late = (ts >= expiry[1] if type(ts) is str and len(ts) == 27 and _CANONICAL_TS(ts) is not None
                    else (at := _call_time(ts)) is not None and at >= expiry[0])
            if late:
                return f"grant {gid} expired at {text}, {CALL_EXPIRY_TOLERANCE_S} s or more before the call ({ts})"
        return None

    def finish(self) -> list[Problem]:
        """The ``call_grant_invalid`` problems, in leaf order."""
        out = []
        for held in self._held.values():
            for leaf_index, run_id, run_seq, gid, why in held:
                if why is None:
                    grant = self._grants.get(gid)
                    if grant is not None:
                        why = f"grant {gid} was recorded after the call (leaf {grant[0]})"
                    elif self.absent:
                        why = f"there is no grant {gid} in the log"
                    else:
                        continue  # a bundle reports it as bundle_grant_missing
                out.append(Problem("call_grant_invalid", _CALL_GRANT_INVALID.format(why=why), run_id, run_seq,
                                   "tool.call", leaf_index))
        return sorted(out, key=lambda p: p.leaf_index or 0)


_CANONICAL_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z").fullmatch


def _call_time(ts: Any) -> Any:
    """An event's ``ts`` as an aware datetime, or None when it is no time (then no expiry is claimed)."""
    from sealbox.access import AccessError, _parse_time

    try:
        return _parse_time(ts, "ts")
    except (AccessError, TypeError, AttributeError):
        return None


def _late_answer(request: dict, answer: dict, ts: Any = None) -> bool:
    """Whether an answer's own time, or its event's ``ts`` (the store's clock), is at or after its
    request's ``expires_at`` (as evaluate() counts it)."""
    from sealbox.approvals import _late, _parse

    try:
        expires = _parse(request["expires_at"]) if request.get("expires_at") else None
    except (TypeError, ValueError, AttributeError):
        return False  # a malformed request: reported by its schema check, never approved
    return _late(answer, expires, ts)


def _quorum(request: dict) -> int:
    q = request.get("quorum", 1)
    return q if isinstance(q, int) and not isinstance(q, bool) else 1


def check_run_rows(rows: Iterable[tuple], starts: list[tuple[int, dict]]) -> list[Problem]:
    """The runs table (what ``runs list`` shows) must say what each ``run.started`` says."""
    want = {env["run_id"]: (env["run_id"], env["payload"].get("agent"), env["principal"],
                            env["payload"].get("parent_run_id"), env["payload"].get("replay_of"),
                            env["payload"].get("snapshot"), env["ts"], leaf)
            for leaf, env in starts}
    problems, seen = [], set()
    for row in rows:
        row = tuple(row)
        seen.add(row[0])
        expected = want.get(row[0])
        if expected is None:
            problems.append(Problem("run_row_extra", f"the runs table lists {row[0]}, which has no run.started event "
                                    "in the log", run_id=row[0], found=repr(row)))
        elif expected != row:
            problems.append(Problem("run_row_mismatch", f"the runs table's row for {row[0]} disagrees with its "
                                    "run.started event", run_id=row[0], expected=repr(expected), found=repr(row)))
    for run_id in sorted(set(want) - seen):
        problems.append(Problem("run_row_missing", f"run {run_id} has no row in the runs table (it would not be "
                                "listed)", run_id=run_id, leaf_index=want[run_id][-1]))
    return problems


def check_snapshots(rows: Iterable[tuple[str, bytes]], starts: list[tuple[int, dict]]) -> list[Problem]:
    """Every stored snapshot must hash to its fingerprint; every run's snapshot must be stored."""
    import hashlib

    problems, present = [], set()
    for fp, content in rows:
        present.add(fp)
        found = "sha256:" + hashlib.sha256(content).hexdigest()
        if found != fp:
            problems.append(Problem("snapshot_mismatch", f"snapshot {fp} does not hash to its fingerprint "
                                    "(the configuration a run is pinned to was changed)", expected=fp, found=found))
    for leaf_index, env in starts:
        fp = env["payload"].get("snapshot")
        if fp and fp not in present:
            problems.append(Problem("snapshot_missing", f"run {env['run_id']} names snapshot {fp}, which is not stored",
                                    env["run_id"], env["run_seq"], env["kind"], leaf_index))
    return problems


class _NodeChecker:
    """Compares the store's tree nodes with the recomputed ones as they complete.

    One cursor per level, each in index order, merged with the stream of
    completed subtrees: O(log n) memory and one pass over the nodes table.

    The completed subtrees are gathered in windows of :data:`_NODE_WINDOW` leaves.
    A window whose nodes equal the next stored rows of each level, one for one,
    is accepted in bulk; any other window is replayed node by node in the order
    the nodes completed, reporting exactly what a node-by-node check reports.

    Subtrees below the store's ``stored_node_level`` (the leaves among them) are not
    stored: the store computes them from the leaves' ``leaf_hash``, which the event
    checks compare with the recomputed ones. Stores written before 2026-12 also hold
    rows of those levels; the rows present must equal the recomputed nodes
    (:meth:`_check_optional`), and none is expected past them.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self.problems: list[Problem] = []
        self._min_level = int(getattr(store, "stored_node_level", 0))
        self._present: set[int] | None = None  # levels below _min_level that hold rows (read once)
        self._cursors: dict[int, Any] = {}
        self._buf: dict[int, list] = {}  # level -> stored rows read ahead
        self._pos: dict[int, int] = {}  # level -> index in _buf of the next stored row
        self._window: list[list[tuple[int, int, bytes]]] = []

    def _fill(self, level: int, want: int) -> list:
        """The read-ahead rows of ``level``, holding at least ``want`` rows from the next
        one unless the level runs out; its position is reset to 0."""
        cursor = self._cursors.get(level)
        if cursor is None:
            cursor = self._cursors[level] = iter(self.store.iter_level(level))
            self._buf[level], self._pos[level] = [], 0
        buf, pos = self._buf[level], self._pos[level]
        if pos:
            del buf[:pos]
            self._pos[level] = 0
        if len(buf) < want:
            buf.extend(islice(cursor, max(want - len(buf), _NODE_WINDOW)))
        return buf

    def _peek(self, level: int) -> tuple[int, bytes] | None:
        buf, pos = self._buf.get(level), self._pos.get(level, 0)
        if buf is None or pos >= len(buf):
            buf = self._fill(level, 1)
            pos = 0
        return buf[pos] if pos < len(buf) else None

    def _advance(self, level: int) -> tuple[int, bytes] | None:
        self._peek(level)  # the row being passed is read first
        if self._pos[level] < len(self._buf[level]):
            self._pos[level] += 1
        return self._peek(level)

    def check_levels(self, levels: dict[int, tuple[int, list[bytes]]], start: int, count: int) -> None:
        """Compare the full subtrees leaves ``start`` to ``start + count - 1`` completed, given
        level by level (:meth:`_BatchTree.extend`); the same as :meth:`check` leaf after leaf."""
        self._flush()
        low = self._min_level
        for level, (first, hashes) in levels.items():
            if level < low:
                self._check_optional(level, first, hashes)
        pairs = {level: list(zip(range(first, first + len(hashes)), hashes))
                 for level, (first, hashes) in levels.items() if level >= low}
        for level, want in pairs.items():
            if self._fill(level, len(want))[:len(want)] != want:
                break
        else:  # every node equals the stored row it meets: nothing to report
            for level, want in pairs.items():
                self._pos[level] = len(want)
            return
        for i in range(start, start + count):
            self._check_one(_completed(levels, i))

    def check(self, completed: list[tuple[int, int, bytes]]) -> None:
        """Compare the full subtrees one appended leaf completed."""
        self._window.append(completed)
        if len(self._window) >= _NODE_WINDOW:
            self._flush()

    __call__ = check  # an on_nodes callback; EventVerifier.add_rows uses check_levels

    def _flush(self) -> None:
        window, self._window = self._window, []
        if not window:
            return
        by_level: dict[int, list] = {}
        for completed in window:
            for level, idx, want in completed:
                pairs = by_level.get(level)
                if pairs is None:
                    pairs = by_level[level] = []
                pairs.append((idx, want))
        for level in [lv for lv in by_level if lv < self._min_level]:
            pairs = by_level.pop(level)  # consecutive indices: leaves arrive in order
            self._check_optional(level, pairs[0][0], [want for _, want in pairs])
        for level, pairs in by_level.items():
            buf = self._fill(level, len(pairs))
            if buf[:len(pairs)] != pairs:
                break
        else:  # every node equals the stored row it meets: nothing to report
            for level, pairs in by_level.items():
                self._pos[level] = len(pairs)
            return
        for completed in window:
            self._check_one(completed)

    def _int_levels(self) -> list[int]:
        return [lv for lv in self.store.node_levels() if type(lv) is int]

    def _odd_levels(self) -> list[Any]:
        return sorted((lv for lv in self.store.node_levels() if type(lv) is not int), key=repr)

    def _check_optional(self, level: int, first: int, hashes: list[bytes]) -> None:
        """Rows of a level the store no longer writes (below ``stored_node_level``), nodes
        ``first`` .. ``first + len(hashes) - 1``, where the store holds any (written before
        2026-12): each must equal its recomputed node; absent ones are not missing."""
        if self._present is None:
            self._present = {lv for lv in self._int_levels() if lv < self._min_level}
        if level not in self._present:
            return
        end = first + len(hashes)
        buf = self._fill(level, len(hashes))
        if buf[:len(hashes)] == list(zip(range(first, end), hashes)):
            self._pos[level] = len(hashes)
            return
        stored = self._peek(level)
        while stored is not None and stored[0] < end:
            idx = stored[0]
            if type(idx) is not int:
                self.problems.append(Problem("tree_node_extra", f"tree node ({level}, {idx!r}) has an index that "
                                             "is not an integer (a row changed below Sealbox)"))
            elif idx < first:
                self.problems.append(Problem("tree_node_extra", f"tree node ({level}, {idx}) covers leaves "
                                             "that are not in the log"))
            elif _as_blob(stored[1]) != hashes[idx - first]:
                self.problems.append(Problem(
                    "tree_node_mismatch", f"stored tree node ({level}, {idx}) differs from the recomputed one "
                    "(a row of a level this store no longer writes or reads)",
                    expected="sha256:" + hashes[idx - first].hex(), found="sha256:" + _as_blob(stored[1]).hex(),
                ))
            stored = self._advance(level)

    def _check_one(self, completed: list[tuple[int, int, bytes]]) -> None:
        for level, idx, want in completed:
            if level < self._min_level:  # not stored: _check_optional
                continue
            stored = self._peek(level)
            while stored is not None and stored[0] < idx:  # a node for a leaf that is gone
                self.problems.append(Problem("tree_node_extra", f"tree node ({level}, {stored[0]}) covers leaves "
                                             "that are not in the log"))
                stored = self._advance(level)
            if stored is None or stored[0] != idx:
                self.problems.append(Problem("tree_node_missing", f"tree node ({level}, {idx}) is not stored"))
                continue
            self._advance(level)
            if _as_blob(stored[1]) != want:
                self.problems.append(Problem(
                    "tree_node_mismatch", f"stored tree node ({level}, {idx}) differs from the recomputed one "
                    "(proofs served by this store would be wrong)",
                    expected="sha256:" + want.hex(), found="sha256:" + _as_blob(stored[1]).hex(),
                ))

    def finish(self) -> list[Problem]:
        """Report stored nodes left over: they cover leaves beyond the log.

        Node problems follow from event problems (one missing event changes every
        node above it), so at most :data:`MAX_NODE_PROBLEMS` are listed, then a count.
        """
        self._flush()
        for level in self._odd_levels():
            self.problems.append(Problem("tree_node_extra", f"tree_nodes holds rows at level {level!r}, which is "
                                         "not a tree level (a row changed below Sealbox)"))
        for level in sorted(set(self._cursors) | set(self._int_levels())):
            stored = self._peek(level)
            while stored is not None:
                self.problems.append(Problem("tree_node_extra", f"tree node ({level}, {stored[0]}) covers leaves beyond the log"))
                stored = self._advance(level)
        if len(self.problems) > MAX_NODE_PROBLEMS:
            more = len(self.problems) - MAX_NODE_PROBLEMS
            self.problems = self.problems[:MAX_NODE_PROBLEMS] + [Problem(
                "tree_nodes_more", f"and {more} more stored tree nodes that differ from the recomputed tree "
                "(they follow from the problems above)")]
        return self.problems


#: Leaves whose completed subtrees :class:`_NodeChecker` compares in one go.
_NODE_WINDOW = 1024

#: At most this many tree-node problems are listed one by one.
MAX_NODE_PROBLEMS = 25
