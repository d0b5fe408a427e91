"""Divergence: the first step where a replay departs from the record, side by side.

A :class:`Divergence` names the step, what was recorded there and what the
replay attempted (each a :class:`~sealbox.replay.keys.StepKey` plus its content),
and a field-level diff of the two contents (:func:`diff_values`), so that a
changed prompt or argument shows as the one field that changed — not as
"nondeterminism" (LESSONS.md: report divergence like Restate does).

Kinds of divergence:

================== ==================================================================
``mismatch``       the same step was attempted with a different kind, name or content
``extra``          the replay attempted a step the record does not have
``missing``        the replay ended before a recorded step
``outcome``        every step matched but the run ended differently (ok / error)
``outcome_unknown`` the recorded call was allowed but has no result (the process died
                   while it ran): replay cannot say what it returned, and never re-runs it
``pending_approval`` the run was never resumed past the recorded call's approval: it was still
                   waiting, or was answered (the message says approved or denied, and by whom)
                   but nobody resumed the run
``unreplayable``   the step's recorded answer is redacted or erased
``config_drift``   the configuration differs from the recorded snapshot (replay did not start)
================== ==================================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sealbox.replay.keys import StepKey, step_order
from sealbox.snapshot import FieldDiff, diff_values

__all__ = ["DIVERGENCE_KINDS", "Divergence", "diff_values", "divergence_head", "render_divergence", "verdict_text"]

DIVERGENCE_KINDS = ("mismatch", "extra", "missing", "outcome", "outcome_unknown", "pending_approval",
                    "unreplayable", "config_drift")


@dataclass(frozen=True)
class Divergence:
    """The first departure from the record.

    Attributes:
        kind: one of :data:`DIVERGENCE_KINDS`.
        step: the logical step (``"4.2"``), or None (``config_drift``).
        message: one plain sentence saying what happened.
        recorded, attempted: the two step keys (None where there is none).
        recorded_content, attempted_content: the contents compared (stored form).
        diff: field-level differences of the contents (paths from the content's root).
        mismatched: which key fields differ: a subset of ``("step", "kind", "name", "hash")``.
        sub_run: where the divergence is in a sub-agent run: the recorded run ids from the replayed
            run's child down to the run whose ``step`` it is; empty when it is the replayed run's own.
    """

    kind: str
    step: str | None
    message: str
    recorded: StepKey | None = None
    attempted: StepKey | None = None
    recorded_content: Any = None
    attempted_content: Any = None
    diff: tuple[FieldDiff, ...] = ()
    mismatched: tuple[str, ...] = field(default=())
    sub_run: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``--json`` prints)."""
        return {
            "kind": self.kind, "step": self.step, "message": self.message,
            "recorded": self.recorded.to_dict() if self.recorded else None,
            "attempted": self.attempted.to_dict() if self.attempted else None,
            "mismatched": list(self.mismatched), "diff": [d.to_dict() for d in self.diff],
            "recorded_content": self.recorded_content, "attempted_content": self.attempted_content,
            **({"sub_run": list(self.sub_run)} if self.sub_run else {}),
        }

    def summary(self) -> dict[str, Any]:
        """The short form kept in the replay run's ``run.ended`` verdict (no content)."""
        return {"kind": self.kind, "step": self.step, "message": self.message,
                "recorded": self.recorded.to_dict() if self.recorded else None,
                "attempted": self.attempted.to_dict() if self.attempted else None,
                "fields": [d.path for d in self.diff][:50],
                **({"sub_run": list(self.sub_run)} if self.sub_run else {})}


def _short(value: Any, width: int = 70) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


#: Characters shown before the first difference when both sides of a change are cut around it.
_CONTEXT = 30


def _changed_pair(a: Any, b: Any, width: int = 70) -> str:
    """``A -> B`` for a changed field, each side at most ``width`` characters (JSON text).

    Two long values that share a long beginning (a prompt with a sentence added at its end) would
    read the same once cut at ``width``: both are then shown from ``_CONTEXT`` characters before
    their first difference (``…`` where text is left out), followed by ``(first difference at
    character N)``, N counted from 1 in the string (in the JSON text for other values)."""
    ta, tb = (json.dumps(v, ensure_ascii=False, default=str) for v in (a, b))
    at = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    if max(len(ta), len(tb)) <= width or at < width - 1 - 12:
        return f"{_short(a, width)} -> {_short(b, width)}"
    start = at - _CONTEXT

    def cut(text: str) -> str:
        part = text[start:start + width - 1]
        return "…" + part + ("…" if start + width - 1 < len(text) else "")

    position = at + 1
    if isinstance(a, str) and isinstance(b, str):  # counted in the strings themselves (JSON escapes aside)
        position = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))) + 1
    return f"{cut(ta)} -> {cut(tb)}  (first difference at character {position})"


def _key_line(key: StepKey | None) -> str:
    if key is None:
        return "(nothing)"
    return f"{key.kind} {key.name}  {key.hash[:19]}…"


