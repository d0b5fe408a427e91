"""Approvals: requests bound to the exact call, answers signed by an identity, the rules, shared-account flags.

A ``require_approval`` decision is recorded with an ``approval.requested`` event
(a unique ``apr_…`` id, the call, its **binding** — the SHA-256 of the canonical
``{server, tool, arguments, policy_fingerprint}`` — who is asked, the quorum, the
expiry) and ``run.suspended``. Answers are ``approval.answered`` events in the
same run, signed with the answering identity's Ed25519 key over the canonical
bytes of ``{approval_id, binding, decision, identity, answered_at, reason, run_id}``
(``run_id``, the request's run, is absent from answers written before 2026-12-03).

What counts is decided from the log alone by :func:`evaluate` (used by
:func:`answer`, by the recorder when it resumes, by listings and by ``verify``),
so an answer appended around :func:`answer` — unsigned, by a disabled identity,
for another binding — never counts. The rules (docs/approvals.md):

* the answering identity exists, is enabled, has role ``approver`` or ``admin``,
  and its signature verifies with its key as the log held it at that moment;
* an approve answer is withdrawn for good when its identity is disabled or re-keyed after it
  answered, before the call is claimed (``run.resumed``): problem ``identity_disabled`` or
  ``key_rotated`` (:data:`WITHDRAWN_PROBLEMS`); re-enabling the identity does not restore it;
* it is asked: named in ``ask.identities`` or a member of one of ``ask.groups``;
* it is not the principal that requested the call (``name`` or ``agent:name``);
* one answer per identity; a quorum of N needs N distinct approving identities;
  any counted deny denies;
* an answer after the decision, after ``approval.expired`` or after
  ``expires_at`` is late and does not count; an unanswered request past
  ``expires_at`` is expired, and whichever process notices first records
  ``approval.expired`` (exactly once: the check and the write share a transaction).

Events that fail their kind's schema (:func:`sealbox.events.validate_payload`; they exist only
through a change below Sealbox, and ``verify`` reports them as ``event_malformed``) are read,
never trusted: a malformed request is ``malformed`` (it can never be approved, and
:attr:`ApprovalState.malformed` says why), a malformed answer does not count (problem
``malformed``), and a malformed ``run.resumed`` gives no outcome.

Errors: :class:`ApprovalError` (with a ``code``) for an answer refused or an
unknown id; :class:`ApprovalPending` when a run waits for a human.
"""

from __future__ import annotations

import getpass
import json
import hashlib
import math
import os
import re
import socket
import unicodedata
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from sealbox.canonical import canonical_bytes
from sealbox.errors import InvalidEventError, SealboxError
from sealbox.events import EventDraft, rfc3339_utc, validate_payload
from sealbox.identities import Identity, IdentityBook, identity_book, load_key, sign_fields, verify_fields

__all__ = [
    "ANSWER_ROLES",
    "REASON_MAX_CHARS",
    "shown_id",
    "asked_text",
    "DEFAULT_SHARED_WINDOW_S",
    "MAX_SHARED_WINDOW_S",
    "check_shared_window",
    "ApprovalError",
    "ApprovalPending",
    "RunSuspendedError",
    "Answer",
    "ApprovalState",
    "binding_hash",
    "new_approval_id",
    "request_payload",
    "signed_fields",
    "check_answer",
    "missing_shared_flag",
    "log_flags",
    "quorum_client_flags",
    "request_problem",
    "evaluate",
    "answer",
    "get_approval",
    "list_approvals",
    "record_expiry",
    "withdrawal_drafts",
    "WITHDRAWN",
    "WITHDRAWN_ROTATED",
    "WITHDRAWN_PROBLEMS",
    "local_client",
    "same_actor",
    "actor_key",
    "CONFUSABLES",
]

#: Roles whose identities may answer an approval request.
ANSWER_ROLES = ("approver", "admin")

#: The longest reason an answer may give, in characters (``bad_reason`` beyond it; the CLI's ``--reason``).
REASON_MAX_CHARS = 4096
#: How many characters of an id that names nothing an error message echoes (then ``…``).
SHOWN_ID_CHARS = 40


def shown_id(text: object) -> str:
    """``repr`` of an id for an error message: its first :data:`SHOWN_ID_CHARS` characters and ``…`` when
    longer (an unknown id may be anything pasted, a whole file: the message stays one readable line)."""
    if isinstance(text, str) and len(text) > SHOWN_ID_CHARS:
        return repr(text[:SHOWN_ID_CHARS] + "…")
    return repr(text)


def _names(value: object) -> str:
    """Names asked, as text: ``ops, sre``; ``-`` for none; anything else (a malformed request) as JSON."""
    if isinstance(value, list):
        return ", ".join(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value) or "-"
    return "-" if value is None else json.dumps(value, ensure_ascii=False)


def asked_text(ask: object) -> str:
    """Who a request asks, as one line of text (``approvals show``, the report's timeline):
    ``groups: ops, sre; identities: -`` (names joined by ``, ``, ``-`` for none). A malformed request's
    ``ask`` (not a mapping, or names that are not text) is shown as its JSON, as recorded."""
    if isinstance(ask, dict):
        return f"groups: {_names(ask.get('groups'))}; identities: {_names(ask.get('identities'))}"
    return json.dumps(ask, ensure_ascii=False)

#: Default window (seconds) in which answers by one identity from distinct clients are flagged.
DEFAULT_SHARED_WINDOW_S = 24 * 3600
#: The widest window for the "several clients" flag (a year), in seconds.
MAX_SHARED_WINDOW_S = 366 * 24 * 3600

_RELATED = ("approval.answered", "approval.expired", "run.resumed", "run.ended")

_MESSAGES = {
    "binding_mismatch": "the answer's binding does not match the request's (it approves another call)",
    "wrong_run": "the answer was signed for a request of another run (a signed answer copied into this run)",
    "unknown_identity": "no identity of that name is known to the store",
    "disabled": "the identity is disabled",
    "bad_signature": "the signature does not verify with the identity's key as the log held it",
    "role": f"only identities with role {' or '.join(ANSWER_ROLES)} may answer",
    "requester": "the identity that requested the call cannot answer its approval",
    "not_asked": "the identity is not among those asked (named identities or groups)",
    "duplicate": "the identity has already answered this request",
    "bad_decision": "the decision must be 'approve' or 'deny'",
    "late": "the answer came after the request was decided or expired",
    "malformed": "the answer's event fails the approval.answered schema (it was changed below Sealbox)",
    "malformed_request": "the request's event is malformed: it can never be approved",
    "identity_disabled": "the approver's identity was disabled after it answered, before the call ran: "
                         "its approval no longer counts",
    "key_rotated": "the approver's key was rotated after it answered, before the call ran: "
                   "its approval no longer counts",
    "key_compromised": "the approver's key was declared compromised from a point at or before the answer "
                       "(`sealbox identities disable|rotate --compromised-since`), before the call ran: "
                       "its approval no longer counts",
}

#: The problem of an approve answer, valid when given, whose identity was disabled before the call ran.
WITHDRAWN = "identity_disabled"
#: The problem of an approve answer, valid when given, whose identity's key was rotated before the call ran.
WITHDRAWN_ROTATED = "key_rotated"
#: The problem of an approve answer signed in a window where its identity's key was declared compromised
#: (``--compromised-since``), the declaration recorded before the call ran.
WITHDRAWN_COMPROMISED = "key_compromised"
#: The problems of a withdrawn approval (:attr:`Answer.withdrawn_by` says which change withdrew it).
WITHDRAWN_PROBLEMS = (WITHDRAWN, WITHDRAWN_ROTATED, WITHDRAWN_COMPROMISED)
_WITHDRAWN_BY = {"disabled": WITHDRAWN, "rotated": WITHDRAWN_ROTATED, "compromised": WITHDRAWN_COMPROMISED}


class ApprovalError(SealboxError):
    """An approval request is unknown, or an answer is refused.

    Attributes:
        code: ``unknown_approval``, ``run_ended``, ``already_decided``, ``expired``,
            ``already_resumed``, ``not_awaiting_approval`` (``Recorder.resume`` of a run suspended outside
            approvals, ``RunContext.suspend``), ``wrong_key``, ``arguments_redacted``, ``clock_skew`` (this process's clock
            is before the time the request was recorded), or a rule code
            (``binding_mismatch``, ``wrong_run``, ``unknown_identity``, ``disabled``, ``bad_signature``,
            ``role``, ``requester``, ``not_asked``, ``duplicate``, ``bad_decision``).
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class ApprovalPending(SealboxError):
    """A tool call waits for a human answer; the run is suspended (no ``run.ended``).

    Continue later, in any process, with ``recorder.resume(run_id)``.

    Attributes:
        approval_ids: the pending approvals (the first is :attr:`approval_id`).
        run_id: the suspended run.
        call_ids: the calls waiting, in the same order.
        suspends_run: always True: a ``with`` block left by this error does not end the run.
    """

    suspends_run = True

    def __init__(self, approval_ids: str | Sequence[str], run_id: str, call_ids: str | Sequence[str]) -> None:
        self.approval_ids = (approval_ids,) if isinstance(approval_ids, str) else tuple(approval_ids)
        self.call_ids = (call_ids,) if isinstance(call_ids, str) else tuple(call_ids)
        self.run_id = run_id
        super().__init__(f"run {run_id} is waiting for approval {', '.join(self.approval_ids)}; "
                         f"resume it with recorder.resume({run_id!r}) once answered")

    @property
    def approval_id(self) -> str:
        """The first pending approval's id."""
        return self.approval_ids[0]

    @property
    def call_id(self) -> str:
        """The first waiting call's id."""
        return self.call_ids[0]


