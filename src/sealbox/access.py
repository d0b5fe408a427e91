"""Grants, provider credentials, and revocation at the provider.

A **grant** is a permission a principal holds for a tool: an upstream ``server``
and ``tool`` (both :func:`fnmatch.fnmatchcase` globs), a ``scope``, an optional
expiry, and optionally a **provider credential** — an OAuth access and refresh
token issued by an external provider, with the provider's RFC 7009 revocation
endpoint, its RFC 7662 introspection endpoint (if it has one) and the client
credentials Sealbox uses to call them.

* :func:`grant_access` records ``access.granted`` in the system run. The credential
  is stored **encrypted outside the log** (table ``credentials``: AES-256-GCM under
  a key derived with HKDF-SHA256 from the store secret, the grant id as associated
  data), in the same transaction. No token, client secret or endpoint of a
  credential ever enters the hashed bytes of an event, a blob or an export; the
  event says only that the grant has one (``"credential": true``).
* :func:`grant_status` decides whether a call may use a grant. The recorder calls it
  inside the transaction that records the call's decision, so a revocation that
  committed before is always seen. Unknown grant, wrong principal, tool not
  covered, expired, or revoked (any ``access.revoked`` step) → deny.
* :func:`revoke` first records ``access.revoked`` step ``requested`` — from that
  commit on every call under the grant is denied locally — then revokes both the
  refresh token and the access token at the provider (RFC 7009, ``token_type_hint``),
  recording ``sent``; then, where the provider offers RFC 7662 introspection, checks
  that both are ``active: false`` and records ``confirmed``. RFC 7009 answers 200
  for a revoked *and* for an unknown token, so only introspection confirms. When
  the provider cannot be reached, answers 5xx/429, refuses, or still reports a token
  active, the step is ``failed`` (with the detail) and the revocation stays
  **pending at provider** until :func:`retry` succeeds. It is never shown as
  confirmed when it is not.

A self-contained access token (a JWT the resource server checks by its signature)
may stay valid at the provider until it expires, whatever the revocation endpoint
answered: introspection then reports it active, and the revocation stays pending.

The HTTP client side uses :mod:`authlib` (``OAuth2Session.revoke_token`` and
``introspect_token``), imported only when a revocation reaches a provider.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable, Protocol
from urllib.parse import urlparse

from sealbox.errors import SealboxError
from sealbox.events import SYSTEM_RUN_ID, EventDraft

__all__ = [
    "AccessError",
    "ProviderUnavailable",
    "ProviderCredential",
    "ProviderAnswer",
    "ProviderClient",
    "AuthlibProviderClient",
    "Grant",
    "STATUS_ACTIVE",
    "STATUS_EXPIRED",
    "STATUS_PENDING",
    "STATUS_CONFIRMED",
    "STATUS_LOCAL",
    "STATUS_UNCONFIRMED",
    "IMPLICIT_PREFIX",
    "is_implicit",
    "grant_access",
    "grant_status",
    "get_grant",
    "revoke",
    "retry",
    "access_status",
    "list_grants",
    "show_grant",
    "load_credential",
    "delete_credential",
    "parse_expiry",
]

STATUS_ACTIVE = "active"
STATUS_EXPIRED = "expired"
STATUS_PENDING = "revoked (pending at provider)"
STATUS_CONFIRMED = "revoked (confirmed at provider)"
STATUS_LOCAL = "revoked (local only: no provider)"
#: Sent to a provider that offers no introspection endpoint: nothing can confirm it.
STATUS_UNCONFIRMED = "revoked (sent to provider, unconfirmed: no introspection endpoint)"

#: Tool calls that name no grant are recorded with ``implicit:<principal>``; they are not checked here.
IMPLICIT_PREFIX = "implicit:"

_ACCESS_KINDS = "('access.granted', 'access.revoked')"
_HKDF_INFO = b"sealbox/credentials/v1"
_TOKEN_HINTS = ("refresh_token", "access_token")  # refresh first: it is the long-lived one (RFC 7009 §2.1)
_CRED_KEYS = {"access_token", "refresh_token", "client_id", "client_secret", "revocation_endpoint",
              "introspection_endpoint", "access_token_expires_at", "auth_method", "provider"}
_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class AccessError(SealboxError):
    """A grant operation cannot be done (unknown grant, bad credential, wrong state)."""


class ProviderUnavailable(Exception):
    """The provider could not be reached (connection refused, timeout, TLS error)."""


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True, repr=False)
class ProviderCredential:
    """An OAuth credential issued by an external provider, and how to revoke it.

    Attributes:
        revocation_endpoint: the RFC 7009 endpoint URL.
        client_id, client_secret: the client Sealbox authenticates as (RFC 6749 §2.3).
        access_token, refresh_token: the tokens to revoke (at least one).
        introspection_endpoint: the RFC 7662 endpoint URL, or None if the provider has none.
        access_token_expires_at: when the access token expires (RFC 3339), if known.
        auth_method: ``client_secret_basic`` (default), ``client_secret_post`` or ``none``.

    Its ``repr`` never shows a token or the secret.
    """

    revocation_endpoint: str
    client_id: str
    client_secret: str | None = None
    access_token: str | None = None
    refresh_token: str | None = None
    introspection_endpoint: str | None = None
    access_token_expires_at: str | None = None
    auth_method: str = "client_secret_basic"

    def __repr__(self) -> str:
        held = [h for h in _TOKEN_HINTS if getattr(self, h)]
        return (f"ProviderCredential(revocation_endpoint={self.revocation_endpoint!r}, client_id={self.client_id!r}, "
                f"tokens={held}, introspection={'yes' if self.introspection_endpoint else 'no'})")

    __str__ = __repr__

    @classmethod
    def from_dict(cls, data: Any) -> "ProviderCredential":
        """Build and check a credential from a dict (e.g. a ``--credential-file``).

        Raises:
            AccessError: a required key is missing, a key is unknown, or a value has the
                wrong type. The message names keys, never values.
        """
        if isinstance(data, ProviderCredential):
            return data
        if not isinstance(data, dict):
            raise AccessError(f"a credential must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - _CRED_KEYS)
        if unknown:
            raise AccessError(f"unknown credential keys {unknown} (known: {sorted(_CRED_KEYS)})")
        for key, value in data.items():
            if value is not None and not isinstance(value, str):
                raise AccessError(f"credential key {key!r} must be a string")
        for key in ("revocation_endpoint", "client_id"):
            if not data.get(key):
                raise AccessError(f"a credential needs {key!r}")
        if not data.get("access_token") and not data.get("refresh_token"):
            raise AccessError("a credential needs an 'access_token' or a 'refresh_token' (or both)")
        for key in ("revocation_endpoint", "introspection_endpoint"):
            url = data.get(key)
            if not url:
                continue
            parsed = urlparse(url)
            if parsed.scheme == "http" and parsed.hostname not in _LOOPBACK:
                raise AccessError(f"credential key {key!r} must be an https URL (RFC 7009 §2 requires TLS; "
                                  "plain http is accepted only for a provider on this machine)")
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise AccessError(f"credential key {key!r} must be an https URL")
        method = data.get("auth_method") or ("client_secret_basic" if data.get("client_secret") else "none")
        if method not in _AUTH_METHODS:
            raise AccessError(f"credential 'auth_method' must be one of {list(_AUTH_METHODS)}")
        if data.get("access_token_expires_at"):
            _parse_time(data["access_token_expires_at"], "access_token_expires_at")
        return cls(
            revocation_endpoint=data["revocation_endpoint"], client_id=data["client_id"],
            client_secret=data.get("client_secret"), access_token=data.get("access_token"),
            refresh_token=data.get("refresh_token"), introspection_endpoint=data.get("introspection_endpoint"),
            access_token_expires_at=data.get("access_token_expires_at"), auth_method=method,
        )

    def to_dict(self) -> dict[str, Any]:
        """The credential as a dict (secrets included: only for encryption)."""
        return {k: getattr(self, k) for k in ("revocation_endpoint", "client_id", "client_secret", "access_token",
                                               "refresh_token", "introspection_endpoint", "access_token_expires_at",
                                               "auth_method")}

    def tokens(self) -> list[tuple[str, str]]:
        """(token_type_hint, token) of each token held, refresh token first."""
        return [(hint, getattr(self, hint)) for hint in _TOKEN_HINTS if getattr(self, hint)]

    def secrets(self) -> list[str]:
        """Every secret string in the credential (never to be written to the log)."""
        return [s for s in (self.access_token, self.refresh_token, self.client_secret) if s]


def _cipher(secret: bytes) -> Any:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(secret)
    return AESGCM(key)


def _seal(secret: bytes, grant_id: str, cred: ProviderCredential) -> tuple[bytes, bytes]:
    nonce = os.urandom(12)
    plain = json.dumps(cred.to_dict(), sort_keys=True).encode("utf-8")
    return nonce, _cipher(secret).encrypt(nonce, plain, grant_id.encode("utf-8"))


def _unseal(secret: bytes, grant_id: str, nonce: bytes, ciphertext: bytes) -> ProviderCredential:
    from cryptography.exceptions import InvalidTag

    try:
        plain = _cipher(secret).decrypt(bytes(nonce), bytes(ciphertext), grant_id.encode("utf-8"))
    except InvalidTag as exc:
        raise AccessError(f"the credential of grant {grant_id} cannot be decrypted (altered, or moved from "
                          "another grant or store)") from exc
    return ProviderCredential.from_dict(json.loads(plain))


def _secret_of(store: Any) -> bytes:
    secret = getattr(store, "_secret", None)
    if not isinstance(secret, bytes) or len(secret) < 32:
        raise AccessError("this store has no secret to encrypt credentials with")
    return secret


def _conn(reader_or_store: Any) -> Any:
    """The SQLite connection of a :class:`~sealbox.store.sqlite.Reader` or a store."""
    conn = getattr(reader_or_store, "conn", None)
    if conn is not None:
        return conn
    getter = getattr(reader_or_store, "_conn", None)
    if callable(getter):
        return getter()
    raise AccessError(f"grants need a SQLite store or reader, got {type(reader_or_store).__name__}")


def _in_write_txn(store: Any, fn: Callable[[Any], list[EventDraft]]) -> list:
    """Run ``fn(conn)`` in one write transaction with the drafts it returns (public ``append_with``)."""
    return store.append_with(lambda reader: list(fn(_conn(reader))))


def load_credential(store: Any, grant_id: str) -> ProviderCredential | None:
    """The decrypted credential of a grant, or None (the grant had none, or it was deleted).

    Raises:
        AccessError: the stored ciphertext does not decrypt under this store's key.
    """
    row = _conn(store).execute("SELECT nonce, ciphertext FROM credentials WHERE grant_id = ?", (grant_id,)).fetchone()
    return None if row is None else _unseal(_secret_of(store), grant_id, row[0], row[1])


def delete_credential(store: Any, grant_id: str, *, force: bool = False) -> bool:
    """Delete a grant's stored credential (the only delete Sealbox does: credentials are
    not evidence). Nothing in the log changes; ``access show`` then says ``deleted``.

    Without ``force`` this is refused while the grant is active, expired or pending at
    the provider: the credential is what Sealbox needs to revoke the tokens there.
    The freed pages are zeroed (``PRAGMA secure_delete``) and the WAL checkpointed.

    Returns:
        True if a credential was deleted, False if there was none.

    Raises:
        AccessError: unknown grant, or refused (see above).
    """
    status = access_status(store, grant_id)
    if not force and status in (STATUS_ACTIVE, STATUS_EXPIRED, STATUS_PENDING):
        raise AccessError(f"grant {grant_id} is {status}: deleting its credential would make it impossible to "
                          "revoke the tokens at the provider; revoke it first, or force")
    deleted: list[int] = []

    def work(conn: Any) -> list[EventDraft]:
        conn.execute("PRAGMA secure_delete = ON")
        deleted.append(conn.execute("DELETE FROM credentials WHERE grant_id = ?", (grant_id,)).rowcount)
        return []

    conn = _conn(store)
    try:
        _in_write_txn(store, work)
    finally:
        conn.execute("PRAGMA secure_delete = OFF")
    if deleted and deleted[0]:
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception:  # noqa: BLE001 - best effort: a busy reader keeps the WAL until later
            pass
    return bool(deleted and deleted[0])


# --------------------------------------------------------------------------- grants


@dataclass(frozen=True)
class Grant:
    """A grant as recorded by ``access.granted``.

    Attributes:
        grant_id, principal: the grant and who holds it.
        server, tool: globs of the tools it covers.
        scope: as given (a string or a list of strings), recorded, enforced by the provider.
        expires_at: RFC 3339 UTC, or None.
        provider: the provider's name, or None.
        credential: whether a provider credential was stored with it.
        granted_at, granted_by: when and by whom (the event's ts and principal).
        leaf_index: of its ``access.granted`` event.
    """

    grant_id: str
    principal: str
    server: str
    tool: str
    scope: Any
    expires_at: str | None
    provider: str | None
    credential: bool
    granted_at: str
    granted_by: str
    leaf_index: int

    def covers(self, server: str, tool: str) -> bool:
        """Whether the grant's server and tool globs match this upstream tool."""
        return fnmatchcase(server, self.server) and fnmatchcase(tool, self.tool)

    def expired(self, now: datetime) -> bool:
        """Whether the grant's expiry is at or before ``now``."""
        return self.expires_at is not None and _parse_time(self.expires_at, "expires_at") <= now


@dataclass
class _History:
    grant: Grant | None
    steps: list[dict[str, Any]] = field(default_factory=list)


def _history_from_rows(rows: Iterable[tuple[int, Any]], grant_id: str | None = None) -> dict[str, _History]:
    out: dict[str, _History] = {}
    for leaf_index, raw in rows:
        env = json.loads(bytes(raw))
        payload = env["payload"]
        gid = payload.get("grant_id")
        if not isinstance(gid, str) or (grant_id is not None and gid != grant_id):
            continue
        hist = out.setdefault(gid, _History(None))
        if env["kind"] == "access.granted":
            if hist.grant is None:  # the first grant of an id decides; grant_access never writes a second
                hist.grant = Grant(
                    grant_id=gid, principal=payload["principal"], server=payload["server"], tool=payload["tool"],
                    scope=payload.get("scope"), expires_at=payload.get("expires_at"), provider=payload.get("provider"),
                    credential=bool(payload.get("credential")), granted_at=env["ts"], granted_by=env["principal"],
                    leaf_index=leaf_index)
        else:
            hist.steps.append({"step": payload["step"], "ts": env["ts"], "by": env["principal"],
                               "reason": payload.get("reason"), "detail": payload.get("detail"),
                               "leaf_index": leaf_index})
    return out


def _history(reader_or_store: Any, grant_id: str) -> _History:
    rows = _conn(reader_or_store).execute(
        "SELECT leaf_index, raw FROM events WHERE (CAST(raw AS TEXT) ->> '$.payload.grant_id') = ?"
        f" AND kind IN {_ACCESS_KINDS} AND run_id = ? ORDER BY leaf_index", (grant_id, SYSTEM_RUN_ID)).fetchall()
    return _history_from_rows(rows, grant_id).get(grant_id) or _History(None)


def _known(hist: _History, grant_id: str) -> Grant:
    if hist.grant is None:
        raise AccessError(f"no grant {grant_id!r} in this store (see `sealbox access list`)")
    return hist.grant


def get_grant(reader_or_store: Any, grant_id: str) -> Grant | None:
    """The grant recorded under ``grant_id``, or None."""
    return _history(reader_or_store, grant_id).grant


def is_implicit(grant_id: str | None) -> bool:
    """Whether a tool call's grant is the recorder's ``implicit:<principal>`` placeholder (or absent)."""
    return not grant_id or grant_id.startswith(IMPLICIT_PREFIX)


def grant_access(store: Any, principal: str, server: str, tool: str, scope: Any = None, expires_at: Any = None,
                 credential: "ProviderCredential | dict | None" = None, provider: str | None = None, *,
                 by: str = "sealbox", grant_id: str | None = None) -> str:
    """Give ``principal`` a grant for ``server``/``tool`` (globs); record ``access.granted``.

    Args:
        scope: a string or a list of strings (e.g. OAuth scopes), recorded as given.
        expires_at: a timezone-aware datetime, RFC 3339 text, a date, or a duration from
            now (``30d``, ``12h``); None: no expiry. Must be in the future.
        credential: a :class:`ProviderCredential` (or its dict form), stored encrypted
            outside the log in the same transaction as the event.
        provider: the provider's name (default: the revocation endpoint's host, when a
            credential is given).
        by: who grants (the event's principal).
        grant_id: an id to use (default: a new ``grant_<hex>``).

    Returns:
        The grant id.

    Raises:
        AccessError: a bad argument, or the grant id is taken.
    """
    for name, value in (("principal", principal), ("server", server), ("tool", tool), ("by", by)):
        if not isinstance(value, str) or not value:
            raise AccessError(f"{name} must be a non-empty string")
    if scope is not None and not isinstance(scope, str) and not (
            isinstance(scope, (list, tuple)) and all(isinstance(s, str) for s in scope)):
        raise AccessError("scope must be a string or a list of strings")
    expires = None if expires_at is None else parse_expiry(expires_at)
    if expires is not None and _parse_time(expires, "expires_at") <= datetime.now(timezone.utc):
        raise AccessError(f"expires_at {expires} is in the past")
    cred = None if credential is None else ProviderCredential.from_dict(credential)
    if provider is None and cred is not None:
        provider = urlparse(cred.revocation_endpoint).netloc or None
    gid = grant_id or "grant_" + uuid.uuid4().hex[:24]
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", gid) or is_implicit(gid):
        raise AccessError(f"grant id {gid!r} must be 1-128 of A-Z a-z 0-9 _ . : - and not start with {IMPLICIT_PREFIX!r}")
    payload: dict[str, Any] = {"grant_id": gid, "principal": principal, "server": server, "tool": tool,
                               "scope": list(scope) if isinstance(scope, tuple) else scope, "expires_at": expires,
                               "provider": provider, "credential": cred is not None}
    secret = _secret_of(store) if cred is not None else b""

    def work(conn: Any) -> list[EventDraft]:
        if _history(_Wrap(conn), gid).grant is not None:
            raise AccessError(f"grant {gid!r} already exists")
        if cred is not None:
            nonce, ciphertext = _seal(secret, gid, cred)
            conn.execute("INSERT INTO credentials (grant_id, nonce, ciphertext, created_at) VALUES (?, ?, ?, ?)",
                         (gid, nonce, ciphertext, _rfc3339(datetime.now(timezone.utc))))
        return [EventDraft("access.granted", payload, run_id=SYSTEM_RUN_ID, principal=by)]

    _in_write_txn(store, work)
    return gid


class _Wrap:
    def __init__(self, conn: Any) -> None:
        self.conn = conn


def grant_status(reader_or_store: Any, grant_id: str, principal: str, server: str, tool: str,
                 now: Any = None) -> tuple[bool, str]:
    """Whether a call by ``principal`` to ``server``/``tool`` may use ``grant_id`` now.

    Reads the grant's ``access.*`` events; pass the recorder's transaction reader so
    that the answer and the decision it leads to are consistent.

    Returns:
        ``(True, why)``, or ``(False, why)`` for an unknown grant, a grant revoked (any
        ``access.revoked`` step: denial starts at ``requested``), held by another
        principal, not covering the tool, or expired.
    """
    hist = _history(reader_or_store, grant_id)
    grant = hist.grant
    if grant is None:
        return False, f"no grant {grant_id!r} in this store"
    if hist.steps:
        first = hist.steps[0]
        why = f": {first['reason']}" if first.get("reason") else ""
        return False, f"grant {grant_id} was revoked at {first['ts']} by {first['by']}{why}"
    if principal != grant.principal:
        return False, f"grant {grant_id} is held by {grant.principal}, not {principal}"
    if not grant.covers(server, tool):
        return False, f"grant {grant_id} covers {grant.server}/{grant.tool}, not {server}/{tool}"
    when = _now(now)
    if grant.expired(when):
        return False, f"grant {grant_id} expired at {grant.expires_at}"
    return True, f"grant {grant_id} held by {principal} for {grant.server}/{grant.tool}"


def _status_of(hist: _History, now: datetime) -> str:
    grant = hist.grant
    assert grant is not None
    if not hist.steps:
        return STATUS_EXPIRED if grant.expired(now) else STATUS_ACTIVE
    if any(s["step"] == "confirmed" for s in hist.steps):
        return STATUS_CONFIRMED
    if not grant.credential:
        return STATUS_LOCAL
    last = hist.steps[-1]
    if last["step"] == "sent" and isinstance(last["detail"], dict) and last["detail"].get("introspection") is False \
            and all(t.get("http_status") == 200 for t in last["detail"].get("tokens", [])):
        return STATUS_UNCONFIRMED
    return STATUS_PENDING


def access_status(store: Any, grant_id: str, now: Any = None) -> str:
    """``active``, ``expired``, or how it was revoked: :data:`STATUS_PENDING`,
    :data:`STATUS_CONFIRMED`, :data:`STATUS_LOCAL` or :data:`STATUS_UNCONFIRMED`.

    Raises:
        AccessError: no such grant.
    """
    hist = _history(store, grant_id)
    _known(hist, grant_id)
    return _status_of(hist, _now(now))


def _grant_row(hist: _History, held: bool, now: datetime) -> dict[str, Any]:
    g = hist.grant
    assert g is not None
    return {"grant_id": g.grant_id, "principal": g.principal, "server": g.server, "tool": g.tool, "scope": g.scope,
            "expires_at": g.expires_at, "provider": g.provider,
            "credential": ("held" if held else "deleted") if g.credential else "none",
            "status": _status_of(hist, now), "granted_at": g.granted_at, "granted_by": g.granted_by}


def list_grants(store: Any, now: Any = None) -> list[dict[str, Any]]:
    """Every grant, oldest first: grant_id, principal, server, tool, scope, expires_at,
    provider, credential (``held`` / ``deleted`` / ``none``), status, granted_at, granted_by."""
    conn = _conn(store)
    rows = conn.execute(f"SELECT leaf_index, raw FROM events WHERE run_id = ? AND kind IN {_ACCESS_KINDS}"
                        " ORDER BY leaf_index", (SYSTEM_RUN_ID,)).fetchall()
    held = {r[0] for r in conn.execute("SELECT grant_id FROM credentials")}
    when = _now(now)
    return [_grant_row(h, gid in held, when) for gid, h in _history_from_rows(rows).items() if h.grant is not None]


def show_grant(store: Any, grant_id: str, now: Any = None) -> dict[str, Any]:
    """One grant as a :func:`list_grants` row plus ``steps``: each ``access.revoked``
    step in order (step, ts, by, reason, detail, leaf_index).

    Raises:
        AccessError: no such grant.
    """
    hist = _history(store, grant_id)
    _known(hist, grant_id)
    held = _conn(store).execute("SELECT 1 FROM credentials WHERE grant_id = ?", (grant_id,)).fetchone() is not None
    row = _grant_row(hist, held, _now(now))
    row["steps"] = hist.steps
    return row


# --------------------------------------------------------------------------- the provider


@dataclass(frozen=True)
class ProviderAnswer:
    """An HTTP answer of the provider: its status and JSON body (None if not JSON)."""

    status: int
    body: dict[str, Any] | None = None


class ProviderClient(Protocol):
    """Calls a provider's RFC 7009 and RFC 7662 endpoints for one credential.

    Both raise :class:`ProviderUnavailable` when the provider cannot be reached.
    """

    def revoke(self, cred: ProviderCredential, token: str, token_type_hint: str) -> ProviderAnswer:
        """POST the token to the revocation endpoint (RFC 7009 §2.1)."""

    def introspect(self, cred: ProviderCredential, token: str, token_type_hint: str) -> ProviderAnswer:
        """POST the token to the introspection endpoint (RFC 7662 §2.1)."""


class AuthlibProviderClient:
    """:class:`ProviderClient` over authlib's ``requests`` OAuth 2.0 client.

    Args:
        timeout: seconds for each HTTP request.
    """

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout

    def _session(self, cred: ProviderCredential) -> Any:
        from authlib.integrations.requests_client import OAuth2Session

        return OAuth2Session(client_id=cred.client_id, client_secret=cred.client_secret,
                             token_endpoint_auth_method=cred.auth_method,
                             revocation_endpoint_auth_method=cred.auth_method)

    def _post(self, call: Callable[[], Any]) -> ProviderAnswer:
        import requests

        try:
            resp = call()
        except requests.RequestException as exc:
            raise ProviderUnavailable(_describe_exc(exc)) from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        return ProviderAnswer(resp.status_code, body if isinstance(body, dict) else None)

    def revoke(self, cred: ProviderCredential, token: str, token_type_hint: str) -> ProviderAnswer:
        with self._session(cred) as sess:
            return self._post(lambda: sess.revoke_token(cred.revocation_endpoint, token=token,
                                                        token_type_hint=token_type_hint, timeout=self.timeout))

    def introspect(self, cred: ProviderCredential, token: str, token_type_hint: str) -> ProviderAnswer:
        if not cred.introspection_endpoint:
            raise AccessError("this provider has no introspection endpoint")
        with self._session(cred) as sess:
            return self._post(lambda: sess.introspect_token(cred.introspection_endpoint, token=token,
                                                            token_type_hint=token_type_hint, timeout=self.timeout))


def _describe_exc(exc: BaseException) -> str:
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] [^'\")\]]+", text)
    if m:
        return f"{type(exc).__name__}: {m.group(0).strip()}"
    if "timed out" in text.lower():
        return f"{type(exc).__name__}: timed out"
    return f"{type(exc).__name__}: {text[:200]}"


def _transient(answer: ProviderAnswer) -> bool:
    return answer.status >= 500 or answer.status == 429


def _oauth_error(answer: ProviderAnswer) -> str | None:
    err = (answer.body or {}).get("error")
    return err[:80] if isinstance(err, str) else None


def _scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` with every secret string replaced (a provider may echo a token in an error)."""
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, "[secret]")
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


class _Attempts:
    """Call ``fn`` until it gives a definitive answer, at most ``retries`` times, with backoff."""

    def __init__(self, retries: int, backoff: float, sleep: Callable[[float], None]) -> None:
        self.retries, self.backoff, self.sleep = max(1, int(retries)), backoff, sleep
        self.used = 0

    def run(self, fn: Callable[[], ProviderAnswer]) -> tuple[ProviderAnswer | None, str | None]:
        error = None
        for attempt in range(1, self.retries + 1):
            self.used = max(self.used, attempt)
            try:
                answer = fn()
            except ProviderUnavailable as exc:
                error = str(exc)
            else:
                if not _transient(answer):
                    return answer, None
                error = f"HTTP {answer.status}" + (f" {_oauth_error(answer)}" if _oauth_error(answer) else "")
            if attempt < self.retries:
                self.sleep(self.backoff * (2 ** (attempt - 1)))
        return None, error


def _record_step(store: Any, grant_id: str, step: str, by: str, detail: dict[str, Any], secrets: list[str],
                 reason: str | None = None) -> None:
    payload: dict[str, Any] = {"grant_id": grant_id, "step": step, "detail": _scrub(detail, secrets)}
    if reason is not None:
        payload["reason"] = reason
    store.append(EventDraft("access.revoked", payload, run_id=SYSTEM_RUN_ID, principal=by))


def _at_provider(store: Any, grant: Grant, client: ProviderClient | None, retries: int, backoff: float,
                 by: str, sleep: Callable[[float], None]) -> None:
    """Revoke both tokens at the provider and confirm by introspection; record sent / confirmed / failed."""
    gid = grant.grant_id
    cred = load_credential(store, gid)
    if cred is None:
        _record_step(store, gid, "failed", by, {
            "stage": "credential", "pending": True,
            "error": "the grant's credential was deleted: its tokens cannot be revoked at the provider"}, [])
        return
    secrets = cred.secrets()
    client = client or AuthlibProviderClient()
    tries = _Attempts(retries, backoff, sleep)
    sent: list[dict[str, Any]] = []
    unanswered: list[dict[str, Any]] = []
    for hint, token in cred.tokens():
        answer, error = tries.run(lambda: client.revoke(cred, token, hint))
        if answer is None:
            unanswered.append({"token_type_hint": hint, "error": error})
            continue
        entry: dict[str, Any] = {"token_type_hint": hint, "http_status": answer.status}
        if _oauth_error(answer):
            entry["error"] = _oauth_error(answer)
        sent.append(entry)
    if unanswered:
        _record_step(store, gid, "failed", by, {
            "stage": "revocation", "endpoint": cred.revocation_endpoint, "attempts": tries.used, "pending": True,
            "answered": sent, "unanswered": unanswered,
            "error": "the provider could not be reached or was unavailable: " + unanswered[-1]["error"]}, secrets)
        return
    has_introspection = bool(cred.introspection_endpoint)
    _record_step(store, gid, "sent", by, {"endpoint": cred.revocation_endpoint, "tokens": sent,
                                          "attempts": tries.used, "introspection": has_introspection}, secrets)
    refused = [t for t in sent if t["http_status"] != 200]
    if not has_introspection:
        if refused:
            _record_step(store, gid, "failed", by, {
                "stage": "revocation", "pending": True, "refused": refused,
                "error": "the provider refused to revoke " + ", ".join(t["token_type_hint"] for t in refused)
                         + "; it has no introspection endpoint to check the tokens"}, secrets)
        return
    checks = _Attempts(retries, backoff, sleep)
    results: list[dict[str, Any]] = []
    problems: list[str] = []
    for hint, token in cred.tokens():
        answer, error = checks.run(lambda: client.introspect(cred, token, hint))
        if answer is None:
            results.append({"token_type_hint": hint, "error": error})
            problems.append(f"{hint}: introspection unavailable ({error})")
            continue
        active = (answer.body or {}).get("active")
        if answer.status != 200 or not isinstance(active, bool):
            results.append({"token_type_hint": hint, "http_status": answer.status, "error": _oauth_error(answer)})
            problems.append(f"{hint}: introspection answered HTTP {answer.status} without an 'active' field")
            continue
        entry = {"token_type_hint": hint, "active": active}
        if active:
            exp = (answer.body or {}).get("exp")
            if isinstance(exp, int) and not isinstance(exp, bool):
                entry["exp"] = _rfc3339(datetime.fromtimestamp(exp, timezone.utc))
            until = entry.get("exp") or (cred.access_token_expires_at if hint == "access_token" else None)
            problems.append(f"{hint} is still active at the provider" + (
                f" (a self-contained token stays valid until it expires at {until})" if until else ""))
        results.append(entry)
    detail = {"endpoint": cred.introspection_endpoint, "tokens": results, "attempts": checks.used}
    if problems:
        _record_step(store, gid, "failed", by, {"stage": "introspection", "pending": True,
                                                "error": "; ".join(problems), **detail}, secrets)
    else:
        _record_step(store, gid, "confirmed", by, detail, secrets)


def revoke(store: Any, grant_id: str, reason: str, provider_client: ProviderClient | None = None, retries: int = 3,
           *, by: str = "sealbox", backoff: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> str:
    """Revoke a grant: locally at once, then at its provider.

    1. ``access.revoked`` step ``requested`` is committed; from then on every call
       under the grant is denied (``grant_invalid``).
    2. If the grant has a provider credential: both tokens are revoked (RFC 7009),
       ``sent``; then introspected (RFC 7662), ``confirmed`` when both are inactive.
       Unreachable / 5xx / 429 answers are retried ``retries`` times with exponential
       backoff (``backoff`` seconds, doubled each time); what could not be done is a
       ``failed`` step and the grant stays :data:`STATUS_PENDING` (see :func:`retry`).

    Revoking a grant already pending at its provider retries it.

    Returns:
        The status after this call (:func:`access_status`).

    Raises:
        AccessError: no such grant, no reason, or already revoked (and not pending).
    """
    if not isinstance(reason, str) or not reason.strip():
        raise AccessError("a revocation needs a reason")
    box: dict[str, Any] = {}

    def work(conn: Any) -> list[EventDraft]:
        hist = _history(_Wrap(conn), grant_id)
        box["grant"] = _known(hist, grant_id)
        if hist.steps:
            box["already"] = True
            return []
        return [EventDraft("access.revoked", {"grant_id": grant_id, "step": "requested", "reason": reason,
                                              "detail": {"at_provider": box["grant"].credential}},
                           run_id=SYSTEM_RUN_ID, principal=by)]

    _in_write_txn(store, work)
    if box.get("already"):
        status = access_status(store, grant_id)
        if status == STATUS_PENDING:
            return retry(store, grant_id, provider_client, retries, by=by, backoff=backoff, sleep=sleep)
        raise AccessError(f"grant {grant_id} is already {status}")
    grant: Grant = box["grant"]
    if grant.credential:
        _at_provider(store, grant, provider_client, retries, backoff, by, sleep)
    return access_status(store, grant_id)


def retry(store: Any, grant_id: str, provider_client: ProviderClient | None = None, retries: int = 3, *,
          by: str = "sealbox", backoff: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> str:
    """Retry the provider part of a revocation that is :data:`STATUS_PENDING`
    (both tokens are sent again: RFC 7009 answers 200 for a token already revoked).

    Returns:
        The status after this call.

    Raises:
        AccessError: no such grant, or it is not pending at its provider.
    """
    hist = _history(store, grant_id)
    grant = _known(hist, grant_id)
    status = _status_of(hist, _now(None))
    if status != STATUS_PENDING:
        hint = " (revoke it first)" if status in (STATUS_ACTIVE, STATUS_EXPIRED) else ""
        raise AccessError(f"grant {grant_id} is {status}: there is nothing to retry{hint}")
    _at_provider(store, grant, provider_client, retries, backoff, by, sleep)
    return access_status(store, grant_id)


# --------------------------------------------------------------------------- times


def _rfc3339(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str, name: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise AccessError(f"{name}: {text!r} is not an RFC 3339 time") from exc
    if dt.tzinfo is None:
        if len(text) == 10:  # a date: midnight UTC
            return dt.replace(tzinfo=timezone.utc)
        raise AccessError(f"{name}: {text!r} has no UTC offset (add Z or +hh:mm)")
    return dt


def _now(now: Any) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise AccessError("now must be timezone-aware")
        return now
    return _parse_time(str(now), "now")


_DURATION = re.compile(r"^\+?(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_expiry(value: Any) -> str:
    """An expiry as RFC 3339 UTC: from an aware datetime, RFC 3339 text, a date
    (midnight UTC), or a duration from now (``90s``, ``15m``, ``12h``, ``30d``, ``1w``).

    Raises:
        AccessError: none of those.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise AccessError("expires_at must be timezone-aware")
        return _rfc3339(value)
    if not isinstance(value, str) or not value.strip():
        raise AccessError(f"expires_at must be a time or a duration, got {value!r}")
    m = _DURATION.match(value.strip())
    if m:
        return _rfc3339(datetime.now(timezone.utc) + timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)]))
    return _rfc3339(_parse_time(value.strip(), "expires_at"))
