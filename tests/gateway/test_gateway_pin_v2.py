"""Tool pins cover everything a client or its model acts on (pin version 2), and version 1 pins upgrade.

A rug pull that changes only a tool's annotations, title or output schema is a change: the tool is
denied until re-approved. A store whose pins were written by a Sealbox before 2026-12-04 (version 1:
name, description, input schema) is built here as that Sealbox wrote it (its event payloads, hashed
with :func:`tool_definition_v1`, from the toy upstream's real listing): the gateway upgrades each tool
whose version 1 hash is unchanged (``upgraded``, keeping its approval) and blocks one that changed;
``sealbox verify`` and the offline bundle verifier accept old, upgraded and new stores and report a
forged upgrade (``pin_upgrade_forged``).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

import sealbox
from sealbox.canonical import canonical_bytes
from sealbox.cli.main import cli
from sealbox.events import SYSTEM_RUN_ID, EventDraft
from sealbox.gateway import PIN_RULE, Gateway
from sealbox.gateway.pinning import (UPGRADE_PROBLEMS, PinState, definition_hash, definition_of, reapprove,
                                     older_of, tool_definition, tool_definition_v1, v1_of, v2_of)
from sealbox.identities import add_identity
from sealbox.interop.bundle import export_bundle
from sealbox.interop.bundle_verify import verify_bundle
from identity_testkit import admin_key

from .conftest import connect, gateway_runs, running, system_events, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio

OBJ = {"type": "object"}
ADD_INPUT = {**OBJ, "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
ADD_UI = {"ui": {"resourceUri": "ui://toy/add.html"}, "ui/resourceUri": "ui://toy/add.html"}
ADD_OUTPUT = {**OBJ, "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}


def alice_key(store, tmp_path):
    path = tmp_path / "alice.key"
    if not path.exists():
        add_identity(store, "alice", "approver", key_path=path, admin_key=admin_key(store, tmp_path))
    return path


def reapprove_cli(store_path, server, tool):
    return CliRunner().invoke(cli, ["gateway", "reapprove", server, tool, "--store", str(store_path), "--reason",
                                    "reviewed", "--key-file", str(Path(store_path).parent / "alice.key")])


def test_the_pinned_definition_keeps_absent_and_present_apart_and_covers_what_a_client_acts_on():
    d = tool_definition("t", "d", OBJ, annotations={"readOnlyHint": True}, title="T", output_schema=OBJ)
    assert canonical_bytes(d) == (b'{"annotations":{"readOnlyHint":true},"description":"d","input_schema":'
                                  b'{"type":"object"},"name":"t","output_schema":{"type":"object"},'
                                  b'"pin_version":3,"title":"T"}')
    bare = tool_definition("t", None, OBJ)
    assert canonical_bytes(bare) == b'{"input_schema":{"type":"object"},"name":"t","pin_version":3}'
    hashes = {definition_hash(x) for x in (
        bare, tool_definition("t", "", OBJ), tool_definition("t", None, OBJ, annotations={}),
        tool_definition("t", None, OBJ, title=""), tool_definition("t", None, OBJ, output_schema={}),
        tool_definition("t", None, OBJ, annotations={"readOnlyHint": False}),
        tool_definition("t", None, OBJ, annotations={"destructiveHint": True}),
        tool_definition("t", None, OBJ, execution={"taskSupport": "required"}),
        tool_definition("t", None, OBJ, icons=[{"src": "https://example.com/i.png"}]),
        tool_definition_v1("t", None, OBJ))}
    assert len(hashes) == 10  # and a version 1 hash is never a version 2 one
    assert v1_of(d) == tool_definition_v1("t", "d", OBJ) == {"name": "t", "description": "d", "input_schema": OBJ}


@pytest.mark.parametrize("rug", ["annotations", "title", "output_schema"])
async def test_a_rug_pull_of_annotations_title_or_output_schema_alone_is_denied_until_reapproved(tmp_path, store, rug):
    alice_key(store, tmp_path)
    gw = Gateway(toy_config(tmp_path, env={"TOY_RUG": rug}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [first] = system_events(store, "tools.changed")
        assert first["pin_version"] == 3 and first["first_seen"] is True
        assert next(a["definition"] for a in first["added"] if a["tool"] == "add") == {
            "pin_version": 3, "name": "add", "title": "Add", "description": "Add two integers.",
            "input_schema": ADD_INPUT, "output_schema": ADD_OUTPUT, "annotations": {"readOnlyHint": True},
            "meta": ADD_UI}  # not "toy/listing", which changes at every listing (and did: no "meta" change below)
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 2})) == "3"

        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            while len(system_events(store, "tools.changed")) < 2:
                await anyio.sleep(0.05)
        [_, change] = system_events(store, "tools.changed")
        assert change["added"] == change["removed"] == [] and "upgraded" not in change
        [entry] = change["changed"]
        assert (entry["tool"], entry["fields"], entry["before"]) == ("add", [rug], first["added"][0]["hash"])
        assert entry["after"] == definition_hash(entry["definition"]) == definition_hash(
            definition_of(gw.upstreams["toy"].tools["add"]))

        denied = await client.call_tool("toy__add", {"a": 1, "b": 2})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert (await client.call_tool("toy__echo", {"text": "x"})).is_error is False  # unchanged
        out = reapprove_cli(tmp_path / "store", "toy", "add")
        assert out.exit_code == 0, out.output
        assert text_of(await client.call_tool("toy__add", {"a": 2, "b": 2})) == "4"
    assert [e["arguments"] for e in toy_log(tmp_path) if e["tool"] == "add"] == [{"a": 1, "b": 2}, {"a": 2, "b": 2}]
    [r] = system_events(store, "tool.reapproved")
    assert r["schema_hash"] == entry["after"]
    report = sealbox.verify_store(store)
    assert report.ok and report.problems == ()


# ---------------------------------------------------------------- stores written with version 1 pins

async def toy_tools(tmp_path, name, **env):
    """The toy upstream's real listing ({name: mcp Tool}), read through a gateway on a scratch store."""
    scratch = sealbox.init_store(tmp_path / name)
    try:
        gw = Gateway(toy_config(tmp_path, env=env), store=scratch)
        async with running(gw):
            return dict(gw.upstreams["toy"].tools)
    finally:
        scratch.close()


