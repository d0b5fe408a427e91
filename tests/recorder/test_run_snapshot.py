"""The snapshot a run pins: a Snapshot (its policy, when it names one, the policy in force) or the
fingerprint of a snapshot already stored; anything else is refused before anything is written."""

from __future__ import annotations

import re

import pytest

import sealbox
from sealbox import ConfigError
from sealbox.errors import StoreError
from sealbox.policies import ALLOW_ALL
from sealbox.policy import Policy
from sealbox.recorder import Recorder
from sealbox.snapshot import Knowledge, Snapshot, ToolSpec

OTHER = Policy.from_text("version: 1\nname: other\nrules:\n  - id: all\n    match: {tool: '*'}\n    effect: allow\n")


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def _run_ids(store):
    return {r["run_id"] for r in store.runs()}


def _pinned(store, run):
    return store.read_run(run.run_id)[0].payload["snapshot"]


def test_a_snapshot_naming_the_policy_in_force_is_pinned(store):
    snap = Snapshot(model={"name": "m"}, policy=ALLOW_ALL.fingerprint)
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap) as run:
        pass
    assert _pinned(store, run) == snap.fingerprint
    assert store.get_snapshot(snap.fingerprint)["policy"] == ALLOW_ALL.fingerprint


def test_a_snapshot_without_a_policy_is_pinned_as_given(store):
    snap = Snapshot(model={"name": "m"})
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap) as run:
        pass
    assert _pinned(store, run) == snap.fingerprint and store.get_snapshot(snap.fingerprint)["policy"] is None


@pytest.mark.parametrize("named", ["sha256:" + "0" * 64, "not a fingerprint", OTHER.fingerprint])
def test_a_snapshot_naming_another_policy_is_refused(store, named):
    before = _run_ids(store)
    snap = Snapshot(model={"name": "m"}, policy=named)
    with pytest.raises(ConfigError, match="the snapshot names policy .* but this recorder's policy 'ALLOW_ALL'"):
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap)
    assert _run_ids(store) == before
    with pytest.raises(StoreError, match="no snapshot"):
        store.get_snapshot(snap.fingerprint)


@pytest.mark.parametrize("snap", [{"anything": 1}, "a string", 42, "sha256:" + "G" * 64, b"sha256:", ["x"]])
def test_a_snapshot_that_is_no_snapshot_is_refused(store, snap):
    before = _run_ids(store)
    with pytest.raises(ConfigError, match="snapshot must be a sealbox Snapshot"):
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap)
    assert _run_ids(store) == before


def test_a_snapshots_dict_form_is_pinned_like_the_snapshot(store):
    snap = Snapshot(model={"name": "m"}, policy=ALLOW_ALL.fingerprint)
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap.to_dict()) as run:
        pass
    assert _pinned(store, run) == snap.fingerprint
    with pytest.raises(ConfigError, match="names policy"):
        Recorder(store, policy=OTHER).run(agent="s", snapshot=snap.to_dict())
    partial = {"model": {"name": "m"}, "system_prompt": "hi", "policy": None}  # fields left out: kept as given
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=partial) as run:
        pass
    assert store.get_snapshot(_pinned(store, run)) == partial
    with pytest.raises(ConfigError, match="unknown fields 'modle'"):
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot={"modle": {"name": "m"}})


def test_a_stored_snapshots_fingerprint_is_pinned(store):
    snap = Snapshot(model={"name": "m"}, policy=ALLOW_ALL.fingerprint)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="first", snapshot=snap):
        pass
    with rec.run(agent="again", snapshot=snap.fingerprint) as run:
        pass
    assert _pinned(store, run) == snap.fingerprint


def test_a_fingerprint_of_no_stored_snapshot_is_refused_when_the_run_starts(store):
    before = _run_ids(store)
    with pytest.raises(ConfigError, match="is not stored in this store"):
        with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot="sha256:" + "ab" * 32):
            pytest.fail("the block must not run")
    assert _run_ids(store) == before


def test_a_stored_snapshot_naming_another_policy_is_refused(store):
    snap = Snapshot(model={"name": "m"}, policy=OTHER.fingerprint)
    with Recorder(store, policy=OTHER).run(agent="s", snapshot=snap):
        pass
    before = _run_ids(store)
    with pytest.raises(ConfigError, match="names policy"):
        with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap.fingerprint):
            pass
    assert _run_ids(store) == before


