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

A settled request's outcome (the approved call's result, or the denial) is the
:attr:`Pending.outcome` of every call of that request still held, and is kept
(:class:`Undelivered`) until it has been handed to a live request: a call whose
client cancelled it, timed out (and cancelled), or disconnected gets nothing, so
a retry of the same run, principal and binding hash is answered that outcome
(``_meta["sealbox/approval"].status = "delivered_on_retry"``) without a second
request and without running the tool again. Kept outcomes are bounded in time
(``limits.undelivered_keep_s``) and in memory (:data:`MAX_KEPT` outcomes,
:data:`MAX_KEPT_BYTES` bytes of results).

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

__all__ = ["Pending", "StateError", "Undelivered", "seal_state", "open_state", "state_key", "TOKEN_PREFIX",
           "MAX_KEPT", "MAX_KEPT_BYTES", "DELIVERED_ON_RETRY", "Wire", "WIRE_STATE_KEY"]

TOKEN_PREFIX = "sbx1."
_KEY_LABEL = b"sealbox/gateway/request-state/v1"
#: At most this many undelivered outcomes are kept (the oldest is dropped first).
MAX_KEPT = 256
#: At most this many bytes of undelivered results (their JSON) are kept; a larger result is not kept.
MAX_KEPT_BYTES = 64 * 1024 * 1024
#: ``_meta["sealbox/approval"].status`` of a call answered an outcome settled for another call of its request.
DELIVERED_ON_RETRY = "delivered_on_retry"
#: The key, in an HTTP request's ASGI ``scope["state"]``, of its :class:`Wire`.
WIRE_STATE_KEY = "sealbox_wire"


class Wire:
    """Whether the client of one HTTP request is still connected (set by the transport's middleware,
    which sees the ASGI ``http.disconnect``; read before a held call's outcome counts as delivered)."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False


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
    outcome: Any = None  # once settled: the CallToolResult every call of this request is answered
    kept_at: float | None = None  # monotonic time it was kept as undelivered (None: not kept)
    kept_bytes: int = 0
    holds: int = 0  # calls holding it now (Gateway._hold): never forgotten while one does
    decided_at: float | None = None  # monotonic time the gateway first saw it decided or expired, unsettled

    @property
    def key(self) -> tuple[str, str, str | None]:
        """``(run_id, binding, principal)``: the calls that are retries of this request."""
        return (self.run_id, self.binding, self.requested_by)


class Undelivered:
    """Settled outcomes not yet handed to a live request, kept for a retry of the same call.

    Keyed by ``(run_id, binding, principal)``; bounded: an outcome is dropped ``keep_s`` seconds
    after it was kept, and beyond ``max_entries`` outcomes or ``max_bytes`` bytes of results the
    oldest are dropped first (a single result larger than ``max_bytes`` is not kept). A dropped
    outcome is not served: a retry after that is a new call (a new approval request).
    """

    def __init__(self, keep_s: float, *, max_entries: int = MAX_KEPT, max_bytes: int = MAX_KEPT_BYTES,
                 clock: Any = time.monotonic) -> None:
        self.keep_s, self.max_entries, self.max_bytes, self._clock = keep_s, max_entries, max_bytes, clock
        self._kept: dict[tuple[str, str, str | None], Pending] = {}  # insertion order = age
        self._runs: dict[str, int] = {}  # run id -> how many outcomes are kept for it
        self._bytes = 0

    def __len__(self) -> int:
        self._expire()
        return len(self._kept)

    def has_run(self, run_id: str) -> bool:
        """Whether any outcome is kept for ``run_id`` (cheap: no binding hash needed to ask)."""
        return run_id in self._runs

    def keep(self, pending: Pending, size: int) -> bool:
        """Keep ``pending`` (settled, with its outcome) for a retry; False when it cannot be kept
        (``keep_s`` is 0, or its result alone is above ``max_bytes``). Replaces an older outcome
        kept under the same key."""
        self.discard(self._kept.get(pending.key))
        if self.keep_s <= 0 or size > self.max_bytes:
            return False
        self._expire()
        while self._kept and (len(self._kept) >= self.max_entries or self._bytes + size > self.max_bytes):
            self.discard(next(iter(self._kept.values())))
        pending.kept_at, pending.kept_bytes = self._clock(), size
        self._kept[pending.key] = pending
        self._runs[pending.run_id] = self._runs.get(pending.run_id, 0) + 1
        self._bytes += size
        return True

    def find(self, run_id: str, binding: str, principal: str | None) -> Pending | None:
        """The outcome kept for a retry of this call, or None (none, or dropped by a bound)."""
        self._expire()
        return self._kept.get((run_id, binding, principal))

    def discard(self, pending: Pending | None) -> None:
        """Forget ``pending``'s outcome (it was delivered, or dropped); a no-op if not kept."""
        if pending is not None and self._kept.get(pending.key) is pending:
            del self._kept[pending.key]
            self._bytes -= pending.kept_bytes
            left = self._runs.pop(pending.run_id) - 1
            if left:
                self._runs[pending.run_id] = left
        if pending is not None:
            pending.kept_at = None

    def discard_run(self, run_id: str) -> None:
        """Forget every outcome kept for ``run_id`` (its run ended: no retry can reach it)."""
        if run_id not in self._runs:
            return
        for pending in [p for k, p in self._kept.items() if k[0] == run_id]:
            self.discard(pending)

    def _expire(self) -> None:
        limit = self._clock() - self.keep_s
        while self._kept:
            oldest = next(iter(self._kept.values()))
            if oldest.kept_at is not None and oldest.kept_at > limit:
                break
            self.discard(oldest)


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
