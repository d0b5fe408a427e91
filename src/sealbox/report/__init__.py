"""Incident reports: one data model (:mod:`sealbox.report.model`) drawn as self-contained HTML or Markdown.

Usage::

    from sealbox.report import build_report, render_html, render_markdown
    report = build_report(store, run_id)
    Path("incident.html").write_text(render_html(report), encoding="utf-8")
"""

from __future__ import annotations

from sealbox.report.html import render_html
from sealbox.report.markdown import render_markdown
from sealbox.report.model import IncidentReport, build_report

__all__ = ["IncidentReport", "build_report", "render_html", "render_markdown", "FORMATS", "render"]

#: Output formats and their renderers.
FORMATS = {"html": render_html, "md": render_markdown}


def render(report: IncidentReport, fmt: str) -> str:
    """Render ``report`` as ``"html"`` or ``"md"``.

    Raises:
        ValueError: an unknown format.
    """
    try:
        return FORMATS[fmt](report)
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r}: use html or md") from None
