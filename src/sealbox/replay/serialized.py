"""Serialized dicts whose keys came in another order: a difference replay lets pass.

The record keeps a tool's result canonically (RFC 8785: object keys sorted), so a replay
serves back a dict with its keys sorted, whatever order the tool built them in. An agent
or framework that turns that dict into text — ``str(result)`` (the OpenAI Agents SDK's
function tools), ``json.dumps(result)`` without ``sort_keys`` (the SDK's tools with an output
schema, an agent's own code) — then sends its model a string that differs from the recorded
one only in the order of the keys. The agent behaved the same; the record cannot
say in which order the keys came.

:func:`same_but_for_key_order` is consulted by replay only once a step's content hash
differs from the record's. Two contents are equal under it when they have the same shape
and every pair of strings at the same place is either equal, or **the same serialized
value written in another order**: both strings

- start (after white space) with ``{``, ``[`` or ``(`` — a serialized dict, list, set or tuple;
- hold exactly the same characters, each as many times (so only their order differs:
  ``"1.0"`` and ``"1.00"``, ``0x10`` and ``16``, or one changed digit never pass);
- parse, both by :func:`json.loads` or else both by :func:`ast.literal_eval` (which
  evaluates nothing: literals only), to values equal under the same rule (dicts by key,
  whatever their order; sets by member; strings inside them again by this rule; numbers,
  booleans and ``None`` by value and type).

Anything else differs. Strings longer than :data:`MAX_JSON_CHARS` (JSON) or
:data:`MAX_LITERAL_CHARS` (a Python literal) are not parsed, nor more than
:data:`BUDGET_CHARS` characters in all for one comparison: such strings then differ.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from typing import Any

from sealbox.canonical import canonical_bytes

__all__ = ["BUDGET_CHARS", "MAX_JSON_CHARS", "MAX_LITERAL_CHARS", "same_but_for_key_order", "reordered_text"]

#: The longest string parsed as JSON (characters).
MAX_JSON_CHARS = 4 * 1024 * 1024
#: The longest string parsed as a Python literal (characters): ``ast`` needs ~200 bytes per character.
MAX_LITERAL_CHARS = 256 * 1024
#: The most characters parsed in all while comparing two contents.
BUDGET_CHARS = 16 * 1024 * 1024
#: The deepest strings-inside-strings are followed (a serialized dict holding a serialized dict ...).
MAX_NESTING = 8

_OPENERS = frozenset("{[(")
_NOTHING = object()


def same_but_for_key_order(a: Any, b: Any) -> bool:
    """Whether two step contents (JSON-like: dicts, lists, strings, numbers, booleans, None, as
    stored) are equal once strings that hold the same serialized value, keys in another order, are
    taken as equal (see the module docstring). Never raises: what cannot be compared differs."""
    try:
        return _same(a, b, 0, [BUDGET_CHARS])
    except (RecursionError, MemoryError):
        return False


def reordered_text(a: str, b: str) -> bool:
    """Whether two different strings hold the same serialized value, keys (or set members) in
    another order (see the module docstring)."""
    try:
        return a != b and _reordered(a, b, 0, [BUDGET_CHARS])
    except (RecursionError, MemoryError):
        return False


def _same(a: Any, b: Any, nesting: int, budget: list[int]) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and len(a) == len(b) and all(
            k in b and _same(v, b[k], nesting, budget) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(
            _same(x, y, nesting, budget) for x, y in zip(a, b))
    if isinstance(a, str):
        return isinstance(b, str) and (a == b or _reordered(a, b, nesting, budget))
    return _same_leaf(a, b)


def _same_leaf(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):  # 1 and 1.0 are one number, as hashed
        try:
            return canonical_bytes(a) == canonical_bytes(b)
        except Exception:  # noqa: BLE001 - NaN, infinities: not comparable, so they differ
            return False
    return type(a) is type(b) and bool(a == b)  # sets, frozensets, bytes, complex of a Python literal


def _reordered(a: str, b: str, nesting: int, budget: list[int]) -> bool:
    if nesting >= MAX_NESTING or len(a) != len(b) or len(a) > MAX_JSON_CHARS:
        return False
    start = a.lstrip()[:1]
    if start not in _OPENERS or b.lstrip()[:1] != start:
        return False
    if Counter(a) != Counter(b):  # not a reordering of the same characters
        return False
    for parse, limit in ((_json, MAX_JSON_CHARS), (_literal, MAX_LITERAL_CHARS)):
        if len(a) > limit or budget[0] < 2 * len(a):
            return False
        budget[0] -= 2 * len(a)
        x = parse(a)
        y = parse(b) if x is not _NOTHING else _NOTHING
        if x is not _NOTHING and y is not _NOTHING:
            return _same(x, y, nesting + 1, budget)
    return False


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except Exception:  # noqa: BLE001 - not JSON, too deep, a number too long: not parsed
        return _NOTHING


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - not a literal ({[]: 1} too), too deep, too long a number: not parsed
        return _NOTHING