class RunSuspendedError(SealboxError):
    """A tool call, model call or state save on a run that is suspended (``run.suspended`` written: an
    :class:`ApprovalPending` caught inside the run's ``with`` block, or :meth:`RunContext.suspend`), or
    :meth:`Recorder.continue_run` of a run waiting for an approval. Nothing was written or run; the run
    stays suspended.

    Attributes:
        run_id: the suspended run.
        approval_ids: the requests it waits for (empty when suspended outside approvals).
        suspends_run: always True: a ``with`` block left by this error does not end the run.
    """

    suspends_run = True

    def __init__(self, run_id: str, approval_ids: Sequence[str] = ()) -> None:
        self.run_id = run_id
        self.approval_ids = tuple(approval_ids)
        if self.approval_ids:
            how = (f"it waits for approval {', '.join(self.approval_ids)}: resume it with "
                   f"recorder.resume({run_id!r}) once answered")
        else:
            how = (f"it waits for something outside Sealbox's approvals: what suspended it resumes it "
                   f"(or recorder.continue_run({run_id!r}))")
        super().__init__(f"run {run_id} is suspended; {how}; nothing was recorded or run")


@dataclass(frozen=True)
class Answer:
    """One recorded answer and whether it counts.

    Attributes:
        problem: None when it counts; else the rule it breaks (see :data:`ApprovalError.code`),
            ``late``, ``malformed`` (its event fails the ``approval.answered`` schema),
            ``malformed_request`` (it answers a malformed request), or one of
            :data:`WITHDRAWN_PROBLEMS` (an approval withdrawn before the call ran).
        withdrawn_by: for a withdrawn approval, the change that withdrew it: ``disabled`` (problem
            ``identity_disabled``), ``rotated`` (``key_rotated``: the identity's key was changed) or
            ``compromised`` (``key_compromised``: the answer was signed at or after the point from which
            a later ``disable|rotate --compromised-since`` declared its key leaked); else None.
        withdrawn_leaf: the leaf index of that ``identity.changed`` (the first such change after
            the answer), or None.
    """

    identity: str
    decision: str
    reason: str
    answered_at: str
    leaf_index: int
    client: dict[str, Any]
    flags: tuple[dict[str, Any], ...]
    problem: str | None
    withdrawn_by: str | None = None
    withdrawn_leaf: int | None = None
    #: ``(record leaf, first leaf of the window)`` when the answer was signed in a window where its
    #: identity's key was declared compromised (``--compromised-since``), whatever it decided; else None
    compromised: tuple[int, int] | None = None

    @property
    def disabled_leaf(self) -> int | None:
        """With problem ``identity_disabled``, the leaf of the ``identity.changed`` that disabled the
        approver after it answered; else None."""
        return self.withdrawn_leaf if self.withdrawn_by == "disabled" else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form. An answer signed with a key later declared compromised adds
        ``compromised``: ``{"change_leaf", "from_leaf"}``. A withdrawn approval adds ``withdrawn``: ``{"change": "disabled" |
        "rotated", "change_leaf"}`` (the ``identity.changed`` that withdrew it), and, when it was a
        ``disabled``, ``disabled_leaf`` (the same leaf)."""
        out = {"identity": self.identity, "decision": self.decision, "reason": self.reason,
               "answered_at": self.answered_at, "leaf_index": self.leaf_index, "client": self.client,
               "flags": list(self.flags), "counted": self.problem is None, "problem": self.problem}
        if self.compromised is not None:
            out["compromised"] = {"change_leaf": self.compromised[0], "from_leaf": self.compromised[1]}
        if self.withdrawn_by is not None:
            out["withdrawn"] = {"change": self.withdrawn_by, "change_leaf": self.withdrawn_leaf}
            if self.disabled_leaf is not None:
                out["disabled_leaf"] = self.disabled_leaf
        return out


@dataclass(frozen=True)
class ApprovalState:
    """An approval request and what the log says about it now.

    Attributes:
        status: ``pending``, ``approved``, ``denied``, ``expired``, ``closed`` (its run ended while it
            was pending, before its expiry: it can no longer be answered, and stays closed once the
            expiry time passes), or ``malformed`` (its event fails the
            ``approval.requested`` schema: it can never be approved; see :attr:`malformed`).
        request: the ``approval.requested`` payload (arguments may be a blob reference; the fields of a
            malformed request may be of any type, or missing).
        decided_by: identities whose answers decided it (the approvers, or the denier).
        expiry_recorded: an ``approval.expired`` event exists (else the expiry is only noticed).
        resumed: a ``run.resumed`` event names it (the run went on past it).
        resumed_at: the ``ts`` of the first ``run.resumed`` naming it (when the call was acted on), or None.
        outcome: the outcome the last ``run.resumed`` naming it gives it (None: none, or unreadable).
        malformed: why the request is malformed (:func:`request_problem`), or None.
    """

    approval_id: str
    run_id: str
    step: str
    leaf_index: int
    requested_at: str
    request: dict[str, Any]
    status: str
    answers: tuple[Answer, ...] = ()
    decided_by: tuple[str, ...] = ()
    decided_at: str | None = None
    expired_at: str | None = None
    expiry_recorded: bool = False
    resumed: bool = False
    run_ended: bool = False
    outcome: str | None = None
    malformed: str | None = None
    resumed_at: str | None = None

    @property
    def call_id(self) -> str:
        """The call held by this request."""
        return self.request.get("call_id")  # type: ignore[return-value]  # None only in a malformed request

    @property
    def flags(self) -> list[dict[str, Any]]:
        """Every flag on the answers that count, each with the answering identity (an answer that
        does not count is listed with its problem, never as a flagged approver)."""
        return [{"identity": a.identity, **f} for a in self.answers if a.problem is None for f in a.flags]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        r = self.request
        return {
            "approval_id": self.approval_id, "run_id": self.run_id, "call_id": r.get("call_id"), "step": self.step,
            "server": r.get("server"), "tool": r.get("tool"), "arguments": r.get("arguments"),
            "binding": r.get("binding"),
            "rule": r.get("rule"), "ask": r.get("ask"), "quorum": r.get("quorum"), "expires_at": r.get("expires_at"),
            "requested_by": r.get("requested_by"), "requested_at": self.requested_at, "status": self.status,
            "decided_by": list(self.decided_by), "decided_at": self.decided_at, "expired_at": self.expired_at,
            "expiry_recorded": self.expiry_recorded, "resumed": self.resumed, "resumed_at": self.resumed_at,
            "outcome": self.outcome,
            "malformed": self.malformed, "answers": [a.to_dict() for a in self.answers], "flags": self.flags,
        }


# ----------------------------------------------------------------------------- times and ids


def _utc(moment: datetime) -> str:
    return rfc3339_utc(moment)  # the year in four digits (strftime's %Y writes 999)


def _ended_after(ended_at: Any, expires: datetime) -> bool:
    """Whether a run that ended at ``ended_at`` (an event's ts) ended at or after ``expires``; an
    unreadable time is taken as after (the request is then noticed expired, as before)."""
    try:
        return _parse(ended_at) >= expires
    except (TypeError, ValueError, AttributeError):
        return True


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _store_now(reader: Any) -> datetime:
    """The store's clock inside its write transaction (``reader.stamp``: the ``ts`` the events written
    there get), else this process's clock. The store's clock is the authoritative one for answers and
    expiries: ``answered_at`` is the answer's own ``ts``, so an answer can never be recorded as given
    before its expiry when the store's clock stamped it after."""
    stamp = getattr(reader, "stamp", None)
    if isinstance(stamp, str):
        try:
            return _parse(stamp)
        except ValueError:
            pass
    return _now()


def new_approval_id() -> str:
    """A new, unique approval id: ``apr_`` and 32 hex digits (random UUID)."""
    return "apr_" + uuid.uuid4().hex


def binding_hash(server: str, tool: str, encoded_arguments: Any, policy_fingerprint: str) -> str:
    """``sha256:<hex>`` of the RFC 8785 bytes of ``{server, tool, arguments, policy_fingerprint}``.

    Args:
        encoded_arguments: the arguments as strict JSON (``sealbox.canonical.encode``
            output, or the stored, resolved ``tool.call`` arguments).
    """
    body = {"server": server, "tool": tool, "arguments": encoded_arguments, "policy_fingerprint": policy_fingerprint}
    return "sha256:" + hashlib.sha256(canonical_bytes(body)).hexdigest()


