"""Suspend and resume: the process exits while waiting; another answers; a third resumes THE SAME run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
from approval_helpers import POLICY, kinds, policy

import sealbox
from sealbox import RecordingError, verify_store
from sealbox.approvals import ApprovalError, ApprovalPending, answer
from sealbox.pause import claim
from sealbox.recorder import Recorder

AGENT = """
import sys
import sealbox
from sealbox.approvals import ApprovalPending
from sealbox.policy import Policy
from sealbox.recorder import Recorder

mode, store_path, policy_path, side = sys.argv[1:5]
store = sealbox.open_store(store_path)
rec = Recorder(store, policy=Policy.load(policy_path), approvals="suspend")

@rec.tool("db")
def write_query(sql):
    with open(side, "a") as f:
        f.write(sql + "\\n")
    return "deleted 3 rows"

@rec.tool("db")
def read_query(sql):
    return [[1]]

if mode == "start":
    try:
        with rec.run(agent="cleanup-bot") as run:
            read_query("SELECT 1")
            write_query("DELETE FROM t WHERE old")
    except ApprovalPending as pending:
        print(pending.run_id, pending.approval_id)
        store.close()
        sys.exit(3)
    sys.exit(1)
else:
    with rec.resume(sys.argv[5]) as run:
        [call] = run.resumed_calls
        print(call.outcome, call.value())
        read_query("SELECT 2")
    store.close()
