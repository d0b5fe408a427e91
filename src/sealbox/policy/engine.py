"""The policy: loading, fingerprint, and fail-closed evaluation of one tool call.

Precedence: limits are checked first (a trip denies with ``limit_exceeded``);
then rules are examined in file order and the FIRST rule that matches decides.
A deny written after a matching allow never runs. No matching rule → deny with
``no_match``. A matching rule with ``require_grant: true`` takes its effect only
for a call that names an explicit grant: a call whose grant is
``implicit:<principal>`` is denied with ``grant_required``, naming the rule (whether
an explicit grant is valid is the recorder's grant check, ``grant_invalid``); a call
whose grant is not known (``CallContext.grant`` is None, as in older inputs) is
denied with ``guardrail_error``. Any failure while deciding (a condition that
raises, returns a non-bool, reads oversized input or runs over its time limit, or
any unexpected exception) → deny with ``guardrail_error``, naming the rule.
``evaluate`` never raises.
"""

from __future__ import annotations

import copy
import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealbox import canonical
from sealbox.errors import PolicyLoadError
from sealbox.policy import loader
from sealbox.policy._cel import cel
from sealbox.policy.conditions import Condition, ConditionError, activation, compile_condition
from sealbox.policy.limits import LimitSpec, check_limits
from sealbox.policy.model import ApprovalSpec, CallContext, Decision, LimitTrip
from sealbox.policy.rules import Rule, build_rule
from sealbox.policy.worker import default_worker

__all__ = ["Policy", "ALLOW_ALL", "CACHE_SIZE"]

CACHE_SIZE = 4096
"""Distinct (server, tool) pairs whose candidate rules are memoized."""

_PRINCIPAL = {"id": None, "role": None, "groups": [], "attributes": {}}
_AGENT = {"name": None, "attributes": {}}
_RUN = {"id": None, "labels": {}, "started_at": None, "elapsed_s": 0.0}
_EFFECT_CODES = {"allow": "policy_allow", "deny": "policy_deny", "require_approval": "policy_require_approval"}


class _Failure(Exception):
    """A condition failed; the call is denied with ``guardrail_error``."""


@dataclass
class _State:
    """Per-evaluation scratch: variables built lazily, the input-size check done once."""

    call: CallContext
    variables: dict[str, Any] | None = None
    size_checked: bool = False
    re_evaluable: bool = True
    contexts: dict[tuple, Any] = field(default_factory=dict)

    def full(self) -> dict[str, Any]:
        if self.variables is None:
            c = self.call
            now = c.now if c.now.tzinfo else c.now.replace(tzinfo=_dt.timezone.utc)
            call = {"server": c.server, "tool": c.tool, "arguments": c.arguments}
            if c.grant is not None:  # not known (older inputs): absent, so reading it fails closed
                call["grant"] = c.grant
            self.variables = {
                "call": call,
                "principal": {**_PRINCIPAL, **(c.principal or {})},
                "agent": {**_AGENT, **(c.agent or {})},
                "run": {**_RUN, **(c.run or {})},
                "usage": dict(c.usage or {}),
                "now": now,
            }
        return self.variables


