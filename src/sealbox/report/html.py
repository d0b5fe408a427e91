"""Render an :class:`~sealbox.report.model.IncidentReport` as one self-contained HTML file.

No external asset and no network: the CSS and a few lines of script are inline,
and a Content-Security-Policy (``default-src 'none'``) that allows only *that*
style and *that* script, by SHA-256 hash, so the page cannot load anything and no
injected script could run even if escaping were ever missed. Every recorded string
goes through :func:`html.escape` (quotes included) before it reaches the page.

The timeline is an SVG drawn on the server side, one row and one mark
(``class="tl-mark"``) per event, at its time offset; durations (model latency,
tool duration, approval wait) are bars ending at the event. The script only adds
conveniences (expand / collapse all) and records that the page rendered
(``data-rendered``, ``data-marks``, ``data-errors`` on ``<body>``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any, Iterable

from sealbox.query import label_text, status_text, visible
from sealbox.report.model import resumed_text, AnswerView, ApprovalView, Content, IncidentReport, TimelineEntry

__all__ = ["render_html"]

_COLLAPSE_LINES = 12
_COLLAPSE_CHARS = 800

_COLOURS = {"run": "#455a64", "model": "#6a1b9a", "tool": "#1565c0", "policy": "#ef6c00", "approval": "#c62828",
            "state": "#2e7d32", "guard": "#ad1457", "other": "#757575"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;width:100%;margin:6px 0 12px;background:#fff}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}th{background:#f0f0f0}
pre{background:#f4f4f4;border:1px solid #e0e0e0;padding:8px;overflow:auto;margin:4px 0;white-space:pre-wrap;
word-break:break-word}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;color:#fff;background:#757575}
.ok{background:#2e7d32}.bad{background:#c62828}.warn{background:#ef6c00}.muted{color:#666}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:8px 0}
.tl{overflow-x:auto;background:#fff;border:1px solid #ddd}.tl text{font:11px ui-monospace,Menlo,monospace}
.legend span{margin-right:12px}.legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px}
summary{cursor:pointer;color:#1565c0}
""" + "".join(f".legend .g-{g}{{background:{c}}}" for g, c in _COLOURS.items())

_JS = """
(function(){var b=document.body,errs=[];
window.addEventListener('error',function(e){errs.push(String(e.message));b.setAttribute('data-errors',errs.join(' | '));});
var t=document.getElementById('toggle-all');
if(t){t.addEventListener('click',function(){var d=document.querySelectorAll('details'),open=t.getAttribute('data-open')!=='1';
for(var i=0;i<d.length;i++){d[i].open=open;}t.setAttribute('data-open',open?'1':'0');t.textContent=open?'Collapse all':'Expand all';});}
b.setAttribute('data-marks',String(document.querySelectorAll('.tl-mark').length));
b.setAttribute('data-rendered','ok');})();
"""


