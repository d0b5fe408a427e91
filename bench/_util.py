"""Timing helpers shared by the benchmarks in ``bench/`` (STYLE.md habit 11).

Benchmarks print figures; nothing here asserts a time. Each figure is the
median of repeated measurements, printed next to a baseline measured in the
same run on the same bytes, the ratio between the two and the target from the
issue. :func:`report` records every line so :func:`print_table` can repeat them
as one compact table at the end.

Ratios are always *ours / baseline* of the quantity measured, labelled as such:

* throughput (a unit ending in ``/s``, higher is better): ``ours/baseline
  throughput``; a target reads ``>= 0.4x``;
* time (``µs``, ``ms``, ``s``, lower is better): ``ours/baseline time``; a
  target reads ``<= 1.5x``.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = [
    "median",
    "p99",
    "p1",
    "timed",
    "report",
    "print_table",
    "machine_info",
    "print_machine_once",
    "MACHINE_PRINTED_ENV",
]

#: Set by ``run_all.py`` after it printed the machine once, so each bench skips it.
MACHINE_PRINTED_ENV = "SEALBOX_BENCH_MACHINE_PRINTED"


def median(samples: Sequence[float]) -> float:
    """Median of the samples."""
    return statistics.median(samples)


def p99(samples: Sequence[float]) -> float:
    """99th percentile (nearest rank) of the samples."""
    ordered = sorted(samples)
    rank = max(1, -(-99 * len(ordered) // 100))  # ceil(0.99 n)
    return ordered[rank - 1]


def p1(samples: Sequence[float]) -> float:
    """1st percentile (nearest rank): the slow tail of a throughput."""
    ordered = sorted(samples)
    return ordered[max(1, -(-len(ordered) // 100)) - 1]


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes (``perf_counter``)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _is_throughput(unit: str) -> bool:
    return unit.endswith("/s")


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass(frozen=True)
class Row:
    """One reported figure."""

    name: str
    ours: float
    baseline: float
    unit: str
    ratio: float
    target: float | None

    @property
    def sign(self) -> str:
        return ">=" if _is_throughput(self.unit) else "<="

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "no target"
        met = self.ratio >= self.target if _is_throughput(self.unit) else self.ratio <= self.target
        return "meets target" if met else "MISSES target"


_ROWS: list[Row] = []


def report(name: str, ours: float | Sequence[float], baseline: float | Sequence[float], unit: str,
           target: float | None, note: str = "") -> Row:
    """Print one figure: medians, the ratio ours/baseline and the issue's target.

    Args:
        name: what was measured.
        ours, baseline: one value or repeated samples, already in ``unit``.
        unit: e.g. ``"events/s"`` (throughput, higher is better) or ``"µs"`` (time, lower is better).
        target: the issue's bound on the ratio (``>=`` for throughput, ``<=`` for time), or None.
        note: an extra line printed under the figure.
    """
    ours_s = list(ours) if isinstance(ours, Sequence) else [float(ours)]
    base_s = list(baseline) if isinstance(baseline, Sequence) else [float(baseline)]
    o, b = median(ours_s), median(base_s)
    row = Row(name, o, b, unit, o / b, target)
    _ROWS.append(row)
    kind = "throughput" if _is_throughput(unit) else "time"
    spread = ""
    if len(ours_s) > 1:
        lo_hi = "p1" if _is_throughput(unit) else "p99"
        pick = p1 if _is_throughput(unit) else p99
        spread = f"  [{lo_hi}: ours {_fmt(pick(ours_s))}, baseline {_fmt(pick(base_s))}; n={len(ours_s)}]"
    target_txt = f"target {row.sign} {row.target}x -> {row.verdict}" if target is not None else "no target in the issue"
    print(f"{name}")
    print(f"    median: ours {_fmt(o)} {unit}, baseline {_fmt(b)} {unit}{spread}")
    print(f"    ours/baseline {kind} = {row.ratio:.3f}x   ({target_txt})")
    if note:
        print(f"    {note}")
    sys.stdout.flush()
    return row


def print_table(title: str = "Summary") -> None:
    """Print every figure reported so far as one compact table."""
    if not _ROWS:
        return
    width = max(len(r.name) for r in _ROWS)
    print(f"\n{title} (ratio = ours/baseline of the quantity in 'unit')")
    head = f"{'benchmark':<{width}}  {'ours':>12}  {'baseline':>12}  {'unit':<8}  {'ratio':>7}  {'target':>7}  verdict"
    print(head)
    print("-" * len(head))
    for r in _ROWS:
        target = f"{r.sign}{r.target}" if r.target is not None else "-"
        print(f"{r.name:<{width}}  {_fmt(r.ours):>12}  {_fmt(r.baseline):>12}  {r.unit:<8}  "
              f"{r.ratio:>6.3f}x  {target:>7}  {r.verdict}")
    sys.stdout.flush()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _filesystem(path: str) -> str:
    """Type and device of the mount holding ``path`` (from /proc/mounts)."""
    path = os.path.realpath(path)
    best = ("", "unknown", "unknown")
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                dev, mnt, fstype = line.split()[:3]
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[0]):
                    best = (mnt, fstype, dev)
    except OSError:
        pass
    return f"{best[1]} ({best[2]} on {best[0] or '?'})"


def machine_info() -> list[str]:
    """Lines describing the machine: CPU, cores, Python, SQLite, temp filesystem."""
    tmp = tempfile.gettempdir()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"CPU:        {_cpu_model()}",
        f"cores:      {os.cpu_count()} logical ({usable} usable by this process)",
        f"Python:     {platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        f"SQLite:     {sqlite3.sqlite_version} (Python sqlite3 module)",
        f"OS:         {platform.system()} {platform.release()}",
        f"temp dir:   {tmp} on {_filesystem(tmp)}",
        f"load avg:   {_loadavg()} (1/5/15 min, at start; other processes share the machine)",
    ]


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def print_machine_once() -> None:
    """Print :func:`machine_info` unless ``run_all.py`` already did."""
    if os.environ.get(MACHINE_PRINTED_ENV):
        return
    print("Machine")
    for line in machine_info():
        print("  " + line)
    print()
    sys.stdout.flush()
