"""CEL conditions: compiled once at load, checked for bounded cost, evaluated fail-closed.

Conditions are written in CEL (Common Expression Language) and run by the
``common-expression-language`` package. That package holds the GIL while it
evaluates, so a watchdog thread cannot stop a slow condition; cost is bounded
before evaluation instead. At load a condition is rejected when:

* it is empty or blank (``when: ''``), which is no condition to check, not "no condition";
* it does not compile (the CEL parser's message is quoted);
* it is longer than :data:`MAX_SOURCE_CHARS` characters;
* it nests comprehension macros (``all``, ``exists``, ``exists_one``, ``map``,
  ``filter``) deeper than :data:`MAX_MACRO_DEPTH` (``expensive`` conditions, which
  run in a worker process with a hard time limit, may nest to
  :data:`MAX_MACRO_DEPTH_EXPENSIVE`);
* it reads a variable other than ``call``, ``principal``, ``agent``, ``run``,
  ``usage`` and ``now``, a field of ``call``, ``principal``, ``agent`` or ``run`` other than
  those of :data:`FIELDS` (``call.argumnts``, ``principal.group``), or calls a function outside :data:`KNOWN_FUNCTIONS`;
* a ``matches()`` pattern written as a literal is not a valid regular expression;
* it can never give a bool, so every call it reaches would be denied with
  ``guardrail_error``. The CEL package has no type checker, so this is decided
  for what can be decided without one: a condition that reads no variable is
  evaluated once (``"1"``, ``'"yes"'``, ``1 + 2`` or ``[true]`` are refused, as is
  one that always raises, like ``1 / 0``); otherwise a condition whose top-level
  operation is arithmetic (``call.arguments.n + 1``) or that is a bare list or
  map literal is refused. A constant ``false`` is accepted (``policy check`` warns).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from typing import Any

from sealbox.policy._cel import cel

__all__ = [
    "VARIABLES",
    "KNOWN_FUNCTIONS",
    "MAX_SOURCE_CHARS",
    "MAX_MACRO_DEPTH",
    "MAX_MACRO_DEPTH_EXPENSIVE",
    "ConditionError",
    "Condition",
    "compile_condition",
]

VARIABLES = frozenset({"call", "principal", "agent", "run", "usage", "now"})
#: The fields of ``call`` (the engine builds it from these alone; ``grant`` is absent when not known).
CALL_FIELDS = frozenset({"server", "tool", "arguments", "grant"})
#: The fields of each variable that has a fixed set (the engine fills in every one of them but ``call.grant``;
#: sealbox.policy.engine ``_PRINCIPAL``, ``_AGENT``, ``_RUN``). Reading another is refused at load.
FIELDS = {
    "call": CALL_FIELDS,
    "principal": frozenset({"id", "role", "groups", "attributes"}),
    "agent": frozenset({"name", "attributes"}),
    "run": frozenset({"id", "labels", "started_at", "elapsed_s"}),
}
#: The counters ``usage`` holds (sealbox.policy.limits.LIMIT_COUNTERS but ``elapsed_s``, which is ``run``'s): the
#: Recorder supplies each one a condition reads. Reading another is refused at load.
USAGE_COUNTERS = frozenset({"tool_calls_run", "calls_minute_agent", "calls_minute_tool", "tokens_run", "tokens_day",
                            "cost_run", "cost_day"})
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
KNOWN_FUNCTIONS = frozenset(
    {
        "size", "contains", "startsWith", "endsWith", "matches",
        "int", "uint", "double", "string", "bytes", "type", "dyn",
        "timestamp", "duration",
        "getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek",
        "getDayOfYear", "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    }
)  # fmt: skip
MAX_SOURCE_CHARS = 4096
MAX_MACRO_DEPTH = 1
MAX_MACRO_DEPTH_EXPENSIVE = 3
_KEYWORDS = frozenset({"true", "false", "null", "in", "has"} | MACROS)

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>[rRbB]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<comment>//[^\n]*)
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?|0[xX][0-9a-fA-F]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>\|\||&&|==|!=|<=|>=|.)
    """,
    re.VERBOSE | re.DOTALL,
)


class ConditionError(ValueError):
    """A condition is rejected at load; ``str()`` is the problem, in one sentence."""


