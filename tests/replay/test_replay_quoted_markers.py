"""A tool output that only quotes how redaction markers look (``$redacted``, ``⟦redacted:``) is the tool's
own answer: replay serves it. Only a marker as the store writes it (sealbox.redaction) makes a step
unreplayable. The replay and the gateway (``_resumed_elsewhere``) share one exact detector."""

from __future__ import annotations

import sealbox
import sealbox.policies
import sealbox.recorder
from sealbox.replay import Replayer

QUOTING = ('a record shows a redacted value as {"$redacted": "hmac-sha256:<hex>"}, or inside a string as '
           '⟦redacted:hmac-sha256:<hex>⟧; "$redacted" is the tag')


def _record(store, agent):
    with sealbox.recorder.Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="docs") as run:
        agent(run)
    return run.run_id


def test_a_result_quoting_the_marker_text_replays(tmp_path):
    store = sealbox.init_store(tmp_path / "r")  # default mode: redacted
    served = []

    def agent(run):
        served.append(run.call_tool("docs", "explain", {"topic": "markers"}, lambda topic: QUOTING))
        served.append(run.call_tool("docs", "schema", {"topic": "markers"},
                                    lambda topic: {"$redacted": "x", "note": "⟦redacted:hmac-sha256:12⟧"}))

    try:
        run_id = _record(store, agent)
        served.clear()
        result = Replayer(store).replay(run_id, agent)
        assert result.unreplayable == ()
        assert result.reproduced
        assert served == [QUOTING, {"$redacted": "x", "note": "⟦redacted:hmac-sha256:12⟧"}]
    finally:
        store.close()


def test_a_real_marker_in_a_result_is_still_unreplayable(tmp_path):
    store = sealbox.init_store(tmp_path / "r")
    key = "sk-" + "A" * 24

    def agent(run):
        run.call_tool("docs", "explain", {"topic": "markers"}, lambda topic: QUOTING)
        run.call_tool("vault", "read", {"name": "openai"}, lambda name: f"export OPENAI_API_KEY={key}")

    try:
        run_id = _record(store, agent)
        result = Replayer(store).replay(run_id, agent)
        assert [(u.step, u.name) for u in result.unreplayable] == [("3", "vault/read")]
        assert (result.divergence.kind, result.divergence.step) == ("unreplayable", "3")
    finally:
        store.close()


def test_one_exact_detector_for_replay_and_the_gateway():
    from sealbox.canonical import encode
    from sealbox.gateway import server
    from sealbox.redaction import holds_marker
    from sealbox.replay import keys

    digest = "hmac-sha256:" + "0123456789abcdef" * 4
    assert keys.has_marker is holds_marker and server._holds_marker is holds_marker
    assert [holds_marker(v) for v in ({"$redacted": digest}, [f"a ⟦redacted:{digest}⟧ b"])] == [True, True]
    assert [holds_marker(v) for v in (encode(QUOTING), encode({"$redacted": digest}),
                                      {"$redacted": "not a digest"})] == [False, False, False]