def v1_defs(tools):
    return {n: tool_definition_v1(t.name, t.description, t.input_schema) for n, t in tools.items()}


def write_v1_listing(store, tools, before=None):
    """A tools.changed exactly as a Sealbox before 2026-12-04 recorded a listing (version 1 hashes, no
    pin_version): the first one (``before`` None), or the change from the ``before`` listing."""
    new = v1_defs(tools)
    h = {n: definition_hash(d) for n, d in new.items()}
    if before is None:
        payload = {"server": "toy", "first_seen": True, "removed": [], "changed": [],
                   "added": [{"tool": n, "hash": h[n], "definition": new[n]} for n in sorted(new)]}
    else:
        old = v1_defs(before)
        oh = {n: definition_hash(d) for n, d in old.items()}
        payload = {"server": "toy", "removed": [{"tool": n, "hash": oh[n]} for n in sorted(set(old) - set(new))],
                   "added": [{"tool": n, "hash": h[n], "definition": new[n]} for n in sorted(set(new) - set(old))],
                   "changed": [{"tool": n, "before": oh[n], "after": h[n],
                                "fields": sorted(k for k in new[n] if new[n][k] != old[n][k]), "definition": new[n]}
                               for n in sorted(set(new) & set(old)) if h[n] != oh[n]]}
    [e] = store.append([EventDraft("tools.changed", payload, run_id=SYSTEM_RUN_ID, principal="sealbox")])
    return e.leaf_index


def upgrade_of(tool):
    d = definition_of(tool)
    return {"tool": tool.name, "before": definition_hash(v1_of(d)), "after": definition_hash(d), "definition": d}


def bundle_problems(store, tmp_path, name):
    path = tmp_path / f"{name}.sbx"
    export_bundle(store, [gateway_runs(store)[-1]], path)
    report = verify_bundle(path, trusted_vkey=(tmp_path / "store" / "log.vkey").read_text().strip())
    return [(p.code, p.leaf_index) for p in report.problems]


