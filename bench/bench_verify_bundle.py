"""Offline verification of an export bundle (``sealbox verify FILE``, :func:`verify_bundle`): events/s.

A store is filled through the real API (``Recorder``, ``durability="fast"``, ``ALLOW_ALL``): runs of
recorded tool calls (``tool.call``, ``policy.decision``, ``tool.result``, the result held as a blob),
then every run is exported with :func:`export_bundle`. Timed alternately, a round at a time, so drift
in the machine affects all alike:

* ours: ``verify_bundle(FILE, trusted_vkey=KEY)``, everything it checks (container, every line's
  canonical form, every leaf hash and inclusion proof, run chains, blobs, manifest, export digest);
* baseline: read the bundle file, take its ``events.jsonl`` member, and for each line ``json.loads``
  it and SHA-256 its event's bytes (read + parse + hash the same lines, as ``bench_ledger`` does for
  ``verify_store``);
* ``verify_store`` of the store the bundle came from (the same events), for the ratio the issue asks:
  bundle verification within about 2x of the store's (ours/verify_store >= 0.5).

Then peak memory against the archive's size: for bundles of a few sizes (``--rss-events``, default
20,000 and 60,000 events, the second with a 4 KB blob in each result), the peak RSS (``VmHWM``, Linux) of a
fresh Python process that runs ``verify_bundle`` on it, a bundle whose container is canonical being read
a chunk at a time from the file (ours), against the same check with the archive held in memory (the path
a non-canonical container takes, as every bundle did before; the check after it is the same), and the
floor of a process that only imports sealbox.

Prints figures; asserts nothing about timings or memory.

Run: ``.venv/bin/python bench/bench_verify_bundle.py`` (``--events N``, ``--rss-events N,N``, ``--quick``
for a smoke run).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Sequence

from _util import print_machine_once, print_table, report, timed

from sealbox import verify_store
from sealbox.interop.bundle import export_bundle
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store

CALLS_PER_RUN = 333  # 1,001 events a run: run.started, 3 per call, run.ended


def fill_store(folder: Path, events: int, blob: int = 0):
    """A store of about ``events`` events of recorded tool calls (each result holding ``blob`` more
    bytes); returns (store, run ids)."""
    store = init_store(folder, durability="fast")
    recorder = Recorder(store, policy=ALLOW_ALL)
    run_ids = []
    for _ in range(max(1, round(events / (3 * CALLS_PER_RUN + 2)))):
        run = recorder.run(agent="bench").start()
        run_ids.append(run.run_id)
        for i in range(CALLS_PER_RUN):
            run.call_tool("db", "read_query", {"query": "SELECT id, status FROM orders WHERE customer_id = ?",
                                               "params": [i, "open"]},
                          lambda **kw: {"rows": [[kw["params"][0], "open", 12.5]],
                                        **({"text": f"{i}:" + "x" * blob} if blob else {})})
        run.end()
    return store, run_ids


def baseline(path: Path) -> int:
    """Read the bundle, then parse each line of its events.jsonl and hash its event's bytes."""
    with zipfile.ZipFile(path) as z:
        data = z.read("events.jsonl")
    sha256, loads = hashlib.sha256, json.loads
    count = 0
    for line in data.split(b"\n")[:-1]:
        loads(line)
        sha256(b"\x00" + line[9:line.rfind(b',"leaf_index":')]).digest()
        count += 1
    return count


