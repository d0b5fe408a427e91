"""Re-approving a changed tool is signed by an approver's key (``sealbox gateway reapprove … --key-file``).

Only a valid signed ``tool.reapproved`` by an identity that was an enabled approver (or admin) when
it was recorded unblocks the tool; unsigned, forged, copied and disabled-approver ones keep it
denied, and ``sealbox verify`` reports each (a note for an unsigned one).
"""

from __future__ import annotations

from datetime import datetime, timezone

import anyio
import pytest

import sealbox
from sealbox.cli.main import main
from sealbox.events import SYSTEM_RUN_ID, EventDraft
from sealbox.gateway import PIN_RULE, Gateway
from sealbox.gateway.pinning import PinState, ReapprovalError, reapproval_fields, reapprove, tool_definition
from sealbox.identities import add_identity, disable_identity, identity_book, load_key, sign_fields
from identity_testkit import admin_key

from .conftest import connect, running, system_events, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


@pytest.fixture
def keys(store, tmp_path):
    admin = admin_key(store, tmp_path)
    out = {"root": admin}
    for name, role in (("alice", "approver"), ("carol", "approver"), ("dave", "agent")):
        out[name] = add_identity(store, name, role, key_path=tmp_path / f"{name}.key", admin_key=admin).key_path
    return out


