"""Snapshots: the configuration a run ran under, fingerprinted.

A snapshot holds the model (provider, name, version, parameters), the system
prompt, knowledge (documents by content hash), skills, tools (server, name,
description, input schema, version), limits, and the policy's fingerprint. Its
**fingerprint** is ``sha256:`` + hex SHA-256 of its RFC 8785 canonical bytes:
two runs with the same fingerprint ran under the same configuration. A store
keeps each snapshot once, by fingerprint; ``run.started`` refers to it.

Order. ``tools`` and ``knowledge`` are sets: :meth:`Snapshot.to_dict` writes them in a
canonical order (tools by server, name, then their canonical bytes; knowledge by URI, then
its canonical bytes), so the same tools or documents given in another order give the same
fingerprint. ``skills`` and every other list keep the order given, which is part of the
fingerprint. (Snapshots recorded before knowledge was put in canonical order keep the
fingerprint they were stored under; the same configuration recorded now may get another one
if its documents were not given in URI order.)

:func:`diff_snapshots` never reports "no differences" for two snapshots whose fingerprints
differ, and always does for equal ones: it matches the snapshot's own top-level ``tools``
(by ``server/name``) and ``knowledge`` (by URI) entries by identity, compares every other
list position by position, keeps every item, and reports a list that holds the same entries
in another order as ``reordered``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealbox.canonical import canonical_bytes, decode, encode

__all__ = ["Snapshot", "Knowledge", "ToolSpec", "snapshot_fingerprint", "diff_snapshots", "diff_values", "FieldDiff",
           "snapshot_form_problems", "knowledge_file_changes"]


@dataclass(frozen=True)
class Knowledge:
    """A document the agent could read, stored by content hash.

    Attributes:
        uri: where it came from (a path or URL).
        content_hash: ``sha256:<hex>`` of its bytes.
        size: its length in bytes.
    """

    uri: str
    content_hash: str
    size: int

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Knowledge":
        """Hash a file's bytes."""
        data = Path(path).read_bytes()
        return cls(str(path), "sha256:" + hashlib.sha256(data).hexdigest(), len(data))

    @classmethod
    def from_bytes(cls, uri: str, data: bytes) -> "Knowledge":
        """Hash content fetched from ``uri``."""
        return cls(uri, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the agent saw it (MCP ``tools/list`` entry plus its server)."""

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    version: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """A run's configuration. Every field is part of the fingerprint.

    Attributes:
        model: ``{"provider", "name", "version", "parameters": {...}}``.
        system_prompt: the system prompt text.
        knowledge: documents by content hash.
        skills: skill names or descriptors.
        tools: the tools offered to the agent.
        limits: limits applied to the run.
        policy: the policy's fingerprint (``sha256:<hex>``).
        extra: anything else that shapes behaviour (framework versions, …).
    """

    model: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    knowledge: tuple[Knowledge, ...] = ()
    skills: tuple[Any, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    limits: dict[str, Any] = field(default_factory=dict)
    policy: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # ``tools=(ToolSpec(...) for t in registry)``, a generator expression that reads like a tuple, or a
        # map(...): read once, by the first to_dict(), it was empty from then on, so the run pinned no tools
        # and ``fingerprint`` named that empty snapshot. Such an iterator is kept as the tuple of its items.
        for name in ("knowledge", "skills", "tools"):
            value = getattr(self, name)
            if isinstance(value, Iterator):
                object.__setattr__(self, name, tuple(value))

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON form (the canonical bytes are those of this dict)."""
        return {
            "model": encode(self.model),
            "system_prompt": self.system_prompt,
            "knowledge": sorted(({"uri": k.uri, "content_hash": k.content_hash, "size": k.size}
                                 for k in self.knowledge), key=lambda k: (str(k["uri"]), _order_bytes(k))),
            "skills": (sorted(encode(list(self.skills)), key=_order_bytes)  # a set has no order to keep
                       if isinstance(self.skills, (set, frozenset)) else encode(list(self.skills))),
            "tools": sorted((
                {"server": t.server, "name": t.name, "description": t.description,
                 "input_schema": encode(t.input_schema), "version": t.version}
                for t in self.tools), key=lambda t: (t["server"], t["name"], _order_bytes(t))),
            "limits": encode(self.limits),
            "policy": self.policy,
            "extra": encode(self.extra),
        }

    @property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the canonical bytes of :meth:`to_dict`."""
        return snapshot_fingerprint(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Snapshot":
        """Inverse of :meth:`to_dict`."""
        return cls(
            model=decode(d.get("model") or {}),
            system_prompt=d.get("system_prompt"),
            knowledge=tuple(Knowledge(k["uri"], k["content_hash"], k["size"]) for k in d.get("knowledge") or ()),
            skills=tuple(decode(d.get("skills") or [])),
            tools=tuple(ToolSpec(t["server"], t["name"], t.get("description", ""), decode(t.get("input_schema") or {}),
                                 t.get("version")) for t in d.get("tools") or ()),
            limits=decode(d.get("limits") or {}),
            policy=d.get("policy"),
            extra=decode(d.get("extra") or {}),
        )


#: The fields of a snapshot's strict JSON form (:meth:`Snapshot.to_dict`) and the JSON types each holds.
_FORM: dict[str, tuple[type | None, ...]] = {
    "model": (dict,), "system_prompt": (str, None), "knowledge": (list,), "skills": (list,), "tools": (list,),
    "limits": (dict,), "policy": (str, None), "extra": (dict,),
}
#: The fields each ``knowledge`` / ``tools`` entry must hold, and their types.
_ITEMS: dict[str, dict[str, tuple[type | None, ...]]] = {
    "knowledge": {"uri": (str,), "content_hash": (str,), "size": (int,)},
    "tools": {"server": (str,), "name": (str,)},
}
_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", None: "null"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number"
    return next((name for t, name in _TYPE_NAMES.items() if t is not None and isinstance(value, t)),
                type(value).__name__)


def _is(value: Any, types: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in types
    if isinstance(value, bool):  # JSON true/false is no integer
        return False
    return any(t is not None and isinstance(value, t) for t in types)


def _want(path: str, value: Any, types: tuple[type | None, ...]) -> str:
    return f"{path} must be {' or '.join(_TYPE_NAMES[t] for t in types)}, got {_json_type(value)}"


def snapshot_form_problems(content: Any, like: Any = None) -> list[str]:
    """What keeps ``content`` (parsed JSON) from being a complete snapshot in its strict JSON form,
    as :meth:`Snapshot.to_dict` writes it and ``sealbox snapshot show --json`` prints it: each of
    the eight fields present with its type, no other field, each ``knowledge`` entry an object with
    ``uri``, ``content_hash`` (strings) and ``size`` (an integer), each ``tools`` entry an object
    with ``server`` and ``name`` (strings). Empty when it is one.

    ``like``: the snapshot ``content`` will be compared with (a recorded one; a run may have pinned
    a dict leaving fields out): a field it lacks too is not missing."""
    if not isinstance(content, dict):
        return [f"a snapshot is a JSON object, got {_json_type(content)}"]
    out = []
    missing = sorted(set(_FORM) - set(content) - ({f for f in _FORM if f not in like}
                                                   if isinstance(like, dict) else set()))
    unknown = sorted(map(str, set(content) - set(_FORM)))
    if missing:
        out.append(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    if unknown:
        out.append(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    for name, types in _FORM.items():
        if name not in content:
            continue
        value = content[name]
        if not _is(value, types):
            out.append(_want(name, value, types))
            continue
        for i, item in enumerate(value if name in _ITEMS else ()):
            where = f"{name}[{i}]"
            if not isinstance(item, dict):
                out.append(_want(where, item, (dict,)))
                continue
            absent = [f for f in _ITEMS[name] if f not in item]
            if absent:
                out.append(f"{where} is missing {', '.join(absent)}")
            out += [_want(f"{where}.{f}", item[f], t) for f, t in _ITEMS[name].items()
                    if f in item and not _is(item[f], t)]
    return out


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _local_path(uri: str) -> str | None:
    """The local file a knowledge URI names (a path, or a ``file:`` URI), or None for a remote URI."""
    if uri.startswith("file:"):
        from urllib.parse import unquote, urlparse

        parsed = urlparse(uri)
        return unquote(parsed.path) if parsed.netloc in ("", "localhost") else None
    return None if _SCHEME.match(uri) else uri


def knowledge_file_changes(content: Any) -> list[dict[str, Any]]:
    """The ``knowledge`` entries of a snapshot's strict JSON form that are local files (a path, relative
    to the working directory, or a ``file:`` URI; a remote URI is never read) whose content now differs
    from the recorded one: ``{"uri", "change", "recorded", "now"}``, ``change`` ``changed`` (``now``
    its SHA-256 today) or ``missing`` (no such file now, or it cannot be read: ``now`` None)."""
    out: list[dict[str, Any]] = []
    entries = content.get("knowledge") if isinstance(content, dict) else None
    for k in entries if isinstance(entries, list) else ():
        uri = k.get("uri") if isinstance(k, dict) else None
        recorded = k.get("content_hash") if isinstance(k, dict) else None
        path = _local_path(uri) if isinstance(uri, str) and uri else None
        if path is None or not isinstance(recorded, str):
            continue
        digest = hashlib.sha256()
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a directory, a FIFO (never opened: it would block)
                raise OSError("not a regular file")
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
        except (OSError, ValueError):  # gone, a directory, unreadable, a NUL in the name
            out.append({"uri": uri, "change": "missing", "recorded": recorded, "now": None})
            continue
        now = "sha256:" + digest.hexdigest()
        if now != recorded:
            out.append({"uri": uri, "change": "changed", "recorded": recorded, "now": now})
    return out


def _order_bytes(entry: dict[str, Any]) -> bytes:
    """A total order on tool and knowledge entries that does not depend on the order given:
    their canonical bytes (so entries that fingerprint alike sort alike)."""
    try:
        return canonical_bytes(encode(entry))
    except Exception:  # noqa: BLE001 - the fingerprint will refuse such a value; order it anyway
        return repr(entry).encode("utf-8", "backslashreplace")


def snapshot_fingerprint(content: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the RFC 8785 bytes of a snapshot's strict JSON form."""
    return "sha256:" + hashlib.sha256(canonical_bytes(content)).hexdigest()


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs between two snapshots.

    Attributes:
        path: dotted path, list items by key (tools by ``server/name``) or index.
        change: ``added``, ``removed``, ``changed``, or ``reordered`` (a top-level ``tools``
            or ``knowledge`` list holding the same entries in another order: ``a`` and ``b``
            are then the entries' keys in each order).
        a, b: the values in the first and second snapshot (None when absent).
    """

    path: str
    change: str
    a: Any = None
    b: Any = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"path": self.path, "change": self.change, "a": self.a, "b": self.b}


def diff_snapshots(a: dict[str, Any], b: dict[str, Any]) -> list[FieldDiff]:
    """Field-level differences between two snapshots' strict JSON forms, sorted by path.

    The snapshot's own top-level ``tools`` and ``knowledge`` lists are compared entry by entry,
    matched by identity: a tool by ``server/name``, a document by its URI (see :func:`_keyed`
    for entries that share one). Every other list, including lists named ``tools`` deeper down
    (``model.parameters.tools``, ``extra.tools``), is compared by position. When those two lists
    hold the same entries in another order, the list is reported as ``reordered``. The result
    is empty exactly when the two contents have the same canonical bytes, that is the same
    fingerprint.
    """
    keyed_a, keyed_b = _keyed_pair(a, b)
    out: list[FieldDiff] = []
    _diff(keyed_a, keyed_b, "", out)
    if isinstance(a, dict) and isinstance(b, dict):
        # a whole list added, removed or changed is shown as the snapshot held it, not keyed by identity
        out = [FieldDiff(d.path, d.change, _shown(a.get(d.path)), _shown(b.get(d.path))) if d.path in _IDENTITY
               else d for d in out]
        for name in _IDENTITY:
            if name in a and name in b and keyed_a.get(name) is not a.get(name) \
                    and _same(keyed_a[name], keyed_b[name]) and not _same(a[name], b[name]):
                out.append(FieldDiff(name, "reordered", list(keyed_a[name]), list(keyed_b[name])))
    return sorted(out, key=lambda d: d.path)


#: The top-level lists of a snapshot matched by identity: the fields naming an entry, and the
#: field that tells apart entries sharing that name (a tool's version, a document's content hash).
_IDENTITY: dict[str, tuple[tuple[str, ...], str]] = {
    "tools": (("server", "name"), "version"),
    "knowledge": (("uri",), "content_hash"),
}


def _keyed(value: Any) -> Any:
    """``value`` (a snapshot's strict JSON form) with its top-level ``tools`` and ``knowledge``
    lists made dicts by identity (see :func:`_keyed_pair`); anything else as it is."""
    return _keyed_pair(value, value)[0]


def _keyed_pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Both snapshots with their top-level ``tools`` and ``knowledge`` lists indexed by identity.

    A tool's key is ``server/name`` and a document's its URI. Where several entries of either
    snapshot share that key, the entries with that key are told apart, in both snapshots alike,
    by ``@`` and their version (a tool) or content hash (a document): ``db/query@2``; where that
    is still shared, by ``#1``, ``#2``… in list order. No entry is ever dropped or overwritten.
    A list that holds an entry without string identity fields is left a list (compared by
    position). Only the top level is keyed: a list named ``tools`` anywhere else is data.
    """
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a, b
    out_a, out_b = dict(a), dict(b)
    for name, (fields, qualifier) in _IDENTITY.items():
        la, lb = a.get(name), b.get(name)
        lists = [x for x in (la, lb) if x is not None]
        if not lists or not all(_keyable(x, fields) for x in lists):
            continue
        keys_a, keys_b = _identity_keys(la or [], lb or [], fields, qualifier)
        if la is not None:
            out_a[name] = dict(zip(keys_a, la))
        if lb is not None:
            out_b[name] = dict(zip(keys_b, lb))
    return out_a, out_b


def _keyable(items: Any, fields: tuple[str, ...]) -> bool:
    return isinstance(items, list) and all(
        isinstance(item, dict) and all(isinstance(item.get(f), str) for f in fields) for item in items)


def _identity_keys(la: list, lb: list, fields: tuple[str, ...], qualifier: str) -> tuple[list[str], list[str]]:
    """Unique keys for the entries of ``la`` and ``lb``, chosen alike for both lists."""
    def base(item: dict) -> str:
        return "/".join(item[f] for f in fields)

    def qualified(item: dict) -> str:
        q = item.get(qualifier)
        return f"{base(item)}@{q if isinstance(q, str) else json.dumps(q, ensure_ascii=False, default=str)}"

    def shared(keys: list[str]) -> set[str]:  # one pass: a corpus of 50,000 documents is diffed in seconds
        return {k for k, n in Counter(keys).items() if n > 1}

    bases_a, bases_b = [base(i) for i in la], [base(i) for i in lb]
    crowded = shared(bases_a) | shared(bases_b)
    keys_a = [qualified(i) if k in crowded else k for i, k in zip(la, bases_a)]
    keys_b = [qualified(i) if k in crowded else k for i, k in zip(lb, bases_b)]
    crowded = shared(keys_a) | shared(keys_b)
    return _numbered(keys_a, crowded), _numbered(keys_b, crowded)


def _numbered(keys: list[str], crowded: set[str]) -> list[str]:
    """``keys`` with those in ``crowded`` numbered ``#1``, ``#2``… by occurrence, and any key that
    would still repeat (an entry whose own name looks like a numbered key) numbered further."""
    seen: dict[str, int] = {}
    used: set[str] = set()
    out = []
    for key in keys:
        if key in crowded:
            seen[key] = seen.get(key, 0) + 1
            key = f"{key}#{seen[key]}"
        unique, n = key, 1
        while unique in used:
            n += 1
            unique = f"{key}#{n}"
        used.add(unique)
        out.append(unique)
    return out


def diff_values(a: Any, b: Any) -> tuple[FieldDiff, ...]:
    """Field-level differences between two JSON-like values, sorted by path.

    Dicts are compared by key, lists by index (extra items are ``added`` /
    ``removed``); paths look like ``messages[1].content``. Values compare by their
    canonical bytes (so ``1`` and ``1.0`` are equal, as in the hashed record).
    """
    out: list[FieldDiff] = []
    _diff(a, b, "", out)
    return tuple(sorted(out, key=lambda d: d.path))


def _same(a: Any, b: Any) -> bool:
    try:
        return canonical_bytes(encode(a)) == canonical_bytes(encode(b))
    except Exception:  # noqa: BLE001 - a value that cannot be encoded compares by equality
        return bool(a == b)


def path_segment(key: Any) -> str:
    """One object key as written in a :class:`FieldDiff` path: as it is, or ``["..."]`` (a JSON
    string) when it is empty or holds ``.``, ``[``, ``]``, ``"``, ``\\`` or whitespace, so that
    ``extra["a.b"]`` (a key ``a.b``) and ``extra.a.b`` (``b`` inside ``a``) stay apart."""
    key = str(key)
    if key and not _SPECIAL.search(key):
        return key
    return "[" + json.dumps(key, ensure_ascii=False) + "]"


_SPECIAL = re.compile(r'[.\[\]"\\\s]')


def join_path(path: str, key: Any) -> str:
    """``path`` extended by the object key ``key`` (see :func:`path_segment`)."""
    seg = path_segment(key)
    if not path:
        return seg
    return path + seg if seg.startswith("[") else f"{path}.{seg}"


def split_path(path: str) -> list[str | int] | None:
    """The keys and list indexes of a path as :func:`diff_values` writes it (``a.b[2]["x.y"]``),
    or None when it is not one."""
    parts: list[str | int] = []
    i, n = 0, len(path)
    while i < n:
        if path[i] == "[":
            end = path.find("]", i)
            if path.startswith('["', i):
                try:
                    key, length = json.JSONDecoder().raw_decode(path, i + 1)
                except ValueError:
                    return None
                if not isinstance(key, str) or path[length:length + 1] != "]":
                    return None
                parts.append(key)
                i = length + 1
            elif end > i + 1 and path[i + 1:end].isdigit():
                parts.append(int(path[i + 1:end]))
                i = end + 1
            else:
                return None
        else:
            m = _PLAIN_SEGMENT.match(path, i)
            if m is None:
                return None
            parts.append(m.group(0))
            i = m.end()
        if i < n and path[i] == ".":
            i += 1
            if i == n:
                return None
    return parts


_PLAIN_SEGMENT = re.compile(r'[^.\[\]"\\\s]+')


def _bigint(value: Any) -> bool:
    """``value`` is the store's encoding of an integer beyond I-JSON's range: ``{"$bigint": "<digits>"}``."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$bigint"), str)


def _shown(value: Any, escaped: bool = False) -> Any:
    """``value`` as a diff shows it: each ``{"$bigint": "..."}`` the integer it stands for (never the
    keys of a dict the store escaped, ``{"$esc": {...}}``: the source's own ``$bigint`` key)."""
    if not escaped and _bigint(value):
        try:
            return int(value["$bigint"])
        except ValueError:
            return value
    if isinstance(value, dict):
        inner = len(value) == 1 and "$esc" in value and not escaped
        return {k: _shown(v, inner) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def _unescaped(value: Any) -> tuple[Any, bool]:
    """``(the source's own dict, True)`` for the store's ``{"$esc": {...}}`` (a dict with a key starting
    with ``$``), else ``(value, False)``."""
    if isinstance(value, dict) and len(value) == 1 and type(value.get("$esc")) is dict:
        return value["$esc"], True
    return value, False


def _diff(a: Any, b: Any, path: str, out: list[FieldDiff]) -> None:
    """A dict the store escaped (``{"$esc": {...}}``) is compared as the source's dict it holds: its keys
    are the source's own (a ``$bigint`` among them is no tag), and the marker is never a path segment,
    so every segment of a path is a key of the source's (``x.$schema``, ``x.$esc`` for its own ``$esc``)."""
    ua, esc_a = _unescaped(a)
    ub, esc_b = _unescaped(b)
    tagged = (not esc_a and _bigint(a)) or (not esc_b and _bigint(b))  # a large integer is one value, not a dict
    if isinstance(ua, dict) and isinstance(ub, dict) and not tagged:
        for key in sorted(set(ua) | set(ub)):
            sub = join_path(path, key)
            if key not in ua:
                out.append(FieldDiff(sub, "added", None, _shown(ub[key])))
            elif key not in ub:
                out.append(FieldDiff(sub, "removed", _shown(ua[key]), None))
            else:
                _diff(ua[key], ub[key], sub, out)
        return
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            sub = f"{path}[{i}]"
            if i >= len(a):
                out.append(FieldDiff(sub, "added", None, _shown(b[i])))
            elif i >= len(b):
                out.append(FieldDiff(sub, "removed", _shown(a[i]), None))
            else:
                _diff(a[i], b[i], sub, out)
        return
    if not _same(a, b):
        out.append(FieldDiff(path or "(value)", "changed", _shown(a), _shown(b)))
