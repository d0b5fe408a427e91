"""Bad input to the ``sealbox`` command, as a user in a hurry gives it: one ``error:`` line on
stderr, a non-zero exit, never a traceback or an "internal error", and a store that a failed
command leaves byte-identical (same files, same event count)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def sb(*args: object, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([SEALBOX, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"}, **kw)


def one_error(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed command (asserting there is exactly one, and no traceback)."""
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def state(store: Path) -> tuple:
    """The store's files (but SQLite's -wal/-shm) by hash, and its event count if it can be read."""
    files = tuple((p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(store.iterdir())
                  if p.is_file() and not p.name.endswith(("-wal", "-shm")))
    try:
        conn = sqlite3.connect(f"file:{store / 'sealbox.db'}?mode=ro", uri=True)
        try:
            count = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        count = str(exc)
    return files, count


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, str]:
    """A store holding the sample run (``sealbox demo --sample``): its folder and the run id."""
    from sealbox.demo_sample import record_sample_run
    from sealbox.store import init_store

    path = tmp_path_factory.mktemp("sweep") / "store"
    store = init_store(path)
    run_id = record_sample_run(store)
    store.close()
    return path, run_id


@pytest.fixture
def copy(sample, tmp_path) -> tuple[Path, str]:
    path, run_id = sample
    target = tmp_path / "store"
    shutil.copytree(path, target)
    return target, run_id


