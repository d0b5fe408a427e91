"""What-if (a new policy, a snapshot value) over recorded runs, and the ``replay`` / ``whatif`` commands."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import replay_agents as ra  # noqa: E402

import sealbox  # noqa: E402
from sealbox.cli.main import cli  # noqa: E402
from sealbox.policy import Policy  # noqa: E402
from sealbox.recorder import Recorder  # noqa: E402
from sealbox.replay.whatif import whatif_policy, whatif_snapshot  # noqa: E402
from sealbox.snapshot import Snapshot  # noqa: E402

NEW_POLICY = """
version: 1
name: no-clock
rules:
  - id: no-clock
    match: {server: local, tool: get_time}
    effect: deny
  - id: ask-for-lima
    match: {server: local, tool: get_weather}
    when: 'call.arguments.city == "Lima"'
    effect: require_approval
    approval: {groups: [ops]}
  - id: rest
    effect: allow
"""


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def snapshot(version: str) -> Snapshot:
    return Snapshot(model={"provider": "openai", "name": "gpt-4o", "version": version})


def test_whatif_policy_lists_the_calls_whose_decision_would_change_with_the_rule(store):
    run_id = asyncio.run(ra.record(store, "plain"))

    report = whatif_policy(store, Policy.from_text(NEW_POLICY), [run_id])

    assert report.evaluated == 3 and report.not_re_evaluable == ()
    assert [(c.step, c.tool, c.before, c.after, c.rule) for c in report.changed] == [
        ("2.2", "get_time", "allow", "deny", "no-clock"),
        ("2.3", "get_weather", "allow", "require_approval", "ask-for-lima"),
    ]
    deny_both = NEW_POLICY.replace("effect: require_approval\n    approval: {groups: [ops]}", "effect: deny")
    back = whatif_policy(store, sealbox.policies.ALLOW_ALL, [asyncio.run(ra.record(
        store, "plain", policy=Policy.from_text(deny_both)))])
    assert [(c.step, c.before, c.after, c.rule_before) for c in back.changed] == [
        ("2.2", "deny", "allow", "no-clock"), ("2.3", "deny", "allow", "ask-for-lima")]


def test_whatif_policy_lists_decisions_on_redacted_content_as_not_re_evaluable(store):
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="vault") as run:
        run.call_tool("vault", "login", {"password": "hunter2hunter2"}, lambda password: "ok")
        run.call_tool("local", "get_time", {"city": "Oslo"}, lambda city: "12:00")

    report = whatif_policy(store, Policy.from_text(NEW_POLICY), [run.run_id])

    assert [(n.step, n.tool) for n in report.not_re_evaluable] == [("2", "login")]
    assert "redacted" in report.not_re_evaluable[0].why
    assert [(c.step, c.after) for c in report.changed] == [("3", "deny")]


def test_whatif_policy_says_an_imported_decision_was_imported(store, tmp_path):
    # An imported call's decision carries no inputs (no Sealbox policy read any): it was listed as
    # "the decision's inputs are not in the log", as if they had been lost or erased, instead of
    # saying it was imported (docs/replay.md: decisions no Sealbox policy made, each with its own reason).
    from sealbox.interop.importers import import_file

    msgs = [{"role": "user", "content": "time in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "12:00"}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(msgs), encoding="utf-8")
    [run_id] = import_file(store, path).runs

    report = whatif_policy(store, Policy.from_text(NEW_POLICY), [run_id])

    assert report.evaluated == 0 and report.changed == ()
    assert [(n.step, n.tool, n.why) for n in report.not_re_evaluable] == [
        ("2.1", "get_time", "the decision was imported from another system's record, not made by a Sealbox policy")]


def test_whatif_snapshot_finds_the_runs_that_ran_with_that_value(store):
    old = asyncio.run(ra.record(store, "plain", snapshot=snapshot("2024-05-13")))
    asyncio.run(ra.record(store, "plain", snapshot=snapshot("2024-08-06")))
    asyncio.run(ra.record(store, "plain"))

    assert [r["run_id"] for r in whatif_snapshot(store, "model.version", "2024-05-13")] == [old]
    assert whatif_snapshot(store, "model.version", "1999-01-01") == []
    assert len(whatif_snapshot(store, "model.name", "gpt-4o")) == 2


def test_snapshot_paths_keep_dotted_keys_apart_and_whatif_reads_them(store):
    """`extra` {"a.b": 1} against {"a": {"b": 2}} used to give `extra.a.b removed` and `extra.a added`,
    which read as one field; whatif could not find `extra.a.b=1`, nor a big integer (stored $bigint)."""
    from sealbox.snapshot import diff_snapshots, split_path

    dotted = Snapshot(model={"name": "m", "parameters": {"big": 10**30}}, extra={"a.b": 1, "": 0, "q\"x": 2},
                      knowledge=[])
    nested = Snapshot(model={"name": "m"}, extra={"a": {"b": 2}})
    paths = [(d.path, d.change) for d in diff_snapshots(dotted.to_dict(), nested.to_dict())]
    assert paths == [("extra.a", "added"), ('extra[""]', "removed"), ('extra["a.b"]', "removed"),
                     ('extra["q\\"x"]', "removed"), ("model.parameters", "removed")]
    assert split_path('extra["a.b"].c[2]') == ["extra", "a.b", "c", 2] and split_path("a..b") is None
    assert split_path('x["unterminated') is None and split_path("tools.fs/read_file.version") == [
        "tools", "fs/read_file", "version"]
    run_dotted = asyncio.run(ra.record(store, "plain", snapshot=dotted))
    run_nested = asyncio.run(ra.record(store, "plain", snapshot=nested))
    assert [r["run_id"] for r in whatif_snapshot(store, 'extra["a.b"]', "1")] == [run_dotted]
    assert [r["run_id"] for r in whatif_snapshot(store, "extra.a.b", "2")] == [run_nested]
    assert [r["run_id"] for r in whatif_snapshot(store, "model.parameters.big", str(10**30))] == [run_dotted]
    assert whatif_snapshot(store, 'extra["a.b"]', "true") == []


# ----------------------------------------------------------------------------- CLI


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_replay_reproduces_and_prints_json(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)  # so that --agent replay_agents:plain imports as it would from a project
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert (doc["reproduced"], doc["steps_compared"], doc["replay_of"], doc["divergence"]) == (True, 5, run_id, None)

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain_changed")
    assert out.exit_code == 1
    assert "NOT reproduced: diverged at step 2.2 (mismatch); 2 step(s) matched before it; replay run " in out.output
    assert "diverged at step 2.2: mismatch" in out.output and "~ utc_offset: 1 -> 2" in out.output

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain_changed", "--json")
    doc = json.loads(out.output)
    assert doc["divergence"]["step"] == "2.2"
    assert doc["divergence"]["diff"] == [{"path": "utc_offset", "change": "changed", "a": 1, "b": 2}]


def test_cli_replay_live_tools_without_side_effects_is_one_line_error(tmp_path, monkeypatch):
    from sealbox.cli.main import main

    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    with pytest.raises(SystemExit) as exc:
        main(["replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--tools", "live"])
    assert exc.value.code == 2


def test_cli_replay_side_effects_without_live_tools_is_one_line_error(tmp_path, monkeypatch, capsys):
    # --side-effects consents to running tools for real, which only --tools live does: it was accepted
    # silently with tools from the record (nothing ran), hiding a forgotten --tools live
    from sealbox.cli.main import main

    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    runs = len(store.runs())
    store.close()
    for extra in ([], ["--tools", "record"]):
        with pytest.raises(SystemExit) as exc:
            main(["replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--side-effects",
                  *extra])
        assert (exc.value.code, *capsys.readouterr()) == (
            2, "", "error: --side-effects applies with --tools live (it consents to running tools for real); with "
                   "tools from the record no tool runs: drop it, or add --tools live\n")
    store = sealbox.open_store(tmp_path / "s")
    assert len(store.runs()) == runs  # no replay run was recorded
    store.close()


def test_cli_replay_policy_with_tools_from_the_record_is_what_help_and_docs_say(tmp_path, monkeypatch):
    # --policy's help said "Policy deciding live tool calls", silent on tools from the record, where it decides
    # nothing (the recorded decisions are served) but names the replay run's policy and prices its model calls
    import re

    from sealbox.policies import ALLOW_ALL

    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    policy = tmp_path / "p.yaml"
    policy.write_text(NEW_POLICY + "prices:\n  '*': {input: 1000000, output: 1000000}\n")
    help_text = " ".join(CliRunner().invoke(cli, ["replay", "--help"]).output.split())
    assert ("--policy FILE The replay run's policy. With --tools live it decides each tool call (required then); "
            "with tools from the record it decides nothing (the recorded decisions are served): it is only named as "
            "the replay run's policy and its prices price the model calls (usage cost).") in help_text
    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--policy", str(policy),
                 "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["reproduced"] is True
    store = sealbox.open_store(tmp_path / "s")
    new_run = json.loads(out.output)["new_run_id"]
    events = {e.kind: store.resolve(e.payload) for e in store.read_run(new_run)
              if e.kind in ("run.started", "run.ended")}
    decisions = [store.resolve(e.payload) for e in store.read_run(new_run) if e.kind == "policy.decision"]
    recorded = [store.resolve(e.payload) for e in store.read_run(run_id) if e.kind == "policy.decision"]
    assert events["run.started"]["policy"] == {"fingerprint": Policy.load(policy).fingerprint,
                                               "name": "no-clock"}
    # the recorded decisions (ALLOW_ALL's allow, get_time too), not the no-clock rule's deny
    assert [(d["tool"], d["effect"], d["rule"], d["policy_fingerprint"]) for d in decisions] == [
        (d["tool"], d["effect"], d["rule"], d["policy_fingerprint"]) for d in recorded] == [
        ("get_weather", "allow", "allow-all", ALLOW_ALL.fingerprint), ("get_time", "allow", "allow-all", ALLOW_ALL.fingerprint),
        ("get_weather", "allow", "allow-all", ALLOW_ALL.fingerprint)]
    assert events["run.ended"]["usage"] == {"cost": 182, "input_tokens": 140, "output_tokens": 42}
    store.close()
    docs = " ".join((HERE.parents[1] / "docs" / "replay.md").read_text().split())
    assert re.search(r"With tools from the record it decides nothing: each call gets its recorded decision", docs)


def test_cli_replay_snapshot_that_is_a_device_is_one_line_error(tmp_path, monkeypatch, capsys):
    # `--snapshot /dev/zero` read until memory ran out (MemoryError, "internal error", exit 70); a device is
    # refused before it is read (/dev/null shows it safely: it read as empty JSON).
    from sealbox.cli.main import main

    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    for dev in ("/dev/null", "/dev/zero"):
        with pytest.raises(SystemExit) as exc:
            main(["replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--snapshot", dev])
        assert (exc.value.code, capsys.readouterr().err) == (
            2, f"error: cannot read the snapshot {dev}: it is a device, not a file\n")


def test_cli_whatif_policy_and_snapshot(tmp_path):
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain", snapshot=snapshot("2024-05-13")))
    store.close()
    policy = tmp_path / "new.yaml"
    policy.write_text(NEW_POLICY)

    out = invoke("whatif", "-s", str(tmp_path / "s"), "--policy", str(policy), run_id, "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [(c["step"], c["change"], c["rule"]) for c in doc["changed"]] == [
        ("2.2", "allow -> deny", "no-clock"), ("2.3", "allow -> require_approval", "ask-for-lima")]

    out = invoke("whatif", "-s", str(tmp_path / "s"), "--policy", str(policy), "--since", "30d", "--json")
    assert json.loads(out.output)["runs"] == [run_id]

    out = invoke("whatif", "-s", str(tmp_path / "s"), "--snapshot", "model.version=2024-05-13", "--json")
    assert [r["run_id"] for r in json.loads(out.output)] == [run_id]
    out = invoke("whatif", "-s", str(tmp_path / "s"), "--policy", str(policy), run_id)
    assert "2 would change" in out.output and "no-clock" in out.output


def test_cli_replay_and_runs_show_report_the_agents_exception(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:broken")
    assert out.exit_code == 1
    lines = out.output.splitlines()
    replay_run = lines[0].rsplit(" ", 1)[1]
    assert lines[0] == (f"NOT reproduced: diverged at step 2 (missing); 0 step(s) matched before it; "
                        f"replay run {replay_run}")
    assert replay_run != run_id
    assert lines[1] == "the agent raised RuntimeError: my agent is broken"
    assert lines[2] == "diverged at step 2: missing"

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:broken", "--json")
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert doc["agent_error"] == {"type": "RuntimeError", "message": "my agent is broken"}
    assert doc["divergence"]["kind"] == "missing"

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--json")
    assert json.loads(out.output)["agent_error"] is None

    # the replay run's run.ended holds the error; `runs show` prints it
    store = sealbox.open_store(tmp_path / "s", readonly=True)
    try:
        [ended] = [e for e in store.read_run(replay_run) if e.kind == "run.ended"]
    finally:
        store.close()
    assert ended.payload["error"] == {"type": "RuntimeError", "message": "my agent is broken"}
    out = invoke("runs", "show", replay_run, "-s", str(tmp_path / "s"))
    assert out.exit_code == 0, out.output
    assert "error    RuntimeError: my agent is broken" in out.output.splitlines()
    out = invoke("runs", "show", replay_run, "-s", str(tmp_path / "s"), "--json")
    [row] = [r for r in json.loads(out.output)["events"] if r["kind"] == "run.ended"]
    assert row["detail"] == "error RuntimeError: my agent is broken"


def test_replay_records_an_agent_that_exits_or_raises_an_unprintable_exception(tmp_path, monkeypatch):
    """SystemExit left the replay run recorded 'ended ok'; an exception whose __str__ raises made
    replay fail with an internal error and the run 'ended ok' too."""
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    from sealbox.replay import Replayer

    run_id = asyncio.run(ra.record(store, "plain"))
    replayer = Replayer(store)
    with pytest.raises(SystemExit):
        replayer.replay(run_id, ra.exits)
    result = replayer.replay(run_id, ra.unprintable)
    assert result.agent_error == {"type": "_Unprintable", "message": "<_Unprintable.__str__ raised ValueError>"}
    replays = [r["run_id"] for r in store.runs() if r["replay_of"] == run_id]
    ended = {}
    for rid in replays:
        [e] = [e for e in store.read_run(rid) if e.kind == "run.ended"]
        ended[e.payload.get("error", {}).get("type")] = e.payload["status"]
    store.close()
    assert ended == {"SystemExit": "error", "_Unprintable": "error"}


def test_cli_replay_of_an_agent_that_exits_or_says_too_much(tmp_path, monkeypatch):
    """sys.exit(3) in the agent used to end `sealbox replay` with status 3 and no word; a 5,000
    character message was printed whole."""
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:exits")
    assert out.exit_code == 1
    store = sealbox.open_store(tmp_path / "s", readonly=True)
    try:
        [replayed] = [r["run_id"] for r in store.runs() if r["replay_of"] == run_id]
        [ended] = [e.payload for e in store.read_run(replayed) if e.kind == "run.ended"]
    finally:
        store.close()
    assert out.output == (f"NOT reproduced: the agent exited (SystemExit(3)) during the replay; replay run {replayed} "
                          "was recorded as ended error\n")
    assert ended["status"] == "error" and ended["error"]["type"] == "SystemExit"
    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:exits", "--json")
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert doc["reproduced"] is False and doc["agent_error"] == {"type": "SystemExit", "message": "3"}
    assert doc["replay_run_id"] not in (None, replayed, run_id)

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:verbose")
    assert out.exit_code == 1
    line = out.output.splitlines()[1]
    assert line == "the agent raised RuntimeError: " + "x" * 500 + "… (4,500 more characters; --json has it whole)"
    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:verbose", "--json")
    assert json.loads(out.output)["agent_error"]["message"] == "x" * 5000


@pytest.mark.parametrize("args", [("replay", "system", "--agent", "replay_agents:plain"),
                                  ("whatif", "--policy", "p.yaml", "system")])
def test_the_system_run_is_not_replayed_or_evaluated(tmp_path, monkeypatch, args):
    """`sealbox replay system` used to record a fake replay of the system run (agent sealbox)."""
    monkeypatch.chdir(HERE)
    (tmp_path / "p.yaml").write_text("version: 1\nrules: [{id: a, effect: allow}]\n")
    args = tuple(str(tmp_path / a) if a == "p.yaml" else a for a in args)
    store = sealbox.init_store(tmp_path / "s")
    before = store.size()
    store.close()
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", *args, "-s", str(tmp_path / "s")],
                         capture_output=True, text=True, cwd=HERE)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.startswith("error: 'system' is the store's system run") and out.stderr.count("\n") == 1
    store = sealbox.open_store(tmp_path / "s", readonly=True)
    try:
        assert store.size() == before and [r["run_id"] for r in store.runs()] == ["system"]
    finally:
        store.close()


@pytest.mark.parametrize("source, words", [
    ("def agent(:\n", "cannot import 'user_agent_mod': it raised SyntaxError: invalid syntax (user_agent_mod.py, line 1)"),
    ("x = 1\nraise RuntimeError('no config')\n",
     "cannot import 'user_agent_mod': it raised RuntimeError: no config ({path}, line 2)"),
    # a script whose top level ends the process (sys.exit, or argparse on the replay's own argv): the
    # replay ended with its exit status and not one line saying why (exit 3, nothing printed)
    ("import sys\nsys.exit(3)\n",
     "cannot import 'user_agent_mod': its top-level code called sys.exit(3) ({path}, line 2); "
     "keep a script's main code under `if __name__ == \"__main__\":`"),
])
def test_cli_replay_agent_module_that_fails_to_import_is_one_line_error(tmp_path, monkeypatch, source, words):
    # Regression (input: --agent naming a module with a syntax error, or whose top level raises): it was
    # 'internal error: SyntaxError' (exit 70), as if Sealbox had failed; the file is the user's
    import subprocess

    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    (tmp_path / "user_agent_mod.py").write_text(source)
    proc = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "replay", "-s", str(tmp_path / "s"), run_id,
                           "--agent", "user_agent_mod:agent"], capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    expected = "error: Invalid value for --agent: " + words.format(path=tmp_path / "user_agent_mod.py") + "\n"
    assert proc.stderr == expected
    reader = sealbox.open_store(tmp_path / "s", readonly=True)
    assert [r["run_id"] for r in reader.runs() if r["replay_of"]] == []  # nothing was recorded
    reader.close()


def test_cli_whatif_refuses_options_it_would_ignore(tmp_path, capsys):
    # Regression (input: RUN with --since, RUN with --snapshot): --since was ignored when runs were
    # named, and named runs were ignored by --snapshot, each answered as if the option were not there
    from sealbox.cli.main import main

    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain", snapshot=snapshot("2024-05-13")))
    store.close()
    policy = tmp_path / "new.yaml"
    policy.write_text(NEW_POLICY)
    for args, words in (
            (("--policy", str(policy), run_id, "--since", "2099-01-01"),
             "give RUNs or --since, not both (--since selects every run started since then)"),
            (("--snapshot", "model.version=2024-05-13", run_id),
             "--snapshot looks through every recorded run (or those of --since): it takes no RUN")):
        with pytest.raises(SystemExit) as exc:
            main(["whatif", "-s", str(tmp_path / "s"), *args])
        assert exc.value.code == 2
        assert capsys.readouterr() == ("", f"error: {words}\n")


def test_cli_replay_escapes_control_sequences_of_the_agents_exception(tmp_path, monkeypatch):
    # Regression (input: an agent exception message holding ESC sequences): printed raw to the terminal
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:broken_loudly")
    assert out.exit_code == 1
    assert "\x1b" not in out.output and "\x07" not in out.output
    assert out.output.splitlines()[1] == r"the agent raised RuntimeError: \x1b[2J\x1b]0;pwned\x07my agent is broken"
    doc = json.loads(invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:broken_loudly",
                            "--json").output)
    assert doc["agent_error"]["message"] == "\x1b[2J\x1b]0;pwned\x07my agent is broken"  # --json keeps it


def test_runs_show_prints_a_replay_runs_verdict(tmp_path, monkeypatch):
    """A replay run's status says how the replay ended (ok, cancelled), not whether it reproduced
    the record: `runs show` prints the verdict its run.ended holds."""
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    verdicts = []
    for agent in ("replay_agents:plain", "replay_agents:plain_changed"):
        out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", agent, "--json")
        replay_run = json.loads(out.output)["new_run_id"]
        shown = invoke("runs", "show", replay_run, "-s", str(tmp_path / "s"))
        assert shown.exit_code == 0, shown.output
        verdicts.append([line for line in shown.output.splitlines() if line.startswith("verdict")])
    assert verdicts[0] == ["verdict  reproduced (5 steps compared)"]
    [[changed]] = verdicts[1:]
    assert changed.startswith("verdict  diverged at step 2.2 (mismatch): ") and changed.endswith("(2 steps compared)")
    original = invoke("runs", "show", run_id, "-s", str(tmp_path / "s"))
    assert not [line for line in original.output.splitlines() if line.startswith("verdict")]


def test_whatif_snapshot_leaves_replays_out_and_says_how_many(tmp_path):
    """Each replay of a run is stored with the recorded snapshot: `whatif --snapshot` listed every replay
    as one more run that ran with that model version (3 runs for 1 in production)."""
    from sealbox.replay import Replayer

    store = sealbox.init_store(tmp_path / "s")
    old = asyncio.run(ra.record(store, "plain", snapshot=snapshot("2024-05-13")))
    replays = [Replayer(store).replay(old, ra.plain_agent()).new_run_id for _ in range(2)]
    assert [r["run_id"] for r in whatif_snapshot(store, "model.version", "2024-05-13")] == [old]
    assert [r["run_id"] for r in whatif_snapshot(store, "model.version", "2024-05-13", replays=True)] == [
        replays[1], replays[0], old]
    store.close()

    out = invoke("whatif", "-s", str(tmp_path / "s"), "--snapshot", "model.version=2024-05-13", "--json")
    assert out.exit_code == 0
    assert [r["run_id"] for r in json.loads(out.stdout)] == [old]
    assert out.stderr == ("(2 replay run(s) with model.version=2024-05-13 left out: they re-ran recorded runs "
                          "from the record)\n")


def test_calls_leaves_the_calls_of_replay_runs_out_unless_asked(tmp_path):
    """After a replay, `sealbox calls --tool get_time` listed each served call as one more call that ran
    (outcome ok, no approver): three calls to a tool that was called once."""
    from sealbox.replay import Replayer

    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    replays = [Replayer(store).replay(run_id, ra.plain_agent()).new_run_id for _ in range(2)]
    store.close()
    s = str(tmp_path / "s")

    out = invoke("calls", "-s", s, "--tool", "get_time", "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)] == [run_id]
    assert out.stderr == "note: 2 call(s) of replay runs left out (served from the record, or run again for real " \
                         "by a replay with --tools live); --replays lists them\n"
    out = invoke("calls", "-s", s, "--tool", "get_time", "--replays", "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)] == [run_id] + replays and out.stderr == ""
    out = invoke("calls", "-s", s, "--run", replays[0], "--json")  # a replay run named: its calls
    assert [r["tool"] for r in json.loads(out.stdout)] == ["get_weather", "get_time", "get_weather"]
    assert out.stderr == ""


def test_calls_does_not_say_nothing_ran_of_a_live_replays_calls(tmp_path):
    """A replay with live tools (side_effects=True) runs the tool again for real: its call is left out
    like a served one (the record does not tell them apart), but the note no longer says nothing ran."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder
    from sealbox.replay import Replayer

    deleted: list[int] = []

    def agent(run) -> None:
        run.call_tool("db", "delete", {"id": 1}, lambda id: deleted.append(id) or "deleted")

    store = sealbox.init_store(tmp_path / "s")
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent(run)
    live = Replayer(store, policy=ALLOW_ALL).replay(run.run_id, agent, tools="live", side_effects=True)
    store.close()
    assert live.reproduced and deleted == [1, 1]  # the delete ran twice
    out = invoke("calls", "-s", str(tmp_path / "s"), "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)] == [run.run_id]
    assert out.stderr == ("note: 1 call(s) of replay runs left out (served from the record, or run again for real "
                          "by a replay with --tools live); --replays lists them\n")
    out = invoke("calls", "-s", str(tmp_path / "s"), "--replays", "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)] == [run.run_id, live.new_run_id]


def test_calls_with_a_limit_still_says_how_many_replay_calls_it_left_out(tmp_path):
    """`calls --limit 1` after two replays listed the recorded call with no note: the count of left-out
    calls was (calls with the limit) - (calls listed), 1 - 1, though the two newest calls were the replays'."""
    from sealbox.replay import Replayer

    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    for _ in range(2):
        Replayer(store).replay(run_id, ra.plain_agent())
    store.close()
    out = invoke("calls", "-s", str(tmp_path / "s"), "--tool", "get_time", "--limit", "1", "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)] == [run_id]
    assert out.stderr == ("note: 1 call(s) of replay runs left out (served from the record, or run again for real "
                          "by a replay with --tools live); --replays lists them\n")
    out = invoke("calls", "-s", str(tmp_path / "s"), "--tool", "get_time", "--limit", "3", "--json")
    assert [r["run_id"] for r in json.loads(out.stdout)] == [run_id]
    assert out.stderr.startswith("note: 2 call(s) of replay runs left out")


def test_runs_list_says_which_runs_are_replays(tmp_path):
    """`runs list` (table and CSV) showed a replay as one more run of the agent: nothing told them apart."""
    import csv
    import io

    from sealbox.replay import Replayer

    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    replay = Replayer(store).replay(run_id, ra.plain_agent()).new_run_id
    store.close()
    out = invoke("runs", "list", "-s", str(tmp_path / "s"), "--agent", "plain", "--csv")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["run_id"], r["replay_of"]) for r in rows] == [(replay, run_id), (run_id, "")]
    assert list(rows[0])[7:9] == ["parent_run_id", "replay_of"]
    out = invoke("runs", "list", "-s", str(tmp_path / "s"), "--agent", "plain")
    assert "replay of" in out.stdout
    # not on a terminal: ids whole; the replay's row names the run it replayed in "replay of"
    (line,) = [ln for ln in out.stdout.splitlines() if replay in ln]
    assert line.split("│")[7].strip() == run_id


def test_whatif_of_a_replay_run_points_to_the_run_it_replayed(tmp_path, monkeypatch):
    """A replay serves each recorded decision (``replayed``: the original run and step), it makes
    none: what-if of a replay run said "the decision's inputs are not in the log", as if they had
    been lost, where it should send the investigator to the original run (the incident drill's
    newest run is its replay)."""
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--json")
    replay_run = json.loads(out.output)["new_run_id"]
    store = sealbox.open_store(tmp_path / "s")
    try:
        report = whatif_policy(store, Policy.from_text(NEW_POLICY), [replay_run])
        original = whatif_policy(store, Policy.from_text(NEW_POLICY), [run_id])
    finally:
        store.close()
    assert report.evaluated == 0 and report.changed == ()
    assert [(n.step, n.tool, n.why) for n in report.not_re_evaluable] == [
        (step, tool, f"the decision was replayed from run {run_id} step {step}, not made again: evaluate that run")
        for step, tool in (("2.1", "get_weather"), ("2.2", "get_time"), ("2.3", "get_weather"))]
    assert original.evaluated == 3 and len(original.changed) == 2


def test_cli_replay_stopped_by_config_drift_names_the_option_that_proceeds(tmp_path, monkeypatch):
    """The CLI's divergence message names `--allow-config-drift` (it named only the Python argument
    `allow_config_drift`, which a command-line user cannot pass)."""
    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    now = tmp_path / "now.json"
    now.write_text('{"model": {"name": "x"}}', encoding="utf-8")

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--snapshot", str(now))
    assert out.exit_code == 1
    assert ("  the configuration differs from the recorded snapshot in 1 field(s): model; replay did not start "
            "(--allow-config-drift, or allow_config_drift=True, to proceed)\n") in out.output

    out = invoke("replay", "-s", str(tmp_path / "s"), run_id, "--agent", "replay_agents:plain", "--snapshot", str(now),
                 "--allow-config-drift")
    assert out.exit_code == 0 and out.output.startswith("reproduced: 5 step(s) matched; replay run ")


@pytest.mark.parametrize("spec, module", [
    ("./user_agent_mod.py:agent", "user_agent_mod"),
    ("user_agent_mod.py:agent", "user_agent_mod"),
    ("agents/user_agent_mod.py:agent", "agents.user_agent_mod"),
])
def test_cli_replay_agent_given_as_a_file_path_names_the_module_to_give(tmp_path, monkeypatch, spec, module):
    # Regression (input: --agent ./user_agent_mod.py:agent, a file path as a user types it): the error was
    # "cannot import './user_agent_mod.py': it raised TypeError: the 'package' argument is required to perform
    # a relative import for './user_agent_mod.py' (…/importlib/__init__.py, line 121)", and
    # 'user_agent_mod.py:agent' ran the module's code before "No module named 'user_agent_mod.py'; …"
    import subprocess

    monkeypatch.chdir(HERE)
    store = sealbox.init_store(tmp_path / "s")
    run_id = asyncio.run(ra.record(store, "plain"))
    store.close()
    (tmp_path / "agents").mkdir()
    for folder in (tmp_path, tmp_path / "agents"):
        (folder / "user_agent_mod.py").write_text("print('module code ran')\ndef agent(run): pass\n")
    proc = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "replay", "-s", str(tmp_path / "s"), run_id,
                           "--agent", spec], capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    path = spec.rpartition(":")[0]
    assert proc.stderr == (f"error: Invalid value for --agent: {spec!r} names a file; give a module, as Python imports "
                           f"it from the current folder: {module}:agent for {path}\n")
