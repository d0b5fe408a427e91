"""``sealbox verify`` of a store reads every call that ran against the grant it names, at the call's leaf.

The recorder checks a call's explicit grant inside the transaction that records the call and its
decision (``sealbox.access.grant_status``): unknown, not counting, revoked (any step), another
principal's, not covering the tool, or expired is a ``grant_invalid`` deny. A call recorded as not
denied although its grant did not authorize it was not recorded through that check (a writer whose
gate was cut out, or events written below Sealbox): verify reports it as ``call_grant_invalid``, with
the same message the bundle verifier gives (docs/access.md, *Verify: calls against their grants*).

Every store here is real, every grant and revocation is signed through the real API by a real admin or
approver key, and the calls are recorded by the real recorder; a "forged gate" is the recorder with its
grant check cut out (``RunContext._check_grant`` returning the policy's decision), as
tests/interop/test_bundle_authorization.py forges them. Where a call must be recorded later than a test
can wait, the clocks are shifted (the recorder's ``datetime`` and the store's ``utc_now``), never the store.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import sealbox
from sealbox import verify_store
from sealbox.access import grant_access, revoke
from sealbox.cli.main import main
from sealbox.events import SYSTEM_RUN_ID
from sealbox.identities import add_identity
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, RunContext, ToolDenied
from sealbox.verify import CALL_EXPIRY_TOLERANCE_S
from identity_testkit import grant_key

AGENT = "agent:deploy-bot"
HEAD = "the call was not denied, though its grant did not authorize it: "
TAIL = " (the recorder denies such a call grant_invalid: it was not recorded through Sealbox's grant check)"


@pytest.fixture
def keys(store, tmp_path):
    root = grant_key(store)
    out = {"root": root}
    for name, role in (("boss", "admin"), ("alice", "approver")):
        out[name] = add_identity(store, name, role, key_path=tmp_path / f"{name}.key", admin_key=root).key_path
    return out


@contextlib.contextmanager
def forged_gate(monkeypatch):
    """The recorder with its grant check cut out: what only someone who controls the writer can do."""
    with monkeypatch.context() as m:
        m.setattr(RunContext, "_check_grant", lambda self, reader, grant, server, tool, decision: decision)
        yield


class _Shifted(datetime):
    """``datetime`` whose ``now`` runs ``offset`` ahead (the recorder's clock)."""

    offset = timedelta(0)

    @classmethod
    def now(cls, tz=None):
        return datetime.now(tz) + cls.offset


@contextlib.contextmanager
def clocks(monkeypatch, *, recorder=None, store=None):
    """The recorder's clock ``recorder`` ahead, and/or the store's event clock fixed at ``store`` (a datetime)."""
    import sealbox.recorder as recorder_module
    import sealbox.store.base as base

    with monkeypatch.context() as m:
        if recorder is not None:
            m.setattr(recorder_module, "datetime", type("Later", (_Shifted,), {"offset": recorder}))
        if store is not None:
            from sealbox.store import postgres

            m.setattr(base, "utc_now", lambda: store.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            # a PostgreSQL store stamps its events with the server's clock, read when a write takes the lock
            m.setattr(postgres._PgTxn, "stamp", lambda self: store.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        yield


def call(store, grant, *, principal=AGENT, tool="create_issue"):
    """One recorded call of github/``tool`` naming ``grant``: (outcome, run id, the tool.call event)."""
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=principal) as run:
        try:
            outcome = run.call_tool("github", tool, {"title": "x"}, lambda title: "ok", grant=grant)
        except ToolDenied as exc:
            outcome = exc.decision.reason_code
    event = next(e for e in store.read_run(run.run_id) if e.kind == "tool.call")
    return outcome, run.run_id, event


def problems(store):
    return [(p.code, p.run_id, p.run_seq, p.kind, p.leaf_index, p.message) for p in verify_store(store).problems]


def invalid(event, why):
    return ("call_grant_invalid", event.run_id, event.run_seq, "tool.call", event.leaf_index, HEAD + why + TAIL)


def leaf_of(store, kind, grant_id, step=None):
    return next(e.leaf_index for e in store.read_run(SYSTEM_RUN_ID) if e.kind == kind
                and e.payload["grant_id"] == grant_id and (step is None or e.payload["step"] == step))


def cli_verify(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "store")])
    return exc.value.code, capsys.readouterr().out.splitlines()


