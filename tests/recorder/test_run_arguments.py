"""What ``Recorder.run`` accepts: a parent that is a run of the store (and sub-agent runs naming
their parent by themselves), string labels, a named agent. Refused before anything is written."""

from __future__ import annotations

import asyncio

import pytest

import sealbox
from sealbox import ConfigError
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _run_ids(store):
    return {r["run_id"] for r in store.runs()}


@pytest.mark.parametrize("parent, message", [
    ("no-such-run", "names no run of this store"),
    ("system", "system run"),
    (12345, "must be a non-empty run id"),
    ("", "must be a non-empty run id"),
])
def test_a_parent_that_is_no_run_of_the_store_is_refused_before_anything_is_written(store, parent, message):
    rec = Recorder(store, policy=ALLOW_ALL)
    before = _run_ids(store)
    with pytest.raises(ConfigError, match=message):
        with rec.run(agent="orphan", parent_run_id=parent, snapshot=sealbox.Snapshot(model={"name": "m"})):
            pytest.fail("the block must not run")
    assert _run_ids(store) == before


def test_a_run_cannot_be_its_own_parent(store):
    rid = "01a20000-0000-7000-8000-000000000001"
    with pytest.raises(ConfigError, match="its own parent"):
        Recorder(store, policy=ALLOW_ALL).run(agent="self", run_id=rid, parent_run_id=rid)
    assert store.read_run(rid) == []


def test_an_existing_parent_is_recorded(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="planner") as parent:
        pass
    with rec.run(agent="helper", parent_run_id=parent.run_id) as child:  # parent ended: still a run of the store
        pass
    assert store.read_run(child.run_id)[0].payload["parent_run_id"] == parent.run_id
    assert [c["run_id"] for c in store.get_run(parent.run_id)["children"]] == [child.run_id]


def test_a_run_opened_inside_another_run_of_the_recorder_names_it_as_parent(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="outer") as outer:
        with rec.run(agent="inner") as inner:
            with rec.run(agent="innermost") as innermost:
                pass
        with rec.run(agent="explicit", parent_run_id=inner.run_id) as explicit:  # given: kept
            pass
    with rec.run(agent="after") as after:
        pass
    started = {r.agent: store.read_run(r.run_id)[0].payload["parent_run_id"]
               for r in (outer, inner, innermost, explicit, after)}
    assert started == {"outer": None, "inner": outer.run_id, "innermost": inner.run_id,
                       "explicit": inner.run_id, "after": None}
    assert inner.parent_run_id == outer.run_id


def test_a_run_of_another_recorder_is_not_taken_as_parent(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="outer"):
        with Recorder(store, policy=ALLOW_ALL).run(agent="other") as other:
            pass
    assert store.read_run(other.run_id)[0].payload["parent_run_id"] is None


def test_an_async_sub_run_names_its_parent(store):
    rec = Recorder(store, policy=ALLOW_ALL)

    async def main():
        async with rec.run(agent="outer") as outer:
            async def sub():
                async with rec.run(agent="sub") as sub_run:
                    return sub_run
            return outer, await asyncio.create_task(sub())

    outer, sub_run = asyncio.run(main())
    assert store.read_run(sub_run.run_id)[0].payload["parent_run_id"] == outer.run_id


@pytest.mark.parametrize("labels", [{"n": 1}, {"b": True}, {1: "x"}, {"d": {"x": 1}}, {"x": None}, ["a"], "env=prod"])
def test_labels_must_map_strings_to_strings(store, labels):
    before = _run_ids(store)
    with pytest.raises(ConfigError, match="labels must"):
        Recorder(store, policy=ALLOW_ALL).run(agent="lab", labels=labels)
    assert _run_ids(store) == before


def test_a_label_with_a_lone_surrogate_is_refused_naming_it(store):
    with pytest.raises(ConfigError, match="label 's': its value .* contains a lone surrogate"):
        Recorder(store, policy=ALLOW_ALL).run(agent="lab", labels={"s": "a\udcff"})


@pytest.mark.parametrize("name", ["", "a=b", " env", "env "])
def test_a_label_name_runs_list_could_never_select_is_refused(store, name):
    """`runs list --label KEY=VALUE` splits at the first '=' and strips the key: a run labelled
    {"a=b": "c"}, {"": "x"} or {" env": "x"} was recorded but no --label could ever select it."""
    before = _run_ids(store)
    with pytest.raises(ConfigError) as raised:
        Recorder(store, policy=ALLOW_ALL).run(agent="lab", labels={"ok": "1", name: "x"})
    assert str(raised.value) == (f"label name {name!r} is empty, holds '=' or starts or ends with a space: "
                                 "`sealbox runs list --label KEY=VALUE` could never select it; nothing was recorded")
    assert _run_ids(store) == before


def test_label_values_may_hold_what_names_may_not(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="lab", labels={"q": "a=b", "s": " x "}) as run:
        pass
    assert [r["run_id"] for r in store.query_runs(labels=["q=a=b"])] == [run.run_id]
    assert [r["run_id"] for r in store.query_runs(labels=["s= x "])] == [run.run_id]


def test_string_labels_are_recorded(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="lab", labels={"env": "prod", "team": ""}) as run:
        pass
    assert store.read_run(run.run_id)[0].payload["labels"] == {"env": "prod", "team": ""}


@pytest.mark.parametrize("agent, message", [("", "agent must be a non-empty string"),
                                            (None, "agent must be a non-empty string"),
                                            ("a\udcff", "agent 'a\\\\udcff' contains a lone surrogate")])
