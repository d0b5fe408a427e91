"""Tool pinning (rug pulls) and upstream failures (crash, hang, malformed output)."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

import sealbox
import sealbox.identities
from sealbox.cli.main import cli
from sealbox.gateway import PIN_RULE, Gateway
from sealbox.gateway.pinning import reapproval_fields
from sealbox.identities import add_identity
from identity_testkit import admin_key

from .conftest import connect, gateway_runs, running, set_call_timeout, system_events, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


def alice_key(store, tmp_path):
    """An enabled approver's key file (``alice``), added once."""
    path = tmp_path / "alice.key"
    if not path.exists():
        add_identity(store, "alice", "approver", key_path=path, admin_key=admin_key(store, tmp_path))
    return path


def reapprove(store_path, server, tool, *extra, key=None):
    key = key if key is not None else Path(store_path).parent / "alice.key"
    return CliRunner().invoke(cli, ["gateway", "reapprove", server, tool, "--store", str(store_path),
                                    "--reason", "reviewed the new description", "--key-file", str(key), *extra])


async def test_first_listing_is_pinned_and_a_rug_pull_is_recorded_and_denied_until_reapproved(tmp_path, store):
    alice_key(store, tmp_path)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        [first] = system_events(store, "tools.changed")
        assert first["first_seen"] is True and len(first["added"]) == 11
        assert text_of(await client.call_tool("toy__echo", {"text": "before"})) == "before"

        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
        [_, change] = system_events(store, "tools.changed")
        assert [c["tool"] for c in change["changed"]] == ["echo"] and change["changed"][0]["fields"] == ["description"]
        assert [a["tool"] for a in change["added"]] == ["extra"] and change["removed"] == []

        denied = await client.call_tool("toy__echo", {"text": "after"})
        assert denied.is_error is True and PIN_RULE in text_of(denied)
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
        assert listed["toy__echo"].startswith("[blocked") and "ssh" not in listed["toy__echo"]
        assert (await client.call_tool("toy__add", {"a": 1, "b": 1})).is_error is False  # unchanged tools still run

        out = reapprove(tmp_path / "store", "toy", "echo")
        assert out.exit_code == 0, out.output
        assert text_of(await client.call_tool("toy__echo", {"text": "approved"})) == "approved"
        assert (await client.call_tool("toy__extra", {})).is_error is True  # still blocked: added, never approved
    [reapproved] = system_events(store, "tool.reapproved")
    [change_event] = [e for e in store.read_run("system") if e.kind == "tools.changed"][1:]
    alice = sealbox.identities.identity_book(store).get("alice")
    assert {k: v for k, v in reapproved.items() if k not in ("signature", "reapproved_at")} == {
        "server": "toy", "tool": "echo", "identity": "alice", "schema_hash": change["changed"][0]["after"],
        "change_leaf": change_event.leaf_index, "origin": store.origin, "reason": "reviewed the new description",
        "key_id": alice.key_id}
    assert sealbox.identities.verify_fields(alice.public_key, reapproval_fields(reapproved), reapproved["signature"])
    assert [e["arguments"].get("text") for e in toy_log(tmp_path) if e["tool"] == "echo"] == ["before", "approved"]
    assert sealbox.verify_store(store).ok


async def test_a_client_is_told_when_a_blocked_tool_is_reapproved(tmp_path, store):
    """A re-approval (recorded by another process: the CLI) sent no tools/list_changed, so a client
    kept the '[blocked…]' description it had listed; now it is told, and lists the tool's own."""
    got: list[str] = []

    async def note(message):
        got.append(getattr(getattr(message, "root", message), "method", ""))

    alice_key(store, tmp_path)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg, message_handler=note) as client:
        await client.call_tool("toy__mutate", {})
        with anyio.fail_after(10):
            await gw.upstreams["toy"].wait_until(lambda u: "extra" in u.tools)
            while "notifications/tools/list_changed" not in got:  # the rug pull itself
                await anyio.sleep(0.05)
        blocked = {t.name: t.description for t in (await client.list_tools()).tools}
        got.clear()
        assert reapprove(tmp_path / "store", "toy", "echo").exit_code == 0
        with anyio.fail_after(10):
            while "notifications/tools/list_changed" not in got:
                await anyio.sleep(0.05)
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
    assert blocked["toy__echo"].startswith("[blocked") and blocked["toy__extra"].startswith("[blocked")
    assert not listed["toy__echo"].startswith("[blocked") and "ssh" in listed["toy__echo"]
    assert listed["toy__extra"].startswith("[blocked")  # added, never approved