def _sha(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute; terminal controls and bidi overrides
    written as their escapes (:func:`sealbox.query.visible`: a U+202E must not make a tool name read
    backwards), as ``sealbox runs show`` prints them."""
    return html.escape(visible("" if value is None else str(value)), quote=True)


def _badge(text: str, cls: str = "") -> str:
    return f'<span class="badge {cls}">{e(text)}</span>'


def _table(headers: list[str], rows: Iterable[Iterable[str]]) -> str:
    """A table (no header row when every header is empty); the cells are HTML already escaped by the caller."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def _content(c: Content | None, label: str) -> str:
    if c is None:
        return f'<p class="muted">{e(label)}: (none recorded)</p>'
    notes = []
    if c.redacted:
        notes.append(_badge(f"{c.redacted} redacted value(s), shown as markers", "warn"))
    if c.erased:
        notes.append(_badge("content erased under retention; only its commitment remains", "warn"))
    if c.look_alikes:
        notes.append(_badge(f"{c.look_alikes} look-alike redaction marker(s) from the source's own content, "
                            "not redactions", "warn"))
    pre = f"<pre><code>{e(c.text)}</code></pre>"
    head = f"{e(label)} {' '.join(notes)}"
    if c.lines > _COLLAPSE_LINES or len(c.text) > _COLLAPSE_CHARS:
        return f"<details><summary>{head} ({c.lines} lines, {len(c.text)} characters)</summary>{pre}</details>"
    return f"<div>{head}{pre}</div>"


def _seconds(s: float | None) -> str:
    if s is None:
        return ""
    if 0 < s < 0.001:  # as `sealbox runs show` prints it: 8 µs, not 0.0 ms
        return f"{round(s * 1e6)} µs"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _latency(us: int | None) -> str:
    """A model call's latency; ``unknown`` where none was recorded (``latency_us: null``)."""
    return "unknown" if us is None else _seconds(us / 1e6)


# ----------------------------------------------------------------------------- timeline


def _timeline_svg(entries: tuple[TimelineEntry, ...]) -> str:
    row, label_w, plot_w, pad = 18, 520, 540, 30
    span = max((t.offset_s for t in entries), default=0.0) or 1.0
    height = row * len(entries) + 30
    width = label_w + plot_w + 2 * pad
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="timeline of {len(entries)} events">']
    x0 = label_w + pad
    parts.append(f'<line x1="{x0}" y1="4" x2="{x0}" y2="{height - 20}" stroke="#bbb"/>')
    for i in range(5):
        x = x0 + plot_w * i / 4
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" fill="#666" text-anchor="middle">'
                     f'+{e(_seconds(span * i / 4) or "0 ms")}</text>')
    for i, t in enumerate(entries):
        y = 4 + row * i + row / 2
        x = x0 + plot_w * (t.offset_s / span)
        colour = _COLOURS.get(t.group, _COLOURS["other"])
        label = f"{t.run_seq:>3} {t.step:<6} {t.kind:<18} {t.summary}"
        if len(label) > 78:
            label = label[:77] + "…"
        tip = f"#{t.run_seq} step {t.step} {t.kind} at +{_seconds(t.offset_s) or '0 ms'} ({t.ts}) by {t.principal}: {t.summary}"
        parts.append(f'<g class="tl-row"><title>{e(tip)}</title>'
                     f'<text x="4" y="{y + 4:.1f}" fill="{colour}" xml:space="preserve">{e(label)}</text>')
        if t.duration_s:
            w = max(1.0, plot_w * min(t.duration_s, t.offset_s) / span)
            parts.append(f'<rect x="{x - w:.1f}" y="{y - 3:.1f}" width="{w:.1f}" height="6" fill="{colour}" '
                         'opacity="0.3"/>')
        parts.append(f'<circle class="tl-mark" data-kind="{e(t.kind)}" data-seq="{t.run_seq}" cx="{x:.1f}" '
                     f'cy="{y:.1f}" r="5" fill="{colour}"/></g>')
    parts.append("</svg>")
    return "".join(parts)


def _legend() -> str:
    return '<p class="legend">' + "".join(f'<span><i class="g-{g}"></i>{e(g)}</span>'
                                          for g in _COLOURS) + "</p>"


# ----------------------------------------------------------------------------- sections


def _error_text(error: dict) -> str:
    """``RuntimeError: message``: the exception a run ended with, as ``sealbox runs show`` prints it."""
    return f"{error.get('type')}: {error.get('message')}"


