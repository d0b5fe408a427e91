"""The Store protocol and the ledger logic every backend shares.

A store only appends: there are methods to append events, read them, query
them, prove them and checkpoint them, and none to update or delete. The logic
that turns an :class:`~sealbox.events.EventDraft` into hashed bytes, chains it
to its run and extends the Merkle tree lives here, once; a backend supplies a
:class:`WriteTxn` (a handful of primitive reads and inserts inside one write
transaction) and the read methods.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import secrets as _secrets
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

from sealbox import blobs as _blobs
from sealbox.canonical import MAX_DEPTH, _encode_noting_floats, canonical_bytes_encoded
from sealbox.errors import CanonicalizationError, ConfigError, InvalidEventError, StoreError, StoreRolledBackError
from sealbox.events import (
    content_fields,
    derived_columns,
    RECORD_VERSION,
    Event,
    EventDraft,
    check_step,
    validate_payload,
)
from sealbox.ledger import merkle
from sealbox.redaction import own_values

__all__ = [
    "Store",
    "WriteTxn",
    "StoredCheckpoint",
    "CheckpointPolicy",
    "StoreConfigError",
    "Durability",
    "DamagedEventError",
    "EventBuilder",
    "new_run_id",
    "utc_now",
    "hash_tag",
    "hash_untag",
]

Durability = str  # "full" (fsync every commit) or "fast" (synchronous=NORMAL)

#: Content fields always kept as one blob reference, whatever their size: a
#: decision's inputs are evidence an auditor re-runs as a whole.
ALWAYS_BLOB = frozenset({"inputs"})


class DamagedEventError(StoreError):
    """A stored event cannot be read as a Sealbox event (its bytes, or its stored leaf hash, were
    changed below Sealbox). The message names the leaf and says to run ``sealbox verify``, which
    reports the change; ``leaf_index`` is None when the damaged row could not be located."""

    def __init__(self, message: str, leaf_index: int | None = None) -> None:
        super().__init__(message)
        self.leaf_index = leaf_index


def utc_now() -> str:
    """The current UTC time as RFC 3339 with microseconds, e.g. ``2026-11-29T16:52:00.123456Z``.

    The text up to the second is formatted once per second and kept (three times faster)."""
    micros = time.time_ns() // 1000
    seconds, fraction = divmod(micros, 1_000_000)
    cached = _UTC_SECOND
    if cached[0] != seconds:
        cached = (seconds, datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S."))
        globals()["_UTC_SECOND"] = cached  # one tuple, replaced whole: safe across threads
    return f"{cached[1]}{fraction:06d}Z"


_UTC_SECOND: tuple[int, str] = (-1, "")


def new_run_id() -> str:
    """A new run id: time-ordered (48-bit milliseconds) then 80 random bits, as a UUID string."""
    ms = time.time_ns() // 1_000_000
    raw = ms.to_bytes(6, "big") + _secrets.token_bytes(10)
    b = bytearray(raw)
    b[6] = (b[6] & 0x0F) | 0x70  # version 7 layout (RFC 9562 §5.7)
    b[8] = (b[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(b)))


def hash_tag(digest: bytes) -> str:
    """``sha256:<hex>`` of a raw 32-byte digest."""
    return "sha256:" + digest.hex()


def hash_untag(tagged: str) -> bytes:
    """The raw digest of a ``sha256:<hex>`` string."""
    return bytes.fromhex(tagged[7:])


@dataclass(frozen=True)
class StoredCheckpoint:
    """A signed checkpoint kept by the store.

    Attributes:
        tree_size: number of leaves it commits to.
        root_hash: 32-byte RFC 9162 root of the first ``tree_size`` leaves.
        note: the C2SP signed note (tlog-checkpoint body plus signature lines).
        created_at: RFC 3339 UTC time it was signed.
    """

    tree_size: int
    root_hash: bytes
    note: str
    created_at: str


class StoreConfigError(ConfigError, ValueError):
    """A store option is invalid (a :class:`CheckpointPolicy` field, a negative ``lock_timeout``).
    Raised before anything is opened or written."""


@dataclass(frozen=True)
class CheckpointPolicy:
    """When the store signs a checkpoint: every ``every_events`` events or
    ``every_seconds`` seconds (whichever first), and on clean close.

    ``every_seconds`` is kept even while the store is idle: a store opened for
    writing signs the events its process appended within about ``every_seconds``
    of the first unsigned one, from a background thread, without waiting for the
    next append or for close (see docs/storage.md, "Checkpoints").

    Attributes:
        every_events: an integer >= 1, or None (no count trigger).
        every_seconds: a finite number > 0, or None (no time trigger).

    Raises:
        StoreConfigError: a field outside those ranges (e.g. 0, a negative number, NaN,
            infinity, a bool or a string).
    """

    every_events: int | None = 1000
    every_seconds: float | None = 60.0

    def __post_init__(self) -> None:
        ev, sec = self.every_events, self.every_seconds
        if ev is not None and (type(ev) is not int or ev < 1):
            raise StoreConfigError(f"CheckpointPolicy.every_events must be an integer >= 1 or None, not {ev!r}")
        if sec is not None and (isinstance(sec, bool) or not isinstance(sec, (int, float))
                                or not math.isfinite(sec) or sec <= 0):
            raise StoreConfigError(
                f"CheckpointPolicy.every_seconds must be a finite number > 0 or None, not {sec!r}")


class WriteTxn(Protocol):
    """Primitive operations inside one serialised write transaction."""

    def run_head(self, run_id: str) -> tuple[int, bytes, str] | None:
        """(run_seq, leaf_hash, kind) of the run's last event, or None."""

    def tree_size(self) -> int:
        """Number of events in the log."""

    def get_node(self, level: int, index: int) -> bytes:
        """A full-subtree hash (see :mod:`sealbox.ledger.merkle`)."""

    def insert_event(self, row: tuple) -> None:
        """Insert (leaf_index, run_id, run_seq, kind, ts, principal, step, server, tool, call_id, effect, ok, tokens, cost,
        rule, reason_code, duration_us, raw, leaf_hash)."""

    def insert_nodes(self, rows: list[tuple[int, int, bytes]]) -> None:
        """Insert tree nodes (level, idx, hash)."""

    def put_blob(self, ref: str, salt: bytes, content: bytes) -> None:
        """Insert a blob unless one with that commitment exists."""

    def insert_run(self, row: tuple) -> None:
        """Insert (run_id, agent, principal, parent_run_id, replay_of, snapshot, started_at, leaf_index)."""

    def latest_checkpoint_size(self) -> int:
        """tree_size of the newest checkpoint in the store, 0 if none."""


