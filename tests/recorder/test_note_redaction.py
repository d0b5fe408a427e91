"""A run's notes are the caller's words: redacted like other content (they were stored in clear)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy
from sealbox.store import init_store
from sealbox.verify import verify_store

SECRET = "hunter2SECRETVALUE-77a1"
TOKEN = "Bearer abcdefgh12345678SECRETTOKEN"


def _files(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


@pytest.mark.parametrize("mode", ["redacted", "hashes-only"])
def test_note_text_and_about_are_redacted(tmp_path, mode):
    store = init_store(tmp_path / "s", content=ContentPolicy(mode=mode))
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.note(f"logged in with {TOKEN}", about={"password": SECRET, "user": "alice", "n": 3})
    [note] = [e.payload for e in store.read_run(run.run_id) if e.kind == "note"]
    if mode == "redacted":
        assert re.fullmatch(r"logged in with ⟦redacted:hmac-sha256:[0-9a-f]{64}⟧", note["text"]), note["text"]
        assert note["about"]["user"] == "alice" and note["about"]["n"] == 3
        assert set(note["about"]["password"]) == {"$redacted"}
    else:
        assert re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", note["text"]) and set(note["about"]) == {"$redacted"}
    assert verify_store(store).ok
    store.close()
    data = _files(tmp_path / "s")
    assert SECRET.encode() not in data and b"SECRETTOKEN" not in data


def test_full_mode_keeps_notes_and_a_plain_note_is_unchanged(tmp_path):
    store = init_store(tmp_path / "s", content=ContentPolicy(mode="full"))
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.note(f"kept {TOKEN}", about={"password": SECRET})
    [note] = [e.payload for e in store.read_run(run.run_id) if e.kind == "note"]
    assert note == {"text": f"kept {TOKEN}", "about": {"password": SECRET}}
    store.close()
    store = init_store(tmp_path / "r")
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.note("nothing secret here")
    assert [e.payload for e in store.read_run(run.run_id) if e.kind == "note"] == [{"text": "nothing secret here"}]
    store.close()


def test_a_run_with_a_redacted_note_replays(tmp_path):
    """Replay compares notes as the store keeps them: a redacted note still reproduces."""
    from sealbox.replay import Replayer

    store = init_store(tmp_path / "s")

    def agent(run):
        run.note(f"token {TOKEN}", about={"api_key": SECRET})
        run.note("plain")

    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert result.reproduced, result.divergence
    assert result.steps_compared == 2
    store.close()
