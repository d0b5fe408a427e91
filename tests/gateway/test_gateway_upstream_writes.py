"""Raw stdio upstreams (tests/gateway/servers/raw_server.py) that misbehave outside a call's answer: a tools/list
whose cursor never ends, a process that dies during a call, an upstream that stops reading while the gateway
still has to write to it (answers to its requests, notifications, re-lists)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import anyio
import pytest

import sealbox
from sealbox.gateway import Gateway

from .conftest import connect, gateway_runs, running, text_of, toy_args, toy_config

pytestmark = pytest.mark.anyio

RAW = str(Path(__file__).parent / "servers" / "raw_server.py")


def raw_upstreams(env: dict[str, str] | None = None) -> str:
    return f"""
  - id: raw
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(RAW)}]
    env: {json.dumps(env or {})}
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
"""


async def test_a_tools_list_repeating_its_cursor_marks_the_upstream_down_at_once(tmp_path, store, caplog):
    """A tools/list naming the same nextCursor on every page was read 1,000 times, then silently cut (its tools
    served, no log line). A repeated cursor is now a malformed tools/list: the upstream is down with that reason
    (logged), restarted with backoff; the other upstream is unaffected."""
    caplog.set_level(logging.WARNING, logger="sealbox")
    log = tmp_path / "raw.log"
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({"RAW_CURSOR": "loop", "RAW_LOG": str(log)})),
                 store=store)
    up = gw.upstreams["raw"]
    async with running(gw) as tg, connect(gw, tg) as client:
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.state == "down")
        listed = await client.list_tools()
        other = await client.call_tool("toy__echo", {"text": "unaffected"})
    reason = ("UpstreamProtocolError: upstream raw sent an invalid tools/list: page 2 named the cursor 'again' "
              "of page 1 again (a listing that would never end)")
    assert up.last_error == reason
    assert up.tools == {}
    assert [t.name for t in listed.tools if t.name.startswith("raw__")] == []
    assert text_of(other) == "unaffected"
    # each connection asked for 2 pages (the second named the first's cursor), not 1,000
    methods = log.read_text().splitlines()
    assert methods[:4] == ["initialize", "notifications/initialized", "tools/list", "tools/list"]
    assert methods[4:5] in ([], ["initialize"])  # then a restart, or none yet
    assert methods.count("tools/list") <= 2 * methods.count("initialize")  # the last connection may be listing
    assert f"upstream raw failed: {reason}" in [r.getMessage() for r in caplog.records]
    assert sealbox.verify_store(store).ok


async def test_a_tools_list_longer_than_the_page_cap_marks_the_upstream_down(tmp_path, store, caplog, monkeypatch):
    """A listing of more pages than MAX_LIST_PAGES (each cursor new) was cut there silently; now a malformed
    tools/list, logged."""
    from sealbox.gateway import upstream as upstream_mod

    monkeypatch.setattr(upstream_mod, "MAX_LIST_PAGES", 5)
    caplog.set_level(logging.WARNING, logger="sealbox")
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({"RAW_CURSOR": "6"})), store=store)
    up = gw.upstreams["raw"]
    async with running(gw):
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.state == "down")
    reason = "UpstreamProtocolError: upstream raw sent an invalid tools/list: more than 5 pages"
    assert up.last_error == reason
    assert f"upstream raw failed: {reason}" in [r.getMessage() for r in caplog.records]


async def test_a_tools_list_within_the_page_cap_is_served_whole(tmp_path, store, monkeypatch):
    from sealbox.gateway import upstream as upstream_mod

    monkeypatch.setattr(upstream_mod, "MAX_LIST_PAGES", 5)
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({"RAW_CURSOR": "5"})), store=store)
    async with running(gw):
        assert sorted(gw.upstreams["raw"].tools) == ["t1", "t2", "t3", "t4", "t5"]


async def test_a_call_cut_by_the_upstream_process_ending_says_how_it_ended(tmp_path, store):
    """A stdio upstream whose process died during a call was recorded as "upstream raw closed the connection
    during the call", its exit status unsaid. The status (or signal) is now part of the record; the upstream is
    restarted, the other one unaffected."""
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({"RAW_EXIT_STATUS": "3"}),
                            extra="breaker: {threshold: 5, cooldown_s: 0}"), store=store)
    up = gw.upstreams["raw"]
    async with running(gw) as tg, connect(gw, tg) as client:
        crashed = await client.call_tool("raw__crash", {})
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.generation >= 2 and u.state == "ready")
        killed = await client.call_tool("raw__killself", {})
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.generation >= 3 and u.state == "ready")
        back = await client.call_tool("raw__ok", {})
        other = await client.call_tool("toy__echo", {"text": "unaffected"})
    exit3 = "upstream raw closed the connection during the call (the process exited with status 3)"
    sig9 = "upstream raw closed the connection during the call (the process was ended by signal 9)"
    assert [(r.is_error, text_of(r)) for r in (crashed, killed, back, other)] == [
        (True, "upstream error: " + exit3), (True, "upstream error: " + sig9), (False, "ok"), (False, "unaffected")]
    [run_id] = gateway_runs(store)
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r.get("error", {}).get("type"), r.get("error", {}).get("message")) for r in results] == [
        (False, "UpstreamUnavailable", exit3), (False, "UpstreamUnavailable", sig9), (True, None, None),
        (True, None, None)]
    assert sealbox.verify_store(store).ok


@pytest.mark.parametrize("mode, what", [
    ("RAW_PING_AFTER", "the answer to its request"),
    ("RAW_LIST_CHANGED", "a tools/list request"),
])
async def test_an_upstream_that_stops_reading_is_restarted_when_a_write_outside_a_call_blocks(
        tmp_path, store, caplog, mode, what):
    """An upstream that stopped reading its stdin (the pipe full after a large call): the gateway's answers to its
    own requests (ping here, as sampling/elicitation/roots answers) waited for ever to be written, a task stuck
    per request and the upstream still "ready". Each write to an upstream is now bounded by limits.call_timeout_s:
    one that cannot complete is the upstream down (logged with that reason), restarted with backoff; its tools'
    calls meanwhile are UpstreamUnavailable (the breaker's server_down); the other upstream is unaffected."""
    caplog.set_level(logging.WARNING, logger="sealbox")
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({mode: "1"}),
                            extra="limits: {call_timeout_s: 1, startup_timeout_s: 600}\n"
                                  "breaker: {threshold: 5, cooldown_s: 0}"), store=store)
    up = gw.upstreams["raw"]
    with anyio.fail_after(120):  # a regression fails here, it does not hang the run
        async with running(gw) as tg, connect(gw, tg) as client:
            assert text_of(await client.call_tool("raw__deafen", {})) == "deaf"
            stuck = await client.call_tool("raw__ok", {"pad": "x" * 900_000})  # fills the pipe
            await up.wait_until(lambda u: u.generation >= 2 and u.state == "ready")
            back = await client.call_tool("raw__ok", {})
            other = await client.call_tool("toy__echo", {"text": "unaffected"})
    reason = (f"upstream raw did not read its input within 1 s (the gateway could not write {what} to it); "
              "restarting it")
    assert up.last_error == reason
    assert stuck.is_error and text_of(back) == "ok" and text_of(other) == "unaffected"
    assert f"upstream raw failed: {reason}" in [r.getMessage() for r in caplog.records]
    assert sealbox.verify_store(store).ok


