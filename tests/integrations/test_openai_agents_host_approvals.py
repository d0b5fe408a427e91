"""The OpenAI Agents SDK's own approvals (``needs_approval``, answered by the host application with
``RunState.approve`` / ``reject``) in a Sealbox run: recorded as ``note`` events marked as the host's
answer, never as Sealbox approvals. Real ``agents`` package, scripted model."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import sealbox  # noqa: E402
from sealbox.integrations.openai_agents import instrument  # noqa: E402
from sealbox.policies import ALLOW_ALL  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402

set_tracing_disabled(True)

BY = "host application (openai-agents needs_approval)"


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def build(ran: list, token: str | None = "sk-abcdefghijklmnop1234"):
    @function_tool(needs_approval=True)
    def delete_file(path: str, token: str = "") -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    model = ScriptedModel([[function_call("delete_file", {"path": "/srv/a.txt", **({"token": token} if token else {})},
                                          call_id="call_d")],
                           [assistant_message("Done.")]])
    return Agent(name="ops", model=model, tools=[delete_file])


def run_with_answer(store, answer: str, token: str | None = "sk-abcdefghijklmnop1234"):
    ran: list = []
    agent = build(ran, token)
    seen: dict = {}

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as run:
            bot = instrument(run, agent, provider="scripted")
            result = await Runner.run(bot, "Delete /srv/a.txt")
            seen["interruptions"] = [(i.tool_name, i.call_id) for i in result.interruptions]
            seen["ran_before_answer"] = list(ran)
            state = result.to_state()
            if answer == "approve":
                state.approve(result.interruptions[0])
            else:
                state.reject(result.interruptions[0], rejection_message="Not allowed today.")
            result = await Runner.run(bot, state)
            seen["final"] = result.final_output
        return run.run_id

    run_id = asyncio.run(go())
    evs = [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(run_id)]
    return run_id, evs, ran, seen


ASKED = {"text": "host approval asked: local/delete_file call call_d (the SDK's needs_approval: the host "
                 "application answers, not a Sealbox approver)",
         "about": {"host_approval": {"state": "asked", "call_id": "call_d", "server": "local", "tool": "delete_file",
                                     "by": BY}}}


def asked_without_arguments(payload):
    arguments = payload["about"]["host_approval"].pop("arguments")
    return payload, arguments


def test_an_approved_sdk_approval_is_recorded_as_the_host_answer(store):
    run_id, evs, ran, seen = run_with_answer(store, "approve")
    assert seen == {"interruptions": [("delete_file", "call_d")], "ran_before_answer": [], "final": "Done."}
    assert ran == ["/srv/a.txt"]
    assert [(k, s) for k, s, _ in evs] == [
        ("run.started", "1"), ("model.call", "2"), ("note", "3"), ("note", "4"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"), ("tool.result", "2.1"), ("model.call", "5"),
        ("run.ended", "6")]
    asked, arguments = asked_without_arguments(evs[2][2])
    assert asked == ASKED
    assert arguments["path"] == "/srv/a.txt"
    assert arguments["token"].startswith("⟦redacted:hmac-sha256:")  # redacted as content (the run redacted it before)
    assert evs[3][2] == {
        "text": "host approval answered: approve local/delete_file call call_d (the host application's answer "
                "through the SDK, not a Sealbox approval)",
        "about": {"host_approval": {"state": "answered", "call_id": "call_d", "server": "local",
                                    "tool": "delete_file", "decision": "approve", "standing": False, "by": BY}}}
    # never a Sealbox approval: no approval.* event, no suspension
    assert not [k for k, _, _ in evs if k.startswith("approval.") or k.startswith("run.suspended")]
    assert evs[-1][2]["status"] == "ok"
    from sealbox.approvals import list_approvals
    from sealbox.interop.parquet import call_rows

    assert list_approvals(store) == []  # nothing counts it as a Sealbox approval
    [row] = call_rows(store, [run_id])
    assert (row["call_id"], row["approval"], row["approver"], row["final_decision"]) == ("call_d", None, [], "allow")


def test_a_rejected_sdk_approval_is_recorded_with_the_message_the_model_got(store):
    run_id, evs, ran, seen = run_with_answer(store, "reject")
    assert ran == [] and seen["final"] == "Done."
    assert [(k, s) for k, s, _ in evs] == [
        ("run.started", "1"), ("model.call", "2"), ("note", "3"), ("note", "4"), ("model.call", "5"),
        ("run.ended", "6")]
    asked, _ = asked_without_arguments(evs[2][2])
    assert asked == ASKED
    assert evs[3][2] == {
        "text": "host approval answered: reject local/delete_file call call_d (the host application's answer "
                "through the SDK, not a Sealbox approval)",
        "about": {"host_approval": {"state": "answered", "call_id": "call_d", "server": "local",
                                    "tool": "delete_file", "decision": "reject", "standing": False, "by": BY,
                                    "message": "Not allowed today."}}}
    outputs = [i for i in evs[4][2]["request"]["input"] if i.get("type") == "function_call_output"]
    assert [(o["call_id"], o["output"]) for o in outputs] == [("call_d", "Not allowed today.")]
    assert not [k for k, _, _ in evs if k.startswith("approval.") or k == "tool.call"]
    assert sealbox.verify_store(store).ok


def replay_with_answer(store, run_id, answer: str):
    from sealbox.replay import Replayer

    ran: list = []
    agent = build(ran, None)  # a recorded response holding a redacted value could not be served

    async def replayed(run):
        bot = instrument(run, agent, provider="scripted")
        result = await Runner.run(bot, "Delete /srv/a.txt")
        state = result.to_state()
        if answer == "approve":
            state.approve(result.interruptions[0])
        else:
            state.reject(result.interruptions[0], rejection_message="Not allowed today.")
        await Runner.run(bot, state)

    return Replayer(store).replay(run_id, replayed), ran, agent


def test_a_replay_compares_the_host_answer_with_the_record(store):
    run_id, _, _, _ = run_with_answer(store, "approve", token=None)
    same, ran, agent = replay_with_answer(store, run_id, "approve")
    assert same.reproduced, same.divergence
    assert ran == [] and agent.model.calls == ()  # the tool and the model are served from the record

    other, ran, _ = replay_with_answer(store, run_id, "reject")
    d = other.divergence
    assert (other.reproduced, d.kind, d.step) == (False, "mismatch", "4")
    assert [(f.path, f.a, f.b) for f in d.diff if f.path == "about.host_approval.decision"] == [
        ("about.host_approval.decision", "approve", "reject")]
    assert ran == []


def test_a_call_needs_approval_lets_through_leaves_no_note(store):
    ran: list = []

    @function_tool(needs_approval=lambda ctx, params, call_id: params["path"].startswith("/etc/"))
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "content"

    model = ScriptedModel([[function_call("read_file", {"path": "/srv/b.txt"}, call_id="call_r")],
                           [assistant_message("Read.")]])

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as run:
            result = await Runner.run(instrument(run, Agent(name="ops", model=model, tools=[read_file]),
                                                 provider="scripted"), "Read /srv/b.txt")
            assert result.interruptions == []
        return run.run_id

    run_id = asyncio.run(go())
    assert ran == ["/srv/b.txt"]
    assert [(e.kind, e.step) for e in store.read_run(run_id)] == [
        ("run.started", "1"), ("model.call", "2"), ("tool.call", "2.1"), ("policy.decision", "2.1"),
        ("tool.result", "2.1"), ("model.call", "3"), ("run.ended", "4")]


def test_a_call_under_a_standing_always_approve_records_the_host_answer_as_standing(store):
    """``state.approve(item, always_approve=True)``: the SDK runs the tool's later calls without asking
    (it never consults ``needs_approval`` again); each is recorded as answered ``standing: true``, before
    its ``tool.call`` (docs/integrations.md, "The SDK's own approvals")."""
    ran: list = []

    @function_tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    model = ScriptedModel([[function_call("delete_file", {"path": "/a"}, call_id="c1")],
                           [function_call("delete_file", {"path": "/b"}, call_id="c2")],
                           [assistant_message("Done.")]])

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as run:
            bot = instrument(run, Agent(name="ops", model=model, tools=[delete_file]), provider="scripted")
            result = await Runner.run(bot, "Delete both")
            state = result.to_state()
            state.approve(result.interruptions[0], always_approve=True)
            result = await Runner.run(bot, state)
            assert result.interruptions == []
        return run.run_id

    run_id = asyncio.run(go())
    assert ran == ["/a", "/b"]
    evs = [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(run_id)]
    assert [(k, s) for k, s, _ in evs] == [
        ("run.started", "1"), ("model.call", "2"), ("note", "3"), ("note", "4"),
        ("tool.call", "2.1"), ("policy.decision", "2.1"), ("tool.result", "2.1"), ("model.call", "5"),
        ("note", "6"), ("tool.call", "5.1"), ("policy.decision", "5.1"), ("tool.result", "5.1"),
        ("model.call", "7"), ("run.ended", "8")]
    assert evs[8][2] == {
        "text": "host approval answered: approve local/delete_file call c2 (the host application's answer "
                "through the SDK, not a Sealbox approval)",
        "about": {"host_approval": {"state": "answered", "call_id": "c2", "server": "local",
                                    "tool": "delete_file", "decision": "approve", "standing": True, "by": BY}}}


def test_a_run_state_approved_and_resumed_in_another_run_claims_no_standing_answer(store):
    """A ``RunState`` answered (one call, not ``always_approve``) and resumed in another Sealbox run: the
    approved call is recorded there as its ``tool.call`` only, never as a standing answer it was not."""
    from agents import RunState

    ran: list = []
    agent = build(ran, None)

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as first:
            result = await Runner.run(instrument(first, agent, provider="scripted"), "Delete /srv/a.txt")
            saved = result.to_state().to_json()
        async with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as second:
            bot = instrument(second, agent, provider="scripted")
            state = await RunState.from_json(bot, saved)
            state.approve(state.get_interruptions()[0])
            await Runner.run(bot, state)
        return second.run_id

    run_id = asyncio.run(go())
    assert ran == ["/srv/a.txt"]
    assert [(e.kind, e.step) for e in store.read_run(run_id)] == [
        ("run.started", "1"), ("tool.call", "2"), ("policy.decision", "2"), ("tool.result", "2"),
        ("model.call", "3"), ("run.ended", "4")]


def test_a_replay_of_a_standing_approval_reproduces(store):
    """The standing answer is recorded in the replay as when recording, and compared (the same steps)."""
    from sealbox.replay import Replayer

    def build_standing(ran):
        @function_tool(needs_approval=True)
        def delete_file(path: str) -> str:
            """Delete a file."""
            ran.append(path)
            return f"deleted {path}"

        return Agent(name="ops", tools=[delete_file], model=ScriptedModel([
            [function_call("delete_file", {"path": "/a"}, call_id="c1")],
            [function_call("delete_file", {"path": "/b"}, call_id="c2")], [assistant_message("Done.")]]))

    async def drive(run, agent):
        bot = instrument(run, agent, provider="scripted")
        result = await Runner.run(bot, "Delete both")
        state = result.to_state()
        state.approve(result.interruptions[0], always_approve=True)
        await Runner.run(bot, state)

    ran: list = []

    async def go():
        async with Recorder(store, policy=ALLOW_ALL).run(agent="ops") as run:
            await drive(run, build_standing(ran))
        return run.run_id

    run_id = asyncio.run(go())
    again: list = []
    result = Replayer(store).replay(run_id, lambda run: drive(run, build_standing(again)))
    assert (result.reproduced, result.divergence, again) == (True, None, [])
    notes = [store.resolve(e.payload)["about"]["host_approval"] for e in store.read_run(result.new_run_id)
             if e.kind == "note"]
    assert [(n["state"], n["call_id"], n.get("standing")) for n in notes] == [
        ("asked", "c1", None), ("answered", "c1", False), ("answered", "c2", True)]
