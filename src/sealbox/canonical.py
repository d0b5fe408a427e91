"""Canonical bytes (RFC 8785), hashing, and a lossless-where-possible encoding of Python values.

Two layers:

* :func:`canonical_bytes` is the strict encoder: it writes a JSON value as RFC 8785
  (JCS) canonical UTF-8 bytes and raises :class:`~sealbox.errors.CanonicalizationError`
  for anything outside I-JSON (RFC 7493). Those bytes are what Sealbox hashes.
* :func:`encode` turns *any* Python value into a strict JSON value, using one-key
  ``{"$tag": payload}`` dicts for the types JSON lacks; :func:`decode` reverses it.
  :func:`dumps` is ``canonical_bytes(encode(value))``.

The tag table, the escaping rule for user dicts whose keys start with ``$``, and the
decision on whole-number floats are in ``docs/canonical.md``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import json
import math
import os
import re
import reprlib
import sys
import uuid
from typing import Any, Callable

import orjson

from sealbox.errors import CanonicalizationError

try:  # the optional C extension (setup.py); SEALBOX_PURE_PYTHON=1 uses the Python reference alone
    from sealbox._speedups import copy_plain as _c_copy_plain
except ImportError:  # built without a C compiler: the Python reference does the same
    _c_copy_plain = None
if os.environ.get("SEALBOX_PURE_PYTHON") == "1":
    _c_copy_plain = None
#: Whether the plain-I-JSON copy (:func:`encode`'s fast path) runs in C (``sealbox._speedups``).
SPEEDUPS = _c_copy_plain is not None

__all__ = [
    "MAX_DEPTH",
    "DECODE_MAX_DEPTH",
    "Tagged",
    "canonical_bytes",
    "canonical_bytes_encoded",
    "decode",
    "dumps",
    "encode",
    "fingerprint",
    "is_lossy",
    "pre_encoded",
    "sha256_hex",
]

MAX_DEPTH = 128
"""Deepest container nesting accepted: the outermost array or object is level 1."""

_INT_MAX = 2**53 - 1  # I-JSON (RFC 7493 §2.2): integers exactly representable as doubles
_EXACT_INT_FLOAT = float(2**53)
_REPR_LIMIT = 200
_escape: Callable[[str], str] = json.encoder.encode_basestring  # C; identical to JCS §3.2.2.2


# --------------------------------------------------------------------------- canonical bytes


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 (JCS) canonical UTF-8 bytes of a strict JSON value.

    Accepted: ``dict`` with ``str`` keys, ``list``, ``tuple`` (written as an array),
    ``str``, ``bool``, ``None``, ``int`` within ±(2**53 − 1) and finite ``float``.
    Subclasses of these are written as their base value. Numbers follow RFC 8785
    §3.2.2.3 (ECMAScript Number::toString: ``1.0`` → ``1``, ``-0.0`` → ``0``, ``1e21`` →
    ``1e+21``, ``1e-7`` → ``1e-7``); object members are sorted by the UTF-16 code
    units of their names (§3.2.3); strings are escaped per §3.2.2.2.

    Args:
        value: the JSON value.

    Returns:
        The canonical bytes, without a trailing newline.

    Raises:
        CanonicalizationError: a non-``str`` key, NaN or an infinity, an integer outside
            ±(2**53 − 1), a lone surrogate in a string or key, a value of another type,
            a cycle, or nesting deeper than :data:`MAX_DEPTH`. No other exception escapes.
    """
    parts: list[str] = []
    try:
        _write(value, parts.append, 0)
        return "".join(parts).encode("utf-8")
    except _TooDeep:
        problem = "contains a cycle" if _has_cycle(value) else f"is nested deeper than {MAX_DEPTH} levels"
        raise CanonicalizationError(f"the value {problem}") from None
    except CanonicalizationError:
        raise
    except UnicodeEncodeError:
        raise CanonicalizationError("a string or key contains a lone surrogate (I-JSON, RFC 7493 §2.1)") from None
    except Exception as exc:  # a hostile subclass (__iter__, __eq__ ...): translate at the boundary
        raise CanonicalizationError(f"cannot canonicalize: {type(exc).__name__}: {exc}") from exc


