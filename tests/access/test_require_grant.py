"""A policy that requires an explicit grant closes the gap a revoked grant left open: an agent whose
grant was revoked can no longer call the same tool by naming no grant (``implicit:<principal>``).

Real SQLite stores; the decisions are read back from the log and re-evaluated from their stored inputs.
"""

from __future__ import annotations

import pytest

from sealbox import verify_store
from sealbox.access import grant_access, revoke
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.policy.audit import reevaluate, reevaluate_run
from sealbox.recorder import Recorder, ToolDenied
from sealbox.replay.whatif import whatif_policy
from identity_testkit import signed_grant  # noqa: E402
from identity_testkit import signed_retry as retry, signed_revoke as revoke  # noqa: E402,F811

AGENT = "agent:deploy-bot"
IMPLICIT = f"implicit:{AGENT}"

REQUIRE = Policy.from_text("""
version: 1
name: github-needs-grant
rules:
  - id: github-writes-need-grant
    match: {server: github, tool: "create_*"}
    require_grant: true
    effect: allow
  - id: rest
    effect: allow
""")


class Tool:
    def __init__(self):
        self.calls = []

    def __call__(self, title):
        self.calls.append(title)
        return "created"


def calls_in_one_run(store, policy, grants, tool):
    """One run of AGENT calling github/create_issue once per grant (None: names none); returns
    (outcomes, run_id), an outcome being the result or the ToolDenied's reason code."""
    outcomes = []
    with Recorder(store, policy).run(agent="deploy-bot", principal=AGENT) as run:
        for grant in grants:
            try:
                outcomes.append(run.call_tool("github", "create_issue", {"title": "x"}, tool, grant=grant))
            except ToolDenied as exc:
                outcomes.append(exc.decision.reason_code)
    return outcomes, run.run_id


def decisions(store, run_id):
    return [e.payload for e in store.read_run(run_id) if e.kind == "policy.decision"]


def view(payload):
    """A decision payload without what varies from run to run (timing, the inputs' blob reference)."""
    return {k: v for k, v in payload.items() if k not in ("eval_us", "inputs", "call_id")}


def test_an_implicit_grant_is_denied_and_an_explicit_one_allowed(store):
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    tool = Tool()
    outcomes, run_id = calls_in_one_run(store, REQUIRE, [None, gid], tool)
    assert outcomes == ["grant_required", "created"] and tool.calls == ["x"]
    denied, allowed = decisions(store, run_id)
    assert view(denied) == {
        "server": "github", "tool": "create_issue", "effect": "deny", "reason_code": "grant_required",
        "rule": "github-writes-need-grant",
        "reason": f"rule 'github-writes-need-grant' requires an explicit grant; the call's grant is {IMPLICIT} "
                  "(implicit: it names no access grant)",
        "policy_fingerprint": REQUIRE.fingerprint, "approval": None, "limit": None, "re_evaluable": True,
    }  # fmt: skip
    assert view(allowed) == {
        "server": "github", "tool": "create_issue", "effect": "allow", "reason_code": "policy_allow",
        "rule": "github-writes-need-grant", "reason": "rule 'github-writes-need-grant' allows the call",
        "policy_fingerprint": REQUIRE.fingerprint, "approval": None, "limit": None, "re_evaluable": True,
    }  # fmt: skip
    assert [store.resolve(d["inputs"])["grant"] for d in (denied, allowed)] == [IMPLICIT, gid]
    events = store.read_run(run_id)
    assert [(e.kind, e.payload.get("grant")) for e in events if e.kind in ("tool.call", "tool.result")] == [
        ("tool.call", IMPLICIT), ("tool.call", gid), ("tool.result", None)]
    assert verify_store(store).ok


def test_a_revoked_explicit_grant_is_still_grant_invalid_with_no_rule(store):
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    revoke(store, gid, "incident 42")
    tool = Tool()
    outcomes, run_id = calls_in_one_run(store, REQUIRE, [gid], tool)
    assert outcomes == ["grant_invalid"] and tool.calls == []
    [d] = decisions(store, run_id)
    assert (d["effect"], d["reason_code"], d["rule"]) == ("deny", "grant_invalid", None)
    assert d["reason"].startswith(f"grant {gid} was revoked at ")
    assert d["reason"].endswith(" by root: incident 42")


def test_after_a_revocation_naming_no_grant_no_longer_gets_through(store):
    """The gap: a revoked grant stops only the calls that name it. Without a require_grant rule the
    agent keeps calling by naming no grant; with one, that call is denied with grant_required."""
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    tool = Tool()
    before, _ = calls_in_one_run(store, REQUIRE, [gid], tool)
    revoke(store, gid, "the agent misbehaved")
    gap, open_run = calls_in_one_run(store, ALLOW_ALL, [gid, None], tool)
    closed, closed_run = calls_in_one_run(store, REQUIRE, [gid, None], tool)
    assert before == ["created"]
    assert gap == ["grant_invalid", "created"]  # the implicit call still ran under a policy that does not ask
    assert closed == ["grant_invalid", "grant_required"]
    assert tool.calls == ["x", "x"]
    assert [(d["reason_code"], d["rule"]) for d in decisions(store, closed_run)] == [
        ("grant_invalid", None), ("grant_required", "github-writes-need-grant")]
    assert not any(e.kind == "tool.result" for e in store.read_run(closed_run))
    assert verify_store(store).ok