def test_a_call_under_a_valid_grant_is_clean(store, keys, tmp_path, capsys, monkeypatch):
    grant_access(store, AGENT, "github", "create_*", "repo", expires_at="1h", key_file=keys["boss"], grant_id="g1")
    assert call(store, "g1")[0] == "ok"
    with forged_gate(monkeypatch):  # a gate that checks nothing changes nothing for a call its grant covers
        assert call(store, "g1")[0] == "ok"
    assert call(store, "implicit:" + AGENT)[0] == "ok"
    report = verify_store(store)
    assert report.ok and report.problems == () and report.notes == ()
    code, out = cli_verify(tmp_path, capsys)
    assert code == 0 and out[0].startswith("Verified: the log is intact.")


def test_a_call_that_ran_under_a_revoked_grant_is_call_grant_invalid(store, keys, tmp_path, capsys, monkeypatch):
    grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g1")
    assert call(store, "g1")[0] == "ok"  # before the revocation: authorized
    revoke(store, "g1", "leaked token", key_file=keys["alice"])
    with forged_gate(monkeypatch):
        outcome, run_id, event = call(store, "g1")
    assert outcome == "ok"  # it ran
    requested = leaf_of(store, "access.revoked", "g1", "requested")
    assert problems(store) == [invalid(event, f"grant g1 was revoked before the call (access.revoked step "
                                              f"'requested' at leaf {requested})")]
    code, out = cli_verify(tmp_path, capsys)
    assert code == 1
    assert out[0] == (f"call_grant_invalid [run {run_id}, run_seq {event.run_seq}, tool.call, leaf {event.leaf_index}]: "
                      f"{HEAD}grant g1 was revoked before the call (access.revoked step 'requested' at leaf "
                      f"{requested}){TAIL}")
    assert out[1].startswith("NOT VERIFIED: 1 problem(s) found.")


def test_a_denied_call_naming_a_revoked_grant_is_not_reported(store, keys, tmp_path, capsys):
    grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g1")
    revoke(store, "g1", "leaked token", key_file=keys["alice"])
    outcome, _, _ = call(store, "g1")
    assert outcome == "grant_invalid"  # the real gate denied it: it did not run
    assert call(store, "g_never_granted")[0] == "grant_invalid"
    assert problems(store) == []
    assert cli_verify(tmp_path, capsys)[0] == 0


def test_a_call_under_another_principals_grant_or_outside_its_tools(store, keys, monkeypatch):
    grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g1")
    with forged_gate(monkeypatch):
        assert call(store, "g1", principal="agent:other")[0] == "ok"
        assert call(store, "g1", tool="delete_repo")[0] == "ok"
    [borrowed, outside] = [e for e in store.read_range(0, store.size()) if e.kind == "tool.call"]
    assert problems(store) == [
        invalid(borrowed, "grant g1 is held by agent:deploy-bot, not agent:other"),
        invalid(outside, "grant g1 covers github/create_*, not github/delete_repo")]


def test_a_call_after_its_grant_expired_is_call_grant_invalid(store, keys, monkeypatch):
    grant_access(store, AGENT, "github", "create_*", "repo", expires_at="1h", key_file=keys["boss"], grant_id="g1")
    expires = datetime.fromisoformat(next(e.payload["expires_at"] for e in store.read_run(SYSTEM_RUN_ID)
                                          if e.kind == "access.granted").replace("Z", "+00:00"))
    two_hours = timedelta(hours=2)
    later = datetime.now(timezone.utc) + two_hours
    with clocks(monkeypatch, recorder=two_hours, store=later):
        outcome, _, denied = call(store, "g1")  # the real gate, two hours on: the grant expired
        assert outcome == "grant_invalid"
        with forged_gate(monkeypatch):
            outcome, _, ran = call(store, "g1")
        assert outcome == "ok"
    ts = later.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert ran.ts == ts and denied.ts == ts
    assert problems(store) == [invalid(ran, f"grant g1 expired at {expires.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}, "
                                            f"60 s or more before the call ({ts})")]


