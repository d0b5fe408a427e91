"""``sealbox calls``: every tool call across runs, filtered."""

from __future__ import annotations

import json

import click

from sealbox.cli.common import (BadInput, emit_rows, filter_not_empty, format_options, open_for_reading, resolve_id, shown_id,
                                store_option)

_DECISIONS = ("allow", "deny", "require_approval")  # sealbox.query.DECISIONS, without importing it for --help
_TABLE = ("ts", "run_id", "step", "tool", "decision", "rule", "approvers", "outcome", "duration", "arguments")


@click.command("calls")
@store_option
@click.option("--tool", metavar="GLOB", callback=filter_not_empty, help="Upstream tool name, glob (e.g. 'read_*', case-sensitive); with a '/', also SERVER/TOOL (e.g. 'db/write_query').")
@click.option("--server", metavar="GLOB", callback=filter_not_empty, help="Upstream server id, glob.")
@click.option("--run", "run_id", metavar="RUN", help="Only calls of this run (its id, or a unique prefix of at least 4 characters).")
@click.option("--agent", callback=filter_not_empty, help="Only calls of runs of this agent.")
@click.option("--principal", callback=filter_not_empty, help="Only calls made by this principal.")
@click.option("--since", metavar="TIME", help="From this time, inclusive: RFC 3339 (2026-11-29T12:00:00Z), a date, or 30d / 2h / 15m ago.")
@click.option("--until", metavar="TIME", help="Before this time, exclusive (same forms as --since).")
@click.option("--decision", type=click.Choice(_DECISIONS), help="The call's policy decision.")
@click.option("--error/--no-error", "error", default=None,
              help="Only calls whose tool raised (--error) or succeeded (--no-error); calls that never ran match neither.")
@click.option("--match", "matches", multiple=True, metavar="FIELD~REGEX",
              help="Python regex searched in a field, e.g. 'arguments.query~(?i)delete', 'arguments.*~x' (any argument) or 'result~secret'. Repeatable; all must match.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many calls: the newest (shown oldest first).")
@click.option("--replays", is_flag=True,
              help="Also list the calls of replay runs (served from the record, or run again for real by a "
                   "replay with --tools live); left out unless --run names one.")
@format_options
def calls_cmd(store_path: str, tool: str | None, server: str | None, run_id: str | None, agent: str | None,
              principal: str | None, since: str | None, until: str | None, decision: str | None,
              error: bool | None, matches: tuple[str, ...], limit: int | None, replays: bool, as_json: bool,
              as_csv: bool) -> None:
    """Every tool call across runs, oldest first: who called what, the decision, the outcome.

    A call one of whose events (tool.call, policy.decision, tool.result) no longer hashes to its
    recorded leaf hash (changed below Sealbox) is listed with the flag ``altered`` and a warning
    on stderr: its values are what the database holds now, not what was recorded."""
    from sealbox.query import ALTERED_FLAG, CALL_COLUMNS, check_window, compile_matches

    compiled = compile_matches(list(matches))  # a bad regex or time fails before the store is opened; a list: two
    # --match are two expressions, never one (field, regex) pair
    check_window(since, until)
    store = open_for_reading(store_path)
    try:
        if run_id is not None:
            run_id = resolve_id(store, "run", run_id)
            if run_id not in store.ids_with_prefix("run", run_id, limit=1):
                raise BadInput(f"no run {shown_id(run_id)} in this store")
        replays = replays or run_id is not None
        rows = store.query_calls(tool=tool, server=server, run_id=run_id, agent=agent, principal=principal,
                                 since=since, until=until, decision=decision, error=error, match=compiled,
                                 limit=None if limit is None else limit + 1,
                                 replays=replays, check_altered=True)  # the listing flags altered calls
        more = limit is not None and len(rows) > limit  # one more asked for: say that the listing is cut, not silently
        if more:
            rows = rows[-limit:]  # the newest, oldest first
        hidden = _redacted_misses(store, rows, compiled, dict(
            tool=tool, server=server, run_id=run_id, agent=agent, principal=principal, since=since, until=until,
            decision=decision, error=error, replays=replays))
        # the calls of replay runs that --replays would have listed: with --limit, those among the newest
        # calls (a count of all calls minus the listed ones said 0 once the listing reached the limit)
        listed = {(r["run_id"], r["call_id"]) for r in rows}
        exposed_hint = None
        if not rows and tool and "/" not in tool and server is None and "__" in tool.strip("_"):
            # the name a gateway exposes (server + "__" + tool, the default separator), as the agent's MCP
            # client shows it: calls are matched by upstream server and tool
            up_server, up_tool = tool.split("__", 1)
            if store.query_calls(tool=up_tool, server=up_server, run_id=run_id, agent=agent, principal=principal,
                                 since=since, until=until, decision=decision, error=error, match=compiled, limit=1,
                                 replays=replays):
                exposed_hint = (f"note: calls are matched by their upstream server and tool, not by the name a gateway "
                                f"exposes: --tool {up_server}/{up_tool} lists the calls {tool!r} names")
        left_out = 0 if replays or not _has_replays(store) else sum(
            (r["run_id"], r["call_id"]) not in listed for r in store.query_calls(
                tool=tool, server=server, agent=agent, principal=principal, since=since, until=until,
                decision=decision, error=error, match=compiled, limit=limit))
    finally:
        store.close()
    if left_out > 0:
        click.echo(f"note: {left_out} call(s) of replay runs left out (served from the record, or run again for "
                   "real by a replay with --tools live); --replays lists them", err=True)
    if hidden:
        click.echo(f"note: {hidden} other call(s) hold redacted values where --match looked ("
                   f"{', '.join(m.text.split('~', 1)[0] for m in compiled if m.root in _REDACTABLE)}), which it "
                   "cannot search: they are not listed (docs/content-modes.md)", err=True)
    altered = sum(ALTERED_FLAG in r["flags"] for r in rows)
    if altered:
        click.echo(f"warning: {altered} call(s) listed hold an event changed below Sealbox after it was written "
                   "(its bytes no longer hash to its recorded leaf hash, or a query column disagrees with them; "
                   f"flag {ALTERED_FLAG}): what is shown for them is what the database holds now, not what was "
                   "recorded; `sealbox verify` names the events", err=True)
    if as_json or as_csv:
        emit_rows(rows, CALL_COLUMNS, as_json=as_json, as_csv=as_csv, json_columns=("arguments",))
        if more:  # on stderr: stdout stays valid JSON / CSV
            click.echo(f"the newest {limit} calls shown; more match (--limit N to see more)", err=True)
        return
    if not rows:
        click.echo("no tool calls match", err=True)
        if exposed_hint:
            click.echo(exposed_hint, err=True)
        return
    emit_rows([_display(r) for r in rows], _TABLE, as_json=False, as_csv=False, title=f"Tool calls ({len(rows)})")
    if more:
        click.echo(f"the newest {limit} calls shown; more match (--limit N to see more)", err=True)


