"""The backend-neutral half of queries: time bounds, name globs, ``--match`` expressions, call rows.

Every backend runs its indexed filters in SQL and hands candidate rows to this
module, so that what a filter means is decided once, here, whatever the store:

* **time bounds** (:func:`parse_time`): RFC 3339 with an offset (``2026-11-29T12:00:00Z``),
  a date (``2026-11-29``, midnight UTC) or a duration back from now (``90s``, ``15m``,
  ``2h``, ``30d``, ``1w``). A time without an offset is refused rather than guessed.
  ``since`` is inclusive, ``until`` exclusive.
* **globs** (:func:`glob_match`): :func:`fnmatch.fnmatchcase` semantics (``*``, ``?``,
  ``[abc]``, ``[!abc]``), case-sensitive. A backend narrows with
  :func:`glob_literal_prefix` (an index range) and confirms with :func:`glob_match`.
* **matches** (:func:`parse_match`): ``field.path~regex`` with Python :mod:`re`
  semantics on every backend; the regex is searched (``re.search``) in the value at
  the path, after blob references were resolved. A string is searched as it is, a list
  item by item (any may match), any other value as its JSON text (keys sorted). A path
  segment applied to a list applies to each item, a number selects one; a missing path
  never matches.

Errors in user input raise :class:`~sealbox.errors.ConfigError` with one line saying
what was wrong.
"""

from __future__ import annotations

import base64
import json
import re
import warnings
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from fnmatch import fnmatchcase
from typing import Any, Callable, Iterable, Mapping, Sequence

from sealbox.errors import ConfigError

__all__ = [
    "DECISIONS",
    "RUN_STATUSES",
    "CALL_COLUMNS",
    "MATCH_ROOTS",
    "Match",
    "parse_time",
    "check_window",
    "parse_match",
    "compile_matches",
    "parse_labels",
    "label_text",
    "labels_match",
    "glob_literal_prefix",
    "glob_match",
    "prefix_upper_bound",
    "call_row",
    "run_status",
    "imported_run_status",
    "status_matches",
    "status_text",
    "check_choice",
    "check_text",
    "check_flag",
]

#: Values of ``decision=`` (a policy decision's effect).
DECISIONS = ("allow", "deny", "require_approval")
#: Values of a run's ``status=`` filter: where it is, or how it ended (``ended`` = any of the last three).
RUN_STATUSES = ("running", "interrupted", "suspended", "ended", "ok", "error", "cancelled")
#: Keys of one row of :meth:`query_calls`, in display order.
CALL_COLUMNS = (
    "ts", "run_id", "agent", "principal", "step", "call_id", "server", "tool", "exposed", "grant", "arguments",
    "decision", "rule", "reason_code", "outcome", "ok", "error", "duration_us", "approvers", "flags",
)
#: Fields a ``--match`` may start with: the call's row keys, plus ``result`` (the tool's resolved result).
MATCH_ROOTS = tuple(sorted(set(CALL_COLUMNS) | {"result"}))

_RELATIVE = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_GLOB_MAGIC = re.compile(r"[*?\[]")
#: A time's fraction of a second (RFC 3339 takes any number of digits; ISO 8601 a comma too).
_FRACTION = re.compile(r"\d:\d\d[.,](\d+)")
#: A calendar date followed by an offset (``2026-11-29Z``, ``2026-11-29+05:30``): fromisoformat reads the
#: offset's sign as a date/time separator and its hours as a time with no offset.
_DATE_WITH_OFFSET = re.compile(r"(\d{4}-\d\d-\d\d)([Zz]|[+-]\d\d:\d\d)")


def _utc_text(moment: datetime) -> str:
    from sealbox.events import rfc3339_utc

    return rfc3339_utc(moment)


def _out_of_range(name: str, value: object) -> ConfigError:
    return ConfigError(f"{name}: {value!r} is out of range (times go from year 1 to 9999 UTC)")


