"""Tool pinning: notice when an upstream's tools change, and deny changed tools until re-approved.

Each tool is pinned by the hash of its definition (:func:`tool_definition`, pin version 3):
``sha256:`` of the RFC 8785 bytes of everything a client or its model acts on: ``name``,
``title``, ``description``, ``input_schema``, ``output_schema``, ``annotations`` (the
``readOnlyHint``/``destructiveHint``/… hints), ``execution`` (``taskSupport``), ``icons`` and
``meta``, the keys of its ``_meta`` a host acts on (:data:`PINNED_META_KEYS`: the MCP Apps UI
``ui`` / ``ui/resourceUri``, …), each present only when the upstream lists it, and
``pin_version: 3``. Before 2026-12-04 a pin covered only ``{"name", "description",
"input_schema"}`` (version 1, :func:`tool_definition_v1`), so a change of annotations, title or
output schema alone went unnoticed; before 2026-12-05 it covered no ``_meta`` (version 2,
:func:`v2_of`), so the UI a host renders for a tool could be swapped. The pin state lives in
the store's system run, so it survives restarts and is shared by every gateway on the store:

* ``tools.changed`` (``first_seen: true``): the first listing of a server ever
  recorded; its tools are trusted on first use (approved). A later ``first_seen`` one for
  the same server approves nothing.
* ``tools.changed``: a later listing differs from the last recorded one
  (``added`` / ``removed`` / ``changed`` entries carry the hashes, and the new
  definitions). An added or changed tool is **blocked**.
* ``tool.reapproved`` (``schema_hash``): an approver approved that exact definition
  (``sealbox gateway reapprove SERVER TOOL --reason TEXT --key-file KEY``, :func:`reapprove`);
  the tool is unblocked while its definition keeps that hash.

Approval is of a definition (its hash), not of the latest one seen: every definition approved (first
listing, or a re-approval that counts) stays approved (:attr:`PinState.approved_hashes`), so a tool
whose upstream lists an approved definition again (A -> B -> A) is recorded as changed, not blocked.
A gateway judges a tool on the definition its own upstream lists (:attr:`PinState.live`), so two
gateways sharing a store whose upstreams list two approved definitions do not block each other, and a
new definition recorded by one does not block the other; :func:`reapprove` approves the latest recorded
definition, or any recorded one not approved yet by its hash (``--hash``).

A blocked tool's calls are recorded and denied by rule :data:`PIN_RULE`.

**Upgrading older pins.** A ``tools.changed`` written by this Sealbox says ``pin_version: 3``;
one saying 2 recorded version 2 hashes, one without it version 1 hashes. Everything below said of
version 1 and version 2 holds alike of version 2 (:func:`v2_of`) and version 3, and of version 1
and version 3 (the event's ``pin_version`` is the newer version, :func:`older_of` gives the older
part): :meth:`PinState._upgrade_problem` checks an entry against the version that recorded
``before``. When a server's tool was last recorded with a version 1
hash, the next listing is compared on both: if the version 1 hash of what the upstream lists now
equals the recorded one, the tool goes in the event's ``upgraded`` list (``before``: the recorded
version 1 hash, ``after``: the version 2 hash, ``definition``), which is not a change: the tool keeps
its approval (first listing or re-approval of the version 1 definition), carried to the version 2
hash by that entry alone. Otherwise it is an ordinary ``changed`` entry (``before`` version 1,
``after`` version 2) and the tool is blocked. An ``upgraded`` entry counts only when the event says
``pin_version: 2``, ``before`` is a version 1 hash a version 1 ``tools.changed`` recorded for the tool
(nearly always its last recorded definition), and its
``definition`` hashes to ``after`` (version 2) and to ``before`` (version 1, :func:`v1_of`); any
other is kept in :attr:`PinState.upgrade_problems` (``sealbox verify``: ``pin_upgrade_forged``) and
counts as a change: the tool is blocked until re-approved. A tool absent from that first listing, or
changed in it, keeps its version 1 approval: when the upstream lists the approved definition again (its
version 1 hash is the tool's approved one), it goes in ``upgraded`` with ``before`` that approved hash, as
a version 1 Sealbox would have unblocked it. So the rule for ``before`` is: a version 1 hash of that tool
recorded by a version 1 ``tools.changed`` (the approval moves only when it is the approved hash).

A re-approval counts only when it is **signed**, like an approval answer
(:mod:`sealbox.approvals`): by the Ed25519 key of an identity that, as the log held
it at the re-approval's leaf, existed, was enabled and had role ``approver`` or
``admin`` (:data:`~sealbox.approvals.ANSWER_ROLES`), over the RFC 8785 bytes of
:func:`reapproval_fields` — the store's ``origin``, ``server``, ``tool``, the
approved ``schema_hash``, ``change_leaf`` (the leaf of the ``tools.changed`` that
recorded that definition), ``identity``, ``reason`` and ``reapproved_at``. So a
re-approval cannot be moved to another tool, another definition or another store,
and whoever can write the store cannot claim one. An unsigned ``tool.reapproved``
(written by Sealbox before 2026-12-03, or forged) and one that breaks a rule are
kept in :attr:`PinState.reapprovals` with their problem and never unblock a tool;
``sealbox verify`` reports them (:func:`sealbox.verify.check_reapprovals`). Disabling
the identity later does not withdraw a re-approval (it was valid when recorded), unless the
disable or a key rotation declares the key compromised from a point at or before the
re-approval's leaf (``sealbox identities disable|rotate --compromised-since WHEN``): that
re-approval then stops counting (problem ``compromised_key``) and the tool falls back to the
definition approved before it - blocked, where that is not its current one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Iterable

from sealbox.approvals import ANSWER_ROLES
from sealbox.canonical import canonical_bytes, decode, encode
from sealbox.errors import InvalidEventError, SealboxError
from sealbox.events import SYSTEM_RUN_ID, EventDraft, rfc3339_utc, validate_payload
from sealbox.identities import IdentityBook, load_key, sign_fields, verify_fields

__all__ = ["PIN_RULE", "PIN_VERSION", "PinState", "Reapproval", "ReapprovalError", "REAPPROVAL_PROBLEMS",
           "Revocation", "RevocationError", "REVOCATION_PROBLEMS", "revoke", "revocation_fields",
           "UPGRADE_PROBLEMS", "reapprove", "reapproval_fields", "tool_definition", "tool_definition_v1",
           "definition_of", "v1_of", "v2_of", "older_of", "pinned_meta", "PINNED_META_KEYS", "definition_hash"]

#: The rule id a pinning deny names in ``policy.decision``.
PIN_RULE = "sealbox.gateway/tool-changed"


#: The system-run event kinds the pin state is built from (:meth:`PinState.apply`).
PIN_KINDS = ("identity.changed", "tools.changed", "tool.reapproved", "tool.revoked")

#: The version of the pinned definition this Sealbox records (``pin_version`` of ``tools.changed``).
PIN_VERSION = 3

#: The keys of a tool's ``_meta`` that are pinned (pin version 3): what a host acts on when it renders or
#: lets something call the tool. ``ui`` (MCP Apps, extension ``io.modelcontextprotocol/ui``: ``resourceUri``,
#: the ``ui://`` resource the host renders for the tool, and ``visibility``, who may call it), the older
#: ``ui/resourceUri``, and OpenAI's Apps SDK aliases ``openai/outputTemplate`` (the UI template rendered)
#: and ``openai/widgetAccessible`` (whether that UI may call the tool). Any other key (versions,
#: timestamps, trace ids, vendor data) is not pinned: docs/gateway.md, *Tool pinning*.
PINNED_META_KEYS = ("ui", "ui/resourceUri", "openai/outputTemplate", "openai/widgetAccessible")


def _wire(value: Any) -> Any:
    """An SDK model (ToolAnnotations, ToolExecution, Icon) or a list of them as the wire's JSON
    (camelCase keys, unset fields left out); anything else as strict JSON."""
    if isinstance(value, list):
        return [_wire(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return encode(value)


def tool_definition(name: str, description: str | None = None, input_schema: Any = None, *,
                    title: str | None = None, output_schema: Any = None, annotations: Any = None,
                    execution: Any = None, icons: Any = None, meta: Any = None) -> dict[str, Any]:
    """The pinned part of a tool (pin version 3), as strict JSON.

    ``{"pin_version": 3, "name", "input_schema"}`` plus each of ``title``, ``description``,
    ``output_schema``, ``annotations``, ``execution`` and ``icons`` the tool has (not None): an
    absent field is left out, so absent and present (even empty: ``""``, ``{}``) hash differently.
    ``annotations``, ``execution`` and ``icons`` are SDK models (``mcp_types.ToolAnnotations``, …)
    or their wire JSON (camelCase keys: ``{"readOnlyHint": true}``). ``meta`` is the tool's ``_meta``
    (a dict, or None): only its :data:`PINNED_META_KEYS` are kept, as ``"meta"``, and only when it
    has one of them (:func:`pinned_meta`); its other keys are not pinned.
    """
    out: dict[str, Any] = {"pin_version": PIN_VERSION, "name": name, "input_schema": encode(input_schema or {})}
    for key, value in (("title", title), ("description", description), ("output_schema", output_schema),
                       ("annotations", annotations), ("execution", execution), ("icons", icons),
                       ("meta", pinned_meta(meta))):
        if value is not None:
            out[key] = _wire(value)
    return out


def pinned_meta(meta: Any) -> dict[str, Any] | None:
    """The pinned keys (:data:`PINNED_META_KEYS`) of a tool's ``_meta``, or None when it has none of them
    (or is not a dict). A key present with value ``null`` is kept (it is not the key absent)."""
    if not isinstance(meta, dict):
        return None
    kept = {k: meta[k] for k in PINNED_META_KEYS if k in meta}
    return kept or None


def definition_of(tool: Any) -> dict[str, Any]:
    """:func:`tool_definition` of an MCP ``Tool`` (``mcp_types.Tool``) as an upstream listed it."""
    return tool_definition(tool.name, tool.description, tool.input_schema, title=getattr(tool, "title", None),
                           output_schema=getattr(tool, "output_schema", None),
                           annotations=getattr(tool, "annotations", None),
                           execution=getattr(tool, "execution", None), icons=getattr(tool, "icons", None),
                           meta=getattr(tool, "meta", None))


def tool_definition_v1(name: str, description: str | None, input_schema: Any) -> dict[str, Any]:
    """The pinned part of a tool as Sealbox recorded it before 2026-12-04 (pin version 1):
    ``{"name", "description" ("" when absent), "input_schema"}``. Kept to upgrade version 1 pins."""
    return {"name": name, "description": description or "", "input_schema": encode(input_schema or {})}


def v1_of(definition: dict[str, Any]) -> dict[str, Any]:
    """The version 1 definition of a version 2 one (:func:`tool_definition`): what a Sealbox before
    2026-12-04 pinned of the same tool listing. Its ``input_schema`` is taken as it is: it was encoded
    already (:func:`tool_definition`), and encoding it again would escape a schema's ``$``-keys
    (``$schema``, ``$ref``, ``$defs``) a second time (``{"$esc": {"$esc": …}}``), a different hash."""
    schema = definition.get("input_schema")
    return {"name": definition.get("name"), "description": definition.get("description") or "",
            "input_schema": {} if schema is None else schema}


def v2_of(definition: dict[str, Any]) -> dict[str, Any]:
    """The version 2 definition of a version 3 one (:func:`tool_definition`): what a Sealbox before
    2026-12-05 pinned of the same tool listing (everything but ``meta``)."""
    return {**{k: v for k, v in definition.items() if k != "meta"}, "pin_version": 2}


def older_of(definition: dict[str, Any], version: int) -> dict[str, Any]:
    """The definition a Sealbox pinning ``version`` (1 or 2) recorded of the listing ``definition`` (version 3)
    was read from: :func:`v1_of` or :func:`v2_of`."""
    return v1_of(definition) if version == 1 else v2_of(definition)


def definition_hash(definition: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the RFC 8785 bytes of a :func:`tool_definition`."""
    return "sha256:" + hashlib.sha256(canonical_bytes(definition)).hexdigest()


