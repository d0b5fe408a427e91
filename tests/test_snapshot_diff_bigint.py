"""A large integer (beyond I-JSON's 2**53, kept as ``{"$bigint": "..."}`` by the store's encoding) in a
diff: the path used to end in the internal tag and the values be its strings (``~ x.$bigint:
"1152…976" -> "1152…977"``). The path now names the field and the values are integers."""

from __future__ import annotations

import json

from click.testing import CliRunner

import sealbox
from sealbox.canonical import encode
from sealbox.cli.main import cli
from sealbox.replay.divergence import Divergence, render_divergence
from sealbox.snapshot import FieldDiff, Snapshot, diff_snapshots, diff_values

BIG = 2**60  # 1152921504606846976


def test_diff_values_names_the_field_and_shows_integers():
    assert diff_values(encode({"x": BIG}), encode({"x": BIG + 1})) == (FieldDiff("x", "changed", BIG, BIG + 1),)
    assert diff_values(encode({"x": 5}), encode({"x": BIG})) == (FieldDiff("x", "changed", 5, BIG),)
    assert diff_values(encode({"x": [1]}), encode({"x": [1, {"y": BIG}]})) == (
        FieldDiff("x[1]", "added", None, {"y": BIG}),)
    assert diff_values(encode({"x": BIG}), encode({"x": BIG})) == ()
    # the source's own dict that looks like the tag is escaped by the store: shown as it was, not as an int
    assert diff_values(encode({"x": {"$bigint": "7"}}), encode({"x": {"$bigint": "8"}})) == (
        FieldDiff("x.$bigint", "changed", "7", "8"),)  # the source's key, never the store's marker
    assert diff_values(encode({"x": {"$bigint": "7"}}), encode({"x": 7})) == (
        FieldDiff("x", "changed", {"$esc": {"$bigint": "7"}}, 7),)


def test_snapshot_diff_and_divergence_show_the_integers(tmp_path):
    a, b = Snapshot(model={"p": BIG}).to_dict(), Snapshot(model={"p": BIG + 1}).to_dict()
    assert diff_snapshots(a, b) == [FieldDiff("model.p", "changed", BIG, BIG + 1)]
    store = sealbox.init_store(tmp_path / "s")
    fa, fb = store.put_snapshot(a), store.put_snapshot(b)
    store.close()
    runner = CliRunner()
    table = runner.invoke(cli, ["snapshot", "diff", fa, fb, "-s", str(tmp_path / "s")])
    assert table.exit_code == 0 and "$bigint" not in table.output
    assert "model.p" in table.output and f"{BIG}" in table.output and f"{BIG + 1}" in table.output
    as_json = runner.invoke(cli, ["snapshot", "diff", fa, fb, "--json", "-s", str(tmp_path / "s")])
    assert json.loads(as_json.output) == [{"path": "model.p", "change": "changed", "a": BIG, "b": BIG + 1}]
    as_csv = runner.invoke(cli, ["snapshot", "diff", fa, fb, "--csv", "-s", str(tmp_path / "s")])
    assert as_csv.output.splitlines() == ["path,change,a,b", f"model.p,changed,{BIG},{BIG + 1}"]
    div = Divergence("mismatch", "2", "the arguments differ", diff=diff_values(encode({"x": BIG}),
                                                                                encode({"x": BIG + 1})))
    assert f"    ~ x: {BIG} -> {BIG + 1}" in render_divergence(div).splitlines()


def test_a_path_never_holds_the_stores_escape_marker():
    """A dict of the source's own with a key starting with "$" is stored as {"$esc": {...}}: its diff path
    held the store's marker ("x.$esc.$schema"), so "x.$esc" could be the marker or the source's own key
    "$esc" (stored {"$esc": {"$esc": ...}}: "x.$esc.$esc"), and a dict escaped on one side only diffed as
    the marker removed and the keys added. Every path segment is now a key of the source's."""
    assert diff_values(encode({"x": {"$bigint": "7"}}), encode({"x": {"$bigint": "8"}})) == (
        FieldDiff("x.$bigint", "changed", "7", "8"),)
    assert diff_values(encode({"x": {"$esc": 1}}), encode({"x": {"$esc": 2}})) == (FieldDiff("x.$esc", "changed", 1, 2),)
    assert diff_values(encode({"x": {"$schema": "a", "k": 1}}), encode({"x": {"k": 2}})) == (
        FieldDiff("x.$schema", "removed", "a", None), FieldDiff("x.k", "changed", 1, 2))
    assert diff_values(encode({"x": {"$a": {"p": BIG}}}), encode({"x": {"$a": {"p": BIG + 1}}})) == (
        FieldDiff("x.$a.p", "changed", BIG, BIG + 1),)
    a = Snapshot(model={"parameters": {"$schema": "v1"}}).to_dict()
    b = Snapshot(model={"parameters": {"$schema": "v2"}}).to_dict()
    assert diff_snapshots(a, b) == [FieldDiff("model.parameters.$schema", "changed", "v1", "v2")]


def test_whatif_snapshot_finds_a_value_by_the_diff_path():
    from sealbox.replay.whatif import _lookup

    stored = Snapshot(model={"parameters": {"$schema": "v1", "$esc": "own"}}).to_dict()
    assert _lookup(stored, "model.parameters.$schema") == (True, "v1")
    assert _lookup(stored, "model.parameters.$esc") == (True, "own")
    assert _lookup(stored, "model.parameters.$esc.$schema") == (True, "v1")  # a path written before
