"""Each breaker's ``breaker.changed`` events are recorded in the order the breaker changed, under 16 threads.

A call's outcome (a failure opening the breaker, a probe closing it) changed the breaker before its
``tool.result`` write took the store's write lock: another thread's later change of the same breaker (its
probe's ``open`` -> ``half_open``, made inside its ``tool.call`` write) could be committed first, and the record
read ``closed`` -> ``open``, ``half_open`` -> ``closed``, ``open`` -> ``half_open``: states the breaker never
went through in that order. Real stores (SQLite, and PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set)."""

from __future__ import annotations

import importlib.util
import os
import random
import threading
import time
import uuid

import pytest

import sealbox
from sealbox.events import SYSTEM_RUN_ID
from sealbox.policies import ALLOW_ALL
from sealbox.policy import CircuitBreaker
from sealbox.recorder import Recorder, ToolDenied

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_order_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


def test_breaker_changes_are_recorded_in_the_order_they_were_made(store):
    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=2, cooldown_s=0.002))

    def worker(i: int) -> None:
        r = random.Random(i)
        with rec.run(agent="a") as run:
            for _ in range(40):
                def tool(**_):
                    time.sleep(r.random() * 0.002)
                    if r.random() < 0.5:
                        raise RuntimeError("down")
                    return 1
                try:
                    run.call_tool("db", r.choice(["t1", "t2"]), {}, tool)
                except (RuntimeError, ToolDenied):
                    pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recorded: dict[str, str] = {}
    breaks = []
    changes = [e.payload for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "breaker.changed"]
    for p in changes:
        if p["from"] != recorded.get(p["tool"], "closed"):
            breaks.append((p["tool"], recorded.get(p["tool"], "closed"), p["from"], p["to"]))
        recorded[p["tool"]] = p["to"]
    assert len(changes) > 20  # the breakers did change, many times
    assert breaks == []
    assert recorded == {t: rec.breaker.state("db", t) for t in recorded}