def parse_time(value: str | datetime, *, now: datetime | None = None, name: str = "time") -> str:
    """A time bound as the store writes times: RFC 3339 UTC with microseconds.

    Args:
        value: RFC 3339 with an offset, a date (``YYYY-MM-DD`` or another ISO 8601 date form such as
            ``YYYYMMDD`` or ``2026-W49``; 00:00 UTC; ``YYYY-MM-DD`` followed by ``Z`` or an offset
            such as ``+05:30``: 00:00 at that offset), a
            duration back from ``now`` (``90s``, ``15m``, ``2h``, ``30d``, ``1w``),
            or an aware :class:`~datetime.datetime`.
        now: the reference for durations (default: the current time).
        name: the option's name, for the error message.

    Returns:
        e.g. ``"2026-11-29T12:00:00.000000Z"`` (compares as text with stored ``ts``). A time with
        digits past the microsecond is rounded up to the next one (stored times have microseconds,
        so an inclusive ``since`` and an exclusive ``until`` select what they would exactly).

    Raises:
        ConfigError: anything else, including a time with no offset.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigError(f"{name}: a datetime without a timezone is ambiguous; give an aware datetime")
        try:
            return _utc_text(value)
        except OverflowError:
            raise _out_of_range(name, value.isoformat()) from None
    text = str(value).strip()
    rel = _RELATIVE.match(text)
    if rel:
        try:  # timedelta refuses counts past a C int; the subtraction, dates before year 1
            delta = timedelta(**{_UNITS[rel.group(2)]: int(rel.group(1))})
            return _utc_text((now or datetime.now(timezone.utc)) - delta)
        except (OverflowError, ValueError):
            raise _out_of_range(name, text) from None
    dated = _DATE_WITH_OFFSET.fullmatch(text)
    if dated:  # a date with an offset (2026-11-29Z, 2026-11-29+05:30): its midnight at that offset
        text = dated.group(1) + "T00:00:00" + dated.group(2)
    elif re.fullmatch(r"[0-9W-]+", text):  # a date alone, in any ISO 8601 form (2026-11-29, 20261129, 2026-W48-7)
        try:
            text = date.fromisoformat(text).isoformat() + "T00:00:00Z"
        except ValueError:
            pass  # not a date: the error below says what is accepted
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{name}: {value!r} is not a time; use RFC 3339 (2026-11-29T12:00:00Z), a date (2026-11-29)"
            " or a duration back from now (90s, 15m, 2h, 30d, 1w)") from None
    if moment.tzinfo is None:
        raise ConfigError(f"{name}: {value!r} has no timezone; add Z or an offset such as +01:00")
    try:
        fraction = _FRACTION.search(text)
        if fraction and fraction.group(1)[6:].strip("0"):
            # fromisoformat cuts digits past the microsecond, stored times' precision: a bound between two
            # microseconds is rounded up, so that `ts >= since` and `ts < until` hold as for the exact bound
            moment += timedelta(microseconds=1)
        return _utc_text(moment)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise _out_of_range(name, value) from None


def check_window(since: str | None, until: str | None) -> tuple[str | None, str | None]:
    """Parse ``--since`` and ``--until`` (either may be None) and refuse a window no time is in:
    ``until`` (exclusive) not after ``since`` (inclusive), which would answer "nothing matches".

    Returns:
        both bounds as :func:`parse_time` gives them (None for one not given), parsed with one "now".

    Raises:
        ConfigError: a bad time (see :func:`parse_time`), or an empty window.
    """
    now = datetime.now(timezone.utc)
    start = parse_time(since, now=now, name="--since") if since is not None else None
    end = parse_time(until, now=now, name="--until") if until is not None else None
    if start is not None and end is not None and end <= start:
        raise ConfigError(f"--until {until!r} ({end}) is not after --since {since!r} ({start}): no time is in "
                          "that window (--since is inclusive, --until exclusive: for the whole of one day, give "
                          "--until the next day)")
    return start, end


@dataclass(frozen=True)
class Match:
    """One ``field.path~regex`` condition.

    Attributes:
        path: the field path, split on ``.`` (e.g. ``("arguments", "query")``).
        pattern: the compiled regex (Python :mod:`re`).
        text: the expression as given.
    """

    path: tuple[str, ...]
    pattern: re.Pattern
    text: str

    @property
    def root(self) -> str:
        """The first path segment (``arguments``, ``result``, ``tool``…)."""
        return self.path[0]

    def test(self, record: dict[str, Any]) -> bool:
        """Whether the regex is found in the value at :attr:`path` of ``record``."""
        return any(self._search(v) for v in _values_at(record, self.path))

    def _search(self, value: Any) -> bool:
        value = _untagged(value)
        if isinstance(value, list):
            return any(self._search(item) for item in value)
        if _is_marker(value):
            return False  # a redacted value holds no searchable text
        value = _bytes_as_text(_markers_in_text(value))
        if not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False, sort_keys=True)
        return any(self.pattern.search(part) is not None for part in _outside_markers(value))


#: A redaction marker inside a string (``⟦redacted:hmac-sha256:<hex>⟧``, see :mod:`sealbox.redaction`).
_IN_STRING_MARKER = re.compile("⟦redacted:hmac-sha256:[0-9a-f]{64}⟧")
_MARKER_DIGEST = re.compile("hmac-sha256:[0-9a-f]{64}")


def _is_marker(value: Any) -> bool:
    """Whether ``value`` is a ``{"$redacted": "hmac-sha256:<hex>"}`` marker."""
    return (isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$redacted"), str)
            and _MARKER_DIGEST.fullmatch(value["$redacted"]) is not None)


def _markers_in_text(value: Any) -> Any:
    """``value`` with every ``{"$redacted": …}`` marker inside it written as the in-string marker, which
    :func:`_outside_markers` then leaves out of what a regex searches."""
    if _is_marker(value):
        return f"⟦redacted:{value['$redacted']}⟧"
    if isinstance(value, dict):
        return {k: _markers_in_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_markers_in_text(v) for v in value]
    return value


def _outside_markers(text: str) -> list[str]:
    """The parts of ``text`` between its redaction markers, each searched on its own: a ``--match``
    never matches inside a marker, nor across one (the marker holds no searchable text). A text that
    is only markers has no part to search."""
    if "⟦redacted:" not in text:
        return [text]
    return [part for part in _IN_STRING_MARKER.split(text) if part]


#: Tags (docs/canonical.md) whose payload is the value's own text: searched as that text, so that an
#: anchored regex finds an id beyond 2**53, a Decimal, a date or a UUID as it finds an int or a string.
_TEXT_TAGS = frozenset({"$decimal", "$date", "$datetime", "$datetime_naive", "$time", "$uuid", "$float"})


def _untagged(value: Any) -> Any:
    """``value`` as a regex searches it when it is one of the encoder's tags of a plain value: an
    integer beyond 2**53 (``{"$bigint": "…"}``) as that int, a ``$decimal`` / ``$date`` / ``$datetime``
    / ``$time`` / ``$uuid`` / ``$float`` as its text, a ``$set`` as the list of its items; anything
    else as it is."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "$bigint" and isinstance(inner, str):
            try:
                return int(inner)  # an int's JSON text: its digits, unquoted inside a dict's too
            except ValueError:  # not digits, or past Python's 4,300-digit limit: its text
                return inner
        if tag in _TEXT_TAGS and isinstance(inner, str):
            return inner
        if tag == "$set" and isinstance(inner, list):
            return inner
    return value