#: Payload fields holding identifiers that a store keeps in text columns (a run's agent, parent and
#: replayed run; a call's server, tool and call id; a decision's effect, rule and reason code).
_IDENTIFIER_FIELDS = ("agent", "parent_run_id", "replay_of", "server", "tool", "call_id", "effect", "rule", "reason_code")


def _refuse_nul(draft: EventDraft, payload: dict[str, Any]) -> None:
    """Refuse a NUL character (``\\x00``) in an identifier the stores keep in text columns: the
    event's run id and principal and the payload's :data:`_IDENTIFIER_FIELDS`. PostgreSQL text cannot
    hold one, so every backend refuses it before anything is written (SQLite recorded it). What only
    the hashed bytes hold is canonical JSON, where NUL is ``\\u0000``, and is kept on every backend:
    content (arguments, results, messages, a note's text) and a run's labels.

    Raises:
        InvalidEventError: naming the field and the value.
    """
    found = None
    if "\x00" in draft.run_id:
        found = f"run_id {draft.run_id!r}"
    elif "\x00" in draft.principal:
        found = f"principal {draft.principal!r}"
    else:
        for name in _IDENTIFIER_FIELDS:
            value = payload.get(name)
            if type(value) is str and "\x00" in value:
                found = f"{draft.kind}: {name} {value!r}"
                break
    if found is not None:
        raise InvalidEventError(f"{found} holds a NUL character (\\x00), which an identifier in the record cannot "
                                "hold (PostgreSQL text cannot): nothing was written")