def test_re_evaluating_the_stored_inputs_gives_the_recorded_decision(store):
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    _, run_id = calls_in_one_run(store, REQUIRE, [None, gid, f"implicit:{AGENT}"], Tool())
    again = list(reevaluate_run(store, REQUIRE, run_id))
    assert [(r.same, r.decision.effect, r.decision.reason_code, r.decision.rule) for r in again] == [
        (True, "deny", "grant_required", "github-writes-need-grant"),
        (True, "allow", "policy_allow", "github-writes-need-grant"),
        (True, "deny", "grant_required", "github-writes-need-grant"),
    ]
    assert [r.decision.reason for r in again] == [d["reason"] for d in decisions(store, run_id)]


def test_whatif_a_require_grant_policy_over_runs_recorded_without_one(store):
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    _, run_id = calls_in_one_run(store, ALLOW_ALL, [None, gid], Tool())
    report = whatif_policy(store, REQUIRE, [run_id])
    assert (report.evaluated, report.not_re_evaluable) == (2, ())
    [change] = report.changed
    assert (change.step, change.before, change.after, change.rule_before, change.rule_after) == (
        "2", "allow", "deny", "allow-all", "github-writes-need-grant")
    assert change.reason.startswith("rule 'github-writes-need-grant' requires an explicit grant")


def test_a_decision_recorded_before_call_grant_fails_closed_under_a_require_grant_rule(store):
    """Stored inputs without ``grant`` (recorded before the field existed) still load; the grant is
    not known, so a require_grant rule cannot be satisfied and the re-evaluation denies."""
    _, run_id = calls_in_one_run(store, ALLOW_ALL, [None], Tool())
    [recorded] = decisions(store, run_id)
    old_inputs = {k: v for k, v in store.resolve(recorded["inputs"]).items() if k != "grant"}
    under_old = reevaluate(ALLOW_ALL, recorded, old_inputs, run_id=run_id)
    under_new = reevaluate(REQUIRE, recorded, old_inputs, run_id=run_id)
    assert (under_old.same, under_old.decision.reason_code) == (True, "policy_allow")
    assert (under_new.decision.effect, under_new.decision.reason_code, under_new.decision.rule) == (
        "deny", "guardrail_error", "github-writes-need-grant")
    assert under_new.decision.reason == ("rule 'github-writes-need-grant' requires an explicit grant, and the call's "
                                         "grant is not known (none given, as in inputs recorded before call.grant)")


@pytest.mark.parametrize("grant", [None, "explicit"])
def test_the_reason_code_is_kept_by_tool_denied(store, grant):
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    with Recorder(store, REQUIRE).run(agent="deploy-bot", principal=AGENT) as run:
        if grant is None:
            with pytest.raises(ToolDenied) as info:
                run.call_tool("github", "create_issue", {"title": "x"}, Tool())
            assert (info.value.decision.reason_code, info.value.decision.rule) == (
                "grant_required", "github-writes-need-grant")
        else:
            assert run.call_tool("github", "create_issue", {"title": "x"}, Tool(), grant=gid) == "created"


@pytest.mark.parametrize("policy", [ALLOW_ALL, REQUIRE], ids=["same-policy", "what-if-policy"])
def test_a_grant_invalid_decision_re_evaluates_as_grant_invalid_not_allow(store, policy):
    """The grant check is the recorder's, applied on top of the policy: re-running a grant_invalid
    decision from its inputs gave the policy's bare answer ("allow"), so an audit under the same
    policy reported it as different and a what-if listed it as deny -> allow."""
    gid = signed_grant(store, AGENT, "github", "create_*", "repo:write")
    revoke(store, gid, "key leaked")
    outcomes, run_id = calls_in_one_run(store, ALLOW_ALL, [gid], Tool())
    assert outcomes == ["grant_invalid"]
    [again] = reevaluate_run(store, policy, run_id)
    [recorded] = decisions(store, run_id)
    assert (again.same, again.decision.effect, again.decision.reason_code, again.decision.rule) == (
        True, "deny", "grant_invalid", None)
    assert again.decision.reason == recorded["reason"]
    assert whatif_policy(store, policy, [run_id]).changed == ()


def test_a_breaker_open_decision_re_evaluates_as_breaker_open(store):
    """The circuit breaker is the recorder's too: its deny stands on re-evaluation where the
    policy allows (it applies to allowed calls only)."""
    from sealbox.policy import CircuitBreaker

    def failing(title):
        raise ConnectionRefusedError("github is down")

    rec = Recorder(store, ALLOW_ALL, breaker=CircuitBreaker(threshold=1, cooldown_s=3600))
    with rec.run(agent="deploy-bot", principal=AGENT) as run:
        with pytest.raises(ConnectionRefusedError):
            run.call_tool("github", "create_issue", {"title": "x"}, failing)
        with pytest.raises(ToolDenied) as denied:
            run.call_tool("github", "create_issue", {"title": "y"}, Tool())
    assert denied.value.decision.reason_code == "breaker_open"
    first, second = reevaluate_run(store, ALLOW_ALL, run.run_id)
    assert (first.same, first.decision.reason_code) == (True, "policy_allow")
    assert (second.same, second.decision.effect, second.decision.reason_code, second.decision.rule) == (
        True, "deny", "breaker_open", None)
    assert whatif_policy(store, ALLOW_ALL, [run.run_id]).changed == ()
