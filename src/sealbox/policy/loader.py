"""Reading policy files: YAML 1.2, line numbers, schema validation, normalization.

The file is read with ``ruamel.yaml`` in round-trip mode, which speaks YAML 1.2
(``no``, ``on``, ``y`` stay strings) and keeps the line of every key and item.
The tree is turned into plain Python values, validated against
:data:`~sealbox.policy.schema.POLICY_SCHEMA`, then normalized: defaults filled
in, durations in seconds, glob lists sorted. The normalized form is what the
fingerprint covers.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedOrderedMap, CommentedSeq, CommentedSet, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from sealbox.errors import PolicyLoadError
from sealbox.input_files import open_input
from sealbox.yaml_text import written
from sealbox.policy.schema import DURATION_PATTERN, POLICY_SCHEMA

__all__ = ["MAX_FILE_BYTES", "MAX_NODES", "LineMap", "read_text", "validate", "normalize", "parse_duration"]

MAX_FILE_BYTES = 1024 * 1024
MAX_NODES = 100_000
#: How deep lists and mappings may nest in a policy, cases or gateway config file (a real one
#: nests a handful of levels; deeper text ran Python out of recursion: an "internal error").
MAX_DEPTH = 64
EVALUATION_DEFAULTS = {"timeout_ms": 50, "max_input_bytes": 65536}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _finite(validator: Any, wanted: bool, instance: Any, schema: dict[str, Any]) -> Any:
    """The schema's ``finite`` keyword: NaN and ±Infinity are refused (a NaN bound never trips)."""
    if wanted and isinstance(instance, float) and not math.isfinite(instance):
        yield jsonschema.ValidationError(f"{written(instance)} is not a finite number")  # .nan, .inf, -.inf


def _max_seconds(validator: Any, bound: int, instance: Any, schema: dict[str, Any]) -> Any:
    """The schema's ``maxSeconds`` keyword: a duration longer than ``bound`` seconds is refused (one
    that is not a duration at all is left to ``oneOf``)."""
    if isinstance(instance, bool):
        return
    if isinstance(instance, str) and re.match(DURATION_PATTERN, instance) and len(instance.lstrip("0")) > 20:
        too_long = True  # more digits than int() takes (4300), and longer than any bound anyway
    else:
        try:
            too_long = parse_duration(instance) > bound
        except (TypeError, ValueError, OverflowError):
            return
    if too_long:
        yield jsonschema.ValidationError(f"must be at most {_days(bound)} ({bound} seconds), not {_shown(instance)}")


def _days(seconds: int) -> str:
    return f"{seconds // 86400}d" if seconds % 86400 == 0 else f"{seconds}s"


_VALIDATOR = jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                          {"finite": _finite, "maxSeconds": _max_seconds})(POLICY_SCHEMA)
_DURATION_HELP = "a positive whole number of seconds or a duration like 30s, 15m, 1h, 2d"

LineMap = dict[tuple, int]
"""Path in the document (tuple of keys and indexes) → 1-based line."""


def read_text(text: str, source: str) -> tuple[Any, LineMap]:
    """Parse YAML 1.2 text into plain values and a map of paths to lines.

    Raises:
        PolicyLoadError: not YAML, duplicate keys, too large, or not a mapping.
    """
    tree = load_tree(text, source)
    if not isinstance(tree, CommentedMap):
        raise PolicyLoadError(source, 1, "a policy file must be a YAML mapping (version, rules, ...)")
    lines: LineMap = {(): 1}
    counter = [0]
    aliases = _alias_lines(text) if "*" in text else {}
    return _plain(tree, (), lines, counter, source, aliases=aliases), lines


