"""``sealbox replay RUN --snapshot NOW.json``: a file that is not a complete snapshot (fields
missing, of the wrong type, unknown) is one error line naming what is wrong, exit 2; it used to be
compared as it was, every missing field reported as config drift (``policy: null -> null`` too)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import replay_agents as ra  # noqa: E402

import sealbox  # noqa: E402
from sealbox.cli.main import main  # noqa: E402
from sealbox.snapshot import Knowledge, Snapshot, ToolSpec  # noqa: E402

SNAP = Snapshot(model={"provider": "openai", "name": "gpt-4o", "version": "1"},
                knowledge=(Knowledge("kb/a.md", "sha256:" + "a" * 64, 3),), tools=(ToolSpec("local", "get_time"),))


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain", snapshot=SNAP))
    store.close()
    return tmp_path / "s", run_id


def _replay(recorded, path, capsys, *extra):
    store, run_id = recorded
    try:
        main(["replay", "-s", str(store), run_id, "--agent", "replay_agents:plain", "--snapshot", str(path), *extra])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("content, problem", [
    ({"tools": "x"}, "missing fields extra, knowledge, limits, model, policy, skills, system_prompt; "
                     "tools must be a list, got a string"),
    ({**SNAP.to_dict(), "policy": 7, "model": [], "wat": 1},
     "unknown field wat; model must be an object, got a list; policy must be a string or null, got an integer"),
    ({**SNAP.to_dict(), "knowledge": [{"uri": "kb/a.md", "content_hash": "sha256:x", "size": "3"}]},
     "knowledge[0].size must be an integer, got a string"),
    ({**SNAP.to_dict(), "tools": [{"server": "local"}]}, "tools[0] is missing name"),
])
def test_a_partial_or_malformed_snapshot_file_is_one_error_line(recorded, tmp_path, capsys, content, problem):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(content))
    assert _replay(recorded, bad, capsys, "--allow-config-drift") == (
        2, "", f"error: {bad} is not a complete snapshot: {problem} "
               "(`sealbox snapshot show --json FP` prints one)\n")


def test_a_complete_snapshot_file_still_replays(recorded, tmp_path, capsys):
    good = tmp_path / "now.json"
    good.write_text(json.dumps(SNAP.to_dict()))
    code, out, err = _replay(recorded, good, capsys)
    assert (code, err) == (0, "") and out.startswith("reproduced")
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**SNAP.to_dict(), "system_prompt": "new"}))
    code, out, err = _replay(recorded, changed, capsys, "--allow-config-drift")
    assert "configuration differs from the record in 1 field(s):\n  system_prompt: null -> \"new\"\n" in out


def test_a_field_the_recorded_snapshot_lacks_too_is_not_missing(tmp_path, monkeypatch, capsys):
    # a run may pin a dict leaving fields out (stored as given): `snapshot show --json` of it replays
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain", snapshot={"model": {"name": "m"}, "tools": []}))
    store.close()
    now = tmp_path / "now.json"
    now.write_text(json.dumps({"model": {"name": "m"}, "tools": []}))
    code, out, err = _replay((tmp_path / "s", run_id), now, capsys)
    assert (code, err) == (0, "") and out.startswith("reproduced")
    now.write_text(json.dumps({"model": {"name": "m"}}))
    assert _replay((tmp_path / "s", run_id), now, capsys) == (
        2, "", f"error: {now} is not a complete snapshot: missing field tools "
               "(`sealbox snapshot show --json FP` prints one)\n")


@pytest.mark.parametrize("content, problem", [
    ({"tools": "x"}, "missing fields extra, knowledge, limits, model, policy, skills, system_prompt; "
                     "tools must be a list, got a string"),
    ({**SNAP.to_dict(), "tools": [{"server": "local"}]}, "tools[0] is missing name"),
])
def test_the_api_refuses_a_partial_snapshot_as_the_cli_does(recorded, content, problem):
    """Replayer.replay(snapshot=<partial dict>) compared it as it was (every missing field drift, or with
    allow_config_drift=True a replay run recorded under a broken snapshot); now the ConfigError the CLI
    gives, before anything is recorded."""
    from sealbox.errors import ConfigError
    from sealbox.replay import Replayer

    path, run_id = recorded
    store = sealbox.open_store(path)
    try:
        with pytest.raises(ConfigError) as caught:
            Replayer(store).replay(run_id, ra.plain, snapshot=content, allow_config_drift=True)
        assert str(caught.value) == (f"snapshot=: not a complete snapshot: {problem} (Snapshot(...) or "
                                     "`sealbox snapshot show --json FP` gives one)")
        assert [r["run_id"] for r in store.runs() if r["run_id"] != "system"] == [run_id]  # nothing recorded
        full = Replayer(store).replay(run_id, ra.plain, snapshot=SNAP.to_dict())  # a complete one is taken
        assert (full.reproduced, full.config_drift) == (True, ())
    finally:
        store.close()
