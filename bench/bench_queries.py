"""Query benchmarks: "every call to tool X" (issue 3, "Benchmarks").

Two stores, of about 20,000 and 1,000,000 events, hold realistic tool calls:
runs of 10 to 50 calls, each call a ``tool.call`` + ``policy.decision`` (with
its inputs, moved to a blob as the recorder does) committed together, then a
``tool.result`` (denied calls, 10 %, have none; 5 % of results are errors),
over 50 tool names on 8 servers, with 8 runs at a time whose commits
interleave (so a result is rarely next to its call). They are built
with ``store.append`` in large batches, then closed, as any writer closes a
store: nothing is hand-tuned here (``close`` runs ``PRAGMA optimize``, which is
the product's own behaviour; LESSONS.md, MLflow). Each store is built once into
``$TMPDIR/sealbox-bench-queries-<VERSION>/<size>`` and reused; the build time
is printed when it is built.

Figures (medians of repeated runs, warm cache):

* ``store.query_calls(tool=X)`` through the Python API, against the raw SQL
  ``SELECT ... FROM events WHERE tool = ? AND kind = 'tool.call'`` on the same
  file (plain ``sqlite3``, rows fetched). Targets from the issue: <= 10 ms
  (20k events) and <= 100 ms (1M events), absolute.
* the wall time of ``sealbox calls --tool X --json`` (a subprocess), against a
  subprocess running the same raw SQL and printing JSON.
* a lookup by approval id alone (``get_approval(store, ID)``, what ``sealbox
  approvals show / approve / deny ID`` do; 2 % of allowed calls ask for an approval,
  so the 1M store holds about 6,000 requests), against the SQL that lookup ran before the
  ``events_approval`` index (migration 0007: every ``approval.requested`` row read
  and its bytes parsed) on the same file; and the wall time of ``sealbox approvals
  show ID`` against a subprocess running that SQL. No target in the issue.

Run: ``.venv/bin/python bench/bench_queries.py`` (``--quick``: the 20k store only;
``--rebuild``: build the stores again).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import median, print_machine_once, print_table, report, timed

from sealbox import CheckpointPolicy, EventDraft, init_store, open_store
from sealbox.store.base import new_run_id

#: Bump when the generated data changes, so that a stale cache is not reused.
VERSION = "q3"


def _cache_key() -> str:
    """VERSION plus a digest of the schema's migrations: a new migration means new stores."""
    from sealbox.store.migrate import load_migrations

    sums = ",".join(f"{m.version}:{m.checksum}" for m in load_migrations("sqlite"))
    return f"{VERSION}-{hashlib.sha256(sums.encode()).hexdigest()[:10]}"


CACHE = Path(tempfile.gettempdir()) / f"sealbox-bench-queries-{_cache_key()}"
SIZES = {"20k": 20_000, "1M": 1_000_000}
TARGET_MS = {"20k": 10.0, "1M": 100.0}
TOOL_X = ("db", "read_query")
SEALBOX = str(Path(sys.executable).parent / "sealbox")
POLICY_FP = "sha256:" + "ab" * 32

SERVERS = {
    "db": ["read_query", "write_query", "list_tables", "describe_table", "explain", "vacuum", "export_csv"],
    "fs": ["read_file", "write_file", "list_dir", "stat", "move", "delete_file", "search_files"],
    "github": ["get_issue", "create_issue", "comment", "list_prs", "merge_pr", "get_file", "search_code"],
    "slack": ["post_message", "list_channels", "read_thread", "add_reaction", "upload_file", "search"],
    "jira": ["get_ticket", "create_ticket", "transition", "assign", "add_comment", "search_jql"],
    "http": ["fetch", "post_json", "head"],
    "search": ["web_search", "news_search", "image_search", "scholar"],
    "email": ["send_email", "list_inbox", "read_email", "draft_reply", "archive", "label", "forward", "unsubscribe",
              "search_mail", "get_attachment"],
}
TOOLS = [(server, tool) for server, tools in SERVERS.items() for tool in tools]
assert len(TOOLS) == 50 and TOOL_X in TOOLS


# ---------------------------------------------------------------- building


