"""``sealbox export RUN`` takes the run's sub-agent runs with it (docs/bundle-format.md, "Sub-agent runs").

A run's sub-agent runs (``parent_run_id``, at any depth) are part of what it did: ``sealbox replay RUN``
replays them, ``sealbox runs show`` and ``sealbox report`` list them. The export of the run used to leave
them out without a word: the bundle verified, and its recipient never learnt that the agent had handed the
e-mail to a sub-agent that sent it. Both backends, through the CLI."""

from __future__ import annotations

import json
import zipfile

from test_import_vs_live import backend  # noqa: F401 - backend is a fixture
from test_otlp_roundtrip import _sb

from sealbox.policy import ALLOW_ALL
from sealbox.recorder import Recorder


def _bundle_runs(path) -> dict[str, list[str]]:
    """run id -> the kinds of its events in the bundle, in order."""
    with zipfile.ZipFile(path) as bundle:
        lines = bundle.read("events.jsonl").decode().splitlines()
    runs: dict[str, list[str]] = {}
    for line in lines:
        event = json.loads(line)["event"]
        runs.setdefault(event["run_id"], []).append(event["kind"])
    return runs


def test_the_export_of_a_run_holds_its_sub_agent_runs_at_every_depth(backend, tmp_path):
    source = tmp_path / "source"
    store = backend(source)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="boss", principal="agent:boss") as run:
        run.call_tool("crm", "lookup", {"x": 1}, lambda x: 42)
        with rec.run(agent="mailer", principal="agent:mailer") as sub:
            sub.call_tool("mail", "send", {"to": "ceo@example.com"}, lambda to: "sent")
            with rec.run(agent="deep", principal="agent:deep") as deep:
                deep.note("deepest")
    with rec.run(agent="other", principal="agent:other") as other:
        other.note("not a sub-agent")
    store.close()

    out = _sb("export", run.run_id, "-s", source, "-o", tmp_path / "case.sbx", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["runs"] == [run.run_id, sub.run_id, deep.run_id]
    assert summary["events"] == 5 + 5 + 3
    assert set(_bundle_runs(tmp_path / "case.sbx")) - {"system"} == {run.run_id, sub.run_id, deep.run_id}

    text = _sb("export", run.run_id, "-s", source, "-o", tmp_path / "case2.sbx")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"Wrote {tmp_path / 'case2.sbx'}: 13 events of 3 runs (1 selected and "
                                  "its 2 sub-agent runs), "), text.stdout

    # a sub-agent run named alone is exported with its own sub-agent run, not its parent
    alone = _sb("export", sub.run_id, "-s", source, "-o", tmp_path / "sub.sbx", "--json")
    assert json.loads(alone.stdout)["runs"] == [sub.run_id, deep.run_id]

    check = _sb("verify", tmp_path / "case.sbx", "--trust-bundle-key")
    assert check.returncode == 0, check.stdout + check.stderr
