"""The record of the requests an upstream makes of the client during a call (elicitation, sampling, roots).

The toy upstream (a real stdio process) asks the client from inside a tool call; a real ``mcp``
ClientSession answers with its callbacks. Each forwarded request is recorded in the call's run as
two ``note`` events (principal ``sealbox``, at the call's step, ``payload.client_request`` never
redacted, the content in ``about``): the request before it is forwarded, the answer before it goes
back to the upstream (docs/gateway.md, "Requests an upstream makes of the client").
"""

from __future__ import annotations

import csv
import io
import sqlite3

import mcp_types as types
import pytest
from click.testing import CliRunner

import sealbox
from sealbox.gateway import Gateway

from .conftest import connect, gateway_runs, running, text_of, toy_config

pytestmark = pytest.mark.anyio

ASKED_TEXT = ("upstream toy asks the client: {m} (recorded before it is forwarded; the client's answer is not a "
              "Sealbox approval: approvals come only from approver identities, signed with their keys)")
ANSWERED_TEXT = ("the client {said}: {m} of upstream toy (the client's answer is not a Sealbox approval: approvals "
                 "come only from approver identities, signed with their keys)")
ELICIT = "elicitation/create"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def events(store, run_id):
    return store.read_run(run_id)


def notes(store, run_id):
    return [e for e in events(store, run_id) if e.kind == "note"]


def call_of(store, run_id):
    [call] = [e for e in events(store, run_id) if e.kind == "tool.call"]
    return call


def check_ids_and_timing(asked, answered):
    """The request id pairs the two notes; waited_us is a real duration. Returns the payloads without them."""
    a, b = dict(asked.payload["client_request"]), dict(answered.payload["client_request"])
    assert a["id"].startswith("creq_") and len(a["id"]) == 21 and a.pop("id") == b.pop("id")
    waited = b.pop("waited_us")
    assert type(waited) is int and 0 <= waited < 30_000_000
    return a, b


async def ask(tmp_path, store, arguments, **client):
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, **client) as session:
            result = await session.call_tool("toy__ask", arguments)
        [run_id] = gateway_runs(store)
    return result, run_id


async def test_an_accepted_elicitation_is_recorded_before_forwarding_and_its_answer_before_returning(tmp_path, store):
    seen: list[tuple[str, int]] = []

    async def elicit(context, params):
        # the request is in the record before the client is asked
        seen.append((params.message, sum(1 for e in notes(store, gateway_runs(store)[0]))))
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    result, run_id = await ask(tmp_path, store, {"question": "favourite colour?"}, elicitation_callback=elicit)
    assert (result.is_error, text_of(result)) == (False, "accept:blue")
    assert seen == [("favourite colour?", 1)]
    call = call_of(store, run_id)
    cid = call.payload["call_id"]
    # order: the call is decided and recorded, the request, the answer, then the call's result; all at its step
    assert [(e.step, e.kind, e.principal) for e in events(store, run_id)] == [
        ("1", "run.started", "agent:test-client"), ("2", "tool.call", "agent:test-client"),
        ("2", "policy.decision", "agent:test-client"), ("2", "note", "sealbox"), ("2", "note", "sealbox"),
        ("2", "tool.result", "agent:test-client"), ("3", "run.ended", "agent:test-client")]
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert a == {"state": "asked", "upstream": "toy", "method": ELICIT, "call_id": cid}
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": cid, "outcome": "accept"}
    assert asked.payload["text"] == ASKED_TEXT.format(m=ELICIT)
    assert asked.payload["about"] == {"params": {"mode": "form", "message": "favourite colour?",
                                                 "requestedSchema": SCHEMA}}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="accepted", m=ELICIT)
    assert answered.payload["about"] == {"result": {"action": "accept", "content": {"answer": "blue"}}}
    assert sealbox.verify_store(store).ok
    # and offline: an exported bundle of the run verifies
    from sealbox.interop.bundle import export_bundle
    from sealbox.interop.bundle_verify import verify_bundle

    export_bundle(store, [run_id], tmp_path / "run.sbx")
    report = verify_bundle(tmp_path / "run.sbx", trusted_vkey=(tmp_path / "store" / "log.vkey").read_text().strip())
    assert report.ok, report

    from sealbox.cli.main import cli

    shown = CliRunner().invoke(cli, ["runs", "show", run_id, "--csv", "-s", str(tmp_path / "store")])
    assert shown.exit_code == 0, shown.output
    rows = [r for r in csv.DictReader(io.StringIO(shown.output)) if r["kind"] == "note"]
    waited = answered.payload["client_request"]["waited_us"]
    assert [(r["step"], r["principal"], r["duration_us"], r["detail"]) for r in rows] == [
        ("2", "sealbox", "", f'asked: {ELICIT} from upstream toy during call {cid} [{a_id(asked)}] '
                             'message="favourite colour?"'),
        ("2", "sealbox", str(waited), f'answered accept: {ELICIT} from upstream toy during call {cid} '
                                      f'[{a_id(asked)}] after {after(waited)} content={{"answer": "blue"}} '
                                      '(not a Sealbox approval)')]
    # the incident report's timeline shows the same line (Markdown-escaped)
    from sealbox.report import build_report, render_markdown
    from sealbox.report.markdown import md

    report = render_markdown(build_report(store, run_id, now="2026-12-04T00:00:00.000000Z"))
    assert md(rows[1]["detail"]) in report