def _arguments(rng: random.Random, tool: str, i: int) -> dict:
    if tool == "read_query":
        return {"query": f"SELECT id, status, total FROM orders WHERE customer_id = {i % 9973} LIMIT 20",
                "database": "shop"}
    return {"id": i, "text": f"{tool} #{i} " + "x" * rng.randrange(10, 120), "flags": ["a", "b"][: i % 3]}


def _call_units(rng: random.Random, run_id: str, principal: str, agent: str, step: int, i: int) -> list[list[EventDraft]]:
    """One tool call as the recorder commits it: [tool.call, policy.decision] in one
    transaction, then (if allowed) [tool.result] in the next."""
    server, tool = rng.choice(TOOLS)
    call_id = f"call_{i:09d}"
    args = _arguments(rng, tool, i)
    allowed = rng.random() < 0.9
    asks = allowed and rng.random() < 0.02  # require_approval: a pending request, no result
    first = [
        EventDraft("tool.call", {"call_id": call_id, "server": server, "tool": tool, "exposed": f"{server}__{tool}",
                                 "arguments": args, "grant": f"implicit:{principal}"},
                   run_id=run_id, principal=principal, step=str(step)),
        EventDraft("policy.decision", {
            "call_id": call_id, "server": server, "tool": tool, "effect": "allow" if allowed else "deny",
            "reason_code": "policy_allow" if allowed else "policy_deny", "rule": "reads" if allowed else "no-writes",
            "reason": "matched", "policy_fingerprint": POLICY_FP, "eval_us": rng.randrange(5, 80),
            "approval": None, "limit": None, "re_evaluable": True,
            "inputs": {"server": server, "tool": tool, "arguments": args,
                       "principal": {"id": principal, "role": "agent", "groups": ["bots"], "attributes": {}},
                       "agent": {"name": agent, "attributes": {}},
                       "run": {"id": run_id, "labels": {"env": "prod"}, "started_at": "2026-11-29T12:00:00.000000Z",
                               "elapsed_s": step * 0.5},
                       "usage": {}, "now": "2026-11-29T12:00:01Z", "redacted": False},
        }, run_id=run_id, principal=principal, step=str(step)),
    ]
    if asks:
        decision = first[1].payload
        decision.update(effect="require_approval", reason_code="policy_require_approval", rule="writes-need-ops")
        first.append(EventDraft("approval.requested", {
            "approval_id": f"apr_{rng.getrandbits(128):032x}", "call_id": call_id, "server": server, "tool": tool,
            "arguments": args, "binding": "sha256:" + hashlib.sha256(call_id.encode()).hexdigest(),
            "rule": "writes-need-ops", "ask": {"groups": ["ops"], "identities": []}, "quorum": 1,
            "expires_at": "2026-11-29T13:00:00.000000Z", "requested_by": principal, "policy_fingerprint": POLICY_FP,
        }, run_id=run_id, principal=principal, step=str(step)))
        return [first]
    if not allowed:
        return [first]
    ok = rng.random() < 0.95
    result = {"call_id": call_id, "ok": ok, "duration_us": rng.randrange(200, 90_000)}
    if ok:
        result["result"] = {"rows": [[i, "open", 12.5]], "count": 1}
    else:
        result["error"] = {"type": "TimeoutError", "message": "upstream timed out", "traceback": "..."}
    return [first, [EventDraft("tool.result", result, run_id=run_id, principal=principal, step=str(step))]]


def _run_units(rng: random.Random, counter: list[int]):
    """The commits of one run, in order: started, each call's two commits, ended."""
    run_id, agent = new_run_id(), rng.choice(["support-bot", "billing-bot", "ops-bot", "research-bot"])
    principal = f"agent:{agent}"
    yield [EventDraft("run.started", {"agent": agent, "snapshot": None, "parent_run_id": None, "labels": {"env": "prod"},
                                      "policy": {"fingerprint": POLICY_FP, "name": "bench"}},
                      run_id=run_id, principal=principal, step="1")]
    for step in range(2, 2 + rng.randrange(10, 50)):
        counter[0] += 1
        yield from _call_units(rng, run_id, principal, agent, step, counter[0])
    yield [EventDraft("run.ended", {"status": "ok"}, run_id=run_id, principal=principal)]


