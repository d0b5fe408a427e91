"""``SqliteStore.query_runs`` and ``get_run``: each filter finds exactly the runs it should."""

from __future__ import annotations

import pytest

from sealbox.errors import ConfigError


def names(recorded, rows) -> list[str]:
    """Run letters (A…F) of rows, in order; the system run is ``sys``."""
    letter = {v: k for k, v in recorded.runs.items()}
    return [letter.get(r["run_id"], "sys") for r in rows]


def test_every_run_newest_first_with_its_status_and_labels(store, recorded):
    rows = store.query_runs()
    assert names(recorded, rows) == ["F", "E", "D", "C", "B", "A", "sys"]
    by = {n: r for n, r in zip(names(recorded, rows), rows)}
    assert [(by[n]["status"], by[n]["ending"]) for n in "ABCDEF"] == [
        ("ended", "ok"), ("ended", "ok"), ("ended", "error"), ("running", None), ("ended", "cancelled"),
        ("suspended", None)]
    assert by["B"]["parent_run_id"] == recorded.runs["A"]
    assert by["C"]["labels"] == {"env": "prod", "team": "red"}
    assert by["A"]["events"] == 13  # run.started, 4 x (call, decision), 3 results, run.ended
    assert by["A"]["ended_at"] > by["A"]["started_at"] and by["D"]["ended_at"] is None


@pytest.mark.parametrize("status, expected", [
    ("running", ["D", "sys"]),
    ("suspended", ["F"]),
    ("ended", ["E", "C", "B", "A"]),
    ("ok", ["B", "A"]),
    ("error", ["C"]),
    ("cancelled", ["E"]),
])
def test_status_filter(store, recorded, status, expected):
    assert names(recorded, store.query_runs(status=status)) == expected


def test_agent_and_principal_filters(store, recorded):
    assert names(recorded, store.query_runs(agent="support-bot")) == ["C", "A"]
    assert names(recorded, store.query_runs(principal="agent:ops")) == ["F", "E", "D"]
    assert names(recorded, store.query_runs(agent="ops-bot", status="cancelled")) == ["E"]
    assert store.query_runs(agent="support") == []


def test_label_filter_needs_every_label(store, recorded):
    assert names(recorded, store.query_runs(labels=["env=prod"])) == ["C", "A"]
    assert names(recorded, store.query_runs(labels=["env=prod", "team=red"])) == ["C"]
    assert names(recorded, store.query_runs(labels={"env": "staging"})) == ["B"]
    assert store.query_runs(labels=["env=dev"]) == []
    assert store.query_runs(labels=["team=red", "env=staging"]) == []


def test_snapshot_filter_takes_a_fingerprint_or_a_prefix(store, recorded):
    s1, s2 = recorded.snapshots["S1"], recorded.snapshots["S2"]
    assert names(recorded, store.query_runs(snapshot=s1)) == ["A"]
    assert names(recorded, store.query_runs(snapshot=s2[:19])) == ["B"]
    assert names(recorded, store.query_runs(snapshot=s2.removeprefix("sha256:")[:10])) == ["B"]
    assert store.query_runs(snapshot="sha256:" + "0" * 64) == []


def test_time_window_on_start(store, recorded):
    rows = {names(recorded, [r])[0]: r for r in store.query_runs()}
    c_start = rows["C"]["started_at"]
    assert names(recorded, store.query_runs(since=c_start)) == ["F", "E", "D", "C"]
    assert names(recorded, store.query_runs(until=c_start)) == ["B", "A", "sys"]
    assert store.query_runs(until="1h") == []


def test_limit_keeps_the_newest(store, recorded):
    assert names(recorded, store.query_runs(limit=2)) == ["F", "E"]
    assert names(recorded, store.query_runs(status="ended", limit=1)) == ["E"]


@pytest.mark.parametrize("kwargs, message", [
    ({"status": "finished"}, "status: 'finished' is not one of"),
    ({"labels": ["env"]}, "label: 'env' is not KEY=VALUE"),
    ({"since": "last week"}, "since: 'last week' is not a time"),
])
def test_bad_filters_are_refused(store, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        store.query_runs(**kwargs)


def test_get_run_names_parent_and_children(store, recorded):
    a = store.get_run(recorded.runs["A"])
    assert a["parent_run_id"] is None
    assert [c["run_id"] for c in a["children"]] == [recorded.runs["B"]]
    b = store.get_run(recorded.runs["B"])
    assert (b["parent_run_id"], b["children"], b["ending"]) == (recorded.runs["A"], [], "ok")
    assert store.get_run("no-such-run") is None


def test_a_label_recorded_as_a_number_or_boolean_is_found_by_its_json_text(tmp_path):
    # Regression (input: Recorder.run(labels={"n": 1, "ok": True})): the event schema keeps any JSON
    # value, the table showed n=1, but --label n=1 compared "1" with 1 and found no run
    import json
    import subprocess

    from query_helpers import sealbox

    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.query import label_text, labels_match
    from sealbox.recorder import Recorder

    from sealbox.events import EventDraft
    from sealbox.store.base import new_run_id

    store = init_store(tmp_path / "s")
    rec = Recorder(store, policy=ALLOW_ALL)
    # Recorder.run now refuses labels that are not strings; a store holds such runs all the same
    # (recorded before, or by other writers), so the typed run is appended as the recorder did
    typed = new_run_id()
    store.append([EventDraft("run.started", {
        "agent": "typed", "snapshot": None, "parent_run_id": None,
        "labels": {"n": 1, "ok": True, "env": "prod", "none": None},
        "policy": {"fingerprint": ALLOW_ALL.fingerprint, "name": ALLOW_ALL.name}}, run_id=typed, principal="agent:typed"),
        EventDraft("run.ended", {"status": "ok", "usage": {"input_tokens": 0, "output_tokens": 0, "cost": 0}},
                   run_id=typed, principal="agent:typed", step="2")])
    with rec.run(agent="text", labels={"n": "1", "ok": "True"}) as run:
        text = run.run_id

    def found(*labels: str) -> list[str]:
        return [r["run_id"] for r in store.query_runs(labels=list(labels)) if r["agent"] in ("typed", "text")]

    assert found("n=1") == [text, typed]
    assert found("ok=true") == [typed] and found("ok=True") == [text]
    assert found("n=1", "env=prod") == [typed]
    assert found("none=null") == [typed] and found("missing=null") == []
    assert (label_text(1.5), label_text([1, "a"]), label_text("x")) == ("1.5", '[1, "a"]', "x")
    assert labels_match({"k": 2}, {"k": "2"}) and not labels_match({}, {"k": "2"}) and labels_match({}, {})
    store.close()
    proc = sealbox("runs", "list", "-s", str(tmp_path / "s"), "--label", "ok=true", "--json")
    assert [r["run_id"] for r in json.loads(proc.stdout)] == [typed]
    table = sealbox("runs", "list", "-s", str(tmp_path / "s"), "--agent", "typed").stdout
    assert "env=prod, n=1, none=null, ok=true" in table