def _bytes_as_text(value: Any) -> Any:
    """``value`` with every stored ``{"$bytes": base64}`` (bytes a tool took or returned: the output of
    ``subprocess.check_output``) as the text of its bytes, UTF-8 (a byte that is not as ``\\xNN``), for
    a regex to search: their base64 would hide every word in them."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("$bytes"), str):
            try:
                return base64.b64decode(value["$bytes"].encode("ascii"), validate=True).decode("utf-8", "backslashreplace")
            except (ValueError, UnicodeEncodeError):  # not base64: not bytes Sealbox stored; searched as it is
                return value
        plain = _untagged(value)
        if plain is not value:
            return _bytes_as_text(plain)
        return {k: _bytes_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bytes_as_text(v) for v in value]
    return value


_MISSING = object()


def _fields_of(value: Any, key: str) -> Any:
    """``value``, or what a path goes on into when ``value`` is a stored object and ``key`` is not
    its tag: the fields of a ``$pydantic`` / ``$dataclass`` (a LangChain ``ToolMessage``:
    ``result.content``), the dict inside ``$esc`` (a dict with ``$`` keys), as redaction paths see them."""
    if isinstance(value, dict) and len(value) == 1 and key not in value:
        (tag, inner), = value.items()
        if tag in ("$pydantic", "$dataclass") and isinstance(inner, dict) and isinstance(inner.get("fields"), dict):
            return inner["fields"]
        if tag == "$esc" and isinstance(inner, dict):
            return inner
    return value


def _values_at(value: Any, path: Sequence[str]) -> Iterable[Any]:
    """Every value reached by ``path``; a key applied to a list fans out over its items. A segment
    holding a glob character (``*``, ``?``, ``[``) matches every key of an object, or every index of
    a list, that it matches (:func:`fnmatch.fnmatchcase`, as redaction paths do): ``arguments.*``
    is each argument."""
    if not path:
        yield value
        return
    key, rest = path[0], path[1:]
    value = _fields_of(value, key)
    if _GLOB_MAGIC.search(key) is not None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == key or fnmatchcase(k, key):  # a key holding '[' or '?' itself: filter[status]
                    yield from _values_at(v, rest)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if fnmatchcase(str(i), key):
                    yield from _values_at(v, rest)
        return
    if isinstance(value, dict):
        if key in value:
            yield from _values_at(value[key], rest)
    elif isinstance(value, list):
        if key.lstrip("-").isdigit():
            index = int(key)
            if -len(value) <= index < len(value):
                yield from _values_at(value[index], rest)
        else:
            for item in value:
                yield from _values_at(item, path)


def parse_match(expr: str | tuple[str, str] | Match) -> Match:
    """Parse ``field.path~regex`` (or a ``(field_path, regex)`` pair).

    The first ``~`` separates the path from the regex, so a regex may contain ``~``.

    Raises:
        ConfigError: no ``~``, an empty or unknown field, a lone surrogate (a non-UTF-8 byte of the
            command line), or a regex that does not compile (a syntax error, a repeat count too large,
            groups nested too deeply).
    """
    if isinstance(expr, Match):
        return expr
    if isinstance(expr, tuple):
        if len(expr) != 2 or not all(isinstance(x, str) for x in expr):
            raise ConfigError(f"match: expected (field_path, regex), got {expr!r}")
        field, regex = expr
        text = f"{field}~{regex}"
    else:
        text = str(expr)
        if "~" not in text:
            raise ConfigError(f"match: {text!r} is not FIELD~REGEX (e.g. 'arguments.query~(?i)delete')")
        field, regex = text.split("~", 1)
    if not_utf8(text):  # a non-UTF-8 byte of a command-line argument: it matched nothing, silently
        raise ConfigError(f"match: {_brief(text)} is not UTF-8 text (it holds a lone surrogate, as a non-UTF-8 byte "
                          "decodes to), which no recorded text can hold")
    path = tuple(field.strip().split("."))
    if not path[0] or any(not part for part in path):
        raise ConfigError(f"match: {text!r} has an empty field path (e.g. 'arguments.query~(?i)delete')")
    if path[0] not in MATCH_ROOTS:
        raise ConfigError(f"match: unknown field {path[0]!r} in {text!r}; use one of {', '.join(MATCH_ROOTS)}")
    try:
        with warnings.catch_warnings():
            # Python's "possible nested set" warning: [[:alpha:]] is no POSIX class in re but a set of '[', ':', 'a'…,
            # which would silently match other things; refused here (and not printed as a stray FutureWarning)
            warnings.simplefilter("error", FutureWarning)
            pattern = re.compile(regex)
    except FutureWarning as exc:
        raise ConfigError(f"match: ambiguous regex {_brief(regex)} in {_brief(text)}: {exc} (Python re has no POSIX "
                          "classes such as [[:alpha:]]; write \\[ for a literal '[' in a set)") from None
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise ConfigError(f"match: invalid regex {_brief(regex)} in {_brief(text)}: {regex_problem(exc)}") from None
    return Match(path, pattern, text)


def regex_problem(exc: BaseException) -> str:
    """What is wrong with a regular expression ``re.compile`` refused, for an ``error:`` line: its
    ``re.error`` text, or what its OverflowError (a repeat count such as ``a{99999999999}``) or
    RecursionError (groups nested hundreds deep) means."""
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    if isinstance(exc, OverflowError):
        return f"a number in it is too large ({exc})"
    return str(exc)


def _brief(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut to about ``limit`` characters (a 1,000-character regex in an error line)."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 1]) + "…"


def compile_matches(items: Iterable[str | tuple[str, str] | Match] | str | tuple[str, str] | Match | None) -> list[Match]:
    """Parse every match expression (see :func:`parse_match`); None gives ``[]``, and one expression
    (a ``FIELD~REGEX`` string, a ``(field, regex)`` pair) is a list of one.

    Raises:
        ConfigError: a bad expression, or ``items`` of another type.
    """
    if isinstance(items, (str, Match)) or (isinstance(items, tuple) and len(items) == 2 and all(
            isinstance(x, str) for x in items) and "~" not in items[0]):  # a field path holds no `~`: not two expressions
        items = [items]
    if items is not None and not isinstance(items, (list, tuple)):
        raise ConfigError(f"match: {items!r} is not a FIELD~REGEX string, a (field, regex) pair or a list of them")
    return [parse_match(item) for item in (items or ())]


def check_text(name: str, value: Any) -> str | None:
    """``value`` if it is None or a string; else :class:`ConfigError` (a query filter given a number or a list)."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name}: {value!r} is not a string")
    if value is not None and not_utf8(value):
        raise ConfigError(f"{name}: {value!r} is not UTF-8 text (it holds a lone surrogate, as a non-UTF-8 byte "
                          "decodes to), which no recorded name or id can hold")
    return value