async def test_a_call_that_cannot_be_written_to_an_upstream_that_stopped_reading_restarts_it(tmp_path, store, caplog):
    """A tools/call whose write blocked (the upstream alive but no longer reading its stdin, the pipe full) failed
    as UpstreamTimeout but the upstream stayed "ready" and deaf: every later call timed out the same way, for as
    long as the process lived. Such a call now ends the connection as a crash does: recorded UpstreamTimeout
    (saying it is restarted), the upstream down with that reason (logged), restarted with backoff, its calls
    answered again; the other upstream unaffected."""
    caplog.set_level(logging.WARNING, logger="sealbox")
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams(),
                            extra="limits: {call_timeout_s: 1}\nbreaker: {threshold: 5, cooldown_s: 0}"), store=store)
    up = gw.upstreams["raw"]
    pad = "x" * 900_000  # more than a pipe holds
    async with running(gw) as tg, connect(gw, tg) as client:
        assert text_of(await client.call_tool("raw__deafen", {})) == "deaf"
        sent = await client.call_tool("raw__ok", {"pad": pad})  # taken by the transport's writer, which blocks
        blocked = await client.call_tool("raw__ok", {"pad": pad})  # cannot even be handed to the writer
        with anyio.fail_after(60):
            await up.wait_until(lambda u: u.generation >= 2 and u.state == "ready")
        back = await client.call_tool("raw__ok", {"pad": pad})
        other = await client.call_tool("toy__echo", {"text": "unaffected"})
    took = "upstream raw did not answer within 1 s; the call was sent, so it may have been carried out: check " \
           "before calling again"
    unread = "upstream raw did not read the call within 1 s (it is not reading its input; it is being restarted); " \
             "it may still reach the upstream: check before calling again"
    reason = ("upstream raw did not read its input within 1 s (the gateway could not write a tools/call request to "
              "it); restarting it")
    assert [(r.is_error, text_of(r)) for r in (sent, blocked, back, other)] == [
        (True, "upstream error: " + took), (True, "upstream error: " + unread), (False, "ok"), (False, "unaffected")]
    assert up.last_error == reason
    assert f"upstream raw failed: {reason}" in [r.getMessage() for r in caplog.records]
    [run_id] = gateway_runs(store)
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r.get("error", {}).get("type"), r.get("error", {}).get("message")) for r in results] == [
        (True, None, None), (False, "UpstreamTimeout", took), (False, "UpstreamTimeout", unread), (True, None, None),
        (True, None, None)]
    assert sealbox.verify_store(store).ok


