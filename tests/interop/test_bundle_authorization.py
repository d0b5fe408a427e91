"""A bundle carries the authorization evidence of its runs (docs/bundle-format.md, *What is exported*).

One real store: an admin signs grants, an SDK run calls under them, a grant is revoked (signed steps)
and a call under it is denied; a real gateway session in front of the toy upstream sees the tool change
(``tools.changed``), an approver re-approves it with ``reapprove`` and the call runs again. The export
must carry exactly the ``access.granted`` / ``access.revoked`` of the grants the calls name and the
``tools.changed`` / ``tool.reapproved`` of the servers and tools they called, each proven, and the
bundle verifier must run the store's grant, revocation and re-approval checks on them, offline.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import anyio
import pytest
from bundle_helpers import cli, members, rebuild_manifest, rezip

import sealbox
from sealbox.access import GRANT_PROBLEMS, grant_access, revoke
from sealbox.events import SYSTEM_RUN_ID, EventDraft
from sealbox.gateway import Gateway
from sealbox.gateway.pinning import reapprove
from sealbox.identities import add_identity
from sealbox.interop.bundle import DIGESTED, FORMAT_TEXT, export_digest, export_extension
from sealbox.interop.bundle_verify import verify_bundle
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, RunContext, ToolDenied
from identity_testkit import admin_key, sign_grant_payload


def _gateway_helpers():
    """tests/gateway/conftest.py's toy upstream config and in-memory MCP client."""
    spec = importlib.util.spec_from_file_location("gateway_test_helpers", Path(__file__).parents[1] / "gateway" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_gw = _gateway_helpers()
connect, running, text_of, toy_config = _gw.connect, _gw.running, _gw.text_of, _gw.toy_config

AGENT = "agent:deploy-bot"
AUTH_KINDS = ("access.granted", "access.revoked", "tools.changed", "tool.reapproved")


def _sdk_run(store, calls):
    """One recorded run of ``deploy-bot``: each (grant) a github/create_issue call; (run id, outcomes)."""
    outcomes = []
    with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
        for grant in calls:
            try:
                outcomes.append(run.call_tool("github", "create_issue", {"title": grant}, lambda title: "ok",
                                              grant=grant))
            except ToolDenied as exc:
                outcomes.append(exc.decision.reason_code)
    return run.run_id, outcomes


def _gateway_run(tmp: Path, store, alice):
    """A gateway session: echo, mutate (echo changes, extra appears), re-approve echo (and extra, which
    the run never calls), echo again. Returns the session's run id."""
    before = {r["run_id"] for r in store.query_runs()}

    async def session():
        gw = Gateway(toy_config(tmp), store=store)
        async with running(gw) as tg, connect(gw, tg) as client:
            assert text_of(await client.call_tool("toy__echo", {"text": "before"})) == "before"
            await client.call_tool("toy__mutate", {})
            with anyio.fail_after(10):
                await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
            blocked = await client.call_tool("toy__echo", {"text": "blocked"})
            assert blocked.is_error is True
            await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "echo", "reviewed", alice))
            await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "extra", "reviewed", alice))
            assert text_of(await client.call_tool("toy__echo", {"text": "approved"})) == "approved"

    anyio.run(session)
    [rid] = [r["run_id"] for r in store.query_runs() if r["run_id"] not in before and r["run_id"] != SYSTEM_RUN_ID]
    return rid


