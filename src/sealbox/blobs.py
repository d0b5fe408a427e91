"""Content kept outside the hashed event bytes, committed to by hash.

A blob's **commitment** is ``sha256:`` + hex SHA-256(salt ‖ content), where
``content`` is the RFC 8785 canonical bytes of the (type-tag encoded) value and
``salt`` = HMAC-SHA256(store secret, content). The salt is deterministic, so
identical content is stored once; it is stored beside the blob and erased with
it, so a holder of an export cannot confirm a guess of short erased content
(the commitment alone reveals nothing without the salt). Verifying a blob is
recomputing SHA-256(salt ‖ content).

Why :data:`INLINE_LIMIT` = 512 bytes: a reference ``{"$blob":"sha256:…"}`` costs
81 bytes in the event and a blob row about 150 bytes more, so values below a
few hundred bytes are cheaper inline (and stay readable in the event itself);
anything a conversation resends every turn (messages, documents, tool results)
is far above it and is stored once. It is well below 64 KiB so that no event's
hashed bytes grow with the size of the content it carries.

Lists above the limit are stored as a **chain**: the list ``[a, b, c]`` becomes a
reference to the blob ``{"$cons": [ref([a, b]), c]}``, whose first element refers
to the blob of the list's prefix. A conversation resent with one more message
each turn therefore adds one small blob per turn: storage grows O(turns), not
O(turns²).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Callable

from sealbox.canonical import canonical_bytes_encoded

__all__ = ["INLINE_LIMIT", "commitment", "salt_for", "check_blob", "blobify", "resolve", "blob_refs", "is_blob_ref"]

#: Content whose canonical form is longer than this (bytes) is moved to a blob.
INLINE_LIMIT = 512

BLOB_TAG = "$blob"
CONS_TAG = "$cons"
ESC_TAG = "$esc"


def salt_for(secret: bytes, content: bytes) -> bytes:
    """HMAC-SHA256(secret, content): the blob's 32-byte salt (RFC 2104).

    ``hmac.digest`` computes it in one call into OpenSSL: the same bytes as
    ``hmac.new(secret, content, hashlib.sha256).digest()``, without building an ``HMAC`` object
    (a recorded tool call salts one blob, its decision's inputs)."""
    return hmac.digest(secret, content, "sha256")


def commitment(salt: bytes, content: bytes) -> str:
    """``sha256:<hex>`` of SHA-256(salt ‖ content)."""
    return "sha256:" + hashlib.sha256(salt + content).hexdigest()


def check_blob(ref: str, salt: bytes, content: bytes) -> bool:
    """Whether ``content`` with ``salt`` matches the commitment ``ref``."""
    return hmac.compare_digest(commitment(salt, content), ref)


def _is_escaped(value: dict) -> bool:
    """``{"$esc": {...}}``: sealbox.canonical's escape of a user's dict whose keys start with ``$``."""
    return len(value) == 1 and ESC_TAG in value and type(value[ESC_TAG]) is dict


def is_blob_ref(value: Any) -> bool:
    """Whether ``value`` is a ``{"$blob": "sha256:…"}`` reference."""
    return type(value) is dict and len(value) == 1 and BLOB_TAG in value


def blobify(value: Any, put: Callable[[bytes], str], limit: int = INLINE_LIMIT, data: bytes | None = None) -> Any:
    """Replace parts of ``value`` larger than ``limit`` bytes by blob references.

    Args:
        value: a strict JSON value (already type-tag encoded).
        put: stores canonical content bytes and returns its commitment.
        limit: inline limit in bytes of canonical JSON.
        data: ``value``'s canonical bytes when the caller has them already.

    Returns:
        The value with large parts replaced by ``{"$blob": ref}``.
    """
    if data is None:
        data = canonical_bytes_encoded(value)
    if len(data) <= limit:
        return value
    if type(value) is list:
        return _chain(value, put, limit)
    if type(value) is dict:
        inner = value[ESC_TAG] if _is_escaped(value) else value  # a user's dict: reduce its values only
        # The whole's bytes are '{' + entries joined by ',' + '}' (inside '{"$esc":' ... '}' for an
        # escaped dict), an entry being '"key":' (at least len(key) + 3 bytes) and its value (at
        # least 1 byte). So no value exceeds ``bound`` bytes; when that is within the limit, no
        # part can become a reference and none is serialized again to find out.
        bound = len(data) - sum(len(k) for k in inner) - 5 * len(inner) - (9 if inner is not value else 0)
        parts = {k: blobify(v, put, limit) for k, v in inner.items()} if bound > limit else inner
        if any(parts[k] is not v for k, v in inner.items()):  # a part became a reference: new bytes
            reduced = {ESC_TAG: parts} if inner is not value else parts
            data = canonical_bytes_encoded(reduced)
            if len(data) <= limit:
                return reduced
        # else every part is small and unchanged: the whole is ``value``, its bytes ``data``
    return {BLOB_TAG: put(data)}


def _chain(items: list, put: Callable[[bytes], str], limit: int) -> dict:
    prev: Any = None
    for item in items:
        node = {CONS_TAG: [prev, blobify(item, put, limit)]}
        prev = {BLOB_TAG: put(canonical_bytes_encoded(node))}
    return prev


def resolve(value: Any, get: Callable[[str], bytes]) -> Any:
    """Inverse of :func:`blobify`: replace every reference by its content.

    Raises:
        BlobNotFoundError: from ``get``, when a blob is missing or erased.
    """
    if type(value) is dict:
        if is_blob_ref(value):
            return _resolve_ref(value[BLOB_TAG], get)
        if _is_escaped(value):  # a user's dict with "$" keys: its values may be refs, the dict is not one
            return {ESC_TAG: {k: resolve(v, get) for k, v in value[ESC_TAG].items()}}
        return {k: resolve(v, get) for k, v in value.items()}
    if type(value) is list:
        return [resolve(v, get) for v in value]
    return value


def _resolve_ref(ref: str, get: Callable[[str], bytes]) -> Any:
    content = json.loads(get(ref))
    if not (type(content) is dict and len(content) == 1 and CONS_TAG in content):
        return resolve(content, get)
    items: list = []
    while content is not None:  # walk the chain without recursion
        prev, item = content[CONS_TAG]
        items.append(resolve(item, get))
        content = json.loads(get(prev[BLOB_TAG])) if prev is not None else None
    items.reverse()
    return items


def blob_refs(value: Any) -> list[str]:
    """Every commitment referenced directly in ``value`` (not following chains)."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            if is_blob_ref(v) and isinstance(v[BLOB_TAG], str):
                out.append(v[BLOB_TAG])
            elif _is_escaped(v):  # {"$esc": {"$blob": ...}} is a user's dict, not a reference
                stack.extend(v[ESC_TAG].values())
            else:
                stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
    return out
