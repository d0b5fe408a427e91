"""A saved state's label is the caller's words beside the state: a value the state holds under a
sensitive key name, or one redacted earlier in the run, is taken out of it too (it was stored in
clear, only the patterns were applied to the label)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy
from sealbox.store import init_store
from sealbox.verify import verify_store

SECRET = "hunter2"
MARK = r"⟦redacted:hmac-sha256:[0-9a-f]{64}⟧"


def _files(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


def _labels(store, run_id):
    return [e.payload.get("label") for e in store.read_run(run_id) if e.kind == "state.saved"]


@pytest.mark.parametrize("mode", ["redacted", "hashes-only"])
def test_a_label_is_scrubbed_of_the_states_own_secret(tmp_path, mode):
    store = init_store(tmp_path / "s", content=ContentPolicy(mode=mode))
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.save_state({"user": "alice", "password": SECRET}, label=f"logged in as alice with {SECRET}")
        run.save_state({"n": 1}, label="plain")
    [first, second] = _labels(store, run.run_id)
    assert re.fullmatch(f"logged in as alice with {MARK}", first), first
    assert second == "plain"
    assert verify_store(store).ok
    store.close()
    assert SECRET.encode() not in _files(tmp_path / "s")


def test_a_label_is_scrubbed_of_values_redacted_earlier_in_the_run(tmp_path):
    store = init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.call_tool("auth", "login", {"user": "alice", "password": SECRET}, lambda user, password: "ok")
        run.save_state({"step": 2}, label=f"after {SECRET}")        # a tool call's argument
        run.save_state({"api_key": "sk-state-0001"}, label="one")
        run.save_state({"step": 3}, label="key sk-state-0001 used")  # an earlier state's
    labels = _labels(store, run.run_id)
    assert re.fullmatch(f"after {MARK}", labels[0]), labels
    assert labels[1] == "one"
    assert re.fullmatch(f"key {MARK} used", labels[2]), labels
    store.close()
    data = _files(tmp_path / "s")
    assert SECRET.encode() not in data and b"sk-state-0001" not in data


def test_full_mode_keeps_the_label(tmp_path):
    store = init_store(tmp_path / "s", content=ContentPolicy(mode="full"))
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.save_state({"password": SECRET}, label=f"with {SECRET}")
    assert _labels(store, run.run_id) == [f"with {SECRET}"]
    store.close()


def test_a_run_with_a_scrubbed_label_replays(tmp_path):
    """Replay compares a label as the store keeps it: scrubbed, it still reproduces."""
    from sealbox.replay import Replayer

    store = init_store(tmp_path / "s")

    def agent(run):
        run.save_state({"password": SECRET}, label=f"with {SECRET}")
        run.save_state({"n": 1}, label="plain")

    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert result.reproduced, result.divergence
    assert result.steps_compared == 2
    store.close()


def test_hashes_only_scrubs_a_label_of_values_redacted_earlier_in_the_run(tmp_path):
    """hashes-only is the strictest mode: a value redacted earlier in the run (a tool call's
    argument, an earlier state's) is kept out of a later label there too (it was stored in clear)."""
    store = init_store(tmp_path / "s", content=ContentPolicy(mode="hashes-only"))
    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        run.call_tool("auth", "login", {"user": "alice", "password": SECRET}, lambda user, password: "ok")
        run.save_state({"step": 2}, label=f"after {SECRET}")        # a tool call's argument
        run.save_state({"api_key": "sk-state-0001"}, label="one")
        run.save_state({"step": 3}, label="key sk-state-0001 used")  # an earlier state's
        run.save_state({"n": 4}, label="plain")
    labels = _labels(store, run.run_id)
    assert re.fullmatch(f"after {MARK}", labels[0]), labels
    assert labels[1] == "one"
    assert re.fullmatch(f"key {MARK} used", labels[2]), labels
    assert labels[3] == "plain"
    assert verify_store(store).ok
    store.close()
    data = _files(tmp_path / "s")
    assert SECRET.encode() not in data and b"sk-state-0001" not in data


@pytest.mark.parametrize("mode", ["redacted", "hashes-only"])
def test_a_run_with_a_label_scrubbed_of_an_earlier_value_replays(tmp_path, mode):
    """(A hashes-only run's tool results cannot be served again: an earlier state's secret here.)"""
    from sealbox.replay import Replayer

    store = init_store(tmp_path / "s", content=ContentPolicy(mode=mode))

    def agent(run):
        run.save_state({"api_key": "sk-state-0001"}, label="one")
        run.save_state({"step": 2}, label="key sk-state-0001 used")

    with Recorder(store, policy=ALLOW_ALL).run(agent="x") as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent)
    assert result.reproduced, result.divergence
    assert result.steps_compared == 2
    store.close()
    assert b"sk-state-0001" not in _files(tmp_path / "s")