def build(folder: Path, forge=None):
    """The store: (store path, {name: run id}, vkey, {name: leaf}) — ``forge(store, keys)`` may write more."""
    store = sealbox.init_store(folder / "store")
    try:
        root = admin_key(store, folder)
        keys = {"root": root}
        for name, role in (("boss", "admin"), ("alice", "approver")):
            keys[name] = add_identity(store, name, role, key_path=folder / f"{name}.key", admin_key=root).key_path
        for gid in ("g1", "g2", "g_unused"):
            grant_access(store, AGENT, "github", "create_*", "repo", key_file=keys["boss"], grant_id=gid)
        runs = {}
        runs["before"], out = _sdk_run(store, ["g1", "g2"])
        assert out == ["ok", "ok"]
        revoke(store, "g2", "leaked token", key_file=keys["alice"])
        revoke(store, "g_unused", "not needed", key_file=keys["alice"])
        runs["after"], out = _sdk_run(store, ["g1", "g2", "implicit:" + AGENT])
        assert out == ["ok", "grant_invalid", "ok"]
        runs["gateway"] = _gateway_run(folder, store, keys["alice"])
        if forge is not None:
            runs.update(forge(store, keys))
        leaves = {}
        for e in store.read_run(SYSTEM_RUN_ID):
            p = e.payload
            if e.kind == "access.granted":
                leaves[f"granted {p['grant_id']}"] = e.leaf_index
            elif e.kind == "access.revoked":
                leaves[f"revoked {p['grant_id']} {p['step']}"] = e.leaf_index
            elif e.kind == "tools.changed":
                leaves[f"tools.changed {p['server']} {'first' if p.get('first_seen') else 'change'}"] = e.leaf_index
            elif e.kind == "tool.reapproved":
                leaves[f"reapproved {p['server']}/{p['tool']}"] = e.leaf_index
    finally:
        store.close()
    return folder / "store", runs, (folder / "store" / "log.vkey").read_text().strip(), leaves


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("authz")
    store_path, runs, vkey, leaves = build(folder)
    path = folder / "case.sbx"
    code, out, err = cli("export", "-s", store_path, runs["before"], runs["after"], runs["gateway"], "-o", path,
                         "--json", cwd=folder)
    assert code == 0, err
    return folder, store_path, runs, vkey, leaves, path


def system_lines(path):
    """(kind, leaf, payload) of the bundle's system-run events other than identity changes."""
    out = []
    for line in members(path)["events.jsonl"].splitlines():
        d = json.loads(line)
        e = d["event"]
        if e["run_id"] == SYSTEM_RUN_ID and e["kind"] != "identity.changed":
            out.append((e["kind"], d["leaf_index"], e["payload"]))
    return out


def test_the_bundle_carries_exactly_the_grants_revocations_changes_and_reapprovals_of_its_calls(case):
    _, _, _, _, leaves, path = case
    got = [(k, leaf) for k, leaf, _ in system_lines(path)]
    assert got == sorted([
        ("access.granted", leaves["granted g1"]), ("access.granted", leaves["granted g2"]),
        ("access.revoked", leaves["revoked g2 requested"]),
        ("tools.changed", leaves["tools.changed toy first"]), ("tools.changed", leaves["tools.changed toy change"]),
        ("tool.reapproved", leaves["reapproved toy/echo"]),
    ], key=lambda x: x[1])
    # never the grant no exported call names, its revocation, nor the re-approval of a tool no run called
    assert leaves["granted g_unused"] not in dict(got).values() and "reapproved toy/extra" in leaves
    assert members(path)["format"] == FORMAT_TEXT == b"sealbox-bundle/2\n"


def test_it_verifies_offline_and_the_manifest_counts_the_system_events(case, tmp_path):
    _, _, _, vkey, _, path = case
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = cli("verify", path, "--key", vkey, "--json", cwd=empty)
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] and report["problems"] == [] and report["notes"] == []
    identities = 3  # root, boss, alice
    assert report["system_events"] == identities + 6
    manifest = json.loads(members(path)["manifest.json"])
    assert manifest["format"] == "sealbox-bundle/2" and manifest["system_events"] == identities + 6
    assert list(empty.iterdir()) == []


def _resign(store_path, path, out, edit):
    """Edit the members, then do what the log's owner can: re-sign the export's checkpoint with the
    log key (same size, so every inclusion proof still holds) and rebuild the manifest."""
    m = members(path)
    edit(m)
    store = sealbox.open_store(store_path)
    try:
        cp = store.issue_checkpoint(extensions=(export_extension(export_digest([(n, m[n]) for n in DIGESTED])),))
    finally:
        store.close()
    m["checkpoint"] = cp.note.encode()
    rebuild_manifest(m)
    rezip(out, m)