def actor_key(name: str) -> str:
    """A principal id or identity name as compared to tell whether two name one actor: in Unicode
    NFKC form without invisible format characters (category ``Cf``: U+200B, U+00AD, U+202E…),
    with look-alike letters of other scripts replaced by the ASCII letter they imitate
    (:data:`CONFUSABLES`, the Unicode TR39 skeleton mappings whose prototype is an ASCII letter:
    a Cyrillic ``а`` or Greek ``α`` is ``a``), without one leading ``scheme:`` (``user:``, ``agent:``,
    ``svc:`` …: letters, digits, ``_ . -``, starting with a letter), case-folded. ``carol``,
    ``user:carol``, ``agent:Carol``, ``user:carol\\u200b``, the full-width ``ｃａｒｏｌ`` and ``user:\\u0441arol``
    (a Cyrillic ``с``) are one (a principal is free text; identity names are ASCII, so only what maps
    to ASCII matters). ASCII itself is not folded further (``1`` is not ``l``)."""
    name = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf")
    name = name.translate(_SKELETON)
    m = _SCHEME.match(name)
    # mapped again after the fold: an upper-case letter the table lacks may fold to a lower-case one it has
    return (name[m.end():] if m and m.end() < len(name) else name).casefold().translate(_SKELETON)


#: Look-alikes of ASCII letters: characters of the Cyrillic, Greek and Armenian scripts and of the
#: Latin IPA extensions whose Unicode TR39 prototype (confusables.txt, "MA" mappings) is one ASCII letter. A
#: minimal, hand-kept subset of TR39's table, not the whole of it: identity names are ASCII, so a
#: principal can only be confused with one through characters that map to ASCII; characters mapping to
#: other non-ASCII prototypes, multi-letter prototypes (``m`` / ``rn``) and ASCII-to-ASCII pairs
#: (``1`` / ``l``, ``0`` / ``O``) are left out. One deliberate deviation: a capital that imitates ``I``
#: (Greek Ι, Cyrillic І, Ӏ) maps to ``I``, where TR39 maps ``I`` itself to ``l``, since the key is
#: case-folded afterwards and ``I`` then reads ``i``.
CONFUSABLES: dict[str, str] = {
    # Cyrillic, lower case
    "\u0430": "a", "\u0435": "e", "\u043e": "o", "\u0440": "p", "\u0441": "c", "\u0443": "y",
    "\u0445": "x", "\u0455": "s", "\u0456": "i", "\u0458": "j", "\u04bb": "h", "\u0501": "d",
    "\u051b": "q", "\u051d": "w", "\u04cf": "l", "\u04af": "y", "\u0475": "v",
    # Cyrillic, upper case
    "\u0410": "A", "\u0412": "B", "\u0415": "E", "\u041a": "K", "\u041c": "M", "\u041d": "H",
    "\u041e": "O", "\u0420": "P", "\u0421": "C", "\u0422": "T", "\u0423": "Y", "\u0425": "X",
    "\u0405": "S", "\u0406": "I", "\u0408": "J", "\u04c0": "I", "\u051c": "W", "\u0474": "V",
    "\u04ae": "Y",
    # Greek
    "\u0391": "A", "\u0392": "B", "\u0395": "E", "\u0396": "Z", "\u0397": "H", "\u0399": "I",
    "\u039a": "K", "\u039c": "M", "\u039d": "N", "\u039f": "O", "\u03a1": "P", "\u03a4": "T",
    "\u03a5": "Y", "\u03a7": "X", "\u03b1": "a", "\u03b9": "i", "\u03bd": "v", "\u03bf": "o",
    "\u03c1": "p", "\u03c5": "u", "\u03b3": "y", "\u03f2": "c", "\u03f3": "j", "\u03f9": "C",
    # Armenian
    "\u0585": "o", "\u057d": "u", "\u0570": "h", "\u0578": "n", "\u0581": "g", "\u0566": "q",
    "\u054f": "S", "\u0555": "O", "\u054d": "U", "\u053c": "L",
    # Latin extensions (IPA)
    "\u0251": "a", "\u0131": "i", "\u0269": "i", "\u0261": "g",
}
_SKELETON = str.maketrans(CONFUSABLES)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*:")


def same_actor(identity: str, principal: Any) -> bool:
    """Whether a principal id names this identity: the same :func:`actor_key` (``carol`` is
    ``carol``, ``user:carol`` and ``agent:carol``; ``agent:bot`` is ``bot``)."""
    return isinstance(principal, str) and isinstance(identity, str) and actor_key(principal) == actor_key(identity)


def request_payload(*, approval_id: str, call_id: str, server: str, tool: str, arguments: Any,
                    encoded_arguments: Any, decision: Any, requested_by: str, now: datetime) -> dict[str, Any]:
    """The ``approval.requested`` payload for a ``require_approval`` decision.

    Args:
        decision: a :class:`~sealbox.policy.model.Decision` with an ``approval`` spec.
        now: the request time; ``expires_at`` is ``now + approval.expires_s``.
    """
    spec = decision.approval
    return {
        "approval_id": approval_id, "call_id": call_id, "server": server, "tool": tool, "arguments": arguments,
        "binding": binding_hash(server, tool, encoded_arguments, decision.policy_fingerprint),
        "rule": decision.rule, "ask": {"groups": list(spec.groups), "identities": list(spec.identities)},
        "quorum": int(spec.quorum), "expires_at": _utc(now + timedelta(seconds=spec.expires_s)),
        "requested_by": requested_by, "policy_fingerprint": decision.policy_fingerprint,
    }