class EventBuilder:
    """Turns drafts into placed events inside a write transaction.

    Shared by every backend, so that the hashed bytes, the chain and the tree
    are built the same way whatever the store.
    """

    def __init__(self, secret: bytes, inline_limit: int = _blobs.INLINE_LIMIT, content: Any = None) -> None:
        from sealbox.redaction import ContentPolicy, Redactor

        self._secret = secret
        self._limit = inline_limit
        self.redactor = Redactor(secret, content or ContentPolicy())

    def prepare(self, draft: EventDraft, txn: WriteTxn) -> dict[str, Any]:
        """Encode and validate a draft's payload; move large content to blobs.

        Raises:
            InvalidEventError: unknown kind, wrong shape, or bad step/run id.
        """
        return self._prepare(draft, txn)[0]

    def _prepare(self, draft: EventDraft, txn: WriteTxn) -> tuple[dict[str, Any], bool, bool]:
        """:meth:`prepare`, whether the payload may hold a float, and whether it is still bounded
        (for canonical_bytes_encoded): escaping a user's tag-like dict adds a level, so a payload
        with an escape is depth-checked again when encoded."""
        if not isinstance(draft, EventDraft):
            raise InvalidEventError(f"expected an EventDraft, got {type(draft).__name__}")
        if not isinstance(draft.payload, dict):
            raise InvalidEventError(f"{draft.kind}: payload must be a dict, got {type(draft.payload).__name__}")
        if not isinstance(draft.run_id, str) or not draft.run_id or len(draft.run_id) > 128:
            raise InvalidEventError(f"run_id must be a non-empty string of at most 128 characters, got {draft.run_id!r}")
        if not isinstance(draft.principal, str) or not draft.principal:
            raise InvalidEventError(f"principal must be a non-empty string, got {draft.principal!r}")
        if draft.step is not None:
            check_step(draft.step)
        payload, floats = _encode_noting_floats(draft.payload, max_depth=MAX_DEPTH - 2)  # room: envelope, marker
        if type(payload) is not dict:
            raise InvalidEventError(f"{draft.kind}: payload keys must be strings")
        bounded = True  # encode() bounded the payload; an escape below adds levels
        content = content_fields(draft.kind, payload)
        for name, value in payload.items():  # free-form fields other than content: the store writes no tag there
            if (type(value) is dict or type(value) is list) and name not in content:
                escaped = _store_tags_escaped(value)
                if escaped is not value:
                    payload[name] = escaped  # (same key: the dict's size does not change while iterating)
                    bounded = False
        validate_payload(draft.kind, payload)
        _refuse_nul(draft, payload)
        put = lambda data: self._put(txn, data)  # noqa: E731
        fields: list[tuple[str, Any, bytes, Any]] = []  # (name, value, its bytes, as redacted)
        own: list[str] = []  # the secret values redacted from this event itself
        for name in content:
            if name in payload:
                value = payload[name]
                data = canonical_bytes_encoded(value, floats=floats, finite=True, bounded=bounded)  # once: the redaction check, the size
                if 0x24 in data and (data.find(b'"$blob"') != -1 or data.find(b'"$cons"') != -1  # 0x24: "$" (an int: no
                                     or data.find(b'"$redacted"') != -1):  # TypeError made as ``b"$" in`` does)
                    escaped = _store_tags_escaped(value)
                    if escaped is not value:  # {"$esc": ...} adds levels: the depth is checked again from here
                        bounded = False
                        try:
                            value, data = escaped, canonical_bytes_encoded(escaped, floats=floats, finite=True)
                        except CanonicalizationError as exc:
                            raise InvalidEventError(f"{draft.kind}: {exc}") from exc
                redacted = self._redact(name, value, data)
                if redacted is not value:
                    _note_redacted(self.redactor, value, redacted, name, data)
                    if self.redactor.policy.mode == "redacted":
                        own.extend(own_values(value, redacted, keys=self.redactor.key_names))
                fields.append((name, value, data, redacted))
        if own:  # the event itself is scrubbed of them, wherever it keeps them in clear
            own = sorted(set(own), key=lambda v: (-len(v), v))
            fields = [(name, value, data, self.redactor.scrub_values_in(redacted, own)[0])
                      for name, value, data, redacted in fields]
        for name, value, data, redacted in fields:
            if name in ALWAYS_BLOB and redacted is value and len(data) <= self._limit:
                payload[name] = {"$blob": put(data)}  # what the two steps below give, its bytes written once
                continue
            payload[name] = _blobs.blobify(redacted, put, self._limit, data if redacted is value else None)
            if name in ALWAYS_BLOB and not _blobs.is_blob_ref(payload[name]):
                payload[name] = {"$blob": put(canonical_bytes_encoded(payload[name], floats=floats, finite=True, bounded=bounded))}
        if type(payload.get("error")) is dict:  # exception messages can carry secrets too
            payload["error"] = self.redactor.apply_error(payload["error"])
            if own:
                payload["error"] = {k: self.redactor.scrub_values(v, own) if type(v) is str and k != "type" else v
                                    for k, v in payload["error"].items()}
        if draft.kind == "state.saved" and type(payload.get("label")) is str:  # the caller's words: patterns apply
            # and the state's secrets (a key-named value) are taken out of it: {"password": K} labelled "K"
            secrets = own if self.redactor.policy.mode == "redacted" else [
                v for name, value, _data, _redacted in fields if name == "state"
                for v in self.redactor.secret_values(name, value)] if payload["label"] else []
            payload["label"] = self.redactor.scrub_label(payload["label"], secrets)
        if draft.kind == "run.started" and type(payload.get("labels")) is dict:  # the caller's words, shown by
            # runs list: a secret-named label's value, and what a pattern finds, are not kept in clear
            labels = payload["labels"]
            payload["labels"] = self.redactor.redact_labels(labels)
            if payload["labels"] is not labels and _REDACTED_INTO.get() is not None:  # the recorder learns the
                # secret-named values: scrubbed from the run's later content, notes and error texts
                _REDACTED_INTO.get().update(self.redactor.label_secrets(labels))
        if draft.kind == "note":  # a note's text and detail are the caller's words: redacted like content
            if "about" in content:  # its about redacted above, as content: the text as redact_note does
                payload.update(redact_note(self.redactor, {"text": payload["text"]}, own))
            else:
                payload.update(redact_note(self.redactor, payload))
        return payload, floats, bounded  # redaction markers, blob references and $esc add no float

    def _redact(self, name: str, value: Any, data: bytes | None = None) -> Any:
        """Apply the store's content mode; decision inputs' arguments are redacted as ``arguments``.

        Returns ``value`` itself (the same object) when nothing was redacted."""
        if (name == "inputs" and type(value) is dict and "arguments" in value and self.redactor.policy.mode == "redacted"
                and not self.redactor.surely_clean(value, data)):  # clean as a whole: its arguments are too
            args, changed = self.redactor.apply("arguments", value["arguments"])
            if changed:
                value = dict(value)
                value["arguments"] = args
                data = None
        out, changed = self.redactor.apply(name, value, data)
        return out if changed else value

    def _put(self, txn: WriteTxn, content: bytes) -> str:
        salt = _blobs.salt_for(self._secret, content)
        ref = _blobs.commitment(salt, content)
        txn.put_blob(ref, salt, content)
        return ref

    def place(self, draft: EventDraft, payload: dict[str, Any], txn: WriteTxn, ts: str, *, floats: bool = True,
              bounded: bool = False) -> Event:
        """Chain the event to its run, hash it and extend the Merkle tree.

        ``floats``: False where :meth:`_prepare` found that ``payload`` holds no float;
        ``bounded``: True where it found the payload still within :data:`MAX_DEPTH` less the envelope.

        Raises:
            InvalidEventError: the run has not started, or has ended.
        """
        head = txn.run_head(draft.run_id)
        _check_run_order(draft, head)
        run_seq = 1 if head is None else head[0] + 1
        prev = None if head is None else "sha256:" + head[1].hex()  # hash_tag, written out (a call less an event)
        envelope = {
            "v": RECORD_VERSION, "run_id": draft.run_id, "run_seq": run_seq,
            "step": draft.step if draft.step is not None else str(run_seq),
            "kind": draft.kind, "ts": ts, "principal": draft.principal,
            "payload": payload, "prev": prev,
        }
        try:
            raw = canonical_bytes_encoded(envelope, floats=floats, finite=True, bounded=bounded)
        except CanonicalizationError as exc:  # too deep once a tag-like dict was escaped
            raise InvalidEventError(f"{draft.kind}: {exc}") from exc
        index = txn.tree_size()
        leaf = merkle.leaf_hash(raw)
        txn.insert_event((
            index, draft.run_id, run_seq, draft.kind, ts, draft.principal, envelope["step"],
            *derived_columns(draft.kind, payload), raw, leaf,
        ))
        txn.insert_nodes(merkle.new_nodes_for_append(index, leaf, txn.get_node))
        if draft.kind == "run.started":
            txn.insert_run((
                draft.run_id, str(payload["agent"]), draft.principal, payload.get("parent_run_id"),
                payload.get("replay_of"), payload.get("snapshot"), ts, index,
            ))
        return _new_event(
            leaf_index=index, leaf_hash="sha256:" + leaf.hex(), raw=raw, v=RECORD_VERSION,
            run_id=draft.run_id, run_seq=run_seq, step=envelope["step"], kind=draft.kind,
            ts=ts, principal=draft.principal, payload=payload, prev=prev,
        )

    @staticmethod
    def clock() -> str:
        """The store's clock: the time (RFC 3339 UTC, microseconds) stamped as the ``ts`` of the events
        it places. :meth:`SqliteStore.append_with` reads it once when its write transaction begins and
        hands it to ``build`` as ``reader.stamp``, so what ``build`` decides by time (an approval's
        answer and expiry) is decided at the very ``ts`` its events get."""
        return utc_now()

    def build(self, drafts: Sequence[EventDraft], txn: WriteTxn, floor: int, ts: str | None = None) -> list[Event]:
        """Prepare and place every draft in order (one transaction, all or nothing).

        Args:
            floor: the newest signed checkpoint's size known to the caller; a log
                smaller than this was rolled back and must not be extended.
            ts: the ``ts`` of every event placed (default: :meth:`clock` now).

        Raises:
            StoreRolledBackError: the log holds fewer events than a signed checkpoint.
            InvalidEventError: a draft is invalid (nothing is written).
        """
        size = txn.tree_size()
        newest = max(floor, txn.latest_checkpoint_size())
        if size < newest:
            raise StoreRolledBackError(
                f"the store holds {size} events but its newest signed checkpoint covers {newest}: "
                "it was restored from a backup or lost writes; refusing to append (that would fork the log)"
            )
        ts = ts or utc_now()
        placed = []
        for draft in drafts:
            payload, floats, bounded = self._prepare(draft, txn)
            placed.append(self.place(draft, payload, txn, ts, floats=floats, bounded=bounded))
        return placed