def _drop(kinds_ids):
    def edit(m):
        keep = []
        for line in m["events.jsonl"].splitlines(keepends=True):
            e = json.loads(line)["event"]
            key = (e["kind"], e["payload"].get("grant_id") or e["payload"].get("tool") or e["payload"].get("server"))
            if e["run_id"] == SYSTEM_RUN_ID and key in kinds_ids:
                continue
            keep.append(line)
        m["events.jsonl"] = b"".join(keep)
    return edit


def test_a_grant_dropped_by_the_logs_owner_is_a_problem_naming_the_call(case, tmp_path):
    folder, store_path, runs, vkey, leaves, path = case
    out = tmp_path / "dropped.sbx"
    _resign(store_path, path, out, _drop({("access.granted", "g1")}))
    report = verify_bundle(out, trusted_vkey=vkey)
    assert [(p.code, p.run_id, p.kind) for p in report.problems] == [
        ("bundle_grant_missing", runs["before"], "tool.call"), ("bundle_grant_missing", runs["after"], "tool.call")]
    assert report.problems[0].message == (
        "the call names grant g1, which is not in the bundle: the bundle does not carry the evidence that authorized "
        "it (its access.granted was left out)")
    code, text, _ = cli("verify", out, "--key", vkey, cwd=tmp_path)
    assert code == 1 and text.splitlines()[0].startswith(f"bundle_grant_missing [events.jsonl line ")


def test_a_grant_dropped_from_the_bundle_without_the_key_is_also_caught_by_the_export_digest(case, tmp_path):
    _, _, runs, vkey, _, path = case
    m = members(path)
    _drop({("access.granted", "g2")})(m)
    rebuild_manifest(m)
    rezip(tmp_path / "d.sbx", m)
    report = verify_bundle(tmp_path / "d.sbx", trusted_vkey=vkey)
    assert [(p.code, p.run_id, p.kind) for p in report.problems] == [
        ("bundle_grant_missing", SYSTEM_RUN_ID, "access.revoked"), ("bundle_grant_missing", runs["before"], "tool.call"),
        ("export_digest_mismatch", None, None)]
    assert report.problems[0].message == ("the revocation step names grant g2, which is not in the bundle: its "
                                          "access.granted was left out")


def test_a_revoked_grant_whose_denied_call_names_it_needs_no_grant_in_the_bundle(case, tmp_path):
    """Only calls that were not denied must have their grant: a denied call was authorized by nothing."""
    folder, store_path, runs, vkey, leaves, _ = case
    path, out = tmp_path / "after.sbx", tmp_path / "r.sbx"
    assert cli("export", "-s", store_path, runs["after"], "-o", path, cwd=folder)[0] == 0
    assert [(k, leaf) for k, leaf, _ in system_lines(path)] == [
        ("access.granted", leaves["granted g1"]), ("access.granted", leaves["granted g2"]),
        ("access.revoked", leaves["revoked g2 requested"])]
    _resign(store_path, path, out, _drop({("access.granted", "g2"), ("access.revoked", "g2")}))
    report = verify_bundle(out, trusted_vkey=vkey)
    assert report.problems == () and report.ok and report.notes == ()
    _resign(store_path, path, out, _drop({("access.granted", "g1")}))
    assert [p.code for p in verify_bundle(out, trusted_vkey=vkey).problems] == ["bundle_grant_missing"]


