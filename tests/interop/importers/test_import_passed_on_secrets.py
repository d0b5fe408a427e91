"""An imported run whose one event has a value redacted (a tool call's {"password": P}) and whose
other events hold the same value in clear (another call's SQL, the tool's output, the next model
turn) is stored with that value's in-string marker in all of them, as a live run is
(docs/content-modes.md, "Values redacted earlier in the run"). Raw sealbox.db and -wal bytes."""

from __future__ import annotations

import json
from pathlib import Path

import sealbox
from sealbox.interop.importers import import_file

P = "hunter2-xyz-7781"


def conversation(secret: str) -> dict:
    call = lambda i, name, args: {"id": f"c{i}", "type": "function",  # noqa: E731
                                  "function": {"name": name, "arguments": json.dumps(args)}}
    return {"messages": [
        {"role": "user", "content": "log in and look me up"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "login", {"password": secret})]},
        {"role": "tool", "tool_call_id": "c1", "content": f"logged in with {secret}"},
        {"role": "assistant", "content": None, "tool_calls": [call(2, "query", {"sql": f"select '{secret}'"})]},
        {"role": "tool", "tool_call_id": "c2", "content": "1 row"},
        {"role": "assistant", "content": f"done, your password {secret} works"},
    ]}


def db_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("sealbox.db"))


def test_a_value_redacted_in_one_imported_event_is_stored_in_none(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    source = tmp_path / "t.json"
    source.write_text(json.dumps(conversation(P)))
    (run_id,) = import_file(store, source, "tau-bench").runs
    events = store.read_run(run_id)
    calls = [store.resolve(e.payload) for e in events if e.kind == "tool.call"]
    mark = f"⟦redacted:{calls[0]['arguments']['password']['$redacted']}⟧"
    assert calls[1]["arguments"] == {"sql": f"select '{mark}'"}
    results = [store.resolve(e.payload)["result"] for e in events if e.kind == "tool.result"]
    assert results == [f"logged in with {mark}", "1 row"]
    assert sealbox.verify_store(store).ok
    assert any(p.name == "sealbox.db-wal" for p in (tmp_path / "store").iterdir())
    assert P.encode() not in db_bytes(tmp_path / "store")
    store.close()
    assert P.encode() not in db_bytes(tmp_path / "store")


def test_an_import_with_nothing_redacted_is_stored_as_given(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    plain = conversation(P)
    plain["messages"][1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"user": "bob"})
    source = tmp_path / "t.json"
    source.write_text(json.dumps(plain))
    (run_id,) = import_file(store, source, "tau-bench").runs
    calls = [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == "tool.call"]
    assert calls[1]["arguments"] == {"sql": f"select '{P}'"}  # a value never redacted: kept
    store.close()


def test_a_value_redacted_in_an_imported_event_is_scrubbed_from_that_event_and_no_header_name_is(tmp_path):
    """A tool's output {"api_key": K, "message": "your key is K", "h": [["Cookie", ["Cookie", None]]]}:
    K is its marker in both places of that result (and in the next model turn that reads it); the
    header pair's value is redacted, and its name "Cookie" (a string inside no redacted value of its
    own) is kept in clear, in the result and elsewhere in the run."""
    key = "ak-live-91f3-77aa-imported"
    output = json.dumps({"api_key": key, "message": f"your key is {key}", "h": [["Cookie", ["Cookie", None]]]})
    conv = {"messages": [
        {"role": "user", "content": "read the vault; Cookie jar"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "vault", "arguments": json.dumps({"name": "b"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
        {"role": "assistant", "content": "done"},
    ]}
    store = sealbox.init_store(tmp_path / "store")
    source = tmp_path / "t.json"
    source.write_text(json.dumps(conv))
    (run_id,) = import_file(store, source, "tau-bench").runs
    events = store.read_run(run_id)
    (result,) = [json.loads(store.resolve(e.payload)["result"]) for e in events if e.kind == "tool.result"]
    mark = result["api_key"]
    assert mark.startswith("⟦redacted:hmac-sha256:") and result["message"] == f"your key is {mark}"
    assert result["h"][0][0] == "Cookie" and result["h"][0][1].startswith("⟦redacted:hmac-sha256:")
    first = [store.resolve(e.payload) for e in events if e.kind == "model.call"][0]
    assert first["request"]["messages"][0]["content"] == "read the vault; Cookie jar"
    assert sealbox.verify_store(store).ok
    assert key.encode() not in db_bytes(tmp_path / "store")
    store.close()
    assert key.encode() not in db_bytes(tmp_path / "store")