async def test_a_rug_pull_between_runs_is_caught_at_start(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "one"})
    gw2 = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw2) as tg, connect(gw2, tg) as client:
        denied = await client.call_tool("toy__echo", {"text": "two"})
    assert denied.is_error is True and PIN_RULE in text_of(denied)
    changes = system_events(store, "tools.changed")
    assert [bool(c.get("first_seen")) for c in changes] == [True, False]


async def test_whatif_says_a_pinned_tool_deny_was_made_outside_the_policy_not_that_it_read_redacted_content(
        tmp_path, store):
    """The gateway's tool-changed deny is recorded not re-evaluable; what-if gave the reason of a
    condition that read redacted content, which nothing here did (the call's text is in clear)."""
    from sealbox.policy import Policy
    from sealbox.replay.whatif import whatif_policy

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__echo", {"text": "one"})
    gw2 = Gateway(toy_config(tmp_path, env={"TOY_VARIANT": "2"}), store=store)
    async with running(gw2) as tg, connect(gw2, tg) as client:
        await client.call_tool("toy__echo", {"text": "two"})
    run_id = gateway_runs(store)[-1]
    allow = Policy.from_text("version: 1\nrules:\n  - id: all\n    effect: allow\n")
    report = whatif_policy(store, allow, [run_id])
    assert [(n.tool, n.why) for n in report.not_re_evaluable] == [
        ("echo", f"the decision was made outside the policy, by {PIN_RULE}: tool toy/echo changed upstream and "
                 f"has not been re-approved (sealbox gateway reapprove toy echo --store {tmp_path / 'store'} "
                 "--reason TEXT --key-file KEY)")]
    assert report.changed == ()


async def test_reapprove_refuses_a_tool_with_no_pending_change(tmp_path, store):
    alice_key(store, tmp_path)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw):
        pass
    out = reapprove(tmp_path / "store", "toy", "echo")
    assert out.exit_code != 0 and "has no unapproved change" in str(out.exception)
    assert reapprove(tmp_path / "store", "toy", "nope").exit_code != 0


async def test_an_upstream_crash_is_a_recorded_error_opens_the_breaker_and_restarts(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 5, cooldown_s: 0}"), store=store)
    up = gw.upstreams["toy"]
    async with running(gw) as tg, connect(gw, tg) as client:
        crashed = await client.call_tool("toy__crash", {})
        assert crashed.is_error is True and "upstream error" in text_of(crashed)
        with anyio.fail_after(15):
            await up.wait_until(lambda u: u.generation >= 2 and u.state == "ready")
        again = await client.call_tool("toy__echo", {"text": "back"})
        [run_id] = gateway_runs(store)
    assert text_of(again) == "back"
    result = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"][0]
    assert result["ok"] is False and result["error"]["type"] == "UpstreamUnavailable"
    opened = [b for b in system_events(store, "breaker.changed") if b["to"] == "open"]
    assert opened and {b["reason"] for b in opened} == {"server_down"}
    assert sealbox.verify_store(store).ok