def _drafts(total: int, seed: int = 7, concurrent: int = 8):
    """Batches of drafts, about ``total`` events in all, from ``concurrent`` runs at a
    time whose commits interleave (as agents sharing a store do), so a call's result
    is rarely the next event after its decision."""
    rng = random.Random(seed)
    counter, produced, batch = [0], 0, []
    active = [_run_units(rng, counter) for _ in range(concurrent)]
    while active:
        i = rng.randrange(len(active))
        unit = next(active[i], None)
        if unit is None:
            active[i] = _run_units(rng, counter)
            if produced >= total:
                active.pop(i)  # let the open runs finish
            continue
        batch += unit
        produced += len(unit)
        if len(batch) >= 20_000:
            yield batch
            batch = []
    if batch:
        yield batch


def build(name: str, rebuild: bool) -> Path:
    """The store for ``name``, built once into the cache folder.

    Concurrent benchmark runs (``make bench`` while another is going) take a
    lock, and a store is built in a scratch folder renamed into place when
    complete, so a half-built store is never measured nor clobbered.
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    folder = CACHE / name
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "complete"
        if done.exists() and not rebuild:
            print(f"store {name}: reusing {folder} ({done.read_text().strip()})")
            return folder
        scratch = CACHE / f"{name}.building-{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        started = time.perf_counter()
        store = init_store(scratch, durability="fast",
                           checkpoint_policy=CheckpointPolicy(every_events=10**9, every_seconds=10**9))
        for batch in _drafts(SIZES[name]):
            store.append(batch)
        size = store.size()
        store.close()  # signs the final checkpoint and runs PRAGMA optimize, as every writer's close does
        elapsed = time.perf_counter() - started
        note = f"{size:,} events, built in {elapsed:.1f} s ({size / elapsed:,.0f} events/s)"
        (scratch / "complete").write_text(note + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(scratch, folder)
        print(f"store {name}: built {folder}: {note}")
        return folder


# ---------------------------------------------------------------- measuring

RAW_SQL = ("SELECT leaf_index, ts, run_id, call_id, raw FROM events WHERE tool = ? AND kind = 'tool.call'"
           " ORDER BY leaf_index")
RAW_SCRIPT = (
    "import json, sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1])\n"
    f"rows = c.execute({RAW_SQL!r}, (sys.argv[2],)).fetchall()\n"
    "print(json.dumps([[i, ts, r, cid, raw.decode()] for i, ts, r, cid, raw in rows]))\n"
)


def describe(folder: Path) -> None:
    conn = sqlite3.connect(folder / "sealbox.db")
    stats = conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'events'").fetchone()[0]
    from sealbox.store.sqlite_queries import _CALLS_SQL

    sql = _CALLS_SQL.format(result="NULL", altered="", where="c.kind = 'tool.call' AND c.tool = ?")
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, (TOOL_X[1],))]
    conn.close()
    print(f"    planner statistics for events: {stats} index rows in sqlite_stat1 (written by close())")
    print(f"    plan: {plan[0]}")


def measure(name: str, folder: Path, repeat: int) -> None:
    print(f"\n== {name} store ==")
    describe(folder)
    store = open_store(folder, readonly=True)
    rows = store.query_calls(tool=TOOL_X[1])
    conn = sqlite3.connect((folder / "sealbox.db").resolve().as_uri() + "?mode=ro", uri=True)
    raw_rows = conn.execute(RAW_SQL, (TOOL_X[1],)).fetchall()
    print(f"    {len(rows):,} calls to {TOOL_X[1]} ({len(raw_rows):,} by the raw SQL); store holds {store.size():,} events")
    ours, base = [], []
    for _ in range(repeat):  # alternate, so drift affects both alike
        ours.append(timed(lambda: store.query_calls(tool=TOOL_X[1])) * 1000)
        base.append(timed(lambda: conn.execute(RAW_SQL, (TOOL_X[1],)).fetchall()) * 1000)
    target = TARGET_MS[name]
    verdict = "meets" if median(ours) <= target else "MISSES"
    report(f"{name}: query_calls(tool=X), API", ours, base, "ms", None,
           note=f"issue target: <= {target:g} ms absolute -> {verdict} ({median(ours):.1f} ms); "
                f"baseline = raw SQL on the same file, rows fetched")
    store.close()
    conn.close()
    cli, raw = [], []
    db = str(folder / "sealbox.db")
    for _ in range(max(3, repeat // 4)):
        cli.append(timed(lambda: _run([SEALBOX, "calls", "--tool", TOOL_X[1], "--json", "-s", str(folder)])) * 1000)
        raw.append(timed(lambda: _run([sys.executable, "-c", RAW_SCRIPT, db, TOOL_X[1]])) * 1000)
    out = subprocess.run([SEALBOX, "calls", "--tool", TOOL_X[1], "--json", "-s", str(folder)],
                         capture_output=True, text=True, check=True).stdout
    print(f"    `sealbox calls --tool {TOOL_X[1]} --json` printed {len(json.loads(out)):,} rows, {len(out):,} bytes")
    report(f"{name}: `sealbox calls --tool X --json`, wall", cli, raw, "ms", None,
           note="baseline = `python -c` running the raw SQL and printing JSON (interpreter start included in both)")


#: A lookup by approval id as it was before the events_approval index: every request read, its bytes parsed.
SCAN_SQL = ("SELECT leaf_index, raw FROM events WHERE kind IN ('approval.requested')"
            " AND CAST(raw AS TEXT) ->> '$.payload.approval_id' = ? ORDER BY leaf_index")
SCAN_SCRIPT = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1])\n"
    f"print(c.execute({SCAN_SQL!r}, (sys.argv[2],)).fetchall()[0][0])\n"
)


def measure_approval(name: str, folder: Path, repeat: int) -> None:
    """get_approval(store, ID) (by id alone) against the full scan it ran before the index."""
    from sealbox.approvals import get_approval

    conn = sqlite3.connect((folder / "sealbox.db").resolve().as_uri() + "?mode=ro", uri=True)
    ids = [r[0] for r in conn.execute("SELECT CAST(raw AS TEXT) ->> '$.payload.approval_id' FROM events"
                                      " WHERE kind = 'approval.requested' ORDER BY leaf_index")]
    if not ids:
        print(f"    {name}: no approval requests in this store (built by an older bench): --rebuild")
        conn.close()
        return
    aid = ids[len(ids) // 2]
    store = open_store(folder, readonly=True)
    state = get_approval(store, aid)
    print(f"    {len(ids):,} approval requests; looking up {aid} (status {state.status}, run {state.run_id})")
    ours, base = [], []
    for _ in range(repeat):
        ours.append(timed(lambda: get_approval(store, aid)) * 1000)
        base.append(timed(lambda: conn.execute(SCAN_SQL, (aid,)).fetchall()) * 1000)
    report(f"{name}: get_approval(ID) by id alone, API", ours, base, "ms", None,
           note="baseline = the SQL this lookup ran before events_approval (every request read), raw, same file")
    store.close()
    conn.close()
    cli, raw = [], []
    db = str(folder / "sealbox.db")
    for _ in range(max(3, repeat // 4)):
        cli.append(timed(lambda: _run([SEALBOX, "approvals", "show", aid, "-s", str(folder)])) * 1000)
        raw.append(timed(lambda: _run([sys.executable, "-c", SCAN_SCRIPT, db, aid])) * 1000)
    report(f"{name}: `sealbox approvals show ID`, wall", cli, raw, "ms", None,
           note="baseline = `python -c` running that earlier SQL (interpreter start included in both)")


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the 20k store, fewer repetitions")
    parser.add_argument("--rebuild", action="store_true", help="build the cached stores again")
    parser.add_argument("--build-only", action="store_true", help="build the stores and stop")
    args = parser.parse_args(argv)
    print_machine_once()
    names = ["20k"] if args.quick else ["20k", "1M"]
    folders = {name: build(name, args.rebuild) for name in names}
    if args.build_only:
        return 0
    for name in names:
        measure(name, folders[name], repeat=10 if args.quick else (40 if name == "20k" else 20))
        measure_approval(name, folders[name], repeat=10 if args.quick else 20)
    print_table("Query benchmarks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