#: The shortest prefix of a run id that ``query_calls(run_id=...)`` and the commands taking a run id accept.
MIN_RUN_PREFIX = 4

#: The shortest snapshot fingerprint prefix accepted, in hex digits (``query_runs(snapshot=...)``, ``--snapshot``).
MIN_SNAPSHOT_PREFIX = 8


def snapshot_prefix(text: Any, name: str = "snapshot") -> str:
    """A snapshot fingerprint or prefix as the store matches it (``sha256:`` optional, kept as
    given): hex in lower case, as fingerprints are, at least :data:`MIN_SNAPSHOT_PREFIX` digits.

    Raises:
        ConfigError: not a string, not hex, or a prefix too short to name one snapshot reliably.
    """
    check_text(name, text)
    prefixed = text.lower().startswith("sha256:")
    hex_part = (text[len("sha256:"):] if prefixed else text).lower()
    if not hex_part or any(c not in "0123456789abcdef" for c in hex_part) or len(hex_part) > 64:
        raise ConfigError(f"{name} {_shown_id(text)} is not a snapshot fingerprint (sha256: and up to 64 hex digits) or a prefix of one")
    if len(hex_part) < MIN_SNAPSHOT_PREFIX:
        raise ConfigError(f"{name} {_shown_id(text)} is too short: a snapshot prefix needs at least {MIN_SNAPSHOT_PREFIX} hex digits")
    return ("sha256:" if prefixed else "") + hex_part


