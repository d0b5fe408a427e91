"""Only a half-open breaker's probe moves it: a call held for an approval (``approvals="block"``) took no
probe when it was gated; approved, it runs, and its outcome used to move a half-open breaker whose probe
another call held (its failure opened the breaker again, so the probe's success then changed nothing and
every call was denied ``breaker_open`` for another cool-down). Real stores (SQLite, and PostgreSQL when
SEALBOX_TEST_POSTGRES_URL is set)."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
import uuid

import pytest
from identity_testkit import admin_key

import sealbox
from sealbox.approvals import answer, list_approvals
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity
from sealbox.policy import CircuitBreaker, Policy
from sealbox.recorder import Recorder

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")

POLICY = """
version: 1
rules:
  - id: held-needs-ops
    match: {server: db, tool: query}
    when: 'call.arguments.held == true'
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: rest-ok
    effect: allow
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_held_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


def _changes(store):
    return [(e.payload["from"], e.payload["to"], e.payload["reason"])
            for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "breaker.changed"]


def _until(condition) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _broken(**_):
    raise RuntimeError("db down")


def test_an_approved_held_call_failing_while_the_probe_runs_does_not_reopen_the_breaker(store, tmp_path):
    key = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                       admin_key=admin_key(store, tmp_path)).key_path
    clock = Clock()
    rec = Recorder(store, Policy.from_text(POLICY), approvals="block", approval_poll=0.02,
                   breaker=CircuitBreaker(threshold=1, cooldown_s=30, clock=clock))
    outcomes: dict[str, object] = {}

    def held() -> None:
        with rec.run(agent="held") as run:
            try:
                run.call_tool("db", "query", {"held": True}, _broken)
            except RuntimeError as exc:
                outcomes["held"] = str(exc)

    release = threading.Event()

    def probe() -> None:
        def slow(**_):
            release.wait(10)
            return "rows"
        with rec.run(agent="probe") as run:
            outcomes["probe"] = run.call_tool("db", "query", {"held": False}, slow)

    holder = threading.Thread(target=held)
    holder.start()
    _until(lambda: list_approvals(store, pending=True))  # held for an approval
    with rec.run(agent="bot") as run, pytest.raises(RuntimeError):
        run.call_tool("db", "query", {"held": False}, _broken)  # opens the breaker
    clock.t += 31
    prober = threading.Thread(target=probe)
    prober.start()
    _until(lambda: rec.breaker.state("db", "query") == "half_open")  # the probe runs
    answer(store, list_approvals(store, pending=True)[0].approval_id, "approve", "fine", key)
    holder.join(10)
    during = rec.breaker.state("db", "query")
    release.set()
    prober.join(10)
    assert outcomes == {"held": "db down", "probe": "rows"}
    assert (during, rec.breaker.state("db", "query")) == ("half_open", "closed")
    assert _changes(store) == [("closed", "open", "failures"), ("open", "half_open", "cooldown_elapsed"),
                               ("half_open", "closed", "probe_succeeded")]
    assert sealbox.verify_store(store).ok