def after(us: int) -> str:
    return f"{us / 1000:.1f} ms" if us < 1_000_000 else f"{us / 1_000_000:.2f} s"


def a_id(event):
    return event.payload["client_request"]["id"]


async def test_a_declined_elicitation_is_recorded_as_declined(tmp_path, store):
    async def elicit(context, params):
        return types.ElicitResult(action="decline")

    result, run_id = await ask(tmp_path, store, {"question": "may I?"}, elicitation_callback=elicit)
    assert (result.is_error, text_of(result)) == (False, "decline:None")
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": call_of(store, run_id).payload[
        "call_id"], "outcome": "decline"}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="declined", m=ELICIT)
    assert answered.payload["about"] == {"result": {"action": "decline"}}
    assert sealbox.verify_store(store).ok


async def test_a_client_without_elicitation_is_not_asked_and_the_record_says_so(tmp_path, store):
    result, run_id = await ask(tmp_path, store, {"question": "anyone?"})  # no elicitation_callback: not declared
    assert result.is_error is True  # the toy's elicitation failed; its call answered an error
    message = "elicitation/create was not forwarded: the client did not declare the elicitation capability"
    assert message in text_of(result)
    assert [e.kind for e in events(store, run_id)] == ["run.started", "tool.call", "policy.decision", "note", "note",
                                                       "tool.result", "run.ended"]
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": call_of(store, run_id).payload[
        "call_id"], "outcome": "not_forwarded", "error_code": types.INVALID_REQUEST}
    assert answered.payload["about"] == {"error": {"code": types.INVALID_REQUEST, "message": message}}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="was not asked (it lacks the capability)", m=ELICIT)
    assert sealbox.verify_store(store).ok


async def test_a_secret_in_the_elicitation_answer_is_redacted_in_the_record_and_in_the_call_result(tmp_path):
    secret = "hunter2-is-my-api-key"
    store = sealbox.init_store(tmp_path / "store")  # content mode "redacted" (the default): api_key is a sensitive key

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"api_key": secret})

    try:
        result, run_id = await ask(tmp_path, store, {"question": "your key?", "field": "api_key"},
                                   elicitation_callback=elicit)
        assert (result.is_error, text_of(result)) == (False, f"accept:{secret}")  # the upstream got the answer
        asked, answered = notes(store, run_id)
        # the store's key rule applies to the request too, field by field: the schema of a property named
        # api_key is a schema, not a secret, so it is kept (a schema redacted whole taught the run its words
        # as secrets, docs/content-modes.md); the answer's value under api_key is redacted below
        schema = asked.payload["about"]["params"]["requestedSchema"]["properties"]["api_key"]
        assert schema == {"type": "string"}
        content = answered.payload["about"]["result"]["content"]
        assert list(content) == ["api_key"] and list(content["api_key"]) == ["$redacted"]
        marker = content["api_key"]["$redacted"]
        assert marker.startswith("hmac-sha256:")
        # the tool's result repeats the answer: the record holds its marker there too
        [res] = [e.payload for e in events(store, run_id) if e.kind == "tool.result"]
        assert store.resolve(res)["result"]["content"] == [{"type": "text", "text": f"accept:⟦redacted:{marker}⟧"}]
        assert sealbox.verify_store(store).ok
    finally:
        store.close()
    assert not any(secret.encode() in p.read_bytes() for p in (tmp_path / "store").iterdir() if p.is_file())