async def test_a_version_1_store_upgrades_without_blocking_and_a_restart_records_nothing_more(tmp_path, store):
    tools = await toy_tools(tmp_path, "scratch")
    write_v1_listing(store, tools)
    assert sealbox.verify_store(store).problems == ()  # the old store verifies
    assert not PinState.load(store).blocked_tools()
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [_, up] = system_events(store, "tools.changed")
        assert up == {"server": "toy", "pin_version": 3, "added": [], "removed": [], "changed": [],
                      "upgraded": [upgrade_of(tools[n]) for n in sorted(tools)]}
        assert text_of(await client.call_tool("toy__echo", {"text": "hi"})) == "hi"
        assert not any(t.description.startswith("[blocked") for t in (await client.list_tools()).tools)
    gw2 = Gateway(toy_config(tmp_path), store=store)
    async with running(gw2) as tg, connect(gw2, tg) as client:
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 1})) == "2"
    assert len(system_events(store, "tools.changed")) == 2
    assert sealbox.verify_store(store).problems == ()
    assert bundle_problems(store, tmp_path, "up") == []


async def test_a_version_1_reapproval_carries_over_the_upgrade_and_an_unapproved_tool_stays_blocked(tmp_path, store):
    key = alice_key(store, tmp_path)
    base, pulled = await toy_tools(tmp_path, "s1"), await toy_tools(tmp_path, "s2", TOY_VARIANT="2")
    write_v1_listing(store, base)
    change_leaf = write_v1_listing(store, pulled, before=base)  # echo changed, extra added
    signed = reapprove(store, "toy", "echo", "reviewed", key)  # a re-approval of the version 1 definition
    assert (signed["schema_hash"], signed["change_leaf"]) == (definition_hash(v1_defs(pulled)["echo"]), change_leaf)
    gw = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [_, _, up] = system_events(store, "tools.changed")
        assert up["changed"] == up["added"] == [] and [u["tool"] for u in up["upgraded"]] == sorted(pulled)
        assert text_of(await client.call_tool("toy__echo", {"text": "approved"})) == "approved"
        denied = await client.call_tool("toy__extra", {})  # added in version 1, never approved
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        out = reapprove_cli(tmp_path / "store", "toy", "extra")
        assert out.exit_code == 0, out.output
        assert text_of(await client.call_tool("toy__extra", {})) == "no tool extra"  # forwarded: the toy answered
    [_, extra] = system_events(store, "tool.reapproved")
    upgrade_leaf = [e.leaf_index for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tools.changed"][-1]
    assert (extra["schema_hash"], extra["change_leaf"]) == (upgrade_of(pulled["extra"])["after"], upgrade_leaf)
    assert sealbox.verify_store(store).problems == ()
    assert bundle_problems(store, tmp_path, "carried") == []


async def test_a_tool_whose_version_1_definition_changed_is_a_change_at_the_upgrade(tmp_path, store):
    alice_key(store, tmp_path)
    base, pulled = await toy_tools(tmp_path, "s1"), await toy_tools(tmp_path, "s2", TOY_VARIANT="2")
    write_v1_listing(store, base)
    gw = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [first, up] = system_events(store, "tools.changed")
        v1_echo = next(a["hash"] for a in first["added"] if a["tool"] == "echo")
        echo = definition_of(pulled["echo"])
        assert up["changed"] == [{"tool": "echo", "before": v1_echo, "after": definition_hash(echo),
                                  "fields": ["description"], "definition": echo}]
        assert [a["tool"] for a in up["added"]] == ["extra"] and up["removed"] == []
        assert [u["tool"] for u in up["upgraded"]] == sorted(set(base) - {"echo"})
        denied = await client.call_tool("toy__echo", {"text": "pulled"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 1})) == "2"  # upgraded, approved
        assert reapprove_cli(tmp_path / "store", "toy", "echo").exit_code == 0
        assert text_of(await client.call_tool("toy__echo", {"text": "now"})) == "now"
    assert [e["arguments"]["text"] for e in toy_log(tmp_path) if e["tool"] == "echo"] == ["now"]
    assert sealbox.verify_store(store).problems == ()


