"""``sealbox import FILE``: bring runs recorded elsewhere into the store."""

from __future__ import annotations

import os

import click

from sealbox.cli.common import echo_json, not_empty, open_for_writing, store_option

# sealbox.interop.importers.FORMATS, without importing it for --help
_FORMATS = ("auto", "tau-bench", "swe-agent", "otlp-json", "jaeger", "langfuse", "openai-agents-runstate")
#: Files at least this large get a progress bar (unless --no-progress).
PROGRESS_BYTES = 1 << 20


@click.command("import")
@store_option
@click.argument("file", callback=not_empty, type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default="auto", show_default=True,
              help="The file's format; auto detects it from the structure.")
@click.option("--progress/--no-progress", "show_progress", default=None,
              help="Show a progress bar on stderr (default: for files of 1 MiB or more, when stderr is a terminal).")
@click.option("--max-file-bytes", "max_bytes", type=click.IntRange(min=1), default=None,
              help="The largest file to read, in bytes (default 256 MiB: import holds the file and its parsed "
                   "JSON in memory). A larger one is refused before it is read.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def import_cmd(store_path: str, file: str, fmt: str, show_progress: bool | None, max_bytes: int | None,
               as_json: bool) -> None:
    """Import the runs in FILE (one transaction: all of them or none).

    A file whose bytes (SHA-256) were imported into the store already is not
    imported again: its runs are named, nothing is written (exit 0). A span,
    observation or log record repeated in the file with the same id and content is
    skipped (counted: "skipped N duplicate(s)"); the same id with other content is
    kept and flagged (a duplicate_span_id anomaly). A run whose content was imported
    before (from any file) is not written again; one whose trace id was, with other
    content, is written and flagged (a trace_imported_before anomaly).

    Each run is marked as imported (source file, its SHA-256, format, original ids);
    oddities of the source are recorded as anomaly events; imported approvals are
    notes whose identity is not authenticated.
    """
    from sealbox.interop.importers import MAX_IMPORT_BYTES, import_file

    limit = MAX_IMPORT_BYTES if max_bytes is None else max_bytes
    try:
        size = os.path.getsize(file)
    except OSError:
        size = 0
    if show_progress is None:  # not into a log or a pipe: rich's transient bar leaves an empty line there
        show_progress = size >= PROGRESS_BYTES and _stderr_is_a_terminal()
    store = open_for_writing(store_path)
    try:
        if show_progress:
            summary = _with_progress(store, file, fmt, limit)
        else:
            summary = import_file(store, file, fmt, max_bytes=limit)
    finally:
        store.close()
    if as_json:
        echo_json({"format": summary.format, "source_sha256": summary.source_sha256, "runs": list(summary.runs),
                   "events": summary.events, "anomalies": summary.anomalies,
                   "already_imported": summary.already_imported, "duplicates_skipped": summary.duplicates_skipped,
                   "skipped_runs": list(summary.skipped_runs)})
        return
    if summary.already_imported:
        click.echo(f"already imported: {os.path.basename(file)} ({summary.source_sha256}) is in the store as "
                   f"{len(summary.runs)} run(s); nothing written")
        for run_id in summary.runs:
            click.echo(f"  {run_id}")
        return
    click.echo(f"imported {len(summary.runs)} run(s), {summary.events} events "
               f"({summary.anomalies} anomalies) from {os.path.basename(file)} as {summary.format}")
    if summary.duplicates_skipped:
        click.echo(f"skipped {summary.duplicates_skipped} duplicate(s): repeated in the file with the same id "
                   "and content")
    click.echo(f"source {summary.source_sha256}")
    for run_id in summary.runs:
        click.echo(f"  {run_id}")
    if summary.skipped_runs:
        click.echo(f"skipped {len(summary.skipped_runs)} run(s) already in the store with the same content:")
        for run_id in summary.skipped_runs:
            click.echo(f"  {run_id}")


def _stderr_is_a_terminal() -> bool:
    import sys

    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def _with_progress(store, file: str, fmt: str, max_bytes: int):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sealbox.interop.importers import import_file

    labels = {"read": "reading", "parse": "converting runs", "build": "building events", "write": "writing"}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=max(total, 1))
            bar.update(tasks[stage], completed=done, total=max(total, 1))

        return import_file(store, file, fmt, progress=progress, max_bytes=max_bytes)
