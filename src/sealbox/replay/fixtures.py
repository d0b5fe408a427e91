"""Recorded runs as JSON fixtures: export a run, load it into another store, replay it in CI.

A fixture is ``{"format": "sealbox-run-fixture/1", "run_id", "snapshot", "events":
[{"kind", "step", "principal", "payload"}], "keys": [StepKey…]}``: the run's events
with their content resolved (type-tag encoded, as stored), its snapshot, and the
step keys replay compares. :func:`load_run` re-appends the events into a store
(new timestamps and hashes, same run id, steps and content); the keys are kept
so that a test can check that recording the same agent today still gives the same
keys — a change in how runs are recorded then shows up as a failing test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sealbox.canonical import decode
from sealbox.errors import ConfigError
from sealbox.events import EventDraft

__all__ = ["FIXTURE_FORMAT", "export_run", "load_run", "step_keys", "read_fixture", "write_fixture"]

FIXTURE_FORMAT = "sealbox-run-fixture/1"


def step_keys(store: Any, run_id: str) -> list[dict[str, str]]:
    """The run's comparable step keys, in logical order, as dicts."""
    from sealbox.replay.keys import RecordedRun

    return [rec.key.to_dict() for rec in RecordedRun.read(store, run_id).ordered()]


def export_run(store: Any, run_id: str) -> dict[str, Any]:
    """A run as a fixture dict (content resolved; erased blobs stay as references)."""
    events = store.read_run(run_id)
    if not events:
        from sealbox.approvals import shown_id  # an id pasted whole from a file: cut

        raise ConfigError(f"no run {shown_id(run_id)} in this store")
    fp = events[0].payload.get("snapshot")
    return {
        "format": FIXTURE_FORMAT, "run_id": run_id,
        "snapshot": store.get_snapshot(fp) if fp else None,
        "events": [{"kind": e.kind, "step": e.step, "principal": e.principal,
                    "payload": store._resolve_quietly(e.payload) if hasattr(store, "_resolve_quietly")
                    else store.resolve(e.payload)} for e in events],
        "keys": step_keys(store, run_id),
    }


def load_run(store: Any, fixture: dict[str, Any]) -> str:
    """Append a fixture's events to ``store`` in one transaction; return the run id.

    Raises:
        ConfigError: not a fixture of this format.
        InvalidEventError: an event does not validate (nothing is written).
    """
    if not isinstance(fixture, dict) or fixture.get("format") != FIXTURE_FORMAT:
        raise ConfigError(f"not a {FIXTURE_FORMAT} fixture")
    if fixture.get("snapshot"):
        store.put_snapshot(fixture["snapshot"])
    run_id = fixture["run_id"]
    drafts = [EventDraft(e["kind"], decode(e["payload"]), run_id=run_id, principal=e["principal"], step=e["step"])
              for e in fixture["events"]]
    store.append(drafts)
    return run_id


def write_fixture(path: str | Path, fixture: dict[str, Any]) -> None:
    """Write a fixture as indented JSON (stable key order, so diffs read well)."""
    Path(path).write_text(json.dumps(fixture, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def read_fixture(path: str | Path) -> dict[str, Any]:
    """Read a fixture written by :func:`write_fixture`."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
