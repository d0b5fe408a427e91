"""A replay whose agent raises is reproduced only when it raises what the recorded run ended with."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.redaction import ContentPolicy
from sealbox.replay import Replayer


def _agent(exc):
    def agent(run):
        run.note("checked the disk")
        if exc is not None:
            raise exc
    return agent


def _record(store):
    with pytest.raises(RuntimeError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:a") as run:
            run_id = run.run_id
            _agent(RuntimeError("disk full on /var"))(run)
    return run_id


@pytest.mark.parametrize("mode", ["full", "hashes-only"])
def test_the_same_exception_reproduces(tmp_path, mode):
    store = sealbox.init_store(tmp_path / "s", content=ContentPolicy(mode=mode))
    run_id = _record(store)
    result = Replayer(store).replay(run_id, _agent(RuntimeError("disk full on /var")))
    assert result.head() == "reproduced: 1 step(s) matched"
    assert result.reproduced and result.agent_error == {"type": "RuntimeError", "message": "disk full on /var"}
    store.close()


def test_another_exception_type_is_an_outcome_divergence(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    run_id = _record(store)
    result = Replayer(store).replay(run_id, _agent(ValueError("bad input")))
    assert not result.reproduced
    assert (result.divergence.kind, result.divergence.step) == ("outcome", None)
    assert result.divergence.message == (
        "every step matched and both runs ended error, but the recorded run raised RuntimeError: disk full on "
        "/var and the replay raised ValueError: bad input (differs in type, message)")
    assert store.read_run(result.new_run_id)[-1].payload["verdict"]["reproduced"] is False
    store.close()


@pytest.mark.parametrize("mode", ["full", "hashes-only"])
def test_the_same_type_with_another_message_is_an_outcome_divergence(tmp_path, mode):
    store = sealbox.init_store(tmp_path / "s", content=ContentPolicy(mode=mode))
    run_id = _record(store)
    result = Replayer(store).replay(run_id, _agent(RuntimeError("disk full on /tmp")))
    assert not result.reproduced and result.divergence.kind == "outcome"
    assert result.divergence.message.endswith("(differs in message)")
    if mode == "full":
        assert "recorded run raised RuntimeError: disk full on /var and the replay raised RuntimeError: " \
               "disk full on /tmp" in result.divergence.message
    store.close()


class _Handle:
    pass


def test_a_message_that_differs_only_in_an_objects_address_reproduces(tmp_path):
    """A message holding a repr (<…_Handle object at 0x7f…>) differs in every run only by the address."""
    store = sealbox.init_store(tmp_path / "s")
    with pytest.raises(RuntimeError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:a") as run:
            run_id = run.run_id
            _agent(RuntimeError(f"cannot use {_Handle()}"))(run)
    replayed = RuntimeError(f"cannot use {_Handle()}")
    assert str(replayed) != store.read_run(run_id)[-1].payload["error"]["message"]  # the addresses differ
    result = Replayer(store).replay(run_id, _agent(replayed))
    assert result.head() == "reproduced: 1 step(s) matched"
    other = Replayer(store).replay(run_id, _agent(RuntimeError(f"cannot open {_Handle()}")))
    assert not other.reproduced and other.divergence.message.endswith("(differs in message)")
    store.close()
