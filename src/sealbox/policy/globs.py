"""Glob subsumption: does one ``fnmatch`` pattern match every name another one matches?

Rules match servers, tools, principal ids and roles and agent names with
:func:`fnmatch.translate` patterns, case-sensitive (:class:`~sealbox.policy.rules.GlobSet`):
``*`` is any string (the empty one and line breaks included), ``?`` any one character,
``[seq]`` / ``[!seq]`` one character in / not in ``seq`` (with ranges ``a-z``); there is
no escape character (a backslash is a literal backslash) and an unclosed ``[`` is a
literal ``[``.

:func:`glob_covers` is what ``sealbox policy check`` uses to say that an earlier rule
shadows a later one, so it must never say yes wrongly: it answers True only when it can
show that the wide pattern matches every string the narrow one matches, and False
whenever it is unsure. The proof is a symbolic match of the narrow pattern, token by
token, against the wide one: a ``*`` of the wide pattern may take any run of the narrow
pattern's tokens (its ``*`` included); every other wide token must take exactly one
narrow token that is not ``*`` and whose set of characters is within its own. Runs of
``*`` and ``?`` are put in one order first (``*?`` and ``?*`` are the same language).
This is sound, and complete for the usual cases (prefix, suffix and infix wildcards,
classes within classes); a few equivalent spellings it cannot relate are reported as
"not covered".

A character class is understood only in a plain form (single characters and ranges
``c-d`` with ``c <= d``, a leading ``!``, a ``]`` first); one holding ``-`` elsewhere,
``\\``, ``[``, ``^``, ``&``, ``~`` or ``|`` — which :func:`fnmatch.translate` rewrites in
version-dependent ways — makes the pattern "unknown", so never covered nor covering
another. The class's character set is also checked against the regular expression
:func:`fnmatch.translate` gives it, at each boundary, before it is trusted.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from typing import Union

__all__ = ["glob_covers"]

_MAX = 0x10FFFF
#: A character set: sorted, disjoint, non-adjacent closed intervals of code points.
_Set = tuple[tuple[int, int], ...]
_ALL: _Set = ((0, _MAX),)
_STAR = "*"
_Token = Union[_Set, str]  # a character set (one character), or _STAR

#: Characters a class may not hold for us to read it (see the module docstring).
_UNREAD = frozenset("-\\[^&~|]")


def _merge(intervals: list[tuple[int, int]]) -> _Set:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _complement(cs: _Set) -> _Set:
    out, nxt = [], 0
    for a, b in cs:
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= _MAX:
        out.append((nxt, _MAX))
    return tuple(out)


def _contains(cs: _Set, cp: int) -> bool:
    return any(a <= cp <= b for a, b in cs)


def _subset(narrow: _Set, wide: _Set) -> bool:
    """Every character of ``narrow`` is in ``wide`` (``wide`` merged, so one interval must hold each)."""
    return all(any(wa <= a and b <= wb for wa, wb in wide) for a, b in narrow)


def _class(body: str) -> _Set | None:
    """The characters ``[body]`` matches, or None when it is not in the plain form we read."""
    negated = body.startswith("!")
    rest = body[1:] if negated else body
    items: list[tuple[int, int]] = []
    k = 0
    if rest.startswith("]"):  # fnmatch scans past a ``]`` right after ``[`` / ``[!``: a member
        items.append((ord("]"), ord("]")))
        k = 1
    while k < len(rest):
        c = rest[k]
        if c in _UNREAD:
            return None
        if k + 1 < len(rest) and rest[k + 1] == "-":
            if k + 2 >= len(rest) or rest[k + 2] in _UNREAD or rest[k + 2] < c:
                return None
            items.append((ord(c), ord(rest[k + 2])))
            k += 3
        else:
            items.append((ord(c), ord(c)))
            k += 1
    if not items:
        return None
    cs = _merge(items)
    if negated:
        cs = _complement(cs)
    return cs if cs and _agrees(body, cs) else None


def _agrees(body: str, cs: _Set) -> bool:
    """``cs`` is what :func:`fnmatch.translate` makes of ``[body]``, at every boundary and member."""
    try:
        rx = re.compile(fnmatch.translate(f"[{body}]"))
    except re.error:
        return False
    probes = {0, _MAX, *(ord(c) for c in body)}
    for a, b in cs:
        probes.update((a - 1, a, b, b + 1))
    return all((rx.match(chr(cp)) is not None) == _contains(cs, cp) for cp in probes if 0 <= cp <= _MAX)


def _tokens(pattern: str) -> tuple[_Token, ...] | None:
    """The pattern as :func:`fnmatch.translate` reads it (same scanning), or None if unsure."""
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(_STAR)
        elif c == "?":
            out.append(_ALL)
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                out.append(((ord("["), ord("[")),))
                continue
            cs = _class(pattern[i:j])
            if cs is None:
                return None
            out.append(cs)
            i = j + 1
        else:
            out.append(((ord(c), ord(c)),))
    return _normalised(out)


def _normalised(tokens: list[_Token]) -> tuple[_Token, ...]:
    """Each run of ``*`` and ``?`` as its ``?`` first, then one ``*`` if it had any (same language)."""
    out: list[_Token] = []
    k = 0
    while k < len(tokens):
        if tokens[k] != _STAR and tokens[k] != _ALL:
            out.append(tokens[k])
            k += 1
            continue
        run = []
        while k < len(tokens) and (tokens[k] == _STAR or tokens[k] == _ALL):
            run.append(tokens[k])
            k += 1
        out += [_ALL] * sum(1 for t in run if t == _ALL) + ([_STAR] if _STAR in run else [])
    return tuple(out)


@lru_cache(maxsize=4096)
def glob_covers(wide: str, narrow: str) -> bool:
    """True only when the ``fnmatch`` pattern ``wide`` provably matches every string ``narrow``
    matches (see the module docstring); False when it does not, or when that cannot be shown."""
    if not isinstance(wide, str) or not isinstance(narrow, str):
        return False
    if wide == narrow:
        return True
    w, n = _tokens(wide), _tokens(narrow)
    if w is None or n is None:
        return False
    # ok[i][j]: narrow[i:] is covered by wide[j:]
    ok = [[False] * (len(w) + 1) for _ in range(len(n) + 1)]
    ok[len(n)][len(w)] = True
    for i in range(len(n), -1, -1):
        for j in range(len(w) - 1, -1, -1):
            if w[j] == _STAR:
                ok[i][j] = ok[i][j + 1] or (i < len(n) and ok[i + 1][j])
            else:
                t = n[i] if i < len(n) else None
                ok[i][j] = (t is not None and t != _STAR and _subset(t, w[j])  # type: ignore[arg-type]
                            and ok[i + 1][j + 1])
    return ok[0][0]
