"""Step keys: what replay compares, and the recorded run read once for serving.

Every comparable step of a run is keyed by ``(step, kind, name, hash)``
(LESSONS.md, "Replay and durable state": compare arguments, not just names):

=============== ============================ ==========================================
kind            name                         hash of (canonical, as stored)
=============== ============================ ==========================================
``model.call``  the model name               the request
``tool.call``   ``server/tool``              the arguments
``state.saved`` the label (or ``""``)        the state
``note``        ``""``                       ``{"text", "about"}``
=============== ============================ ==========================================

The hash is ``sha256:`` + SHA-256 of the RFC 8785 bytes of the content **in the
form the store keeps it**: type-tag encoded, then redacted by the store's
content mode. A replay recorded into the same store is redacted the same way
(HMAC markers under the store's secret), so keys compare exactly in ``full``,
``redacted`` and ``hashes-only`` stores alike, without ever revealing content.

One normalisation is applied before hashing: LangChain message ``id`` fields
are left out (LangGraph gives every message without an id a fresh ``uuid4``, so
they differ on every run of the same code). It applies to ``langchain`` model
requests (also of a failed call, recorded with format ``unknown``: its response is only the
error, but its request is the LangChain callback handler's ``{messages | prompts,
invocation_params, …}``) and to saved state.

``step`` is the logical step (``"4"``, ``"4.2"``): the second of the tool calls
requested by model step 4 is ``4.2`` whatever order the calls completed in.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from sealbox.canonical import canonical_bytes, encode
from sealbox.errors import CanonicalizationError
from sealbox.errors import BlobNotFoundError
from sealbox.redaction import holds_marker

__all__ = ["COMPARED_KINDS", "StepKey", "RecordedCall", "RecordedRun", "content_hash", "attempted_view", "step_order"]

#: Kinds whose steps are compared by replay.
COMPARED_KINDS = ("model.call", "tool.call", "state.saved", "note")

_CONTENT = {"model.call": "request", "tool.call": "arguments", "state.saved": "state", "note": None}
_MESSAGE_TYPES = frozenset({"human", "ai", "tool", "system", "function", "chat", "AIMessageChunk"})


@dataclass(frozen=True)
class StepKey:
    """The identity of one step: all four fields must match for a step to reproduce.

    Attributes:
        step: logical step (``"4"``, ``"4.2"``).
        kind: ``model.call``, ``tool.call``, ``state.saved`` or ``note``.
        name: model name, ``server/tool``, state label, or ``""``.
        hash: ``sha256:<hex>`` of the canonical stored content (see the module docstring).
    """

    step: str
    kind: str
    name: str
    hash: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"step": self.step, "kind": self.kind, "name": self.name, "hash": self.hash}


def step_order(step: str) -> tuple[int, ...]:
    """Sort key of a logical step: ``"4.10"`` after ``"4.2"``."""
    return tuple(int(p) for p in step.split("."))


def _strip_message_ids(value: Any, langchain: bool) -> Any:
    if isinstance(value, list):
        return [_strip_message_ids(v, langchain) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and "$pydantic" in value and isinstance(value["$pydantic"], dict):
        inner = value["$pydantic"]
        if str(inner.get("type", "")).startswith("langchain_core.messages."):
            fields = inner.get("fields")
            if isinstance(fields, dict):
                fields = {k: v for k, v in fields.items() if k != "id"}
            return {"$pydantic": {**inner, "fields": _strip_message_ids(fields, True)}}
    is_message = langchain and value.get("type") in _MESSAGE_TYPES and "content" in value
    return {k: _strip_message_ids(v, langchain) for k, v in value.items() if not (is_message and k == "id")}


def _langchain_request(stored: Any) -> bool:
    """Whether a model request is the one ``SealboxCallbackHandler`` records (a failed call's format
    is ``unknown``: its response holds only the error)."""
    return isinstance(stored, dict) and "invocation_params" in stored and (
        isinstance(stored.get("messages"), list) or isinstance(stored.get("prompts"), list))


def normalised(kind: str, fmt: str | None, stored: Any) -> Any:
    """A step's stored content as its key hashes it (LangChain message ids left out)."""
    if kind == "state.saved":
        return _strip_message_ids(stored, True)
    if kind == "model.call" and (fmt == "langchain" or (fmt in (None, "unknown") and _langchain_request(stored))):
        return _strip_message_ids(stored, True)
    return stored