def redact_note(redactor: Any, payload: dict[str, Any], own: "list[str] | None" = None) -> dict[str, Any]:
    """A ``note`` payload's ``text`` and ``about`` as the store keeps them: the text as an error
    message is (patterns replaced in ``redacted`` mode, an HMAC marker in ``hashes-only``), and
    ``about`` as a content field (key names, paths and patterns; root ``about``). Replay applies
    the same to the notes it compares (:func:`sealbox.replay.keys.attempted_view`). ``own``: values
    redacted elsewhere from the event (``redacted`` mode), scrubbed from the text too."""
    out: dict[str, Any] = {}
    if type(payload.get("text")) is str:
        out["text"] = redactor.apply_error({"message": payload["text"]})["message"]
        if own:
            out["text"] = redactor.scrub_values(out["text"], own)
    if "about" in payload:  # a store-only tag in it is the caller's data: escaped, as the store does
        about = _store_tags_escaped(payload["about"])
        out["about"], changed = redactor.apply("about", about)
        if changed:
            _note_redacted(redactor, about, out["about"], "about")
            own = own_values(about, out["about"], keys=redactor.key_names) if redactor.policy.mode == "redacted" else []
            if own:  # the note itself is scrubbed of them: "key K" beside {"api_key": K}
                out["about"] = redactor.scrub_values_in(out["about"], own)[0]
                if "text" in out:
                    out["text"] = redactor.scrub_values(out["text"], own)
    return out


