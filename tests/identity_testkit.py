"""Test helper: the store's first admin, whose key signs identity changes (sealbox.identities).

Every identity change but the first admin's own addition is signed with an enabled admin's
key, so tests that need approvers add one admin first. ``admin_key(store, folder)`` adds
``root`` (role admin) on first use and returns its key file, ``folder / "root.key"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sealbox.identities import add_identity, identity_book

ROOT = "root"


def admin_key(store: Any, folder: Path) -> Path:
    path = Path(folder) / f"{ROOT}.key"
    if identity_book(store).get(ROOT) is None:
        add_identity(store, ROOT, "admin", key_path=path)
    return path


def grant_key(store: Any) -> Path:
    """The key file of an admin that may sign grants for ``store`` (sealbox.access): ``root``,
    added next to the store's folder (``<store folder>/../root.key``) on first use."""
    return admin_key(store, Path(store.path).parent)


def signed_grant(store: Any, *args: Any, **kwargs: Any) -> str:
    """:func:`sealbox.access.grant_access` signed with :func:`grant_key` (or ``key_file=`` if given)."""
    from sealbox.access import grant_access

    if kwargs.get("key_file") is None:
        kwargs["key_file"] = grant_key(store)
    return grant_access(store, *args, **kwargs)


def sign_grant_payload(store: Any, payload: dict, key_file: Any = None, **fields: Any) -> dict:
    """``payload`` (an ``access.granted`` payload, as written below grant_access) signed as
    grant_access signs it, by the key's identity (default: :func:`grant_key`); ``fields``
    (e.g. ``origin``, ``identity``, ``granted_at``) override what is signed."""
    from datetime import datetime, timezone

    from sealbox.access import grant_fields
    from sealbox.identities import load_key, sign_fields

    signer = load_key(key_file or grant_key(store))
    p = {**payload, "origin": store.origin, "identity": signer.name,
         "granted_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **fields}
    p["signature"] = sign_fields(signer, grant_fields(p))
    p["key_id"] = signer.verifier.vkey.split("+")[1]
    return p


def signed_revoke(store: Any, *args: Any, **kwargs: Any) -> str:
    """:func:`sealbox.access.revoke` signed with :func:`grant_key` (or ``key_file=`` if given)."""
    from sealbox.access import revoke

    if kwargs.get("key_file") is None:
        kwargs["key_file"] = grant_key(store)
    return revoke(store, *args, **kwargs)


def signed_retry(store: Any, *args: Any, **kwargs: Any) -> str:
    """:func:`sealbox.access.retry` signed with :func:`grant_key` (or ``key_file=`` if given)."""
    from sealbox.access import retry

    if kwargs.get("key_file") is None:
        kwargs["key_file"] = grant_key(store)
    return retry(store, *args, **kwargs)


def sign_revocation_payload(store: Any, payload: dict, after: int, key_file: Any = None, **fields: Any) -> dict:
    """``payload`` (an ``access.revoked`` payload, as written below revoke) signed as revoke signs it,
    chained ``after`` that leaf, by the key's identity (default: :func:`grant_key`); ``fields``
    (e.g. ``origin``, ``identity``, ``at``) override what is signed."""
    from datetime import datetime, timezone

    from sealbox.access import revocation_fields
    from sealbox.identities import load_key, sign_fields

    signer = load_key(key_file or grant_key(store))
    p = {**payload, "origin": store.origin, "identity": signer.name, "after": after,
         "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **fields}
    p["signature"] = sign_fields(signer, revocation_fields(p))
    p["key_id"] = signer.verifier.vkey.split("+")[1]
    return p