#: Why a recorded ``tool.reapproved`` does not count (:attr:`Reapproval.problem`), in words.
REAPPROVAL_PROBLEMS = {
    "malformed": "its event fails the tool.reapproved schema (it was changed below Sealbox)",
    "unsigned": "it carries no signature (written by a Sealbox before 2026-12-03, or by hand): it does not "
                "count; re-approve the tool with `sealbox gateway reapprove SERVER TOOL --reason TEXT --key-file KEY`",
    "wrong_store": "it was signed for another store (its origin is not this log's): a re-approval copied here",
    "wrong_definition": "the tools.changed at its change_leaf did not record that definition (schema_hash) for that "
                        "tool: it was copied to another tool or definition",
    "unknown_identity": "it names an identity the log did not know at that moment",
    "disabled": "its identity was disabled at that moment",
    "bad_signature": "its signature does not verify with the identity's key as the log held it (forged or altered)",
    "role": "its identity's role may not re-approve (only approver or admin)",
    "principal": "its event's principal is not its identity (it was not written by sealbox gateway reapprove)",
    "compromised_key": "it was signed with its identity's key after the point from which that key was declared "
                       "compromised (`sealbox identities disable|rotate --compromised-since`): the tool is blocked "
                       "again until re-approved by another key",
}


#: Why a recorded ``tool.revoked`` does not count (:attr:`Revocation.problem`), in words: the rules of a
#: re-approval (:data:`REAPPROVAL_PROBLEMS`), said of a revocation.
REVOCATION_PROBLEMS = {
    **{k: v.replace("tool.reapproved", "tool.revoked").replace("re-approve", "revoke")
       for k, v in REAPPROVAL_PROBLEMS.items()},
    "unsigned": "it carries no signature (written by hand or by another program): it does not count; revoke the "
                "definition with `sealbox gateway revoke SERVER TOOL --hash HASH --reason TEXT --key-file KEY`",
    "compromised_key": "it was signed with its identity's key after the point from which that key was declared "
                       "compromised (`sealbox identities disable|rotate --compromised-since`); it still withdraws "
                       "the approval (a revocation can only block a tool: another approver's re-approval undoes it)",
}


