"""Cost of redaction's text scrubbing and quick check (prints figures, asserts nothing).

Issue 3 point 6 (values redacted before anything is hashed) and "Do not slow the recorder's hot path".

Cases, each the minimum of 7 process-time rounds (a shared machine's noise only adds time):

* ``Redactor._scrub`` of a 153-byte log line and of a 1 MB text of words, and ``Redactor._clean_text`` (the quick
  check on a payload's canonical bytes) of the same and of an 8.6 KB model call holding ``max_tokens``: the default
  patterns, against the same store with 30 custom patterns added (92 needles: the C scan looks for up to 128 in one
  pass; before, two passes of 64, and before those, past 64 needles, the regex searches decided every text). Without the C extension
  (``SEALBOX_PURE_PYTHON=1``) the substring tests and regex searches run instead.

Run: ``.venv/bin/python bench/bench_redaction.py``
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import print_machine_once, print_table, report  # noqa: E402

from sealbox.canonical import canonical_bytes_encoded  # noqa: E402
from sealbox.redaction import DEFAULT_PATTERNS, ContentPolicy, Redactor  # noqa: E402

CUSTOM = (tuple(rf"\bACME{i:02d}-[0-9]{{6}}" for i in range(20))
          + tuple(rf"corp{i:02d}_id=[a-z]{{8}}" for i in range(10)))
LINE = ("2026-12-05T09:25:47Z INFO worker-3 GET /api/v1/orders?page=2&limit=50 200 12ms user=alice req=7f3a9c "
        "host=app-7 region=eu-west-1 ok" + " " * 200)[:153]
WORDS = "the quick brown fox jumps over lazy dog order item price status shipped user id value result".split()


def best_us(fn: Callable[[], object], loops: int) -> float:
    """Minimum over 7 rounds of the process time per call, in µs."""
    rounds = []
    for _ in range(7):
        start = time.process_time()
        for _ in range(loops):
            fn()
        rounds.append((time.process_time() - start) / loops * 1e6)
    return min(rounds)


def main() -> None:
    print_machine_once()
    rng = random.Random(1)
    big = " ".join(rng.choice(WORDS) for _ in range(200_000))[:1_000_000]
    model_call = {"model": "m", "max_tokens": 100,
                  "messages": [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(1500))}],
                  "usage": {"input_tokens": 5, "output_tokens": 7}}
    default = Redactor(b"k" * 32, ContentPolicy())
    custom = Redactor(b"k" * 32, ContentPolicy(patterns=DEFAULT_PATTERNS + CUSTOM))
    print(f"needles: default {len(getattr(default, '_needles', ()))}, with 30 custom patterns "
          f"{len(getattr(custom, '_needles', ()))}; C scan: {bool(default._scan)}")
    line_data = canonical_bytes_encoded({"text": LINE})
    big_data = canonical_bytes_encoded({"text": big})
    call_data = canonical_bytes_encoded(model_call)
    cases = [
        ("_scrub, 153-byte log line", lambda r: r._scrub(LINE, [False]), 2000),
        ("_scrub, 1 MB text", lambda r: r._scrub(big, [False]), 5),
        ("_clean_text, 153-byte log line", lambda r: r._clean_text(line_data), 2000),
        ("_clean_text, 1 MB text", lambda r: r._clean_text(big_data), 5),
        ("_clean_text, 8.6 KB model call (max_tokens)", lambda r: r._clean_text(call_data), 200),
    ]
    for name, fn, loops in cases:
        ours = best_us(lambda: fn(custom), loops)
        base = best_us(lambda: fn(default), loops)
        report(f"{name}: defaults + 30 custom patterns vs defaults", ours, base, "µs", None)
    print_table("Redaction benchmarks")


if __name__ == "__main__":
    main()
