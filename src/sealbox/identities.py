"""Identities: people and services known to the store, their roles, groups and keys.

An identity has a name, a role (``approver``, ``agent``, ``auditor``, ``admin``),
groups, an Ed25519 public key and a ``shared`` mark. Every change to an identity
is an ``identity.changed`` event in the store's system run (``added``,
``disabled``, ``enabled``, ``key_changed``), so an identity cannot be quietly
re-enabled or its key swapped: :class:`IdentityBook` replays those events to say
what an identity was at any leaf index of the log.

Every change is **signed** (``authorization``: the signing identity, its key ID and an
Ed25519 signature over the change, which names the leaf of the identity's previous change
in ``after``), so
that whoever can write the store cannot mint an approver: the first ``admin`` added signs
its own ``added`` (the root of the store's identities; until then, nothing but an admin
can be added), and every later change needs the key of an enabled admin, except that an
identity may disable itself or change its own key with its current key. A change that is
not so signed is ignored by :class:`IdentityBook` (kept in its ``unauthorized`` list;
``sealbox verify`` reports it as ``identity_unauthorized``).

Keys use the C2SP signed-note key strings of :mod:`sealbox.ledger.checkpoint`:
the public key is a verifier key ``name+hex8(keyID)+base64(0x01 ‖ key)`` kept in
the log; the private key is a signer key ``PRIVATE+KEY+name+…`` written **once**
to a key file (mode 0600) for its holder. Sealbox never stores it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from sealbox.canonical import canonical_bytes
from sealbox.errors import NoteError, SealboxError
from sealbox.events import SYSTEM_RUN_ID, EventDraft, rfc3339_utc
from sealbox.ledger.checkpoint import Signer, Verifier, generate_key

__all__ = [
    "ROLES",
    "IdentityError",
    "Identity",
    "NewKey",
    "IdentityBook",
    "add_identity",
    "disable_identity",
    "enable_identity",
    "rotate_key",
    "identity_book",
    "load_key",
    "sign_fields",
    "verify_fields",
    "change_fields",
    "SELF_CHANGES",
    "parse_compromised_since",
]

#: The roles an identity may have.
ROLES = ("approver", "agent", "auditor", "admin")

#: Changes an identity may sign for itself with its current key (any other needs an admin).
SELF_CHANGES = ("disabled", "key_changed")

#: The largest key file read (a signer key string is about 100 bytes).
_MAX_KEY_FILE = 4096

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}")


def unknown_signer(name: str, what: str = "the key file") -> str:
    """The error for a key file whose signer no identity of the store is. A name no identity can
    have (``sealbox.local/…``) is a log's signing key given by mistake: the message says so."""
    text = f"{what} names identity {name!r}, which this store does not know"
    if not _NAME.fullmatch(name):
        text += (": no identity has such a name, it is a log's signing key (a store's log.key), not an identity's; "
                 "give the key file `sealbox identities add … --key-out` wrote")
    return text


class IdentityError(SealboxError):
    """An identity cannot be added, changed or used as asked (unknown, duplicate, bad key file…)."""


@dataclass(frozen=True)
class Identity:
    """What an identity is at one point of the log.

    Attributes:
        name: unique name (also the name inside its key strings).
        role: one of :data:`ROLES`.
        groups: groups it belongs to.
        public_key: C2SP verifier key string of its current key.
        shared: marked as a shared account.
        disabled: disabled (it may not answer).
        since_leaf: leaf index of the ``identity.changed`` event that made it so.
    """

    name: str
    role: str
    groups: tuple[str, ...]
    public_key: str
    shared: bool = False
    disabled: bool = False
    since_leaf: int = 0

    @property
    def key_id(self) -> str:
        """The 8-hex-digit key ID of the current key."""
        return self.public_key.split("+")[1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "role": self.role, "groups": list(self.groups), "public_key": self.public_key,
                "key_id": self.key_id, "shared": self.shared, "disabled": self.disabled, "since_leaf": self.since_leaf}


@dataclass(frozen=True)
class NewKey:
    """An identity just added or re-keyed, and the file its private key was written to."""

    identity: Identity
    key_path: Path