@pytest.mark.parametrize("forgery", ["hash_mismatch", "before_mismatch"])
async def test_a_forged_upgrade_is_a_change_and_verify_and_the_bundle_report_it(tmp_path, store, forgery):
    """hash_mismatch: the upgrade claims the changed echo's version 1 hash is the recorded one;
    before_mismatch: it names the changed echo's own version 1 hash, which is not the recorded one."""
    base, pulled = await toy_tools(tmp_path, "s1"), await toy_tools(tmp_path, "s2", TOY_VARIANT="2")
    write_v1_listing(store, base)
    forged = upgrade_of(pulled["echo"])
    if forgery == "hash_mismatch":
        forged["before"] = upgrade_of(base["echo"])["before"]
    [e] = store.append([EventDraft("tools.changed", {"server": "toy", "pin_version": 3, "added": [], "removed": [],
                                                     "changed": [], "upgraded": [forged]},
                                   run_id=SYSTEM_RUN_ID, principal="sealbox")])
    problems = [(p.code, p.leaf_index, p.message) for p in sealbox.verify_store(store).problems]
    assert problems == [("pin_upgrade_forged", e.leaf_index, "the pin upgrade of toy/echo does not count: "
                         f"{UPGRADE_PROBLEMS[forgery]} (the tool is blocked as changed until re-approved)")]
    pins = PinState.load(store)
    assert pins.blocked_tools() == {("toy", "echo")} and pins.pending("toy", "echo") == forged["after"]
    gw = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        denied = await client.call_tool("toy__echo", {"text": "pulled"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 1})) == "2"
    assert [e["tool"] for e in toy_log(tmp_path)] == ["add"]
    assert bundle_problems(store, tmp_path, "forged") == [("pin_upgrade_forged", e.leaf_index)]


async def test_a_carried_version_1_reapproval_signed_with_a_leaked_key_blocks_the_tool_again(tmp_path, store):
    """The upgrade carries the re-approval, not a fresh approval: when its key is declared compromised
    from before it, the tool falls back to its first listing's approval, which is not its definition."""
    from sealbox.identities import disable_identity

    key = alice_key(store, tmp_path)
    base, pulled = await toy_tools(tmp_path, "s1"), await toy_tools(tmp_path, "s2", TOY_VARIANT="2")
    write_v1_listing(store, base)
    write_v1_listing(store, pulled, before=base)
    since = store.size()
    signed = reapprove(store, "toy", "echo", "reviewed", key)
    pins = PinState.load(store)
    store.append([pins.observe("toy", {n: definition_of(t) for n, t in pulled.items()})])  # as the gateway does
    pins = PinState.load(store)
    echo = upgrade_of(pulled["echo"])
    assert (echo["before"], pins.known[("toy", "echo")]) == (signed["schema_hash"], echo["after"])
    assert pins.blocked_tools() == {("toy", "extra")}
    disable_identity(store, "alice", "key leaked", admin_key=admin_key(store, tmp_path),
                     compromised_since=f"leaf:{since}")
    pins = PinState.load(store)
    assert pins.blocked_tools() == {("toy", "echo"), ("toy", "extra")}
    # the first listing's approval: of the version 1 definition echo had then (never upgraded: it had changed)
    assert pins.approved[("toy", "echo")] == upgrade_of(base["echo"])["before"]
    assert [r.problem for r in pins.reapprovals] == ["compromised_key"]
    assert sealbox.verify_store(store).problems == ()