def bench(events: int, reps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="sealbox-bench-") as tmp:
        store, run_ids = fill_store(Path(tmp) / "store", events)
        path = Path(tmp) / "case.sbx"
        export_bundle(store, run_ids, path)
        key = (Path(tmp) / "store" / "log.vkey").read_text().strip()
        verify_bundle(path, trusted_vkey=key)  # warm the page cache for all
        baseline(path)
        verify_store(store)
        ours, base, stores = [], [], []
        for _ in range(reps):
            gc.collect()
            reports: list = []
            t_ours = timed(lambda: reports.append(verify_bundle(path, trusted_vkey=key)))
            result = reports[0]
            if not result.ok:
                raise RuntimeError("verify found problems in an untouched bundle:\n" + result.summary())
            n = result.events + result.system_events
            t_base = timed(lambda: baseline(path))
            gc.collect()
            store_reports: list = []
            t_store = timed(lambda: store_reports.append(verify_store(store)))
            if not store_reports[0].ok:
                raise RuntimeError("verify found problems in an untouched store")
            ours.append(n / t_ours)
            base.append(n / t_base)
            stores.append(store_reports[0].events / t_store)
        store.close()
    note = (f"{n} events in {len(run_ids)} runs, {result.blobs} blobs; {reps} rounds; "
            f"median verify_bundle {n / sorted(ours)[len(ours) // 2]:.2f} s")
    report(f"verify bundle, {n} events vs read + parse + hash its lines", ours, base, "events/s", None, note)
    report(f"verify bundle, {n} events vs verify_store of the same events", ours, stores, "events/s", 0.5)


_CHILD = """
import sys
from sealbox.interop import bundle_verify
if sys.argv[1] == "memory":  # the archive held in memory, as a non-canonical container is (and every bundle was)
    bundle_verify._stream_container = lambda f, size, held: "held in memory"
if sys.argv[1] != "floor":
    report = bundle_verify.verify_bundle(sys.argv[2], trusted_vkey=sys.argv[3], max_bytes=1 << 40)
    assert report.ok, report.summary()
# VmHWM: this process's peak RSS since its exec (ru_maxrss would carry the forking parent's over exec)
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def _peak_rss(mode: str, path: Path, key: str) -> float:
    """Peak RSS in MB of a fresh process verifying ``path`` (``mode``: ``streamed``, ``memory`` or ``floor``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path), key], check=True, capture_output=True,
                         text=True, env=env).stdout
    return int(out.split()[-1]) / 1024  # VmHWM is in kB


def bench_rss(sizes: Sequence[tuple[int, int]]) -> None:
    """Peak RSS of verify_bundle against the archive's size, streamed and held in memory."""
    print("peak RSS of a process verifying a bundle (VmHWM, MB), against the archive's size:")
    print(f"    {'events':>8} {'blob B':>7} {'archive MB':>11} {'streamed':>9} {'in memory':>10} {'floor':>6} "
          f"{'(streamed-floor)/archive':>25} {'(in memory-floor)/archive':>26}")
    for events, blob in sizes:
        with tempfile.TemporaryDirectory(prefix="sealbox-bench-") as tmp:
            store, run_ids = fill_store(Path(tmp) / "store", events, blob)
            path = Path(tmp) / "case.sbx"
            export_bundle(store, run_ids, path)
            store.close()
            key = (Path(tmp) / "store" / "log.vkey").read_text().strip()
            mb = path.stat().st_size / 1e6
            streamed, memory, floor = (_peak_rss(m, path, key) for m in ("streamed", "memory", "floor"))
            print(f"    {events:>8} {blob:>7} {mb:>11.1f} {streamed:>9.0f} {memory:>10.0f} {floor:>6.0f} "
                  f"{(streamed - floor) / mb:>24.2f}x {(memory - floor) / mb:>25.2f}x")
            report(f"peak RSS verifying a {mb:.0f} MB bundle of {events} events (streamed vs held in memory)",
                   streamed, memory, "MB", None, f"process floor (import only) {floor:.0f} MB")
    print()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--events", type=int, default=None, help="events in the bundle (default 20,000)")
    parser.add_argument("--rss-events", default=None,
                        help="comma-separated event counts of the bundles whose peak RSS is measured "
                             "(default 20000,60000; every other one with 4 KB blobs)")
    args = parser.parse_args(argv)
    events, reps = (3000, 2) if args.quick else (20_000, 5)
    print_machine_once()
    print("== bench_verify_bundle: sealbox verify FILE (offline bundle verification) ==\n")
    bench(args.events or events, reps)
    counts = [int(n) for n in args.rss_events.split(",")] if args.rss_events else [3000] if args.quick else [20_000,
                                                                                                           60_000]
    bench_rss([(n, 4096 if i % 2 else 0) for i, n in enumerate(counts)])
    print_table("bench_verify_bundle summary")


if __name__ == "__main__":
    main()
