"""A store folder whose sealbox.db, log.key or checkpoint file was copied from another store: a
writer refuses to record at once (RecordingError, the tool not run, nothing appended). It used to
record, chaining new events to a log its key can never sign, and fail only at close()."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import sealbox
from sealbox.errors import RecordingError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder

from store_testkit import event_rows


def store_with_calls(folder: Path, calls: int) -> Path:
    store = sealbox.init_store(folder)
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        for n in range(calls):
            run.call_tool("srv", "t", {"n": n}, lambda n: n)
    store.close()
    return folder


@pytest.mark.parametrize("name, message", [
    ("sealbox.db", "the newest stored checkpoint is not validly signed by this log's key (note has no verifiable "
                   "signatures): the database or log.key is another log's, or the store was changed below Sealbox; "
                   "refusing to append (run `sealbox verify`)"),
    ("log.key", "the newest stored checkpoint is not validly signed by this log's key (note has no verifiable "
                "signatures): the database or log.key is another log's, or the store was changed below Sealbox; "
                "refusing to append (run `sealbox verify`)"),
    ("checkpoint", "{folder}/checkpoint holds a checkpoint the database does not (the database or the file is "
                   "another log's, or checkpoint rows were deleted): the store was changed below Sealbox; refusing "
                   "to append (run `sealbox verify`)"),
])
def test_a_file_of_another_store_stops_the_writer_before_it_appends(tmp_path, name, message):
    folder = store_with_calls(tmp_path / "mine", 1)  # 6 events: init's, run.started, call, decision, result, ended
    other = store_with_calls(tmp_path / "other", 1 if name == "checkpoint" else 3)
    shutil.copy(other / name, folder / name)
    before = event_rows(folder)
    store = sealbox.open_store(folder)
    ran = []
    with pytest.raises(RecordingError) as caught:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            run.call_tool("srv", "t", {"n": 9}, lambda n: ran.append(n))
    assert str(caught.value) == "could not record: " + message.format(folder=folder)
    assert ran == []
    store.close()
    assert event_rows(folder) == before
