"""``sealbox report RUN -o incident.html``: a self-contained incident report (HTML or Markdown)."""

from __future__ import annotations

import os

import click

from sealbox.cli.common import BadInput, not_empty, open_for_reading, refuse_to_replace, store_option, resolve_id, shown_id

_BY_EXTENSION = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


@click.command("report")
@click.argument("run_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False), callback=not_empty,
              help="Write here, replacing the file atomically (format from the extension: .html, .md); an existing "
                   "file that is not a Sealbox report only with --force. Default, or '-': stdout (Markdown unless "
                   "--format html).")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), help="Output format (overrides the extension).")
@click.option("--force", is_flag=True,
              help="With -o: replace FILE even when it exists and is not a Sealbox report (an earlier report or an "
                   "empty file is replaced without it).")
@click.option("--no-verify", is_flag=True, help="Skip verifying the store (faster on a large store; the report says so).")
@store_option
def report_cmd(run_id: str, output: str | None, fmt: str | None, force: bool, no_verify: bool, store_path: str) -> None:
    """Write an incident report of one run: timeline, calls, approvals, state, snapshot, verification."""
    from sealbox.interop.bundle import BundleError, open_target
    from sealbox.report import build_report, render

    if output == "-":  # the usual spelling of stdout: the same as no -o (--format html for HTML)
        output = None
    if fmt is None:
        ext = os.path.splitext(output or "")[1].lower()
        if output and ext not in _BY_EXTENSION:
            raise click.UsageError(f"cannot tell the format from {output!r}: use .html or .md, or --format")
        fmt = _BY_EXTENSION.get(ext, "md")
    if force and output is None:
        raise click.UsageError("--force goes with -o FILE")
    target = None
    if output is not None:
        try:
            # before any work: one of the store's own files, a FIFO, a device, a directory or a symbolic
            # link is refused, and the temporary file is created (so an unwritable folder fails now)
            target = open_target(output, store_dir=store_path)
        except BundleError as exc:
            raise BadInput(str(exc)) from None
        try:
            # a user's source file or notes: never replaced without a word (an earlier report is)
            refuse_to_replace(output, ours=is_report, what="a Sealbox incident report", force=force)
        except BadInput:
            target.discard()
            raise
    try:
        store = open_for_reading(store_path)
        try:
            run_id = resolve_id(store, "run", run_id)
            if not store.read_run(run_id):
                raise BadInput(f"no run {shown_id(run_id)} in this store")
            report = build_report(store, run_id, verify=not no_verify)
        finally:
            store.close()
        text = render(report, fmt)
        if target is None:
            click.echo(text, nl=False)
            return
        try:
            target.commit(text.encode("utf-8"))
        except BundleError as exc:
            raise BadInput(str(exc)) from None
    finally:
        if target is not None:
            target.discard()
    v = report.verification
    state = "verified" if v.ok else ("NOT VERIFIED" if v.checked else "not verified (--no-verify)")
    def count(n: int, noun: str) -> str:
        return f"{n} {noun}{'' if n == 1 else 's'}"

    click.echo(f"wrote {output} ({fmt}, {count(len(report.timeline), 'event')}, "
               f"{count(len(report.tool_calls), 'tool call')}, {count(len(report.approvals), 'approval')}; "
               f"store {state})")


#: How every report ``sealbox report`` writes begins (:mod:`sealbox.report.markdown`), and what the
#: HTML one holds in its head (:mod:`sealbox.report.html`).
_MD_START = b"# Sealbox incident report: run "
_HTML_START, _HTML_TITLE = b"<!DOCTYPE html>\n<html", b"<title>Sealbox incident report: run "


def is_report(path: str) -> bool:
    """Whether ``path`` is an incident report ``sealbox report`` wrote (Markdown or HTML), as its
    first 64 KiB tell: what ``-o`` replaces without ``--force``."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    return head.startswith(_MD_START) or (head.startswith(_HTML_START) and _HTML_TITLE in head)