def test_a_flipped_grant_signature_in_the_bundle_is_a_grant_signature_problem(case, tmp_path):
    _, _, _, vkey, leaves, path = case
    _flip_signature(path, leaves["granted g1"], tmp_path / "f.sbx")
    report = verify_bundle(tmp_path / "f.sbx", trusted_vkey=vkey)
    # and the calls it let run are not authorized by a grant that does not count
    under_g1 = [d["leaf_index"] for d in map(json.loads, members(path)["events.jsonl"].splitlines())
                if d["event"]["kind"] == "tool.call" and d["event"]["payload"]["grant"] == "g1"]
    assert len(under_g1) == 2
    assert [(p.code, p.leaf_index) for p in report.problems] == [
        ("inclusion_proof", leaves["granted g1"]), ("grant_signature", leaves["granted g1"]),
        *[("call_grant_invalid", leaf) for leaf in under_g1], ("export_digest_mismatch", None)]
    assert report.problems[2].message.startswith(
        "the call was not denied, though its grant did not authorize it: grant g1 does not count: its signature")
    assert cli("verify", tmp_path / "f.sbx", "--key", vkey, cwd=tmp_path)[0] == 1


def _flip_signature(path, leaf, out):
    m = members(path)
    lines = m["events.jsonl"].splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if json.loads(line)["leaf_index"] == leaf)
    sig = json.loads(lines[at])["event"]["payload"]["signature"]
    lines[at] = lines[at].replace(sig.encode(), (sig[:10] + ("A" if sig[10] != "A" else "B") + sig[11:]).encode())
    m["events.jsonl"] = b"".join(lines)
    rebuild_manifest(m)
    rezip(out, m)


def test_a_flipped_reapproval_signature_in_the_bundle_is_a_reapproval_signature_problem(case, tmp_path):
    _, _, _, vkey, leaves, path = case
    leaf = leaves["reapproved toy/echo"]
    _flip_signature(path, leaf, tmp_path / "r.sbx")
    report = verify_bundle(tmp_path / "r.sbx", trusted_vkey=vkey)
    assert [(p.code, p.leaf_index) for p in report.problems] == [
        ("inclusion_proof", leaf), ("reapproval_signature", leaf), ("export_digest_mismatch", None)]
    assert cli("verify", tmp_path / "r.sbx", "--key", vkey, cwd=tmp_path)[0] == 1


def test_a_revocation_step_with_a_flipped_signature_is_a_revocation_signature_problem(case, tmp_path):
    _, _, _, vkey, leaves, path = case
    leaf = leaves["revoked g2 requested"]
    _flip_signature(path, leaf, tmp_path / "v.sbx")
    report = verify_bundle(tmp_path / "v.sbx", trusted_vkey=vkey)
    assert [(p.code, p.leaf_index) for p in report.problems] == [
        ("inclusion_proof", leaf), ("revocation_signature", leaf), ("export_digest_mismatch", None)]


def test_a_reapproval_whose_tool_change_was_left_out_names_the_missing_change(case, tmp_path):
    _, store_path, _, vkey, leaves, path = case
    change, leaf = leaves["tools.changed toy change"], leaves["reapproved toy/echo"]

    def edit(m):
        m["events.jsonl"] = b"".join(line for line in m["events.jsonl"].splitlines(keepends=True)
                                     if json.loads(line)["leaf_index"] != change)
    _resign(store_path, path, tmp_path / "c.sbx", edit)
    report = verify_bundle(tmp_path / "c.sbx", trusted_vkey=vkey)
    assert [(p.code, p.kind, p.leaf_index) for p in report.problems] == [
        ("bundle_tool_change_missing", "tool.reapproved", leaf)]
    assert report.problems[0].message == (
        f"the re-approval of toy/echo names the tools.changed at leaf {change}, which is not in the bundle: what it "
        "approved cannot be checked (that event was left out)")


