"""A revocation while a call under the grant is running (docs/access.md, Limits: *A call already
running is not stopped*): the running call ends and its result is recorded after the revocation's
steps, the next call naming the grant is denied ``grant_invalid`` and recorded, and ``verify`` passes.
A pin of documented behaviour, against the real provider on 127.0.0.1."""

from __future__ import annotations

import threading

from identity_testkit import grant_key, signed_grant  # noqa: E402
from sealbox import verify_store
from sealbox.access import STATUS_CONFIRMED, get_grant, revoke, show_grant
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, ToolDenied


def test_a_running_call_ends_the_next_is_denied_and_verify_passes(store, provider):
    tokens = provider.issue()
    gid = signed_grant(store, "agent:bot", "github", "create_*", "repo", credential=provider.credential(tokens))
    running, release = threading.Event(), threading.Event()
    out: dict = {}

    def slow_tool(n):
        running.set()
        assert release.wait(60)
        return f"made {n}"

    def agent():
        with Recorder(store, ALLOW_ALL).run(agent="bot", principal="agent:bot") as run:
            out["first"] = run.call_tool("github", "create_issue", {"n": 1}, slow_tool, grant=gid)
            try:
                run.call_tool("github", "create_issue", {"n": 2}, lambda n: "ran", grant=gid)
            except ToolDenied as exc:
                out["second"] = str(exc)
            out["run"] = run.run_id

    worker = threading.Thread(target=agent)
    worker.start()
    assert running.wait(60)
    assert revoke(store, gid, "incident 9", key_file=grant_key(store), sleep=lambda s: None) == STATUS_CONFIRMED
    release.set()
    worker.join(60)
    steps = show_grant(store, gid)["steps"]
    requested = steps[0]["leaf_index"]
    assert out["first"] == "made 1"
    assert out["second"].startswith(f"github/create_issue denied (grant_invalid): grant {gid} was revoked at ")
    assert out["second"].endswith(": incident 9")
    evs = [(e.kind, e.leaf_index, e.payload) for e in store.read_run(out["run"])]
    calls = [(k, p["arguments"]["n"], leaf < requested) for k, leaf, p in evs if k == "tool.call"]
    assert calls == [("tool.call", 1, True), ("tool.call", 2, False)]
    results = [(p["result"], leaf > steps[-1]["leaf_index"]) for k, leaf, p in evs if k == "tool.result"]
    assert results == [("made 1", True)]
    decisions = [(p["effect"], p["reason_code"]) for k, _, p in evs if k == "policy.decision"]
    assert decisions == [("allow", "policy_allow"), ("deny", "grant_invalid")]
    assert get_grant(store, gid).leaf_index < requested
    report = verify_store(store)
    assert report.ok, report.problems