class IdentityBook:
    """Identities as the log says they were, replayed from ``identity.changed`` events.

    Only changes whose ``authorization`` verifies are applied (see the module docstring);
    the others are listed in :attr:`unauthorized` as ``(leaf_index, name, change, why)``.
    """

    def __init__(self) -> None:
        self._history: dict[str, list[Identity]] = {}
        #: name -> (leaf, change) of every applied change, in log order (``added``, ``disabled``…)
        self._changes: dict[str, list[tuple[int, str]]] = {}
        self._had_admin = False
        #: name -> [from_leaf, to_leaf | None, record_leaf]: windows in which the identity's key is
        #: declared compromised (``compromised_from_leaf`` of a ``disabled`` or ``key_changed``), open
        #: until the identity's next ``key_changed`` after the record (a rotation closes its own window)
        self._compromised: dict[str, list[list[Any]]] = {}
        self.unauthorized: list[tuple[int, Any, Any, str]] = []
        #: The store or reader the book was read from (:func:`identity_book`), or None (built from
        #: events alone). Readers of approvals use it to compute the shared-account flags an answer
        #: should carry from the log (:func:`sealbox.approvals.log_flags`).
        self.log: Any = None

    @classmethod
    def from_events(cls, events: Iterable[Any]) -> "IdentityBook":
        """Replay events in log order.

        Args:
            events: :class:`~sealbox.events.Event` objects, or ``(leaf_index, envelope)``
                pairs as collected by the verifier; kinds other than ``identity.changed``
                are skipped.
        """
        book = cls()
        for item in events:
            if isinstance(item, tuple):
                leaf, env = item
                kind, payload = env.get("kind"), env.get("payload")
            else:
                leaf, kind, payload = item.leaf_index, item.kind, item.payload
            if kind == "identity.changed" and isinstance(payload, dict):
                book.apply(leaf, payload)
        return book

    def apply(self, leaf_index: int, payload: dict[str, Any]) -> None:
        """Apply one ``identity.changed`` payload recorded at ``leaf_index`` (malformed changes are
        ignored; changes not signed as the module docstring says go to :attr:`unauthorized`)."""
        name, change = payload.get("name"), payload.get("change")
        why = self.why_unauthorized(payload)
        if why is not None:
            self.unauthorized.append((leaf_index, name, change, why))
            return
        current = self.get(name)
        if change == "added" and current is None:
            new = Identity(name, str(payload.get("role", "")), tuple(payload.get("groups") or ()),
                           str(payload.get("public_key", "")), bool(payload.get("shared", False)), False, leaf_index)
        elif current is None:
            return
        elif change == "disabled":
            new = replace(current, disabled=True, since_leaf=leaf_index)
        elif change == "enabled":
            new = replace(current, disabled=False, since_leaf=leaf_index)
        elif change == "key_changed" and isinstance(payload.get("public_key"), str):
            new = replace(current, public_key=payload["public_key"], since_leaf=leaf_index)
        else:
            return
        self._history.setdefault(name, []).append(new)
        self._changes.setdefault(name, []).append((leaf_index, change))
        windows = self._compromised.get(name)
        if change == "key_changed" and windows:
            for w in windows:  # the leaked key is no longer the identity's key from here on
                if w[1] is None:
                    w[1] = leaf_index
        since = payload.get("compromised_from_leaf")
        if change in ("disabled", "key_changed") and isinstance(since, int) and not isinstance(since, bool) \
                and 0 <= since <= leaf_index:
            self._compromised.setdefault(name, []).append(
                [since, leaf_index if change == "key_changed" else None, leaf_index])
        self._had_admin = self._had_admin or new.role == "admin"

    def last_leaf(self, name: str) -> int | None:
        """Leaf index of the newest applied change of ``name`` (None: it has none)."""
        versions = self._history.get(name)
        return versions[-1].since_leaf if versions else None

    def withdrawing_change(self, name: Any, after: int, before: int | None = None) -> tuple[str, int] | None:
        """The first change that withdraws an approval ``name`` gave at leaf ``after``: its first
        applied ``disabled`` or ``key_changed`` recorded after leaf ``after`` and before leaf
        ``before`` (default: now), as ``("disabled" | "rotated", leaf index)``; None when there is
        none. Re-enabling (``enabled``) withdraws nothing, and restores nothing either: the first
        such change stays the answer however many come after it (docs/approvals.md, "An approver
        disabled or re-keyed before the call runs"). Reads only ``name``'s own changes."""
        for leaf, change in self._changes.get(name, ()) if isinstance(name, str) else ():
            if before is not None and leaf >= before:
                break
            if leaf > after and change in ("disabled", "key_changed"):
                return ("disabled" if change == "disabled" else "rotated"), leaf
        return None

    def compromised_at(self, name: Any, leaf: int) -> tuple[int, int] | None:
        """Whether what ``name`` signed in the event at leaf ``leaf`` falls in a window where its key
        was declared compromised (``sealbox identities disable|rotate --compromised-since``):
        ``(record_leaf, from_leaf)`` of the first such ``identity.changed`` (its leaf, and the first
        leaf of the window), else None. A window runs from ``compromised_from_leaf`` up to (not
        including) the leaf of the identity's next key change after the record - for a rotation, the
        rotation itself - or for ever. Only changes this book applied count (a validly signed record).
        Reads only ``name``'s own windows: O(number of its compromise records)."""
        for since, until, record in self._compromised.get(name, ()) if isinstance(name, str) else ():
            if leaf >= since and (until is None or leaf < until):
                return record, since
        return None

    def withdrawing(self, name: Any, after: int, before: int | None = None) -> tuple[str, int] | None:
        """What withdraws an approve answer ``name`` signed at leaf ``after`` for a call not yet run at
        leaf ``before`` (default: now): ``("compromised", record leaf)`` when the answer falls in a
        compromised-key window recorded before ``before`` (:meth:`compromised_at`), else
        :meth:`withdrawing_change`."""
        hit = self.compromised_at(name, after)
        if hit is not None and (before is None or hit[0] < before):
            return "compromised", hit[0]
        return self.withdrawing_change(name, after, before)

    def compromise_records(self) -> dict[str, list[tuple[int, int, int | None]]]:
        """Every window: name -> ``[(record_leaf, from_leaf, to_leaf or None)]``, in log order."""
        return {n: [(w[2], w[0], w[1]) for w in ws] for n, ws in self._compromised.items()}

    def has_admin(self) -> bool:
        """Whether an admin was ever added (from then on, no change signs itself in)."""
        return self._had_admin

    def why_unauthorized(self, payload: dict[str, Any]) -> str | None:
        """Why the change ``payload`` is not validly signed for this book's state, or None."""
        auth = payload.get("authorization")
        if not isinstance(auth, dict):
            return "it carries no authorization (it was not written by sealbox.identities)"
        name, change, by = payload.get("name"), payload.get("change"), auth.get("by")
        previous = self.last_leaf(name) if isinstance(name, str) else None
        if "after" not in payload or payload["after"] != previous:
            if previous is None or not isinstance(payload.get("after"), int) or payload["after"] > previous:
                return (f"it follows a change of {name!r} at leaf {payload.get('after')!r} that is not in the history "
                        f"(its previous change here is {'at leaf ' + str(previous) if previous is not None else 'none'}): "
                        "a change was left out, or this one was replayed")
            return (f"it follows {name!r}'s change at leaf {payload['after']}, but {name!r} changed again at leaf "
                    f"{previous}: it was replayed")
        fields = change_fields(payload)
        if change == "added" and by == name and payload.get("role") == "admin" and not self._had_admin:
            key = payload.get("public_key")  # the root admin: signed with the key it adds
        else:
            signer = self.get(by)
            if signer is None:
                return f"it is signed by {by!r}, which is not an identity of the log at that point"
            if signer.disabled:
                return f"it is signed by {by!r}, which was disabled at that point"
            if signer.role != "admin" and not (by == name and change in SELF_CHANGES):
                return f"it is signed by {by!r}, which is not an admin (role {signer.role})"
            key = signer.public_key
        if not isinstance(key, str) or auth.get("key_id") != _key_id(key):
            return f"its key ID {auth.get('key_id')!r} is not {by!r}'s key at that point"
        if not verify_fields(key, fields, auth.get("signature")):
            return f"its signature does not verify with {by!r}'s key"
        return None

    def get(self, name: Any, at: int | None = None) -> Identity | None:
        """The identity ``name`` as it was just before leaf ``at`` (default: now), or None."""
        versions = self._history.get(name) if isinstance(name, str) else None
        if not versions:
            return None
        if at is None:
            return versions[-1]
        before = [v for v in versions if v.since_leaf < at]
        return before[-1] if before else None

    def all(self, at: int | None = None) -> list[Identity]:
        """Every identity known before leaf ``at`` (default: now), by name."""
        found = (self.get(name, at) for name in sorted(self._history))
        return [i for i in found if i is not None]

    def history(self, name: str) -> list[Identity]:
        """Every version of ``name``, oldest first."""
        return list(self._history.get(name, ()))