def _alias_lines(text: str) -> LineMap:
    """The line of each alias (``- *r``) as a list item, by its path: the round-trip tree gives an
    aliased item the anchor's line, so a mistake in it was reported where the anchor is."""
    from ruamel.yaml import events

    out: LineMap = {}
    frames: list[list[Any]] = []  # [is_mapping, path, next index (list) or expecting-a-key flag, last key]
    try:
        for event in YAML(typ="rt", pure=True).parse(text):
            if not isinstance(event, (events.ScalarEvent, events.AliasEvent, events.CollectionStartEvent,
                                      events.CollectionEndEvent)):
                continue
            if isinstance(event, events.CollectionEndEvent):
                frames.pop()
                continue
            path: tuple | None = ()
            if frames:
                frame = frames[-1]
                if frame[0]:  # a mapping: a key, then its value
                    if frame[2]:
                        frame[2], frame[3] = False, event.value if isinstance(event, events.ScalarEvent) else None
                        path = None  # a key: not a value's path
                    else:
                        frame[2] = True
                        path = frame[1] + (frame[3],) if frame[1] is not None and frame[3] is not None else None
                else:
                    path = frame[1] + (frame[2],) if frame[1] is not None else None
                    frame[2] += 1
            if isinstance(event, events.AliasEvent) and path is not None and frames and not frames[-1][0]:
                out[path] = event.start_mark.line + 1
            if isinstance(event, events.CollectionStartEvent):
                frames.append([isinstance(event, events.MappingStartEvent), path, True if
                               isinstance(event, events.MappingStartEvent) else 0, None])
    except (YAMLError, RecursionError, IndexError):  # the tree was read: only a line is at stake
        return out
    return out