@dataclass(frozen=True)
class Condition:
    """A compiled, checked CEL condition.

    Attributes:
        source: the CEL text.
        program: the compiled ``cel.Program``.
        roots: root variables read, mapped to the first-level fields read, or
            ``None`` when the whole variable may be read (then it is passed whole).
        reads_arguments: True when it may read ``call.arguments``.
        expensive: True when it runs in the worker process.
    """

    source: str
    program: Any
    roots: dict[str, frozenset[str] | None]
    reads_arguments: bool
    expensive: bool = False

    @property
    def inputs_key(self) -> tuple:
        """Conditions with equal keys read the same pruned inputs (so share one converted context)."""
        return tuple(sorted((k, tuple(sorted(v)) if v is not None else None) for k, v in self.roots.items()))


def _tokens(source: str) -> list[tuple[str, str]]:
    out = []
    for m in _TOKEN.finditer(source):
        kind = m.lastgroup or "punct"
        if kind not in ("space", "comment"):
            out.append((kind, m.group()))
    return out


def _scan(tokens: list[tuple[str, str]]) -> tuple[int, set[str], dict[str, set[str] | None], list[str]]:
    """Macro depth, macro-bound names, root references, literal ``matches`` patterns."""
    depth, max_depth, stack = 0, 0, []
    bound: set[str] = set()
    roots: dict[str, set[str] | None] = {}
    patterns: list[str] = []
    for i, (kind, text) in enumerate(tokens):
        prev = tokens[i - 1][1] if i else ""
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if text == "(":
            is_macro = prev in MACROS and i >= 2 and tokens[i - 2][1] == "."
            stack.append(is_macro)
            if is_macro:
                depth += 1
                max_depth = max(max_depth, depth)
                if i + 1 < len(tokens) and tokens[i + 1][0] == "ident":
                    bound.add(tokens[i + 1][1])
            if prev == "matches" and i + 2 < len(tokens) and tokens[i + 1][0] == "string" and tokens[i + 2][1] == ")":
                patterns.append(tokens[i + 1][1])
        elif text == ")" and stack:
            depth -= stack.pop()
        elif kind == "ident" and prev != "." and nxt != "(" and text not in _KEYWORDS:
            field = None
            if nxt == "." and i + 2 < len(tokens) and tokens[i + 2][0] == "ident":
                called = i + 3 < len(tokens) and tokens[i + 3][1] == "("
                field = None if called else tokens[i + 2][1]
            if field is None:
                roots[text] = None
            elif text not in roots:
                roots[text] = {field}
            elif roots[text] is not None:
                roots[text].add(field)  # type: ignore[union-attr]
    return max_depth, bound, roots, patterns


def compile_condition(source: str, *, expensive: bool = False) -> Condition:
    """Compile and check a CEL condition (see the module docstring for what is rejected).

    Raises:
        ConditionError: the condition is rejected; the message says why.
    """
    if not source.strip():  # never "no condition": an allow rule would then allow every call it matches
        raise ConditionError("condition is empty: write a CEL expression, or leave 'when' out for a rule "
                             "without a condition")
    if len(source) > MAX_SOURCE_CHARS:
        raise ConditionError(f"condition is {len(source)} characters, above the limit of {MAX_SOURCE_CHARS}")
    try:
        program = cel.compile(source)
    except Exception as exc:  # the library raises ValueError with the parser's message
        first = str(exc).splitlines()
        raise ConditionError(f"condition does not compile: {' '.join(s.strip() for s in first[:2])}") from exc
    tokens = _tokens(source)
    max_depth, bound, roots, patterns = _scan(tokens)
    limit = MAX_MACRO_DEPTH_EXPENSIVE if expensive else MAX_MACRO_DEPTH
    if max_depth > limit:
        hint = "" if expensive else "; mark the rule expensive: true to run it in a worker with a hard time limit"
        raise ConditionError(f"condition nests comprehension macros {max_depth} deep, above the limit of {limit}{hint}")
    unknown_vars = (set(program.variables()) - bound) - VARIABLES
    unknown_vars |= {r for r in roots if r not in VARIABLES and r not in bound}
    if unknown_vars:
        raise ConditionError(
            f"condition reads unknown variable {sorted(unknown_vars)[0]!r}; known: {', '.join(sorted(VARIABLES))}"
        )
    unknown_funcs = [f for f in program.functions() if f[0] not in "_@!" and f != "-_" and f not in KNOWN_FUNCTIONS]
    if unknown_funcs:
        raise ConditionError(f"condition calls unknown function {unknown_funcs[0]!r}")
    for literal in patterns:
        try:
            cel.compile(f"''.matches({literal})").execute()
        except Exception as exc:
            detail = " ".join(str(exc).split())[:160]
            raise ConditionError(f"condition has an invalid regular expression {literal}: {detail}") from exc
    kept = {name: (frozenset(f) if f is not None else None) for name, f in roots.items() if name in VARIABLES}
    for name, fields in FIELDS.items():  # call, principal, agent, run: in that order
        unknown_fields = sorted((kept.get(name) or frozenset()) - fields) if name not in bound else []
        if unknown_fields:  # a typo: every call it reaches would be denied (or, behind has(), never matched)
            article = "an" if name[0] in "aeiou" else "a"
            raise ConditionError(f"condition reads {name}.{unknown_fields[0]}, which no {name} has ({article} {name} "
                                 f"has {', '.join(sorted(fields))})")
    unknown_counters = sorted((kept.get("usage") or frozenset()) - USAGE_COUNTERS) if "usage" not in bound else []
    if unknown_counters:  # a typo: every call it reaches would be denied (or, behind has(), never matched)
        raise ConditionError(f"condition reads usage.{unknown_counters[0]}, which is no usage counter (the counters "
                             f"are {', '.join(sorted(USAGE_COUNTERS))})")
    never = _never_bool(program, tokens, bound) if not kept else _top_level_not_bool(tokens)
    if never:
        raise ConditionError(f"{never}: every call it reaches would be denied with guardrail_error")
    call_fields = kept.get("call", frozenset())
    reads_arguments = "call" in kept and (call_fields is None or "arguments" in call_fields)
    return Condition(source, program, kept, reads_arguments, expensive)


