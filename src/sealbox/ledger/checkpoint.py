"""Signed checkpoints: C2SP signed-note, tlog-checkpoint and tlog-cosignature/v1.

A checkpoint states a log's origin, size and root hash (C2SP ``tlog-checkpoint``);
it travels as a signed note (C2SP ``signed-note``)::

    example.com/log            <- origin (the signing key's name: we require it)
    20852163                   <- tree size, decimal
    CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=   <- base64 of the 32-byte root
                               <- blank line ends the text
    — example.com/log Az3grlgt...                   <- "— " name " " base64(key ID ‖ signature)

Keys are strings (the formats of Go's ``golang.org/x/mod/sumdb/note``):

* verifier key: ``name+hex8(keyID)+base64(type ‖ public key)``;
* signer key: ``PRIVATE+KEY+name+hex8(keyID)+base64(type ‖ seed)``;
* key ID = ``SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4]``.

Type 0x01 is Ed25519 over the note text. Type 0x04 is a tlog-cosignature/v1
(Ed25519 over ``"cosignature/v1\\ntime <t>\\n" ‖ checkpoint body``, with the
signature laid out as ``key ID ‖ u64 big-endian t ‖ 64-byte signature``).

Opening a note follows Go's ``note.Open``: a malformed note, a note with no
signature by a known key, and a bad signature by a known key are errors
(:class:`~sealbox.errors.NoteError`); a signature by an unknown key is
reported as unverified. Only ``hashlib``, ``base64`` and ``cryptography`` are
used, so an offline verifier can import this module without the store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealbox.errors import NoteError

__all__ = [
    "KEY_TYPE_ED25519",
    "KEY_TYPE_COSIGNATURE_V1",
    "MAX_SIGNATURES",
    "generate_key",
    "key_id",
    "Signer",
    "Verifier",
    "NoteSignature",
    "ParsedNote",
    "OpenedNote",
    "parse_note",
    "sign_note",
    "open_note",
    "parse_cosignature",
    "cosignature_message",
    "Checkpoint",
    "sign_checkpoint",
    "verify_checkpoint",
]

KEY_TYPE_ED25519 = 0x01
"""Signature type of a plain Ed25519 note signature (C2SP signed-note)."""

KEY_TYPE_COSIGNATURE_V1 = 0x04
"""Signature type of a timestamped Ed25519 witness cosignature (C2SP tlog-cosignature)."""

MAX_SIGNATURES = 100
"""Most signature lines a note may carry (Go's limit; C2SP asks for at least 16)."""

_KEY_TYPES = {KEY_TYPE_ED25519: "ed25519", KEY_TYPE_COSIGNATURE_V1: "cosignature/v1"}
_SIG_PREFIX = "\u2014 "  # EM DASH + space
_HEX8 = re.compile(r"[0-9a-fA-F]{8}")
_ED25519_SIG_SIZE = 64
_COSIG_SIZE = 4 + 8 + _ED25519_SIG_SIZE


# --- names, key IDs, base64 ------------------------------------------------------------


def _is_valid_name(name: str) -> bool:
    """C2SP signed-note key names: non-empty, no '+', no Unicode space or control character."""
    if not name or "+" in name:
        return False
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def key_id(name: str, key_type: int, public_key: bytes) -> bytes:
    """The 4-byte key ID: ``SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4]`` (C2SP signed-note)."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([key_type]) + public_key).digest()[:4]


def _b64decode(text: str) -> bytes:
    """Strict standard base64 (padding required, canonical); raises ValueError."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError("invalid base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return raw


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _parse_key_string(parts: list[str], what: str) -> tuple[str, bytes, int, bytes]:
    """Split ``name, hex8, base64(type ‖ key)``; return (name, key ID, type, key bytes)."""
    if len(parts) != 3:
        raise NoteError(f"malformed {what}")
    name, hex8, b64 = parts
    if not _is_valid_name(name) or not _HEX8.fullmatch(hex8):
        raise NoteError(f"malformed {what}: bad name or key ID")
    try:
        raw = _b64decode(b64)
    except ValueError as exc:
        raise NoteError(f"malformed {what}: {exc}") from exc
    if len(raw) < 1:
        raise NoteError(f"malformed {what}: empty key")
    key_type, key = raw[0], raw[1:]
    if key_type not in _KEY_TYPES:
        raise NoteError(f"malformed {what}: unknown key type 0x{key_type:02x}")
    if len(key) != 32:
        raise NoteError(f"malformed {what}: key is {len(key)} bytes, want 32")
    return name, bytes.fromhex(hex8), key_type, key


# --- signers and verifiers -------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    """A public key that can check note signatures.

    Attributes:
        name: the key's name (for a checkpoint key, the log's origin).
        key_id: the 4-byte key ID.
        key_type: :data:`KEY_TYPE_ED25519` or :data:`KEY_TYPE_COSIGNATURE_V1`.
        public_key: the 32-byte Ed25519 public key.
    """

    name: str
    key_id: bytes
    key_type: int
    public_key: bytes

    @classmethod
    def from_vkey(cls, vkey: str) -> Verifier:
        """Parse a verifier key ``name+hex8+base64(type ‖ pubkey)`` (C2SP signed-note).

        Raises:
            NoteError: on a bad name, key ID syntax, base64, key length or
                unknown type byte, if the key ID does not match the key, or when given a
                private signer key (``PRIVATE+KEY+…``) instead.
        """
        if vkey.startswith("PRIVATE+KEY+"):  # the signer key file (C2SP note: PRIVATE+KEY+name+…), not the public one
            raise NoteError("this is the log's private signing key, not its verifier key: give the verifier key "
                            "(log.vkey, NAME+KEYID+BASE64 as `sealbox init` printed it); keep the private key secret")
        name, kid, key_type, key = _parse_key_string(vkey.split("+", 2), "verifier key")
        if key_id(name, key_type, key) != kid:
            raise NoteError("malformed verifier key: key ID does not match the key")
        return cls(name, kid, key_type, key)

    @property
    def vkey(self) -> str:
        """This key as a verifier-key string."""
        return f"{self.name}+{self.key_id.hex()}+{_b64encode(bytes([self.key_type]) + self.public_key)}"

    @property
    def type_name(self) -> str:
        """``"ed25519"`` or ``"cosignature/v1"``."""
        return _KEY_TYPES[self.key_type]

    def verify(self, text: str, signature: bytes) -> bool:
        """Whether ``signature`` (the bytes after the key ID) signs the note ``text``."""
        message = text.encode("utf-8")
        if self.key_type == KEY_TYPE_COSIGNATURE_V1:
            if len(signature) != _COSIG_SIZE - 4:
                return False
            timestamp = int.from_bytes(signature[:8], "big")
            message = cosignature_message(text, timestamp).encode("utf-8")
            signature = signature[8:]
        if len(signature) != _ED25519_SIG_SIZE:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class Signer:
    """A private key that signs notes.

    Attributes:
        name: the key's name.
        key_id: the 4-byte key ID.
        key_type: :data:`KEY_TYPE_ED25519` or :data:`KEY_TYPE_COSIGNATURE_V1`.
        clock: for cosignatures, returns the UNIX time in seconds to sign.
    """

    name: str
    key_id: bytes
    key_type: int
    _private: Ed25519PrivateKey = field(repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)

    @classmethod
    def from_key(cls, skey: str, clock: Callable[[], float] = time.time) -> Signer:
        """Parse a signer key ``PRIVATE+KEY+name+hex8+base64(type ‖ seed)``.

        Args:
            skey: the signer key string. Keep it secret.
            clock: the time source for cosignatures (type 0x04), in UNIX seconds.

        Raises:
            NoteError: on a malformed key, or if the key ID does not match the
                public key derived from the seed.
        """
        parts = skey.split("+", 4)
        if parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("malformed signer key")
        name, kid, key_type, seed = _parse_key_string(parts[2:], "signer key")
        private = Ed25519PrivateKey.from_private_bytes(seed)
        if key_id(name, key_type, private.public_key().public_bytes_raw()) != kid:
            raise NoteError("malformed signer key: key ID does not match the key")
        return cls(name, kid, key_type, private, clock)

    @property
    def verifier(self) -> Verifier:
        """The matching :class:`Verifier`."""
        return Verifier(self.name, self.key_id, self.key_type, self._private.public_key().public_bytes_raw())

    def sign(self, text: str) -> bytes:
        """Sign a note text; return the signature bytes that follow the key ID."""
        if self.key_type == KEY_TYPE_COSIGNATURE_V1:
            timestamp = int(self.clock())
            message = cosignature_message(text, timestamp).encode("utf-8")
            return timestamp.to_bytes(8, "big") + self._private.sign(message)
        return self._private.sign(text.encode("utf-8"))


def generate_key(name: str, key_type: int = KEY_TYPE_ED25519) -> tuple[str, str]:
    """Generate a fresh Ed25519 key pair.

    Args:
        name: the key's name; for a log, its origin (e.g. ``"example.com/log"``).
        key_type: :data:`KEY_TYPE_ED25519` (default) or :data:`KEY_TYPE_COSIGNATURE_V1`.

    Returns:
        ``(signer key, verifier key)`` strings. Keep the first secret.

    Raises:
        NoteError: if the name is invalid or the type unknown.
    """
    if not _is_valid_name(name):
        raise NoteError(f"invalid key name {name!r}")
    if key_type not in _KEY_TYPES:
        raise NoteError(f"unknown key type 0x{key_type:02x}")
    private = Ed25519PrivateKey.generate()
    seed, public = private.private_bytes_raw(), private.public_key().public_bytes_raw()
    kid = key_id(name, key_type, public).hex()
    return (
        f"PRIVATE+KEY+{name}+{kid}+{_b64encode(bytes([key_type]) + seed)}",
        f"{name}+{kid}+{_b64encode(bytes([key_type]) + public)}",
    )


# --- notes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: ``— name base64(key ID ‖ signature)``."""

    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class ParsedNote:
    """A note split into its text and signature lines, nothing verified."""

    text: str
    signatures: tuple[NoteSignature, ...]


