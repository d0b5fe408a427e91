"""``sealbox runs list`` and ``sealbox runs show RUN``."""

from __future__ import annotations

import json

import click

from sealbox.cli.common import (BadInput, tables_are_unbounded, filter_not_empty, canonical_json_text, echo_json, emit_rows, format_options, open_for_reading,
                                resolve_id, shown_id, snapshot_ref, store_option, visible)

_STATUSES = ("running", "interrupted", "suspended", "ended", "ok", "error", "cancelled")  # sealbox.query.RUN_STATUSES


@click.group("runs")
def runs_group() -> None:
    """List and show recorded runs."""


def _snapshot_must_exist(store, ref: str) -> None:
    """An empty ``runs list --snapshot REF``: a REF no snapshot of the store has (a mistyped fingerprint) is a
    usage error, as ``calls --run`` of a run id naming nothing is, not "no runs match"."""
    from sealbox.cli.common import BadInput
    from sealbox.errors import StoreError

    try:
        store.get_snapshot(ref)
    except StoreError as exc:
        if str(exc).startswith("no snapshot "):
            raise BadInput(f"--snapshot: no snapshot {ref!r} in this store (`sealbox runs show RUN` names the snapshot "
                           "a run ran under)") from None
        # an ambiguous prefix or a damaged snapshot: the runs it matches are what query_runs found (none)


@runs_group.command("list")
@store_option
@click.option("--agent", callback=filter_not_empty, help="Only runs of this agent.")
@click.option("--principal", callback=filter_not_empty, help="Only runs started by this principal.")
@click.option("--status", type=click.Choice(_STATUSES),
              help="running, interrupted (its process died), suspended, ended, or how it ended: ok, error, cancelled (an imported run: its source's).")
@click.option("--since", metavar="TIME", help="Started at or after: RFC 3339, a date, or 30d / 2h / 15m ago.")
@click.option("--until", metavar="TIME", help="Started before (same forms as --since).")
@click.option("--snapshot", metavar="FP", help="Ran under this snapshot (fingerprint or prefix).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Has this label. Repeatable; all must match.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many runs (newest first).")
@format_options
def list_cmd(store_path: str, agent: str | None, principal: str | None, status: str | None, since: str | None,
             until: str | None, snapshot: str | None, labels: tuple[str, ...], limit: int, as_json: bool,
             as_csv: bool) -> None:
    """List runs, newest first."""
    from sealbox.query import check_window, label_text, parse_labels, status_text

    wanted = parse_labels(labels)  # user mistakes fail before the store is opened
    if snapshot is not None:
        snapshot = snapshot_ref(snapshot, "--snapshot")
    check_window(since, until)
    store = open_for_reading(store_path)
    try:
        rows = store.query_runs(agent=agent, principal=principal, status=status, since=since, until=until,
                                snapshot=snapshot, labels=wanted, limit=limit + 1)
        if not rows and snapshot is not None:
            _snapshot_must_exist(store, snapshot)
    finally:
        store.close()
    more = len(rows) > limit  # one more asked for: say that the listing is cut, not silently
    rows = rows[:limit]
    altered = sum(bool(r.get("altered")) for r in rows)
    if altered:
        from sealbox.query import RUN_ALTERED_WARNING

        click.echo(RUN_ALTERED_WARNING.format(n=altered), err=True)
    columns = ["run_id", "agent", "principal", "status", "ending", "events", "started_at", "parent_run_id",
               "replay_of", "snapshot", "labels", "imported", "altered"]
    if as_json or as_csv:
        emit_rows(rows, columns, as_json=as_json, as_csv=as_csv)
        if more:  # on stderr: stdout stays valid JSON / CSV
            click.echo(f"the newest {limit} runs shown; more match (--limit N to see more)", err=True)
        return
    if not rows:
        click.echo("no runs match", err=True)
        return
    whole = tables_are_unbounded()  # a file or a pipe: ids whole (grep, paste); a set width: cut to 13 + "…"
    shown = [{**r, "status": status_text(r),
              "started": r["started_at"][:19].replace("T", " "),
              "parent": _short_id(r["parent_run_id"], whole),
              "replay of": _short_id(r["replay_of"], whole),
              "labels": ", ".join(f"{k}={label_text(v)}" for k, v in sorted(r["labels"].items()))} for r in rows]
    emit_rows(shown, ["run_id", "agent", "status", "events", "started", "parent", "replay of", "labels"],
              as_json=False, as_csv=False, title="Runs")
    if more:
        click.echo(f"the newest {limit} runs shown; more match (--limit N to see more)", err=True)


