"""``diff_snapshots`` / ``sealbox snapshot diff``: different fingerprints never diff as empty, equal
ones always do.

Each case below used to print "no differences" (``--json``: ``[]``) for two snapshots with
different fingerprints: any list under a key ``tools``/``knowledge`` at any depth was re-keyed
by ``server/name`` (OpenAI tool definitions under ``model.parameters.tools`` all became
``None/None``), non-dict items were dropped, tools sharing ``server/name`` overwrote each other,
and knowledge in another order fingerprinted differently but diffed alike.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sealbox
from sealbox.cli.main import cli
from sealbox.recorder import Recorder
from sealbox.replay.whatif import whatif_snapshot
from sealbox.snapshot import Knowledge, Snapshot, ToolSpec, diff_snapshots, snapshot_fingerprint


def oa(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {}}}


def paths(a, b):
    return [(d.path, d.change) for d in diff_snapshots(a, b)]


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def record(store, *snapshots: Snapshot) -> list[str]:
    """Record one run per snapshot into the real store; the fingerprints run.started names."""
    rec = Recorder(store, policy=sealbox.policies.ALLOW_ALL)
    fps = []
    for snap in snapshots:
        with rec.run(agent="snap-test", snapshot=snap) as run:
            pass
        (row,) = [r for r in store.query_runs() if r["run_id"] == run.run_id]
        fps.append(row["snapshot"])
    return fps


def cli_diff(store_path, a: str, b: str, *extra: str):
    result = CliRunner().invoke(cli, ["snapshot", "diff", "-s", str(store_path), a, b, *extra],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


# ------------------------------------------------------------------ the tester's four cases, end to end


def test_openai_tool_definitions_under_model_parameters_are_compared_by_position(store, tmp_path):
    a = Snapshot(model={"name": "gpt-4o", "parameters": {"tools": [oa("search"), oa("delete_all")]}})
    b = Snapshot(model={"name": "gpt-4o", "parameters": {"tools": [oa("search")]}})
    fa, fb = record(store, a, b)
    assert fa != fb
    diffs = json.loads(cli_diff(tmp_path / "store", fa, fb, "--json"))
    assert diffs == [{"path": "model.parameters.tools[1]", "change": "removed", "a": oa("delete_all"), "b": None}]
    # two definitions no longer share one key "None/None"
    c = Snapshot(model={"name": "gpt-4o", "parameters": {"tools": [oa("delete_all"), oa("search")]}})
    assert paths(a.to_dict(), c.to_dict()) == [("model.parameters.tools[0].function.name", "changed"),
                                               ("model.parameters.tools[1].function.name", "changed")]


def test_a_list_of_strings_named_tools_is_not_dropped(store, tmp_path):
    a, b = Snapshot(extra={"tools": ["search"]}), Snapshot(extra={"tools": ["search", "rm_rf"]})
    fa, fb = record(store, a, b)
    assert json.loads(cli_diff(tmp_path / "store", fa, fb, "--json")) == [
        {"path": "extra.tools[1]", "change": "added", "a": None, "b": "rm_rf"}]
    # nor a list named knowledge, nor dicts without a server/name deeper down
    assert paths({"extra": {"knowledge": ["x"]}}, {"extra": {"knowledge": ["y"]}}) == [
        ("extra.knowledge[0]", "changed")]
    assert paths({"limits": {"tools": [{"max": 1}]}}, {"limits": {"tools": [{"max": 1}, {"max": 2}]}}) == [
        ("limits.tools[1]", "added")]


def test_tools_sharing_server_and_name_are_told_apart_by_version(store, tmp_path):
    both = Snapshot(tools=(ToolSpec("db", "q", version="1"), ToolSpec("db", "q", version="2")))
    two = Snapshot(tools=(ToolSpec("db", "q", version="2"),))
    fa, fb = record(store, both, two)
    assert fa != fb
    diffs = json.loads(cli_diff(tmp_path / "store", fa, fb, "--json"))
    assert diffs == [{"path": "tools.db/q@1", "change": "removed", "b": None,
                      "a": {"server": "db", "name": "q", "description": "", "input_schema": {}, "version": "1"}}]
    assert "tools.db/q@1" in cli_diff(tmp_path / "store", fa, fb)  # the readable table too
    # identical duplicates (same version too) are numbered, never overwritten
    twice = Snapshot(tools=(ToolSpec("db", "q", version="2"), ToolSpec("db", "q", version="2")))
    assert paths(two.to_dict(), twice.to_dict()) == [("tools.db/q@2#2", "added")]
    # a unique tool keeps its plain key, as whatif and older scripts read it
    assert paths(Snapshot(tools=(ToolSpec("db", "q", version="1"),)).to_dict(), two.to_dict()) == [
        ("tools.db/q.version", "changed")]


def test_duplicate_tool_order_does_not_change_the_fingerprint():
    v1, v2 = ToolSpec("db", "q", version="1"), ToolSpec("db", "q", version="2")
    assert Snapshot(tools=(v1, v2)).fingerprint == Snapshot(tools=(v2, v1)).fingerprint


def test_knowledge_order_is_not_significant(store, tmp_path):
    ka, kb = Knowledge("a", "sha256:" + "aa" * 32, 1), Knowledge("b", "sha256:" + "bb" * 32, 1)  # recorded: real hashes
    first, second = Snapshot(knowledge=(ka, kb)), Snapshot(knowledge=(kb, ka))
    fa, fb = record(store, first, second)
    assert fa == fb == first.fingerprint
    assert [k["uri"] for k in first.to_dict()["knowledge"]] == ["a", "b"] == [
        k["uri"] for k in second.to_dict()["knowledge"]]
    assert json.loads(cli_diff(tmp_path / "store", fa, fb, "--json")) == []


def test_a_stored_reorder_is_reported(store, tmp_path):
    """Content stored before knowledge was put in canonical order (or written by hand) keeps the
    order it was hashed in: two such snapshots differ in fingerprint, so the diff says how."""
    ka = {"uri": "a", "content_hash": "sha256:aa", "size": 1}
    kb = {"uri": "b", "content_hash": "sha256:bb", "size": 1}
    base = Snapshot().to_dict()
    fa = store.put_snapshot({**base, "knowledge": [ka, kb]})
    fb = store.put_snapshot({**base, "knowledge": [kb, ka]})
    assert fa != fb
    assert json.loads(cli_diff(tmp_path / "store", fa, fb, "--json")) == [
        {"path": "knowledge", "change": "reordered", "a": ["a", "b"], "b": ["b", "a"]}]
    assert "reordered" in cli_diff(tmp_path / "store", fa, fb)
    t1 = {"server": "s", "name": "x", "description": "", "input_schema": {}, "version": None}
    t2 = {**t1, "name": "y"}
    assert paths({**base, "tools": [t1, t2]}, {**base, "tools": [t2, t1]}) == [("tools", "reordered")]


def test_knowledge_sharing_a_uri_is_told_apart_by_content_hash():
    old = Snapshot(knowledge=(Knowledge("doc.md", "sha256:01", 1),))
    both = Snapshot(knowledge=(Knowledge("doc.md", "sha256:01", 1), Knowledge("doc.md", "sha256:02", 2)))
    assert paths(old.to_dict(), both.to_dict()) == [('knowledge["doc.md@sha256:02"]', "added")]


def test_whatif_still_reads_tools_by_server_and_name(store):
    fa, = record(store, Snapshot(tools=(ToolSpec("fs", "read_file", version="3"),)))
    assert len(whatif_snapshot(store, "tools.fs/read_file.version", "3")) == 1


# ------------------------------------------------------------------ the invariant, by property

_names = st.sampled_from(["a", "b", "q", "a.b", "q@1", "q@1#2"])
_tools = st.builds(ToolSpec, st.sampled_from(["db", "fs"]), _names, st.sampled_from(["", "d"]),
                   st.sampled_from([{}, {"type": "object"}]), st.sampled_from([None, "1", "2", "null"]))
_knowledge = st.builds(Knowledge, st.sampled_from(["a", "b", "https://x/y.md"]),
                       st.sampled_from(["sha256:aa", "sha256:bb"]), st.sampled_from([1, 2]))
_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["x", "y", "rm_rf"]),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["tools", "knowledge", "server", "name", "uri"]), inner,
                                       max_size=3), max_leaves=8)
_snapshots = st.builds(
    Snapshot,
    model=st.fixed_dictionaries({"name": st.sampled_from(["m", "n"])},
                                optional={"parameters": st.dictionaries(st.sampled_from(["tools", "t"]), _json,
                                                                        max_size=2)}),
    system_prompt=st.sampled_from([None, "p"]),
    knowledge=st.lists(_knowledge, max_size=3).map(tuple),
    skills=st.lists(st.sampled_from(["s1", "s2"]), max_size=2).map(tuple),
    tools=st.lists(_tools, max_size=4).map(tuple),
    extra=st.dictionaries(st.sampled_from(["tools", "knowledge", "x"]), _json, max_size=2),
)


def _check(a: dict, b: dict) -> None:
    same_fp = snapshot_fingerprint(a) == snapshot_fingerprint(b)
    diffs = diff_snapshots(a, b)
    assert (diffs == []) == same_fp, (a, b, diffs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_snapshots, _snapshots)
def test_diff_is_empty_exactly_when_fingerprints_are_equal(a, b):
    _check(a.to_dict(), b.to_dict())
    _check(a.to_dict(), a.to_dict())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_snapshots, st.randoms(use_true_random=False))
def test_a_permuted_stored_list_is_never_an_empty_diff(a, rnd):
    """Stored content need not be in canonical order (older snapshots, hand-written ones)."""
    raw = a.to_dict()
    other = dict(raw)
    for name in ("tools", "knowledge"):
        items = list(raw[name])
        rnd.shuffle(items)
        other[name] = items
    _check(raw, other)
    # and one item more, the same as one already there
    if raw["tools"]:
        _check(raw, {**raw, "tools": raw["tools"] + raw["tools"][:1]})
    if raw["knowledge"]:
        _check(raw, {**raw, "knowledge": raw["knowledge"][:1] + raw["knowledge"]})


def test_a_whole_tools_or_knowledge_list_removed_or_changed_shows_the_list_it_was():
    """A snapshot without `tools`/`knowledge` (a replay's `--snapshot FILE`, `{}`) against one with
    them was shown with the diff's internal keyed form: `tools: {"db/q": {…}}`, `knowledge: {}` where
    the snapshot held `[{…}]` and `[]` (the replay's config-drift lines printed it so)."""
    tool = {"server": "db", "name": "q"}
    a = {"tools": [tool], "knowledge": []}
    assert [d.to_dict() for d in diff_snapshots(a, {})] == [
        {"path": "knowledge", "change": "removed", "a": [], "b": None},
        {"path": "tools", "change": "removed", "a": [tool], "b": None},
    ]
    assert [d.to_dict() for d in diff_snapshots({"tools": None}, a)] == [
        {"path": "knowledge", "change": "added", "a": None, "b": []},
        {"path": "tools", "change": "changed", "a": None, "b": [tool]},
    ]
    assert [d.to_dict() for d in diff_snapshots(a, {"tools": [], "knowledge": []})] == [
        {"path": "tools.db/q", "change": "removed", "a": tool, "b": None},
    ]
