"""An evaluation interrupted after its condition reached the worker (Ctrl-C, a RecursionError or
MemoryError raised while the caller waits) left the worker's answer in the pipe: the next
evaluation, of another condition, sent its request and read that stale answer as its own. A guard
that should deny could then answer with the previous condition's ``True``. The worker is now killed
whenever an evaluation ends with anything but an answer, so a late answer is never read."""

from __future__ import annotations

import pytest

from sealbox.policy.worker import ConditionWorker


def test_an_answer_left_by_an_interrupted_evaluation_never_answers_the_next():
    worker = ConditionWorker()
    worker.start()
    try:
        real_poll = worker._conn.poll
        calls = []

        def poll_then_interrupt(timeout=0.0):
            calls.append(timeout)
            assert real_poll(5.0)  # the worker's answer to "1 == 1" is in the pipe, unread
            worker._conn.poll = real_poll  # once
            raise KeyboardInterrupt

        worker._conn.poll = poll_then_interrupt  # only this connection: a fresh worker has its own
        with pytest.raises(KeyboardInterrupt):
            worker.evaluate("1 == 1", {}, 5.0)
        assert calls == [5.0]
        restarts = worker.restarts
        assert worker.evaluate("1 == 2", {}, 5.0) == ("ok", False)  # its own answer, not the stale True
        assert worker.restarts == restarts  # the interrupted worker was killed: a fresh one answered
        assert worker.evaluate("2 == 2", {}, 5.0) == ("ok", True)
    finally:
        worker.stop()