async def test_a_sampling_request_and_the_models_result_are_recorded(tmp_path, store):
    async def sample(context, params):
        return types.CreateMessageResult(role="assistant", model="model-x-7", stop_reason="endTurn",
                                         content=types.TextContent(type="text", text="42"))

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=sample) as session:
            result = await session.call_tool("toy__sample", {"prompt": "what is 6*7?"})
        [run_id] = gateway_runs(store)
    assert result.is_error is False
    assert [e.kind for e in events(store, run_id)] == ["run.started", "tool.call", "policy.decision", "note", "note",
                                                       "tool.result", "run.ended"]
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    cid = call_of(store, run_id).payload["call_id"]
    assert a == {"state": "asked", "upstream": "toy", "method": "sampling/createMessage", "call_id": cid}
    assert b == {"state": "answered", "upstream": "toy", "method": "sampling/createMessage", "call_id": cid,
                 "outcome": "result"}
    assert asked.payload["about"] == {"params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "what is 6*7?"}}],
        "systemPrompt": "toy system prompt", "maxTokens": 50}}
    assert answered.payload["about"] == {"result": {"role": "assistant", "content": {"type": "text", "text": "42"},
                                                    "model": "model-x-7", "stopReason": "endTurn"}}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="answered", m="sampling/createMessage")
    assert sealbox.verify_store(store).ok


