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
  ``"1.0"`` and ``"1.00"``, ``0x10`` and ``16``, or one changed digit never pass) — except that
  the recorded string may hold ``.0`` pairs more than the replayed one: the record keeps a
  whole-number float canonically (RFC 8785 writes ``20.0`` as ``20``), so a served ``{"temp":
  20.0}`` comes back as ``20`` and prints without its ``.0``;
- parse, both by :func:`json.loads` or else both by :func:`ast.literal_eval` (which
  evaluates nothing: literals only), to values equal under the same rule (dicts by key,
  whatever their order; sets by member; strings inside them again by this rule; numbers,
  booleans and ``None`` by value and type).

A serialized value may also sit **inside a longer text** (``f"result: {result}"``,
``"Weather: " + json.dumps(result) + ". Answer briefly."``): two strings are then equal when
every difference between them lies inside a pair of segments at the same place in both (after
the same text) — each starting with ``{``, ``[`` or ``(`` and ending with its closing bracket —
that hold the same characters and parse to equal values by the rule above, and every
character outside those segments is the same. Segments are looked for around each difference:
first from the brackets still open there (counted by bracket, :class:`_Brackets`), innermost first,
each to the bracket that closes it; then from the nearest opening brackets outwards (at most
:data:`MAX_OPENERS` openers and :data:`MAX_CLOSERS` closing brackets tried for each), so a
difference outside any serialized value (a changed word, a changed number in the text) still differs.

Anything else differs. Strings longer than :data:`MAX_JSON_CHARS` (JSON) or
:data:`MAX_LITERAL_CHARS` (a Python literal) are not parsed, nor more than
:data:`BUDGET_CHARS` characters in all for one comparison: such strings then differ.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from collections import Counter
from typing import Any, Iterator

from sealbox.canonical import canonical_bytes

__all__ = ["BUDGET_CHARS", "MAX_CLOSERS", "MAX_JSON_CHARS", "MAX_LITERAL_CHARS", "MAX_OPENERS", "same_but_for_key_order",
           "reordered_text"]

#: The longest string parsed as JSON (characters).
MAX_JSON_CHARS = 4 * 1024 * 1024
#: The longest string parsed as a Python literal (characters): ``ast`` needs ~200 bytes per character.
MAX_LITERAL_CHARS = 256 * 1024
#: The most characters parsed in all while comparing two contents.
BUDGET_CHARS = 16 * 1024 * 1024
#: The deepest strings-inside-strings are followed (a serialized dict holding a serialized dict ...).
MAX_NESTING = 8
#: Inside a longer text: the most opening brackets tried as the start of a segment around one difference.
MAX_OPENERS = 32
#: Inside a longer text: the most closing brackets tried as the end of a segment from one opening bracket.
MAX_CLOSERS = 32

#: Inside a longer text: the most opening brackets a text may hold for the brackets still open around a
#: difference to be found by count (beyond, only the nearest ones are tried).
MAX_BRACKETS = 200_000

_OPENERS = frozenset("{[(")
_BRACKET_AT = re.compile(r"[\[\](){}]")
_CLOSER = {"{": "}", "[": "]", "(": ")"}
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
    if nesting >= MAX_NESTING or len(a) > MAX_JSON_CHARS or len(b) > MAX_JSON_CHARS:
        return False
    floats = _float_pairs(a, b)
    if floats < 0:  # not a reordering of the same characters (but for whole-number floats' ".0")
        return False
    start = a.lstrip()[:1]
    if start in _OPENERS and b.lstrip()[:1] == start and _parse_equal(a, b, nesting, budget):
        return True
    return _segments_equal(a, b, 0, 0, floats, nesting, budget, [MAX_OPENERS * MAX_CLOSERS],
                           (_Brackets(a), _Brackets(b) if floats else None))


def _float_pairs(a: str, b: str) -> int:
    """How many ``.0`` pairs the recorded text ``a`` holds more than the replayed ``b`` when the two
    hold the same characters otherwise (0: the same characters, each as many times); -1 when they
    differ in any other character."""
    if len(a) == len(b):
        return 0 if Counter(a) == Counter(b) else -1
    if (len(a) - len(b)) % 2 or len(a) < len(b):
        return -1
    ca, cb = Counter(a), Counter(b)
    more = ca - cb
    if cb - ca or set(more) - {".", "0"} or more["."] != more["0"]:
        return -1
    return more["."]


class _Brackets:
    """Where each bracket of a text opens and closes, counted by bracket alone (quotes are not read: a
    guess, which parsing the segment then checks), so that the brackets still open around a difference
    are tried first, however many closed ones lie between: a ``{`` around a list of 40 records. Not
    computed for a text of more than :data:`MAX_BRACKETS` brackets (the nearest ones are tried alone)."""

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.end: dict[int, int] = {}  # opening bracket -> index after its closing bracket
        self.parent: dict[int, int] = {}  # opening bracket -> the one it lies in
        if text.count("{") + text.count("[") + text.count("(") > MAX_BRACKETS:
            return
        stack: list[int] = []
        for m in _BRACKET_AT.finditer(text):
            k = m.start()
            if text[k] in _OPENERS:
                if stack:
                    self.parent[k] = stack[-1]
                stack.append(k)
                self.starts.append(k)
            elif stack:
                self.end[stack.pop()] = k + 1

    def around(self, pos: int, i: int) -> list[int]:
        """The opening brackets in ``[pos, i)`` still open at ``i``, innermost first (at most
        :data:`MAX_OPENERS`)."""
        k = bisect.bisect_left(self.starts, i) - 1
        s = self.starts[k] if k >= 0 else -1
        out: list[int] = []
        while s >= pos and len(out) < MAX_OPENERS:
            if self.end.get(s, 1 << 62) > i:  # never closed: still open at i
                out.append(s)
            s = self.parent.get(s, -1)
        return out


def _openers(a: str, pos: int, i: int, brackets: _Brackets) -> Iterator[int]:
    """Where a segment around the difference at ``i`` may start: the brackets still open there,
    innermost first, then the nearest opening brackets before ``i`` (at most :data:`MAX_OPENERS` each)."""
    tried = brackets.around(pos, i)
    yield from tried
    s = i
    for _ in range(MAX_OPENERS):
        s = max(a.rfind(c, pos, s) for c in _OPENERS)  # the next opening bracket before the difference
        if s < 0:
            return
        if s not in tried:
            yield s


def _closers(a: str, s: int, i: int, brackets: _Brackets) -> Iterator[int]:
    """Where a segment from ``s`` may end (the index after its closing bracket): the bracket that closes
    ``s`` by count, then the next :data:`MAX_CLOSERS` closing brackets of its kind from ``i``."""
    closer, end = _CLOSER[a[s]], brackets.end.get(s, -1)
    if end > i and a[end - 1] == closer:
        yield end
    e = i
    for _ in range(MAX_CLOSERS):
        e = a.find(closer, e)
        if e < 0:
            return
        e += 1
        if e != end:
            yield e


def _segments_equal(a: str, b: str, pa: int, pb: int, floats: int, nesting: int, budget: list[int],
                    tries: list[int], brackets: tuple[_Brackets, _Brackets | None]) -> bool:
    """Whether ``a[pa:]`` and ``b[pb:]`` differ only inside pairs of segments at the same place (after
    the same text) that hold the same serialized value (the module docstring, "inside a longer text");
    ``floats``: how many ``.0`` pairs ``a`` may still hold more than ``b`` (whole-number floats)."""
    i = _first_difference(a, b, pa, pb)
    if i < 0:
        return len(a) - pa == len(b) - pb
    j = pb + (i - pa)  # the same place in b
    for s in _openers(a, pa, i, brackets[0]):
        sb = pb + (s - pa)
        if sb >= len(b) or b[sb] != a[s]:
            continue
        for e in _closers(a, s, i, brackets[0]):
            for eb in _ends_in_b(b, sb, j, e - s, floats, brackets[1]):
                tries[0] -= 1
                if tries[0] < 0 or budget[0] < e - s:
                    return False
                budget[0] -= e - s
                seg_a, seg_b = a[s:e], b[sb:eb]
                k = _float_pairs(seg_a, seg_b)
                if 0 <= k <= floats and _parse_equal(seg_a, seg_b, nesting, budget) \
                        and _segments_equal(a, b, e, eb, floats - k, nesting, budget, tries, brackets):
                    return True
    return False


def _ends_in_b(b: str, sb: int, j: int, length: int, floats: int, brackets: _Brackets | None) -> Iterator[int]:
    """Where the segment of ``b`` from ``sb`` may end, for a segment of ``a`` of ``length`` characters
    ending with the same bracket: at the same length; where ``a`` may hold whole-number floats' ``.0``
    that ``b`` does not (``floats`` > 0), also at the bracket that closes ``sb`` and the next closing
    brackets from ``j`` that leave ``b``'s segment shorter by an even count up to ``2 * floats``."""
    same = sb + length
    if same <= len(b) and b[same - 1] == _CLOSER.get(b[sb]):
        yield same
    if not floats or brackets is None:
        return
    closer, shortest = _CLOSER[b[sb]], same - 2 * floats
    ends = [brackets.end.get(sb, -1)]
    e = j
    for _ in range(MAX_CLOSERS):
        e = b.find(closer, e)
        if e < 0 or e + 1 >= same:
            break
        e += 1
        ends.append(e)
    for e in dict.fromkeys(ends):
        if shortest <= e < same and (same - e) % 2 == 0 and e > j and b[e - 1] == closer:
            yield e


def _first_difference(a: str, b: str, pa: int, pb: int) -> int:
    """The first index ``i >= pa`` of ``a`` where ``a[i]`` differs from ``b[pb + i - pa]`` (or one of
    them has ended while the other goes on), or -1 when ``a[pa:] == b[pb:]``."""
    if a[pa:] == b[pb:]:
        return -1
    n = min(len(a) - pa, len(b) - pb)  # compare a[pa:pa+n] with b[pb:pb+n]
    lo, hi = 0, n  # the first lo characters are equal; a difference lies in [lo, hi) or at n
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a[pa + lo:pa + mid] == b[pb + lo:pb + mid]:
            lo = mid
        else:
            hi = mid
    for k in range(lo, hi):
        if a[pa + k] != b[pb + k]:
            return pa + k
    return pa + n  # one is a prefix of the other: they differ where the shorter ends


def _parse_equal(a: str, b: str, nesting: int, budget: list[int]) -> bool:
    """Whether ``a`` and ``b`` both parse (JSON first, else a Python literal) to values equal by
    :func:`_same` one nesting level down."""
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