@runs_group.command("show")
@click.argument("run_id")
@store_option
@format_options
def show_cmd(run_id: str, store_path: str, as_json: bool, as_csv: bool) -> None:
    """Show one run's events (time, kind, tool, decision, duration), with its parent and its sub-runs at
    every depth (at most 200, indented by depth).

    --json prints {"run": the run as `runs list --json` gives it plus "children" (its direct sub-runs' rows),
    "sub_runs" (the sub-runs at every depth as the table lists them, each row with its "depth") and
    "sub_runs_not_listed", "events": [...]}; --csv the events only.
    """
    from sealbox.query import sub_run_tree
    from sealbox.replay.divergence import verdict_text

    store = open_for_reading(store_path)
    try:
        run_id = resolve_id(store, "run", run_id)
        run = store.get_run(run_id)
        tree = sub_run_tree(store, run_id) if run is not None and run.get("children") else ([], 0)
        events = store.read_run(run_id)
        verdicts = _approval_verdicts(store, events)
        shown_args = {e.leaf_index: _resolved(store, e.payload.get("arguments")) for e in events if e.kind == "tool.call"}
        # a client request's note keeps its content (about) as content, in blobs above the inline size
        shown_args.update((e.leaf_index, _resolved(store, e.payload.get("about"))) for e in events
                          if e.kind == "note" and isinstance(e.payload.get("client_request"), dict))
    finally:
        store.close()
    if run is None and not events:
        raise BadInput(f"no run {shown_id(run_id)} in this store")
    if run is not None and run.get("altered"):
        from sealbox.query import RUN_ALTERED_WARNING

        click.echo(RUN_ALTERED_WARNING.format(n=1), err=True)
    # --csv keeps a call's whole arguments, its only copy of them (a cut query is one that was never run); the
    # table and --json's detail shorten them (--json has the event's payload)
    rows = [_event_row(e, verdicts, shown_args.get(e.leaf_index), whole=as_csv) for e in events]
    if as_json:  # the run's header (parent, children, the sub-runs at every depth) as the table shows it, and its events
        if run is not None:
            run = {**run, "sub_runs": tree[0], "sub_runs_not_listed": tree[1]}
        echo_json({"run": run, "events": rows})
        return
    if as_csv:  # one row per event: the run's parent is a column of `runs list --csv`
        emit_rows(rows, ["run_seq", "step", "ts", "kind", "principal", "tool", "decision", "duration_us", "detail"],
                  as_json=False, as_csv=True)
        return
    for line in _family(run_id, run, *tree):
        click.echo(visible(line))
    for e in events:
        if e.kind == "run.ended" and _ended_error(e.payload):
            click.echo(visible(f"error   {_ended_error(e.payload)}"))
        if e.kind == "run.ended" and isinstance(e.payload.get("verdict"), dict):
            click.echo(visible(f"verdict  {verdict_text(e.payload['verdict'])}"))
    emit_rows(rows, ["run_seq", "step", "ts", "kind", "tool", "decision", "duration", "detail"],
              as_json=False, as_csv=False, title=f"Run {run_id}")


#: Sub-runs deeper than this are indented as this depth (their line says their depth).
_MAX_INDENT = 10