def resolve_run_id(store: Any, run_id: Any, name: str = "run_id") -> str:
    """The run of ``store`` that ``run_id`` names, by the rule of the commands taking a run id
    (``sealbox calls --run``): the id itself, or a prefix of exactly one run id of at least
    :data:`MIN_RUN_PREFIX` characters; an id pasted in upper case, with blanks around it or cut
    short with an ellipsis as the tables show it is read as the command reads it.

    Raises:
        ConfigError: not a string, a prefix that is too short or starts several run ids, or no run
            of the store.
    """
    check_text(name, run_id)
    import click

    from sealbox.cli.common import resolve_id

    try:
        found = resolve_id(store, "run", run_id)
    except click.ClickException as exc:
        raise ConfigError(f"{name}: {exc.message}") from None
    if found not in store.ids_with_prefix("run", found, limit=1) and store.get_run(found) is None:
        raise ConfigError(f"{name}: no run {_shown_id(run_id)} in this store")
    return found


def _shown_id(text: object) -> str:
    """``repr`` of an id or fingerprint for an error message, cut to 40 characters and ``…`` (sealbox.approvals.shown_id)."""
    from sealbox.approvals import shown_id

    return shown_id(text)


def not_utf8(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (a non-UTF-8 byte of a command-line argument decodes to
    one): no recorded name or id can, and the database driver cannot even encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_flag(name: str, value: Any, *, optional: bool = False) -> bool | None:
    """``value`` if it is True or False (or None when ``optional``); else :class:`ConfigError`:
    ``error="no"`` would otherwise be taken as true."""
    if not (isinstance(value, bool) or (optional and value is None)):
        raise ConfigError(f"{name}: {value!r} is not {'True, False or None' if optional else 'True or False'}")
    return value


def parse_labels(items: Iterable[str] | dict[str, str] | None) -> dict[str, str]:
    """``["env=prod", "team=a"]`` → ``{"env": "prod", "team": "a"}``; one ``"env=prod"`` is a list of one.

    Raises:
        ConfigError: neither a dict, a list nor a string; a dict whose names or values are not strings
            (``{"env": 1}``: give ``"1"``); an item without ``=`` or with an empty key; one key given twice with two
            values (all must match, and a run has one value per label: the first was dropped).
    """
    if isinstance(items, dict):
        for key, val in items.items():
            if not isinstance(key, str) or not isinstance(val, str):
                raise ConfigError(f"labels: {key!r}: {val!r} is not a string: a label's name and value are strings "
                                  f"(as Recorder.run records them and --label KEY=VALUE gives them); give "
                                  f"{str(key)!r}: {label_text(val)!r}")
        return dict(items)
    if isinstance(items, str):  # one KEY=VALUE, not its characters
        items = [items]
    if items is not None and not isinstance(items, (list, tuple)):
        raise ConfigError(f"labels: {items!r} is not a dict of KEY: VALUE or a list of 'KEY=VALUE'")
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"label: {item!r} is not KEY=VALUE")
        key = key.strip()
        if key in out and out[key] != val:
            raise ConfigError(f"label: {key!r} is given twice, as {out[key]!r} and {val!r}; all labels must match "
                              "and a run has one value per label, so no run could match")
        out[key] = val
    return out