@dataclass(frozen=True)
class OpenedNote:
    """A note whose signatures were checked.

    Attributes:
        text: the note text, ending in ``"\\n"``.
        verified: names of the known keys whose signatures verified, in note order.
        unverified: names on signatures by unknown keys, in note order.
    """

    text: str
    verified: list[str]
    unverified: list[str]


def _malformed(why: str = "") -> NoteError:
    return NoteError("malformed note" + (f" ({why})" if why else ""))


def _check_text(text: str) -> None:
    """UTF-8, and no ASCII control character except newline (C2SP signed-note)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _malformed("not UTF-8") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise _malformed("control character")


def parse_note(note: str) -> ParsedNote:
    """Split a signed note into text and signature lines (C2SP signed-note), verifying nothing.

    Args:
        note: the whole note.

    Returns:
        The text (through its final newline) and every signature line, in order.

    Raises:
        NoteError: ``"malformed note"`` if the note has a control character, no
            blank line before the signatures, no final newline, a line that is
            not a signature, a bad name or base64, or more than
            :data:`MAX_SIGNATURES` signatures.
    """
    _check_text(note)
    split = note.rfind("\n\n")
    if split < 0:
        raise _malformed("no blank line before the signature lines")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise _malformed("no signature line")
    if not block.endswith("\n"):
        raise _malformed("no final newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise _malformed("implementation limit")
    return ParsedNote(text, tuple(_parse_signature_line(line, n) for n, line in enumerate(lines, 1)))


def _parse_signature_line(line: str, n: int = 1) -> NoteSignature:
    bad = _malformed(f"signature line {n} is not `\u2014 NAME BASE64`")
    if not line.startswith(_SIG_PREFIX):
        raise bad
    name, sep, b64 = line[len(_SIG_PREFIX) :].partition(" ")
    if not sep or not _is_valid_name(name) or not b64:
        raise bad
    try:
        raw = _b64decode(b64)
    except ValueError as exc:
        raise bad from exc
    if len(raw) < 5:
        raise _malformed(f"signature line {n} is shorter than a key ID and a signature")
    return NoteSignature(name, raw[:4], raw[4:])


def _index_verifiers(verifiers: Iterable[Verifier | str]) -> dict[tuple[str, bytes], Verifier]:
    known: dict[tuple[str, bytes], Verifier] = {}
    for v in verifiers:
        v = Verifier.from_vkey(v) if isinstance(v, str) else v
        other = known.setdefault((v.name, v.key_id), v)
        if other != v:
            raise NoteError(f"ambiguous key {v.name}+{v.key_id.hex()}")
    return known


def open_note(note: str, verifiers: Iterable[Verifier | str]) -> OpenedNote:
    """Parse a signed note and verify its signatures, as Go's ``note.Open`` does.

    A signature by a known key (same name and key ID) must verify; repeated
    signatures by one known key are counted once; signatures by unknown keys
    are listed in ``unverified`` (identical lines once).

    Args:
        note: the whole note.
        verifiers: the trusted keys (:class:`Verifier` objects or vkey strings).

    Returns:
        The text with the names that verified and those that could not be checked.

    Raises:
        NoteError: ``"malformed note"`` (see :func:`parse_note`);
            ``"invalid signature for key NAME+KEYID"``; or
            ``"note has no verifiable signatures"`` when no known key signed it.
    """
    parsed = parse_note(note)
    known = _index_verifiers(verifiers)
    verified: list[str] = []
    unverified: list[str] = []
    seen: set[tuple[str, bytes]] = set()
    seen_unknown: set[NoteSignature] = set()
    for sig in parsed.signatures:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            if sig not in seen_unknown:
                seen_unknown.add(sig)
                unverified.append(sig.name)
            continue
        if (sig.name, sig.key_id) in seen:
            continue
        seen.add((sig.name, sig.key_id))
        if not verifier.verify(parsed.text, sig.signature):
            raise NoteError(f"invalid signature for key {sig.name}+{sig.key_id.hex()}")
        verified.append(sig.name)
    if not verified:
        raise NoteError("note has no verifiable signatures")
    return OpenedNote(parsed.text, verified, unverified)


def sign_note(text: str, *signers: Signer) -> str:
    """Sign a note text with one or more keys (C2SP signed-note).

    Args:
        text: the note text; must end with ``"\\n"`` and hold no control
            character other than newline.
        *signers: at least one :class:`Signer`, each a distinct key.

    Returns:
        ``text + "\\n"`` followed by one ``"— name base64(keyID ‖ sig)\\n"`` line
        per signer, in order. Ed25519 is deterministic, so this is reproducible.

    Raises:
        NoteError: on a bad text, no signer or a repeated signer.
    """
    _check_text(text)
    if not text.endswith("\n"):
        raise _malformed("text must end with a newline")
    if not signers:
        raise NoteError("a note needs at least one signer")
    if len({(s.name, s.key_id) for s in signers}) != len(signers):
        raise NoteError("the same key signs twice")
    lines = [f"{_SIG_PREFIX}{s.name} {_b64encode(s.key_id + s.sign(text))}\n" for s in signers]
    return text + "\n" + "".join(lines)


# --- cosignatures (C2SP tlog-cosignature) ----------------------------------------------


def cosignature_message(body: str, timestamp: int) -> str:
    """The bytes a cosignature/v1 signs: ``"cosignature/v1\\ntime <t>\\n" + body``."""
    return f"cosignature/v1\ntime {timestamp}\n{body}"


def parse_cosignature(signature: bytes) -> tuple[bytes, int]:
    """Split a cosignature/v1 note signature (C2SP tlog-cosignature).

    Args:
        signature: the decoded base64 of a signature line: ``key ID (4) ‖
            timestamp (u64 big-endian) ‖ Ed25519 signature (64)``, 76 bytes.

    Returns:
        ``(key ID, timestamp in UNIX seconds)``.

    Raises:
        NoteError: if the signature is not 76 bytes long.
    """
    if len(signature) != _COSIG_SIZE:
        raise NoteError(f"a cosignature/v1 is {_COSIG_SIZE} bytes, got {len(signature)}")
    return bytes(signature[:4]), int.from_bytes(signature[4:12], "big")


# --- checkpoints (C2SP tlog-checkpoint) ------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A log checkpoint (C2SP tlog-checkpoint).

    Attributes:
        origin: the log's unique name (e.g. ``"example.com/log"``); the signing key's name.
        size: the tree size, in leaves (0 to 2**64 - 1).
        root: the 32-byte RFC 9162 root hash at ``size``.
        extensions: further non-empty lines, without their newlines.

    Raises:
        NoteError: from the constructor if a field is invalid.
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or any(ord(c) < 0x20 for c in self.origin):
            raise NoteError(f"invalid checkpoint origin {self.origin!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size < 2**64:
            raise NoteError(f"invalid checkpoint size {self.size!r}")
        if not isinstance(self.root, bytes) or len(self.root) != 32:
            raise NoteError("a checkpoint root hash is 32 bytes")
        object.__setattr__(self, "extensions", tuple(self.extensions))
        for line in self.extensions:
            if not line or any(ord(c) < 0x20 for c in line):
                raise NoteError(f"invalid checkpoint extension line {line!r}")

    def body(self) -> str:
        """The note text: ``origin\\nsize\\nbase64(root)\\n`` then one line per extension."""
        lines = [self.origin, str(self.size), _b64encode(self.root), *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def parse(cls, body: str) -> Checkpoint:
        """Parse a checkpoint body (the note text), C2SP tlog-checkpoint.

        Raises:
            NoteError: if the body does not end in a newline, has fewer than three
                lines, a size that is not canonical decimal, or a root that is not
                canonical base64 of 32 bytes.
        """
        if not body.endswith("\n"):
            raise NoteError("checkpoint body must end with a newline")
        lines = body[:-1].split("\n")
        if len(lines) < 3:
            raise NoteError("checkpoint body needs origin, size and root lines")
        origin, size_text, root_text, *extensions = lines
        if not re.fullmatch(r"0|[1-9][0-9]*", size_text):
            raise NoteError(f"invalid checkpoint size {size_text!r}")
        try:
            root = _b64decode(root_text)
        except ValueError as exc:
            raise NoteError(f"invalid checkpoint root: {exc}") from exc
        return cls(origin, int(size_text), root, tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer) -> str:
    """Sign a checkpoint as a note.

    Raises:
        NoteError: if the signer is not an Ed25519 (type 0x01) key named after
            the checkpoint's origin.
    """
    if signer.key_type != KEY_TYPE_ED25519:
        raise NoteError("a checkpoint is signed with an Ed25519 (type 0x01) key")
    if signer.name != checkpoint.origin:
        raise NoteError(f"key {signer.name!r} cannot sign for origin {checkpoint.origin!r}")
    return sign_note(checkpoint.body(), signer)


def verify_checkpoint(note: str, verifier: Verifier | str) -> Checkpoint:
    """Verify a signed checkpoint with the log's key and parse it.

    Other signatures (witness cosignatures, unknown keys) may be present; only
    the log key's signature is required.

    Args:
        note: the signed checkpoint note.
        verifier: the log's Ed25519 verifier (or its vkey string); its name must
            equal the checkpoint's origin (C2SP says SHOULD; we require it).

    Returns:
        The checkpoint.

    Raises:
        NoteError: if the note is malformed, not signed by ``verifier``, has a bad
            signature by it, is not a valid checkpoint, or names another origin.
    """
    if isinstance(verifier, str):
        verifier = Verifier.from_vkey(verifier)
    if verifier.key_type != KEY_TYPE_ED25519:
        raise NoteError("a checkpoint is verified with an Ed25519 (type 0x01) key")
    opened = open_note(note, [verifier])
    checkpoint = Checkpoint.parse(opened.text)
    if checkpoint.origin != verifier.name:
        raise NoteError(f"checkpoint origin {checkpoint.origin!r} is not the key name {verifier.name!r}")
    return checkpoint
