"""An upstream flooding notifications/tools/list_changed: re-lists are coalesced (a bounded number of
tools.changed events and client notifications), and a call is never decided against a listing older
than a change announced before it (pinning still denies the changed tool)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from sealbox.gateway import PIN_RULE, Gateway

from .conftest import connect, running, system_events, text_of, toy_config

pytestmark = pytest.mark.anyio

FLIP = str(Path(__file__).parent / "servers" / "flip_server.py")


def flip_config(tmp_path, *, notify_on_list: bool = False, list_delay: float = 0.0):
    env = ", ".join(([] if not notify_on_list else ['FLIP_NOTIFY_ON_LIST: "1"'])
                    + ([] if not list_delay else [f'FLIP_LIST_DELAY: "{list_delay}"']))
    env = f"\n    env: {{{env}}}" if env else ""
    ups = f"""
  - id: flip
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(FLIP)}]{env}
"""
    return toy_config(tmp_path, upstreams=ups)


class Notices:
    """Counts the notifications/tools/list_changed the gateway sends its client."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, message) -> None:
        if getattr(getattr(message, "root", message), "method", None) == "notifications/tools/list_changed":
            self.count += 1


async def test_a_burst_of_list_changed_is_one_relist_made_before_the_next_call_is_decided(tmp_path, store):
    """200 notifications made up to 200 re-listings, each writing a tools.changed event and notifying
    the client (an upstream changing on every listing): now one, made when the next call needs it."""
    notices = Notices()
    gw = Gateway(flip_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg, message_handler=notices) as client:
        up = gw.upstreams["flip"]
        up.relist_interval_s = 60.0  # no re-list but the one a call waits for
        [first] = system_events(store, "tools.changed")
        assert first["first_seen"] is True and sorted(a["tool"] for a in first["added"]) == ["echo", "flood", "storm"]
        assert text_of(await client.call_tool("flip__flood", {"count": 200})) == "flooded 200"
        before = notices.count
        # the 200 notifications arrived before the flood's answer: this call waits for the re-list
        denied = await client.call_tool("flip__echo", {"text": "hi"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        await anyio.sleep(1.0)
        events = system_events(store, "tools.changed")
        assert len(events) == 2
        assert [c["tool"] for c in events[1]["changed"]] == ["echo"]
        assert [a["tool"] for a in events[1]["added"]] == ["extra"] and events[1]["removed"] == []
        assert notices.count - before == 1
        assert "extra" in up.tools and up.tools["echo"].description == "Echo the text back (listing 2)."


async def test_an_upstream_announcing_a_change_on_every_listing_is_relisted_at_a_slowing_pace(tmp_path, store):
    """It lists, announces a change, is listed again, without end: 125 tools.changed events in 2 s before.
    Re-lists are 0.5 s apart, then 1 s, 2 s (doubling while the notifications keep coming): in the
    3 s after the storm started at most 1 (at once) + 3 re-lists; a call still waits for none of the gaps."""
    notices = Notices()
    gw = Gateway(flip_config(tmp_path, notify_on_list=True), store=store)
    async with running(gw) as tg, connect(gw, tg, message_handler=notices) as client:
        await anyio.sleep(0.6)  # the first re-list after the one at start is not held back
        start = anyio.current_time()
        assert text_of(await client.call_tool("flip__storm", {"seconds": 2})).startswith("stormed ")
        await anyio.sleep(max(0.0, 3.0 - (anyio.current_time() - start)))
        relists = len(system_events(store, "tools.changed")) - 1
        assert 2 <= relists <= 4 and notices.count <= relists
        called = anyio.current_time()
        denied = await client.call_tool("flip__echo", {"text": "hi"})
        assert anyio.current_time() - called < 2.0  # not held for the current 4 s gap
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        assert len(system_events(store, "tools.changed")) - 1 == relists + 1


async def test_a_storm_from_an_upstream_slower_to_list_than_the_gap_is_still_relisted_at_a_slowing_pace(tmp_path, store):
    """Each listing takes 1.2 s and announces a change: the re-list after the 1 s gap was due once the
    listing ended, which was taken for the end of the storm (the gap went back to 0.5 s), so the upstream was
    re-listed back to back without end, a tools.changed event every 1.2 s (4 in the 6 s after start; on a
    loaded machine a slow recording of tools.changed did the same to a fast upstream). A change announced
    while being listed is the storm going on: re-lists start 0.5, 1 then 2 s after the one before (the gap
    doubling, however long a listing takes), at +0.5, +1.7, +3.7 s, then +7.7 s: 3 in those 6 s."""
    gw = Gateway(flip_config(tmp_path, notify_on_list=True, list_delay=1.2), store=store)
    async with running(gw):
        await anyio.sleep(6.0)
        relists = len(system_events(store, "tools.changed")) - 1
        assert 1 <= relists <= 3, relists  # slower listings or a loaded machine make fewer, never more
