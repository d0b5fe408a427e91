"""``sealbox approvals list | show | approve | deny``."""

from __future__ import annotations

import json

import click

from sealbox.cli.common import (BadInput, not_empty, check_key_file, echo_json, emit_rows, format_options, open_for_reading, open_for_writing, resolve_id, shown_id,
                                store_option, visible)


def _open_listing(path: str):
    """Writable when possible, so that expiries noticed while listing are recorded; else read-only."""
    from sealbox.errors import StoreError

    try:
        return open_for_writing(path)
    except StoreError:
        return open_for_reading(path)


@click.group("approvals")
def approvals_group() -> None:
    """Approval requests and their signed answers."""


@approvals_group.command("list")
@click.option("--pending", is_flag=True, help="Only requests still waiting for answers.")
@click.option("--flagged", is_flag=True,
              help="Only requests with a counted answer carrying any flag: shared_identity (a shared account), "
                   "multiple_clients (one identity, several clients), acts_as_agent (the identity is also an "
                   "agent's principal), quorum_same_client (two approvers of one request, one client).")
@click.option("--run", "run_id", metavar="RUN", help="Only requests of this run (its id, or a unique prefix of at least 4 characters).")
@click.option("--since", metavar="TIME", help="Requested at or after this time, inclusive: RFC 3339 (2026-11-29T12:00:00Z), a date, or 30d / 2h / 15m ago.")
@click.option("--until", metavar="TIME", help="Requested before this time, exclusive (same forms as --since).")
@store_option
@format_options
def list_cmd(pending: bool, flagged: bool, run_id: str | None, since: str | None, until: str | None, store_path: str,
             as_json: bool, as_csv: bool) -> None:
    """List approval requests, newest first."""
    from sealbox.approvals import list_approvals
    from sealbox.query import check_window

    since, until = check_window(since, until)  # a bad time fails before the store is opened
    store = _open_listing(store_path)
    try:
        if run_id is not None:  # as `sealbox calls --run`: an id or a unique prefix, an unknown run is an error
            run_id = resolve_id(store, "run", run_id)
            if run_id not in store.ids_with_prefix("run", run_id, limit=1):
                raise BadInput(f"no run {shown_id(run_id)} in this store")
        states = list_approvals(store, pending=pending, flagged=flagged, run_id=run_id, since=since, until=until)
        rows = [s.to_dict() for s in states]
    finally:
        store.close()
    if as_json or as_csv:
        for r in rows:  # approvals withdrawn: their identity was disabled or re-keyed before the call ran
            r["withdrawn"] = [{"identity": a["identity"], "answer_leaf": a["leaf_index"], **a["withdrawn"]}
                              for a in r["answers"] if a.get("withdrawn") is not None and not a["counted"]]
        emit_rows(rows, ["approval_id", "run_id", "call_id", "server", "tool", "status", "quorum", "expires_at",
                         "decided_by", "flags", "withdrawn"], as_json=as_json, as_csv=as_csv)
        return
    if not rows:
        click.echo("no approval requests match", err=True)
        return
    shown = [{**r, "tool": f"{r['server']}/{r['tool']}", "answers": len(r["answers"]), "status": _status_text(r),
              "decided_by": ", ".join(r["decided_by"]) or "-",
              "flags": ", ".join(sorted({f"{f['identity']}:{f.get('code')}" for f in r["flags"]}))} for r in rows]
    emit_rows(shown, ["approval_id", "run_id", "tool", "status", "quorum", "answers", "expires_at", "decided_by", "flags"],
              as_json=False, as_csv=False, title="Approvals")


_CHANGE_WORDS = {"disabled": "disabled", "rotated": "key rotated", "compromised": "key compromised"}


def _one_line(text: str) -> str:
    """One line of `approvals show`: recorded text (a tool name the agent chose, an approver's reason)
    holding a newline is shown as ``\\n``, so it cannot print a line of its own (an ``arguments`` or
    ``decided by`` line) on the screen an approver reads before answering."""
    return visible(text).replace("\n", "\\n")


def _status_text(row: dict) -> str:
    """A request's status as the table shows it: with the approvals withdrawn because their identity
    was disabled or re-keyed before the call ran (``pending (approval by alice withdrawn: disabled at
    leaf 12)``, ``… withdrawn: key rotated at leaf 17)``)."""
    gone = [a for a in row["answers"] if a.get("withdrawn") is not None and not a["counted"]]
    if not gone:
        return row["status"]
    return row["status"] + " (" + "; ".join(
        f"approval by {a['identity']} withdrawn: {_CHANGE_WORDS.get(a['withdrawn']['change'])} at leaf "
        f"{a['withdrawn']['change_leaf']}" for a in gone) + ")"


def _run_hint(store, text: str) -> None:
    """An approval id that names nothing but is a run's id (or prefix): say so, and what lists its approvals."""
    try:
        run_id = resolve_id(store, "run", text)
    except BadInput:
        return
    if store.get_run(run_id) is not None:
        raise BadInput(f"{text!r} is a run, not an approval request: `sealbox approvals list --run {run_id}` "
                       "lists its approvals") from None