def test_an_agent_must_be_named(store, agent, message):
    before = _run_ids(store)
    with pytest.raises(ConfigError, match=message):
        Recorder(store, policy=ALLOW_ALL).run(agent=agent)
    assert _run_ids(store) == before


def test_a_replay_of_a_run_recorded_with_typed_labels_still_starts(store):
    """Labels recorded before they had to be strings (or by another writer) are carried by a replay."""
    from sealbox.events import EventDraft
    from sealbox.replay import Replayer
    from sealbox.store.base import new_run_id

    old = new_run_id()
    store.append([EventDraft("run.started", {"agent": "typed", "snapshot": None, "parent_run_id": None,
                                             "labels": {"n": 1, "ok": True},
                                             "policy": {"fingerprint": ALLOW_ALL.fingerprint, "name": ALLOW_ALL.name}},
                             run_id=old, principal="agent:typed"),
                  EventDraft("run.ended", {"status": "ok", "usage": {"input_tokens": 0, "output_tokens": 0, "cost": 0}},
                             run_id=old, principal="agent:typed", step="2")])
    result = Replayer(store).replay(old, lambda run: None)
    assert result.reproduced, result.divergence
    started = store.read_run(result.new_run_id)[0].payload
    assert started["labels"] == {"n": 1, "ok": True} and started["replay_of"] == old


@pytest.mark.parametrize("rid, message", [
    ("r\udcff", "run_id 'r\\udcff' contains a lone surrogate (text decoded with surrogateescape?), which a run id "
                "cannot hold; nothing was recorded"),
    ("r" * 129, f"run_id must be a non-empty string of at most 128 characters, got {'r' * 129!r}; nothing was recorded"),
])
def test_a_run_id_the_record_cannot_hold_is_a_config_error(store, rid, message):
    # was: RecordingError "could not record: 'utf-8' codec can't encode character '\udcff' ..." (and
    # "could not record: run_id must be ...") from recorder.run, and a bare UnicodeEncodeError from
    # recorder.continue_run
    rec = Recorder(store, policy=ALLOW_ALL)
    before = _run_ids(store)
    with pytest.raises(ConfigError) as caught:
        with rec.run(agent="a", run_id=rid):
            pytest.fail("the run started")
    assert str(caught.value) == message
    with pytest.raises(ConfigError) as caught:
        rec.continue_run(rid)
    assert str(caught.value) == message
    assert _run_ids(store) == before
    with rec.run(agent="a", run_id="r" * 128) as run:  # the longest run id is fine
        pass
    assert store.read_run(run.run_id)[-1].kind == "run.ended"


@pytest.mark.parametrize("principal, shown", [("agent\nbot", "'agent\\nbot'"), ("  ", "'  '"), ("a\tb", "'a\\tb'")])
def test_a_principal_with_a_control_character_or_only_spaces_is_refused(store, principal, shown):
    """As the gateway refuses such a principal or token identity in its config: the SDK recorded
    ``principal="agent\nbot"`` as given, splitting the lines of every listing naming it."""
    rec = Recorder(store, policy=ALLOW_ALL)
    before = _run_ids(store)
    with pytest.raises(ConfigError) as caught:
        with rec.run(agent="a", principal=principal):
            pytest.fail("the run started")
    assert str(caught.value) == (f"principal id {shown} holds a control character (a newline, a tab…) or only "
                                 "spaces, which an identity in the record cannot hold; nothing was recorded")
    assert _run_ids(store) == before
    with rec.run(agent="a", principal="agent:bot two") as run:  # a space inside is still fine
        pass
    assert store.read_run(run.run_id)[0].principal == "agent:bot two"


@pytest.mark.parametrize("rid, shown", [("run\n2", "'run\\n2'"), ("r\x1b[2J", "'r\\x1b[2J'"), ("   ", "'   '")])
def test_a_new_run_id_with_a_control_character_or_only_spaces_is_refused(store, rid, shown):
    """A newline in a run id split the lines of runs list, calls and the commands it was pasted into."""
    rec = Recorder(store, policy=ALLOW_ALL)
    before = _run_ids(store)
    with pytest.raises(ConfigError) as caught:
        with rec.run(agent="a", run_id=rid):
            pytest.fail("the run started")
    assert str(caught.value) == (f"run_id {shown} holds a control character (a newline, a tab…) or only spaces, "
                                 "which a run id cannot hold (it is pasted into commands and printed in listings); "
                                 "nothing was recorded")
    assert _run_ids(store) == before


def test_parent_run_id_none_starts_a_top_level_run_while_another_run_is_current(store):
    # Regression: None was the default, so an explicit None could not be told from "not given" and the
    # run opened inside another always took it as parent; now None means "no parent"
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="outer") as outer:
        with rec.run(agent="top", parent_run_id=None) as top:
            with rec.run(agent="under-top") as under_top:  # not given: the current run (top) is its parent
                pass
        with rec.run(agent="sub") as sub:  # the default is unchanged
            pass

    async def main():
        async with rec.run(agent="aouter"):
            async with rec.run(agent="atop", parent_run_id=None) as atop:
                return atop

    atop = asyncio.run(main())
    parents = {r.agent: store.read_run(r.run_id)[0].payload["parent_run_id"] for r in (top, under_top, sub, atop)}
    assert parents == {"top": None, "under-top": top.run_id, "sub": outer.run_id, "atop": None}
    assert top.parent_run_id is None
    assert store.get_run(outer.run_id)["children"][0]["run_id"] == sub.run_id
    assert [c["run_id"] for c in store.get_run(outer.run_id)["children"]] == [sub.run_id]
