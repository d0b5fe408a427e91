"""Run and approval ids may be given by a unique prefix (at least 4 characters), as git takes commits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox import EventDraft
from sealbox.approvals import ApprovalPending
from sealbox.policy import Policy
from sealbox.recorder import Recorder

ZERO_FP = "sha256:" + "0" * 64
RUNS = ("run-alpha-1", "run-alpha-2", "run-beta", "run-x", "run-x2")
POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
"""


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, list[str], Path]:
    tmp = tmp_path_factory.mktemp("prefixes")
    path = tmp / "store"
    assert sb("init", path).returncode == 0
    assert sb("identities", "add", "root", "--role", "admin", "--key-out", tmp / "root.key", "-s", path).returncode == 0
    assert sb("identities", "add", "alice", "--role", "approver", "--group", "ops", "--key-out", tmp / "a.key",
              "--admin-key", tmp / "root.key", "-s", path).returncode == 0
    store = sealbox.open_store(path)
    for rid in RUNS:
        store.append([
            EventDraft("run.started", {"agent": "bot", "snapshot": None, "parent_run_id": None, "labels": {},
                                       "policy": {"fingerprint": ZERO_FP, "name": None}}, run_id=rid, principal="agent:bot"),
            EventDraft("run.ended", {"status": "ok"}, run_id=rid, principal="agent:bot"),
        ])
    approvals = []
    for _ in range(2):
        with pytest.raises(ApprovalPending) as info:
            with Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend").run(agent="bot") as run:
                run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: "ran")
        approvals.append(info.value.approval_id)
    store.close()
    return path, approvals, tmp / "a.key"


def test_a_unique_run_prefix_names_the_run(sample) -> None:
    path, _, _ = sample
    full = sb("runs", "show", "run-beta", "-s", path, "--json")
    short = sb("runs", "show", "run-b", "-s", path, "--json")
    assert full.returncode == short.returncode == 0, short.stderr
    assert short.stdout == full.stdout and [r["kind"] for r in json.loads(short.stdout)["events"]] == ["run.started", "run.ended"]
    assert sb("report", "run-b", "-s", path, "--no-verify").stdout.startswith("# Sealbox incident report: run `run-beta`\n")


