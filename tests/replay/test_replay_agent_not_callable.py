"""``Replayer.replay(run_id, agent=X)`` / ``areplay`` with an ``X`` that cannot be called (a string naming the
agent, ``None``, a module): a replay run was recorded and the result said ``NOT reproduced``, the agent having
"raised TypeError: 'str' object is not callable". It is a ConfigError now, before anything is recorded."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import replay_agents as ra  # noqa: E402

import sealbox  # noqa: E402
from sealbox.errors import ConfigError  # noqa: E402
from sealbox.replay import Replayer  # noqa: E402


@pytest.mark.parametrize("agent, shown", [("replay_agents:plain", "'replay_agents:plain'"), (None, "None"),
                                          (5, "5")])
def test_an_agent_that_cannot_be_called_is_refused_before_anything_is_recorded(tmp_path, agent, shown):
    store = sealbox.init_store(tmp_path / "s")
    try:
        run_id = asyncio.run(ra.record(store, "plain"))
        size = store.size()
        message = f"agent: {shown} is not callable: give the agent function itself, called as agent(run)"
        with pytest.raises(ConfigError) as sync:
            Replayer(store).replay(run_id, agent=agent)
        assert str(sync.value) == message
        with pytest.raises(ConfigError) as async_:
            asyncio.run(Replayer(store).areplay(run_id, agent=agent))
        assert str(async_.value) == message
        assert store.size() == size  # no replay run was recorded
        assert [r["run_id"] for r in store.query_runs() if r["replay_of"]] == []
    finally:
        store.close()