def _forged_store(tmp_path_factory):
    """The same story, then what only someone who can write the store below Sealbox can append: a grant
    signed by boss with its tool widened afterwards, and a copy of alice's re-approval of toy/echo with
    its reason changed; then a real call naming the forged grant (the recorder denies it)."""
    folder = tmp_path_factory.mktemp("forged")

    def forge(store, keys):
        base = {"grant_id": "g_wide", "principal": AGENT, "server": "github", "tool": "create_*", "scope": "repo",
                "expires_at": None, "provider": None, "credential": False}
        p = {**sign_grant_payload(store, base, keys["boss"]), "tool": "*"}
        store.append([EventDraft("access.granted", p, run_id=SYSTEM_RUN_ID, principal="boss")])
        # a real signed re-approval of toy/echo's pending definition cannot be made (it is approved): copy the
        # recorded one with another reason
        real = next(e.payload for e in store.read_run(SYSTEM_RUN_ID)
                    if e.kind == "tool.reapproved" and e.payload["tool"] == "echo")
        store.append([EventDraft("tool.reapproved", {**real, "reason": "changed later"}, run_id=SYSTEM_RUN_ID,
                                 principal="alice")])
        # a call naming the forged grant: the recorder denies it (grant_invalid), and records it
        run_id, out = _sdk_run(store, ["g_wide"])
        assert out == ["grant_invalid"]
        return {"forged": run_id}

    return build(folder, forge), folder


