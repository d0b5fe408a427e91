"""A run recorded before runs scrubbed the values they redacted earlier (e97ebf9 and before: a
password given under {"password": ...} and then passed on in a query was stored in clear in the
query) still reproduces: the replay's view holds the value's in-string marker where that record
holds the value itself, the same HMAC of the same string (docs/replay.md, docs/content-modes.md).
Such a record is written here by recording with the run's memory of redacted values switched off,
which is what e97ebf9 wrote (checked: the same agent recorded by e97ebf9 and replayed by this code)."""

from __future__ import annotations

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, RunContext
from sealbox.replay import Replayer

SECRET = "hunter2-very-secret"
KEY = "ak-live-55e1-0c9d-secret"


def payloads(store, run_id: str, kind: str) -> list:
    return [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == kind]


def _agent(run) -> None:
    run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, lambda user, password: "ok")
    run.call_tool("db", "query", {"sql": f"select * from users where pw = '{SECRET}'"}, lambda sql: {"rows": 1})


def _vault_agent(run) -> None:
    creds = run.call_tool("vault", "read", {"name": "billing"}, lambda name: {"api_key": KEY})
    run.call_tool("http", "get", {"header": f"Key {creds['api_key']}"}, lambda header: 200)


def _record_as_before(store, agent, monkeypatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(RunContext, "_remember_secrets", lambda self, values: None)
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            agent(run)
    return run.run_id


@pytest.mark.parametrize("tools", ["record", "live"])
def test_a_run_recorded_before_scrubbing_still_reproduces(tmp_path, monkeypatch, tools):
    store = sealbox.init_store(tmp_path / "store")
    run_id = _record_as_before(store, _agent, monkeypatch)
    assert payloads(store, run_id, "tool.call")[1]["arguments"] == {"sql": f"select * from users where pw = '{SECRET}'"}
    extra = {"side_effects": True} if tools == "live" else {}
    result = Replayer(store, policy=ALLOW_ALL).replay(run_id, _agent, tools=tools, **extra)
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 2)
    mark = payloads(store, result.new_run_id, "tool.call")[1]["arguments"]["sql"]
    assert mark.startswith("select * from users where pw = '⟦redacted:hmac-sha256:") and SECRET not in mark


def test_a_passed_on_result_value_recorded_before_scrubbing_reproduces_live(tmp_path, monkeypatch):
    store = sealbox.init_store(tmp_path / "store")
    run_id = _record_as_before(store, _vault_agent, monkeypatch)
    assert payloads(store, run_id, "tool.call")[1]["arguments"] == {"header": f"Key {KEY}"}
    result = Replayer(store, policy=ALLOW_ALL).replay(run_id, _vault_agent, tools="live", side_effects=True)
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 2)


def test_another_value_in_place_of_the_secret_still_diverges(tmp_path, monkeypatch):
    """The scrubbed record is compared only as the same string's marker: another value in the query differs."""
    store = sealbox.init_store(tmp_path / "store")
    run_id = _record_as_before(store, _agent, monkeypatch)

    def other(run) -> None:
        run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, lambda user, password: "ok")
        run.call_tool("db", "query", {"sql": "select * from users where pw = 'another-password'"}, lambda sql: {"rows": 1})

    result = Replayer(store, policy=ALLOW_ALL).replay(run_id, other, tools="record")
    assert not result.reproduced and result.divergence.kind == "mismatch" and result.divergence.step == "3"


def test_an_error_message_recorded_before_scrubbing_is_the_same_outcome(tmp_path, monkeypatch):
    """The agent raises an error naming the vault's key: the old record's run.ended holds it in clear,
    the replay's its marker; the same exception, so no outcome divergence."""
    ids: list[str] = []

    def agent(run) -> None:
        ids.append(run.run_id)
        _vault_agent(run)
        raise RuntimeError(f"key {KEY} refused")

    store = sealbox.init_store(tmp_path / "store")
    with pytest.raises(RuntimeError):
        _record_as_before(store, agent, monkeypatch)
    run_id = ids[0]
    ended = [e for e in store.read_run(run_id) if e.kind == "run.ended"][0]
    assert store.resolve(ended.payload)["error"]["message"] == f"key {KEY} refused"
    result = Replayer(store, policy=ALLOW_ALL).replay(run_id, agent, tools="live", side_effects=True)
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 2)
    assert result.agent_error["message"] == f"key {KEY} refused"
    other = Replayer(store, policy=ALLOW_ALL).replay(
        run_id, lambda run: (_vault_agent(run), (_ for _ in ()).throw(RuntimeError("key other refused"))),
        tools="live", side_effects=True)
    assert not other.reproduced and other.divergence.kind == "outcome"
