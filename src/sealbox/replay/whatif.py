"""What-if: ask the record a different question, without re-running anything.

- :func:`whatif_policy`: evaluate a policy against every recorded tool call of
  some runs (from each decision's recorded inputs, :mod:`sealbox.policy.audit`)
  and list the calls whose decision would change — allow → deny,
  allow → require_approval, and back — with the rules on both sides. Decisions
  that read redacted content, or whose inputs were erased, are listed as not
  re-evaluable: they are never evaluated on a redaction marker. Every call the
  policy could not decide (``guardrail_error``: a condition raised) is listed too,
  whether or not its effect changes. A recorded
  ``prompts/get`` / ``resources/read`` (a ``tool.call`` with ``method``) is evaluated
  as the gateway decides it: a ``require_approval`` is the deny ``approval_unavailable``.
- :func:`whatif_snapshot`: which recorded runs ran under a configuration whose
  field (``model.version``, ``system_prompt``, ``tools.<server>/<name>.version``…)
  had a given value — for example a model version later found faulty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from sealbox.errors import ConfigError
from sealbox.events import SYSTEM_RUN_ID

__all__ = ["DecisionChange", "NotReEvaluable", "PolicyErrorAt", "WhatIfReport", "select_runs", "whatif_policy", "whatif_snapshot"]


@dataclass(frozen=True)
class DecisionChange:
    """A recorded call whose decision would differ under the new policy.

    Attributes:
        run_id, step, call_id, server, tool: where the call is.
        before, after: the recorded and the new effect.
        rule_before, rule_after: the deciding rules (None: no rule, the default).
        reason: the new decision's explanation.
    """

    run_id: str
    step: str
    call_id: str
    server: str
    tool: str
    before: str
    after: str
    rule_before: str | None
    rule_after: str | None
    reason: str

    @property
    def rule(self) -> str | None:
        """The rule responsible for the change: the new deciding rule, else the one that no longer decides."""
        return self.rule_after or self.rule_before

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"run_id": self.run_id, "step": self.step, "call_id": self.call_id, "server": self.server,
                "tool": self.tool, "change": f"{self.before} -> {self.after}", "before": self.before,
                "after": self.after, "rule": self.rule, "rule_before": self.rule_before,
                "rule_after": self.rule_after, "reason": self.reason}


@dataclass(frozen=True)
class NotReEvaluable:
    """A recorded decision that cannot be evaluated again, and why."""

    run_id: str
    step: str
    call_id: str
    server: str
    tool: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"run_id": self.run_id, "step": self.step, "call_id": self.call_id, "server": self.server,
                "tool": self.tool, "why": self.why}


@dataclass(frozen=True)
class PolicyErrorAt:
    """A recorded call the new policy could not decide: it denies it ``guardrail_error`` (a condition
    raised, returned no bool, took too long…), whatever the recorded effect was.

    Attributes:
        run_id, step, call_id, server, tool: where the call is.
        before: the recorded effect.
        rule: the rule that failed (None: the policy failed before any rule, e.g. a limit check).
        reason: the new decision's reason, naming the error.
    """

    run_id: str
    step: str
    call_id: str
    server: str
    tool: str
    before: str
    rule: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"run_id": self.run_id, "step": self.step, "call_id": self.call_id, "server": self.server,
                "tool": self.tool, "before": self.before, "rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class WhatIfReport:
    """What a policy would have changed over some runs.

    Attributes:
        policy: the new policy's fingerprint.
        runs: the runs examined.
        evaluated: decisions evaluated again.
        changed: decisions whose effect would change.
        not_re_evaluable: decisions that could not be evaluated again.
        errors: the calls the new policy could not decide (``guardrail_error``), changed or not: a
            recorded deny that the new policy denies only because its condition raised is listed here.
    """

    policy: str
    runs: tuple[str, ...]
    evaluated: int
    changed: tuple[DecisionChange, ...]
    not_re_evaluable: tuple[NotReEvaluable, ...]
    errors: tuple[PolicyErrorAt, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``sealbox whatif --json``)."""
        return {"policy": self.policy, "runs": list(self.runs), "evaluated": self.evaluated,
                "changed": [c.to_dict() for c in self.changed],
                "not_re_evaluable": [n.to_dict() for n in self.not_re_evaluable],
                "errors": [e.to_dict() for e in self.errors]}


def select_runs(store: Any, run_ids: Iterable[str] = (), since: Any = None) -> list[str]:
    """The runs named, or every agent run started since ``since`` (``30d``, a date…), oldest first.

    Replays (runs with ``replay_of``) are left out of ``since``: their decisions were served from the record.

    Raises:
        ConfigError: neither given, an unknown run, or a bad time.
    """
    ids = list(run_ids)
    if ids:
        for run_id in ids:
            if run_id == SYSTEM_RUN_ID:
                raise ConfigError(f"{SYSTEM_RUN_ID!r} is the store's system run, not an agent's run: it holds no "
                                  "decisions to evaluate")
            if not store.read_run(run_id)[:1]:
                from sealbox.approvals import shown_id  # an id pasted whole from a file: cut

                raise ConfigError(f"no run {shown_id(run_id)} in this store")
        return ids
    if since is None:
        raise ConfigError("name at least one run, or give --since")
    rows = store.query_runs(since=since)
    return [r["run_id"] for r in reversed(rows) if r["run_id"] != SYSTEM_RUN_ID and not r.get("replay_of")]


