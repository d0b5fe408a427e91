"""Approvals through the gateway: holding a call, "pending, call again", and the stateless ``requestState``.

An MCP client is the agent's host, so nothing it answers is an approval: a
``require_approval`` decision is answered only by approver identities
(``sealbox approvals approve``, :func:`sealbox.approvals.answer`). The gateway's
recorder runs in ``suspend`` mode, so the call, its decision, the
``approval.requested`` and ``run.suspended`` are committed before anything
else; then the gateway *holds* the call (polling the store off the event loop)
for up to ``limits.approval_hold_s``:

* decided within the hold: ``run.resumed`` is claimed once
  (:func:`sealbox.pause.claim`), an approved call is forwarded once and its
  ``tool.result`` recorded; a denied or expired one is an ``isError`` result
  naming who and why;
* still pending: ``isError`` "approval ID pending; call again with the same
  arguments" (sessions), or ``resultType: "input_required"`` with a
  ``requestState`` token (stateless 2026-07-28 clients). A later call in the
  same run whose binding hash is the request's continues **that** request
  (no second ``tool.call``, no second approval).

The ``requestState`` token (:func:`seal_state` / :func:`open_state`) is
``sbx1.<payload>.<tag>``: ``payload`` is base64url of compact JSON
``{v, aid, run, b, p, own, iat, exp}`` (approval id, run id, the binding hash,
the principal, whether the run is the call's own, issue and expiry times) and
``tag`` is base64url HMAC-SHA256 over ``"sbx1." + payload`` under a key derived
from the store's secret (HMAC-SHA256(secret, ``sealbox/gateway/request-state/v1``)).
It is signed, not encrypted: it names an approval id and a run id, no secret.
A token that does not verify, has expired, or whose binding is not the hash of
the retried call's arguments is refused (JSON-RPC ``INVALID_REQUEST_STATE``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Pending", "StateError", "seal_state", "open_state", "state_key", "TOKEN_PREFIX"]

TOKEN_PREFIX = "sbx1."
_KEY_LABEL = b"sealbox/gateway/request-state/v1"


class StateError(ValueError):
    """A ``requestState`` token is malformed, forged, expired, or bound to other arguments."""


@dataclass
class Pending:
    """A call of a run waiting for an approval, found again by its binding hash."""

    approval_id: str
    run_id: str
    call_id: str
    step: str
    binding: str
    server: str
    tool: str
    rule: str | None = None
    ask: dict[str, Any] = field(default_factory=dict)
    expires_at: str | None = None
    requested_by: str | None = None  # the principal whose call waits: only its retries continue the request
    informed: bool = False  # the person at the client was told (elicitation), once per request
    settled: bool = False  # its outcome was claimed (run.resumed) or it was dropped: no hold settles it again


def state_key(secret: bytes) -> bytes:
    """The HMAC key for ``requestState`` tokens, derived from the store's secret."""
    return hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64u(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64u(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


def seal_state(key: bytes, *, approval_id: str, run_id: str, binding: str, principal: str, own_run: bool,
               ttl_s: float, now: float | None = None) -> str:
    """A token naming the pending approval, bound to ``binding`` and ``principal``."""
    now = time.time() if now is None else now
    claims = {"v": 1, "aid": approval_id, "run": run_id, "b": binding, "p": principal, "own": bool(own_run),
              "iat": int(now), "exp": int(now + ttl_s) + 1}
    body = TOKEN_PREFIX + _b64u(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return body + "." + _b64u(hmac.new(key, body.encode(), hashlib.sha256).digest())


def open_state(key: bytes, token: Any, *, binding: str, principal: str, now: float | None = None) -> dict[str, Any]:
    """Verify a token and return its claims.

    Raises:
        StateError: not a string, malformed, a tag that does not verify (forged or
            another store's), expired, another principal's, or a binding other than
            ``binding`` (the call was retried with other arguments).
    """
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or token.count(".") != 2:
        raise StateError("malformed requestState")
    body, _, tag = token.rpartition(".")
    try:
        given = _unb64u(tag)
    except ValueError as exc:
        raise StateError("malformed requestState") from exc
    if not hmac.compare_digest(given, hmac.new(key, body.encode(), hashlib.sha256).digest()):
        raise StateError("requestState does not verify (forged, altered, or from another store)")
    try:
        claims = json.loads(_unb64u(body[len(TOKEN_PREFIX):]))
    except ValueError as exc:
        raise StateError("malformed requestState") from exc
    if not isinstance(claims, dict) or claims.get("v") != 1:
        raise StateError("malformed requestState")
    now = time.time() if now is None else now
    if not isinstance(claims.get("exp"), int) or now >= claims["exp"]:
        raise StateError("requestState has expired")
    if not hmac.compare_digest(str(claims.get("b")), binding):
        raise StateError("requestState is bound to other arguments: call again with the same arguments")
    if claims.get("p") != principal:
        raise StateError("requestState belongs to another principal")
    return claims