def identity_book(store_or_reader: Any) -> IdentityBook:
    """The store's identities, replayed from its system run.

    Args:
        store_or_reader: a store (``read_run``) or a write-transaction reader (``events``).
    """
    if hasattr(store_or_reader, "events"):
        events = store_or_reader.events(["identity.changed"], run_id=SYSTEM_RUN_ID)
    else:
        events = store_or_reader.read_run(SYSTEM_RUN_ID)
    book = IdentityBook.from_events(events)
    book.log = store_or_reader
    return book


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise IdentityError(f"invalid identity name {name!r}: use letters, digits and . _ @ : - (at most 128)")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise IdentityError(f"role must be one of {', '.join(ROLES)}, not {role!r}")


def _write_key_file(path: Path, skey: str) -> None:
    """Create ``path`` with mode 0600 and write the signer key; never overwrite."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise IdentityError(f"{path} already exists: refusing to overwrite a key file") from exc
    except OSError as exc:
        raise IdentityError(f"cannot create key file {path}: {exc.strerror}") from exc
    try:
        try:
            os.write(fd, (skey + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:  # a full disk, Ctrl-C, SIGTERM during the write: no partial key file stays
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def _unlink_unrecorded(store: Any, path: Path, name: str, vkey: str) -> None:
    """Remove the key file of an add or rotation that stopped part-way, unless its key was recorded
    (an interrupt after the commit): a recorded key must keep its private key, an unrecorded one none."""
    try:
        identity = identity_book(store).get(name)
        recorded = identity is not None and identity.public_key == vkey
    except BaseException:
        recorded = False
    if not recorded:
        path.unlink(missing_ok=True)


def change_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields an ``identity.changed`` authorization signs: every payload field but
    ``authorization``, ``after`` included (the leaf index of the identity's previous applied
    change, None for ``added``), so that a signed change cannot be replayed later in the log
    and a change left out of the history (of an export bundle) shows as a gap."""
    return {k: v for k, v in payload.items() if k != "authorization"}


