"""Replay without ``--snapshot`` runs under the recorded snapshot: a local knowledge file that changed
on disk (or is gone) since the run was recorded is now a warning in the output (text and --json), and
stops the replay only with ``--fail-on-knowledge-change``. A remote URI is never read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import replay_agents as ra  # noqa: E402

import sealbox  # noqa: E402
from sealbox.cli.main import main  # noqa: E402
from sealbox.replay import Replayer  # noqa: E402
from sealbox.snapshot import Knowledge, Snapshot  # noqa: E402


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "refunds.md").write_bytes(b"refunds within 30 days")
    (kb / "same.md").write_bytes(b"unchanged")
    (kb / "gone.md").write_bytes(b"soon gone")
    snap = Snapshot(knowledge=(Knowledge.from_file(kb / "refunds.md"), Knowledge.from_file(kb / "same.md"),
                               Knowledge.from_file(kb / "gone.md"),
                               Knowledge.from_bytes("https://example.invalid/kb.md", b"remote")))
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain", snapshot=snap))
    store.close()
    return tmp_path, kb, run_id


def _replay(tmp_path, run_id, capsys, *extra):
    try:
        main(["replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", *extra])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_unchanged_knowledge_files_say_nothing(recorded, capsys):
    tmp_path, kb, run_id = recorded
    code, out, err = _replay(tmp_path, run_id, capsys, "--json")
    assert (code, err, json.loads(out)["knowledge_changed"]) == (0, "", [])


def test_a_changed_or_gone_knowledge_file_is_a_warning(recorded, capsys):
    tmp_path, kb, run_id = recorded
    (kb / "refunds.md").write_bytes(b"refunds within 14 days")
    (kb / "gone.md").unlink()
    old, new = _sha(b"refunds within 30 days"), _sha(b"refunds within 14 days")
    code, out, err = _replay(tmp_path, run_id, capsys)
    lines = out.splitlines()
    assert (code, err) == (0, "") and lines[0].startswith("reproduced: 5 step(s) matched; replay run ")
    assert lines[1:] == [
        f"warning: knowledge file {kb / 'gone.md'} is gone or cannot be read (recorded {_sha(b'soon gone')})",
        f"warning: knowledge file {kb / 'refunds.md'} changed since the run was recorded (recorded {old}, now {new})"]
    code, out, err = _replay(tmp_path, run_id, capsys, "--json")
    got = json.loads(out)
    assert (code, got["reproduced"]) == (0, True)
    assert got["knowledge_changed"] == [
        {"uri": str(kb / "gone.md"), "change": "missing", "recorded": _sha(b"soon gone"), "now": None},
        {"uri": str(kb / "refunds.md"), "change": "changed", "recorded": old, "now": new}]


def test_fail_on_knowledge_change_stops_the_replay_before_it_starts(recorded, capsys):
    tmp_path, kb, run_id = recorded
    (kb / "refunds.md").write_bytes(b"refunds within 14 days")
    code, out, err = _replay(tmp_path, run_id, capsys, "--fail-on-knowledge-change", "--json")
    got = json.loads(out)
    assert (code, got["reproduced"], got["new_run_id"], got["divergence"]["kind"]) == (1, False, None, "config_drift")
    assert got["divergence"]["message"] == (
        f"1 knowledge file(s) of the recorded snapshot changed since the run was recorded: {kb / 'refunds.md'} "
        "(changed); replay did not start (without --fail-on-knowledge-change, or fail_on_knowledge_change=True, "
        "a warning)")
    store = sealbox.open_store(tmp_path / "s")
    assert [r["run_id"] for r in store.runs() if r["run_id"] != "system"] == [run_id]  # nothing recorded
    store.close()


def test_a_given_snapshot_is_not_checked_against_the_disk(recorded):
    tmp_path, kb, run_id = recorded
    (kb / "refunds.md").write_bytes(b"changed")
    store = sealbox.open_store(tmp_path / "s")
    recorded_snapshot = store.get_snapshot(store.read_run(run_id)[0].payload["snapshot"])
    result = Replayer(store).replay(run_id, ra.plain, snapshot=recorded_snapshot)
    assert (result.reproduced, result.knowledge_changed) == (True, ())
    store.close()


def test_the_knowledge_warning_is_saved_in_the_replay_runs_verdict(recorded, capsys):
    """The warning was printed (and in --json) but not saved: the replay run's run.ended verdict, which
    `runs show` and `report` read later, said 'reproduced' and nothing else."""
    tmp_path, kb, run_id = recorded
    (kb / "refunds.md").write_bytes(b"refunds within 14 days")
    (kb / "gone.md").unlink()
    old, new = _sha(b"refunds within 30 days"), _sha(b"refunds within 14 days")
    code, out, err = _replay(tmp_path, run_id, capsys, "--json")
    replay_run = json.loads(out)["new_run_id"]
    store = sealbox.open_store(tmp_path / "s")
    verdict = store.read_run(replay_run)[-1].payload["verdict"]
    store.close()
    assert verdict["knowledge_changed"] == [
        {"uri": str(kb / "gone.md"), "change": "missing", "recorded": _sha(b"soon gone"), "now": None},
        {"uri": str(kb / "refunds.md"), "change": "changed", "recorded": old, "now": new}]
    main_code = 0
    try:
        main(["runs", "show", "-s", str(tmp_path / "s"), replay_run])
    except SystemExit as exc:
        main_code = exc.code
    shown = capsys.readouterr().out
    line = next(x for x in shown.splitlines() if x.startswith("verdict  "))
    assert (main_code, line) == (0, "verdict  reproduced (5 steps compared); 2 knowledge file(s) of the recorded "
                                    f"snapshot changed since it was recorded: {kb / 'gone.md'} (missing), "
                                    f"{kb / 'refunds.md'} (changed)")