def refuse_notes(tmp_path, when: str) -> None:
    """A real write failure of the store (a SQLite trigger) for the notes matching ``when``."""
    db = sqlite3.connect(tmp_path / "store" / "sealbox.db")
    db.execute(f"CREATE TRIGGER refuse_note BEFORE INSERT ON events WHEN NEW.kind = 'note' AND ({when}) "
               "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    db.commit()
    db.close()


def allow_notes(tmp_path) -> None:
    db = sqlite3.connect(tmp_path / "store" / "sealbox.db")
    db.execute("DROP TRIGGER refuse_note")
    db.commit()
    db.close()


async def test_a_request_that_cannot_be_recorded_is_not_forwarded(tmp_path, store):
    asked: list[str] = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    refuse_notes(tmp_path, "1")
    result, run_id = await ask(tmp_path, store, {"question": "favourite colour?"}, elicitation_callback=elicit)
    allow_notes(tmp_path)
    assert asked == []  # the client was never asked
    assert result.is_error is True
    assert "elicitation/create was not forwarded to the client: the gateway could not record it" in text_of(result)
    assert [e.kind for e in events(store, run_id)] == ["run.started", "tool.call", "policy.decision", "tool.result",
                                                       "run.ended"]
    assert sealbox.verify_store(store).ok


async def test_an_answer_that_cannot_be_recorded_is_not_returned_to_the_upstream(tmp_path, store):
    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    refuse_notes(tmp_path, "CAST(NEW.raw AS TEXT) ->> '$.payload.client_request.state' = 'answered'")
    result, run_id = await ask(tmp_path, store, {"question": "favourite colour?"}, elicitation_callback=elicit)
    allow_notes(tmp_path)
    assert result.is_error is True
    assert "blue" not in text_of(result)
    assert "the client's answer to elicitation/create was not returned: the gateway could not record it" in text_of(result)
    [asked] = notes(store, run_id)  # the request was recorded; the answer was not, and the upstream never got it
    assert asked.payload["client_request"]["state"] == "asked"
    assert [e.kind for e in events(store, run_id)] == ["run.started", "tool.call", "policy.decision", "note",
                                                       "tool.result", "run.ended"]
    assert sealbox.verify_store(store).ok


async def test_in_hashes_only_mode_the_record_keeps_who_asked_and_the_outcome_but_no_content(tmp_path):
    from sealbox.events import client_request_text
    from sealbox.redaction import ContentPolicy

    store = sealbox.init_store(tmp_path / "store", content=ContentPolicy(mode="hashes-only"))

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    try:
        result, run_id = await ask(tmp_path, store, {"question": "favourite colour?"}, elicitation_callback=elicit)
        assert text_of(result) == "accept:blue"
        asked, answered = notes(store, run_id)
        a, b = check_ids_and_timing(asked, answered)
        cid = call_of(store, run_id).payload["call_id"]
        assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": cid, "outcome": "accept"}
        for note in (asked, answered):  # the text and the content are HMAC markers
            assert list(note.payload["about"]) == ["$redacted"]
            assert note.payload["text"].startswith("hmac-sha256:")
        assert client_request_text(answered.payload) == (
            f"answered accept: {ELICIT} from upstream toy during call {cid} [{a_id(asked)}] after "
            f"{after(answered.payload['client_request']['waited_us'])} (not a Sealbox approval)")
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


async def test_a_client_too_slow_to_answer_leaves_the_request_recorded_with_its_end(tmp_path, store):
    """The call times out (limits.call_timeout_s); the upstream withdraws its question (the SDK's courtesy
    notifications/cancelled): the record says the client did not answer, the upstream's request ended first."""
    import anyio

    answered_late: list[str] = []

    async def elicit(context, params):
        await anyio.sleep(30)  # a person who never answers
        answered_late.append("late")
        return types.ElicitResult(action="cancel")

    gw = Gateway(toy_config(tmp_path, extra="limits: {call_timeout_s: 1}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=elicit) as session:
            result = await session.call_tool("toy__ask", {"question": "still there?"})
            [run_id] = gateway_runs(store)
            with anyio.fail_after(10):  # the end of the request is recorded when the upstream withdraws it
                while len(notes(store, run_id)) < 2:
                    await anyio.sleep(0.05)
    assert result.is_error is True and text_of(result) == ("upstream error: upstream toy did not answer within 1 s; the call was sent, so it may "
                                                       "have been carried out: check before calling again")
    assert answered_late == []
    kinds = [e.kind for e in events(store, run_id)]
    assert kinds[:4] == ["run.started", "tool.call", "policy.decision", "note"]  # asked, then the call timed out
    assert sorted(kinds[4:6]) == ["note", "tool.result"] and kinds[6:] == ["run.ended"]
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": call_of(store, run_id).payload[
        "call_id"], "outcome": "cancelled"}
    assert "about" not in answered.payload
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="did not answer (the upstream's request ended "
                                                                 "first)", m=ELICIT)
    # measured from when the request was recorded, a little after the call's 1 s started (more under load)
    assert 500_000 <= answered.payload["client_request"]["waited_us"] < 6_000_000
    assert sealbox.verify_store(store).ok


async def test_a_client_answering_with_an_error_is_recorded_with_that_error(tmp_path, store):
    async def sample(context, params):
        return types.ErrorData(code=-1, message="the user refused to sample")

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=sample) as session:
            result = await session.call_tool("toy__sample", {"prompt": "what is 6*7?"})
        [run_id] = gateway_runs(store)
    assert result.is_error is True and "the user refused to sample" in text_of(result)
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert b == {"state": "answered", "upstream": "toy", "method": "sampling/createMessage",
                 "call_id": call_of(store, run_id).payload["call_id"], "outcome": "error", "error_code": -1}
    assert answered.payload["about"] == {"error": {"code": -1, "message": "the user refused to sample"}}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="answered with an error", m="sampling/createMessage")
    assert sealbox.verify_store(store).ok


