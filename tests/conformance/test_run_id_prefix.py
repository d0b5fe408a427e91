"""``store.get_run`` / ``store.read_run`` take a whole run id (they are the low-level reads replay and
verify use); a prefix, which the commands and ``query_calls`` accept, is a ConfigError naming the run,
not an empty result that reads as "no such run". On every backend."""

from __future__ import annotations

import pytest

from sealbox.errors import ConfigError
from sealbox.policy import Policy
from sealbox.query import resolve_run_id
from sealbox.recorder import Recorder


def _one_run(store) -> str:
    with Recorder(store, policy=Policy.from_text("version: 1\nrules: []\n")).run(agent="bot") as run:
        pass
    return run.run_id


@pytest.mark.parametrize("method", ["get_run", "read_run"])
def test_a_prefix_is_refused_naming_the_run(store, method):
    run_id = _one_run(store)
    with pytest.raises(ConfigError) as exc:
        getattr(store, method)(run_id[:13])
    assert str(exc.value) == (
        f"run_id: {run_id[:13]!r} is not a whole run id but the start of run {run_id}: {method} takes a whole "
        f"run id; sealbox.query.resolve_run_id(store, {run_id[:13]!r}) resolves a prefix as the commands do")
    assert resolve_run_id(store, run_id[:13]) == run_id


@pytest.mark.parametrize("method", ["get_run", "read_run"])
def test_an_id_pasted_upper_cased_is_refused_naming_the_run(store, method):
    run_id = _one_run(store)
    with pytest.raises(ConfigError, match=f"is not a run id as recorded; the run is {run_id}: {method} takes"):
        getattr(store, method)(run_id.upper())


def test_whole_ids_and_unknown_ids_read_as_before(store):
    run_id = _one_run(store)
    assert [e.kind for e in store.read_run(run_id)] == ["run.started", "run.ended"]
    assert store.get_run(run_id)["run_id"] == run_id
    assert store.read_run("ffffffff-0000") == []
    assert store.get_run("ffffffff-0000") is None


@pytest.mark.parametrize("bad", [None, 5])
def test_read_run_of_a_non_string_is_a_config_error(store, bad):
    with pytest.raises(ConfigError, match="is not a string"):
        store.read_run(bad)