def label_text(value: Any) -> str:
    """A run label's value as a ``KEY=VALUE`` filter compares it and a listing shows it: a string as
    it is, any other value (a label recorded as ``1`` or ``true``) as its JSON text (keys sorted)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def labels_match(labels: Any, wanted: dict[str, str]) -> bool:
    """Whether a run's ``labels`` hold every ``wanted`` key with that value (compared as :func:`label_text`)."""
    if not isinstance(labels, dict):
        return not wanted
    return all(key in labels and label_text(labels[key]) == value for key, value in wanted.items())


def glob_literal_prefix(pattern: str) -> tuple[str, bool]:
    """``(prefix, is_exact)``: the literal text before the first glob character.

    ``("read_", False)`` for ``read_*``; ``("db", True)`` for ``db`` (no glob
    character: an equality test). A backend turns a prefix into an index range.
    """
    found = _GLOB_MAGIC.search(pattern)
    if found is None:
        return pattern, True
    return pattern[: found.start()], False


#: The flag (``calls`` rows' ``flags``) of a call one of whose events (``tool.call``, its ``policy.decision``,
#: its ``tool.result``) no longer hashes to its stored leaf hash: its bytes were changed below Sealbox
#: after it was written, so the values shown are the altered ones, not what was recorded.
ALTERED_FLAG = "altered"


def event_altered(raw: Any, leaf_hash: Any) -> bool:
    """Whether an event's stored bytes ``raw`` no longer hash to its stored ``leaf_hash``
    (``SHA-256(0x00 ‖ raw)``, RFC 9162; the 32 bytes or a ``sha256:<hex>`` tag): changed below
    Sealbox. False when ``raw`` is None (no such event). A change that rewrote the stored hash too
    is not seen here: ``sealbox verify`` finds it (the next event's ``prev``, the signed roots).
    One SHA-256 over the event's bytes (a few µs)."""
    if raw is None:
        return False
    import hashlib

    if isinstance(raw, str):  # a TEXT value where Sealbox writes a BLOB (changed below it): its bytes
        raw = raw.encode("utf-8", "surrogateescape")
    digest = hashlib.sha256(b"\x00" + bytes(raw)).digest()
    if isinstance(leaf_hash, str):
        return leaf_hash != "sha256:" + digest.hex()
    return not isinstance(leaf_hash, (bytes, memoryview)) or bytes(leaf_hash) != digest


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``
    (in code point order), or None when there is none (prefix of U+10FFFF only)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:
                nxt = 0xE000
            return "".join(chars) + chr(nxt)
    return None


def glob_match(pattern: str, value: str | None) -> bool:
    """:func:`fnmatch.fnmatchcase` (case-sensitive); None never matches."""
    return value is not None and fnmatchcase(value, pattern)


def _outcome(effect: str | None, ok: Any) -> str:
    if ok is not None:
        return "ok" if ok else "error"
    if effect is None:
        return "undecided"
    return {"allow": "unknown", "require_approval": "held"}.get(effect, "not_run")


