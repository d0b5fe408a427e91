"""Revoking an approved tool definition (``sealbox gateway revoke``, signed ``tool.revoked``).

Approval is of a definition (its hash) and stays, so without a revocation an operator could not
withdraw the approval of a definition known to be bad. A revocation that counts withdraws every approval
of its definition recorded before it; a gateway serving that definition denies the tool's calls (a
running one from its next call), and a re-approval recorded later approves it again (log order decides).
SQLite and (with SEALBOX_TEST_POSTGRES_URL) PostgreSQL.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import uuid

import anyio
import pytest

import sealbox
from sealbox.events import SYSTEM_RUN_ID, EventDraft
from sealbox.gateway import PIN_RULE, Gateway
from sealbox.gateway.pinning import (PinState, RevocationError, definition_hash, reapprove, revoke,
                                     tool_definition)
from sealbox.identities import add_identity
from sealbox.interop.bundle import export_bundle
from sealbox.interop.bundle_verify import verify_bundle
from identity_testkit import admin_key

from sealbox.cli.main import main

from .conftest import connect, gateway_runs, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite"]
if os.environ.get("SEALBOX_TEST_POSTGRES_URL") and importlib.util.find_spec("psycopg") is not None:
    BACKENDS.append("postgres")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    if request.param == "sqlite":
        s = sealbox.init_store(tmp_path / "store")
    else:
        s = sealbox.init_store(tmp_path / "store", postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"],
                               schema=f"sbt_revoke_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


@pytest.fixture
def alice(store, tmp_path):
    return add_identity(store, "alice", "approver", key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def cli(capsys, *args):
    """(exit status, stdout, stderr) of ``sealbox gateway ARGS`` run as the console script runs it."""
    try:
        main(["gateway", *args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def kinds(store):
    return [e.kind for e in store.read_run(SYSTEM_RUN_ID)]


async def test_a_running_gateway_denies_a_revoked_definition_until_it_is_reapproved(tmp_path, store, alice, capsys):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert text_of(await client.call_tool("toy__echo", {"text": "A"})) == "A"  # approved on first use
        a = gw.pins.known[("toy", "echo")]
        recorded = await anyio.to_thread.run_sync(
            lambda: revoke(store, "toy", "echo", a, "CVE-2026-0001: echo leaks files", alice))
        assert recorded["schema_hash"] == a and recorded["identity"] == "alice"
        denied = await client.call_tool("toy__echo", {"text": "after revoke"})  # the next call: denied
        message = text_of(denied)
        assert denied.is_error is True and PIN_RULE in message
        assert (f"tool toy/echo's definition {a} was revoked by alice at {recorded['revoked_at']} (leaf "
                f"{_first_system_leaf(store, 'tool.revoked')}): CVE-2026-0001: echo leaks files"
                in message)
        assert "sealbox gateway reapprove toy echo --store" in message
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 2})) == "3"  # other tools run on
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["toy__echo"].description.startswith("[blocked: this tool's definition was revoked by alice")

        await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "echo", "fixed upstream", alice,
                                                         schema_hash=a))
        assert text_of(await client.call_tool("toy__echo", {"text": "again"})) == "again"  # later events win

    # what the upstream saw: never the call made while revoked
    assert [c["arguments"]["text"] for c in toy_log(tmp_path) if c["tool"] == "echo"] == ["A", "again"]
    pins = PinState.load(store)  # as a restarted gateway reads it
    assert not pins.blocked("toy", "echo") and a in pins.approved_hashes[("toy", "echo")]
    report = sealbox.verify_store(store)
    assert report.ok and report.problems == () and report.notes == ()
    export_bundle(store, gateway_runs(store), tmp_path / "case.sbx")
    bundle = verify_bundle(tmp_path / "case.sbx", trust_bundle_key=True)
    assert bundle.ok and bundle.problems == ()
    assert [n for n in bundle.notes if "was not denied" in n] == []
    # the bundle carries the revocation (authorization evidence of the echo calls)
    import zipfile

    with zipfile.ZipFile(tmp_path / "case.sbx") as z:
        carried = z.read("events.jsonl")
    assert carried.count(b"tool.revoked") == 1 and carried.count(b"tool.reapproved") == 1

    code, out, err = cli(capsys, "pins", "toy", "echo", "--store", str(tmp_path / "store"))
    revoked = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tool.revoked"][0]
    assert (code, err) == (0, "")
    assert (f"approved: first listing (leaf {_first_system_leaf(store, 'tools.changed')}); re-approved by alice"
            in out and f"; revoked by alice at {revoked.payload['revoked_at']} (leaf {revoked.leaf_index})" in out)
    rows = json.loads(cli(capsys, "pins", "toy", "echo", "--json", "--store", str(tmp_path / "store"))[1])
    assert rows[0]["definitions"][0]["revoked"] == [{"by": "alice", "leaf": revoked.leaf_index,
                                                     "at": revoked.payload["revoked_at"],
                                                     "reason": "CVE-2026-0001: echo leaks files"}]


def _first_system_leaf(store, kind=None):
    events = store.read_run(SYSTEM_RUN_ID)
    return events[0].leaf_index if kind is None else next(e.leaf_index for e in events if e.kind == kind)


def _two_definitions(store):
    """Echo recorded as A (first listing: approved) and then B (not approved)."""
    a = tool_definition("echo", "Echo.", {})
    b = tool_definition("echo", "Echo it.", {})
    pins = PinState.load(store)
    for d in (a, b):
        store.append([pins.observe("toy", {"echo": d})])
    return definition_hash(a), definition_hash(b)


def test_revoke_from_the_command_line_and_its_refusals(tmp_path, store, alice, capsys):
    a, b = _two_definitions(store)
    where = ["--store", str(tmp_path / "store"), "--reason", "known bad", "--key-file", str(alice)]
    zero = "sha256:" + "0" * 64
    refusals = [
        (["nosuch", "echo", "--hash", a], "error: server 'nosuch' is not known (no gateway has listed it on this "
                                          "store); nothing to revoke"),
        (["toy", "nosuch", "--hash", a], "error: server 'toy' has no tool 'nosuch' recorded; nothing to revoke"),
        (["toy", "echo", "--hash", zero], f"error: definition {zero} was never recorded for toy/echo; recorded: {b}, {a}"),
        (["toy", "echo", "--hash", "sha256:nothex"], "error: --hash 'sha256:nothex' is not a definition hash (sha256: "
                                                     "and 64 lowercase hex digits; `sealbox gateway pins` lists them)"),
        (["toy", "echo", "--hash", b], f"error: definition {b} of toy/echo is not approved; nothing to revoke"),
    ]
    for args, line in refusals:
        assert cli(capsys, "revoke", *args, *where) == (2, "", line + "\n"), args
    assert "tool.revoked" not in kinds(store)  # nothing recorded
    assert cli(capsys, "revoke", "toy", "echo", *where)[0] == 2  # --hash is required
    assert cli(capsys, "revoke", "toy", "echo", "--hash", a, *where) == (0, f"revoked toy/echo ({a}) as alice\n", "")
    revoked = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tool.revoked"][-1]
    assert cli(capsys, "revoke", "toy", "echo", "--hash", a, *where) == (
        2, "", f"error: definition {a} of toy/echo is revoked already (by alice at {revoked.payload['revoked_at']}, "
               f"leaf {revoked.leaf_index})\n")
    assert kinds(store).count("tool.revoked") == 1
    pins = PinState.load(store)
    assert pins.approved_hashes.get(("toy", "echo"), set()) == set()
    assert pins.unapproved("toy", "echo") == [(b, pins.recorded_hashes[("toy", "echo")][b]),
                                              (a, pins.recorded_hashes[("toy", "echo")][a])]
    # re-approving the revoked definition by its hash approves it again
    code, out, _ = cli(capsys, "reapprove", "toy", "echo", "--hash", a, *where)
    assert code == 0 and PinState.load(store).approved_hashes[("toy", "echo")] == {a}
    code, out, err = cli(capsys, "pins", "toy", "echo", "--store", str(tmp_path / "store"))
    assert code == 0 and f"revoked by alice at {revoked.payload['revoked_at']} (leaf {revoked.leaf_index})" in out
    assert sealbox.verify_store(store).ok


def test_an_unsigned_or_forged_revocation_does_not_count_and_verify_reports_it(tmp_path, store, alice):
    a, _ = _two_definitions(store)
    real = revoke(store, "toy", "echo", a, "known bad", alice)
    leaf = store.size() - 1
    reapprove(store, "toy", "echo", "fixed", alice, schema_hash=a)
    sig = bytearray(base64.b64decode(real["signature"] + "=" * (-len(real["signature"]) % 4)))
    sig[0] ^= 1
    forged = {**real, "revoked_at": real["revoked_at"], "signature": base64.b64encode(bytes(sig)).decode()}
    unsigned = {k: v for k, v in real.items() if k not in ("signature", "key_id")}
    store.append([EventDraft("tool.revoked", forged, run_id=SYSTEM_RUN_ID, principal="alice")])
    store.append([EventDraft("tool.revoked", unsigned, run_id=SYSTEM_RUN_ID, principal="alice")])
    pins = PinState.load(store)
    assert [(r.leaf_index, r.problem) for r in pins.revocations] == [
        (leaf, None), (store.size() - 2, "bad_signature"), (store.size() - 1, "unsigned")]
    assert a in pins.approved_hashes[("toy", "echo")]  # neither withdrew the re-approval
    report = sealbox.verify_store(store)
    assert [(p.code, p.leaf_index) for p in report.problems] == [("tool_revocation_signature", store.size() - 2)]
    assert [n for n in report.notes if "revocation" in n] == [
        f"the revocation of toy/echo's definition {a} by 'alice' at leaf {store.size() - 1} is unsigned: it does not "
        "count (the definition stays approved until an approver revokes it with `sealbox gateway revoke SERVER TOOL "
        "--hash HASH --reason TEXT --key-file KEY`)"]


def test_revoke_refuses_an_identity_that_may_not_and_records_nothing(tmp_path, store):
    a, _ = _two_definitions(store)
    viewer = add_identity(store, "vic", "auditor", key_path=tmp_path / "vic.key",
                          admin_key=admin_key(store, tmp_path)).key_path
    with pytest.raises(RevocationError) as err:
        revoke(store, "toy", "echo", a, "no", viewer)
    assert err.value.code == "role" and "tool.revoked" not in kinds(store)
    with pytest.raises(RevocationError) as err:
        revoke(store, "toy", "echo", a, "  ", viewer)
    assert err.value.code == "empty_reason"


def test_a_revocation_signed_with_a_key_declared_compromised_still_withdraws_the_approval(tmp_path, store, alice):
    """Fail closed: a leaked key can only block a tool with a revocation (another approver re-approves it),
    while letting the revocation lapse would approve again a definition someone meant to withdraw."""
    from sealbox.identities import disable_identity

    a, _ = _two_definitions(store)
    root = admin_key(store, tmp_path)
    since = store.size()
    revoke(store, "toy", "echo", a, "known bad", alice)
    disable_identity(store, "alice", "key leaked", admin_key=root, compromised_since=f"leaf:{since}")
    pins = PinState.load(store)
    assert [r.problem for r in pins.revocations] == ["compromised_key"]
    assert pins.approved_hashes.get(("toy", "echo"), set()) == set() and pins.revocation("toy", "echo", a) is not None
    report = sealbox.verify_store(store)
    assert report.ok and [n for n in report.notes if "revocation" in n] == [
        f"the revocation of toy/echo's definition {a} by 'alice' at leaf {since} was signed with a key declared "
        "compromised at that point: it still withdraws the approval (a revocation can only block the tool; "
        "re-approve the definition with another key if it is fine)"]
    bob = add_identity(store, "bob", "approver", key_path=tmp_path / "bob.key", admin_key=root).key_path
    reapprove(store, "toy", "echo", "checked: fine", bob, schema_hash=a)
    assert a in PinState.load(store).approved_hashes[("toy", "echo")]