def content_hash(kind: str, stored: Any, fmt: str | None = None) -> str:
    """``sha256:<hex>`` of a step's content in its stored (encoded, redacted) form."""
    value = normalised(kind, fmt, stored)
    try:
        data = canonical_bytes(value)
    except CanonicalizationError:
        # a whole-number float beyond 2**53 is stored as its digits and reads back as an int outside I-JSON's
        # range (an int there is stored as $bigint): hashed as the double it came from, the same bytes
        data = canonical_bytes(as_doubles(value))
    return "sha256:" + hashlib.sha256(data).hexdigest()


def as_doubles(value: Any) -> Any:
    """``value`` (content in its stored form, read back) with every int outside ±(2**53 - 1) read as the
    double it was stored from: the store writes a real integer there as ``$bigint``, so a bare one is a
    whole-number float's digits (docs/canonical.md, "Whole-number floats")."""
    if type(value) is int:
        return float(value) if abs(value) > 2**53 - 1 else value
    if isinstance(value, dict):
        return {k: as_doubles(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_doubles(v) for v in value]
    return value


def attempted_view(store: Any, kind: str, payload: dict[str, Any]) -> Any:
    """The content of a draft payload as the store would keep it (encoded, then redacted)."""
    name = _CONTENT[kind]
    value = {"text": payload.get("text"), "about": payload.get("about")} if name is None else payload.get(name)
    encoded = encode(value)
    redactor = getattr(store, "redactor", None)
    if redactor is not None and name is None:  # a note: as the store redacts it (store.base.redact_note)
        from sealbox.store.base import redact_note

        kept = {"text": encoded.get("text"), "about": encoded.get("about")}
        kept.update(redact_note(redactor, {k: v for k, v in kept.items() if v is not None or k == "text"}))
        return kept
    if redactor is None or name is None:
        return encoded
    if name == "request" or name == "arguments" or name == "state":
        out, changed = redactor.apply(name, encoded)
        if redactor.policy.mode != "redacted":
            return out
        # the store scrubs an event of the values redacted from any of its content fields (store.base)
        from sealbox.redaction import own_values

        own = own_values(encoded, out, keys=redactor.key_names) if changed else []
        own += _own_values_elsewhere(redactor, kind, name, payload)
        return redactor.scrub_values_in(out, own)[0] if own else out
    return encoded


def _own_values_elsewhere(redactor: Any, kind: str, name: str | None, payload: dict[str, Any]) -> list[str]:
    """The strings that were themselves a redacted value in ``payload``'s content fields other than
    ``name`` (:func:`sealbox.redaction.own_values`), which the store scrubs from the rest of the event."""
    from sealbox.events import CONTENT_FIELDS
    from sealbox.redaction import own_values

    own: list[str] = []
    for other in CONTENT_FIELDS.get(kind, ()):
        if other != name and payload.get(other) is not None:
            before = encode(payload[other])
            after, redacted = redactor.apply(other, before)
            if redacted:
                own += own_values(before, after, keys=redactor.key_names)
    return own


def scrubbed_record(store: Any, kind: str, payload: dict[str, Any], recorded: Any, known: list[str]) -> Any:
    """A recorded step's content with what a run records since 2026-12-03 scrubbed from it, for a
    record written before (docs/content-modes.md, "Values redacted earlier in the run"): each of
    ``known`` (the values the replay run redacted so far) and of the values redacted from the
    attempted ``payload`` itself, where the record holds it in clear, becomes its in-string marker.
    A record written since holds those markers already, and one written before holds the real value
    in clear where the replay's view holds its marker (the same HMAC of the same string): scrubbed,
    the two compare equal exactly when the values were equal. None when nothing would change
    (another mode, nothing known, or nothing of it in the record)."""
    redactor = getattr(store, "redactor", None)
    if redactor is None or redactor.policy.mode != "redacted" or kind not in _CONTENT:
        return None
    name = _CONTENT[kind]
    wanted = set(known)
    if name is None:
        value = encode({"text": payload.get("text"), "about": payload.get("about")})
        out, changed = redactor.apply("about", value.get("about"))
        if changed:
            from sealbox.redaction import own_values

            wanted.update(own_values(value.get("about"), out, keys=redactor.key_names))
    else:
        value = encode(payload.get(name))
        out, changed = redactor.apply(name, value)
        if changed:
            from sealbox.redaction import own_values

            wanted.update(own_values(value, out, keys=redactor.key_names))
        wanted.update(_own_values_elsewhere(redactor, kind, name, payload))
    if not wanted:
        return None
    scrubbed, changed = redactor.scrub_values_in(recorded, sorted(wanted, key=lambda v: (-len(v), v)))
    return scrubbed if changed else None


def key_name(kind: str, payload: dict[str, Any]) -> str:
    """The ``name`` part of a step key for a payload of ``kind``."""
    if kind == "model.call":
        return str(payload.get("model", ""))
    if kind == "tool.call":
        return f"{payload.get('server')}/{payload.get('tool')}"
    if kind == "state.saved":
        return str(payload.get("label") or "")
    return ""


#: Whether a stored value (blobs resolved) holds a redaction marker as the store writes it: the exact
#: detector the gateway uses too (:func:`sealbox.redaction.holds_marker`). A tool output that only quotes
#: ``$redacted`` or ``⟦redacted:`` is not redacted, and replays.
has_marker = holds_marker


def _well_formed(kind: str, payload: Any) -> bool:
    """Whether ``payload`` passes ``kind``'s schema (:func:`sealbox.events.validate_payload`)."""
    from sealbox.errors import InvalidEventError
    from sealbox.events import validate_payload

    try:
        validate_payload(kind, payload)
    except InvalidEventError:
        return False
    return True


def check_chain(run_id: str, events: list[Any]) -> None:
    """Refuse a recorded run whose events were changed below Sealbox: each event's bytes must hash to
    its stored leaf hash, and chain to the run's previous event (``run_seq`` one more, ``prev`` its leaf
    hash), so that an edited, removed or inserted event is never served as the record. One SHA-256 an
    event; ``sealbox verify`` checks the rest (the tree, the checkpoints).

    Raises:
        sealbox.store.base.DamagedEventError: naming the first event that fails, and why.
    """
    from sealbox.ledger import merkle
    from sealbox.store.base import DamagedEventError

    prev: str | None = None
    for seq, e in enumerate(events, 1):
        if "sha256:" + merkle.leaf_hash(e.raw).hex() != e.leaf_hash:
            why = "no longer hashes to its recorded leaf hash"
        elif e.run_seq != seq:
            why = "does not chain to the run's previous event (its run_seq does not follow it)"
        elif e.prev != prev:
            why = "does not chain to the run's previous event (its prev is not that event's leaf hash)"
        else:
            prev = e.leaf_hash
            continue
        raise DamagedEventError(f"the event at leaf {e.leaf_index} (run {run_id}, run_seq {e.run_seq}, {e.kind}) "
                                f"{why}: the store was changed below Sealbox, and a replay serves only what was "
                                "recorded; replay refused (run `sealbox verify`)", e.leaf_index)


@dataclass
class RecordedCall:
    """One recorded comparable step, with what replay needs to serve it.

    Attributes:
        key: its :class:`StepKey`.
        content: its stored content (encoded, redacted), for the field-level diff.
        payload: the event's stored payload (content may be blob references).
        decision: for a tool call, its ``policy.decision`` payload.
        result: for a tool call, its ``tool.result`` payload (None: none recorded).
        approval: for a tool call that needed one, as the run went on past it (``run.resumed``):
            ``approved``, ``denied``, ``expired``, or None (the run was not resumed past it).
        approval_id: for a tool call that needed one, its approval request's id.
        imported_approval: for a tool call of an imported run, its last approval as imported (the
            ``about.imported_approval`` of the importer's ``note`` at its step), or None.
        unreplayable: why this step cannot be served from the record, or None.
    """

    key: StepKey
    content: Any
    payload: dict[str, Any]
    decision: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    approval: str | None = None
    approval_id: str | None = None
    unreplayable: str | None = None
    imported_approval: dict[str, Any] | None = None


@dataclass
class RecordedRun:
    """A recorded run read once: its start, its end, and its comparable steps by step.

    Args:
        store: the store holding it.
        run_id: the run.

    Raises:
        sealbox.errors.ConfigError: no such run, or the system run.
    """

    store: Any
    run_id: str
    started: dict[str, Any] = field(default_factory=dict)
    ended: dict[str, Any] | None = None
    principal: str = ""
    steps: dict[str, RecordedCall] = field(default_factory=dict)
    mode: str = "full"
    #: the comparable steps in the order they were written (run_seq), not in step order
    order: list[str] = field(default_factory=list)
    #: each tool call's step -> the global log positions (``leaf_index``) of its ``tool.call`` and of its
    #: ``tool.result`` (None: none recorded), to tell which calls held work of their own (:meth:`held_inside`)
    call_spans: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    #: the global log positions of the run's ``model.call`` events
    model_leaves: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, store: Any, run_id: str) -> "RecordedRun":
        from sealbox.errors import ConfigError
        from sealbox.events import SYSTEM_RUN_ID

        if run_id == SYSTEM_RUN_ID:
            raise ConfigError(f"{SYSTEM_RUN_ID!r} is the store's system run (identities, erasures, re-approvals), "
                              "not an agent's run: it cannot be replayed")
        events = store.read_run(run_id)
        if not events or events[0].kind != "run.started":
            from sealbox.approvals import shown_id  # an id pasted whole from a file: cut

            raise ConfigError(f"no run {shown_id(run_id)} in this store")
        check_chain(run_id, events)
        content = getattr(store, "content", None)
        rec = cls(store, run_id, events[0].payload, None, events[0].principal, {},
                  getattr(content, "mode", "full"))
        by_call: dict[str, RecordedCall] = {}
        approvals: dict[str, str] = {}  # approval_id -> call_id
        for e in events[1:]:
            rec._add(e, by_call, approvals)
        for call in rec.steps.values():
            call.unreplayable = rec._why_unreplayable(call)
        return rec

    def _add(self, e: Any, by_call: dict[str, RecordedCall], approvals: dict[str, str]) -> None:
        p = e.payload
        if e.kind == "note" and e.principal == "sealbox" and isinstance(p.get("about"), dict) \
                and "withdrawn" in p["about"]:
            return  # Sealbox's own note of a withdrawn approval (sealbox.approvals.withdrawal_drafts), at the
            # request's step: not a step of the agent's, and it would hide the call recorded at that step
        if e.kind == "note" and e.principal == "sealbox" and isinstance(p.get("client_request"), dict):
            return  # the gateway's record of a request an upstream made of the client during a call, at the call's
            # step: not a step of the agent's (a replay serving the call from the record asks nobody)
        about = p.get("about") if e.kind == "note" else None
        if isinstance(about, dict) and isinstance(about.get("imported_approval"), dict) \
                and self.started.get("imported") and about["imported_approval"].get("call_id") in by_call:
            by_call[about["imported_approval"]["call_id"]].imported_approval = about["imported_approval"]
            return  # the importer's record of a call's approval (sealbox import), at the call's step: not a step
            # of the agent's, and it would hide the call recorded at that step
        if e.kind in COMPARED_KINDS:
            stored = self._stored(e.kind, p)
            key = StepKey(e.step, e.kind, key_name(e.kind, p), content_hash(e.kind, stored, p.get("format")))
            call = RecordedCall(key, stored, p)
            self.steps[e.step] = call
            self.order.append(e.step)
            if e.kind == "tool.call":
                by_call[p["call_id"]] = call
                self.call_spans[e.step] = (e.leaf_index, None)
            elif e.kind == "model.call":
                self.model_leaves.append(e.leaf_index)
        elif e.kind == "policy.decision" and p.get("call_id") in by_call:
            by_call[p["call_id"]].decision = p
        elif e.kind == "tool.result" and p.get("call_id") in by_call:
            by_call[p["call_id"]].result = p
            span = self.call_spans.get(by_call[p["call_id"]].key.step)
            if span is not None and span[1] is None:
                self.call_spans[by_call[p["call_id"]].key.step] = (span[0], e.leaf_index)
        elif e.kind == "approval.requested":
            # a malformed request (only a change below Sealbox makes one) is still tied to its call
            # when its ids are strings; approvals.evaluate calls it malformed, never approved
            aid, cid = p.get("approval_id"), p.get("call_id")
            if isinstance(aid, str) and isinstance(cid, str):
                approvals[aid] = cid
                if cid in by_call:
                    by_call[cid].approval_id = aid
        elif e.kind == "run.resumed" and _well_formed(e.kind, p):  # a malformed one gives no outcome
            for aid, outcome in p.get("outcomes", {}).items():
                if aid in approvals and approvals[aid] in by_call:
                    by_call[approvals[aid]].approval = outcome
        elif e.kind == "approval.expired" and p.get("approval_id") in approvals:
            call = by_call.get(approvals[p["approval_id"]])
            if call is not None and call.approval is None:
                call.approval = "expired"
        elif e.kind == "run.ended":
            self.ended = p

    def held_inside(self, leaves: list[int]) -> tuple[set[str], set[str]]:
        """The steps of the tool calls that held recorded work inside them, and those that may have.

        For each global log position in ``leaves`` (the run's own ``model.call`` events and the ``run.started``
        of its sub-agent runs), the calls open there: their ``tool.call`` written before and their
        ``tool.result`` after (a call with no ``tool.result`` never ran or has no known outcome, and one
        decided ``require_approval`` may have waited across other steps: neither is taken). The one opened
        last holds it (the innermost of nested calls: a sub-agent run inside a tool, a second graph invoked in
        a governed LangGraph tool), unless another call open there was requested by the same model step (calls
        running at once): the record cannot tell which of them held it, and all of those are returned in the
        second set instead.

        Returns:
            ``(held, ambiguous)``: sets of steps.
        """
        held: set[str] = set()
        ambiguous: set[str] = set()
        spans = sorted(((step, start, end) for step, (start, end) in self.call_spans.items()
                        if end is not None and ((self.steps.get(step) and self.steps[step].decision) or {})
                        .get("effect") != "require_approval"), key=lambda t: t[1])
        for leaf in leaves:
            open_ = [step for step, start, end in spans if start < leaf < end]  # type: ignore[operator]
            if not open_:
                continue
            parent = open_[-1].rpartition(".")[0]
            siblings = [step for step in open_ if step.rpartition(".")[0] == parent]
            if len(siblings) > 1:
                ambiguous.update(siblings)
            else:
                held.add(open_[-1])
        return held, ambiguous - held

    def _stored(self, kind: str, payload: dict[str, Any]) -> Any:
        name = _CONTENT[kind]
        if name is None:  # a note: its stored payload is encoded (and redacted) already
            return {"text": payload.get("text"), "about": payload.get("about")}
        try:
            return self.resolve(payload.get(name))
        except BlobNotFoundError:
            return {"$erased": payload.get(name)}

    def _why_unreplayable(self, call: RecordedCall) -> str | None:
        kind = call.key.kind
        if kind == "model.call":
            try:
                response = self.resolve(call.payload.get("response"))
            except BlobNotFoundError:
                return "its recorded response was erased under a retention rule"
            if has_marker(response):
                return f"its recorded response holds redacted content (store content mode: {self.mode})"
        elif kind == "tool.call" and call.result is not None and (call.result.get("ok") or "result" in call.result):
            try:
                result = self.resolve(call.result.get("result"))
            except BlobNotFoundError:
                return "its recorded result was erased under a retention rule"
            if has_marker(result):
                return f"its recorded result holds redacted content (store content mode: {self.mode})"
        elif kind == "tool.call" and call.result is not None and self.mode == "hashes-only":
            # A hashes-only store keeps an error's type and turns its message into ``hmac-sha256:<hex>``
            # (docs/content-modes.md): raising that text again would hand the agent a message the recorded run
            # never got, and a later step that passes it on would diverge because of the hash.
            error = call.result.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return (f"its recorded error message is not kept (store content mode: {self.mode}): only its "
                        f"type, {error.get('type')}")
        return None

    def snapshot(self) -> dict[str, Any] | None:
        """The snapshot the run was recorded under (None: it names none), checked against its fingerprint:
        a snapshot changed below Sealbox is never compared or run under as the recorded configuration.

        Raises:
            sealbox.store.base.DamagedEventError: the store does not hold it (a run's snapshot is stored
                before its ``run.started``, and never deleted by Sealbox), or its content no longer
                hashes to its fingerprint (or ``SnapshotDamagedError``, when the store finds that first).
        """
        from sealbox.errors import SnapshotDamagedError, StoreError
        from sealbox.snapshot import snapshot_fingerprint
        from sealbox.store.base import DamagedEventError

        fp = self.started.get("snapshot")
        if not fp:
            return None
        try:
            content = self.store.get_snapshot(fp)
        except (DamagedEventError, SnapshotDamagedError):
            raise
        except StoreError as exc:
            raise DamagedEventError(f"snapshot {fp} of run {self.run_id} is named by the run but not stored: the "
                                    "store was changed below Sealbox, and a replay serves only what was recorded; "
                                    "replay refused (run `sealbox verify`)") from exc
        try:
            intact = snapshot_fingerprint(content) == fp
        except CanonicalizationError:  # a whole-number float beyond 2**53 reads back as an int: see content_hash
            try:
                content = as_doubles(content)  # as compared and pinned again by the replay run
                intact = snapshot_fingerprint(content) == fp
            except Exception:  # noqa: BLE001 - content no canonical form can hold: changed too
                intact = False
        except Exception:  # noqa: BLE001 - content no canonical form can hold: changed too
            intact = False
        if not intact:
            raise DamagedEventError(f"snapshot {fp} of run {self.run_id} no longer hashes to its fingerprint: the "
                                    "store was changed below Sealbox, and a replay serves only what was recorded; "
                                    "replay refused (run `sealbox verify`)")
        return content

    def resolve(self, value: Any) -> Any:
        """``value`` with every blob reference replaced by its content, as ``store.resolve`` does, each blob
        checked against its commitment (SHA-256 of salt and content) first: a blob changed below Sealbox is
        never served as the record.

        Raises:
            BlobNotFoundError: a blob missing or erased.
            sealbox.store.base.DamagedEventError: a blob whose content no longer matches its commitment.
        """
        from sealbox import blobs

        get_row = getattr(self.store, "get_blob_row", None)
        if get_row is None:  # a store that cannot give the salt: as it resolves
            return self.store.resolve(value)

        def get(ref: str) -> bytes:
            row = get_row(ref)
            if row is None or row[1] is None:
                return self.store.get_blob(ref)  # raises BlobNotFoundError, as the store words it
            salt, content = (None if v is None else bytes(v) for v in row)
            if salt is None or not blobs.check_blob(ref, salt, content):
                from sealbox.store.base import DamagedEventError

                raise DamagedEventError(f"blob {ref} of run {self.run_id} no longer matches its commitment: the "
                                        "store was changed below Sealbox, and a replay serves only what was "
                                        "recorded; replay refused (run `sealbox verify`)")
            return content

        return blobs.resolve(value, get)

    def ordered(self) -> list[RecordedCall]:
        """The comparable steps in logical order."""
        return [self.steps[s] for s in sorted(self.steps, key=step_order)]