async def test_a_tool_absent_or_changed_at_the_upgrade_keeps_its_version_1_approval_when_it_comes_back(tmp_path,
                                                                                                      store):
    """The version 1 listing (TOY_VARIANT 2) was approved on first use. The upgrade happens while the upstream
    lists the base variant: extra is absent (removed), echo differs (changed, blocked). When the upstream lists
    the approved definitions again, they are upgraded from the approved version 1 hash (their version 1 part is
    what was approved): not blocked, as neither a version 1 nor a version 2 Sealbox would block them."""
    base, pulled = await toy_tools(tmp_path, "s1"), await toy_tools(tmp_path, "s2", TOY_VARIANT="2")
    write_v1_listing(store, pulled)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [_, up] = system_events(store, "tools.changed")
        assert [i["tool"] for i in up["removed"]] == ["extra"] and [i["tool"] for i in up["changed"]] == ["echo"]
        denied = await client.call_tool("toy__echo", {"text": "base"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
    gw2 = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw2) as tg, connect(gw2, tg) as client:
        [_, _, back] = system_events(store, "tools.changed")
        assert back == {"server": "toy", "pin_version": 3, "added": [], "removed": [], "changed": [],
                        "upgraded": [upgrade_of(pulled["echo"]), upgrade_of(pulled["extra"])]}
        assert not PinState.load(store).blocked_tools()
        assert text_of(await client.call_tool("toy__echo", {"text": "approved"})) == "approved"
        assert text_of(await client.call_tool("toy__extra", {})) == "no tool extra"
    assert sealbox.verify_store(store).problems == ()
    assert bundle_problems(store, tmp_path, "back") == []


async def test_a_reapproved_tool_absent_at_the_upgrade_comes_back_approved_and_a_bundle_without_it_verifies(
        tmp_path, store):
    """extra was added and re-approved under version 1 pins, then absent at the upgrade. Listed again, it is
    upgraded from its re-approved version 1 hash. A bundle of a run that never called extra holds no re-approval
    of it, and still finds the upgrade sound: the upgrade's validity does not rest on approvals."""
    key = alice_key(store, tmp_path)
    base, pulled = await toy_tools(tmp_path, "s1"), await toy_tools(tmp_path, "s2", TOY_VARIANT="2")
    write_v1_listing(store, base)
    write_v1_listing(store, pulled, before=base)
    reapprove(store, "toy", "extra", "reviewed", key)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw):
        [_, _, up] = system_events(store, "tools.changed")
        assert [i["tool"] for i in up["removed"]] == ["extra"]
    gw2 = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw2) as tg, connect(gw2, tg) as client:
        [_, _, _, back] = system_events(store, "tools.changed")
        echo = {**upgrade_of(pulled["echo"]), "before": definition_hash(definition_of(base["echo"])),
                "fields": ["description"]}  # echo's approval is its first listing's, not this definition
        assert back["upgraded"] == [upgrade_of(pulled["extra"])] and back["changed"] == [echo]
        assert text_of(await client.call_tool("toy__add", {"a": 2, "b": 2})) == "4"
    assert PinState.load(store).blocked_tools() == {("toy", "echo")}
    assert sealbox.verify_store(store).problems == ()
    assert bundle_problems(store, tmp_path, "no-extra") == []
    gw3 = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw3) as tg, connect(gw3, tg) as client:  # a bundle of a run that called it verifies too
        assert text_of(await client.call_tool("toy__extra", {})) == "no tool extra"
    assert bundle_problems(store, tmp_path, "extra") == []


async def test_a_tool_whose_input_schema_has_dollar_keywords_upgrades_without_blocking(tmp_path, store):
    """"$schema", "$ref", "$defs" are escaped when a schema is encoded ({"$esc": …}); the version 1 part of a
    version 2 definition (v1_of) encoded the already encoded schema again, so its hash never matched the recorded
    version 1 hash: the upgrade recorded such a tool as changed and blocked it."""
    env = {"TOY_DOLLAR_SCHEMA": "1"}
    tools = await toy_tools(tmp_path, "scratch", **env)
    assert "$schema" in tools["add"].input_schema
    d = definition_of(tools["add"])
    assert definition_hash(v1_of(d)) == definition_hash(v1_defs(tools)["add"])
    write_v1_listing(store, tools)
    gw = Gateway(toy_config(tmp_path, env=env), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [_, up] = system_events(store, "tools.changed")
        assert up["changed"] == [] and [u["tool"] for u in up["upgraded"]] == sorted(tools)
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 2})) == "3"
    assert not PinState.load(store).blocked_tools()
    assert sealbox.verify_store(store).problems == ()
    assert bundle_problems(store, tmp_path, "dollar") == []


# ---------------------------------------------------------------- the UI a host renders (_meta, version 3)

def test_only_the_keys_of_meta_a_host_acts_on_are_pinned():
    meta = {"ui": {"resourceUri": "ui://a/b.html", "visibility": ["app"]}, "ui/resourceUri": "ui://a/b.html",
            "openai/outputTemplate": "ui://a/t.html", "openai/widgetAccessible": True, "trace": "t-1", "v": 7}
    d = tool_definition("t", None, OBJ, meta=meta)
    assert canonical_bytes(d) == (b'{"input_schema":{"type":"object"},"meta":{"openai/outputTemplate":"ui://a/t.html",'
                                  b'"openai/widgetAccessible":true,"ui":{"resourceUri":"ui://a/b.html","visibility":'
                                  b'["app"]},"ui/resourceUri":"ui://a/b.html"},"name":"t","pin_version":3}')
    assert tool_definition("t", None, OBJ, meta={"trace": "t-2"}) == tool_definition("t", None, OBJ) == {
        "pin_version": 3, "name": "t", "input_schema": OBJ}  # no pinned key: no "meta" at all
    assert len({definition_hash(tool_definition("t", None, OBJ, meta=m)) for m in (
        None, {"ui": {"resourceUri": "ui://a/b.html"}}, {"ui": {"resourceUri": "ui://a/evil.html"}},
        {"ui/resourceUri": "ui://a/b.html"}, {"ui": None}, {"openai/outputTemplate": "ui://a/b.html"})}) == 6
    assert v2_of(d) == {"pin_version": 2, "name": "t", "input_schema": OBJ}


