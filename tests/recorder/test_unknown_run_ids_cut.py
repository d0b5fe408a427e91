"""Recorder.continue_run (and the gateway's join, through it) and a run's unknown parent_run_id echoed
the unknown run id in full in their "no run …" error (a pasted file: one line as long as the file), where
`approvals` and the CLI cut it. They now use sealbox.approvals.shown_id: the id's first 40 characters and
`…`; a short id is echoed whole, as before."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.errors import ConfigError, RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

LONG = "run_" + "x" * 120  # a run id may hold 128 characters
PARENT = "run_" + "p" * 100_000  # a parent_run_id has no length bound of its own


@pytest.fixture
def recorder(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    yield Recorder(store, policy=ALLOW_ALL)
    store.close()


def test_continue_run_cuts_a_long_unknown_run_id(recorder):
    with pytest.raises(RecordingError) as err:
        recorder.continue_run(LONG)
    assert str(err.value) == f"no run '{LONG[:40]}…' in this store"


def test_continue_run_echoes_a_short_unknown_run_id_whole(recorder):
    with pytest.raises(RecordingError) as err:
        recorder.continue_run("run_nope")
    assert str(err.value) == "no run 'run_nope' in this store"


def test_an_unknown_parent_run_id_is_cut(recorder):
    with pytest.raises(ConfigError) as err:
        recorder.run(agent="a", parent_run_id=PARENT).start()
    assert str(err.value) == f"parent_run_id '{PARENT[:40]}…' names no run of this store; nothing was recorded"
