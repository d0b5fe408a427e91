"""Render an :class:`~sealbox.report.model.IncidentReport` as CommonMark.

Recorded text is never trusted as Markdown: inline text has every ASCII
punctuation character that Markdown or HTML could act on backslash-escaped, inline
text and code spans have every line break flattened (``\r``, U+2028 and the rest, not
only ``\n``), terminal controls and bidi overrides are written as their escapes everywhere
(``\x1b``, ``\u202e``), and content goes into fenced code blocks whose fence is
longer than any run of backticks inside the content, so nothing can close the
fence early.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from sealbox.query import label_text, status_text, visible
from sealbox.report.model import resumed_text, ApprovalView, Content, IncidentReport

__all__ = ["render_markdown", "md"]

_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")
#: Every character that ends a line somewhere: CommonMark's ``\n`` and ``\r``, and the others
#: ``str.splitlines`` knows (vertical tab, form feed, the file/group/record separators, NEL,
#: U+2028, U+2029). Inline text and code spans have each of them flattened to a space: a CR
#: inside a code span would end the line, and the next one (``<script>``...) would become raw HTML.
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _one_line(value: Any) -> str:
    """One line (every line break a space), terminal controls and bidi overrides written as their
    escapes (:func:`sealbox.query.visible`: ``cat incident.md`` must not drive the terminal, nor a
    U+202E make a tool name read backwards), as ``sealbox runs show`` prints them."""
    return visible(_LINE_BREAKS.sub(" ", "" if value is None else str(value)))


def md(value: Any) -> str:
    """Escape any value as inline Markdown text (one line: every line break becomes a space)."""
    return _SPECIAL.sub(r"\\\1", _one_line(value))


def _code(value: Any) -> str:
    """An inline code span that the value cannot close (one line: every line break becomes a space)."""
    text = _one_line(value)
    ticks = max((len(m) for m in re.findall(r"`+", text)), default=0) + 1
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return "`" * ticks + pad + text + pad + "`" * ticks


def _fence(text: str, lang: str = "json") -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}|~{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    headers = list(headers)
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out + [""]


def _content(c: Content | None, label: str) -> list[str]:
    if c is None:
        return [f"{label}: (none recorded)", ""]
    notes = []
    if c.redacted:
        notes.append(f"{c.redacted} redacted value(s), shown as markers")
    if c.erased:
        notes.append("content erased under retention; only its commitment remains")
    if c.look_alikes:
        notes.append(f"{c.look_alikes} look-alike redaction marker(s) from the source's own content, not redactions")
    head = f"{label}" + (f" ({'; '.join(notes)})" if notes else "") + ":"
    return [head, "", _fence(visible(c.text)), ""]


def _seconds(s: float | None) -> str:
    if s is None:
        return ""
    if 0 < s < 0.001:  # as `sealbox runs show` prints it: 8 µs, not 0.0 ms
        return f"{round(s * 1e6)} µs"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _latency(us: int | None) -> str:
    """A model call's latency; ``unknown`` where none was recorded (``latency_us: null``)."""
    return "unknown" if us is None else _seconds(us / 1e6)


def _error_text(error: dict) -> str:
    """``RuntimeError: message``: the exception a run ended with, as ``sealbox runs show`` prints it."""
    return f"{error.get('type')}: {error.get('message')}"


def _overview(r: IncidentReport) -> list[str]:
    run, v = r.run, r.verification
    status = status_text(run)
    verdict = "verified" if v.ok else ("NOT VERIFIED" if v.checked else "not checked")
    labels = run.get("labels") if isinstance(run.get("labels"), dict) else {}
    rows = [("run", _code(run.get("run_id"))), ("agent", md(run.get("agent"))), ("principal", md(run.get("principal"))),
            ("status", md(status)), *([("error", md(_error_text(r.error)))] if r.error is not None else []),
            ("started", md(r.started_at)), ("ended", md(r.ended_at or "(not ended)")),
            ("duration", md(_seconds(r.duration_s))), ("events", md(r.events)),
            ("parent run", md(run.get("parent_run_id") or "(none)")), ("replay of", md(run.get("replay_of") or "(none)")),
            *([("replay verdict", md(r.replay.text))] if r.replay is not None else []),
            ("labels", md(f"{len(labels)}, in the table Labels below" if labels else "(none)")),
            ("policy", md(f"{r.policy.get('name')} {r.policy.get('fingerprint')}")),
            ("snapshot", md(r.snapshot_fingerprint or "(none)")),
            ("usage", md(json.dumps(r.usage, ensure_ascii=False) if r.usage else "(none)")),
            ("verification", md(verdict))]
    out = _table(["", ""], [(f"**{k}**", v) for k, v in rows])
    if labels:  # one row per label: joined on one line, a value holding ", " or "=" read as two labels
        out += ["### Labels", ""] + _table(["key", "value"], [(md(k), md(label_text(val)))
                                                           for k, val in sorted(labels.items())])
    return out


