"""The identities and approvals commands, run as a user would (subprocess, real store)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from approval_helpers import policy

import sealbox
from sealbox.approvals import ApprovalPending
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


def test_identities_and_approvals_from_the_command_line(init_store, tmp_path):
    path = tmp_path / "store"
    assert sb(*init_store.cli_args(path)).returncode == 0
    first = sb("identities", "add", "alice", "--role", "approver", "--key-out", tmp_path / "a.key", "-s", path)
    assert (first.returncode, first.stderr) == (2, (
        "error: this store has no admin identity yet: add one first (`sealbox identities add NAME --role admin "
        "--key-out FILE`); its key signs every later identity change\n"))
    assert not (tmp_path / "a.key").exists()
    root = sb("identities", "add", "root", "--role", "admin", "--key-out", tmp_path / "root.key", "-s", path)
    assert root.returncode == 0, root.stderr
    assert root.stdout.splitlines()[2] == (
        f"root is this store's first admin: every later identity change must be signed with its key (--admin-key "
        f"{tmp_path / 'root.key'}); keep it away from the machines that run agents")
    unsigned = sb("identities", "add", "alice", "--role", "approver", "--key-out", tmp_path / "a.key", "-s", path)
    assert (unsigned.returncode, unsigned.stderr) == (
        2, "error: an identity change must be signed by an admin identity's key (--admin-key FILE)\n")
    out = sb("identities", "add", "alice", "--role", "approver", "--group", "ops", "--key-out", tmp_path / "a.key",
             "--admin-key", tmp_path / "root.key", "-s", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == f"private key written to {tmp_path / 'a.key'} (mode 0600); Sealbox keeps no copy: give it to alice only"
    assert len(out.stdout.splitlines()) == 2
    assert stat.S_IMODE(os.stat(tmp_path / "a.key").st_mode) == 0o600
    again = sb("identities", "add", "alice", "--role", "approver", "--key-out", tmp_path / "b.key",
               "--admin-key", tmp_path / "root.key", "-s", path)
    assert (again.returncode, again.stderr) == (2, "error: identity 'alice' already exists\n")
    by_approver = sb("identities", "add", "mallory", "--role", "approver", "--key-out", tmp_path / "m.key",
                     "--admin-key", tmp_path / "a.key", "-s", path)
    assert (by_approver.returncode, by_approver.stderr) == (2, (
        "error: identity 'alice' is not an admin (role approver): only an admin may make this change (an identity "
        "may only disable itself or change its own key)\n"))
    listed = json.loads(sb("identities", "list", "--json", "-s", path).stdout)
    assert [(i["name"], i["role"], i["groups"], i["disabled"]) for i in listed] == [
        ("alice", "approver", ["ops"], False), ("root", "admin", [], False)]
    store = sealbox.open_store(path)
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: "ran")
    store.close()
    aid = info.value.approval_id
    pending = json.loads(sb("approvals", "list", "--pending", "--json", "-s", path).stdout)
    assert [(r["approval_id"], r["status"]) for r in pending] == [(aid, "pending")]
    shown = sb("approvals", "show", aid, "-s", path).stdout
    assert f"approval   {aid}" in shown and "status     pending" in shown
    bad = sb("approvals", "approve", "apr_missing", "--reason", "x", "--key-file", tmp_path / "a.key", "-s", path)
    assert (bad.returncode, bad.stderr) == (2, "error: no approval request 'apr_missing' in this store\n")
    ok = sb("approvals", "deny", aid, "--reason", "no", "--key-file", tmp_path / "a.key", "-s", path)
    assert ok.stdout == f"alice denied {aid}; request is now denied\n"
    table = sb("approvals", "list", "-s", path).stdout
    assert "│ alice " in table and '["alice"]' not in table  # decided_by as names, not JSON
    late = sb("approvals", "approve", aid, "--reason", "changed my mind", "--key-file", tmp_path / "a.key", "-s", path)
    assert late.returncode == 2 and late.stderr.startswith(f"error: approval {aid} was already denied by alice")
    assert json.loads(sb("approvals", "list", "--flagged", "--json", "-s", path).stdout) == []
    assert sb("identities", "disable", "alice", "-s", path).returncode == 2  # --admin-key is required
    assert sb("identities", "disable", "alice", "--admin-key", tmp_path / "root.key", "-s", path).stdout == \
        "identity alice disabled\n"
    rotated = sb("identities", "rotate", "alice", "--key-out", tmp_path / "a2.key", "--admin-key", tmp_path / "root.key",
                 "-s", path)
    assert rotated.returncode == 0 and (tmp_path / "a2.key").exists()
    assert sb("verify", path).returncode == 0


def test_every_new_command_has_help():
    for group in ("identities", "approvals"):
        out = sb(group, "--help")
        assert out.returncode == 0
        for line in out.stdout.split("Commands:")[1].strip().splitlines():
            assert len(line.split(None, 1)) == 2, f"{group}: {line!r} has no help text"


def test_approvals_show_prints_each_recorded_field_on_its_own_line(init_store, tmp_path):
    """A tool name or a reason holding a newline was printed raw by `approvals show`, so the agent (its tool
    name) could add an `arguments  {}` line above the real one, and an approver's reason a `decided by` line:
    the screen an approver reads before approving. Newlines in recorded text are now shown as \\n."""
    from identity_testkit import admin_key
    from sealbox.identities import add_identity

    path = tmp_path / "store"
    store = init_store(path)
    add_identity(store, "alice", "approver", ["ops"], key_path=tmp_path / "alice.key", admin_key=admin_key(store, tmp_path))
    rules = policy("""
    version: 1
    rules:
      - id: all
        match: {}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
    """)
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=rules, approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query\narguments  {}", {"sql": "DROP TABLE t"}, lambda sql: "ran")
    store.close()
    aid = info.value.approval_id
    shown = sb("approvals", "show", aid, "-s", path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line for line in lines if line.startswith("arguments")] == ['arguments  {"sql": "DROP TABLE t"}']
    assert lines[3].endswith("  db/write_query\\narguments  {}")
    denied = sb("approvals", "deny", aid, "--reason", "no\ndecided by carol", "--key-file", tmp_path / "alice.key",
                "-s", path)
    assert denied.returncode == 0, denied.stderr
    lines = sb("approvals", "show", aid, "-s", path).stdout.splitlines()
    assert [line for line in lines if line.startswith("decided by")] == ["decided by alice"]
    assert lines[-1].endswith(" alice deny (counts): no\\ndecided by carol")


def test_approve_prints_its_own_answer_when_another_lands_before_it_reads_the_request_back(init_store, tmp_path,
                                                                                         monkeypatch):
    """`approvals approve` printed the last answer of the request as read back after writing its own: when
    another approver's answer was committed in between (two approvers of a quorum-2 request answering at
    once), alice's command said `carol approved ...` and showed carol's flags. It now prints its own answer."""
    from click.testing import CliRunner
    from identity_testkit import admin_key

    import sealbox.approvals as approvals
    from sealbox.cli.main import cli
    from sealbox.identities import add_identity

    path = tmp_path / "store"
    store = init_store(path)
    for name, groups in (("alice", ["ops"]), ("bob", ["ops"]), ("carol", [])):
        add_identity(store, name, "approver", groups, key_path=tmp_path / f"{name}.key",
                     admin_key=admin_key(store, tmp_path))
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "deploy", {"env": "prod"}, lambda env: "ran")
    store.close()
    aid = info.value.approval_id
    read_back = approvals.get_approval

    def carol_answers_first(store, approval_id, *args, **kwargs):  # carol's process commits in between
        monkeypatch.setattr(approvals, "get_approval", read_back)
        approvals.answer(store, approval_id, "approve", "lgtm", tmp_path / "carol.key",
                         client={"hostname": "kiosk", "os_user": "ops"})
        return read_back(store, approval_id, *args, **kwargs)

    monkeypatch.setattr(approvals, "get_approval", carol_answers_first)
    out = CliRunner().invoke(cli, ["approvals", "approve", aid, "--reason", "ok", "--key-file",
                                   str(tmp_path / "alice.key"), "-s", str(path)])
    assert (out.exit_code, out.output) == (0, f"alice approved {aid}; request is now approved\n")
