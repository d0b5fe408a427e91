"""16 threads and 4 processes recording full runs into one store at once (issue 3).

Every writer does complete runs through the real Recorder: run.started, a model
call requesting tool calls, the tool calls (allowed by ALLOW_ALL), one tool that
raises, a saved state, run.ended. Afterwards every run is complete with exactly
the kinds in order, run_seq is 1..n without a gap, every tool returned its own
result unchanged to its caller, no exception from Sealbox reached any agent, and
the store verifies clean.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sealbox.canonical import decode
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import CheckpointPolicy, init_store, open_store
from sealbox.verify import verify_store

THREADS, PROCESSES = 16, 4
RUNS_PER_WRITER, CALLS_PER_RUN = 2, 3


def expected_kinds(calls: int) -> list[str]:
    return (["run.started", "model.call"] + ["tool.call", "policy.decision", "tool.result"] * calls
            + ["tool.call", "policy.decision", "tool.result", "state.saved", "run.ended"])


# The same agent code runs in threads (imported here) and in processes (sent as source).
AGENT_SOURCE = r'''
def agent_runs(recorder, name, runs, calls, barrier_wait=None):
    """Full runs with tool calls; returns {run_id: [results returned to the caller]} and problems seen."""
    import sealbox
    out, problems = {}, []
    if barrier_wait is not None:
        barrier_wait()
    for r in range(runs):
        ids = [f"call_{name}_{r}_{i}" for i in range(calls)]
        response = {"object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "lookup", "arguments": '{"n": %d}' % i}}
                for i, cid in enumerate(ids)]}}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        got = []
        with recorder.run(agent=name, principal="agent:" + name, labels={"writer": name}) as run:
            mc = run.model_call({"model": "gpt-4o", "messages": [{"role": "user", "content": name * 40}]}, response)
            for tc in mc.tool_calls:
                payload = {"writer": name, "run": r, "n": tc.arguments["n"], "pad": "p" * 700}
                value = run.call_tool("kb", tc.name, tc.arguments, lambda n, payload=payload: payload, call_id=tc.id)
                if value is not payload:
                    problems.append("result not returned unchanged")
                got.append(value)
            try:
                run.call_tool("kb", "flaky_" + name, {"n": -1}, lambda n: 1 / 0)  # own breaker per writer
                problems.append("the tool's exception was swallowed")
            except ZeroDivisionError:
                pass
            run.save_state({"writer": name, "run": r, "results": got})
        out[run.run_id] = got
    return out, problems
'''

namespace: dict[str, Any] = {}
exec(compile(AGENT_SOURCE, "<agent>", "exec"), namespace)
agent_runs = namespace["agent_runs"]

PROCESS_MAIN = AGENT_SOURCE + r'''
import json, sys
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import CheckpointPolicy, open_store

path, name, runs, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=40, every_seconds=0.5))
print("ready", flush=True)
sys.stdin.readline()  # "go": every process starts together
out, problems = agent_runs(Recorder(store, policy=ALLOW_ALL), name, runs, calls)
close_error = None
try:
    store.close()
except Exception as exc:  # see test_store_close_succeeds_while_another_process_writes
    close_error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"runs": out, "problems": problems, "close_error": close_error}), flush=True)
'''


def check_run(store, run_id: str, writer: str, run_index: int, returned: list) -> None:
    events = store.read_run(run_id)
    assert [e.kind for e in events] == expected_kinds(CALLS_PER_RUN), writer
    assert [e.run_seq for e in events] == list(range(1, len(events) + 1))
    model_step = events[1].step
    tool_events = events[2:2 + 3 * CALLS_PER_RUN]
    for i in range(CALLS_PER_RUN):
        trio = tool_events[3 * i:3 * i + 3]
        assert {e.step for e in trio} == {f"{model_step}.{i + 1}"}
        assert {e.payload["call_id"] for e in trio} == {f"call_{writer}_{run_index}_{i}"}
        result = decode(store.resolve(trio[2].payload["result"]))
        assert result == {"writer": writer, "run": run_index, "n": i, "pad": "p" * 700}
        assert returned[i] == result
    flaky = events[2 + 3 * CALLS_PER_RUN:5 + 3 * CALLS_PER_RUN]
    assert flaky[2].payload["ok"] is False and flaky[2].payload["error"]["type"] == "ZeroDivisionError"
    state = decode(store.resolve(events[-2].payload["state"]))
    assert state == {"writer": writer, "run": run_index, "results": returned}
    assert events[-1].payload["status"] == "ok"


def test_16_threads_and_4_processes_record_into_one_store(tmp_path: Path):
    path = tmp_path / "store"
    init_store(path).close()
    store = open_store(path, checkpoint_policy=CheckpointPolicy(every_events=40, every_seconds=0.5))
    recorder = Recorder(store, policy=ALLOW_ALL)

    env = dict(os.environ)
    procs = []
    for p in range(PROCESSES):
        proc = subprocess.Popen(
            [sys.executable, "-c", PROCESS_MAIN, str(path), f"proc{p}", str(RUNS_PER_WRITER), str(CALLS_PER_RUN)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        procs.append(proc)
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()

    barrier = threading.Barrier(THREADS + 1)
    outcomes: dict[str, Any] = {}
    crashes: list[BaseException] = []

    def thread_main(name: str) -> None:
        try:
            outcomes[name] = agent_runs(recorder, name, RUNS_PER_WRITER, CALLS_PER_RUN, barrier.wait)
        except BaseException as exc:  # noqa: BLE001 - any exception reaching the agent is a failure
            crashes.append(exc)

    threads = [threading.Thread(target=thread_main, args=(f"thread{t}",)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for proc in procs:  # processes and threads start together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    barrier.wait()
    for t in threads:
        t.join(300)
    proc_out = {}
    for p, proc in enumerate(procs):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        proc_out[f"proc{p}"] = json.loads(stdout.strip().splitlines()[-1])

    assert not crashes, crashes
    assert not any(t.is_alive() for t in threads)
    writers = {name: (runs, problems) for name, (runs, problems) in outcomes.items()}
    writers.update({name: (o["runs"], o["problems"]) for name, o in proc_out.items()})
    assert len(writers) == THREADS + PROCESSES
    assert [o["close_error"] for o in proc_out.values()] == [None] * PROCESSES
    for name, (runs, problems) in writers.items():
        assert problems == [], (name, problems)
        assert len(runs) == RUNS_PER_WRITER
        ordered = sorted(runs.items(), key=lambda kv: store.read_run(kv[0])[0].leaf_index)
        for index, (run_id, returned) in enumerate(ordered):
            check_run(store, run_id, name, index, returned)

    per_run = len(expected_kinds(CALLS_PER_RUN))
    agent_runs_in_store = [r for r in store.runs() if r["agent"] != "sealbox"]
    assert len(agent_runs_in_store) == (THREADS + PROCESSES) * RUNS_PER_WRITER
    assert store.size() == 1 + (THREADS + PROCESSES) * RUNS_PER_WRITER * per_run
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
    store.close()
    reopened = open_store(path, readonly=True)
    try:
        report = verify_store(reopened)
        assert report.ok, [p.line() for p in report.problems]
        assert report.events == 1 + (THREADS + PROCESSES) * RUNS_PER_WRITER * per_run
    finally:
        reopened.close()


WRITER_MAIN = r'''
import sys, time
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import open_store

store = open_store(sys.argv[1], durability="fast")
recorder = Recorder(store, policy=ALLOW_ALL)
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    with recorder.run(agent="busy-writer") as run:
        for i in range(5):
            run.call_tool("kb", "lookup", {"n": i}, lambda n: n)
try:
    store.close()
except Exception:
    pass
'''


def test_store_close_succeeds_while_another_process_writes(tmp_path: Path):
    """close() runs optimize(), whose ``PRAGMA optimize`` reads the statistics and
    then upgrades to a write; when another process committed in between, SQLite
    answers SQLITE_BUSY at once (a stale WAL snapshot is not upgraded and the busy
    handler is not called). Before 020163a close() then raised StoreError "stayed
    busy for too long" in about 1 close of 3, crashing the agent at shutdown."""
    path = tmp_path / "store"
    init_store(path).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER_MAIN, str(path), "6"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        errors = []
        for _ in range(25):
            store = open_store(path)
            with Recorder(store, policy=ALLOW_ALL).run(agent="closer") as run:
                run.call_tool("kb", "lookup", {"n": 1}, lambda n: n)
            try:
                store.close()
            except Exception as exc:  # noqa: BLE001 - counted
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        writer.communicate(timeout=120)
    assert errors == []
    check = open_store(path, readonly=True)
    try:
        assert verify_store(check).ok
    finally:
        check.close()