async def test_the_schema_of_a_secret_looking_field_is_not_taken_for_a_secret_of_the_run(tmp_path):
    """Asking for an `api_key` redacts the requested schema under that name (the store's key rule), but its
    words ("string") are no value the run learns as a secret: a later call's "a string value" stays as is,
    while the key the person typed is scrubbed wherever it comes back."""
    secret = "hunter2-is-my-api-key"
    store = sealbox.init_store(tmp_path / "store")

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"api_key": secret})

    gw = Gateway(toy_config(tmp_path), store=store)
    try:
        async with running(gw) as tg:
            async with connect(gw, tg, elicitation_callback=elicit) as session:
                await session.call_tool("toy__ask", {"question": "your key?", "field": "api_key"})
                await session.call_tool("toy__echo", {"text": "a string value"})
                await session.call_tool("toy__echo", {"text": f"again {secret}"})
            [run_id] = gateway_runs(store)
        calls = [store.resolve(e.payload)["arguments"]["text"] for e in events(store, run_id)
                 if e.kind == "tool.call" and e.payload["tool"] == "echo"]
        [marker] = [n.payload["about"]["result"]["content"]["api_key"]["$redacted"] for n in notes(store, run_id)
                    if n.payload["client_request"]["state"] == "answered"]
        assert calls == ["a string value", f"again ⟦redacted:{marker}⟧"]
        assert sealbox.verify_store(store).ok
    finally:
        store.close()


async def test_with_two_calls_of_the_client_in_flight_the_record_names_both_and_no_single_call(tmp_path, store):
    import anyio

    from .conftest import toy_log

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=elicit) as session:
            out = {}

            async def slow() -> None:
                out["slow"] = await session.call_tool("toy__slow", {"seconds": 1.5})

            with anyio.fail_after(30):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(slow)
                    while not toy_log(tmp_path):  # the slow call has reached the upstream
                        await anyio.sleep(0.01)
                    out["ask"] = await session.call_tool("toy__ask", {"question": "which?"})
        [run_id] = gateway_runs(store)
    assert text_of(out["ask"]) == "accept:blue" and text_of(out["slow"]) == "slow done"
    ids = {e.payload["tool"]: (e.payload["call_id"], e.step) for e in events(store, run_id) if e.kind == "tool.call"}
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert a == {"state": "asked", "upstream": "toy", "method": ELICIT, "call_id": None,
                 "calls": sorted([ids["slow"][0], ids["ask"][0]])}
    assert b["call_id"] is None and b["calls"] == a["calls"] and b["outcome"] == "accept"
    assert asked.step == answered.step == ids["slow"][1]  # the step of the first call in flight
    from sealbox.events import client_request_text

    assert client_request_text(asked.payload).startswith(
        f"asked: {ELICIT} from upstream toy during one of calls {', '.join(a['calls'])} [")
    assert sealbox.verify_store(store).ok


# ------------------------------------------------------------------ URL-mode elicitation (MCP 2025-11-25)

URL = "https://example.com/connect?state=toy"


def declaring(elicitation):
    """A ClientSession subclass that declares ``elicitation`` as given (the SDK's declares form and url)."""
    from mcp.client.session import ClientSession

    class Client(ClientSession):
        def _build_capabilities(self, version):
            return super()._build_capabilities(version).model_copy(update={"elicitation": elicitation})

    return Client


async def test_a_url_mode_elicitation_reaches_a_client_that_declared_url_and_is_recorded(tmp_path, store):
    seen = []

    async def elicit(context, params):
        seen.append(params)
        return types.ElicitResult(action="accept")

    result, run_id = await ask(tmp_path, store, {"question": "connect your account", "url": URL},
                               elicitation_callback=elicit)
    assert (result.is_error, text_of(result)) == (False, "accept:url")
    [params] = seen
    assert (params.mode, params.url, params.elicitation_id) == ("url", URL, "toy-elicitation-1")
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    cid = call_of(store, run_id).payload["call_id"]
    assert a == {"state": "asked", "upstream": "toy", "method": ELICIT, "call_id": cid}
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": cid, "outcome": "accept"}
    assert asked.payload["about"] == {"params": {"mode": "url", "message": "connect your account", "url": URL,
                                                 "elicitationId": "toy-elicitation-1"}}
    assert answered.payload["about"] == {"result": {"action": "accept"}}
    assert sealbox.verify_store(store).ok