"""


def test_the_run_is_one_run_across_three_processes_and_the_tool_runs_exactly_once(tmp_path, keys, store):
    store.close()  # the three processes open it themselves
    script, pol, side = tmp_path / "agent.py", tmp_path / "policy.yaml", tmp_path / "side-effects.txt"
    script.write_text(AGENT)
    pol.write_text(textwrap.dedent(POLICY))
    path = str(tmp_path / "store")
    first = subprocess.run([sys.executable, str(script), "start", path, str(pol), str(side)], capture_output=True, text=True)
    assert first.returncode == 3, first.stderr
    run_id, aid = first.stdout.split()
    assert not side.exists()
    cli = [sys.executable, "-m", "sealbox.cli.main"]
    second = subprocess.run(cli + ["approvals", "approve", aid, "--reason", "old rows only", "--key-file", str(keys["alice"]),
                                   "-s", path], capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"alice approved {aid}; request is now approved\n"
    third = subprocess.run([sys.executable, str(script), "resume", path, str(pol), str(side), run_id],
                           capture_output=True, text=True)
    assert third.returncode == 0, third.stderr
    assert third.stdout == "approved deleted 3 rows\n"
    assert side.read_text() == "DELETE FROM t WHERE old\n"
    again = subprocess.run([sys.executable, str(script), "resume", path, str(pol), str(side), run_id],
                           capture_output=True, text=True)
    assert again.returncode != 0 and "has ended" in again.stderr
    assert side.read_text() == "DELETE FROM t WHERE old\n"
    s = sealbox.open_store(path)
    try:
        events = s.read_run(run_id)
        assert [e.kind for e in events] == [
            "run.started", "tool.call", "policy.decision", "tool.result",
            "tool.call", "policy.decision", "approval.requested", "run.suspended",
            "approval.answered", "run.resumed", "tool.result",
            "tool.call", "policy.decision", "tool.result", "run.ended"]
        assert {e.run_id for e in events} == {run_id}
        answered = events[8]
        assert (answered.principal, answered.payload["identity"], answered.payload["client"]["user_agent"]) == (
            "alice", "alice", f"sealbox-cli/{sealbox.__version__}")
        assert events[9].payload["approval_ids"] == [aid] and events[9].payload["outcomes"] == {aid: "approved"}
        assert events[10].payload["result"] == "deleted 3 rows"
        assert len({e.step for e in events[4:11]}) == 1  # the call's events share its step
        assert verify_store(s).ok
    finally:
        s.close()


def suspend(store, rec, sql="DELETE", tool="write_query", arguments=None):
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", tool, arguments or {"sql": sql}, lambda **_: pytest.fail("ran while suspended"))
    return run.run_id, info.value.approval_id


class Tool:
    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return f"ran {kwargs}"


def test_resume_before_an_answer_raises_pending_and_writes_nothing(store, keys):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run_id, aid = suspend(store, rec)
    before = store.size()
    with pytest.raises(ApprovalPending) as info:
        rec.resume(run_id, {("db", "write_query"): Tool()})
    assert info.value.approval_ids == (aid,) and store.size() == before


def test_a_denied_call_is_not_run_on_resume(store, keys):
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspend(store, rec)
    answer(store, aid, "deny", "no", keys["bob"])
    with rec.resume(run_id, {("db", "write_query"): tool}) as run:
        (call,) = run.resumed_calls
    assert (call.outcome, call.ran, tool.calls) == ("denied", False, [])
    with pytest.raises(sealbox.SealboxError, match="denied by bob: no"):
        call.value()
    assert kinds(store, run_id)[-3:] == ["approval.answered", "run.resumed", "run.ended"]


def test_two_processes_resuming_at_once_run_the_tool_once(store, keys):
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["alice"])
    errors = []

    def go():
        try:
            Recorder(store, policy=policy()).resume(run_id, {("db", "write_query"): tool})
        except ApprovalError as exc:
            errors.append(exc.code)

    threads = [threading.Thread(target=go) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    # the others either lost the race for run.resumed or saw it taken (then the call is not theirs to run)
    assert len(tool.calls) == 1 and set(errors) <= {"already_resumed"}
    assert kinds(store, run_id).count("run.resumed") == 1


def test_an_outcome_unknown_call_is_rerun_only_when_asked(store, keys):
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["alice"])
    assert claim(rec._attach(run_id), aid)[1] == "approved"  # resumed, then "the process died"
    run = rec.resume(run_id, {("db", "write_query"): tool})
    assert [(c.outcome, c.ran) for c in run.resumed_calls] == [("unknown", False)] and tool.calls == []
    run = rec.resume(run_id, {("db", "write_query"): tool}, rerun_unknown=True)
    assert [(c.outcome, c.ran) for c in run.resumed_calls] == [("rerun", True)] and tool.calls == [{"sql": "DELETE"}]
    assert kinds(store, run_id)[-2:] == ["note", "tool.result"]
    assert rec.resume(run_id, {("db", "write_query"): tool}).resumed_calls == []


def test_a_missing_tool_function_fails_before_anything_is_written(store, keys):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["alice"])
    before = store.size()
    with pytest.raises(sealbox.ConfigError, match="no function for tool db/write_query"):
        rec.resume(run_id)
    assert store.size() == before


def test_redacted_arguments_must_be_given_again_and_must_match_the_binding(store, keys):
    rec, tool = Recorder(store, policy=policy(), approvals="suspend"), Tool()
    args = {"sql": "UPDATE users", "password": "hunter2"}
    run_id, aid = suspend(store, rec, arguments=args)
    answer(store, aid, "approve", "ok", keys["alice"])
    call_id = [e.payload["call_id"] for e in store.read_run(run_id) if e.kind == "tool.call"][0]
    with pytest.raises(ApprovalError) as info:
        rec.resume(run_id, {("db", "write_query"): tool})
    assert info.value.code == "arguments_redacted"
    with pytest.raises(ApprovalError) as info:
        rec.resume(run_id, {("db", "write_query"): tool}, arguments={call_id: {**args, "sql": "DROP TABLE users"}})
    assert info.value.code == "binding_mismatch"
    rec.resume(run_id, {("db", "write_query"): tool}, arguments={call_id: args})
    assert tool.calls == [args]


CHANGED = {
    "deny": """
version: 1
rules:
  - id: no-writes
    match: {tool: write_query}
    effect: deny
""",
    "allow": """
version: 1
rules:
  - id: writes-ok
    match: {tool: write_query}
    effect: allow
""",
    "two": """