@pytest.mark.parametrize("snap, found", [
    (Snapshot(tools=({"server": "db", "name": "read_query"},)), "'dict' object has no attribute 'server'"),
    (Snapshot(knowledge=("handbook.md",)), "'str' object has no attribute 'uri'"),
    (Snapshot(system_prompt="You are \udc80 helpful"), "lone surrogate"),
])
def test_a_snapshot_that_cannot_be_stored_is_refused_by_run_not_raised_from_with(store, snap, found):
    """A dict among a Snapshot's tools (the to_dict() form's shape) raised AttributeError from the
    with statement, and a lone surrogate in its prompt a RecordingError 'could not record'."""
    before = _run_ids(store)
    with pytest.raises(ConfigError, match="the snapshot cannot be recorded") as caught:
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap)
    assert found in str(caught.value) and "nothing was recorded" in str(caught.value)
    assert _run_ids(store) == before
    assert sealbox.verify_store(store).ok


GOOD_HASH = "sha256:" + "0f" * 32


@pytest.mark.parametrize("snap, field, got", [
    (Snapshot(tools=(ToolSpec(None, None),)), "tools[0].server", "None"),
    (Snapshot(tools=(ToolSpec("db", "q"), ToolSpec("db", ""))), "tools[1].name", "''"),
    (Snapshot(tools=(ToolSpec(5, "q"),)), "tools[0].server", "5"),
    (Snapshot(knowledge=(Knowledge("doc.md", GOOD_HASH, -1),)), "knowledge[0].size", "-1"),
    (Snapshot(knowledge=(Knowledge("doc.md", GOOD_HASH, "12"),)), "knowledge[0].size", "'12'"),
    (Snapshot(knowledge=(Knowledge("doc.md", GOOD_HASH, 1.5),)), "knowledge[0].size", "1.5"),
    (Snapshot(knowledge=(Knowledge("doc.md", GOOD_HASH, True),)), "knowledge[0].size", "True"),
    (Snapshot(knowledge=(Knowledge("doc.md", GOOD_HASH, 1), Knowledge("b.md", "sha256:abc", 3))),
     "knowledge[1].content_hash", "'sha256:abc'"),
    (Snapshot(knowledge=(Knowledge("doc.md", "md5:" + "0" * 32, 1),)), "knowledge[0].content_hash", "'md5:"),
    (Snapshot(knowledge=(Knowledge("doc.md", "sha256:" + "0F" * 32, 1),)), "knowledge[0].content_hash", "'sha256:0F"),
    (Snapshot(knowledge=(Knowledge("", GOOD_HASH, 1),)), "knowledge[0].uri", "''"),
    (Snapshot(knowledge=(Knowledge(None, GOOD_HASH, 1),)), "knowledge[0].uri", "None"),
], ids=["tool-none", "tool-empty-name", "tool-int-server", "size-negative", "size-str", "size-float",
        "size-bool", "hash-short", "hash-md5", "hash-uppercase", "uri-empty", "uri-none"])
def test_a_snapshot_with_a_bad_tool_or_document_is_refused_by_run_naming_the_field(store, snap, field, got):
    """ToolSpec(None, None) and a Knowledge of size -1 (or '12', or a hash 'sha256:abc') were stored and
    pinned as they were."""
    before = _run_ids(store)
    with pytest.raises(ConfigError) as caught:
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap)
    message = str(caught.value)
    assert message.startswith(f"snapshot.{field} must be ") and f"got {got}" in message
    assert message.endswith("nothing was recorded")
    assert _run_ids(store) == before
    with pytest.raises(StoreError, match="no snapshot"):
        store.get_snapshot(snap.fingerprint)
    items, attr = re.fullmatch(r"(\w+)\[\d+\]\.(\w+)", field).groups()  # to_dict() sorts tools and knowledge
    with pytest.raises(ConfigError, match=rf"^snapshot\.{items}\[\d+\]\.{attr} must be"):  # its to_dict() form too
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap.to_dict())
    assert _run_ids(store) == before


