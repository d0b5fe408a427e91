"""``sealbox.query``: the backend-neutral meaning of time bounds, globs and match expressions."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import sealbox
from sealbox.errors import ConfigError
from sealbox.query import (
    compile_matches,
    glob_literal_prefix,
    glob_match,
    parse_labels,
    parse_match,
    parse_time,
    prefix_upper_bound,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("text, expected", [
    ("90s", "2026-11-29T11:58:30.000000Z"),
    ("15m", "2026-11-29T11:45:00.000000Z"),
    ("2h", "2026-11-29T10:00:00.000000Z"),
    ("30d", "2026-10-30T12:00:00.000000Z"),
    ("1w", "2026-11-22T12:00:00.000000Z"),
    ("2026-11-29T12:34:56Z", "2026-11-29T12:34:56.000000Z"),
    ("2026-11-29T12:34:56.123456z", "2026-11-29T12:34:56.123456Z"),
    ("2026-11-29T13:34:56+01:00", "2026-11-29T12:34:56.000000Z"),
    ("2026-11-29 12:34:56-05:00", "2026-11-29T17:34:56.000000Z"),
    ("2026-11-29", "2026-11-29T00:00:00.000000Z"),
    ("20261129", "2026-11-29T00:00:00.000000Z"),  # other ISO 8601 date forms are dates too (they said
    ("2026-W48", "2026-11-23T00:00:00.000000Z"),  # "has no timezone", as if a time had been given)
    ("2026-W48-7", "2026-11-29T00:00:00.000000Z"),
    ("2026-11-29Z", "2026-11-29T00:00:00.000000Z"),  # a date with an offset: its midnight there (was refused
    ("2026-11-29z", "2026-11-29T00:00:00.000000Z"),  # with "has no timezone; add Z", Z given)
    ("2026-11-29+05:30", "2026-11-28T18:30:00.000000Z"),
    ("2026-11-29-05:00", "2026-11-29T05:00:00.000000Z"),
])
def test_parse_time(text, expected):
    assert parse_time(text, now=NOW) == expected


def test_parse_time_takes_aware_datetimes_only():
    assert parse_time(NOW) == "2026-11-29T12:00:00.000000Z"
    with pytest.raises(ConfigError, match="without a timezone"):
        parse_time(datetime(2026, 11, 29, 12, 0))


@pytest.mark.parametrize("text, message", [
    ("2026-11-29T12:00:00", "has no timezone"),
    ("2026-99-99", "is not a time"),
    ("2026", "is not a time"),
    ("tomorrow", "is not a time"),
    ("-2h", "is not a time"),
    ("2h ago", "is not a time"),
    ("", "is not a time"),
])
def test_parse_time_refuses(text, message):
    with pytest.raises(ConfigError, match=f"until: .*{message}"):
        parse_time(text, now=NOW, name="until")


@pytest.mark.parametrize("text", [
    "99999999d",  # timedelta accepts it; NOW minus it is before year 1
    "9999999999999999999999h",  # past a C int: timedelta itself overflows
    "9" * 5000 + "s",  # past Python's int-from-text digit limit
    "0001-01-01T00:00:00+01:00",  # before year 1 once in UTC
    "9999-12-31T23:00:00-05:00",  # after year 9999 once in UTC
])
def test_parse_time_out_of_range_is_a_config_error(text):
    with pytest.raises(ConfigError) as exc:
        parse_time(text, now=NOW, name="--since")
    assert str(exc.value) == f"--since: {text.strip()!r} is out of range (times go from year 1 to 9999 UTC)"


def test_parse_time_years_below_1000_keep_four_digits():
    # stored ts compare as text: "0005-..." sorts before "2026-...", "5-..." would not
    assert parse_time("0005-01-01") == "0005-01-01T00:00:00.000000Z"
    assert parse_time("0001-01-01T00:00:00Z") == "0001-01-01T00:00:00.000000Z"


@pytest.mark.parametrize("pattern, prefix, exact", [
    ("read_query", "read_query", True),
    ("read_*", "read_", False),
    ("*_query", "", False),
    ("db?", "db", False),
    ("r[ae]ad", "r", False),
])
def test_glob_literal_prefix(pattern, prefix, exact):
    assert glob_literal_prefix(pattern) == (prefix, exact)


def test_prefix_upper_bound_is_just_above_every_extension():
    assert prefix_upper_bound("read_") == "read`"
    assert prefix_upper_bound("a\U0010ffff") == "b"
    assert prefix_upper_bound("\U0010ffff") is None
    assert prefix_upper_bound("\ud7ff") == "\ue000"  # skips the surrogates
    for name in ("read_", "read_query", "read_\U0010ffff"):
        assert "read_" <= name < prefix_upper_bound("read_")


def test_glob_match_is_fnmatch_and_case_sensitive():
    assert glob_match("read_*", "read_query") and not glob_match("read_*", "READ_query")
    assert glob_match("read_[!q]*", "read_rows") and not glob_match("read_[!q]*", "read_query")
    assert not glob_match("*", None)


def test_match_expressions():
    m = parse_match("arguments.query~(?i)delete")
    assert (m.path, m.pattern.pattern, m.root) == (("arguments", "query"), "(?i)delete", "arguments")
    assert m.test({"arguments": {"query": "DELETE FROM t"}})
    assert not m.test({"arguments": {"query": "SELECT 1"}}) and not m.test({"arguments": None})
    assert parse_match("arguments~a~b").pattern.pattern == "a~b"  # the first ~ splits
    nested = parse_match("arguments.items.name~^x$")
    assert nested.test({"arguments": {"items": [{"name": "y"}, {"name": "x"}]}})
    assert not nested.test({"arguments": {"items": [{"name": "xy"}]}})
    assert parse_match("arguments.n~^12$").test({"arguments": {"n": 12}})
    assert parse_match("arguments.flag~^true$").test({"arguments": {"flag": True}})
    assert parse_match("arguments~\"k\": 1").test({"arguments": {"k": 1}})


def test_a_glob_segment_in_a_match_path_matches_keys_and_indexes():
    """`arguments.*~x` matched nothing at all (the segment was read as the key '*'): a glob segment
    matches every key of an object, or index of a list, it matches (fnmatch, as redaction paths)."""
    record = {"arguments": {"query": "DROP TABLE t", "db": "prod", "opts": [{"sql": "a"}, {"sql": "DELETE"}]}}
    assert parse_match("arguments.*~(?i)^drop").test(record)
    assert parse_match("arguments.d?~^prod$").test(record)
    assert not parse_match("arguments.d?~DROP").test(record)  # 'query' does not match 'd?'
    assert parse_match("arguments.opts.*.sql~DELETE").test(record)
    assert parse_match("arguments.opts.[1].sql~DELETE").test(record)
    assert not parse_match("arguments.opts.[0].sql~DELETE").test(record)
    assert not parse_match("arguments.*.missing~.").test(record)


@pytest.mark.parametrize("expr, message", [
    ("arguments~a{99999999999}", "match: invalid regex 'a{99999999999}' in 'arguments~a{99999999999}': "
                                 "a number in it is too large (the repetition number is too large)"),
    (("result", "x{4294967296}"), "match: invalid regex 'x{4294967296}' in 'result~x{4294967296}': "
                                  "a number in it is too large (the repetition number is too large)"),
    ("arguments~" + "(" * 500 + ")" * 500, "it is nested too deeply"),
    ("arguments~(unclosed", "match: invalid regex '(unclosed' in 'arguments~(unclosed': "
                            "missing ), unterminated subpattern at position 0"),
])
def test_a_regex_re_compile_cannot_build_is_a_config_error(expr, message):
    """OverflowError and RecursionError from re.compile were not caught (only re.error was)."""
    with pytest.raises(ConfigError) as exc:
        parse_match(expr)
    assert message in str(exc.value) and "\n" not in str(exc.value) and len(str(exc.value)) < 300
    with pytest.raises(ConfigError):
        compile_matches([expr])


def test_parse_labels():
    assert parse_labels(["env=prod", "team=a=b", "empty="]) == {"env": "prod", "team": "a=b", "empty": ""}
    for bad in (["env"], ["=prod"]):
        with pytest.raises(ConfigError, match="is not KEY=VALUE"):
            parse_labels(bad)


def test_a_label_key_given_twice_with_two_values_is_refused_not_half_applied(tmp_path):
    """`--label env=prod --label env=dev` ("all must match") listed the env=dev runs: the first
    value was silently dropped."""
    assert parse_labels(["env=prod", "env=prod"]) == {"env": "prod"}
    with pytest.raises(ConfigError, match="'env' is given twice, as 'prod' and 'dev'"):
        parse_labels(["env=prod", "env=dev"])
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    from query_helpers import sealbox as sealbox_cli

    store = sealbox.init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", labels={"env": "dev"}):
        pass
    store.close()
    result = sealbox_cli("runs", "list", "-s", str(tmp_path / "store"), "--label", "env=prod", "--label", "env=dev",
                         "--json")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: label: 'env' is given twice, as 'prod' and 'dev'; all labels must match and a run has one "
        "value per label, so no run could match"]


def test_a_bound_finer_than_a_microsecond_is_not_truncated_onto_an_earlier_call(tmp_path):
    """Stored times have microseconds; `--since …52.2220861Z` was cut to `…52.222086Z`, so a call
    made at .222086 (before the bound) was listed, and `--until …52.2220861Z` (exclusive) left it out."""
    assert parse_time("2026-12-04T02:35:52.2220861Z") == "2026-12-04T02:35:52.222087Z"
    assert parse_time("2026-12-04T02:35:52.999999999Z") == "2026-12-04T02:35:53.000000Z"
    assert parse_time("2026-12-04T02:35:52.222086000Z") == "2026-12-04T02:35:52.222086Z"
    assert parse_time("2026-12-04T03:35:52.2220861+01:00") == "2026-12-04T02:35:52.222087Z"
    with pytest.raises(ConfigError, match="out of range"):
        parse_time("9999-12-31T23:59:59.9999999Z", name="--since")
    store = sealbox.init_store(tmp_path / "s")
    with sealbox.Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("db", "read", {"q": 1}, lambda q: q)
    ts = store.query_calls()[0]["ts"]
    assert len(ts) == 27 and ts.endswith("Z")
    finer = ts[:-1] + "1Z"
    assert store.query_calls(since=finer) == []
    assert [c["ts"] for c in store.query_calls(until=finer)] == [ts]
    assert [c["ts"] for c in store.query_calls(since=ts[:-1] + "0Z")] == [ts]
    store.close()


def test_python_queries_take_one_expression_as_a_string_and_refuse_wrong_types(tmp_path):
    """`store.query_calls(match="arguments.q~SELECT")` was read character by character
    ("match: 'a' is not FIELD~REGEX"), `query_runs(labels="env=prod")` likewise ("label: 'e' …");
    `tool=5` / `server=["db"]` raised TypeError, `error="yes"` / `replays="no"` were taken as true,
    and `get_snapshot(None)` raised AttributeError: bad input is a ConfigError (docs/recording.md)."""
    store = sealbox.init_store(tmp_path / "s")
    rec = sealbox.Recorder(store, policy=sealbox.policies.ALLOW_ALL)
    with rec.run(agent="bot", labels={"env": "prod"}) as run:
        run.call_tool("db", "read", {"q": "SELECT 1"}, lambda q: q)
        run.call_tool("db", "read", {"q": "DELETE"}, lambda q: q)
    assert [c["arguments"] for c in store.query_calls(match="arguments.q~SELECT")] == [{"q": "SELECT 1"}]
    assert [c["arguments"] for c in store.query_calls(match=("arguments.q", "DEL"))] == [{"q": "DELETE"}]
    assert [c["arguments"] for c in store.query_calls(match=("arguments.q~E", "arguments.q~DEL"))] == [{"q": "DELETE"}]
    assert store.query_calls(match=("arguments.q~SELECT", "arguments.q~DEL")) == []
    assert [r["run_id"] for r in store.query_runs(labels="env=prod")] == [run.run_id]
    assert store.query_runs(labels="env=dev") == []
    for call, message in [
        (lambda: store.query_calls(tool=5), "tool: 5 is not a string"),
        (lambda: store.query_calls(server=["db"]), "server: ['db'] is not a string"),
        (lambda: store.query_calls(run_id=1), "run_id: 1 is not a string"),
        (lambda: store.query_calls(agent=b"bot"), "agent: b'bot' is not a string"),
        (lambda: store.query_calls(principal=3), "principal: 3 is not a string"),
        (lambda: store.query_calls(error="yes"), "error: 'yes' is not True, False or None"),
        (lambda: store.query_calls(replays="no"), "replays: 'no' is not True or False"),
        (lambda: store.query_calls(match=5), "match: 5 is not a FIELD~REGEX string, a (field, regex) pair or a list of them"),
        (lambda: store.query_runs(agent=5), "agent: 5 is not a string"),
        (lambda: store.query_runs(snapshot=5), "snapshot: 5 is not a string"),
        (lambda: store.query_runs(labels=5), "labels: 5 is not a dict of KEY: VALUE or a list of 'KEY=VALUE'"),
        (lambda: store.get_snapshot(None), "fingerprint: None is not a string"),
    ]:
        with pytest.raises(ConfigError) as info:
            call()
        assert str(info.value) == message
    store.close()
