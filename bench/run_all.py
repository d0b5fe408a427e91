"""Run every ``bench/bench_*.py`` in turn with this interpreter and print their output.

``make bench`` calls this. New benchmark files are found by name; nothing here
needs editing when one is added. The machine is printed once, here, and each
benchmark is told not to print it again. Extra arguments (e.g. ``--quick``) are
passed to every benchmark. Exit status: non-zero if any benchmark failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import MACHINE_PRINTED_ENV, print_machine_once  # noqa: E402


def main(argv: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if not scripts:
        print(f"no bench_*.py in {HERE}")
        return 1
    print_machine_once()
    env = dict(os.environ, **{MACHINE_PRINTED_ENV: "1"})
    failed = []
    for script in scripts:
        print(f"### {script.name}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script), *argv], cwd=HERE, env=env)
        print(f"### {script.name}: exit {code}, {time.perf_counter() - started:.1f} s\n", flush=True)
        if code != 0:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