# Every command that opens the store, as a user would type it (RUN is the sample run).
STORE_COMMANDS = [
    ["runs", "list"], ["runs", "show", "RUN"], ["calls"], ["calls", "--json"], ["approvals", "list"],
    ["access", "list"], ["identities", "list"], ["log", "checkpoint"], ["log", "key"],
    ["export", "RUN", "-o", "OUT"], ["report", "RUN", "-o", "OUT.html"],
    ["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "KEY"],
    ["identities", "add", "bob", "--role", "admin", "--key-out", "OUT"],
    ["gateway", "reapprove", "db", "read_query", "--reason", "r", "--key-file", "KEY"], ["gateway", "pins"],
    ["gateway", "revoke", "db", "read_query", "--hash", "sha256:" + "0" * 64, "--reason", "r", "--key-file", "KEY"],
    ["upgrade"],
]


def _argv(cmd: list[str], store: Path, run_id: str, out: Path) -> list[str]:
    named = {"RUN": run_id, "OUT": str(out), "OUT.html": str(out) + ".html", "KEY": str(out) + ".key"}
    return [named.get(a, a) for a in cmd] + ["-s", str(store)]


@pytest.mark.parametrize("table", ["events", "runs", "store_meta", "blobs", "credentials"])
@pytest.mark.parametrize("cmd", STORE_COMMANDS, ids=" ".join)
def test_a_store_missing_a_table_is_one_error_line_and_is_not_written(copy, tmp_path, table, cmd):
    # was: "internal error: OperationalError: no such table: events" (exit 70) for most commands, and
    # with `runs` dropped `access grant` / `identities add` recorded into the damaged store (exit 0)
    store, run_id = copy
    conn = sqlite3.connect(store / "sealbox.db")
    conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    before = state(store)
    proc = sb(*_argv(cmd, store, run_id, tmp_path / "out"))
    assert proc.returncode == 2
    assert one_error(proc) == (f"error: {store / 'sealbox.db'} is damaged: table {table} is missing "
                               "(changed below Sealbox; restore the store from a backup)")
    assert state(store) == before
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("cmd", STORE_COMMANDS + [["approvals", "deny", "apr_x", "--reason", "r"]], ids=" ".join)
def test_a_zero_byte_database_is_not_a_store_and_is_never_migrated(copy, tmp_path, cmd):
    # was: a writer took the empty sealbox.db for a new database and created the schema in it, beside
    # the store's key and checkpoint (`approvals list` then listed nothing, exit 0)
    store, run_id = copy
    (store / "sealbox.db").write_bytes(b"")
    before = state(store)
    argv = _argv(cmd, store, run_id, tmp_path / "out")
    if cmd[:2] == ["approvals", "deny"]:  # a real identity key: the key file is read before the store is opened
        from sealbox.identities import add_identity
        from sealbox.store import init_store

        with init_store(tmp_path / "other") as other:
            add_identity(other, "alice", "admin", [], False, str(tmp_path / "k.key"))
        argv += ["--key-file", str(tmp_path / "k.key")]
    proc = sb(*argv)
    assert proc.returncode == 2
    assert one_error(proc) == f"error: {store / 'sealbox.db'} is not a Sealbox store (an empty database)"
    assert state(store) == before
    assert (store / "sealbox.db").stat().st_size == 0


@pytest.fixture
def locked(copy):
    """The copied store, with another connection holding its write lock (BEGIN IMMEDIATE)."""
    store, run_id = copy
    holder = sqlite3.connect(store / "sealbox.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    yield store, run_id
    holder.execute("ROLLBACK")
    holder.close()


@pytest.mark.parametrize("cmd", [
    ["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "ADMIN"],
    ["access", "grant", "--principal", "p", "--server", "db", "--tool", "y", "--id", "g-2", "--key-file", "ADMIN"],
], ids=" ".join)
def test_a_write_to_a_locked_store_fails_after_the_cli_lock_timeout(copy, tmp_path, cmd):
    # was: the command waited silently for the store's lock_timeout (300 s), looking hung
    import sealbox

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from identity_testkit import grant_key

    store, run_id = copy
    with sealbox.open_store(store) as opened:  # an admin's key: granting is signed
        admin = str(grant_key(opened))
    cmd = [admin if a == "ADMIN" else a for a in cmd]
    holder = sqlite3.connect(store / "sealbox.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        before = state(store)
        started = time.monotonic()
        proc = subprocess.run([SEALBOX, *_argv(cmd, store, run_id, tmp_path / "out")], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "SEALBOX_LOCK_TIMEOUT": "1"})
        assert time.monotonic() - started < 20
        assert proc.returncode == 2
        assert one_error(proc) == (f"error: {store / 'sealbox.db'} stayed busy for too long: another writer holds it "
                                   "(the store's write lock stayed taken past the lock timeout, 1 s: lock_timeout, "
                                   "SEALBOX_LOCK_TIMEOUT=SECONDS for `sealbox` commands)")
        assert state(store) == before
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_reading_a_locked_store_does_not_wait(locked):
    store, run_id = locked
    proc = sb("runs", "show", run_id, "--json", "-s", store)
    assert proc.returncode == 0, proc.stderr
    assert f'"run_id": "{run_id}"' in proc.stdout


@pytest.mark.parametrize("value", ["x", "-1", "inf", "nan"])
def test_a_bad_sealbox_lock_timeout_is_one_error_line(copy, value):
    store, _ = copy
    before = state(store)
    proc = subprocess.run([SEALBOX, "access", "grant", "--principal", "p", "--server", "db", "--tool", "x",
                           "--key-file", str(store) + ".key", "-s", str(store)], capture_output=True, text=True,
                          timeout=60,
                          env={**os.environ, "SEALBOX_LOCK_TIMEOUT": value})
    assert proc.returncode == 2
    assert one_error(proc) == f"error: SEALBOX_LOCK_TIMEOUT must be a number of seconds >= 0, not {value!r}"
    assert state(store) == before


def test_the_cli_lock_timeout_defaults_to_15_seconds(monkeypatch):
    from sealbox.cli.common import cli_lock_timeout

    monkeypatch.delenv("SEALBOX_LOCK_TIMEOUT", raising=False)
    assert cli_lock_timeout() == 15.0
    monkeypatch.setenv("SEALBOX_LOCK_TIMEOUT", "2.5")
    assert cli_lock_timeout() == 2.5


POLICY = "version: 1\nrules:\n  - id: reads-ok\n    match: {tool: read_query}\n    effect: allow\n"


@pytest.mark.parametrize("option, value, message", [
    # was: "internal error: RecursionError: maximum recursion depth exceeded ..." (exit 70)
    ("--args", "[" * 100_000, "error: --args is nested too deeply (arrays or objects hundreds of levels deep)"),
    ("--args", '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
     "error: --args is nested too deeply (arrays or objects hundreds of levels deep)"),
    # was: accepted, though NaN and Infinity are not JSON
    ("--args", '{"a": NaN}', "error: --args is not JSON: NaN is not a JSON value"),
    ("--args", '{"a": -Infinity}', "error: --args is not JSON: -Infinity is not a JSON value"),
    ("--args", "{", "error: --args is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("--args", "[1]", "error: --args must be a JSON object, not a list [1]"),
    ("--principal", "{" + "[" * 100_000, "error: --principal is not JSON: Expecting property name enclosed in double "
                                         "quotes: line 1 column 2 (char 1)"),
    ("--principal", '{"id": "a", "n": Infinity}', "error: --principal is not JSON: Infinity is not a JSON value"),
])
def test_policy_explain_bad_json_is_one_error_line(tmp_path, option, value, message):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    proc = sb("policy", "explain", policy, "--tool", "read_query", option, value)
    assert proc.returncode == 2
    assert one_error(proc) == message
    assert proc.stdout == ""


def test_policy_explain_takes_deep_but_parseable_arguments(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    proc = sb("policy", "explain", policy, "--tool", "read_query", "--args", '{"a": ' + "[" * 200 + "]" * 200 + "}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "decision: allow (policy_allow) rule=reads-ok: rule 'reads-ok' allows the call"


@pytest.fixture
def readonly(copy):
    """The copied store in a folder that cannot be written (chmod for a user; root needs chattr +i)."""
    store, run_id = copy
    if os.geteuid() != 0:
        store.chmod(0o555)
        yield store, run_id
        store.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode:
        pytest.skip("running as root, and chattr +i does not work here: no way to make a read-only folder")
    try:
        yield store, run_id
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)


READ_ONLY_WRITES = [
    ["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "KEY"],
    ["gateway", "reapprove", "db", "read_query", "--reason", "r", "--key-file", "KEY"],
    ["import", "OUT"],
]


@pytest.mark.parametrize("cmd", READ_ONLY_WRITES, ids=" ".join)
def test_a_write_to_a_read_only_store_is_one_error_line(readonly, tmp_path, cmd):
    store, run_id = readonly
    before = state(store)
    proc = sb(*_argv(cmd, store, run_id, tmp_path / "out"))
    assert proc.returncode == 2
    assert one_error(proc).startswith(f"error: cannot write to {store}: ")
    assert state(store) == before


def test_export_of_a_read_only_store_says_why_it_must_write(readonly, tmp_path):
    # was: only "cannot write to STORE: ...", for a command that reads as far as a user knows
    store, run_id = readonly
    before = state(store)
    proc = sb("export", run_id, "-o", tmp_path / "x.sbx", "-s", store)
    assert proc.returncode == 2
    line = one_error(proc)
    assert line.startswith(f"error: cannot write to {store}: ")
    assert line.endswith(" (a bundle export signs a checkpoint into the store: export from a writable copy of the "
                         "store folder)")
    assert state(store) == before and not (tmp_path / "x.sbx").exists()


@pytest.mark.parametrize("cmd", [["runs", "list"], ["runs", "show", "RUN"], ["calls", "--json"], ["approvals", "list"],
                                 ["log", "checkpoint"], ["report", "RUN", "-o", "OUT.html"]], ids=" ".join)
def test_reading_a_read_only_store_works(readonly, tmp_path, cmd):
    store, run_id = readonly
    before = state(store)
    proc = sb(*_argv(cmd, store, run_id, tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert state(store) == before


@pytest.fixture
def key_files(tmp_path) -> dict[str, Path]:
    files = {"binary": tmp_path / "binary.key", "empty": tmp_path / "empty.key", "folder": tmp_path / "keys"}
    files["binary"].write_bytes(b"\xff\xfe\x00bad")
    files["empty"].write_bytes(b"")
    files["folder"].mkdir()
    for path in (files["binary"], files["empty"]):
        path.chmod(0o600)
    return files


KEY_CASES = [
    # was: "cannot read key file F: 'ascii' codec can't decode byte 0xff in position 0: ordinal not in range(128)"
    ("binary", "error: {path} is not a Sealbox identity key: not ASCII text (byte 0)"),
    ("empty", "error: {path} is not a Sealbox identity key: malformed signer key"),
    ("missing", "error: key file {path} does not exist"),
    ("folder", "error: Invalid value for '{option}': File '{path}' is a directory."),
]


@pytest.mark.parametrize("which, message", KEY_CASES, ids=[c[0] for c in KEY_CASES])
@pytest.mark.parametrize("cmd, option", [
    (["approvals", "approve", "apr_0000", "--reason", "r", "--key-file"], "--key-file"),
    (["identities", "add", "bob", "--role", "admin", "--key-out", "OUT", "--admin-key"], "--admin-key"),
], ids=["approvals approve", "identities add"])
def test_a_bad_key_file_is_one_error_line(copy, tmp_path, key_files, cmd, option, which, message):
    store, run_id = copy
    path = key_files.get(which, tmp_path / "missing.key")
    before = state(store)
    proc = sb(*[str(tmp_path / "out") if a == "OUT" else a for a in cmd], path, "-s", store)
    assert proc.returncode == 2
    assert one_error(proc) == message.format(path=path, option=option)
    assert state(store) == before and not (tmp_path / "out").exists()


def test_a_credential_file_that_is_not_text_is_one_error_line(copy, key_files):
    # was: "... is not valid JSON (line ?)"
    store, _ = copy
    before = state(store)
    proc = sb("access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "none.key", "--credential-file",
              key_files["binary"], "-s", store)
    assert proc.returncode == 2
    assert one_error(proc) == f"error: credential file {key_files['binary']} is not valid JSON: not UTF-8 text (byte 0)"
    assert state(store) == before


@pytest.fixture(scope="module")
def big_store(tmp_path_factory) -> Path:
    """A store of 1500 sample runs (about 10 000 events): long enough an export to interrupt."""
    from sealbox.demo_sample import record_sample_run
    from sealbox.store import init_store

    path = tmp_path_factory.mktemp("big") / "store"
    store = init_store(path, durability="fast")
    for _ in range(1500):
        record_sample_run(store)
    store.close()
    return path


def test_ctrl_c_during_an_export_is_one_line_exit_130_and_leaves_no_file(big_store, tmp_path):
    out = tmp_path / "out" / "x.sbx"
    out.parent.mkdir()
    proc = subprocess.Popen([SEALBOX, "export", "--since", "30d", "-o", str(out), "-s", str(big_store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not any(out.parent.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # the bundle's temporary file appears once the export has begun
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the export finished before the interrupt arrived")
    assert proc.returncode == 130
    assert stderr == "error: interrupted\n"  # one line: no blank line before it, as while the CLI loads
    assert stdout == ""
    assert list(out.parent.iterdir()) == []  # neither the bundle nor its temporary file
    assert sb("verify", big_store).returncode == 0


@pytest.mark.parametrize("cmd", [["calls", "--json"], ["runs", "list"], ["runs", "list", "--json"], ["calls", "--csv"]],
                         ids=" ".join)
def test_output_closed_early_is_no_traceback(big_store, cmd):
    # `sealbox calls --json | head -1`
    proc = subprocess.Popen([SEALBOX, *cmd, "--limit", "100000", "-s", str(big_store)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in stderr and "Error" not in stderr, stderr


DEEP_JSON = '{"a": ' + "[" * 20_000 + "]" * 20_000 + "}"
DEEP_POLICY = ("version: 1\nrules:\n  - id: x\n    match: {tool: x, arguments: " + "{a: " * 100 + "1" + "}" * 100
               + "}\n    effect: allow\n")
NESTED = "lists or mappings nested more than 64 levels deep"


@pytest.mark.parametrize("cmd, content, message", [
    # was: "internal error: RecursionError: maximum recursion depth exceeded" (exit 70), each of them
    (["policy", "check", "F"], DEEP_JSON, "error: {f}: " + NESTED),
    (["policy", "check", "F"], DEEP_POLICY, "error: {f}:4: " + NESTED),
    (["policy", "explain", "F", "--tool", "x"], DEEP_JSON, "error: {f}: " + NESTED),
    (["policy", "test", "POLICY", "F"], DEEP_JSON, "error: {f}: " + NESTED),
    (["policy", "test", "POLICY", "F"], "- " * 100 + "x\n", "error: {f}:1: " + NESTED),
    (["gateway", "check", "-c", "F"], DEEP_JSON, "error: {f}: " + NESTED),
    (["whatif", "--policy", "F", "RUN", "-s", "STORE"], DEEP_JSON, "error: {f}: " + NESTED),
    (["replay", "RUN", "--agent", "os:getcwd", "--snapshot", "F", "-s", "STORE"], DEEP_JSON,
     "error: cannot read the snapshot {f}: its JSON is nested too deeply"),
    (["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "none.key", "--credential-file", "F", "-s", "STORE"],
     DEEP_JSON, "error: credential file {f} is not a credential: its JSON is nested too deeply"),
], ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else None)
def test_a_file_nested_too_deeply_is_one_error_line(copy, tmp_path, cmd, content, message):
    store, run_id = copy
    path = tmp_path / "deep.yaml"
    path.write_text(content)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    subst = {"F": str(path), "POLICY": str(policy), "RUN": run_id, "STORE": str(store)}
    before = state(store)
    proc = sb(*[subst.get(a, a) for a in cmd])
    assert proc.returncode == 2
    assert one_error(proc) == message.format(f=path)
    assert state(store) == before


@pytest.mark.parametrize("cmd, message", [
    # was: "error: . is not a Sealbox store ...", "error:  does not exist ...", "give exactly one output
    # mode (-o, --parquet, --otlp)" and "cannot write .: it exists and is a directory": a quoted, unset
    # shell variable read as the current folder, or as no option at all
    (["runs", "list", "-s", ""], "error: --store is empty: give a path"),
    (["calls", "--store", " "], "error: --store is empty: give a path"),
    (["verify", ""], "error: TARGET is empty: give a path"),
    (["verify", "-s", ""], "error: --store is empty: give a path"),
    (["export", "RUN", "-o", "", "-s", "STORE"], "error: --output is empty: give a path"),
    (["export", "RUN", "--parquet", "", "-s", "STORE"], "error: --parquet is empty: give a path"),
    (["report", "RUN", "-o", "", "-s", "STORE"], "error: --output is empty: give a path"),
], ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else None)
def test_an_empty_path_is_one_error_line(copy, tmp_path, cmd, message):
    store, run_id = copy
    before = state(store)
    proc = sb(*[{"RUN": run_id, "STORE": str(store)}.get(a, a) for a in cmd], cwd=tmp_path)
    assert proc.returncode == 2
    assert one_error(proc) == message
    assert state(store) == before and list(tmp_path.iterdir()) == [store]


@pytest.mark.parametrize("option, message", [
    # was: an empty --expires made a grant that never expires, an empty --id a grant with a new id (exit 0)
    ("--expires", "error: --expires is empty: give a time (RFC 3339, a date, or 12h, 30d), or leave it out for no "
                  "expiry"),
    ("--id", "error: --id is empty: give a grant id, or leave it out for a new one"),
])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_grant_option_is_one_error_line(copy, option, message, value):
    store, _ = copy
    before = state(store)
    proc = sb("access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "none.key", option, value, "-s", store)
    assert proc.returncode == 2
    assert one_error(proc) == message
    assert state(store) == before


# A byte that is not UTF-8 in an argument (a Latin-1 terminal, a pasted binary name) reaches Python as
# a lone surrogate (surrogateescape). No recorded name or id can hold one (recording refuses them).
@pytest.mark.parametrize("option, name", [
    ("--agent", "agent"), ("--principal", "principal"), ("--tool", "tool"), ("--server", "server"),
])
def test_a_name_filter_that_is_not_utf8_is_one_error_line(copy, option, name):
    # was: "error: internal error: UnicodeEncodeError: 'utf-8' codec can't encode character '\udcff'
    # in position 1: surrogates not allowed" (exit 70)
    store, _ = copy
    proc = sb("calls", option, "a\udcff", "-s", store)
    assert proc.returncode == 2
    assert one_error(proc) == (f"error: {name}: 'a\\udcff' is not UTF-8 text (it holds a lone surrogate, as a "
                               "non-UTF-8 byte decodes to), which no recorded name or id can hold")
    if option in ("--agent", "--principal"):
        proc = sb("runs", "list", option, "a\udcff", "-s", store)
        assert proc.returncode == 2
        assert one_error(proc).startswith(f"error: {name}: 'a\\udcff' is not UTF-8 text")


@pytest.mark.parametrize("cmd", [["runs", "show", "ID"], ["calls", "--run", "ID"], ["export", "ID", "-o", "OUT"],
                                 ["report", "ID", "-o", "OUT.html"]], ids=" ".join)
def test_a_run_id_that_is_not_utf8_is_no_run(copy, tmp_path, cmd):
    # was: "error: internal error: UnicodeEncodeError: ... surrogates not allowed" (exit 70)
    store, run_id = copy
    argv = [run_id[:8] + "\udcff" if a == "ID" else a for a in cmd]
    proc = sb(*_argv(argv, store, run_id, tmp_path / "out"))
    assert proc.returncode == 2
    assert one_error(proc) == f"error: no run '{run_id[:8]}\\udcff' in this store"
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.html").exists()


def test_python_query_filters_that_are_not_utf8_raise_config_error(copy):
    from sealbox.errors import ConfigError
    from sealbox.store import open_store

    store, _ = copy
    with open_store(store, readonly=True) as s:
        for call, kw in ((s.query_calls, {"tool": "t\ud800"}), (s.query_calls, {"run_id": "\udcff"}),
                         (s.query_runs, {"agent": "\udcff"})):
            with pytest.raises(ConfigError, match="is not UTF-8 text"):
                call(**kw)


@pytest.mark.parametrize("alter, missing", [
    ("ALTER TABLE events DROP COLUMN cost", "events.cost"),
    ("ALTER TABLE runs DROP COLUMN replay_of", "runs.replay_of"),
    ("ALTER TABLE checkpoints DROP COLUMN created_at", "checkpoints.created_at"),
    ("ALTER TABLE events RENAME COLUMN rule TO rule2", "events.rule"),
], ids=["drop-events.cost", "drop-runs.replay_of", "drop-checkpoints.created_at", "rename-events.rule"])
@pytest.mark.parametrize("cmd", [["runs", "list"], ["runs", "show", "RUN"], ["calls"], ["verify"], ["log", "checkpoint"],
                                 ["access", "grant", "--principal", "p", "--server", "db", "--tool", "x", "--key-file", "KEY"]],
                         ids=" ".join)
def test_a_store_missing_a_column_is_one_error_line_and_is_not_written(copy, tmp_path, alter, missing, cmd):
    # was: "error: internal error: OperationalError: no such column: cost (set SEALBOX_DEBUG=1 ...)" (exit 70)
    store, run_id = copy
    conn = sqlite3.connect(store / "sealbox.db")
    conn.execute(alter)
    conn.commit()
    conn.close()
    before = state(store)
    proc = sb(*_argv(cmd, store, run_id, tmp_path / "out"))
    assert proc.returncode == 2
    assert one_error(proc) == (f"error: {store / 'sealbox.db'} is damaged: column {missing} is missing "
                               "(changed below Sealbox; restore the store from a backup)")
    assert state(store) == before


@pytest.mark.parametrize("readonly", [False, True])
def test_opening_a_store_missing_columns_raises_store_error_naming_them(copy, readonly):
    from sealbox.errors import StoreError
    from sealbox.store import open_store

    store, _ = copy
    conn = sqlite3.connect(store / "sealbox.db")
    conn.execute("ALTER TABLE events DROP COLUMN tokens")
    conn.execute("ALTER TABLE events DROP COLUMN cost")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as caught:
        open_store(store, readonly=readonly)
    assert str(caught.value) == (f"{store / 'sealbox.db'} is damaged: columns events.cost, events.tokens are missing "
                                 "(changed below Sealbox; restore the store from a backup)")