def _key_id(vkey: str) -> str:
    """The key ID of a C2SP verifier key ``name+keyid+base64`` (the base64 may hold ``+``)."""
    parts = vkey.split("+", 2)
    return parts[1] if len(parts) == 3 else ""


def _admin_signer(admin_key: Any) -> Signer | None:
    if admin_key is None or isinstance(admin_key, Signer):
        return admin_key
    return load_key(admin_key)


def _authorizer(book: IdentityBook, change: dict[str, Any], admin: Signer | None, new_signer: Signer | None) -> Signer:
    """The key that signs ``change`` (see the module docstring), or IdentityError saying why none may."""
    name = change.get("name")
    if admin is None:
        if change.get("change") == "added" and change.get("role") == "admin" and not book.has_admin():
            return new_signer  # type: ignore[return-value]  # the root admin: its own new key (None: a pre-check)
        if not book.has_admin():
            raise IdentityError("this store has no admin identity yet: add one first (`sealbox identities add NAME "
                                "--role admin --key-out FILE`); its key signs every later identity change")
        raise IdentityError("an identity change must be signed by an admin identity's key (--admin-key FILE)")
    who = book.get(admin.name)
    if who is None:
        raise IdentityError(unknown_signer(admin.name, "the admin key file"))
    if who.public_key != admin.verifier.vkey:
        raise IdentityError(f"this key is not {who.name}'s current key (it was rotated, or is not theirs)")
    if who.disabled:
        raise IdentityError(f"identity {who.name!r} is disabled: it cannot sign identity changes")
    if who.role != "admin" and not (who.name == name and change.get("change") in SELF_CHANGES):
        raise IdentityError(f"identity {who.name!r} is not an admin (role {who.role}): only an admin may make this "
                            "change (an identity may only disable itself or change its own key)")
    return admin


def _record(store: Any, name: str, admin: Signer | None, check: Any, payload: Any,
            new_signer: Signer | None = None, compromised: tuple[str, Any] | None = None) -> Identity:
    """Append one signed ``identity.changed`` event after ``check(book)`` passes, in one transaction."""
    def build(reader: Any) -> list[EventDraft]:
        book = identity_book(reader)
        p = {**payload(book), **_compromise_fields(reader, compromised), "after": book.last_leaf(name)}
        signer = _authorizer(book, p, admin, new_signer)  # who may sign comes first, then what the change needs
        check(book)
        p["authorization"] = {"by": signer.name, "key_id": _key_id(signer.verifier.vkey),
                              "signature": sign_fields(signer, change_fields(p))}
        return [EventDraft("identity.changed", p, run_id=SYSTEM_RUN_ID, principal=signer.name)]

    events = store.append_with(build)
    found = identity_book(store).get(name, events[-1].leaf_index + 1)
    if found is None:  # pragma: no cover - the event was just written
        raise IdentityError(f"identity {name!r} was not recorded")
    return found


