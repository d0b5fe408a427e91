"""``os.fork()`` inside a run's ``with`` block: the child leaves the block too (the same frames return in
both processes). The run is the parent's: the child's exit must not end it. On PostgreSQL (whose store
reconnects in a child) the child wrote ``run.ended`` for the parent's run, and the parent's next call
failed with RecordingError ("run … has ended") and its own end with it. Real stores: SQLite, and
PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import importlib.util
import os
import uuid

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_fork_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


def test_a_forked_child_leaving_the_run_s_block_does_not_end_the_parent_s_run(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    pid = -1
    try:
        with rec.run(agent="forker") as run:
            run.call_tool("s", "before", None, lambda: 1)
            pid = os.fork()
            if pid:
                _, status = os.waitpid(pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0
                assert run.call_tool("s", "after", None, lambda: 2) == 2
    except BaseException:
        if pid == 0:
            os._exit(3)
        raise
    if pid == 0:
        os._exit(0)  # the child left the block without an error
    events = list(store.read_run(run.run_id))
    assert [(e.kind, e.payload.get("tool")) for e in events] == [
        ("run.started", None), ("tool.call", "before"), ("policy.decision", "before"), ("tool.result", None),
        ("tool.call", "after"), ("policy.decision", "after"), ("tool.result", None), ("run.ended", None)]
    assert events[-1].payload["status"] == "ok"
    assert store.get_run(run.run_id)["status"] == "ended"
    assert sealbox.verify_store(store).ok
