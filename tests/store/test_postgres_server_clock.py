"""Several machines write one PostgreSQL store: each event's ``ts`` was stamped by the writing process's
clock, so two writers whose clocks disagree wrote a log whose ``ts`` went backwards from one leaf to the
next (and a machine a few minutes ahead stamped events in the future). The PostgreSQL store now stamps
every event with the database server's clock (``clock_timestamp()``, read in the statement that takes the
write lock) and never before the last event's ``ts``. Real PostgreSQL; the skewed clocks are real
processes whose ``time.time`` / ``time.time_ns`` run ``SKEW`` seconds apart from the machine's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import pytest

import sealbox

PG_URL = os.environ.get("SEALBOX_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not PG_URL, reason="SEALBOX_TEST_POSTGRES_URL is not set: needs PostgreSQL")

WRITER = textwrap.dedent("""
    import os, sys, time
    skew = float(os.environ["SKEW"])
    real_ns, real = time.time_ns, time.time
    time.time_ns = lambda: real_ns() + int(skew * 1e9)
    time.time = lambda: real() + skew
    import sealbox
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    store = sealbox.open_store(sys.argv[1])
    with Recorder(store, policy=ALLOW_ALL).run(agent="skewed " + sys.argv[2]) as run:
        run.note("written by a machine " + sys.argv[2])
        run.call_tool("db", "q", {"who": sys.argv[2]}, lambda **_: 1)
    store.close()
""")


def _server_now() -> datetime:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute("SELECT clock_timestamp()").fetchone()[0].astimezone(timezone.utc)


def _at(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


@pytest.fixture
def store(request):
    from sealbox.store.postgres import test_factory

    return test_factory(PG_URL, request)()


def test_events_of_writers_with_skewed_clocks_get_the_servers_time_in_log_order(store):
    path = str(store.path)
    size = store.size()
    before = _server_now()
    for skew, who in ((300, "ahead"), (-300, "behind")):
        done = subprocess.run([sys.executable, "-c", WRITER, path, who], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SKEW": str(skew)})
        assert done.returncode == 0, done.stderr
    after = _server_now()
    events = store.read_range(size, store.size())
    assert [e.kind for e in events] == ["run.started", "note", "tool.call", "policy.decision", "tool.result",
                                        "run.ended"] * 2
    stamps = [e.ts for e in events]
    assert stamps == sorted(stamps), stamps  # before: the 'behind' writer's run started 10 minutes before the other's
    assert all(before <= _at(ts) <= after for ts in stamps), (before, stamps, after)
    assert sealbox.verify_store(store).ok


OLD_WRITER = textwrap.dedent("""
    import os, sys, time
    skew = float(os.environ["SKEW"])
    real_ns = time.time_ns
    time.time_ns = lambda: real_ns() + int(skew * 1e9)
    import sealbox
    from sealbox.store import base, postgres
    postgres._PgTxn.stamp = lambda self: base.utc_now()  # as Sealbox before: this machine's clock
    store = sealbox.open_store(sys.argv[1])
    store.append([sealbox.EventDraft("note", {"text": "old writer"}, run_id=sys.argv[2])])
    store.close()
""")


@pytest.mark.parametrize("skew, followed", [(20, True), (600, False)])
def test_an_event_stamped_ahead_by_an_older_writer_is_followed_within_60_s(store, skew, followed):
    from sealbox.recorder import Recorder
    from sealbox.policies import ALLOW_ALL

    run = Recorder(store, policy=ALLOW_ALL).run(agent="here").start()
    done = subprocess.run([sys.executable, "-c", OLD_WRITER, str(store.path), run.run_id], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "SKEW": str(skew)})
    assert done.returncode == 0, done.stderr
    ahead = store.read_range(store.size() - 1, store.size())[0]
    before = _server_now()
    run.note("after it")
    after = _server_now()
    ev = store.read_range(store.size() - 1, store.size())[0]
    if followed:  # never before the event ahead: the log's ts does not go backwards
        assert ev.ts == ahead.ts
    else:  # 10 minutes ahead: not followed (every later event would be stamped 10 minutes in the future)
        assert before <= _at(ev.ts) <= after and ev.ts < ahead.ts
    run.end()