def _overview(r: IncidentReport) -> str:
    run = r.run
    status = status_text(run)
    v = r.verification
    vbadge = _badge("verified" if v.ok else ("NOT VERIFIED" if v.checked else "not checked"),
                    "ok" if v.ok else ("bad" if v.checked else ""))
    rows = [("run", e(run.get("run_id"))), ("agent", e(run.get("agent"))), ("principal", e(run.get("principal"))),
            ("status", e(status)), *([("error", e(_error_text(r.error)))] if r.error is not None else []),
            ("started", e(r.started_at)), ("ended", e(r.ended_at or "(not ended)")),
            ("duration", e(_seconds(r.duration_s))), ("events", e(r.events)),
            ("parent run", e(run.get("parent_run_id") or "(none)")), ("replay of", e(run.get("replay_of") or "(none)")),
            *([("replay verdict", _replay_verdict(r))] if r.replay is not None else []),
            ("labels", _labels(run.get("labels"))),
            ("policy", e(f"{r.policy.get('name')} {r.policy.get('fingerprint')}")),
            ("snapshot", e(r.snapshot_fingerprint or "(none)")),
            ("usage", e(json.dumps(r.usage, ensure_ascii=False) if r.usage else "(none)")),
            ("store", e(r.store_origin or "")), ("verification", vbadge)]
    return _table(["", ""], [(f"<b>{k}</b>", v) for k, v in rows])


def _labels(labels: Any) -> str:
    """A run's labels, one row each of a small key/value table: joined on one line (``env=pr,od, k==1+1``),
    a value holding ``, `` or ``=`` read as two labels."""
    if not isinstance(labels, dict) or not labels:
        return "(none)"
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(label_text(v))}</td></tr>" for k, v in sorted(labels.items()))
    return f'<table class="labels"><tbody>{rows}</tbody></table>'


def _replay_verdict(r: IncidentReport) -> str:
    v = r.replay
    assert v is not None
    if v.reproduced is None:
        badge = _badge("no verdict", "warn")
    else:
        badge = _badge("reproduced", "ok") if v.reproduced else _badge("not reproduced", "bad")
    return f'{badge} <span class="replay-verdict">{e(v.text)}</span>'


def _failed(failed: tuple[str, ...]) -> str:
    """The mark of a timeline row or tool call at which verification found a problem: a badge, then each
    problem's line as the Verification section words it."""
    if not failed:
        return ""
    return _badge("FAILED VERIFICATION", "bad") + " " + "; ".join(f"<code>{e(line)}</code>" for line in failed) + " — "


def _tool_call(c) -> str:
    d_rows = [(e(d.get("effect")), e(d.get("rule")), e(d.get("reason_code")), e(d.get("reason")),
               e("yes" if d.get("reevaluated") else "")) for d in c.decisions]
    cls = {"ok": "ok", "error": "bad", "denied": "bad", "expired": "bad", "held": "warn", "abandoned": "bad",
           "unknown": "warn"}.get(c.outcome, "")
    head = (f'<h3 id="call-{e(c.call_id)}">step {e(c.step)} · {e(c.server)}/{e(c.tool)} {_badge(c.outcome, cls)}</h3>'
            f'<p class="muted">call {e(c.call_id)} · exposed as {e(c.exposed)} · by {e(c.principal)} · grant '
            f'{e(c.grant)} · at {e(c.ts)}' + (f" · took {e(_seconds(c.duration_us / 1e6))}" if c.duration_us else "")
            + (f" · approvals {e(', '.join(c.approval_ids))}" if c.approval_ids else "") + "</p>")
    body = ""
    if c.altered:
        body += (f"<p>{_badge('ALTERED', 'bad')} {e(', '.join(c.altered))} no longer match their recorded hash "
                 "(changed below Sealbox): the values below are what the database holds now, not what was "
                 "recorded</p>")
    if c.failed:
        body += f"<p>{_failed(c.failed)}</p>"
    body += _content(c.arguments, "arguments")
    body += _table(["decision", "rule", "reason code", "reason", "re-evaluated"], d_rows)
    if c.error:
        body += f"<p>{_badge('error', 'bad')} <code>{e(c.error.get('type'))}: {e(c.error.get('message'))}</code></p>"
    if c.result is not None:
        body += _content(c.result, "result")
    elif c.ok is None:
        body += f'<p class="muted">no result: {e(c.outcome)}</p>'
    return f'<div class="card">{head}{body}</div>'


