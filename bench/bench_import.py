"""Import benchmark: a trace whose spans form one parent chain, against a flat trace of the same size.

``sealbox import`` of an OTLP/JSON trace used to be O(n * depth) in time and memory when the
spans' parents formed a deep chain: ``spans.emit()`` built the full ancestor list of every
tool and model span (10,000 chained tool spans: 8.8 s and 554 MB against 2.1 s flat; 50,000:
5 min 41 s). It now memoises the nearest relevant ancestor along each chain.

Both files hold N ``execute_tool`` spans with call ids, one trace, the same bytes except for
``parentSpanId`` (span i+1's parent is span i, or none). Figures (medians of repeated runs):

* converting the file (``parse_file`` + every run's drafts: read, JSON, span graph, events),
  chain against flat;
* the whole ``import_file`` into a fresh store (one transaction), chain against flat;
* converting N/2 model spans that each request a ``t`` call without an id, followed by N/2 ``t``
  tool spans without ids (each linked by name to the latest model call with a free request:
  this scanned every earlier model call for every tool span, 37 s for 2,000 of each), against
  the same file with call ids (linked by id, a dict look-up).

The ratio is chain / flat (linked by name / by id) time; the target (near-linear: a chain costs what a flat file of the
same size does) is <= 1.5x. The peak Python memory (tracemalloc) of one conversion of each is
printed as a note.

Run: ``.venv/bin/python bench/bench_import.py`` (``--quick``: fewer spans and repeats).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import tracemalloc
from pathlib import Path

from _util import print_machine_once, print_table, report, timed

from sealbox import init_store
from sealbox.interop.importers import import_file, parse_file

TRACE = "ab" * 16


def write_trace(path: Path, n: int, chain: bool) -> None:
    """N tool spans in one trace; with ``chain`` each span's parent is the one before."""
    spans = []
    for i in range(n):
        parent = ("%016x" % i if i else "") if chain else ""
        spans.append({"traceId": TRACE, "spanId": "%016x" % (i + 1), "parentSpanId": parent,
                      "name": "execute_tool t", "startTimeUnixNano": str(1700000000000000000 + i * 1000),
                      "endTimeUnixNano": str(1700000000000000000 + i * 1000 + 500),
                      "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "t"}},
                                     {"key": "gen_ai.tool.call.id", "value": {"stringValue": "c%d" % i}}]})
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}), encoding="utf-8")


def write_linked(path: Path, n: int, ids: bool = False) -> None:
    """N/2 model spans, each requesting one call of ``t``, then N/2 ``t`` tool spans (other arguments).
    Without ``ids`` each tool span is linked by name to the latest model call with a free request;
    with them (the same bytes plus one id per request and per tool span), by its call id."""
    spans = []
    half = n // 2
    for i in range(half):
        call = {"type": "function", "function": {"name": "t", "arguments": "{}"}}
        if ids:
            call["id"] = "c%d" % (half - 1 - i)  # the first tool span answers the latest model call, as by name
        out = json.dumps([{"role": "assistant", "tool_calls": [call]}])
        spans.append({"traceId": TRACE, "spanId": "%016x" % (i + 1), "name": "chat m",
                      "startTimeUnixNano": str(1700000000000000000 + i * 1000),
                      "endTimeUnixNano": str(1700000000000000000 + i * 1000 + 500),
                      "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                     {"key": "gen_ai.output.messages", "value": {"stringValue": out}}]})
    for i in range(n // 2, n):
        spans.append({"traceId": TRACE, "spanId": "%016x" % (i + 1), "name": "execute_tool t",
                      "startTimeUnixNano": str(1700000000000000000 + i * 1000),
                      "endTimeUnixNano": str(1700000000000000000 + i * 1000 + 500),
                      "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "t"}},
                                     {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"i": %d}' % i}}]
                      + ([{"key": "gen_ai.tool.call.id", "value": {"stringValue": "c%d" % (i - half)}}] if ids else [])})
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}), encoding="utf-8")


def convert(path: Path) -> int:
    _, _, runs = parse_file(path)
    return sum(len(r.drafts()) for r in runs)


def import_fresh(path: Path, work: Path) -> int:
    store_dir = work / "store"
    shutil.rmtree(store_dir, ignore_errors=True)
    store = init_store(store_dir)
    try:
        return import_file(store, path).events
    finally:
        store.close()


def peak_mb(path: Path) -> float:
    tracemalloc.start()
    try:
        convert(path)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5,000 spans, fewer repeats")
    args = ap.parse_args(argv)
    print_machine_once()
    n, repeats = (5_000, 3) if args.quick else (20_000, 5)
    work = Path(tempfile.mkdtemp(prefix="sealbox-bench-import-"))
    try:
        chain, flat = work / "chain.json", work / "flat.json"
        write_trace(chain, n, chain=True)
        write_trace(flat, n, chain=False)
        assert convert(chain) == convert(flat), "both files give the same number of events"
        linked, by_id = work / "linked.json", work / "linked-ids.json"
        write_linked(linked, n)
        write_linked(by_id, n, ids=True)
        conv_c, conv_f, conv_l, conv_i, imp_c, imp_f = [], [], [], [], [], []
        for _ in range(repeats):  # interleaved, so that a slow moment of the machine hits all
            conv_c.append(timed(lambda: convert(chain)))
            conv_f.append(timed(lambda: convert(flat)))
            conv_l.append(timed(lambda: convert(linked)))
            conv_i.append(timed(lambda: convert(by_id)))
        for _ in range(max(2, repeats - 2)):
            imp_c.append(timed(lambda: import_fresh(chain, work)))
            imp_f.append(timed(lambda: import_fresh(flat, work)))
        size = chain.stat().st_size / 1e6
        report(f"convert {n:,} tool spans, parent chain vs flat ({size:.1f} MB)", conv_c, conv_f, "s", 1.5,
               note=f"peak Python memory of one conversion: chain {peak_mb(chain):.0f} MB, flat {peak_mb(flat):.0f} MB")
        report(f"convert {n // 2:,} model + {n // 2:,} tool spans, linked by name vs by call id", conv_l, conv_i,
               "s", 1.5)
        report(f"import_file {n:,} tool spans into a fresh store, chain vs flat", imp_c, imp_f, "s", 1.5)
        print_table("Import")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