@pytest.mark.parametrize("declared", ["form", "empty"])
async def test_a_url_mode_elicitation_is_not_forwarded_to_a_client_that_did_not_declare_url(tmp_path, store,
                                                                                            declared):
    """MCP 2025-11-25: a client declares elicitation {"form": {}, "url": {}}; an empty {} (as clients before it
    declare it) is form only. A URL-mode request is not sent to a client without url; the record says so. A form
    request still reaches it."""
    asked_client = []

    async def elicit(context, params):
        asked_client.append(params.mode)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    capability = types.ElicitationCapability(form=types.FormElicitationCapability()) if declared == "form" \
        else types.ElicitationCapability()
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, session_class=declaring(capability), elicitation_callback=elicit) as session:
            refused = await session.call_tool("toy__ask", {"question": "connect your account", "url": URL})
            formed = await session.call_tool("toy__ask", {"question": "favourite colour?"})
        [run_id] = gateway_runs(store)
    message = "elicitation/create (mode url) was not forwarded: the client did not declare the elicitation.url capability"
    assert refused.is_error is True and message in text_of(refused)
    assert (formed.is_error, text_of(formed)) == (False, "accept:blue") and asked_client == ["form"]
    asked, answered, asked2, answered2 = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    [call, _] = [e for e in events(store, run_id) if e.kind == "tool.call"]
    assert asked.payload["about"]["params"]["mode"] == "url" and asked.step == answered.step == call.step
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT, "call_id": call.payload["call_id"],
                 "outcome": "not_forwarded", "error_code": types.INVALID_REQUEST}
    assert answered.payload["about"] == {"error": {"code": types.INVALID_REQUEST, "message": message}}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="was not asked (it lacks the capability)", m=ELICIT)
    assert answered2.payload["client_request"]["outcome"] == "accept"
    assert sealbox.verify_store(store).ok


async def test_a_client_request_the_client_never_answers_ends_as_a_timeout_in_the_record(tmp_path, store,
                                                                                         monkeypatch):
    """The upstream keeps waiting for the answer after its call timed out (it does not withdraw the request):
    the gateway answers it REQUEST_TIMEOUT after limits.call_timeout_s plus the grace, and records that."""
    import anyio

    from sealbox.gateway import server as gateway_server

    monkeypatch.setattr(gateway_server, "CLIENT_REQUEST_GRACE_S", 0.5)

    async def elicit(context, params):
        await anyio.sleep(30)  # a person who never answers
        return types.ElicitResult(action="cancel")

    gw = Gateway(toy_config(tmp_path, extra="limits: {call_timeout_s: 1}"), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=elicit) as session:
            result = await session.call_tool("toy__ask", {"question": "still there?", "shielded": True})
            [run_id] = gateway_runs(store)
            with anyio.fail_after(10):
                while len(notes(store, run_id)) < 2:
                    await anyio.sleep(0.05)
    assert result.is_error is True and text_of(result) == ("upstream error: upstream toy did not answer within 1 s; the call was sent, so it may "
                                                       "have been carried out: check before calling again")
    asked, answered = notes(store, run_id)
    a, b = check_ids_and_timing(asked, answered)
    assert b == {"state": "answered", "upstream": "toy", "method": ELICIT,
                 "call_id": call_of(store, run_id).payload["call_id"], "outcome": "timeout",
                 "error_code": types.REQUEST_TIMEOUT}
    assert answered.payload["about"] == {"error": {
        "code": types.REQUEST_TIMEOUT, "message": "elicitation/create: the client did not answer within 1.5 s "
                                                  "(limits.call_timeout_s + 0.5 s)"}}
    assert answered.payload["text"] == ANSWERED_TEXT.format(said="did not answer in time", m=ELICIT)
    assert 1_500_000 <= answered.payload["client_request"]["waited_us"] < 6_000_000
    from sealbox.events import client_request_text

    assert client_request_text(answered.payload).startswith(f"answered timeout: {ELICIT} from upstream toy during call ")
    assert client_request_text(answered.payload).endswith(
        ' error="elicitation/create: the client did not answer within 1.5 s… (not a Sealbox approval)')
    assert sealbox.verify_store(store).ok
