"""RunContext._draft builds the same EventDraft the dataclass constructor does."""

from __future__ import annotations

import dataclasses

import pytest

from sealbox.events import EventDraft
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store


def test_draft_equals_the_constructed_one_and_stays_frozen(tmp_path) -> None:
    store = init_store(tmp_path / "s")
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            payload = {"call_id": "c1", "ok": True}
            draft = run._draft("tool.result", payload, "3")
            expected = EventDraft("tool.result", payload, run_id=run.run_id, principal=run.principal.id, step="3")
            assert draft == expected
            assert repr(draft) == repr(expected)
            assert dataclasses.asdict(draft) == dataclasses.asdict(expected)
            assert dataclasses.replace(draft, step="4") == dataclasses.replace(expected, step="4")
            with pytest.raises(dataclasses.FrozenInstanceError):
                draft.step = "5"  # type: ignore[misc]
    finally:
        store.close()