_LEAF_WHEN = re.compile(r"leaf:(0|[1-9][0-9]*)")  # no leading zeros: leaf:0001 is not read as leaf:1
_LEAF_DIGITS_MAX = 18  # a leaf index above 10^18 is after any log (and past a BIGINT)
#: RFC 3339 §5.6 ``date-time``: full-date, "T" (or "t", or a space, §5.6 NOTE), partial-time with
#: seconds, then the offset (captured as None when missing, for a clearer error).
_RFC3339_DATE_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?P<fraction>\.[0-9]+)?(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})?")


def parse_compromised_since(when: Any) -> tuple[str, Any]:
    """``--compromised-since WHEN`` as ``("leaf", N)`` or ``("time", aware UTC datetime)``.

    Args:
        when: ``leaf:N`` (a leaf index of the log, decimal), an RFC 3339 §5.6 date-time with seconds
            and a UTC offset (``2026-12-03T09:00:00Z``; digits past the microsecond are dropped, which
            moves the point earlier), or an aware :class:`~datetime.datetime`.

    Raises:
        IdentityError: anything else (one line; nothing is recorded).
    """
    from datetime import datetime, timezone

    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise IdentityError("compromised-since must be timezone-aware")
        try:
            return "time", when.astimezone(timezone.utc)
        except OverflowError:
            raise IdentityError(f"compromised-since {when} is out of range in UTC") from None
    text = str(when).strip() if isinstance(when, str) else None
    if not text:
        raise IdentityError("compromised-since must be leaf:N or an RFC 3339 time such as 2026-12-03T09:00:00Z")
    m = _LEAF_WHEN.fullmatch(text)
    if m and len(m.group(1)) > _LEAF_DIGITS_MAX:  # not int(): a number of thousands of digits is refused by it
        shown = text if len(text) <= 45 else text[:45] + "…"
        raise IdentityError(f"compromised-since {shown} is after this change: no log has that many leaves")
    if m:
        return "leaf", int(m.group(1))
    if text.startswith("leaf:"):
        raise IdentityError(f"compromised-since {text!r}: a leaf index is leaf:N with N a non-negative integer "
                            "without leading zeros (leaf:0, leaf:4711)")
    shape = _RFC3339_DATE_TIME.fullmatch(text)
    if shape is None:  # a date alone, no seconds, an ISO week date...: RFC 3339 §5.6 date-time only
        raise IdentityError(f"compromised-since {text!r} is not leaf:N or an RFC 3339 date-time "
                            "(e.g. 2026-12-03T09:00:00Z)")
    if shape.group("offset") is None:
        raise IdentityError(f"compromised-since {text!r} has no UTC offset (add Z or +hh:mm)")
    # digits past the microsecond are dropped (the log's times have six): the point moves earlier, never later
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise IdentityError(f"compromised-since {text!r} is not leaf:N or an RFC 3339 date-time "
                            "(e.g. 2026-12-03T09:00:00Z)") from None
    if dt.tzinfo is None:
        raise IdentityError(f"compromised-since {text!r} has no UTC offset (add Z or +hh:mm)")
    try:
        return "time", dt.astimezone(timezone.utc)
    except OverflowError:
        raise IdentityError(f"compromised-since {text!r} is out of range in UTC") from None


def _compromise_fields(reader: Any, parsed: tuple[str, Any] | None) -> dict[str, Any]:
    """The payload fields recording a compromise: ``compromised_since`` (``leaf:N``, or the time as
    RFC 3339 UTC with microseconds) and ``compromised_from_leaf`` - the first leaf of the log whose
    signatures by the identity no longer count: N, or the first leaf whose event ``ts`` is at or after
    the time (the change's own leaf when none is). Resolved here, inside the change's write
    transaction, and signed with it, so that every later check is a comparison of leaf indices.

    Raises:
        IdentityError: the point is after the change itself (a leaf beyond the log, a time in the future).
    """
    if parsed is None:
        return {}
    from datetime import datetime, timezone

    size = reader.size()
    kind, value = parsed
    if kind == "leaf":
        if value > size:
            raise IdentityError(f"compromised-since leaf:{value} is after this change (it is recorded at leaf "
                                f"{size}): a key cannot be known to be compromised from a point not yet in the log")
        return {"compromised_since": f"leaf:{value}", "compromised_from_leaf": value}
    now = datetime.now(timezone.utc)
    if value > now:
        raise IdentityError(f"compromised-since {_utc_text(value)} is after this change (now is {_utc_text(now)})")
    text = _utc_text(value)  # as the events' ts: compared with them as text
    conn = reader.conn if hasattr(reader, "conn") else reader._conn()
    row = conn.execute("SELECT MIN(leaf_index) FROM events WHERE ts >= ? AND leaf_index < ?", (text, size)).fetchone()
    first = row[0] if row and row[0] is not None else size
    return {"compromised_since": text, "compromised_from_leaf": int(first)}