def _answer(a: AnswerView) -> str:
    sig = _badge(f"signature {a.signature}", "ok" if a.signature == "verified" else "bad")
    counts = _badge("counts", "ok") if a.counted else _badge(f"does not count: {a.problem}", "bad")
    who = a.identity or {}
    ident = (f"role {e(who.get('role'))}, groups {e(', '.join(who.get('groups') or []))}, key {e(a.key_id)}"
             + (" " + _badge("shared account", "warn") if who.get("shared") else "")) if who else "unknown identity"
    flags = "".join(f"<li>{_badge(f.get('code', ''), 'warn')} <code>{e(json.dumps(f.get('evidence'), ensure_ascii=False))}</code></li>"
                    for f in a.flags)
    client = e(json.dumps(a.client, ensure_ascii=False))
    return (f'<div class="card"><b>{e(a.decision)}</b> by <b>{e(a.identity_name)}</b> at {e(a.answered_at)} {sig} '
            f'{counts}<br><span class="muted">identity: {ident}; client (self-reported): {client}</span>'
            f'<br>reason: {e(a.reason)}' + (f"<ul>{flags}</ul>" if flags else "") + "</div>")


def _approval(a: ApprovalView) -> str:
    cls = {"approved": "ok", "denied": "bad", "expired": "bad", "malformed": "bad"}.get(a.status, "warn")
    if a.malformed:  # the recorded values, whatever their type: the request can never be approved
        asked, quorum, expires = (f"<code>{e(json.dumps(v, ensure_ascii=False))}</code>"
                                  for v in (a.ask, a.quorum, a.expires_at))
    else:
        from sealbox.approvals import asked_text  # as `approvals show` and the timeline word it

        asked = e(asked_text(a.ask))
        quorum, expires = e(a.quorum), e(a.expires_at)
    rows = [("call", f'<a href="#call-{e(a.call_id)}">{e(a.call_id)}</a> {e(a.server)}/{e(a.tool)} (step {e(a.step)})'),
            ("rule", e(a.rule)), ("asked", asked), ("quorum", quorum), ("binding", f"<code>{e(a.binding)}</code>"),
            ("requested", e(f"{a.requested_at} by {a.requested_by}")), ("expires", expires),
            ("decided", e(f"{a.decided_at or '-'} by {', '.join(a.decided_by) or '-'}")),
            ("run waited", e(_seconds(a.wait_s) or "(not resumed)")), ("resumed", e(resumed_text(a)))]
    answers = "".join(_answer(x) for x in a.answers) or '<p class="muted">no answers</p>'
    malformed = (f"<p>{_badge('malformed request', 'bad')} {e(a.malformed)}; it can never be approved.</p>"
                 if a.malformed else "")
    return (f'<div class="card"><h3>{e(a.approval_id)} {_badge(a.status, cls)}</h3>' + malformed
            + _table(["", ""], [(f"<b>{k}</b>", v) for k, v in rows]) + _content(a.arguments, "arguments as requested")
            + f"<h3>Answers</h3>{answers}</div>")


def _model_call(m) -> str:
    usage = ", ".join(f"{k} {v}" for k, v in m.usage.items())
    return (f'<div class="card"><h3>step {e(m.step)} · {e(m.provider)}/{e(m.model)}</h3>'
            f'<p class="muted">at {e(m.ts)} · latency {e(_latency(m.latency_us))} · usage {e(usage or "-")}'
            + (f" · tool calls {e(', '.join('(no id)' if t is None else t for t in m.tool_call_ids))}"
               if m.tool_call_ids else "") + "</p>"
            + _content(m.request, "request") + _content(m.response, "response") + "</div>")


def _verification(r: IncidentReport) -> str:
    v = r.verification
    out = f"<p>{_badge('verified' if v.ok else 'NOT VERIFIED' if v.checked else 'not checked', 'ok' if v.ok else 'bad' if v.checked else '')} {e(v.summary)}</p>"
    if v.run_problems:
        out += "<ul>" + "".join(f"<li><code>{e(p)}</code></li>" for p in v.run_problems) + "</ul>"
    if v.other_problems:
        out += f"<p>{e(v.other_problems)} problem(s) elsewhere in the store.</p>"
    return out