def _family(run_id: str, run: dict | None, tree: list[dict] = (), more: int = 0) -> list[str]:
    """The header of ``runs show``: the run, its parent, its sub-runs at every depth (``tree``, as
    :func:`sealbox.query.sub_run_tree` gives them, indented by depth; ``more`` not listed), its snapshot."""
    if run is None:
        return [f"run {run_id}"]
    from sealbox.query import status_text

    def one_line(text: object) -> str:  # an agent name is the client's to choose: a newline in it must not add a line
        return str(text).replace("\n", "\\n").replace("\t", "\\t")

    out = [f"run      {run_id}  agent {one_line(run['agent'])}  principal {one_line(run['principal'])}  "
           f"{status_text(run)}"]
    out.append(f"parent   {run['parent_run_id'] or '(none)'}")
    if run.get("replay_of"):
        out.append(f"replays  {run['replay_of']}")
    kids = run.get("children") or []
    total = len(tree) + more
    out.append(f"children {len(kids) if kids else '(none)'}"
               + (f" ({total} sub-runs at every depth)" if total > len(kids) else ""))
    out += [f"{'  ' * min(k['depth'], _MAX_INDENT)}{k['run_id']}  agent {one_line(k['agent'])}  {status_text(k)}"
            + (f"  depth {k['depth']}" if k["depth"] > 1 else "") for k in tree]
    if more:
        out.append(f"  … {more} more sub-run{'s' if more > 1 else ''} not listed "
                   "(sealbox runs show on a sub-run lists its own)")
    out.append(f"snapshot {run.get('snapshot') or '(none)'}")  # what `sealbox snapshot diff` takes
    return out


def _approval_verdicts(store, events: list) -> dict[int, str]:
    """leaf -> what the approval rules say of each approval event of the run (sealbox.approvals.evaluate,
    the store's identities read once): a request's status, an answer's ``counts`` (with its flags) / ``does not
    count: …``."""
    from sealbox.approvals import _RELATED, evaluate
    from sealbox.identities import identity_book

    answers = [e.leaf_index for e in events if e.kind == "approval.answered"]
    out = dict.fromkeys(answers, "does not count: unknown_approval")  # it answers no request of this run
    requests = [e for e in events if e.kind == "approval.requested"]
    if not requests:
        return out
    book, related = identity_book(store), [e for e in events if e.kind in _RELATED]
    for req in requests:
        state = evaluate(req, related, book)
        out[req.leaf_index] = state.status + (f" ({state.malformed})" if state.malformed else "")
        out.update((a.leaf_index, _answer_verdict(a)) for a in state.answers)
    return out


def _answer_verdict(answer) -> str:
    """``counts``, with the answer's flags as `sealbox calls` marks them (``counts ⚑ shared_identity``), or
    ``does not count: PROBLEM`` (an uncounted answer's flags are not shown: it approved nothing)."""
    if answer.problem is not None:
        return f"does not count: {answer.problem}"
    codes = sorted({f.get("code") for f in answer.flags if isinstance(f, dict) and isinstance(f.get("code"), str)})
    return "counts" + (" ⚑ " + ", ".join(codes) if codes else "")


def _resolved(store, value):
    """A call's arguments as `sealbox calls` shows them: blob references replaced by their content
    (an argument above the inline size is a blob); a reference is kept where the blob was erased."""
    from sealbox.errors import SealboxError

    if not isinstance(value, (dict, list)):
        return value
    try:
        return store.resolve(value)
    except (SealboxError, ValueError):  # erased, or changed below Sealbox (verify says which)
        return value