def load_tree(text: str, source: str) -> Any:
    """Parse YAML 1.2 text into ruamel's round-trip tree (lines kept), for a policy or a cases file.

    Raises:
        PolicyLoadError: not YAML or duplicate keys (one line, with the line it is at), too large.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        raise PolicyLoadError(source, None, f"file is larger than {MAX_FILE_BYTES} bytes")
    try:
        tree = YAML(typ="rt", pure=True).load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        if "duplicate key" in problem:
            problem = problem.split(" with value")[0]
        raise PolicyLoadError(source, mark.line + 1 if mark else None, f"invalid YAML: {problem}") from exc
    except ReaderError as exc:  # a character YAML does not allow: its str() is two lines, with no line number
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        raise PolicyLoadError(source, line, f"invalid YAML: {str(exc).splitlines()[0].strip()}") from exc
    except YAMLError as exc:
        raise PolicyLoadError(source, None, f"invalid YAML: {' '.join(str(exc).split())}") from exc
    except RecursionError:
        raise PolicyLoadError(source, None, f"lists or mappings nested more than {MAX_DEPTH} levels deep") from None
    _refuse_tags(tree, source)
    if "!" in text:
        _refuse_scalar_tags(text, source)
    return tree


def _refuse_scalar_tags(text: str, source: str) -> None:
    """Refuse a tag on a scalar that the loader resolves and then forgets (:func:`_refuse_tags` cannot see it in
    the tree): ``!!null``, ``!!int``, ``!!bool``, ``!!float``, the verbatim ``!<tag:yaml.org,2002:str>`` and the
    non-specific ``!``. ``when: !!null call.arguments.q == 'x'`` loaded as no condition at all, so an ``allow``
    rule written so allowed every call.

    Raises:
        PolicyLoadError: the first such tag, naming it and the line of the value it is on.
    """
    from ruamel.yaml import events

    for event in YAML(typ="rt", pure=True).parse(text):
        tag = getattr(event, "tag", None) if isinstance(event, events.ScalarEvent) else None
        if tag is not None:
            tag = str(tag)
            shown = "!!" + tag[len(_CORE_TAG):] if tag.startswith(_CORE_TAG) else tag
            raise PolicyLoadError(source, event.start_mark.line + 1, f"invalid YAML: unsupported tag '{shown}' (a tag "
                                                                      "changes what a value means; write the plain "
                                                                      "value, without a tag)")


_CORE_TAG = "tag:yaml.org,2002:"
#: What a standard YAML tag the round-trip loader reads into its own type stands for (none is a policy value).
_TYPE_TAGS = ((CommentedOrderedMap, "!!omap"), (CommentedSet, "!!set"), (bytes, "!!binary"))


def _tag_of(node: Any) -> str | None:
    """The tag written on ``node`` (``!!python/object:os.system``, ``!foo``), or ``None`` for an untagged
    node (and for ``!!map``, ``!!seq`` and the core scalar tags the loader resolves itself)."""
    for kind, tag in _TYPE_TAGS:
        if isinstance(node, kind):
            return tag
    if isinstance(node, (CommentedMap, CommentedSeq, TaggedScalar)):
        tag = getattr(node, "tag", None)
        value = getattr(tag, "value", tag)
        if value:
            value = str(value)
            return "!!" + value[len(_CORE_TAG):] if value.startswith(_CORE_TAG) else value
    return None


def _refuse_tags(tree: Any, source: str) -> None:
    """Refuse a tag anywhere in the document, at the line of the key or item that holds it.

    The round-trip loader keeps an unknown tag on a mapping or list and builds the plain mapping or
    list anyway: ``match: !!python/object:os.system {}`` was read as an empty ``match``, which matches
    every call (an ``allow`` rule then allowed everything). A tag says the value means something other
    than what it reads as, which a policy never wants: every one is refused, on any kind of node.

    Raises:
        PolicyLoadError: the first tag (in document order), naming it and its line.
    """
    seen: set[int] = set()
    top = tree.lc.line + 1 if isinstance(tree, (CommentedMap, CommentedSeq)) and isinstance(tree.lc.line, int) else 1
    stack: list[tuple[Any, int]] = [(tree, top)]
    while stack:
        node, line = stack.pop()
        tag = _tag_of(node)
        if tag is not None:
            raise PolicyLoadError(source, line, f"invalid YAML: unsupported tag '{tag}' (a tag changes what a value "
                                                "means; write the plain value, without a tag)")
        if id(node) in seen or not isinstance(node, (CommentedMap, CommentedSeq)):
            continue
        seen.add(id(node))  # an alias is the node it names: each is walked once (alias bombs stay cheap)
        children: list[tuple[Any, int]] = []
        if isinstance(node, CommentedMap):
            for key in node:
                try:
                    pos = node.lc.key(key)
                except KeyError:
                    pos = None
                at = pos[0] + 1 if pos else line
                children.append((key, at))
                children.append((node[key], at))
        else:
            for i, item in enumerate(node):
                try:
                    pos = node.lc.item(i)
                except (KeyError, IndexError):
                    pos = None
                children.append((item, pos[0] + 1 if pos else line))
        stack.extend(reversed(children))


def _plain(node: Any, path: tuple, lines: LineMap, counter: list[int], source: str,
           seen: set[int] | None = None, alias_line: int | None = None, aliases: LineMap | None = None) -> Any:
    """``alias_line``: the line of the alias (``*r``) this node is reached through; every key and item
    in it is given that line, not the anchor's (a duplicate rule id ``- *r`` is reported where it is
    written). ``seen``: the mappings and lists met so far (a second meeting is through an alias).
    ``aliases``: the line of each alias by path (:func:`_alias_lines`; ruamel gives the anchor's)."""
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise PolicyLoadError(source, None, f"document has more than {MAX_NODES} nodes (alias expansion?)")
    if len(path) > MAX_DEPTH and isinstance(node, (CommentedMap, CommentedSeq)):
        raise PolicyLoadError(source, line_of(lines, path),
                              f"lists or mappings nested more than {MAX_DEPTH} levels deep")
    if seen is None:
        seen = set()
    if isinstance(node, (CommentedMap, CommentedSeq)):
        if alias_line is None and id(node) in seen:
            alias_line = line_of(lines, path) or 1
        seen.add(id(node))
    if isinstance(node, CommentedMap):
        out = {}
        for key in node:
            try:
                pos = node.lc.key(key)
            except KeyError:  # merged in by a YAML merge key (<<): its line is the mapping's
                pos = None
            if alias_line is not None:
                line = alias_line
            elif pos is None:  # also merged, into a flow mapping ({<<: *base}): ruamel keeps None there
                line = node.lc.line + 1 if isinstance(node.lc.line, int) else line_of(lines, path) or 1
            else:
                line = pos[0] + 1
            if not isinstance(key, str):
                raise PolicyLoadError(source, line, f"key {key!r} must be a string")
            lines[path + (key,)] = line
            out[key] = _plain(node[key], path + (key,), lines, counter, source, seen, alias_line, aliases)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, item in enumerate(node):
            here = alias_line if alias_line is not None else (aliases or {}).get(path + (i,))
            lines[path + (i,)] = here if here is not None else node.lc.item(i)[0] + 1
            items.append(_plain(item, path + (i,), lines, counter, source, seen, alias_line, aliases))
        return items
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, (_dt.date, _dt.datetime)):
        return node.isoformat()
    raise PolicyLoadError(source, lines.get(path), f"unsupported YAML value of type {type(node).__name__}")