#: Where the strings redaction takes out of content go while :func:`noting_redacted` is in force.
_REDACTED_INTO: contextvars.ContextVar["set[str] | None"] = contextvars.ContextVar("sealbox_redacted_into",
                                                                                    default=None)


@contextlib.contextmanager
def noting_redacted(sink: "set[str]") -> Iterator["set[str]"]:
    """While in force (in this thread or task), every string that the store's ``redacted`` mode takes
    out of a content field or a note's ``about`` by a sensitive key name or a configured path (at
    least 4 characters, as ``Redactor.removed_strings`` lists them; in ``hashes-only`` mode, the
    strings that mode would take out, ``Redactor.secret_values``) is added to ``sink``: the
    recorder learns what a run has redacted (from results, model calls, state…) without a walk of
    its own; nothing is done, at no cost, for content nothing was redacted from."""
    token = _REDACTED_INTO.set(sink)
    try:
        yield sink
    finally:
        _REDACTED_INTO.reset(token)


def _note_redacted(redactor: Any, before: Any, after: Any, name: str, data: bytes | None = None) -> None:
    sink = _REDACTED_INTO.get()
    if sink is None:
        return
    mode = redactor.policy.mode
    if mode == "redacted":
        from sealbox.redaction import _removed_from

        sink.update(_removed_from(before, after, 4, redactor.key_names))
    elif mode == "hashes-only" and not redactor.surely_clean(before, data):
        # the whole field is one marker, but the values a key name or path would take out of it are
        # still kept out of a readable name the run writes later (a state label)
        sink.update(redactor.secret_values(name, before))


