"""A tool re-approval signed with a key later declared compromised (``sealbox identities disable
--compromised-since WHEN``) no longer unblocks the changed tool: a running gateway denies it again
(rule PIN_RULE), and ``sealbox verify`` notes the re-approval."""

from __future__ import annotations

import anyio
import pytest

import sealbox
from sealbox.events import SYSTEM_RUN_ID
from sealbox.gateway import PIN_RULE, Gateway
from sealbox.gateway.pinning import PinState, reapprove
from sealbox.identities import add_identity, disable_identity
from identity_testkit import admin_key

from .conftest import connect, running, text_of, toy_config, toy_log
from .test_gateway_reapproval_signed import changed_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def keys(store, tmp_path):
    admin = admin_key(store, tmp_path)
    out = {"root": admin}
    for name in ("alice", "carol"):
        out[name] = add_identity(store, name, "approver", key_path=tmp_path / f"{name}.key", admin_key=admin).key_path
    return out


async def test_a_reapproval_signed_after_the_leak_blocks_the_tool_again_in_a_running_gateway(tmp_path, store, keys):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert text_of(await client.call_tool("toy__echo", {"text": "before"})) == "before"
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        assert PIN_RULE in text_of(await client.call_tool("toy__echo", {"text": "blocked"}))
        since = store.size()  # alice's key leaked here: the re-approval below is the attacker's
        await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "echo", "looks fine", keys["alice"]))
        reapproval_leaf = store.size() - 1
        assert text_of(await client.call_tool("toy__echo", {"text": "unblocked"})) == "unblocked"

        await anyio.to_thread.run_sync(
            lambda: disable_identity(store, "alice", "key leaked", admin_key=keys["root"],
                                     compromised_since=f"leaf:{since}"))
        record = [e for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "identity.changed"][-1]
        denied = await client.call_tool("toy__echo", {"text": "after the leak"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert (f"tool toy/echo changed upstream and has not been re-approved: its re-approval by alice at leaf "
                f"{reapproval_leaf} was signed with a key declared compromised (sealbox gateway reapprove") \
            in text_of(denied)
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
        assert listed["toy__echo"].startswith(
            f"[blocked: this tool changed upstream: its re-approval by alice at leaf {reapproval_leaf} was signed "
            "with a key declared compromised; calls are denied until `sealbox gateway reapprove")
        assert [r.problem for r in gw.pins.reapprovals] == ["compromised_key"]
        # another approver's key unblocks it again
        await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "echo", "reviewed again", keys["carol"]))
        assert text_of(await client.call_tool("toy__echo", {"text": "carol"})) == "carol"
    assert [e["arguments"].get("text") for e in toy_log(tmp_path) if e["tool"] == "echo"] == [
        "before", "unblocked", "carol"]
    report = sealbox.verify_store(store)
    assert report.ok
    echo_hash = PinState.load(store).approved[("toy", "echo")]
    assert report.notes == (
        f"the re-approval of toy/echo ({echo_hash}) by 'alice' at leaf {reapproval_leaf} was signed with a key "
        "declared compromised at that point: it no longer counts (the tool is blocked again until re-approved with "
        "another key)",)
    assert record.leaf_index > reapproval_leaf


async def test_a_reapproval_signed_before_the_leak_keeps_counting(store, keys):
    changed_store(store)
    reapprove(store, "toy", "echo", "ok", keys["alice"])
    disable_identity(store, "alice", admin_key=keys["root"], compromised_since=f"leaf:{store.size()}")
    state = PinState.load(store)
    assert not state.blocked("toy", "echo") and [r.problem for r in state.reapprovals] == [None]


async def test_a_compromised_reapproval_falls_back_to_the_one_before(store, keys):
    changed_store(store)
    reapprove(store, "toy", "echo", "ok", keys["carol"])  # carol approved v2
    pins = PinState.load(store)
    from sealbox.gateway.pinning import tool_definition

    store.append([pins.observe("toy", {"echo": tool_definition("echo", "v3", {})})])
    since = store.size()
    reapprove(store, "toy", "echo", "ok", keys["alice"])  # alice's leaked key approved v3
    disable_identity(store, "alice", admin_key=keys["root"], compromised_since=f"leaf:{since}")
    state = PinState.load(store)
    assert state.blocked("toy", "echo") and state.pending("toy", "echo") == state.known[("toy", "echo")]
    assert [r.problem for r in state.reapprovals] == [None, "compromised_key"]