version: 1
rules:
  - id: writes-need-two
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 2, expires: 1h}
""",
}


@pytest.mark.parametrize("new, outcome, runs", [("deny", "policy_denied", False), ("allow", "approved", True),
                                                ("two", "approval_insufficient", False)])
def test_a_policy_changed_while_suspended_is_applied_on_resume_and_recorded(store, keys, new, outcome, runs):
    tool = Tool()
    run_id, aid = suspend(store, Recorder(store, policy=policy(), approvals="suspend"))
    answer(store, aid, "approve", "ok", keys["alice"])
    later = Recorder(store, policy=policy(CHANGED[new]))
    (call,) = later.resume(run_id, {("db", "write_query"): tool}).resumed_calls
    assert (call.outcome, call.ran, len(tool.calls)) == (outcome, runs, int(runs))
    events = store.read_run(run_id)
    decisions = [e.payload for e in events if e.kind == "policy.decision"]
    assert [d.get("reevaluated", False) for d in decisions] == [False, True]
    assert decisions[1]["policy_fingerprint"] == later.policy.fingerprint != decisions[0]["policy_fingerprint"]
    resumed = [e.payload for e in events if e.kind == "run.resumed"][0]
    assert resumed["outcomes"] == {aid: outcome}


def test_a_denial_is_never_reevaluated_into_an_allow(store, keys):
    tool = Tool()
    run_id, aid = suspend(store, Recorder(store, policy=policy(), approvals="suspend"))
    answer(store, aid, "deny", "no", keys["alice"])
    (call,) = Recorder(store, policy=policy(CHANGED["allow"])).resume(run_id, {("db", "write_query"): tool}).resumed_calls
    assert (call.outcome, tool.calls) == ("denied", [])
    assert [e.payload.get("reevaluated") for e in store.read_run(run_id) if e.kind == "policy.decision"] == [None]


def test_resuming_an_unknown_run_is_an_error(store):
    with pytest.raises(RecordingError, match="no run"):
        Recorder(store, policy=policy()).resume("nope")


def test_a_suspended_run_stays_suspended_when_its_approval_is_answered_until_it_resumes(store, keys):
    """runs list --status used the run's last event: approval.answered after run.suspended made the
    run 'running' (and --status suspended missed exactly the runs an operator has to resume)."""
    from sealbox.approvals import answer

    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: "ran")
    status = lambda: (store.get_run(run.run_id)["status"], [r["run_id"] for r in store.query_runs(status="suspended")])  # noqa: E731
    assert status() == ("suspended", [run.run_id])
    answer(store, info.value.approval_id, "approve", "ok", keys["alice"])
    assert store.read_run(run.run_id)[-1].kind == "approval.answered"
    assert status() == ("suspended", [run.run_id])
    assert [r["run_id"] for r in store.query_runs(status="running")] == ["system"]  # the store's own run
    with rec.resume(run.run_id, tools={("db", "write_query"): lambda sql: "ran"}) as resumed:
        assert status() == ("running", [])
        assert [r["run_id"] for r in store.query_runs(status="running")] == [run.run_id, "system"]
        del resumed
    assert status() == ("ended", [])


SLOW_RESUMER = """
import os, sys, time
import sealbox
from sealbox.approvals import ApprovalError
from sealbox.recorder import Recorder
from approval_helpers import policy

store_path, run_id, started, release = sys.argv[1:5]
store = sealbox.open_store(store_path)
rec = Recorder(store, policy=policy())

def write_query(sql):
    open(started, "w").close()  # the tool is running: tell the test
    while not os.path.exists(release):
        time.sleep(0.02)
    return "deleted 3 rows"

try:
    with rec.resume(run_id, {("db", "write_query"): write_query}) as run:
        print(*[(c.outcome, c.ran) for c in run.resumed_calls])
except ApprovalError as exc:
    print("refused", exc.code)
store.close()
"""


def _slow_resumer(tmp_path, store_path, run_id):
    script = tmp_path / "slow.py"
    script.write_text(SLOW_RESUMER)
    started, release = tmp_path / "started", tmp_path / "release"
    here = str(__import__("pathlib").Path(__file__).parent)
    proc = subprocess.Popen([sys.executable, str(script), store_path, run_id, str(started), str(release)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": here})
    import time

    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return proc, release


def test_a_second_process_cannot_resume_a_run_another_live_process_is_running(tmp_path, keys, store):
    """The loser of two resumers found nothing open, attached to the run as it was, and ended it on
    leaving its `with` block while the winner's tool still ran: the winner's tool.result was refused
    ('run has ended'), so the record said outcome unknown for a DELETE that had run."""
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["alice"])
    path = str(store.path)
    store.close()
    proc, release = _slow_resumer(tmp_path, path, run_id)
    try:
        other = sealbox.open_store(path)
        with pytest.raises(ApprovalError) as info:
            with Recorder(other, policy=policy()).resume(run_id, {("db", "write_query"): lambda **_: "twice"}):
                pass
        assert info.value.code == "already_resumed" and "still running" in str(info.value)
        other.close()
    finally:
        release.touch()
        out, err = proc.communicate(timeout=60)
    assert out == "('approved', True)\n", err
    again = sealbox.open_store(path)
    events = again.read_run(run_id)
    assert [e.kind for e in events][-4:] == ["approval.answered", "run.resumed", "tool.result", "run.ended"]
    assert [e.payload["ok"] for e in events if e.kind == "tool.result"] == [True]
    again.close()


def test_a_run_whose_resuming_process_died_can_be_resumed_and_reports_the_call_unknown(tmp_path, keys, store):
    import signal

    rec = Recorder(store, policy=policy(), approvals="suspend")
    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["alice"])
    path = str(store.path)
    store.close()
    proc, _ = _slow_resumer(tmp_path, path, run_id)
    proc.send_signal(signal.SIGKILL)  # dies while its tool runs: the OS drops its lock
    proc.communicate(timeout=60)
    again = sealbox.open_store(path)
    tool = Tool()
    run = Recorder(again, policy=policy()).resume(run_id, {("db", "write_query"): tool})
    assert [(c.outcome, c.ran) for c in run.resumed_calls] == [("unknown", False)] and tool.calls == []
    run.end()
    assert kinds(again, run_id)[-2:] == ["run.resumed", "run.ended"]
    again.close()


BLOCKING_AGENT = """
import os, sys, time
import sealbox
from sealbox.recorder import Recorder
from approval_helpers import policy