def _approval(a: ApprovalView) -> list[str]:
    out = [f"### Approval {_code(a.approval_id)}: {md(a.status)}", ""]
    if a.malformed:  # the recorded values, whatever their type: the request can never be approved
        out += [f"MALFORMED REQUEST: {md(a.malformed)}; it can never be approved.", ""]
        asked, quorum, expires = (_code(json.dumps(v, ensure_ascii=False)) for v in (a.ask, a.quorum, a.expires_at))
    else:
        from sealbox.approvals import asked_text  # as `approvals show` and the timeline word it

        asked = md(asked_text(a.ask))
        quorum, expires = md(a.quorum), md(a.expires_at)
    out += _table(["", ""], [
        ("**call**", f"{_code(a.call_id)} {md(a.server)}/{md(a.tool)} (step {md(a.step)})"), ("**rule**", md(a.rule)),
        ("**asked**", asked), ("**quorum**", quorum), ("**binding**", _code(a.binding)),
        ("**requested**", md(f"{a.requested_at} by {a.requested_by}")), ("**expires**", expires),
        ("**decided**", md(f"{a.decided_at or '-'} by {', '.join(a.decided_by) or '-'}")),
        ("**run waited**", md(_seconds(a.wait_s) or "(not resumed)")),
        ("**resumed**", md(resumed_text(a)))])
    out += _content(a.arguments, "Arguments as requested")
    for x in a.answers:
        who = x.identity or {}
        ident = (f"role {who.get('role')}, groups {', '.join(who.get('groups') or [])}, key {x.key_id}"
                 + (", SHARED ACCOUNT" if who.get("shared") else "")) if who else "unknown identity"
        counts = "counts" if x.counted else f"does not count: {x.problem}"
        out.append(f"- **{md(x.decision)}** by **{md(x.identity_name)}** at {md(x.answered_at)}: "
                   f"signature {md(x.signature)}; {md(counts)}; identity: {md(ident)}; "
                   f"client (self-reported): {_code(json.dumps(x.client, ensure_ascii=False))}; reason: {md(x.reason)}")
        for f in x.flags:
            out.append(f"  - flag **{md(f.get('code'))}**: {_code(json.dumps(f.get('evidence'), ensure_ascii=False))}")
    return out + [""]


#: how a timeline row or tool call at which verification found a problem is marked, before the problem's line
FAILED = "FAILED VERIFICATION"


def _failed_cell(failed: tuple[str, ...]) -> str:
    """The start of a timeline row's summary cell when verification found a problem at its event: the
    problems' lines as the Verification section words them (escaped as text: a code span in a table cell
    would not escape a ``|``)."""
    return f"**{FAILED}**: " + "; ".join(md(line) for line in failed) + " — " if failed else ""