def _event_row(event, verdicts: dict[int, str] | None = None, arguments=None, *, whole: bool = False) -> dict:
    verdict = (verdicts or {}).get(event.leaf_index)
    p = event.payload
    tool = f"{p.get('server')}/{p.get('tool')}" if isinstance(p.get("tool"), str) else ""
    decision = p.get("effect", "") if event.kind == "policy.decision" else ""
    duration_us = {"tool.result": p.get("duration_us"), "model.call": p.get("latency_us"),
                   "run.resumed": p.get("waited_us")}.get(event.kind)
    if event.kind == "note" and isinstance(p.get("client_request"), dict):  # how long the client took to answer
        waited = p["client_request"].get("waited_us")
        duration_us = waited if type(waited) is int else None
    detail = ""
    if event.kind == "tool.call":
        args = p.get("arguments") if arguments is None else arguments
        # --csv (whole): the arguments' canonical JSON, as the arguments cell of `calls --csv` holds them
        shown = canonical_json_text(args) if whole else _short(args, 60)
        detail = f"{p.get('server')}/{p.get('tool')} call {p.get('call_id')} args={shown}"
    elif event.kind == "policy.decision":
        detail = (f"{p.get('effect')} by rule {p.get('rule')} ({p.get('reason_code')})" if p.get("rule") is not None
                  else f"{p.get('effect')}, no rule ({p.get('reason_code')})")  # e.g. the breaker, a limit
    elif event.kind == "tool.result":
        err = p.get("error") or {}
        detail = "ok" if p.get("ok") else f"error {err.get('type')}: {err.get('message')}"
    elif event.kind == "run.ended":
        detail = p.get("status", "") + _ended_error(p)
    elif event.kind == "note" and isinstance(p.get("client_request"), dict):
        from sealbox.events import client_request_text

        detail = client_request_text(p if arguments is None else {**p, "about": arguments})  # about resolved
    elif event.kind == "note":
        detail = p.get("text", "")
    elif event.kind == "state.saved":
        detail = f"label {p['label']}" if isinstance(p.get("label"), str) else ""
    elif event.kind == "run.started":
        detail = f"agent {p.get('agent')}"
    elif event.kind == "model.call":
        detail = f"{p.get('provider')}/{p.get('model')}"
    elif event.kind == "approval.requested":
        detail = f"approval {p.get('approval_id')}: {verdict}" + _request_text(p)
    elif event.kind == "run.suspended":
        ids = p.get("approval_ids")
        detail = str(p.get("reason", "")) + (f"; awaiting {', '.join(map(str, ids))}" if isinstance(ids, list) and ids
                                             else "")
    elif event.kind == "run.resumed":
        outcomes = p.get("outcomes") if isinstance(p.get("outcomes"), dict) else {}
        ids = p.get("approval_ids") if isinstance(p.get("approval_ids"), list) else []
        detail = ", ".join(f"{a} {outcomes.get(a, 'outcome unknown') if isinstance(a, str) else ''}".rstrip()
                           for a in ids)
    elif event.kind == "approval.answered":
        detail = f"{p.get('decision')} by {p.get('identity')} ({verdict})"
    elif event.kind == "anomaly":
        detail = _anomaly_text(p)
    return {"run_seq": event.run_seq, "step": event.step, "ts": event.ts, "kind": event.kind,
            "principal": event.principal, "tool": tool, "decision": decision, "duration_us": duration_us,
            "duration": _duration(duration_us), "detail": detail, "leaf_index": event.leaf_index, "payload": p}


def _request_text(payload: dict) -> str:
    """``; asks groups ops, identities carol; quorum 2; binding sha256:…`` of an approval request: who
    was asked, and what (the binding its answers sign); empty for a request without a readable ``ask``."""
    ask = payload.get("ask")
    if not isinstance(ask, dict):
        return ""
    names = [", ".join(map(str, v)) if isinstance(v, list) and v else "-"
             for v in (ask.get("groups"), ask.get("identities"))]
    return f"; asks groups {names[0]}, identities {names[1]}; quorum {payload.get('quorum')}; binding {payload.get('binding')}"


def _anomaly_text(payload: dict) -> str:
    """``what: message (where, …)`` of an anomaly event (an imported source's oddity, ...)."""
    text = str(payload.get("what", ""))
    info = payload.get("detail")
    if isinstance(info, dict):
        if isinstance(info.get("message"), str):
            text += f": {info['message']}"
        where = info.get("where")
        if isinstance(where, list) and where:
            text += f" ({', '.join(map(str, where[:3]))}{', …' if len(where) > 3 else ''})"
    return text


def _ended_error(payload: dict) -> str:
    """`` RuntimeError: message`` of a run.ended's ``error`` (empty without one)."""
    err = payload.get("error")
    if not isinstance(err, dict):
        return ""
    return f" {err.get('type')}: {err.get('message')}"


def _duration(us: int | None) -> str:
    if us is None:
        return ""
    if us < 1000:
        return f"{us} µs"
    if us < 1_000_000:
        return f"{us / 1000:.1f} ms"
    return f"{us / 1_000_000:.2f} s"


def _short_id(run_id: str | None, whole: bool) -> str:
    """A run id in ``runs list``'s parent and replay-of columns: whole, or its first 13 characters and
    ``…`` (in a table of a given width, a terminal's or ``COLUMNS``; the commands taking a RUN accept it so)."""
    if not run_id:
        return ""
    return run_id if whole or len(run_id) <= 13 else run_id[:13] + "…"


def _short(value, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
