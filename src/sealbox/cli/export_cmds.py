"""``sealbox export``: whole runs out of the store, in one of several output modes.

The output modes are mutually exclusive; each is one option and one entry of
:data:`MODES` (``-o`` writes a bundle, ``--parquet`` an analyst table). A new mode
adds its option to :func:`export_cmd` and a function to :data:`MODES`.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from sealbox.cli.common import BadInput, echo_json, filter_not_empty, not_empty, open_for_reading, open_for_writing, refuse_to_replace, store_option, resolve_id


def _bundle(store_path: str, target: str, run_ids: tuple[str, ...], filters: dict[str, Any],
            prove_from: tuple[str, ...] = (), force: bool = False) -> dict[str, Any]:
    """Write a bundle; the store is opened for writing, as every export signs a checkpoint committing to it.
    An existing ``target`` is replaced when it is a Sealbox bundle (an export again) or empty; any other
    file only with ``force``."""
    from sealbox.cli.store_cmds import _read_checkpoint
    from sealbox.interop.bundle import check_target, export_bundle, is_bundle, select_runs, with_sub_runs

    from sealbox.errors import StoreReadOnlyError

    check_target(target, store_dir=store_path)  # one of the store's own files is refused before the store is opened
    # a report, notes, someone's evidence: never replaced without a word
    refuse_to_replace(target, ours=is_bundle, what="a Sealbox bundle", force=force)
    saved = [(path, _read_checkpoint(path)) for path in prove_from]
    try:
        store = open_for_writing(store_path)
    except StoreReadOnlyError as exc:  # read-only media, another user's store: say why a reader cannot export
        raise StoreReadOnlyError(f"{exc} (a bundle export signs a checkpoint into the store: export from a "
                                 "writable copy of the store folder)") from exc
    try:
        selected = select_runs(store, _named_runs(store, run_ids), **filters)
        runs = with_sub_runs(store, selected)  # what a run set going is part of it
        sizes = [_extended_size(store, path, note) for path, note in saved]
        return {**export_bundle(store, runs, target, prove_from=sizes).to_dict(),
                "sub_runs": [r for r in runs if r not in set(selected)], "selected": len(selected)}
    finally:
        store.close()


def _extended_size(store: Any, path: str, note: str) -> int:
    """The size of the saved checkpoint ``note`` (from ``path``, ``--prove-from``) after checking that this
    store extends it: signed by the log's key, no larger than the log, the log's root at its size.

    Raises:
        BadInput: it is signed by another key or for another log, larger than the log, or the log's
            root at its size differs (the log was rewritten since it was saved).
    """
    from sealbox.errors import NoteError
    from sealbox.ledger.checkpoint import Verifier, verify_checkpoint

    try:
        cp = verify_checkpoint(note, Verifier.from_vkey(store.pinned_vkey()))
    except NoteError as exc:
        raise BadInput(f"--prove-from {path}: not a checkpoint of this log (it does not verify with the log's "
                       f"key {store.pinned_vkey()}: {exc})") from None
    size = store.size()
    if cp.size > size:
        raise BadInput(f"--prove-from {path}: signed for {cp.size} events, but this log holds {size} (it was "
                       "rolled back or cut since, or the checkpoint is of another copy of it)")
    if cp.size == 0:
        raise BadInput(f"--prove-from {path}: a checkpoint of the empty log needs no proof")
    if store.root(cp.size) != cp.root:
        raise BadInput(f"--prove-from {path}: this log's root at size {cp.size} is not the checkpoint's (the log "
                       "was rewritten or forked after it was saved): no consistency proof exists")
    return cp.size


def _parquet(store_path: str, target: str, run_ids: tuple[str, ...], filters: dict[str, Any],
             force: bool = False) -> dict[str, Any]:
    """Write the Parquet table; an existing ``target`` is replaced when it is an earlier ``--parquet``
    export or empty, any other file only with ``force``."""
    from sealbox.interop.bundle import check_target, select_runs
    from sealbox.interop.parquet import export_parquet, is_call_table

    check_target(target, store_dir=store_path)
    refuse_to_replace(target, ours=is_call_table, what="a Sealbox Parquet export", force=force)
    store = open_for_reading(store_path)
    try:
        runs = select_runs(store, _named_runs(store, run_ids), **filters)
        return export_parquet(store, runs, target)
    finally:
        store.close()


def _named_runs(store: Any, run_ids: tuple[str, ...]) -> list[str]:
    """The runs the arguments name (:func:`resolve_id`); BadInput for one that names no run, its id cut to
    40 characters in the message (``select_runs`` would echo a pasted file whole)."""
    from sealbox.approvals import shown_id
    from sealbox.events import SYSTEM_RUN_ID

    ids = [resolve_id(store, "run", r) for r in run_ids]
    for rid in ids:
        if rid != SYSTEM_RUN_ID and store.get_run(rid) is None:
            raise BadInput(f"no run {shown_id(rid)} in this store")
    return ids


def _otlp(store_path: str, target: str, run_ids: tuple[str, ...], filters: dict[str, Any], *, content: bool = False,
          headers: tuple[str, ...] = ()) -> dict[str, Any]:
    """Send the runs to an OTLP/HTTP endpoint as traces and logs (sealbox.interop.otlp)."""
    from sealbox.cli.otlp_cmd import run_otlp_export
    from sealbox.interop.bundle import select_runs

    store = open_for_reading(store_path)
    try:
        runs = select_runs(store, _named_runs(store, run_ids), **filters)
    finally:
        store.close()
    return run_otlp_export(store_path, runs, target, content, headers, quiet=True).to_dict()


def _n(count: int, noun: str, plural: str | None = None) -> str:
    """``1 run``, ``2 runs``: a count and its noun in the right number."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _open_runs(runs: dict[str, str]) -> str:
    """The exported runs without ``run.ended``, with the status ``runs list`` gave them at export (the
    bundle cannot say ``interrupted``: it holds the log's events, and that status is never written)."""
    if not runs:
        return ""
    said = ", ".join(f"{rid} {status}" + (" (its recording process had died)" if status == "interrupted" else "")
                     for rid, status in runs.items())
    return (f"\n{_n(len(runs), 'run was', 'runs were')} open when exported (no run.ended in the bundle): {said}.")