def call_row(values: Sequence[Any], content: Callable[[str | None], Any] = json.loads) -> dict[str, Any]:
    """One row of a call listing, from the fields of a tool call's three events.

    Args:
        values: in :data:`CALL_COLUMNS` order (extra trailing values are ignored):
            ts, run_id, agent, principal, step, call_id, server, tool, exposed, grant,
            arguments (JSON text), then from the ``policy.decision`` effect, rule,
            reason_code (None: no decision recorded), a placeholder for outcome, then
            from the ``tool.result`` ok, error (JSON text) and duration_us (``ok`` None:
            no result: denied, held, running, or outcome unknown).
        content: turns the arguments' JSON text into the value (resolving blobs).

    Returns:
        A dict with :data:`CALL_COLUMNS`. ``outcome`` is ``ok`` / ``error`` (the tool
        ran), ``not_run`` (denied), ``held`` (it required approval and has no
        result; :meth:`query_calls` then reads the run's approval events and
        makes it ``denied``, ``expired``, ``unknown`` or ``abandoned`` where its
        request came to that: :func:`sealbox.approvals.call_outcome`), ``unknown``
        (allowed but no result: still running, or the process died) or ``undecided`` (no decision recorded). ``decision`` is
        the policy's decision when the call was made (a re-evaluation after an
        approval is a later event of the run). ``ok`` is True / False, or None
        when there is no result; ``error`` is ``{"type", "message"}`` or None.
    """
    row = dict(zip(CALL_COLUMNS[:-2], values))
    row["approvers"], row["flags"] = [], []
    row["arguments"] = content(row["arguments"])
    ok = row["ok"]
    row["outcome"] = _outcome(row["decision"], ok)
    if ok is None:
        row["error"] = None
    elif ok:
        row["ok"], row["error"] = True, None
    else:
        err = json.loads(row["error"]) if isinstance(row["error"], str) else row["error"]
        row["ok"] = False
        row["error"] = {"type": err.get("type"), "message": err.get("message")} if isinstance(err, dict) else {
            "type": None, "message": None if err is None else str(err)}
    return row


def run_status(last_kind: str | None) -> str:
    """A run's status from the kind of its newest lifecycle event (``run.started``,
    ``run.suspended``, ``run.resumed``, ``run.ended``): ``running``, ``suspended`` or ``ended``.
    A run stays ``suspended`` while its approvals are answered or expire, until ``run.resumed``.
    A store's listing may then make a ``running`` run ``interrupted``: its process took a liveness
    lease that no live process holds any more (:mod:`sealbox.liveness`; it died mid-run)."""
    return {"run.ended": "ended", "run.suspended": "suspended"}.get(last_kind or "", "running")


def imported_run_status(end_imported: Any) -> str | None:
    """An imported run's status at its source when it had not ended there, from its ``run.ended``'s
    ``imported`` facts (a dict; anything else gives None): ``running``, ``interrupted`` or ``suspended`` (a
    Sealbox export of a run not ended, ``sealbox_run_status``; an Agents SDK RunState waiting for approvals,
    ``final_state: interrupted``, is ``suspended``); None when it had ended (its ``run.ended`` status holds)."""
    if not isinstance(end_imported, Mapping):
        return None
    if end_imported.get("sealbox_run_status") in ("running", "interrupted", "suspended"):
        return str(end_imported["sealbox_run_status"])
    if end_imported.get("final_state") == "interrupted":
        return "suspended"
    return None


def status_text(run: Mapping[str, Any]) -> str:
    """A run row's status as listings and reports show it (a :meth:`query_runs` row): ``running``,
    ``suspended``, ``ended (ok)``; an imported run's is marked so: ``suspended (imported)``, ``ended (ok,
    imported)`` (its status is the source's, :meth:`~sealbox.store.sqlite.SqliteStore.query_runs`); one read from
    an event changed below Sealbox is marked ``altered``: ``interrupted (altered)``."""
    notes = [str(n) for n in (run.get("ending"), "imported" if run.get("imported") else None,
                              ALTERED_FLAG if run.get("altered") else None) if n]
    return f"{run.get('status')}" + (f" ({', '.join(notes)})" if notes else "")


#: what ``runs list`` and ``runs show`` say on stderr of runs marked ``altered``: their status is read from an
#: altered event, or their ``runs`` row disagrees with their ``run.started`` event
RUN_ALTERED_WARNING = ("warning: {n} run(s) shown hold values changed below Sealbox after they were written (an event "
                       "their status is read from no longer hashes to its recorded leaf hash or its kind column is not "
                       "the kind its bytes say, or their runs-table row disagrees with their run.started event; marked "
                       "altered): what is shown is what the database holds now, not what was recorded; `sealbox "
                       "verify` names the events and rows")