def test_what_the_logs_owner_forged_in_the_log_is_reported_from_the_bundle_as_verify_reports_it(tmp_path_factory):
    (store_path, runs, vkey, leaves), folder = _forged_store(tmp_path_factory)
    path = folder / "f.sbx"
    assert cli("export", "-s", store_path, runs["gateway"], runs["forged"], "-o", path, cwd=folder)[0] == 0
    store = sealbox.open_store(store_path, readonly=True)
    try:
        in_store = [(p.code, p.leaf_index) for p in sealbox.verify_store(store).problems]
        wide = next(e.leaf_index for e in store.read_run(SYSTEM_RUN_ID)
                    if e.kind == "access.granted" and e.payload["grant_id"] == "g_wide")
        bad = [e.leaf_index for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tool.reapproved"][-1]
    finally:
        store.close()
    assert in_store == [("reapproval_signature", bad), ("grant_signature", wide)]
    report = verify_bundle(path, trusted_vkey=vkey)
    # the same problems as verify of the store: the denied call names g_wide, the gateway run called toy/echo
    assert [(p.code, p.leaf_index) for p in report.problems] == in_store
    code, text, _ = cli("verify", path, "--key", vkey, cwd=folder)
    assert code == 1 and text.splitlines()[:2] == [
        f"reapproval_signature [events.jsonl line {_line_of(path, bad)}, run {SYSTEM_RUN_ID}, "
        f"run_seq {_seq_of(path, bad)}, tool.reapproved, leaf {bad}]: " + report.problems[0].message,
        f"grant_signature [events.jsonl line {_line_of(path, wide)}, run {SYSTEM_RUN_ID}, "
        f"run_seq {_seq_of(path, wide)}, access.granted, leaf {wide}]: " + report.problems[1].message]
    assert report.problems[1].message == (
        "the grant g_wide of github/* to 'agent:deploy-bot' by 'boss' does not count: "
        + GRANT_PROBLEMS["bad_signature"])


def _line_of(path, leaf):
    return next(n for n, line in enumerate(members(path)["events.jsonl"].splitlines(), 1)
                if json.loads(line)["leaf_index"] == leaf)


def _seq_of(path, leaf):
    return next(json.loads(line)["event"]["run_seq"] for line in members(path)["events.jsonl"].splitlines()
                if json.loads(line)["leaf_index"] == leaf)


def test_a_bundle_of_the_previous_format_verifies_with_a_note_on_the_grants_it_could_not_check(case, tmp_path):
    """A ``sealbox-bundle/1`` bundle (exported before grants travelled with their calls) holds no grant,
    revocation or tool change: its calls' grants are noted, not reported as missing."""
    _, store_path, runs, vkey, _, path = case
    out = tmp_path / "v1.sbx"

    def edit(m):
        _drop({(k, x) for k in AUTH_KINDS for x in ("g1", "g2", "echo", "toy")})(m)
        m["format"] = b"sealbox-bundle/1\n"
    _resign(store_path, path, out, edit)
    assert [k for k, _, _ in system_lines(out)] == []
    code, text, err = cli("verify", out, "--key", vkey, "--json", cwd=tmp_path)
    assert code == 0, text + err
    report = json.loads(text)
    assert report["ok"] and report["problems"] == []
    assert report["notes"] == [
        "this bundle is sealbox-bundle/1, written before bundles carried the authorization evidence of their calls: "
        "grants g1, g2 named by its calls, and the tool changes and re-approvals of the tools they called, could not "
        "be checked (verify the store, or export again with a current Sealbox)"]


def test_a_call_of_a_changed_tool_whose_reapproval_was_left_out_is_noted(case, tmp_path):
    """The re-approval that let the gateway run toy/echo again, left out by the log's owner: the bundle's
    tools.changed show echo changed and nothing approving it before the call that ran. A note, not a
    problem: an SDK call of a server a gateway also serves is not pinned."""
    folder, store_path, runs, vkey, leaves, path = case
    out = tmp_path / "noreapproval.sbx"
    _resign(store_path, path, out, _drop({("tool.reapproved", "echo")}))
    report = verify_bundle(out, trusted_vkey=vkey)
    assert report.ok and report.problems == ()
    store = sealbox.open_store(store_path, readonly=True)
    try:
        ran = [e for e in store.read_run(runs["gateway"]) if e.kind == "tool.call" and e.payload["tool"] == "echo"]
        decisions = {e.payload["call_id"]: e.payload["effect"] for e in store.read_run(runs["gateway"])
                     if e.kind == "policy.decision"}
    finally:
        store.close()
    assert [decisions[c.payload["call_id"]] for c in ran] == ["allow", "deny", "allow"]
    last = ran[-1]
    assert report.notes == (
        f"call {last.payload['call_id']} of toy/echo in run {runs['gateway']} (leaf {last.leaf_index}) was not denied, "
        f"though the bundle shows that tool changed (tools.changed at leaf {leaves['tools.changed toy change']}) and "
        "holds no re-approval of its definition that counts before the call: if the call went through a Sealbox "
        "gateway, the re-approval it relied on is not in the bundle (calls recorded by the SDK are not pinned)",)


def test_calls_the_recorder_would_have_denied_under_their_grant_are_problems(tmp_path_factory, monkeypatch):
    """A recorder whose grant check was cut out (what only someone who controls the writer can do)
    records calls under a revoked grant, outside a grant's tools, under another principal's grant and
    after a grant's expiry as allowed: the bundle, which carries the grants and the revocation, shows
    that the grants did not authorize them, and ``sealbox verify`` of the store reports the same."""
    import sealbox.store.base as base

    folder = tmp_path_factory.mktemp("unchecked")
    expiry: list[str] = []

    def forge(store, keys):
        grant_access(store, AGENT, "github", "create_*", "repo", expires_at="1h", key_file=keys["boss"],
                     grant_id="g_short")
        expiry.append(next(e.payload["expires_at"] for e in store.read_run(SYSTEM_RUN_ID)
                           if e.kind == "access.granted" and e.payload["grant_id"] == "g_short"))
        # an unsigned grant, as Sealbox wrote them before 2026-12-03, when calls under one were allowed
        store.append([EventDraft("access.granted", {"grant_id": "g_old", "principal": AGENT, "server": "github",
                                                    "tool": "*", "scope": "repo", "expires_at": None,
                                                    "provider": None, "credential": False},
                                 run_id=SYSTEM_RUN_ID, principal="user:ops")])
        with monkeypatch.context() as m:
            m.setattr(RunContext, "_check_grant", lambda self, reader, grant, server, tool, decision: decision)
            with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as run:
                run.call_tool("github", "create_issue", {"title": "legacy"}, lambda title: "ok", grant="g_old")
                run.call_tool("github", "create_issue", {"title": "late"}, lambda title: "ok", grant="g2")
                run.call_tool("github", "delete_repo", {"name": "x"}, lambda name: "ok", grant="g1")
            with Recorder(store, ALLOW_ALL).run(agent="other", principal="agent:other") as other:
                other.call_tool("github", "create_issue", {"title": "borrowed"}, lambda title: "ok", grant="g1")
            # two hours on by the store's clock (no test waits that long): g_short expired an hour before
            m.setattr(base, "utc_now", lambda: "2099-01-01T00:00:00.000000Z")
            with Recorder(store, ALLOW_ALL).run(agent="deploy-bot", principal=AGENT) as late:
                late.call_tool("github", "create_issue", {"title": "expired"}, lambda title: "ok", grant="g_short")
        return {"unchecked": run.run_id, "other": other.run_id, "late": late.run_id}

    store_path, runs, vkey, leaves = build(folder, forge)
    path = folder / "u.sbx"
    assert cli("export", "-s", store_path, runs["before"], runs["unchecked"], runs["other"], runs["late"], "-o", path,
               cwd=folder)[0] == 0
    report = verify_bundle(path, trusted_vkey=vkey)
    store = sealbox.open_store(store_path, readonly=True)
    try:
        calls = [e for r in ("unchecked", "other", "late") for e in store.read_run(runs[r])
                 if e.kind == "tool.call" and e.payload["grant"] != "g_old"]
        in_store = sealbox.verify_store(store)
    finally:
        store.close()
    revoked = leaves["revoked g2 requested"]
    assert [(p.code, p.run_id, p.leaf_index) for p in report.problems] == [
        ("call_grant_invalid", c.run_id, c.leaf_index) for c in calls]
    head = "the call was not denied, though its grant did not authorize it: "
    tail = " (the recorder denies such a call grant_invalid: it was not recorded through Sealbox's grant check)"
    assert [p.message for p in report.problems] == [
        head + f"grant g2 was revoked before the call (access.revoked step 'requested' at leaf {revoked})" + tail,
        head + "grant g1 covers github/create_*, not github/delete_repo" + tail,
        head + "grant g1 is held by agent:deploy-bot, not agent:other" + tail,
        head + f"grant g_short expired at {expiry[0]}, 60 s or more before the call (2099-01-01T00:00:00.000000Z)"
        + tail]
    assert cli("verify", path, "--key", vkey, cwd=folder)[0] == 1
    # the store's own verify reports the same calls, with the same words (only the bundle member differs)
    assert [dataclasses.replace(p, member=None) for p in report.problems] == list(in_store.problems)
    code, text, _ = cli("verify", store_path, cwd=folder)
    assert code == 1 and text.splitlines()[:4] == [p.line() for p in in_store.problems]
    # the legacy call under the unsigned grant is no problem: the grant is noted, as verify of the store notes it
    assert report.notes == in_store.notes and len(report.notes) == 1 and "g_old" in report.notes[0]


def test_events_changed_below_sealbox_with_values_of_another_type_select_nothing_and_never_raise():
    """authorization_events reads system events as stored: a list where a grant id or server belongs
    (an event written below Sealbox, which verify reports as event_malformed) is not hashed."""
    from types import SimpleNamespace

    from sealbox.interop.bundle import authorization_events

    call = SimpleNamespace(kind="tool.call", payload={"grant": "g1", "server": "s", "tool": "t"})
    system = [SimpleNamespace(kind="access.granted", payload={"grant_id": ["g1"]}),
              SimpleNamespace(kind="access.revoked", payload=["g1"]),
              SimpleNamespace(kind="tool.reapproved", payload={"server": ["s"], "tool": "t"}),
              SimpleNamespace(kind="tools.changed", payload={"server": {"s": 1}}),
              SimpleNamespace(kind="access.granted", payload={"grant_id": "g1"}),
              SimpleNamespace(kind="tools.changed", payload={"server": "s"}),
              SimpleNamespace(kind="tool.reapproved", payload={"server": "s", "tool": "other"})]
    assert authorization_events([call], system) == [system[4], system[5]]
