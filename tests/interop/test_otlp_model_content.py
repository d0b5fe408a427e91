"""A model call exported with ``--otlp-content`` comes back on import with its request and response.

The export sent no messages, so ``sealbox import`` gave every model call ``request: None`` and ``response:
None``: the imported run lost what the model was asked and answered, and a replay against it was always a
content mismatch. The chat span now carries the GenAI conventions' ``gen_ai.system_instructions``,
``gen_ai.input.messages`` and ``gen_ai.output.messages`` and the exact recorded bodies
(``sealbox.model.request`` / ``.response``), which the importer reads back.

Recorded with the real Recorder (OpenAI chat and Anthropic Messages), exported with ``sealbox export --otlp``
to a real OTLP/HTTP endpoint on 127.0.0.1, imported with ``sealbox import`` into a fresh store (SQLite, and
PostgreSQL when SEALBOX_TEST_POSTGRES_URL is set), compared field by field and replayed.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from test_otlp_roundtrip import Collector, _sb

from sealbox import init_store, open_store
from sealbox.redaction import ContentPolicy
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.replay import Replayer

POLICY = "version: 1\nrules:\n  - id: all\n    effect: allow\n"

OPENAI_REQUEST = {
    "model": "gpt-4o", "temperature": 0.2,
    "messages": [{"role": "system", "content": "You are terse."},
                 {"role": "user", "content": "What is in /tmp/a.txt? My key is sk-live-abcdefghijklmnopqrstuvwx"}],
    "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
}
OPENAI_RESPONSE = {
    "id": "chatcmpl-c1", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Reading it.",
        "tool_calls": [{"id": "call_A", "type": "function",
                        "function": {"name": "read_file", "arguments": "{\"path\": \"/tmp/a.txt\"}"}}]}}],
    "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
}
ANTHROPIC_REQUEST = {
    "model": "claude-sonnet-4-5", "max_tokens": 256, "system": "Answer in one word.",
    "messages": [{"role": "user", "content": "It said buy milk. What to buy?"}],
}
ANTHROPIC_RESPONSE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Milk."}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 20, "output_tokens": 3},
}


def agent(run):
    run.complete(OPENAI_REQUEST, lambda r: OPENAI_RESPONSE)
    run.call_tool("fs", "read_file", {"path": "/tmp/a.txt"}, lambda path: "buy milk", call_id="call_A")
    run.complete(ANTHROPIC_REQUEST, lambda r: ANTHROPIC_RESPONSE)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.skipif(
    not os.environ.get("SEALBOX_TEST_POSTGRES_URL"), reason="SEALBOX_TEST_POSTGRES_URL not set"))])
def backend(request):
    """``init(path, mode)``: a new store at ``path`` in content mode ``mode`` on the backend (PostgreSQL:
    its own schema, dropped after)."""
    schemas: list[str] = []

    def init(path, mode="full"):
        content = ContentPolicy(mode=mode)
        if request.param == "sqlite":
            return init_store(path, content=content)
        schemas.append(f"sbt_otlp_msg_{uuid.uuid4().hex[:16]}")
        return init_store(path, postgres_url=os.environ["SEALBOX_TEST_POSTGRES_URL"], schema=schemas[-1],
                          content=content)

    yield init
    if schemas:
        import psycopg

        with psycopg.connect(os.environ["SEALBOX_TEST_POSTGRES_URL"], autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _round_trip(backend, tmp_path, source_mode="full", target_mode="full", otlp_content=True):
    source = backend(tmp_path / "source", source_mode)
    with Recorder(source, policy=Policy.from_text(POLICY)).run(agent="bot", principal="agent:bot") as run:
        agent(run)
    original = [(e.kind, e.step, source.resolve(e.payload)) for e in source.read_run(run.run_id)]
    source.close()
    collector = Collector()
    try:
        out = _sb("export", run.run_id, "-s", tmp_path / "source", "--otlp", collector.url,
                  *(["--otlp-content"] if otlp_content else []))
        assert out.returncode == 0, out.stderr
        doc = collector.otlp_json(hex_ids=True)
    finally:
        collector.close()
    file = tmp_path / "export.json"
    file.write_text(json.dumps(doc), encoding="utf-8")
    backend(tmp_path / "target", target_mode).close()
    out = _sb("import", "-s", tmp_path / "target", file, "--json")
    assert out.returncode == 0, out.stderr
    (imported,) = json.loads(out.stdout)["runs"]
    return original, imported, doc


def _models(events):
    return [(s, p) for k, s, p in events if k == "model.call"]


def _spans(doc):
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _attr(span, key):
    for a in span["attributes"]:
        if a["key"] == key:
            return a["value"].get("stringValue")
    return None


def test_model_call_content_comes_back_and_replays(backend, tmp_path):
    original, imported, doc = _round_trip(backend, tmp_path)
    store = open_store(tmp_path / "target")
    try:
        events = [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(imported)]
        got, want = _models(events), _models(original)
        assert [s for s, _ in got] == [s for s, _ in want] == ["2", "3"]
        for (_, g), (_, w) in zip(got, want):
            for field in ("request", "response", "format", "provider", "tool_call_ids"):
                assert g[field] == w[field], field
        assert got[0][1]["request"] == OPENAI_REQUEST and got[0][1]["response"] == OPENAI_RESPONSE
        assert got[1][1]["request"] == ANTHROPIC_REQUEST and got[1][1]["response"] == ANTHROPIC_RESPONSE
        assert [p["call_id"] for k, s, p in events if k == "tool.call"] == ["call_A"]
        assert [s for k, s, p in events if k == "tool.call"] == ["2.1"]

        # the replay sends the same requests: every step matches
        result = Replayer(store).replay(imported, agent)
        assert result.head() == "reproduced: 3 step(s) matched"
    finally:
        store.close()

    # as `sealbox runs show` and `sealbox report` show them
    out = _sb("runs", "show", imported, "-s", tmp_path / "target", "--json")
    assert out.returncode == 0, out.stderr
    shown = [e["payload"] for e in json.loads(out.stdout)["events"] if e["kind"] == "model.call"]
    assert [(p["request"], p["response"]) for p in shown] == [(OPENAI_REQUEST, OPENAI_RESPONSE),
                                                              (ANTHROPIC_REQUEST, ANTHROPIC_RESPONSE)]
    out = _sb("report", imported, "-s", tmp_path / "target", "--format", "md")
    assert out.returncode == 0, out.stderr
    for text in ('"content": "You are terse."', '"finish_reason": "tool_calls"', '"system": "Answer in one word."',
                 '"text": "Milk."'):
        assert text in out.stdout, text

    # the GenAI conventions' attributes, for other backends
    chats = sorted((s for s in _spans(doc) if s["name"].startswith("chat ")), key=lambda s: s["name"])
    assert [s["name"] for s in chats] == ["chat claude-sonnet-4-5", "chat gpt-4o"]
    claude, gpt = chats
    assert json.loads(_attr(gpt, "gen_ai.system_instructions")) == [{"type": "text", "content": "You are terse."}]
    assert json.loads(_attr(gpt, "gen_ai.input.messages")) == [
        {"role": "user", "parts": [{"type": "text", "content": OPENAI_REQUEST["messages"][1]["content"]}]}]
    assert json.loads(_attr(gpt, "gen_ai.output.messages")) == [
        {"role": "assistant", "finish_reason": "tool_calls", "parts": [
            {"type": "text", "content": "Reading it."},
            {"type": "tool_call", "id": "call_A", "name": "read_file", "arguments": {"path": "/tmp/a.txt"}}]}]
    assert json.loads(_attr(claude, "gen_ai.system_instructions")) == [
        {"type": "text", "content": "Answer in one word."}]
    assert json.loads(_attr(claude, "gen_ai.output.messages")) == [
        {"role": "assistant", "finish_reason": "end_turn", "parts": [{"type": "text", "content": "Milk."}]}]
    assert json.loads(_attr(claude, "sealbox.model.request")) == ANTHROPIC_REQUEST


def test_without_otlp_content_no_messages_are_sent(backend, tmp_path):
    original, imported, doc = _round_trip(backend, tmp_path, otlp_content=False)
    for span in _spans(doc):
        keys = {a["key"] for a in span["attributes"]}
        assert not keys & {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                           "sealbox.model.request", "sealbox.model.response"}
    store = open_store(tmp_path / "target")
    try:
        events = [(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(imported)]
        assert [(p["request"], p["response"]) for _, p in _models(events)] == [(None, None), (None, None)]
    finally:
        store.close()


SECRET = "sk-live-abcdefghijklmnopqrstuvwx"


def _imported_models(tmp_path, imported):
    store = open_store(tmp_path / "target")
    try:
        return _models([(e.kind, e.step, store.resolve(e.payload)) for e in store.read_run(imported)])
    finally:
        store.close()


def test_a_redacted_store_redacts_imported_content(backend, tmp_path):
    """Exported in full from a ``full`` store, imported into a ``redacted`` one: the key is redacted there."""
    original, imported, doc = _round_trip(backend, tmp_path, target_mode="redacted")
    assert SECRET in json.dumps(doc)  # the source kept it, and --otlp-content sent it
    got = _imported_models(tmp_path, imported)
    assert SECRET not in json.dumps(got)
    content = got[0][1]["request"]["messages"][1]["content"]
    assert content.startswith("What is in /tmp/a.txt? My key is ⟦redacted:hmac-sha256:")
    # the rest is as recorded
    assert got[0][1]["request"]["messages"][0] == OPENAI_REQUEST["messages"][0]
    assert got[0][1]["response"] == OPENAI_RESPONSE
    assert (got[1][1]["request"], got[1][1]["response"]) == (ANTHROPIC_REQUEST, ANTHROPIC_RESPONSE)


def test_a_hashes_only_store_keeps_only_markers_of_imported_content(backend, tmp_path):
    original, imported, doc = _round_trip(backend, tmp_path, target_mode="hashes-only")
    got = _imported_models(tmp_path, imported)
    markers = [p[field] for _, p in got for field in ("request", "response")]
    assert all(list(m) == ["$redacted"] and m["$redacted"].startswith("hmac-sha256:") for m in markers)
    # each the marker of its own content (a request or response lost on import would all be null's marker)
    assert len({m["$redacted"] for m in markers}) == 4


def test_a_redacted_source_exports_no_secret(backend, tmp_path):
    """What a ``redacted`` store exports is what it holds: the key's marker, never the key."""
    original, imported, doc = _round_trip(backend, tmp_path, source_mode="redacted", target_mode="full")
    assert SECRET not in json.dumps(doc)
    got, want = _imported_models(tmp_path, imported), _models(original)
    assert [(p["request"], p["response"]) for _, p in got] == [(p["request"], p["response"]) for _, p in want]
    assert "⟦redacted:hmac-sha256:" in got[0][1]["request"]["messages"][1]["content"]