def canonical_bytes_encoded(value: Any, *, floats: bool = True, finite: bool = False, bounded: bool = False) -> bytes:
    """:func:`canonical_bytes` of a value that :func:`encode` could have returned: every object key
    a ``str``, every integer within ±(2**53 − 1).

    Same bytes, usually ten times faster. ``orjson`` writes the value first (sorted keys,
    integers limited to ±(2**53 − 1), subclasses and other types refused); its bytes are
    taken where they provably equal RFC 8785 (JCS): no ``null`` (orjson writes NaN and
    the infinities as ``null``; such values go to the next writer), no number token whose
    fraction is exactly ``0`` or with an exponent (orjson writes ``1.0`` and ``1e+16``,
    JCS ``1`` and ``10000000000000000``; other floats are written with the shortest
    round-trip digits in positional notation for 1e-7 <= |x| < 1e16, as ECMAScript
    does), no byte that starts a character at or above U+E000 (code-point and UTF-16
    key order can differ only there) and at most :data:`MAX_DEPTH` ``{``/``[``. Its
    string escaping is JCS's (the short escapes of ``\\b``, ``\\t``, ``\\n``, ``\\f``,
    ``\\r``, other controls as lower-case ``\\u00xx``, nothing else escaped). Otherwise the C ``json`` encoder writes the value,
    and its text is taken only where it provably equals RFC 8785 (JCS): no number
    token with a fraction or an exponent (Python's ``repr`` and ECMAScript differ
    there; see :func:`_has_float_token`), no character at or above U+E000 (code-point
    and UTF-16 key order can differ only there), no lone surrogate, and at most
    :data:`MAX_DEPTH` ``{``/``[`` in all (a bound on the nesting). String escaping is
    the same C function in both writers. Anything else, and any exception, falls back
    to :func:`canonical_bytes`, which also raises for NaN, cycles and depth. Outside
    the contract the text could differ from JCS: ``json`` writes a non-``str`` key as a
    string and any integer in full (:func:`canonical_bytes` refuses both). The property
    tests in ``tests/test_canonical.py`` check equality with ``rfc8785``. Outside the
    contract, orjson also writes an ``enum.Enum`` member, a ``uuid.UUID`` or a numpy
    value natively where :func:`canonical_bytes` refuses them: pass :func:`encode`'s output.

    Args:
        value: the value, as :func:`encode` returns it.
        floats: False only where the caller knows that ``value`` holds no ``float``
            (:func:`_encode_noting_floats` said so, and nothing since added one): the
            number and NaN checks on orjson's bytes are then skipped.
        finite: True only where the caller knows that every float in ``value`` is finite
            (:func:`encode` writes NaN and the infinities as ``$float`` tags, and nothing
            since added one): a ``null`` in orjson's bytes is then a JSON null, not a NaN,
            and orjson's bytes are kept (with the number checks) instead of the ``json``
            writer's. For a decision event, whose payload holds nulls, that is 4 µs against 25.
        bounded: True only where the caller knows that ``value`` nests at most :data:`MAX_DEPTH`
            containers deep (:func:`encode` bounded it, and at most the room it left was added
            since): orjson's bytes are then taken without counting their ``{``/``[``, a bound
            that also sends a shallow value of more than :data:`MAX_DEPTH` containers to the
            slow writer.

    Raises:
        CanonicalizationError: as :func:`canonical_bytes`.
    """
    try:
        data = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except Exception:  # a subclass, a big integer, a surrogate, depth, a cycle: the next writers decide
        data = None
    if data is not None and (not floats or finite or data.find(b"null") == -1):
        if data[:1] in _NUMBER_START_BYTES or (not bounded and data.count(b"{") + data.count(b"[") > MAX_DEPTH) or (
                floats and _exact_number_needed(data)):
            return canonical_bytes(value)
        if data.isascii() or _HIGH_LEAD.search(data) is None:
            return data
        return canonical_bytes(value)
    try:
        text = _fast_dumps(value)
    except Exception:  # NaN, a cycle, an unknown type, deep recursion: the exact writer decides
        return canonical_bytes(value)
    if text[0] in _NUMBER_START or _has_float_token(text) or text.count("{") + text.count("[") > MAX_DEPTH:
        return canonical_bytes(value)
    if text.isascii():
        return text.encode("ascii")
    if max(text) >= "\ue000":
        return canonical_bytes(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return canonical_bytes(value)


def _has_float_token(text: str) -> bool:
    """Whether the JSON text (of a container) may hold a number with a fraction or an exponent.

    ``repr`` writes every finite float with ``.`` or ``e+``/``e-``, and uses ``.`` without an
    exponent only for 1e-4 <= |x| < 1e16, where its digits are ECMAScript's too (RFC 8785
    §3.2.2.3) except for whole numbers: ``1.0`` is ``1`` in JCS. So a number token whose
    fraction is exactly ``0`` needs the exact writer; other ``.`` tokens are already JCS. A
    number value follows ``:`` ``,`` ``[`` and is followed by ``,`` ``]`` ``}`` (a timestamp's
    ``06:43:00.0Z`` is not one). Where ``e+``/``e-`` occurs, a regex looks for an exponent
    token too. False positives only cost the exact writer.
    """
    if ("e+" in text or "e-" in text) and _EXP_TOKEN.search(text) is not None:
        return True
    i = text.find(".")
    while i != -1:
        if i > 0 and text[i - 1] in _DIGITS:
            j = i - 1
            while j > 0 and text[j - 1] in _DIGITS:
                j -= 1
            if j > 0 and text[j - 1] == "-":
                j -= 1
            k = i + 1
            while k < len(text) and text[k] in _DIGITS:
                k += 1
            if j > 0 and text[j - 1] in ":,[" and k < len(text) and text[k] in ",]}" and text[i + 1:k] == "0":
                return True
        i = text.find(".", i + 1)
    return False


def _exact_number_needed(data: bytes) -> bool:
    """Whether orjson's bytes (of a container) may hold a number JCS writes otherwise: a whole
    number written with ``.0`` (``1.0``, ``-0.0``, ``100.0``) or any exponent token. A number
    value follows ``:`` ``,`` ``[`` and is followed by ``,`` ``]`` ``}``; the same shapes inside
    a string only cost the exact writer. Substring tests decide first (a regex scan costs
    more than the whole orjson call): a whole number ends in ``.0`` then ``,`` ``]`` or ``}``,
    and orjson writes every exponent with its sign (``1e+16``, ``1e-7``; property-tested)."""
    # (bytes.find, not ``in``: ``sub in data`` first tries ``sub`` as an integer, and formats and
    # clears a TypeError for each test, ~1000 instructions; a find is the same search without it)
    find = data.find
    if find(b".0") != -1 and (find(b".0,") != -1 or find(b".0]") != -1 or find(b".0}") != -1) and \
            _WHOLE_TOKEN_B.search(data) is not None:
        return True
    return (find(b"e+") != -1 or find(b"e-") != -1) and _has_exp_token(data)


def _has_exp_token(data: bytes) -> bool:
    r"""Whether ``_EXP_TOKEN_B`` (``[:,\[]-?[0-9]+(?:\.[0-9]+)?e[+-][0-9]+`` then ``,`` ``]``
    ``}``) matches ``data``: decided around each ``e+`` / ``e-`` instead of by a regex scan
    of every position (a run id like ``…-910e-df30-…`` has one, so every event of such a run
    paid for the scan). Digit runs are taken whole, as the regex must take them: a shorter
    run is next to a digit, which neither ``-`` ``:`` ``,`` ``[`` nor ``,`` ``]`` ``}`` is."""
    n = len(data)
    for sign in (b"e+", b"e-"):
        i = data.find(sign)
        while i != -1:
            k = i + 2
            while k < n and 48 <= data[k] <= 57:
                k += 1
            if k > i + 2 and k < n and data[k] in b",]}":
                j = i
                while j > 0 and 48 <= data[j - 1] <= 57:
                    j -= 1
                if j < i and j > 0 and data[j - 1] == 0x2E:  # digits "." digits: the integer part
                    m = j - 1
                    while m > 0 and 48 <= data[m - 1] <= 57:
                        m -= 1
                    j = m if m < j - 1 else -1
                if 0 < j < i:
                    if data[j - 1] == 0x2D:
                        j -= 1
                    if j > 0 and data[j - 1] in b":,[":
                        return True
            i = data.find(sign, i + 1)
    return False


_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_PASSTHROUGH_SUBCLASS
                   | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME)