store_path, started, release = sys.argv[1:4]
store = sealbox.open_store(store_path)
rec = Recorder(store, policy=policy(), approvals="block", approval_timeout=60, approval_poll=1.5)

def write_query(sql):
    open(started, "w").close()
    while not os.path.exists(release):
        time.sleep(0.02)
    return "deleted 3 rows"

with rec.run(agent="bot") as run:
    print(run.call_tool("db", "write_query", {"sql": "DELETE"}, write_query), flush=True)
store.close()
"""


def test_a_resume_in_another_process_is_refused_while_a_blocking_agent_waits_for_the_answer(tmp_path, keys, store):
    """The blocking agent's wait and a resume elsewhere both claimed the answer: the resumer won, ran
    the tool, and the waiting agent failed with already_resumed and ended the run under it."""
    import time

    path = str(store.path)
    script = tmp_path / "blocking.py"
    script.write_text(BLOCKING_AGENT)
    started, release = tmp_path / "started", tmp_path / "release"
    here = str(__import__("pathlib").Path(__file__).parent)
    proc = subprocess.Popen([sys.executable, str(script), path, str(started), str(release)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**__import__("os").environ, "PYTHONPATH": here})
    try:
        deadline = time.monotonic() + 60
        while not [e for e in store.reader().events(["approval.requested"])]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        [req] = store.reader().events(["approval.requested"])
        answer(store, req.payload["approval_id"], "approve", "ok", keys["alice"])
        tool = Tool()
        with pytest.raises(ApprovalError) as info:  # before the agent's next poll
            Recorder(store, policy=policy()).resume(req.run_id, {("db", "write_query"): tool})
        assert info.value.code == "already_resumed" and tool.calls == []
    finally:
        release.touch()
        out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "deleted 3 rows\n"), err
    assert kinds(store, req.run_id)[-4:] == ["approval.answered", "run.resumed", "tool.result", "run.ended"]


SLOW_TO_WAIT_AGENT = BLOCKING_AGENT.replace("import sealbox\n", """import sealbox
import sealbox.pause
_await = sealbox.pause.await_approval
def _slow(run, request):  # the request is committed; this process is slow to begin its wait: until the
    while not os.path.exists(release):  # test has tried its resume (a pause of any length, no fixed 3 s)
        time.sleep(0.02)
    return _await(run, request)
sealbox.pause.await_approval = _slow
""", 1)


def test_a_blocking_agent_holds_its_run_from_the_moment_its_request_is_visible(tmp_path, keys, store):
    """The run's lease is taken before the request is committed, not when the wait begins: a resume
    elsewhere in between (here, the agent pauses until the resume was tried; under load, a slow scheduler) is refused,
    the resumer's tool does not run, and the agent runs the call itself once it waits."""
    import time

    path = str(store.path)
    script = tmp_path / "slow.py"
    script.write_text(SLOW_TO_WAIT_AGENT)
    assert script.read_text() != BLOCKING_AGENT
    started, release = tmp_path / "started", tmp_path / "release"
    here = str(__import__("pathlib").Path(__file__).parent)
    proc = subprocess.Popen([sys.executable, str(script), path, str(started), str(release)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**__import__("os").environ, "PYTHONPATH": here})
    try:
        deadline = time.monotonic() + 60
        while not [e for e in store.reader().events(["approval.requested"])]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        [req] = store.reader().events(["approval.requested"])
        answer(store, req.payload["approval_id"], "approve", "ok", keys["alice"])
        tool = Tool()
        with pytest.raises(ApprovalError) as info:  # the agent is still in its pause (until release)
            Recorder(store, policy=policy()).resume(req.run_id, {("db", "write_query"): tool})
        assert info.value.code == "already_resumed" and tool.calls == []
    finally:
        release.touch()
        out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (0, "deleted 3 rows\n"), err
    assert kinds(store, req.run_id)[-4:] == ["approval.answered", "run.resumed", "tool.result", "run.ended"]