def signed(store, key_file, **fields):
    """A tool.reapproved payload signed with ``key_file`` as ``reapprove`` signs it (fields may be overridden)."""
    signer = load_key(key_file)
    who = identity_book(store).get(signer.name)
    p = {"origin": store.origin, "identity": signer.name, "reason": "looked fine",
         "reapproved_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **fields}
    p["signature"] = sign_fields(signer, reapproval_fields(p))
    p["key_id"] = who.key_id
    return p


def put(store, payload, principal=None):
    store.append([EventDraft("tool.reapproved", payload, run_id=SYSTEM_RUN_ID,
                             principal=principal or payload["identity"])])


async def test_only_a_signed_reapproval_by_an_enabled_approver_lets_the_changed_tool_run(tmp_path, store, keys):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert text_of(await client.call_tool("toy__echo", {"text": "before"})) == "before"
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        [first, change] = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tools.changed"]
        echo_hash = change.payload["changed"][0]["after"]
        extra_hash = change.payload["added"][0]["hash"]
        good = dict(server="toy", tool="echo", schema_hash=echo_hash, change_leaf=change.leaf_index)

        # 1. unsigned, as Sealbox wrote them before (or anyone who can write the store)
        put(store, {"server": "toy", "tool": "echo", "identity": "alice", "schema_hash": echo_hash})
        # 2. alice's signature, the reason changed afterwards
        put(store, {**signed(store, keys["alice"], **good), "reason": "something else"})
        # 3. alice's signed re-approval of echo, copied to the tool `extra` (its hash)
        put(store, {**signed(store, keys["alice"], **good), "tool": "extra", "schema_hash": extra_hash})
        # 4. alice's signature, but for another store's log
        put(store, signed(store, keys["alice"], **good, origin="sealbox.local/another-store"))
        # 5. carol signs after she was disabled
        disable_identity(store, "carol", admin_key=keys["root"])
        put(store, signed(store, keys["carol"], **good))
        # 6. dave is no approver
        put(store, signed(store, keys["dave"], **good))
        # 7. the old definition of echo, re-approved as if it were the new one
        put(store, signed(store, keys["alice"], server="toy", tool="echo", schema_hash=next(a["hash"] for a in first.payload["added"] if a["tool"] == "echo"),
                          change_leaf=change.leaf_index))
        denied = await client.call_tool("toy__echo", {"text": "forged"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert gw.pins.blocked("toy", "echo") and gw.pins.blocked("toy", "extra")
        assert [r.problem for r in gw.pins.reapprovals] == [
            "unsigned", "bad_signature", "bad_signature", "wrong_store", "disabled", "role", "wrong_definition"]

        report = sealbox.verify_store(store)
        assert [(p.code, p.leaf_index) for p in report.problems] == [
            ("reapproval_signature", change.leaf_index + 2), ("reapproval_signature", change.leaf_index + 3),
            ("reapproval_binding", change.leaf_index + 4), ("reapproval_identity", change.leaf_index + 6),
            ("reapproval_rule", change.leaf_index + 7), ("reapproval_binding", change.leaf_index + 8)]
        assert report.problems[2].message == (
            f"the re-approval of toy/echo ({echo_hash}) by 'alice' does not count: it was signed for another store "
            "(its origin is not this log's): a re-approval copied here")
        assert report.notes == (
            f"the re-approval of toy/echo ({echo_hash}) by 'alice' at leaf {change.leaf_index + 1} is unsigned: it does "
            "not count (the tool stays blocked as changed until an approver re-approves it with `sealbox gateway "
            "reapprove SERVER TOOL --reason TEXT --key-file KEY`)",)

        recorded = await anyio.to_thread.run_sync(
            lambda: reapprove(store, "toy", "echo", "reviewed the new description", keys["alice"]))
        assert recorded["change_leaf"] == change.leaf_index and recorded["schema_hash"] == echo_hash
        assert text_of(await client.call_tool("toy__echo", {"text": "approved"})) == "approved"
        assert (await client.call_tool("toy__extra", {})).is_error is True  # the copy to `extra` never counted
    assert [e["arguments"].get("text") for e in toy_log(tmp_path) if e["tool"] == "echo"] == ["before", "approved"]
    assert [p.code for p in sealbox.verify_store(store).problems] == [
        "reapproval_signature", "reapproval_signature", "reapproval_binding", "reapproval_identity", "reapproval_rule",
        "reapproval_binding"]
    assert PinState.load(store).blocked_tools() == {("toy", "extra")}


async def test_an_approver_disabled_after_reapproving_does_not_withdraw_it(tmp_path, store, keys):
    """A re-approval is judged as the log held its identity when it was recorded."""
    changed_store(store)
    reapprove(store, "toy", "echo", "ok", keys["alice"])
    disable_identity(store, "alice", admin_key=keys["root"])
    assert not PinState.load(store).blocked("toy", "echo")
    assert sealbox.verify_store(store).ok


def changed_store(store):
    """Record a first listing of toy/echo and a change to it (as the gateway does)."""
    pins = PinState.load(store)
    for text in ("v1", "v2"):
        store.append([pins.observe("toy", {"echo": tool_definition("echo", text, {})})])


def cli(capsys, *args):
    """(exit status, stdout, stderr) of ``sealbox gateway reapprove ARGS`` run as the console script runs it."""
    try:
        main(["gateway", "reapprove", *args])
        code = 0  # success: main returns
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_reapprove_from_the_command_line_refuses_a_bad_key_one_error_line_nothing_recorded(tmp_path, store, keys,
                                                                                            capsys):
    changed_store(store)
    other = sealbox.init_store(tmp_path / "other")
    stranger = add_identity(other, "eve", "admin", key_path=tmp_path / "eve.key").key_path
    other.close()
    disable_identity(store, "carol", admin_key=keys["root"])
    (tmp_path / "open.key").write_text(keys["alice"].read_text())
    (tmp_path / "open.key").chmod(0o644)
    base = ["toy", "echo", "--store", str(tmp_path / "store")]
    cases = [
        (["--reason", "ok", "--key-file", str(tmp_path / "missing.key")],
         f"error: key file {tmp_path / 'missing.key'} does not exist\n"),
        (["--reason", "ok", "--key-file", str(tmp_path / "open.key")],
         f"error: key file {tmp_path / 'open.key'} is readable by others (mode 644); chmod 600 it\n"),
        (["--reason", "ok", "--key-file", str(stranger)],
         "error: the key file names identity 'eve', which this store does not know\n"),
        (["--reason", "ok", "--key-file", str(keys["carol"])],
         "error: identity 'carol' is disabled: it cannot re-approve a tool\n"),
        (["--reason", "ok", "--key-file", str(keys["dave"])],
         "error: identity 'dave' has role agent: only an approver or an admin may re-approve a tool\n"),
        (["--reason", "ok", "--key-file", str(keys["alice"]), "--identity", "bob"],
         "error: the key file is identity 'alice''s, not 'bob'\n"),
        (["--reason", " ", "--key-file", str(keys["alice"])],
         "error: --reason must not be empty: say why (it is recorded and signed)\n"),
        (["--key-file", str(keys["alice"])], "error: Missing option '--reason'.\n"),
        (["--reason", "ok"], "error: Missing option '--key-file'.\n"),
    ]
    size = store.size()
    for extra, line in cases:
        code, out, err = cli(capsys, *base, *extra)
        assert (code, out, err) == (2, "", line), extra
    assert store.size() == size and system_events(store, "tool.reapproved") == []

    code, out, err = cli(capsys, *base, "--reason", "ok", "--key-file", str(keys["alice"]), "--identity", "alice")
    assert (code, err) == (0, "") and out.startswith("re-approved toy/echo (sha256:") and out.endswith(" as alice\n")
    assert not PinState.load(store).blocked("toy", "echo")


def test_a_rotated_key_is_refused(tmp_path, store, keys):
    from sealbox.identities import rotate_key

    changed_store(store)
    rotate_key(store, "alice", tmp_path / "alice2.key", admin_key=keys["root"])
    with pytest.raises(ReapprovalError) as exc:
        reapprove(store, "toy", "echo", "ok", keys["alice"])
    assert exc.value.code == "wrong_key"
    reapprove(store, "toy", "echo", "ok", tmp_path / "alice2.key")
    assert not PinState.load(store).blocked("toy", "echo") and sealbox.verify_store(store).ok


def test_sealbox_verify_notes_an_unsigned_reapproval_and_fails_on_a_forged_one(tmp_path, store, keys, capsys):
    """An unsigned re-approval (as Sealbox wrote them before) is a note (exit 0); one whose signature
    does not verify is a problem (exit 1). Neither unblocks the tool."""
    changed_store(store)
    pins = PinState.load(store)
    echo_hash, leaf = pins.known[("toy", "echo")], pins.known_leaf[("toy", "echo")]
    put(store, {"server": "toy", "tool": "echo", "identity": "alice", "schema_hash": echo_hash})
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "store")])
    out = capsys.readouterr().out.splitlines()
    assert exc.value.code == 0
    assert out[0] == (f"note: the re-approval of toy/echo ({echo_hash}) by 'alice' at leaf {leaf + 1} is unsigned: "
                      "it does not count (the tool stays blocked as changed until an approver re-approves it with "
                      "`sealbox gateway reapprove SERVER TOOL --reason TEXT --key-file KEY`)")
    assert out[1].startswith("Verified: the log is intact.")

    put(store, {**signed(store, keys["alice"], server="toy", tool="echo", schema_hash=echo_hash, change_leaf=leaf),
                "identity": "carol"}, principal="carol")  # alice's signature, claimed as carol's
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "store")])
    out = capsys.readouterr().out.splitlines()
    assert exc.value.code == 1
    assert out[0] == (f"reapproval_signature [run system, run_seq {store.read_run(SYSTEM_RUN_ID)[-1].run_seq}, "
                      f"tool.reapproved, leaf {leaf + 2}]: the re-approval of toy/echo ({echo_hash}) by 'carol' does "
                      "not count: its signature does not verify with the identity's key as the log held it (forged or "
                      "altered)")
    assert PinState.load(store).blocked("toy", "echo")