def signed_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields of an ``approval.answered`` payload that its signature covers.

    ``run_id`` (the request's run, written by :func:`answer` since 2026-12-03) is covered when the
    payload carries it: an answer signed for one run's request then cannot be copied into another
    run that requests the same approval id and binding. Answers written before carry none and are
    checked over the six other fields, as they were signed; removing ``run_id`` from a newer answer
    breaks its signature."""
    fields = {k: payload.get(k) for k in ("approval_id", "binding", "decision", "identity", "answered_at", "reason")}
    if "run_id" in payload:
        fields["run_id"] = payload["run_id"]
    return fields


def local_client(user_agent: str | None = None, remote_addr: str | None = None) -> dict[str, Any]:
    """The answering client as this process sees it (self-reported: nothing proves it)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid
        user = "unknown"
    client: dict[str, Any] = {"hostname": socket.gethostname(), "os_user": user, "self_reported": True}
    if user_agent:
        client["user_agent"] = user_agent
    if remote_addr:
        client["remote_addr"] = remote_addr
    return client


# ----------------------------------------------------------------------------- rules


def check_answer(request: dict[str, Any], answer_payload: dict[str, Any], leaf_index: int, book: IdentityBook,
                 counted: Iterable[Answer] = (), *, run_id: str | None = None) -> str | None:
    """The first rule an answer breaks (a code of :class:`ApprovalError`), or None.

    Args:
        request: the ``approval.requested`` payload.
        answer_payload: the ``approval.answered`` payload.
        leaf_index: where the answer is (or will be) in the log: the identity is taken as it was before it.
        book: the store's identities.
        counted: answers to the same request that already count.
        run_id: the run the answer is recorded in: an answer whose signed ``run_id`` names
            another run is ``wrong_run`` (a signed answer replayed into another run).
    """
    p = answer_payload
    if p.get("decision") not in ("approve", "deny"):
        return "bad_decision"
    if p.get("binding") != request.get("binding"):
        return "binding_mismatch"
    if "run_id" in p and p["run_id"] != run_id:
        return "wrong_run"
    who: Identity | None = book.get(p.get("identity"), leaf_index)
    if who is None:
        return "unknown_identity"
    if who.disabled:
        return "disabled"
    if not verify_fields(who.public_key, signed_fields(p), p.get("signature")):
        return "bad_signature"
    if who.role not in ANSWER_ROLES:
        return "role"
    if same_actor(who.name, request.get("requested_by")):
        return "requester"
    ask = request.get("ask") or {}
    if who.name not in (ask.get("identities") or []) and not set(who.groups) & set(ask.get("groups") or []):
        return "not_asked"
    if any(same_actor(who.name, a.identity) for a in counted):
        return "duplicate"  # the same identity, or one naming the same actor (``Alice`` after ``alice``)
    return None


def evaluate(request: Any, related: Iterable[Any], book: IdentityBook, now: datetime | None = None) -> ApprovalState:
    """What the log says about one request.

    Args:
        request: the ``approval.requested`` :class:`~sealbox.events.Event`.
        related: events of its run, in log order (``approval.answered``, ``approval.expired``,
            ``run.resumed``, ``run.ended``; others are skipped).
        book: the store's identities.
        now: the time used to notice an unrecorded expiry (default: now).
    """
    req = request.payload
    malformed = request_problem(req)
    aid = req.get("approval_id")
    expires = _parse(req["expires_at"]) if not malformed and req.get("expires_at") else None
    st: dict[str, Any] = {"status": "malformed" if malformed else "pending", "answers": [], "decided_by": (),
                          "decided_at": None, "expired_at": None, "expiry_recorded": False, "resumed": False,
                          "resumed_at": None, "run_ended": False, "outcome": None, "malformed": malformed}
    approvers: list[str] = []
    # the call is acted on at its first run.resumed: an approval counts only if its identity was neither
    # disabled nor re-keyed between the answer and then (or now, while it waits); either withdraws it for good
    acted = next((ev.leaf_index for ev in related if ev.kind == "run.resumed" and isinstance(aid, str)
                  and isinstance(ev.payload.get("approval_ids"), list) and aid in ev.payload["approval_ids"]), None)
    ended_at: str | None = None  # when its run ended (the first run.ended)
    for ev in related:
        p = ev.payload
        if ev.kind == "run.ended":
            st["run_ended"] = True
            ended_at = ended_at or ev.ts
        elif ev.kind == "run.resumed":
            _note_resume(p, aid, st)
            if st["resumed"] and st["resumed_at"] is None:
                st["resumed_at"] = ev.ts  # the first resumption: when the call was acted on
        elif p.get("approval_id") != aid or ev.leaf_index < request.leaf_index:
            continue
        else:
            if acted is None or ev.leaf_index < acted:
                _recount(req, book, st, ev.leaf_index)
            if ev.kind == "approval.expired" and st["status"] == "pending":
                st.update(status="expired", expired_at=p.get("expired_at"), expiry_recorded=True)
            elif ev.kind == "approval.answered":
                _count_answer(req, ev, book, st, approvers, expires)
    _recount(req, book, st, acted)  # as of the call's resumption, or now while it waits
    if st["status"] == "pending" and expires is not None and (now or _now()) >= expires \
            and (ended_at is None or _ended_after(ended_at, expires)):
        # an unrecorded expiry is noticed, unless the run ended before it: the request was closed then
        st.update(status="expired", expired_at=req["expires_at"])
    if st["status"] == "pending" and st["run_ended"]:
        st["status"] = "closed"  # its run ended while it waited: it can no longer be answered
    shown_id = aid if isinstance(aid, str) else str(aid)  # not a string: a malformed request
    answers = [a if (hit := book.compromised_at(a.identity, a.leaf_index)) is None else replace(a, compromised=hit)
               for a in st.pop("answers")]  # marked for readers (approvals show); O(answers × its windows)
    return ApprovalState(shown_id, request.run_id, request.step, request.leaf_index, request.ts, req,
                         answers=tuple(answers), **st)


def call_outcome(state: ApprovalState) -> str:
    """The outcome of a call held for approval that has no ``tool.result``, from its (latest) request's
    state, as listings give it (``sealbox calls``, reports): the outcome its ``run.resumed`` gave it (``approved``:
    ``unknown``, it may have run; ``expired``; any other — denied, denied again by the current policy,
    a grant no longer valid… — ``denied``), else ``denied`` / ``expired`` once the request is (it can
    never run), else ``unknown`` when the request is malformed (:attr:`ApprovalState.malformed`: its event
    fails the ``approval.requested`` schema, so the log cannot say whether the call was approved, or ran;
    it is never ``held``, since it can never be approved, nor ``abandoned``; listings flag it
    ``malformed_request``), else ``abandoned`` when its run ended without resuming it (it waited, or was
    approved, when the run ended: it never ran and never can), else ``held`` (pending, or approved and not
    resumed yet: it may still run)."""
    if state.resumed and isinstance(state.outcome, str):
        return {"approved": "unknown", "expired": "expired"}.get(state.outcome, "denied")
    if state.malformed is not None:
        return "unknown"
    if state.status in ("denied", "expired"):
        return state.status
    return "abandoned" if state.run_ended else "held"


#: ``sealbox.tool.outcome`` values a Sealbox OTLP export gives a call held for approval without a result
#: (:func:`call_outcome`), and what each is once imported; ``pending`` is what earlier exports wrote for a
#: call still awaiting approval.
_EXPORTED_HELD = {"held": "held", "pending": "held", "denied": "denied", "expired": "expired",
                  "abandoned": "abandoned", "unknown": "unknown"}


def imported_call_outcome(call_payload: Any) -> str | None:
    """The outcome the exporting store gave an imported call held for approval that has no result, or None.

    A call imported from a Sealbox OTLP export (``sealbox import``) has no ``approval.requested`` in
    its run (an imported approval is a ``note``, never signed evidence), so :func:`call_outcome` cannot
    be computed again; the importer keeps the exported ``sealbox.tool.outcome`` in the ``tool.call``
    payload's ``imported.sealbox.outcome`` (unauthenticated, as everything imported). That value, when
    it is one :func:`call_outcome` gives (``held``, ``denied``, ``expired``, ``abandoned``, ``unknown``;
    ``pending``, from an earlier export, is ``held``); ``unknown`` for any other value the file gave
    (``ok`` or ``error`` without a result, a value no export writes, one that is no string); else None
    (not imported, or no outcome imported).

    Args:
        call_payload: the ``tool.call`` event's payload (any value: a malformed one gives None).
    """
    imported = call_payload.get("imported") if isinstance(call_payload, dict) else None
    source = imported.get("sealbox") if isinstance(imported, dict) else None
    outcome = source.get("outcome") if isinstance(source, dict) else None
    if outcome is None:
        return None
    return _EXPORTED_HELD.get(outcome, "unknown") if isinstance(outcome, str) else "unknown"


def request_problem(payload: Any) -> str | None:
    """Why an ``approval.requested`` payload is malformed, or None: it fails the kind's schema
    (:func:`sealbox.events.validate_payload`; the message names the field), or its ``expires_at``
    has the schema's form but is no time (``2026-02-30T…``). Such a request can never be approved."""
    try:
        validate_payload("approval.requested", payload)
    except InvalidEventError as exc:
        return str(exc)
    if payload.get("expires_at") is not None:
        try:
            _parse(payload["expires_at"])
        except ValueError:
            return f"approval.requested: expires_at {payload['expires_at']!r} is not a valid time"
    return None


def _valid(kind: str, payload: Any) -> bool:
    try:
        validate_payload(kind, payload)
    except InvalidEventError:
        return False
    return True


def _note_resume(payload: dict, aid: Any, st: dict) -> None:
    """A ``run.resumed`` naming the request marks it resumed with the outcome it gives; a malformed
    one (failing its schema) that lists it in ``approval_ids`` marks it resumed with no outcome."""
    if _valid("run.resumed", payload):
        if aid in payload["approval_ids"]:
            outcome = payload.get("outcomes", {}).get(aid) if isinstance(aid, str) else None
            st.update(resumed=True, outcome=outcome if isinstance(outcome, str) else None)
    elif isinstance(payload.get("approval_ids"), list) and isinstance(aid, str) and aid in payload["approval_ids"]:
        st["resumed"] = True


def _recount(req: dict, book: IdentityBook, st: dict, at: int | None) -> None:
    """Count the approvals again as of leaf ``at`` (None: now): an approve answer that counted when
    it was given stops counting for good once its identity was disabled or its key changed after it
    answered and before ``at`` (problem ``identity_disabled`` or ``key_rotated``, with the first such
    change and its leaf: :meth:`IdentityBook.withdrawing_change`); re-enabling the identity later does
    not restore it. A request approved by answers that no longer make its quorum is pending again
    (until another approver answers, or it expires). Only a request still ``pending`` or ``approved``
    is touched: a counted deny and an expiry stand. ``at`` never decreases between the calls of one
    :func:`evaluate`, so a withdrawal found once holds at every later leaf."""
    if st["status"] not in ("pending", "approved") or st["malformed"]:
        return
    answers: list[Answer] = st["answers"]
    valid: list[Answer] = []
    seen: set[str] = set()
    for i, a in enumerate(answers):
        if a.decision != "approve" or a.problem is not None:
            continue  # a withdrawn approval (WITHDRAWN_PROBLEMS) stays withdrawn
        change = book.withdrawing(a.identity, a.leaf_index, at)
        if change is not None:
            answers[i] = replace(a, problem=_WITHDRAWN_BY[change[0]], withdrawn_by=change[0], withdrawn_leaf=change[1])
            continue
        if a.identity not in seen:
            seen.add(a.identity)
            valid.append(a)
    quorum = req.get("quorum", 1)
    quorum = max(1, quorum if isinstance(quorum, int) and not isinstance(quorum, bool) else 1)
    if len(valid) >= quorum:
        st.update(status="approved", decided_by=tuple(a.identity for a in valid[:quorum]),
                  decided_at=valid[quorum - 1].answered_at)
    elif st["status"] == "approved":
        st.update(status="pending", decided_by=(), decided_at=None)


def _count_answer(req: dict, ev: Any, book: IdentityBook, st: dict, approvers: list[str],
                  expires: datetime | None) -> None:
    p = ev.payload
    if st["malformed"]:
        problem: str | None = "malformed_request"
    elif not _valid("approval.answered", p):
        problem = "malformed"
    else:
        problem = check_answer(req, p, ev.leaf_index, book, _answered(st["answers"]), run_id=ev.run_id)
        if problem is None and (st["status"] != "pending" or _late(p, expires, ev.ts)):
            problem = "late"
    client, flags = p.get("client"), p.get("flags")
    flags = [f for f in flags if isinstance(f, dict)] if isinstance(flags, list) else []
    if problem is None:
        flags += missing_shared_flag(p, ev.leaf_index, book)
        flags += log_flags(p, ev, book, flags)
        if not any(f.get("code") == "quorum_same_client" for f in flags):
            flags += quorum_client_flags(req, p, st["answers"])
    st["answers"].append(Answer(str(p.get("identity")), str(p.get("decision")), str(p.get("reason", "")),
                                str(p.get("answered_at")), ev.leaf_index,
                                dict(client) if isinstance(client, dict) else {}, tuple(flags), problem))
    if problem is not None:
        return
    if p["decision"] == "deny":
        st.update(status="denied", decided_by=(p["identity"],), decided_at=p["answered_at"])
        return
    approvers[:] = [a.identity for a in st["answers"] if a.problem is None and a.decision == "approve"]
    if len(approvers) >= int(req.get("quorum", 1)):
        st.update(status="approved", decided_by=tuple(approvers), decided_at=p["answered_at"])


def _answered(answers: Iterable[Answer]) -> list[Answer]:
    """The answers that make a further answer by the same identity a ``duplicate``: those that count,
    and withdrawn approvals (withdrawn for good: their identity does not answer the request again)."""
    return [a for a in answers if a.problem is None or a.problem in WITHDRAWN_PROBLEMS]


def missing_shared_flag(payload: dict, leaf_index: int, book: IdentityBook) -> list[dict[str, Any]]:
    """The ``shared_identity`` flag an answer should carry and does not: its identity was marked
    shared when it answered (as the log held it at ``leaf_index``). :func:`answer` always writes
    the flag, but the flags are the answerer's own words, not signed: an answer written around
    it by whoever holds a shared account's key could leave the flag out, and the account would
    vanish from ``approvals list --flagged``. Readers add it back from the log (and ``verify``
    reports the omission as ``approval_flag_missing``)."""
    who = book.get(payload.get("identity"), leaf_index)
    flags = payload.get("flags")
    if who is None or not who.shared or (isinstance(flags, list) and any(
            isinstance(f, dict) and f.get("code") == "shared_identity" for f in flags)):
        return []
    return [{"code": "shared_identity", "evidence": {"identity": who.name, "marked_shared": True,
                                                     "identity_leaf": who.since_leaf}}]


_END = 1 << 62  # above every leaf index
#: identities a reader of the log asks about one by one (each a query); from the next on, the log is read
#: for all of them at once (:class:`_LogEvidence`), so a listing's work grows with the log, not with
#: identities x answers or identities x principals
_BULK_AFTER = 8


class _LogEvidence:
    """What the log says about identities as answerers and as agents, read once per book."""

    def __init__(self, log: Any) -> None:
        self.reader = log if hasattr(log, "events") else log.reader()
        self._agent: dict[str, Any] = {}
        self._unicode: _UnicodePrincipals | None = None
        #: identity -> (ts_from, before_leaf, its answers with ts >= ts_from below before_leaf)
        self._answers: dict[str, tuple[str | None, int, list[Any]]] = {}
        #: once _BULK_AFTER identities were asked for: (ts_from, identity -> every answer naming it with
        #: ts >= ts_from, in log order), read by one query however many identities a listing asks for
        self._window: tuple[str | None, dict[str, list[Any]]] | None = None
        #: once _BULK_AFTER identities were asked for: actor_key -> leaf of the first run.started /
        #: tool.call of a principal with that key (every principal read and folded once)
        self._first_leaf: dict[str, int] | None = None

    def answers_of(self, name: str, before_leaf: int, since: datetime | None) -> list[Any]:
        """``approval.answered`` events whose payload names ``name`` (whatever their principal),
        below leaf ``before_leaf``, in log order; their signatures are not checked here.

        With ``since`` (an aware datetime), the store is searched by kind and ``ts``
        (``events_kind_ts``) from ``since`` on, so the identity's answers older than that are not
        read at all, however many there are; the list returned may still hold older ones read for
        an earlier answer of the same listing (the caller checks each ``ts``). ``since`` None (this
        answer's own ``ts`` has no offset) reads them all. The answers read are kept: the answers
        of a listing come in log order: the second answer of an identity reads the identity's
        answers from the first one's window to the end of the log, once (as many rows as the
        listing would read anyway), and the later ones read none."""
        ts_from = None
        if since is not None:
            try:
                ts_from = since.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
            except (OverflowError, ValueError):
                ts_from = None
        if self._window is not None or (name not in self._answers and len(self._answers) >= _BULK_AFTER):
            return self._in_window(name, before_leaf, ts_from)
        kept = self._answers.get(name)
        if kept is not None and (kept[0] is None or (ts_from is not None and ts_from >= kept[0])):
            low, high, events = kept
            if before_leaf > high:  # a later answer of the listing: read the rest of the log's at once
                events = events + self.reader.events(["approval.answered"], field=("identity", name), ts_from=low,
                                                     from_leaf=high)
                self._answers[name] = (low, _END, events)
            return [e for e in events if e.leaf_index < before_leaf]
        events = self.reader.events(["approval.answered"], field=("identity", name), before_leaf=before_leaf,
                                    ts_from=ts_from)
        if kept is None or before_leaf >= kept[1]:
            self._answers[name] = (ts_from, before_leaf, events)
        return events

    def _in_window(self, name: str, before_leaf: int, ts_from: str | None) -> list[Any]:
        """:meth:`answers_of` once a listing has asked for many identities (:data:`_BULK_AFTER`): every
        ``approval.answered`` from ``ts_from`` on is read once (an earlier ``ts_from`` later reads only
        the range before the one read), grouped by the identity its payload names; a superset of what
        the query by identity gives (the caller checks each ``ts``). A listing of answers by N identities
        read the window's answers N times (identities x answers)."""
        if self._window is None:
            self._window = (ts_from, {})
            fresh = self.reader.events(["approval.answered"], ts_from=ts_from)
        else:
            low = self._window[0]
            if low is None or (ts_from is not None and ts_from >= low):
                fresh = []
            else:
                fresh = self.reader.events(["approval.answered"], ts_from=ts_from, ts_before=low)
                self._window = (ts_from, self._window[1])
        if fresh:
            groups = self._window[1]
            touched = set()
            for e in fresh:
                who = e.payload.get("identity") if isinstance(e.payload, dict) else None
                if isinstance(who, str):
                    groups.setdefault(who, []).append(e)
                    touched.add(who)
            for who in touched:
                groups[who].sort(key=lambda e: e.leaf_index)
        return [e for e in self._window[1].get(name, ()) if e.leaf_index < before_leaf]

    def first_agent_event(self, name: str) -> Any:
        """The first ``run.started`` or ``tool.call`` whose principal names the same actor, or None.

        The principals holding a non-ASCII character are read, and their :func:`actor_key` computed,
        once per book (:class:`_UnicodePrincipals`), not once per identity: a listing of answers by
        many identities in a store of many such principals used to read and fold all of them for
        every identity (identities x principals)."""
        if name not in self._agent:
            if len(self._agent) >= _BULK_AFTER and hasattr(self.reader, "first_principals"):
                # many identities: every principal read (one row each) and folded once, not one scan
                # of the agents' events per identity (identities x principals)
                if self._first_leaf is None:
                    self._first_leaf = {}
                    for principal, leaf in self.reader.first_principals(_AGENT_KINDS):
                        if isinstance(principal, str):
                            key = actor_key(principal)
                            if leaf < self._first_leaf.get(key, _END):
                                self._first_leaf[key] = leaf
                leaf = self._first_leaf.get(actor_key(name))
                self._agent[name] = None if leaf is None else self.reader.event_at(leaf)
            else:
                if self._unicode is None:
                    self._unicode = _UnicodePrincipals(self.reader)
                self._agent[name] = _first_agent_event(self.reader, name, self._unicode)
        return self._agent[name]


_AGENT_KINDS = ["run.started", "tool.call"]


class _UnicodePrincipals:
    """The first ``run.started`` / ``tool.call`` of every :func:`actor_key` among the principals holding
    a non-ASCII character (those no SQL fold can match to an ASCII identity name): the store returns
    each distinct such principal once with its first event's leaf index
    (``Reader.non_ascii_principals``), each is folded once, and only the event of a key asked for
    is read (``Reader.event_at``). Reading every such event (as many as those principals' calls),
    twice per :func:`answer`, took ~113 ms at 300 principals and ~380 ms at 1,000."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self._leaf: dict[str, int] = {}
        self._events: dict[str, Any] = {}
        for principal, leaf in reader.non_ascii_principals(_AGENT_KINDS):
            if isinstance(principal, str):
                key = actor_key(principal)
                if leaf < self._leaf.get(key, _END):  # log order: the first one stays
                    self._leaf[key] = leaf

    def first(self, key: str) -> Any:
        """The first event whose principal's :func:`actor_key` is ``key``, or None."""
        leaf = self._leaf.get(key)
        if leaf is None:
            return None
        if key not in self._events:
            self._events[key] = self.reader.event_at(leaf)
        return self._events[key]


def _first_agent_event(reader: Any, name: str, unicode: _UnicodePrincipals) -> Any:
    """The first ``run.started`` or ``tool.call`` whose principal names the same actor as ``name``:
    the ASCII candidates (the name itself or ``...:name``, ASCII case folded) read through SQL; the
    few that are not the same actor (``a:b:bob``) are skipped, a full read only if all of the first
    ones are such; the non-ASCII ones looked up in ``unicode``."""
    key = actor_key(name)
    first = reader.events(_AGENT_KINDS, principal_actor=key, principal_ascii=True, limit=16)
    candidates = first if len(first) < 16 or any(same_actor(name, e.principal) for e in first) else \
        reader.events(_AGENT_KINDS, principal_actor=key, principal_ascii=True)
    found = [e for e in (next((e for e in candidates if same_actor(name, e.principal)), None),
                         unicode.first(key)) if e is not None]
    return min(found, key=lambda e: e.leaf_index) if found else None


def log_flags(payload: dict, ev: Any, book: IdentityBook, flags: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The ``multiple_clients`` and ``acts_as_agent`` flags a counted answer should carry and does
    not (``flags``: those it carries), computed from the log the book was read from
    (:attr:`IdentityBook.log`; none when the book was built from events alone).

    :func:`answer` writes both, but the flags are not signed: an answer appended around it by
    whoever holds the key could leave them out. Computed here as :func:`answer` computes them,
    except that the window is the default one (:data:`DEFAULT_SHARED_WINDOW_S`) and is measured
    on the events' ``ts`` (the store's clock), not on the answerer's ``answered_at``:

    * ``multiple_clients``: a validly signed answer by the same identity earlier in the log,
      whose ``ts`` is at most the window before this one's, from a distinct client (clients
      are self-reported). Only the identity's answers whose ``ts`` column is within the window
      are read (by kind and ``ts``, through ``events_kind_ts``): the work does not grow with
      the identity's older answers;
    * ``acts_as_agent``: a ``run.started`` or ``tool.call`` before this answer whose principal
      names the same actor.
    """
    if book.log is None or not isinstance(payload.get("identity"), str):
        return []
    evidence = getattr(book, "_log_evidence", None)
    if evidence is None:
        if not hasattr(book.log, "events") and not hasattr(book.log, "reader"):
            return []
        evidence = book._log_evidence = _LogEvidence(book.log)  # type: ignore[attr-defined]
    name, have = payload["identity"], {f.get("code") for f in flags if isinstance(f, dict)}
    out: list[dict[str, Any]] = []
    if "multiple_clients" not in have:
        try:
            at = _parse(ev.ts)
        except (TypeError, ValueError):
            at = None
        client = payload.get("client") if isinstance(payload.get("client"), dict) else {}
        seen = [{"approval_id": payload.get("approval_id"), "answered_at": payload.get("answered_at"),
                 "leaf_index": ev.leaf_index, **_client_fields(client)}]
        window: list[tuple[Any, dict[str, Any]]] = []  # earlier answers in the window, signatures not checked yet
        since = None
        if at is not None and at.tzinfo is not None:
            try:
                since = at - timedelta(seconds=DEFAULT_SHARED_WINDOW_S)
            except OverflowError:
                since = None
        for other in evidence.answers_of(name, ev.leaf_index, since) if at is not None else ():
            try:
                when = _parse(other.ts)
            except (TypeError, ValueError):
                continue
            # earlier in the log is what counts: no upper bound, so a clock running ahead in the
            # earlier answerer's process (a later ts) does not hide it
            if at - timedelta(seconds=DEFAULT_SHARED_WINDOW_S) <= when:
                o = other.payload
                window.append((other, {"approval_id": o.get("approval_id"), "answered_at": o.get("answered_at"),
                                       "leaf_index": other.leaf_index,
                                       **_client_fields(o["client"] if isinstance(o.get("client"), dict) else {})}))
        # signatures are checked only when a distinct client could raise the flag (one verify per
        # answer in the window: an identity answering from one client is never made to pay for them)
        if any(_distinct(seen[0], entry) for _, entry in window):
            for other, entry in window:
                then = book.get(name, other.leaf_index)  # only a validly signed answer shows where the key was used
                if then is not None and verify_fields(then.public_key, signed_fields(other.payload),
                                                      other.payload.get("signature")):
                    seen.append(entry)
        if any(_distinct(seen[0], other) for other in seen[1:]):
            distinct = _distinct_clients(seen)
            out.append({"code": "multiple_clients", "evidence": {
                "identity": name, "window_s": DEFAULT_SHARED_WINDOW_S, "answers": seen,
                "clients": [{"hostname": h, "os_user": u, "user_agent": a} for h, u, a in distinct]}})
    if "acts_as_agent" not in have:
        first = evidence.first_agent_event(name)
        if first is not None and first.leaf_index < ev.leaf_index:
            out.append({"code": "acts_as_agent", "evidence": {"identity": name, "principal": first.principal,
                                                              "run_id": first.run_id, "kind": first.kind,
                                                              "leaf_index": first.leaf_index}})
    return out


def _late(payload: dict, expires: datetime | None, ts: Any = None) -> bool:
    """Whether an answer came at or after ``expires``: by its ``answered_at`` (unreadable: late), or by
    its event's ``ts``, the store's clock, which is authoritative: an answer the store recorded after the
    expiry is late whatever time its answerer's clock wrote (``answer()`` writes the store's time in
    both). A ``ts`` that is not a readable time with an offset is not used."""
    if expires is None:
        return False
    try:
        if _parse(payload["answered_at"]) >= expires:
            return True
    except (KeyError, TypeError, ValueError, AttributeError):
        return True
    try:
        recorded = _parse(ts) if isinstance(ts, str) else None
        return recorded is not None and recorded.tzinfo is not None and recorded >= expires
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------- reading


def _reader(store: Any) -> Any:
    return store if hasattr(store, "events") else store.reader()


def _load(reader: Any, approval_id: str, run_id: str | None = None) -> tuple[Any, list[Any], IdentityBook]:
    """The request ``approval_id``, its run's related events and the identity book.

    ``run_id``: the request's run when the caller knows it (every poll does): the request is then
    found through the ``events_run_kind`` index among that run's requests only; without it (or when
    that run has no such request) through the ``events_approval`` index (approval id, leaf index:
    migration 0007 on SQLite, 0002 on PostgreSQL), reading only the requests of that id; the first
    in log order is taken (as when a store holds one id in two runs).
    """
    by_id = getattr(reader, "approval_requests", None)
    found = []
    if isinstance(approval_id, str) and isinstance(run_id, str):
        found = reader.events(["approval.requested"], run_id=run_id, field=("approval_id", approval_id))
    if not found and isinstance(approval_id, str):
        found = by_id(approval_id) if by_id is not None else []
        if by_id is None or any(not isinstance(e.payload, dict) or e.payload.get("approval_id") != approval_id
                                for e in found):
            # the index's key is the database's reading of the bytes (on PostgreSQL a function in the
            # store's schema): a request whose own bytes name another id is never taken for this one
            found = reader.events(["approval.requested"], field=("approval_id", approval_id))
    if not found:
        raise ApprovalError("unknown_approval", f"no approval request {shown_id(approval_id)} in this store")
    request = found[0]
    related = reader.events(list(_RELATED), run_id=request.run_id)
    return request, related, identity_book(reader)


def get_approval(store: Any, approval_id: str, now: datetime | None = None, *,
                 run_id: str | None = None) -> ApprovalState:
    """The state of one approval request.

    Args:
        run_id: the request's run, when known (a hold or a blocking agent polling its own request):
            the request is then read through the ``(run_id, kind)`` index. A wrong ``run_id`` only
            costs that speed. Without it, the request is read through the store's ``events_approval``
            index (approval id), not by reading every approval request of the store.

    Raises:
        ApprovalError: ``unknown_approval``.
    """
    return evaluate(*_load(_reader(store), approval_id, run_id), now=now)


def list_approvals(store: Any, *, pending: bool = False, flagged: bool = False, run_id: str | None = None,
                   since: str | None = None, until: str | None = None,
                   record_expiries: bool = True) -> list[ApprovalState]:
    """Every approval request, newest first.

    Args:
        pending: only requests still waiting for answers.
        flagged: only requests with a flagged answer (any flag: see docs/approvals.md).
        run_id: only the requests of this run (an exact id).
        since: only requests made at or after this time (inclusive), ``until``: before it (exclusive):
            the request's ``requested_at`` (its event's ``ts``); any form
            :func:`sealbox.query.parse_time` takes.
        record_expiries: record ``approval.expired`` for requests noticed expired
            (skipped on a read-only store).

    Raises:
        ConfigError: ``run_id`` is not None or a non-empty string (``5`` or ``""`` silently listed nothing,
            as if the run had none), ``pending`` or ``flagged`` not True or False, ``since``/``until`` not a time.
    """
    from sealbox.errors import ConfigError

    if run_id is not None and not (isinstance(run_id, str) and run_id):
        raise ConfigError(f"list_approvals(): run_id must be a run id (a non-empty string) or None, not {run_id!r}")
    for name, flag in (("pending", pending), ("flagged", flagged)):
        if not isinstance(flag, bool):
            raise ConfigError(f"list_approvals(): {name} must be True or False, not {flag!r}")
    reader = _reader(store)
    book = identity_book(reader)
    related: dict[str, list[Any]] = {}
    states = []
    from sealbox.query import parse_time

    bounds = {"ts_from": parse_time(since, name="since") if since is not None else None,
              "ts_before": parse_time(until, name="until") if until is not None else None}
    for req in reader.events(["approval.requested"], run_id=run_id, **bounds):
        if req.run_id not in related:
            related[req.run_id] = reader.events(list(_RELATED), run_id=req.run_id)
        states.append(evaluate(req, related[req.run_id], book))
    if record_expiries and not getattr(store, "readonly", True):
        noticed = [s.approval_id for s in states if s.status == "expired" and not s.expiry_recorded and not s.run_ended]
        if noticed:
            for aid in noticed:
                record_expiry(store, aid)
            return list_approvals(store, pending=pending, flagged=flagged, run_id=run_id, since=bounds["ts_from"],
                                  until=bounds["ts_before"], record_expiries=False)
    if pending:
        states = [s for s in states if s.status == "pending"]
    if flagged:
        states = [s for s in states if s.flags]
    return states[::-1]


def _expired_draft(state: ApprovalState) -> EventDraft:
    return EventDraft("approval.expired", {"approval_id": state.approval_id, "expired_at": state.expired_at},
                      run_id=state.run_id, principal="sealbox", step=state.step)


def withdrawal_drafts(reader: Any, state: ApprovalState) -> list[EventDraft]:
    """``note`` events (principal ``sealbox``, the request's step) saying which approvals of ``state``
    were withdrawn because their identity was disabled or re-keyed after answering (problem in
    :data:`WITHDRAWN_PROBLEMS`), each once: ``about`` is ``{"approval_id", "withdrawn": {"identity",
    "answer_leaf", "change", "change_leaf"}}`` with ``change`` ``disabled`` or ``rotated``. Written by
    whoever is about to run the call (``resume``, the blocking wait, the gateway's retry) when it finds
    the request no longer approved. A note written before rotations withdrew approvals (``about``
    ``{"identity", "answer_leaf", "disabled_leaf"}``) counts as the note of that ``disabled``."""
    gone = [a for a in state.answers if a.problem in WITHDRAWN_PROBLEMS and a.withdrawn_by is not None]
    if not gone:
        return []
    noted = set()
    for ev in reader.events(["note"], run_id=state.run_id):
        about = ev.payload.get("about")
        if ev.principal == "sealbox" and isinstance(about, dict) and about.get("approval_id") == state.approval_id:
            w = about.get("withdrawn")
            if isinstance(w, dict):
                if "disabled_leaf" in w and "change" not in w:
                    noted.add((w.get("identity"), w.get("answer_leaf"), "disabled", w.get("disabled_leaf")))
                else:
                    noted.add((w.get("identity"), w.get("answer_leaf"), w.get("change"), w.get("change_leaf")))
    drafts = []
    for a in gone:
        if (a.identity, a.leaf_index, a.withdrawn_by, a.withdrawn_leaf) in noted:
            continue
        what = (f"identity {a.identity} was disabled" if a.withdrawn_by == "disabled"
                else f"the key of identity {a.identity} was declared compromised from before the answer"
                if a.withdrawn_by == "compromised" else f"the key of identity {a.identity} was rotated")
        text = (f"approval {state.approval_id}: the approve answer of {a.identity} (leaf {a.leaf_index}) no longer "
                f"counts: {what} at leaf {a.withdrawn_leaf}, before the call ran; the request is {state.status}")
        drafts.append(EventDraft("note", {"text": text, "about": {
            "approval_id": state.approval_id, "withdrawn": {"identity": a.identity, "answer_leaf": a.leaf_index,
                                                            "change": a.withdrawn_by,
                                                            "change_leaf": a.withdrawn_leaf}}},
            run_id=state.run_id, principal="sealbox", step=state.step))
    return drafts


def record_expiry(store: Any, approval_id: str) -> bool:
    """Record ``approval.expired`` if the request has expired unanswered and nobody recorded it yet.

    The check and the write share one transaction, so it is written exactly once.

    Returns:
        True when this call wrote it.
    """
    def build(reader: Any) -> list[EventDraft]:
        state = evaluate(*_load(reader, approval_id), now=_store_now(reader))
        if state.status != "expired" or state.expiry_recorded or state.run_ended:
            return []
        return [_expired_draft(state)]

    return bool(store.append_with(build))


# ----------------------------------------------------------------------------- answering


def answer(store: Any, approval_id: str, decision: str, reason: str, key_file: Any, *,
           client: dict[str, Any] | None = None, binding: str | None = None,
           shared_window_s: float = DEFAULT_SHARED_WINDOW_S) -> ApprovalState:
    """Answer an approval request: sign and record ``approval.answered`` in the request's run.

    Every rule is checked inside the transaction that writes the answer, so two
    approvers racing cannot both be "the last one needed".

    Args:
        store: an open, writable store.
        approval_id: the request's id (``apr_…``).
        decision: ``"approve"`` or ``"deny"``.
        reason: why (kept in the record and covered by the signature): a non-empty string.
        key_file: the answering identity's private key file (its name is the identity).
        client: the client that answers (self-reported); default :func:`local_client`.
        binding: the binding the answerer saw; refused if it is not the request's.
        shared_window_s: window for the "same identity, several clients" flag, in seconds:
            at least :data:`DEFAULT_SHARED_WINDOW_S` (the answerer is the one the flag checks:
            it may widen the window, never narrow it), at most :data:`MAX_SHARED_WINDOW_S`.

    Returns:
        The request's state after the answer.

    Raises:
        ApprovalError: unknown id, the run ended, already decided, expired (the expiry
            is then recorded), ``clock_skew`` (the store's clock says it is before the request
            was recorded: the answer would predate the question), a key that is not the identity's current one, a rule
            broken (the code says which), ``bad_window``, ``bad_decision``, ``bad_reason`` (empty,
            blank, longer than :data:`REASON_MAX_CHARS`, or not UTF-8 text), ``bad_key_file`` (not a path) or ``bad_client`` (not a dict, or a hostname,
            os_user, user_agent or remote_addr that is not a string).
    """
    if decision not in ("approve", "deny"):
        raise ApprovalError("bad_decision", f"decision must be 'approve' or 'deny', not {decision!r}")
    if not isinstance(reason, str) or not reason.strip():  # as `sealbox approvals approve --reason ''` is refused
        raise ApprovalError("bad_reason", f"reason must be a non-empty string: say why (it is recorded and signed), "
                                          f"not {reason!r}")
    if len(reason) > REASON_MAX_CHARS:  # signed and kept forever: a pasted file is no reason
        raise ApprovalError("bad_reason", f"reason is {len(reason)} characters long: at most {REASON_MAX_CHARS} "
                                          "are recorded (say why in short; link to the details)")
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a non-UTF-8 byte of a command-line argument decodes to one
        raise ApprovalError("bad_reason", f"reason is not UTF-8 text (it holds a lone surrogate): {reason!r}") from None
    if not isinstance(key_file, (str, os.PathLike)):
        raise ApprovalError("bad_key_file", f"key_file must be the path of the answering identity's key file, "
                                            f"not {key_file!r}")
    check_shared_window(shared_window_s)
    if client is not None and (not isinstance(client, dict) or any(
            client.get(k) is not None and not isinstance(client[k], str) for k in _CLIENT_FIELDS)):
        raise ApprovalError("bad_client", f"client must be a dict whose {', '.join(_CLIENT_FIELDS)} are strings, "
                                          f"not {client!r}")
    signer = load_key(key_file)
    client = dict(client if client is not None else local_client())
    box: list[ApprovalState] = []

    def build(reader: Any) -> list[EventDraft]:
        now = _store_now(reader)  # the store's clock: the ts this answer gets, and its answered_at
        request, related, book = _load(reader, approval_id)
        _refuse_clock_behind(request, now)
        state = evaluate(request, related, book, now)
        if state.status == "expired" and not state.expiry_recorded and not state.run_ended:
            box.append(state)
            return [_expired_draft(state)]
        _refuse_closed(state)
        who = book.get(signer.name)
        if who is None:
            from sealbox.identities import unknown_signer

            raise ApprovalError("unknown_identity", unknown_signer(signer.name))
        if who.public_key != signer.verifier.vkey:
            raise ApprovalError("wrong_key", f"this key is not {who.name}'s current key (it was rotated, or is not theirs)")
        if binding is not None and binding != request.payload["binding"]:
            raise ApprovalError("binding_mismatch", f"refused: binding {binding} is not the binding of {approval_id} "
                                f"({request.payload['binding']}): the call changed or another call is meant")
        payload = {"approval_id": approval_id, "binding": request.payload["binding"], "decision": decision,
                   "identity": who.name, "reason": reason, "answered_at": _utc(now), "client": client,
                   "run_id": request.run_id}
        payload["signature"] = sign_fields(signer, signed_fields(payload))
        payload["key_id"] = who.key_id
        problem = check_answer(request.payload, payload, reader.size(), book, _answered(state.answers),
                               run_id=request.run_id)
        if problem is not None:
            raise ApprovalError(problem, f"answer refused: {_MESSAGES[problem]} ({who.name} on {approval_id})")
        payload["flags"] = shared_account_flags(reader, who, client, now, shared_window_s, approval_id, book=book)
        payload["flags"] += quorum_client_flags(request.payload, payload, state.answers)
        return [EventDraft("approval.answered", payload, run_id=request.run_id, principal=who.name, step=request.step)]

    store.append_with(build)
    if box:
        raise ApprovalError("expired", f"approval {approval_id} expired at {box[0].expired_at}; "
                            "it is denied (recorded as approval.expired)")
    return get_approval(store, approval_id)


def check_shared_window(window_s: Any) -> None:
    """Refuse a "several clients" window narrower than the default, wider than a year, or not a
    finite number (``ApprovalError("bad_window")``): the person answering is the one the flag
    checks, so they may not switch it off with ``--window 0``."""
    ok = isinstance(window_s, (int, float)) and not isinstance(window_s, bool) and math.isfinite(window_s)
    if not ok or not DEFAULT_SHARED_WINDOW_S <= window_s <= MAX_SHARED_WINDOW_S:
        raise ApprovalError("bad_window", f"the shared-account window must be a number of seconds from "
                            f"{DEFAULT_SHARED_WINDOW_S} (24 h; it may be widened, never narrowed) to "
                            f"{MAX_SHARED_WINDOW_S}, not {window_s!r}")


def _refuse_clock_behind(request: Any, now: datetime) -> None:
    """Refuse (``clock_skew``) an answer whose time, by this process's clock, is before the time its
    request was recorded (the request's ``ts``, by the requesting process's clock): the record would say
    the approver answered before being asked, and a clock running behind would also let an answer in
    after the request's ``expires_at`` has passed. One of the two clocks is wrong; the answer waits until
    they agree (a request whose ``ts`` is unreadable is not checked here)."""
    try:
        asked = _parse(request.ts)
    except (TypeError, ValueError, AttributeError):
        return
    if asked.tzinfo is not None and now < asked:
        raise ApprovalError("clock_skew", f"answer refused: this machine's clock says {_utc(now)}, before approval "
                            f"{request.payload.get('approval_id')} was requested ({request.ts}, by the clock of the "
                            f"process that recorded it): the answer would be recorded as given "
                            f"{(asked - now).total_seconds():.3f} s before it was asked; one of the two clocks is "
                            "wrong: fix it (or wait until this clock has passed the request's time)")


def _refuse_closed(state: ApprovalState) -> None:
    aid = state.approval_id
    if state.run_ended:
        raise ApprovalError("run_ended", f"run {state.run_id} has ended: approval {aid} can no longer be answered")
    if state.status == "expired":
        raise ApprovalError("expired", f"approval {aid} expired at {state.expired_at}; it can no longer be answered")
    if state.status == "malformed":
        raise ApprovalError("malformed_request", f"approval {aid} cannot be answered: {_MESSAGES['malformed_request']} "
                            f"({state.malformed}); run `sealbox verify`")
    if state.status != "pending":
        raise ApprovalError("already_decided", f"approval {aid} was already {state.status} by "
                            f"{', '.join(state.decided_by)}; a further answer is refused")


# ----------------------------------------------------------------------------- shared accounts


def _client_key(client: dict[str, Any]) -> tuple[Any, Any, Any]:
    return client.get("hostname"), client.get("os_user"), client.get("user_agent")


def _product(user_agent: Any) -> Any:
    """The program a user agent names, without its version: ``sealbox-cli/0.2.0`` -> ``sealbox-cli``
    (case-folded); a user agent that is not text is compared as recorded."""
    return user_agent.split("/", 1)[0].strip().casefold() if isinstance(user_agent, str) else user_agent


def _host(hostname: Any) -> Any:
    """A host name as compared: case-folded (DNS names are case-insensitive, RFC 4343: ``LAPTOP`` and
    ``laptop`` are one host); a host name that is not text is compared as recorded."""
    return hostname.casefold() if isinstance(hostname, str) else hostname


def _distinct(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two clients are distinct when hostname (case-insensitively) or OS user differ, or both name a user
    agent and their products differ (one program at two versions, an upgraded CLI, is one client)."""
    (ha, ua, aa), (hb, ub, ab) = _client_key(a), _client_key(b)
    return _host(ha) != _host(hb) or ua != ub or (aa is not None and ab is not None and _product(aa) != _product(ab))


def shared_account_flags(reader: Any, who: Identity, client: dict[str, Any], now: datetime, window_s: float,
                         approval_id: str, *, book: IdentityBook | None = None) -> list[dict[str, Any]]:
    """Flags, with evidence, that ``who`` may be an account several people or an agent use.

    * ``shared_identity``: the identity is marked shared;
    * ``multiple_clients``: it answered from two or more distinct clients within ``window_s``;
    * ``acts_as_agent``: it is the principal of a run or a tool call in the store.

    With ``book``, only earlier answers whose signature verifies under the identity's key at
    that point count as another client (an unsigned answer naming ``who`` proves nothing).
    Only the identity's answers recorded since the window began (their ``ts``, searched through
    ``events_kind_ts``) are read, so the work does not grow with its older answers; an answer
    whose ``answered_at`` is later than its own ``ts`` (not one :func:`answer` writes) counts
    only if that ``ts`` is within the window.
    """
    flags: list[dict[str, Any]] = []
    if who.shared:
        flags.append({"code": "shared_identity", "evidence": {"identity": who.name, "marked_shared": True,
                                                              "identity_leaf": who.since_leaf}})
    since = now - timedelta(seconds=window_s)
    seen = [{"approval_id": approval_id, "answered_at": _utc(now), **_client_fields(client)}]
    # only answers recorded (``ts``) since the window began are read, by kind and ts (events_kind_ts):
    # answer() stamps answered_at before the store stamps ts, so none of those left out is in the window
    for ev in reader.events(["approval.answered"], principal=who.name, ts_from=_utc(since)):
        p = ev.payload
        try:
            when = _parse(p["answered_at"])
        except (KeyError, TypeError, ValueError):
            continue
        if p.get("identity") == who.name and since <= when <= now:
            if book is not None:
                then = book.get(who.name, ev.leaf_index)
                if then is None or not verify_fields(then.public_key, signed_fields(p), p.get("signature")):
                    continue
            seen.append({"approval_id": p.get("approval_id"), "answered_at": p["answered_at"], "leaf_index": ev.leaf_index,
                         **_client_fields(p.get("client") or {})})
    if any(_distinct(seen[0], other) for other in seen[1:]):
        distinct = _distinct_clients(seen)
        flags.append({"code": "multiple_clients", "evidence": {
            "identity": who.name, "window_s": window_s, "answers": seen,
            "clients": [{"hostname": h, "os_user": u, "user_agent": a} for h, u, a in distinct]}})
    # any principal naming the same actor (same_actor: any one scheme, look-alikes mapped,
    # case-folded), as the requester rule compares them; identity names are ASCII, so SQL folds the
    # case of the ASCII principals, and the others are folded once each (_UnicodePrincipals)
    ev = _first_agent_event(reader, who.name, _UnicodePrincipals(reader))
    if ev is not None:
        flags.append({"code": "acts_as_agent", "evidence": {"identity": who.name, "principal": ev.principal,
                                                            "run_id": ev.run_id, "kind": ev.kind,
                                                            "leaf_index": ev.leaf_index}})
    return flags


_CLIENT_FIELDS = ("hostname", "os_user", "user_agent", "remote_addr")


def quorum_client_flags(request: dict, payload: dict, earlier: Iterable[Answer]) -> list[dict[str, Any]]:
    """The ``quorum_same_client`` flag of an approve answer to a request needing two or more approvers
    (``quorum``), given from the client another identity's approval of the same request that counts
    (``earlier``: the request's answers before this one) was given from: the same ``hostname``
    (case-insensitively, RFC 4343) and ``os_user``, as the clients report them (the user agent is not compared: two programs run by one
    OS user on one host are one person's). A client naming neither is never the same as another.

    One person holding two approvers' keys defeats the four-eyes rule: the answers count (both
    signatures verify), but the flag shows them. :func:`answer` writes it; the flags are not signed,
    so every reader (:func:`evaluate`) computes it again from the request's earlier answers and adds
    it to a counted answer lacking it. The evidence lists the earlier approvals from that client and
    this answer."""
    quorum = request.get("quorum", 1)
    quorum = quorum if isinstance(quorum, int) and not isinstance(quorum, bool) else 1
    client = payload.get("client") if isinstance(payload.get("client"), dict) else {}
    host, user = client.get("hostname"), client.get("os_user")
    if quorum < 2 or payload.get("decision") != "approve" or (host is None and user is None):
        return []
    same = [a for a in earlier if a.problem is None and a.decision == "approve" and a.identity != payload.get("identity")
            and (_host(a.client.get("hostname")), a.client.get("os_user")) == (_host(host), user)]
    if not same:
        return []
    answers = [{"identity": a.identity, "answered_at": a.answered_at, "leaf_index": a.leaf_index,
                **_client_fields(a.client)} for a in same]
    answers.append({"identity": payload.get("identity"), "answered_at": payload.get("answered_at"),
                    **_client_fields(client)})
    return [{"code": "quorum_same_client", "evidence": {
        "approval_id": payload.get("approval_id"), "quorum": quorum, "client": {"hostname": host, "os_user": user},
        "identities": sorted({a.identity for a in same} | {str(payload.get("identity"))}), "answers": answers}}]


def _client_fields(client: dict[str, Any]) -> dict[str, Any]:
    return {k: client[k] for k in _CLIENT_FIELDS if client.get(k) is not None}


def _distinct_clients(seen: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """The distinct clients of ``seen``, sorted, as recorded: a client in the log whose fields are not
    text (a list, an object) is compared as it is, never hashed (it used to raise TypeError)."""
    out: list[tuple[Any, Any, Any]] = []
    for c in seen:
        key = _client_key(c)
        if key not in out:
            out.append(key)
    return sorted(out, key=repr)
