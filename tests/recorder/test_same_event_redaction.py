"""A value the store redacts by key name from an event is scrubbed from the rest of that same event
too (docs/content-modes.md, "Values redacted earlier in the run"): a tool answering
``{"api_key": K, "message": "your key is K"}`` stores K's ``{"$redacted": …}`` marker under
``api_key`` and its in-string marker in ``message``; the same for a tool's failure text, a model
call (request and response), a saved state, a note (``about`` and text) and a call's arguments.
Checked on the raw bytes of sealbox.db and its -wal."""

from __future__ import annotations

from pathlib import Path

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

K = "ak-live-91f3-77aa-samevent"


def db_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("sealbox.db") and p.is_file())


def payloads(store, run_id: str, kind: str) -> list:
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == kind]


def mark(marker: dict) -> str:
    return f"⟦redacted:{marker['$redacted']}⟧"


def test_a_value_redacted_by_key_is_scrubbed_from_the_same_event(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        got = run.call_tool("vault", "read", {"name": "billing"},
                            lambda name: {"api_key": K, "message": f"your key is {K}"})
        run.model_call({"model": "m", "messages": [], "api_key": K, "note": f"key {K}"}, {"text": f"saw {K}"})
        run.save_state({"api_key": K, "note": f"key {K}"})
        run.note(f"about {K}", about={"token": K, "why": f"token {K}"})
    assert got == {"api_key": K, "message": f"your key is {K}"}  # the caller gets the real result
    result = payloads(store, run.run_id, "tool.result")[0]["result"]
    m = mark(result["api_key"])
    assert result == {"api_key": result["api_key"], "message": f"your key is {m}"}
    model = payloads(store, run.run_id, "model.call")[0]
    assert model["request"]["api_key"] == m  # known from the result before: the recorder wrote its marker
    assert (model["request"]["note"], model["response"]["text"]) == (f"key {m}", f"saw {m}")
    assert payloads(store, run.run_id, "state.saved")[0]["state"] == {"api_key": m, "note": f"key {m}"}
    note = payloads(store, run.run_id, "note")[0]
    assert (note["text"], note["about"]["why"], note["about"]["token"]) == (f"about {m}", f"token {m}", m)
    assert sealbox.verify_store(store).ok
    assert any(p.name == "sealbox.db-wal" for p in (tmp_path / "store").iterdir())
    assert K.encode() not in db_bytes(tmp_path / "store")
    store.close()
    assert K.encode() not in db_bytes(tmp_path / "store")


def test_each_first_event_is_scrubbed_on_its_own(tmp_path):
    """Each kind as the run's first redaction (nothing remembered yet): the event itself is scrubbed."""
    for i, record in enumerate([
        lambda run: run.model_call({"model": "m", "messages": [], "api_key": K, "note": f"key {K}"}, {"text": "ok"}),
        lambda run: run.save_state({"api_key": K, "note": f"key {K}"}),
        lambda run: run.note(f"key {K}", about={"api_key": K}),
        lambda run: run.call_tool("t", "t", {"api_key": K, "note": f"key {K}"}, lambda **kw: "ok"),
    ]):
        folder = tmp_path / f"s{i}"
        store = sealbox.init_store(folder)
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            record(run)
        store.close()
        assert K.encode() not in db_bytes(folder), i


def test_a_tool_failure_text_beside_a_redacted_result_is_scrubbed(tmp_path):
    """An MCP isError answer: the result's {"api_key": K} is redacted; its failure text, in the
    same tool.result's error, holds K's in-string marker."""
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run_ctx = run
        step = run_ctx._take_step()
        import time
        run_ctx._record_result("vault", "read", "c1", step, time.perf_counter_ns(),
                               result={"api_key": K}, failure=f"key {K} was revoked")
    result = payloads(store, run.run_id, "tool.result")[0]
    assert result["error"] == {"type": "ToolError", "message": f"key {mark(result['result']['api_key'])} was revoked"}
    store.close()
    assert K.encode() not in db_bytes(tmp_path / "store")


def test_a_header_name_inside_a_redacted_pair_is_not_scrubbed(tmp_path):
    """Only a string that was itself the redacted value is scrubbed from the event: a pair
    ["Cookie", ["Cookie", None]] has its list value redacted, and the header names stay."""
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.save_state({"headers": [["Cookie", ["Cookie", None]], ["Accept", "Cookie"]]})
    state = payloads(store, run.run_id, "state.saved")[0]["state"]
    assert state["headers"][0][0] == "Cookie" and "$redacted" in state["headers"][0][1]
    assert state["headers"][1] == ["Accept", "Cookie"]


def test_nothing_redacted_stores_the_event_as_given(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.save_state({"note": f"key {K}"})
    assert payloads(store, run.run_id, "state.saved")[0]["state"] == {"note": f"key {K}"}


def test_a_header_name_is_never_scrubbed_from_later_events_and_nested_secrets_still_are(tmp_path):
    """The values remembered for later events are the strings inside what was redacted, but for a
    sensitive key name: a pair ["Cookie", ["Cookie", None]] made every later "Cookie" a marker."""
    store = sealbox.init_store(tmp_path / "store")
    nested = "nested-secret-4411"
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        run.save_state({"headers": [["Cookie", ["Cookie", None]]], "password": {"value": nested}})
        run.note(f"send the Cookie header with {nested}")
    password = payloads(store, run.run_id, "state.saved")[0]["state"]["password"]
    text = payloads(store, run.run_id, "note")[0]["text"]
    assert text.startswith("send the Cookie header with ⟦redacted:hmac-sha256:") and nested not in text
    assert "$redacted" in password
    store.close()
    assert nested.encode() not in db_bytes(tmp_path / "store")