def _utc_text(dt: Any) -> str:
    """An aware datetime as the log writes times (:func:`sealbox.events.rfc3339_utc`)."""
    return rfc3339_utc(dt)


def _existing(book: IdentityBook, name: str) -> Identity:
    found = book.get(name)
    if found is None:
        raise IdentityError(f"no identity named {name!r}")
    return found


def add_identity(store: Any, name: str, role: str, groups: Sequence[str] = (), shared: bool = False,
                 key_path: str | os.PathLike | None = None, *, admin_key: Any = None) -> NewKey:
    """Create an identity: generate an Ed25519 key pair, write the private key once, record the public key.

    Args:
        store: an open, writable store.
        name: unique name (letters, digits, ``. _ @ : -``).
        role: one of :data:`ROLES`.
        groups: groups it belongs to (matched by approval rules, exactly): each 1-128
            printable characters (no control or invisible format characters such as
            U+200B or U+202E), without a space at either end.
        shared: mark it as a shared account (its answers are flagged).
        key_path: where to write the private key (default ``./<name>.key``); the file
            must not exist. It is created with mode 0600.
        admin_key: the key file (or :class:`~sealbox.ledger.checkpoint.Signer`) of an
            enabled admin identity, who signs the change and is its principal. Not needed
            only for the store's first admin, which signs its own ``added``.

    Returns:
        The identity as recorded and the key file's path.

    Raises:
        IdentityError: bad name, role or group, the name exists, no admin key (or one that is not
            an enabled admin's current key), or the key file exists or cannot be written
            (nothing is recorded then).
    """
    _check_name(name)
    _check_role(role)
    for g in groups:
        if not isinstance(g, str) or not 0 < len(g) <= 128 or g != g.strip() or not g.isprintable():
            raise IdentityError(f"invalid group {g!r}: 1-128 printable characters, no control or invisible "
                                "characters, no space at either end")
    groups = tuple(sorted(set(groups)))
    book = identity_book(store)
    if book.get(name) is not None:
        raise IdentityError(f"identity {name!r} already exists")
    _refuse_same_actor(book, name)
    admin = _admin_signer(admin_key)
    _authorizer(book, {"name": name, "change": "added", "role": role}, admin, None)  # before a key file is written
    path = Path(key_path) if key_path is not None else Path.cwd() / f"{name}.key"
    skey, vkey = generate_key(name)
    written = False

    def check(book: IdentityBook) -> None:
        if book.get(name) is not None:
            raise IdentityError(f"identity {name!r} already exists")
        _refuse_same_actor(book, name)

    payload = {"name": name, "change": "added", "role": role, "groups": list(groups), "public_key": vkey,
               "shared": bool(shared)}
    try:
        _write_key_file(path, skey)
        written = True
        identity = _record(store, name, admin, check, lambda _book: payload, new_signer=Signer.from_key(skey))
    except BaseException:
        if written:  # the key was never recorded: leave no usable key behind
            _unlink_unrecorded(store, path, name, vkey)
        raise
    return NewKey(identity, path)


def _refuse_same_actor(book: "IdentityBook", name: str) -> None:
    """IdentityError when an identity of the book (enabled or not) names the same actor as ``name``
    (:func:`sealbox.approvals.actor_key`: ``Alice`` is ``alice``, ``user:alice`` is ``alice``): the
    requester rule and the ``acts_as_agent`` flag already take them for one actor, and two such
    identities held by one person would count as two approvers of one request."""
    from sealbox.approvals import actor_key
    from sealbox.events import EventDraft

    system = EventDraft.__dataclass_fields__["principal"].default  # "sealbox": the principal of Sealbox's own events
    if actor_key(name) == actor_key(system):
        raise IdentityError(f"identity {name!r} would name the same actor as {system!r}, the principal Sealbox records "
                            "its own events with (the system run, its notes): its answers would read as given by "
                            "Sealbox itself, and the system run would flag it acts_as_agent; choose another name")
    other = next((i.name for i in book.all() if actor_key(i.name) == actor_key(name)), None)
    if other is not None:
        raise IdentityError(f"identity {name!r} would name the same actor as the existing identity {other!r} "
                            "(names are compared case-folded, without one leading 'scheme:'): one person must "
                            "not hold two approvers of one request; choose another name")


