"""Tool pinning: notice when an upstream's tools change, and deny changed tools until re-approved.

Each tool is pinned by the hash of its definition: ``sha256:`` of the RFC 8785
bytes of ``{"name", "description", "input_schema"}``. The pin state lives in the
store's system run, so it survives restarts and is shared by every gateway on
the store:

* ``tools.changed`` (``first_seen: true``): the first listing of a server ever
  recorded; its tools are trusted on first use (approved).
* ``tools.changed``: a later listing differs from the last recorded one
  (``added`` / ``removed`` / ``changed`` entries carry the hashes, and the new
  definitions). An added or changed tool is **blocked**.
* ``tool.reapproved`` (``schema_hash``): someone approved that exact definition
  (``sealbox gateway reapprove SERVER TOOL``); the tool is unblocked while its
  definition keeps that hash.

A blocked tool's calls are recorded and denied by rule :data:`PIN_RULE`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from sealbox.canonical import canonical_bytes, encode
from sealbox.events import SYSTEM_RUN_ID, EventDraft

__all__ = ["PIN_RULE", "PinState", "tool_definition", "definition_hash"]

#: The rule id a pinning deny names in ``policy.decision``.
PIN_RULE = "sealbox.gateway/tool-changed"


def tool_definition(name: str, description: str | None, input_schema: Any) -> dict[str, Any]:
    """The pinned part of a tool, as strict JSON."""
    return {"name": name, "description": description or "", "input_schema": encode(input_schema or {})}


def definition_hash(definition: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the RFC 8785 bytes of a :func:`tool_definition`."""
    return "sha256:" + hashlib.sha256(canonical_bytes(definition)).hexdigest()


@dataclass
class PinState:
    """Known and approved definition hashes per ``(server, tool)``, rebuilt from recorded events.

    Attributes:
        known: the hash of the latest recorded definition of each listed tool.
        approved: the hash last approved (first seen, or re-approved) for each tool.
        servers: servers with at least one recorded listing.
        cursor: how many log entries have been read (for :meth:`refresh`).
    """

    known: dict[tuple[str, str], str] = field(default_factory=dict)
    approved: dict[tuple[str, str], str] = field(default_factory=dict)
    definitions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    servers: set[str] = field(default_factory=set)
    cursor: int = 0

    @classmethod
    def load(cls, store: Any) -> "PinState":
        """Read the pin state from a store's system run."""
        state = cls()
        state.cursor = store.size()
        state.apply(e for e in store.read_run(SYSTEM_RUN_ID) if e.leaf_index < state.cursor)
        return state

    def apply(self, events: Iterable[Any]) -> None:
        """Fold ``tools.changed`` and ``tool.reapproved`` events (in log order) into the state."""
        for e in events:
            p = e.payload
            if e.kind == "tool.reapproved":
                self.approved[(p["server"], p["tool"])] = p.get("schema_hash", "")
            elif e.kind == "tools.changed":
                self._apply_change(p)

    def _apply_change(self, p: dict[str, Any]) -> None:
        server = p["server"]
        self.servers.add(server)
        for item in p.get("added") or ():
            key = (server, item["tool"])
            self.known[key] = item["hash"]
            self.definitions[key] = item.get("definition") or {}
            if p.get("first_seen"):
                self.approved[key] = item["hash"]
        for item in p.get("changed") or ():
            key = (server, item["tool"])
            self.known[key] = item["after"]
            self.definitions[key] = item.get("definition") or {}
        for item in p.get("removed") or ():
            self.known.pop((server, item["tool"]), None)

    def refresh(self, store: Any) -> None:
        """Read the events appended since the last load or refresh (e.g. a re-approval by the CLI)."""
        size = store.size()
        if size > self.cursor:
            events = [e for e in store.read_range(self.cursor, size) if e.run_id == SYSTEM_RUN_ID]
            self.cursor = size
            self.apply(events)

    def blocked_tools(self) -> set[tuple[str, str]]:
        """Every ``(server, tool)`` whose latest definition has not been approved."""
        return {key for key, digest in self.known.items() if self.approved.get(key) != digest}

    def blocked(self, server: str, tool: str) -> bool:
        """True when the tool's latest definition has not been approved."""
        key = (server, tool)
        return key in self.known and self.approved.get(key) != self.known[key]

    def observe(self, server: str, tools: dict[str, dict[str, Any]]) -> EventDraft | None:
        """Compare a listing (``{name: tool_definition}``) with the recorded state.

        Returns:
            The ``tools.changed`` draft to record (system run), or None when nothing changed.
            The state is updated as if it were recorded.
        """
        hashes = {name: definition_hash(d) for name, d in tools.items()}
        if server not in self.servers:
            payload = {"server": server, "first_seen": True, "removed": [], "changed": [],
                       "added": [{"tool": n, "hash": hashes[n], "definition": tools[n]} for n in sorted(tools)]}
        else:
            before = {t: h for (s, t), h in self.known.items() if s == server}
            added = [{"tool": n, "hash": hashes[n], "definition": tools[n]} for n in sorted(set(hashes) - set(before))]
            removed = [{"tool": n, "hash": before[n]} for n in sorted(set(before) - set(hashes))]
            changed = [{"tool": n, "before": before[n], "after": hashes[n], "fields": _fields(self.definitions.get((server, n)), tools[n]),
                        "definition": tools[n]}
                       for n in sorted(set(before) & set(hashes)) if before[n] != hashes[n]]
            if not (added or removed or changed):
                return None
            payload = {"server": server, "added": added, "removed": removed, "changed": changed}
        self._apply_change(payload)
        return EventDraft("tools.changed", payload, run_id=SYSTEM_RUN_ID, principal="sealbox")

    def pending(self, server: str, tool: str) -> str | None:
        """The hash a re-approval of this tool would approve, or None when nothing is blocked."""
        return self.known[(server, tool)] if self.blocked(server, tool) else None


def _fields(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    if not old:
        return ["unknown"]
    return sorted(k for k in set(old) | set(new) if canonical_bytes(encode(old.get(k))) != canonical_bytes(encode(new.get(k))))
