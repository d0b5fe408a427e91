"""The OTLP part of ``sealbox export``: ``--otlp URL``, ``--otlp-content``, ``--otlp-header K=V``.

``sealbox export`` owns run selection; it calls :func:`run_otlp_export` with the
chosen run ids when ``--otlp`` is given. Nothing is sent otherwise.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import click


def otlp_options(fn: Callable) -> Callable:
    """Add ``--otlp URL``, ``--otlp-content`` and ``--otlp-header K=V`` (repeatable) to a command.

    The command receives ``otlp`` (str or None), ``otlp_content`` (bool) and
    ``otlp_headers`` (tuple of ``K=V`` strings).
    """
    fn = click.option("--otlp-header", "otlp_headers", multiple=True, metavar="K=V",
                      help="HTTP header sent with the OTLP requests (repeatable), e.g. an API key.")(fn)
    fn = click.option("--otlp-content", "otlp_content", is_flag=True,
                      help="Also send tool arguments, results, error messages and model requests and responses "
                           "(off by default).")(fn)
    return click.option("--otlp", "otlp", metavar="URL", default=None,
                        help="Send the runs as OpenTelemetry traces and logs to this OTLP/HTTP endpoint "
                             "(base URL, e.g. http://localhost:4318).")(fn)


def run_otlp_export(store_path: str, run_ids: Sequence[str], url: str, content: bool = False,
                    headers: Mapping[str, str] | Iterable[str] | None = None, *, quiet: bool = False) -> Any:
    """Open the store read-only, send ``run_ids`` to ``url``, print one summary line.

    Args:
        store_path: the store's data folder.
        run_ids: the runs to send (whole runs).
        url: the OTLP/HTTP base URL (``/v1/traces`` and ``/v1/logs`` are appended).
        content: also send tool arguments, results and error messages.
        headers: a dict, or ``K=V`` strings as given to ``--otlp-header``.
        quiet: print nothing.

    Returns:
        The :class:`sealbox.interop.otlp.OtlpExportSummary`.

    Raises:
        ConfigError, OtlpExportError (both SealboxError): shown by the CLI as one line.
    """
    from sealbox.cli.common import open_for_reading
    from sealbox.errors import ConfigError

    try:
        from sealbox.interop.otlp import export_otlp, parse_headers
    except ImportError as exc:
        raise ConfigError(f"OTLP export needs the OpenTelemetry SDK and its OTLP/HTTP exporter ({exc.name} is missing): "
                          "pip install 'sealbox[otlp]'") from exc

    hdrs = dict(headers) if isinstance(headers, Mapping) else parse_headers(headers or ())
    import logging

    # the SDK logs each failed attempt (retries, "Failed to export ... batch"); the outcome is this
    # command's own one line (OtlpExportError), so its loggers are quiet while it runs
    quiet_loggers = [logging.getLogger(name) for name in ("opentelemetry", "urllib3")]
    levels = [lg.level for lg in quiet_loggers]
    for lg in quiet_loggers:
        lg.setLevel(logging.CRITICAL + 1)
    store = open_for_reading(store_path)
    try:
        summary = export_otlp(store, list(run_ids), url, content=content, headers=hdrs or None)
    finally:
        store.close()
        for lg, level in zip(quiet_loggers, levels):
            lg.setLevel(level)
    if not quiet:
        click.echo(f"sent {summary.runs} run{'s' if summary.runs != 1 else ''} to {summary.traces_url} and "
                   f"{summary.logs_url}: {summary.spans} spans, {summary.logs} log records "
                   f"(content {'on' if content else 'off'})")
    return summary