_NUMBER_START_BYTES = frozenset(b"-0123456789"[i:i + 1] for i in range(11))
_WHOLE_TOKEN_B = re.compile(rb"[:,\[]-?[0-9]+\.0(?=[,\]}])")
_EXP_TOKEN_B = re.compile(rb"[:,\[]-?[0-9]+(?:\.[0-9]+)?e[+-][0-9]+(?=[,\]}])")
_HIGH_LEAD = re.compile(rb"[\xee-\xff]")  # the lead byte of U+E000 and above in UTF-8

_fast_dumps: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False, check_circular=True
).encode
_DIGITS = frozenset("0123456789")
_NUMBER_START = frozenset("-0123456789")  # a bare number: the exact writer
_EXP_TOKEN = re.compile(r"[:,\[]-?[0-9]+(?:\.[0-9]+)?e[+-][0-9]+(?=[,\]}])")


class _TooDeep(CanonicalizationError):
    """Internal: nesting passed MAX_DEPTH; canonical_bytes tells a cycle from depth."""


def _write(v: Any, out: Callable[[str], None], depth: int) -> None:
    t = type(v)
    if t is str:
        out(_escape(v))
    elif t is dict:
        _write_object(v, out, depth)
    elif t is int:
        out(_int(v))
    elif t is float:
        out(_number(v))
    elif v is None:
        out("null")
    elif v is True:
        out("true")
    elif v is False:
        out("false")
    elif t is list or t is tuple:
        _write_array(v, out, depth)
    else:
        _write_subclass(v, out, depth)


def _write_subclass(v: Any, out: Callable[[str], None], depth: int) -> None:
    if isinstance(v, int):  # bool was handled: it cannot be subclassed
        out(_int(int.__int__(v)))
    elif isinstance(v, float):
        out(_number(float.__float__(v)))
    elif isinstance(v, str):
        out(_escape(v))
    elif isinstance(v, dict):
        _write_object(v, out, depth)
    elif isinstance(v, (list, tuple)):
        _write_array(v, out, depth)
    else:
        raise CanonicalizationError(f"{_type_name(v)} is not a JSON type; use sealbox.canonical.encode first")