def test_good_tools_and_documents_are_pinned(store, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_bytes(b"")
    snap = Snapshot(tools=(ToolSpec("db", "q", version="1"),),
                    knowledge=(Knowledge.from_file(doc), Knowledge.from_bytes("https://x/y", b"hello")))
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap) as run:
        pass
    stored = store.get_snapshot(_pinned(store, run))
    assert [(k["uri"], k["size"]) for k in stored["knowledge"]] == [(str(doc), 0), ("https://x/y", 5)]
    assert [(t["server"], t["name"]) for t in stored["tools"]] == [("db", "q")]


def test_skills_given_as_a_set_have_one_fingerprint_in_every_process(store, tmp_path):
    # was: skills={"refunds", "billing", "search"} was fingerprinted in the set's iteration order, which
    # depends on PYTHONHASHSEED: the same configuration got another fingerprint in each process
    import subprocess
    import sys

    code = ("from sealbox.snapshot import Snapshot\n"
            "s = Snapshot(skills={'refunds', 'billing', 'search', 'triage'})\n"
            "print(s.fingerprint, s.to_dict()['skills'])\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed)}).stdout for seed in range(8)}
    listed = Snapshot(skills=("billing", "refunds", "search", "triage"))
    assert outs == {f"{listed.fingerprint} ['billing', 'refunds', 'search', 'triage']\n"}
    snap = Snapshot(skills=frozenset({"refunds", "billing"}))
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap) as run:
        pass
    assert _pinned(store, run) == snap.fingerprint == Snapshot(skills=("billing", "refunds")).fingerprint
    assert store.get_snapshot(snap.fingerprint)["skills"] == ["billing", "refunds"]


@pytest.mark.parametrize("skills", ["refunds", b"refunds", {"refunds": {"version": 2}}], ids=["str", "bytes", "dict"])
def test_skills_given_as_one_string_or_a_dict_are_refused_by_run(store, skills):
    # was: Snapshot(skills="refunds") was pinned as skills ["r", "e", "f", "u", "n", "d", "s"], and a
    # dict of skill descriptors as its keys alone, silently
    before = _run_ids(store)
    snap = Snapshot(skills=skills)
    with pytest.raises(ConfigError) as caught:
        Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap)
    assert str(caught.value) == (f"snapshot.skills must be a list or tuple of skill names or descriptors, got "
                                 f"{skills!r} (a string would be pinned as its characters, a dict as its keys); "
                                 "nothing was recorded")
    assert _run_ids(store) == before
    with pytest.raises(StoreError, match="no snapshot"):
        store.get_snapshot(snap.fingerprint)
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=Snapshot(skills=["refunds"])) as run:
        pass
    assert store.get_snapshot(_pinned(store, run))["skills"] == ["refunds"]


def test_a_snapshot_given_its_tools_as_a_generator_pins_every_tool(store):
    # was: Snapshot(tools=(ToolSpec(...) for t in registry)) -- a generator expression, which reads like a
    # tuple -- was read once by the first to_dict() and then was empty: the run pinned a snapshot with
    # "tools": [] and snap.fingerprint named that empty one, silently. The same for knowledge and skills.
    registry = [("db", "read_query"), ("db", "write_query")]
    docs = {"a.md": b"x", "b.md": b"y"}
    as_tuples = Snapshot(tools=tuple(ToolSpec(s, n) for s, n in registry),
                         knowledge=tuple(Knowledge.from_bytes(u, d) for u, d in docs.items()), skills=("a", "b"))
    snap = Snapshot(tools=(ToolSpec(s, n) for s, n in registry),
                    knowledge=map(lambda item: Knowledge.from_bytes(*item), docs.items()),
                    skills=(s for s in ("a", "b")))
    with Recorder(store, policy=ALLOW_ALL).run(agent="s", snapshot=snap) as run:
        pass
    stored = store.get_snapshot(_pinned(store, run))
    assert [(t["server"], t["name"]) for t in stored["tools"]] == registry
    assert [k["uri"] for k in stored["knowledge"]] == ["a.md", "b.md"]
    assert stored["skills"] == ["a", "b"]
    assert _pinned(store, run) == snap.fingerprint == as_tuples.fingerprint
    assert snap.to_dict() == as_tuples.to_dict()