def test_sigterm_while_a_write_to_an_upstream_is_blocked_is_a_clean_stop(tmp_path):
    """SIGTERM to `sealbox gateway serve` while a stdio upstream no longer reads its input: one call handed to the
    transport's writer (stuck on the full pipe), one whose write cannot even start. The stop waits for the first
    within the shutdown grace (here its own call timeout, 3 s, is shorter: UpstreamTimeout) and answers the second
    at once, not forwarded (GatewayStopping): both recorded, the run ended, exit 0, nothing on stderr."""
    import signal
    import subprocess
    import time

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
limits: {{call_timeout_s: 3}}
upstreams:
  - id: raw
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(RAW)}]
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        def send(msg: dict) -> None:
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()

        def read_id(want: int) -> dict:
            while True:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                msg = json.loads(line)
                if msg.get("id") == want:
                    return msg

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        read_id(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "raw__deafen", "arguments": {}}})
        assert read_id(2)["result"]["content"] == [{"type": "text", "text": "deaf"}]
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "raw__ok",
                                                                           "arguments": {"pad": "x" * 900_000}}})
        send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "raw__ok", "arguments": {}}})
        store = sealbox.open_store(tmp_path / "store", readonly=True)
        try:  # both calls recorded (tool.call), so in flight, before the signal
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                runs = gateway_runs(store)
                if runs and [e.kind for e in store.read_run(runs[0])].count("tool.call") == 3:
                    break
                time.sleep(0.05)
        finally:
            store.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert (proc.returncode, err) == (0, "")
    replies = {m["id"]: m["result"] for m in map(json.loads, out.splitlines()) if "id" in m}
    took = "upstream raw did not answer within 3 s; the call was sent, so it may have been carried out: check " \
           "before calling again"
    stopping = ("not forwarded: the gateway is stopping (the call was never written to upstream raw); call again "
                "once it is back")
    assert {k: (r["isError"], r["content"][0]["text"]) for k, r in replies.items()} == {
        3: (True, "upstream error: " + took), 4: (True, stopping)}
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        events = store.read_run(run_id)
        assert [e.kind for e in events][-3:] == ["tool.result", "tool.result", "run.ended"]
        assert sorted((e.payload["ok"], e.payload["error"]["type"], e.payload["error"]["message"])
                      for e in events if e.kind == "tool.result" and not e.payload["ok"]) == sorted([
            (False, "UpstreamTimeout", took), (False, "GatewayStopping", stopping)])
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