def test_genai_messages_of_an_openai_responses_call_and_of_other_formats():
    from sealbox.interop.otlp import model_content_attributes

    request = {"model": "gpt-5", "instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "read a"}]},
        {"type": "function_call_output", "call_id": "c0", "output": "old"}]}
    response = {"id": "resp_1", "status": "completed", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{\"path\": \"a\"}"}]}
    attrs = {k: json.loads(v) for k, v in model_content_attributes("openai.responses", request, response).items()}
    assert attrs == {
        "sealbox.model.request": request, "sealbox.model.response": response,
        "gen_ai.system_instructions": [{"type": "text", "content": "Be brief."}],
        "gen_ai.input.messages": [
            {"role": "user", "parts": [{"type": "text", "content": "read a"}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c0", "response": "old"}]}],
        "gen_ai.output.messages": [{"role": "assistant", "finish_reason": "completed", "parts": [
            {"type": "text", "content": "ok"},
            {"type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": "a"}}]}]}
    # a format with no conversion, or a body not of its format's shape: the exact bodies only
    assert set(model_content_attributes("langchain", {"x": 1}, "y")) == {"sealbox.model.request",
                                                                          "sealbox.model.response"}
    assert set(model_content_attributes("openai.chat", {"messages": [1]}, None)) == {"sealbox.model.request"}
    assert model_content_attributes("openai.chat", None, None) == {}
