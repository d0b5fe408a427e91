"""A note recording a request an upstream made of the client (``payload.client_request``) keeps its
``about`` as a content field (sealbox.events.content_fields): above the inline limit it is stored in
blobs, which ``sealbox verify`` checks; every other note keeps ``about`` inline (real SQLite files)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import sealbox
from sealbox import EventDraft, verify_store
from sealbox.blobs import blob_refs
from sealbox.canonical import Tagged
from sealbox.events import content_fields

POLICY = {"name": "x", "fingerprint": "sha256:" + "0" * 64}
CR = {"id": "creq_00112233aabbccdd", "state": "asked", "upstream": "toy", "method": "sampling/createMessage",
      "call_id": "call_1"}
MESSAGES = [{"role": "user", "content": {"type": "text", "text": f"message {i} " + "x" * 600}} for i in range(3)]
REF = "sha256:" + "a" * 64


@pytest.fixture
def store(tmp_path: Path):
    s = sealbox.init_store(tmp_path / "s")
    s.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": {}, "parent_run_id": None,
                                                     "policy": POLICY, "snapshot": None},
                        run_id="run-1", principal="agent:a"))
    yield s
    if not s._closed:
        s.close()


def note(store, payload):
    return store.append(EventDraft(kind="note", payload=payload, run_id="run-1", principal="sealbox"))[0]


def test_content_fields_of_a_note_depend_on_client_request():
    assert content_fields("note", {"text": "t", "about": {}}) == ()
    assert content_fields("note", {"text": "t", "about": {}, "client_request": CR}) == ("about",)
    assert content_fields("note", {"text": "t", "client_request": "not an object"}) == ()
    assert content_fields("model.call", {"client_request": CR}) == ("request", "response")


def test_a_client_request_notes_about_is_stored_in_blobs_and_another_notes_inline(store):
    about = {"params": {"messages": MESSAGES, "maxTokens": 50}}
    plain = note(store, {"text": "t", "about": about})
    assert plain.payload["about"] == about  # inline, as every reader of a note's about expects
    recorded = note(store, {"text": "t", "about": about, "client_request": CR})
    stored = recorded.payload["about"]
    assert stored["params"]["maxTokens"] == 50 and list(stored["params"]["messages"]) == ["$blob"]  # a chain
    assert store.resolve(stored) == about
    assert len(recorded.raw) < 1024
    # the same conversation resent with one more message adds one message's blobs, not three
    before = {ref for ref, _, _ in store.iter_blobs()}
    longer = {"params": {"messages": MESSAGES + [{"role": "assistant", "content": {"type": "text", "text": "y" * 600}}],
                         "maxTokens": 50}}
    note(store, {"text": "t", "about": longer, "client_request": CR})
    assert len({ref for ref, _, _ in store.iter_blobs()} - before) == 2  # the message's content and its chain link
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


def test_verify_reports_a_missing_blob_of_a_client_request_note(store, tmp_path):
    recorded = note(store, {"text": "t", "about": {"result": {"content": {"type": "text", "text": "z" * 700}}},
                            "client_request": CR})
    [ref] = blob_refs(recorded.payload["about"])  # the text: {"result": {"content": {"text": {"$blob": …}}}}
    assert recorded.payload["about"]["result"]["content"]["text"] == {"$blob": ref}
    store.close()
    db = sqlite3.connect(tmp_path / "s" / "sealbox.db")
    db.execute("DROP TRIGGER blobs_no_delete")  # a change below Sealbox
    db.execute("DELETE FROM blobs WHERE ref = ?", (ref,))
    db.commit()
    db.close()
    reopened = sealbox.open_store(tmp_path / "s")
    try:
        report = verify_store(reopened)
        assert [p.message for p in report.problems if p.code == "blob_missing"] == [
            f"blob {ref} is referenced but not stored"]
    finally:
        reopened.close()


def test_a_store_tag_given_in_a_client_request_notes_about_is_the_callers_data(store, tmp_path):
    recorded = note(store, {"text": "t", "about": {"x": Tagged("$blob", REF)}, "client_request": CR})
    db = sqlite3.connect(tmp_path / "s" / "sealbox.db")
    raw = db.execute("SELECT raw FROM events WHERE leaf_index = ?", (recorded.leaf_index,)).fetchone()[0]
    db.close()
    assert json.loads(raw)["payload"]["about"] == {"x": {"$esc": {"$blob": REF}}}
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
