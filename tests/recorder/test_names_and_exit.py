"""Lone surrogates: a note records them as error text does (visible ``\\udcff``); an identifier
holding one is refused naming the field, but a call id (a provider's) is written as visible text. ``sys.exit(0)`` inside a run ends it ``ok``."""

from __future__ import annotations

import sys

import pytest

import sealbox
from sealbox import ConfigError, verify_store
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _kinds(store, run_id):
    return [e.kind for e in store.read_run(run_id)]


def test_a_note_with_a_lone_surrogate_is_recorded_as_visible_text(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="n") as run:
        run.note("x\udcffy", about={"path": "ok"})
        with pytest.raises(ConfigError, match="a note's text must be a string, got NoneType"):
            run.note(None)
    notes = [e.payload for e in store.read_run(run.run_id) if e.kind == "note"]
    assert notes == [{"text": "x\\udcffy", "about": {"path": "ok"}}]
    assert verify_store(store).ok


@pytest.mark.parametrize("field, kwargs", [
    ("tool", {"tool": "t\udcff"}),
    ("server", {"server": "s\udcff"}),
    ("grant", {"grant": "g\udcff"}),
    ("exposed", {"exposed": "e\udcff"}),
])
def test_an_identifier_with_a_lone_surrogate_is_refused_naming_it(store, field, kwargs):
    ran = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="n") as run:
        call = {"server": "s", "tool": "t", "arguments": {}, "fn": lambda: ran.append(1)}
        call.update(kwargs)
        with pytest.raises(ConfigError, match=rf"{field} '.\\udcff' contains a lone surrogate"):
            run.call_tool(call.pop("server"), call.pop("tool"), call.pop("arguments"), call.pop("fn"), **call)
    assert ran == [] and _kinds(store, run.run_id) == ["run.started", "run.ended"]


def test_a_call_id_with_a_lone_surrogate_is_recorded_as_visible_text(store):
    """A call id is the model provider's (an integration passes it on raw): written as the model
    call's tool_call_ids write it (sealbox.adapters.valid_text), so the call runs and links."""
    ran = []
    with Recorder(store, policy=ALLOW_ALL).run(agent="n") as run:
        run.call_tool("s", "t", {}, lambda: ran.append(1), call_id="c\udcff")
    [call] = [e.payload for e in store.read_run(run.run_id) if e.kind == "tool.call"]
    assert ran == [1] and call["call_id"] == "c\\udcff"
    assert verify_store(store).ok


@pytest.mark.parametrize("kwargs, field", [({"agent": "a\udcff"}, "agent"),
                                           ({"agent": "a", "principal": "p\udcff"}, "principal id")])
def test_an_agent_or_principal_with_a_lone_surrogate_is_refused_naming_it(store, kwargs, field):
    before = {r["run_id"] for r in store.runs()}
    with pytest.raises(ConfigError, match=f"{field} .* contains a lone surrogate"):
        Recorder(store, policy=ALLOW_ALL).run(**kwargs)
    assert {r["run_id"] for r in store.runs()} == before


def test_ordinary_non_ascii_names_are_recorded(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="agent-é") as run:
        run.call_tool("sérveur", "outil-😀", {}, lambda: 1, call_id="appel-ü", grant="implicit:agent:agent-é")
    [call] = [e.payload for e in store.read_run(run.run_id) if e.kind == "tool.call"]
    assert (call["server"], call["tool"], call["call_id"]) == ("sérveur", "outil-😀", "appel-ü")


@pytest.mark.parametrize("code", [0, None])
def test_sys_exit_0_ends_the_run_ok(store, code):
    with pytest.raises(SystemExit):
        with Recorder(store, policy=ALLOW_ALL).run(agent="exit") as run:
            sys.exit(code)
    ended = store.read_run(run.run_id)[-1]
    assert ended.kind == "run.ended" and ended.payload["status"] == "ok" and "error" not in ended.payload


@pytest.mark.parametrize("code, message, exit_code", [(3, "3", 3), ("fatal: no config", "fatal: no config", None),
                                                      (True, "True", None)])
def test_sys_exit_with_another_code_ends_the_run_error_with_the_code(store, code, message, exit_code):
    with pytest.raises(SystemExit):
        with Recorder(store, policy=ALLOW_ALL).run(agent="exit") as run:
            sys.exit(code)
    ended = store.read_run(run.run_id)[-1].payload
    assert ended["status"] == "error"
    assert {k: ended["error"][k] for k in ("type", "message")} == {"type": "SystemExit", "message": message}
    assert ended["error"].get("exit_code") == exit_code
    assert verify_store(store).ok


def test_keyboard_interrupt_still_ends_the_run_cancelled(store):
    with pytest.raises(KeyboardInterrupt):
        with Recorder(store, policy=ALLOW_ALL).run(agent="ki") as run:
            raise KeyboardInterrupt
    assert store.read_run(run.run_id)[-1].payload["status"] == "cancelled"


@pytest.mark.parametrize("label, problem", [
    ("s\udcff", "state label 's\\\\udcff' contains a lone surrogate"),
    (5, "a state label must be a string or None, got int"),
])
def test_a_bad_state_label_is_refused_naming_it_and_nothing_is_written(store, label, problem):
    with Recorder(store, policy=ALLOW_ALL).run(agent="n") as run:
        with pytest.raises(ConfigError, match=problem):
            run.save_state({"k": 1}, label=label)
        run.save_state({"k": 2}, label="fine")
    states = [e.payload.get("label") for e in store.read_run(run.run_id) if e.kind == "state.saved"]
    assert states == ["fine"]
    assert verify_store(store).ok


@pytest.mark.parametrize("kwargs, message", [
    ({"agent": "b\x00t", "principal": "p"}, "agent 'b\\x00t'"),
])
def test_a_run_whose_agent_holds_a_nul_is_refused_before_anything_is_recorded(store, kwargs, message):
    before = store.size()
    with pytest.raises(ConfigError) as caught:
        with Recorder(store, policy=ALLOW_ALL).run(**kwargs):
            pass
    assert str(caught.value) == (f"{message} holds a NUL character (\\x00), which an identifier in the record cannot "
                                 "hold; nothing was recorded")
    assert store.size() == before


@pytest.mark.parametrize("args, message", [
    (("d\x00b", "t", None), "the server name 'd\\x00b'"),
    (("db", "t\x00", None), "the tool name 't\\x00'"),
    (("db", "t", "c\x00"), "db/t: call_id 'c\\x00'"),
])
def test_a_call_whose_server_tool_or_call_id_holds_a_nul_is_refused_before_it_is_recorded(store, args, message):
    server, tool, call_id = args
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        with pytest.raises(ConfigError) as caught:
            run.call_tool(server, tool, {"q": "a\x00b"}, lambda **k: 1, call_id=call_id)
        assert str(caught.value) == (f"{message} holds a NUL character (\\x00), which an identifier in the record "
                                     "cannot hold; nothing was recorded")
        assert run.call_tool("db", "t", {"q": "a\x00b"}, lambda **k: "r\x00") == "r\x00"  # content: recorded
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "tool.call", "policy.decision",
                                                              "tool.result", "run.ended"]
    assert verify_store(store).ok