def test_sigterm_answers_a_call_never_written_at_once_and_cuts_a_call_written_after_the_shutdown_grace(tmp_path):
    """SIGTERM with limits.call_timeout_s: 120 while a stdio upstream no longer reads its input took over 120 s to
    exit: the stop waited call_timeout_s + 1 s for a call whose request was never written (queued behind the
    blocked write) as for one in flight. Now a call never written to the upstream is answered at once, not
    forwarded ("the gateway is stopping"; recorded GatewayStopping), and one written (it may have run) is given
    the shutdown grace (5 s), then answered and recorded CutAtShutdown (its outcome unknown): exit 0 well within
    call_timeout_s, the run ended, the store verified."""
    import signal
    import subprocess
    import time

    sealbox.init_store(tmp_path / "store").close()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"""version: 1
store: ./store
policy: ALLOW_ALL
limits: {{call_timeout_s: 120}}
upstreams:
  - id: raw
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(RAW)}]
""")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "sealbox"), "gateway", "serve", "--config", str(config)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        def send(msg: dict) -> None:
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()

        def read_id(want: int) -> dict:
            while True:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                msg = json.loads(line)
                if msg.get("id") == want:
                    return msg

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        read_id(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "raw__deafen", "arguments": {}}})
        assert read_id(2)["result"]["content"] == [{"type": "text", "text": "deaf"}]
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "raw__ok",
                                                                           "arguments": {"pad": "x" * 900_000}}})
        send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "raw__ok", "arguments": {}}})
        store = sealbox.open_store(tmp_path / "store", readonly=True)
        try:  # both calls recorded (tool.call), so in flight, before the signal
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                runs = gateway_runs(store)
                if runs and [e.kind for e in store.read_run(runs[0])].count("tool.call") == 3:
                    break
                time.sleep(0.05)
        finally:
            store.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)  # far less than call_timeout_s (120 s): a regression fails here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert (proc.returncode, err) == (0, "")
    replies = {m["id"]: m["result"] for m in map(json.loads, out.splitlines()) if "id" in m}
    cut = ("upstream raw had not answered when the gateway stopped (shutdown grace 5 s); the call was sent, so it "
           "may have been carried out: check before calling again")
    stopping = ("not forwarded: the gateway is stopping (the call was never written to upstream raw); call again "
                "once it is back")
    assert {k: (r["isError"], r["content"][0]["text"], r.get("_meta")) for k, r in replies.items()} == {
        3: (True, "upstream error: " + cut, {"sealbox/upstream_error": "CutAtShutdown"}),
        4: (True, stopping, {"sealbox/not_forwarded": "gateway_stopping"})}
    store = sealbox.open_store(tmp_path / "store", readonly=True)
    try:
        [run_id] = gateway_runs(store)
        events = store.read_run(run_id)
        assert [e.kind for e in events][-3:] == ["tool.result", "tool.result", "run.ended"]
        assert [(e.payload["ok"], e.payload["error"]["type"], e.payload["error"]["message"])
                for e in events if e.kind == "tool.result" and not e.payload["ok"]] == [
            (False, "GatewayStopping", stopping), (False, "CutAtShutdown", cut)]
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


async def test_a_call_waiting_for_a_relist_the_upstream_does_not_answer_is_bounded_by_the_call_timeout(
        tmp_path, store, caplog):
    """A tools/call waiting for the re-list after notifications/tools/list_changed (Upstream.current) was bounded
    by limits.startup_timeout_s (30 s by default), not the call's timeout: an upstream that stopped reading after
    announcing a change, its tools/list written (it fit in the pipe) and never answered, held its calls that long
    (here 600 s). The wait is now bounded by limits.call_timeout_s (the smaller of the two): then the upstream is
    down with a reason saying the re-list was not answered (logged, restarted with backoff), and the call is
    recorded UpstreamUnavailable with that reason; after the restart calls are answered again."""
    caplog.set_level(logging.WARNING, logger="sealbox")
    gw = Gateway(toy_config(tmp_path, upstreams=raw_upstreams({"RAW_LIST_CHANGED": "1"}),
                            extra="limits: {call_timeout_s: 1, startup_timeout_s: 600}\n"
                                  "breaker: {threshold: 5, cooldown_s: 0}"), store=store)
    up = gw.upstreams["raw"]
    with anyio.fail_after(120):  # a regression fails here (the call would wait 600 s), it does not hang the run
        async with running(gw) as tg, connect(gw, tg) as client:
            assert text_of(await client.call_tool("raw__deafen", {})) == "deaf"
            # 20 KB lie unread in its stdin (the pipe holds them): it announces a change every 0.2 s, and the
            # gateway's tools/list is written too (it fits) but never answered
            unanswered = await client.call_tool("raw__ok", {"pad": "x" * 20_000})
            while up._notified == 0:  # the announcement received (polled: no event marks it)
                await anyio.sleep(0.02)
            waited = await client.call_tool("raw__ok", {})
            await up.wait_until(lambda u: u.generation >= 2 and u.state == "ready")
            back = await client.call_tool("raw__ok", {})
    reason = ("upstream raw did not answer the tools/list it was sent after its notifications/tools/list_changed "
              "within 1 s (a call waited for it); restarting it")
    took = "upstream raw did not answer within 1 s; the call was sent, so it may have been carried out: check " \
           "before calling again"
    assert [(r.is_error, text_of(r)) for r in (unanswered, waited, back)] == [
        (True, "upstream error: " + took), (True, f"upstream error: upstream raw is down ({reason})"), (False, "ok")]
    assert up.last_error == reason
    assert f"upstream raw failed: {reason}" in [r.getMessage() for r in caplog.records]
    [run_id] = gateway_runs(store)
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r.get("error", {}).get("type"), r.get("error", {}).get("message")) for r in results] == [
        (True, None, None), (False, "UpstreamTimeout", took),
        (False, "UpstreamUnavailable", f"upstream raw is down ({reason})"), (True, None, None)]
    assert sealbox.verify_store(store).ok
