"""A store-only tag ($blob, $cons, $redacted) given in ANY free-form payload field is the caller's data:
stored escaped as {"$esc": ...}, never as a reference the store did not make (real SQLite files)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import sealbox
from sealbox import EventDraft, InvalidEventError, open_store, verify_store
from sealbox.canonical import Tagged, decode
from sealbox.store.base import _store_tags_escaped

REF = "sha256:" + "a" * 64
POLICY = {"name": "x", "fingerprint": "sha256:" + "0" * 64}


def _stored_payload(path: Path, leaf_index: int) -> dict:
    db = sqlite3.connect(path / "sealbox.db")
    try:
        raw = db.execute("SELECT raw FROM events WHERE leaf_index = ?", (leaf_index,)).fetchone()[0]
    finally:
        db.close()
    return json.loads(raw)["payload"]


@pytest.fixture
def store(tmp_path: Path):
    s = sealbox.init_store(tmp_path / "s")
    s.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": {}, "parent_run_id": None,
                                                     "policy": POLICY, "snapshot": None},
                        run_id="run-1", principal="agent:a"))
    yield s
    if not s._closed:
        s.close()


def test_tags_in_non_content_fields_are_escaped(store) -> None:
    path = store.path
    drafts = [
        ("note", {"text": "t", "about": Tagged("$blob", REF)},
         {"about": {"$esc": {"$blob": REF}}, "text": "t"}),
        ("tools.changed", {"server": "s", "added": Tagged("$cons", [REF, None]), "removed": [{"x": Tagged("$blob", REF)}],
                           "changed": Tagged("$redacted", "x")},
         {"server": "s", "added": {"$esc": {"$cons": [REF, None]}}, "removed": [{"x": {"$esc": {"$blob": REF}}}],
          "changed": {"$esc": {"$redacted": "x"}}}),
        ("access.granted", {"grant_id": "g", "principal": "p", "server": "s", "tool": "t",
                            "scope": {"read": Tagged("$blob", REF)}},
         {"grant_id": "g", "principal": "p", "server": "s", "tool": "t", "scope": {"read": {"$esc": {"$blob": REF}}}}),
        ("access.revoked", {"grant_id": "g", "step": "sent", "detail": [Tagged("$blob", REF)]},
         {"grant_id": "g", "step": "sent", "detail": [{"$esc": {"$blob": REF}}]}),
        # a content field, as before
        ("anomaly", {"what": "w", "detail": Tagged("$blob", REF)}, {"what": "w", "detail": {"$esc": {"$blob": REF}}}),
    ]
    for kind, payload, stored in drafts:
        ev = store.append(EventDraft(kind=kind, payload=payload, run_id="run-1", principal="agent:a"))[0]
        assert _stored_payload(path, ev.leaf_index) == stored, kind
        assert ev.payload == stored
        # it reads back as the caller's one-key dict, not as a tag
        roundtrip = decode(stored)
        for name, value in payload.items():
            if isinstance(value, Tagged):
                assert roundtrip[name] == {value.tag: value.value}
    # an already escaped user dict is kept as it is (no double escape)
    ev = store.append(EventDraft(kind="note", payload={"text": "t", "about": {"$esc": {"$blob": REF}}},
                                 run_id="run-1", principal="agent:a"))[0]
    about = _stored_payload(path, ev.leaf_index)["about"]
    assert about == {"$esc": {"$esc": {"$esc": {"$blob": REF}}}}  # encode()'s escape, then the store's inside it
    assert decode(about) == {"$esc": {"$blob": REF}}  # the caller's dict, exactly
    store.append(EventDraft(kind="run.ended", payload={"status": "ok"}, run_id="run-1", principal="agent:a"))
    store.close()
    db = sqlite3.connect(path / "sealbox.db")
    try:
        assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0  # no blob was made, none referenced
        raws = [r[0] for r in db.execute("SELECT raw FROM events")]
    finally:
        db.close()
    for raw in raws:  # no bare store-only tag anywhere: each is under $esc
        text = raw.decode()
        for tag in ('{"$blob"', '{"$cons"', '{"$redacted"'):
            assert text.count(tag) == text.count('{"$esc":' + tag), text
    ro = open_store(path, readonly=True)
    try:
        assert verify_store(ro).ok
    finally:
        ro.close()


def test_note_about_is_escaped_before_redaction(store) -> None:
    """note.about is redacted like content: the store's own $redacted markers are bare, the caller's escaped."""
    ev = store.append(EventDraft(kind="note", payload={"text": "t", "about": {
        "password": "hunter2", "mine": Tagged("$redacted", "hmac-sha256:" + "0" * 64)}},
        run_id="run-1", principal="agent:a"))[0]
    about = _stored_payload(store.path, ev.leaf_index)["about"]
    assert about["mine"] == {"$esc": {"$redacted": "hmac-sha256:" + "0" * 64}}
    assert list(about["password"]) == ["$redacted"] and about["password"]["$redacted"].startswith("hmac-sha256:")


def test_labels_that_look_like_a_tag_are_escaped(tmp_path: Path) -> None:
    s = sealbox.init_store(tmp_path / "s")
    ev = s.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": {"$cons": "x"},
                                                          "parent_run_id": None, "policy": POLICY, "snapshot": None},
                             run_id="run-2", principal="agent:a"))[0]
    # encode() escapes a plain dict with a $ key already; a Tagged is escaped by the store
    assert _stored_payload(s.path, ev.leaf_index)["labels"] == {"$esc": {"$cons": "x"}}
    ev = s.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": Tagged("$cons", "x"),
                                                          "parent_run_id": None, "policy": POLICY, "snapshot": None},
                             run_id="run-3", principal="agent:a"))[0]
    assert _stored_payload(s.path, ev.leaf_index)["labels"] == {"$esc": {"$cons": "x"}}
    s.close()


def test_escape_helper_returns_the_same_object_when_nothing_changes() -> None:
    value = {"a": [1, {"b": "c"}], "$esc": 1}
    assert _store_tags_escaped(value) is value
    assert _store_tags_escaped({"$blob": REF}) == {"$esc": {"$blob": REF}}


def test_verify_names_a_bare_store_tag_outside_content_fields(tmp_path: Path, monkeypatch) -> None:
    """A store written before the escaping (simulated by switching it off while appending) holds
    bare tags in note.about and tools.changed: verify names each; content fields and the store's own
    $redacted markers in note.about are not reported."""
    import sealbox.store.base as base

    path = tmp_path / "s"
    s = sealbox.init_store(path)
    s.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": {}, "parent_run_id": None,
                                                     "policy": POLICY, "snapshot": None},
                        run_id="run-1", principal="agent:a"))
    s.append(EventDraft(kind="note", payload={"text": "t", "about": {"password": "hunter2"}},
                        run_id="run-1", principal="agent:a"))  # a store-made $redacted marker: fine
    monkeypatch.setattr(base, "_store_tags_escaped", lambda value: value)  # the old behaviour
    forged = s.append(EventDraft(kind="note", payload={"text": "t", "about": Tagged("$blob", REF)},
                                 run_id="run-1", principal="agent:a"))[0]
    chained = s.append(EventDraft(kind="tools.changed", payload={"server": "s", "added": [], "removed": [],
                                                                 "changed": [Tagged("$cons", [REF, None])]},
                                  run_id="run-1", principal="agent:a"))[0]
    monkeypatch.undo()
    s.close()
    assert _stored_payload(path, forged.leaf_index)["about"] == {"$blob": REF}  # what the old store wrote
    ro = open_store(path, readonly=True)
    try:
        report = verify_store(ro)
    finally:
        ro.close()
    assert [(p.code, p.kind, p.leaf_index, p.found) for p in report.problems] == [
        ("store_tag_misplaced", "note", forged.leaf_index, '{"$blob": …}'),
        ("store_tag_misplaced", "tools.changed", chained.leaf_index, '{"$cons": …}'),
    ]
    assert "'about'" in report.problems[0].message and "'changed'" in report.problems[1].message


def test_bundle_verify_names_a_bare_store_tag_outside_content_fields(tmp_path: Path, monkeypatch) -> None:
    """The same check offline: a run exported from such a store gives a bundle whose verify names
    the bare tag at its events.jsonl line (the bundle is otherwise intact and proven)."""
    import sealbox.store.base as base
    from sealbox.interop.bundle import export_bundle
    from sealbox.interop.bundle_verify import verify_bundle

    s = sealbox.init_store(tmp_path / "s")
    s.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": {}, "parent_run_id": None,
                                                     "policy": POLICY, "snapshot": None},
                        run_id="run-1", principal="agent:a"))
    monkeypatch.setattr(base, "_store_tags_escaped", lambda value: value)  # the old behaviour
    forged = s.append(EventDraft(kind="note", payload={"text": "t", "about": Tagged("$blob", REF)},
                                 run_id="run-1", principal="agent:a"))[0]
    monkeypatch.undo()
    export_bundle(s, ["run-1"], tmp_path / "run.sbx")
    s.close()
    report = verify_bundle(tmp_path / "run.sbx")
    assert [(p.code, p.kind, p.leaf_index, p.member, p.found) for p in report.problems] == [
        ("store_tag_misplaced", "note", forged.leaf_index, "events.jsonl line 2", '{"$blob": …}'),
    ]