def _new_event(**fields: Any) -> Event:
    """``Event(**fields)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__``
    per field: 2 µs an event); the same instance, equal and frozen as ever. ``fields`` must be
    exactly Event's fields (a test checks the two constructions agree)."""
    event = _object_new(Event)
    event.__dict__.update(fields)
    return event


_object_new = object.__new__


#: Tags only the store writes: ``$blob`` references and ``$cons`` list chains (sealbox.blobs) and
#: ``$redacted`` markers (sealbox.redaction). In a value given to be recorded they are data.
_STORE_TAGS = ("$blob", "$cons", "$redacted")


def _store_tags_escaped(value: Any) -> Any:
    """``value`` with every one-key ``{"$blob" | "$cons" | "$redacted": ...}`` escaped as user data
    (``{"$esc": {...}}``, which decodes to a plain dict).

    Content given to be recorded comes from tools, models and agents: a ``Tagged("$blob", ref)``
    there (or a decoded record passed along) kept as a tag would make the run reference (and its
    export carry) a blob it never produced, or ``verify`` report one missing; a ``$cons`` would be
    read as a list chain. The store adds its own tags after this. The same holds for every other
    free-form payload field (``note.about``, ``tools.changed.added``, ``access.granted.scope``,
    ``labels``, an ``error`` …): the store writes no tag there at all, so each is escaped before
    the payload is validated. Returns ``value`` itself when nothing changed.
    """
    if type(value) is dict:
        if len(value) == 1:
            (key, inner), = value.items()
            if key in _STORE_TAGS:
                return {_blobs.ESC_TAG: {key: _store_tags_escaped(inner)}}
            if key == _blobs.ESC_TAG and type(inner) is dict:  # a user's dict already: only its values
                out = {k: _store_tags_escaped(v) for k, v in inner.items()}
                return value if all(out[k] is inner[k] for k in inner) else {key: out}
        out = {k: _store_tags_escaped(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if type(value) is list:
        items = [_store_tags_escaped(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


def _check_run_order(draft: EventDraft, head: tuple[int, bytes, str] | None) -> None:
    if head is None:
        if draft.kind != "run.started":
            raise InvalidEventError(f"run {draft.run_id} has not started: its first event must be run.started, not {draft.kind}")
        return
    if draft.kind == "run.started":
        raise InvalidEventError(f"run {draft.run_id} has already started")
    if head[2] == "run.ended":
        raise InvalidEventError(f"run {draft.run_id} has ended; no event can follow run.ended")


@runtime_checkable
class Store(Protocol):
    """What every backend offers. Append-only: no update, no delete."""

    origin: str

    def append(self, drafts: EventDraft | Sequence[EventDraft]) -> list[Event]:
        """Append events atomically, in order; durable when this returns."""

    def append_with(self, build: Callable[[Any], Sequence[EventDraft]]) -> list[Event]:
        """Append the drafts ``build(reader)`` returns, in the same transaction as its reads."""

    def read_run(self, run_id: str) -> list[Event]:
        """Every event of a run, by run_seq."""

    def read_range(self, start: int, end: int) -> list[Event]:
        """Events with leaf indices in [start, end)."""

    def size(self) -> int:
        """Number of events in the log."""

    def root(self, size: int | None = None) -> bytes:
        """RFC 9162 root hash of the first ``size`` leaves (default: all)."""

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 proof for leaf ``index`` in the tree of ``size``."""

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 proof that the tree of ``size2`` extends that of ``size1``."""

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every signed checkpoint, oldest first."""

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        """The newest signed checkpoint."""

    def issue_checkpoint(self, extensions: Sequence[str] = ()) -> StoredCheckpoint:
        """Sign a checkpoint of the current log (after an fsync'd commit), with the
        given C2SP tlog-checkpoint extension lines (a new one is always signed then)."""

    def get_blob(self, ref: str) -> bytes:
        """A blob's canonical content bytes; raises BlobNotFoundError."""

    def resolve(self, value: Any) -> Any:
        """Replace every blob reference in ``value`` by its content."""

    def close(self) -> None:
        """Sign a final checkpoint if events arrived since the last, and close."""


def fsync_write(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically and durably (temp file, fsync, rename, fsync dir).

    The temp file beside ``path`` (``PATH.tmp.<pid>.<random>``) is created with ``O_EXCL`` and
    ``O_NOFOLLOW``: a file or symbolic link planted at a predictable name is never written
    through (it used to be ``PATH.tmp.<pid>.<thread>``, opened with ``O_TRUNC``).

    Raises:
        OSError: the file could not be written (the temp file is removed).
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp.{os.getpid()}.{os.urandom(8).hex()}"  # the pid lets an opener remove a dead writer's
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def iter_chunks(total: int, chunk: int) -> Iterator[tuple[int, int]]:
    """[start, end) ranges covering 0..total in steps of ``chunk``."""
    for start in range(0, total, chunk):
        yield start, min(total, start + chunk)


def intact_snapshot(fingerprint: Any, content: bytes) -> bytes:
    """A stored snapshot's bytes, checked against its fingerprint (their SHA-256) before they are read:
    a configuration changed below Sealbox is never handed back as the one a run is pinned to.

    Raises:
        SnapshotDamagedError: the content no longer hashes to the fingerprint (a StoreError).
    """
    import hashlib

    from sealbox.errors import SnapshotDamagedError

    if "sha256:" + hashlib.sha256(content).hexdigest() != fingerprint:
        raise SnapshotDamagedError(f"snapshot {fingerprint} no longer hashes to its fingerprint: the store was changed below "
                         "Sealbox (run `sealbox verify`)")
    return content
