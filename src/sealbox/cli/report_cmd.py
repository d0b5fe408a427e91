"""``sealbox report RUN -o incident.html``: a self-contained incident report (HTML or Markdown)."""

from __future__ import annotations

import os

import click

from sealbox.cli.common import BadInput, not_empty, open_for_reading, store_option, resolve_id

_BY_EXTENSION = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


@click.command("report")
@click.argument("run_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False), callback=not_empty,
              help="Write here, replacing the file atomically (format from the extension: .html, .md). "
                   "Default, or '-': stdout (Markdown unless --format html).")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), help="Output format (overrides the extension).")
@click.option("--no-verify", is_flag=True, help="Skip verifying the store (faster on a large store; the report says so).")
@store_option
def report_cmd(run_id: str, output: str | None, fmt: str | None, no_verify: bool, store_path: str) -> None:
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
    target = None
    if output is not None:
        try:
            # before any work: one of the store's own files, a FIFO, a device, a directory or a symbolic
            # link is refused, and the temporary file is created (so an unwritable folder fails now)
            target = open_target(output, store_dir=store_path)
        except BundleError as exc:
            raise BadInput(str(exc)) from None
    try:
        store = open_for_reading(store_path)
        try:
            run_id = resolve_id(store, "run", run_id)
            if not store.read_run(run_id):
                raise BadInput(f"no run {run_id!r} in this store")
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