@pytest.mark.parametrize("rug", ["ui", "ui_legacy"])
async def test_a_rug_pull_of_the_ui_a_host_renders_is_denied_until_reapproved(tmp_path, store, rug):
    """MCP Apps: the host renders the ui:// resource a tool's _meta names. Swapping it is a change like any
    other: the tool is listed without its _meta and denied until re-approved; the volatile toy/listing key,
    which changes at every listing, is passed through and changes nothing."""
    alice_key(store, tmp_path)
    gw = Gateway(toy_config(tmp_path, env={"TOY_RUG": rug}), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        add = next(t for t in (await client.list_tools()).tools if t.name == "toy__add")
        assert add.meta["ui"] == {"resourceUri": "ui://toy/add.html"} and "toy/listing" in add.meta
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 2})) == "3"
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            while len(system_events(store, "tools.changed")) < 2:
                await anyio.sleep(0.05)
        [first, change] = system_events(store, "tools.changed")
        [entry] = change["changed"]
        evil = {"ui": {"resourceUri": "ui://toy/evil.html"}, "ui/resourceUri": "ui://toy/add.html"} if rug == "ui" \
            else {"ui": {"resourceUri": "ui://toy/add.html"}, "ui/resourceUri": "ui://toy/evil.html"}
        assert (entry["tool"], entry["fields"], entry["definition"]["meta"]) == ("add", ["meta"], evil)
        assert change["added"] == change["removed"] == [] and change["pin_version"] == 3
        add = next(t for t in (await client.list_tools()).tools if t.name == "toy__add")
        assert add.meta is None and add.description.startswith("[blocked")  # the new UI reaches no host
        denied = await client.call_tool("toy__add", {"a": 1, "b": 2})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert reapprove_cli(tmp_path / "store", "toy", "add").exit_code == 0
        add = next(t for t in (await client.list_tools()).tools if t.name == "toy__add")
        assert {k: add.meta[k] for k in evil} == evil
        assert text_of(await client.call_tool("toy__add", {"a": 2, "b": 2})) == "4"
    assert [e["arguments"] for e in toy_log(tmp_path) if e["tool"] == "add"] == [{"a": 1, "b": 2}, {"a": 2, "b": 2}]
    assert sealbox.verify_store(store).problems == ()


def write_v2_listing(store, tools):
    """A first tools.changed exactly as a Sealbox before 2026-12-05 recorded it (version 2: no "meta")."""
    defs = {n: v2_of(definition_of(t)) for n, t in tools.items()}
    payload = {"server": "toy", "pin_version": 2, "first_seen": True, "removed": [], "changed": [],
               "added": [{"tool": n, "hash": definition_hash(defs[n]), "definition": defs[n]} for n in sorted(defs)]}
    [e] = store.append([EventDraft("tools.changed", payload, run_id=SYSTEM_RUN_ID, principal="sealbox")])
    return e.leaf_index


def upgrade_from(tool, version):
    d = definition_of(tool)
    return {"tool": tool.name, "before": definition_hash(older_of(d, version)), "after": definition_hash(d),
            "definition": d}