def test_the_stores_clock_decides_and_verify_allows_60_seconds_past_the_expiry(store, keys, monkeypatch):
    """The real gate compares the expiry with the store's clock (the ts its call's events get: it denies
    from the expiry on, whatever the recorder's ``datetime.now``); verify reports a call let through after
    the expiry (a forged gate, or a log written when the gate read ``datetime.now``) only once its ts is
    CALL_EXPIRY_TOLERANCE_S or more past the expiry."""
    assert CALL_EXPIRY_TOLERANCE_S == 60
    grant_access(store, AGENT, "github", "create_*", "repo", expires_at="1h", key_file=keys["boss"], grant_id="g1")
    text = next(e.payload["expires_at"] for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "access.granted")
    expires = datetime.fromisoformat(text.replace("Z", "+00:00"))
    with clocks(monkeypatch, store=expires - timedelta(microseconds=1)):
        assert call(store, "g1")[0] == "ok"
    with clocks(monkeypatch, store=expires):  # the recorder's datetime.now: an hour before the expiry
        assert call(store, "g1")[0] == "grant_invalid"
    with clocks(monkeypatch, store=expires + timedelta(seconds=60) - timedelta(microseconds=1)), forged_gate(monkeypatch):
        assert call(store, "g1")[0] == "ok"
    assert problems(store) == []
    with clocks(monkeypatch, store=expires + timedelta(seconds=60)), forged_gate(monkeypatch):
        outcome, _, event = call(store, "g1")
    assert outcome == "ok"
    assert problems(store) == [invalid(event, f"grant g1 expired at {text}, 60 s or more before the call ({event.ts})")]


def test_a_call_naming_a_grant_recorded_after_it_or_never(store, keys, monkeypatch):
    with forged_gate(monkeypatch):
        assert call(store, "g_later")[0] == "ok"
        assert call(store, "g_none")[0] == "ok"
    grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g_later")
    [early, none] = [e for e in store.read_range(0, store.size()) if e.kind == "tool.call"]
    assert problems(store) == [
        invalid(early, f"grant g_later was recorded after the call (leaf {leaf_of(store, 'access.granted', 'g_later')})"),
        invalid(none, "there is no grant g_none in the log")]


def test_a_forged_gate_over_a_store_of_many_calls_keeps_state_only_for_calls_it_reports(store, keys, monkeypatch):
    """Verification streams: the state it keeps for calls is the calls it will report, not every call."""
    from sealbox.verify import CallGrantCheck

    grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id="g1")
    revoke(store, "g1", "leaked token", key_file=keys["alice"])
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
        for i in range(200):  # denied by the real gate: none ran
            with pytest.raises(ToolDenied):
                run.call_tool("github", "create_issue", {"title": str(i)}, lambda title: "ok", grant="g1")
    check = CallGrantCheck(store.origin)
    sizes = []
    for e in store.read_range(0, store.size()):
        check.add(e.leaf_index, {"run_id": e.run_id, "run_seq": e.run_seq, "kind": e.kind, "ts": e.ts,
                                 "principal": e.principal, "payload": e.payload})
        sizes.append(check.pending)
    assert max(sizes) == 1 and sizes[-1] == 0 and check.finish() == []


def test_a_call_naming_another_principals_implicit_grant_is_call_grant_invalid(store, keys, tmp_path, capsys,
                                                                                   monkeypatch):
    """``implicit:<principal>`` is the grant a principal holds by itself: the recorder refuses a call
    naming another's (ConfigError, nothing recorded). A writer without that check (forged here by cutting
    it out) recorded agent:deploy-bot's call under ``implicit:agent:admin-bot``; verify reports it."""
    import sealbox.recorder as recorder_module

    with pytest.raises(sealbox.ConfigError, match="is not this run's implicit grant"):
        call(store, "implicit:agent:admin-bot")
    assert verify_store(store).ok
    with monkeypatch.context() as m:
        m.setattr(recorder_module, "_check_implicit_grant", lambda where, grant, principal: None)
        outcome, _, event = call(store, "implicit:agent:admin-bot")
    assert (outcome, event.payload["grant"], event.principal) == ("ok", "implicit:agent:admin-bot", AGENT)
    assert problems(store) == [invalid(event, "implicit:agent:admin-bot is the implicit grant of 'agent:admin-bot', "
                                              "not of the call's principal 'agent:deploy-bot': a principal may name "
                                              "only its own")]
    code, out = cli_verify(tmp_path, capsys)
    assert code == 1 and any("call_grant_invalid" in line for line in out)