def _check_reason(reason: Any) -> None:
    """Refuse a change's reason as an answer's is refused (:data:`sealbox.approvals.REASON_MAX_CHARS`): it
    is signed and kept forever, so it is text (a string, UTF-8), and short (link to the details).

    Raises:
        IdentityError: not a string, longer than ``REASON_MAX_CHARS`` characters, or not UTF-8 text.
    """
    from sealbox.approvals import REASON_MAX_CHARS

    if not isinstance(reason, str):
        raise IdentityError(f"reason must be a string (or empty), not {type(reason).__name__}")
    if len(reason) > REASON_MAX_CHARS:
        raise IdentityError(f"reason is {len(reason)} characters long: at most {REASON_MAX_CHARS} are recorded "
                            "(say why in short; link to the details)")
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a non-UTF-8 byte of a command-line argument decodes to one
        raise IdentityError("reason is not UTF-8 text (it holds a lone surrogate)") from None


def disable_identity(store: Any, name: str, reason: str = "", *, admin_key: Any,
                     compromised_since: Any = None) -> Identity:
    """Disable an identity (it can no longer answer). Recorded as ``identity.changed`` ``disabled``.

    Its approve answers to calls not yet resumed are withdrawn for good (re-enabling it does not
    restore them; docs/approvals.md, :meth:`IdentityBook.withdrawing_change`).

    Args:
        admin_key: key file or Signer of an enabled admin, or of the identity itself.
        compromised_since: ``leaf:N``, an RFC 3339 time, or an aware datetime: the identity's key is
            declared leaked from then on (:func:`parse_compromised_since`, :func:`_compromise_fields`):
            everything it signed from that leaf on - grants, revocation steps, tool re-approvals,
            approval answers - stops counting (docs/approvals.md, "A leaked key").

    Raises:
        IdentityError: unknown, already disabled, a key that may not sign the change, a ``reason`` that is
            not a string, too long or not UTF-8 (:func:`_check_reason`), or a ``compromised_since`` that is
            malformed or after the change (nothing is recorded).
    """
    _check_reason(reason)
    parsed = None if compromised_since is None else parse_compromised_since(compromised_since)
    def check(book: IdentityBook) -> None:
        who = _existing(book, name)
        if who.disabled:
            hint = ("; to declare its key compromised now, rotate it: `sealbox identities rotate "
                    f"{name} --key-out NEW.key --compromised-since WHEN`" if parsed is not None else "")
            raise IdentityError(f"identity {name!r} is already disabled{hint}")
        if who.role == "admin" and not any(i.role == "admin" and not i.disabled and i.name != name for i in book.all()):
            raise IdentityError(f"identity {name!r} is the only enabled admin: disabled, no one could change identities "
                                "again (nor re-enable it); add another admin first (`sealbox identities add NAME --role "
                                f"admin --key-out FILE --admin-key …`), then disable {name!r} with that admin's key")

    payload = {"name": name, "change": "disabled", **({"reason": reason} if reason else {})}
    return _record(store, name, _admin_signer(admin_key), check, lambda _book: payload, compromised=parsed)


def enable_identity(store: Any, name: str, reason: str = "", *, admin_key: Any) -> Identity:
    """Re-enable a disabled identity, as a recorded ``identity.changed`` ``enabled`` event.

    The approvals its ``disabled`` withdrew stay withdrawn (docs/approvals.md).

    Args:
        admin_key: key file or Signer of an enabled admin.

    Raises:
        IdentityError: unknown, not disabled, a key that may not sign the change, or its current key was
            declared compromised (``--compromised-since``) and not rotated since.
    """
    _check_reason(reason)

    def check(book: IdentityBook) -> None:
        if not _existing(book, name).disabled:
            raise IdentityError(f"identity {name!r} is not disabled")
        open_windows = [(r, f) for r, f, u in book.compromise_records().get(name, ()) if u is None]
        if open_windows:
            record, since = open_windows[-1]
            raise IdentityError(f"identity {name!r} has the key declared compromised at leaf {record} (from leaf "
                                f"{since}): give it a new key first (`sealbox identities rotate {name} --key-out FILE "
                                "--admin-key …`), then enable it")

    payload = {"name": name, "change": "enabled", **({"reason": reason} if reason else {})}
    return _record(store, name, _admin_signer(admin_key), check, lambda _book: payload)