def whatif_policy(store: Any, policy: Any, run_ids: Iterable[str]) -> WhatIfReport:
    """Evaluate ``policy`` against every recorded decision of ``run_ids``.

    Args:
        store: the store.
        policy: a :class:`~sealbox.policy.Policy`.
        run_ids: the runs (see :func:`select_runs`).

    Returns:
        A :class:`WhatIfReport`; changes in run order, then step order.
    """
    from sealbox.policy.audit import reevaluate_run

    runs = tuple(run_ids)
    changed: list[DecisionChange] = []
    skipped: list[NotReEvaluable] = []
    errors: list[PolicyErrorAt] = []
    evaluated = 0
    for run_id in runs:
        for item in reevaluate_run(store, policy, run_id):
            rec = item.recorded
            where = (run_id, item.step, item.call_id, str(rec.get("server", "")), str(rec.get("tool", "")))
            if item.decision is None:
                skipped.append(NotReEvaluable(*where, item.why_not or "not re-evaluable"))
                continue
            evaluated += 1
            if item.decision.effect != rec.get("effect"):
                changed.append(DecisionChange(*where, str(rec.get("effect")), item.decision.effect, rec.get("rule"),
                                              item.decision.rule, item.decision.reason))
            if item.decision.reason_code == "guardrail_error":
                errors.append(PolicyErrorAt(*where, str(rec.get("effect")), item.decision.rule, item.decision.reason))
    return WhatIfReport(policy.fingerprint, runs, evaluated, tuple(changed), tuple(skipped), tuple(errors))


def _lookup(snapshot: dict[str, Any], path: str) -> tuple[bool, Any]:
    """The value at ``path``: written as ``snapshot diff`` writes paths (``extra["a.b"]``,
    ``messages[1]``), or in the older dotted form (``tools.<server>/<name>.version``)."""
    from sealbox.snapshot import _keyed, split_path

    from sealbox.snapshot import _unescaped

    keyed: Any = _keyed(snapshot)
    # a dict the store escaped ({"$esc": {...}}: one with a "$" key) is walked as the source's own, as diff paths
    # name it (model.parameters.$schema); a path naming the marker (written before) is still found, unwrapped last
    for parts, unwrap in ((split_path(path), True), (_split(path), True), (split_path(path), False)):
        if parts is None:
            continue
        node, found = keyed, True
        for part in parts:
            if unwrap:
                node = _unescaped(node)[0]
            if isinstance(node, dict) and str(part) in node:
                node = node[str(part)]
            elif isinstance(node, list) and str(part).isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                found = False
                break
        if found:
            return True, node
    return False, None


def _split(path: str) -> list[str]:
    # tools are keyed "server/name", which may contain dots only after the slash: keep "tools.<server>/<name>.x"
    parts = path.split(".")
    if len(parts) >= 2 and parts[0] in ("tools", "knowledge"):
        rest = ".".join(parts[1:])
        if parts[0] == "knowledge":
            return [parts[0], rest]
        head, _, tail = rest.partition(".")
        return [parts[0], head, *([tail] if tail else [])] if "/" in head else parts
    return parts


def _matches(found: Any, value: str) -> bool:
    """Whether the stored value is ``value``: a string as given, else ``value`` read as JSON and
    compared with the stored value decoded (so a ``$bigint`` tag matches its digits)."""
    from sealbox.canonical import decode

    if isinstance(found, str):
        return found == value
    try:
        wanted = json.loads(value)
    except ValueError:
        return False
    try:
        plain = decode(found)
    except Exception:  # noqa: BLE001 - a value that does not decode compares as stored
        plain = found
    return type(plain) is not bool and type(wanted) is not bool and plain == wanted or \
        (type(plain) is bool and type(wanted) is bool and plain is wanted)


def whatif_snapshot(store: Any, field: str, value: str, since: Any = None, *,
                    replays: bool = False) -> list[dict[str, Any]]:
    """The recorded runs whose snapshot has ``field`` equal to ``value``, newest first.

    Args:
        field: a dotted path into the snapshot (``model.version``, ``model.parameters.temperature``,
            ``tools.<server>/<name>.version``).
        value: compared as a string, or as JSON for non-string fields (``0.2``, ``true``).
        since: only runs started since then.
        replays: also list replays (runs with ``replay_of``); left out by default, as in
            :func:`select_runs`: a replay re-ran a recorded run from the record, it is no run of its own.

    Returns:
        ``query_runs`` rows (run_id, agent, started_at, snapshot, status…).
    """
    out, cache = [], {}
    for row in store.query_runs(since=since):
        fp = row.get("snapshot")
        if not fp or (row.get("replay_of") and not replays):
            continue
        if fp not in cache:
            found, got = _lookup(store.get_snapshot(fp), field)
            cache[fp] = found and _matches(got, value)
        if cache[fp]:
            out.append(row)
    return out