def _has_replays(store) -> bool:
    has = getattr(store, "has_replays", None)
    return True if has is None else has()


#: ``--match`` roots whose values a ``redacted`` store may hold as markers (``result`` is not in the rows).
_REDACTABLE = ("arguments", "error")


def _redacted_misses(store, rows: list, compiled: list, filters: dict) -> int:
    """In a ``redacted`` store, how many calls passing every filter but ``--match`` were not matched and
    hold a redaction marker at a matched path: "no tool calls match" must not read as "no call did that"."""
    from sealbox.query import _values_at

    paths = [m.path for m in compiled if m.root in _REDACTABLE]
    if not paths or getattr(getattr(store, "content", None), "mode", None) != "redacted":
        return 0
    found = {(r["run_id"], r["call_id"]) for r in rows}
    count = 0
    for row in store.query_calls(**filters):
        if (row["run_id"], row["call_id"]) not in found and any(
                _marked(v) for path in paths for v in _values_at(row, path)):
            count += 1
    return count


def _marked(value) -> bool:
    text = json.dumps(value, ensure_ascii=False)
    return '"$redacted"' in text or "⟦redacted:" in text


def _display(row: dict) -> dict:
    outcome = row["outcome"]
    if row["error"]:
        outcome = f"error: {row['error'].get('type')}: {row['error'].get('message')}"
    if row.get("reason_code") == "imported":  # a call of an imported run (sealbox import), not of this store's
        outcome = f"(imported) {outcome}"
    approvers = ", ".join(f"{a['identity']} ({a['decision']})" for a in row["approvers"])
    if row["flags"]:
        approvers += " ⚑ " + ", ".join(sorted(set(filter(None, row["flags"]))))
    uncounted = row.get("uncounted") or []  # answers that do not count: shown apart, with why, never as approvers
    if uncounted:
        approvers += ("; " if approvers else "") + "not counted: " + ", ".join(
            f"{a['identity']} ({a['decision']}: {a['problem']})" for a in uncounted)
    from sealbox.cli.runs_cmds import _duration

    return {**row, "approvers": approvers, "tool": f"{row['server']}/{row['tool']}", "outcome": _short(outcome, 50),
            "duration": _duration(row.get("duration_us")),
            "arguments": _short(json.dumps(row["arguments"], ensure_ascii=False), 60)}


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
