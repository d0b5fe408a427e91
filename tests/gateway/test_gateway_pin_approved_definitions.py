"""Approval is of a tool's definition (its hash), not of "the latest seen": a definition approved once
(first listing, or a signed re-approval) stays approved when a later one is approved too.

A -> B -> A: the upstream lists an approved definition again; it is recorded (``tools.changed``,
honestly: the listing differs from the last recorded one) and not blocked. SQLite and (with
SEALBOX_TEST_POSTGRES_URL) PostgreSQL.
"""

from __future__ import annotations

import importlib.util
import os
import uuid

import anyio
import pytest

import sealbox
from sealbox.events import SYSTEM_RUN_ID
from sealbox.gateway import PIN_RULE, Gateway
from sealbox.gateway.pinning import PinState, reapprove
from sealbox.identities import add_identity
from identity_testkit import admin_key

from .conftest import connect, running, text_of, toy_config

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
                               schema=f"sbt_pins_{uuid.uuid4().hex[:16]}")
    yield s
    s.close()


@pytest.fixture
def alice(store, tmp_path):
    return add_identity(store, "alice", "approver", key_path=tmp_path / "alice.key",
                        admin_key=admin_key(store, tmp_path)).key_path


def changes(store):
    return [e.payload for e in store.read_run(SYSTEM_RUN_ID) if e.kind == "tools.changed"]


async def test_a_definition_listed_again_after_another_was_approved_stays_approved(tmp_path, store, alice):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        assert text_of(await client.call_tool("toy__echo", {"text": "A"})) == "A"  # A: approved on first use
        a = gw.pins.known[("toy", "echo")]
        await client.call_tool("toy__mutate", {})  # A -> B
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        denied = await client.call_tool("toy__echo", {"text": "B unapproved"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        b = gw.pins.known[("toy", "echo")]
        recorded = await anyio.to_thread.run_sync(lambda: reapprove(store, "toy", "echo", "reviewed B", alice))
        assert recorded["schema_hash"] == b
        assert text_of(await client.call_tool("toy__echo", {"text": "B"})) == "B"

        await client.call_tool("toy__mutate", {"back": True})  # B -> A: the definition approved first
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" not in u.tools)
        assert text_of(await client.call_tool("toy__echo", {"text": "A again"})) == "A again"
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["toy__echo"].description == "Echo the text back."  # not the [blocked…] notice

        await client.call_tool("toy__mutate", {})  # A -> B: approved too
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        assert text_of(await client.call_tool("toy__echo", {"text": "B again"})) == "B again"
        assert gw.pins.blocked("toy", "extra")  # added by the rug pull, never approved

    # the record: every listing that differed from the last recorded one, as it was
    echo = [[(c["before"], c["after"]) for c in p["changed"] if c["tool"] == "echo"] for p in changes(store)]
    assert echo == [[], [(a, b)], [(b, a)], [(a, b)]]
    assert [r.schema_hash for r in PinState.load(store).reapprovals] == [b]  # re-approved once, not again
    pins = PinState.load(store)  # as a restarted gateway reads it
    assert pins.approved_hashes[("toy", "echo")] == {a, b}
    assert not pins.blocked("toy", "echo") and pins.blocked("toy", "extra")
    report = sealbox.verify_store(store)
    assert report.ok and report.problems == () and report.notes == ()