@approvals_group.command("show")
@click.argument("approval_id")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show_cmd(approval_id: str, store_path: str, as_json: bool) -> None:
    """Show one request: the call, its binding, who is asked, every answer and flag."""
    from sealbox.approvals import ApprovalError, asked_text, get_approval

    store = open_for_reading(store_path)
    try:
        try:
            state = get_approval(store, resolve_id(store, "approval", approval_id))
        except (ApprovalError, BadInput):
            _run_hint(store, approval_id)
            raise
        row = state.to_dict()
        row["arguments"] = store.resolve(row["arguments"])
    finally:
        store.close()
    if as_json:
        echo_json(row)
        return
    asked = asked_text(row["ask"])
    status = _status_text(row) + (f" ({row['malformed']}; it can never be approved)" if row["malformed"] else "")
    for label, value in (("approval", row["approval_id"]), ("status", status), ("run", row["run_id"]),
                         ("call", f"{row['call_id']}  {row['server']}/{row['tool']}"),
                         ("arguments", json.dumps(row["arguments"], ensure_ascii=False)), ("binding", row["binding"]),
                         ("rule", row["rule"]), ("asked", asked),
                         ("quorum", row["quorum"]), ("requested", f"{row['requested_at']} by {row['requested_by']}"),
                         ("expires", row["expires_at"]), ("decided by", ", ".join(row["decided_by"]) or "-"),
                         ("resumed", _resumed_text(row))):
        click.echo(_one_line(f"{label:<10} {value}"))  # what an approver reads: recorded text never drives the terminal
    for a in row["answers"]:
        state_text = "counts" if a["counted"] else f"does not count: {a['problem']}"
        w = a.get("withdrawn")
        if w is not None:
            who = (f"{a['identity']} was disabled" if w["change"] == "disabled"
                   else f"{a['identity']}'s key was declared compromised (from before this answer)"
                   if w["change"] == "compromised" else f"{a['identity']}'s key was rotated")
            state_text += (f"; {who} at leaf {w['change_leaf']} after answering, before the call ran: this approval "
                           "was withdrawn")
        c = a.get("compromised")
        if c is not None and w is None:
            state_text += (f"; signed with a key declared compromised from leaf {c['from_leaf']} (identity.changed at "
                           f"leaf {c['change_leaf']})")
        click.echo(_one_line(f"answer     {a['answered_at']} {a['identity']} {a['decision']} ({state_text}): {a['reason']}"))
        for f in a["flags"]:
            click.echo(_one_line(f"  flag     {f.get('code')}: {json.dumps(f.get('evidence'), ensure_ascii=False)}"))


def _resumed_text(row: dict) -> str:
    """When the run went on past the request (its first ``run.resumed``) and the outcome it gave, or -."""
    if not row["resumed"]:
        return "-"
    return f"{row['resumed_at'] or '(time unreadable)'} (outcome {row['outcome'] or 'unreadable'})"


def _answer(decision: str, approval_id: str, reason: str, key_file: str, binding: str | None, window: float,
            store_path: str) -> None:
    from sealbox import __version__
    from sealbox.approvals import answer, local_client
    from sealbox.identities import load_key

    check_key_file(key_file)
    store = open_for_writing(store_path)
    try:
        approval_id = resolve_id(store, "approval", approval_id)
        state = answer(store, approval_id, decision, reason, key_file, binding=binding, shared_window_s=window,
                       client=local_client(user_agent=f"sealbox-cli/{__version__}"))
    finally:
        store.close()
    # its own answer, not the last one: another approver's may have been committed before the read-back
    # (an identity answers a request once, so its name finds it)
    signer = load_key(key_file).name
    mine = next(a for a in reversed(state.answers) if a.identity == signer)
    click.echo(f"{mine.identity} {'approved' if decision == 'approve' else 'denied'} {approval_id}; "
               f"request is now {state.status}")
    for f in mine.flags:
        click.echo(f"flag: {f['code']} ({json.dumps(f.get('evidence'), ensure_ascii=False)})", err=True)


def _answer_command(decision: str, help_text: str):
    @click.argument("approval_id")
    @click.option("--reason", required=True, help="Why (recorded and signed).")
    @click.option("--key-file", required=True, callback=not_empty, type=click.Path(dir_okay=False), help="Your identity's private key file.")
    @click.option("--binding", help="The binding you reviewed (from `approvals show`); refused if the request's differs.")
    @click.option("--window", type=float, default=24 * 3600, show_default=True,
                  help="Seconds within which answers from several clients are flagged: 86400 (24 h) to "
                       "31622400 (a year); it may be widened, never narrowed.")
    @store_option
    def command(approval_id: str, reason: str, key_file: str, binding: str | None, window: float, store_path: str) -> None:
        from sealbox.approvals import REASON_MAX_CHARS, ApprovalError, check_shared_window

        from sealbox.query import not_utf8

        if not reason.strip():
            raise click.UsageError("--reason must not be empty: say why (it is recorded and signed)")
        if len(reason) > REASON_MAX_CHARS:  # signed and kept forever: a pasted file is no reason
            raise click.UsageError(f"--reason is {len(reason)} characters long: at most {REASON_MAX_CHARS} are "
                                   "recorded (say why in short; link to the details)")
        if not_utf8(reason):  # a byte that is not UTF-8 (a Latin-1 terminal): no signed record can hold it
            raise click.UsageError("--reason is not UTF-8 text (it holds a byte that is not UTF-8): write it again "
                                   "in UTF-8 (check the terminal's or the script's encoding)")
        try:
            check_shared_window(window)
        except ApprovalError as exc:
            raise click.BadParameter(str(exc), param_hint="--window") from None
        _answer(decision, approval_id, reason, key_file, binding, window, store_path)

    command.__doc__ = help_text
    return command


approvals_group.command("approve")(_answer_command("approve", "Approve a request, signed with your key."))
approvals_group.command("deny")(_answer_command("deny", "Deny a request, signed with your key."))
