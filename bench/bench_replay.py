"""Replay of a 10,000-event run with everything served from the record (prints figures, asserts nothing).

Issue 7 "Benchmark": target <= 2 s, with the ratio to the time taken just to read the
same events from the store.

The run: a plain-Python agent loop, 1,000 model turns in the chat-completions format,
each requesting 3 tool calls (1 ``model.call`` + 3 x (``tool.call``, ``policy.decision``,
``tool.result``) = 10 events per turn), plus ``run.started`` and ``run.ended``:
10,002 events. It is recorded once (``durability="fast"``, not timed).

Measured (median of 3):

* **replay**: ``Replayer.replay`` of the run — reading and keying the record, serving
  every model answer and tool result, comparing every step, and recording the replay as
  a new run of 10,002 events — with the store opened ``durability="full"`` (every commit
  fsync'd, the default) and ``"fast"``;
* **read** (baseline): ``store.read_run`` of the recorded run plus resolving every
  event's content (``store.resolve``), i.e. just reading the same events.

Run: ``.venv/bin/python bench/bench_replay.py``
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer
from sealbox.store import init_store, open_store

TURNS = 1000
MODEL = "gpt-4o-2024-08-06"


def response(turn: int) -> dict[str, Any]:
    if turn == TURNS:
        return {"object": "chat.completion", "model": MODEL, "usage": {"prompt_tokens": 5, "completion_tokens": 1},
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}}]}
    calls = [{"id": f"call_{turn}_{i}", "type": "function",
              "function": {"name": "lookup", "arguments": f'{{"key": "k{turn}.{i}"}}'}} for i in range(3)]
    return {"object": "chat.completion", "model": MODEL, "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}


def agent(run: Any) -> None:
    """1,000 turns of: ask the model (one small request), run the 3 tool calls it asks for."""
    import json

    scripted = iter(range(1, TURNS + 1))
    for turn in range(1, TURNS + 1):
        reply = run.complete({"model": MODEL, "turn": turn}, lambda _req: response(next(scripted)))
        for tc in reply["choices"][0]["message"].get("tool_calls") or []:
            args = json.loads(tc["function"]["arguments"])
            run.call_tool("kv", "lookup", args, lambda key: f"value of {key}", call_id=tc["id"])


def record(path: Path) -> str:
    store = init_store(path, durability="fast")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bench") as run:
        agent(run)
    n = len(store.read_run(run.run_id))
    store.close()
    print(f"recorded run: {n} events, {TURNS} model calls, {3 * (TURNS - 1)} tool calls")
    return run.run_id


def time_read(path: Path, run_id: str) -> float:
    store = open_store(path, readonly=True)
    started = time.perf_counter()
    for event in store.read_run(run_id):
        store.resolve(event.payload)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def time_replay(path: Path, run_id: str, durability: str) -> float:
    store = open_store(path, durability=durability)
    started = time.perf_counter()
    result = Replayer(store).replay(run_id, agent)
    elapsed = time.perf_counter() - started
    store.close()
    if not result.reproduced:  # a figure for a replay that diverged would mean nothing
        sys.exit(f"replay did not reproduce: {result.divergence}")
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        run_id = record(path)
        read = statistics.median(time_read(path, run_id) for _ in range(3))
        print(f"read the same events (baseline)      : {read * 1000:8.1f} ms")
        for durability in ("full", "fast"):
            replay = statistics.median(time_replay(path, run_id, durability) for _ in range(3))
            print(f"replay, durability={durability:<4} (target <= 2 s): {replay * 1000:8.1f} ms   "
                  f"ratio to read: {replay / read:6.1f}x")


if __name__ == "__main__":
    main()