def test_an_id_that_is_also_a_prefix_of_another_is_itself(sample) -> None:
    path, _, _ = sample
    res = sb("runs", "show", "run-x", "-s", path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("run      run-x  agent bot")


@pytest.mark.parametrize("args, message", [
    (("runs", "show", "run-alpha"), "error: run id prefix 'run-alpha' is ambiguous: it starts run-alpha-1, run-alpha-2 "
                                    "(give more characters)"),
    (("runs", "show", "run-"), "error: run id prefix 'run-' is ambiguous: it starts run-alpha-1, run-alpha-2, run-beta, "
                               "run-x, run-x2 (give more characters)"),
    (("runs", "show", "run"), "error: no run 'run'; an id prefix needs at least 4 characters"),
    (("runs", "show", "zzzz"), "error: no run 'zzzz' in this store"),
    (("export", "run-alpha", "-o", "x.sbx"), "error: run id prefix 'run-alpha' is ambiguous"),
])
def test_an_ambiguous_short_or_unknown_prefix_is_one_error_line(sample, args, message) -> None:
    path, _, _ = sample
    res = sb(*args, "-s", path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1, res.stderr


def test_approvals_by_prefix(sample) -> None:
    path, (first, second), key = sample
    assert first[:4] == second[:4] == "apr_"
    n = next(i for i in range(4, len(first)) if first[:i] != second[:i])  # the shortest unique prefix
    n = max(n, 7)  # and 4 characters after apr_
    shown = sb("approvals", "show", first[:n + 1], "-s", path)
    assert shown.returncode == 0 and f"approval   {first}" in shown.stdout
    res = sb("approvals", "show", "apr_", "-s", path)
    assert (res.returncode, res.stderr) == (
        2, "error: no approval 'apr_'; an approval id prefix needs at least 4 characters after apr_\n")
    done = sb("approvals", "deny", second[:n + 1], "--reason", "no", "--key-file", key, "-s", path)
    assert done.stdout == f"alice denied {second}; request is now denied\n", done.stderr
    assert sb("verify", path).returncode == 0


def test_a_pasted_id_in_upper_case_or_with_a_newline_names_the_run(tmp_path) -> None:
    """`runs show 01A2…` (an id upper-cased by a GUID tool) or an id pasted with its newline said
    "no run … in this store" although the run was there."""
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        run.note("hello")
    store.close()
    rid = run.run_id
    for given in (rid.upper(), rid[:13].upper(), rid + "\n", " " + rid[:8]):
        proc = sb("runs", "show", given, "-s", tmp_path / "s", "--json")
        assert proc.returncode == 0, (given, proc.stderr)
        assert json.loads(proc.stdout)["run"]["run_id"] == rid
    proc = sb("runs", "show", "FFFF" + rid.upper()[4:], "-s", tmp_path / "s")
    assert (proc.returncode, proc.stderr) == (2, f"error: no run {'FFFF' + rid.upper()[4:]!r} in this store\n")


def test_apr_alone_names_no_approval_request(tmp_path) -> None:
    """`approvals approve apr_` (every approval id starts so: no character of the id itself) signed an
    approval of whichever request was the store's only one; 4 characters after `apr_` are needed."""
    path = tmp_path / "store"
    assert sb("init", path).returncode == 0
    assert sb("identities", "add", "root", "--role", "admin", "--key-out", tmp_path / "root.key", "-s", path).returncode == 0
    assert sb("identities", "add", "alice", "--role", "approver", "--group", "ops", "--key-out", tmp_path / "a.key",
              "--admin-key", tmp_path / "root.key", "-s", path).returncode == 0
    store = sealbox.open_store(path)
    with pytest.raises(ApprovalPending) as info:
        with Recorder(store, policy=Policy.from_text(POLICY), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE"}, lambda sql: "ran")
    store.close()
    aid = info.value.approval_id
    for given in ("apr_", "APR_", "apr_" + aid[4:7]):
        res = sb("approvals", "approve", given, "--reason", "ok", "--key-file", tmp_path / "a.key", "-s", path)
        assert (res.returncode, res.stdout, res.stderr) == (
            2, "", f"error: no approval {given.lower()!r}; an approval id prefix needs at least 4 characters after apr_\n")
    listed = json.loads(sb("approvals", "list", "--json", "-s", path).stdout)
    assert [(r["approval_id"], r["status"], r["decided_by"]) for r in listed] == [(aid, "pending", [])]
    done = sb("approvals", "approve", aid[:8], "--reason", "ok", "--key-file", tmp_path / "a.key", "-s", path)
    assert done.stdout == f"alice approved {aid}; request is now approved\n", done.stderr


def test_an_id_shortened_for_display_with_an_ellipsis_names_the_run(tmp_path) -> None:
    """The tables and the README show ids cut with "…" (`runs list`'s replay-of column
    `01a24305-f521…`, `sealbox report 01a2286f-… -o incident.html`); pasting one said
    "no run '01a24305-…' in this store". The text before the ellipsis is a prefix."""
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        run.note("hello")
    store.close()
    rid = run.run_id
    for given in (rid[:13] + "…", rid[:9] + "…", rid[:9] + "..."):
        proc = sb("runs", "show", given, "-s", tmp_path / "s", "--json")
        assert proc.returncode == 0, (given, proc.stderr)
        assert json.loads(proc.stdout)["run"]["run_id"] == rid
    for given in ("ffff…", rid[:3] + "…"):  # no id starts so / too short: the error names what was typed
        proc = sb("runs", "show", given, "-s", tmp_path / "s")
        assert proc.returncode == 2 and proc.stderr.startswith(f"error: no run {given!r}"), proc.stderr


@pytest.mark.parametrize("given", ["run-x…", "run-x..."])
def test_an_id_cut_with_an_ellipsis_that_is_also_a_whole_id_is_ambiguous(sample, given) -> None:
    """`run-x…` is an id cut for display: any id starting `run-x`, `run-x2` as well as `run-x`. It
    named `run-x` silently (the exact match of the text before the ellipsis), whichever was cut."""
    path, _, _ = sample
    res = sb("runs", "show", given, "-s", path)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == ("error: run id prefix 'run-x' is ambiguous: it starts run-x, run-x2 "
                          "(give more characters)\n")


@pytest.mark.parametrize("cmd, given, message", [
    # an approval id's hex without its apr_ tag, 3 characters: said "no approval request '8e2' in this store"
    (("approvals", "show"), "{a3}", "error: no approval '{a3}'; an id prefix needs at least 4 characters\n"),
    (("approvals", "show"), "{A3}", "error: no approval '{A3}'; an id prefix needs at least 4 characters\n"),
    (("approvals", "show"), "apr_{a1}", "error: no approval 'apr_{a1}'; an approval id prefix needs at least 4 "
                                        "characters after apr_\n"),
    (("approvals", "show"), "zzz", "error: no approval 'zzz'; an id prefix needs at least 4 characters\n"),
    (("approvals", "show"), " ", "error: no approval ' '; an id prefix needs at least 4 characters\n"),
    (("runs", "show"), "zzz", "error: no run 'zzz'; an id prefix needs at least 4 characters\n"),
    (("runs", "show"), "ru", "error: no run 'ru'; an id prefix needs at least 4 characters\n"),
    (("report",), "zzz", "error: no run 'zzz'; an id prefix needs at least 4 characters\n"),
])
def test_a_too_short_prefix_says_so_whether_or_not_it_starts_an_id(sample, cmd, given, message) -> None:
    """Too short is said as such for every id a command takes, not "no … in this store" for some texts
    (those starting no id, an approval id's hex without its apr_) and "too short" for others."""
    path, (first, _), _ = sample
    hexpart = first[len("apr_"):]
    fill = {"a3": hexpart[:3], "A3": hexpart[:3].upper(), "a1": hexpart[:1]}
    res = sb(*cmd, given.format(**fill), "-s", path)
    assert (res.returncode, res.stdout, res.stderr) == (2, "", message.format(**fill))