def rotate_key(store: Any, name: str, key_path: str | os.PathLike, reason: str = "", *, admin_key: Any,
               compromised_since: Any = None) -> NewKey:
    """Give an identity a new key pair; the old key stops being accepted from this leaf on.

    Answers signed before the rotation still verify against the key the log held then, but its
    approve answers to calls not yet resumed are withdrawn for good (a leaked old key may have
    signed them; docs/approvals.md, :meth:`IdentityBook.withdrawing_change`).

    Args:
        admin_key: key file or Signer of an enabled admin, or the identity's own current key.
        compromised_since: as for :func:`disable_identity`: the old key is declared leaked from then
            until this rotation.

    Raises:
        IdentityError: unknown identity, a key that may not sign the change, the key file exists, or a
            ``compromised_since`` that is malformed or after the change (nothing is recorded).
    """
    _check_reason(reason)
    parsed = None if compromised_since is None else parse_compromised_since(compromised_since)
    book = identity_book(store)
    _existing(book, name)
    admin = _admin_signer(admin_key)
    _authorizer(book, {"name": name, "change": "key_changed"}, admin, None)  # before a key file is written
    path = Path(key_path)
    skey, vkey = generate_key(name)
    payload = {"name": name, "change": "key_changed", "public_key": vkey, **({"reason": reason} if reason else {})}
    written = False
    try:
        _write_key_file(path, skey)
        written = True
        identity = _record(store, name, admin, lambda book: _existing(book, name), lambda _book: payload,
                           compromised=parsed)
    except BaseException:
        if written:
            _unlink_unrecorded(store, path, name, vkey)
        raise
    return NewKey(identity, path)


def load_key(key_file: str | os.PathLike) -> Signer:
    """Read a private key file written by :func:`add_identity` or :func:`rotate_key`.

    Raises:
        IdentityError: missing, not a regular file, over 4 KiB, unreadable, readable by group
            or others (POSIX), or malformed.
    """
    path = Path(key_file)
    try:
        # opened without blocking (a FIFO would wait for a writer), then checked on what was opened
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):  # a FIFO, a device (/dev/zero never ends), a folder
                raise IdentityError(f"key file {path} is not a regular file")
            data = os.read(fd, _MAX_KEY_FILE + 1)
        finally:
            os.close(fd)
        if len(data) > _MAX_KEY_FILE:
            raise IdentityError(f"key file {path} is larger than {_MAX_KEY_FILE} bytes: not a Sealbox identity key")
        text = data.decode("ascii").strip()
    except FileNotFoundError as exc:
        raise IdentityError(f"key file {path} does not exist") from exc
    except UnicodeDecodeError as exc:  # a binary file, another kind of key: say so, never echo its bytes
        raise IdentityError(f"{path} is not a Sealbox identity key: not ASCII text (byte {exc.start})") from None
    except OSError as exc:
        raise IdentityError(f"cannot read key file {path}: {exc.strerror or exc}") from exc
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise IdentityError(f"key file {path} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    try:
        return Signer.from_key(text)
    except NoteError as exc:
        raise IdentityError(f"{path} is not a Sealbox identity key: {exc}") from exc


def sign_fields(signer: Signer, fields: dict[str, Any]) -> str:
    """Ed25519 signature over the RFC 8785 canonical bytes of ``fields``, base64."""
    return base64.b64encode(signer.sign(canonical_bytes(fields).decode("utf-8"))).decode("ascii")


@functools.lru_cache(maxsize=256)
def _verifier(public_key: str) -> Verifier:
    """A parsed verifier key (listings check many answers by few identities: parse each key once)."""
    return Verifier.from_vkey(public_key)


def verify_fields(public_key: str, fields: dict[str, Any], signature: Any) -> bool:
    """Whether ``signature`` (base64) signs the canonical bytes of ``fields`` under ``public_key`` (a vkey)."""
    try:
        verifier = _verifier(public_key) if isinstance(public_key, str) else Verifier.from_vkey(public_key)
        raw = base64.b64decode(str(signature).encode("ascii"), validate=True)
        return verifier.verify(canonical_bytes(fields).decode("utf-8"), raw)
    except (NoteError, binascii.Error, ValueError, UnicodeEncodeError):
        return False
