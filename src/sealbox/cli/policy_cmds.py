"""``sealbox policy``: check, test and explain policy files."""

from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Any

import click

from sealbox.cli.common import BadInput, not_empty
from sealbox.errors import PolicyLoadError
from sealbox.yaml_text import written as _written

__all__ = ["policy_group"]


@click.group("policy")
def policy_group() -> None:
    """Check, test and explain policy files."""


def _load(path: str) -> Any:
    from sealbox.policy import Policy

    return Policy.load(path)


@policy_group.command("check")
@click.argument("file", callback=not_empty, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def check_cmd(file: str, as_json: bool) -> None:
    """Validate FILE; print its fingerprint and warn about rules that can never match."""
    from sealbox.policy.analysis import lint

    policy = _load(file)
    warnings = lint(policy)
    if as_json:
        click.echo(json.dumps({"file": file, "name": policy.name, "fingerprint": policy.fingerprint,
                               "rules": len(policy.rules), "warnings": [w.to_dict() for w in warnings]},
                              indent=2))  # fmt: skip
        return
    click.echo(f"ok: {file}: policy {policy.name!r}, {len(policy.rules)} rule{'' if len(policy.rules) == 1 else 's'}")
    click.echo(f"fingerprint: {policy.fingerprint}")
    for w in warnings:
        click.echo(f"warning: {file}:{w.line}: {w.message}", err=True)


class _Where(str):
    """A case's place, ``file:line`` (what it prints), which also knows the line of each field of the case."""

    source: str
    lines: dict[tuple, int]
    base: tuple

    def __new__(cls, text: str, source: str, lines: dict[tuple, int], base: tuple) -> "_Where":
        self = super().__new__(cls, text)
        self.source, self.lines, self.base = source, lines, base
        return self


def _at(where: str, *path: Any) -> str:
    """Where a field of a case is written (``file:line`` of ``expect.effect``), or ``where`` itself when
    the field has no line of its own (``explain``'s options, a field left out)."""
    if isinstance(where, _Where):
        full = where.base + path
        while len(full) > len(where.base):
            if full in where.lines:
                return f"{where.source}:{where.lines[full]}"
            full = full[:-1]
    return where


def _non_finite(value: Any, path: tuple = ()) -> tuple | None:
    """The path of the first NaN or ±Infinity in ``value`` (nested lists and mappings), or ``None``."""
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return p
        if isinstance(v, dict):
            stack.extend(reversed([(item, p + (k,)) for k, item in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(item, p + (i,)) for i, item in enumerate(v)]))
    return None


def _call_from(spec: dict[str, Any], where: str) -> Any:
    from sealbox.policy import CallContext

    if not isinstance(spec, dict) or "tool" not in spec:
        raise BadInput(f"{_at(where, 'call')}: 'call' must be a mapping with at least 'tool'")
    known = {"server", "tool", "arguments", "principal", "agent", "run", "usage", "now", "redacted", "grant"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise BadInput(f"{_at(where, 'call', unknown[0])}: unknown field 'call.{unknown[0]}'")
    for name in ("tool", "server"):
        if name in spec and not (isinstance(spec[name], str) and (spec[name] or name == "server")):
            raise BadInput(f"{_at(where, 'call', name)}: 'call.{name}' must be a {'non-empty ' if name == 'tool' else ''}string, "
                           f"not {_shown(spec[name])}")
    for name in ("principal", "agent", "run", "usage"):
        value = spec.get(name)
        if value is not None and not isinstance(value, dict) and not (name == "principal" and isinstance(value, str)):
            kind = "an id (a string) or a mapping" if name == "principal" else "a mapping"
            raise BadInput(f"{_at(where, 'call', name)}: 'call.{name}' must be {kind}, not {_shown(value)}")
    if "redacted" in spec and not isinstance(spec["redacted"], bool):
        raise BadInput(f"{_at(where, 'call', 'redacted')}: 'call.redacted' must be true or false, not "
                       f"{_shown(spec['redacted'])}")
    if "arguments" in spec and not isinstance(spec["arguments"], dict):
        raise BadInput(f"{_at(where, 'call', 'arguments')}: 'call.arguments' must be a mapping, not "
                       f"{_shown(spec['arguments'])}")
    bad = _non_finite(spec.get("arguments") or {})
    if bad is not None:  # explain --args refuses them as JSON does: arguments are JSON, which has none
        name = "call.arguments" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in bad)
        value = spec["arguments"]
        for p in bad:
            value = value[p]
        raise BadInput(f"{_at(where, 'call', 'arguments', *bad)}: '{name}' is {_written(value)}: a call's arguments "
                       "are JSON, which has no NaN or Infinity")
    principal = _principal(spec.get("principal"), where, "call.principal")
    grant = _grant(spec, principal.get("id"), where)
    _check_context(spec, where)
    now = spec.get("now")
    if now is not None:
        if not isinstance(now, str):
            raise BadInput(f"{_at(where, 'call', 'now')}: 'call.now' must be an RFC 3339 time as a string, not "
                           f"{_shown(now)}")
        try:
            now = _dt.datetime.fromisoformat(now.replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(f"{_at(where, 'call', 'now')}: 'call.now' {now!r} is not an RFC 3339 time "
                           "(e.g. 2026-01-31T09:00:00Z)") from None
    return CallContext(
        server=str(spec.get("server", "")), tool=str(spec["tool"]), arguments=spec.get("arguments", {}),
        principal=principal, agent=spec.get("agent") or {}, run=spec.get("run") or {},
        usage=spec.get("usage") or {}, now=now or _dt.datetime.now(_dt.timezone.utc),
        redacted=bool(spec.get("redacted", False)), grant=grant,
    )  # fmt: skip


def _grant(spec: dict[str, Any], principal: Any, where: str) -> str | None:
    """The case's ``call.grant``, checked as the Recorder checks it. Left out, the call names no
    grant, as a recorder call without ``grant=``: ``implicit:<principal id>``; with no principal
    either, the grant is not known (as in inputs recorded before ``call.grant``), which fails closed."""
    if "grant" not in spec:
        return f"implicit:{principal}" if principal else None
    grant = spec["grant"]
    if not isinstance(grant, str) or not grant:
        raise BadInput(f"{_at(where, 'call', 'grant')}: 'call.grant' must be a grant id or 'implicit:<principal id>' (a non-empty "
                       f"string), not {_shown(grant)}")
    if grant.startswith("implicit:") and grant != f"implicit:{principal}":
        mine = f"only 'implicit:{principal}'" if principal else "none (the case gives no principal)"
        raise BadInput(f"{_at(where, 'call', 'grant')}: 'call.grant' {grant!r} is not this call's implicit grant: it may name {mine}, "
                       "or an access grant id")
    return grant


_PRINCIPAL_KEYS = ("id", "role", "groups", "attributes")
#: What a case may say of the agent and the run (the Recorder's CallContext: sealbox.policy.CallContext).
_AGENT_KEYS = {"name": "a string", "attributes": "a mapping"}
_RUN_KEYS = {"id": "a string", "labels": "a mapping of strings", "started_at": "an RFC 3339 time as a string",
             "elapsed_s": "a number of seconds (0 or more)"}
#: The usage counters a case may set (sealbox.policy.limits.LIMIT_COUNTERS, but elapsed_s, which is run's).
_USAGE_KEYS = ("tool_calls_run", "calls_minute_agent", "calls_minute_tool", "tokens_run", "tokens_day", "cost_run",
               "cost_day")


def _count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _check_context(spec: dict[str, Any], where: str) -> None:
    """Refuse a case's ``agent``, ``run`` or ``usage`` whose fields a real call never has: a wrong
    type there used to be evaluated as it came and end as a ``guardrail_error`` deny, which a
    test expecting a deny would take for a pass (break test of 2026-12-02)."""
    agent, run, usage = spec.get("agent") or {}, spec.get("run") or {}, spec.get("usage") or {}
    for name, fields, value in (("agent", _AGENT_KEYS, agent), ("run", _RUN_KEYS, run)):
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise BadInput(f"{_at(where, 'call', name, unknown[0])}: unknown field 'call.{name}.{unknown[0]}' (it has {', '.join(fields)})")
    checks = {
        ("agent", "name"): isinstance(agent.get("name"), str),
        ("agent", "attributes"): isinstance(agent.get("attributes"), dict),
        ("run", "id"): isinstance(run.get("id"), str),
        ("run", "labels"): isinstance(run.get("labels"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in run["labels"].items()),
        ("run", "started_at"): isinstance(run.get("started_at"), str) and _rfc3339(run["started_at"]),
        ("run", "elapsed_s"): _count(run.get("elapsed_s")),
    }
    for (name, field), ok in checks.items():
        source = agent if name == "agent" else run
        if field in source and not ok:
            kinds = _AGENT_KEYS if name == "agent" else _RUN_KEYS
            raise BadInput(f"{_at(where, 'call', name, field)}: 'call.{name}.{field}' must be {kinds[field]}, not "
                           f"{_shown(source[field])}")
    for key, value in usage.items():
        if key not in _USAGE_KEYS:
            raise BadInput(f"{_at(where, 'call', 'usage', key)}: unknown usage counter 'call.usage.{key}' (counters: {', '.join(_USAGE_KEYS)})")
        if not _count(value):
            raise BadInput(f"{_at(where, 'call', 'usage', key)}: 'call.usage.{key}' must be a number (0 or more), not {_shown(value)}")


def _rfc3339(text: str) -> bool:
    try:
        _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _principal(value: Any, where: str, name: str) -> dict[str, Any]:
    """A principal given as an id or a mapping, checked as the Recorder checks it
    (:class:`sealbox.recorder.Principal`): a string ``groups`` is refused, never read as
    one group per character. ``role`` may also be null (no role). ``None`` is no principal."""
    from sealbox.errors import ConfigError
    from sealbox.recorder import Principal

    if value is None:
        return {}
    principal = {"id": value} if isinstance(value, str) else value
    if not isinstance(principal, dict):
        raise BadInput(f"{_at(where, *name.split('.'))}: '{name}' must be an id (a string) or a mapping, not "
                       f"{_shown(value)}")
    unknown = sorted(set(principal) - set(_PRINCIPAL_KEYS))
    if unknown:
        raise BadInput(f"{_at(where, *name.split('.'), unknown[0])}: unknown field '{name}.{unknown[0]}' (a principal has {', '.join(_PRINCIPAL_KEYS)})")
    role = principal.get("role")
    try:  # the Recorder's own checks and messages (its role defaults to "agent"; here null means no role)
        Principal(principal.get("id"), role if isinstance(role, str) else "", principal.get("groups", []),
                  principal.get("attributes"))  # fmt: skip
    except ConfigError as exc:
        raise BadInput(f"{_at(where, *name.split('.'))}: {exc}") from None
    if role is not None and not isinstance(role, str):
        raise BadInput(f"{_at(where, *name.split('.'), 'role')}: principal {principal['id']}: role must be a string or null, got {type(role).__name__}")
    return principal


def _shown(value: Any) -> str:
    """A wrongly typed value for an error line, in the terms of the YAML or JSON it was written in:
    ``null``, ``true``, ``the number 5``, ``the string "x"``, ``a list [1, 2]``, ``a mapping {...}``
    (the value left out when it is long)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kind = ("the number" if isinstance(value, (int, float)) else "the string" if isinstance(value, str)
            else "a list" if isinstance(value, (list, tuple)) else "a mapping" if isinstance(value, dict)
            else "a value")
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else _written(value)  # .nan, [.inf]
    return f"{kind} {text}" if len(text) <= 40 else kind


_EXPECT_KEYS = ("effect", "rule", "reason_code")
_CASE_KEYS = ("name", "call", "expect")


def _check_expect(expect: Any, where: str, rules: list[str]) -> dict[str, Any]:
    """A case's ``expect``: a mapping of effect, rule and/or reason_code with legal values; a rule
    that is one of ``rules`` (the policy's), or null."""
    from sealbox.policy import EFFECTS, REASON_CODES

    if not isinstance(expect, dict):
        raise BadInput(f"{_at(where, 'expect')}: 'expect' must be a mapping of effect, rule and/or reason_code")
    unknown = sorted(set(expect) - set(_EXPECT_KEYS))
    if unknown:
        raise BadInput(f"{_at(where, 'expect', unknown[0])}: unknown field 'expect.{unknown[0]}' (expect gives effect, rule and/or reason_code)")
    if not expect:
        raise BadInput(f"{_at(where, 'expect')}: 'expect' is empty: give effect, rule and/or reason_code")
    if "effect" in expect and expect["effect"] not in EFFECTS:
        raise BadInput(f"{_at(where, 'expect', 'effect')}: 'expect.effect' {_written(expect['effect'])} is not one of {', '.join(EFFECTS)}")
    if "reason_code" in expect and expect["reason_code"] not in REASON_CODES:
        raise BadInput(f"{_at(where, 'expect', 'reason_code')}: 'expect.reason_code' {_written(expect['reason_code'])} is not one of "
                       f"{', '.join(REASON_CODES)}")  # fmt: skip
    if "rule" in expect and expect["rule"] is not None and not isinstance(expect["rule"], str):
        raise BadInput(f"{_at(where, 'expect', 'rule')}: 'expect.rule' must be a rule id (a string) or null")
    if isinstance(expect.get("rule"), str) and expect["rule"] not in rules:  # it was a FAIL: "got 'rest'"
        shown = ", ".join(rules[:10]) + (", ..." if len(rules) > 10 else "")
        raise BadInput(f"{_at(where, 'expect', 'rule')}: 'expect.rule' {expect['rule']!r} is not a rule of the policy "
                       f"({'its rules: ' + shown if rules else 'it has no rules'})")
    return expect


def _read_yaml_list(path: str) -> tuple[list[Any], dict[int, int], dict[tuple, int]]:
    """The cases, the line of each, and the line of each field of each (by path: ``(i, "expect", "effect")``)."""
    from sealbox.policy import loader

    tree = loader.load_tree(loader.read_file(path), path)  # not YAML: one line, at its line
    if isinstance(tree, dict) and "cases" in tree:
        tree = tree["cases"]
    if not isinstance(tree, list):
        raise PolicyLoadError(path, 1, "a cases file is a list of {call, expect} (or a mapping with 'cases')")
    if not tree:
        raise PolicyLoadError(path, 1, "the cases file holds no case (a test that tests nothing cannot pass)")
    lines = {i: tree.lc.item(i)[0] + 1 for i in range(len(tree))}
    fields: dict[tuple, int] = {}
    return [loader.to_plain(item, (i,), fields, [0], path) for i, item in enumerate(tree)], lines, fields


@policy_group.command("test")
@click.argument("file", callback=not_empty, type=click.Path(dir_okay=False))
@click.argument("cases", callback=not_empty, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def test_cmd(file: str, cases: str, as_json: bool) -> None:
    """Run table tests: each case in CASES gives a call and the expected effect (and rule)."""
    policy = _load(file)
    items, lines, fields = _read_yaml_list(cases)
    results, failed = [], 0
    for i, case in enumerate(items):
        where = _Where(f"{cases}:{lines[i]}", cases, fields, (i,))
        if not isinstance(case, dict):
            raise BadInput(f"{where}: a case needs 'call' and 'expect'")
        # an unknown key first: a misspelt 'expect' beside a valid one would pass unchecked, and one
        # in place of 'expect' is named rather than reported as a missing 'expect'
        unknown = sorted(set(case) - set(_CASE_KEYS), key=str)
        if unknown:
            raise BadInput(f"{_at(where, unknown[0])}: unknown field {str(unknown[0])!r} (a case has {', '.join(_CASE_KEYS)})")
        if "call" not in case or "expect" not in case:
            raise BadInput(f"{where}: a case needs 'call' and 'expect'")
        expect = _check_expect(case["expect"], where, [r.id for r in policy.rules])
        decision = policy.evaluate(_call_from(case["call"], where))
        problems = [f"{k}: expected {_written(expect[k])}, got {_written(getattr(decision, k))}"
                    for k in ("effect", "rule", "reason_code") if k in expect and expect[k] != getattr(decision, k)]  # fmt: skip
        failed += bool(problems)
        name = case.get("name") or f"case {i + 1}"
        results.append({"case": name, "line": lines[i], "passed": not problems, "problems": problems,
                        "decision": decision.to_payload()})  # fmt: skip
    if as_json:
        click.echo(json.dumps({"passed": len(items) - failed, "failed": failed, "results": results}, indent=2))
    else:
        for r in results:
            status = "PASS" if r["passed"] else "FAIL"
            click.echo(f"{status} {r['case']} ({cases}:{r['line']})" + "".join(f"\n  {p}" for p in r["problems"]))
        click.echo(f"{len(items) - failed} passed, {failed} failed")
    if failed:
        raise click.exceptions.Exit(1)


def _json_option(text: str, option: str) -> Any:
    """The JSON value of an option (RFC 8259: no NaN or Infinity).

    Raises:
        BadInput: not JSON, a NaN/Infinity constant, or nested too deeply for the parser.
    """
    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{option} is not JSON: {exc}") from None
    except ValueError as exc:
        raise BadInput(f"{option} is not JSON: {exc}") from None
    except RecursionError:
        raise BadInput(f"{option} is nested too deeply (arrays or objects hundreds of levels deep)") from None


@policy_group.command("explain")
@click.argument("file", callback=not_empty, type=click.Path(dir_okay=False))
@click.option("--tool", "-t", required=True,
              help="Upstream tool name; without --server, SERVER/TOOL as listings print a call (db/write_query).")
@click.option("--args", "args_json", default="{}", show_default=True, help="Arguments, as JSON.")
@click.option("--server", "-s", default=None, help="Upstream server id.")
@click.option("--principal", "-p", default=None, help="Principal id, or a JSON object {id, role, groups, attributes}.")
@click.option("--grant", "-g", default=None,
              help="The grant the call names (a grant id). Default: none, so implicit:<principal> "
                   "(not known without --principal, which a grant-reading rule denies).")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
def explain_cmd(file: str, tool: str, args_json: str, server: str | None, principal: str | None,
                grant: str | None, as_json: bool) -> None:
    """Show which rule decides a call and why, rule by rule."""
    from sealbox.policy.analysis import explain

    policy = _load(file)
    if not tool:
        raise BadInput("--tool must be a non-empty tool name")
    if server is None:
        server = ""
        head, sep, rest = tool.partition("/")
        if sep and head and rest:  # db/write_query, as `calls` and `runs show` print a call
            server, tool = head, rest
            click.echo(f"note: --tool {head + sep + rest!r} read as --server {head} --tool {rest} (SERVER/TOOL, as "
                       "listings print a call); give --server to name a tool whose own name holds a '/'", err=True)
    arguments = _json_option(args_json, "--args")
    if not isinstance(arguments, dict):
        raise BadInput(f"--args must be a JSON object, not {_shown(arguments)}")
    who: Any = None
    if principal is not None:
        who = _json_option(principal, "--principal") if principal.lstrip().startswith("{") else principal
    who = _principal(who, "--principal", "principal") or None
    spec = {"server": server, "tool": tool, "arguments": arguments, "principal": who}
    if grant is not None:
        spec["grant"] = grant
    call = _call_from(spec, "explain")
    decision, steps = explain(policy, call)
    if as_json:
        click.echo(json.dumps({"decision": decision.to_payload(), "steps": steps}, indent=2))
        return
    for s in steps:
        click.echo(f"{s['outcome']:<16} {s['rule']} (line {s['line']}): {s['why']}")
    click.echo(f"decision: {decision.effect} ({decision.reason_code}) rule={decision.rule}: {decision.reason}")
