"""Grants, provider credentials, and revocation at the provider.

A **grant** is a permission a principal holds for a tool: an upstream ``server``
and ``tool`` (both :func:`fnmatch.fnmatchcase` globs), a ``scope``, an optional
expiry, and optionally a **provider credential** — an OAuth access and refresh
token issued by an external provider, with the provider's RFC 7009 revocation
endpoint, its RFC 7662 introspection endpoint (if it has one) and the client
credentials Sealbox uses to call them.

* :func:`grant_access` records ``access.granted`` in the system run, **signed** with
  the Ed25519 key of an enabled ``admin`` identity (:data:`GRANT_ROLES`) over
  :func:`grant_fields` — the store's origin, the grant id, principal, server, tool,
  scope, expiry, provider name, whether a credential is held, the identity and the
  time. A grant counts only when :func:`grant_problem` finds nothing wrong with it:
  unsigned (older) or forged, altered or copied grants deny every call naming them
  (``grant_invalid``), and ``sealbox verify`` reports them. The credential
  is stored **encrypted outside the log** (table ``credentials``: AES-256-GCM under
  a key derived with HKDF-SHA256 from the store secret, the grant id as associated
  data), in the same transaction. No token or client secret of a credential ever
  enters the hashed bytes of an event, a blob or an export; ``access.granted`` says
  only that the grant has one (``"credential": true``), and a revocation step names
  the endpoint it called without its user name, password, query or fragment.
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
* Every revocation step is **signed** by the revoking identity (an enabled ``admin`` or
  ``approver``: :data:`REVOKE_ROLES`) over :func:`revocation_fields` — the origin, grant id,
  step, reason, the provider's answer summary, the time and the previous valid step's leaf.
  Readers (:func:`access_status`, :func:`show_grant`, :func:`list_grants`) count only valid
  steps (:func:`revocation_marks`), so an appended ``confirmed`` never shows; but any step,
  even unsigned, denies calls (:func:`grant_status`): a revocation request is the safe direction.

* :func:`rotate_credential` records that the provider rotated the grant's tokens (RFC 6749 §6,
  RFC 9700 §4.14: a refresh returned a new refresh token and invalidated the old one; Sealbox never
  refreshes itself): a new row of table ``credential_rotations`` (append-only, encrypted as above)
  and ``access.credential_rotated``, signed by an enabled ``admin`` (:data:`ROTATE_ROLES`) over
  :func:`rotation_fields`, carrying only HMAC fingerprints of the new tokens
  (:func:`token_fingerprint`). Revocation then revokes and introspects the latest credential
  (revoking earlier tokens still held best effort), and a ``confirmed`` step counts only if it
  follows the latest valid rotation.

A self-contained access token (a JWT the resource server checks by its signature)
may stay valid at the provider until it expires, whatever the revocation endpoint
answered: introspection then reports it active, and the revocation stays pending.

The HTTP client side uses :mod:`authlib` (``OAuth2Session.revoke_token`` and
``introspect_token``), imported only when a revocation reaches a provider. Redirects
are never followed: a 3xx answer is recorded as a failure naming its status.

Endpoints are checked when a credential is given (https, or http on this machine; a
valid host and port; no user name or password in the URL). Any text a provider sends
back is scrubbed of the credential's secrets before it is clipped and recorded.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable, Protocol
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

from sealbox.errors import InvalidEventError, SealboxError
from sealbox.events import SYSTEM_RUN_ID, EventDraft, rfc3339_utc, validate_payload

__all__ = [
    "AccessError",
    "ProviderUnavailable",
    "ProviderCredential",
    "ProviderAnswer",
    "ProviderClient",
    "AuthlibProviderClient",
    "Grant",
    "GRANT_ROLES",
    "GRANT_PROBLEMS",
    "grant_fields",
    "grant_problem",
    "check_grant_payload",
    "REVOKE_ROLES",
    "REVOCATION_PROBLEMS",
    "revocation_fields",
    "check_revocation_payload",
    "revocation_marks",
    "STATUS_UNSIGNED",
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
    "ROTATE_ROLES",
    "ROTATION_PROBLEMS",
    "ROTATION_TOKEN_KEYS",
    "rotation_fields",
    "check_rotation_payload",
    "rotation_marks",
    "token_fingerprint",
    "rotate_credential",
    "parse_expiry",
    "MAX_BACKOFF_S",
    "MAX_ANSWER_BYTES",
]

STATUS_ACTIVE = "active"
STATUS_EXPIRED = "expired"
STATUS_PENDING = "revoked (pending at provider)"
STATUS_CONFIRMED = "revoked (confirmed at provider)"
STATUS_LOCAL = "revoked (local only: no provider)"
#: Sent to a provider that offers no introspection endpoint: nothing can confirm it.
STATUS_UNCONFIRMED = "revoked (sent to provider, unconfirmed: no introspection endpoint)"
#: Only unsigned or forged ``access.revoked`` steps: calls are denied here (a revocation request denies,
#: signed or not), but nothing shows that anyone revoked it at the provider.
STATUS_UNSIGNED = "revoked (unsigned request only: denied here; revoke again with a key)"

#: The longest wait between two attempts at the provider, in seconds (the backoff doubles up to it).
MAX_BACKOFF_S = 30.0

#: Tool calls that name no grant are recorded with ``implicit:<principal>``; they are not checked here.
IMPLICIT_PREFIX = "implicit:"

_ACCESS_KINDS = "('access.granted', 'access.revoked')"
_HKDF_INFO = b"sealbox/credentials/v1"
_FINGERPRINT_INFO = b"sealbox/credentials/fingerprint/v1"
_ROTATED_KIND = "access.credential_rotated"
_ROTATION_ROWS_SQL = (f"SELECT leaf_index, raw FROM events WHERE run_id = ? AND kind = '{_ROTATED_KIND}'"
                      " ORDER BY leaf_index")
_TOKEN_HINTS = ("refresh_token", "access_token")  # refresh first: it is the long-lived one (RFC 7009 §2.1)
_CRED_KEYS = {"access_token", "refresh_token", "client_id", "client_secret", "revocation_endpoint",
              "introspection_endpoint", "access_token_expires_at", "auth_method", "provider"}
_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_ENDPOINT_KEYS = ("revocation_endpoint", "introspection_endpoint")
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
#: Characters a token is made of (RFC 6750 b64token, plus ``_``): a short secret is scrubbed only
#: where it is not next to one of them, i.e. where it is a whole token.
_TOKEN_CHAR = r"[A-Za-z0-9._~+/=-]"
_SHORT_SECRET = 8  # secrets shorter than this are scrubbed only as whole tokens
_MIN_CUT = 4  # a clipped text that ends in at least this many first characters of a secret loses them
_MARK = "[secret]"
_REDIRECT = "the provider answered a redirect (HTTP {status}); redirects are not followed"


class AccessError(SealboxError):
    """A grant operation cannot be done (unknown grant, bad credential, wrong state).

    Attributes:
        code: for a grant refused because of its signer, ``unknown_identity``, ``wrong_key``
            (not the identity's current key), ``identity_mismatch``, ``disabled`` or ``role``;
            otherwise None.
    """

    def __init__(self, message: str, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


#: The roles whose identities may grant (sign ``access.granted``). Only ``admin``: a grant is a
#: standing permission for any number of calls until it expires, like the identities an admin
#: signs; an approver's signature covers one call's arguments (docs/access.md, *Who may grant*).
GRANT_ROLES = ("admin",)

#: Why a recorded ``access.granted`` does not count (:func:`grant_problem`), in words.
GRANT_PROBLEMS = {
    "malformed": "its event fails the access.granted schema (it was changed below Sealbox)",
    "unsigned": "it carries no signature (written by a Sealbox before 2026-12-03, or by hand): it authorizes no "
                "call; grant again with `sealbox access grant ... --key-file KEY` (an admin's key)",
    "wrong_store": "it was signed for another store (its origin is not this log's): a grant copied here",
    "unknown_identity": "it names an identity the log did not know at that moment",
    "disabled": "its identity was disabled at that moment",
    "bad_signature": "its signature does not verify with the identity's key as the log held it (forged, altered, "
                     "or copied to another grant id, principal, tool or expiry)",
    "role": "its identity's role may not grant (only admin)",
    "principal": "its event's principal is not its identity (it was not written by sealbox access grant)",
    "duplicate": "its grant id was granted earlier in this log: only the first grant of an id counts",
    "compromised_key": "it was signed with its identity's key after the point from which that key was declared "
                       "compromised (`sealbox identities disable|rotate --compromised-since`)",
}

#: The roles whose identities may sign revocation steps. Revoking only takes permission away and must
#: stay easy in an emergency, so an approver (who decides calls) may revoke as well as an admin; agents
#: (whose grants are revoked) and auditors (read-only) may not (docs/access.md, *Who may revoke*).
REVOKE_ROLES = ("admin", "approver")

#: Why a recorded ``access.revoked`` step does not count (:func:`revocation_marks`), in words.
REVOCATION_PROBLEMS = {
    "malformed": "its event fails the access.revoked schema (it was changed below Sealbox)",
    "unsigned": "it carries no signature (written by a Sealbox before 2026-12-03, or by hand)",
    "wrong_store": "it was signed for another store (its origin is not this log's)",
    "unknown_identity": "it names an identity the log did not know at that moment",
    "disabled": "its identity was disabled at that moment",
    "bad_signature": "its signature does not verify with the identity's key as the log held it (forged, or "
                     "altered: another grant, step, provider answer or time)",
    "role": "its identity's role may not revoke (only admin or approver)",
    "principal": "its event's principal is not its identity",
    "order": "it does not follow the grant's previous valid step (replayed, reordered, or a step other than "
             "requested before any valid requested)",
    "compromised_key": "it was signed with its identity's key after the point from which that key was declared "
                       "compromised (`sealbox identities disable|rotate --compromised-since`)",
}


#: The roles whose identities may record a credential rotation (sign ``access.credential_rotated``). Only
#: ``admin``, as for a grant: a rotation decides which token a revocation revokes and introspection checks,
#: so whoever records one could make a revocation "confirm" on a token that was never live (an agent,
#: whose grant is what gets revoked, may not; docs/access.md, *Rotated refresh tokens*).
ROTATE_ROLES = ("admin",)

#: The keys a rotation may carry: those of the provider's answer to a refresh (RFC 6749 §5.1: its
#: ``token_type`` and ``scope`` are accepted and not kept; ``expires_in`` sets ``access_token_expires_at``),
#: and ``access_token_expires_at``. The rest of the credential (endpoints, client) stays the grant's.
ROTATION_TOKEN_KEYS = ("access_token", "refresh_token", "access_token_expires_at", "expires_in", "token_type",
                       "scope")

#: Why a recorded ``access.credential_rotated`` does not count (:func:`rotation_marks`), in words.
ROTATION_PROBLEMS = {
    "malformed": "its event fails the access.credential_rotated schema (it was changed below Sealbox)",
    "unsigned": "it carries no signature (written by hand)",
    "wrong_store": "it was signed for another store (its origin is not this log's)",
    "unknown_identity": "it names an identity the log did not know at that moment",
    "disabled": "its identity was disabled at that moment",
    "bad_signature": "its signature does not verify with the identity's key as the log held it (forged, or "
                     "altered: another grant, rotation number, fingerprint or time)",
    "role": "its identity's role may not record a rotation (only admin)",
    "principal": "its event's principal is not its identity",
    "order": "it does not follow the grant's previous valid rotation (replayed, reordered, or its rotation "
             "number is not the next one)",
    "compromised_key": "it was signed with its identity's key after the point from which that key was declared "
                       "compromised (`sealbox identities disable|rotate --compromised-since`)",
}


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
            AccessError: a required key is missing, a key is unknown, a value has the
                wrong type, an endpoint is not a URL Sealbox can call (see
                :func:`_check_endpoint`: no user name or password in it), or
                ``access_token_expires_at`` is not an RFC 3339 time. The message names
                keys, never values.
        """
        if isinstance(data, ProviderCredential):  # built directly: checked all the same
            data = data.to_dict()
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
        for key in _ENDPOINT_KEYS:
            if data.get(key):
                _check_endpoint(key, data[key])
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

    @classmethod
    def _from_stored(cls, data: dict[str, Any]) -> "ProviderCredential":
        """A credential decrypted from the ``credentials`` table, as it was stored.

        Not checked again: a credential stored before a check was added must still load,
        so that its revocation is attempted and recorded (:func:`_at_provider` checks its
        endpoints and records a ``failed`` step when one cannot be called).
        """
        return cls(**{k: data.get(k) for k in ("revocation_endpoint", "client_id", "client_secret", "access_token",
                                                "refresh_token", "introspection_endpoint", "access_token_expires_at")},
                   auth_method=data.get("auth_method") or "client_secret_basic")

    def to_dict(self) -> dict[str, Any]:
        """The credential as a dict (secrets included: only for encryption)."""
        return {k: getattr(self, k) for k in ("revocation_endpoint", "client_id", "client_secret", "access_token",
                                               "refresh_token", "introspection_endpoint", "access_token_expires_at",
                                               "auth_method")}

    def tokens(self) -> list[tuple[str, str]]:
        """(token_type_hint, token) of each token held, refresh token first."""
        return [(hint, getattr(self, hint)) for hint in _TOKEN_HINTS if getattr(self, hint)]

    def secrets(self) -> list[str]:
        """Every secret string in the credential (never to be written to the log): the
        tokens, the client secret, the password of an endpoint URL stored before such
        URLs were refused, and the value of each query parameter and the fragment of an
        endpoint URL (a provider may take an API key there), each as written and
        percent-decoded."""
        out = [s for s in (self.access_token, self.refresh_token, self.client_secret) if s]
        for url in (self.revocation_endpoint, self.introspection_endpoint):
            try:
                parts = urlsplit(url) if url else None
                password = parts.password if parts else None
            except ValueError:
                parts = password = None
            found = [password] if password else []
            if parts is not None:
                found += [pair.partition("=")[2] for pair in re.split("[&;]", parts.query)]
                found.append(parts.fragment)
            for value in found:
                if value:
                    out.extend(v for v in dict.fromkeys((value, unquote(value), unquote_plus(value)))
                               if v and v not in out)
        return out


def _check_endpoint(key: str, url: str, *, stored: bool = False) -> None:
    """Check that ``url`` is an endpoint Sealbox can call: an ``https`` URL (``http`` only
    for a provider on this machine: 127.0.0.1, ::1, localhost) with a valid host (a DNS
    name, an IPv4 address or a bracketed IPv6 address), a port of 1-65535 if it has one,
    no spaces or control characters, and no user name or password (``user:pass@``: it
    would be kept in the clear where the endpoint is shown, and Sealbox authenticates
    with ``client_id`` and ``client_secret``). ``stored``: a credential already stored,
    checked before it is used; its user name or password, if any, is not refused then.

    Raises:
        AccessError: naming ``key`` and what is wrong, never the URL.
    """
    name = f"credential key {key!r}"
    if any(c.isspace() or not c.isprintable() for c in url):
        raise AccessError(f"{name} must be a URL without spaces or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise AccessError(f"{name} is not a valid URL (its host is malformed; an IPv6 address goes in brackets: "
                          "https://[::1]/...)") from None
    if parts.scheme not in ("http", "https"):
        raise AccessError(f"{name} must be an https URL")
    if "@" in parts.netloc and not stored:
        raise AccessError(f"{name} must not carry a user name or password (the part before '@'); Sealbox "
                          "authenticates to the provider with 'client_id' and 'client_secret'")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise AccessError(f"{name} has an invalid port (a port must be a number from 1 to 65535)")
    host = parts.hostname
    if not host:
        raise AccessError(f"{name} must be an https URL with a host")
    if not _valid_host(host, bracketed="[" in parts.netloc):
        raise AccessError(f"{name} has an invalid host (a DNS name, an IPv4 address, or an IPv6 address in brackets)")
    if parts.scheme == "http" and host not in _LOOPBACK:
        raise AccessError(f"{name} must be an https URL (RFC 7009 §2 requires TLS; "
                          "plain http is accepted only for a provider on this machine)")


def _valid_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    try:
        ipaddress.IPv4Address(host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    try:
        ascii_name = name.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return 0 < len(ascii_name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in ascii_name.split("."))


def _loggable(url: str | None) -> str | None:
    """An endpoint as it may be recorded: without a user name or password (only a credential
    stored before those were refused has one), a query or a fragment (RFC 6749 §3.1 allows
    an endpoint a query, and a provider may take an API key there)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("?", 1)[0].split("#", 1)[0]
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment=""))


def _cipher(secret: bytes) -> Any:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(secret)
    return AESGCM(key)


def _aad(grant_id: str, seq: int) -> bytes:
    """The associated data of a stored credential: the grant id (the credential granted, ``seq`` 0),
    or ``<grant id>/rotation/<seq>`` (a rotated one; a grant id holds no ``/``)."""
    return (grant_id if seq == 0 else f"{grant_id}/rotation/{seq}").encode("utf-8")


def _seal(secret: bytes, grant_id: str, cred: ProviderCredential, seq: int = 0) -> tuple[bytes, bytes]:
    nonce = os.urandom(12)
    plain = json.dumps(cred.to_dict(), sort_keys=True).encode("utf-8")
    return nonce, _cipher(secret).encrypt(nonce, plain, _aad(grant_id, seq))


def _unseal(secret: bytes, grant_id: str, nonce: bytes, ciphertext: bytes, seq: int = 0) -> ProviderCredential:
    from cryptography.exceptions import InvalidTag

    try:
        plain = _cipher(secret).decrypt(bytes(nonce), bytes(ciphertext), _aad(grant_id, seq))
    except InvalidTag as exc:
        which, whence = ("credential", "grant") if seq == 0 else (f"rotated credential {seq}", "grant, rotation")
        raise AccessError(f"the {which} of grant {grant_id} cannot be decrypted (altered, or moved from "
                          f"another {whence} or store)") from exc
    return ProviderCredential._from_stored(json.loads(plain))


def token_fingerprint(store: Any, token: str) -> str:
    """``hmac-sha256:<64 hex>``: HMAC-SHA256 (RFC 2104) of ``token`` under a key derived with HKDF-SHA256
    from the store secret (info ``sealbox/credentials/fingerprint/v1``). What an
    ``access.credential_rotated`` event records of a new token: it names the token for whoever holds the
    store (``sealbox verify`` matches it with the stored credential) and tells nobody else anything
    about it, however guessable the token.

    Raises:
        AccessError: the store has no secret.
    """
    import hmac

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_FINGERPRINT_INFO).derive(_secret_of(store))
    return "hmac-sha256:" + hmac.new(key, token.encode("utf-8"), hashlib.sha256).hexdigest()


def _secret_of(store: Any) -> bytes:
    secret = getattr(store, "_secret", None)
    if not isinstance(secret, bytes) or len(secret) < 32:
        raise AccessError("this store has no secret to encrypt credentials with")
    return secret


def _conn(reader_or_store: Any) -> Any:
    """The connection of a reader (:class:`~sealbox.store.sqlite_queries.Reader`, or a PostgreSQL
    store's ``PgReader``) or a store: a ``sqlite3.Connection``, or the PostgreSQL store's connection
    seen with SQLite-style ``?`` parameters (``store.postgres._Conn``: :func:`_is_pg`). The SQL that
    differs between the two (a payload field read from the hashed bytes, deleting a credential) is
    chosen by :func:`_is_pg`; the rest is written once for both."""
    conn = getattr(reader_or_store, "conn", None)
    if conn is not None:
        return conn
    getter = getattr(reader_or_store, "_conn", None)
    if callable(getter):
        return getter()
    raise AccessError(f"grants need a Sealbox store or reader, got {type(reader_or_store).__name__}")


def _is_pg(conn: Any) -> bool:
    """Whether ``conn`` (from :func:`_conn`) is a PostgreSQL store's (its psycopg connection is ``conn.pg``)."""
    return getattr(conn, "pg", None) is not None


def _in_write_txn(store: Any, fn: Callable[[Any], list[EventDraft]]) -> list:
    """Run ``fn(conn)`` in one write transaction with the drafts it returns (public ``append_with``)."""
    return store.append_with(lambda reader: list(fn(_conn(reader))))


def _credential_rows(conn: Any, grant_id: str) -> list[tuple[int, Any, Any]]:
    """``(seq, nonce, ciphertext)`` of every credential held for the grant: the granted one (``seq`` 0,
    table ``credentials``) and each rotated one (table ``credential_rotations``), by ``seq``. Empty once
    the credential was deleted."""
    if "\x00" in grant_id and _is_pg(conn):
        return []  # PostgreSQL text holds no NUL: no stored grant id has one
    rows = [(0, r[0], r[1]) for r in conn.execute(
        "SELECT nonce, ciphertext FROM credentials WHERE grant_id = ?", (grant_id,)).fetchall()]
    rows += [(int(r[0]), r[1], r[2]) for r in conn.execute(
        "SELECT seq, nonce, ciphertext FROM credential_rotations WHERE grant_id = ? ORDER BY seq",
        (grant_id,)).fetchall()]
    return rows


def _held_credentials(store: Any, grant_id: str) -> list[tuple[int, ProviderCredential | AccessError]]:
    """``(seq, credential)`` of every credential held for the grant, oldest first (the last is the live
    one); a row that does not decrypt is there as its :class:`AccessError`."""
    rows = _credential_rows(_conn(store), grant_id)
    if not rows:
        return []
    secret = _secret_of(store)
    out: list[tuple[int, ProviderCredential | AccessError]] = []
    for seq, nonce, ciphertext in rows:
        try:
            out.append((seq, _unseal(secret, grant_id, nonce, ciphertext, seq)))
        except AccessError as exc:
            out.append((seq, exc))
    return out


def load_credential(store: Any, grant_id: str) -> ProviderCredential | None:
    """The decrypted live credential of a grant: the one of its latest recorded rotation
    (:func:`rotate_credential`), else the one it was granted with; or None (the grant had none,
    or it was deleted).

    Raises:
        AccessError: the stored ciphertext does not decrypt under this store's key.
    """
    rows = _credential_rows(_conn(store), grant_id)
    if not rows:
        return None
    seq, nonce, ciphertext = rows[-1]
    return _unseal(_secret_of(store), grant_id, nonce, ciphertext, seq)


def _delete_rows(conn: Any, grant_id: str) -> int:
    """Delete the grant's credential and every rotated one; how many rows were deleted."""
    n = conn.execute("DELETE FROM credentials WHERE grant_id = ?", (grant_id,)).rowcount
    return n + conn.execute("DELETE FROM credential_rotations WHERE grant_id = ?", (grant_id,)).rowcount


def delete_credential(store: Any, grant_id: str, *, force: bool = False) -> bool:
    """Delete a grant's stored credential, with every rotated one (the only delete Sealbox does:
    credentials are not evidence). Nothing in the log changes; ``access show`` then says ``deleted``.

    Without ``force`` this is refused while the grant is active, expired, pending at the
    provider, or revoked only by steps that do not count (:data:`STATUS_UNSIGNED`: no one with
    a key asked, nothing was sent): the credential is what Sealbox needs to revoke the tokens there.
    On SQLite the freed pages are zeroed (``PRAGMA secure_delete``) and the WAL checkpointed; on
    PostgreSQL the row is deleted in one write transaction (no ``secure_delete`` there: its encrypted
    bytes stay in free space, WAL and backups until reused; docs/access.md).

    Returns:
        True if a credential was deleted, False if there was none.

    Raises:
        AccessError: unknown grant, or refused (see above).
    """
    status = access_status(store, grant_id)
    if not force and status in (STATUS_ACTIVE, STATUS_EXPIRED, STATUS_PENDING, STATUS_UNSIGNED):
        raise AccessError(f"grant {grant_id} is {status}: deleting its credential would make it impossible to "
                          "revoke the tokens at the provider; revoke it first, or force")
    deleted: list[int] = []
    conn = _conn(store)
    if _is_pg(conn):  # no secure_delete: PostgreSQL reuses the row's space later (see docs/access.md)
        _in_write_txn(store, lambda c: deleted.append(_delete_rows(c, grant_id)) or [])
        return bool(deleted and deleted[0])

    def work(conn: Any) -> list[EventDraft]:
        conn.execute("PRAGMA secure_delete = ON")
        deleted.append(_delete_rows(conn, grant_id))
        return []

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
        """Whether the grant's expiry is at or before ``now``. An expiry that is no time (one
        written below :func:`grant_access`, e.g. ``2026-13-45T00:00:00Z``) counts as passed:
        the grant is expired, never valid for ever."""
        if self.expires_at is None:
            return False
        try:
            return _parse_time(self.expires_at, "expires_at") <= now
        except (AccessError, TypeError, AttributeError):
            return True


@dataclass
class _History:
    grant: Grant | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] | None = None  # the first access.granted envelope
    raw: bytes = b""  # its stored bytes
    step_envs: list[dict[str, Any]] = field(default_factory=list)  # the access.revoked envelopes, in order
    marked: bool = False  # each step carries "signature" (revocation_marks)
    #: the access.credential_rotated events (seq, ts, by, fingerprints, leaf_index; "signature" once marked)
    rotations: list[dict[str, Any]] = field(default_factory=list)
    rotation_envs: list[dict[str, Any]] = field(default_factory=list)

    def valid_steps(self) -> list[dict[str, Any]]:
        """The steps that count (validly signed, in chain order); see :func:`revocation_marks`."""
        return [s for s in self.steps if s.get("signature") == "valid"]

    def valid_rotations(self) -> list[dict[str, Any]]:
        """The rotations that count (validly signed, in chain order); see :func:`rotation_marks`."""
        return [r for r in self.rotations if r.get("signature") == "valid"]


def grant_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields of an ``access.granted`` payload its signature covers: ``origin``, ``grant_id``,
    ``principal``, ``server``, ``tool``, ``scope``, ``expires_at``, ``provider``, ``credential``
    (whether one is held: never the credential itself), ``identity``, ``granted_at``, and the
    constant ``signed: "access.granted"`` (so no other signed Sealbox message can pass for a grant)."""
    out = {k: payload.get(k) for k in ("origin", "grant_id", "principal", "server", "tool", "scope", "expires_at",
                                       "provider", "credential", "identity", "granted_at")}
    out["signed"] = "access.granted"
    return out


def check_grant_payload(payload: Any, leaf_index: int, principal: Any, book: Any, origin: str) -> str | None:
    """Why an ``access.granted`` payload recorded at ``leaf_index`` (by the event principal
    ``principal``) does not count, as a :data:`GRANT_PROBLEMS` code, or None.

    Args:
        book: a :class:`~sealbox.identities.IdentityBook` holding (at least) the identity changes
            before ``leaf_index``: the signer is taken as the log held it then.
        origin: this log's origin.
    """
    from sealbox.identities import verify_fields

    try:
        validate_payload("access.granted", payload)
    except InvalidEventError:
        return "malformed"
    p = payload
    if "signature" not in p:
        return "unsigned"
    if p.get("origin") != origin:
        return "wrong_store"
    who = book.get(p.get("identity"), leaf_index)
    if who is None:
        return "unknown_identity"
    if who.disabled:
        return "disabled"
    if p.get("key_id") != who.key_id or not verify_fields(who.public_key, grant_fields(p), p["signature"]):
        return "bad_signature"
    if who.role not in GRANT_ROLES:
        return "role"
    if principal != who.name:
        return "principal"
    return None


_ORIGIN_SQL = "SELECT value FROM store_meta WHERE key = 'origin'"
_IDENTITY_ROWS_SQL = ("SELECT leaf_index, raw FROM events WHERE kind = 'identity.changed' AND run_id = ?"
                      " AND leaf_index < ? ORDER BY leaf_index")
#: The newest identity change: what the names with a compromise record (below) are cached under. One
#: lookup in the index ``events_run_kind`` (newest first) and its row's ``leaf_hash``: its leaf alone is
#: not enough, since a copy of the store (same origin) may hold another change at that leaf.
_MAX_IDENTITY_SQL = ("SELECT leaf_index, leaf_hash FROM events WHERE run_id = ? AND kind = 'identity.changed'"
                     " ORDER BY leaf_index DESC LIMIT 1")
#: (origin, leaf of the newest identity change, its leaf hash) -> names some change declared compromised
#: (``compromised_from_leaf`` in its payload, validly signed or not: :func:`_compromised` checks).
_COMPROMISED_NAMES: dict[tuple[str, Any, Any], frozenset[str]] = {}
#: (origin, grant leaf, digest of the grant's bytes, digest of the identity changes before it) -> problem.
#: What came before a leaf never changes in a log, so a grant's validity is computed once per process.
_PROBLEM_CACHE: dict[tuple[str, int, bytes, bytes], str | None] = {}
#: The same key, the digest over every identity change -> whether a compromise record voids the grant.
_COMPROMISE_CACHE: dict[tuple[str, int, bytes, bytes], bool] = {}
_PROBLEM_CACHE_MAX = 4096


def _grant_problem(conn: Any, hist: _History) -> str | None:
    assert hist.grant is not None and hist.env is not None
    leaf = hist.grant.leaf_index
    row = conn.execute(_ORIGIN_SQL).fetchone()
    origin = row[0] if row and isinstance(row[0], str) else ""
    rows = conn.execute(_IDENTITY_ROWS_SQL, (SYSTEM_RUN_ID, leaf)).fetchall()
    digest = hashlib.sha256()
    for leaf_index, raw in rows:
        digest.update(b"%d:%d:" % (leaf_index, len(raw)) + bytes(raw))
    grant_digest = hashlib.sha256(hist.raw).digest()
    key = (origin, leaf, grant_digest, digest.digest())
    if key in _PROBLEM_CACHE:
        problem = _PROBLEM_CACHE[key]
    else:
        from sealbox.identities import IdentityBook

        book = IdentityBook.from_events((leaf_index, json.loads(bytes(raw))) for leaf_index, raw in rows)
        problem = check_grant_payload(hist.env["payload"], leaf, hist.env.get("principal"), book, origin)
        if len(_PROBLEM_CACHE) >= _PROBLEM_CACHE_MAX:
            _PROBLEM_CACHE.clear()
        _PROBLEM_CACHE[key] = problem
    if problem is None and _compromised(conn, origin, leaf, grant_digest, hist.env["payload"].get("identity")):
        return "compromised_key"
    return problem


def _compromised(conn: Any, origin: str, leaf: int, grant_digest: bytes, identity: Any) -> bool:
    """Whether the grant at ``leaf``, signed by ``identity``, falls in a window where that identity's key
    was declared compromised (:meth:`~sealbox.identities.IdentityBook.compromised_at`). One index lookup
    (the newest identity change's leaf and leaf hash) when no change ever recorded a compromise of ``identity`` - the usual
    case; otherwise every identity change is read and replayed (a record counts only if validly signed),
    the answer cached per state of the identities."""
    if not isinstance(identity, str):
        return False
    newest = conn.execute(_MAX_IDENTITY_SQL, (SYSTEM_RUN_ID,)).fetchone()
    names_key = (origin, newest[0], bytes(newest[1])) if newest else (origin, None, None)
    names = _COMPROMISED_NAMES.get(names_key)
    if names is None:  # once per new identity change in this process
        found = set()
        for _leaf, raw in conn.execute(_IDENTITY_ROWS_SQL, (SYSTEM_RUN_ID, 1 << 62)):
            p = json.loads(bytes(raw)).get("payload")
            if isinstance(p, dict) and "compromised_from_leaf" in p and isinstance(p.get("name"), str):
                found.add(p["name"])
        if len(_COMPROMISED_NAMES) >= _PROBLEM_CACHE_MAX:
            _COMPROMISED_NAMES.clear()
        names = _COMPROMISED_NAMES[names_key] = frozenset(found)
    if identity not in names:
        return False
    rows = conn.execute(_IDENTITY_ROWS_SQL, (SYSTEM_RUN_ID, 1 << 62)).fetchall()
    digest = hashlib.sha256()
    for leaf_index, raw in rows:
        digest.update(b"%d:%d:" % (leaf_index, len(raw)) + bytes(raw))
    key = (origin, leaf, grant_digest, digest.digest())
    if key not in _COMPROMISE_CACHE:
        from sealbox.identities import IdentityBook

        book = IdentityBook.from_events((leaf_index, json.loads(bytes(raw))) for leaf_index, raw in rows)
        if len(_COMPROMISE_CACHE) >= _PROBLEM_CACHE_MAX:
            _COMPROMISE_CACHE.clear()
        _COMPROMISE_CACHE[key] = book.compromised_at(identity, leaf) is not None
    return _COMPROMISE_CACHE[key]


def grant_problem(reader_or_store: Any, grant_id: str) -> str | None:
    """Why the recorded grant ``grant_id`` does not count (a :data:`GRANT_PROBLEMS` code), or
    None when it is validly signed: by an identity that, as the log held it at the grant's leaf,
    existed, was enabled and had a role in :data:`GRANT_ROLES`, with that identity's key then,
    over :func:`grant_fields` for this log's origin.

    Raises:
        AccessError: no such grant.
    """
    hist = _history(reader_or_store, grant_id)
    _known(hist, grant_id)
    return _grant_problem(_conn(reader_or_store), hist)


def revocation_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields of an ``access.revoked`` payload its signature covers: ``origin``, ``grant_id``,
    ``step``, ``reason``, ``detail`` (the provider's answer summary: endpoint, HTTP status codes,
    ``active`` values, errors - scrubbed, never a token), ``identity``, ``at`` (RFC 3339 UTC),
    ``after`` (the leaf of the grant's previous valid step, or of the grant for the first one), and
    the constant ``signed: "access.revoked"``."""
    out = {k: payload.get(k) for k in ("origin", "grant_id", "step", "reason", "detail", "identity", "at", "after")}
    out["signed"] = "access.revoked"
    return out


def check_revocation_payload(payload: Any, leaf_index: int, principal: Any, book: Any, origin: str,
                             after: int | None, requested: bool) -> str | None:
    """Why an ``access.revoked`` payload recorded at ``leaf_index`` does not count, as a
    :data:`REVOCATION_PROBLEMS` code, or None.

    Args:
        book: an :class:`~sealbox.identities.IdentityBook` holding (at least) the identity changes
            before ``leaf_index``.
        origin: this log's origin.
        after: the leaf the step must name in ``after`` (the grant's previous valid step, or the
            grant's own leaf); None when the grant is unknown (then any step is ``order``).
        requested: whether a valid ``requested`` step came before (a ``requested`` step must be
            the first valid one, every other step needs one before it).
    """
    from sealbox.identities import verify_fields

    try:
        validate_payload("access.revoked", payload)
    except InvalidEventError:
        return "malformed"
    p = payload
    if "signature" not in p:
        return "unsigned"
    if p.get("origin") != origin:
        return "wrong_store"
    who = book.get(p.get("identity"), leaf_index)
    if who is None:
        return "unknown_identity"
    if who.disabled:
        return "disabled"
    if p.get("key_id") != who.key_id or not verify_fields(who.public_key, revocation_fields(p), p["signature"]):
        return "bad_signature"
    if who.role not in REVOKE_ROLES:
        return "role"
    if principal != who.name:
        return "principal"
    if after is None or p.get("after") != after or requested != (p.get("step") != "requested"):
        return "order"
    if hasattr(book, "compromised_at") and book.compromised_at(who.name, leaf_index) is not None:
        return "compromised_key"
    return None


def revocation_marks(grant_leaf: int | None, steps: Iterable[tuple[int, dict[str, Any]]], book: Any,
                     origin: str) -> list[str]:
    """For each ``(leaf, envelope)`` of one grant's ``access.revoked`` steps (in log order), ``valid``
    or the :data:`REVOCATION_PROBLEMS` code that keeps it from counting. The valid steps form a chain:
    each names the leaf of the previous valid one (the grant's for the first), which must be a
    ``requested`` step. A step marked ``compromised_key`` (signed in a window where its identity's key was
    declared compromised) does not count, and writers chain after the last valid step; but a step that
    names a ``compromised_key`` one in ``after`` (written while that one still counted) is in order too."""
    marks: list[str] = []
    prev, requested = grant_leaf, False
    links: list[int] = []  # steps marked compromised_key since the last valid one: later steps may follow them
    for leaf, env in steps:
        p = env.get("payload")
        problem = check_revocation_payload(p, leaf, env.get("principal"), book, origin, prev, requested)
        for alt in links if problem == "order" else ():
            # written while that step still counted (before its key was declared compromised)
            again = check_revocation_payload(p, leaf, env.get("principal"), book, origin, alt, True)
            if again != "order":
                problem = again
                break
        marks.append(problem or "valid")
        if problem is None:
            prev, requested, links = leaf, True, []
        elif problem == "compromised_key":
            links.append(leaf)
    return marks


def rotation_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields of an ``access.credential_rotated`` payload its signature covers: ``origin``,
    ``grant_id``, ``seq`` (1 for the grant's first rotation, then 2, ...), ``fingerprints`` (token type ->
    :func:`token_fingerprint` of each new token; never a token), ``identity``, ``at`` (RFC 3339 UTC),
    ``after`` (the leaf of the grant's previous valid rotation, or of the grant), and the constant
    ``signed: "access.credential_rotated"``."""
    out = {k: payload.get(k) for k in ("origin", "grant_id", "seq", "fingerprints", "identity", "at", "after")}
    out["signed"] = _ROTATED_KIND
    return out


def check_rotation_payload(payload: Any, leaf_index: int, principal: Any, book: Any, origin: str,
                           after: int | None, seq: int) -> str | None:
    """Why an ``access.credential_rotated`` payload recorded at ``leaf_index`` does not count, as a
    :data:`ROTATION_PROBLEMS` code, or None.

    Args:
        book: an :class:`~sealbox.identities.IdentityBook` holding (at least) the identity changes
            before ``leaf_index``.
        after: the leaf it must name in ``after`` (the grant's previous valid rotation, or the grant's
            own leaf); None when the grant is unknown (then it is ``order``).
        seq: the rotation number it must carry (the previous valid one's plus 1).
    """
    from sealbox.identities import verify_fields

    try:
        validate_payload(_ROTATED_KIND, payload)
    except InvalidEventError:
        return "malformed"
    p = payload
    if "signature" not in p:
        return "unsigned"
    if p.get("origin") != origin:
        return "wrong_store"
    who = book.get(p.get("identity"), leaf_index)
    if who is None:
        return "unknown_identity"
    if who.disabled:
        return "disabled"
    if p.get("key_id") != who.key_id or not verify_fields(who.public_key, rotation_fields(p), p["signature"]):
        return "bad_signature"
    if who.role not in ROTATE_ROLES:
        return "role"
    if principal != who.name:
        return "principal"
    if after is None or p.get("after") != after or p.get("seq") != seq:
        return "order"
    if hasattr(book, "compromised_at") and book.compromised_at(who.name, leaf_index) is not None:
        return "compromised_key"
    return None


def rotation_marks(grant_leaf: int | None, rotations: Iterable[tuple[int, dict[str, Any]]], book: Any,
                   origin: str) -> list[str]:
    """For each ``(leaf, envelope)`` of one grant's ``access.credential_rotated`` events (in log order),
    ``valid`` or the :data:`ROTATION_PROBLEMS` code that keeps it from counting. The valid ones form a
    chain: each names the leaf of the previous valid one (the grant's for the first) and carries the next
    rotation number (1, 2, ...)."""
    marks: list[str] = []
    prev, seq = grant_leaf, 1
    for leaf, env in rotations:
        problem = check_rotation_payload(env.get("payload"), leaf, env.get("principal"), book, origin, prev, seq)
        marks.append(problem or "valid")
        if problem is None:
            prev, seq = leaf, seq + 1
    return marks


def _mark(conn: Any, hists: Iterable[_History]) -> None:
    """Set each step's ``signature`` (:func:`revocation_marks`) and each rotation's
    (:func:`rotation_marks`) for these histories."""
    hists = list(hists)
    todo = [h for h in hists if (h.steps or h.rotations) and not h.marked]
    if not todo:
        for h in hists:
            h.marked = True
        return
    from sealbox.identities import IdentityBook

    row = conn.execute(_ORIGIN_SQL).fetchone()
    origin = row[0] if row and isinstance(row[0], str) else ""
    # every identity change: a later --compromised-since record withdraws a step signed before it
    rows = conn.execute(_IDENTITY_ROWS_SQL, (SYSTEM_RUN_ID, 1 << 62)).fetchall()
    book = IdentityBook.from_events((leaf_index, json.loads(bytes(raw))) for leaf_index, raw in rows)
    for h in todo:
        marks = revocation_marks(h.grant.leaf_index if h.grant else None,
                                 [(s["leaf_index"], e) for s, e in zip(h.steps, h.step_envs)], book, origin)
        for s, e, m in zip(h.steps, h.step_envs, marks):
            s["signature"] = m
            s["identity"] = e["payload"].get("identity")
        marks = rotation_marks(h.grant.leaf_index if h.grant else None,
                               [(r["leaf_index"], e) for r, e in zip(h.rotations, h.rotation_envs)], book, origin)
        for r, m in zip(h.rotations, marks):
            r["signature"] = m
        h.marked = True


def _history_from_rows(rows: Iterable[tuple[int, Any]], grant_id: str | None = None,
                       damaged: dict[str | None, list[int]] | None = None) -> dict[str, _History]:
    """The grants' histories from their ``access.*`` rows. With ``damaged`` (a dict), a row that cannot
    be read as an access event (changed below Sealbox: not JSON, or without the fields Sealbox writes)
    is left out and its leaf recorded there under its grant id (None when it names none readably: it
    might be any grant's); without it such a row raises."""
    out: dict[str, _History] = {}
    for leaf_index, raw in rows:
        gid = None
        try:
            env = json.loads(bytes(raw))
            payload = env["payload"]
            gid = payload.get("grant_id")
            if not isinstance(gid, str):
                gid = None
                continue
            if grant_id is not None and gid != grant_id:
                continue
            hist = out.setdefault(gid, _History(None))
            if env["kind"] == "access.granted":
                if hist.grant is None:  # the first grant of an id decides; grant_access never writes a second
                    hist.grant = Grant(
                        grant_id=gid, principal=payload["principal"], server=payload["server"], tool=payload["tool"],
                        scope=payload.get("scope"), expires_at=payload.get("expires_at"),
                        provider=payload.get("provider"), credential=bool(payload.get("credential")),
                        granted_at=env["ts"], granted_by=env["principal"], leaf_index=leaf_index)
                    hist.env, hist.raw = env, bytes(raw)
            elif env["kind"] == _ROTATED_KIND:
                fps = payload.get("fingerprints")
                hist.rotations.append({"seq": payload.get("seq"), "ts": env["ts"], "by": env["principal"],
                                       "identity": payload.get("identity"),
                                       "fingerprints": fps if isinstance(fps, dict) else {},
                                       "leaf_index": leaf_index})
                hist.rotation_envs.append(env)
            else:
                hist.steps.append({"step": payload["step"], "ts": env["ts"], "by": env["principal"],
                                   "reason": payload.get("reason"), "detail": payload.get("detail"),
                                   "leaf_index": leaf_index})
                hist.step_envs.append(env)
        except (ValueError, KeyError, TypeError, AttributeError):
            if damaged is None:
                raise
            damaged.setdefault(gid if isinstance(gid, str) else None, []).append(leaf_index)
    return out


_GRANT_ROWS_SQL = ("SELECT leaf_index, raw FROM events WHERE (CAST(raw AS TEXT) ->> '$.payload.grant_id') = ?"
                   f" AND kind IN {_ACCESS_KINDS} AND run_id = ? ORDER BY leaf_index")
#: :data:`_GRANT_ROWS_SQL` on PostgreSQL: the ``events_access_grant`` index of its migration 0003 (the key
#: written exactly as there, the kinds named literally, for the planner to use it).
_PG_GRANT_ROWS_SQL = (f"SELECT leaf_index, raw FROM events WHERE kind IN {_ACCESS_KINDS}"
                      " AND (sealbox_grant_id(raw) COLLATE \"C\") = ? AND run_id = ? ORDER BY leaf_index")
#: The rows that index holds no grant id for (bytes that are not UTF-8 JSON, or a payload without one).
_PG_UNKEYED_ROWS_SQL = (f"SELECT leaf_index, raw, leaf_hash FROM events WHERE kind IN {_ACCESS_KINDS}"
                        " AND (sealbox_grant_id(raw) COLLATE \"C\") IS NULL AND run_id = ? ORDER BY leaf_index")


def _grant_rows(conn: Any, grant_id: str) -> list[tuple[int, Any]]:
    """``(leaf_index, raw)`` of grant ``grant_id``'s ``access.*`` events of the system run, in log order.

    Raises:
        DamagedEventError: on PostgreSQL, an ``access.*`` event of the system run is not UTF-8 JSON
            (changed below Sealbox): it might be one of this grant's steps, and a step denies.
    """
    if not _is_pg(conn):
        return conn.execute(_GRANT_ROWS_SQL, (grant_id, SYSTEM_RUN_ID)).fetchall()
    if "\x00" in grant_id:
        return []  # PostgreSQL text holds no NUL: no stored grant id has one (grant_access refuses one)
    rows = conn.execute(_PG_GRANT_ROWS_SQL, (grant_id, SYSTEM_RUN_ID)).fetchall()
    extra = []
    for leaf_index, raw, leaf_hash in conn.execute(_PG_UNKEYED_ROWS_SQL, (SYSTEM_RUN_ID,)).fetchall():
        try:
            env = json.loads(bytes(raw))
        except ValueError:
            from sealbox.store.sqlite_queries import damaged_event

            raise damaged_event(leaf_index, raw, leaf_hash) from None
        payload = env.get("payload") if isinstance(env, dict) else None
        if isinstance(payload, dict) and payload.get("grant_id") == grant_id:
            extra.append((leaf_index, raw))
    return sorted(rows + extra, key=lambda r: r[0]) if extra else rows


def _rotation_rows(conn: Any, grant_id: str | None = None) -> list[tuple[int, Any]]:
    """``(leaf_index, raw)`` of the ``access.credential_rotated`` events of the system run (few: one per
    recorded rotation), those naming ``grant_id`` if given (read from the bytes; an unreadable one is
    kept for :func:`_history_from_rows` to report)."""
    rows = conn.execute(_ROTATION_ROWS_SQL, (SYSTEM_RUN_ID,)).fetchall()
    if grant_id is None:
        return rows
    out = []
    for leaf_index, raw in rows:
        try:
            payload = json.loads(bytes(raw)).get("payload")
            gid = payload.get("grant_id") if isinstance(payload, dict) else None
        except (ValueError, AttributeError):
            gid = None
        if gid == grant_id or not isinstance(gid, str):
            out.append((leaf_index, raw))
    return out


def _history(reader_or_store: Any, grant_id: str, *, mark: bool = True) -> _History:
    """The grant's history. With ``mark`` (every reader but :func:`grant_status`, which any step denies
    and no rotation changes), its rotations too, and every step and rotation marked valid or not."""
    conn = _conn(reader_or_store)
    rows = _grant_rows(conn, grant_id)
    if mark:
        rows = sorted(list(rows) + _rotation_rows(conn, grant_id), key=lambda r: r[0])
    hist = _history_from_rows(rows, grant_id).get(grant_id) or _History(None)
    if mark:
        _mark(conn, [hist])
    return hist


def _known(hist: _History, grant_id: str) -> Grant:
    if hist.grant is None:
        from sealbox.approvals import shown_id

        raise AccessError(f"no grant {shown_id(grant_id)} in this store (see `sealbox access list`)")
    return hist.grant


def get_grant(reader_or_store: Any, grant_id: str) -> Grant | None:
    """The grant recorded under ``grant_id``, or None."""
    return _history(reader_or_store, grant_id).grant


def is_implicit(grant_id: str | None) -> bool:
    """Whether a tool call's grant is the recorder's ``implicit:<principal>`` placeholder (or absent)."""
    return not grant_id or grant_id.startswith(IMPLICIT_PREFIX)


def grant_access(store: Any, principal: str, server: str, tool: str, scope: Any = None, expires_at: Any = None,
                 credential: "ProviderCredential | dict | None" = None, provider: str | None = None, *,
                 key_file: Any, identity: str | None = None, grant_id: str | None = None) -> str:
    """Give ``principal`` a grant for ``server``/``tool`` (globs); record ``access.granted``,
    signed with the key of an enabled identity with role ``admin`` (:data:`GRANT_ROLES`).

    The payload carries ``origin`` (this log's), ``identity`` (the signer, also the event's
    principal), ``granted_at`` (RFC 3339 UTC), ``key_id`` and ``signature``: Ed25519 over the
    RFC 8785 bytes of :func:`grant_fields`. The signer is checked and the event written in one
    transaction.

    Args:
        scope: a string or a list of strings (e.g. OAuth scopes), recorded as given.
        expires_at: a timezone-aware datetime, RFC 3339 text, a date, or a duration from
            now (``30d``, ``12h``); None: no expiry. Must be in the future.
        credential: a :class:`ProviderCredential` (or its dict form), stored encrypted
            outside the log in the same transaction as the event (never signed or hashed).
        provider: the provider's name (default: the revocation endpoint's host name,
            without port, when a credential is given).
        key_file: the private key file of the granting identity (an enabled admin), or a
            :class:`~sealbox.ledger.checkpoint.Signer`.
        identity: if given, the identity the key must belong to (a check; nothing else).
        grant_id: an id to use (default: a new ``grant_<hex>``).

    Returns:
        The grant id.

    Raises:
        AccessError: a bad argument, the grant id is taken, or the signer may not grant
            (``code``: ``unknown_identity``, ``wrong_key``, ``identity_mismatch``, ``disabled``,
            ``role``); nothing is recorded.
        IdentityError: the key file is missing, unreadable, too open or not a key.
    """
    from sealbox.identities import identity_book, load_key, sign_fields

    for name, value in (("principal", principal), ("server", server), ("tool", tool)):
        if not isinstance(value, str) or not value:
            raise AccessError(f"{name} must be a non-empty string")
    if re.search("[\x00-\x1f\x7f-\x9f]", principal) or not principal.strip():  # as a run's principal (Recorder.run)
        raise AccessError(f"principal {principal!r} holds a control character (a newline, a tab…) or only spaces, "
                          "which no run's principal can hold; nothing was recorded")
    if scope is not None and not isinstance(scope, str) and not (
            isinstance(scope, (list, tuple)) and all(isinstance(s, str) for s in scope)):
        raise AccessError("scope must be a string or a list of strings")
    expires = None if expires_at is None else parse_expiry(expires_at)
    if expires is not None and _parse_time(expires, "expires_at") <= datetime.now(timezone.utc):
        raise AccessError(f"expires_at {expires} is in the past")
    cred = None if credential is None else ProviderCredential.from_dict(credential)
    if provider is None and cred is not None:
        provider = urlsplit(cred.revocation_endpoint).hostname or None
    gid = grant_id or "grant_" + uuid.uuid4().hex[:24]
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", gid) or is_implicit(gid):
        raise AccessError(f"grant id {gid!r} must be 1-128 of A-Z a-z 0-9 _ . : - and not start with {IMPLICIT_PREFIX!r}")
    signer = key_file if hasattr(key_file, "verifier") else load_key(key_file)
    if identity is not None and identity != signer.name:
        raise AccessError(f"the key file is identity {signer.name!r}'s, not {identity!r}", "identity_mismatch")
    origin = getattr(store, "origin", "") or ""
    payload: dict[str, Any] = {"grant_id": gid, "principal": principal, "server": server, "tool": tool,
                               "scope": list(scope) if isinstance(scope, tuple) else scope, "expires_at": expires,
                               "provider": provider, "credential": cred is not None}
    secret = _secret_of(store) if cred is not None else b""

    def build(reader: Any) -> list[EventDraft]:
        conn = _conn(reader)
        if _history(_Wrap(conn), gid).grant is not None:
            raise AccessError(f"grant {gid!r} already exists")
        who = identity_book(reader).get(signer.name)
        if who is None:
            from sealbox.identities import unknown_signer

            raise AccessError(unknown_signer(signer.name), "unknown_identity")
        if who.public_key != signer.verifier.vkey:
            raise AccessError(f"this key is not {who.name}'s current key (it was rotated, or is not theirs)", "wrong_key")
        if who.disabled:
            raise AccessError(f"identity {who.name!r} is disabled: it cannot grant", "disabled")
        if who.role not in GRANT_ROLES:
            raise AccessError(f"identity {who.name!r} has role {who.role}: only an admin may grant", "role")
        payload.update(origin=origin, identity=who.name, granted_at=_rfc3339(datetime.now(timezone.utc)))
        payload["signature"] = sign_fields(signer, grant_fields(payload))
        payload["key_id"] = who.key_id
        if cred is not None:
            nonce, ciphertext = _seal(secret, gid, cred)
            conn.execute("INSERT INTO credentials (grant_id, nonce, ciphertext, created_at) VALUES (?, ?, ?, ?)",
                         (gid, nonce, ciphertext, _rfc3339(datetime.now(timezone.utc))))
        return [EventDraft("access.granted", payload, run_id=SYSTEM_RUN_ID, principal=who.name)]

    store.append_with(build)
    return gid


def _check_rotator(reader: Any, signer: Any) -> Any:
    """The identity of ``signer`` as the log holds it now, if it may record a rotation (:data:`ROTATE_ROLES`).

    Raises:
        AccessError: ``unknown_identity``, ``wrong_key``, ``disabled`` or ``role``.
    """
    from sealbox.identities import identity_book

    who = identity_book(reader).get(signer.name)
    if who is None:
        from sealbox.identities import unknown_signer

        raise AccessError(unknown_signer(signer.name), "unknown_identity")
    if who.public_key != signer.verifier.vkey:
        raise AccessError(f"this key is not {who.name}'s current key (it was rotated, or is not theirs)", "wrong_key")
    if who.disabled:
        raise AccessError(f"identity {who.name!r} is disabled: it cannot record a rotation", "disabled")
    if who.role not in ROTATE_ROLES:
        raise AccessError(f"identity {who.name!r} has role {who.role}: only an admin may record a credential "
                          "rotation", "role")
    return who


def _rotation_tokens(tokens: Any) -> dict[str, str]:
    """The checked new tokens of a rotation (:data:`ROTATION_TOKEN_KEYS`; the message names keys, never values)."""
    if not isinstance(tokens, dict):
        raise AccessError(f"a rotation must be a JSON object with the new token(s), got {type(tokens).__name__}")
    unknown = sorted(set(tokens) - set(ROTATION_TOKEN_KEYS))
    if unknown:
        raise AccessError(f"unknown rotation keys {unknown} (known: {list(ROTATION_TOKEN_KEYS)}; the provider's "
                          "endpoints and client stay the grant's)")
    out = {}
    for key, value in tokens.items():
        if value is None or key in ("token_type", "scope"):
            continue
        if key == "expires_in":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10 ** 9:
                raise AccessError("rotation key 'expires_in' must be a number of seconds (RFC 6749 §5.1)")
            continue
        if not isinstance(value, str) or not value:
            raise AccessError(f"rotation key {key!r} must be a non-empty string")
        out[key] = value
    if not out.get("access_token") and not out.get("refresh_token"):
        raise AccessError("a rotation needs the new 'refresh_token' or 'access_token' (or both)")
    if "access_token_expires_at" in out:
        _parse_time(out["access_token_expires_at"], "access_token_expires_at")
    elif isinstance(tokens.get("expires_in"), int) and out.get("access_token"):
        out["access_token_expires_at"] = _rfc3339(datetime.now(timezone.utc) + timedelta(seconds=tokens["expires_in"]))
    return out


def rotate_credential(store: Any, grant_id: str, tokens: dict[str, Any], *, key_file: Any,
                      identity: str | None = None) -> int:
    """Record that the provider rotated the grant's tokens (RFC 6749 §6; RFC 9700 §4.14: a refresh
    returned a new refresh token and invalidated the old one), and store the new credential.

    In one write transaction: a new row of table ``credential_rotations`` (the live credential
    with the given tokens replaced, encrypted as a granted one; rows are appended, never
    updated) and an ``access.credential_rotated`` event in the system run, carrying ``grant_id``,
    ``seq`` (1 for the grant's first rotation, then 2, ...), ``fingerprints`` (token type ->
    :func:`token_fingerprint` of each token given; never a token), ``origin``, ``identity``
    (also the event's principal), ``at``, ``after`` (the leaf of the grant's previous valid
    rotation, or of the grant), ``key_id`` and an Ed25519 ``signature`` over :func:`rotation_fields`
    by ``key_file``'s identity: an enabled identity with a role in :data:`ROTATE_ROLES` (admin).

    From then on :func:`revoke` / :func:`retry` revoke and introspect the new credential (and,
    best effort, revoke the earlier tokens still held), and a revocation confirmed before the
    rotation is no longer shown as confirmed (:data:`STATUS_PENDING`: retry it).

    Args:
        tokens: ``refresh_token`` and/or ``access_token`` (the new ones), optionally
            ``access_token_expires_at`` (RFC 3339). A token left out stays as it was (RFC 6749 §6:
            a provider that issues no new refresh token keeps the old one valid).
        key_file: the private key file of the recording identity (an enabled admin), or a
            :class:`~sealbox.ledger.checkpoint.Signer`. Required.
        identity: if given, the identity the key must belong to (a check; nothing else).

    Returns:
        The rotation's ``seq``.

    Raises:
        AccessError: no such grant, it holds no credential (none given, or deleted), a bad token
            key or value (the message names keys, never values), no new token differs from the
            live one, no key, or the key's identity may not record a rotation (``code``:
            ``unknown_identity``, ``wrong_key``, ``identity_mismatch``, ``disabled``, ``role``);
            then nothing is recorded.
        IdentityError: the key file is missing, unreadable, too open or not a key.
    """
    from sealbox.identities import load_key, sign_fields

    new = _rotation_tokens(tokens)
    if key_file is None:
        raise AccessError("a rotation is signed: give the key file of an enabled admin (key_file=)")
    signer = key_file if hasattr(key_file, "verifier") else load_key(key_file)
    if identity is not None and identity != signer.name:
        raise AccessError(f"the key file is identity {signer.name!r}'s, not {identity!r}", "identity_mismatch")
    secret = _secret_of(store)
    box: dict[str, Any] = {}

    def build(reader: Any) -> list[EventDraft]:
        conn = _conn(reader)
        hist = _history(_Wrap(conn), grant_id)
        grant = _known(hist, grant_id)
        who = _check_rotator(reader, signer)
        if not grant.credential:
            raise AccessError(f"grant {grant_id} holds no provider credential: there is nothing to rotate")
        rows = _credential_rows(conn, grant_id)
        if not rows:
            raise AccessError(f"the credential of grant {grant_id} was deleted: there is nothing to rotate")
        last_seq, nonce, ciphertext = rows[-1]
        live = _unseal(secret, grant_id, nonce, ciphertext, last_seq)
        if all(getattr(live, k) == v for k, v in new.items() if k != "access_token_expires_at"):
            raise AccessError(f"no new token: the token(s) given are those grant {grant_id} already holds")
        cred = ProviderCredential(**{**live.to_dict(), **new})
        seq = last_seq + 1
        valid = hist.valid_rotations()
        row = conn.execute(_ORIGIN_SQL).fetchone()
        payload: dict[str, Any] = {
            "grant_id": grant_id, "seq": seq,
            "fingerprints": {k: token_fingerprint(store, new[k]) for k in _TOKEN_HINTS if k in new},
            "origin": row[0] if row and isinstance(row[0], str) else "", "identity": who.name,
            "at": _rfc3339(datetime.now(timezone.utc)),
            "after": valid[-1]["leaf_index"] if valid else grant.leaf_index}
        payload["signature"] = sign_fields(signer, rotation_fields(payload))
        payload["key_id"] = who.key_id
        n, c = _seal(secret, grant_id, cred, seq)
        conn.execute("INSERT INTO credential_rotations (grant_id, seq, nonce, ciphertext, created_at) "
                     "VALUES (?, ?, ?, ?, ?)", (grant_id, seq, n, c, payload["at"]))
        box["seq"] = seq
        return [EventDraft(_ROTATED_KIND, payload, run_id=SYSTEM_RUN_ID, principal=who.name)]

    store.append_with(build)
    return box["seq"]


class _Wrap:
    def __init__(self, conn: Any) -> None:
        self.conn = conn


def grant_status(reader_or_store: Any, grant_id: str, principal: str, server: str, tool: str,
                 now: Any = None) -> tuple[bool, str]:
    """Whether a call by ``principal`` to ``server``/``tool`` may use ``grant_id`` now.

    Reads the grant's ``access.*`` events; pass the recorder's transaction reader so
    that the answer and the decision it leads to are consistent.

    Returns:
        ``(True, why)``, or ``(False, why)`` for an unknown grant, a grant that does not
        count (unsigned, forged, altered, copied, or signed by an identity that was not an
        enabled admin then: :func:`grant_problem`; ``why`` names the reason), a grant revoked
        (any ``access.revoked`` step: denial starts at ``requested``), held by another
        principal, not covering the tool, or expired.
    """
    hist = _history(reader_or_store, grant_id, mark=False)  # any step denies, signed or not
    grant = hist.grant
    if grant is None:
        from sealbox.approvals import shown_id

        return False, f"no grant {shown_id(grant_id)} in this store"
    problem = _grant_problem(_conn(reader_or_store), hist)
    if problem is not None:
        return False, f"grant {grant_id} does not count: {GRANT_PROBLEMS[problem]}"
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
    assert hist.marked, "steps must be marked (_mark) before their status is read"
    steps = hist.valid_steps()  # an unsigned or forged step is not there (but it still denies: grant_status)
    if not steps:
        return STATUS_UNSIGNED
    rotated = hist.valid_rotations()
    since = rotated[-1]["leaf_index"] if rotated else -1
    # confirmed only when a confirmation checked the live credential: one after the latest rotation
    if any(s["step"] == "confirmed" and s["leaf_index"] > since for s in steps):
        return STATUS_CONFIRMED
    if not grant.credential:
        return STATUS_LOCAL
    last = steps[-1]
    tokens = last["detail"].get("tokens", []) if isinstance(last["detail"], dict) else None
    if last["step"] == "sent" and isinstance(tokens, list) and last["detail"].get("introspection") is False \
            and all(isinstance(t, dict) and t.get("http_status") == 200 for t in tokens):
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


def _grant_row(conn: Any, hist: _History, held: bool, now: datetime) -> dict[str, Any]:
    g = hist.grant
    assert g is not None
    return {"grant_id": g.grant_id, "principal": g.principal, "server": g.server, "tool": g.tool, "scope": g.scope,
            "expires_at": g.expires_at, "provider": g.provider,
            "credential": ("held" if held else "deleted") if g.credential else "none",
            "status": _status_of(hist, now), "granted_at": g.granted_at, "granted_by": g.granted_by,
            "signature": _grant_problem(conn, hist) or "valid"}


def _all_histories(conn: Any, grant_id: str | None = None) -> tuple[dict[str, _History], dict[str | None, list[int]]]:
    """Every grant's history (or ``grant_id``'s) read from all ``access.*`` events of the system run, and
    the leaves of those that cannot be read (:func:`_history_from_rows`' ``damaged``)."""
    rows = conn.execute(f"SELECT leaf_index, raw FROM events WHERE run_id = ? AND kind IN {_ACCESS_KINDS}"
                        " ORDER BY leaf_index", (SYSTEM_RUN_ID,)).fetchall()
    rotations = _rotation_rows(conn)
    if rotations:
        rows = sorted(list(rows) + rotations, key=lambda r: r[0])
    damaged: dict[str | None, list[int]] = {}
    hists = _history_from_rows(rows, grant_id, damaged)
    if grant_id is not None:  # the unreadable rows of other grants are not this one's
        damaged = {k: v for k, v in damaged.items() if k in (None, grant_id)}
    return hists, damaged


def _damaged_leaves(damaged: dict[str | None, list[int]], grant_id: str) -> list[int]:
    return sorted(damaged.get(grant_id, []) + damaged.get(None, []))


def list_grants(store: Any, now: Any = None) -> list[dict[str, Any]]:
    """Every grant, oldest first: grant_id, principal, server, tool, scope, expires_at,
    provider, credential (``held`` / ``deleted`` / ``none``), status, granted_at, granted_by,
    signature (``valid``, or the :data:`GRANT_PROBLEMS` code that keeps the grant from
    authorizing any call, e.g. ``unsigned``), damaged. ``status`` says only whether it expired or was
    revoked: a grant whose signature is not ``valid`` denies every call whatever its status.

    ``damaged`` lists the leaves of ``access.*`` events that cannot be read (changed below Sealbox: not
    JSON, or without the fields Sealbox writes) and may be the grant's: those naming it, and those that
    name no grant readably (they might be any grant's). Such an event is left out of ``status``; a check
    of the grant denies calls naming it (it might be a revocation). Empty when there are none."""
    conn = _conn(store)
    held = {r[0] for r in conn.execute("SELECT grant_id FROM credentials")}
    when = _now(now)
    hists, damaged = _all_histories(conn)
    _mark(conn, hists.values())
    return [{**_grant_row(conn, h, gid in held, when), "damaged": _damaged_leaves(damaged, gid)}
            for gid, h in hists.items() if h.grant is not None]


def show_grant(store: Any, grant_id: str, now: Any = None) -> dict[str, Any]:
    """One grant as a :func:`list_grants` row plus ``steps``: each ``access.revoked``
    step in order (step, ts, by, reason, detail, leaf_index, identity, signature: ``valid`` or
    the :data:`REVOCATION_PROBLEMS` code that keeps it from counting; the status reads only
    valid steps), and ``rotations``: each recorded credential rotation in order (seq, ts, by,
    identity, fingerprints: token type -> :func:`token_fingerprint`, never a token; leaf_index,
    signature: ``valid`` or the :data:`ROTATION_PROBLEMS` code). ``damaged`` as in :func:`list_grants`: an unreadable event is left out, not raised.

    Raises:
        AccessError: no such grant.
    """
    conn = _conn(store)
    hists, damaged = _all_histories(conn, grant_id)  # every access event: an unreadable one names no grant
    hist = hists.get(grant_id) or _History(None)
    _known(hist, grant_id)
    _mark(conn, [hist])
    held = conn.execute("SELECT 1 FROM credentials WHERE grant_id = ?", (grant_id,)).fetchone() is not None
    row = _grant_row(conn, hist, held, _now(now))
    row["damaged"] = _damaged_leaves(damaged, grant_id)
    row["steps"] = hist.steps
    row["rotations"] = [{k: r.get(k) for k in ("seq", "ts", "by", "identity", "fingerprints", "leaf_index",
                                                "signature")} for r in hist.rotations]
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


#: The most of a provider's answer that is read (RFC 7009 and RFC 7662 answers are small); the
#: rest is left unread, and an answer cut there is not JSON.
MAX_ANSWER_BYTES = 1 << 20


class AuthlibProviderClient:
    """:class:`ProviderClient` over authlib's ``requests`` OAuth 2.0 client.

    Redirects are never followed (``allow_redirects=False``): a 3xx comes back as the
    answer (following one would turn the POST into a GET, or re-send the token and the
    client secret to wherever the ``Location`` points). :func:`revoke` records it as a
    failure.

    ``timeout`` bounds each socket operation, so a provider sending its answer a byte at a
    time could hold a request for ever: ``deadline`` bounds the whole request (connect,
    headers, body). Past it the request is abandoned (its thread is left to end with the
    connection) and :class:`ProviderUnavailable` is raised. At most :data:`MAX_ANSWER_BYTES`
    of an answer are read.

    Args:
        timeout: seconds for each socket operation of an HTTP request.
        deadline: seconds for a whole HTTP request (default: three times ``timeout``).
    """

    def __init__(self, timeout: float = 10.0, deadline: float | None = None) -> None:
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else 3 * timeout

    def _session(self, cred: ProviderCredential) -> Any:
        from authlib.integrations.requests_client import OAuth2Session

        return OAuth2Session(client_id=cred.client_id, client_secret=cred.client_secret,
                             token_endpoint_auth_method=cred.auth_method,
                             revocation_endpoint_auth_method=cred.auth_method)

    def _post(self, cred: ProviderCredential, call: Callable[[], Any]) -> ProviderAnswer:
        import threading

        import requests

        box: dict[str, Any] = {}

        def work() -> None:
            try:
                resp = call()
                try:
                    data = resp.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True) or b""
                finally:
                    resp.close()
                box["answer"] = (resp.status_code, data)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=work, name="sealbox-provider-request", daemon=True)
        worker.start()
        worker.join(self.deadline)
        if worker.is_alive():
            raise ProviderUnavailable(f"ProviderUnavailable: no complete answer within {self.deadline:g} s")
        exc = box.get("error")
        if isinstance(exc, (requests.RequestException, OSError)) or type(exc).__module__.startswith("urllib3"):
            raise ProviderUnavailable(_describe_exc(exc, cred.secrets())) from None
        if exc is not None:
            raise exc
        status, data = box["answer"]
        body = None
        if len(data) <= MAX_ANSWER_BYTES:
            try:
                body = json.loads(data, object_pairs_hook=_unique_names)
            except (ValueError, RecursionError):  # not JSON, nested too deep for the parser, or a name given
                body = None                        # twice (_unique_names): no answer body
        return ProviderAnswer(status, body if isinstance(body, dict) else None)

    def revoke(self, cred: ProviderCredential, token: str, token_type_hint: str) -> ProviderAnswer:
        with self._session(cred) as sess:
            return self._post(cred, lambda: sess.revoke_token(
                cred.revocation_endpoint, token=token, token_type_hint=token_type_hint, timeout=self.timeout,
                allow_redirects=False, stream=True))

    def introspect(self, cred: ProviderCredential, token: str, token_type_hint: str) -> ProviderAnswer:
        if not cred.introspection_endpoint:
            raise AccessError("this provider has no introspection endpoint")
        with self._session(cred) as sess:
            return self._post(cred, lambda: sess.introspect_token(
                cred.introspection_endpoint, token=token, token_type_hint=token_type_hint, timeout=self.timeout,
                allow_redirects=False, stream=True))


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object of a provider's answer, refused (ValueError) when it names a key twice: RFC 8259 §4
    leaves such an object's meaning to the parser (some keep the first value, Python's the last), so
    ``{"active": true, "active": false}`` would confirm a revocation another reader sees refused. The
    answer then has no body, as one that is not JSON: it confirms nothing."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"duplicate name {name!r}")
        out[name] = value
    return out


def _describe_exc(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] [^'\")\]]+", text)
    if m:
        return f"{type(exc).__name__}: {_clip(m.group(0).strip(), 200, secrets)}"
    if "timed out" in text.lower():
        return f"{type(exc).__name__}: timed out"
    return f"{type(exc).__name__}: {_clip(text, 200, secrets)}"


def _no_active(answer: ProviderAnswer) -> str:
    """What an introspection answer lacks to confirm anything (RFC 7662 §2.2: a JSON object
    with a boolean ``active``)."""
    if answer.body is None:
        return "without a JSON object body"
    if "active" not in answer.body:
        return "without an 'active' field"
    value = answer.body["active"]
    return f"with 'active' not a boolean ({'null' if value is None else type(value).__name__})"


def _transient(answer: ProviderAnswer) -> bool:
    return answer.status >= 500 or answer.status == 429


#: OAuth errors of a revocation answer that refuse the client itself (RFC 6749 §5.2, RFC 7009 §2.2.1).
_CLIENT_ERRORS = ("invalid_client", "unauthorized_client")


def _refused_client(answer: ProviderAnswer) -> bool:
    """Whether a revocation answer refused the client rather than answered about the token:
    OAuth error ``invalid_client`` / ``unauthorized_client``, or HTTP 401 / 403 with no other
    OAuth error (``unsupported_token_type``, which some servers send with 401, is about the token)."""
    error = (answer.body or {}).get("error")
    error = error if isinstance(error, str) else None
    return error in _CLIENT_ERRORS or (answer.status in (401, 403) and not error)


def _redirected(answer: ProviderAnswer) -> bool:
    return 300 <= answer.status < 400


def _oauth_error(answer: ProviderAnswer, secrets: list[str]) -> str | None:
    """The provider's OAuth ``error`` string, scrubbed and then clipped to 80 characters."""
    err = (answer.body or {}).get("error")
    return _clip(err, 80, secrets) if isinstance(err, str) else None


def _secret_pattern(secrets: Iterable[str]) -> "re.Pattern[str] | None":
    """One pattern for every secret, longest first; an existing ``[secret]`` mark matches
    first so that it is never scrubbed again. A secret shorter than 8 characters matches
    only as a whole token (not next to a token character), a longer one anywhere."""
    alts = [re.escape(_MARK)]
    for s in sorted({s for s in secrets if s}, key=len, reverse=True):
        alts.append(re.escape(s) if len(s) >= _SHORT_SECRET else
                    f"(?<!{_TOKEN_CHAR}){re.escape(s)}(?!{_TOKEN_CHAR})")
    return None if len(alts) == 1 else re.compile("|".join(alts))


def _scrub_text(text: str, secrets: Iterable[str]) -> str:
    pattern = _secret_pattern(secrets)
    return text if pattern is None else pattern.sub(_MARK, text)


def _clip(text: str, limit: int, secrets: Iterable[str]) -> str:
    """``text`` scrubbed, then cut to ``limit`` characters; then, if it ends in the first
    4 or more characters of a secret (a secret cut by the limit, or one the provider
    itself cut short), those are dropped."""
    secrets = [s for s in secrets if s]
    text = _scrub_text(text, secrets)[:limit]
    changed = True
    while changed:
        changed = False
        for s in secrets:
            for k in range(min(len(s), len(text)), _MIN_CUT - 1, -1):
                if text.endswith(s[:k]) and (len(s) >= _SHORT_SECRET
                                             or not re.search(f"{_TOKEN_CHAR}$", text[:-k])):
                    text, changed = text[:-k], True
                    break
    return text


def _scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` with every secret replaced by ``[secret]`` (a provider may echo a token in
    an error). A secret shorter than 8 characters is replaced only where it is a whole
    token (not next to any of ``A-Z a-z 0-9 . _ ~ + / = -``), a longer one everywhere."""
    if isinstance(value, str):
        return _scrub_text(value, secrets)
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


class _Attempts:
    """Call ``fn`` until it gives a definitive answer, at most ``retries`` times, with backoff."""

    def __init__(self, retries: int, backoff: float, sleep: Callable[[float], None], secrets: list[str]) -> None:
        self.retries, self.backoff, self.sleep = max(1, int(retries)), backoff, sleep
        self.secrets = secrets
        self.used = 0

    def run(self, fn: Callable[[], ProviderAnswer]) -> tuple[ProviderAnswer | None, str | None]:
        error = None
        for attempt in range(1, self.retries + 1):
            self.used = max(self.used, attempt)
            try:
                answer = fn()
            except ProviderUnavailable as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - the client failed otherwise: recorded, not retried
                return None, f"the request failed in the provider client: {_describe_exc(exc, self.secrets)}"
            else:
                if not _transient(answer):
                    return answer, None
                oauth = _oauth_error(answer, self.secrets)
                error = f"HTTP {answer.status}" + (f" {oauth}" if oauth else "")
            if attempt < self.retries:
                self.sleep(min(MAX_BACKOFF_S, self.backoff * (2 ** min(attempt - 1, 64))))
        return None, error


def _load_revoker(key_file: Any, identity: str | None) -> Any:
    """The signer of a revocation from its key file (or a Signer), checked against ``identity``."""
    from sealbox.identities import load_key

    if key_file is None:
        raise AccessError("a revocation is signed: give the key file of an enabled admin or approver (key_file=)")
    signer = key_file if hasattr(key_file, "verifier") else load_key(key_file)
    if identity is not None and identity != signer.name:
        raise AccessError(f"the key file is identity {signer.name!r}'s, not {identity!r}", "identity_mismatch")
    return signer


def _check_revoker(reader: Any, signer: Any) -> Any:
    """The identity of ``signer`` as the log holds it now, if it may revoke (:data:`REVOKE_ROLES`).

    Raises:
        AccessError: ``unknown_identity``, ``wrong_key``, ``disabled`` or ``role``.
    """
    from sealbox.identities import identity_book

    who = identity_book(reader).get(signer.name)
    if who is None:
        from sealbox.identities import unknown_signer

        raise AccessError(unknown_signer(signer.name), "unknown_identity")
    if who.public_key != signer.verifier.vkey:
        raise AccessError(f"this key is not {who.name}'s current key (it was rotated, or is not theirs)", "wrong_key")
    if who.disabled:
        raise AccessError(f"identity {who.name!r} is disabled: it cannot revoke", "disabled")
    if who.role not in REVOKE_ROLES:
        raise AccessError(f"identity {who.name!r} has role {who.role}: only an admin or an approver may revoke", "role")
    return who


def _step_draft(reader: Any, hist: _History, signer: Any, step: str, detail: dict[str, Any],
                reason: str | None = None) -> EventDraft:
    """A signed ``access.revoked`` draft for ``hist``'s grant (read in the write transaction),
    chained after its last valid step (or the grant)."""
    from sealbox.identities import sign_fields

    assert hist.grant is not None
    who = _check_revoker(reader, signer)
    _mark(_conn(reader), [hist])
    valid = hist.valid_steps()
    payload: dict[str, Any] = {"grant_id": hist.grant.grant_id, "step": step, "detail": detail}
    if reason is not None:
        payload["reason"] = reason
    row = _conn(reader).execute(_ORIGIN_SQL).fetchone()
    payload.update(origin=row[0] if row and isinstance(row[0], str) else "", identity=who.name,
                   at=_rfc3339(datetime.now(timezone.utc)),
                   after=valid[-1]["leaf_index"] if valid else hist.grant.leaf_index)
    payload["signature"] = sign_fields(signer, revocation_fields(payload))
    payload["key_id"] = who.key_id
    return EventDraft("access.revoked", payload, run_id=SYSTEM_RUN_ID, principal=who.name)


def _record_step_signed(store: Any, grant_id: str, step: str, signer: Any, detail: dict[str, Any],
                        secrets: list[str], reason: str | None = None) -> None:
    detail = _scrub(detail, secrets)

    def build(reader: Any) -> list[EventDraft]:
        hist = _history(_Wrap(_conn(reader)), grant_id)
        return [_step_draft(reader, hist, signer, step, detail, reason)]

    store.append_with(build)


def _at_provider(store: Any, grant: Grant, client: ProviderClient | None, retries: int, backoff: float,
                 by: Any, sleep: Callable[[float], None], reason: str | None = None) -> None:
    """Revoke both tokens at the provider and confirm by introspection; record sent / confirmed / failed.
    ``reason`` (a :func:`revoke` of a grant already pending) is written on the first step recorded.

    A redirect (3xx) is never followed and never counts as an answer: for revocation the
    step is ``failed`` (no ``sent``), for introspection the token is not confirmed.
    """
    gid = grant.grant_id
    first_reason = [reason] if reason is not None else []

    def _record_step(store: Any, gid: str, step: str, by: Any, detail: dict[str, Any], secrets: list[str]) -> None:
        # the first step carries ``reason``: a revoke of a grant already pending at its provider
        _record_step_signed(store, gid, step, by, detail, secrets, first_reason.pop() if first_reason else None)

    try:
        cred = load_credential(store, gid)
    except AccessError as exc:  # altered or moved: recorded, as a deleted one is (the local deny stands)
        _record_step(store, gid, "failed", by, {
            "stage": "credential", "pending": True,
            "error": f"{exc}: its tokens cannot be revoked at the provider through Sealbox"}, [])
        return
    if cred is None:
        _record_step(store, gid, "failed", by, {
            "stage": "credential", "pending": True,
            "error": "the grant's credential was deleted: its tokens cannot be revoked at the provider"}, [])
        return
    live_seq, earlier, earlier_secrets = _earlier_tokens(store, gid, cred)
    secrets = cred.secrets() + [x for x in earlier_secrets if x not in cred.secrets()]
    try:
        for key in _ENDPOINT_KEYS:
            if getattr(cred, key):
                _check_endpoint(key, getattr(cred, key), stored=True)
    except AccessError as exc:  # stored before the check existed: it can never be called
        _record_step(store, gid, "failed", by, {
            "stage": "credential", "pending": True,
            "error": f"{exc}: its tokens cannot be revoked at the provider through Sealbox"}, secrets)
        return
    client = client or AuthlibProviderClient()
    tries = _Attempts(retries, backoff, sleep, secrets)
    sent: list[dict[str, Any]] = []
    unanswered: list[dict[str, Any]] = []
    redirected: list[dict[str, Any]] = []
    refused_client: set[str] = set()  # hints whose revocation answer refused the client (_refused_client)
    for hint, token in cred.tokens():
        answer, error = tries.run(lambda: client.revoke(cred, token, hint))
        if answer is None:
            unanswered.append({"token_type_hint": hint, "error": error})
            continue
        if _redirected(answer):
            redirected.append({"token_type_hint": hint, "http_status": answer.status})
            continue
        entry: dict[str, Any] = {"token_type_hint": hint, "http_status": answer.status}
        if _refused_client(answer):
            refused_client.add(hint)
        oauth = _oauth_error(answer, secrets)
        if oauth:
            entry["error"] = oauth
        sent.append(entry)
    # best effort: the tokens of earlier credentials (before a rotation) that are not the live ones; a
    # rotating provider already invalidated the old refresh token, an old access token may live on
    old = _Attempts(1, backoff, sleep, secrets)
    older: list[dict[str, Any]] = []
    for seq, hint, token in earlier:
        answer, error = old.run(lambda: client.revoke(cred, token, hint))
        item: dict[str, Any] = {"credential": seq, "token_type_hint": hint}
        if answer is None:
            item["error"] = error
        else:
            item["http_status"] = answer.status
            oauth = _oauth_error(answer, secrets)
            if oauth:
                item["error"] = oauth
        older.append(item)
    extra: dict[str, Any] = {"credential": live_seq} if live_seq else {}
    if older:
        extra["earlier"] = older
    endpoint = _loggable(cred.revocation_endpoint)
    if unanswered or redirected:
        problems = list(dict.fromkeys(_REDIRECT.format(status=r["http_status"]) for r in redirected))
        if unanswered:
            problems.append("the provider could not be reached or was unavailable: " + unanswered[-1]["error"])
        detail: dict[str, Any] = {"stage": "revocation", "endpoint": endpoint, "attempts": tries.used,
                                  "pending": True, "answered": sent, "unanswered": unanswered, **extra}
        if redirected:
            detail["redirected"] = redirected
        _record_step(store, gid, "failed", by, {**detail, "error": "; ".join(problems)}, secrets)
        return
    has_introspection = bool(cred.introspection_endpoint)
    _record_step(store, gid, "sent", by, {"endpoint": endpoint, "tokens": sent, "attempts": tries.used,
                                          "introspection": has_introspection, **extra}, secrets)
    refused = [t for t in sent if t["http_status"] != 200]
    if not has_introspection:
        if refused:
            _record_step(store, gid, "failed", by, {
                "stage": "revocation", "pending": True, "refused": refused,
                "error": "the provider refused to revoke " + ", ".join(t["token_type_hint"] for t in refused)
                         + "; it has no introspection endpoint to check the tokens"}, secrets)
        return
    checks = _Attempts(retries, backoff, sleep, secrets)
    results: list[dict[str, Any]] = []
    problems = []
    client_refused = {t["token_type_hint"]: t for t in sent if t["token_type_hint"] in refused_client}
    for hint, token in cred.tokens():
        answer, error = checks.run(lambda: client.introspect(cred, token, hint))
        if answer is None:
            results.append({"token_type_hint": hint, "error": error})
            problems.append(f"{hint}: introspection unavailable ({error})")
            continue
        if _redirected(answer):
            why = _REDIRECT.format(status=answer.status)
            results.append({"token_type_hint": hint, "http_status": answer.status, "error": why})
            problems.append(f"{hint}: introspection: {why}")
            continue
        active = (answer.body or {}).get("active")
        if answer.status != 200 or not isinstance(active, bool):
            results.append({"token_type_hint": hint, "http_status": answer.status,
                            "error": _oauth_error(answer, secrets)})
            problems.append(f"{hint}: introspection answered HTTP {answer.status} {_no_active(answer)}")
            continue
        entry = {"token_type_hint": hint, "active": active}
        if not active and hint in client_refused:  # RFC 7662 §2.2/§4: "inactive" to a caller that may not know
            t = client_refused[hint]
            problems.append(f"{hint}: the revocation endpoint refused the client (HTTP {t['http_status']}"
                            + (f" {t['error']}" if t.get("error") else "") + "), so an introspection answer to the "
                            "same client does not confirm it")
        if active:
            exp = (answer.body or {}).get("exp")
            if isinstance(exp, int) and not isinstance(exp, bool):
                try:
                    entry["exp"] = _rfc3339(datetime.fromtimestamp(exp, timezone.utc))
                except (OverflowError, OSError, ValueError):  # an exp no datetime can hold: not recorded
                    pass
            until = entry.get("exp") or (cred.access_token_expires_at if hint == "access_token" else None)
            problems.append(f"{hint} is still active at the provider" + (
                f" (a self-contained token stays valid until it expires at {until})" if until else ""))
        results.append(entry)
    detail = {"endpoint": _loggable(cred.introspection_endpoint), "tokens": results, "attempts": checks.used}
    if live_seq:
        detail["credential"] = live_seq
    if problems:
        _record_step(store, gid, "failed", by, {"stage": "introspection", "pending": True,
                                                "error": "; ".join(problems), **detail}, secrets)
    else:
        _record_step(store, gid, "confirmed", by, detail, secrets)


def _earlier_tokens(store: Any, grant_id: str, live: ProviderCredential) -> tuple[int, list[tuple[int, str, str]],
                                                                                 list[str]]:
    """The live credential's ``seq`` (0: never rotated), ``(seq, token_type_hint, token)`` of each token of an
    earlier credential still held that is not a live token (newest first, each token once), and the secrets
    of those earlier credentials (to scrub). An earlier row that does not decrypt is skipped."""
    held = _held_credentials(store, grant_id)
    live_seq = held[-1][0] if held else 0
    live_tokens = {t for _h, t in live.tokens()}
    seen: set[str] = set()
    out: list[tuple[int, str, str]] = []
    secrets: list[str] = []
    for seq, cred in reversed(held[:-1]):
        if isinstance(cred, AccessError):
            continue
        secrets += cred.secrets()
        for hint, token in cred.tokens():
            if token not in live_tokens and token not in seen:
                seen.add(token)
                out.append((seq, hint, token))
    return live_seq, out, secrets


def _at_provider_reporting(store: Any, grant: Grant, client: ProviderClient | None, retries: int, backoff: float,
                           signer: Any, sleep: Callable[[float], None], reason: str | None = None) -> None:
    """:func:`_at_provider`, where a refusal of the signer met after the ``requested`` step (its
    identity disabled, its key rotated or its role changed meanwhile: a step it signs would not
    count) says that the grant is denied here and that what the provider answered is unrecorded."""
    try:
        _at_provider(store, grant, client, retries, backoff, signer, sleep, reason)
    except AccessError as exc:
        if exc.code not in ("unknown_identity", "wrong_key", "disabled", "role"):
            raise
        gid = grant.grant_id
        raise AccessError(f"grant {gid} is revoked here (its 'requested' step is recorded: calls under it are denied), "
                          f"but what the provider answered could not be recorded: {exc}; an enabled admin or approver "
                          f"must run `sealbox access retry {gid}`", exc.code) from None


def revoke(store: Any, grant_id: str, reason: str, provider_client: ProviderClient | None = None, retries: int = 3,
           *, key_file: Any = None, identity: str | None = None, backoff: float = 0.5,
           sleep: Callable[[float], None] = time.sleep) -> str:
    """Revoke a grant: locally at once, then at its provider. Every step is signed.

    1. ``access.revoked`` step ``requested`` is committed; from then on every call
       under the grant is denied (``grant_invalid``).
    2. If the grant has a provider credential: both tokens are revoked (RFC 7009),
       ``sent``; then introspected (RFC 7662), ``confirmed`` when both are inactive.
       Unreachable / 5xx / 429 answers are retried ``retries`` times with exponential
       backoff (``backoff`` seconds, doubled each time, at most :data:`MAX_BACKOFF_S`
       seconds apart); what could not be done is a
       ``failed`` step and the grant stays :data:`STATUS_PENDING` (see :func:`retry`).
       Redirects are not followed: a 3xx answer is a ``failed`` step naming its status,
       never ``sent`` or ``confirmed``.

    Each step carries ``origin``, ``identity`` (also the event's principal), ``at``, ``after``
    (the leaf of the grant's previous valid step, or of the grant), ``key_id`` and an Ed25519
    ``signature`` over :func:`revocation_fields`, by ``key_file``'s identity: an enabled identity
    with a role in :data:`REVOKE_ROLES` (admin or approver).

    Revoking a grant already pending at its provider retries it. A grant whose only steps
    are unsigned or forged (:data:`STATUS_UNSIGNED`) is revoked anew.

    Args:
        key_file: the private key file of the revoking identity, or a
            :class:`~sealbox.ledger.checkpoint.Signer`. Required.
        identity: if given, the identity the key must belong to (a check; nothing else).

    Returns:
        The status after this call (:func:`access_status`).

    Raises:
        AccessError: no such grant, no reason (or one longer than ``REASON_MAX_CHARS``, or not UTF-8
            text), already revoked (and not pending), no key, or
            the key's identity may not revoke (``code``: ``unknown_identity``, ``wrong_key``,
            ``identity_mismatch``, ``disabled``, ``role``); then nothing is recorded. The same
            codes when the identity stops being allowed to revoke while its revocation is at the
            provider: the ``requested`` step is then recorded (the message says so), the rest is not.
        IdentityError: the key file is missing, unreadable, too open or not a key.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise AccessError("a revocation needs a reason")
    from sealbox.approvals import REASON_MAX_CHARS

    if len(reason) > REASON_MAX_CHARS:  # signed and kept forever, as an approval answer's reason
        raise AccessError(f"the reason is {len(reason)} characters long: at most {REASON_MAX_CHARS} are recorded "
                          "(say why in short; link to the details)")
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a non-UTF-8 byte of a command-line argument decodes to one
        raise AccessError("the reason is not UTF-8 text (it holds a lone surrogate)") from None
    signer = _load_revoker(key_file, identity)
    box: dict[str, Any] = {}

    def work(reader: Any) -> list[EventDraft]:
        hist = _history(_Wrap(_conn(reader)), grant_id)
        box["grant"] = _known(hist, grant_id)
        _check_revoker(reader, signer)
        if hist.valid_steps():
            box["already"] = True
            return []
        return [_step_draft(reader, hist, signer, "requested", {"at_provider": box["grant"].credential}, reason)]

    store.append_with(work)
    if box.get("already"):
        status = access_status(store, grant_id)
        if status == STATUS_PENDING:
            return retry(store, grant_id, provider_client, retries, key_file=signer, backoff=backoff, sleep=sleep,
                         _reason=reason)
        raise AccessError(f"grant {grant_id} is already {status}")
    grant: Grant = box["grant"]
    if grant.credential:
        _at_provider_reporting(store, grant, provider_client, retries, backoff, signer, sleep)
    return access_status(store, grant_id)


def retry(store: Any, grant_id: str, provider_client: ProviderClient | None = None, retries: int = 3, *,
          key_file: Any = None, identity: str | None = None, backoff: float = 0.5,
          sleep: Callable[[float], None] = time.sleep, _reason: str | None = None) -> str:
    """Retry the provider part of a revocation that is :data:`STATUS_PENDING`
    (both tokens are sent again: RFC 7009 answers 200 for a token already revoked).
    Each step it records is signed with ``key_file`` as :func:`revoke` signs.

    Returns:
        The status after this call.

    Raises:
        AccessError: no such grant, it is not pending at its provider, no key, or the key's
            identity may not revoke (as :func:`revoke`); then nothing is recorded.
        IdentityError: the key file is missing, unreadable, too open or not a key.
    """
    signer = _load_revoker(key_file, identity)
    hist = _history(store, grant_id)
    grant = _known(hist, grant_id)
    _check_revoker(store, signer)
    status = _status_of(hist, _now(None))
    if status != STATUS_PENDING:
        hint = " (revoke it first)" if status in (STATUS_ACTIVE, STATUS_EXPIRED, STATUS_UNSIGNED) else ""
        raise AccessError(f"grant {grant_id} is {status}: there is nothing to retry{hint}")
    _at_provider_reporting(store, grant, provider_client, retries, backoff, signer, sleep, _reason)
    return access_status(store, grant_id)


# --------------------------------------------------------------------------- times


def _rfc3339(dt: datetime) -> str:
    return rfc3339_utc(dt)  # the year in four digits (strftime's %Y writes 999)


def _parse_time(text: str, name: str, what: str = "an RFC 3339 time") -> datetime:
    """``text`` as an aware UTC datetime (a date alone is midnight UTC).

    Raises:
        AccessError: naming ``name``, never the value (it may be a secret pasted into the
            wrong field): not ``what``, no UTC offset, or out of range in UTC.
    """
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise AccessError(f"{name} is not {what}") from None
    if dt.tzinfo is None:
        if len(text) == 10:  # a date: midnight UTC
            return dt.replace(tzinfo=timezone.utc)
        raise AccessError(f"{name} has no UTC offset (add Z or +hh:mm)")
    try:
        return dt.astimezone(timezone.utc)
    except OverflowError:
        raise AccessError(f"{name} is out of range (before year 1 or after year 9999 in UTC)") from None


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
        AccessError: none of those, or a time after the year 9999 (UTC). The message
            names ``expires_at``, never the value.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise AccessError("expires_at must be timezone-aware")
        try:
            return _rfc3339(value)
        except OverflowError:
            raise AccessError("expires_at is out of range (before year 1 or after year 9999 in UTC)") from None
    if not isinstance(value, str) or not value.strip():
        raise AccessError("expires_at must be a time or a duration, got " + (
            "an empty string" if isinstance(value, str) else type(value).__name__))
    m = _DURATION.match(value.strip())
    if m:
        try:
            return _rfc3339(datetime.now(timezone.utc) + timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)]))
        except (OverflowError, ValueError):
            raise AccessError("expires_at: the duration is too long (it would end after year 9999)") from None
    return _rfc3339(_parse_time(value.strip(), "expires_at",
                                "an RFC 3339 time, a date, or a duration (90s, 15m, 12h, 30d, 1w)"))
