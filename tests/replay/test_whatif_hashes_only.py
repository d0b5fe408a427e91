"""In a ``hashes-only`` store a decision's inputs are kept, as every content field, only as their HMAC
marker. ``sealbox whatif`` listed such a decision as not re-evaluable because "the decision's inputs are
not in the log", as if they had been erased; it now says what docs/content-modes.md says: the store keeps
only their hash, so what-if cannot evaluate them."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy
from sealbox.replay.whatif import whatif_policy

POLICY = "version: 1\nname: p\nrules:\n  - id: all\n    effect: allow\n"


@pytest.mark.parametrize("mode, why", [
    ("hashes-only", "the decision's inputs are kept only as their hash (store content mode: hashes-only): "
                    "what-if cannot evaluate them"),
    ("full", None),
])
def test_hashes_only_inputs_are_named_as_such(tmp_path, mode, why):
    store = sealbox.init_store(tmp_path / "s", content=ContentPolicy(mode=mode))
    try:
        with Recorder(store, policy=Policy.from_text(POLICY)).run(agent="bot") as run:
            run.call_tool("local", "x", {"n": 1}, lambda n: n)
        report = whatif_policy(store, Policy.from_text(POLICY), [run.run_id])
        assert [n.why for n in report.not_re_evaluable] == ([why] if why else [])
        assert report.evaluated == (0 if why else 1)
    finally:
        store.close()