def test_a_blocking_call_in_a_run_another_live_process_holds_waits_as_before(tmp_path, keys, store):
    """Two processes attached to one run: the one that blocks for an answer cannot take the run's
    lock (the other holds it) and waits without it, instead of failing with already_resumed."""
    rec = Recorder(store, policy=policy(), approvals="suspend")
    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["alice"])
    path = str(store.path)
    store.close()
    proc, release = _slow_resumer(tmp_path, path, run_id)  # holds the run while its tool runs
    try:
        other = sealbox.open_store(path)
        run = Recorder(other, policy=policy(), approvals="block", approval_timeout=0.2,
                       approval_poll=0.05).continue_run(run_id)
        with pytest.raises(ApprovalPending):
            run.call_tool("db", "deploy", {"sql": "x"}, lambda **_: pytest.fail("ran unapproved"))
        other.close()
    finally:
        release.touch()
        out, err = proc.communicate(timeout=60)
    assert out == "('approved', True)\n", err


def test_a_decorated_tool_given_to_resume_runs_once_as_the_approved_call(store, keys):
    # was: recorder.resume(run_id, {("db", "write_query"): write_query}) with write_query decorated by
    # @recorder.tool ran the wrapper, which records a call of its own (or, with no run current, refuses)
    rec = Recorder(store, policy=policy(), approvals="suspend")
    ran = []

    @rec.tool("db")
    def write_query(sql):
        ran.append(sql)
        return "deleted 3 rows"

    run_id, aid = suspend(store, rec)
    answer(store, aid, "approve", "ok", keys["bob"])
    with rec.resume(run_id, {("db", "write_query"): write_query}) as run:
        (call,) = run.resumed_calls
    assert (call.outcome, call.ran, call.value(), ran) == ("approved", True, "deleted 3 rows", ["DELETE"])
    assert [(e.step, e.kind) for e in store.read_run(run_id) if e.kind.startswith("tool.")] == [
        ("2", "tool.call"), ("2", "tool.result")]
    assert [e.payload["ok"] for e in store.read_run(run_id) if e.kind == "tool.result"] == [True]
    assert verify_store(store).ok


@pytest.mark.skipif(not __import__("os").environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="needs SEALBOX_TEST_POSTGRES_URL")
def test_a_second_machine_cannot_resume_a_postgres_run_another_live_process_is_running(tmp_path):
    """On a PostgreSQL store the run's lease was only a lock in the local folder's resume.lock: a
    process using another folder of the same store (another machine: docs/storage.md keeps a folder on
    every machine that writes) was not refused, attached to the run while the first process's tool ran,
    and ended it under it. The lease is now also held in the database (a session advisory lock)."""
    import os
    import shutil
    import uuid

    from identity_testkit import admin_key
    from sealbox.identities import add_identity

    psycopg = pytest.importorskip("psycopg")
    url, schema = os.environ["SEALBOX_TEST_POSTGRES_URL"], f"sbt_lease_{uuid.uuid4().hex[:12]}"
    try:
        store = sealbox.init_store(tmp_path / "a", postgres_url=url, schema=schema)
        alice = add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key",
                             admin_key=admin_key(store, tmp_path)).key_path
        run_id, aid = suspend(store, Recorder(store, policy=policy(), approvals="suspend"))
        answer(store, aid, "approve", "ok", alice)
        store.close()
        shutil.copytree(tmp_path / "a", tmp_path / "b")
        proc, release = _slow_resumer(tmp_path, str(tmp_path / "a"), run_id)
        try:
            other = sealbox.open_store(tmp_path / "b")
            with pytest.raises(ApprovalError) as info:
                with Recorder(other, policy=policy()).resume(run_id, {("db", "write_query"): lambda **_: "twice"}):
                    pass
            assert info.value.code == "already_resumed" and "still running" in str(info.value)
            other.close()
        finally:
            release.touch()
            out, err = proc.communicate(timeout=60)
        assert out == "('approved', True)\n", err
        again = sealbox.open_store(tmp_path / "b")
        events = again.read_run(run_id)
        assert [e.kind for e in events][-4:] == ["approval.answered", "run.resumed", "tool.result", "run.ended"]
        assert [e.payload["ok"] for e in events if e.kind == "tool.result"] == [True]
        again.close()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