def _sub_runs(r: dict[str, Any]) -> str:
    """`` (1 selected and its 2 sub-agent runs)`` when the export took sub-agent runs along, else ``""``."""
    if not r["sub_runs"]:
        return ""
    its = "its" if r["selected"] == 1 else "their"
    return f" ({r['selected']} selected and {its} {_n(len(r['sub_runs']), 'sub-agent run')})"


#: option name -> (writer, what it wrote, for the one-line summary).
MODES: dict[str, tuple[Callable[..., dict[str, Any]], Callable[[dict[str, Any]], str]]] = {
    "output": (_bundle, lambda r: (f"Wrote {r['path']}: {_n(r['events'], 'event')} of {_n(len(r['runs']), 'run')}"
                                   + _sub_runs(r) + ", "
                                   f"{_n(r['system_events'], 'system event')}, {_n(r['blobs'], 'blob')}, "
                                   f"{_n(r['snapshots'], 'snapshot')}, proven against the checkpoint of size "
                                   f"{r['checkpoint_size']}"
                                   + (" (signed now)" if r["checkpoint_issued"] else "")
                                   + ("" if not r.get("proven_from") else ", with a consistency proof from size "
                                      + ", ".join(map(str, r["proven_from"])))
                                   + ". Check it anywhere with `sealbox verify FILE --key KEY`; send KEY, the log's "
                                   f"verifier key, apart from the bundle (publish it where its recipient can check it "
                                   f"came from you): {r['vkey']}" + _open_runs(r["open_runs"]))),
    "parquet": (_parquet, lambda r: f"Wrote {r['path']}: {_n(r['rows'], 'tool call')} of {_n(r['runs'], 'run')}."),
    "otlp": (_otlp, lambda r: (f"Sent {_n(r['runs'], 'run')} to {r['traces_url']} and {r['logs_url']}: "
                               f"{_n(r['spans'], 'span')}, {_n(r['logs'], 'log record')} "
                               f"(content {'on' if r['content'] else 'off'}).")),
}