def _write_object(d: dict, out: Callable[[str], None], depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise _TooDeep
    if not d:
        out("{}")
        return
    try:
        ascii_only = "".join(d).isascii()
    except TypeError:
        raise CanonicalizationError("object keys must be str (RFC 8785 §3.2.3)") from None
    # Code-point order equals UTF-16 order unless keys mix U+E000..U+FFFF and non-BMP.
    keys = sorted(d) if ascii_only else sorted(d, key=_utf16)
    depth += 1
    sep = "{"
    for k in keys:
        out(sep + _escape(k) + ":")
        _write(d[k], out, depth)
        sep = ","
    out("}")


def _write_array(a: list | tuple, out: Callable[[str], None], depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise _TooDeep
    if not a:
        out("[]")
        return
    depth += 1
    sep = "["
    for x in a:
        out(sep)
        _write(x, out, depth)
        sep = ","
    out("]")


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be")


def _int(n: int) -> str:
    if -_INT_MAX <= n <= _INT_MAX:
        return int.__repr__(n)
    raise CanonicalizationError(f"integer outside ±(2**53 - 1) (I-JSON, RFC 7493 §2.2): {n}")


def _number(f: float) -> str:
    """ECMAScript Number::toString of a finite double (RFC 8785 §3.2.2.3)."""
    if f.is_integer():
        if -_EXACT_INT_FLOAT <= f <= _EXACT_INT_FLOAT:
            return int.__repr__(int(f))  # exact; -0.0 -> "0"
    elif not math.isfinite(f):
        raise CanonicalizationError(f"{f!r} is not a JSON number (RFC 8785 §3.2.2.3)")
    elif 1e-4 <= f < 1e16 or -1e16 < f <= -1e-4:
        return float.__repr__(f)  # repr is positional here, with the same shortest digits
    return _number_general(f)


def _number_general(f: float) -> str:
    text = float.__repr__(f)  # shortest round-trip digits, as ECMAScript requires
    sign = "-" if text[0] == "-" else ""
    text = text.lstrip("-")
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    n = len(whole) + int(exp or 0) - (len(whole + frac) - len(digits))  # point position
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    exponent = ("e+" if e >= 0 else "e-") + str(abs(e))
    return sign + digits[0] + ("." + digits[1:] if k > 1 else "") + exponent


def _has_cycle(value: Any) -> bool:
    ancestors: set[int] = set()

    def walk(v: Any) -> bool:
        if not isinstance(v, (dict, list, tuple)):
            return False
        if id(v) in ancestors:
            return True
        if len(ancestors) > MAX_DEPTH:
            return False
        ancestors.add(id(v))
        found = any(walk(x) for x in (v.values() if isinstance(v, dict) else v))
        ancestors.discard(id(v))
        return found

    try:
        return walk(value)
    except Exception:
        return False


# --------------------------------------------------------------------------- hashing


def sha256_hex(data: bytes) -> str:
    """Return the SHA-256 of ``data`` as 64 lowercase hex digits (no algorithm prefix)."""
    return hashlib.sha256(data).hexdigest()


def dumps(value: Any) -> bytes:
    """Return ``canonical_bytes(encode(value))``: canonical bytes of any Python value.

    Never raises for ordinary values (see :func:`encode`).
    """
    return canonical_bytes(encode(value))


def fingerprint(value: Any) -> str:
    """Return ``"sha256:" + hex`` of :func:`dumps` of ``value`` (a snapshot's fingerprint).

    Example: ``fingerprint({})`` is
    ``"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"``.
    """
    return "sha256:" + sha256_hex(dumps(value))


# --------------------------------------------------------------------------- encode


@dataclasses.dataclass(frozen=True)
class Tagged:
    """A tagged value :func:`decode` leaves as data rather than rebuilding a Python object.

    Attributes:
        tag: the tag, e.g. ``"$dataclass"``, ``"$lossy"``, ``"$blob"`` or one this version
            does not know.
        value: the tag's payload exactly as encoded (not decoded). :func:`encode` writes
            a ``Tagged`` back as ``{tag: value}``, so ``encode(decode(x)) == x``.
    """

    tag: str
    value: Any


def encode(value: Any, *, max_depth: int = MAX_DEPTH) -> Any:
    """Turn any Python value into a strict JSON value that :func:`canonical_bytes` accepts.

    JSON values pass through (tuples become lists, subclasses their base type); other
    types become one-key tags such as ``{"$bytes": "/wA="}`` (table in ``docs/canonical.md``).
    A user dict with any key starting with ``$`` becomes ``{"$esc": {...}}``; a dict
    with a non-``str`` key becomes ``{"$map": [[k, v], ...]}``. Whole-number floats stay
    floats here but are written as integers by RFC 8785 (``1.0`` → ``1``), so after a
    round trip through bytes they decode as ``int``: the float/int distinction is not kept.
    Cycles, nesting beyond ``max_depth``, unsupported objects and any exception raised
    while encoding become ``{"$lossy": {"reason": ..., "type": ...}}`` (see :func:`is_lossy`).

    Args:
        value: any Python value.
        max_depth: the deepest container nesting of the *result*, clamped to 2..MAX_DEPTH.

    Returns:
        A JSON value of ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``.
        Never raises.
    """
    return _encode_noting_floats(value, max_depth=max_depth)[0]


def _encode_noting_floats(value: Any, *, max_depth: int = MAX_DEPTH) -> tuple[Any, bool]:
    """:func:`encode`, and whether its result may hold a ``float``: False means provably none
    (so no NaN, and every number token is an integer), which lets
    :func:`canonical_bytes_encoded` skip its number checks (``floats=False``)."""
    depth = max(2, min(int(max_depth), MAX_DEPTH)) if isinstance(max_depth, int) else MAX_DEPTH
    try:
        if _c_copy_plain is not None:  # the same answer as _copy_plain (tests/test_canonical.py)
            return _c_copy_plain(value, depth)
        seen = [False]
        return _copy_plain(value, 0, depth, seen), seen[0]
    except Exception:  # noqa: BLE001 - not plain I-JSON (_NotPlain), or a dict changed meanwhile: the encoder decides
        pass
    encoder = _Encoder(depth)
    return encoder.enc(value, 0), encoder.floats


class _NotPlain(Exception):
    """:func:`_copy_plain` met something it leaves to :class:`_Encoder`."""


def _copy_plain(v: Any, level: int, limit: int, seen: list[bool]) -> Any:
    """What :class:`_Encoder` returns for ``v`` placed inside ``level`` containers, when ``v``
    is plain I-JSON: exactly ``dict`` (ASCII ``str`` keys, none holding ``$``), ``list``,
    ``tuple`` (made a list), ``str`` without lone surrogates, ``int`` within ±(2^53 − 1),
    finite ``float``, ``bool`` and ``None``, nested within ``limit``. ``seen[0]`` becomes
    True where a float is met. Raises :class:`_NotPlain` at anything else (a subclass, an
    enum member, a tag-like key, a cycle, a value past the depth limit), and the encoder
    then does the whole value; a test checks the two agree wherever this one answers."""
    t = type(v)
    if t is str:
        if v.isascii() or _valid_unicode(v):
            return v
        raise _NotPlain
    if t is int:
        if -_INT_MAX <= v <= _INT_MAX:
            return v
        raise _NotPlain
    if t is dict:
        if level + 3 > limit:
            raise _NotPlain
        try:
            joined = "".join(v)
        except TypeError:
            raise _NotPlain from None
        if not joined.isascii() or "$" in joined or not set(map(type, v)) <= _JUST_STR:
            raise _NotPlain
        level += 1
        return {k: x if type(x) is str and x.isascii() else _copy_plain(x, level, limit, seen) for k, x in v.items()}
    if t is list or t is tuple:
        if level + 3 > limit:
            raise _NotPlain
        level += 1
        return [x if type(x) is str and x.isascii() else _copy_plain(x, level, limit, seen) for x in v]
    if v is None or t is bool:
        return v
    if t is float:
        if v - v == 0.0:  # finite (inf - inf and nan - nan are nan)
            seen[0] = True
            return v
        raise _NotPlain
    raise _NotPlain


def pre_encoded(encoded: Any) -> Any:
    """Wrap a value :func:`encode` returned so that :func:`encode` gives it back unchanged.

    Re-encoding an encoded value would escape its type tags as user data
    (``{"$bytes": "..."}`` → ``{"$esc": {"$bytes": "..."}}``). Here every outermost one-key
    dict whose key is a tag (it starts with ``$``: in an encoded value a user's ``$`` key
    only occurs inside ``$esc``) becomes a :class:`Tagged`, which :func:`encode` writes back
    as ``{tag: value}`` verbatim; other dicts and lists are copied around them. Used where
    content is changed after encoding (values scrubbed from a tool's result) and then
    recorded through the store, which encodes it again.

    Args:
        encoded: a strict JSON value as :func:`encode` returns it (strings may since have
            been changed; no tag may have been added).

    Returns:
        The same structure with ``Tagged`` in place of the outermost tags. Never raises.
    """
    t = type(encoded)
    if t is dict:
        if len(encoded) == 1:
            (key, inner), = encoded.items()
            if _tag_ok(key):
                return Tagged(key, inner)
        return {k: pre_encoded(v) for k, v in encoded.items()}
    if t is list:
        return [pre_encoded(v) for v in encoded]
    return encoded


def is_lossy(encoded: Any) -> bool:
    """Say whether a ``$lossy`` tag appears anywhere in an encoded value (or a ``Tagged``)."""
    if isinstance(encoded, Tagged):
        return encoded.tag == "$lossy" or is_lossy(encoded.value)
    if isinstance(encoded, dict):
        if len(encoded) == 1:
            ((key, payload),) = encoded.items()
            if key == "$lossy":
                return True
            if key == "$esc" and isinstance(payload, dict):
                return any(is_lossy(v) for v in payload.values())
        return any(is_lossy(v) for v in encoded.values())
    if isinstance(encoded, (list, tuple)):
        return any(is_lossy(v) for v in encoded)
    return False


class _Encoder:
    """One encode() call: the depth budget and the containers on the current path."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.ancestors: set[int] = set()
        self.floats = False  # whether the result may hold a float (see _encode_noting_floats)

    def enc(self, v: Any, level: int) -> Any:
        """Encode ``v`` placed inside ``level`` containers (``level + 2 <= max_depth``)."""
        t = type(v)
        try:
            if t is str:
                return v if v.isascii() or _valid_unicode(v) else _badstr(v)
            if t is int:
                return v if -_INT_MAX <= v <= _INT_MAX else {"$bigint": str(v)}
            if t is float:
                self.floats = True
                return v if math.isfinite(v) else {"$float": _FLOAT_NAMES[str(v)]}
            if v is None or t is bool:
                return v
            if t is dict:
                return self._dict(v, level)
            if t is list or t is tuple:
                return self._nest(v, level, 1, self._list)
            return self._other(v, level)
        except Exception as exc:  # the contract: encode never raises
            return _lossy("error", v, error=f"{type(exc).__name__}: {_safe_str(exc)}")

    def _nest(self, v: Any, level: int, span: int, build: Callable[[Any, int], Any]) -> Any:
        """Build an encoding whose own structure is ``span`` containers deep."""
        if id(v) in self.ancestors:
            return _lossy("cycle", v)
        if level + span + 2 > self.max_depth:  # children need room for a $lossy
            return _lossy("depth", v, repr=_safe_repr(v))
        self.ancestors.add(id(v))
        try:
            return build(v, level + span)
        finally:
            self.ancestors.discard(id(v))

    def _list(self, items: Any, level: int) -> list:
        enc = self.enc
        return [x if type(x) is str and x.isascii() else enc(x, level) for x in items]

    def _plain(self, d: dict, level: int) -> dict:
        enc = self.enc  # an ASCII str is the commonest value and needs no work
        return {k: x if type(x) is str and x.isascii() else enc(x, level) for k, x in d.items()}

    def _dict(self, d: dict, level: int) -> Any:
        form = _dict_form(d)
        if form == "plain":
            return self._nest(d, level, 1, self._plain)
        if form == "esc":
            return self._nest(d, level, 2, lambda m, lv: {"$esc": {k: self.enc(x, lv) for k, x in m.items()}})
        return self._nest(d, level, 3, lambda m, lv: {"$map": [[self.enc(k, lv), self.enc(x, lv)] for k, x in m.items()]})

    def _other(self, v: Any, level: int) -> Any:
        if type(v) is Tagged and _tag_ok(v.tag):
            raw = self._tagged(v, level)
            if raw is not None:
                return raw
        if isinstance(v, enum.Enum):
            return self._nest(v, level, 2, self._enum)
        if isinstance(v, dict):
            return self._dict(v, level)
        if isinstance(v, (list, tuple)):
            return self._nest(v, level, 1, self._list)
        for base, convert in _BASE_TYPES:
            if isinstance(v, base):
                return self.enc(convert(v), level)
        for base, scalar in _SCALAR_TAGS:
            if isinstance(v, base):
                return scalar(v)
        if isinstance(v, (set, frozenset)):
            return self._nest(v, level, 2, self._set)
        if _is_pydantic(v):
            return self._nest(v, level, 2, self._pydantic)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return self._nest(v, level, 2, self._dataclass)
        return _lossy("unsupported", v, repr=_safe_repr(v))

    def _tagged(self, v: Tagged, level: int) -> dict | None:
        self.floats = True  # a tag's value is taken as parsed JSON, not walked here
        try:  # an integer beyond ±(2**53 − 1) in canonical bytes is a whole-number double (as in decode)
            strict = json.loads(canonical_bytes(v.value), parse_int=_parse_jcs_int)
        except CanonicalizationError:
            return None
        return {v.tag: strict} if level + 1 + _json_depth(strict) <= self.max_depth else None

    def _enum(self, member: enum.Enum, level: int) -> dict:
        fields = {"type": _type_name(member), "name": self.enc(member.name, level), "value": self.enc(member.value, level)}
        return {"$enum": fields}

    def _set(self, items: Any, level: int) -> dict:
        return {"$set": sorted((self.enc(x, level) for x in items), key=canonical_bytes)}

    def _pydantic(self, model: Any, level: int) -> dict:
        return {"$pydantic": {"type": _type_name(model), "fields": self.enc(model.model_dump(mode="python"), level)}}

    def _dataclass(self, obj: Any, level: int) -> dict:
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return {"$dataclass": {"type": _type_name(obj), "fields": self.enc(fields, level)}}


def _dict_form(d: dict) -> str:
    """``"plain"``, ``"esc"`` (a key starts with ``$``) or ``"map"`` (a key is not a valid str)."""
    try:
        joined = "".join(d)
    except TypeError:
        return "map"
    if joined.isascii() and "$" not in joined and set(map(type, d)) <= _JUST_STR:
        return "plain"
    form = "plain"
    for k in d:
        if type(k) is not str or not (k.isascii() or _valid_unicode(k)):
            return "map"
        if k.startswith("$"):
            form = "esc"
    return form


def _valid_unicode(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _badstr(s: str) -> dict:
    return {"$badstr": _b64(s.encode("utf-8", "surrogatepass"))}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(v: Any) -> dict:
    return {"$bytes": _b64(v.tobytes() if isinstance(v, memoryview) else bytes(v))}


def _datetime(v: _dt.datetime) -> dict:
    text = v.isoformat(timespec="microseconds")
    return {"$datetime" if v.utcoffset() is not None else "$datetime_naive": text}


def _timedelta(v: _dt.timedelta) -> dict:
    micros = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    return {"$timedelta": micros if -_INT_MAX <= micros <= _INT_MAX else {"$bigint": str(micros)}}


_JUST_STR = {str}
_FLOAT_NAMES = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}

# Subclasses of scalar JSON types are encoded as their base value (Enum members are caught first).
_BASE_TYPES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
)

# Types whose tag holds a scalar payload: no recursion, so no depth or cycle check.
_SCALAR_TAGS: tuple[tuple[type | tuple[type, ...], Callable[[Any], dict]], ...] = (
    ((bytes, bytearray, memoryview), _bytes),
    (_dt.datetime, _datetime),  # before date: datetime is a date
    (_dt.date, lambda v: {"$date": v.isoformat()}),
    (_dt.time, lambda v: {"$time": v.isoformat(timespec="microseconds")}),
    (_dt.timedelta, _timedelta),
    (decimal.Decimal, lambda v: {"$decimal": str(v)}),
    (uuid.UUID, lambda v: {"$uuid": str(v)}),
)


def _is_pydantic(v: Any) -> bool:
    cls = type(v)
    return hasattr(cls, "model_fields") and callable(getattr(cls, "model_dump", None))


def _parse_jcs_int(text: str) -> int | float:
    """A JSON integer token of RFC 8785 bytes: an ``int`` within ±(2**53 − 1), else the
    whole-number double that JCS wrote without a fraction (``1e17`` → ``100000000000000000``)."""
    n = int(text)
    return n if -_INT_MAX <= n <= _INT_MAX else float(text)


def _tag_ok(tag: Any) -> bool:
    return isinstance(tag, str) and tag.startswith("$") and _valid_unicode(tag)


def _json_depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max(map(_json_depth, v.values()), default=0)
    if isinstance(v, list):
        return 1 + max(map(_json_depth, v), default=0)
    return 0


def _lossy(reason: str, v: Any, **extra: str) -> dict:
    return {"$lossy": {"reason": reason, "type": _type_name(v), **extra}}


def _type_name(v: Any) -> str:
    """``"module.QualName"`` of ``v``'s type, always a valid str."""
    try:
        cls = type(v)
        return _safe_str(f"{cls.__module__}.{cls.__qualname__}")
    except Exception:
        return "<unknown>"


class _Repr(reprlib.Repr):
    def repr_instance(self, x: Any, level: int) -> str:
        return repr(x)  # failures surface to _safe_repr; reprlib's fallback prints an address


_REPR = _Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, _REPR_LIMIT, _REPR_LIMIT
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: a default repr's memory address in an error message (``<object object at 0x7f…>``): it differs on
#: each run and means nothing to a reader
_MESSAGE_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")


def without_addresses(text: str) -> str:
    """``text`` (an error message) with the memory addresses of default reprs dropped
    (``<object object at 0x7f…>`` → ``<object object>``), as :func:`_safe_repr` drops them from
    reprs: what the record says of a failure stays the same from one run to the next."""
    return _MESSAGE_ADDRESS.sub("", text) if " at 0x" in text else text


def _safe_repr(v: Any) -> str:
    """A short repr that never raises; memory addresses are dropped so output is stable."""
    try:
        text = _REPR.repr(v)
    except Exception as exc:
        text = f"<{_type_name(v)}: repr failed with {type(exc).__name__}>"
    return _safe_str(_ADDRESS.sub("", text))[:_REPR_LIMIT]


def _safe_str(text: Any) -> str:
    try:
        return str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    except Exception:
        return "<unprintable>"


# --------------------------------------------------------------------------- decode


def decode(encoded: Any) -> Any:
    """Invert :func:`encode` for every lossless tag; never raises on well-formed JSON.

    ``$bytes`` → ``bytes``, ``$datetime``/``$datetime_naive`` → ``datetime`` (aware with a
    fixed offset / naive), ``$date``, ``$time``, ``$timedelta``, ``$decimal`` → ``Decimal``,
    ``$uuid`` → ``UUID``, ``$set`` → ``set`` (a frozenset comes back as a set), ``$map`` and
    ``$esc`` → ``dict``, ``$badstr`` → ``str`` with its lone surrogates, ``$bigint`` → ``int``,
    ``$float`` → ``float``. ``$enum`` → the member, when its class is already imported
    (decode never imports a module: reading a log must not run code). Tuples come back as
    lists. ``$dataclass``, ``$pydantic``, ``$lossy``, ``$blob``, unknown tags, and payloads
    that cannot be rebuilt come back as :class:`Tagged` holding the payload as encoded.
    An integer outside ±(2**53 − 1) can only be a whole-number double written by RFC 8785
    (``1e17`` → ``100000000000000000``), so it comes back as a ``float``.

    Depth: every array and object counts one level (the outermost is level 1, tags' own
    objects and arrays included, as :func:`encode` counts them). Whatever :func:`encode` or the
    store writes is at most :data:`MAX_DEPTH` deep and decodes completely. A container deeper
    than :data:`DECODE_MAX_DEPTH` (= :data:`MAX_DEPTH`; only JSON from elsewhere can be) is not
    walked: it comes back as ``Tagged("$deep", value)`` holding it exactly as given (a tagged
    object whose payload would go past the limit comes back whole, ``Tagged("$deep",
    {tag: payload})``), so decoding stays within Python's recursion limit and never raises
    ``RecursionError``.

    Args:
        encoded: a JSON value, as produced by :func:`encode` or parsed from canonical bytes.

    Returns:
        The Python value.
    """
    return _decode(encoded, 0)


def _decode(encoded: Any, depth: int) -> Any:
    """:func:`decode` of a value whose enclosing containers are ``depth`` levels deep."""
    if isinstance(encoded, dict):
        if depth >= DECODE_MAX_DEPTH:
            return Tagged("$deep", encoded)
        depth += 1
        if len(encoded) == 1:
            ((key, payload),) = encoded.items()
            if isinstance(key, str) and key.startswith("$"):
                return _decode_tag(key, payload, depth)
        return {k: _decode(v, depth) for k, v in encoded.items()}
    if isinstance(encoded, (list, tuple)):
        if depth >= DECODE_MAX_DEPTH:
            return Tagged("$deep", encoded)
        depth += 1
        return [_decode(v, depth) for v in encoded]
    if type(encoded) is int and not -_INT_MAX <= encoded <= _INT_MAX:
        return float(encoded)  # JCS wrote a whole-number double (encode gives big ints as $bigint)
    return encoded


#: Deepest nesting :func:`decode` walks (see there); deeper containers come back as ``Tagged("$deep", …)``.
DECODE_MAX_DEPTH = MAX_DEPTH

#: Levels a tag's payload structure adds below the tag's own object before decoded values start.
_TAG_LEVELS = {"$esc": 1, "$set": 1, "$enum": 1, "$map": 2}


def _decode_tag(tag: str, payload: Any, depth: int) -> Any:
    decoder = _DECODERS.get(tag)
    if decoder is None:
        return Tagged(tag, payload)
    if depth + _TAG_LEVELS.get(tag, 0) > DECODE_MAX_DEPTH and isinstance(payload, (dict, list, tuple)):
        return Tagged("$deep", {tag: payload})
    try:
        return decoder(payload, depth + _TAG_LEVELS.get(tag, 0))
    except Exception:  # malformed or unhashable payload: keep it as data
        return Tagged(tag, payload)


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _decode_hashable(encoded: Any, depth: int) -> Any:
    """Decode a set member or map key: an array there was a tuple (a list is unhashable)."""
    value = _decode(encoded, depth)
    return _as_tuple(value) if isinstance(value, list) else value


def _as_tuple(items: list) -> tuple:
    return tuple(_as_tuple(x) if isinstance(x, list) else x for x in items)


def _decode_enum(payload: dict, depth: int) -> Any:
    cls = _resolve(payload["type"])
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        return Tagged("$enum", payload)
    try:
        return cls[_decode(payload["name"], depth)]
    except (KeyError, TypeError):
        return cls(_decode(payload["value"], depth))


def _resolve(type_name: str) -> Any:
    """Find ``module.QualName`` among modules already imported; ``None`` when absent."""
    parts = type_name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        obj = sys.modules.get(".".join(parts[:cut]))
        for attr in parts[cut:]:
            obj = _static_attr(obj, attr)
        if obj is not None:
            return obj
    return None


def _static_attr(obj: Any, name: str) -> Any:
    """An attribute from ``obj.__dict__`` only: no module ``__getattr__`` (lazy imports)."""
    try:
        return vars(obj).get(name)
    except TypeError:
        return None


def _decode_timedelta(payload: Any, depth: int) -> _dt.timedelta:
    micros = _decode(payload, depth)
    if type(micros) is not int:
        raise TypeError("timedelta payload must be an integer")
    return _dt.timedelta(microseconds=micros)


def _decode_float(payload: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[payload]


def _decode_bigint(payload: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", payload):
        raise ValueError("not a decimal integer")
    return int(payload)


def _decode_str(parse: Callable[[str], Any]) -> Callable[[Any, int], Any]:
    def decoder(payload: Any, _depth: int) -> Any:
        if type(payload) is not str:
            raise TypeError("payload must be a string")
        return parse(payload)

    return decoder


_DECODERS: dict[str, Callable[[Any, int], Any]] = {
    "$bytes": _decode_str(_unb64),
    "$datetime": _decode_str(_dt.datetime.fromisoformat),
    "$datetime_naive": _decode_str(_dt.datetime.fromisoformat),
    "$date": _decode_str(_dt.date.fromisoformat),
    "$time": _decode_str(_dt.time.fromisoformat),
    "$timedelta": _decode_timedelta,
    "$decimal": _decode_str(decimal.Decimal),
    "$uuid": _decode_str(uuid.UUID),
    "$float": _decode_str(_decode_float),
    "$bigint": _decode_str(_decode_bigint),
    "$badstr": _decode_str(lambda s: _unb64(s).decode("utf-8", "surrogatepass")),
    "$set": lambda items, depth: {_decode_hashable(x, depth) for x in items},
    "$map": lambda pairs, depth: {_decode_hashable(k, depth): _decode(v, depth) for k, v in pairs},
    "$esc": lambda d, depth: {k: _decode(v, depth) for k, v in d.items()},
    "$enum": _decode_enum,
}