def line_of(lines: LineMap, path: tuple) -> int | None:
    """The line of ``path``, or of its nearest ancestor that has one."""
    path = tuple(path)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def _where(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "document"


def validate(doc: Any, lines: LineMap, source: str) -> None:
    """Validate ``doc`` against the schema; the first error (by line) is raised.

    Raises:
        PolicyLoadError: names the line and the field.
    """
    errors = list(_VALIDATOR.iter_errors(doc))
    if not errors:
        return
    found = []
    for err in errors:
        path = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            extra = sorted(k for k in err.instance if k not in allowed)
            if extra:
                path = path + (extra[0],)
                found.append((line_of(lines, path) or 0, f"unknown field '{_where(path)}'"))
                continue
        message = _message(err)
        sep = " " if message.startswith("must be ") else ": "
        found.append((line_of(lines, path) or 0, f"{_where(path)}{sep}{message}"))
    line, problem = min(found, key=lambda f: f[0])
    raise PolicyLoadError(source, line or None, problem)


def _message(err: jsonschema.ValidationError) -> str:
    if err.validator == "oneOf" and any(s.get("pattern") == DURATION_PATTERN for s in err.validator_value):
        return f"must be {_DURATION_HELP}, not {_shown(err.instance)}"
    if err.validator == "oneOf":
        subs = [e.message for e in err.context or []]
        finite = next((e.message for e in err.context or [] if e.validator == "finite"), None)
        if finite:
            return finite
        shapes = {"string": "a string", "array": "a list"}
        kinds = [t for t in ("string", "array") if any(f"of type '{t}'" in s for s in subs)]
        if kinds:
            return f"{_shown(err.instance)} is not " + " or ".join(shapes[k] for k in kinds)
        if any("pattern" in s for s in subs) or isinstance(err.instance, str):
            return f"{_shown(err.instance)} is not a duration (seconds, or a number followed by s, m, h or d)"
        return f"{_shown(err.instance)} is not valid here"
    if err.validator == "enum":
        return f"{_shown(err.instance)} is not one of {', '.join(map(str, err.validator_value))}"
    if err.validator == "required":
        return err.message.replace("is a required property", "is required")
    if err.validator == "type":  # jsonschema's own: "None is not of type 'string'", the value as Python writes it
        wanted = [err.validator_value] if isinstance(err.validator_value, str) else list(err.validator_value)
        return f"must be {' or '.join(_TYPE_WORDS.get(t, t) for t in wanted)}, not {_shown(err.instance)}"
    return err.message


_TYPE_WORDS = {"string": "a string", "integer": "a whole number", "number": "a number", "array": "a list",
               "object": "a mapping", "boolean": "true or false", "null": "null"}


def _shown(value: Any) -> str:
    """A refused value as the policy author wrote it (YAML spelling for null, booleans, .nan, .inf;
    lists and mappings in flow style: ["a", 1], {"k": null}, [.nan])."""
    if value is None or isinstance(value, (str, bool, float, list, dict)):
        return written(value)
    return str(value)


def parse_duration(value: int | float | str) -> int:
    """Seconds from ``3600`` (or ``3600.0``) or ``"30s"``, ``"15m"``, ``"1h"``, ``"2d"``."""
    if isinstance(value, float) and value.is_integer():  # JSON Schema counts 3600.0 as an integer
        return int(value)
    if isinstance(value, int):
        return value
    m = re.match(DURATION_PATTERN, value)
    if not m:
        raise ValueError(f"not a duration: {value!r}")
    return int(value[:-1]) * _UNITS[value[-1]]


def _globs(value: str | list[str] | None) -> list[str]:
    if value is None:
        return ["*"]
    return sorted(set([value] if isinstance(value, str) else value))


def _values(attrs: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: (v if isinstance(v, list) else [v]) for k, v in sorted(attrs.items())}


def _match(m: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"server": _globs(m.get("server")), "tool": _globs(m.get("tool"))}
    principal = m.get("principal") or {}
    out["principal"] = {
        k: (_globs(principal[k]) if k in ("id", "role") else sorted(set(principal[k])) if k == "groups"
            else _values(principal[k]))
        for k in sorted(principal)
    }  # fmt: skip
    agent = m.get("agent") or {}
    out["agent"] = {k: (_globs(agent[k]) if k == "name" else _values(agent[k])) for k in sorted(agent)}
    out["labels"] = _values(m.get("labels") or {})
    return out


def _rule(r: dict[str, Any]) -> dict[str, Any]:
    when = r.get("when")
    if isinstance(when, str):
        when = when.strip()  # an empty one stays "" and is refused at compile, never read as "no condition"
    approval = r.get("approval")
    if approval is not None:
        approval = {
            "groups": sorted(set(approval.get("groups", []))),
            "identities": sorted(set(approval.get("identities", []))),
            "quorum": approval.get("quorum", 1),
            "expires": parse_duration(approval.get("expires", 3600)),
        }
    out = {
        "id": r["id"],
        "description": r.get("description", ""),
        "match": _match(r.get("match") or {}),
        "when": when,
        "expensive": bool(r.get("expensive", False)),
        "effect": r["effect"],
        "approval": approval,
    }
    if r.get("require_grant"):  # written only when true: policies without it keep their fingerprints
        out["require_grant"] = True
    return out


def _limits(lim: dict[str, Any]) -> dict[str, Any]:
    cpm, tok, cost = lim.get("calls_per_minute") or {}, lim.get("tokens") or {}, lim.get("cost") or {}
    return {
        "max_tool_calls_per_run": lim.get("max_tool_calls_per_run"),
        "calls_per_minute": {"per_agent": cpm.get("per_agent"), "per_tool": cpm.get("per_tool")},
        "tokens": {"per_run": tok.get("per_run"), "per_day": tok.get("per_day")},
        "cost": {"per_run": cost.get("per_run"), "per_day": cost.get("per_day"), "currency": cost.get("currency", "USD")},
        "max_run_seconds": lim.get("max_run_seconds"),
    }


def normalize(doc: dict[str, Any]) -> dict[str, Any]:
    """The validated document with every default filled in (the fingerprinted form)."""
    return {
        "version": 1,
        "name": doc.get("name", "policy"),
        "description": doc.get("description", ""),
        "default": "deny",
        "rules": [_rule(r) for r in doc.get("rules", [])],
        "limits": _limits(doc.get("limits") or {}),
        "prices": {k: {"input": v["input"], "output": v["output"]} for k, v in sorted((doc.get("prices") or {}).items())},
        "evaluation": {**EVALUATION_DEFAULTS, **(doc.get("evaluation") or {})},
    }


def read_file(path: str | Path) -> str:
    """The text of a policy file.

    Raises:
        PolicyLoadError: not a path (``None``), missing, unreadable, larger than :data:`MAX_FILE_BYTES` (read no further), or not UTF-8.
    """
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise PolicyLoadError(repr(path), None, "not a file path: give a str or a pathlib.Path")
    p = Path(path)
    try:
        with open_input(p) as fh:  # no further than the limit: /dev/zero or a pipe may never end
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError as exc:
        raise PolicyLoadError(str(path), None, "file not found") from exc
    except OSError as exc:
        raise PolicyLoadError(str(path), None, f"cannot read file: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise PolicyLoadError(str(path), None, f"file is larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PolicyLoadError(str(path), line, "file is not valid UTF-8") from exc


def to_plain(node: Any, path: tuple, lines: LineMap, counter: list[int], source: str) -> Any:
    """Turn a ruamel round-trip node into plain Python values, recording lines into ``lines``."""
    return _plain(node, path, lines, counter, source)
