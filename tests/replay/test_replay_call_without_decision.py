"""A recorded tool.call with neither a policy.decision nor a tool.result (appended so through the store
API: nothing says whether it was allowed, nor what it returned) is outcome_unknown: the replay never
serves it an exception the record does not hold."""

from __future__ import annotations

import uuid

import sealbox
from sealbox import EventDraft
from sealbox.replay import Replayer

P = "agent:bot"


def test_a_call_without_decision_or_result_is_outcome_unknown(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    try:
        rid = str(uuid.uuid4())
        store.append([
            EventDraft("run.started", {"agent": "bot", "snapshot": None, "parent_run_id": None, "labels": {},
                                       "policy": {"fingerprint": "sha256:" + "ab" * 32, "name": "t"}},
                       run_id=rid, principal=P, step="1"),
            EventDraft("tool.call", {"call_id": "c1", "server": "local", "tool": "t", "exposed": "local.t",
                                     "arguments": {"x": 1}, "grant": "implicit:agent:bot"}, run_id=rid, principal=P,
                       step="2"),
            EventDraft("run.ended", {"status": "error", "error": {"type": "Exception", "message": ""}},
                       run_id=rid, principal=P, step="3")])
        got = []

        def agent(run):
            try:
                got.append(run.call_tool("local", "t", {"x": 1}, lambda x: {"r": 1}))
            except Exception as exc:
                got.append(repr(exc))
                raise

        result = Replayer(store).replay(rid, agent)
        assert got == [] and not result.reproduced
        d = result.divergence
        assert (d.kind, d.step) == ("outcome_unknown", "2")
        assert d.message == ("step 2: the recorded call local/t has neither a recorded decision nor a result — its "
                             "outcome is unknown; replay ends here and does not run it again")
    finally:
        store.close()
