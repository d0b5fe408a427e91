"""A ``require_approval`` rule under the SDK with no approvals mode (``Recorder(store, policy)``, the default) denies
the call as ``approval_unavailable``. Its reason said only "rule R requires approval, and approvals are not
available here": a new user learnt neither why nor what to set. It now names the Recorder's ``approvals``
argument and its two modes; the recorded decision carries the same reason."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

POLICY = """version: 1
rules:
  - id: writes-need-ops
    match: {server: db, tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
"""

REASON = ('rule writes-need-ops requires approval, and this Recorder has no approvals mode to ask for one: '
          'create it with approvals="block" (wait for the answer) or approvals="suspend" (raise ApprovalPending, '
          'resume once answered); see docs/approvals.md')


def test_the_denial_says_which_recorder_setting_asks_for_approvals(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    ran = []
    try:
        with Recorder(store, policy=Policy.from_text(POLICY)).run(agent="bot") as run:
            with pytest.raises(ToolDenied) as denied:
                run.call_tool("db", "write_query", {"query": "DELETE"}, lambda query: ran.append(query))
        decision = denied.value.decision
        assert (decision.reason_code, decision.rule, decision.reason) == ("approval_unavailable", "writes-need-ops", REASON)
        assert ran == []
        [recorded] = [e.payload for e in store.read_run(run.run_id) if e.kind == "policy.decision"]
        assert (recorded["reason_code"], recorded["reason"]) == ("approval_unavailable", REASON)
    finally:
        store.close()
