"""Identities: people and services known to the store, their roles, groups and keys.

An identity has a name, a role (``approver``, ``agent``, ``auditor``, ``admin``),
groups, an Ed25519 public key and a ``shared`` mark. Every change to an identity
is an ``identity.changed`` event in the store's system run (``added``,
``disabled``, ``enabled``, ``key_changed``), so an identity cannot be quietly
re-enabled or its key swapped: :class:`IdentityBook` replays those events to say
what an identity was at any leaf index of the log.

Keys use the C2SP signed-note key strings of :mod:`sealbox.ledger.checkpoint`:
the public key is a verifier key ``name+hex8(keyID)+base64(0x01 ‖ key)`` kept in
the log; the private key is a signer key ``PRIVATE+KEY+name+…`` written **once**
to a key file (mode 0600) for its holder. Sealbox never stores it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from sealbox.canonical import canonical_bytes
from sealbox.errors import NoteError, SealboxError
from sealbox.events import SYSTEM_RUN_ID, EventDraft
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
]

#: The roles an identity may have.
ROLES = ("approver", "agent", "auditor", "admin")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$")


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
    """Identities as the log says they were, replayed from ``identity.changed`` events."""

    def __init__(self) -> None:
        self._history: dict[str, list[Identity]] = {}

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
        """Apply one ``identity.changed`` payload recorded at ``leaf_index`` (malformed changes are ignored)."""
        name, change = payload.get("name"), payload.get("change")
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
    return IdentityBook.from_events(events)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
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
        os.write(fd, (skey + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _record(store: Any, name: str, actor: str, check: Any, payload: Any) -> Identity:
    """Append one ``identity.changed`` event after ``check(book)`` passes, in one transaction."""
    def build(reader: Any) -> list[EventDraft]:
        book = identity_book(reader)
        check(book)
        return [EventDraft("identity.changed", payload(book), run_id=SYSTEM_RUN_ID, principal=actor)]

    events = store.append_with(build)
    found = identity_book(store).get(name, events[-1].leaf_index + 1)
    if found is None:  # pragma: no cover - the event was just written
        raise IdentityError(f"identity {name!r} was not recorded")
    return found


def _existing(book: IdentityBook, name: str) -> Identity:
    found = book.get(name)
    if found is None:
        raise IdentityError(f"no identity named {name!r}")
    return found


def add_identity(store: Any, name: str, role: str, groups: Sequence[str] = (), shared: bool = False,
                 key_path: str | os.PathLike | None = None, actor: str = "sealbox") -> NewKey:
    """Create an identity: generate an Ed25519 key pair, write the private key once, record the public key.

    Args:
        store: an open, writable store.
        name: unique name (letters, digits, ``. _ @ : -``).
        role: one of :data:`ROLES`.
        groups: groups it belongs to (matched by approval rules).
        shared: mark it as a shared account (its answers are flagged).
        key_path: where to write the private key (default ``./<name>.key``); the file
            must not exist. It is created with mode 0600.
        actor: the principal recorded as making the change.

    Returns:
        The identity as recorded and the key file's path.

    Raises:
        IdentityError: bad name or role, the name exists, or the key file exists or
            cannot be written (nothing is recorded then).
    """
    _check_name(name)
    _check_role(role)
    groups = tuple(sorted(set(groups)))
    for g in groups:
        if not isinstance(g, str) or not g:
            raise IdentityError(f"invalid group {g!r}")
    if identity_book(store).get(name) is not None:
        raise IdentityError(f"identity {name!r} already exists")
    path = Path(key_path) if key_path is not None else Path.cwd() / f"{name}.key"
    skey, vkey = generate_key(name)
    _write_key_file(path, skey)

    def check(book: IdentityBook) -> None:
        if book.get(name) is not None:
            raise IdentityError(f"identity {name!r} already exists")

    payload = {"name": name, "change": "added", "role": role, "groups": list(groups), "public_key": vkey,
               "shared": bool(shared)}
    try:
        identity = _record(store, name, actor, check, lambda _book: payload)
    except BaseException:
        path.unlink(missing_ok=True)  # the key was never recorded: leave no usable key behind
        raise
    return NewKey(identity, path)


def disable_identity(store: Any, name: str, reason: str = "", actor: str = "sealbox") -> Identity:
    """Disable an identity (it can no longer answer). Recorded as ``identity.changed`` ``disabled``.

    Raises:
        IdentityError: unknown, or already disabled.
    """
    def check(book: IdentityBook) -> None:
        if _existing(book, name).disabled:
            raise IdentityError(f"identity {name!r} is already disabled")

    payload = {"name": name, "change": "disabled", **({"reason": reason} if reason else {})}
    return _record(store, name, actor, check, lambda _book: payload)


def enable_identity(store: Any, name: str, reason: str = "", actor: str = "sealbox") -> Identity:
    """Re-enable a disabled identity, as a recorded ``identity.changed`` ``enabled`` event.

    Raises:
        IdentityError: unknown, or not disabled.
    """
    def check(book: IdentityBook) -> None:
        if not _existing(book, name).disabled:
            raise IdentityError(f"identity {name!r} is not disabled")

    payload = {"name": name, "change": "enabled", **({"reason": reason} if reason else {})}
    return _record(store, name, actor, check, lambda _book: payload)


def rotate_key(store: Any, name: str, key_path: str | os.PathLike, reason: str = "", actor: str = "sealbox") -> NewKey:
    """Give an identity a new key pair; the old key stops being accepted from this leaf on.

    Answers signed before the rotation still verify against the key the log held then.

    Raises:
        IdentityError: unknown identity, or the key file exists.
    """
    _existing(identity_book(store), name)
    path = Path(key_path)
    skey, vkey = generate_key(name)
    _write_key_file(path, skey)
    payload = {"name": name, "change": "key_changed", "public_key": vkey, **({"reason": reason} if reason else {})}
    try:
        identity = _record(store, name, actor, lambda book: _existing(book, name), lambda _book: payload)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return NewKey(identity, path)


def load_key(key_file: str | os.PathLike) -> Signer:
    """Read a private key file written by :func:`add_identity` or :func:`rotate_key`.

    Raises:
        IdentityError: missing, unreadable, readable by group or others (POSIX), or malformed.
    """
    path = Path(key_file)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError as exc:
        raise IdentityError(f"key file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise IdentityError(f"cannot read key file {path}: {exc}") from exc
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise IdentityError(f"key file {path} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    try:
        return Signer.from_key(text)
    except NoteError as exc:
        raise IdentityError(f"{path} is not a Sealbox identity key: {exc}") from exc


def sign_fields(signer: Signer, fields: dict[str, Any]) -> str:
    """Ed25519 signature over the RFC 8785 canonical bytes of ``fields``, base64."""
    return base64.b64encode(signer.sign(canonical_bytes(fields).decode("utf-8"))).decode("ascii")


def verify_fields(public_key: str, fields: dict[str, Any], signature: Any) -> bool:
    """Whether ``signature`` (base64) signs the canonical bytes of ``fields`` under ``public_key`` (a vkey)."""
    try:
        verifier = Verifier.from_vkey(public_key)
        raw = base64.b64decode(str(signature).encode("ascii"), validate=True)
        return verifier.verify(canonical_bytes(fields).decode("utf-8"), raw)
    except (NoteError, binascii.Error, ValueError, UnicodeEncodeError):
        return False