def render_divergence(d: Divergence, limit: int = 20) -> str:
    """The readable form printed by ``sealbox replay``: step, both sides, the diff."""
    where = f" {'of' if d.step else 'in'} sub-agent run {d.sub_run[-1]}" if d.sub_run else ""
    lines = [f"diverged at step {d.step}{where}: {d.kind}" if d.step else f"diverged{where}: {d.kind}",
             f"  {d.message}"]
    if d.recorded or d.attempted:
        lines.append(f"  recorded : {_key_line(d.recorded)}")
        lines.append(f"  attempted: {_key_line(d.attempted)}")
    if d.mismatched:
        lines.append(f"  differs in: {', '.join(d.mismatched)}")
    for item in d.diff[:limit]:
        if item.change == "changed":
            lines.append(f"    ~ {item.path}: {_changed_pair(item.a, item.b)}")
        elif item.change == "added":
            lines.append(f"    + {item.path}: {_short(item.b)}")
        else:
            lines.append(f"    - {item.path}: {_short(item.a)}")
    if len(d.diff) > limit:
        lines.append(f"    … {len(d.diff) - limit} more field(s) differ (see --json)")
    return "\n".join(lines)


def divergence_head(d: Divergence, matched: Iterable[str], *, unit: str = "step",
                    number: Callable[[str], Any] | None = None) -> str:
    """Where a replay diverged and how many steps matched before it, in one phrase:
    ``diverged at step 2.2 (mismatch); 2 step(s) matched before it``.

    ``matched`` are the steps whose key matched the record (:attr:`ReplaySource.compared
    <sealbox.replay.source.ReplaySource.compared>`). The divergent step itself is never counted:
    it may be among them — an ``outcome_unknown``, ``pending_approval`` or ``unreplayable`` step
    matched the recorded call, but its recorded answer cannot be served. Steps matched after it in
    step order (parallel calls that completed first) are counted apart. ``unit`` and ``number``
    name the step another way (the gateway's ``call`` 3 is step 4).
    """
    steps = set(matched)
    if d.sub_run:  # its step is the sub-agent run's: the replayed run's own steps do not order with it
        at = f" at step {d.step}" if d.step else ""
        return (f"diverged{at} {'of' if d.step else 'in'} sub-agent run {d.sub_run[-1]} ({d.kind}); "
                f"{len(steps)} {unit}(s) of the run matched")
    if d.step is None:
        return f"diverged ({d.kind}); {len(steps)} {unit}(s) matched"
    at = number(d.step) if number is not None else d.step
    try:
        key = step_order(d.step)
        before = sum(1 for s in steps if step_order(s) < key)
        after = sum(1 for s in steps if step_order(s) > key)
    except ValueError:  # a step that is no dotted number: say no more than how many others matched
        return f"diverged at {unit} {at} ({d.kind}); {len(steps - {d.step})} other {unit}(s) matched"
    return (f"diverged at {unit} {at} ({d.kind}); {before} {unit}(s) matched before it"
            + (f" and {after} after it" if after else ""))


def verdict_text(verdict: Any) -> str:
    """A replay run's verdict (the ``verdict`` of its ``run.ended``) in one line: reproduced, or where
    and how it diverged. Read as recorded, so any field may be missing or of another type.

    The replay run's own status only says how the replay ended (``cancelled`` when it stopped at a
    divergence), not whether it matched the record: ``sealbox runs show`` and ``sealbox report``
    print this line.
    """
    verdict = verdict if isinstance(verdict, dict) else {}
    return (_verdict_head(verdict) + _drift_note(verdict.get("config_drift"))
            + _knowledge_note(verdict.get("knowledge_changed")))


def _drift_note(paths: Any) -> str:
    """The verdict's ``config_drift`` (the fields in which the configuration the replay ran under, allowed
    by ``--allow-config-drift``, differs from the recorded snapshot) as a clause of its line."""
    if not isinstance(paths, list) or not paths:
        return ""
    shown = [p if isinstance(p, str) else json.dumps(p, ensure_ascii=False, default=str) for p in paths]
    return (f", under a configuration that differs from the recorded snapshot in {len(shown)} field(s): "
            + ", ".join(shown[:8]) + (" …" if len(shown) > 8 else "") + " (--allow-config-drift)")


def _knowledge_note(changed: Any) -> str:
    """The verdict's ``knowledge_changed`` (the replay's warning, saved with it) as a clause of its line."""
    if not isinstance(changed, list) or not changed:
        return ""
    files = [f"{k.get('uri')} ({k.get('change')})" if isinstance(k, dict) else str(k) for k in changed]
    return (f"; {len(files)} knowledge file(s) of the recorded snapshot changed since it was recorded: "
            + ", ".join(files[:8]) + (" …" if len(files) > 8 else ""))


def _verdict_head(verdict: dict) -> str:
    steps = verdict.get("steps_compared")
    counted = f" ({steps} steps compared)" if isinstance(steps, int) and not isinstance(steps, bool) else ""
    if verdict.get("reproduced") is True:
        return f"reproduced{counted}"
    d = verdict.get("divergence")
    if isinstance(d, dict):
        where = f" at step {d.get('step')}" if d.get("step") else ""
        sub = d.get("sub_run")
        if isinstance(sub, list) and sub and isinstance(sub[-1], str):
            where += f" {'of' if d.get('step') else 'in'} sub-agent run {sub[-1]}"
        return f"diverged{where} ({d.get('kind')}): {d.get('message')}{counted}"
    return f"not reproduced{counted}"
