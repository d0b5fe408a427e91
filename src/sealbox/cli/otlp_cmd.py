"""The OTLP part of ``sealbox export``: ``--otlp URL``, ``--otlp-content``, ``--otlp-header K=V``.

``sealbox export`` owns run selection; it calls :func:`run_otlp_export` with the
chosen run ids when ``--otlp`` is given. Nothing is sent otherwise.
"""

from __future__ import annotations

import logging
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
    # command's own one line (OtlpExportError), so its loggers are quiet while it runs: the SDK's
    # records are kept (not shown) so that the error line can say why (connection refused, HTTP 401)
    from sealbox.interop.otlp import OtlpExportError

    otel, urllib = logging.getLogger("opentelemetry"), logging.getLogger("urllib3")
    saved = (otel.level, otel.propagate, urllib.level)
    kept = _Kept()
    otel.setLevel(logging.WARNING)
    otel.propagate = False
    otel.addHandler(kept)
    urllib.setLevel(logging.CRITICAL + 1)
    store = open_for_reading(store_path)
    try:
        summary = export_otlp(store, list(run_ids), url, content=content, headers=hdrs or None)
    except OtlpExportError as exc:
        cause = kept.cause()
        if cause:
            raise OtlpExportError(f"{exc}: {cause}") from exc
        raise
    finally:
        store.close()
        otel.removeHandler(kept)
        otel.setLevel(saved[0])
        otel.propagate = saved[1]
        urllib.setLevel(saved[2])
    if not quiet:
        click.echo(f"sent {summary.runs} run{'s' if summary.runs != 1 else ''} to {summary.traces_url} and "
                   f"{summary.logs_url}: {summary.spans} spans, {summary.logs} log records "
                   f"(content {'on' if content else 'off'})")
    return summary


class _Kept(logging.Handler):
    """The OpenTelemetry exporter's warnings during an export, for the cause of a failure."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a record whose message does not format: no cause from it
            pass

    def cause(self) -> str | None:
        """The first failure's cause in a few words: ``[Errno 111] Connection refused``, or the
        exporter's own message (an HTTP status and the collector's reason), one line, cut at 200."""
        import re

        for text in self.messages:
            errno = re.search(r"\[Errno -?\d+\] [^\"')]+", text)
            if errno:
                return errno.group(0).strip()
            if "due to timeout, max retries or shutdown" in text:  # says nothing of the cause
                continue
            line = " ".join(text.split())
            return line if len(line) <= 200 else line[:199] + "…"
        return None