async def test_calls_while_the_breaker_is_open_are_denied_without_forwarding(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="breaker: {threshold: 5, cooldown_s: 600}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        await client.call_tool("toy__crash", {})
        with anyio.fail_after(15):
            await gw.upstreams["toy"].wait_until(lambda u: u.generation >= 2 and u.state == "ready")
        denied = await client.call_tool("toy__echo", {"text": "x"})
    assert denied.is_error is True
    # no rule denied it: the text says what did (it said "denied by no rule")
    assert re.fullmatch(r"denied \(breaker_open\): circuit breaker for toy/echo is open; next probe in \d+\.\d s "
                        r"\[call call_[0-9a-f]{24}\]", text_of(denied)), text_of(denied)
    assert [e for e in toy_log(tmp_path) if e["tool"] == "echo"] == []


async def test_a_hung_upstream_call_times_out_as_a_recorded_error(tmp_path, store):
    gw = Gateway(toy_config(tmp_path, extra="limits: {call_timeout_s: 0.5}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            hung = await client.call_tool("toy__hang", {})
            set_call_timeout(gw, 60)  # the next call is answered, however loaded the host
            ok = await client.call_tool("toy__echo", {"text": "still here"})
        [run_id] = gateway_runs(store)
    # the text tells the model the call went out (a timed-out call may have run: not a "try again")
    text = ("upstream toy did not answer within 0.5 s; the call was sent, so it may have been carried out: check "
            "before calling again")
    assert (hung.is_error, text_of(hung)) == (True, "upstream error: " + text)
    assert text_of(ok) == "still here"
    result = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"][0]
    assert (result["ok"], result["error"]["type"], result["error"]["message"]) == (False, "UpstreamTimeout", text)


async def test_a_malformed_line_from_the_upstream_does_not_take_the_gateway_down(tmp_path, store):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        answer = await client.call_tool("toy__garbage", {})
        after = await client.call_tool("toy__echo", {"text": "fine"})
    assert text_of(answer) == "after garbage" and text_of(after) == "fine"
    assert gw.upstreams["toy"].malformed == 1


@pytest.mark.parametrize("reply", ["surrogate", "deep"])
async def test_an_answer_the_sdk_cannot_read_fails_its_call_at_once_as_malformed(tmp_path, store, reply):
    """The upstream answers a call with a line the SDK cannot parse (a lone surrogate escape, or nesting
    3000 deep) but whose id can be read: the call waited for the whole call timeout and was recorded as
    UpstreamTimeout (a breaker timeout), though the upstream had answered. It now fails at once,
    recorded as UpstreamProtocolError "sent a malformed response", and the upstream stays up."""
    gw = Gateway(toy_config(tmp_path, extra="limits: {call_timeout_s: 20}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        started = anyio.current_time()
        answer = await client.call_tool("toy__garbage", {"reply": reply})
        took = anyio.current_time() - started
        after = await client.call_tool("toy__echo", {"text": "fine"})
    [run_id] = gateway_runs(store)
    assert took < 5
    assert answer.is_error is True and answer.meta == {"sealbox/upstream_error": "UpstreamProtocolError"}
    assert text_of(answer).startswith("upstream error: upstream toy sent a malformed response: ")
    assert "\n" not in text_of(answer)
    assert text_of(after) == "fine" and gw.upstreams["toy"].state == "ready"
    assert gw.upstreams["toy"].malformed == 1
    [first, _] = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert (first["ok"], first["error"]["type"]) == (False, "UpstreamProtocolError")
    assert first["error"]["message"] == text_of(answer).removeprefix("upstream error: ")


async def test_lines_that_are_not_utf8_are_malformed_messages_and_the_upstream_reads_on(tmp_path, store, caplog):
    """A line that is not UTF-8 (MCP's stdio transport is UTF-8) is one malformed message, never
    decoded with replacement characters into a message the upstream did not send; the SDK's own
    reader stopped reading the upstream for good there, so every later call timed out."""
    import logging

    gw = Gateway(toy_config(tmp_path, extra="limits: {call_timeout_s: 5}"), store=store)
    with caplog.at_level(logging.WARNING, logger="sealbox.gateway"):
        async with running(gw) as tg, connect(gw, tg) as client:
            answer = await client.call_tool("toy__garbage", {"bytes": True})
            after = await client.call_tool("toy__echo", {"text": "fine"})
            again = await client.call_tool("toy__garbage", {"bytes": True})
    assert (answer.is_error, text_of(answer)) == (False, "after garbage")
    assert (after.is_error, text_of(after)) == (False, "fine")
    assert (again.is_error, text_of(again)) == (False, "after garbage")
    assert (gw.upstreams["toy"].malformed, gw.upstreams["toy"].state) == (4, "ready")
    warned = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    # the first is logged; the others (rate-limited) are summed up when the upstream's output ends
    assert warned == ["upstream toy sent a malformed message: a line that is not valid UTF-8 (dropped)",
                      "upstream toy sent 3 more malformed messages (logged at most once every 10 s); the latest: "
                      "a line that is not valid UTF-8 (dropped)"]


async def test_an_upstream_that_cannot_start_leaves_the_gateway_serving_the_others(tmp_path, store):
    import json
    import sys

    from .conftest import toy_args

    ups = f"""
  - id: broken
    command: {json.dumps(sys.executable)}
    args: ["-c", "import sys; sys.exit(2)"]
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
"""
    gw = Gateway(toy_config(tmp_path, upstreams=ups, extra="limits: {startup_timeout_s: 5}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert gw.upstreams["broken"].state in ("down", "starting") and gw.upstreams["broken"].last_error
    assert "toy__echo" in names and not any(n.startswith("broken__") for n in names)


async def test_an_upstream_that_never_answers_initialize_says_so(tmp_path, store, caplog):
    """anyio's TimeoutError has no message: the log line was "upstream silent failed: TimeoutError: "
    and a call's recorded error "upstream silent is down (TimeoutError: )"."""
    import json
    import logging
    import sys

    ups = f"""
  - id: silent
    command: {json.dumps(sys.executable)}
    args: ["-c", "import time; time.sleep(60)"]
"""
    caplog.set_level(logging.WARNING, logger="sealbox.gateway")
    gw = Gateway(toy_config(tmp_path, upstreams=ups, extra="limits: {startup_timeout_s: 0.5}"), store=store)
    async with running(gw):
        with anyio.fail_after(10):
            await gw.upstreams["silent"].wait_until(lambda u: u.state == "down")
        error = gw.upstreams["silent"].last_error
    assert error == "TimeoutError: no answer to initialize and tools/list within 0.5 s (limits.startup_timeout_s)"
    assert f"upstream silent failed: {error}" in [r.getMessage() for r in caplog.records]


async def test_an_upstream_that_exits_during_initialize_is_logged_with_its_exit_status_and_last_stderr_line(
        tmp_path, store, caplog):
    """The log line and last_error said only "MCPError: Connection closed": not that the process had
    exited, with which status, nor the last thing it wrote on stderr (why it gave up)."""
    import json
    import logging
    import sys

    script = ("import sys; sys.stdin.readline(); sys.stderr.write('loading config\\nfatal: API_KEY is unset\\n'); "
              "sys.stderr.flush(); sys.exit(3)")
    ups = f"""
  - id: crashy
    command: {json.dumps(sys.executable)}
    args: ["-c", {json.dumps(script)}]
"""
    caplog.set_level(logging.WARNING, logger="sealbox.gateway")
    errlog = (tmp_path / "stderr.txt").open("w")
    gw = Gateway(toy_config(tmp_path, upstreams=ups, extra="limits: {startup_timeout_s: 5}"),
                 store=store, errlog=errlog)
    async with running(gw):
        with anyio.fail_after(10):
            await gw.upstreams["crashy"].wait_until(lambda u: u.state == "down")
        error = gw.upstreams["crashy"].last_error
    errlog.close()
    assert error == ("MCPError: Connection closed (the process exited with status 3; "
                     "its last stderr line: fatal: API_KEY is unset)")
    assert f"upstream crashy failed: {error}" in [r.getMessage() for r in caplog.records]
    # its stderr still reaches the gateway's errlog, whole (once per start: it is restarted after 0.05 s)
    out = (tmp_path / "stderr.txt").read_text()
    assert out.count("loading config") >= 1 and out == "loading config\nfatal: API_KEY is unset\n" * out.count("loading config")


@pytest.mark.parametrize("reply, what", [
    ("null", "result: Input should be an object (input None)"),
    ("list", "result: Input should be an object (input [1, 2])"),
    ("string-error", "error: Input should be an object (input 'boom')"),
])
async def test_an_answer_that_is_json_but_no_json_rpc_response_fails_its_call_at_once(tmp_path, store, reply, what):
    """The upstream answers a call with valid JSON whose id can be read but which is no JSON-RPC response
    (``"result": null``, a list result, a string ``error``): the call waited for the whole call timeout
    and was recorded as UpstreamTimeout ("did not answer … may have been carried out"), though the upstream
    had answered at once. It now fails at once as UpstreamProtocolError "sent a malformed response"."""
    gw = Gateway(toy_config(tmp_path, extra="limits: {call_timeout_s: 60}"), store=store)
    async with running(gw) as tg, connect(gw, tg) as client:
        with anyio.fail_after(30):
            answer = await client.call_tool("toy__garbage", {"reply": reply})
        after = await client.call_tool("toy__echo", {"text": "fine"})
    [run_id] = gateway_runs(store)
    assert answer.is_error is True and answer.meta == {"sealbox/upstream_error": "UpstreamProtocolError"}
    assert text_of(answer) == f"upstream error: upstream toy sent a malformed response: {what}"
    assert text_of(after) == "fine" and gw.upstreams["toy"].state == "ready"
    assert gw.upstreams["toy"].malformed == 1
    [first, _] = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert (first["ok"], first["error"]["type"]) == (False, "UpstreamProtocolError")
    assert first["error"]["message"] == text_of(answer).removeprefix("upstream error: ")
    assert sealbox.verify_store(store).ok


async def test_calls_to_an_upstream_that_stopped_reading_its_input_time_out_and_are_recorded(tmp_path, store):
    """A stdio upstream that is alive but no longer reads its stdin: once the pipe is full, the SDK's write of a
    call blocks, and its read timeout only starts after the write. The first call took the call timeout plus the
    SDK's 5 s for its cancel notification; every later one hung for ever (no tool.result, the client waiting,
    the session unable to end). Each now fails within the call timeout as UpstreamTimeout, recorded; the breaker
    counts it; other upstreams are unaffected."""
    import json
    import sys

    from .conftest import toy_args

    deaf = str(Path(__file__).parent / "servers" / "deaf_server.py")
    ups = f"""
  - id: deaf
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(deaf)}]
  - id: toy
    command: {json.dumps(sys.executable)}
    args: {json.dumps(toy_args())}
"""
    gw = Gateway(toy_config(tmp_path, upstreams=ups, extra="limits: {call_timeout_s: 1}\n"
                            "breaker: {threshold: 3, cooldown_s: 600}"), store=store)
    pad = "x" * 900_000  # more than a pipe holds: the write cannot complete
    async with running(gw) as tg, connect(gw, tg) as client:
        assert text_of(await client.call_tool("deaf__deafen", {})) == "deaf"
        with anyio.fail_after(60):
            failed = [await client.call_tool("deaf__ok", {"pad": pad}) for _ in range(2)]
        down = await client.call_tool("deaf__ok", {"pad": pad})
        denied = await client.call_tool("deaf__ok", {})
        other = await client.call_tool("toy__echo", {"text": "unaffected"})
    [run_id] = gateway_runs(store)
    assert [(r.is_error, r.meta) for r in failed] == [(True, {"sealbox/upstream_error": "UpstreamTimeout"})] * 2
    took = "upstream deaf did not answer within 1 s; the call was sent, so it may have been carried out: check " \
           "before calling again"
    blocked = "upstream deaf did not read the call within 1 s (it is not reading its input; it is being restarted); " \
              "it may still reach the upstream: check before calling again"
    assert [text_of(r) for r in failed] == ["upstream error: " + took, "upstream error: " + blocked]
    assert down.is_error and down.meta == {"sealbox/upstream_error": "UpstreamUnavailable"}
    assert text_of(denied).startswith("denied (breaker_open): circuit breaker for deaf/ok is open")
    assert text_of(down) in ["upstream error: upstream deaf is down (its connection closed; it is being restarted)",
                             "upstream error: upstream deaf is down (upstream deaf did not read its input within 1 s "
                             "(the gateway could not write a tools/call request to it); restarting it)"]
    assert text_of(other) == "unaffected"
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r.get("error", {}).get("type"), r.get("error", {}).get("message")) for r in results[1:4]] == [
        (False, "UpstreamTimeout", took), (False, "UpstreamTimeout", blocked),
        (False, "UpstreamUnavailable", text_of(down).removeprefix("upstream error: "))]
    assert sealbox.verify_store(store).ok


async def test_a_call_after_an_upstream_closed_its_output_is_not_said_to_be_cut_during_the_call(tmp_path, store):
    """A stdio upstream that closes its stdout but lives on: the gateway ends the connection, which takes
    seconds (the SDK waits for the process, then terminates, then kills it). Meanwhile the upstream was
    still "ready", and each call made then was recorded as "upstream deaf closed the connection during the
    call", as if sent and cut: none was sent. They now say the upstream is down and being restarted."""
    import json
    import sys

    deaf = str(Path(__file__).parent / "servers" / "deaf_server.py")
    ups = f"""
  - id: deaf
    command: {json.dumps(sys.executable)}
    args: [{json.dumps(deaf)}]
"""
    gw = Gateway(toy_config(tmp_path, upstreams=ups, extra="breaker: {threshold: 5, cooldown_s: 0}"), store=store)
    up = gw.upstreams["deaf"]
    async with running(gw) as tg, connect(gw, tg) as client:
        cut = await client.call_tool("deaf__hangup", {})
        after = await client.call_tool("deaf__ok", {})
        with anyio.fail_after(30):
            await up.wait_until(lambda u: u.generation >= 2 and u.state == "ready")
        back = await client.call_tool("deaf__ok", {})
    [run_id] = gateway_runs(store)
    assert text_of(cut) == "upstream error: upstream deaf closed the connection during the call"
    down = "upstream deaf is down (its connection closed; it is being restarted)"
    assert (after.is_error, after.meta, text_of(after)) == (
        True, {"sealbox/upstream_error": "UpstreamUnavailable"}, "upstream error: " + down)
    assert text_of(back) == "ok"
    results = [e.payload for e in store.read_run(run_id) if e.kind == "tool.result"]
    assert [(r["ok"], r.get("error", {}).get("message")) for r in results] == [
        (False, "upstream deaf closed the connection during the call"), (False, down), (True, None)]
    assert sealbox.verify_store(store).ok
