"""Compiled rules: the match part (globs and attribute sets) and the condition."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable

from sealbox.policy.conditions import Condition
from sealbox.policy.globs import glob_covers
from sealbox.policy.model import ApprovalSpec, CallContext

__all__ = ["Rule", "GlobSet"]

_GLOB_CHARS = re.compile(r"[*?\[]")


class GlobSet:
    """A set of ``fnmatch`` patterns (case-sensitive); matches if any pattern does."""

    __slots__ = ("patterns", "literals", "_regex", "any")

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = tuple(patterns)
        self.any = "*" in self.patterns
        self.literals = frozenset(p for p in patterns if not _GLOB_CHARS.search(p))
        globs = [fnmatch.translate(p) for p in patterns if _GLOB_CHARS.search(p)]
        self._regex: Callable[[str], Any] | None = re.compile("|".join(globs)).match if globs else None

    def __call__(self, value: Any) -> bool:
        if self.any:
            return True
        if not isinstance(value, str):
            return False
        return value in self.literals or (self._regex is not None and self._regex(value) is not None)

    def covers(self, other: GlobSet) -> bool:
        """True when every value ``other`` matches is matched by this set (conservative: False when
        that cannot be shown). Each of ``other``'s patterns must be a literal this set matches, or be
        covered by one of this set's patterns (:func:`~sealbox.policy.globs.glob_covers`)."""
        if self.any:
            return True
        if other.any:  # only "*" matches a value that is no string (a principal without a role)
            return False
        return all(p in self.patterns or (p in other.literals and self(p))
                   or any(glob_covers(q, p) for q in self.patterns) for p in other.patterns)


def _in(values: list[Any], value: Any) -> bool:
    """Equality, except that ``true`` never equals ``1`` (YAML and JSON keep them apart)."""
    return any(v == value and isinstance(v, bool) == isinstance(value, bool) for v in values)


@dataclass(frozen=True, eq=False)
class Rule:
    """One compiled rule. ``index`` is its 0-based position; ``line`` its 1-based line.

    ``require_grant``: a call it matches must name an explicit grant; one naming
    ``implicit:<principal>`` is denied with ``grant_required`` (see :mod:`sealbox.policy.engine`).
    """

    id: str
    index: int
    line: int | None
    effect: str
    servers: GlobSet
    tools: GlobSet
    principal: dict[str, Any]
    agent: dict[str, Any]
    labels: dict[str, list[Any]]
    condition: Condition | None
    approval: ApprovalSpec | None
    spec: dict[str, Any]
    require_grant: bool = False

    @property
    def has_constraints(self) -> bool:
        """True when the rule looks at principal, agent or labels."""
        return bool(self.principal or self.agent or self.labels)

    @property
    def unconditional(self) -> bool:
        """True when the rule has no ``when`` condition."""
        return self.condition is None

    def mismatch(self, call: CallContext) -> str | None:
        """Why the principal/agent/labels part does not match, or ``None`` when it matches."""
        if not (self.principal or self.agent or self.labels):
            return None
        p = call.principal or {}
        for key, want in self.principal.items():
            if key in ("id", "role") and not want(p.get(key)):
                return f"principal.{key} {p.get(key)!r} does not match {list(want.patterns)}"
            if key == "groups" and not set(p.get("groups") or ()) & want:
                return f"principal.groups {list(p.get('groups') or [])} share none of {sorted(want)}"
            if key == "attributes":
                why = _attrs_mismatch("principal.attributes", p.get("attributes") or {}, want)
                if why:
                    return why
        a = call.agent or {}
        if "name" in self.agent and not self.agent["name"](a.get("name")):
            return f"agent.name {a.get('name')!r} does not match {list(self.agent['name'].patterns)}"
        if "attributes" in self.agent:
            why = _attrs_mismatch("agent.attributes", a.get("attributes") or {}, self.agent["attributes"])
            if why:
                return why
        if self.labels:
            return _attrs_mismatch("run.labels", (call.run or {}).get("labels") or {}, self.labels)
        return None


def _attrs_mismatch(where: str, have: dict[str, Any], want: dict[str, list[Any]]) -> str | None:
    for key, values in want.items():
        if key not in have:
            return f"{where}.{key} is missing (want one of {values})"
        if not _in(values, have[key]):
            return f"{where}.{key} {have[key]!r} is not one of {values}"
    return None


def build_rule(spec: dict[str, Any], index: int, line: int | None, condition: Condition | None) -> Rule:
    """Compile a normalized rule mapping into a :class:`Rule`."""
    m = spec["match"]
    principal: dict[str, Any] = {}
    for key, value in m["principal"].items():
        principal[key] = GlobSet(value) if key in ("id", "role") else frozenset(value) if key == "groups" else value
    agent: dict[str, Any] = {}
    for key, value in m["agent"].items():
        agent[key] = GlobSet(value) if key == "name" else value
    approval = None
    if spec["approval"] is not None:
        a = spec["approval"]
        approval = ApprovalSpec(tuple(a["groups"]), tuple(a["identities"]), a["quorum"], a["expires"])
    return Rule(
        id=spec["id"], index=index, line=line, effect=spec["effect"],
        servers=GlobSet(m["server"]), tools=GlobSet(m["tool"]),
        principal=principal, agent=agent, labels=m["labels"],
        condition=condition, approval=approval, spec=spec, require_grant=bool(spec.get("require_grant", False)),
    )  # fmt: skip