def _tool_calls(r: IncidentReport) -> list[str]:
    out = [f"## Tool calls ({len(r.tool_calls)})", ""]
    for c in r.tool_calls:
        out += [f"### Step {md(c.step)}: {md(c.server)}/{md(c.tool)}: {md(c.outcome)}", ""]
        meta = (f"call {_code(c.call_id)}, exposed as {md(c.exposed)}, by {md(c.principal)}, grant {md(c.grant)}, "
                f"at {md(c.ts)}" + (f", took {md(_seconds(c.duration_us / 1e6))}" if c.duration_us else "")
                + (f", approvals {', '.join(_code(a) for a in c.approval_ids)}" if c.approval_ids else ""))
        out += [meta, ""]
        if c.altered:
            out += [f"**ALTERED below Sealbox**: {md(', '.join(c.altered))} no longer match their recorded hash; "
                    "the values below are what the database holds now, not what was recorded.", ""]
        if c.failed:
            out += [f"**{FAILED}**: " + "; ".join(_code(line) for line in c.failed), ""]
        out += _content(c.arguments, "Arguments")
        out += _table(["decision", "rule", "reason code", "reason", "re-evaluated"], (
            (md(d.get("effect")), md(d.get("rule")), md(d.get("reason_code")), md(d.get("reason")),
             "yes" if d.get("reevaluated") else "") for d in c.decisions))
        if c.error:
            out += [f"Error: {_code(str(c.error.get('type')) + ': ' + str(c.error.get('message')))}", ""]
        if c.result is not None:
            out += _content(c.result, "Result")
        elif c.ok is None:
            out += [f"No result: {md(c.outcome)}", ""]
    return out


def _model_calls(r: IncidentReport) -> list[str]:
    out = [f"## Model calls ({len(r.model_calls)})", ""]
    for m in r.model_calls:
        usage = ", ".join(f"{k} {v}" for k, v in m.usage.items()) or "-"
        out += [f"### Step {md(m.step)}: {md(m.provider)}/{md(m.model)}", "",
                f"at {md(m.ts)}, latency {md(_latency(m.latency_us))}, usage {md(usage)}"
                + (f", tool calls {', '.join('(no id)' if t is None else _code(t) for t in m.tool_call_ids)}" if m.tool_call_ids else ""), ""]
        out += _content(m.request, "Request") + _content(m.response, "Response")
    return out


def render_markdown(report: IncidentReport) -> str:
    """The report as one CommonMark document."""
    r = report
    out = [f"# Sealbox incident report: run {_code(r.run.get('run_id'))}", "",
           f"Generated {md(r.generated_at)} by sealbox report from the record alone.", "", "## Overview", ""]
    out += _overview(r)
    out += [f"## Timeline ({len(r.timeline)} events)", ""]
    out += _table(["#", "step", "offset", "kind", "principal", "summary"], (
        (str(t.run_seq), md(t.step), md("+" + (_seconds(t.offset_s) or "0 ms")), md(t.kind), md(t.principal),
         _failed_cell(t.failed) + md(t.summary)) for t in r.timeline))
    out += [f"## Approvals ({len(r.approvals)})", ""]
    for a in r.approvals:
        out += _approval(a)
    out += _tool_calls(r) + _model_calls(r)
    out += [f"## Agent state ({len(r.states)})", ""]
    for s in r.states:
        out += [f"### Step {md(s.step)}: {md(s.label or 'state')}", "", f"at {md(s.ts)}", ""] + _content(s.state, "State")
    if r.notes:
        out += ["## Notes, anomalies, guardrails", ""] + _table(["step", "kind", "text"], (
            (md(n.step), md(n.kind), md(n.summary)) for n in r.notes))
    out += [f"## {r.child_runs_heading()}", ""]
    out += _table(["depth", "run", "parent", "agent", "status", "events"], (
        (md(c.get("depth")), _code(c.get("run_id")), _code(c.get("parent_run_id")), md(c.get("agent")),
         md(f"{c.get('status')} {c.get('ending') or ''}".strip()), md(c.get("events"))) for c in r.sub_runs)) if r.sub_runs else ["none", ""]
    if r.sub_runs_not_listed:
        out += [md(r.sub_runs_note()), ""]
    out += ["## Configuration snapshot", "", md(r.snapshot_fingerprint or "no snapshot recorded"), ""]
    if r.snapshot is not None:
        out += _content(r.snapshot, "Snapshot")
    if r.snapshot_problem:
        out += [f"**{md(r.snapshot_problem)}**", ""]
    v = r.verification
    out += ["## Verification", "", md(v.summary), ""]
    out += [f"- {_code(p)}" for p in v.run_problems]
    if v.other_problems:
        out += [f"{v.other_problems} problem(s) elsewhere in the store."]
    return "\n".join(out).rstrip() + "\n"