@click.command("export")
@store_option
@click.argument("run_ids", nargs=-1, metavar="[RUN]...")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), callback=not_empty,
              help="Write an export bundle (.sbx) that `sealbox verify FILE --key KEY` checks offline.")
@click.option("--parquet", "parquet", type=click.Path(dir_okay=False), callback=not_empty,
              help="Write one row per tool call to a Parquet file (needs pyarrow).")
@click.option("--otlp", "otlp", metavar="URL",
              help="Send the runs as OpenTelemetry traces and logs to this OTLP/HTTP endpoint (e.g. http://localhost:4318).")
@click.option("--otlp-content", "otlp_content", is_flag=True,
              help="With --otlp: also send tool arguments, results, error messages and model requests and "
                   "responses (off by default).")
@click.option("--otlp-header", "otlp_headers", multiple=True, metavar="K=V",
              help="With --otlp: an HTTP header for the endpoint (repeatable), e.g. an API key.")
@click.option("--since", metavar="TIME", help="Runs started at or after this time (RFC 3339, a date, or 30d / 2h ago).")
@click.option("--until", metavar="TIME", help="Runs started before this time (same forms as --since).")
@click.option("--agent", callback=filter_not_empty, help="Only runs of this agent.")
@click.option("--prove-from", "prove_from", multiple=True, callback=not_empty, type=click.Path(dir_okay=False), metavar="SAVED",
              help="With -o: a checkpoint the recipient saved earlier (`sealbox log checkpoint` output, or its "
                   "--json); the bundle carries an RFC 9162 consistency proof from it, so that `sealbox verify "
                   "FILE --key KEY --checkpoint SAVED` shows the log extends it. Repeatable.")
@click.option("--force", is_flag=True,
              help="With -o or --parquet: replace FILE even when it exists and is not what that mode writes (a "
                   "previous bundle, resp. Parquet export, or an empty file is replaced without it).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def export_cmd(store_path: str, run_ids: tuple[str, ...], since: str | None, until: str | None, agent: str | None,
               as_json: bool, otlp_content: bool, otlp_headers: tuple[str, ...], prove_from: tuple[str, ...],
               force: bool, **modes: str | None) -> None:
    """Export whole runs: the named RUNs, or every run passing --since/--until/--agent.

    With -o, each run comes with its sub-agent runs at every depth (docs/bundle-format.md).

    Exactly one output mode: -o FILE (a bundle holding the runs' events, blobs,
    snapshots, a signed checkpoint with an inclusion proof per event and the
    verifier key; send that key to the recipient apart from the bundle, as it prints it:
    `sealbox verify FILE --key KEY` trusts only a key given), --parquet FILE (one row per tool call, for analysts) or --otlp
    URL (OpenTelemetry traces and logs over OTLP/HTTP; nothing is sent otherwise).
    """
    chosen = [(name, value) for name, value in modes.items() if value]
    if len(chosen) != 1:
        flags = ", ".join("-o" if n == "output" else f"--{n}" for n in MODES)
        raise click.UsageError(f"give exactly one output mode ({flags})")
    name, target = chosen[0]
    if target == "-" and name != "otlp":  # not a file named "-" in the current folder
        flag = "-o" if name == "output" else f"--{name}"
        raise BadInput(f"{flag} -: an export is written to a file (a bundle is a ZIP checked as a whole, "
                       "Parquet needs a seekable file), not to stdout: give a path")
    if (otlp_content or otlp_headers) and name != "otlp":
        raise click.UsageError("--otlp-content and --otlp-header go with --otlp")
    from sealbox.query import check_window

    check_window(since, until)  # a bad time, or a window no time is in, fails before the store is opened
    if prove_from and name != "output":
        raise click.UsageError("--prove-from goes with -o (a bundle)")
    if force and name not in ("output", "parquet"):
        raise click.UsageError("--force goes with -o or --parquet (a file)")
    extra: dict[str, Any] = {"content": otlp_content, "headers": otlp_headers} if name == "otlp" else {}
    if prove_from:
        extra["prove_from"] = prove_from
    if force:
        extra["force"] = True
    writer, describe = MODES[name]
    result = writer(store_path, target, run_ids, {"since": since, "until": until, "agent": agent}, **extra)
    if as_json:
        echo_json(result)
    else:
        click.echo(describe(result))