@pytest.mark.parametrize("history", ["v2", "v1_upgraded_to_v2"])
async def test_a_version_2_store_upgrades_to_version_3_without_blocking(tmp_path, store, history):
    """A store of version 2 pins (first listed so, or upgraded from version 1 by a Sealbox before 2026-12-05)
    verifies clean, and the first listing under version 3 upgrades every tool from its version 2 hash: the
    approvals carry over, nothing is blocked, a restart records nothing more; store and bundle verify clean."""
    env = {"TOY_RUG": "ui"}
    tools = await toy_tools(tmp_path, "scratch", **env)
    if history == "v2":
        write_v2_listing(store, tools)
    else:
        write_v1_listing(store, tools)
        v2 = [{**u, "after": definition_hash(v2_of(u["definition"])), "definition": v2_of(u["definition"])}
              for u in (upgrade_of(tools[n]) for n in sorted(tools))]
        store.append([EventDraft("tools.changed", {"server": "toy", "pin_version": 2, "added": [], "removed": [],
                                                   "changed": [], "upgraded": v2},
                                 run_id=SYSTEM_RUN_ID, principal="sealbox")])
    assert sealbox.verify_store(store).problems == ()
    assert not PinState.load(store).blocked_tools()
    gw = Gateway(toy_config(tmp_path, env=env), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        up = system_events(store, "tools.changed")[-1]
        assert up == {"server": "toy", "pin_version": 3, "added": [], "removed": [], "changed": [],
                      "upgraded": [upgrade_from(tools[n], 2) for n in sorted(tools)]}
        assert next(u for u in up["upgraded"] if u["tool"] == "add")["definition"]["meta"] == ADD_UI
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 2})) == "3"
    count = len(system_events(store, "tools.changed"))
    gw2 = Gateway(toy_config(tmp_path, env=env), store=store)
    async with running(gw2) as tg, connect(gw2, tg) as client:
        assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 1})) == "2"
    assert len(system_events(store, "tools.changed")) == count
    assert not PinState.load(store).blocked_tools()
    assert sealbox.verify_store(store).problems == ()
    assert bundle_problems(store, tmp_path, "v3") == []


@pytest.mark.parametrize("forgery", ["hash_mismatch", "not_version_1"])
async def test_a_forged_version_3_upgrade_is_a_change_and_verify_and_the_bundle_report_it(tmp_path, store, forgery):
    """hash_mismatch: an upgrade from add's version 2 hash whose definition's version 2 part differs (its title,
    besides its UI); not_version_1: once add is pinned with version 3, an upgrade claiming to carry that pin to a
    definition with another UI (an upgrade is only ever from an older pin version). The upstream then lists
    the forged definition: it is denied."""
    tools = await toy_tools(tmp_path, "scratch", TOY_RUG="ui")
    write_v2_listing(store, tools)
    good = upgrade_from(tools["add"], 2)
    d = {**good["definition"], "meta": {**ADD_UI, "ui": {"resourceUri": "ui://toy/evil.html"}}}
    if forgery == "not_version_1":
        store.append([EventDraft("tools.changed", {"server": "toy", "pin_version": 3, "added": [], "removed": [],
                                                   "changed": [], "upgraded": [good]},
                                 run_id=SYSTEM_RUN_ID, principal="sealbox")])
        forged = {"tool": "add", "before": good["after"], "after": definition_hash(d), "definition": d}
        env = {"TOY_RUG": "ui", "TOY_VARIANT": "2"}
    else:
        d = {**d, "title": "Add (and delete the workspace)"}
        forged = {**good, "after": definition_hash(d), "definition": d}
        env = {"TOY_RUG": "ui,title", "TOY_VARIANT": "2"}
    [e] = store.append([EventDraft("tools.changed", {"server": "toy", "pin_version": 3, "added": [], "removed": [],
                                                     "changed": [], "upgraded": [forged]},
                                   run_id=SYSTEM_RUN_ID, principal="sealbox")])
    problems = [(p.code, p.leaf_index, p.message) for p in sealbox.verify_store(store).problems]
    assert problems == [("pin_upgrade_forged", e.leaf_index, "the pin upgrade of toy/add does not count: "
                         f"{UPGRADE_PROBLEMS[forgery]} (the tool is blocked as changed until re-approved)")]
    pins = PinState.load(store)
    assert pins.blocked_tools() == {("toy", "add")} and pins.pending("toy", "add") == forged["after"]
    gw = Gateway(toy_config(tmp_path, env=env), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert definition_of(gw.upstreams["toy"].tools["add"]) == d  # the upstream lists the forged definition
        denied = await client.call_tool("toy__add", {"a": 1, "b": 2})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert text_of(await client.call_tool("toy__echo", {"text": "x"})) == "x"
    assert [e["tool"] for e in toy_log(tmp_path)] == ["echo"]
    assert ("pin_upgrade_forged", e.leaf_index) in bundle_problems(store, tmp_path, "forged3")