def test_a_tools_changed_with_malformed_entries_does_not_stop_the_pin_state_from_loading(store):
    """tools.changed's lists are free-form in its schema, so any writer of the store could append
    ``added: 5``; PinState.load raised TypeError on it, and no gateway on that store could start.
    Malformed entries are skipped; well-formed ones still count."""
    changed_store(store)
    store.append([EventDraft("tools.changed", {"server": "toy", "added": 5, "removed": [{"x": 1}],
                                               "changed": [{"tool": "echo"}, "junk"]},
                             run_id=SYSTEM_RUN_ID, principal="someone")])
    store.append([EventDraft("tools.changed", {"server": "toy", "added": [{"tool": "new", "hash": "sha256:" + "1" * 64}],
                                               "removed": [], "changed": []}, run_id=SYSTEM_RUN_ID, principal="x")])
    pins = PinState.load(store)
    assert sorted(pins.known) == [("toy", "echo"), ("toy", "new")]
    assert pins.blocked_tools() == {("toy", "echo"), ("toy", "new")}


async def test_a_forged_tools_changed_does_not_unblock_a_changed_tool(tmp_path, store, keys):
    """Without a re-approval, a tools.changed appended by another writer of the store that records
    the old definition again, removes the tool, or claims a second first listing (trusted on first
    use) unblocked it: the gateway forwarded calls to the changed tool. Now what the gateway itself
    last saw the upstream list must be approved too, and only a server's first listing is trusted."""
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        [first, change] = [e.payload for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tools.changed"]
        old = next(a["hash"] for a in first["added"] if a["tool"] == "echo")
        new = change["changed"][0]["after"]
        extra = change["added"][0]["hash"]
        forged = [
            {"server": "toy", "added": [], "removed": [],
             "changed": [{"tool": "echo", "before": new, "after": old, "fields": ["description"], "definition": {}}]},
            {"server": "toy", "added": [], "removed": [{"tool": "echo", "hash": new}], "changed": []},
            {"server": "toy", "first_seen": True, "added": [{"tool": "echo", "hash": new, "definition": {}},
                                                            {"tool": "extra", "hash": extra, "definition": {}}],
             "removed": [], "changed": []},
        ]
        for payload in forged:
            store.append([EventDraft("tools.changed", payload, run_id=SYSTEM_RUN_ID, principal="sealbox")])
            for tool in ("echo", "extra"):
                denied = await client.call_tool(f"toy__{tool}", {"text": "forged"} if tool == "echo" else {})
                assert denied.is_error is True and PIN_RULE in text_of(denied), (payload, tool)
        await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "echo", "reviewed", keys["alice"]))
        assert text_of(await client.call_tool("toy__echo", {"text": "approved"})) == "approved"
    assert [e["arguments"].get("text") for e in toy_log(tmp_path) if e["tool"] == "echo"] == ["approved"]