def _size_bound(value: Any, budget: int) -> int:
    """An upper bound of the canonical JSON size of ``value``, or ``budget + 1`` once above it (also
    when it nests deeper than canonical JSON allows: measured exactly, it is then refused)."""
    stack, total, containers = [value], 0, 0
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += 6 * len(v) + 2
        elif v is None or isinstance(v, (bool, int, float)):
            total += 26
        elif isinstance(v, dict):
            total += 2 + 2 * len(v)
            containers += 1
            for k, item in v.items():
                stack.append(item)
                stack.append(k if isinstance(k, str) else str(k))
        elif isinstance(v, (list, tuple)):
            total += 2 + len(v)
            containers += 1
            stack.extend(v)
        else:
            return budget + 1  # not plain JSON: measure exactly
        if total > budget:
            return total
    # arguments nested thousands deep crash the CEL library's conversion (a segmentation fault): only
    # with more containers than the depth allowed can they nest deeper, so the walk below is rare
    if containers > canonical.MAX_DEPTH and _deeper_than(value, canonical.MAX_DEPTH):
        return budget + 1
    return total


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` deep."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, (list, tuple)):
            continue
        if depth >= limit:
            return True
        stack.extend((item, depth + 1) for item in v)
    return False


@dataclass(frozen=True, eq=False)
class Policy:
    """A loaded, validated policy. Build with :meth:`load`, :meth:`from_text` or :meth:`from_dict`.

    Attributes:
        name: the policy's name.
        fingerprint: ``sha256:<hex>`` of the RFC 8785 bytes of :meth:`to_dict`.
        rules: compiled rules, in file order.
        limits: the ``limits:`` section.
        prices: ``{"provider/model": {"input": per 1M, "output": per 1M}}``.
        source: the file it was read from, or ``"<string>"``.
    """

    name: str
    fingerprint: str
    rules: tuple[Rule, ...]
    limits: LimitSpec
    prices: dict[str, dict[str, float]]
    source: str
    timeout_ms: int
    max_input_bytes: int
    limit_bounds: tuple[tuple[str, int | float], ...]
    _normalized: dict[str, Any] = field(repr=False)
    _candidates: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read and validate a policy file.

        Raises:
            PolicyLoadError: missing file, invalid YAML, unknown field, wrong type,
                or a condition rejected at load; names the file and 1-based line.
        """
        return cls.from_text(loader.read_file(path), source=str(path))

    @classmethod
    def from_text(cls, text: str, source: str = "<string>") -> Policy:
        """Validate YAML 1.2 ``text`` as a policy (see :meth:`load`)."""
        doc, lines = loader.read_text(text, source)
        return cls._build(doc, lines, source)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>") -> Policy:
        """Validate an already-parsed mapping (same shape as the file, or :meth:`to_dict` output)."""
        return cls._build(d, {(): 1}, source)

    @classmethod
    def _build(cls, doc: Any, lines: loader.LineMap, source: str) -> Policy:
        loader.validate(doc, lines, source)
        norm = loader.normalize(doc)
        rules = tuple(_compile_rules(norm["rules"], lines, source))
        limits = LimitSpec.from_dict(norm["limits"])
        ev = norm["evaluation"]
        return cls(
            name=norm["name"],
            fingerprint=canonical.fingerprint(norm),
            rules=rules,
            limits=limits,
            prices=norm["prices"],
            source=source,
            timeout_ms=ev["timeout_ms"],
            max_input_bytes=ev["max_input_bytes"],
            limit_bounds=tuple(limits.bounds()),
            _normalized=norm,
        )

    def to_dict(self) -> dict[str, Any]:
        """The normalized policy (defaults filled in), a valid input of :meth:`from_dict`."""
        return copy.deepcopy(self._normalized)

    # ------------------------------------------------------------------ evaluation

    def candidates(self, server: str, tool: str) -> tuple[Rule, ...]:
        """Rules whose server and tool globs match, in order (memoized per pair)."""
        key = (server, tool)
        found = self._candidates.get(key)
        if found is None:
            found = tuple(r for r in self.rules if r.servers(server) and r.tools(tool))
            if len(self._candidates) >= CACHE_SIZE:
                self._candidates.clear()
            self._candidates[key] = found
        return found

    def evaluate(self, call: CallContext) -> Decision:
        """Decide one tool call. Never raises: any failure is a ``guardrail_error`` deny.

        Args:
            call: the call and everything the decision may read.

        Returns:
            The :class:`Decision`, with ``eval_us`` measured here.
        """
        t0 = time.perf_counter_ns()
        state = _State(call)
        try:
            effect, code, rule, reason, approval, trip = self._decide(call, state)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - fail closed, including Rust panics
            effect, code, rule, approval, trip = "deny", "guardrail_error", None, None, None
            reason = canonical.without_addresses(f"policy evaluation failed: {type(exc).__name__}: {exc}")
        return Decision(
            effect, code, rule, reason, self.fingerprint,  # type: ignore[arg-type]
            (time.perf_counter_ns() - t0) // 1000, approval, trip, state.re_evaluable,
        )  # fmt: skip

    def _decide(
        self, call: CallContext, state: _State
    ) -> tuple[str, str, str | None, str, ApprovalSpec | None, LimitTrip | None]:
        if self.limit_bounds:
            try:
                trip = check_limits(self, call)
            except Exception as exc:
                return "deny", "guardrail_error", None, canonical.without_addresses(f"limit check failed: {exc}"), None, None
            if trip is not None:
                reason = f"limit {trip.limit} exceeded: {trip.current} > {trip.bound}"
                return "deny", "limit_exceeded", None, reason, None, trip
        for rule in self.candidates(call.server, call.tool):
            if rule.principal or rule.agent or rule.labels:
                if rule.mismatch(call) is not None:
                    continue
            if rule.condition is not None:
                try:
                    if not self.run_condition(rule.condition, state):
                        continue
                except _Failure as exc:
                    why = canonical.without_addresses(_without_argument_values(str(exc), call.arguments))
                    return "deny", "guardrail_error", rule.id, f"rule {rule.id!r}: {why}", None, None
            if rule.require_grant:
                refusal = _grant_refusal(rule, call.grant)
                if refusal is not None:
                    return "deny", refusal[0], rule.id, refusal[1], None, None
            code = _EFFECT_CODES[rule.effect]
            return rule.effect, code, rule.id, _reason(rule), rule.approval, None
        return "deny", "no_match", None, f"no rule matches {call.server}/{call.tool}; default is deny", None, None

    def run_condition(self, cond: Condition, state: _State) -> bool:
        """Evaluate one condition for ``state.call``; raise ``_Failure`` on any failure.

        A ``RecursionError`` is let through: the stack ran out while the condition was
        evaluated, which is the caller's stack depth, not the rule's failure (the conversion
        for CEL and the worker's pickling run within the caller's recursion limit). It reaches
        :meth:`evaluate`, whose deny (``guardrail_error``, no rule: ``policy evaluation failed:
        RecursionError: …``) the recorder turns into its ``RecordingError`` ("Sealbox ran out of
        stack recording this"), nothing written, the tool not run."""
        if cond.reads_arguments:
            if state.call.redacted:
                state.re_evaluable = False
            if not state.size_checked:
                self._check_size(state.call.arguments)
                state.size_checked = True
        key = cond.inputs_key
        context = state.contexts.get(key)
        try:
            if cond.expensive:
                return self._run_in_worker(cond, activation(cond, state.full()))
            if context is None:  # converting Python values to CEL is the costly part: once per input set
                context = state.contexts[key] = cel.Context(activation(cond, state.full()))
        except (_Failure, RecursionError):  # RecursionError: the caller's stack ran out (docstring)
            raise
        except Exception as exc:
            raise _Failure(f"cannot prepare condition inputs: {type(exc).__name__}: {exc}") from exc
        t0 = time.perf_counter()
        try:
            result = cond.program.execute(context)
        except (KeyboardInterrupt, SystemExit, RecursionError):  # RecursionError: as above
            raise
        except BaseException as exc:  # noqa: BLE001 - CEL errors, incl. PyO3 panics
            why = _short(_without_argument_values(str(exc), state.call.arguments))  # before it is cut
            raise _Failure(f"condition raised {type(exc).__name__}: {why}") from exc
        elapsed_ms = (time.perf_counter() - t0) * 1000
        if elapsed_ms > self.timeout_ms:
            # wall-clock time: the process may have been descheduled meanwhile (a loaded host stalls it for
            # tens of ms now and then), which made a cheap condition a guardrail_error. A condition is pure:
            # timed once more, it is over the limit only if it is so again (no cost when under the limit)
            t0 = time.perf_counter()
            try:
                result = cond.program.execute(context)
            except (KeyboardInterrupt, SystemExit, RecursionError):
                raise
            except BaseException as exc:  # noqa: BLE001 - as above (it did not raise the first time)
                why = _short(_without_argument_values(str(exc), state.call.arguments))
                raise _Failure(f"condition raised {type(exc).__name__}: {why}") from exc
            elapsed_ms = min(elapsed_ms, (time.perf_counter() - t0) * 1000)
            if elapsed_ms > self.timeout_ms:
                raise _Failure(f"condition took {elapsed_ms:.1f} ms, above the time limit of {self.timeout_ms} ms")
        if not isinstance(result, bool):
            raise _Failure(f"condition returned {type(result).__name__}, not a bool")
        return result

    def _check_size(self, arguments: Any) -> None:
        cap = self.max_input_bytes
        if _size_bound(arguments, cap) <= cap:
            return
        if _deeper_than(arguments, canonical.MAX_DEPTH):  # never converted for CEL: that crashes the process
            raise _Failure(f"arguments nest lists or mappings more than {canonical.MAX_DEPTH} levels deep")
        try:
            size = len(canonical.dumps(arguments))
        except Exception as exc:
            raise _Failure(f"cannot measure arguments: {type(exc).__name__}: {exc}") from exc
        if size > cap:
            raise _Failure(f"arguments are {size} bytes of canonical JSON, above max_input_bytes {cap}")

    def _run_in_worker(self, cond: Condition, variables: dict[str, Any]) -> bool:
        try:
            status, value = default_worker().evaluate(cond.source, variables, self.timeout_ms / 1000)
        except RecursionError:  # sending the inputs (pickling them) ran out of the caller's stack: as above
            raise
        except Exception as exc:
            raise _Failure(f"expensive condition could not run: {type(exc).__name__}: {exc}") from exc
        if status == "timeout":
            raise _Failure(f"expensive condition exceeded the time limit of {self.timeout_ms} ms twice; worker killed")
        if status == "error":
            call = variables.get("call")
            arguments = call.get("arguments") if isinstance(call, dict) else None
            raise _Failure(f"condition raised {_short(_without_argument_values(str(value), arguments))}")
        if status == "nonbool":
            raise _Failure(f"condition returned {value}, not a bool")
        return bool(value)


def _grant_refusal(rule: Rule, grant: Any) -> tuple[str, str] | None:
    """``(reason_code, reason)`` when a ``require_grant`` rule refuses ``grant``, else ``None``.

    An implicit grant is ``grant_required``; a grant that is not known (inputs recorded before
    the call's grant was) or not a string is ``guardrail_error``: the guardrail cannot answer.
    """
    if isinstance(grant, str) and grant and not grant.startswith("implicit:"):
        return None
    if isinstance(grant, str) and grant:
        return "grant_required", (f"rule {rule.id!r} requires an explicit grant; the call's grant is {grant} "
                                  "(implicit: it names no access grant)")
    if grant is None:
        return "guardrail_error", (f"rule {rule.id!r} requires an explicit grant, and the call's grant is "
                                   "not known (none given, as in inputs recorded before call.grant)")
    return "guardrail_error", f"rule {rule.id!r} requires an explicit grant, and the call's grant {grant!r} is not a grant id"


#: What an argument's value quoted by a condition's error becomes in the decision's reason.
ARGUMENT_VALUE = "<an argument's value>"


def _without_argument_values(text: str, arguments: Any, minimum: int = 4) -> str:
    """``text`` (a condition's error, which may quote the value it failed on: CEL's ``matches``
    quotes the regex) with every string of the call's arguments of at least ``minimum`` characters
    replaced by :data:`ARGUMENT_VALUE`. A decision's reason is stored in clear in every content
    mode, while the arguments themselves are redacted (a password) or kept only as a marker
    (``hashes-only``)."""
    found: set[str] = set()
    stack, budget = [arguments], 100_000
    while stack and budget > 0:
        budget -= 1
        value = stack.pop()
        if isinstance(value, str):
            # a multi-line value is quoted line by line (the regex crate numbers a pattern's lines)
            for part in (value, *value.splitlines()) if "\n" in value or "\r" in value else (value,):
                if len(part) >= minimum and part in text:
                    found.add(part)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    for value in sorted(found, key=len, reverse=True):
        text = text.replace(value, ARGUMENT_VALUE)
    return text


def _short(exc: Any) -> str:
    return " ".join(str(exc).split())[:200]


def _reason(rule: Rule) -> str:
    """The reason of a decision ``rule`` made: formatted once per rule (a frozen Rule, hashed by
    identity) and kept, not per call."""
    found = _REASONS.get(rule)
    if found is None:
        what = {"allow": "allows", "deny": "denies", "require_approval": "requires approval for"}[rule.effect]
        cond = f" (condition true: {rule.condition.source})" if rule.condition else ""
        found = f"rule {rule.id!r} {what} the call{cond}"
        if len(_REASONS) >= 4096:
            _REASONS.clear()
        _REASONS[rule] = found
    return found


_REASONS: dict[Rule, str] = {}


def _compile_rules(specs: list[dict[str, Any]], lines: loader.LineMap, source: str) -> list[Rule]:
    seen: dict[str, int] = {}
    out = []
    for i, spec in enumerate(specs):
        line = loader.line_of(lines, ("rules", i))
        rid = spec["id"]
        if rid in seen:
            raise PolicyLoadError(source, loader.line_of(lines, ("rules", i, "id")), f"duplicate rule id {rid!r}")
        seen[rid] = i
        _check_approval(spec, lines, source, i)
        if spec.get("require_grant") and spec["effect"] == "deny":
            where = loader.line_of(lines, ("rules", i, "require_grant"))
            raise PolicyLoadError(source, where, f"rule {rid!r}: require_grant is only allowed with effect allow or "
                                  "require_approval (a deny rule denies every call it matches, with or without a grant)")
        condition = None
        if spec["when"] is not None:
            try:
                condition = compile_condition(spec["when"], expensive=spec["expensive"])
            except ConditionError as exc:
                where = loader.line_of(lines, ("rules", i, "when"))
                raise PolicyLoadError(source, where, f"rule {rid!r}: {exc}") from exc
        elif spec["expensive"]:
            where = loader.line_of(lines, ("rules", i, "expensive"))
            raise PolicyLoadError(source, where, f"rule {rid!r}: expensive: true needs a 'when' condition")
        out.append(build_rule(spec, i, line, condition))
    return out


def _check_approval(spec: dict[str, Any], lines: loader.LineMap, source: str, i: int) -> None:
    rid, approval = spec["id"], spec["approval"]
    if spec["effect"] == "require_approval":
        if approval is None:
            where = loader.line_of(lines, ("rules", i, "effect"))
            raise PolicyLoadError(source, where, f"rule {rid!r}: require_approval needs an 'approval' section")
        where = loader.line_of(lines, ("rules", i, "approval"))
        if not approval["groups"] and not approval["identities"]:
            raise PolicyLoadError(source, where, f"rule {rid!r}: approval names no groups and no identities")
        if not approval["groups"] and approval["quorum"] > len(approval["identities"]):
            raise PolicyLoadError(
                source, where, f"rule {rid!r}: quorum {approval['quorum']} is more than the {len(approval['identities'])} identities named"
            )
    elif approval is not None:
        where = loader.line_of(lines, ("rules", i, "approval"))
        raise PolicyLoadError(source, where, f"rule {rid!r}: 'approval' is only allowed with effect require_approval")


ALLOW_ALL: Policy = Policy.from_dict(
    {
        "version": 1,
        "name": "ALLOW_ALL",
        "description": "Allows every tool call. An explicit choice, recorded with its fingerprint.",
        "rules": [{"id": "allow-all", "effect": "allow"}],
    },
    source="<ALLOW_ALL>",
)
"""A policy with one rule, ``allow-all``, that allows every call (limits: none)."""