#: The revocations that withdraw approvals: those that count, and those signed with a key declared compromised
#: (fail closed: a leaked key can only block a tool with one, which a re-approval by another key undoes).
_STILL_REVOKES = (None, "compromised_key")


#: Why an ``upgraded`` entry of a ``tools.changed`` does not count (:attr:`PinState.upgrade_problems`).
UPGRADE_PROBLEMS = {
    "not_version_2": "its tools.changed does not say pin_version 2 or later",
    "unknown_tool": "the tool has no recorded definition to upgrade",
    "not_version_1": "the tool's last recorded definition is not an older pin version than its tools.changed's, "
                     "and its before hash is no older definition recorded for the tool",
    "before_mismatch": "its before hash is no older definition recorded for the tool",
    "hash_mismatch": "its definition does not hash to its after hash (its pin version) and its before hash (the "
                     "older pin version's part of it)",
}


class ReapprovalError(SealboxError):
    """A re-approval is refused (nothing is recorded).

    Attributes:
        code: ``nothing_pending`` (the tool is unknown or has no unapproved change),
            ``unknown_identity``, ``wrong_key`` (not the identity's current key),
            ``identity_mismatch`` (``identity`` does not name the key's identity), ``disabled``,
            ``role``, ``empty_reason``, or another :data:`REAPPROVAL_PROBLEMS` code.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class RevocationError(SealboxError):
    """A revocation is refused (nothing is recorded).

    Attributes:
        code: ``unknown_tool`` (no definition of the tool is recorded), ``never_recorded`` (that hash was
            never recorded for the tool), ``not_approved`` (the definition is not approved: nothing to
            withdraw), ``already_revoked``, ``bad_hash`` (not ``sha256:`` and 64 hex digits),
            ``unknown_identity``, ``wrong_key``, ``identity_mismatch``, ``disabled``, ``role``,
            ``empty_reason``, or another :data:`REVOCATION_PROBLEMS` code.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class Revocation:
    """One recorded ``tool.revoked`` and whether it counts.

    Attributes:
        leaf_index: where it is in the log.
        server, tool, identity, schema_hash, reason, revoked_at: as its payload says (any type in a
            malformed one).
        problem: None when it counts, else a :data:`REVOCATION_PROBLEMS` code.
    """

    leaf_index: int
    server: Any
    tool: Any
    identity: Any
    schema_hash: Any
    reason: Any
    revoked_at: Any
    problem: str | None


