"""A replay allowed to run under another configuration says so in its saved verdict (docs/replay.md).

``sealbox replay RUN --snapshot NOW.json --allow-config-drift`` prints the drifted fields under its
first line, and the replay run's ``run.ended`` verdict lists them (``config_drift``). But the verdict
line that ``sealbox runs show REPLAY_RUN`` and ``sealbox report REPLAY_RUN`` print later read just
``reproduced (2 steps compared)``: the investigator reading it afterwards was told the run reproduced,
not that it did so under another model than the one recorded."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.cli.main import main
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.replay import Replayer
from sealbox.replay.divergence import verdict_text
from sealbox.report import build_report, render_markdown
from sealbox.snapshot import Snapshot


def _snap(name: str, temperature: float = 0) -> Snapshot:
    return Snapshot(model={"provider": "openai", "name": name, "parameters": {"temperature": temperature}})


def agent(run):
    run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
    run.note("done")


@pytest.fixture
def replayed(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot", principal="agent:bot", snapshot=_snap("gpt-4o")) as run:
        agent(run)
    result = Replayer(store).replay(run.run_id, agent, snapshot=_snap("gpt-5", 0.7), allow_config_drift=True)
    assert result.reproduced
    yield store, result.new_run_id, tmp_path
    store.close()


def test_the_verdict_line_names_the_configuration_the_replay_ran_under(replayed, capsys):
    store, replay_run, tmp_path = replayed
    line = ("reproduced (2 steps compared), under a configuration that differs from the recorded snapshot in 2 "
            "field(s): model.name, model.parameters.temperature (--allow-config-drift)")
    assert verdict_text(store.read_run(replay_run)[-1].payload["verdict"]) == line

    code = 0
    try:
        main(["runs", "show", "-s", str(tmp_path / "s"), replay_run])
    except SystemExit as exc:
        code = exc.code
    shown = capsys.readouterr().out
    assert code == 0
    assert [x for x in shown.splitlines() if x.startswith("verdict  ")] == [f"verdict  {line}"]

    text = render_markdown(build_report(store, replay_run, verify=False))
    (row,) = [x for x in text.splitlines() if x.startswith("| **replay verdict** |")]
    assert row == f"| **replay verdict** | {line} |"


def test_a_verdict_without_drift_reads_as_before():
    assert verdict_text({"reproduced": True, "steps_compared": 5, "config_drift": []}) == \
        "reproduced (5 steps compared)"
    assert verdict_text({"reproduced": True, "steps_compared": 5}) == "reproduced (5 steps compared)"
    # a malformed list is read as recorded, never a traceback
    assert verdict_text({"reproduced": True, "steps_compared": 1, "config_drift": "model.name"}) == \
        "reproduced (1 steps compared)"
