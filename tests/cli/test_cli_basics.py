"""The ``sealbox`` command: help texts, init, log, runs, demo."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sealbox.cli.main import COMMANDS, LazyGroup, cli, main
from sealbox.ledger import merkle
from sealbox.ledger.checkpoint import verify_checkpoint

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _walk(command: click.Command, ctx: click.Context, path: str):
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            yield from _walk(command.get_command(ctx, name), ctx, f"{path} {name}")


def test_every_command_has_help_text():
    ctx = click.Context(cli)
    missing = [path for path, cmd in _walk(cli, ctx, "sealbox") if not (cmd.help or "").strip()]
    assert missing == []
    assert isinstance(cli, LazyGroup) and set(COMMANDS) <= set(cli.list_commands(ctx))


@pytest.mark.parametrize("how", ["raise Exit", "ctx.exit", "return"])
@pytest.mark.parametrize("code", [0, 1, 3])
def test_main_honours_every_way_a_command_sets_its_exit_code(monkeypatch, how, code):
    # main() runs click without standalone mode, where Exit(n) comes back as a return value
    import types

    @click.command("probe")
    @click.pass_context
    def probe(ctx: click.Context) -> int | None:
        """A probe."""
        if how == "raise Exit":
            raise click.exceptions.Exit(code)
        if how == "ctx.exit":
            ctx.exit(code)
        return code

    module = types.ModuleType("sealbox_probe_cmd")
    module.probe = probe  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sealbox_probe_cmd", module)
    monkeypatch.setitem(COMMANDS, "probe", ("sealbox_probe_cmd", "probe", "A probe."))
    if code == 0:
        assert main(["probe"]) is None  # success: no SystemExit at all
        return
    with pytest.raises(SystemExit) as exc:
        main(["probe"])
    assert exc.value.code == code


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_init_creates_a_private_key_and_prints_the_verifier_key(tmp_path):
    target = tmp_path / "store"
    proc = run("init", str(target), "--origin", "example.org/sealbox-test")
    assert proc.returncode == 0, proc.stderr
    vkey = (target / "log.vkey").read_text().strip()
    assert vkey.startswith("example.org/sealbox-test+")
    assert f"  {vkey}" in proc.stdout.splitlines()
    assert "somewhere the owner of this store cannot rewrite" in proc.stdout
    assert stat.S_IMODE((target / "log.key").stat().st_mode) == 0o600
    assert run("init", str(target)).returncode != 0  # never overwrites a store


def test_log_key_checkpoint_and_prove(tmp_path):
    target = tmp_path / "store"
    assert run("init", str(target)).returncode == 0
    from sealbox import EventDraft, open_store

    store = open_store(target)
    store.append(EventDraft("note", {"text": "one"}))
    store.append(EventDraft("note", {"text": "two"}))
    store.close()
    key = run("log", "key", "-s", str(target)).stdout.strip()
    note = run("log", "checkpoint", "-s", str(target)).stdout
    cp = verify_checkpoint(note, key)
    assert cp.size == 3
    proof = json.loads(run("log", "prove", "--from-size", "1", "-s", str(target)).stdout)
    assert (proof["size1"], proof["size2"]) == (1, 3)
    reader = open_store(target, readonly=True)
    merkle.verify_consistency(1, 3, [base64.b64decode(h) for h in proof["proof"]], reader.root(1), cp.root)
    reader.close()
    bad = run("log", "prove", "--from-size", "9", "-s", str(target))
    assert bad.returncode != 0 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_demo_records_prints_and_verifies(tmp_path):
    proc = run("demo", "--sample", "--dir", str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr
    assert "Verified: the log is intact. 8 events in 2 runs" in proc.stdout
    assert "tool.call" in proc.stdout and "policy.decision" in proc.stdout
    runs = json.loads(run("runs", "list", "--json", "-s", str(tmp_path / "ws" / "store")).stdout)
    agent_run = next(r for r in runs if r["agent"] == "support-bot")
    assert agent_run["status"] == "ended" and agent_run["events"] == 7
    shown = json.loads(run("runs", "show", agent_run["run_id"], "--json", "-s", str(tmp_path / "ws" / "store")).stdout)["events"]
    assert [r["kind"] for r in shown] == ["run.started", "model.call", "tool.call", "policy.decision",
                                          "tool.result", "state.saved", "run.ended"]
    csv_out = run("runs", "show", agent_run["run_id"], "--csv", "-s", str(tmp_path / "ws" / "store")).stdout
    header, *lines = csv_out.splitlines()
    assert header == "run_seq,step,ts,kind,principal,tool,decision,duration_us,detail"
    # the table's tool, decision and duration columns are in the CSV too (they were left out)
    cells = [line.split(",")[3:8] for line in lines[:5]]
    assert cells[2:4] == [["tool.call", "agent:support-bot", "db/read_query", "", ""],
                          ["policy.decision", "agent:support-bot", "", "allow", ""]]
    assert cells[1] == ["model.call", "agent:support-bot", "", "", str(shown[1]["duration_us"])]


def test_help_answers_without_importing_heavy_modules():
    code = ("import sys; from sealbox.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('cryptography', 'rich', 'sealbox.store') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "HEAVY []" in out


def test_user_mistakes_on_verify_report_and_approvals_are_one_line_errors(tmp_path):
    target = tmp_path / "store"
    assert run("init", str(target)).returncode == 0
    cases = [
        (["verify", "-s", str(target), "--key", ""], "--key is empty"),
        (["verify", "-s", str(target), "--key", str(tmp_path / "missing.vkey")], "no such key file"),
        # it exists: "no such key file: /dev/null" was wrong
        (["verify", "-s", str(target), "--key", "/dev/null"], "--key /dev/null is not a regular file"),
        (["verify", str(tmp_path / "nope.sbx")], "does not exist"),
        (["report", "system", "-s", str(target), "-o", str(tmp_path / "no" / "dir" / "x.html")], "cannot write"),
        (["approvals", "approve", "apr_x", "--reason", " ", "--key-file", str(tmp_path / "k"), "-s", str(target)],
         "--reason must not be empty"),
    ]
    for argv, message in cases:
        proc = run(*argv)
        assert proc.returncode not in (0, 70), (argv, proc.returncode, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (argv, proc.stderr)
    (target / "log.vkey").unlink()
    proc = run("verify", "-s", str(target))
    assert proc.returncode == 2 and "log.vkey is missing" in proc.stderr


def test_verify_key_file_name_that_does_not_exist_says_so(tmp_path):
    """`--key vkey-kept-elsewhere.txt` (the README's own spelling) naming no file was reported as a
    "malformed verifier key": a key file name with no folder and no .vkey suffix was read as a key."""
    target = tmp_path / "store"
    assert run("init", str(target)).returncode == 0
    proc = run("verify", "-s", str(target), "--key", "vkey-kept-elsewhere.txt")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("error: --key vkey-kept-elsewhere.txt: no such key file, and not a verifier key either "
                           "(NAME+KEYID+BASE64, as `sealbox init` and `sealbox log key` print it)\n")
    # a pasted key that is damaged is still reported as a malformed key
    bad = run("verify", "-s", str(target), "--key", "sealbox.local/x+abcd1234+AAAA")
    assert bad.returncode == 2 and "malformed verifier key" in bad.stderr, bad.stderr


def test_gateway_check_looks_at_what_the_config_names(tmp_path):
    """`gateway check` fails, in one line, on what `serve` would trip over: the store, the policy,
    an upstream command, a token variable; .nan and .inf are refused at their line."""
    store = tmp_path / "st"
    assert run("init", str(store)).returncode == 0
    (tmp_path / "bad.yaml").write_text("version: 1\nrules: [{id: x, effect: maybe}]\n")

    def check(body: str) -> subprocess.CompletedProcess:
        (tmp_path / "gw.yaml").write_text(f"version: 1\n{body}\nupstreams:\n  - {{id: t, command: {sys.executable}}}\n")
        return run("gateway", "check", "-c", str(tmp_path / "gw.yaml"), env={"SEALBOX_T_UNSET": ""})

    ok = check(f"store: {store}\npolicy: ALLOW_ALL\ndurability: fast")
    assert ok.returncode == 0 and ok.stdout == (
        f"ok: {tmp_path / 'gw.yaml'}: 1 upstream (t), separator '__', store {store} (durability fast), policy ALLOW_ALL\n")
    cases = {
        f"store: {tmp_path / 'nope'}\npolicy: ALLOW_ALL": f"store: {tmp_path / 'nope'} does not exist",
        f"store: {store}\npolicy: {tmp_path / 'bad.yaml'}": "policy: ",
        f"store: {store}\npolicy: {tmp_path / 'missing.yaml'}": "policy: ",
        f"store: {store}\npolicy: ALLOW_ALL\nlimits: {{call_timeout_s: .nan}}": "gw.yaml:4: limits.call_timeout_s: must be a finite number, not .nan",
        f"store: {store}\npolicy: ALLOW_ALL\nbreaker: {{cooldown_s: .inf}}": "breaker.cooldown_s: must be a finite number, not .inf",
        f"store: {store}\npolicy: ALLOW_ALL\nhttp:\n  tokens:\n    - {{token_env: SEALBOX_T_UNSET, identity: ci}}":
            "environment variable SEALBOX_T_UNSET (token of ci) is unset",
        f"store: {store}\npolicy: ALLOW_ALL\nhttp:\n  tokens:\n    - {{token: aaaaaaaaaaaaaaaaaaaa, identity: a}}\n"
        "    - {token: aaaaaaaaaaaaaaaaaaaa, identity: b}":
            f"error: {tmp_path / 'gw.yaml'}: http.tokens: identities a and b have the same token; give each identity its own\n",
    }
    for body, words in cases.items():
        r = check(body)
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (body, r.stderr)
    for command in ("no-such-cmd-x", str(tmp_path)):
        (tmp_path / "gw.yaml").write_text(f"version: 1\nstore: {store}\npolicy: ALLOW_ALL\nupstreams:\n  - {{id: t, command: {command}}}\n")
        r = run("gateway", "check", "-c", str(tmp_path / "gw.yaml"))
        assert r.returncode == 2 and f"upstream t: command '{command}' is not found or not executable" in r.stderr
    (store / "log.key").unlink()
    r = check(f"store: {store}\npolicy: ALLOW_ALL")
    assert r.returncode == 2 and "log.key is missing" in r.stderr


def test_gateway_check_lists_every_schema_problem_and_hints_at_allow_all(tmp_path):
    store = tmp_path / "st"
    assert run("init", str(store)).returncode == 0
    gw = tmp_path / "gw.yaml"
    gw.write_text(f"version: 1\nstore: {store}\npolicy: ALLOW_ALL\nlimits:\n  call_timeout_s: -5\n"
                  f"  approval_hold_s: 1e999\nupstreams:\n  - {{id: t, command: {sys.executable}}}\n")
    r = run("gateway", "check", "-c", str(gw))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"error: {gw}:5: limits.call_timeout_s: -5 is less than or equal to the minimum of 0; "
                        f"{gw}:6: limits.approval_hold_s: must be a finite number, not .inf\n")

    gw.write_text(f"version: 1\nstore: {store}\npolicy: allow_all\nupstreams:\n  - {{id: t, command: {sys.executable}}}\n")
    hint = "(the built-in allow-all policy is written exactly `policy: ALLOW_ALL`, in capitals; docs/gateway.md)"
    r = run("gateway", "check", "-c", str(gw))
    assert (r.returncode, r.stderr) == (2, f"error: {gw}: policy: {tmp_path / 'allow_all'}: file not found {hint}\n")
    r = subprocess.run([SEALBOX, "gateway", "serve", "-c", str(gw)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    assert (r.returncode, r.stderr) == (2, f"error: {tmp_path / 'allow_all'}: file not found {hint}\n")
    (tmp_path / "missing.yaml").unlink(missing_ok=True)
    gw.write_text(f"version: 1\nstore: {store}\npolicy: missing.yaml\nupstreams:\n  - {{id: t, command: {sys.executable}}}\n")
    r = run("gateway", "check", "-c", str(gw))
    assert r.stderr == f"error: {gw}: policy: {tmp_path / 'missing.yaml'}: file not found\n"  # no hint there


def test_gateway_serve_on_a_port_in_use_is_one_clear_line(tmp_path):
    import socket

    store = tmp_path / "st"
    assert run("init", str(store)).returncode == 0
    (tmp_path / "gw.yaml").write_text(f"version: 1\nstore: {store}\npolicy: ALLOW_ALL\nupstreams:\n"
                                      f"  - {{id: t, command: {sys.executable}}}\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run("gateway", "serve", "-c", str(tmp_path / "gw.yaml"), "--http", str(port))
    assert r.returncode == 2 and r.stderr == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


@pytest.mark.parametrize("listing", [["runs", "list"], ["calls"]])
def test_json_and_csv_together_is_a_user_mistake(tmp_path, listing):
    store = tmp_path / "st"
    assert run("init", str(store)).returncode == 0
    r = run(*listing, "-s", str(store), "--json", "--csv")
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "error: --json and --csv exclude each other: give one\n")


@pytest.mark.parametrize("args", [["runs", "show", "nope"], ["report", "nope"], ["export", "nope", "-o", "x.zip"]])
def test_an_unknown_run_is_a_user_mistake_everywhere(tmp_path, args):
    store = tmp_path / "st"
    assert run("init", str(store)).returncode == 0
    r = subprocess.run([SEALBOX, *args, "-s", str(store)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "nope" in r.stderr and r.stderr.count("\n") == 1, r


def _sb(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SEALBOX_STORE", "SEALBOX_DEBUG")}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, cwd=cwd, env={**base, **(env or {})})


@pytest.mark.parametrize("args, message", [
    (("init", ""), "error: PATH is empty: give the folder to create the store in"),
    (("init", "s", "--origin", ""), "error: --origin is empty: give the log's origin"),
    (("init", "s", "--origin", "  "), "error: --origin is empty"),
    (("init", "afile"), "error: afile is a file: `sealbox init` creates a folder"),
])
def test_init_refuses_empty_paths_and_origins_and_files(tmp_path, args, message):
    """`init ""` used to create ./.sealbox and `--origin ""` a random origin, silently."""
    (tmp_path / "afile").write_text("x")
    res = _sb(*args, cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing created


def test_gateway_replay_takes_store_or_config_not_both(tmp_path):
    (tmp_path / "gw.yaml").write_text("version: 1\nstore: s\npolicy: ALLOW_ALL\nupstreams: []\n")
    res = _sb("gateway", "replay", "somerun", "--store", str(tmp_path / "s"), "--config", str(tmp_path / "gw.yaml"))
    assert res.returncode == 2 and "give --store or --config, not both" in res.stderr
    # $SEALBOX_STORE is not a --store: with --config the config's store is used (here: none yet)
    res = _sb("gateway", "replay", "somerun", "--config", str(tmp_path / "gw.yaml"), env={"SEALBOX_STORE": "/nonexistent"})
    assert "not both" not in res.stderr and "/nonexistent" not in res.stderr and res.returncode == 2, res.stderr


def test_init_chooses_the_content_mode_and_extra_redaction(tmp_path):
    """docs/content-modes.md says the mode is chosen at `sealbox init`; init had no option for it."""
    import sealbox
    from sealbox.redaction import DEFAULT_KEYS

    res = _sb("init", str(tmp_path / "h"), "--content-mode", "hashes-only")
    assert res.returncode == 0, res.stderr
    assert "  content mode: hashes-only" in res.stdout.splitlines()
    store = sealbox.open_store(tmp_path / "h", readonly=True)
    assert store.content.mode == "hashes-only"
    store.close()
    res = _sb("init", str(tmp_path / "r"), "--redact-key", "ssn", "--redact-path", "arguments.user.dob",
              "--redact-pattern", r"\bEMP-[0-9]{6}\b")
    assert res.returncode == 0, res.stderr
    store = sealbox.open_store(tmp_path / "r")
    assert store.content.mode == "redacted" and store.content.keys == (*DEFAULT_KEYS, "ssn")
    assert store.content.paths == ("arguments.user.dob",) and store.content.patterns[-1] == r"\bEMP-[0-9]{6}\b"
    with sealbox.Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="x") as run:
        run.call_tool("hr", "lookup", {"ssn": "123-45-6789", "user": {"dob": "1990-01-01"}, "q": "EMP-123456"},
                      lambda **_: "ok")
    store.close()
    data = b"".join(p.read_bytes() for p in (tmp_path / "r").iterdir() if p.is_file())
    assert b"123-45-6789" not in data and b"1990-01-01" not in data and b"EMP-123456" not in data
    for args, words in ((("--content-mode", "secret"), "Invalid value for '--content-mode'"),
                        (("--redact-pattern", "(unclosed"), "is not a valid regular expression"),
                        # re.compile raises OverflowError / RecursionError for these, not re.error (was exit 70)
                        (("--redact-pattern", "a{99999999999}"), "error: --redact-pattern: redaction pattern "
                         "'a{99999999999}' is not a valid regular expression: a number in it is too large "
                         "(the repetition number is too large)\n"),
                        (("--redact-pattern", "(" * 500 + ")" * 500), "is not a valid regular expression: it is "
                         "nested too deeply\n"),
                        # a pattern matching "" put a marker between the characters of every string and key
                        (("--redact-pattern", "x*"), "error: --redact-pattern: redaction pattern 'x*' can match "
                         "the empty string (its empty matches would put markers into strings that hold no secret, "
                         "dict keys included); make every match at least one character long\n"),
                        (("--redact-pattern", r"\b"), "redaction pattern '\\\\b' can match the empty string"),
                        (("--redact-pattern", "(?=a)"), "redaction pattern '(?=a)' can match the empty string"),
                        (("--redact-pattern", "^"), "redaction pattern '^' can match the empty string"),
                        (("--content-mode", "full", "--redact-key", "x"), "apply to --content-mode redacted"),
                        (("--redact-key", ""), "--redact-key is empty"),
                        # a path that names no content field, or has an empty segment, would redact nothing
                        (("--redact-path", "user.ssn"), "--redact-path: redaction path 'user.ssn' starts with no "
                         "content field: a path starts with one of about, arguments, detail, inputs, request, "
                         "response, result, state (e.g. arguments.user.ssn)"),
                        (("--redact-path", "arguments..ssn"), "redaction path 'arguments..ssn' has an empty segment"),
                        (("--redact-path", " arguments.ssn"), "starts with no content field")):
        res = _sb("init", str(tmp_path / "bad"), *args)
        assert res.returncode == 2 and words in res.stderr and not (tmp_path / "bad").exists(), res.stderr
        assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("error: "), res.stderr


def test_runs_show_says_no_rule_for_a_decision_without_one(tmp_path):
    """A limit or the breaker decides without a rule: `runs show` printed 'deny by rule None'."""
    import sealbox
    from sealbox.policy import Policy

    store = sealbox.init_store(tmp_path / "s")
    policy = Policy.from_text("version: 1\nlimits: {max_tool_calls_per_run: 0}\nrules: [{id: a, effect: allow}]\n")
    with pytest.raises(sealbox.ToolDenied):
        with sealbox.Recorder(store, policy=policy).run(agent="a") as run:
            run.call_tool("x", "y", {}, lambda: 1)
    store.close()
    res = _sb("runs", "show", run.run_id, "-s", str(tmp_path / "s"), "--json")
    details = {r["kind"]: r["detail"] for r in json.loads(res.stdout)["events"]}
    assert details["policy.decision"] == "deny, no rule (limit_exceeded)"


@pytest.mark.parametrize("argv, usage", [([], "Usage: sealbox [OPTIONS] COMMAND [ARGS]..."),
                                         (["runs"], "Usage: sealbox runs [OPTIONS] COMMAND [ARGS]...")])
def test_a_group_without_a_command_prints_its_help_not_an_error(argv, usage):
    # Regression (input: `sealbox` or `sealbox runs` alone, the first thing a new user types): the
    # help came out as "error: Usage: sealbox …", an error that was not one
    proc = subprocess.run([SEALBOX, *argv], capture_output=True, text=True)
    shown = proc.stderr or proc.stdout  # click 8.2+ writes it on stderr, 8.1 on stdout
    assert shown.splitlines()[0] == usage and "Commands:" in shown
    assert "error" not in shown.splitlines()[0]
    assert proc.returncode in (0, 2)  # click 8.1 exits 0, click 8.2+ 2 (its own choice, kept)


def test_verify_canonical_with_a_bundle_is_refused_in_one_line(tmp_path):
    """--canonical was silently ignored for a bundle (the check it asks for was never made)."""
    import sealbox
    from sealbox import EventDraft

    store_dir = tmp_path / "s"
    store = sealbox.init_store(store_dir)
    pol = {"name": "x", "fingerprint": "sha256:" + "0" * 64}
    store.append(EventDraft(kind="run.started", payload={"agent": "a", "labels": {}, "parent_run_id": None,
                                                         "policy": pol, "snapshot": None},
                            run_id="run-1", principal="agent:a"))
    store.append(EventDraft(kind="run.ended", payload={"status": "ok"}, run_id="run-1", principal="agent:a"))
    store.close()
    bundle = tmp_path / "run.sbx"
    res = subprocess.run([SEALBOX, "export", "run-1", "-s", str(store_dir), "-o", str(bundle)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([SEALBOX, "verify", "--canonical", str(bundle)], capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: --canonical applies to a store")
    # without it the bundle verifies; with it the store does
    assert subprocess.run([SEALBOX, "verify", str(bundle), "--key", str(store_dir / "log.vkey")],
                          capture_output=True).returncode == 0
    assert subprocess.run([SEALBOX, "verify", "--canonical", str(store_dir)], capture_output=True).returncode == 0


def test_runs_show_names_the_label_of_each_saved_state(tmp_path):
    """`runs show` printed an empty detail for state.saved, so a LangGraph graph's "interrupted"
    state could not be told from its "final" one without --json."""
    from sealbox import init_store
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    store = init_store(tmp_path / "store")
    with Recorder(store, policy=ALLOW_ALL).run(agent="graph") as r:
        r.save_state({"messages": []}, label="interrupted")
        r.save_state({"messages": ["done"]}, label="final")
        r.save_state({"n": 1})
    store.close()
    out = run("runs", "show", r.run_id, "--csv", "-s", str(tmp_path / "store"))
    assert out.returncode == 0, out.stderr
    saved = [line.split(",") for line in out.stdout.splitlines() if ",state.saved," in line]
    assert [(cells[1], cells[-1]) for cells in saved] == [("2", "label interrupted"), ("3", "label final"), ("4", "")]


def test_the_command_list_names_every_output_of_export_and_every_gateway_subcommand():
    """`sealbox --help` summarised export as "a bundle verifiable offline, or Parquet" (not --otlp)
    and the gateway as "serve, check config, re-approve tools" (not `gateway replay`, nor later `gateway pins`)."""
    out = CliRunner().invoke(cli, ["--help"], terminal_width=400).output
    lines = {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line.startswith("  ")}
    assert lines["export"] == "Export whole runs: a bundle verifiable offline, Parquet, or OTLP traces and logs."
    assert lines["gateway"] == "The MCP gateway: serve, replay a recorded session, check config, list pins, re-approve or revoke tools."
    ctx = click.Context(cli)
    gateway = cli.get_command(ctx, "gateway")
    assert set(gateway.list_commands(ctx)) == {"serve", "replay", "check", "reapprove", "revoke", "pins"}
    assert {o for p in cli.get_command(ctx, "export").params for o in p.opts} >= {"-o", "--parquet", "--otlp"}


def test_verify_of_a_bundle_with_store_given_says_store_is_not_used(tmp_path):
    """`sealbox verify case.sbx -s STORE` ignored -s without a word and answered NO TRUSTED KEY
    (exit 3): the user meant "check it against that store's key". It is now one error line naming
    the option to use; SEALBOX_STORE in the environment (set by the demo's instructions) is no error."""
    import sealbox
    from sealbox.recorder import Recorder

    target = tmp_path / "store"
    store = sealbox.init_store(target)
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as rec:
        rec.note("hello")
    store.close()
    bundle = tmp_path / "case.sbx"
    assert run("export", rec.run_id, "-o", str(bundle), "-s", str(target)).returncode == 0
    proc = run("verify", str(bundle), "-s", str(target))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: -s/--store is not used for a bundle file: check {bundle} against that store's key "
                           f"with --key {target / 'log.vkey'}\n")
    assert run("verify", str(bundle), "--key", str(target / "log.vkey")).returncode == 0
    assert run("verify", str(bundle), env={"SEALBOX_STORE": str(target)}).returncode == 3


def test_verify_of_a_bundle_with_store_and_a_key_given_verifies_it(tmp_path):
    """-s with a bundle is an error only where it hid what was missing (no key given: NO TRUSTED KEY).
    With --key (or --trust-bundle-key) given as well, the bundle is checked against that key as before
    d064086: a script passing `-s STORE` to every command got exit 2 for a bundle it had verified."""
    import sealbox
    from sealbox.recorder import Recorder

    target = tmp_path / "store"
    store = sealbox.init_store(target)
    with Recorder(store, policy=sealbox.policies.ALLOW_ALL).run(agent="bot") as rec:
        rec.note("hello")
    store.close()
    bundle = tmp_path / "case.sbx"
    assert run("export", rec.run_id, "-o", str(bundle), "-s", str(target)).returncode == 0
    alone = run("verify", str(bundle), "--key", str(target / "log.vkey"))
    both = run("verify", str(bundle), "-s", str(target), "--key", str(target / "log.vkey"))
    assert (both.returncode, both.stderr) == (0, "") and both.stdout.startswith("Verified: the bundle is intact. 3 events in 1 run")
    assert both.stdout.split("took")[0] == alone.stdout.split("took")[0]
    trusting = run("verify", str(bundle), "-s", str(target), "--trust-bundle-key")
    assert (trusting.returncode, trusting.stderr) == (0, ""), trusting.stderr


def test_a_missing_key_file_says_where_the_log_key_is(tmp_path):
    """README's cheat sheet, typed where the store is ./.sealbox (as its `export SEALBOX_STORE=./.sealbox`
    has it): `--key log.vkey` names no file there, and the error was only "no such key file: log.vkey",
    with no word that the store keeps the key as .sealbox/log.vkey or that `sealbox log key` prints it."""
    target = tmp_path / ".sealbox"
    assert run("init", str(target)).returncode == 0
    cp = run("log", "checkpoint", "-s", str(target))
    (tmp_path / "old.txt").write_text(cp.stdout)
    proof = run("log", "prove", "-s", str(target), "--from-size", "1")
    (tmp_path / "proof.json").write_text(proof.stdout)
    message = ("error: no such key file: log.vkey (the log's verifier key: a store keeps it as log.vkey in its "
               "folder, e.g. .sealbox/log.vkey; `sealbox log key > log.vkey` writes a copy)\n")
    for argv in (["log", "verify-consistency", "--key", "log.vkey", "old.txt", "old.txt", "proof.json"],
                 ["verify", "-s", ".sealbox", "--key", "log.vkey"]):
        proc = subprocess.run([SEALBOX, *argv], capture_output=True, text=True, cwd=tmp_path)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message), argv


@pytest.mark.parametrize("command", [("gateway", "serve", "-c", "gw.yaml"), ("gateway", "replay", "RUN")])
@pytest.mark.parametrize("port", ["abc", "70000", "-1"])
def test_an_http_port_that_is_not_one_is_said_so(command, port):
    # was: "error: Invalid value for '--http': 'abc' is not a valid integer range." (and "70000 is not in the
    # range 0<=x<=65535."), which does not say what to give
    res = run(*command, "--http", port)
    assert (res.returncode, res.stdout, res.stderr) == (
        2, "", f"error: Invalid value for '--http': {port!r} is not a port number: give 1–65535 (or 0 for a free port)\n")