def _sections(r: IncidentReport) -> list[str]:
    out = [f"<h2>Overview</h2>{_overview(r)}",
           f'<h2 id="timeline">Timeline ({len(r.timeline)} events)</h2>{_legend()}<div class="tl">{_timeline_svg(r.timeline)}</div>',
           "<h2>Events</h2>" + _table(["#", "step", "offset", "kind", "principal", "summary"], (
               (e(t.run_seq), e(t.step), e("+" + (_seconds(t.offset_s) or "0 ms")), e(t.kind), e(t.principal),
                _failed(t.failed) + e(t.summary)) for t in r.timeline))]
    out.append(f"<h2>Approvals ({len(r.approvals)})</h2>" + ("".join(_approval(a) for a in r.approvals)
                                                             or '<p class="muted">none</p>'))
    out.append(f"<h2>Tool calls ({len(r.tool_calls)})</h2>" + ("".join(_tool_call(c) for c in r.tool_calls)
                                                               or '<p class="muted">none</p>'))
    out.append(f"<h2>Model calls ({len(r.model_calls)})</h2>" + ("".join(_model_call(m) for m in r.model_calls)
                                                                 or '<p class="muted">none</p>'))
    out.append(f"<h2>Agent state ({len(r.states)})</h2>" + ("".join(
        f'<div class="card"><h3>step {e(s.step)} · {e(s.label or "state")}</h3><p class="muted">at {e(s.ts)}</p>'
        f'{_content(s.state, "state")}</div>' for s in r.states) or '<p class="muted">none saved</p>'))
    if r.notes:
        out.append("<h2>Notes, anomalies, guardrails</h2>" + _table(["step", "kind", "text"], (
            (e(n.step), e(n.kind), e(n.summary)) for n in r.notes)))
    out.append(f"<h2>{e(r.child_runs_heading())}</h2>" + (_table(["depth", "run", "parent", "agent", "status", "events"], (
        (e(c.get("depth")), e(c.get("run_id")), e(c.get("parent_run_id")), e(c.get("agent")),
         e(f"{c.get('status')} {c.get('ending') or ''}".strip()), e(c.get("events"))) for c in r.sub_runs))
        if r.sub_runs else '<p class="muted">none</p>')
        + (f'<p class="muted">{e(r.sub_runs_note())}</p>' if r.sub_runs_not_listed else ""))
    out.append(f"<h2>Configuration snapshot</h2><p class=\"muted\">{e(r.snapshot_fingerprint or 'no snapshot recorded')}</p>"
               + (_content(r.snapshot, "snapshot") if r.snapshot is not None else "")
               + (f"<p>{_badge('NOT SHOWN', 'bad')} {e(r.snapshot_problem)}</p>" if r.snapshot_problem else ""))
    out.append(f"<h2>Verification</h2>{_verification(r)}")
    return out


def render_html(report: IncidentReport) -> str:
    """The report as one HTML document (UTF-8 text), with no external reference."""
    csp = (f"default-src 'none'; style-src '{_sha(_CSS)}'; script-src '{_sha(_JS)}'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    title = f"Sealbox incident report: run {report.run.get('run_id')}"
    body = "".join(_sections(report))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">'
        '<meta name="referrer" content="no-referrer"><meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{e(title)}</title><style>{_CSS}</style></head>"
        f'<body data-events="{len(report.timeline)}"><main><h1>{e(title)}</h1>'
        f'<p class="muted">Generated {e(report.generated_at)} by sealbox report from the record alone. '
        '<button id="toggle-all" type="button" data-open="0">Expand all</button></p>'
        f"{body}</main><script>{_JS}</script></body></html>\n"
    )