def status_matches(wanted: str, status: str, ending: str | None) -> bool:
    """Whether a run with ``status`` (and ``ending`` ok / error / cancelled once ended)
    passes the filter ``wanted`` (one of :data:`RUN_STATUSES`)."""
    if wanted in ("running", "interrupted", "suspended", "ended"):
        return status == wanted
    return status == "ended" and ending == wanted


def check_limit(limit: Any, name: str = "limit") -> int | None:
    """``limit`` if it is None or a positive integer (any size: a limit above the number of rows
    returns them all); else :class:`ConfigError` (0, a negative number, a bool or a non-integer)."""
    if limit is None:
        return None
    if type(limit) is bool or not isinstance(limit, int):
        raise ConfigError(f"{name}: {limit!r} is not a whole number; give 1 or more")
    if limit < 1:
        raise ConfigError(f"{name}: {limit} is less than 1; give 1 or more")
    return int(limit)


def check_choice(name: str, value: str | None, choices: Sequence[str]) -> str | None:
    """``value`` if it is one of ``choices`` (or None); else :class:`ConfigError`."""
    if value is not None and value not in choices:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return value


#: Characters a terminal acts on instead of showing: C0 controls but newline and tab (ESC starts
#: the sequences that move the cursor, clear the screen, retitle the window or make a hyperlink),
#: DEL and C1 controls (U+009B is a one-character CSI), and the bidirectional marks, embeddings,
#: overrides and isolates that reorder the text shown around them.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` as a human listing prints it: each character of :data:`_UNSAFE` written as its
    escape (``\\x1b``, ``\\u202e``), so that text recorded from an agent (a tool name, an argument,
    an error message) cannot drive the investigator's terminal or disguise itself (the listings; the HTML and Markdown
    incident reports, read in a browser or with ``cat``). ``--json`` and ``--csv`` keep the text as
    recorded."""
    return _UNSAFE.sub(_escape, text)


def _escape(found: re.Match) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: The most sub-runs (at every depth) ``sealbox runs show`` and the incident report list under a run.
SUB_RUN_TREE_LIMIT = 200


def sub_run_tree(store: Any, run_id: str, *, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The sub-agent runs of ``run_id`` at every depth (runs whose ``parent_run_id`` chain leads to it),
    as ``runs show`` and the incident report list them.

    Returns:
        ``(rows, more)``: at most ``limit`` (default :data:`SUB_RUN_TREE_LIMIT`) rows, depth first (each
        run followed by its own sub-runs, siblings in the order ``store.get_run``'s ``children`` has
        them, oldest first), each a ``get_run`` child row (a :meth:`query_runs` row) plus ``depth``
        (1: a direct child, 2: a child's child, ...); and how many sub-runs there are beyond those
        rows (0 when all are listed). A run is listed once, whatever its ``parent_run_id`` chain.
        Reads one ``get_run`` per listed run; past the limit, counting the rest reads the runs' parents once.
    """
    limit = SUB_RUN_TREE_LIMIT if limit is None else limit
    top = store.get_run(run_id)
    rows: list[dict[str, Any]] = []
    seen = {run_id}
    todo = [(c, 1) for c in reversed((top or {}).get("children") or [])]
    while todo and len(rows) < limit:
        child, depth = todo.pop()
        if child["run_id"] in seen:
            continue
        seen.add(child["run_id"])
        rows.append({**child, "depth": depth})
        below = store.get_run(child["run_id"]) if len(rows) < limit else None
        todo.extend((c, depth + 1) for c in reversed((below or {}).get("children") or []))
    if len(rows) < limit:  # every sub-run listed
        return rows, 0
    kids: dict[str, list[str]] = {}  # the limit is reached with runs left: count every sub-run once
    for r in store.query_runs():
        if r["parent_run_id"] is not None:
            kids.setdefault(r["parent_run_id"], []).append(r["run_id"])
    everyone, stack = {run_id}, [run_id]
    while stack:
        for k in kids.get(stack.pop(), ()):
            if k not in everyone:
                everyone.add(k)
                stack.append(k)
    return rows, max(len(everyone) - 1 - len(rows), 0)
