"""Listing approvals (``list_approvals``, what ``sealbox approvals list`` runs) as identities and
requests grow.

A SQLite store holds I identities (approvers in group ``ops``; every tenth marked shared), a run
whose principal is an identity's name for every fifth identity (``acts_as_agent``), and R requests (each its
own run, requested by its own non-ASCII principal ``user:pé<n>``); one request in four is answered by an
identity (round robin), the others stay pending. Prints the median of 3
``list_approvals(record_expiries=False)`` timings for each (I, R), and the time per request. No
target; nothing asserted.

Each store is built once into ``$TMPDIR/sealbox-bench-approvals-<VERSION>-<I>-<R>`` and reused.

Run: ``PYTHONPATH=src .venv/bin/python bench/bench_approvals_list.py [I:R ...]`` (default
``100:200 250:500 500:1000``).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import sealbox
from sealbox.approvals import ApprovalPending, answer, list_approvals
from sealbox.identities import add_identity
from sealbox.policy import Policy
from sealbox.recorder import Recorder

VERSION = 1  # of the store built: bump when build() changes

POLICY = Policy.from_text(textwrap.dedent("""
    version: 1
    rules:
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
"""))


def build(folder: Path, identities: int, requests: int):
    store = sealbox.init_store(folder / "store")
    admin = add_identity(store, "root", "admin", key_path=folder / "root.key").key_path
    keys = [add_identity(store, f"appr{i}", "approver", ["ops"], shared=i % 10 == 0, key_path=folder / f"a{i}.key",
                         admin_key=admin).key_path for i in range(identities)]
    rec = Recorder(store, policy=POLICY)
    for i in range(0, identities, 5):
        with rec.run(agent="a", principal=f"appr{i}"):
            pass
    asking = Recorder(store, policy=POLICY, approvals="suspend")
    for n in range(requests):
        try:
            with asking.run(agent="bot", principal=f"user:p\u00e9{n}") as run:
                run.call_tool("db", "write_query", {"sql": f"DELETE {n}"}, lambda **_: "ran")
        except ApprovalPending as pending:
            if n % 4 == 0:
                answer(store, pending.approval_id, "approve", "ok", keys[(n // 4) % identities],
                       client={"hostname": f"h{n % 3}", "os_user": "u"})
    return store


def main(pairs: list[tuple[int, int]]) -> None:
    for identities, requests in pairs:
        # built once and reused (the build takes minutes at 500 identities); closed as any writer closes it
        folder = Path(tempfile.gettempdir()) / f"sealbox-bench-approvals-{VERSION}-{identities}-{requests}"
        t0 = time.perf_counter()
        if not (folder / "done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder, identities, requests).close()
            (folder / "done").touch()
        built = time.perf_counter() - t0
        store = sealbox.open_store(folder / "store")
        times = []
        for _ in range(3):
            t = time.perf_counter()
            states = list_approvals(store, record_expiries=False)
            times.append(time.perf_counter() - t)
        assert len(states) == requests
        med = statistics.median(times)
        print(f"identities={identities:5d} requests={requests:5d}  list_approvals {med * 1000:9.1f} ms "
              f"({med / requests * 1e6:7.1f} µs/request; store built or found in {built:.1f} s)", flush=True)
        store.close()


if __name__ == "__main__":
    args = sys.argv[1:] or ["100:200", "250:500", "500:1000"]
    main([tuple(int(x) for x in a.split(":")) for a in args])  # type: ignore[misc]
