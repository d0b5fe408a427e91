"""The Python query API takes a run id, a snapshot prefix and labels by the rules of the CLI
(``sealbox calls --run``, ``runs list --snapshot`` / ``--label``): what the command resolves or refuses,
``query_calls`` / ``query_runs`` / ``get_run`` resolve or refuse with a ConfigError, never an empty
answer for a mistake. Both backends (the ``recorded`` fixture)."""

from __future__ import annotations

import pytest
from query_helpers import sealbox as run_cli

from sealbox.errors import ConfigError


def test_query_calls_takes_a_run_id_prefix_as_calls_run_does(store, recorded):
    a = recorded.runs["A"]
    full = store.query_calls(run_id=a)
    assert len(full) == 4 and {r["run_id"] for r in full} == {a}
    assert store.query_calls(run_id=a[:-6]) == full  # a prefix (UUIDv7: the first characters are a time)
    assert store.query_calls(run_id=a.upper()) == full  # pasted from a GUID tool
    assert store.query_calls(run_id=f"  {a}\n") == full  # a copied line
    assert store.query_calls(run_id=a[:-6] + "…") == full  # cut short as the tables show it


def test_query_calls_refuses_a_run_id_the_command_refuses(store, recorded):
    a = recorded.runs["A"]
    with pytest.raises(ConfigError, match="at least 4 characters"):
        store.query_calls(run_id=a[:3])
    with pytest.raises(ConfigError, match="no run"):
        store.query_calls(run_id="no-such-run")
    with pytest.raises(ConfigError, match="not a string"):
        store.query_calls(run_id=5)
    # the command says the same
    out = run_cli("calls", "--store", str(recorded.path), "--run", "no-such-run")
    assert out.returncode == 2 and "no run 'no-such-run'" in out.stderr


def test_query_runs_snapshot_prefix_needs_8_hex_digits_as_runs_list_does(store, recorded):
    s1 = recorded.snapshots["S1"]
    assert [r["run_id"] for r in store.query_runs(snapshot=s1.removeprefix("sha256:")[:8])] == [recorded.runs["A"]]
    assert [r["run_id"] for r in store.query_runs(snapshot=s1[:15].upper())] == [recorded.runs["A"]]
    for short in (s1.removeprefix("sha256:")[:4], s1[:11]):
        with pytest.raises(ConfigError, match="at least 8 hex digits"):
            store.query_runs(snapshot=short)
    with pytest.raises(ConfigError, match="not a snapshot fingerprint"):
        store.query_runs(snapshot="not-hex!")
    out = run_cli("runs", "list", "--store", str(recorded.path), "--snapshot", s1.removeprefix("sha256:")[:4])
    assert out.returncode == 2 and "at least 8 hex digits" in out.stderr


def test_query_runs_labels_are_strings(store, recorded):
    assert [r["run_id"] for r in store.query_runs(labels={"env": "staging"})] == [recorded.runs["B"]]
    for bad in ({"env": 1}, {"ok": True}, {"env": None}, {1: "prod"}):
        with pytest.raises(ConfigError, match="is not a string"):
            store.query_runs(labels=bad)


def test_get_run_of_a_non_string_is_a_config_error(store, recorded):
    for bad in (5, None, [recorded.runs["A"]]):
        with pytest.raises(ConfigError, match="run_id: .* is not a string"):
            store.get_run(bad)
    assert store.get_run("no-such-run") is None  # an unknown id: None, as documented