def revocation_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields of a ``tool.revoked`` payload its signature covers: ``origin``, ``server``, ``tool``,
    ``schema_hash``, ``change_leaf``, ``identity``, ``reason``, ``revoked_at``."""
    return {k: payload.get(k) for k in ("origin", "server", "tool", "schema_hash", "change_leaf", "identity",
                                        "reason", "revoked_at")}


@dataclass(frozen=True)
class Reapproval:
    """One recorded ``tool.reapproved`` and whether it counts.

    Attributes:
        leaf_index: where it is in the log.
        server, tool, identity, schema_hash: as its payload says (any type in a malformed one).
        problem: None when it counts, else a :data:`REAPPROVAL_PROBLEMS` code.
    """

    leaf_index: int
    server: Any
    tool: Any
    identity: Any
    schema_hash: Any
    problem: str | None


def reapproval_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """The fields of a ``tool.reapproved`` payload its signature covers: ``origin``, ``server``,
    ``tool``, ``schema_hash``, ``change_leaf``, ``identity``, ``reason``, ``reapproved_at``."""
    return {k: payload.get(k) for k in ("origin", "server", "tool", "schema_hash", "change_leaf", "identity",
                                        "reason", "reapproved_at")}


@dataclass
class PinState:
    """Known and approved definition hashes per ``(server, tool)``, rebuilt from recorded events.

    Attributes:
        known: the hash of the latest recorded definition of each listed tool.
        approved: the hash last approved (first seen, or re-approved) for each tool.
        approved_hashes: every hash approved for each tool (its first listing, and each re-approval
            that counts): a definition stays approved when a later one is approved too, so a tool
            whose upstream lists an approved definition again (A -> B -> A), or two gateways whose
            upstreams list two approved definitions, is not blocked.
        recorded_hashes: every definition hash recorded for each tool -> the leaf of the latest
            ``tools.changed`` that recorded it (what a re-approval's ``change_leaf`` names).
        servers: servers with at least one recorded listing.
        cursor: how many log entries have been read (for :meth:`refresh`).
        origin: the store's log origin (re-approvals signed for another origin do not count).
        known_leaf: the leaf of the ``tools.changed`` that recorded each tool's latest definition
            (absent for a change this process observed and has not read back yet).
        book: the store's identities, replayed from the same events.
        reapprovals: every ``tool.reapproved`` read, with whether it counts.
        revocations: every ``tool.revoked`` read, with whether it counts. A revocation that counts (or
            whose only problem is ``compromised_key``: fail closed) withdraws every approval of its
            definition recorded before it (first listing, re-approvals); a re-approval recorded after it
            approves the definition again (log order decides).
        live: the hash of each tool as this process last saw its upstream list it (:meth:`observe`;
            empty outside a gateway).
        versions: the pin version (1, 2 or 3) of each tool's latest recorded definition.
        upgrade_problems: ``(leaf_index, server, tool, problem)`` for each ``upgraded`` entry that does
            not count (an :data:`UPGRADE_PROBLEMS` code); it was applied as a change.
    """

    known: dict[tuple[str, str], str] = field(default_factory=dict)
    approved: dict[tuple[str, str], str] = field(default_factory=dict)
    approved_hashes: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    recorded_hashes: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    definitions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    servers: set[str] = field(default_factory=set)
    cursor: int = 0
    origin: str = ""
    known_leaf: dict[tuple[str, str], int] = field(default_factory=dict)
    book: IdentityBook = field(default_factory=IdentityBook)
    reapprovals: list[Reapproval] = field(default_factory=list)
    live: dict[tuple[str, str], str] = field(default_factory=dict)
    versions: dict[tuple[str, str], int] = field(default_factory=dict)
    upgrade_problems: list[tuple[int | None, str, str, str]] = field(default_factory=list)
    #: (server, tool, hash) -> pin version of every definition an older ``tools.changed`` (version 1 or 2)
    #: recorded: an approval of one of them is an older approval, which an ``upgraded`` entry may carry to
    #: a newer version (:meth:`_old_approved`)
    _old_hashes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    _recorded: dict[int, dict[tuple[str, str], str]] = field(default_factory=dict)
    #: (server, tool) -> [(hash, index in reapprovals or None for a first listing)], in log order: what
    #: approved it, so that a re-approval withdrawn by a later compromise record falls back to the one before
    _sources: dict[tuple[str, str], list[tuple[str, int | None]]] = field(default_factory=dict)
    revocations: list[Revocation] = field(default_factory=list)
    #: (server, tool) -> [(hash, index in revocations)], in log order (a hash carried by an ``upgraded`` entry
    #: as :attr:`_sources` is)
    _revoked: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    #: the system run's newest run_seq at the last :meth:`refresh` (SQLite: Reader.run_head_seq), None unknown
    _system_seq: int | None = None
    #: (server, tool, hash) -> the definition recorded with that hash (for :meth:`nearest_approved`)
    _defs: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, store: Any) -> "PinState":
        """Read the pin state from a store's system run."""
        state = cls(origin=getattr(store, "origin", "") or "")
        state.cursor = store.size()
        state.apply(e for e in store.read_run(SYSTEM_RUN_ID) if e.leaf_index < state.cursor)
        return state

    @classmethod
    def from_reader(cls, reader: Any, origin: str) -> "PinState":
        """The pin state as a write transaction's reader sees it (``reader.events``)."""
        state = cls(origin=origin)
        state.cursor = reader.size()
        state.apply(reader.events(list(PIN_KINDS), run_id=SYSTEM_RUN_ID))
        return state

    def apply(self, events: Iterable[Any]) -> None:
        """Fold ``identity.changed``, ``tools.changed``, ``tool.reapproved`` and ``tool.revoked`` events of
        the system run (in log order; objects with ``kind``, ``payload``, ``leaf_index``, ``principal``) into
        the state. A re-approval unblocks its tool only when :meth:`check_reapproval` finds no problem; a
        revocation withdraws the approvals of its definition recorded before it only when
        :meth:`check_revocation` finds none."""
        for e in events:
            p = e.payload
            if e.kind == "tool.revoked":
                problem = self.check_revocation(p, e.leaf_index, e.principal)
                d = p if isinstance(p, dict) else {}
                self.revocations.append(Revocation(e.leaf_index, d.get("server"), d.get("tool"), d.get("identity"),
                                                   d.get("schema_hash"), d.get("reason"), d.get("revoked_at"), problem))
                if problem in _STILL_REVOKES:
                    key = (p["server"], p["tool"])
                    self._revoked.setdefault(key, []).append((p["schema_hash"], len(self.revocations) - 1))
                    self._recount(key)
                continue
            if e.kind == "tool.reapproved":
                problem = self.check_reapproval(p, e.leaf_index, e.principal)
                d = p if isinstance(p, dict) else {}
                self.reapprovals.append(Reapproval(e.leaf_index, d.get("server"), d.get("tool"), d.get("identity"),
                                                   d.get("schema_hash"), problem))
                if problem is None:
                    key = (p["server"], p["tool"])
                    self._sources.setdefault(key, []).append((p["schema_hash"], len(self.reapprovals) - 1))
                    self._recount(key)
            elif e.kind == "tools.changed":
                self._apply_change(p, e.leaf_index)
            elif e.kind == "identity.changed" and isinstance(p, dict):
                name = p.get("name")
                before = len(self.book.compromise_records().get(name, ())) if isinstance(name, str) else 0
                self.book.apply(e.leaf_index, p)
                if isinstance(name, str) and len(self.book.compromise_records().get(name, ())) > before:
                    self._withdraw_compromised(name)

    def _withdraw_compromised(self, name: str) -> None:
        """Re-check the counted re-approvals by ``name`` after a compromise record: those signed in the
        window get problem ``compromised_key`` and their tools fall back to the previous approval."""
        touched = set()
        for i, r in enumerate(self.reapprovals):
            if r.problem is None and r.identity == name and self.book.compromised_at(name, r.leaf_index) is not None:
                self.reapprovals[i] = replace(r, problem="compromised_key")
                touched.add((r.server, r.tool))
        for i, v in enumerate(self.revocations):
            if v.problem is None and v.identity == name and self.book.compromised_at(name, v.leaf_index) is not None:
                self.revocations[i] = replace(v, problem="compromised_key")
                touched.add((v.server, v.tool))
        for key in touched:
            self._recount(key)

    def _recount(self, key: tuple[str, str]) -> None:
        """Rebuild :attr:`approved_hashes` and :attr:`approved` of a tool from what approved it (first
        listings, and re-approvals that still count), in log order, less what a revocation that counts
        recorded after it withdrew."""
        revoked = self._revoked_leaves(key)
        valid = [h for h, i in self._sources.get(key, ())
                 if (i is None and h not in revoked)  # a first listing precedes every revocation of its definition
                 or (i is not None and self.reapprovals[i].problem is None
                     and self.reapprovals[i].leaf_index > revoked.get(h, -1))]
        if valid:
            self.approved_hashes[key] = set(valid)
            self.approved[key] = valid[-1]
        else:
            self.approved_hashes.pop(key, None)
            self.approved.pop(key, None)

    def _revoked_leaves(self, key: tuple[str, str]) -> dict[str, int]:
        """hash -> the leaf of the latest revocation of it that counts, for one tool."""
        out: dict[str, int] = {}
        for h, j in self._revoked.get(key, ()):
            v = self.revocations[j]
            if v.problem in _STILL_REVOKES:
                out[h] = max(out.get(h, -1), v.leaf_index)
        return out

    def revocation(self, server: str, tool: str, digest: str | None = None) -> Revocation | None:
        """The revocation that withdrew the approval of ``digest`` (default: the definition the tool is judged
        on, :meth:`current`), when that definition is not approved and a revocation that counts names it (the
        latest), else None: what a blocked tool's denial and listing name."""
        key = (server, tool)
        digest = self.current(server, tool) if digest is None else digest
        if digest is None or digest in self.approved_hashes.get(key, ()):
            return None
        found = None
        for h, j in self._revoked.get(key, ()):
            if h == digest and self.revocations[j].problem in _STILL_REVOKES:
                found = self.revocations[j]
        return found

    def check_revocation(self, payload: Any, leaf_index: int, principal: Any) -> str | None:
        """Why a ``tool.revoked`` payload recorded at ``leaf_index`` does not count (a
        :data:`REVOCATION_PROBLEMS` code), or None: the rules of a re-approval (:meth:`check_reapproval`),
        over :func:`revocation_fields`."""
        return self._check_signed("tool.revoked", revocation_fields, payload, leaf_index, principal)

    def check_reapproval(self, payload: Any, leaf_index: int, principal: Any) -> str | None:
        """Why a ``tool.reapproved`` payload recorded at ``leaf_index`` does not count (a
        :data:`REAPPROVAL_PROBLEMS` code), or None; identities and tool changes as folded so far."""
        return self._check_signed("tool.reapproved", reapproval_fields, payload, leaf_index, principal)

    def _check_signed(self, kind: str, signed: Any, payload: Any, leaf_index: int, principal: Any) -> str | None:
        try:
            validate_payload(kind, payload)
        except InvalidEventError:
            return "malformed"
        p = payload
        if "signature" not in p:
            return "unsigned"
        if p.get("origin") != self.origin:
            return "wrong_store"
        recorded = self._recorded.get(p.get("change_leaf"))  # type: ignore[arg-type]
        if recorded is None or p["change_leaf"] >= leaf_index or \
                recorded.get((p["server"], p["tool"])) != p.get("schema_hash"):
            return "wrong_definition"
        who = self.book.get(p["identity"], leaf_index)
        if who is None:
            return "unknown_identity"
        if who.disabled:
            return "disabled"
        if p.get("key_id") != who.key_id or not verify_fields(who.public_key, signed(p), p["signature"]):
            return "bad_signature"
        if who.role not in ANSWER_ROLES:
            return "role"
        if principal != who.name:
            return "principal"
        if self.book.compromised_at(who.name, leaf_index) is not None:
            return "compromised_key"
        return None

    def _apply_change(self, p: dict[str, Any], leaf_index: int | None = None) -> None:
        if not isinstance(p, dict) or not isinstance(p.get("server"), str):
            return  # malformed (verify reports it): never trusted
        server = p["server"]
        version = p["pin_version"] if type(p.get("pin_version")) is int else 1
        # trusted on first use: only the first listing of a server ever recorded (a later
        # ``first_seen`` one, appended by another writer, would approve changed tools)
        first_seen = bool(p.get("first_seen")) and server not in self.servers
        self.servers.add(server)
        recorded: dict[tuple[str, str], str] = {}
        # a definition read from the log is as the store wrote it: encoded once more (a schema's escaped
        # "$"-keys escaped again); decoded, it is the definition its hash was computed over
        as_hashed = decode if leaf_index is not None else (lambda d: d)
        for item in _items(p.get("added")):
            key = (server, item["tool"])
            if version < PIN_VERSION:
                self._old_hashes[(*key, item["hash"])] = version
            self.known[key] = recorded[key] = item["hash"]
            self.versions[key] = version
            self.definitions[key] = as_hashed(item.get("definition") or {})
            self._defs[(*key, self.known[key])] = self.definitions[key]
            if first_seen:
                self._sources.setdefault(key, []).append((item["hash"], None))
                self._recount(key)
        for item in _items(p.get("changed"), "after"):
            key = (server, item["tool"])
            if version < PIN_VERSION:
                self._old_hashes[(*key, item["after"])] = version
            self.known[key] = recorded[key] = item["after"]
            self.versions[key] = version
            self.definitions[key] = as_hashed(item.get("definition") or {})
            self._defs[(*key, self.known[key])] = self.definitions[key]
        for item in _items(p.get("upgraded"), "after"):
            key = (server, item["tool"])
            if self.known.get(key) == item["after"] and self.versions.get(key) == version and version > 1:
                recorded[key] = item["after"]  # applied already (read back after observe): nothing changes
                continue
            problem = self._upgrade_problem(key, {**item, "definition": as_hashed(item.get("definition"))}, version)
            if problem is None:
                before, after = item["before"], item["after"]
                # an approval of ``before`` is carried to ``after`` by this entry alone
                self._sources[key] = [(after if h == before else h, i) for h, i in self._sources.get(key, ())]
                if key in self._revoked:  # and so is a revocation of it
                    self._revoked[key] = [(after if h == before else h, j) for h, j in self._revoked[key]]
                self._recount(key)
            else:
                self.upgrade_problems.append((leaf_index, server, item["tool"], problem))
            if version < PIN_VERSION:  # a version 2 hash a version 1 pin was upgraded to: itself an older hash
                self._old_hashes[(*key, item["after"])] = version
            self.known[key] = recorded[key] = item["after"]
            self.versions[key] = version
            self.definitions[key] = as_hashed(item["definition"]) if isinstance(item.get("definition"), dict) else {}
            self._defs[(*key, item["after"])] = self.definitions[key]
        for item in _items(p.get("removed")):
            self.known.pop((server, item["tool"]), None)
            self.known_leaf.pop((server, item["tool"]), None)
            self.versions.pop((server, item["tool"]), None)
        if leaf_index is not None:
            self._recorded[leaf_index] = recorded
            for key, digest in recorded.items():
                self.known_leaf[key] = leaf_index
                self.recorded_hashes.setdefault(key, {})[digest] = leaf_index
        else:
            for key in recorded:
                self.known_leaf.pop(key, None)

    def _upgrade_problem(self, key: tuple[str, str], item: dict[str, Any], version: int) -> str | None:
        """Why an ``upgraded`` entry does not count (an :data:`UPGRADE_PROBLEMS` code), or None."""
        if version < 2:
            return "not_version_2"
        before = item.get("before")
        old = self._old_hashes.get((*key, before)) if isinstance(before, str) else None
        if old is None or old >= version:  # an older definition recorded for the tool: it may be the last
            # recorded one, or one approved then absent or changed at the upgrade (it does not depend on
            # approvals, which a bundle holds only for the tools its calls name)
            if key not in self.known:
                return "unknown_tool"
            if self.versions.get(key, version) >= version:
                return "not_version_1"
            if before != self.known[key]:
                return "before_mismatch"
            old = self.versions[key]
        d = item.get("definition")
        try:
            ok = isinstance(d, dict) and d.get("pin_version") == version and isinstance(d.get("name"), str) \
                and definition_hash(d) == item["after"] and definition_hash(older_of(d, old)) == item["before"]
        except Exception:  # noqa: BLE001 - a definition that cannot be encoded is no definition
            ok = False
        return None if ok else "hash_mismatch"

    def _old_approved(self, key: tuple[str, str], definition: dict[str, Any]) -> str | None:
        """The tool's approved hash when it is an older one (a definition a version 1 or 2 ``tools.changed``
        recorded) and the older part of ``definition`` (:func:`older_of`) hashes to it, else None: a tool
        absent or changed when its server's pins were upgraded keeps that approval until the upstream lists
        that definition again."""
        for digest in sorted(self.approved_hashes.get(key, ())):
            old = self._old_hashes.get((*key, digest))
            if old is not None and definition_hash(older_of(definition, old)) == digest:
                return digest
        return None

    def refresh(self, store: Any) -> None:
        """Read the pin events (:data:`PIN_KINDS`) appended since the last load or refresh (e.g. a re-approval
        or a revocation by the CLI). On SQLite, when the system run's newest ``run_seq`` is what it was at the
        last refresh, nothing more is read: one indexed query (≈ 18 µs measured on a 2-core VM, beside a
        recorded call's 370 µs with ``durability: fast``), which the gateway pays before every call."""
        reader = store.reader() if hasattr(store, "reader") else None
        head = getattr(reader, "run_head_seq", None)
        seq = head(SYSTEM_RUN_ID) if head is not None else None
        if seq is not None and seq == self._system_seq:
            return  # nothing appended to the system run since (one indexed query: a gateway does this per call)
        size = store.size()
        if size > self.cursor:
            if reader is not None:  # only the system run's pin events, through the (run, kind) index
                events = reader.events(list(PIN_KINDS), run_id=SYSTEM_RUN_ID, from_leaf=self.cursor, before_leaf=size)
            else:
                events = [e for e in store.read_range(self.cursor, size) if e.run_id == SYSTEM_RUN_ID]
            self.cursor = size
            self.apply(events)
        self._system_seq = seq

    def blocked_tools(self) -> set[tuple[str, str]]:
        """Every ``(server, tool)`` that :meth:`blocked` finds blocked."""
        return {key for table in (self.known, self.live) for key in table if self.blocked(*key)}

    def current(self, server: str, tool: str) -> str | None:
        """The definition hash the tool is judged on: the one this process last saw its upstream list
        (:attr:`live`), else (outside a gateway, or a tool its upstream does not list) the latest
        recorded one (:attr:`known`); None when neither."""
        key = (server, tool)
        return self.live.get(key, self.known.get(key))

    def summary(self, server: str | None = None, tool: str | None = None) -> list[dict[str, Any]]:
        """Every recorded definition of each tool (of ``server``, and named ``tool``, when given) and what
        approved it: what ``sealbox gateway pins`` shows.

        Returns:
            One dict per ``(server, tool)``, sorted: ``server``, ``tool``, ``latest`` (the latest recorded
            hash, None when the latest listing removed the tool), ``latest_leaf``, ``latest_approved``
            (bool), ``definitions``: one per recorded hash, newest recording first: ``hash``, ``leaf`` (the
            latest ``tools.changed`` recording it), ``approved`` (bool), ``approvals``: ``{"by":
            "first_listing" | IDENTITY, "leaf": int | None}`` for each approval that counts, and
            ``withdrawn``: the same for re-approvals that stopped counting (key declared compromised).
        """
        out = []
        for key in sorted(self.recorded_hashes):
            if (server is not None and key[0] != server) or (tool is not None and key[1] != tool):
                continue
            ok = self.approved_hashes.get(key, ())
            defs = []
            for digest, leaf in sorted(self.recorded_hashes[key].items(), key=lambda x: -x[1]):
                approvals, withdrawn = [], []
                for h, i in self._sources.get(key, ()):
                    if h != digest:
                        continue
                    if i is None:
                        approvals.append({"by": "first_listing", "leaf": self._first_leaf(key, digest)})
                    else:
                        r = self.reapprovals[i]
                        (approvals if r.problem is None else withdrawn).append({"by": r.identity, "leaf": r.leaf_index})
                revoked = [{"by": v.identity, "leaf": v.leaf_index, "at": v.revoked_at, "reason": v.reason}
                           for h, j in self._revoked.get(key, ()) if h == digest
                           for v in (self.revocations[j],) if v.problem in _STILL_REVOKES]
                defs.append({"hash": digest, "leaf": leaf, "approved": digest in ok, "approvals": approvals,
                             "withdrawn": withdrawn, "revoked": revoked})
            latest = self.known.get(key)
            out.append({"server": key[0], "tool": key[1], "latest": latest, "latest_leaf": self.known_leaf.get(key),
                        "latest_approved": latest is not None and latest in ok, "definitions": defs})
        return out

    def _first_leaf(self, key: tuple[str, str], digest: str) -> int | None:
        """The leaf of the first listing (``first_seen``) that recorded ``digest`` for the tool."""
        for leaf in sorted(self._recorded):
            if self._recorded[leaf].get(key) == digest:
                return leaf
        return None

    def unapproved(self, server: str, tool: str) -> list[tuple[str, int]]:
        """``(hash, leaf)`` of every definition recorded for the tool and never approved (or whose approval
        stopped counting), newest first; ``leaf`` is the latest ``tools.changed`` that recorded it."""
        key = (server, tool)
        ok = self.approved_hashes.get(key, ())
        return sorted(((h, leaf) for h, leaf in self.recorded_hashes.get(key, {}).items() if h not in ok),
                      key=lambda x: -x[1])

    def compromised_reapproval(self, server: str, tool: str) -> Reapproval | None:
        """The newest re-approval of the tool's pending definition that stopped counting because its key
        was declared compromised (problem ``compromised_key``), or None: what a blocked tool's denial
        and listing name so that an operator sees why a tool that ran is blocked again."""
        pending = self.current(server, tool) if self.blocked(server, tool) else None
        for r in reversed(self.reapprovals):
            if (r.server, r.tool) == (server, tool) and r.problem == "compromised_key" and r.schema_hash == pending:
                return r
        return None

    def rests_on_reapproval(self, server: str, tool: str) -> bool:
        """Whether the tool is unblocked by a re-approval (not its first listing): the only case a
        later compromise record (``--compromised-since``) can block it again. (The gateway used this to
        read the log's new events before such a call only; since revocations (:func:`revoke`) any
        approved definition can be withdrawn, so it reads them before every call of a pinned tool.)"""
        key = (server, tool)
        if self.blocked(server, tool):
            return False
        digest = self.current(server, tool)
        return digest is not None and all(i is not None for h, i in self._sources.get(key, ()) if h == digest)

    def blocked(self, server: str, tool: str) -> bool:
        """True when the definition the tool is judged on (:meth:`current`) is not an approved one.

        A gateway is judged on what its upstream lists (:attr:`live`): a ``tools.changed`` appended by
        another writer that records an approved definition, or removes the tool, does not unblock what
        this gateway sees changed, and one that records a new definition (another gateway's upstream,
        say another version of the server) does not block this gateway while it serves an approved one.
        Outside a gateway, or for a tool its upstream does not list, the latest recorded definition."""
        digest = self.current(server, tool)
        return digest is not None and digest not in self.approved_hashes.get((server, tool), ())

    def observe(self, server: str, tools: dict[str, dict[str, Any]]) -> EventDraft | None:
        """Compare a listing (``{name: tool_definition}``, version 3 definitions) with the recorded state.

        A tool last recorded with an older pin (version 1 or 2) whose older hash (:func:`older_of`) is
        unchanged goes in ``upgraded`` (not a change); one whose older hash differs in ``changed``. A
        tool whose approved hash is an older one equal to the older hash of what is listed goes in
        ``upgraded`` too (``before``: that approved hash), whether it was absent or changed.

        An ``added`` or ``changed`` entry whose definition is not approved while the tool has an approved
        one also carries ``approved``: ``{"hash", "fields"}``, the nearest approved definition
        (:meth:`nearest_approved`) and the fields that differ from it, unless that is ``before`` (``fields``
        is against ``before``, the last recorded one, which may be another gateway's listing or a
        definition never approved).

        Returns:
            The ``tools.changed`` draft to record (system run, ``pin_version: 3``), or None when
            nothing changed and nothing was upgraded. The state is updated as if it were recorded.
        """
        hashes = {name: definition_hash(d) for name, d in tools.items()}
        self.live = {k: v for k, v in self.live.items() if k[0] != server}
        self.live.update({(server, name): digest for name, digest in hashes.items()})
        if server not in self.servers:
            payload = {"server": server, "pin_version": PIN_VERSION, "first_seen": True, "removed": [], "changed": [],
                       "added": [{"tool": n, "hash": hashes[n], "definition": tools[n]} for n in sorted(tools)]}
        else:
            before = {t: h for (s, t), h in self.known.items() if s == server}
            changed: list[dict[str, Any]] = []
            upgraded: list[dict[str, Any]] = []
            for n in sorted(hashes):  # a tool whose approval is an older one, listed as that definition again
                old = self._old_approved((server, n), tools[n])
                if before.get(n) != hashes[n] and old is not None and old != before.get(n):
                    upgraded.append({"tool": n, "before": old, "after": hashes[n], "definition": tools[n]})
            again = {u["tool"] for u in upgraded}
            added = [{"tool": n, "hash": hashes[n], "definition": tools[n]}
                     for n in sorted(set(hashes) - set(before) - again)]
            removed = [{"tool": n, "hash": before[n]} for n in sorted(set(before) - set(hashes))]
            for n in sorted((set(before) & set(hashes)) - again):
                old = self.definitions.get((server, n))
                version = self.versions.get((server, n), PIN_VERSION)
                if version < PIN_VERSION:
                    older = older_of(tools[n], version)
                    if before[n] == definition_hash(older):
                        upgraded.append({"tool": n, "before": before[n], "after": hashes[n], "definition": tools[n]})
                    else:
                        changed.append({"tool": n, "before": before[n], "after": hashes[n],
                                        "fields": _fields(old, older), "definition": tools[n]})
                elif before[n] != hashes[n]:
                    changed.append({"tool": n, "before": before[n], "after": hashes[n], "fields": _fields(old, tools[n]),
                                    "definition": tools[n]})
            if not (added or removed or changed or upgraded):
                return None
            payload = {"server": server, "pin_version": PIN_VERSION, "added": added, "removed": removed,
                       "changed": changed}
            if upgraded:
                payload["upgraded"] = sorted(upgraded, key=lambda u: u["tool"])
        for entry in (*payload["added"], *payload["changed"]):  # a new definition: what an approver compares
            digest = entry.get("after", entry.get("hash"))
            if digest not in self.approved_hashes.get((server, entry["tool"]), ()):
                near = self.nearest_approved(server, entry["tool"], tools[entry["tool"]])
                if near is not None and near[0] != entry.get("before"):  # else ``fields`` says it already
                    entry["approved"] = {"hash": near[0], "fields": near[1]}
        self._apply_change(payload)
        return EventDraft("tools.changed", payload, run_id=SYSTEM_RUN_ID, principal="sealbox")

    def nearest_approved(self, server: str, tool: str, definition: dict[str, Any]) -> tuple[str, list[str]] | None:
        """The approved definition of the tool (of this pin version) that differs from ``definition`` in
        the fewest fields, the most recently approved of those, as ``(hash, fields that differ)``; None
        when the tool has no approved definition of this pin version recorded."""
        key = (server, tool)
        order = {h: n for n, (h, _) in enumerate(self._sources.get(key, ()))}  # later approvals win ties
        best: tuple[int, int, str, list[str]] | None = None
        for digest in self.approved_hashes.get(key, ()):
            old = self._defs.get((*key, digest))
            if not old or old.get("pin_version") != definition.get("pin_version"):
                continue
            diff = _fields(old, definition)
            rank = (len(diff), -order.get(digest, -1), digest, diff)
            if best is None or rank < best:
                best = rank
        return None if best is None else (best[2], best[3])

    def pending(self, server: str, tool: str) -> str | None:
        """The hash a re-approval of this tool would approve (its latest recorded definition), or
        None when that definition is approved or the tool is unknown."""
        key = (server, tool)
        return self.known[key] if key in self.known and self.known[key] not in self.approved_hashes.get(key, ()) \
            else None


def _items(value: Any, digest: str = "hash") -> list[dict[str, Any]]:
    """The well-formed entries of a ``tools.changed`` list (a tool name and a hash)."""
    return [i for i in value if isinstance(i, dict) and isinstance(i.get("tool"), str)
            and isinstance(i.get(digest), str)] if isinstance(value, list) else []




def _utc_now() -> str:
    return rfc3339_utc(datetime.now(timezone.utc))


def reapprove(store: Any, server: str, tool: str, reason: str, key_file: Any, *,
              identity: str | None = None, schema_hash: str | None = None) -> dict[str, Any]:
    """Re-approve a definition of a changed tool: sign and record ``tool.reapproved``.

    Checked and written in one transaction. Without ``schema_hash`` the definition approved is the
    tool's latest recorded one, which must not be approved yet; with it, that definition, which must
    have been recorded for the tool (``tools.changed``) and not be approved: e.g. the one another
    gateway on the store serves while a later listing (another gateway's) recorded an approved one.

    Args:
        store: an open, writable store.
        server, tool: the upstream's id and the tool's name as the upstream lists it.
        reason: why (recorded and signed); must not be blank.
        key_file: the private key file of an enabled identity with role ``approver`` or ``admin``
            (its name is the identity recorded), or a :class:`~sealbox.ledger.checkpoint.Signer`.
        identity: if given, the identity the key must belong to (a check; nothing else).
        schema_hash: if given, the ``sha256:…`` hash of the definition to approve
            (:meth:`PinState.unapproved` lists the candidates).

    Returns:
        The recorded payload (``server``, ``tool``, ``schema_hash``, ``change_leaf``, ``origin``,
        ``identity``, ``reason``, ``reapproved_at``, ``signature``, ``key_id``).

    Raises:
        ReapprovalError: see its ``code``; nothing is recorded.
        IdentityError: the key file is missing, unreadable, too open or not a key.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReapprovalError("empty_reason", "a re-approval needs a reason (--reason TEXT): it is recorded and signed")
    signer = key_file if hasattr(key_file, "verifier") else load_key(key_file)
    if identity is not None and identity != signer.name:
        raise ReapprovalError("identity_mismatch", f"the key file is identity {signer.name!r}'s, not {identity!r}")
    origin = getattr(store, "origin", "") or ""
    box: list[dict[str, Any]] = []

    def build(reader: Any) -> list[EventDraft]:
        pins = PinState.from_reader(reader, origin)
        waiting = dict(pins.unapproved(server, tool))
        if schema_hash is not None:
            pending, change_leaf = schema_hash, waiting.get(schema_hash)
            if change_leaf is None:
                key = (server, tool)
                state = ("is approved already" if schema_hash in pins.approved_hashes.get(key, ()) else
                         "was never recorded for it" if (server, tool) in pins.recorded_hashes else
                         "cannot be approved: the tool is not known")
                raise ReapprovalError("nothing_pending", f"definition {_shown_hash(schema_hash)} of {server}/{tool} "
                                      f"{state}; nothing to re-approve{_others(waiting)}")
        else:
            pending = pins.pending(server, tool)
            change_leaf = pins.known_leaf.get((server, tool))
            if pending is None or change_leaf is None:
                if (server, tool) not in pins.recorded_hashes:
                    raise ReapprovalError("nothing_pending", f"{server}/{tool} is not known; nothing to re-approve")
                if waiting:
                    raise ReapprovalError("nothing_pending", f"{server}/{tool}'s latest recorded definition is approved"
                                          f"{_others(waiting)}")
                raise ReapprovalError("nothing_pending", f"{server}/{tool} has no unapproved change; nothing to "
                                      "re-approve")
        who = pins.book.get(signer.name)
        if who is None:
            from sealbox.identities import unknown_signer

            raise ReapprovalError("unknown_identity", unknown_signer(signer.name))
        if who.public_key != signer.verifier.vkey:
            raise ReapprovalError("wrong_key", f"this key is not {who.name}'s current key (it was rotated, or is not theirs)")
        if who.disabled:
            raise ReapprovalError("disabled", f"identity {who.name!r} is disabled: it cannot re-approve a tool")
        if who.role not in ANSWER_ROLES:
            raise ReapprovalError("role", f"identity {who.name!r} has role {who.role}: only an approver or an admin "
                                  "may re-approve a tool")
        payload = {"server": server, "tool": tool, "schema_hash": pending, "change_leaf": change_leaf,
                   "origin": origin, "identity": who.name, "reason": reason, "reapproved_at": _utc_now()}
        payload["signature"] = sign_fields(signer, reapproval_fields(payload))
        payload["key_id"] = who.key_id
        problem = pins.check_reapproval(payload, reader.size(), who.name)
        if problem is not None:  # pragma: no cover - every rule is checked above
            raise ReapprovalError(problem, f"re-approval refused: {REAPPROVAL_PROBLEMS[problem]}")
        box.append(payload)
        return [EventDraft("tool.reapproved", payload, run_id=SYSTEM_RUN_ID, principal=who.name)]

    store.append_with(build)
    return box[-1]


def revoke(store: Any, server: str, tool: str, schema_hash: str, reason: str, key_file: Any, *,
           identity: str | None = None) -> dict[str, Any]:
    """Withdraw the approval of one definition of a tool: sign and record ``tool.revoked``.

    Checked and written in one transaction. The definition (``schema_hash``) must have been recorded for
    the tool (``tools.changed``) and be approved now (by its first listing or a re-approval). From the
    revocation on, it is not approved: a gateway whose upstream lists it denies the tool's calls (rule
    :data:`PIN_RULE`; a running gateway reads the revocation before its next call of the tool) until a
    re-approval recorded later (:func:`reapprove` with ``schema_hash``) approves it again. Signed like a
    re-approval: by an enabled identity with role ``approver`` or ``admin``, over :func:`revocation_fields`.

    Args:
        store: an open, writable store.
        server, tool: the upstream's id and the tool's name as the upstream lists it.
        schema_hash: the ``sha256:…`` hash of the definition (``sealbox gateway pins`` lists them).
        reason: why (recorded and signed); must not be blank.
        key_file: the private key file of an enabled identity with role ``approver`` or ``admin``, or a
            :class:`~sealbox.ledger.checkpoint.Signer`.
        identity: if given, the identity the key must belong to (a check; nothing else).

    Returns:
        The recorded payload (``server``, ``tool``, ``schema_hash``, ``change_leaf``, ``origin``,
        ``identity``, ``reason``, ``revoked_at``, ``signature``, ``key_id``).

    Raises:
        RevocationError: see its ``code``; nothing is recorded.
        IdentityError: the key file is missing, unreadable, too open or not a key.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise RevocationError("empty_reason", "a revocation needs a reason (--reason TEXT): it is recorded and signed")
    if not isinstance(schema_hash, str) or not _HASH.fullmatch(schema_hash):
        raise RevocationError("bad_hash", f"--hash {_shown_hash(schema_hash)!r} is not a definition hash "
                              "(sha256: and 64 lowercase hex digits; `sealbox gateway pins` lists them)")
    signer = key_file if hasattr(key_file, "verifier") else load_key(key_file)
    if identity is not None and identity != signer.name:
        raise RevocationError("identity_mismatch", f"the key file is identity {signer.name!r}'s, not {identity!r}")
    origin = getattr(store, "origin", "") or ""
    box: list[dict[str, Any]] = []

    def build(reader: Any) -> list[EventDraft]:
        pins = PinState.from_reader(reader, origin)
        key = (server, tool)
        recorded = pins.recorded_hashes.get(key)
        if recorded is None:
            what = (f"server {server!r} has no tool {tool!r} recorded" if server in pins.servers else
                    f"server {server!r} is not known (no gateway has listed it on this store)")
            raise RevocationError("unknown_tool", f"{what}; nothing to revoke")
        if schema_hash not in recorded:
            listed = ", ".join(h for h, _ in sorted(recorded.items(), key=lambda x: -x[1]))
            raise RevocationError("never_recorded", f"definition {schema_hash} was never recorded for {server}/{tool}; "
                                  f"recorded: {listed}")
        if schema_hash not in pins.approved_hashes.get(key, ()):
            done = pins.revocation(server, tool, schema_hash)
            if done is not None:
                raise RevocationError("already_revoked", f"definition {schema_hash} of {server}/{tool} is revoked "
                                      f"already (by {done.identity} at {done.revoked_at}, leaf {done.leaf_index})")
            raise RevocationError("not_approved", f"definition {schema_hash} of {server}/{tool} is not approved; "
                                  "nothing to revoke")
        who = pins.book.get(signer.name)
        if who is None:
            from sealbox.identities import unknown_signer

            raise RevocationError("unknown_identity", unknown_signer(signer.name))
        if who.public_key != signer.verifier.vkey:
            raise RevocationError("wrong_key", f"this key is not {who.name}'s current key (it was rotated, or is not theirs)")
        if who.disabled:
            raise RevocationError("disabled", f"identity {who.name!r} is disabled: it cannot revoke a tool definition")
        if who.role not in ANSWER_ROLES:
            raise RevocationError("role", f"identity {who.name!r} has role {who.role}: only an approver or an admin "
                                  "may revoke a tool definition")
        payload = {"server": server, "tool": tool, "schema_hash": schema_hash, "change_leaf": recorded[schema_hash],
                   "origin": origin, "identity": who.name, "reason": reason, "revoked_at": _utc_now()}
        payload["signature"] = sign_fields(signer, revocation_fields(payload))
        payload["key_id"] = who.key_id
        problem = pins.check_revocation(payload, reader.size(), who.name)
        if problem is not None:  # pragma: no cover - every rule is checked above
            raise RevocationError(problem, f"revocation refused: {REVOCATION_PROBLEMS[problem]}")
        box.append(payload)
        return [EventDraft("tool.revoked", payload, run_id=SYSTEM_RUN_ID, principal=who.name)]

    store.append_with(build)
    return box[-1]


_HASH = re.compile(r"sha256:[0-9a-f]{64}")


def _shown_hash(value: Any) -> str:
    """A hash given on the command line as shown in a message: cut to 80 characters and '…'."""
    text = str(value)
    return text if len(text) <= 80 else text[:80] + "…"


def _others(waiting: dict[str, int]) -> str:
    """``; recorded and not approved: sha256:… (leaf 12), …: re-approve one with --hash HASH`` (or empty)."""
    if not waiting:
        return ""
    listed = ", ".join(f"{h} (leaf {leaf})" for h, leaf in sorted(waiting.items(), key=lambda x: -x[1]))
    return f"; recorded and not approved: {listed}: re-approve one with --hash HASH"


def _fields(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    if not old:
        return ["unknown"]
    return sorted(k for k in set(old) | set(new) if canonical_bytes(encode(old.get(k))) != canonical_bytes(encode(new.get(k))))
