"""quorum_same_client: two approvers of one request answering from the same client.

A request needing two approvers (``deploys-need-two``) met by alice and carol answering from
the same host and OS user raised no flag: ``approvals list --flagged`` said "no approval
requests match", though one person holding two keys defeats the four-eyes rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from approval_helpers import policy
from identity_testkit import admin_key
from test_approval_index import backend  # noqa: F401  (the sqlite and PostgreSQL stores)

from sealbox import EventDraft
from sealbox.approvals import ApprovalPending, answer, get_approval, list_approvals, local_client, signed_fields
from sealbox.identities import add_identity, load_key, sign_fields
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "400"})


def _deploy_request(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("ci", "deploy", {"env": "prod"}, lambda **_: "ran")
    return info.value.approval_id


@pytest.fixture
def two_man(backend, tmp_path):  # noqa: F811
    """A store on the backend with approvers alice (ops) and carol, and a pending deploy (quorum 2)."""
    name, init, _ = backend
    store = init(tmp_path / "store")
    keys = {}
    for who, groups in (("alice", ["ops"]), ("carol", []), ("bob", ["ops"])):
        keys[who] = add_identity(store, who, "approver", groups, key_path=tmp_path / f"{who}.key",
                                 admin_key=admin_key(store, tmp_path)).key_path
    aid = _deploy_request(store)
    yield store, keys, aid
    store.close()


def test_two_approvers_answering_from_one_client_are_flagged_in_list_and_show(two_man, tmp_path):
    store, keys, aid = two_man
    path = tmp_path / "store"
    for who in ("alice", "carol"):
        out = sb("approvals", "approve", aid, "--reason", "ok", "--key-file", keys[who], "-s", path)
        assert out.returncode == 0, out.stderr
    here = local_client()
    state = get_approval(store, aid)
    assert state.status == "approved" and state.decided_by == ("alice", "carol")
    assert [a.flags for a in state.answers][0] == ()
    [flag] = state.answers[1].flags
    ev = flag["evidence"]
    assert flag["code"] == "quorum_same_client"
    assert (ev["approval_id"], ev["quorum"], ev["client"], ev["identities"]) == (
        aid, 2, {"hostname": here["hostname"], "os_user": here["os_user"]}, ["alice", "carol"])
    assert [(a["identity"], a.get("leaf_index"), a["hostname"], a["os_user"]) for a in ev["answers"]] == [
        ("alice", state.answers[0].leaf_index, here["hostname"], here["os_user"]),
        ("carol", None, here["hostname"], here["os_user"])]
    # written on the recorded answer, as the other flags are
    [recorded] = [e.payload for e in store.reader().events(["approval.answered"]) if e.payload["identity"] == "carol"]
    assert recorded["flags"] == [flag]

    listed = sb("approvals", "list", "--flagged", "-s", path)
    assert listed.returncode == 0 and "no approval requests match" not in listed.stdout + listed.stderr
    assert aid in listed.stdout and "carol:quorum_same_client" in listed.stdout
    as_json = json.loads(sb("approvals", "list", "--flagged", "--json", "-s", path).stdout)
    assert [(r["approval_id"], [(f["identity"], f["code"]) for f in r["flags"]]) for r in as_json] == [
        (aid, [("carol", "quorum_same_client")])]
    shown = sb("approvals", "show", aid, "-s", path)
    assert shown.returncode == 0
    assert f"  flag     quorum_same_client: {json.dumps(ev, ensure_ascii=False)}" in shown.stdout.splitlines()
    report = tmp_path / "report.md"
    made = sb("report", state.run_id, "-o", report, "--no-verify", "-s", path)
    assert made.returncode == 0, made.stderr
    assert report.read_text().count(r"  - flag **quorum\_same\_client**") == 1


def test_approvers_on_distinct_clients_and_one_approver_are_not_flagged(two_man):
    store, keys, aid = two_man
    answer(store, aid, "approve", "ok", keys["alice"], client={"hostname": "laptop", "os_user": "alice"})
    # the same OS user on another host is another client
    state = answer(store, aid, "approve", "ok", keys["carol"], client={"hostname": "desk", "os_user": "alice"})
    assert state.status == "approved" and [a.flags for a in state.answers] == [(), ()]
    assert list_approvals(store, flagged=True) == []


def test_an_answer_recorded_without_the_flag_gets_it_from_the_log(two_man):
    """The flags are not signed: an answer written around answer() without the flag is flagged by readers."""
    store, keys, aid = two_man
    client = {"hostname": "kiosk", "os_user": "ops", "user_agent": "sealbox-cli/0.1.0"}
    first = answer(store, aid, "approve", "ok", keys["alice"], client=client)
    req = next(e for e in store.reader().events(["approval.requested"]) if e.payload["approval_id"] == aid)
    payload = {"approval_id": aid, "binding": req.payload["binding"], "decision": "approve", "identity": "carol",
               "reason": "ok", "answered_at": first.answers[0].answered_at,
               "client": {"hostname": "kiosk", "os_user": "ops", "user_agent": "curl/8"}, "run_id": req.run_id}
    payload["signature"] = sign_fields(load_key(keys["carol"]), signed_fields(payload))
    payload["flags"] = []
    [written] = store.append([EventDraft("approval.answered", payload, run_id=req.run_id, principal="carol",
                                         step=req.step)])
    state = get_approval(store, aid)
    assert state.status == "approved"
    [flag] = state.answers[1].flags
    assert flag == {"code": "quorum_same_client", "evidence": {
        "approval_id": aid, "quorum": 2, "client": {"hostname": "kiosk", "os_user": "ops"},
        "identities": ["alice", "carol"],
        "answers": [{"identity": "alice", "answered_at": first.answers[0].answered_at,
                     "leaf_index": first.answers[0].leaf_index, **client},
                    {"identity": "carol", "answered_at": first.answers[0].answered_at,
                     **payload["client"]}]}}
    assert written.leaf_index == state.answers[1].leaf_index
    assert [s.approval_id for s in list_approvals(store, flagged=True)] == [aid]