_CEL_TYPES = {int: "int", float: "double", str: "string", bytes: "bytes", list: "list", dict: "map",
              _dt.datetime: "timestamp", _dt.timedelta: "duration"}  # fmt: skip
# Operators that may give a bool at the top level of an expression (CEL precedence: ?: < || < && < relations
# < + - < * / % < unary); "!" and "?" (also the optional-field ".?") are counted to stay on the safe side.
_MAY_BE_BOOL = frozenset({"?", "||", "&&", "==", "!=", "<", "<=", ">", ">=", "in", "!"})
_ARITHMETIC = frozenset({"+", "-", "*", "/", "%"})
_OPEN, _CLOSE = "([{", ")]}"


def _never_bool(program: Any, tokens: list[tuple[str, str]], bound: set[str]) -> str | None:
    """For a condition that reads no variable: why it can never be a bool, or ``None``."""
    if set(program.variables()) - bound:
        return None
    try:
        value = program.execute()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - CEL errors, incl. PyO3 panics
        return f"condition always fails ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
    if isinstance(value, bool):
        return None
    if value is None:
        return "condition is always null, never true or false"
    kind = _CEL_TYPES.get(type(value), type(value).__name__)
    try:
        text = repr(value) if isinstance(value, bytes) else json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    shown = f" {text}" if len(text) <= 60 else ""
    return f"condition is always the {kind}{shown}, never true or false"


def _top_level_not_bool(tokens: list[tuple[str, str]]) -> str | None:
    """Why an expression's top-level operation can never give a bool, or ``None`` when it may."""
    while tokens and tokens[0][1] == "(" and _closing(tokens, 0) == len(tokens) - 1:
        tokens = tokens[1:-1]
    if tokens and tokens[0][1] in "[{" and _closing(tokens, 0) == len(tokens) - 1:
        return f"condition is a {'list' if tokens[0][1] == '[' else 'map'} literal, never true or false"
    top, depth = [], 0
    for kind, text in tokens:
        if kind == "punct" and text in _OPEN:
            depth += 1
        elif kind == "punct" and text in _CLOSE:
            depth -= 1
        elif depth == 0 and kind in ("punct", "ident"):
            top.append(text)
    if any(t in _MAY_BE_BOOL for t in top):
        return None
    arithmetic = next((t for t in top if t in _ARITHMETIC), None)
    if arithmetic is not None:
        return f"condition is arithmetic (top-level '{arithmetic}'), never true or false"
    return None


def _closing(tokens: list[tuple[str, str]], i: int) -> int | None:
    """Index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(tokens)):
        kind, text = tokens[j]
        if kind == "punct" and text in _OPEN:
            depth += 1
        elif kind == "punct" and text in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    return None


def activation(cond: Condition, full: dict[str, Any]) -> dict[str, Any]:
    """The variables ``cond`` reads, pruned to the first-level fields it reads.

    Converting Python values into CEL values costs about 2 µs per mapping entry,
    so passing only what a condition reads keeps evaluation cheap. A missing
    field stays missing (``has()`` answers the same).
    """
    out: dict[str, Any] = {}
    for name, fields in cond.roots.items():
        value = full[name]
        if fields is not None and isinstance(value, dict):
            value = {k: value[k] for k in fields if k in value}
        out[name] = value
    return out
